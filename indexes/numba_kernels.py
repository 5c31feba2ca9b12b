"""Compiled inner loops of the indexes (numba, ``nogil`` so joblib threads run them in parallel).

All kernels take CSR matrices as their three arrays (indptr, indices, data) and never densify a
corpus: dense buffers are at most (block of queries) x (features) or (block of documents) x
(block of queries).
"""

from __future__ import annotations

import numba
import numpy as np

from sparsesim.prefetch import prefetch


@numba.njit(cache=True, nogil=True)
def rows_times_csr_T(a_ptr, a_idx, a_val, b_ptr, b_idx, b_val, out_t):
    """``out_t[:, r] += (A[r] @ B)`` for every row r of A (B in CSR): out_t has shape (B.shape[1], A.shape[0]).

    With A = a block of queries and B = M this writes (Q M)^T, the layout the corpus kernel reads.
    """
    for r in range(a_ptr.size - 1):
        for p in range(a_ptr[r], a_ptr[r + 1]):
            j = a_idx[p]
            a = a_val[p]
            for t in range(b_ptr[j], b_ptr[j + 1]):
                out_t[b_idx[t], r] += a * b_val[t]


@numba.njit(cache=True, nogil=True)
def rows_times_csr(a_ptr, a_idx, a_val, b_ptr, b_idx, b_val, out):
    """``out[r, :] += A[r] @ B`` for every row r of A (B in CSR), out of shape (A.shape[0], B.shape[1])."""
    for r in range(a_ptr.size - 1):
        row = out[r]
        for p in range(a_ptr[r], a_ptr[r + 1]):
            j = a_idx[p]
            a = a_val[p]
            for t in range(b_ptr[j], b_ptr[j + 1]):
                row[b_idx[t]] += a * b_val[t]


@numba.njit(cache=True, nogil=True)
def csr_times_dense(x_ptr, x_idx, x_val, lo, hi, dense, out):
    """``out[i - lo, :] = X[i] @ dense`` for rows lo <= i < hi of X (CSR), dense of shape (d, b)."""
    b = dense.shape[1]
    for i in range(lo, hi):
        row = out[i - lo]
        for t in range(b):
            row[t] = 0.0
        for p in range(x_ptr[i], x_ptr[i + 1]):
            v = x_val[p]
            src = dense[x_idx[p]]
            for t in range(b):
                row[t] += v * src[t]


@numba.njit(cache=True, nogil=True)
def csr_T_times_dense(m_ptr, m_idx, m_val, dense, out):
    """``out = M^T @ dense`` for M in CSR (shape d x d'), dense of shape (d, k), out (d', k) zeroed."""
    k = dense.shape[1]
    for i in range(m_ptr.size - 1):
        src = dense[i]
        for p in range(m_ptr[i], m_ptr[i + 1]):
            dst = out[m_idx[p]]
            v = m_val[p]
            for t in range(k):
                dst[t] += v * src[t]


@numba.njit(cache=True, nogil=True)
def accumulate_postings(q_ptr, q_idx, q_val, p_ptr, p_idx, p_val, out):
    """``out[r, doc] += q_r[i] * P[i, doc]`` over the posting lists P (CSR, features x documents)."""
    for r in range(q_ptr.size - 1):
        row = out[r]
        for p in range(q_ptr[r], q_ptr[r + 1]):
            i = q_idx[p]
            a = q_val[p]
            for t in range(p_ptr[i], p_ptr[i + 1]):
                row[p_idx[t]] += a * p_val[t]


@numba.njit(cache=True, nogil=True, inline="always")
def _ranks_below(va, da, vb, db):
    """(va, da) ranks below (vb, db): a smaller value, or an equal value and a larger doc."""
    return va < vb or (va == vb and da > db)


@numba.njit(cache=True, nogil=True, inline="always")
def _heap_set(hv, hd, hi, pos, v, d, t):
    """Heap slot ``pos`` holds value ``v`` of document ``d``, the ``t``-th input."""
    hv[pos] = v
    hd[pos] = d
    hi[pos] = t


