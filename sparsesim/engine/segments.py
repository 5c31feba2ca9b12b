"""The compiled kernels of the row store's record pool (:mod:`sparsesim.engine.rowstore`): one
open-addressing segment per row, and the arena the segments come from.

A row i is ``rows[i] = (off, cap, used, live, shift, base)``: its segment is the pool slots
``[off, off + cap)``. A sparse row hashes column j to its home slot with the top ``64 - shift``
bits of a Fibonacci product and probes linearly inside the segment; a dense row (``shift = -1``)
holds d records indexed by j. Here: home slots and probes, inserting and removing, the load
limits, placing a row into a fresh segment, the pool's allocator (free lists of freed segments
by size, fresh slots at the top), planning and copying the moves of rows that fill, the
compaction that rebuilds every row, and the CSR export and import of the pool.

The kernels take the pool as its field views (``cols``, ``vals``, ``lasts``, ``auxs``) or, where
marked, as the record array itself (``key_at`` reads either)."""

from __future__ import annotations

import numba
import numpy as np

from . import store
from .primitives import U
from .store import GOLDEN, key_at, probe_segment, set_key_at

# the stores' free-slot markers, as int32 columns
EMPTY = np.int32(store.EMPTY)
TOMBSTONE = np.int32(store.TOMBSTONE)
MAX_LOAD = 0.7
REBUILD_LOAD = 0.45
MIN_CAP = 4
# columns of the row table; BASE: the step the row's stored SORS values are as of (rules.at_base)
OFF, CAP, USED, LIVE, SHIFT, BASE = 0, 1, 2, 3, 4, 5
N_ROW_FIELDS = 6
# pool state: first never-used slot, slots in freed segments, then the head of the free list of
# each segment size 2^k (state[FREE + k]; -1: empty)
TOP, GARBAGE, FREE = 0, 1, 2



@numba.njit(cache=True, inline="always")
def col_hash(j):
    """The 64-bit Fibonacci product of column j; a row of 2^b slots uses its top b bits."""
    return np.uint64(j) * GOLDEN


@numba.njit(cache=True, inline="always")
def home(rows, i, j, hj):
    """Home slot of column j (hash ``hj``) in row i's segment (its own slot, for a dense row)."""
    sh = rows[i, SHIFT]
    if sh < 0:
        return rows[i, OFF] + j
    return rows[i, OFF] + np.int64(hj >> np.uint64(sh))


@numba.njit(cache=True, inline="always")
def row_homes(rows, i, zi, zh, nz, homes, h):
    """:func:`home` of columns ``zi[:nz]`` (hashes ``zh``) in row i, into ``homes[h:h + nz]``; -1 for
    column i (the diagonal, kept dense beside the pool). One branch per row, none per entry, so
    the loop compiles to vector instructions."""
    off, sh = rows[i, OFF], rows[i, SHIFT]
    if sh < 0:
        for jj in range(nz):
            homes[h + jj] = -1 if zi[jj] == i else off + zi[jj]
    else:
        ush = np.uint64(sh)
        for jj in range(nz):
            homes[h + jj] = -1 if zi[jj] == i else off + np.int64(zh[jj] >> ush)


@numba.njit(cache=True, inline="always")
def probe(cols, rows, i, j, s):
    """Slot of (i, j) searched from its home slot ``s`` (>= 0), or ``-2 - f`` with ``f`` the first
    free slot on its probe path (where an insert may go while that slot stays free). A dense
    row answers the entry's own slot (its record there holds column j). ``cols``: the pool's
    columns, or its records.

    The home slot is tested first, with one branch (the slot holds another column or a
    tombstone); found or absent is then a select, not a branch (a coin flip to the branch
    predictor)."""
    k = key_at(cols, s)
    if k != j and k != EMPTY:
        return probe_segment(cols, j, s, rows[i, OFF], rows[i, CAP] - 1)
    return s if k == j else -2 - s


