"""Text in, sparse TF-IDF rows out: the featuriser a model keeps so new texts become queries.

:class:`TextFeaturizer` wraps scikit-learn's ``TfidfVectorizer`` (no TF-IDF code of our own) and
stores it without pickle: the vectorizer's settings as JSON, its vocabulary as a JSON array of
terms ordered by column, and ``idf_`` as a float64 array. :func:`featurizer_arrays` /
:func:`featurizer_from_arrays` are what :class:`sparsesim.models.BilinearSimilarity` uses to put
the featuriser in its model file and rebuild it on load.
"""

from __future__ import annotations

import json
from typing import Iterable

import numpy as np
import scipy.sparse as sp

from .exceptions import FileFormatError, InvalidInputError

__all__ = ["TextFeaturizer", "TextQueries", "featurizer_arrays", "featurizer_from_arrays", "stored_featurizer",
           "DEFAULT_TFIDF"]

#: Settings used when sparsesim builds the featuriser itself (scikit-learn's defaults, float64 rows).
DEFAULT_TFIDF = {"dtype": "float64"}

# TfidfVectorizer parameters that can be stored as JSON; callables (tokenizer, preprocessor, a
# callable analyzer or strip_accents) cannot be saved without pickle and are refused.
_STORABLE = ("analyzer", "binary", "decode_error", "encoding", "input", "lowercase", "max_df", "max_features",
             "min_df", "ngram_range", "norm", "smooth_idf", "stop_words", "strip_accents", "sublinear_tf",
             "token_pattern", "use_idf", "dtype")
_ARRAY_VOCAB = "text.vocabulary"
_ARRAY_IDF = "text.idf"


def _json_params(vectorizer) -> dict:
    params = vectorizer.get_params()
    out = {}
    for key, value in params.items():
        if key in ("tokenizer", "preprocessor", "vocabulary"):
            if key != "vocabulary" and value is not None:
                raise InvalidInputError(f"TfidfVectorizer({key}=...) is a callable and cannot be saved without pickle; "
                                        "use the built-in options (token_pattern, analyzer='word'|'char'|'char_wb')")
            continue
        if key not in _STORABLE:
            continue
        if callable(value) and key != "dtype":
            raise InvalidInputError(f"TfidfVectorizer({key}=...) is a callable and cannot be saved without pickle")
        if key == "dtype":
            value = np.dtype(value).name
        elif key == "ngram_range":
            value = [int(v) for v in value]
        elif key == "stop_words" and value is not None and not isinstance(value, str):
            value = sorted(str(v) for v in value)
        elif isinstance(value, np.generic):
            value = value.item()
        out[key] = value
    json.dumps(out)  # raises TypeError for anything that slipped through
    return out


