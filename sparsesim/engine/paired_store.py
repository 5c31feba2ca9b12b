"""The hash storage of the OMTRSL engine (:mod:`sparsesim.engine.multitask`): S and O_1..O_K in
one table of pair records plus an overflow table (:class:`PairedTaskStore`), and the kernel
that runs triplets on it (:func:`train_paired`).

One record per touched pair (i, j) holds S_ij and the own value O_k,ij of the first task k that
wrote the pair; the own values of the other tasks that write the pair go to an overflow table
keyed ``(i d + j) K + k``. The margin reads S_ij and O_k,ij with one random access when k wrote
the pair first (most touches); the kernel prefetches pair records two stages ahead and overflow
slots one stage ahead.
"""

from __future__ import annotations

from collections import namedtuple

import numba
import numpy as np
import scipy.sparse as sp
from numba.extending import overload

from sparsesim.prefetch import prefetch
from .hashstore import EMPTY, HashStore, find_or_free, home_slot, insert_at_or_probe
from .multitask_rules import anchor_and_difference, skipped_by_random_query, step_coefficients
from .primitives import prefetch_cached_slot
from .rules import PREFETCH_DISTANCE, outer_keys, prefetch_ahead


PAIR_FIELDS = [("key", np.int64), ("tag", np.int32), ("nover", np.int32), ("s", np.float64), ("o", np.float64)]
# compact=True: the first writer's task id and a has-overflow flag live in the upper bits of the key
COMPACT_PAIR_FIELDS = [("key", np.int64), ("s", np.float32), ("o", np.float32)]
CACHE_LINE = 64
OVERFLOW_MAX_LOAD = 0.5
OVERFLOW_REBUILD_LOAD = 0.3
# xslots, per touched entry: where task k's own value O_k,ij is (an overflow slot when >= 0) or
_OWN = -1  # in the pair record (k wrote the pair first, or the pair is new)
_LOOKUP = -2  # maybe in the overflow table: look it up
_ABSENT = -3  # not stored, and the pair has no overflow entry: the insert probes from the home slot
_FREE_AT = -4  # code _FREE_AT - f: not stored, the lookup ended at free overflow slot f: insert there


@numba.njit(cache=True, inline="always")
def insert_absent(keys, vals, key, shift, counts):
    """Insert ``key`` (known to be absent) with value 0 into a plain table; returns its slot."""
    mask = keys.shape[0] - 1
    s = home_slot(key, shift)
    while keys[s] != EMPTY:
        s = (s + 1) & mask
    keys[s] = key
    vals[s] = 0.0
    counts[0] += 1
    counts[1] += 1
    return s


@numba.njit(cache=True, inline="always")
def find_packed(keys, key, shift, pmask):
    """Slot whose packed key holds pair ``key`` in its low bits (``key & pmask``), or ``-2 - f``
    where ``f`` is the empty slot that ended the probe (where an insert of ``key`` may go)."""
    mask = keys.shape[0] - 1
    s = home_slot(key, shift)
    while True:
        kv = keys[s]
        if kv == EMPTY:
            return -2 - s
        if (kv & pmask) == key:
            return s
        s = (s + 1) & mask


@numba.njit(cache=True, inline="always")
def insert_packed(keys, svals, ovals, packed, free, counts):
    """Insert an absent pair with (packed) key ``packed`` (S = O = 0) at the empty slot ``free``
    that ended its probe, or at the next empty slot if an insert took ``free`` since (keys are
    never deleted, so every slot before ``free`` on the probe path is still occupied); returns
    its slot."""
    mask = keys.shape[0] - 1
    s = free
    while keys[s] != EMPTY:
        s = (s + 1) & mask
    keys[s] = packed
    svals[s] = 0.0
    ovals[s] = 0.0
    counts[0] += 1
    counts[1] += 1
    return s


@numba.njit(cache=True, inline="always")
def prefetch_write(keys, xkeys, xshift, slot, xslot, xkey):
    """Prefetch what pass 2 writes for one entry: its pair record (cached ``slot``) and, when
    task k's own value lives in the overflow table, its overflow slot (cached ``xslot``; overflow
    key ``xkey``)."""
    prefetch_cached_slot(keys, slot)
    if xslot >= 0:
        prefetch(xkeys, xslot)
    elif xslot <= _FREE_AT:
        prefetch(xkeys, _FREE_AT - xslot)
    elif xslot == _ABSENT:
        prefetch(xkeys, home_slot(xkey, xshift))


