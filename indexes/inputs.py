"""What an index checks in its callers' input: query and document rows, user ids, ``top_k``.

:func:`prepare_rows` brings rows into the model's form (canonical CSR, the model's width,
L2-normalised when the model says so), :func:`normalize_ids` checks and numbers user ids,
:func:`check_top_k` checks a requested answer length against the index's size, and
:func:`check_search_k` the ``k`` of a faiss-style search (any positive count: answers are padded).
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import scipy.sparse as sp

from sparsesim.exceptions import InvalidInputError
from sparsesim.models import BilinearSimilarity
from sparsesim.csr_rows import log_row_norms, unit_row_data
from sparsesim.validation import CheckedRows, CheckedTopK, rows_of

__all__ = ["prepare_rows", "normalize_ids", "check_top_k", "check_search_k", "check_score_range", "SCORE_LIMITS"]


def prepare_rows(model: BilinearSimilarity, X, name: str, score_limit: float | None = None) -> sp.csr_matrix:
    """``X`` as canonical float64 CSR with the model's width (L2-normalised when the model says so);
    with ``score_limit`` (documents entering an index, :data:`SCORE_LIMITS`) also
    :func:`check_score_range`. Rows given as :class:`~sparsesim.validation.CheckedRows` (e.g. the
    service's :class:`~sparsesim.validation.CheckedQueries`) are not checked again, only their width."""
    if model is None:
        raise InvalidInputError("an index needs a BilinearSimilarity model")
    checked = isinstance(X, CheckedRows)
    X = rows_of(X, name=name, n_features=model.n_features)  # checked rows: their width only
    if model.normalize:
        X = sp.csr_matrix((unit_row_data(X), X.indices.copy(), X.indptr.copy()), shape=X.shape)  # order kept
        X.has_sorted_indices = True
    elif checked:  # the caller's matrix stays as it is: a new one over the same arrays
        X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=X.shape, copy=False)
        X.has_sorted_indices = True
    X.indices = X.indices.astype(np.int32, copy=False)
    X.indptr = X.indptr.astype(np.int64, copy=False)
    if score_limit is not None:
        check_score_range(model, X, name, score_limit)
    return X


#: the largest score (and value of ``x M^T``) documents may reach in an index that computes in
#: float64, and in one that also stores float32 values (the ann index's postings and FAISS vectors)
SCORE_LIMITS = {"float64": 1e300, "float32": 1e30}


def check_score_range(model: BilinearSimilarity, X: sp.csr_matrix, name: str, limit: float) -> None:
    """Refuse documents whose bilinear scores could overflow.

    The bound: ``|x^T M x'| <= |x| |x'| |M|`` and every value of ``x M^T`` is at most
    ``|x| |M|`` (``|M|`` bounded by :meth:`~sparsesim.models.BilinearSimilarity.log_norm_bound`),
    computed in logarithms so that the check itself cannot overflow. Documents whose largest
    bound is over ``limit`` raise :class:`~sparsesim.exceptions.InvalidInputError`, before any
    index work: an index must never store, or answer with, infinite values.
    """
    if X.shape[0] == 0 or X.nnz == 0:
        return
    log_norm = float(np.max(log_row_norms(X)))
    log_m = model.log_norm_bound()
    worst = log_m + max(2 * log_norm, log_norm)
    if worst > math.log(limit):
        raise InvalidInputError(
            f"{name}: values too large to index: scores could reach about 1e{worst / math.log(10):.0f} (largest "
            f"row norm 1e{log_norm / math.log(10):.0f}), over the 1e{round(math.log10(limit))} this kind of index "
            "keeps (an ann index stores float32 values); scale the data down (e.g. L2-normalise the rows)")


def normalize_ids(ids, n: int, existing: np.ndarray | None = None) -> np.ndarray:
    """User ids as an int64 or unicode array of length ``n``, unique (also against ``existing``).

    ``None`` numbers the documents after the existing ones (row numbers for a new index).
    """
    start = 0 if existing is None else existing.shape[0]
    if ids is None:
        if existing is not None and existing.dtype.kind != "i":
            raise InvalidInputError("the index has string ids; pass ids for the new documents")
        return np.arange(start, start + n, dtype=np.int64)
    arr = np.asarray(ids)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise InvalidInputError(f"ids must be a 1-D sequence with one id per document ({n}), got shape {arr.shape}")
    if arr.dtype.kind == "O":
        if all(isinstance(v, (numbers.Integral, np.integer)) and not isinstance(v, bool) for v in arr):
            arr = arr.astype(np.int64)
        elif all(isinstance(v, str) for v in arr):
            arr = arr.astype(str)
        else:
            raise InvalidInputError("ids must be all integers or all strings")
    if arr.dtype.kind in "iu":
        arr = arr.astype(np.int64)
    elif arr.dtype.kind == "U":
        pass
    elif arr.dtype.kind == "S":
        arr = arr.astype(str)
    else:
        raise InvalidInputError(f"ids must be integers or strings, got dtype {arr.dtype}")
    if n and np.unique(arr).shape[0] != n:
        raise InvalidInputError("ids must be unique; found duplicates")
    if existing is not None:
        if (existing.dtype.kind == "i") != (arr.dtype.kind == "i"):
            kind = "integer" if existing.dtype.kind == "i" else "string"
            raise InvalidInputError(f"the index has {kind} ids; the new ids must be {kind}s too")
        clash = np.intersect1d(existing, arr)
        if clash.size:
            raise InvalidInputError(f"{clash.size} id(s) already in the index, e.g. {clash[0].item()!r}")
        if arr.dtype.kind == "U":
            width = max(existing.dtype.itemsize, arr.dtype.itemsize) // 4
            arr = arr.astype(f"<U{max(width, 1)}")
    return arr


def check_top_k(top_k, n_documents: int) -> int:
    """``top_k`` as an int from 1 to ``n_documents``; a :class:`~sparsesim.validation.CheckedTopK`
    (checked to be >= 1 by the caller, e.g. the CLI before loading) only against ``n_documents``."""
    if not isinstance(top_k, CheckedTopK) and (
            isinstance(top_k, bool) or not isinstance(top_k, (numbers.Integral, np.integer)) or top_k < 1):
        raise InvalidInputError(f"top_k must be a positive integer, got {top_k!r}")
    if top_k > n_documents:
        raise InvalidInputError(f"top_k={top_k} is larger than the index ({n_documents} documents)")
    return int(top_k)


def check_search_k(k) -> int:
    """The ``k`` of :meth:`Index.search`: a positive integer (larger than the index is allowed)."""
    if isinstance(k, bool) or not isinstance(k, (numbers.Integral, np.integer)) or k < 1:
        raise InvalidInputError(f"k must be a positive integer, got {k!r}")
    if k > 2**31:
        raise InvalidInputError(f"k={k} is too large (at most 2^31)")
    return int(k)
