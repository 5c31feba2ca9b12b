"""Retrieval metrics on ranked relevance lists, and model sparsity.

Conventions: a *ranking* is a boolean array whose entry ``i`` says whether the document at
rank ``i + 1`` (best first) is relevant to the query (same class). Functions take a 2-D array
(one query per row) or a 1-D array (one query) and return per-query values; averaging over
queries gives the reported numbers.

Definitions
-----------
MAP (``papers/003`` line 354, standard IR definition): for one query with ``R`` relevant
documents in the full ranking, ``AP = (1/R) * sum_{i: rel_i} P@i`` where ``P@i`` is the precision
among the top ``i``; MAP is its mean over queries. This equals
``sklearn.metrics.average_precision_score`` when no scores are tied.

AP@k (``papers/001`` line 244: "the number of same-class instances among the top k instances
(the k nearest neighbors) is computed, and then averaged across test instances. This measure
is short named as AP"; ``papers/000`` line 233: "Among the top k instances, the percentage of
instances from the same class with the query instance can be computed, and then averaged over
all test instances [...] denoted by AP@k"): precision among the top ``k``, averaged over
queries.

mAP@k (``papers/000`` lines 233-237, ``papers/001`` line 244: "mean Average Precision at top k
[...] considers the number of instances whose classes are the same with the query instance,
as well as the ranking order of the retrieved instances"; the papers give no formula): average
precision cut off at ``k`` and divided by ``min(k, R)``, ``R`` the query's relevant documents in
the whole ranking: ``mAP@k = sum_{i<=k: rel_i} P@i / min(k, R)``, averaged over queries
(:func:`paper_map_at_k`; the ``map@k`` of every protocol). Both papers print mAP@10 below AP@10
in every row of their tables (e.g. ``papers/001`` Table 2, covtype PAAS 0.409 against 0.512);
this definition keeps it there whenever ``R >= k`` (each ``P@i <= 1``, so the sum is at most the
number of hits), and a perfect ranking scores 1.

mAP@k (hits) — sparsesim's earlier mAP@k, reported as ``map@k_hits``: the same sum divided by the
number of hits in the top ``k`` (:func:`average_precision_at_k`; 0 when there is none). It only
rewards the order of the hits, so a ranking with one relevant document at rank 1 and nine misses
scores 1; it lies above AP@k whenever some hit is followed by a miss.
"""

from __future__ import annotations

import numpy as np

from .exceptions import InvalidInputError

__all__ = [
    "rank_by_score",
    "average_precision",
    "precision_at_k",
    "average_precision_at_k",
    "paper_map_at_k",
    "mean_average_precision",
    "sparsity",
]


def _as_2d_bool(relevance) -> tuple[np.ndarray, bool]:
    rel = np.asarray(relevance)
    single = rel.ndim == 1
    if single:
        rel = rel[None, :]
    if rel.ndim != 2:
        raise InvalidInputError(f"relevance must be 1-D or 2-D, got shape {rel.shape}")
    return rel.astype(bool, copy=False), single


def _out(values: np.ndarray, single: bool):
    return float(values[0]) if single else values


def rank_by_score(scores, exclude=None) -> np.ndarray:
    """Indices of documents by decreasing score; ties broken by increasing document index.

    Parameters
    ----------
    scores : ndarray (n,) or (b, n)
        Finite scores.
    exclude : int or array of int, optional
        For 2-D scores, one document per row (e.g. the query itself) to drop from the ranking.

    Returns
    -------
    ndarray of int64, shape (n,) / (b, n) or (b, n - 1) with ``exclude``.
    """
    s = np.asarray(scores, dtype=np.float64)
    single = s.ndim == 1
    if single:
        s = s[None, :]
    if not np.all(np.isfinite(s)):
        raise InvalidInputError("scores contain NaN or infinite values")
    if exclude is not None:
        s = s.copy()
        ex = np.broadcast_to(np.asarray(exclude, dtype=np.int64), (s.shape[0],))
        s[np.arange(s.shape[0]), ex] = -np.inf
    # stable sort of the negated scores keeps equal scores in index order
    order = np.argsort(-s, axis=1, kind="stable")
    if exclude is not None:
        order = order[:, :-1]
    return order[0] if single else order