@numba.njit(cache=True, inline="always")
def remove_at(cols, rows, i, s):
    """Entry (i, j) at slot ``s`` is zero: a sparse row turns the slot into a tombstone (cached
    slots stay valid); a dense row keeps the zero record. ``cols``: the pool's columns, or its records."""
    if rows[i, SHIFT] >= 0:
        set_key_at(cols, s, TOMBSTONE)
        rows[i, LIVE] -= 1


@numba.njit(cache=True, inline="always")
def needs_room(rows, i, extra):
    """Sparse row i cannot take ``extra`` more inserts without passing its load limit."""
    return rows[i, SHIFT] >= 0 and rows[i, USED] + extra > rows[i, CAP] * MAX_LOAD


@numba.njit(cache=True)
def fitted_cap(live, d):
    """Segment size for ``live`` entries: the smallest power of two (>= MIN_CAP; x4 steps below
    64 slots) keeping the load at most REBUILD_LOAD, or d (a dense row) once that reaches d."""
    cap = MIN_CAP
    while cap * REBUILD_LOAD < live:
        cap *= 4 if cap < 64 else 2
    return d if cap >= d else cap


@numba.njit(cache=True)
def place_row(cols, vals, lasts, auxs, rows, i, d, off, cap, src_cols, src_vals, src_lasts, src_auxs, lo, hi,
              has_last, has_aux):
    """Write the records src[lo:hi] (free slots skipped) of row i into the fresh segment
    ``[off, off + cap)`` (cap == d: a dense row) and point row i at it."""
    dense = cap == d
    if dense:
        for s in range(off, off + cap):
            cols[U(s)] = s - off
            vals[U(s)] = 0.0
            if has_last:
                lasts[U(s)] = 0
            if has_aux:
                auxs[U(s)] = 0.0
        sh = -1
    else:
        for s in range(off, off + cap):
            cols[U(s)] = EMPTY
        sh = 64
        c = cap
        while c > 1:
            c >>= 1
            sh -= 1
    mask = cap - 1
    n = 0
    for q in range(lo, hi):
        j = src_cols[U(q)]
        if j < 0:
            continue
        if dense:
            t = off + j
        else:
            t = off + np.int64(col_hash(j) >> np.uint64(sh))
            while cols[U(t)] != EMPTY:
                t = off + ((t - off + 1) & mask)
            cols[U(t)] = j
        vals[U(t)] = src_vals[U(q)]
        if has_last:
            lasts[U(t)] = src_lasts[U(q)]
        if has_aux:
            auxs[U(t)] = src_auxs[U(q)]
        n += 1
    rows[i, OFF] = off
    rows[i, CAP] = cap
    rows[i, USED] = n
    rows[i, LIVE] = n
    rows[i, SHIFT] = sh


@numba.njit(cache=True, inline="always")
def log2_of(cap):
    b = 0
    while cap > 1:
        cap >>= 1
        b += 1
    return b


@numba.njit(cache=True)
def alloc(cols, state, cap, d):
    """Offset of a free segment of ``cap`` slots: a freed segment of that size if there is one,
    else fresh slots at the top; -1 when the pool has no room."""
    if cap != d:
        k = FREE + log2_of(cap)
        off = state[k]
        if off >= 0:  # pop: the next link is stored in the segment's first two col fields
            state[k] = (np.int64(cols[off]) | (np.int64(cols[off + 1]) << 31)) - 1
            state[GARBAGE] -= cap
            return off
    top = state[TOP]
    if top + cap > cols.shape[0]:
        return -1
    state[TOP] = top + cap
    return top


@numba.njit(cache=True)
def release(cols, state, off, cap, d):
    """Hand a segment no row uses any more to the free list of its size."""
    if cap < MIN_CAP or cap == d:
        state[GARBAGE] += cap  # (dense segments are only released by a compaction)
        return
    k = FREE + log2_of(cap)
    link = state[k] + 1
    cols[off] = np.int32(link & 0x7FFFFFFF)
    cols[off + 1] = np.int32(link >> 31)
    state[k] = off
    state[GARBAGE] += cap


