"""A compiled sparse store for the off-diagonal entries of a d x d matrix.

Open addressing with linear probing over one structured array ``table`` whose records hold
``key = i * d + j`` (int64; ``EMPTY``/``TOMBSTONE`` mark free slots), ``val`` (float64) and,
for learners that need them, ``last`` (the step at which the entry's lazy shrinkage was last
applied) and ``aux`` (a per-entry statistic: AdaGrad's H_ij, a diagonal covariance ...).
Keeping the fields of one entry in one record means one cache miss per random access
(NOTES.md: the update is bound by random access at ~35-40 ns each).

The diagonal lives in dense length-d arrays beside the table (it is dense under M = I and
never needs hashing). Growth multiplies the capacity by 4 while small and by 2 when large,
so a run that grows from an empty table pays amortised O(1) per insert; the caller can size
the table ahead with ``initial_capacity``.

The functions here are small ``numba.njit`` primitives used by the learners' kernels
(:mod:`sparsesim.engine.bilinear` and the families built on it).
"""

from __future__ import annotations

import numba
import numpy as np
import scipy.sparse as sp

from .store import EMPTY, GOLDEN, TOMBSTONE, DiagonalStore, probe_segment

MAX_LOAD = 0.7
REBUILD_LOAD = 0.45  # > MAX_LOAD / 2, so growing a full table doubles it once


@numba.njit(cache=True, inline="always")
def home_slot(key, shift):
    """Fibonacci hashing: the top bits of key * golden ratio."""
    return np.int64((np.uint64(key) * GOLDEN) >> np.uint64(shift))


@numba.njit(cache=True)
def find_or_free(keys, key, shift):
    """Slot holding ``key`` (>= 0), or ``-2 - f`` with ``f`` the first free slot on its probe
    path (:func:`probe_segment` over the whole table). Lets a read pass hand its probe to the
    write pass (see :func:`insert_at_or_probe`)."""
    return probe_segment(keys, key, home_slot(key, shift), 0, keys.shape[0] - 1)


@numba.njit(cache=True)
def find(keys, key, shift):
    """Slot holding ``key`` or -1."""
    s = find_or_free(keys, key, shift)
    return s if s >= 0 else -1


@numba.njit(cache=True)
def _insert_at(keys, vals, key, free, counts):
    """Put absent ``key`` (value 0) in free slot ``free``.

    ``counts[0]`` counts live entries, ``counts[1]`` live + tombstones (what limits probing).
    """
    if keys[free] == EMPTY:
        counts[1] += 1
    keys[free] = key
    vals[free] = 0.0
    counts[0] += 1
    return free


@numba.njit(cache=True)
def find_or_insert(keys, vals, key, shift, counts):
    """Slot of ``key``, inserting it with value 0 when absent (reusing the first tombstone seen)."""
    s = find_or_free(keys, key, shift)
    return s if s >= 0 else _insert_at(keys, vals, key, -2 - s, counts)


@numba.njit(cache=True)
def insert_at_or_probe(keys, vals, key, shift, counts, free):
    """Insert absent ``key`` at slot ``free`` (from :func:`find_or_free`) if it is still free,
    else probe again. Valid because the key is absent and every slot before ``free`` on its
    probe path was occupied when ``free`` was found (occupied slots only turn into tombstones)."""
    k = keys[free]
    if k == EMPTY or k == TOMBSTONE:
        return _insert_at(keys, vals, key, free, counts)
    return find_or_insert(keys, vals, key, shift, counts)


@numba.njit(cache=True)
def remove_at(keys, s, counts):
    """Turn slot ``s`` into a tombstone (slots cached by a caller stay valid)."""
    keys[s] = TOMBSTONE
    counts[0] -= 1


@numba.njit(cache=True)
def rehash(old, new, shift, hash_mask):
    """Move the live records of ``old`` into the empty ``new``; returns how many. A record goes to
    the home slot of ``key & hash_mask`` (-1: the whole key; packed keys hash their pair bits only)."""
    mask = new.shape[0] - 1
    keys = new["key"]
    n = 0
    for s in range(old.shape[0]):
        k = old[s]["key"]
        if k >= 0:
            t = home_slot(k & hash_mask, shift)
            while keys[t] != EMPTY:
                t = (t + 1) & mask
            new[t] = old[s]
            n += 1
    return n