@numba.njit(cache=True, nogil=True)
def top_of(cands, vals, n, k):
    """Indices into cands[:n] of the (up to) k largest vals, best first (ties: smaller doc first).

    One pass with a min-heap of the k best so far (worst at the root): most entries lose to the
    root in one comparison, and nothing of length n is allocated. A partition-based selection
    over the whole pool took about half of the sparse stage (~4,500 touched documents per query
    on the synthetic 10^5 corpus)."""
    if k <= 0:
        return np.empty(0, np.int64)
    size = min(n, k)
    hv = np.empty(size, np.float64)
    hd = np.empty(size, np.int64)
    hi = np.empty(size, np.int64)
    for t in range(size):  # heapify by sifting up
        v = vals[t]
        d = cands[t]
        pos = t
        while pos > 0:
            parent = (pos - 1) >> 1
            if not _ranks_below(v, d, hv[parent], hd[parent]):
                break
            _heap_set(hv, hd, hi, pos, hv[parent], hd[parent], hi[parent])
            pos = parent
        _heap_set(hv, hd, hi, pos, v, d, t)
    for t in range(size, n):
        v = vals[t]
        if v < hv[0]:
            continue
        d = cands[t]
        if not _ranks_below(hv[0], hd[0], v, d):
            continue
        pos = 0  # replace the root and sift down
        while True:
            c = 2 * pos + 1
            if c >= size:
                break
            if c + 1 < size and _ranks_below(hv[c + 1], hd[c + 1], hv[c], hd[c]):
                c += 1
            if not _ranks_below(hv[c], hd[c], v, d):
                break
            _heap_set(hv, hd, hi, pos, hv[c], hd[c], hi[c])
            pos = c
        _heap_set(hv, hd, hi, pos, v, d, t)
    # best first: sort by (-value, doc): stable sort by doc, then stable sort by -value
    order = np.argsort(hd, kind="mergesort")
    order = order[np.argsort(-hv[order], kind="mergesort")]
    return hi[order]


@numba.njit(cache=True, nogil=True)
def read_limits(q_ptr, q_idx, q_val, p_ptr, p_val, r, limit, weighted, out):
    """Postings each term of query r reads from its impact-ordered list, into ``out[p - q_ptr[r]]``.

    Uniform: ``limit`` per term. Weighted: the query's budget of ``limit`` x (its terms) reads is
    shared in proportion to each term's largest possible contribution, |q_i| times the head of
    its list, rounded up (each list at most its length): lists whose entries could move the
    query's top are read deeper. At the same total reads this holds more of the exact top 10
    in the pool (synthetic 10^5, OASIS, pool 30, 64 reads per term on average: 0.991 of the
    top 10 against 0.968 read uniformly). :func:`sparsesim.indexes.small_batch.read_limits` is
    the same arithmetic in numpy (the same sums in the same order).
    """
    lo, hi = q_ptr[r], q_ptr[r + 1]
    if not weighted:
        for p in range(lo, hi):
            i = q_idx[p]
            out[p - lo] = min(p_ptr[i + 1] - p_ptr[i], limit)
        return
    total = 0.0
    for p in range(lo, hi):
        i = q_idx[p]
        head = np.float64(p_val[p_ptr[i]]) if p_ptr[i + 1] > p_ptr[i] else 0.0
        total += abs(q_val[p]) * head
    budget = np.float64(limit) * (hi - lo)
    for p in range(lo, hi):
        i = q_idx[p]
        length = p_ptr[i + 1] - p_ptr[i]
        if length == 0 or not total > 0.0:
            out[p - lo] = 0
            continue
        share = np.ceil(budget * (abs(q_val[p]) * np.float64(p_val[p_ptr[i]])) / total)
        out[p - lo] = np.int64(min(share, np.float64(length)))


