"""A compiled sparse store for a d x d matrix that keeps the entries of one row together.

Each row i owns one segment of a shared record pool (an arena): ``rows[i] = (off, cap, used,
live, shift, base)``. A sparse row is an open-addressing hash table of ``cap`` slots (a power of two)
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

A record holds ``col`` (int32; ``EMPTY``/``TOMBSTONE`` mark free slots) and ``val`` (OASIS),
``at_base`` (SORS: the value as of the row's base step ``base``, whose shrinkage since is pending
for the whole row; :mod:`sparsesim.engine.rules`) or ``val``, ``last`` and ``aux`` (AdaSORS); see
:mod:`sparsesim.engine.store`, whose field layouts this shares. Rows grow by moving to a larger segment (x4 while small, x2 when large); the old
segment goes to a free list of its size for the next row that needs one. When neither a free
segment nor fresh slots remain, the pool is compacted: every row is rebuilt at a load of at
most ``REBUILD_LOAD`` into a fresh pool with room to grow. The pool is allocated
without touching its pages, so resident memory follows the used part.

The diagonal lives in dense length-d arrays beside the pool, as in the hash store. This module
holds the record layouts and the store object; the compiled kernels that hash, probe, place,
allocate and compact the segments are in :mod:`sparsesim.engine.segments`.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba.core import types
from numba.extending import overload

from .segments import (FREE, GARBAGE, LIVE, MIN_CAP, N_ROW_FIELDS, SHIFT, TOP, compact_into, csr_of, fitted_cap,
                       fitted_sizes, load_rows, offdiag_counts)
from .rules import ADASORS, OASIS, SORS
from .store import COMPACT_FIELDS_BY_LAYOUT, FIELDS_BY_LAYOUT, DiagonalStore


def record_dtype(layout: str, compact: bool) -> np.dtype:
    """Record of one entry: the hash store's fields with an int32 column in place of the key."""
    fields = (COMPACT_FIELDS_BY_LAYOUT if compact else FIELDS_BY_LAYOUT)[layout]
    return np.dtype([("col", np.int32)] + [f for f in fields if f[0] != "key"])


def learner_mode(table):
    """The learner the pool's records are laid out for (``MODE_LAYOUT`` of
    :mod:`sparsesim.engine.bilinear`: OASIS's records hold ``val``, SORS's ``at_base``,
    AdaSORS's ``val``, ``last`` and ``aux``), as a
    constant of the compiled code: the update loop compiles once per learner, without the
    branches and the code of the other two (compiled code only)."""
    raise NotImplementedError("learner_mode is for compiled code")


@overload(learner_mode, inline="always")
def _learner_mode(table):
    fields = table.dtype.fields
    mode = ADASORS if "aux" in fields else SORS if "at_base" in fields else OASIS
    return lambda table: mode


def value_at(table, s):
    """The stored value of record ``s`` (its second field: ``val``, or SORS's ``at_base``) as
    float64 (compiled code only)."""
    raise NotImplementedError("value_at is for compiled code")


def set_value_at(table, s, value):
    """Set the stored value of record ``s`` (see :func:`value_at`; compiled code only)."""
    raise NotImplementedError("set_value_at is for compiled code")


@overload(value_at, inline="always")
def _value_at(table, s):
    name = list(table.dtype.fields)[1]
    return lambda table, s: np.float64(table[np.uint64(s)][name])


@overload(set_value_at, inline="always")
def _set_value_at(table, s, value):
    name = list(table.dtype.fields)[1]

    def store_value(table, s, value):
        table[np.uint64(s)][name] = value
    return store_value


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
        return lambda table, s, name, default: np.float64(table[np.uint64(s)][f])
    return lambda table, s, name, default: np.int64(table[np.uint64(s)][f])