@numba.njit(cache=True)
def plan_moves(cols, rows, state, indices, lo, hi, extra, d, plan):
    """Segments for every row ``indices[lo:hi]`` that cannot take ``extra`` more inserts, taken
    from the pool in row order: ``plan[k] = (new offset, new size, old offset, old size)`` for
    row ``indices[lo + k]`` (new offset -1: the row stays). False, with nothing taken, when the
    pool lacks the room.

    Moving a batch of rows in three steps (plan, then :func:`move_planned` for each row, then
    :func:`release_planned`) lets several threads copy their rows at once while the pool hands
    out the same segments whatever the thread count: a segment freed by this batch is reused
    from the next batch on."""
    for k in range(hi - lo):
        i = indices[lo + k]
        plan[k, 0] = -1
        if needs_room(rows, i, extra):
            cap = fitted_cap(rows[i, LIVE] + extra, d)
            off = alloc(cols, state, cap, d)
            if off < 0:
                for k2 in range(k):  # give back what this batch took
                    if plan[k2, 0] >= 0:
                        release(cols, state, plan[k2, 0], plan[k2, 1], d)
                        plan[k2, 0] = -1
                return False
            plan[k, 0], plan[k, 1], plan[k, 2], plan[k, 3] = off, cap, rows[i, OFF], rows[i, CAP]
    return True


@numba.njit(cache=True)
def move_planned(cols, vals, lasts, auxs, rows, i, d, plan, k, has_last, has_aux):
    """Copy row i into the segment ``plan[k]`` holds for it (nothing if none)."""
    if plan[k, 0] >= 0:
        place_row(cols, vals, lasts, auxs, rows, i, d, plan[k, 0], plan[k, 1], cols, vals, lasts, auxs, plan[k, 2],
                  plan[k, 2] + plan[k, 3], has_last, has_aux)


@numba.njit(cache=True)
def release_planned(cols, state, n, d, plan):
    """Hand the old segments of the moved rows of ``plan[:n]`` to the free lists, in row order."""
    for k in range(n):
        if plan[k, 0] >= 0 and plan[k, 3] > 0:
            release(cols, state, plan[k, 2], plan[k, 3], d)


@numba.njit(cache=True)
def fitted_sizes(vals, rows, d, keep_dense):
    """Segment size of every row rebuilt at a load of at most REBUILD_LOAD (0: an empty row).

    A dense row's ``LIVE`` is recounted as its nonzeros; it turns sparse again when its nonzeros
    fit a segment under d / 2 slots, unless ``keep_dense`` (its zero records hold state the
    learner keeps)."""
    n = rows.shape[0]
    caps = np.zeros(n, np.int64)
    for i in range(n):
        if rows[i, SHIFT] < 0:
            lo = rows[i, OFF]
            nonzero = 0
            for s in range(lo, lo + d):
                if vals[s] != 0.0:
                    nonzero += 1
            rows[i, LIVE] = nonzero
            if keep_dense:
                caps[i] = d
                continue
        if rows[i, LIVE] > 0:
            caps[i] = fitted_cap(rows[i, LIVE], d)
    return caps


@numba.njit(cache=True)
def compact_into(cols, vals, lasts, auxs, rows, caps, ncols, nvals, nlasts, nauxs, d, has_last, has_aux):
    """Rebuild every row into the fresh pool ``n*`` at the sizes ``caps``, in row order (a dense
    row turning sparse leaves its zero records behind). Returns the new pool's top."""
    top = 0
    for i in range(rows.shape[0]):
        cap = caps[i]
        lo, old_cap = rows[i, OFF], rows[i, CAP]
        if cap == 0:
            rows[i, OFF] = top
            rows[i, CAP] = 0
            rows[i, USED] = 0
            rows[i, LIVE] = 0
            rows[i, SHIFT] = 0
            continue
        if rows[i, SHIFT] < 0 and cap != d:
            for s in range(lo, lo + old_cap):
                if vals[s] == 0.0:
                    cols[s] = EMPTY
        place_row(ncols, nvals, nlasts, nauxs, rows, i, d, top, cap, cols, vals, lasts, auxs, lo, lo + old_cap,
                  has_last, has_aux)
        top += cap
    return top