@numba.njit(cache=True)
def _csr_of(keys, vals, d, diag):
    """CSR arrays (sorted columns) of the live nonzero entries plus the nonzero entries of
    ``diag`` (pass an empty array for none), built in one pass without COO or sum copies."""
    counts = np.zeros(d + 1, np.int64)
    for s in range(keys.shape[0]):
        if keys[s] >= 0 and vals[s] != 0.0:
            counts[keys[s] // d + 1] += 1
    for i in range(diag.shape[0]):
        if diag[i] != 0.0:
            counts[i + 1] += 1
    indptr = np.cumsum(counts)
    nnz = indptr[d]
    indices = np.empty(nnz, np.int32)
    data = np.empty(nnz, np.float64)
    fill = indptr[:d].copy()
    for s in range(keys.shape[0]):
        k = keys[s]
        if k >= 0 and vals[s] != 0.0:
            r = k // d
            indices[fill[r]] = k % d
            data[fill[r]] = vals[s]
            fill[r] += 1
    for i in range(diag.shape[0]):
        if diag[i] != 0.0:
            indices[fill[i]] = i
            data[fill[i]] = diag[i]
            fill[i] += 1
    for r in range(d):
        lo, hi = indptr[r], indptr[r + 1]
        if hi - lo > 1:
            order = np.argsort(indices[lo:hi])
            indices[lo:hi] = indices[lo:hi][order]
            data[lo:hi] = data[lo:hi][order]
    return indptr, indices, data


@numba.njit(cache=True)
def _load_entries(keys, vals, new_keys, new_vals, shift, counts):
    """Insert distinct ``new_keys`` with values ``new_vals`` (absent keys of an empty table)."""
    for i in range(new_keys.shape[0]):
        s = find_or_insert(keys, vals, new_keys[i], shift, counts)
        vals[s] = new_vals[i]


class HashStore(DiagonalStore):
    """Off-diagonal entries of a d x d matrix in one hash table, plus its dense diagonal.

    Parameters
    ----------
    d, layout, diag_init, compact
        As in :class:`~sparsesim.engine.store.DiagonalStore`.
    initial_capacity : int
        Slots to allocate ahead (rounded up to a power of two).
    max_load, rebuild_load : float
        Load (live + tombstones) that triggers a rebuild, and the load a rebuild leaves at most
        (``rebuild_load`` > ``max_load`` / 2, so growing a full table doubles it once). A table
        whose accesses are mostly inserts and misses (probes that run to an empty slot) may run
        at a lower load.
    fast_growth_limit : int
        Below this capacity a rebuild quadruples the table (fewer rebuilds while small), above it
        doubles it (bounds the memory a rebuild overshoots and its transient copy).
    """

    def __init__(self, d: int, layout: str = "plain", diag_init: float = 1.0, initial_capacity: int = 1 << 16,
                 compact: bool = False, max_load: float = MAX_LOAD, rebuild_load: float = REBUILD_LOAD,
                 fast_growth_limit: int = 1 << 24):
        if not 0.0 < max_load / 2 < rebuild_load < max_load < 1.0:
            raise ValueError(f"need 0 < max_load / 2 < rebuild_load < max_load < 1, got {max_load}, {rebuild_load}")
        self.max_load = float(max_load)
        self.rebuild_load = float(rebuild_load)
        self.fast_growth_limit = int(fast_growth_limit)
        super().__init__(d, layout, diag_init, compact)
        cap = 1 << max(4, int(np.ceil(np.log2(max(16, initial_capacity)))))
        self.table = self._empty_table(cap)
        self.counts = np.zeros(2, np.int64)  # live, live + tombstones

    def _empty_table(self, cap: int) -> np.ndarray:
        table = np.zeros(cap, dtype=self.dtype)
        table["key"] = EMPTY
        return table

    @property
    def capacity(self) -> int:
        return self.table.shape[0]

    @property
    def shift(self) -> int:
        return 64 - int(np.log2(self.capacity))

    @property
    def n_entries(self) -> int:
        """Live off-diagonal entries."""
        return int(self.counts[0])

    @property
    def nbytes(self) -> int:
        return self.table.nbytes + self.diag_nbytes

    @property
    def hash_mask(self) -> int:
        """Bits of a key that choose its home slot (-1: all; a subclass packing more into the key
        narrows it)."""
        return -1

    def max_used(self) -> int:
        return int(self.capacity * self.max_load)

    def reserve(self, extra: int) -> None:
        """Make room for ``extra`` more inserts without passing the load limit.

        The table is rebuilt (dropping tombstones) at a capacity that leaves the load at most
        ``rebuild_load``, so the next rebuild is at least ~0.25 x capacity inserts away and its
        O(capacity) cost is amortised to O(1) per insert. Growth is x4 while below
        ``fast_growth_limit`` slots (2^24 by default) and x2 above, which bounds the transient
        memory of the copy for very large models.
        """
        if self.counts[1] + extra <= self.max_used():
            return
        self.grow(extra)

    def grown_capacity(self, extra: int) -> int:
        """The capacity a rebuild for ``extra`` more inserts goes to: x4 steps below
        ``fast_growth_limit`` slots, x2 steps above, until the load is at most ``rebuild_load``."""
        live = int(self.counts[0])
        cap = self.capacity
        while (live + extra) > cap * self.rebuild_load:
            cap *= 4 if cap < self.fast_growth_limit else 2
        return cap

    def grow(self, extra: int) -> None:
        """Rebuild (dropping tombstones) at the smallest capacity that keeps the load at most
        ``rebuild_load`` after ``extra`` more inserts."""
        cap = self.grown_capacity(extra)
        new = self._empty_table(cap)
        shift = 64 - int(np.log2(cap))
        n = rehash(self.table, new, shift, np.int64(self.hash_mask))
        self.table = new
        self.counts[:] = n

    def load_csr(self, M: sp.csr_matrix, diag_offset: float = 0.0) -> None:
        """Set the stored matrix to ``M`` (plus ``diag_offset`` on the diagonal), e.g. the W = M - I of a
        saved model with ``diag_offset=1.0``: a learner then continues from that model.

        Off-diagonal nonzeros go into an empty table sized for them; per-entry statistics
        (``last``, ``aux``) start at zero and the diagonal's at zero too.
        """
        M = self.square_csr(M)
        rows = np.repeat(np.arange(self.d, dtype=np.int64), np.diff(M.indptr))
        cols = np.asarray(M.indices, dtype=np.int64)
        data = np.asarray(M.data, dtype=np.float64)
        off = (rows != cols) & (data != 0.0)
        keys = rows[off] * self.d + cols[off]
        cap = self.capacity
        while keys.shape[0] > cap * self.rebuild_load:
            cap *= 2
        self.table = self._empty_table(cap)
        self.counts[:] = 0
        _load_entries(self.table["key"], self.table["val"], keys, data[off], self.shift, self.counts)
        self.load_diagonal(rows, cols, data, diag_offset)

    def csr_arrays(self, diag: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return _csr_of(self.table["key"], self.table["val"], self.d, diag)
