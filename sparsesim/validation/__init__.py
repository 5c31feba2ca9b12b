"""The one validation layer: every input is checked here before compiled code sees it.

* :func:`check_csr` -- sparse (or small dense) input from a caller: full CSR format check in
  vectorised numpy (indices in ``[0, n_features)``, no negatives, ``indptr`` starting at 0,
  monotone and ending at nnz, numeric finite data), then canonical form (sorted indices,
  duplicates summed). No scipy routine runs on the caller's arrays before the check, because
  scipy's own C routines trust ``indptr``/``indices`` too.
* :func:`check_csr_arrays` -- the same structural check for three arrays read from a file,
  with the exact dtypes the file format prescribes (wrong dtypes are refused, never coerced).
* :func:`check_labels`, :func:`check_int`, :func:`check_float`, :func:`check_bool`,
  :func:`check_choice`, :func:`check_random_state` -- labels and hyper-parameters: type and
  range, with the parameter's name and the accepted range in the message.
* :func:`check_params` -- a declarative per-class parameter spec (``_param_spec``) checked in
  one place, called from ``fit``.
* :func:`bounded` -- error messages cut to a bounded length (a hostile file cannot make a
  one-line error hundreds of megabytes long).
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import scipy.sparse as sp

from .exceptions import (FileFormatError, InvalidInputError, InvalidInputTypeError, InvalidParameterError,
                         ResourceLimitError)

__all__ = [
    "MAX_FEATURES", "MAX_MESSAGE", "bounded", "check_csr", "check_csr_arrays", "check_labels", "check_int",
    "check_float", "check_bool", "check_choice", "check_random_state", "check_params", "check_finite_array",
    "check_meta", "check_triplets", "check_task_streams", "memory_budget", "check_n_triplets", "check_n_jobs",
    "check_seed_count", "check_dense_request", "is_finite_number",
]

#: Largest feature count (column index + 1): the compiled kernels and the file formats store
#: column indices as int32.
MAX_FEATURES = 2**31 - 1
#: Longest error message (characters) built from user or file content.
MAX_MESSAGE = 400



def is_finite_number(v) -> bool:
    """Whether a decoded JSON value is a real number (not a bool) that is finite as a float64;
    an integer too large for a float (hundreds of digits) is not."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False

def bounded(text, limit: int = MAX_MESSAGE) -> str:
    """``str(text)`` cut to ``limit`` characters (with a marker saying how much was cut)."""
    text = str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters]"


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


def check_labels(y, n_samples: int, name: str = "y", min_per_class: int = 1) -> np.ndarray:
    """Return labels as a 1-D array; refuse a length mismatch, NaN, unorderable values, fewer
    than two classes, or a class with fewer than ``min_per_class`` documents."""
    try:
        y = np.asarray(y)
    except (ValueError, TypeError) as exc:
        raise InvalidInputError(f"{name} is not a label array ({bounded(exc, 120)})") from None
    if y.ndim != 1 or y.shape[0] != n_samples:
        raise InvalidInputError(f"{name} must have one label per document ({n_samples}), got shape {y.shape}")
    if y.dtype.kind not in "biuUS":
        if y.dtype.kind == "f":
            if not np.all(np.isfinite(y)):
                raise InvalidInputError(f"{name} contains NaN or infinite labels")
        elif y.dtype.kind == "O":
            kinds = {type(v) for v in y.tolist()}
            if all(issubclass(t, (numbers.Integral, np.integer)) and t is not bool for t in kinds):
                y = y.astype(np.int64)
            elif all(issubclass(t, str) for t in kinds):
                y = y.astype(str)
            else:
                raise InvalidInputError(f"{name} must hold labels of one kind (all integers or all strings), "
                                        f"got {', '.join(sorted(t.__name__ for t in kinds))}")
        else:
            raise InvalidInputError(f"{name} must hold integer, float or string labels, got dtype {y.dtype}")
    classes, counts = np.unique(y, return_counts=True)
    if classes.size < 2:
        raise InvalidInputError(f"{name} has {classes.size} class(es); at least two are needed")
    small = classes[counts < min_per_class]
    if small.size:
        raise InvalidInputError(
            f"class(es) {bounded(', '.join(map(str, small[:5])), 200)} have fewer than {min_per_class} documents; "
            f"each class needs at least {min_per_class}"
        )
    return y



