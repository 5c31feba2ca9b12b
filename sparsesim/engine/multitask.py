"""The OMTRSL hot loop: K coupled bilinear models updated at the cost of one.

Hao, Zhao, Liu, Hoi, Miao, "Online Multitask Relative Similarity Learning", IJCAI 2017
(``papers/000``). Task k scores S^k(x, x') = x^T M^k x' (eq. 1). On a triplet (x_t, x_t^1, x_t^2)
of task t_k with label y_t and hinge loss l_t = [1 - y_t p_t]_+, p_t = x_t^T M^{t_k} (x_t^1 - x_t^2),
every task moves (eq. 4, Algorithm 1)::

    M^k  <-  M^k + y_t tau_t A^{-1}_{k, t_k} X_t,     X_t = x_t (x_t^1 - x_t^2)^T,  for all k
    tau_t = min(C, l_t / ||phi_t||^2_{A_dd^{-1}})

with the task-relationship matrix of the paper (section 3.2)::

    A^{-1} = 1 / ((1 + b) K) * [[b + K, b, ..., b], [b, b + K, ..., b], ..., [b, ..., b, b + K]]
           = alpha I_K + beta 1 1^T,   alpha = 1 / (1 + b),   beta = b / ((1 + b) K)

(diagonal: (b + K) / ((1 + b) K) = alpha + beta; off-diagonal: b / ((1 + b) K) = beta). Because
phi_t is zero outside block t_k and A_dd = A (x) I_{d^2},
``||phi_t||^2_{A_dd^{-1}} = A^{-1}_{t_k, t_k} ||X_t||_F^2 = (alpha + beta) ||x_t||^2 ||x_t^1 - x_t^2||^2``.

Shared + own decomposition
--------------------------
Since A^{-1}_{k, t_k} = beta + alpha [k = t_k], keep one shared matrix S and one own matrix O_k
per task, M^k = I + S + O_k (S = O_k = 0 at the start, so M^k_0 = I). The update of eq. (4) for all
K tasks is then exactly ``S += beta y tau X_t`` and ``O_{t_k} += alpha y tau X_t``: two rank-one
writes whatever K is, and the margin reads S and O_{t_k} only. By induction M^k = I + S + O_k holds
after every step, so this is Algorithm 1, not an approximation (``tests/test_multitask.py`` checks
it against K dense matrices updated through the compound vectors of eq. 3).

Two storages for S, O_1..O_K, chosen per data set (``storage="auto"`` picks by memory):

* ``"dense"`` — one float64 array (K + 1, d, d) (S at index K). Right for low-dimensional dense
  data (isolet: d = 617) or a pruned vocabulary. A triplet whose difference vector has at least
  d / 4 nonzeros reads and writes whole rows contiguously (BLAS dot, vectorised axpy); sparser
  ones visit only the entries (i, j) with x_i != 0 and z_j != 0.
* ``"hash"`` — :class:`PairedTaskStore`: one open-addressing table with one 32-byte record per
  touched pair (i, j), holding S_ij and the own value O_k,ij of the first task k that wrote the
  pair, aligned so that a record never straddles two cache lines; the own values of the other
  tasks that write the pair go to an overflow table keyed ``(i d + j) K + k``, and a per-record
  count tells whether a pair has any. Diagonals are dense (K + 1, d). The margin reads S_ij and
  O_k,ij with one random access when k wrote the pair first (most touches), and the kernel
  (:func:`train_paired`) prefetches pair records two stages ahead and overflow slots one stage
  ahead. The cost of a step depends on the entries it touches, not on K or d.

Selective sampling (Algorithm 2, eq. 5): ``query="active"`` asks for y_t with probability
delta / (delta + |p_t|); ``query="random"`` asks with a fixed probability (OMTRSL-Random). The
uniform draws come from the caller, so a run is reproducible from its seed.
"""

from __future__ import annotations

import warnings
from collections import namedtuple

import numba
import numpy as np
import scipy.sparse as sp
from numba.extending import overload

