"""A compiled sparse store for a d x d matrix that keeps the entries of one row together.

Each row i owns one segment of a shared record pool (an arena): ``rows[i] = (off, cap, used,
live, shift)``. A sparse row is an open-addressing hash table of ``cap`` slots (a power of two)
keyed by the column j alone (home slot: Fibonacci hash of j, top bits; linear probing inside
the segment). A row whose table would reach d slots becomes a dense row instead: d records
indexed directly by j (``shift = -1``), no hashing and no probing, and no more memory than the
hash segment it replaces, so memory still follows nnz(M). Under Zipf feature frequencies the
rows of the frequent features, which take part in most updates, are the ones that turn dense.

Why rows: an update x (x+ - x-)^T reads and writes the entries (i, j) for i in x and j in z.
With one global hash table every entry is a random access into the whole store; with one
segment per row the ~nnz(z) accesses of row i land in one segment (a few KiB for most rows),
so they share cache lines and pages, and the column part of the hash is computed once per
update instead of once per entry.

A record holds ``col`` (int32; ``EMPTY``/``TOMBSTONE`` mark free slots), ``val`` and, for the
lazy learners, ``last`` and ``aux`` (see :mod:`sparsesim.engine.store`, whose field layouts
this shares). Rows grow by moving to a larger segment (x4 while small, x2 when large); the old
segment goes to a free list of its size for the next row that needs one. When neither a free
segment nor fresh slots remain, the pool is compacted: every row is rebuilt at a load of at
most ``REBUILD_LOAD`` into a fresh pool with room to grow. The pool is allocated
without touching its pages, so resident memory follows the used part.

The diagonal lives in dense length-d arrays beside the pool, as in the hash store.
"""

from __future__ import annotations

import numba
import numpy as np
import scipy.sparse as sp
from numba.core import types
from numba.extending import overload

from . import store
from .store import COMPACT_FIELDS_BY_LAYOUT, FIELDS_BY_LAYOUT, GOLDEN, DiagonalStore, key_at, probe_segment, set_key_at

# the stores' free-slot markers, as int32 columns
EMPTY = np.int32(store.EMPTY)
TOMBSTONE = np.int32(store.TOMBSTONE)
MAX_LOAD = 0.7
REBUILD_LOAD = 0.45
MIN_CAP = 4
# columns of the row table
OFF, CAP, USED, LIVE, SHIFT = 0, 1, 2, 3, 4
# pool state: first never-used slot, slots in freed segments, then the head of the free list of
# each segment size 2^k (state[FREE + k]; -1: empty)
TOP, GARBAGE, FREE = 0, 1, 2


def record_dtype(layout: str, compact: bool) -> np.dtype:
    """Record of one entry: the hash store's fields with an int32 column in place of the key."""
    fields = (COMPACT_FIELDS_BY_LAYOUT if compact else FIELDS_BY_LAYOUT)[layout]
    return np.dtype([("col", np.int32)] + [f for f in fields if f[0] != "key"])


def field(table, s, name, default):
    """``table[s][name]`` of the pool's records as float64 or int64 (arithmetic is float64 whatever
    is stored), or ``default`` where the layout has no field ``name`` (``"last"`` of OASIS's
    records, ``"aux"`` of SORS's): one update loop compiles for every layout, each with its
    record size and field offsets as constants (compiled code only)."""
    raise NotImplementedError("field is for compiled code")


def set_field(table, s, name, value):
    """``table[s][name] = value``; nothing where the layout has no field ``name`` (see :func:`field`)."""
    raise NotImplementedError("set_field is for compiled code")


@overload(field, inline="always")
def _field(table, s, name, default):
    if not isinstance(name, types.StringLiteral):
        return None  # (numba retries with the field name as a literal)
    f = name.literal_value
    if f not in table.dtype.fields:
        return lambda table, s, name, default: default
    if isinstance(table.dtype.typeof(f), types.Float):
        return lambda table, s, name, default: np.float64(table[s][f])
    return lambda table, s, name, default: np.int64(table[s][f])


