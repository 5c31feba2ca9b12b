"""Compiled candidate generation over :class:`~sparsesim.indexes.ann_postings.CompactPostings`
(numba, ``nogil``): the loop of :func:`.numba_kernels.sparse_candidates` with the ids and scores
decoded as they are read (``floor + code * step`` in float64; ids from their 16 + 8 low bits or
int32). :func:`sparsesim.indexes.small_batch.compact_sparse_candidates` is the same arithmetic in
numpy.
"""

from __future__ import annotations

import math

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


#: ``allocation`` codes of the kernels (``AnnIndex.read_allocation``)
UNIFORM, WEIGHTED, THRESHOLD = 0, 1, 2
#: the threshold allocation's tries of a threshold at most, and when it stops early: once a
#: threshold's reads are within 1/32 of the budget (below it)
THRESHOLD_STEPS = 40
THRESHOLD_SLACK = 32
#: codes (one byte each) per cache line
CODES_LINE = 64


@numba.njit(cache=True, nogil=True, inline="always")
def _above(codes, start, n, a, f, s, tau, lo, hi):
    """The number of the first ``n`` entries of a list (at ``start``) whose contribution
    ``a * (f + code * s)`` is at least ``tau``, given that it lies in [lo, hi] (codes are
    non-increasing along a list; a file where they are not still gets a count in [lo, hi])."""
    while lo < hi:  # (selects, not branches: which way a probe goes is a coin toss to the CPU)
        mid = (lo + hi + 1) >> 1
        above = a * (f + np.float64(codes[start + mid - 1]) * s) >= tau
        lo, hi = (mid if above else lo), (hi if above else mid - 1)
    return lo


@numba.njit(cache=True, nogil=True, inline="always")
def _next_threshold(t_lo, t_hi, f_lo, f_hi):
    """The next (log) threshold to try: where the line through (t_lo, f_lo) and (t_hi, f_hi) (log
    reads minus the log of the aim, f_lo > 0 > f_hi) crosses zero, or the middle when that is not
    strictly inside."""
    mid = t_lo + (t_hi - t_lo) * (f_lo / (f_lo - f_hi)) if f_lo - f_hi > 0.0 else 0.5 * (t_lo + t_hi)
    if not (t_lo < mid < t_hi):
        mid = 0.5 * (t_lo + t_hi)
    return mid


