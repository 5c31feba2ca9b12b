"""What the two sparse stores of a d x d matrix share.

:class:`~sparsesim.engine.hashstore.HashStore` (one global hash table, keys ``i * d + j``) and
:class:`~sparsesim.engine.rowstore.RowStore` (one hash segment or dense run per row, keys ``j``)
keep the off-diagonal entries in records of the same fields (``FIELDS_BY_LAYOUT``), find them
with the same linear probe (:func:`probe_segment`) and keep the diagonal in dense length-d arrays
beside the records (:class:`DiagonalStore`).
"""

from __future__ import annotations

import numba
import numpy as np
import scipy.sparse as sp
from numba.core import types
from numba.extending import overload

# free-slot markers of a record's key field (a stored key or column is >= 0)
EMPTY = np.int64(-1)
TOMBSTONE = np.int64(-2)
GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: 2^64 / golden ratio

FIELDS_BY_LAYOUT = {
    "plain": [("key", np.int64), ("val", np.float64)],
    # the row store's SORS records: ``at_base`` is the entry's value extrapolated back to its
    # row's base step (no ``last``: the shrinkage since the base step is pending for all of the
    # row's entries at once; see sparsesim.engine.rules.at_base)
    "row_lazy": [("key", np.int64), ("at_base", np.float64)],
    "lazy": [("key", np.int64), ("val", np.float64), ("last", np.int64)],
    "lazy_aux": [("key", np.int64), ("val", np.float64), ("last", np.int64), ("aux", np.float64)],
}
# "compact" storage: float32 values and per-entry statistics, int32 step counters, packed records
# (12 / 16 / 20 bytes per entry instead of 16 / 24 / 32). Arithmetic stays float64; only what is
# stored is rounded. It is what lets a 10^5-triplet OASIS run on news20 (~3*10^8 entries) fit.
COMPACT_FIELDS_BY_LAYOUT = {
    "plain": [("key", np.int64), ("val", np.float32)],
    "row_lazy": [("key", np.int64), ("at_base", np.float32)],
    "lazy": [("key", np.int64), ("val", np.float32), ("last", np.int32)],
    "lazy_aux": [("key", np.int64), ("val", np.float32), ("last", np.int32), ("aux", np.float32)],
}


def key_at(keys, s):
    """The key (or column) of slot ``s``: ``keys[s]`` of an array of keys, the first field of
    record ``s`` of an array of records (compiled code only)."""
    raise NotImplementedError("key_at is for compiled code")


def set_key_at(keys, s, key):
    """Set the key (or column) of slot ``s`` (see :func:`key_at`; compiled code only)."""
    raise NotImplementedError("set_key_at is for compiled code")


# Slots are never negative: indexing with np.uint64 spares numba's negative-index wraparound
# (three instructions per access, a tenth of the update loop's per-entry work).
# Why records: the update loops address a pool of records through one base pointer with the
# record size and field offsets known when the loop compiles, instead of one strided view per
# field (a base and a stride each, held in registers or reloaded from the stack per entry).
@overload(key_at, inline="always")
def _key_at(keys, s):
    if isinstance(keys.dtype, types.Record):
        first = next(iter(keys.dtype.fields))
        return lambda keys, s: keys[np.uint64(s)][first]
    return lambda keys, s: keys[np.uint64(s)]


@overload(set_key_at, inline="always")
def _set_key_at(keys, s, key):
    if isinstance(keys.dtype, types.Record):
        first = next(iter(keys.dtype.fields))

        def set_record(keys, s, key):
            keys[np.uint64(s)][first] = key
        return set_record

    def set_plain(keys, s, key):
        keys[np.uint64(s)] = key
    return set_plain


@numba.njit(cache=True, inline="always")
def probe_segment(keys, key, s, lo, mask):
    """Linear probing for ``key`` from slot ``s`` inside the table ``keys[lo:lo + mask + 1]`` (a
    power-of-two number of slots): the slot holding ``key`` (>= 0), or ``-2 - f`` where ``f`` is
    the first free slot (tombstone or EMPTY) on its probe path, where an insert of ``key`` may go
    while that slot stays free. The hash store probes its whole table (``lo = 0``), the row store
    one row's segment. ``keys``: the keys, or the records (see :func:`key_at`)."""
    first_free = -1
    while True:
        k = key_at(keys, s)
        if k == key:
            return s
        if k == EMPTY:
            return -2 - (s if first_free < 0 else first_free)
        if k == TOMBSTONE and first_free < 0:
            first_free = s
        s = lo + ((s - lo + 1) & mask)