# postings ahead whose accumulator slot is prefetched: the slots are random in an n-long array
# (8 MB at 10^6 documents); with the NaN sentinel below it cut the stage from 175 to 105 us per
# query (128 reads per term, 10^6 documents, random lists; distances 16-32: 119 us)
PREFETCH_AHEAD = 64


@numba.njit(cache=True, nogil=True)
def keep_pool(acc, touched, vals, m, pool, out, r):
    """Row ``r`` of ``out``: the ``pool`` documents of ``touched[:m]`` with the largest sums in
    ``acc`` (-1 where fewer), each sum read once and its slot reset to the NaN sentinel."""
    ahead = PREFETCH_AHEAD
    for t in range(m):  # one pass: read each sum and restore the sentinel
        if t + ahead < m:
            prefetch(acc, touched[t + ahead])
        doc = touched[t]
        vals[t] = acc[doc]
        acc[doc] = np.nan
    best = top_of(touched, vals, m, pool)
    for t in range(pool):
        out[r, t] = -1
    for t in range(best.size):
        out[r, t] = touched[best[t]]


@numba.njit(cache=True, nogil=True)
def sparse_candidates(q_ptr, q_idx, q_val, p_ptr, p_idx, p_val, limit, weighted, pool, out, acc, touched, vals):
    """Candidate generation over impact-ordered posting lists.

    For each query, accumulate q_i * P[i, doc] over the first postings of each query feature i
    (postings are stored largest value first; how many: :func:`read_limits`) and write the
    ``pool`` best documents to ``out[r]`` (padded with -1).

    ``acc`` (float64, all NaN: "not touched yet", so one random access per posting instead of a
    flag and a sum), ``touched`` (int64, n_documents + 1: every posting's document is written at
    the end of the list, kept only when new) and ``vals`` (float64, n_documents) are scratch
    owned by the caller (:class:`QueryScratch`); ``acc`` is left all NaN. At 10^6 documents,
    allocating and first-touching that scratch on every call cost more than a single query's
    search. A sum of finite products is never NaN (an overflow to inf and back to NaN would
    only list a document twice; re-ranking drops repeats).
    """
    width = 0
    for r in range(q_ptr.size - 1):
        width = max(width, q_ptr[r + 1] - q_ptr[r])
    reads = np.empty(width, np.int64)
    run_docs = np.empty(0, np.int64)
    run_vals = np.empty(0, np.float64)
    for r in range(q_ptr.size - 1):
        lo, hi = q_ptr[r], q_ptr[r + 1]
        for p in range(lo, hi):  # the list heads of every query term, asked for together
            prefetch(p_ptr, q_idx[p])
        for p in range(lo, hi):
            prefetch(p_idx, p_ptr[q_idx[p]])
            prefetch(p_val, p_ptr[q_idx[p]])
        read_limits(q_ptr, q_idx, q_val, p_ptr, p_val, r, limit, weighted, reads)
        run_docs, run_vals = run_buffers(reads, hi - lo, run_docs, run_vals)
        u = 0
        for p in range(lo, hi):
            a = q_val[p]
            start = p_ptr[q_idx[p]]
            for t in range(start, start + reads[p - lo]):
                run_docs[u] = p_idx[t]
                run_vals[u] = a * p_val[t]
                u += 1
        m = add_run(acc, touched, run_docs, run_vals, u)
        keep_pool(acc, touched, vals, m, pool, out, r)


@numba.njit(cache=True, nogil=True)
def run_buffers(reads, n, run_docs, run_vals):
    """``(run_docs, run_vals)``, new ones when they hold fewer than ``reads[:n].sum()`` entries."""
    total = 0
    for p in range(n):
        total += reads[p]
    if total > run_docs.size:
        return np.empty(total, np.int64), np.empty(total, np.float64)
    return run_docs, run_vals