def check_triplets(triplets, n_rows: int, signs=None):
    """Return ``(triplets, signs)`` checked: an (n, 3) int64 array of row indices in
    ``[0, n_rows)`` and ``None`` or one value in {-1, +1} per triplet (as float64)."""
    triplets = np.asarray(triplets)
    if triplets.ndim != 2 or triplets.shape[1] != 3:
        raise InvalidInputError(f"triplets must have shape (n, 3), got {triplets.shape}")
    if triplets.size and triplets.dtype.kind not in "iu":
        raise InvalidInputError("triplets must hold integer row indices")
    triplets = triplets.astype(np.int64, copy=False)
    if triplets.size and (triplets.min() < 0 or triplets.max() >= n_rows):
        raise InvalidInputError(f"triplet indices must lie in [0, {n_rows}) (rows of X)")
    if signs is not None:
        signs = np.asarray(signs, dtype=np.float64)
        if signs.shape != (triplets.shape[0],) or not np.all(np.isin(signs, (-1.0, 1.0))):
            raise InvalidInputError("signs must hold one value in {-1, +1} per triplet")
    return triplets, signs


def _signed_task_labels(y, task: str) -> np.ndarray:
    y = np.asarray(y)
    if y.ndim != 1:
        raise InvalidInputError(f"labels of task {task} must be 1-D, got shape {y.shape}")
    if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
        raise InvalidInputError(f"labels of task {task} contain NaN or infinite values")
    values = set(np.unique(y).tolist())
    if values <= {-1, 1}:
        out = y.astype(np.float64)
    elif values <= {0, 1}:
        out = np.where(y == 1, 1.0, -1.0)
    else:
        raise InvalidInputError(
            f"labels of task {task} must be in {{-1, +1}} or {{0, 1}}, got {sorted(values)[:5]}"
        )
    if np.unique(out).size < 2:
        raise InvalidInputError(
            f"task {task} has only one class ({'+1' if out.size and out[0] > 0 else '-1'}); "
            "every task needs both classes"
        )
    return out


def check_task_streams(X, y, n_features: int | None = None, n_tasks: int | None = None):
    """Validate per-task streams; return ``(list of canonical float64 CSR, list of ±1 labels)``.

    Parameters
    ----------
    X : sequence of sparse matrices or 2-D arrays
        One matrix per task.
    y : sequence of 1-D arrays
        One label vector per task, values in {-1, +1} or {0, 1}.
    n_features, n_tasks : int, optional
        Expected width / number of tasks (e.g. of an already fitted model).

    Raises
    ------
    InvalidInputError
        NaN/inf values, tasks with different feature counts, a label/row count mismatch, a task
        with one class only, an empty task, a wrong number of tasks.
    """
    if sp.issparse(X) or isinstance(X, np.ndarray) and X.ndim == 2:
        raise InvalidInputError("X must be a list with one matrix per task (got a single matrix)")
    X = list(X)
    y = list(y)
    if not X:
        raise InvalidInputError("no tasks given")
    if len(X) != len(y):
        raise InvalidInputError(f"{len(X)} task matrices but {len(y)} label vectors")
    if n_tasks is not None and len(X) != n_tasks:
        raise InvalidInputError(f"{len(X)} tasks given but the model has {n_tasks}")
    out_X, out_y = [], []
    widths = []
    for i, (x, labels) in enumerate(zip(X, y)):
        if not sp.issparse(x) and np.ndim(x) != 2:
            raise InvalidInputError(f"task {i}: X must be 2-D, got shape {np.shape(x)}")
        x = check_csr(x, name=f"task {i}: X")
        if x.shape[0] == 0:
            raise InvalidInputError(f"task {i} has no instances")
        labels = _signed_task_labels(labels, str(i))
        if labels.shape[0] != x.shape[0]:
            raise InvalidInputError(
                f"task {i}: {x.shape[0]} instances but {labels.shape[0]} labels"
            )
        widths.append(x.shape[1])
        out_X.append(x)
        out_y.append(labels)
    if len(set(widths)) > 1:
        raise InvalidInputError(
            f"tasks have different feature counts {sorted(set(widths))}; all tasks must share one "
            "feature space (align or pad the features first)"
        )
    if n_features is not None and widths[0] != n_features:
        raise InvalidInputError(
            f"X has {widths[0]} features but the model was fitted with {n_features} (feature-count mismatch)"
        )
    return out_X, out_y