from ..memory import budgeted_reserve, check_allocation
from .rules import PREFETCH_DISTANCE, merge_difference, outer_keys, prefetch_ahead
from .driver import run_growing, triplet_scratch
from .hashstore import EMPTY, MAX_LOAD, HashStore, find_or_free, home_slot, insert_at_or_probe
from .store import WritableOnUnpickle
from sparsesim.prefetch import prefetch
from .primitives import (QUERY_ACTIVE, QUERY_ALL, QUERY_POLICIES, QUERY_RANDOM, decide_query, prefetch_cached_slot,
                         sq_norms)



# --------------------------------------------------------------------------- update rules


def task_coefficients(b: float, n_tasks: int) -> tuple[float, float]:
    """(alpha, beta) with A^{-1} = alpha I + beta 1 1^T for the paper's A^{-1}(b) (section 3.2).

    A^{-1} = ((b + K) on the diagonal, b off it) / ((1 + b) K), so alpha = 1 / (1 + b) and
    beta = b / ((1 + b) K). b = 0 gives A^{-1} = I (K independent learners); b -> inf gives
    11^T / K (one model for all tasks).
    """
    b = float(b)
    K = int(n_tasks)
    return 1.0 / (1.0 + b), b / ((1.0 + b) * K)


def relationship_inverse(b: float, n_tasks: int) -> np.ndarray:
    """The K x K matrix A^{-1} written literally as in the paper (for tests and docs)."""
    K = int(n_tasks)
    return (np.full((K, K), float(b)) + K * np.eye(K)) / ((1.0 + b) * K)


@numba.njit(cache=True, inline="always")
def omtrsl_tau(loss, sq_x, sq_z, alpha, beta, C):
    """tau_t = min(C, l_t / ||phi_t||^2_{A_dd^{-1}}) (eq. 3), ||phi_t||^2 = (alpha + beta) ||x||^2 ||z||^2."""
    denom = (alpha + beta) * sq_x * sq_z
    if denom <= 0.0:
        return 0.0
    return min(C, loss / denom)


@numba.njit(cache=True)
def skipped_by_random_query(mode, uniforms, t, rate, losses, margins, queried):
    """OMTRSL-Random: decide before the margin whether y_t is asked; record a skipped triplet.

    Returns True when triplet t is skipped (then ``queried[t] = 0``, ``losses[t] = 0``,
    ``margins[t] = NaN``: the margin is never computed).
    """
    if mode != QUERY_RANDOM or decide_query(mode, uniforms[t], 0.0, rate, rate):
        return False
    queried[t] = 0
    losses[t] = 0.0
    margins[t] = np.nan
    return True


@numba.njit(cache=True, inline="always")
def anchor_and_difference(t, triplets, indptr, indices, data, zi, zv):
    """Triplet t's difference z = x^1 - x^2 into zi/zv and its anchor's row x = data[lo:hi]:
    returns (nnz(z), lo, hi)."""
    a = triplets[t, 0]
    nz = merge_difference(indptr, indices, data, triplets[t, 1], triplets[t, 2], zi, zv)
    return nz, indptr[a], indptr[a + 1]


@numba.njit(cache=True)
def step_coefficients(t, p, mode, uniforms, rate, signs, data, lo, hi, zv, nz, alpha, beta, C,
                      losses, margins, queried):
    """Everything between the margin p_t and the write, shared by both storages.

    Records p_t, asks for y_t (always, or with probability delta / (delta + |p_t|) under
    OMTRSL-Active), computes the hinge loss and tau_t (eq. 3), and returns
    ``(update, ga, gb)``: whether to write, and the coefficients of ``O_{t_k} += ga X_t`` and
    ``S += gb X_t`` (ga = alpha y tau, gb = beta y tau: eq. 4 for every k through
    M^k = I + S + O_k).
    """
    margins[t] = p
    if mode == QUERY_ACTIVE and not decide_query(mode, uniforms[t], p, rate, rate):
        queried[t] = 0
        losses[t] = 0.0
        return False, 0.0, 0.0
    queried[t] = 1
    y = signs[t]
    loss = 1.0 - y * p
    if loss <= 0.0:
        losses[t] = 0.0
        return False, 0.0, 0.0
    losses[t] = loss
    sq_x, sq_z = sq_norms(data, lo, hi, zv, nz)
    g = y * omtrsl_tau(loss, sq_x, sq_z, alpha, beta, C)
    return True, g * alpha, g * beta