@numba.njit(cache=True, nogil=True)
def add_run(acc, touched, run_docs, run_vals, u):
    """Add the contributions ``run_vals[:u]`` into ``acc`` at ``run_docs[:u]`` (NaN: not touched
    yet), listing each document's first appearance in ``touched``; returns how many were listed.

    The slot of the posting ``PREFETCH_AHEAD`` further on is asked for in advance, across the
    boundaries of the lists the run was read from."""
    ahead = PREFETCH_AHEAD
    for t in range(min(u, ahead)):
        prefetch(acc, run_docs[t])
    m = 0
    for t in range(u):
        if t + ahead < u:
            prefetch(acc, run_docs[t + ahead])
        doc = run_docs[t]
        v = acc[doc]
        # first posting of this document for this query: listed in touched. Without a branch:
        # new and seen documents alternate at random, a mispredicted branch each
        new = v != v
        touched[m] = doc
        m += 1 if new else 0
        acc[doc] = (0.0 if new else v) + run_vals[t]
    return m


# candidates whose rows of X and Z are asked for ahead of their scoring in :func:`rerank`
RERANK_LEAD = 8
# entries of a light row of W asked for ahead of the scatter in :func:`rerank`
SCATTER_AHEAD = 256


@numba.njit(cache=True, nogil=True, inline="always")
def _prefetch_candidate(c, x_ptr, x_idx, x_val, Z, h_pos, nh):
    for p in range(x_ptr[c], x_ptr[c + 1], 8):
        prefetch(x_idx, p)
        prefetch(x_val, p)
    zc = Z[c]
    for u in range(nh):
        prefetch(zc, h_pos[u])