@overload(set_field, inline="always")
def _set_field(table, s, name, value):
    if not isinstance(name, types.StringLiteral):
        return None
    f = name.literal_value
    if f in table.dtype.fields:
        def store_value(table, s, name, value):
            table[s][f] = value
        return store_value
    return lambda table, s, name, value: None


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
            cols[s] = s - off
            vals[s] = 0.0
            if has_last:
                lasts[s] = 0
            if has_aux:
                auxs[s] = 0.0
        sh = -1
    else:
        for s in range(off, off + cap):
            cols[s] = EMPTY
        sh = 64
        c = cap
        while c > 1:
            c >>= 1
            sh -= 1
    mask = cap - 1
    n = 0
    for q in range(lo, hi):
        j = src_cols[q]
        if j < 0:
            continue
        if dense:
            t = off + j
        else:
            t = off + np.int64(col_hash(j) >> np.uint64(sh))
            while cols[t] != EMPTY:
                t = off + ((t - off + 1) & mask)
            cols[t] = j
        vals[t] = src_vals[q]
        if has_last:
            lasts[t] = src_lasts[q]
        if has_aux:
            auxs[t] = src_auxs[q]
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
def _csr_of(cols, vals, rows, d, diag):
    """CSR arrays (sorted columns) of the nonzero records plus the nonzero entries of ``diag``
    (an empty array for none)."""
    counts = np.zeros(d + 1, np.int64)
    for i in range(d):
        lo = rows[i, OFF]
        for s in range(lo, lo + rows[i, CAP]):
            if cols[s] >= 0 and vals[s] != 0.0:
                counts[i + 1] += 1
        if diag.shape[0] and diag[i] != 0.0:
            counts[i + 1] += 1
    indptr = np.cumsum(counts)
    indices = np.empty(indptr[d], np.int32)
    data = np.empty(indptr[d], np.float64)
    for i in range(d):
        f = indptr[i]
        lo = rows[i, OFF]
        for s in range(lo, lo + rows[i, CAP]):
            if cols[s] >= 0 and vals[s] != 0.0:
                indices[f] = cols[s]
                data[f] = vals[s]
                f += 1
        if diag.shape[0] and diag[i] != 0.0:
            indices[f] = i
            data[f] = diag[i]
            f += 1
        lo, hi = indptr[i], indptr[i + 1]
        if hi - lo > 1 and rows[i, SHIFT] >= 0:  # dense rows come out sorted (bar the diagonal)
            order = np.argsort(indices[lo:hi])
            indices[lo:hi] = indices[lo:hi][order]
            data[lo:hi] = data[lo:hi][order]
        elif hi - lo > 1 and diag.shape[0] and diag[i] != 0.0:
            order = np.argsort(indices[lo:hi])
            indices[lo:hi] = indices[lo:hi][order]
            data[lo:hi] = data[lo:hi][order]
    return indptr, indices, data


@numba.njit(cache=True)
def _offdiag_counts(indptr, indices, data, d):
    """Off-diagonal nonzeros of each row of a CSR matrix."""
    k = np.zeros(d, np.int64)
    for i in range(d):
        for q in range(indptr[i], indptr[i + 1]):
            if indices[q] != i and data[q] != 0.0:
                k[i] += 1
    return k


@numba.njit(cache=True)
def _load_rows(cols, vals, lasts, auxs, rows, state, indptr, indices, data, d, has_last, has_aux):
    """Fill an empty pool with the off-diagonal nonzeros of a CSR matrix, one fitted segment per
    row (per-entry statistics at zero)."""
    k = _offdiag_counts(indptr, indices, data, d)
    top = 0
    src_l = np.zeros(1, np.int64)
    src_a = np.zeros(1)
    for i in range(d):
        rows[i, OFF] = top
        if k[i] == 0:
            continue
        cap = fitted_cap(k[i], d)
        src_c = np.empty(k[i], np.int32)
        src_v = np.empty(k[i])
        n = 0
        for q in range(indptr[i], indptr[i + 1]):
            if indices[q] != i and data[q] != 0.0:
                src_c[n] = indices[q]
                src_v[n] = data[q]
                n += 1
        place_row(cols, vals, lasts, auxs, rows, i, d, top, cap, src_c, src_v, src_l, src_a, 0, n, False, False)
        for s in range(top, top + cap):
            if has_last:
                lasts[s] = 0
            if has_aux:
                auxs[s] = 0.0
        top += cap
    state[TOP] = top


