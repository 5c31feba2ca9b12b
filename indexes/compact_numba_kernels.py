"""Compiled candidate generation over :class:`~sparsesim.indexes.ann_postings.CompactPostings`
(numba, ``nogil``): the loop of :func:`.numba_kernels.sparse_candidates` with the ids and scores
decoded as they are read (``floor + code * step`` in float64; ids from their 16 + 8 low bits or
int32). :func:`sparsesim.indexes.small_batch.compact_sparse_candidates` is the same arithmetic in
numpy.
"""

from __future__ import annotations

import numba
import numpy as np

from sparsesim.prefetch import prefetch

from .numba_kernels import add_run, keep_pool, run_buffers


@numba.njit(cache=True, nogil=True, inline="always")
def _doc(ids, ids_hi, ids32, t):
    if ids32.size:
        return np.int64(ids32[t])
    if ids_hi.size:
        return np.int64(ids[t]) | (np.int64(ids_hi[t]) << 16)
    return np.int64(ids[t])


@numba.njit(cache=True, nogil=True)
def compact_read_limits(q_ptr, q_idx, q_val, p_ptr, codes, floor, step, r, limit, weighted, out):
    """:func:`.numba_kernels.read_limits` over compact postings (heads decoded)."""
    lo, hi = q_ptr[r], q_ptr[r + 1]
    if not weighted:
        for p in range(lo, hi):
            i = q_idx[p]
            out[p - lo] = min(p_ptr[i + 1] - p_ptr[i], limit)
        return
    total = 0.0
    for p in range(lo, hi):
        i = q_idx[p]
        head = np.float64(floor[i]) + np.float64(codes[p_ptr[i]]) * np.float64(step[i]) \
            if p_ptr[i + 1] > p_ptr[i] else 0.0
        total += abs(q_val[p]) * head
    budget = np.float64(limit) * (hi - lo)
    for p in range(lo, hi):
        i = q_idx[p]
        length = p_ptr[i + 1] - p_ptr[i]
        if length == 0 or not total > 0.0:
            out[p - lo] = 0
            continue
        head = np.float64(floor[i]) + np.float64(codes[p_ptr[i]]) * np.float64(step[i])
        share = np.ceil(budget * (abs(q_val[p]) * head) / total)
        out[p - lo] = np.int64(min(share, np.float64(length)))


@numba.njit(cache=True, nogil=True)
def compact_sparse_candidates(q_ptr, q_idx, q_val, p_ptr, ids, ids_hi, ids32, codes, floor, step, n_docs, limit,
                              weighted, pool, out, acc, touched, vals):
    """:func:`.numba_kernels.sparse_candidates` over compact postings. Returns the number of postings
    read whose document is not below ``n_docs`` (a hostile file; they are skipped, the caller
    refuses the answer).

    Per query, in three passes whose memory reads overlap instead of stalling one by one: the
    list heads of every query term are asked for first (their offsets, then their first ids and
    codes), then the read prefixes are decoded into one flat run of (document, contribution),
    then the run is added up with the accumulator slot of the posting ``PREFETCH_AHEAD`` further
    on asked for in advance -- across list boundaries, which matters when a term reads a few
    dozen postings. The sums are the same, added in the same order."""
    width = 0
    for r in range(q_ptr.size - 1):
        width = max(width, q_ptr[r + 1] - q_ptr[r])
    reads = np.empty(width, np.int64)
    run_docs = np.empty(0, np.int64)
    run_vals = np.empty(0, np.float64)
    bad = 0
    for r in range(q_ptr.size - 1):
        lo, hi = q_ptr[r], q_ptr[r + 1]
        for p in range(lo, hi):
            i = q_idx[p]
            prefetch(p_ptr, i)
            prefetch(floor, i)
            prefetch(step, i)
        for p in range(lo, hi):
            start = p_ptr[q_idx[p]]
            prefetch(codes, start)
            if ids32.size:
                prefetch(ids32, start)
            else:
                prefetch(ids, start)
                if ids_hi.size:
                    prefetch(ids_hi, start)
        compact_read_limits(q_ptr, q_idx, q_val, p_ptr, codes, floor, step, r, limit, weighted, reads)
        run_docs, run_vals = run_buffers(reads, hi - lo, run_docs, run_vals)
        u = 0
        for p in range(lo, hi):
            i = q_idx[p]
            a = q_val[p]
            f = np.float64(floor[i])
            s = np.float64(step[i])
            start = p_ptr[i]
            for t in range(start, start + reads[p - lo]):
                doc = _doc(ids, ids_hi, ids32, t)
                if doc >= n_docs or doc < 0:
                    bad += 1
                    continue
                run_docs[u] = doc
                run_vals[u] = a * (f + np.float64(codes[t]) * s)
                u += 1
        m = add_run(acc, touched, run_docs, run_vals, u)
        keep_pool(acc, touched, vals, m, pool, out, r)
    return bad
