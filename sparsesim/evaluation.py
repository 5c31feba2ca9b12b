"""Blockwise retrieval evaluation: every document queries all the others.

:func:`evaluate_retrieval` takes a score function ``score_fn(rows) -> (len(rows), n)`` dense
array (the similarity of query documents ``rows`` to all ``n`` documents of the corpus), so any
model (bilinear, dot product, cosine, an index) can be evaluated the same way. Queries are
processed ``block_size`` at a time: memory is O(block_size * n), which keeps 10^5 documents
feasible. Ties are broken deterministically by document index (lower index ranks first).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import scipy.sparse as sp

from .exceptions import InvalidInputError
from .metrics import check_k
from .validation import check_labels

__all__ = ["evaluate_retrieval", "relevant_ranks", "dot_scorer", "cosine_scorer"]

#: bytes of one block of dense scores (queries x documents) that ``evaluate_retrieval`` asks for
SCORE_BLOCK_BYTES = 256 << 20


def evaluate_retrieval(
    score_fn: Callable[[np.ndarray], np.ndarray],
    y,
    k: int = 10,
    block_size: int = 1024,
    exclude_self: bool = True,
    ks: Sequence[int] | None = None,
    query_rows=None,
    progress: Callable[[int, int], None] | None = None,
    no_relevant: str = "skip",
) -> dict:
    """MAP, AP@k and mAP@k of the rankings that ``score_fn`` induces.

    Each query document ranks all ``n`` corpus documents (itself excluded when
    ``exclude_self``) by decreasing score; relevant = same label as the query. See
    :mod:`sparsesim.metrics` for the definitions (and the paper lines they follow).

    Parameters
    ----------
    score_fn : callable
        ``score_fn(rows)`` with ``rows`` an int64 array of document indices returns a dense
        array of shape ``(len(rows), n)``: the similarity of each query to every document.
    y : array-like of shape (n,)
        Labels of the corpus documents.
    k : int, default 10
        Cut-off for AP@k and mAP@k.
    block_size : int, default 1024
        Queries scored per call of ``score_fn``; fewer when a block of dense scores
        (queries x documents, float64) would pass :data:`SCORE_BLOCK_BYTES`.
    exclude_self : bool, default True
        Drop the query itself from its ranking (query ``i`` is document ``i``).
    ks : sequence of int, optional
        Also return AP@k and mAP@k for each of these cut-offs (e.g. ``range(1, 11)``).
    query_rows : array-like of int, optional
        Evaluate only these queries (default: every document).
    progress : callable, optional
        Called as ``progress(done, total)`` once before the first block and after each block
        (blocks are then at most ~1% of the queries, at least 64).
    no_relevant : {"skip", "error"}, default "skip"
        What to do with a query whose class has no other document in the corpus (its average
        precision is undefined; e.g. a class with one test document after a split): ``"skip"``
        leaves it out of every average (counted in ``"n_skipped"``), ``"error"`` raises
        :class:`InvalidInputError`.

    Returns
    -------
    dict
        ``{"map": float, f"ap@{k}": float, f"map@{k}": float, f"map@{k}_hits": float, "k": k,
        "n_queries": int, "n_skipped": int}`` (``n_queries`` counts the evaluated queries;
        ``map@k`` is the papers' mAP@k, ``map@k_hits`` the hit-normalised one, see
        :mod:`sparsesim.metrics`), plus ``"curves": {"k": [...], "ap": [...], "map": [...],
        "map_hits": [...]}`` when ``ks`` is given.

    Raises
    ------
    InvalidInputError
        Fewer than two classes, a class with a single document, ``k`` larger than the number
        of documents a query can retrieve, scores of the wrong shape or non-finite scores.
    """
    y = np.asarray(y)
    n = y.shape[0] if y.ndim == 1 else -1
    y = check_labels(y, n)
    if no_relevant not in ("skip", "error"):
        raise InvalidInputError(f"no_relevant must be 'skip' or 'error', got {no_relevant!r}")
    n_rank = n - 1 if exclude_self else n
    k = check_k(k, n_rank)
    curve_ks = sorted({check_k(kk, n_rank) for kk in ks}) if ks is not None else []
    if query_rows is None:
        queries = np.arange(n, dtype=np.int64)
    else:
        queries = np.asarray(query_rows, dtype=np.int64).reshape(-1)
        if queries.size and (queries.min() < 0 or queries.max() >= n):
            raise InvalidInputError(f"query rows must lie in [0, {n}); got values outside")
    classes, codes, counts = np.unique(y, return_inverse=True, return_counts=True)
    codes = codes.reshape(-1)
    n_relevant = counts[codes[queries]] - (1 if exclude_self else 0)
    lonely = n_relevant < 1
    if lonely.any():
        if no_relevant == "error":
            shown = ", ".join(map(str, np.unique(y[queries[lonely]])[:5]))
            raise InvalidInputError(
                f"class(es) {shown} have a single document, so their queries have no relevant "
                "document; each class needs at least 2"
            )
        queries = queries[~lonely]
    n_skipped = int(lonely.sum())
    if queries.size == 0:
        raise InvalidInputError("no query documents to evaluate (none has a relevant document)")
    # each block is a dense (queries x n) score array: at 10^6 documents 1,024 rows would be 8 GiB
    block_size = max(1, min(int(block_size), SCORE_BLOCK_BYTES // (8 * max(n, 1))))
    if progress is not None:  # about 100 reports (blocks of at least 64 queries); the scores are the same
        block_size = min(block_size, max(64, -(-queries.size // 100)))
        progress(0, queries.size)
    kmax = max([k] + curve_ks)

    sum_ap = 0.0
    sum_p = np.zeros(kmax + 1)
    sum_apk = np.zeros(kmax + 1)
    sum_apk_hits = np.zeros(kmax + 1)
    cut_list = sorted(set([k] + curve_ks))
    for start in range(0, queries.size, block_size):
        rows = queries[start : start + block_size]
        scores = np.asarray(score_fn(rows))
        if scores.shape != (rows.size, n):
            raise InvalidInputError(
                f"score function returned shape {scores.shape}, expected ({rows.size}, {n})"
            )
        if not np.all(np.isfinite(scores)):
            raise InvalidInputError("score function returned NaN or infinite scores")
        for i, q in enumerate(rows):
            rk = relevant_ranks(scores[i], codes == codes[q], q if exclude_self else None)
            j = np.arange(1, rk.size + 1, dtype=np.float64)
            prec = j / rk
            sum_ap += float(prec.mean())
            for kk in cut_list:
                hits = int(np.searchsorted(rk, kk, side="right"))
                sum_p[kk] += hits / kk
                if hits:
                    top = float(prec[:hits].sum())
                    sum_apk[kk] += top / min(kk, rk.size)  # the papers' mAP@k
                    sum_apk_hits[kk] += top / hits  # mAP@k (hits)
        if progress is not None:
            progress(min(start + block_size, queries.size), queries.size)

    nq = float(queries.size)
    result = {
        "map": sum_ap / nq,
        f"ap@{k}": float(sum_p[k] / nq),
        f"map@{k}": float(sum_apk[k] / nq),
        f"map@{k}_hits": float(sum_apk_hits[k] / nq),
        "k": k,
        "n_queries": int(queries.size),
        "n_skipped": n_skipped,
    }
    if curve_ks:
        result["curves"] = {
            "k": list(curve_ks),
            "ap": [float(sum_p[kk] / nq) for kk in curve_ks],
            "map": [float(sum_apk[kk] / nq) for kk in curve_ks],
            "map_hits": [float(sum_apk_hits[kk] / nq) for kk in curve_ks],
        }
    return result


def relevant_ranks(scores, relevant, self_index=None, max_tied_values: int = 16) -> np.ndarray:
    """Sorted 1-based ranks of the relevant documents in the ranking of one query.

    The ranking orders documents by decreasing score, equal scores by increasing index, and
    leaves out ``self_index``. Only the relevant documents' ranks are computed:
    ``rank(r) = #{d: s_d > s_r} + #{d < r: s_d = s_r} + 1``, from one value sort of the row
    (several times faster than an index-stable argsort); rows with many distinct tied values
    fall back to the stable argsort. Every metric of :mod:`sparsesim.metrics` follows from
    these ranks: ``AP = mean_j j / rank_j``, hits in the top k = ``#{rank_j <= k}``.

    Parameters
    ----------
    scores : ndarray (n,), finite
    relevant : ndarray (n,) of bool
    self_index : int, optional
        Document excluded from the ranking (the query itself).
    """
    s = np.array(scores, dtype=np.float64)
    rel = np.array(relevant, dtype=bool)
    if self_index is not None:
        s[self_index] = -np.inf
        rel[self_index] = False
    ridx = np.flatnonzero(rel)
    if ridx.size == 0:
        return np.empty(0, dtype=np.float64)
    v = s[ridx]
    srt = np.sort(s)
    right = np.searchsorted(srt, v, side="right")
    left = np.searchsorted(srt, v, side="left")
    greater = s.size - right
    tied = (right - left) > 1
    equal_before = np.zeros(ridx.size, dtype=np.int64)
    if tied.any():
        values = np.unique(v[tied])
        if values.size > max_tied_values:
            order = np.argsort(-s, kind="stable")
            pos = np.empty(s.size, dtype=np.int64)
            pos[order] = np.arange(s.size)
            return np.sort(pos[ridx] + 1).astype(np.float64)
        for val in values:
            eq = s == val
            before = np.cumsum(eq) - eq
            sel = tied & (v == val)
            equal_before[sel] = before[ridx[sel]]
    return np.sort(greater + equal_before + 1).astype(np.float64)


def dot_scorer(X) -> Callable[[np.ndarray], np.ndarray]:
    """Score function of the plain dot product ``x_q . x`` over the rows of ``X`` (sparse or dense)."""
    XT = X.T.tocsr() if sp.issparse(X) else np.asarray(X).T

    def score(rows):
        out = X[rows] @ XT
        return out.toarray() if sp.issparse(out) else np.asarray(out)

    return score


def cosine_scorer(X) -> Callable[[np.ndarray], np.ndarray]:
    """Score function of the cosine similarity (rows L2-normalised first; zero rows stay zero)."""
    from sklearn.preprocessing import normalize

    return dot_scorer(normalize(X, norm="l2", copy=True))