# --------------------------------------------------------------------------- dense storage


@numba.njit(cache=True)
def train_dense(
    W, n_tasks, indptr, indices, data, triplets, signs, task_ids, uniforms, start, stop,
    mode, rate, alpha, beta, C, zi, zv, zd, losses, margins, queried,
):
    """Process triplets[start:stop] on W = [O_1, ..., O_K, S] (shape (K + has_shared, d, d)).

    ``losses[t]`` receives the hinge loss (0 when not queried), ``margins[t]`` p_t (NaN when
    the random mode skipped the triplet without computing it), ``queried[t]`` 1 when y_t was asked.
    ``zd`` is a zeroed length-d work vector. When z = x^1 - x^2 has at least d / 4 nonzeros the
    rows are read and written contiguously (BLAS dot, vectorised axpy) instead of gathered.
    """
    shared = n_tasks
    use_shared = beta != 0.0
    d = W.shape[1]
    for t in range(start, stop):
        k = task_ids[t]
        if skipped_by_random_query(mode, uniforms, t, rate, losses, margins, queried):
            continue
        nz, lo, hi = anchor_and_difference(t, triplets, indptr, indices, data, zi, zv)
        dense_rows = 4 * nz >= d
        # p_t = x^T (I + S + O_k) z
        p = 0.0
        if dense_rows:
            for jj in range(nz):
                zd[zi[jj]] = zv[jj]
            for ii in range(lo, hi):
                i = indices[ii]
                acc = np.dot(W[k, i], zd)
                if use_shared:
                    acc += np.dot(W[shared, i], zd)
                p += data[ii] * (acc + zd[i])
        else:
            for ii in range(lo, hi):
                i = indices[ii]
                acc = 0.0
                for jj in range(nz):
                    j = zi[jj]
                    v = W[k, i, j]
                    if use_shared:
                        v += W[shared, i, j]
                    if i == j:
                        v += 1.0
                    acc += zv[jj] * v
                p += data[ii] * acc
        update, ga, gb = step_coefficients(t, p, mode, uniforms, rate, signs, data, lo, hi, zv, nz,
                                           alpha, beta, C, losses, margins, queried)
        if not update:
            if dense_rows:
                for jj in range(nz):
                    zd[zi[jj]] = 0.0
            continue
        if dense_rows:
            for ii in range(lo, hi):
                i = indices[ii]
                ca = ga * data[ii]
                cb = gb * data[ii]
                row = W[k, i]
                for j in range(d):
                    row[j] += ca * zd[j]
                if use_shared:
                    srow = W[shared, i]
                    for j in range(d):
                        srow[j] += cb * zd[j]
            for jj in range(nz):
                zd[zi[jj]] = 0.0
        else:
            for ii in range(lo, hi):
                i = indices[ii]
                xi = data[ii]
                for jj in range(nz):
                    j = zi[jj]
                    w = xi * zv[jj]
                    W[k, i, j] += ga * w
                    if use_shared:
                        W[shared, i, j] += gb * w
    return stop


# --------------------------------------------------------------------------- hash storage

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


# --------------------------------------------------------------------------- engine