# --------------------------------------------------------------------------- parameters
def _range_text(low, high, low_open=False, high_open=False) -> str:
    if low is None and high is None:
        return "any value"
    lo = "(" if low_open or low is None else "["
    hi = ")" if high_open or high is None else "]"
    return f"{lo}{'-inf' if low is None else low}, {'inf' if high is None else high}{hi}"


def check_int(value, name: str, low=None, high=None, allow_none: bool = False):
    """``value`` as a Python int in ``[low, high]`` (``None`` passes when ``allow_none``).

    Only integers (Python or numpy) are accepted: ``3.0``, ``2.5``, booleans and strings are refused.
    """
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)):
        raise InvalidParameterError(f"{name} must be an integer in {_range_text(low, high)}, got {value!r}")
    if isinstance(value, (numbers.Integral, np.integer)):
        out = int(value)
    else:
        raise InvalidParameterError(f"{name} must be an integer in {_range_text(low, high)}, got "
                                    f"{bounded(repr(value), 80)}")
    if (low is not None and out < low) or (high is not None and out > high):
        raise InvalidParameterError(f"{name} must be an integer in {_range_text(low, high)}, got {out}")
    return out


def check_float(value, name: str, low=None, high=None, low_open: bool = False, high_open: bool = False,
                allow_none: bool = False):
    """``value`` as a finite Python float in the given range (open or closed ends)."""
    if value is None and allow_none:
        return None
    rng = _range_text(low, high, low_open, high_open)
    if low == 0 and low_open and high is None:
        return _check_positive(value, name, rng)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.integer, np.floating)):
        raise InvalidParameterError(f"{name} must be a number in {rng}, got {bounded(repr(value), 80)}")
    try:
        out = float(value)
    except OverflowError:
        raise InvalidParameterError(f"{name} must be a finite number in {rng}, got a value too large") from None
    if not math.isfinite(out):
        raise InvalidParameterError(f"{name} must be a finite number in {rng}, got {out}")
    if low is not None and (out < low or (low_open and out == low)):
        raise InvalidParameterError(f"{name} must be a number in {rng}, got {out}")
    if high is not None and (out > high or (high_open and out == high)):
        raise InvalidParameterError(f"{name} must be a number in {rng}, got {out}")
    return out


def _check_positive(value, name, rng):
    what = f"{name} must be positive (a finite number in {rng})"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.integer, np.floating)):
        raise InvalidParameterError(f"{what}, got {bounded(repr(value), 80)}")
    try:
        out = float(value)
    except OverflowError:
        raise InvalidParameterError(f"{what}, got a value too large") from None
    if not math.isfinite(out) or out <= 0:
        raise InvalidParameterError(f"{what}, got {out}")
    return out


