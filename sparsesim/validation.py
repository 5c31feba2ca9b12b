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