class TextFeaturizer:
    """TF-IDF rows (scipy CSR, float64) for texts, storable without pickle.

    Parameters
    ----------
    vectorizer : sklearn.feature_extraction.text.TfidfVectorizer, optional
        A fitted or unfitted vectorizer; by default ``TfidfVectorizer(**DEFAULT_TFIDF, **params)``.
    **params
        ``TfidfVectorizer`` settings when no vectorizer is given (e.g. ``min_df=2``,
        ``ngram_range=(1, 2)``, ``stop_words="english"``).

    Examples
    --------
    >>> f = TextFeaturizer().fit(["red apples", "green apples", "blue sky"])
    >>> f.transform(["apples and sky"]).shape
    (1, 5)
    """

    def __init__(self, vectorizer=None, **params):
        from sklearn.feature_extraction.text import TfidfVectorizer

        if vectorizer is None:
            settings = dict(DEFAULT_TFIDF)
            settings.update(params)
            settings["dtype"] = np.dtype(settings["dtype"]).type
            if "ngram_range" in settings:
                settings["ngram_range"] = tuple(settings["ngram_range"])
            vectorizer = TfidfVectorizer(**settings)
        elif params:
            raise InvalidInputError("give either a vectorizer or TfidfVectorizer settings, not both")
        if not isinstance(vectorizer, TfidfVectorizer):
            raise InvalidInputError(f"the text featuriser must be a TfidfVectorizer, got {type(vectorizer).__name__}")
        _json_params(vectorizer)  # refuse what cannot be stored, early
        self.vectorizer = vectorizer

    # -- facts --------------------------------------------------------------------------------
    @property
    def fitted(self) -> bool:
        return hasattr(self.vectorizer, "vocabulary_")

    @property
    def n_features(self) -> int:
        self._require_fitted()
        return len(self.vectorizer.vocabulary_)

    def settings(self) -> dict:
        """The vectorizer's storable settings (JSON-ready)."""
        return _json_params(self.vectorizer)

    def vocabulary(self) -> list[str]:
        """Terms in column order."""
        self._require_fitted()
        terms = [""] * self.n_features
        for term, col in self.vectorizer.vocabulary_.items():
            terms[int(col)] = term
        return terms

    def _require_fitted(self):
        if not self.fitted:
            raise InvalidInputError("the text featuriser is not fitted; call fit(texts) first")

    # -- work ---------------------------------------------------------------------------------
    def fit(self, texts: Iterable[str]) -> "TextFeaturizer":
        self.fit_transform(texts)
        return self

    def fit_transform(self, texts: Iterable[str]) -> sp.csr_matrix:
        """Learn vocabulary and idf from ``texts``; return their rows."""
        texts = _check_texts(texts)
        try:
            X = self.vectorizer.fit_transform(texts)
        except ValueError as exc:  # e.g. "empty vocabulary; perhaps the documents only contain stop words"
            raise InvalidInputError(f"cannot build a vocabulary from these texts ({exc})") from None
        return _canonical(X)

    def transform(self, texts: Iterable[str]) -> sp.csr_matrix:
        """TF-IDF rows of ``texts`` over the fitted vocabulary (unknown words are ignored)."""
        self._require_fitted()
        texts = _check_texts(texts)
        from sklearn import config_context

        # the texts are checked above and the vectorizer's settings when it was built or loaded;
        # skipping scikit-learn's per-call parameter validation saves ~25% on one short query
        with config_context(skip_parameter_validation=True, assume_finite=True):
            return _canonical(self.vectorizer.transform(texts))

    def __repr__(self):
        size = self.n_features if self.fitted else "unfitted"
        return f"TextFeaturizer(TfidfVectorizer, vocabulary={size})"


def _check_texts(texts) -> list[str]:
    if isinstance(texts, (str, bytes)):
        raise InvalidInputError("texts must be a list of strings, not one string")
    texts = list(texts)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise InvalidInputError(f"text {i} is a {type(t).__name__}, expected str")
    return texts


def _canonical(X) -> sp.csr_matrix:
    X = sp.csr_matrix(X, dtype=np.float64)
    X.sum_duplicates()
    X.sort_indices()
    return X


# -- storage (JSON + arrays, no pickle) --------------------------------------------------------
def featurizer_arrays(featurizer: TextFeaturizer) -> tuple[dict, dict]:
    """``(arrays, meta)`` to store a fitted featuriser in an npz bundle."""
    featurizer._require_fitted()
    vocab = json.dumps(featurizer.vocabulary(), ensure_ascii=False).encode("utf-8")
    arrays = {_ARRAY_VOCAB: np.frombuffer(vocab, dtype=np.uint8).copy()}
    meta = {"class": "sklearn.feature_extraction.text.TfidfVectorizer", "params": featurizer.settings(),
            "n_features": featurizer.n_features}
    if featurizer.vectorizer.use_idf:
        arrays[_ARRAY_IDF] = np.asarray(featurizer.vectorizer.idf_, dtype=np.float64)
    return arrays, meta


