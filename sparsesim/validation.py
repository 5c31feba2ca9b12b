"""Input checks shared by learners, models, metrics and the data layer."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .exceptions import InvalidInputError


def check_csr(X, name: str = "X", n_features: int | None = None, dtype=np.float64) -> sp.csr_matrix:
    """Return ``X`` as a canonical CSR matrix of ``dtype``, refusing NaN/inf and width mismatches.

    Dense arrays are accepted and converted (so small examples stay easy); the returned matrix
    has sorted indices and no duplicate entries.
    """
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=dtype)
    else:
        arr = np.asarray(X, dtype=dtype)
        if arr.ndim == 1:
            arr = arr[None, :]
        if arr.ndim != 2:
            raise InvalidInputError(f"{name} must be 2-D, got shape {arr.shape}")
        X = sp.csr_matrix(arr)
    if not np.all(np.isfinite(X.data)):
        bad = int(np.count_nonzero(~np.isfinite(X.data)))
        raise InvalidInputError(f"{name} contains {bad} NaN or infinite value(s)")
    if n_features is not None and X.shape[1] != n_features:
        raise InvalidInputError(
            f"{name} has {X.shape[1]} features but {n_features} are expected (feature-count mismatch)"
        )
    X.sum_duplicates()
    X.sort_indices()
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
    """Return labels as a 1-D array; refuse a length mismatch, NaN, fewer than two classes,
    or a class with fewer than ``min_per_class`` documents."""
    y = np.asarray(y)
    if y.ndim != 1 or y.shape[0] != n_samples:
        raise InvalidInputError(f"{name} must have one label per document ({n_samples}), got shape {y.shape}")
    if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
        raise InvalidInputError(f"{name} contains NaN or infinite labels")
    classes, counts = np.unique(y, return_counts=True)
    if classes.size < 2:
        raise InvalidInputError(f"{name} has {classes.size} class(es); at least two are needed")
    small = classes[counts < min_per_class]
    if small.size:
        raise InvalidInputError(
            f"class(es) {', '.join(map(str, small[:5]))} have fewer than {min_per_class} documents; "
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
        if sp.issparse(x):
            x = sp.csr_matrix(x, dtype=np.float64)
        else:
            arr = np.asarray(x, dtype=np.float64)
            if arr.ndim != 2:
                raise InvalidInputError(f"task {i}: X must be 2-D, got shape {arr.shape}")
            x = sp.csr_matrix(arr)
        if not np.all(np.isfinite(x.data)):
            bad = int(np.count_nonzero(~np.isfinite(x.data)))
            raise InvalidInputError(f"task {i}: X contains {bad} NaN or infinite value(s)")
        if x.shape[0] == 0:
            raise InvalidInputError(f"task {i} has no instances")
        x.sum_duplicates()
        x.sort_indices()
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
