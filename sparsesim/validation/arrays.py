"""Checks of matrices and arrays before compiled code (or scipy's C routines) reads them.

:func:`check_csr` (caller input, sparse or small dense), :func:`check_fit_matrix` (training
data), :func:`check_csr_arrays` (three CSR arrays, e.g. read from a file) and
:func:`check_finite_array` (a dense array read from a file).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..exceptions import InvalidInputError, InvalidInputTypeError
from .messages import bounded

__all__ = ["MAX_FEATURES", "check_csr", "check_csr_arrays", "check_finite_array", "check_fit_matrix"]

#: Largest feature count (column index + 1): the compiled kernels and the file formats store
#: column indices as int32.
MAX_FEATURES = 2**31 - 1


def _numeric_kind(dtype, name: str):
    if dtype.kind not in "biuf":
        what = {"c": "complex", "U": "string", "S": "bytes", "O": "object", "M": "datetime", "m": "timedelta",
                "V": "structured"}.get(dtype.kind, str(dtype))
        raise InvalidInputError(f"{name} must hold real numbers, got {what} values (dtype {dtype})")


def _count(a) -> int:
    return int(a.shape[0]) if a.ndim else 1


def check_csr_arrays(indptr, indices, data, shape, name: str = "X", index_dtypes=None, data_dtypes=None,
                     sorted_indices: bool = False, allow_duplicates: bool = True) -> None:
    """Refuse three CSR arrays that do not form a valid ``shape`` matrix.

    Vectorised (one pass per array, no Python loop over rows); safe to call on memory-mapped
    arrays. Raises :class:`~sparsesim.exceptions.InvalidInputError` naming the first problem.

    Parameters
    ----------
    indptr, indices, data : ndarray
    shape : (int, int)
    name : str
        Used in messages.
    index_dtypes, data_dtypes : tuple of dtype, optional
        Exact dtypes accepted (files); default: any integer / any real dtype.
    sorted_indices : bool, default False
        Also require strictly increasing column indices within each row (canonical form: sorted,
        no duplicates).
    allow_duplicates : bool, default True
        Ignored when ``sorted_indices`` (which excludes duplicates).
    """
    n_rows, n_cols = shape
    for label, arr in (("indptr", indptr), ("indices", indices), ("data", data)):
        if not isinstance(arr, np.ndarray) or arr.ndim != 1:
            raise InvalidInputError(f"{name}.{label} must be a 1-D array, got {type(arr).__name__} "
                                    f"of shape {getattr(arr, 'shape', None)}")
    for label, arr in (("indptr", indptr), ("indices", indices)):
        if index_dtypes is not None:
            if arr.dtype not in [np.dtype(t) for t in index_dtypes]:
                raise InvalidInputError(f"{name}.{label} has dtype {arr.dtype}; expected "
                                        f"{' or '.join(str(np.dtype(t)) for t in index_dtypes)}")
        elif arr.dtype.kind not in "iu":
            raise InvalidInputError(f"{name}.{label} must hold integers, got dtype {arr.dtype}")
    if data_dtypes is not None:
        if data.dtype not in [np.dtype(t) for t in data_dtypes]:
            raise InvalidInputError(f"{name}.data has dtype {data.dtype}; expected "
                                    f"{' or '.join(str(np.dtype(t)) for t in data_dtypes)}")
    else:
        _numeric_kind(data.dtype, f"{name}.data")
    if indptr.shape[0] != n_rows + 1:
        raise InvalidInputError(f"{name}.indptr has {indptr.shape[0]} entries; a {n_rows}-row matrix needs {n_rows + 1}")
    nnz = indices.shape[0]
    if data.shape[0] != nnz:
        raise InvalidInputError(f"{name} has {nnz} indices but {data.shape[0]} values")
    if int(indptr[0]) != 0 or int(indptr[-1]) != nnz:
        raise InvalidInputError(f"{name}.indptr must start at 0 and end at nnz={nnz}, got {int(indptr[0])} .. "
                                f"{int(indptr[-1])}")
    if n_rows and np.any(np.diff(indptr) < 0):
        raise InvalidInputError(f"{name}.indptr is not monotone (a row would have a negative length)")
    if nnz:
        lo, hi = int(indices.min()), int(indices.max())
        if lo < 0:
            raise InvalidInputError(f"{name} holds a negative column index ({lo}); indices must be in [0, {n_cols})")
        if hi >= n_cols:
            raise InvalidInputError(f"{name} holds column index {hi}, outside [0, {n_cols}) "
                                    f"({n_cols} features)")
        if data.dtype.kind == "f" and not np.isfinite(data).all():
            bad = int(np.count_nonzero(~np.isfinite(data)))
            raise InvalidInputError(f"{name} contains {bad} NaN or infinite value(s)")
        if sorted_indices and nnz > 1:
            step = np.diff(indices.astype(np.int64, copy=False))
            # positions where a new row starts are exempt
            starts = np.asarray(indptr[1:-1], dtype=np.int64)
            starts = starts[(starts > 0) & (starts < nnz)]
            ok = step > 0
            ok[starts - 1] = True
            if not ok.all():
                raise InvalidInputError(f"{name} has unsorted or duplicate column indices within a row")


def check_finite_array(arr, name: str, dtypes=None, shape=None) -> np.ndarray:
    """Refuse an array (e.g. read from a file) of the wrong dtype or shape, or with NaN/inf."""
    if not isinstance(arr, np.ndarray):
        raise InvalidInputError(f"{name} must be an array, got {type(arr).__name__}")
    if dtypes is not None and arr.dtype not in [np.dtype(t) for t in dtypes]:
        raise InvalidInputError(f"{name} has dtype {arr.dtype}; expected "
                                f"{' or '.join(str(np.dtype(t)) for t in dtypes)}")
    _numeric_kind(arr.dtype, name)
    if shape is not None and tuple(arr.shape) != tuple(shape):
        raise InvalidInputError(f"{name} has shape {arr.shape}, expected {tuple(shape)}")
    if arr.dtype.kind == "f" and arr.size and not np.isfinite(arr).all():
        raise InvalidInputError(f"{name} contains NaN or infinite values")
    return arr


def _check_shape(shape, name):
    try:
        n_rows, n_cols = (int(s) for s in shape)
    except (TypeError, ValueError):
        raise InvalidInputError(f"{name} must be 2-D, got shape {shape}") from None
    if n_rows < 0 or n_cols < 0:
        raise InvalidInputError(f"{name} has a negative dimension {shape}")
    if n_cols > MAX_FEATURES:
        raise InvalidInputError(f"{name} has {n_cols} features; at most {MAX_FEATURES} (2^31 - 1) are supported")
    return n_rows, n_cols


def _structural(X, name):
    """The caller's sparse matrix as CSR, checked before any scipy C routine reads its arrays."""
    fmt = X.format
    shape = _check_shape(X.shape, name)
    if fmt in ("csr", "csc"):
        dims = shape if fmt == "csr" else (shape[1], shape[0])
        check_csr_arrays(np.asarray(X.indptr), np.asarray(X.indices), np.asarray(X.data), dims, name=name)
        return X.tocsr() if fmt == "csc" else X
    if fmt == "coo":
        row, col, data = (np.asarray(a) for a in _coo_arrays(X))
        for label, arr, bound in (("row", row, shape[0]), ("col", col, shape[1])):
            if arr.ndim != 1 or arr.dtype.kind not in "iu":
                raise InvalidInputError(f"{name}.{label} must be a 1-D integer array")
            if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= bound):
                raise InvalidInputError(f"{name}.{label} holds an index outside [0, {bound})")
        if data.ndim != 1 or data.shape[0] != row.shape[0] or col.shape[0] != row.shape[0]:
            raise InvalidInputError(f"{name}: row, col and data of a COO matrix must have one length")
        _numeric_kind(data.dtype, f"{name}.data")
        return X.tocsr()
    if fmt == "bsr":
        return _structural(X.tocoo(), name)
    # dok / lil / dia are built by scipy's own Python code; their conversion is safe
    return X.tocsr()