# --- pair-record layouts. The kernel below is written once; what differs between the 32-byte
# and the 16-byte record (where the first writer's task id and the has-overflow mark live) is
# in four accessors chosen at compile time by the type of ``rec``, so each layout gets its own
# machine code with no layout branch in the loop (runtime layout branches cost ~30%).

WideRecords = namedtuple("WideRecords", ["tags", "novers"])
WideRecords.__doc__ = """32-byte records (``PAIR_FIELDS``): the first writer in ``tag``, the overflow count in ``nover``."""
PackedRecords = namedtuple("PackedRecords", ["pmask", "kbits", "tmask", "fbit"])
PackedRecords.__doc__ = """16-byte records (``COMPACT_PAIR_FIELDS``): key = pair | tag << kbits | has_overflow bit."""


def _is_packed(rec):
    return getattr(rec, "instance_class", None) is PackedRecords


def pair_find(rec, keys, key, shift):
    """Slot of pair ``key`` (>= 0), or ``-2 - f`` with ``f`` where an insert of it may go."""


def pair_owner(rec, keys, s):
    """The task that wrote the pair in slot ``s`` first (whose own value the record holds)."""


def pair_has_overflow(rec, keys, s):
    """Whether other tasks hold own values of the pair in slot ``s`` (in the overflow table)."""


def pair_insert(rec, keys, svals, ovals, key, k, free, counts):
    """Insert the absent pair ``key``, first written by task ``k``, at or after slot ``free``."""


def pair_add_overflow(rec, keys, s):
    """Record that one more task holds an own value of the pair in slot ``s``."""


@overload(pair_find, inline="always")
def _pair_find(rec, keys, key, shift):
    if _is_packed(rec):
        return lambda rec, keys, key, shift: find_packed(keys, key, shift, rec.pmask)
    return lambda rec, keys, key, shift: find_or_free(keys, key, shift)


@overload(pair_owner, inline="always")
def _pair_owner(rec, keys, s):
    if _is_packed(rec):
        return lambda rec, keys, s: (keys[s] >> rec.kbits) & rec.tmask
    return lambda rec, keys, s: rec.tags[s]


@overload(pair_has_overflow, inline="always")
def _pair_has_overflow(rec, keys, s):
    if _is_packed(rec):
        return lambda rec, keys, s: (keys[s] & rec.fbit) != 0
    return lambda rec, keys, s: rec.novers[s] > 0


@overload(pair_insert, inline="always")
def _pair_insert(rec, keys, svals, ovals, key, k, free, counts):
    if _is_packed(rec):
        return lambda rec, keys, svals, ovals, key, k, free, counts: insert_packed(
            keys, svals, ovals, key | (k << rec.kbits), free, counts)

    def insert(rec, keys, svals, ovals, key, k, free, counts):
        s = insert_packed(keys, svals, ovals, key, free, counts)
        rec.tags[s] = k
        rec.novers[s] = 0
        return s

    return insert


@overload(pair_add_overflow, inline="always")
def _pair_add_overflow(rec, keys, s):
    if _is_packed(rec):
        def mark(rec, keys, s):
            keys[s] |= rec.fbit
        return mark

    def count(rec, keys, s):
        rec.novers[s] += 1
    return count