@numba.njit(cache=True, nogil=True)
def threshold_reads(q_ptr, q_idx, q_val, p_ptr, codes, floor, step, r, limit, out, at_lo, at_hi):
    """Postings each term of query r reads under ``read_allocation="threshold"``: every list down
    to one contribution threshold tau, |q_i| * (decoded score) >= tau, with tau the smallest the
    search below finds whose reads stay within the budget of ``limit`` x (the query's terms).

    A list's entries are read in order of what they add to a document's partial score, across
    the query's lists: a list whose scores fall off slowly is read deeper than one with the same
    head that falls off fast (the weighted share reads both alike). Each list is capped at
    min(its length, the budget). The reads R(tau) fall off about as a power of tau, so tau is
    searched in log tau against log R: the first try is the lower median of the contributions
    at each list's ``limit``-th entry (the threshold that would read every list alike), then
    regula falsi with the Illinois halving between the smallest capped contribution and just
    above the largest, aimed at the middle of the accepted band (reads within
    1/``THRESHOLD_SLACK`` of the budget, below it): about 4 tries on the 10^5 synthetic corpus
    where a search on tau itself from 0 took 12, each a binary search per list. At most
    ``THRESHOLD_STEPS`` tries; each list's count is searched between its counts at the two ends
    of the interval (``at_lo``, ``at_hi``: scratch of the query's width). If no tried threshold
    reads anything (ties at the top above the budget), every list reads its entries equal to
    the largest contribution.
    :func:`sparsesim.indexes.small_batch.threshold_reads` is the same procedure in numpy.
    """
    lo, hi = q_ptr[r], q_ptr[r + 1]
    m = hi - lo
    budget = limit * m
    total = 0
    top = 0.0
    tail = np.inf
    guesses = np.empty(m, np.float64)
    n_guess = 0
    for p in range(lo, hi):
        i = q_idx[p]
        cap = min(p_ptr[i + 1] - p_ptr[i], budget)
        at_lo[p - lo] = cap
        at_hi[p - lo] = 0
        total += cap
        if cap > 0:
            a, f, s, start = abs(q_val[p]), np.float64(floor[i]), np.float64(step[i]), p_ptr[i]
            top = max(top, a * (f + np.float64(codes[start]) * s))
            tail = min(tail, a * (f + np.float64(codes[start + cap - 1]) * s))
            guesses[n_guess] = a * (f + np.float64(codes[start + min(cap, limit) - 1]) * s)
            n_guess += 1
    if total <= budget:
        for j in range(m):
            out[j] = at_lo[j]
        return
    if not top > 0.0:  # nothing adds to a score: nothing is read (as the weighted share does)
        for j in range(m):
            out[j] = 0
        return
    center = math.log(np.float64(budget) * (1.0 - 0.5 / THRESHOLD_SLACK))
    x_lo = math.log(tail) if tail > 0.0 else math.log(top) - 64.0
    x_hi = math.log(top) + 1e-9
    g_lo, g_hi = math.log(np.float64(total)) - center, math.log(0.5) - center
    first = np.sort(guesses[:n_guess])[(n_guess - 1) // 2]
    x = math.log(first) if first > 0.0 else 0.5 * (x_lo + x_hi)
    side = 0
    found = 0
    for attempt in range(THRESHOLD_STEPS):
        if attempt > 0 or not x_lo < x < x_hi:
            x = _next_threshold(x_lo, x_hi, g_lo, g_hi)
        tau = math.exp(x)
        count = 0
        for p in range(lo, hi):
            i = q_idx[p]
            out[p - lo] = _above(codes, p_ptr[i], at_lo[p - lo], abs(q_val[p]), np.float64(floor[i]),
                                 np.float64(step[i]), tau, at_hi[p - lo], at_lo[p - lo])
            count += out[p - lo]
        g = math.log(max(np.float64(count), 0.5)) - center
        if count > budget:
            x_lo, g_lo = x, g
            for j in range(m):
                at_lo[j] = out[j]
            if side == -1:
                g_hi *= 0.5
            side = -1
        else:
            x_hi, g_hi = x, g
            found += count
            for j in range(m):
                at_hi[j] = out[j]
            if count * THRESHOLD_SLACK >= budget * (THRESHOLD_SLACK - 1):
                break
            if side == 1:
                g_lo *= 0.5
            side = 1
    if found == 0:
        for p in range(lo, hi):
            i = q_idx[p]
            at_hi[p - lo] = _above(codes, p_ptr[i], at_lo[p - lo], abs(q_val[p]), np.float64(floor[i]),
                                   np.float64(step[i]), top, 0, at_lo[p - lo])
    for j in range(m):
        out[j] = at_hi[j]


@numba.njit(cache=True, nogil=True)
def compact_read_limits(q_ptr, q_idx, q_val, p_ptr, codes, floor, step, r, limit, weighted, out):
    """:func:`.numba_kernels.read_limits` over compact postings (heads decoded); ``weighted``:
    ``UNIFORM`` (or False), ``WEIGHTED`` (or True); ``THRESHOLD`` is :func:`threshold_reads`."""
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
    at_lo = np.empty(width if weighted == THRESHOLD else 0, np.int64)
    at_hi = np.empty(width if weighted == THRESHOLD else 0, np.int64)
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
            if weighted == THRESHOLD:
                # the threshold's search probes each list's budget-long prefix of codes (a byte
                # each) by binary search, one probe waiting on the last: asked for all at once
                end = start + min(p_ptr[q_idx[p] + 1] - start, limit * (hi - lo))
                for t in range(start + CODES_LINE, end, CODES_LINE):
                    prefetch(codes, t)
            if ids32.size:
                prefetch(ids32, start)
            else:
                prefetch(ids, start)
                if ids_hi.size:
                    prefetch(ids_hi, start)
        if weighted == THRESHOLD:
            threshold_reads(q_ptr, q_idx, q_val, p_ptr, codes, floor, step, r, limit, reads, at_lo, at_hi)
        else:
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