def planned_slots(mean_row_nnz: float, n_triplets: int, d: int) -> int:
    """Pool slots a run of ``n_triplets`` updates may use on rows of ``mean_row_nnz`` nonzeros.

    An update touches about r x 2r entries (r nonzeros of x, 2r of z = x+ - x-), so a run
    touches at most ``n_triplets * 2 r^2`` distinct entries, and never more than d(d - 1).
    Segments are kept between MAX_LOAD / 2 and MAX_LOAD full and moved rows leave freed
    segments behind, hence three slots per entry (at most two dense rows' worth per row)."""
    entries = min(float(n_triplets) * 2.0 * float(mean_row_nnz) ** 2, float(d) * (d - 1))
    return int(min(3.0 * entries, 2.0 * float(d) * d))


class RowStore(DiagonalStore):
    """Off-diagonal entries of a d x d matrix, one segment per row, plus the dense diagonal.

    Parameters
    ----------
    d, layout, diag_init : int, str, float
        As in :class:`~sparsesim.engine.store.DiagonalStore`.
    initial_capacity : int
        Pool slots to allocate ahead.
    compact : bool
        float32 values and statistics, int32 step counters (8 / 12 / 16 bytes per record
        instead of 12 / 20 / 28).
    """

    record_dtype = staticmethod(record_dtype)

    def __init__(self, d: int, layout: str = "plain", diag_init: float = 1.0, initial_capacity: int = 1 << 16,
                 compact: bool = False):
        super().__init__(d, layout, diag_init, compact)
        self.table = np.empty(max(MIN_CAP, int(initial_capacity)), dtype=self.dtype)  # pages untouched until used
        self.rows = np.zeros((self.d, 5), np.int64)
        self.state = np.full(FREE + 64, -1, np.int64)
        self.state[TOP] = 0
        self.state[GARBAGE] = 0

    @property
    def capacity(self) -> int:
        """Pool slots allocated."""
        return self.table.shape[0]

    @property
    def n_dense_rows(self) -> int:
        return int(np.count_nonzero(self.rows[:, SHIFT] < 0))

    @property
    def n_entries(self) -> int:
        """Off-diagonal records held: the live entries of sparse rows plus d per dense row."""
        dense = self.rows[:, SHIFT] < 0
        return int(self.rows[~dense, LIVE].sum()) + self.d * int(np.count_nonzero(dense))

    @property
    def used_slots(self) -> int:
        """Pool slots handed out to rows so far (live segments and garbage)."""
        return int(self.state[TOP])

    @property
    def nbytes(self) -> int:
        """Bytes allocated: the whole pool (untouched headroom included) and the row and diagonal arrays."""
        return self.table.nbytes + self.rows.nbytes + self.diag_nbytes

    @property
    def held_nbytes(self) -> int:
        """Bytes in use: the pool's slots handed out to rows so far (live segments and garbage)
        plus the row and diagonal arrays. The rest of the pool is address space whose pages
        are not touched until rows move into it."""
        return self.nbytes - (self.capacity - self.used_slots) * self.dtype.itemsize

    def __getstate__(self) -> dict:
        """Pickle (a learner's state returned by a worker process) only the slots handed out:
        the untouched rest of a reserved pool is not data, and copying it would write every
        page of it. The pool grows again, by one copy, when the unpickled store needs room."""
        state = self.__dict__.copy()
        state["table"] = self.table[:max(MIN_CAP, self.used_slots)]
        state["_pool_capacity"] = self.capacity
        return state

    def __setstate__(self, state: dict) -> None:
        """The pool comes back at its pickled capacity (untouched address space past the used
        slots): when the pool fills up decides when it is compacted, which AdaSORS's model
        depends on, so a learner continued in a worker learns what it would have here."""
        capacity = state.pop("_pool_capacity", None)
        super().__setstate__(state)
        if capacity is not None and capacity > len(self.table):
            table = np.empty(capacity, dtype=self.table.dtype)
            table[:len(self.table)] = self.table
            self.table = table

    def reserve(self, slots: int) -> int:
        """Allocate an empty pool of ``slots`` slots up front so that it need not grow (a pool
        grows by copying, and its copies took 20-50% of a SORS-I run). Only pages rows move
        into are ever touched, so resident memory still follows the used part. Halves the
        request while the system refuses the address space; does nothing once rows hold
        slots or when the pool is already that large. Returns the pool's capacity."""
        slots = int(slots)
        if self.used_slots == 0:
            while slots > self.capacity:
                try:
                    self.table = np.empty(slots, dtype=self.dtype)
                    break
                except MemoryError:
                    slots //= 2
        return self.capacity

    def views(self, table=None):
        """(col, val, last, aux) views of the pool, in the order the kernels take them."""
        table = self.table if table is None else table
        names = self.dtype.names
        return (table["col"], table["val"], table["last"] if "last" in names else self.field("last"),
                table["aux"] if "aux" in names else self.field("aux"))

    def compacted_size(self, extra: int, keep_dense: bool = False) -> tuple[np.ndarray, int, int]:
        """(row sizes, their total, default pool size) of a compaction with room for ``extra``
        more slots: twice the rebuilt rows. The headroom costs address space until rows move
        into it (pages are touched as they are used)."""
        caps = fitted_sizes(self.table["val"], self.rows, self.d, keep_dense)
        total = int(caps.sum())
        room = total
        return caps, total, max(total + int(extra), total + room, MIN_CAP)

    def compact_pool(self, caps: np.ndarray, size: int) -> None:
        """Rebuild every row at the sizes ``caps`` (from :meth:`compacted_size`) into a fresh pool
        of ``size`` slots, dropping garbage and tombstones. Old and new pool coexist meanwhile."""
        new = np.empty(int(size), dtype=self.dtype)
        names = self.dtype.names
        c, v, l, a = self.views()
        nc, nv, nl, na = self.views(new)
        top = compact_into(c, v, l, a, self.rows, caps, nc, nv, nl, na, self.d, "last" in names, "aux" in names)
        self.table = new
        self.state[:] = -1
        self.state[TOP] = top
        self.state[GARBAGE] = 0

    def extend_pool(self, size: int) -> None:
        """Move the pool into a larger one of ``size`` slots as it is (one copy of the used part;
        segments keep their offsets and free lists stay valid): growth without a rebuild."""
        new = np.empty(int(size), dtype=self.dtype)
        top = self.used_slots
        new[:top] = self.table[:top]
        self.table = new

    def load_csr(self, M: sp.csr_matrix, diag_offset: float = 0.0) -> None:
        """Set the stored matrix to ``M`` (plus ``diag_offset`` on the diagonal), e.g. the W = M - I
        of a saved model with ``diag_offset=1.0``; per-entry statistics start at zero."""
        M = self.square_csr(M)
        indptr = np.asarray(M.indptr, np.int64)
        indices = np.asarray(M.indices, np.int64)
        data = np.asarray(M.data, np.float64)
        k = _offdiag_counts(indptr, indices, data, self.d)
        need = sum(int(fitted_cap(int(n), self.d)) for n in k[k > 0])
        self.table = np.empty(max(need, MIN_CAP, self.capacity), dtype=self.dtype)
        self.rows[:] = 0
        self.state[:] = -1
        self.state[TOP] = 0
        self.state[GARBAGE] = 0
        names = self.dtype.names
        c, v, l, a = self.views()
        _load_rows(c, v, l, a, self.rows, self.state, indptr, indices, data, self.d, "last" in names, "aux" in names)
        self.load_diagonal(np.repeat(np.arange(self.d), np.diff(indptr)), indices, data, diag_offset)

    def csr_arrays(self, diag: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return _csr_of(self.table["col"], self.table["val"], self.rows, self.d, diag)
