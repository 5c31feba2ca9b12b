"""Reading a corpus the way a model expects, and recording in a model how its data was read."""

from __future__ import annotations

from pathlib import Path

from ..data import LabelledData, data_source, load_dataset, load_own_data
from ..data.catalog import load_registered
from ..data.readers import detect_format
from ..exceptions import InvalidInputError
from ..models import BilinearSimilarity
from ..persistence import check_meta_limits
from ..text import featurizer_arrays
from ..validation import bounded


#: data options recorded in a model so later commands read the same kind of file the same way
_RECORDED_OPTIONS = ("text_column", "label_column", "id_column", "encoding")


def model_data_options(model: BilinearSimilarity | None, options: dict | None = None) -> dict:
    """``load_dataset`` options for data read against ``model``: its width, its feature-index base,
    its text featuriser and the table columns it was trained with (explicit ``options`` win;
    a ``zero_based`` that contradicts the model is refused by the reader)."""
    out = {k: v for k, v in (options or {}).items() if v is not None}
    if model is None:
        return out
    meta = model.metadata
    out["n_features"] = model.n_features
    if meta.get("zero_based") is not None:
        out["expect_zero_based"] = bool(meta["zero_based"])
    if model.featurizer is not None:
        out["featurizer"] = model.featurizer
    for key, value in (meta.get("data_options") or {}).items():
        if key in _RECORDED_OPTIONS:
            out.setdefault(key, value)
    return out


#: TfidfVectorizer settings that make a text featuriser count terms (the raw representation of text)
COUNT_SETTINGS = {"use_idf": False, "norm": None}


def representation_options(name_or_path, representation: str = "default", options: dict | None = None,
                           own: bool | None = None) -> dict:
    """``load_dataset`` options that read ``name_or_path`` in ``representation``.

    ``"raw"`` means term counts where the data has them: a registered corpus's stored values
    (``representation="raw"``), a text file or folder counted by a featuriser without idf and
    normalisation; a vector file is read as stored. ``"default"`` changes nothing. ``own``: the
    caller's :func:`~sparsesim.data.is_data_path` answer (asked here when None).
    """
    out = dict(options or {})
    if representation != "raw":
        return out
    if not (data_source(name_or_path).own if own is None else own):
        out["representation"] = "raw"
    elif Path(str(name_or_path)).exists() and (out.get("format") or detect_format(str(name_or_path))) in (
            "folder", "csv", "tsv", "jsonl"):
        out["tfidf"] = dict(out.get("tfidf") or {}, **COUNT_SETTINGS)
    return out


def load_labelled(name_or_path, own: bool | None = None, **options) -> LabelledData:
    """:func:`~sparsesim.data.load_dataset`, refusing data sets that are not one labelled matrix
    (multi-view and multi-task sets are for ``sparsesim experiment``). ``own``: the caller's
    :func:`~sparsesim.data.is_data_path` answer (your own file or folder: read by
    :func:`~sparsesim.data.load_own_data` without deciding again; None: decided here)."""
    if own is None:
        data = load_dataset(name_or_path, **options)
    elif own:
        data = load_own_data(name_or_path, **options)
    else:
        data = load_registered(str(name_or_path), **options)
    if not isinstance(data, LabelledData):
        raise InvalidInputError(f"data set {bounded(repr(str(name_or_path)), 80)} is a {type(data).__name__} "
                                "(several views or tasks), not one labelled matrix; train, evaluate, query and "
                                "index take single-matrix data sets (run it with `sparsesim experiment`)")
    return data


def load_corpus(name_or_path: str, n_features: int | None = None, model: BilinearSimilarity | None = None,
                options: dict | None = None) -> LabelledData:
    """A registered data set, or a file/folder read the way ``model`` expects (see :func:`model_data_options`)."""
    opts = model_data_options(model, options)
    if n_features is not None:
        opts.setdefault("n_features", n_features)
    own = data_source(name_or_path).own  # decided once for this corpus (or by the CLI)
    if not own:
        opts = {}
    if model is not None and model.metadata.get("input_representation") == "raw":
        opts = representation_options(name_or_path, "raw", opts, own=own)
    return load_labelled(name_or_path, own=own, **opts)


def training_metadata(data: LabelledData, options: dict | None = None, **facts) -> dict:
    """The metadata a model trained on ``data`` records, built once, before training.

    What later commands need to read data like ``data`` (the svmlight feature-index base, the
    table columns of :data:`_RECORDED_OPTIONS`, the class names) plus ``facts`` (data set, split
    seed, training share, ...). It is checked here against what a model file can hold
    (:func:`~sparsesim.persistence.check_meta_limits`, with the text featuriser's facts), so data
    whose facts do not fit is refused before training; :func:`record_training` puts it into the model.
    """
    options = {k: v for k, v in (options or {}).items() if v is not None}
    meta: dict = {}
    if data.info.get("zero_based") is not None:
        meta["zero_based"] = bool(data.info["zero_based"])
    recorded = {k: options[k] for k in _RECORDED_OPTIONS if options.get(k) is not None}
    if recorded:
        meta["data_options"] = recorded
    if data.class_names:
        meta["class_names"] = {str(k): str(v) for k, v in data.class_names.items()}
    meta.update(facts)
    checked = dict(meta)
    if data.featurizer is not None:
        checked["text_featurizer"] = featurizer_arrays(data.featurizer)[1]
    check_meta_limits(checked, "model")
    return meta


def record_training(model: BilinearSimilarity, data: LabelledData, meta: dict) -> None:
    """Put the :func:`training_metadata` ``meta`` and the text featuriser of ``data`` into ``model``."""
    if data.featurizer is not None:
        model.set_featurizer(data.featurizer)
    model.metadata.update(meta)
