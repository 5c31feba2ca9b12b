"""The indexes' query stages for a few queries, in numpy: no compiled code on the path.

Why: the first call of a compiled (numba) kernel in a process imports numba and sets up its
compiler and type registries even when the kernel comes from the on-disk cache -- about 0.6 s of
CPU in all (``benchmarks/bench_index_load.py``, modes ``lazy`` and ``compiled``) -- while one
query needs a few thousand multiply-adds. A process that loads an index and answers a handful
of queries (``sparsesim query --index``, the first requests of a service) therefore answers
through these functions, and larger batches through the kernels of :mod:`.numba_kernels`.

Which path a query batch takes (:func:`take`): a batch of at most :data:`SMALL_BATCH` queries
takes this one while numba is not loaded in the process and fewer than :data:`COLD_QUERIES`
queries have taken it; then the compiled kernels take over (this path costs about 1.9 ms of CPU
per query against 0.35 ms for a kernel call, on a 10^5-document index), so a long-running
process pays numba's start-up once, after its first queries were answered, and a short one never.

Each function returns exactly what its kernel returns -- the same candidates and bit-identical
scores: every sum is formed in the kernel's order (``np.bincount`` adds its weights one by one,
in array order, like the kernel's loops), the products are formed in float64 like the kernel's,
and ties are broken the same way (higher score first, then lower document number).
``tests/test_small_batch.py`` compares the two on every query of a test corpus (ann with and
without Z, the dense stage and filler documents; exact with both strategies).
"""

from __future__ import annotations

import math
import sys

import numpy as np

from sparsesim.exceptions import FileFormatError

__all__ = ["SMALL_BATCH", "COLD_QUERIES", "take", "sparse_candidates", "rerank", "posting_scores", "expanded_scores"]

#: batches of at most this many queries may take the numpy path
SMALL_BATCH = 8
#: queries a process answers through the numpy path before it loads the compiled kernels
COLD_QUERIES = 64

_cold_left = [COLD_QUERIES]


def take(n_queries: int) -> bool:
    """Whether a batch of ``n_queries`` takes the numpy path (and counts it against the budget)."""
    if n_queries > SMALL_BATCH or _cold_left[0] < n_queries or "numba" in sys.modules:
        return False
    _cold_left[0] -= n_queries  # a race between threads only shifts when the kernels take over
    return True


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(starts[j], starts[j] + lengths[j])``, in order."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    offsets = np.cumsum(lengths) - lengths
    return np.repeat(np.asarray(starts, dtype=np.int64) - offsets, lengths) + np.arange(total, dtype=np.int64)


def _sums(bins: np.ndarray, weights: np.ndarray, minlength: int) -> np.ndarray:
    """``np.bincount(bins, weights, minlength)`` as float64 also when ``bins`` is empty (where
    numpy returns int64 zeros)."""
    return np.bincount(bins, weights=weights, minlength=minlength).astype(np.float64, copy=False)


def _best(docs: np.ndarray, vals: np.ndarray, k: int) -> np.ndarray:
    """Positions of the (up to) k best (docs, vals): higher value first, then lower document."""
    return np.lexsort((docs, -vals))[:k]


THRESHOLD = 2  # (the compact kernels' code for read_allocation="threshold")
_THRESHOLD_STEPS, _THRESHOLD_SLACK = 40, 32  # as compact_numba_kernels.THRESHOLD_STEPS / _SLACK