@numba.njit(cache=True)
def csr_of(cols, vals, rows, d, diag, relabel, unlabel, identity):
    """CSR arrays (sorted columns) of the nonzero records plus the nonzero entries of ``diag``
    (an empty array for none), numbered as the caller's features: row and column f of the
    result are the store's ``relabel[f]`` (``unlabel`` its inverse; ``identity``: both are)."""
    counts = np.zeros(d + 1, np.int64)
    for i in range(d):
        r = relabel[i]
        lo = rows[r, OFF]
        for s in range(lo, lo + rows[r, CAP]):
            if cols[s] >= 0 and vals[s] != 0.0:
                counts[i + 1] += 1
        if diag.shape[0] and diag[r] != 0.0:
            counts[i + 1] += 1
    indptr = np.cumsum(counts)
    indices = np.empty(indptr[d], np.int32)
    data = np.empty(indptr[d], np.float64)
    for i in range(d):
        r = relabel[i]
        f = indptr[i]
        lo = rows[r, OFF]
        for s in range(lo, lo + rows[r, CAP]):
            if cols[s] >= 0 and vals[s] != 0.0:
                indices[f] = unlabel[cols[s]]
                data[f] = vals[s]
                f += 1
        with_diag = diag.shape[0] and diag[r] != 0.0
        if with_diag:
            indices[f] = i
            data[f] = diag[r]
            f += 1
        lo, hi = indptr[i], indptr[i + 1]
        # (a dense row of the identity numbering comes out sorted, bar the diagonal)
        if hi - lo > 1 and (rows[r, SHIFT] >= 0 or with_diag or not identity):
            order = np.argsort(indices[lo:hi])
            indices[lo:hi] = indices[lo:hi][order]
            data[lo:hi] = data[lo:hi][order]
    return indptr, indices, data


@numba.njit(cache=True)
def offdiag_counts(indptr, indices, data, d):
    """Off-diagonal nonzeros of each row of a CSR matrix."""
    k = np.zeros(d, np.int64)
    for i in range(d):
        for q in range(indptr[i], indptr[i + 1]):
            if indices[q] != i and data[q] != 0.0:
                k[i] += 1
    return k


@numba.njit(cache=True)
def load_rows(cols, vals, lasts, auxs, rows, state, indptr, indices, data, d, has_last, has_aux, relabel, unlabel):
    """Fill an empty pool with the off-diagonal nonzeros of a CSR matrix, one fitted segment per
    row (per-entry statistics at zero); row and column f of the matrix go to the store's
    ``relabel[f]`` (``unlabel``: its inverse)."""
    k = offdiag_counts(indptr, indices, data, d)
    top = 0
    src_l = np.zeros(1, np.int64)
    src_a = np.zeros(1)
    for r in range(d):
        i = unlabel[r]
        rows[r, OFF] = top
        if k[i] == 0:
            continue
        cap = fitted_cap(k[i], d)
        src_c = np.empty(k[i], np.int32)
        src_v = np.empty(k[i])
        n = 0
        for q in range(indptr[i], indptr[i + 1]):
            if indices[q] != i and data[q] != 0.0:
                src_c[n] = relabel[indices[q]]
                src_v[n] = data[q]
                n += 1
        place_row(cols, vals, lasts, auxs, rows, r, d, top, cap, src_c, src_v, src_l, src_a, 0, n, False, False)
        for s in range(top, top + cap):
            if has_last:
                lasts[s] = 0
            if has_aux:
                auxs[s] = 0.0
        top += cap
    state[TOP] = top