@numba.njit(cache=True, nogil=True)
def rerank(q_ptr, q_idx, q_val, m_ptr, m_idx, m_val, r_ptr, r_pos, r_val, identity, heavy_pos, Z, x_ptr, x_idx,
           x_val, cands, k, out_docs, out_scores, qm, stamp, gen0):
    """Exact bilinear scores of each query's candidates and its top k.

    S(q, c) = sum_i q_i (M c)_i with M = W (+ I when ``identity``; (m_ptr, m_idx, m_val) is W in
    CSR, so no copy of I + W is needed at query time; its values may be float32 and its columns
    uint16, with the entries that are not float32 numbers apart: ``r_val[t]`` at position
    ``r_pos[t]`` of the CSR arrays, grouped by row by ``r_ptr``, where ``m_val`` holds 0 --
    :class:`sparsesim.indexes.ann_rerank_w.NarrowW`; every buffer entry receives one nonzero
    product per row in row order either way, so the scores do not depend on the form). For the "heavy" rows of M
    (``heavy_pos[i] = t >= 0``) the values (M c)_i are precomputed in ``Z[c, t]`` (the dense
    columns of Y = X M^T); the other ("light") rows are scattered into a dense buffer
    qm = q_light M and gathered per candidate.
    So S = x_c . qm + sum_{heavy i in q} q_i Z[c, t(i)], the exact score in float64.
    Candidates (-1 entries skipped) are deduplicated; when fewer than k distinct candidates
    exist, documents 0, 1, ... not yet in the pool are scored to fill it. Writes the k best
    (doc, score) pairs, best first.

    ``qm`` (n_features float64, all zero; left zero) and ``stamp`` (n_documents int64, every
    entry below ``gen0``) are the caller's scratch (:class:`QueryScratch`); query r of this call
    marks its candidates with ``gen0 + r``, so the caller advances ``gen0`` by the number of
    queries and never clears ``stamp``.
    """
    n_docs = x_ptr.size - 1
    width = cands.shape[1]
    docs = np.empty(width + k, np.int64)
    vals = np.empty(width + k, np.float64)
    max_q = 0
    for r in range(q_ptr.size - 1):
        max_q = max(max_q, q_ptr[r + 1] - q_ptr[r])
    h_pos = np.empty(max_q, np.int64)
    h_val = np.empty(max_q, np.float64)
    for r in range(q_ptr.size - 1):
        nh = 0
        for p in range(q_ptr[r], q_ptr[r + 1]):
            t = heavy_pos[q_idx[p]]
            if t >= 0:
                h_pos[nh] = t
                h_val[nh] = q_val[p]
                nh += 1
        m = 0
        for t in range(width):
            c = cands[r, t]
            if c < 0 or stamp[c] == gen0 + r:
                continue
            stamp[c] = gen0 + r
            docs[m] = c
            m += 1
        filler = 0
        while m < k and filler < n_docs:
            if stamp[filler] != gen0 + r:
                stamp[filler] = gen0 + r
                docs[m] = filler
                m += 1
            filler += 1
        # the candidates' rows of X and of Z are in memory, not in cache: the first RERANK_LEAD
        # are asked for now, so that their loads overlap the scatter below, and every later one
        # RERANK_LEAD candidates ahead of its scoring (asking for all of them here had the
        # scatter's traffic evict many before they were read)
        for t in range(min(m, RERANK_LEAD)):
            _prefetch_candidate(docs[t], x_ptr, x_idx, x_val, Z, h_pos, nh)
        # the light rows of W are random in memory and a few KB each: the first SCATTER_AHEAD
        # entries of every row are asked for together, and inside a row the entries
        # SCATTER_AHEAD further on as the scatter goes (the hardware's stream detection starts
        # late on rows this short)
        for p in range(q_ptr[r], q_ptr[r + 1]):
            i = q_idx[p]
            if heavy_pos[i] < 0:
                for t in range(m_ptr[i], min(m_ptr[i + 1], m_ptr[i] + SCATTER_AHEAD), 16):
                    prefetch(m_idx, t)
                    prefetch(m_val, t)
        light = 0
        for p in range(q_ptr[r], q_ptr[r + 1]):
            i = q_idx[p]
            if heavy_pos[i] >= 0:
                continue
            a = q_val[p]
            end = m_ptr[i + 1]
            light += end - m_ptr[i]
            for lo in range(m_ptr[i], end, 16):
                if lo + SCATTER_AHEAD < end:
                    prefetch(m_idx, lo + SCATTER_AHEAD)
                    prefetch(m_val, lo + SCATTER_AHEAD)
                for t in range(lo, min(lo + 16, end)):
                    qm[m_idx[t]] += a * m_val[t]
            for t in range(r_ptr[i], r_ptr[i + 1]):
                qm[m_idx[r_pos[t]]] += a * r_val[t]
            if identity:
                qm[i] += a
        for t in range(m):
            if t + RERANK_LEAD < m:
                _prefetch_candidate(docs[t + RERANK_LEAD], x_ptr, x_idx, x_val, Z, h_pos, nh)
            c = docs[t]
            s = 0.0
            for p in range(x_ptr[c], x_ptr[c + 1]):
                s += x_val[p] * qm[x_idx[p]]
            zc = Z[c]
            for u in range(nh):
                s += h_val[u] * zc[h_pos[u]]
            vals[t] = s
        best = top_of(docs, vals, m, k)
        for t in range(best.size):
            out_docs[r, t] = docs[best[t]]
            out_scores[r, t] = vals[best[t]]
        if light > qm.size // 4:  # cheaper to clear the whole buffer than to revisit the rows
            qm[:] = 0.0
        else:
            for p in range(q_ptr[r], q_ptr[r + 1]):
                i = q_idx[p]
                if heavy_pos[i] >= 0:
                    continue
                qm[i] = 0.0
                for t in range(m_ptr[i], m_ptr[i + 1]):
                    qm[m_idx[t]] = 0.0


@numba.njit(cache=True, nogil=True)
def _sift_down(vals, docs, size, pos):
    """Restore the min-heap property of (vals, docs)[:size] below ``pos``."""
    while True:
        left = 2 * pos + 1
        if left >= size:
            return
        child = left
        if left + 1 < size and vals[left + 1] < vals[left]:
            child = left + 1
        if vals[child] < vals[pos]:
            vals[pos], vals[child] = vals[child], vals[pos]
            docs[pos], docs[child] = docs[child], docs[pos]
            pos = child
        else:
            return