def check_bool(value, name: str):
    """``value`` as a bool; only ``True``/``False`` (and numpy bools, 0 and 1) are accepted."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (numbers.Integral, np.integer)) and int(value) in (0, 1):
        return bool(value)
    raise InvalidParameterError(f"{name} must be True or False, got {bounded(repr(value), 80)}")


def check_choice(value, name: str, choices):
    """``value`` if it is one of ``choices``."""
    try:
        ok = value in choices
    except TypeError:
        ok = False
    if not ok or isinstance(value, (bool, np.bool_)) and not any(isinstance(c, bool) for c in choices):
        raise InvalidParameterError(f"{name} must be one of {', '.join(map(repr, choices))}; got "
                                    f"{bounded(repr(value), 80)}")
    return value


def check_random_state(value, name: str = "random_state"):
    """``None``, an int in [0, 2^32 - 1] or a :class:`numpy.random.Generator`/``RandomState``."""
    if value is None or isinstance(value, (np.random.Generator, np.random.RandomState)):
        return value
    return check_int(value, name, 0, 2**32 - 1)


_POS = {"low_open": True}
#: Hyper-parameters shared by the registered algorithms, checked by name (type and range) before
#: any fit; a class adds or overrides entries in its own ``_param_spec``.
COMMON_PARAM_SPEC = {
    "C": ("float", 0, None, _POS), "source_C": ("float", 0, None, _POS),
    "eta": ("float", 0, None, _POS), "eta1": ("float", 0, None, _POS), "eta2": ("float", 0, None, _POS),
    "lam": ("float", 0, None), "lam1": ("float", 0, None), "lam2": ("float", 0, None),
    "delta": ("float", 0, None, _POS), "gamma": ("float", 0, None, _POS), "sigma": ("float", 0, None, _POS),
    "r": ("float", 0, None, _POS), "b": ("float", 0, None), "alpha": ("float?", 0, None),
    "knn_bandwidth": ("float?", 0, None, _POS), "theta0": ("float", 0, 1),
    "query_rate": ("float", 0, 1), "query_ratio": ("float", 0, 1),
    "query_budget": ("int?", 0, None), "n_neighbors": ("int", 1, None), "epoch": ("int", 0, None),
    "gram_refresh": ("int", 1, None), "initial_capacity": ("int", 1, 2**40),
    "n_triplets": ("n_triplets",), "n_jobs": ("int?", -64, 4096),
    "identity": ("bool",), "normalize": ("bool",), "compact": ("bool",),
    "random_state": ("random_state",),
    "combiner": ("str",), "covariance": ("str",), "divergence": ("str",), "kernel": ("str",),
    "knn_weighting": ("str",), "regularizer": ("str",), "schedule": ("str",), "sigma_step": ("str",),
    "storage": ("str",), "variant": ("str",),
}

def _default_of(estimator, pname):
    import inspect

    try:
        param = inspect.signature(type(estimator).__init__).parameters.get(pname)
    except (TypeError, ValueError):
        return None
    return None if param is None else param.default


_CHECKERS = {"int": check_int, "float": check_float, "bool": check_bool, "choice": check_choice,
             "random_state": check_random_state}


def check_params(estimator, spec: dict | None = None) -> dict:
    """Check the hyper-parameters of ``estimator`` against a declarative spec, in one place.

    ``spec`` (default: ``type(estimator)._param_spec``) maps a parameter name to a tuple
    ``(kind, *args)`` with ``kind`` one of ``"int"``, ``"float"``, ``"bool"``, ``"choice"``,
    ``"random_state"``, ``"str"``, ``"n_triplets"`` and the arguments of the matching ``check_*``
    function, plus an optional trailing dict of keyword arguments, e.g. ``{"C": ("float", 0, None,
    {"low_open": True}), "n_triplets": ("int", 1, None)}``; a kind ending in ``?`` also accepts
    ``None``. The default spec is :data:`COMMON_PARAM_SPEC` (the parameters shared by the registered
    algorithms, by name) updated with the class's own ``_param_spec``. Parameters missing on the
    estimator are skipped.

    Returns
    -------
    dict
        The checked values (plain Python types).
    """
    if spec is None:
        spec = dict(COMMON_PARAM_SPEC)
        spec.update(getattr(type(estimator), "_param_spec", None) or {})
    out = {}
    for pname, entry in (spec or {}).items():
        if not hasattr(estimator, pname):
            continue
        kind, *args = entry
        kwargs = args.pop() if args and isinstance(args[-1], dict) else {}
        value = getattr(estimator, pname)
        if isinstance(value, str) and value == "auto" and _default_of(estimator, pname) == "auto":
            out[pname] = value  # resolved from the data by the estimator (see its docstring)
            continue
        if kind.endswith("?"):
            kind = kind[:-1]
            if value is None:
                out[pname] = None
                continue
        if kind == "str":
            if not isinstance(value, str):
                raise InvalidParameterError(f"{pname} must be a string naming an option, got {bounded(repr(value), 80)}")
            out[pname] = value
        elif kind == "n_triplets":
            out[pname] = check_n_triplets(value, pname, allow_zero=True)
        elif kind == "choice":
            out[pname] = check_choice(value, pname, *args)
        else:
            out[pname] = _CHECKERS[kind](value, pname, *args, **kwargs)
    return out


# --------------------------------------------------------------------------- file metadata
def check_meta(meta, schema: dict, what: str) -> dict:
    """Validate metadata read from a file against ``schema``; errors are FileFormatError.

    ``schema`` maps a key to ``(kind, *args)``: kinds ``"int"``, ``"float"``, ``"bool"``,
    ``"str"``, ``"choice"``, ``"dict"``, ``"list"``; a trailing ``?`` makes the key optional (and
    ``None`` allowed). ``args`` are the bounds / choices of the matching ``check_*`` function.
    Every key of the schema without ``?`` must be present. Checked values are written back as
    plain Python values.
    """
    if not isinstance(meta, dict):
        raise FileFormatError(f"{what}: metadata is a {type(meta).__name__}, expected a JSON object")
    for key, entry in schema.items():
        kind, *args = entry
        optional = kind.endswith("?")
        kind = kind.rstrip("?")
        if key not in meta:
            if optional:
                continue
            raise FileFormatError(f"{what}: metadata lacks {key!r}")
        value = meta[key]
        if value is None and optional:
            continue
        kwargs = args.pop() if args and isinstance(args[-1], dict) else {}
        try:
            if kind in ("int", "float", "bool") and not isinstance(value, (bool, int, float)):
                raise InvalidParameterError(f"{key} must be a JSON {'boolean' if kind == 'bool' else 'number'}, "
                                            f"got {type(value).__name__}")
            if kind == "int":
                meta[key] = check_int(value, key, *args, **kwargs)
            elif kind == "float":
                meta[key] = check_float(value, key, *args, **kwargs)
            elif kind == "bool":
                if not isinstance(value, bool):
                    raise InvalidParameterError(f"{key} must be true or false, got {bounded(repr(value), 40)}")
            elif kind == "str":
                if not isinstance(value, str):
                    raise InvalidParameterError(f"{key} must be a string, got {type(value).__name__}")
            elif kind == "choice":
                check_choice(value, key, *args)
            elif kind in ("dict", "list"):
                if not isinstance(value, dict if kind == "dict" else list):
                    raise InvalidParameterError(f"{key} must be a JSON {'object' if kind == 'dict' else 'array'}, "
                                                f"got {type(value).__name__}")
            else:  # pragma: no cover - schema typo
                raise ValueError(f"unknown schema kind {kind!r}")
        except InvalidParameterError as exc:
            raise FileFormatError(f"{what}: invalid metadata: {bounded(exc, 200)}") from None
    return meta


# --------------------------------------------------------------------------- requests vs the machine
def _env_int(name: str, default: int) -> int:
    import os

    raw = os.environ.get(name, "")
    try:
        return int(raw) if raw.strip() else default
    except ValueError:
        raise InvalidParameterError(f"environment variable {name} must be an integer, got {bounded(repr(raw), 40)}") \
            from None


def memory_budget() -> int:
    """Bytes one request may plan to use: ``$SPARSESIM_MEMORY_BUDGET`` or half the memory available now."""
    default = 8 << 30
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    default = int(line.split()[1]) * 1024 // 2
                    break
    except (OSError, ValueError, IndexError):
        pass
    return _env_int("SPARSESIM_MEMORY_BUDGET", default)


#: Default ceiling on triplets per run (raise with ``SPARSESIM_MAX_TRIPLETS``): 100x the largest
#: budget of the paper protocols (10^6).
DEFAULT_MAX_TRIPLETS = 10**8
#: Default ceiling on runs of one ``experiment`` (seeds x algorithms; ``SPARSESIM_MAX_RUNS``).
DEFAULT_MAX_RUNS = 1000


def check_n_triplets(value, name: str = "n_triplets", allow_zero: bool = False) -> int:
    """A triplet count in [1, limit] (the limit: ``$SPARSESIM_MAX_TRIPLETS``, default 10^8)."""
    limit = _env_int("SPARSESIM_MAX_TRIPLETS", DEFAULT_MAX_TRIPLETS)
    value = check_int(value, name, 0 if allow_zero else 1)
    if value > limit:
        raise ResourceLimitError(f"{name}={value} is more than the {limit} triplets one run may request "
                                 f"(raise the limit with SPARSESIM_MAX_TRIPLETS={value} if this is intended)")
    return value


def available_cores() -> int:
    """The cores this process may run on (a container or taskset can allow fewer than the machine has)."""
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def check_n_jobs(value, name: str = "n_jobs") -> int:
    """Parallel workers: a positive int (or -1 = all cores, -2 = all but one, ...) up to the cores
    of this machine (``$SPARSESIM_MAX_JOBS`` raises the ceiling). Returns the resolved count."""
    cores = available_cores()
    limit = _env_int("SPARSESIM_MAX_JOBS", cores)
    value = check_int(value, name)
    if value == 0:
        raise InvalidParameterError(f"{name} must be a positive number of workers or -1 (all {cores} cores), got 0")
    if value < 0:
        if -value > cores:
            raise InvalidParameterError(f"{name}={value} would leave no worker on this {cores}-core machine; "
                                        f"use a value in [{-cores}, -1] or a positive count")
        value = cores + 1 + value
    if value > limit:
        raise ResourceLimitError(f"{name}={value} is more than the {limit} workers this machine runs at once "
                                 f"({cores} cores; raise the limit with SPARSESIM_MAX_JOBS={value} if intended)")
    return value


def check_seed_count(count: int, n_algorithms: int = 1) -> None:
    """Refuse an experiment of more runs than ``$SPARSESIM_MAX_RUNS`` (default 1000)."""
    limit = _env_int("SPARSESIM_MAX_RUNS", DEFAULT_MAX_RUNS)
    runs = count * max(1, n_algorithms)
    if runs > limit:
        raise ResourceLimitError(f"{count} seed(s) x {max(1, n_algorithms)} algorithm(s) = {runs} runs; at most "
                                 f"{limit} runs per experiment (raise with SPARSESIM_MAX_RUNS={runs} if intended)")


def check_dense_request(n_bytes: int, what: str) -> None:
    """Refuse planning a dense buffer larger than :func:`memory_budget` (the message says both sizes)."""
    budget = memory_budget()
    if n_bytes > budget:
        raise ResourceLimitError(f"{what} needs {n_bytes / 2**30:.2f} GiB, more than the memory budget of "
                                 f"{budget / 2**30:.2f} GiB (lower the request, or raise SPARSESIM_MEMORY_BUDGET=BYTES)")
