"""Splits and triplet protocols.

Everything here works on label arrays only and returns *index* arrays: triplets are rows
``(query, first, second)`` of document indices, never materialised vectors. All randomness
comes from one :class:`numpy.random.Generator` seeded by ``seed`` (an int, ``None`` or a
Generator), so the same seed gives the same stream.

Protocols
---------
SORS (Yao et al., ICDM 2015, ``papers/003``, line 342): "x_t is firstly randomly selected from
the whole training set, then x_t^+ is randomly selected from the subset of training set, which
consists of the examples with the same class of x_t, finally x_t^- is randomly selected from
the rest of training set, which consists of the examples with different classes of x_t."
The positive is never the anchor itself.

OMTRSL (Hao et al., IJCAI 2017, ``papers/000``, line 231): "we first randomly choose two
examples x_a and x_b which belong to the same class, and another example x_c from another
different class. We then flip a coin to decide the value of y_t. If y_t = +1, we assign the
third example x_c to x_t^2 [...] If y_t = -1, the third example x_c is assigned to x_t^1".
With tasks, a task is drawn uniformly first and the triplet is drawn inside it.
"""

from __future__ import annotations

import warnings
from typing import Iterator

import numpy as np

from .exceptions import InvalidInputError, SmallClassWarning

DEFAULT_CHUNK = 65536

__all__ = [
    "stratified_split",
    "class_split",
    "stratified_kfold",
    "sors_triplets",
    "iter_sors_triplets",
    "omtrsl_triplets",
    "iter_omtrsl_triplets",
    "usable_rows",
    "stratified_subsample",
]


def usable_rows(y, min_per_class: int = 2, warn: bool = True) -> np.ndarray | None:
    """Rows whose class has at least ``min_per_class`` documents (a positive needs another one).

    Returns ``None`` when every row is usable; otherwise the sorted usable row indices, after one
    :class:`~sparsesim.exceptions.SmallClassWarning` (when ``warn``) saying what was left out.
    Raises :class:`InvalidInputError` when fewer than two classes remain.
    """
    y = np.asarray(y)
    classes, codes, counts = np.unique(y, return_inverse=True, return_counts=True)
    small = counts < min_per_class
    if not small.any():
        return None
    keep = ~small[codes.reshape(-1)]
    if int((~small).sum()) < 2:
        raise InvalidInputError(
            f"only {int((~small).sum())} class(es) have at least {min_per_class} documents; "
            "at least two are needed to draw triplets")
    if warn:
        shown = ", ".join(map(str, classes[small][:5])) + (" ..." if small.sum() > 5 else "")
        warnings.warn(SmallClassWarning(
            f"left out {int((~keep).sum())} of {y.size} documents: {int(small.sum())} class(es) with fewer "
            f"than {min_per_class} documents cannot form a positive pair ({shown})"), stacklevel=3)
    return np.flatnonzero(keep)


def _rng(seed) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)