def _coo_arrays(X):
    coords = getattr(X, "coords", None)
    if coords is not None and len(coords) == 2:
        return coords[0], coords[1], X.data
    return X.row, X.col, X.data


def check_csr(X, name: str = "X", n_features: int | None = None, dtype=np.float64) -> sp.csr_matrix:
    """Return ``X`` as a canonical CSR matrix of ``dtype``, refusing anything compiled code could trip on.

    Sparse input gets a full structural check first (see :func:`check_csr_arrays`); dense arrays
    are accepted and converted (so small examples stay easy). The returned matrix has int32 or
    int64 indices in ``[0, n_features)``, sorted indices, no duplicate entries and finite
    values; the caller's matrix is never modified.

    Raises
    ------
    InvalidInputError
        Wrong dimensionality, non-numeric values (strings, complex, objects), NaN/inf, an index
        out of range, a malformed ``indptr``, a feature-count mismatch.
    """
    if sp.issparse(X):
        if X.ndim != 2:
            raise InvalidInputError(f"{name} must be 2-D, got shape {X.shape}")
        _numeric_kind(X.dtype, name)
        X = _structural(X, name)
        X = sp.csr_matrix((np.asarray(X.data).astype(dtype), np.array(X.indices, copy=True),
                           np.array(X.indptr, copy=True)), shape=X.shape)
    else:
        try:
            arr = np.asarray(X)
        except (ValueError, TypeError) as exc:
            raise InvalidInputError(f"{name} is not a numeric array ({bounded(exc, 120)})") from None
        if arr.dtype.kind == "O":  # numbers held as Python objects convert; anything else is refused
            try:
                arr = arr.astype(dtype)
            except (TypeError, ValueError, OverflowError) as exc:
                raise InvalidInputTypeError(f"{name} must hold real numbers ({bounded(exc, 120)})") from None
        _numeric_kind(arr.dtype, name)
        arr = arr.astype(dtype, copy=False)
        if arr.ndim == 1:
            arr = arr[None, :]
        if arr.ndim != 2:
            raise InvalidInputError(f"{name} must be 2-D, got shape {arr.shape}")
        _check_shape(arr.shape, name)
        X = sp.csr_matrix(arr)
    if X.nnz and not np.isfinite(X.data).all():
        bad = int(np.count_nonzero(~np.isfinite(X.data)))
        raise InvalidInputError(f"{name} contains {bad} NaN or infinite value(s)")
    if n_features is not None and X.shape[1] != n_features:
        raise InvalidInputError(
            f"{name} has {X.shape[1]} features but {n_features} are expected (feature-count mismatch)"
        )
    X.sum_duplicates()
    X.sort_indices()
    if X.nnz and not np.isfinite(X.data).all():  # duplicates summed past the float range
        raise InvalidInputError(f"{name}: summing duplicate entries overflows to infinity")
    return X


def check_fit_matrix(X, name: str = "X") -> sp.csr_matrix:
    """:func:`check_csr` for training data, stricter: ``X`` must be 2-D (no single row as 1-D),
    real, and have at least one row and one feature."""
    dtype = getattr(X, "dtype", None)
    if dtype is None and not sp.issparse(X):
        dtype = np.asarray(X).dtype
    if dtype is not None and np.dtype(dtype).kind == "c":
        raise InvalidInputError(f"Complex data not supported: {name} holds complex numbers; give real-valued features")
    ndim = 2 if sp.issparse(X) else np.ndim(X)
    if ndim != 2:
        raise InvalidInputError(f"{name} must be a 2-D matrix (documents x features), got {ndim}-D input; "
                                "reshape a single document to one row")
    X = check_csr(X, name=name)
    n, d = X.shape
    if d == 0:
        raise InvalidInputError(f"{name} has 0 feature(s) (shape=({n}, 0)) while a minimum of 1 is required.")
    if n == 0:
        raise InvalidInputError(f"{name} has 0 sample(s) (shape=(0, {d})) while a minimum of 1 is required.")
    return X