class WritableOnUnpickle:
    """Unpickles with every array attribute writable.

    joblib hands each large array to a worker as a read-only memory map (a survivor of a
    ``tune`` rung is sent back to a worker to continue), and the kernels write into an engine's
    arrays in place; such an array is copied into memory when the object is unpickled.
    """

    def __setstate__(self, state: dict) -> None:
        for key, value in state.items():
            if isinstance(value, np.ndarray) and not value.flags.writeable:
                state[key] = np.array(value)
        self.__dict__.update(state)


class DiagonalStore(WritableOnUnpickle):
    """A d x d matrix whose off-diagonal entries a subclass keeps in records of ``dtype`` (in
    ``table``) and whose diagonal lives here, dense: ``diag`` (values), ``diag_last`` and
    ``diag_aux`` (the lazy-shrinkage step and per-entry statistic of the layouts that have them).

    Parameters
    ----------
    d : int
        Matrix side.
    layout : {"plain", "row_lazy", "lazy", "lazy_aux"}
        Which per-entry fields the learner needs (``FIELDS_BY_LAYOUT``).
    diag_init : float
        Initial diagonal value (1.0 for M_1 = I).
    compact : bool
        Store values and per-entry statistics in float32 (``COMPACT_FIELDS_BY_LAYOUT``).
    """

    table: np.ndarray

    def __init__(self, d: int, layout: str, diag_init: float, compact: bool):
        if layout not in FIELDS_BY_LAYOUT:
            raise ValueError(f"unknown layout {layout!r}")
        self.d = int(d)
        self.layout = layout
        self.compact = bool(compact)
        self.dtype = self.record_dtype(layout, self.compact)
        self.diag = np.full(self.d, float(diag_init))
        self.diag_last = np.zeros(self.d, np.int64)
        self.diag_aux = np.zeros(self.d)
        self.step = 0  # steps processed (the lazy-shrinkage clock)


    @staticmethod
    def record_dtype(layout: str, compact: bool) -> np.dtype:
        """Record of one off-diagonal entry."""
        return np.dtype((COMPACT_FIELDS_BY_LAYOUT if compact else FIELDS_BY_LAYOUT)[layout])

    @property
    def diag_nbytes(self) -> int:
        return self.diag.nbytes + self.diag_last.nbytes + self.diag_aux.nbytes

    def field(self, name: str) -> np.ndarray:
        """A strided view of one field, or a dummy length-1 array when the layout lacks it."""
        if name in self.dtype.names:
            return self.table[name]
        return np.zeros(1, self.dtype["last"] if "last" in self.dtype.names else np.int64) if name == "last" \
            else np.zeros(1, self.dtype[1])

    def square_csr(self, M) -> sp.csr_matrix:
        """``M`` as CSR, checked to be d x d (what ``load_csr`` takes)."""
        M = sp.csr_matrix(M)
        if M.shape != (self.d, self.d):
            raise ValueError(f"expected a {self.d} x {self.d} matrix, got {M.shape}")
        return M

    def load_diagonal(self, rows: np.ndarray, cols: np.ndarray, data: np.ndarray, diag_offset: float) -> None:
        """Set the diagonal to the entries ``rows == cols`` of the COO triple (duplicates add up)
        plus ``diag_offset``, its statistics to zero and the clock to step 0."""
        diag = np.zeros(self.d)
        on = rows == cols
        np.add.at(diag, rows[on], data[on])
        self.diag = diag + float(diag_offset)
        self.diag_last = np.zeros(self.d, np.int64)
        self.diag_aux = np.zeros(self.d)
        self.step = 0

    def csr_arrays(self, diag: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(indptr, indices, data), sorted columns, of the stored nonzero off-diagonal entries
        plus the nonzero entries of ``diag`` (an empty array for none)."""
        raise NotImplementedError

    def to_csr(self, diag_offset: float | None = None) -> sp.csr_matrix:
        """The stored matrix as CSR (values as stored: finalize lazy state first).

        ``diag_offset=None`` leaves the diagonal out (off-diagonal part only); a number adds the
        diagonal minus that offset (e.g. 1.0 to export W = M - I). One pass, no intermediate copies.
        """
        diag = np.zeros(0) if diag_offset is None else self.diag - diag_offset
        indptr, indices, data = self.csr_arrays(diag)
        out = sp.csr_matrix((data, indices, indptr), shape=(self.d, self.d))
        out.has_sorted_indices = True
        return out

    def offdiag_csr(self) -> sp.csr_matrix:
        """The stored nonzero off-diagonal entries (values as stored: finalize lazy state first)."""
        return self.to_csr(None)