def _codes(y, name: str = "y", min_per_class: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Integer class codes of ``y``; refuse <2 classes or a class with fewer than ``min_per_class`` docs."""
    y = np.asarray(y)
    if y.ndim != 1:
        raise InvalidInputError(f"{name} must be a 1-D label array, got shape {y.shape}")
    if y.size == 0:
        raise InvalidInputError(f"{name} is empty")
    if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
        raise InvalidInputError(f"{name} contains NaN or infinite labels")
    classes, codes, counts = np.unique(y, return_inverse=True, return_counts=True)
    if classes.size < 2:
        raise InvalidInputError(f"{name} has {classes.size} class(es); at least two are needed")
    small = classes[counts < min_per_class]
    if small.size:
        shown = ", ".join(map(str, small[:5])) + (" ..." if small.size > 5 else "")
        raise InvalidInputError(
            f"class(es) {shown} of {name} have fewer than {min_per_class} documents; "
            f"each class needs at least {min_per_class} (a positive must be another document of the class)"
        )
    return classes, codes.reshape(-1).astype(np.int64)


# --------------------------------------------------------------------------- splits


def class_split(y, unseen_fraction: float, seed=None) -> tuple[np.ndarray, np.ndarray]:
    """A seeded split of the *classes* of ``y``: the open-set (metric-learning) protocol's split.

    ``round(unseen_fraction * n_classes)`` classes, drawn uniformly without replacement, are
    unseen; the others are seen. Both sides keep at least two classes.

    Parameters
    ----------
    y : array-like of shape (n,)
        Class labels.
    unseen_fraction : float in (0, 1)
    seed : int, Generator or None

    Returns
    -------
    seen, unseen : ndarray
        The class labels of each side, sorted.

    Raises
    ------
    InvalidInputError
        A fraction outside (0, 1), or fewer than two classes on one side.

    Examples
    --------
    >>> seen, unseen = class_split([0, 0, 1, 1, 2, 2, 3, 3], 0.5, seed=0)
    >>> len(seen), len(unseen), sorted(np.concatenate([seen, unseen]).tolist())
    (2, 2, [0, 1, 2, 3])
    """
    if isinstance(unseen_fraction, bool) or not 0.0 < float(unseen_fraction) < 1.0:
        raise InvalidInputError(f"the unseen-class fraction must be in (0, 1), got {unseen_fraction!r}")
    classes = np.unique(np.asarray(y))
    n_unseen = int(round(float(unseen_fraction) * classes.size))
    if n_unseen < 2 or classes.size - n_unseen < 2:
        raise InvalidInputError(f"holding out {unseen_fraction:g} of {classes.size} classes leaves {n_unseen} unseen and "
                                f"{classes.size - n_unseen} seen; each side needs at least two classes")
    pick = np.zeros(classes.size, dtype=bool)
    pick[_rng(seed).choice(classes.size, n_unseen, replace=False)] = True
    return classes[~pick], classes[pick]


def stratified_split(y, train_fraction: float = 0.7, seed=None) -> tuple[np.ndarray, np.ndarray]:
    """Per-class random split into train and test indices.

    Each class of ``n_c`` documents puts ``round(train_fraction * n_c)`` of them (clipped to
    ``[1, n_c - 1]``) on the train side, so every class keeps at least one document on each side.
    This is the SORS paper's split ("data instances from each class were randomly split into
    training set (70%) and test set (30%)", ``papers/003`` line 342).

    Parameters
    ----------
    y : array-like of shape (n,)
        Class labels.
    train_fraction : float in (0, 1)
    seed : int, Generator or None

    Returns
    -------
    train_idx, test_idx : ndarray of int64
        Sorted document indices.

    Raises
    ------
    InvalidInputError
        Fewer than two classes, a class with a single document, or a fraction outside (0, 1).
    """
    if not 0.0 < float(train_fraction) < 1.0:
        raise InvalidInputError(f"train_fraction must be in (0, 1), got {train_fraction}")
    _, codes = _codes(y)
    rng = _rng(seed)
    order = np.argsort(codes, kind="stable")
    counts = np.bincount(codes)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    train, test = [], []
    for c in range(counts.size):
        members = order[starts[c] : starts[c] + counts[c]]
        members = members[rng.permutation(members.size)]
        n_train = int(min(max(round(train_fraction * members.size), 1), members.size - 1))
        train.append(members[:n_train])
        test.append(members[n_train:])
    return np.sort(np.concatenate(train)).astype(np.int64), np.sort(np.concatenate(test)).astype(np.int64)


def stratified_kfold(y, n_splits: int = 5, seed=None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Stratified k-fold: each class is shuffled and dealt round-robin over the folds.

    Returns a list of ``n_splits`` pairs ``(train_idx, test_idx)`` (sorted int64 arrays); the test
    folds partition the documents. A class with fewer than ``n_splits`` documents is absent from
    some test folds but, having at least two documents, always keeps one on the train side.
    The CIKM 2015 and IJCAI 2017 papers use 5-fold cross validation (``papers/001`` line 246,
    ``papers/000`` line 231).
    """
    n_splits = int(n_splits)
    if n_splits < 2:
        raise InvalidInputError(f"n_splits must be at least 2, got {n_splits}")
    _, codes = _codes(y)
    rng = _rng(seed)
    fold = np.empty(codes.size, dtype=np.int64)
    for c in range(codes.max() + 1):
        members = np.flatnonzero(codes == c)
        members = members[rng.permutation(members.size)]
        offset = int(rng.integers(n_splits))
        fold[members] = (np.arange(members.size) + offset) % n_splits
    all_idx = np.arange(codes.size, dtype=np.int64)
    return [(all_idx[fold != f], all_idx[fold == f]) for f in range(n_splits)]


# --------------------------------------------------------------------------- triplets


class _Sampler:
    """Vectorised sampler of (anchor, same-class, other-class) index triples inside tasks.

    Documents are sorted by (task, class) so every task and every (task, class) group is a
    contiguous block; "a document of the group other than the anchor" and "a document of the
    task outside the anchor's class" are then one uniform integer plus a shift.
    """

    def __init__(self, y, tasks=None):
        y = np.asarray(y)
        if tasks is None:
            _, cls = _codes(y)
            task_codes = np.zeros(cls.size, dtype=np.int64)
            self.task_values = np.zeros(1, dtype=np.int64)
        else:
            tasks = np.asarray(tasks)
            if tasks.shape != y.shape:
                raise InvalidInputError(f"tasks must have one entry per document ({y.shape}), got {tasks.shape}")
            self.task_values, task_codes = np.unique(tasks, return_inverse=True)
            task_codes = task_codes.reshape(-1).astype(np.int64)
            cls = np.empty(y.size, dtype=np.int64)
            for t in range(self.task_values.size):
                rows = np.flatnonzero(task_codes == t)
                _, cls[rows] = _codes(y[rows], name=f"labels of task {self.task_values[t]!r}")
        self.n_tasks = self.task_values.size
        self.order = np.lexsort((cls, task_codes)).astype(np.int64)
        t_sorted = task_codes[self.order]
        c_sorted = cls[self.order]
        self.task_count = np.bincount(t_sorted, minlength=self.n_tasks)
        self.task_start = np.concatenate([[0], np.cumsum(self.task_count)[:-1]])
        new_group = np.ones(t_sorted.size, dtype=bool)
        new_group[1:] = (t_sorted[1:] != t_sorted[:-1]) | (c_sorted[1:] != c_sorted[:-1])
        self.group_of = np.cumsum(new_group) - 1
        self.group_start = np.flatnonzero(new_group)
        self.group_count = np.diff(np.append(self.group_start, t_sorted.size))
        self.task_of_sorted = t_sorted

    def draw(self, rng: np.random.Generator, n: int):
        if self.n_tasks > 1:
            t = rng.integers(0, self.n_tasks, size=n)
        else:
            t = np.zeros(n, dtype=np.int64)
        a = self.task_start[t] + rng.integers(0, self.task_count[t])
        g = self.group_of[a]
        gs, gc = self.group_start[g], self.group_count[g]
        r = rng.integers(0, gc - 1)
        r += r >= (a - gs)
        p = gs + r
        r2 = rng.integers(0, self.task_count[t] - gc)
        block = gs - self.task_start[t]
        r2 += np.where(r2 >= block, gc, 0)
        q = self.task_start[t] + r2
        return self.order[a], self.order[p], self.order[q], t


def _check_n(n) -> int:
    n = int(n)
    if n < 0:
        raise InvalidInputError(f"number of triplets must be non-negative, got {n}")
    return n


def iter_sors_triplets(y, n_triplets: int, seed=None, chunk_size: int = DEFAULT_CHUNK) -> Iterator[np.ndarray]:
    """Stream SORS triplets in chunks of at most ``chunk_size`` rows (see :func:`sors_triplets`).

    The stream for a given ``seed`` and ``chunk_size`` is fixed; :func:`sors_triplets` equals the
    concatenation of this stream with the default chunk size.
    """
    n_triplets = _check_n(n_triplets)
    sampler = _Sampler(y)
    rng = _rng(seed)
    chunk_size = max(int(chunk_size), 1)
    done = 0
    while done < n_triplets:
        m = min(chunk_size, n_triplets - done)
        a, p, q, _ = sampler.draw(rng, m)
        yield np.stack([a, p, q], axis=1).astype(np.int64)
        done += m


def sors_triplets(y, n_triplets: int, seed=None, chunk_size: int = DEFAULT_CHUNK) -> np.ndarray:
    """Draw triplets by the SORS protocol.

    The anchor is uniform over all documents, the positive uniform over the other documents of
    the anchor's class, the negative uniform over the documents of all other classes
    (``papers/003`` line 342).

    Parameters
    ----------
    y : array-like of shape (n,)
        Class labels of the (training) documents.
    n_triplets : int
    seed : int, Generator or None

    Returns
    -------
    ndarray of shape (n_triplets, 3), int64
        Rows ``(anchor, positive, negative)`` of indices into ``y``.

    Raises
    ------
    InvalidInputError
        Fewer than two classes or a class with a single document.
    """
    chunks = list(iter_sors_triplets(y, n_triplets, seed, chunk_size))
    return np.concatenate(chunks) if chunks else np.empty((0, 3), dtype=np.int64)


def iter_omtrsl_triplets(y, n_triplets: int, seed=None, tasks=None, chunk_size: int = DEFAULT_CHUNK):
    """Stream OMTRSL triplets as ``(triplets, signs, task_ids)`` chunks (see :func:`omtrsl_triplets`)."""
    n_triplets = _check_n(n_triplets)
    sampler = _Sampler(y, tasks)
    rng = _rng(seed)
    chunk_size = max(int(chunk_size), 1)
    done = 0
    while done < n_triplets:
        m = min(chunk_size, n_triplets - done)
        a, b, c, t = sampler.draw(rng, m)
        sign = np.where(rng.random(m) < 0.5, 1, -1).astype(np.int64)
        first = np.where(sign > 0, b, c)
        second = np.where(sign > 0, c, b)
        task_ids = sampler.task_values[t] if tasks is not None else np.zeros(m, dtype=np.int64)
        yield np.stack([a, first, second], axis=1).astype(np.int64), sign, task_ids
        done += m


def omtrsl_triplets(y, n_triplets: int, seed=None, tasks=None, chunk_size: int = DEFAULT_CHUNK):
    """Draw triplets by the OMTRSL protocol (``papers/000`` line 231).

    A same-class pair ``(x_a, x_b)`` (``x_a`` uniform over the documents of the task, ``x_b`` another
    document of its class) and an other-class document ``x_c`` are drawn; a fair coin gives
    ``y_t``. For ``y_t = +1`` the row is ``(a, b, c)`` (``x_t^1`` is the similar one), for ``y_t = -1``
    it is ``(a, c, b)``. So ``y_t * (S(x_t, x_t^1) - S(x_t, x_t^2)) >= 0`` is the target constraint.

    Parameters
    ----------
    y : array-like of shape (n,)
        Class labels.
    n_triplets : int
    seed : int, Generator or None
    tasks : array-like of shape (n,), optional
        Task of each document. When given, each triplet first draws a task uniformly, then the
        three documents inside that task (classes are compared within the task). Every task
        needs two classes and no single-document class.

    Returns
    -------
    triplets : ndarray (n_triplets, 3) int64
        Rows ``(x_t, x_t^1, x_t^2)`` as document indices.
    signs : ndarray (n_triplets,) int64 in {-1, +1}
    task_ids : ndarray (n_triplets,)
        The ``tasks`` value of each triplet (all 0 without tasks).
    """
    chunks = list(iter_omtrsl_triplets(y, n_triplets, seed, tasks, chunk_size))
    if not chunks:
        task_dtype = np.asarray(tasks).dtype if tasks is not None else np.int64
        return np.empty((0, 3), np.int64), np.empty(0, np.int64), np.empty(0, task_dtype)
    return (
        np.concatenate([c[0] for c in chunks]),
        np.concatenate([c[1] for c in chunks]),
        np.concatenate([c[2] for c in chunks]),
    )


def stratified_subsample(y, n, seed, min_per_class=5, exclude=None):
    """``n`` document indices drawn per class in proportion to the class sizes, at least
    ``min_per_class`` per class (or all of a smaller class), never from ``exclude``."""
    y = np.asarray(y)
    rng = np.random.default_rng(seed)
    available = np.ones(y.size, bool)
    if exclude is not None:
        available[np.asarray(exclude)] = False
    classes, counts_all = np.unique(y, return_counts=True)
    pools = [np.flatnonzero((y == c) & available) for c in classes]
    sizes = np.array([p.size for p in pools])
    want = np.maximum(np.round(n * counts_all / counts_all.sum()).astype(int), min_per_class)
    want = np.minimum(want, sizes)
    while want.sum() > n:  # trim the largest classes back to n
        k = int(np.argmax(want))
        if want[k] <= min_per_class:
            break
        want[k] -= 1
    while want.sum() < n and np.any(want < sizes):
        k = int(np.argmax(np.where(want < sizes, n * counts_all / counts_all.sum() - want, -np.inf)))
        want[k] += 1
    rows = [rng.choice(p, w, replace=False) for p, w in zip(pools, want) if w >= 2]
    return np.sort(np.concatenate(rows)).astype(np.int64)