@numba.njit(cache=True)
def train_paired(
    keys, svals, ovals, rec, counts, shift, max_used,
    xkeys, xvals, xcounts, xshift, xmax_used, diag, d, n_tasks,
    indptr, indices, data, triplets, signs, task_ids, uniforms, start, stop,
    mode, rate, alpha, beta, C, zi, zv, keybuf, slots, xslots, losses, margins, queried,
):
    """Process triplets[start:stop] on the paired storage; returns (next_triplet, inserts_needed).

    See :class:`PairedTaskStore`. ``rec`` is the record layout: :class:`WideRecords` (the
    ``tag`` and ``nover`` fields of the table) or :class:`PackedRecords` (compact records; the
    values are then float32, the arithmetic float64). Pass 1 is a three-stage software pipeline over the touched
    entries: the pair record of entry e + 2P is prefetched, the pair record of entry e + P is
    read (its slot cached, and the overflow slot of task k prefetched when the pair has own values
    of other tasks), and entry e is added to the margin (P = ``PREFETCH_DISTANCE``). Pass 2 writes
    through the cached slots, prefetching P entries ahead. Stops before a triplet whose inserts
    could pass either table's load limit, so the caller can grow them and call again. Outputs as
    in :func:`train_dense`.
    """
    shared = n_tasks
    use_shared = beta != 0.0
    P = PREFETCH_DISTANCE
    for t in range(start, stop):
        k = task_ids[t]
        if skipped_by_random_query(mode, uniforms, t, rate, losses, margins, queried):
            continue
        nz, lo, hi = anchor_and_difference(t, triplets, indptr, indices, data, zi, zv)
        m = (hi - lo) * nz
        if counts[1] + m > max_used or xcounts[1] + m > xmax_used:
            return t, m
        outer_keys(indices, lo, hi, zi, nz, d, keybuf)
        prefetch_ahead(keys, keybuf, min(P, m), shift)
        # pass 1: p_t = x^T (I + S + O_k) z as a pipeline over the entries e (row-major over
        # (ii, jj)): prefetch the pair record of e + 2P, read the pair record of e + P (caching
        # its slot, prefetching task k's overflow slot when the pair belongs to another task),
        # add entry e.
        p = 0.0
        acc = 0.0
        ii = lo
        jj = 0
        for e in range(-P, m):
            q = e + 2 * P
            if q < m and keybuf[q] >= 0:
                prefetch(keys, home_slot(keybuf[q], shift))
            q = e + P
            if 0 <= q < m:
                key = keybuf[q]
                xslots[q] = _OWN
                if key < 0:
                    slots[q] = -1
                else:
                    s = pair_find(rec, keys, key, shift)
                    slots[q] = s  # >= 0: the pair's slot; <= -2: where to insert it
                    if s >= 0 and pair_owner(rec, keys, s) != k:
                        prefetch(xkeys, home_slot(key * n_tasks + k, xshift))
                        xslots[q] = _LOOKUP if pair_has_overflow(rec, keys, s) else _ABSENT
            if e < 0:
                continue
            key = keybuf[e]
            if key < 0:
                i = indices[ii]
                v = 1.0 + diag[k, i]
                if use_shared:
                    v += diag[shared, i]
            else:
                s = slots[e]
                v = 0.0
                if s >= 0:
                    v = np.float64(svals[s])
                    x = xslots[e]
                    if x == _OWN:
                        v += ovals[s]
                    elif x == _LOOKUP:
                        x = find_or_free(xkeys, key * n_tasks + k, xshift)
                        if x >= 0:
                            v += xvals[x]
                            xslots[e] = x
                        else:  # absent: hand the free slot that ended the probe to pass 2
                            xslots[e] = _FREE_AT - (-2 - x)
            acc += zv[jj] * v
            jj += 1
            if jj == nz:
                p += data[ii] * acc
                acc = 0.0
                jj = 0
                ii += 1
        update, ga, gb = step_coefficients(t, p, mode, uniforms, rate, signs, data, lo, hi, zv, nz,
                                           alpha, beta, C, losses, margins, queried)
        if not update:
            continue
        # pass 2: O_{t_k} += alpha y tau X_t and S += beta y tau X_t through the cached slots
        e = 0
        for ii in range(lo, hi):
            i = indices[ii]
            xi = data[ii]
            for jj in range(nz):
                if e + P < m:
                    prefetch_write(keys, xkeys, xshift, slots[e + P], xslots[e + P], keybuf[e + P] * n_tasks + k)
                w = xi * zv[jj]
                key = keybuf[e]
                if key < 0:
                    diag[k, i] += ga * w
                    if use_shared:
                        diag[shared, i] += gb * w
                else:
                    s = slots[e]
                    if s < 0:  # first touch of the pair: its record takes task k's own value
                        s = pair_insert(rec, keys, svals, ovals, key, k, -2 - s, counts)
                    if use_shared:
                        svals[s] += gb * w
                    x = xslots[e]
                    if x == _OWN:  # also a pair inserted just now
                        ovals[s] += ga * w
                    else:
                        if x <= _FREE_AT:  # O_k,ij is not stored; pass 1 found where it goes
                            x = insert_at_or_probe(xkeys, xvals, key * n_tasks + k, xshift, xcounts, _FREE_AT - x)
                            pair_add_overflow(rec, keys, s)
                        elif x < 0:  # _ABSENT (the pair has no overflow entry yet): O_k,ij is not stored
                            x = insert_absent(xkeys, xvals, key * n_tasks + k, xshift, xcounts)
                            pair_add_overflow(rec, keys, s)
                        xvals[x] += ga * w
                e += 1
    return stop, 0


