"""Checks of the supervision given with a matrix: class labels, triplets (with their signs)
and per-task streams of (matrix, ±1 labels).
"""

from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp

from ..exceptions import InvalidInputError
from .arrays import check_csr
from .messages import bounded

__all__ = ["check_labels", "check_task_streams", "check_triplets"]


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
