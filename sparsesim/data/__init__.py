"""Data layer: readers, the registry of named data sets, containers.

Public entry points
-------------------
``load_dataset(name_or_path, **options)``
    A registered data set (see ``list_datasets()``) or a path to a labelled svmlight file.
``list_datasets()`` / ``dataset_info(name)``
    What is registered, and which files are present in the data directory.
``fetch_dataset(name, mirror=None, force=False, progress=None)``
    Put a data set's files into the data directory (from a mirror folder or its upstream URL).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..exceptions import DataNotFoundError, InvalidInputError
from .catalog import all_datasets, get_dataset_spec, load_registered
from .containers import LabelledData
from .paths import data_home, locate
from .readers import (
    detect_format,
    load_svmlight,
    read_matrix_market,
    read_npz,
    read_svmlight,
    read_text_corpus,
    read_text_folder,
    read_text_table,
    tfidf,
)

__all__ = [
    "LabelledData",
    "data_home",
    "locate",
    "load_dataset",
    "load_own_data",
    "is_data_path",
    "DataSource",
    "data_source",
    "looks_like_path",
    "list_datasets",
    "dataset_info",
    "fetch_dataset",
    "load_svmlight",
    "read_svmlight",
    "read_matrix_market",
    "read_text_corpus",
    "read_text_folder",
    "read_text_table",
    "read_npz",
    "tfidf",
    "FILE_OPTIONS",
]

#: Options ``load_dataset`` accepts for a path (see its docstring).
FILE_OPTIONS = ("n_features", "normalize", "zero_based", "expect_zero_based", "labels", "ids", "text_column",
                "label_column", "id_column", "featurizer", "tfidf", "encoding", "format", "follow_symlinks",
                "include_hidden")


def looks_like_path(name: str) -> bool:
    """Whether ``name`` names a file or folder rather than a registered data set: it has a path
    separator or a suffix, or exists. :func:`load_dataset` reads a registered name first."""
    return os.sep in name or "/" in name or Path(name).suffix != "" or Path(name).exists()


def is_data_path(name_or_path) -> bool:
    """Whether :func:`load_dataset` reads ``name_or_path`` as your own file or folder (True) or as a
    registered data set (False): a registered name wins, then :func:`looks_like_path`. The one
    place this is decided; callers that need it before loading (output-path checks, reading
    options) ask here.

    Examples
    --------
    >>> is_data_path("news20-sample"), is_data_path("my/corpus.svm")
    (False, True)
    """
    name = str(os.fspath(name_or_path)) if isinstance(name_or_path, os.PathLike) else str(name_or_path)
    return looks_like_path(name) and name not in all_datasets()  # the catalog is read only for a path-like name


class DataSource(str):
    """A data set argument whose path-or-name question is answered: the name or path as a string,
    and ``own`` (True: your own file or folder; False: a registered data set), as
    :func:`is_data_path` decided it. Made by :func:`data_source`; a caller that receives one
    (the CLI hands it to the workflows) uses ``own`` instead of deciding again."""

    own: bool

    def __new__(cls, value, own: bool):
        obj = super().__new__(cls, value)
        obj.own = bool(own)
        return obj


def data_source(name_or_path) -> DataSource:
    """``name_or_path`` with its path-or-name answer (:func:`is_data_path`, asked here only when
    it is not a :class:`DataSource` already).

    Examples
    --------
    >>> source = data_source("news20-sample")
    >>> source, source.own, data_source(source) is source
    ('news20-sample', False, True)
    """
    if isinstance(name_or_path, DataSource):
        return name_or_path
    text = str(os.fspath(name_or_path)) if isinstance(name_or_path, os.PathLike) else str(name_or_path)
    return DataSource(text, is_data_path(name_or_path))


def load_dataset(name_or_path, **options) -> LabelledData:
    """Load a registered data set, or your own data from a path.

    Parameters
    ----------
    name_or_path : str or path-like
        A registered name (``news20``, ``news20-sample``, ... see :func:`list_datasets`) or a path:

        * svmlight/LIBSVM file (plain, .bz2, .xz, .gz), one- or zero-based;
        * ``.npz`` written by ``scipy.sparse.save_npz`` + labels file (``<name>.labels.txt``);
        * ``.mtx`` MatrixMarket (+ ``labels``);
        * a folder with one subfolder of text files per label (scikit-learn ``load_files``
          layout): TF-IDF features, file paths as ids;
        * ``.csv`` / ``.tsv`` / ``.jsonl`` with a text column and a label column: TF-IDF
          features, ids from ``id_column`` or row numbers.
    **options
        For registered sets: loader options, e.g. ``representation="raw"`` (see each loader).
        For paths (:data:`FILE_OPTIONS`): ``n_features`` (int, pad/check the width),
        ``normalize`` (bool, L2-normalise rows of vector files), ``zero_based``
        (``"auto"``/True/False, svmlight), ``expect_zero_based`` (bool: the base of the model's
        training data; a contradicting file is refused), ``labels`` / ``ids`` (files for .npz and
        .mtx), ``text_column`` / ``label_column`` / ``id_column`` (tables), ``featurizer`` (a
        fitted :class:`~sparsesim.text.TextFeaturizer` to use instead of fitting one),
        ``tfidf`` (dict of ``TfidfVectorizer`` settings), ``encoding``, ``follow_symlinks``, ``include_hidden`` (text folder: see
        :func:`~sparsesim.data.readers.read_text_folder`),
        ``format`` (force ``svmlight``, ``npz``, ``mtx``, ``folder``, ``csv``, ``tsv``, ``jsonl``).

    Raises
    ------
    UnknownNameError
        Neither a registered name nor an existing file.
    DataNotFoundError
        A registered data set whose files are not in the data directory.
    FileFormatError, InvalidInputError
        Unreadable or invalid files, unknown options.
    """
    if isinstance(name_or_path, os.PathLike):
        name_or_path = os.fspath(name_or_path)
    name = str(name_or_path)
    if is_data_path(name):
        return load_own_data(name, **options)
    return load_registered(name, **options)  # raises UnknownNameError listing the known names


def load_own_data(path, **options) -> LabelledData:
    """Your own data from ``path``, a file or folder (formats and ``options``: :func:`load_dataset`).

    For a caller that has already decided, with :func:`is_data_path`, that ``path`` is not a
    registered name: :func:`load_dataset` is this function after that decision.

    Raises
    ------
    DataNotFoundError
        No such file or folder.
    FileFormatError, InvalidInputError
        Unreadable or invalid files, unknown options.

    Examples
    --------
    >>> load_own_data("no/such/corpus.svm")
    Traceback (most recent call last):
    ...
    sparsesim.exceptions.DataNotFoundError: no/such/corpus.svm: no such file (and not a registered data set; ...)
    """
    name = str(os.fspath(path)) if isinstance(path, os.PathLike) else str(path)
    found = Path(name).expanduser()
    if not found.exists():
        raise DataNotFoundError(
            f"{name}: no such file (and not a registered data set; known: {', '.join(all_datasets())})"
        )
    return _load_path(found, options)


def _load_path(path: Path, options: dict) -> LabelledData:
    from .readers import l2_normalize

    unknown = set(options) - set(FILE_OPTIONS)
    if unknown:
        raise InvalidInputError(
            f"unknown option(s) {', '.join(sorted(unknown))} for a data file; known: {', '.join(FILE_OPTIONS)}"
        )
    fmt = options.get("format") or detect_format(path)
    n_features = options.get("n_features")
    featurizer = options.get("featurizer")
    text_formats = ("folder", "csv", "tsv", "jsonl")
    if fmt in text_formats:
        if fmt == "folder":
            data = read_text_folder(path, encoding=options.get("encoding") or "utf-8", featurizer=featurizer,
                                    tfidf_options=options.get("tfidf"),
                                    follow_symlinks=bool(options.get("follow_symlinks", False)),
                                    include_hidden=bool(options.get("include_hidden", False)))
        else:
            data = read_text_table(path, text_column=options.get("text_column") or "text",
                                   label_column=options.get("label_column"),
                                   id_column=options.get("id_column"), featurizer=featurizer,
                                   tfidf_options=options.get("tfidf"), fmt=fmt)
        if n_features is not None and data.n_features != n_features:
            raise InvalidInputError(f"{path}: {data.n_features} text features but {n_features} are expected")
        return data
    if fmt == "npz":
        data = read_npz(path, labels=options.get("labels"), ids=options.get("ids"), n_features=n_features)
    elif fmt == "mtx":
        data = read_matrix_market(path, labels_path=options.get("labels"))
        if n_features is not None and data.n_features != n_features:
            raise InvalidInputError(f"{path}: {data.n_features} features but {n_features} are expected")
    elif fmt == "svmlight":
        return load_svmlight(path, n_features=n_features, normalize=bool(options.get("normalize", False)),
                             zero_based=options.get("zero_based", "auto"),
                             expect_zero_based=options.get("expect_zero_based"))
    else:
        raise InvalidInputError(f"unknown format {fmt!r}; known: svmlight, npz, mtx, folder, csv, tsv, jsonl")
    if options.get("normalize"):
        data.X = l2_normalize(data.X)
    return data


def _file_status(spec) -> list[dict]:
    home = data_home()
    out = []
    for f in spec.files:
        path = home / f.relpath
        out.append(
            {
                "relpath": f.relpath,
                "path": str(path),
                "present": path.is_file(),
                "sha256": f.sha256,
                "url": f.url,
                "content_sha256": f.content_sha256,
            }
        )
    return out


def dataset_info(name: str) -> dict:
    """Facts about registered data set ``name`` and the state of its files in the data directory.

    Returns
    -------
    dict
        ``name``, ``kind``, ``description``, ``representation``, ``source``, ``data_home``,
        ``files`` (list of dicts: relpath, path, present, sha256, url, content_sha256),
        ``available`` (all files present, or embedded), ``extra`` (JSON-friendly family facts).
    """
    spec = get_dataset_spec(name)
    files = _file_status(spec)
    embedded = bool(spec.extra.get("embedded"))
    return {
        "name": spec.name,
        "kind": spec.kind,
        "description": spec.description,
        "representation": spec.representation,
        "source": spec.source,
        "data_home": str(data_home()),
        "files": files,
        "embedded": embedded,
        "available": embedded or all(f["present"] for f in files),
        "fetch": "embedded" if embedded else ("upstream" if files and all(f["url"] for f in files) else "mirror only"),
        "extra": {k: v for k, v in spec.extra.items() if isinstance(v, (str, int, float, bool, tuple, list))},
    }


def list_datasets() -> list[dict]:
    """One dict per registered data set: name, kind, description, representation, source, available."""
    out = []
    for name in all_datasets():
        info = dataset_info(name)
        out.append({k: info[k] for k in ("name", "kind", "description", "representation", "source", "available",
                                         "fetch")})
    return out


def fetch_dataset(name, mirror=None, force=False, progress=None):
    """See :func:`sparsesim.data.fetch.fetch_dataset`."""
    from .fetch import fetch_dataset as _fetch

    return _fetch(name, mirror=mirror, force=force, progress=progress)