@overload(set_field, inline="always")
def _set_field(table, s, name, value):
    if not isinstance(name, types.StringLiteral):
        return None
    f = name.literal_value
    if f in table.dtype.fields:
        def store_value(table, s, name, value):
            table[np.uint64(s)][f] = value
        return store_value
    return lambda table, s, name, value: None


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
        float32 values and statistics, int32 step counters (8 / 8 / 16 bytes per record for
        OASIS / SORS / AdaSORS instead of 12 / 12 / 28).
    """

    record_dtype = staticmethod(record_dtype)

    def __init__(self, d: int, layout: str = "plain", diag_init: float = 1.0, initial_capacity: int = 1 << 16,
                 compact: bool = False):
        super().__init__(d, layout, diag_init, compact)
        self.table = np.empty(max(MIN_CAP, int(initial_capacity)), dtype=self.dtype)  # pages untouched until used
        self.rows = np.zeros((self.d, N_ROW_FIELDS), np.int64)
        self.state = np.empty(FREE + 64, np.int64)
        self._reset_pool(0)
        self.set_order(np.arange(self.d))

    def _reset_pool(self, top: int) -> None:
        """Pool state of a pool whose first ``top`` slots hold rows: no free segments, no garbage."""
        self.state[:] = -1
        self.state[TOP] = top
        self.state[GARBAGE] = 0

    def set_order(self, relabel: np.ndarray) -> None:
        """Number the store's rows and columns ``relabel[f]`` for the caller's feature f (a
        permutation of 0..d-1), e.g. by descending document frequency (so that the columns an
        update touches most share a few cache lines of a dense row). Only on an empty store
        (:meth:`load_csr` fills one in the new numbering); every export answers in the
        caller's numbering."""
        relabel = np.asarray(relabel, np.int64)
        if self.used_slots:
            raise ValueError("the numbering of a store is set while it is empty")
        if relabel.shape != (self.d,) or not np.array_equal(np.sort(relabel), np.arange(self.d)):
            raise ValueError(f"relabel must be a permutation of 0..{self.d - 1}")
        self.relabel = relabel
        self.unlabel = np.empty_like(relabel)
        self.unlabel[relabel] = np.arange(self.d)
        self.identity_order = bool((relabel == np.arange(self.d)).all())

    def renumber(self, relabel: np.ndarray) -> None:
        """:meth:`set_order` on a store that may hold a matrix (e.g. a warm start loaded before
        the first update): the matrix is reloaded in the new numbering. Per-entry statistics
        restart at zero, as after :meth:`load_csr`: call it before any update."""
        if not self.used_slots and (self.diag == self.diag[0]).all():
            self.set_order(relabel)
            return
        held, step = self.to_csr(0.0), self.step
        self.rows[:] = 0
        self._reset_pool(0)
        self.set_order(relabel)
        self.load_csr(held)
        self.step = step

    def diagonal(self) -> np.ndarray:
        """The diagonal (a copy) in the caller's numbering."""
        return self.diag[self.relabel]

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
        return self.table.nbytes + self.rows.nbytes + self.diag_nbytes + self.relabel.nbytes + self.unlabel.nbytes

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
        if "relabel" not in state:  # (a store pickled before it had a numbering)
            self.set_order(np.arange(self.d))
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
        return (table["col"], table[names[1]], table["last"] if "last" in names else self.field("last"),
                table["aux"] if "aux" in names else self.field("aux"))

    def compacted_size(self, extra: int, keep_dense: bool = False) -> tuple[np.ndarray, int, int]:
        """(row sizes, their total, default pool size) of a compaction with room for ``extra``
        more slots: twice the rebuilt rows. The headroom costs address space until rows move
        into it (pages are touched as they are used)."""
        caps = fitted_sizes(self.views()[1], self.rows, self.d, keep_dense)
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
        self._reset_pool(top)

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
        k = offdiag_counts(indptr, indices, data, self.d)
        need = sum(int(fitted_cap(int(n), self.d)) for n in k[k > 0])
        self.table = np.empty(max(need, MIN_CAP, self.capacity), dtype=self.dtype)
        self.rows[:] = 0
        self._reset_pool(0)
        names = self.dtype.names
        c, v, l, a = self.views()
        load_rows(c, v, l, a, self.rows, self.state, indptr, indices, data, self.d, "last" in names, "aux" in names,
                  self.relabel, self.unlabel)
        self.load_diagonal(self.relabel[np.repeat(np.arange(self.d), np.diff(indptr))], self.relabel[indices], data,
                           diag_offset)

    def csr_arrays(self, diag: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return csr_of(self.table["col"], self.views()[1], self.rows, self.d, diag, self.relabel, self.unlabel,
                      self.identity_order)
