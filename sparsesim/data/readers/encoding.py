"""From data read to model inputs: TF-IDF weights, L2-normalised rows, labels as int64 codes."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ...exceptions import InvalidInputError


def l2_normalize(X: sp.csr_matrix) -> sp.csr_matrix:
    """Rows scaled to unit L2 norm (all-zero rows stay zero). Returns a new matrix."""
    from sklearn.preprocessing import normalize

    return sp.csr_matrix(normalize(X, norm="l2", copy=True))


def tfidf(counts_or_texts, **vectorizer_options):
    """TF-IDF with scikit-learn defaults (smooth idf, raw tf) and rows L2-normalised.

    Parameters
    ----------
    counts_or_texts : sparse matrix of term counts, or list of str
        Counts go through ``TfidfTransformer()``; texts through ``TfidfVectorizer(**options)``.

    Returns
    -------
    X : csr_matrix
    vocabulary : ndarray of str or None
        Feature names (texts only).
    """
    from sklearn.feature_extraction.text import TfidfTransformer, TfidfVectorizer

    if sp.issparse(counts_or_texts):
        X = TfidfTransformer().fit_transform(counts_or_texts)
        vocab = None
    else:
        vec = TfidfVectorizer(dtype=np.float64, **vectorizer_options)
        X = vec.fit_transform(counts_or_texts)
        vocab = np.asarray(vec.get_feature_names_out(), dtype=str)
    X = sp.csr_matrix(X, dtype=np.float64)
    X.sort_indices()
    return X, vocab


def labels_as_int(y: np.ndarray) -> np.ndarray:
    """Integer labels when all labels are whole numbers, else unchanged."""
    if y.dtype.kind == "f" and np.all(y == np.round(y)):
        return y.astype(np.int64)
    return y


_INT64 = np.iinfo(np.int64)


def encode_labels(labels) -> tuple[np.ndarray, dict | None]:
    """Labels as int64 codes plus ``{code: name}`` for string labels.

    Whole-number labels (``1``, ``"3"``, ``2.0``) within int64 stay numbers and get no names;
    any other labels (also whole numbers past int64, e.g. a 30-digit id) are sorted as text and
    numbered 0..K-1, and ``class_names`` maps each code back to its name.
    """
    if not isinstance(labels, np.ndarray):
        labels = list(labels)
        if any(isinstance(v, int) and not isinstance(v, bool) and not _INT64.min <= v <= _INT64.max for v in labels):
            labels = [str(v) for v in labels]  # integers past int64: names, written in full
    arr = np.asarray(labels)
    if arr.ndim != 1:
        raise InvalidInputError(f"labels must be one per document, got shape {arr.shape}")
    if arr.dtype.kind in "iub" and (arr.size == 0 or arr.dtype.kind != "u" or arr.max() <= _INT64.max):
        return arr.astype(np.int64), None
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)):
            raise InvalidInputError("labels contain NaN or infinite values")
        if np.all(arr == np.round(arr)) and np.all(np.abs(arr) < 2.0 ** 63):
            return arr.astype(np.int64), None
        arr = arr.astype(str)
    names = np.array(["" if v is None else str(v) for v in arr.tolist()])
    try:
        return np.array([int(v) for v in names], dtype=np.int64), None
    except (ValueError, OverflowError):
        pass
    classes, codes = np.unique(names, return_inverse=True)
    return codes.astype(np.int64), {i: str(c) for i, c in enumerate(classes)}