def average_precision(relevance):
    """Average precision of full rankings: ``(1/R) sum_{i: rel_i} P@i`` (0 when ``R = 0``).

    Parameters
    ----------
    relevance : array-like of bool, shape (n,) or (b, n)
        Relevance of the ranked documents, best first.
    """
    rel, single = _as_2d_bool(relevance)
    hits = np.cumsum(rel, axis=1, dtype=np.float64)
    ranks = np.arange(1, rel.shape[1] + 1, dtype=np.float64)
    total = hits[:, -1] if rel.shape[1] else np.zeros(rel.shape[0])
    contrib = np.where(rel, hits / ranks, 0.0).sum(axis=1)
    ap = np.divide(contrib, total, out=np.zeros_like(contrib), where=total > 0)
    return _out(ap, single)


def precision_at_k(relevance, k: int):
    """Precision among the top ``k`` (the papers' "AP@k" per query)."""
    rel, single = _as_2d_bool(relevance)
    k = check_k(k, rel.shape[1])
    return _out(rel[:, :k].sum(axis=1) / float(k), single)


def average_precision_at_k(relevance, k: int):
    """mAP@k (hits), ``map@k_hits`` of the protocols: average precision cut off at ``k`` and divided
    by the hits in the top ``k``, ``sum_{i<=k: rel_i} P@i / #{i<=k: rel_i}`` (0 if no hit).

    Examples
    --------
    >>> average_precision_at_k([1, 0, 1, 0], 3)  # (1/1 + 2/3) / 2
    0.8333333333333333
    >>> average_precision_at_k([1, 0, 0, 0], 3)  # one hit, at rank 1
    1.0
    """
    rel, single = _as_2d_bool(relevance)
    k = check_k(k, rel.shape[1])
    top = rel[:, :k]
    hits = np.cumsum(top, axis=1, dtype=np.float64)
    ranks = np.arange(1, k + 1, dtype=np.float64)
    contrib = np.where(top, hits / ranks, 0.0).sum(axis=1)
    n_hit = hits[:, -1]
    return _out(np.divide(contrib, n_hit, out=np.zeros_like(contrib), where=n_hit > 0), single)


def paper_map_at_k(relevance, k: int, n_relevant=None):
    """The papers' mAP@k per query: ``sum_{i<=k: rel_i} P@i / min(k, R)`` (0 when ``R = 0``).

    Parameters
    ----------
    relevance : array-like of bool, shape (n,) or (b, n)
        Relevance of the ranked documents, best first.
    k : int
    n_relevant : int or array of int, optional
        ``R``, the relevant documents of each query in the whole ranking (default: counted in
        ``relevance``, which then must be the whole ranking).

    Examples
    --------
    >>> paper_map_at_k([1, 0, 1, 0], 2)      # (1/1) / min(2, 2)
    0.5
    >>> paper_map_at_k([1, 0, 1, 0], 3)      # (1/1 + 2/3) / min(3, 2)
    0.8333333333333333
    """
    rel, single = _as_2d_bool(relevance)
    k = check_k(k, rel.shape[1])
    top = rel[:, :k]
    hits = np.cumsum(top, axis=1, dtype=np.float64)
    ranks = np.arange(1, k + 1, dtype=np.float64)
    contrib = np.where(top, hits / ranks, 0.0).sum(axis=1)
    R = rel.sum(axis=1) if n_relevant is None else np.broadcast_to(np.asarray(n_relevant, dtype=np.float64),
                                                                       (rel.shape[0],))
    denom = np.minimum(float(k), np.asarray(R, dtype=np.float64))
    return _out(np.divide(contrib, denom, out=np.zeros_like(contrib), where=denom > 0), single)


def mean_average_precision(relevance) -> float:
    """MAP: the mean of :func:`average_precision` over the rows of ``relevance``."""
    rel, _ = _as_2d_bool(relevance)
    return float(np.mean(average_precision(rel))) if rel.shape[0] else 0.0


def check_k(k, n: int) -> int:
    try:
        k = int(k)
    except (TypeError, ValueError):
        raise InvalidInputError(f"k must be an integer, got {k!r}") from None
    if k < 1:
        raise InvalidInputError(f"k must be at least 1, got {k}")
    if k > n:
        raise InvalidInputError(f"k = {k} is larger than the {n} documents each query can retrieve")
    return k


def sparsity(nnz: int, d: int) -> float:
    """Model sparsity ``1 - nnz(M) / d^2`` (``papers/003`` Table II reports it in %).

    Parameters
    ----------
    nnz : int
        Number of non-zero entries of the d x d similarity matrix M (count the identity's
        diagonal if M = I + W).
    d : int
        Dimension.
    """
    d = int(d)
    nnz = int(nnz)
    if d < 1:
        raise InvalidInputError(f"dimension must be positive, got {d}")
    if nnz < 0 or nnz > d * d:
        raise InvalidInputError(f"nnz = {nnz} is outside [0, d^2 = {d * d}]")
    return 1.0 - nnz / float(d * d)