@numba.njit(cache=True)
def _paired_parts(keys, tags, svals, ovals, xkeys, xvals, d, n_tasks):
    """COO arrays (row, col, val, matrix r) of the nonzero off-diagonal entries (r = K for S)."""
    n = 0
    for s in range(keys.shape[0]):
        if keys[s] >= 0:
            n += (svals[s] != 0.0) + (ovals[s] != 0.0)
    for s in range(xkeys.shape[0]):
        if xkeys[s] >= 0 and xvals[s] != 0.0:
            n += 1
    rows = np.empty(n, np.int64)
    cols = np.empty(n, np.int64)
    out = np.empty(n, np.float64)
    which = np.empty(n, np.int64)
    m = 0
    for s in range(keys.shape[0]):
        key = keys[s]
        if key < 0:
            continue
        if svals[s] != 0.0:
            rows[m], cols[m], out[m], which[m] = key // d, key % d, svals[s], n_tasks
            m += 1
        if ovals[s] != 0.0:
            rows[m], cols[m], out[m], which[m] = key // d, key % d, ovals[s], tags[s]
            m += 1
    for s in range(xkeys.shape[0]):
        xk = xkeys[s]
        if xk >= 0 and xvals[s] != 0.0:
            ij = xk // n_tasks
            rows[m], cols[m], out[m], which[m] = ij // d, ij % d, xvals[s], xk - ij * n_tasks
            m += 1
    return rows, cols, out, which