def threshold_reads(terms: np.ndarray, q: np.ndarray, P, limit: int) -> np.ndarray:
    """:func:`.compact_numba_kernels.threshold_reads` for one query over compact postings ``P``: the
    same search of the contribution threshold, the same products, so the same reads."""
    starts = np.asarray(P.indptr[terms], dtype=np.int64)
    budget = int(limit) * terms.size
    caps = np.minimum(np.asarray(P.indptr[terms + 1], dtype=np.int64) - starts, budget)
    total = int(caps.sum())
    if total <= budget:
        return caps
    a = np.abs(np.asarray(q, dtype=np.float64))
    contrib = np.repeat(a, caps) * P.values_at(_ranges(starts, caps), np.repeat(terms, caps))
    owner = np.repeat(np.arange(terms.size), caps)
    ends = np.cumsum(caps)[caps > 0]
    top = float(contrib[ends - caps[caps > 0]].max())
    if not top > 0.0:
        return np.zeros(terms.size, dtype=np.int64)
    tail = float(contrib[ends - 1].min())
    guesses = contrib[ends - caps[caps > 0] + np.minimum(caps[caps > 0], int(limit)) - 1]

    def counts(tau):
        return np.bincount(owner[contrib >= tau], minlength=terms.size).astype(np.int64)

    center = math.log(float(budget) * (1.0 - 0.5 / _THRESHOLD_SLACK))
    x_lo = math.log(tail) if tail > 0.0 else math.log(top) - 64.0
    x_hi = math.log(top) + 1e-9
    g_lo, g_hi = math.log(float(total)) - center, math.log(0.5) - center
    first = float(np.sort(guesses)[(guesses.size - 1) // 2])
    x = math.log(first) if first > 0.0 else 0.5 * (x_lo + x_hi)
    side, found, at_hi = 0, 0, np.zeros(terms.size, dtype=np.int64)
    for attempt in range(_THRESHOLD_STEPS):
        if attempt > 0 or not x_lo < x < x_hi:
            x = x_lo + (x_hi - x_lo) * (g_lo / (g_lo - g_hi)) if g_lo - g_hi > 0.0 else 0.5 * (x_lo + x_hi)
            if not (x_lo < x < x_hi):
                x = 0.5 * (x_lo + x_hi)
        c = counts(math.exp(x))
        count = int(c.sum())
        g = math.log(max(float(count), 0.5)) - center
        if count > budget:
            x_lo, g_lo = x, g
            if side == -1:
                g_hi *= 0.5
            side = -1
        else:
            x_hi, g_hi, at_hi = x, g, c
            found += count
            if count * _THRESHOLD_SLACK >= budget * (_THRESHOLD_SLACK - 1):
                break
            if side == 1:
                g_lo *= 0.5
            side = 1
    return at_hi if found else counts(top)


def read_limits(terms: np.ndarray, q: np.ndarray, P, limit: int, weighted) -> np.ndarray:
    """:func:`.numba_kernels.read_limits` for one query (``terms``, values ``q``): postings read per term
    (``P``: CSR postings or :class:`~sparsesim.indexes.ann_postings.CompactPostings`; ``weighted``:
    False / True for the uniform / weighted share, ``THRESHOLD`` for :func:`threshold_reads`,
    compact postings only)."""
    if weighted == THRESHOLD:  # (True / False compare as 1 / 0)
        return threshold_reads(terms, q, P, limit)
    starts = np.asarray(P.indptr[terms], dtype=np.int64)
    lengths = np.asarray(P.indptr[terms + 1], dtype=np.int64) - starts
    if not weighted:
        return np.minimum(lengths, limit)
    nonempty = lengths > 0
    if hasattr(P, "heads"):  # compact postings: the decoded heads, as the compact kernel decodes them
        heads = P.heads(terms)
    else:
        heads = np.zeros(terms.size)
        heads[nonempty] = P.data[starts[nonempty]].astype(np.float64)
    contrib = np.abs(np.asarray(q, dtype=np.float64)) * heads
    total = float(np.cumsum(contrib)[-1]) if contrib.size else 0.0  # sequential, as the kernel adds
    if not total > 0.0:
        return np.zeros(terms.size, dtype=np.int64)
    budget = np.float64(limit) * terms.size
    share = np.ceil(budget * contrib / total)
    return np.where(nonempty, np.minimum(share, lengths.astype(np.float64)), 0).astype(np.int64)


def sparse_candidates(Q, P, n_docs: int, limit: int, pool: int, weighted: bool = True) -> np.ndarray:
    """:func:`.numba_kernels.sparse_candidates` for CSR queries ``Q`` over impact-ordered postings ``P``
    (CSR, or :class:`~sparsesim.indexes.ann_postings.CompactPostings` as
    :func:`.compact_numba_kernels.compact_sparse_candidates` reads them).

    Returns an (n_queries, pool) int64 array of document numbers, best first, padded with -1.

    Raises
    ------
    FileFormatError
        Compact postings name a document outside the index.
    """
    compact = hasattr(P, "heads")
    out = np.full((Q.shape[0], pool), -1, dtype=np.int64)
    for r in range(Q.shape[0]):
        terms = Q.indices[Q.indptr[r]:Q.indptr[r + 1]].astype(np.int64)
        q = Q.data[Q.indptr[r]:Q.indptr[r + 1]]
        starts = np.asarray(P.indptr[terms], dtype=np.int64)
        lengths = read_limits(terms, q, P, limit, weighted)
        pos = _ranges(starts, lengths)
        if compact:
            docs = P.docs_at(pos)
            weights = np.repeat(np.asarray(q, np.float64), lengths) * P.values_at(pos, np.repeat(terms, lengths))
            if docs.size and (docs.min() < 0 or docs.max() >= n_docs):
                raise FileFormatError(f"the ann index's posting lists name documents outside [0, {n_docs})")
        else:
            docs = P.indices[pos]
            weights = np.repeat(q, lengths) * P.data[pos].astype(np.float64)
        touched, slot = np.unique(docs, return_inverse=True)
        acc = _sums(slot, weights, touched.size)
        best = _best(touched, acc, pool)
        out[r, :best.size] = touched[best]
    return out


def rerank(Q, W, identity: bool, heavy_pos: np.ndarray, Z: np.ndarray, X, cands: np.ndarray, k: int):
    """:func:`.numba_kernels.rerank`: exact bilinear scores of each query's candidates, and its top k.

    ``W`` is the model's W as a :class:`~sparsesim.indexes.ann_rerank_w.NarrowW` (M = W, plus I
    when ``identity``; a row's float64 entries are added after its main entries), ``Z`` the re-ranking table
    of the heavy rows (``heavy_pos[i]`` its column of row i, -1 for a light row), ``X`` the corpus;
    ``cands`` (n_queries, width) holds candidate documents (-1: none). Returns (docs, scores) of
    shape (n_queries, k), padded with -1 / -inf.
    """
    nq, n_docs, d = Q.shape[0], X.shape[0], W.n_features
    out_docs = np.full((nq, k), -1, dtype=np.int64)
    out_scores = np.full((nq, k), -np.inf)
    for r in range(nq):
        terms = Q.indices[Q.indptr[r]:Q.indptr[r + 1]].astype(np.int64)
        weights = np.asarray(Q.data[Q.indptr[r]:Q.indptr[r + 1]], dtype=np.float64)
        heavy = heavy_pos[terms] >= 0
        h_pos, h_val = heavy_pos[terms[heavy]], weights[heavy]
        # qm = q_light M, added term by term: row i of W, then (identity) q_i itself
        light, lw = terms[~heavy], weights[~heavy]
        starts = np.asarray(W.indptr[light], dtype=np.int64)
        lengths = np.asarray(W.indptr[light + 1], dtype=np.int64) - starts
        pos = _ranges(starts, lengths)
        targets = np.asarray(W.indices[pos], dtype=np.int64)
        contrib = np.repeat(lw, lengths) * np.asarray(W.data[pos], dtype=np.float64)
        # each term's row (main entries, then its float64 ones), then (identity) its own q_i
        r_starts = np.asarray(W.rest_ptr[light], dtype=np.int64)
        r_lengths = np.asarray(W.rest_ptr[light + 1], dtype=np.int64) - r_starts
        r_pos = np.asarray(W.rest_pos[_ranges(r_starts, r_lengths)], dtype=np.int64)
        parts_t = [targets, np.asarray(W.indices[r_pos], dtype=np.int64)]
        parts_c = [contrib, np.repeat(lw, r_lengths) * W.rest_val[_ranges(r_starts, r_lengths)]]
        term_of = [np.repeat(np.arange(light.size), lengths), np.repeat(np.arange(light.size), r_lengths)]
        if identity:
            parts_t.append(light)
            parts_c.append(lw)
            term_of.append(np.arange(light.size))
        order = np.argsort(np.concatenate(term_of), kind="stable")
        targets = np.concatenate(parts_t)[order]
        contrib = np.concatenate(parts_c)[order]
        qm = _sums(targets, contrib, d)
        # the distinct candidates, and documents 0, 1, ... when fewer than k exist
        docs = np.unique(cands[r][cands[r] >= 0])
        if docs.size < k:
            filler = np.setdiff1d(np.arange(min(n_docs, docs.size + k)), docs)[:k - docs.size]
            docs = np.concatenate([docs, filler])
        # S(q, c) = x_c . qm + sum over heavy terms of q_i Z[c, t(i)], summed in that order
        starts = np.asarray(X.indptr[docs], dtype=np.int64)
        lengths = np.asarray(X.indptr[docs + 1], dtype=np.int64) - starts
        pos = _ranges(starts, lengths)
        light_part = X.data[pos] * qm[X.indices[pos]]
        heavy_part = (np.asarray(Z[docs][:, h_pos], dtype=np.float64) * h_val).ravel()
        owner = np.concatenate([np.repeat(np.arange(docs.size), lengths), np.repeat(np.arange(docs.size), h_pos.size)])
        scores = _sums(owner, np.concatenate([light_part, heavy_part]), docs.size)
        best = _best(docs, scores, k)
        out_docs[r, :best.size] = docs[best]
        out_scores[r, :best.size] = scores[best]
    return out_docs, out_scores


def posting_scores(Q, P, n_docs: int) -> np.ndarray:
    """:func:`.numba_kernels.accumulate_postings` into zeros: (n_queries, n_docs) scores ``Q P`` over
    the exact index's posting lists ``P`` (features x documents, CSR)."""
    out = np.empty((Q.shape[0], n_docs))
    for r in range(Q.shape[0]):
        terms = Q.indices[Q.indptr[r]:Q.indptr[r + 1]].astype(np.int64)
        starts = np.asarray(P.indptr[terms], dtype=np.int64)
        lengths = np.asarray(P.indptr[terms + 1], dtype=np.int64) - starts
        pos = _ranges(starts, lengths)
        weights = np.repeat(Q.data[Q.indptr[r]:Q.indptr[r + 1]], lengths) * P.data[pos]
        out[r] = _sums(P.indices[pos], weights, n_docs)
    return out


def expanded_scores(Q, W, identity: bool, X) -> np.ndarray:
    """The exact index's ``"query"`` strategy: (n_queries, n_documents) scores X (Q M)^T, as
    :func:`.numba_kernels.rows_times_csr` (rows of W, in term order; then Q itself when ``identity``)
    followed by :func:`.numba_kernels.csr_times_dense` (each corpus row summed in its stored order)."""
    d = W.shape[1]
    out = np.empty((Q.shape[0], X.shape[0]))
    for r in range(Q.shape[0]):
        terms = Q.indices[Q.indptr[r]:Q.indptr[r + 1]].astype(np.int64)
        weights = np.asarray(Q.data[Q.indptr[r]:Q.indptr[r + 1]], dtype=np.float64)
        starts = np.asarray(W.indptr[terms], dtype=np.int64)
        lengths = np.asarray(W.indptr[terms + 1], dtype=np.int64) - starts
        pos = _ranges(starts, lengths)
        qm = _sums(W.indices[pos], np.repeat(weights, lengths) * W.data[pos], d)
        if identity:
            qm[terms] += weights
        out[r] = X @ qm  # scipy's CSR product sums each row from 0.0 in stored order, like the kernel
    return out