def featurizer_from_arrays(arrays: dict, meta: dict, source: str = "model file") -> TextFeaturizer:
    """Rebuild the featuriser stored by :func:`featurizer_arrays` (pops its arrays from ``arrays``)."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    try:
        terms = json.loads(arrays.pop(_ARRAY_VOCAB).tobytes().decode("utf-8"))
        params = dict(meta["params"])
        unknown = set(params) - set(_STORABLE)
        if unknown:
            raise ValueError(f"unknown TfidfVectorizer settings {sorted(unknown)}")
        params["dtype"] = np.dtype(params.get("dtype", "float64")).type
        if "ngram_range" in params:
            params["ngram_range"] = tuple(params["ngram_range"])
        vec = TfidfVectorizer(**params)
        if not isinstance(terms, list) or not all(isinstance(t, str) for t in terms) or len(set(terms)) != len(terms):
            raise ValueError("vocabulary must be a list of distinct strings")
        if not vec.use_idf:  # no statistics to restore: fitting on the stored vocabulary rebuilds it exactly
            if not terms:
                raise ValueError("empty vocabulary")
            vec = TfidfVectorizer(vocabulary=terms, **params).fit([""])
        vec.vocabulary_ = {t: i for i, t in enumerate(terms)}
        if vec.use_idf:
            idf = np.asarray(arrays.pop(_ARRAY_IDF), dtype=np.float64)
            if idf.shape != (len(terms),) or not np.all(np.isfinite(idf)):
                raise ValueError(f"idf has shape {idf.shape}, expected ({len(terms)},)")
            vec.idf_ = idf
    except (KeyError, ValueError, TypeError, UnicodeDecodeError) as exc:
        raise FileFormatError(f"{source}: unreadable text featuriser ({exc})") from None
    return TextFeaturizer(vec)


class TextQueries:
    """What every model class that can carry its text featuriser shares: attaching a fitted
    featuriser of its width, and turning texts into query rows through it.

    The class using it defines ``n_features`` and sets ``self.featurizer`` (``None`` when the
    model was not trained on text); :meth:`check_featurizer` is where a class adds its own
    conditions on the featuriser (BM25 needs raw counts).
    """

    featurizer: "TextFeaturizer | None" = None
    #: what the "not trained on text" message tells the user to query with instead
    _vector_kind = "feature vectors"

    def check_featurizer(self, featurizer: "TextFeaturizer") -> None:
        """Refuse a featuriser this model cannot use (here: any other width)."""
        if featurizer.n_features != self.n_features:
            raise InvalidInputError(f"the text featuriser has {featurizer.n_features} features, the model "
                                    f"{self.n_features}")

    def set_featurizer(self, featurizer):
        """Attach a fitted :class:`~sparsesim.text.TextFeaturizer` (or fitted ``TfidfVectorizer``)."""
        if not isinstance(featurizer, TextFeaturizer):
            featurizer = TextFeaturizer(featurizer)
        self.check_featurizer(featurizer)
        self.featurizer = featurizer
        return self

    def transform(self, texts) -> sp.csr_matrix:
        """Feature rows (CSR) of ``texts`` through the model's text featuriser.

        Raises
        ------
        InvalidInputError
            The model was not trained on text (it has no featuriser).
        """
        if self.featurizer is None:
            raise InvalidInputError("this model was not trained on text (no text featuriser stored with it); "
                                    f"query it with {self._vector_kind}")
        return self.featurizer.transform(texts)


def stored_featurizer(arrays: dict, meta: dict, path, n_features: int | None = None) -> "TextFeaturizer | None":
    """The text featuriser a model file stores (``None`` when it stores none), its arrays popped
    from ``arrays``; a malformed one, or one of another width than ``n_features``, raises
    :class:`~sparsesim.exceptions.FileFormatError`."""
    if meta.get("text_featurizer") is None:
        return None
    if not isinstance(meta["text_featurizer"], dict):
        raise FileFormatError(f"{path}: invalid text_featurizer metadata")
    try:
        featurizer = featurizer_from_arrays(arrays, meta["text_featurizer"], source=str(path))
    except RecursionError:
        raise FileFormatError(f"{path}: unreadable text featuriser (nested too deeply)") from None
    if n_features is not None and featurizer.n_features != n_features:
        raise FileFormatError(f"{path}: the text featuriser has {featurizer.n_features} features, the model {n_features}")
    return featurizer