class PairedTaskStore(HashStore):
    """S and O_1..O_K: one 32-byte record per pair (i, j) plus an overflow table.

    The *pair record* (``PAIR_FIELDS``; key ``i d + j``) holds S_ij in ``s`` and, in ``o``, the own
    value of task ``tag`` (the first task that wrote the pair). The table starts on a cache-line
    boundary, so a record never straddles two lines: S_ij + O_k,ij costs one random access when k
    is the pair's first writer. The own values of the other tasks live in ``overflow`` (a plain
    :class:`HashStore`, key ``(i d + j) K + k``); ``nover`` counts a pair's overflow entries, so a
    pair that no other task wrote needs no overflow probe, and the probe a pair does need is
    prefetched by the pipeline of :func:`train_paired`. Keys are never deleted. ``diag`` has shape
    (K + 1, d) (rows O_1..O_K, then S).

    With ``compact=True`` a record is 16 bytes (``COMPACT_PAIR_FIELDS``, four per cache line): the
    key holds ``i d + j`` in its low ``kbits`` = bit length of d^2 - 1 bits, the first writer's
    task id in the next ``tbits`` = bit length of K - 1 bits and a has-overflow flag above them;
    S_ij, O_k,ij and the overflow values are stored as float32 (arithmetic stays float64, as in
    OASIS's ``compact=True``). It needs kbits + tbits + 1 <= 63 (e.g. d <= 2^20 with K <= 2^20);
    :meth:`compact_unfit_reason` says why a (d, K) does not fit.

    Parameters
    ----------
    d : int
        Feature count.
    n_tasks : int
        K.
    initial_capacity : int
        Pair slots reserved ahead (the overflow table starts at a quarter of it).
    compact : bool
        The 16-byte float32 records described above (ValueError when (d, K) do not fit).
    """

    def __init__(self, d: int, n_tasks: int, initial_capacity: int = 1 << 16, compact: bool = False):
        self.n_tasks = int(n_tasks)
        if float(d) * d * self.n_tasks >= 2.0 ** 62:
            raise ValueError("d * d * n_tasks does not fit the 63-bit key space")
        if compact:
            reason = self.compact_unfit_reason(d, n_tasks)
            if reason:
                raise ValueError(reason)
        super().__init__(d, layout="plain", diag_init=0.0, initial_capacity=16)
        self.compact = bool(compact)
        self.kbits = max(1, (int(d) * int(d) - 1).bit_length())
        self.tbits = (self.n_tasks - 1).bit_length()
        self.dtype = np.dtype(COMPACT_PAIR_FIELDS if self.compact else PAIR_FIELDS)
        cap = 1 << max(4, int(np.ceil(np.log2(max(16, initial_capacity)))))
        self.table = self._empty_table(cap)
        self.diag = np.zeros((self.n_tasks + 1, self.d))
        # Most overflow accesses are inserts and misses (a task's first own value of a pair): probes
        # that run to an empty slot, whose length grows fastest with the load, so the overflow table
        # runs at a lower load than the pair table (measured: K = 50 compact OMTRSL / OASIS 1.47 ->
        # 1.37 at load ~0.55 -> ~0.27). One task never uses it.
        self.overflow = HashStore(d, layout="plain", diag_init=0.0, compact=self.compact,
                                  initial_capacity=16 if self.n_tasks == 1 else max(16, initial_capacity // 2),
                                  max_load=OVERFLOW_MAX_LOAD, rebuild_load=OVERFLOW_REBUILD_LOAD,
                                  fast_growth_limit=1 << 20)

    @staticmethod
    def compact_unfit_reason(d: int, n_tasks: int) -> str | None:
        """Why the compact layout cannot hold (d, K), or None when it can."""
        kbits = max(1, (int(d) * int(d) - 1).bit_length())
        tbits = (int(n_tasks) - 1).bit_length()
        if kbits + tbits + 1 > 63:
            return (f"compact pair records need {kbits} key bits for d = {d}, {tbits} task bits for K = {n_tasks} "
                    f"and one overflow flag: {kbits + tbits + 1} > 63 bits")
        return None

    @property
    def hash_mask(self) -> int:
        """Compact records hash (and rehash) the pair bits of their packed key only."""
        return (1 << self.kbits) - 1 if self.compact else -1

    def _empty_table(self, cap: int) -> np.ndarray:
        """A zeroed table of ``cap`` records starting on a cache-line boundary, keys EMPTY."""
        itemsize = self.dtype.itemsize
        raw = np.zeros(cap * itemsize + CACHE_LINE, np.uint8)
        off = (-raw.ctypes.data) % CACHE_LINE
        table = raw[off:off + cap * itemsize].view(self.dtype)
        table["key"] = EMPTY
        return table

    @property
    def nbytes(self) -> int:
        return super().nbytes + self.overflow.nbytes

    @property
    def n_entries(self) -> int:
        """Stored records: pairs plus overflow own values."""
        return int(self.counts[0] + self.overflow.counts[0])

    def reserve(self, extra: int) -> None:
        """Room for ``extra`` more inserts in both tables (growth policy of :meth:`HashStore.reserve`)."""
        super().reserve(extra)
        self.overflow.reserve(extra)

    def matrices(self) -> list[sp.csr_matrix]:
        """[O_1, ..., O_K, S] as CSR matrices (diagonal included)."""
        t, x = self.table, self.overflow.table
        if self.compact:
            packed = t["key"]
            keys = np.where(packed >= 0, packed & ((1 << self.kbits) - 1), EMPTY)
            tags = np.where(packed >= 0, (packed >> self.kbits) & ((1 << self.tbits) - 1), 0)
        else:
            keys, tags = t["key"], t["tag"]
        rows, cols, vals, which = _paired_parts(keys, tags, t["s"], t["o"], x["key"], x["val"],
                                                self.d, self.n_tasks)
        out = []
        for r in range(self.n_tasks + 1):
            sel = which == r
            off = sp.csr_matrix((vals[sel], (rows[sel], cols[sel])), shape=(self.d, self.d))
            out.append((off + sp.diags(self.diag[r], format="csr")).tocsr())
        return out