@numba.njit(cache=True, nogil=True)
def heaviest_update(Yb, doc0, f_lo, f_hi, heap_vals, heap_docs):
    """Keep, per feature i in [f_lo, f_hi), the largest positive values of column i seen so far.

    ``Yb`` holds dense rows (documents ``doc0``, ``doc0 + 1``, ...) of Y = X M^T; ``heap_vals[i]``
    / ``heap_docs[i]`` are min-heaps of capacity L initialised to (0, -1), so only positive values
    enter. Features are the outer loop: one heap stays in cache while the block's column is read.
    Every entry read is set back to zero, so the next block starts from a zero ``Yb`` without a
    separate pass over it (the block is larger than the cache: each pass is a trip to memory).
    """
    b = Yb.shape[0]
    L = heap_vals.shape[1]
    for i in range(f_lo, f_hi):
        hv = heap_vals[i]
        hd = heap_docs[i]
        for r in range(b):
            y = Yb[r, i]
            Yb[r, i] = 0.0
            if y > hv[0]:
                hv[0] = y
                hd[0] = doc0 + r
                _sift_down(hv, hd, L, 0)



@numba.njit(cache=True, nogil=True)
def count_columns(ptr, idx, skip, counts):
    """``counts[j] +=`` the entries of column j over the rows r of a CSR matrix with ``skip[r]`` False."""
    for r in range(ptr.size - 1):
        if skip[r]:
            continue
        for p in range(ptr[r], ptr[r + 1]):
            counts[idx[p]] += 1


@numba.njit(cache=True, nogil=True)
def fill_transpose(ptr, idx, val, skip, out_ptr, out_idx, out_val):
    """The transpose (CSR, rows sorted within each output row) of a CSR matrix without its rows
    r with ``skip[r]``, into ``out_*`` sized by :func:`count_columns` (one copy, no mask array)."""
    pos = out_ptr[:-1].copy()
    for r in range(ptr.size - 1):
        if skip[r]:
            continue
        for p in range(ptr[r], ptr[r + 1]):
            c = idx[p]
            q = pos[c]
            out_idx[q] = r
            out_val[q] = val[p]
            pos[c] = q + 1


@numba.njit(cache=True, nogil=True)
def heaps_to_postings(vals, docs, indptr, out_idx, out_val):
    """Impact-ordered lists (largest first; ties keep heap order) from per-feature heaps, skipping
    empty slots (doc -1); ``indptr`` counts the filled slots of each heap."""
    for i in range(vals.shape[0]):
        lo = indptr[i]
        if indptr[i + 1] == lo:
            continue
        order = np.argsort(-vals[i], kind="mergesort")
        t = 0
        for j in order:
            if docs[i, j] >= 0:
                out_idx[lo + t] = docs[i, j]
                out_val[lo + t] = vals[i, j]
                t += 1


@numba.njit(cache=True, nogil=True)
def columns_of_y(features, m_ptr, m_idx, m_val, identity, xt_ptr, xt_idx, xt_val, Y, B):
    """Row t of ``Y`` = column ``features[t]`` of Y = X M^T over all documents (M = I + W when
    ``identity``), and of ``B`` the same product of absolute values (the rounding bound), from
    the corpus's inverted lists X^T (``xt_*``) and the rows of W (``m_*``). Dense rows: no
    sorting, memory is the caller's block of features."""
    for t in range(features.size):
        i = features[t]
        y = Y[t]
        b = B[t]
        y[:] = 0.0
        b[:] = 0.0
        for p in range(m_ptr[i], m_ptr[i + 1]):
            j = m_idx[p]
            m = m_val[p]
            am = abs(m)
            for q in range(xt_ptr[j], xt_ptr[j + 1]):
                doc = xt_idx[q]
                v = xt_val[q]
                y[doc] += m * v
                b[doc] += am * abs(v)
        if identity:
            for q in range(xt_ptr[i], xt_ptr[i + 1]):
                doc = xt_idx[q]
                v = xt_val[q]
                y[doc] += v
                b[doc] += abs(v)