class MultiTaskEngine(WritableOnUnpickle):
    """K coupled bilinear models M^k = I + S + O_k and the OMTRSL triplet loop.

    Parameters
    ----------
    d : int
        Feature count.
    n_tasks : int
        K.
    b : float
        Task-sharing parameter of A^{-1}(b) (b = 0: independent tasks, no shared matrix).
    C : float
        Aggressiveness cap of tau_t.
    query : {"all", "active", "random"}
        Algorithm 1 (ask every y_t), Algorithm 2 (ask with probability delta / (delta + |p_t|)) or
        random queries with probability ``rate``.
    rate : float
        delta (active) or the query probability (random); ignored for "all".
    storage : {"auto", "dense", "hash"}
        See the module docstring; "auto" is dense when (K + 1) d^2 doubles fit ``dense_budget``.
    dense_budget : int
        Bytes the dense storage may take under "auto".
    initial_capacity : int
        Hash slots reserved ahead.
    compact : bool
        Hash storage only: 16-byte pair records with float32 values (see :class:`PairedTaskStore`).
        When (d, K) do not fit the packed key the engine warns with the reason and keeps the
        32-byte layout (``compact_`` tells which layout is in use).
    """

    def __init__(self, d, n_tasks, b=1.0, C=1.0, query="all", rate=1.0, storage="auto",
                 dense_budget=1 << 30, initial_capacity=1 << 16, compact=False, budget=None):
        self.d = int(d)
        self.n_tasks = int(n_tasks)
        self.b = float(b)
        self.C = float(C)
        if query not in QUERY_POLICIES:
            raise ValueError(f"unknown query mode {query!r}; use one of {', '.join(QUERY_POLICIES)}")
        self.query = query
        self.mode = QUERY_POLICIES[query]
        self.rate = float(rate)
        self.alpha, self.beta = task_coefficients(self.b, self.n_tasks)
        n_mats = self.n_tasks + (1 if self.beta != 0.0 else 0)
        self.budget = budget  # sparsesim.memory.MemoryBudget: checked before allocations and rebuilds
        if storage == "auto":
            fits = budget is None or budget.fits(n_mats * self.d * self.d * 8)
            storage = "dense" if n_mats * self.d * self.d * 8 <= dense_budget and fits else "hash"
        if storage not in ("dense", "hash"):
            raise ValueError(f"unknown storage {storage!r}; use 'auto', 'dense' or 'hash'")
        self.storage = storage
        if storage == "dense":
            check_allocation(budget, n_mats * self.d * self.d * 8, f"dense storage of {n_mats} d x d matrices",
                             hint="storage='hash'")
            self.W = np.zeros((n_mats, self.d, self.d))
            self.store = None
        else:
            self.W = None
            reason = PairedTaskStore.compact_unfit_reason(self.d, self.n_tasks) if compact else None
            if reason:
                warnings.warn(f"{reason}; using the 32-byte pair records", RuntimeWarning, stacklevel=2)
            self.store = PairedTaskStore(self.d, self.n_tasks, initial_capacity, compact=bool(compact) and not reason)
        self.compact_ = self.store is not None and self.store.compact
        self.n_seen = 0
        self.n_updates = 0
        self.n_queries = 0

    @property
    def nbytes(self) -> int:
        return self.W.nbytes if self.W is not None else self.store.nbytes

    def partial_fit(self, X, triplets, signs, task_ids, uniforms=None):
        """Process triplets (rows of CSR ``X``) in order.

        Parameters
        ----------
        X : csr_matrix (canonical: sorted indices, no duplicates)
        triplets : int64 array (n, 3)
        signs : float64 array (n,) of +-1 (y_t)
        task_ids : int64 array (n,) in [0, K)
        uniforms : float64 array (n,), optional
            U(0, 1) draws for the query decision (required unless query == "all").

        Returns
        -------
        losses, margins, queried : arrays (n,)
        """
        n = triplets.shape[0]
        triplets = np.ascontiguousarray(triplets, dtype=np.int64)
        signs = np.ascontiguousarray(signs, dtype=np.float64)
        task_ids = np.ascontiguousarray(task_ids, dtype=np.int64)
        if uniforms is None:
            if self.mode != QUERY_ALL:
                raise ValueError("uniform draws are required for active / random queries")
            uniforms = np.zeros(1)
        uniforms = np.ascontiguousarray(uniforms, dtype=np.float64)
        losses = np.zeros(n)
        margins = np.zeros(n)
        queried = np.zeros(n, np.int8)
        if n == 0:
            return losses, margins, queried
        # the kernels do not bounds-check: refuse indices outside the arrays here
        if task_ids.shape != (n,) or task_ids.min() < 0 or task_ids.max() >= self.n_tasks:
            raise ValueError(f"task ids must be one per triplet in [0, {self.n_tasks})")
        if triplets.ndim != 2 or triplets.shape[1] != 3 or triplets.min() < 0 or triplets.max() >= X.shape[0]:
            raise ValueError(f"triplets must be (n, 3) row indices in [0, {X.shape[0]})")
        if signs.shape != (n,) or (self.mode != QUERY_ALL and uniforms.shape != (n,)):
            raise ValueError("signs (and uniforms for active / random queries) must hold one value per triplet")
        if X.shape[1] != self.d:
            raise ValueError(f"X has {X.shape[1]} features, the engine {self.d}")
        if not X.has_sorted_indices:
            X = X.copy()
            X.sort_indices()
        indptr = X.indptr.astype(np.int64, copy=False)
        indices = X.indices.astype(np.int64, copy=False)
        data = X.data.astype(np.float64, copy=False)
        if self.storage == "dense":
            zi, zv = triplet_scratch(X, 0)
            train_dense(self.W, self.n_tasks, indptr, indices, data, triplets, signs, task_ids, uniforms,
                        0, n, self.mode, self.rate, self.alpha, self.beta, self.C, zi, zv, np.zeros(self.d),
                        losses, margins, queried)
        else:
            zi, zv, keybuf, slots, xslots = triplet_scratch(X, 3)
            st = self.store

            def rec():  # the layout accessors of the current table (a grown table is a new array)
                if st.compact:
                    kbits, tmask = st.kbits, (1 << st.tbits) - 1
                    return PackedRecords((1 << kbits) - 1, kbits, tmask, (tmask + 1) << kbits)
                return WideRecords(st.table["tag"], st.table["nover"])

            def call(pos):
                t, x = st.table, st.overflow
                return train_paired(t["key"], t["s"], t["o"], rec(), st.counts, st.shift, st.max_used(),
                                    x.table["key"], x.table["val"], x.counts, x.shift, x.max_used(), st.diag,
                                    self.d, self.n_tasks, indptr, indices, data, triplets, signs, task_ids,
                                    uniforms, pos, n, self.mode, self.rate, self.alpha, self.beta, self.C,
                                    zi, zv, keybuf, slots, xslots, losses, margins, queried)

            run_growing(call, 0, n, budgeted_reserve(st, self.budget))
        self.n_seen += n
        self.n_updates += int(np.count_nonzero(losses))
        self.n_queries += int(queried.sum())
        return losses, margins, queried

    def matrices(self) -> tuple[list[sp.csr_matrix], sp.csr_matrix | None]:
        """([O_1, ..., O_K], S or None) as CSR matrices; M^k = I + S + O_k."""
        if self.W is not None:
            own = [sp.csr_matrix(self.W[k]) for k in range(self.n_tasks)]
            shared = sp.csr_matrix(self.W[self.n_tasks]) if self.W.shape[0] > self.n_tasks else None
        else:
            mats = self.store.matrices()
            own = mats[: self.n_tasks]
            shared = mats[self.n_tasks] if self.beta != 0.0 else None
        for m in own + ([shared] if shared is not None else []):
            m.eliminate_zeros()
        return own, shared


__all__ = [
    "MAX_LOAD",
    "MultiTaskEngine",
    "PairedTaskStore",
    "task_coefficients",
    "relationship_inverse",
    "omtrsl_tau",
    "train_dense",
    "skipped_by_random_query",
    "step_coefficients",
    "train_paired",
    "WideRecords",
    "PackedRecords",
]
