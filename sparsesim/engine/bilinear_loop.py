"""The update loop of every first-order bilinear learner (OASIS, SORS, AdaSORS) over the row
store: triplets in, sparse M updated in place.

For a triplet (x, x+, x-) with sign y (the OMTRSL protocol's coin flip; +1 otherwise) the
hinge loss is ``l = max(0, 1 - y * x^T M (x+ - x-))`` and its subgradient is
``G = -y * x z^T`` with ``z = x+ - x-``. Only the entries (i, j) with x_i != 0 and z_j != 0 are
read (for the margin) and written (for the update): a step costs O(nnz(x) * nnz(z)), whatever
d and nnz(M) are.

The update rules and the exact lazy prox are in :mod:`sparsesim.engine.rules`, the row store's
segments in :mod:`sparsesim.engine.segments`; this module holds the compiled loop that applies
the rules to the store (:func:`train_triplets`, its pass 1 :func:`pass1_rows`) and the sweeps
that apply pending shrinkage. The engine object that runs it is
:class:`sparsesim.engine.bilinear.BilinearEngine`.
"""

from __future__ import annotations

import numba
import numpy as np

from sparsesim.prefetch import prefetch_item
from .atomics import claim, meet, reset_claims
from .primitives import sq_norms
from .rules import (ADASORS, OASIS, SORS, at_base, catch_up, merge_difference, oasis_tau, pa_step, proximal_entry,
                    soft_threshold)
from .primitives import U
from .rowstore import field, learner_mode, set_field, set_value_at, value_at
from .segments import (BASE, EMPTY, LIVE, OFF, SHIFT, TOMBSTONE, USED, CAP, col_hash, fitted_cap, move_planned,
                       needs_room, plan_moves, probe, release_planned, remove_at, row_homes)

# The kernels below allocate nothing, so they are compiled without numba's reference counting
# (``_nrt=False``): with it, every inlined helper that takes an array (``probe``, ``catch_up``'s
# callers ...) left an atomic incref/decref pair, a call and a register spill in the per-entry loop
# (two thirds of pass 1's time with its records in cache). A kernel that tried to allocate would
# fail to compile, not misbehave.
# Entries ahead the loop below prefetches: 32 (pass 1 222-224 vs 228-241 us per triplet with 20, 226
# with 48: SORS-I synthetic, three interleaved runs; news20 279 vs 286), once the loop ran ~9.5 ns
# per entry; with the 12-byte records of an earlier engine 20 had measured best (docs/engine.md,
# "Prefetching").
ROW_PREFETCH_DISTANCE = 32


def padded_homes(n_entries):
    """A zeroed ``homes`` for ``n_entries`` entries with ROW_PREFETCH_DISTANCE more, so that pass 1
    reads the slot to prefetch ahead without testing for the end (past its m entries it finds
    zeros or slots of an earlier triplet: valid addresses, whose prefetch is only wasted)."""
    return np.zeros(n_entries + ROW_PREFETCH_DISTANCE, np.int64)


# Rows of x a training thread takes at a time for pass 1 (with more threads than one): small
# enough that the threads end pass 1 together, large enough to amortise the shared counter and
# the prefetch's warm-up at the start of every chunk.
ROWS_PER_CLAIM = 4
# the threads' work counters (atomics.claim): rows short of room to sweep, rows of x for pass 1
SWEEPS, ROWS = 0, 1
# A SORS row is rebased once the shrinkage pending on it passes this threshold: its stored values
# then carry an offset of at most ~0.25, so a float32 record holds an entry to within ~1.5e-8
# (a margin over ~10^4 entries to within ~10^-6), and at lam = 1e-6, eta = 1 a row is rebased
# once per 250,000 steps at most.
REBASE_AT = 0.25


@numba.njit(cache=True, inline="always")
def read_directly(rows, i, mode):
    """Pass 1 reads row i without probing: a dense row, under OASIS or SORS (AdaSORS's entries
    carry state that the generic path catches up). Such a row gets no insert and no ``prev``, so
    the give-back of a zero-loss triplet skips it."""
    return mode != ADASORS and rows[i, SHIFT] < 0


@numba.njit(cache=True, inline="always")
def pending(rows, i, cum_target, cum_eta, lam):
    """The threshold of the shrinkage pending on every entry of SORS row i at the step whose
    ``cum_eta`` is ``cum_target`` (see :func:`~sparsesim.engine.rules.at_base`)."""
    return lam * (cum_target - cum_eta[U(rows[i, BASE])])


@numba.njit(cache=True, inline="always")
def to_sweep(rows, i, extra, mode, step, cum_eta, lam, rebase_at):
    """Row i is short of room for ``extra`` inserts or, under SORS, its pending threshold at
    ``step`` has passed ``rebase_at`` (its stored values would carry a large offset: float32
    loses their low digits) or it was rebased at ``step`` already. The last case makes the
    answer the same before and after another thread sweeps row i (the threads list the rows to
    sweep while they sweep them); such a sweep changes nothing."""
    if needs_room(rows, i, extra):
        return True
    return mode == SORS and (rows[i, BASE] == step or pending(rows, i, cum_eta[step], cum_eta, lam) > rebase_at)


@numba.njit(cache=True, _nrt=False, nogil=True)
def pass1_rows(table, rows, xr, data, lo, own, q0, q1, y, zi, zv, nz, homes, m, slots, prev, accs, diag,
               diag_last, diag_aux, target, cum_eta, eta, th, lam, delta, prox_diag):
    """Pass 1 of :func:`train_triplets` on the rows ``own[q0:q1]`` of x (positions k in ``xr``,
    the store's numbers of x's features, and in ``data[lo:]``, their values; ``homes[:m]``: the
    home slots of their entries, in that order): each row's sum of ``z_j * M_ij`` into ``accs``, every entry caught up to step ``target``, the absent ones
    the update will write inserted (``slots``, ``prev``: see there).

    A function of its own (called, not inlined): the loop compiles apart from the rest of the
    update loop's state, and the profile (``benchmarks/profile_engine.py``) reruns it on records
    in cache. Splitting it out measured neither faster nor slower."""
    mode = learner_mode(table)
    lazy = mode != OASIS
    cum_target = cum_eta[target]
    th_row = 0.0
    for h in range(min(ROW_PREFETCH_DISTANCE, m)):
        prefetch_item(table, homes[h])
    h = 0
    for q in range(q0, q1):
        k = own[q]
        i = xr[k]
        yx = y * data[lo + k]
        acc = 0.0
        claimed_empty = 0
        claimed = 0
        e = k * nz
        if mode == SORS:
            th_row = pending(rows, i, cum_target, cum_eta, lam)
        if read_directly(rows, i, mode):
            # a dense row: every entry has its record at off + j, found; no probe, no insert,
            # and no ``prev`` (the give-back skips the row). Its
            # record of column i is never written (the diagonal lives in ``diag``), so it reads
            # as a zero; the diagonal's value is selected in its place, in the same order
            off = rows[i, OFF]
            dv = diag[i]
            if lazy and prox_diag:
                dv = catch_up(dv, diag_last[i], diag_aux[i], cum_target, cum_eta, lam, mode, delta)
            with_diag = False
            for jj in range(nz):
                prefetch_item(table, homes[U(h + ROW_PREFETCH_DISTANCE)])
                j = zi[U(jj)]
                on_diag = j == i
                s = off + j
                v = value_at(table, s)
                if mode == SORS:
                    v = soft_threshold(v, th_row)
                v = dv if on_diag else v
                with_diag |= on_diag
                slots[U(e)] = -1 if on_diag else s
                acc += zv[U(jj)] * v
                e += 1
                h += 1
            if with_diag and lazy and prox_diag:
                diag[i] = dv
                diag_last[i] = target
            accs[k] = acc
            continue
        for jj in range(nz):
            # (no test: ``homes`` runs ROW_PREFETCH_DISTANCE past m, and a prefetch of the
            # diagonal's -1 or of a stale slot is a hint that cannot fault)
            prefetch_item(table, homes[U(h + ROW_PREFETCH_DISTANCE)])
            hs = homes[U(h)]
            if hs < 0:
                v = diag[i]
                if lazy and prox_diag:
                    v = catch_up(v, diag_last[i], diag_aux[i], cum_target, cum_eta, lam, mode, delta)
                    diag[i] = v
                    diag_last[i] = target
                slots[U(e)] = -1
            else:
                j = zi[U(jj)]
                code = probe(table, rows, i, j, hs)
                # found or absent alike, without a branch (a coin flip to the predictor):
                # an absent entry is read and written at its free slot as a zero entry
                found = code >= 0
                s = code if found else -2 - code
                us = U(s)
                c = table[us]["col"]  # j, or the free slot's EMPTY / TOMBSTONE
                enter = True
                if mode == SORS:  # (the first step of SORS, eq. 5-7, of a zero entry, is not zero:
                    # soft_threshold(eta * g, th) != 0 exactly when |eta * g| > th)
                    enter = abs(eta * (yx * zv[U(jj)])) > th
                claim_slot = enter and not found
                stored = value_at(table, us) if found else 0.0
                v = stored
                if mode == SORS:  # (the row's pending shrinkage; the record stays as it is)
                    v = soft_threshold(stored, th_row)
                elif mode == ADASORS:
                    aux = field(table, s, "aux", 0.0) if found else 0.0
                    set_field(table, s, "aux", aux)
                    v = catch_up(v, field(table, s, "last", target) if found else target, aux, cum_target,
                                 cum_eta, lam, mode, delta)
                    set_field(table, s, "last", target)
                    stored = v
                set_value_at(table, us, stored)
                table[us]["col"] = j if claim_slot else c
                claimed += 1 if claim_slot else 0
                claimed_empty += 1 if claim_slot and c == EMPTY else 0
                prev[U(e)] = c
                slots[U(e)] = s if found or enter else -2
            acc += zv[U(jj)] * v
            e += 1
            h += 1
        rows[i, USED] += claimed_empty
        rows[i, LIVE] += claimed
        accs[k] = acc


@numba.njit(cache=True, _nrt=False, nogil=True)
def train_triplets(
    table, cols, vals, lasts, auxs, rows, state, d,
    diag, diag_last, diag_aux,
    indptr, indices, data, relabel,
    triplets, signs, start, stop, step,
    etas, cum_eta, C, lam, delta, prox_diag, has_last, has_aux, drop_zeros, rebase_at,
    zi, zv, zh, own, homes, xr, slots, prev, accs, plan, order, losses, steps,
    tid, n_threads, sync,
):
    """Process triplets[start:stop]; returns (next_triplet, step, slots_needed).

    The learner (OASIS, SORS or AdaSORS) is the one the pool's records are laid out for
    (:func:`~sparsesim.engine.rowstore.learner_mode`), so each compiles its own loop.

    Before a triplet starts, every row of x that could pass its load limit is swept (with
    ``drop_zeros``: its pending shrinkage applied, zero entries out) and, if still short of
    room, moves to a larger segment; when the pool lacks the room, it stops (returning the triplet it could not start
    and the slots it needs) so the caller can compact or grow the pool and call again.
    ``C`` is OASIS's cap on its step; under SORS / AdaSORS a positive ``C`` selects the per-triplet
    step (``schedule="pa"``, :func:`~sparsesim.engine.rules.pa_step` with cap ``C``), written to
    ``etas[step]`` and ``cum_eta[step]`` as each triplet's loss is known (0 otherwise: the
    schedule's ``etas`` as given).
    ``losses[t]`` receives the hinge loss before the update of triplet t and ``steps[t]`` the
    scale of its update ``M += steps[t] * x z^T`` (OASIS: ``tau_t * y_t``; SORS / AdaSORS:
    ``y_t``, their step size is the schedule's; 0 without an update). The home slot of
    every entry (i, j) of the outer product is computed once into ``homes`` (-1: the diagonal,
    kept dense beside the pool) so that both passes can prefetch a few entries ahead (both ends
    of a record: one of 12 or 20 bytes can straddle two cache lines; ``homes`` holds those of the
    rows a thread took last, in the order it took them). Entry (k, jj) of the outer product (the
    k-th row of x, the jj-th entry of z) is at ``k * nnz(z) + jj`` of ``slots`` and ``prev``.
    The passes and the sweeps read and write the pool's records through ``table`` (one pointer;
    the record size and field offsets are constants of the compiled loop); the copies of moving
    rows and the pool's free lists use the field views ``cols``, ``vals``, ``lasts``, ``auxs``.

    Pass 1 inserts every absent entry the update would write (as a zero, at the free slot its
    probe found; ``prev`` keeps what that slot held), so that pass 2 writes through ``slots``
    without a found-or-absent branch; a triplet that ends with zero loss gives those slots back
    exactly as they were. Under SORS an absent entry whose first step the prox would set to zero
    (``|g| <= lam``) is not inserted (``slots`` -2), as it never enters the model.

    Threads: with ``n_threads`` > 1, that many calls run at once (``tid`` 0, 1, ..., each with its
    own ``zi``, ``zv``, ``zh`` and ``own``; the other work arrays are shared). Every entry of M lives in
    one row, so threads that update different rows of x never write the same entry. The
    threads sweep the rows short of room, taking them one at a time from a shared counter
    (:func:`~sparsesim.engine.atomics.claim`); then thread 0 takes, in row order, the segments of
    the rows that must move (``plan``; so that all start the triplet or none does); then the
    threads take the rows of x from another counter (the ones that move first, one at a time,
    then chunks of ``ROWS_PER_CLAIM``), each moving and running pass 1 on the rows
    it took and later pass 2 on the same rows (``own``: their positions, in cache on its core).
    Taking rows as they go, not a fixed share, keeps the threads busy to the end of pass 1
    when a few rows' moves take longer than the rest of an update. They meet
    (:func:`~sparsesim.engine.atomics.meet` on ``sync``) four times per triplet: before touching its
    rows (all are done with the previous triplet's); after sweeping; after thread 0's plan; after
    pass 1, to read each other's row sums ``accs``. Every thread then adds the margin up in row
    order, as one thread does. The pool hands out the same segments and every entry sees the same
    arithmetic whatever the thread count, so the model (and when the pool fills) is the same bit
    for bit. Thread 0 writes ``losses``.
    """
    mode = learner_mode(table)  # (OASIS, SORS or AdaSORS: a constant of each compiled loop)
    shared = n_threads > 1
    for t in range(start, stop):
        a = triplets[t, 0]
        y = signs[t]
        nz = merge_difference(indptr, indices, data, triplets[t, 1], triplets[t, 2], zi, zv)
        lo, hi = indptr[a], indptr[a + 1]
        n_rows = hi - lo
        # the store numbers features by descending document frequency (``relabel``: X's feature
        # -> the store's); z's order stays X's, so the arithmetic is the same in any numbering
        for jj in range(nz):
            zi[jj] = relabel[zi[jj]]
        for k in range(n_rows):
            xr[k] = relabel[indices[lo + k]]
        seq = 4 * (t - start)
        if shared and t > start:  # every thread is done with the rows of the previous triplet
            meet(sync, tid, n_threads, seq, False)
        # room: sweep the rows short of it, then (thread 0, in row order) take the segments of
        # the rows that must move; each row moves when a thread takes it for pass 1
        if drop_zeros and not shared:
            for k in range(n_rows):
                i = xr[k]
                if to_sweep(rows, i, nz, mode, step, cum_eta, lam, rebase_at):
                    sweep_row(table, rows, i, step, cum_eta, lam, mode, delta)
        elif drop_zeros:
            # every thread lists the same rows to sweep (a sweep changes no row's load, and
            # to_sweep answers the same for a row rebased meanwhile), then they take them one at a time
            n_short = 0
            for k in range(n_rows):
                if to_sweep(rows, xr[k], nz, mode, step, cum_eta, lam, rebase_at):
                    own[n_short] = k
                    n_short += 1
            while True:
                u = claim(sync, n_threads, 1, SWEEPS)
                if u >= n_short:
                    break
                sweep_row(table, rows, xr[own[u]], step, cum_eta, lam, mode, delta)
        short = False
        if shared:
            meet(sync, tid, n_threads, seq + 1, False)
        if tid == 0:
            short = not plan_moves(cols, rows, state, xr, 0, n_rows, nz, d, plan)
            if shared:
                reset_claims(sync, n_threads, ROWS)
        if shared:
            short = meet(sync, tid, n_threads, seq + 2, short)
        if short:
            need = 0  # room for every row of x (a compaction may shrink rows moved just now)
            for k in range(n_rows):
                need += fitted_cap(rows[xr[k], LIVE] + nz, d)
            return t, step, need
        step += 1
        target = step - 1
        # SORS / AdaSORS with the per-triplet step (``C`` > 0: its cap) know eta_t after pass 1;
        # pass 1 only reads ``eta`` and ``th`` to decide which absent entries enter, |eta g| >
        # eta lam, the same test as |g| > lam for any eta_t > 0 (eta_t = 0: no update at all)
        per_triplet = mode != OASIS and C > 0.0
        if mode == OASIS:
            eta = 0.0
            th = 0.0
        elif per_triplet:
            eta = 1.0
            th = lam
        else:
            eta = etas[step]
            th = lam * eta
        for jj in range(nz):
            zh[jj] = col_hash(zi[jj])
        # the order in which the threads take rows: the ones that move first, one at a time
        # (each thread computes the same order from the plan)
        n_moved = 0
        if shared:
            for k in range(n_rows):
                if plan[k, 0] >= 0:
                    order[n_moved] = k
                    n_moved += 1
            p = n_moved
            for k in range(n_rows):
                if plan[k, 0] < 0:
                    order[p] = k
                    p += 1
        # pass 1: margin x^T M_t z, bringing every touched entry up to date with M_t and
        # inserting the absent ones the update will write
        n_own = 0
        while True:
            if shared:
                u = claim(sync, n_threads, 1, ROWS)
                k0 = u if u < n_moved else n_moved + (u - n_moved) * ROWS_PER_CLAIM
                k1 = min(k0 + (1 if u < n_moved else ROWS_PER_CLAIM), n_rows)
            else:
                k0 = n_rows if n_own else 0
                k1 = n_rows
            if k0 >= n_rows:
                break
            h = 0
            for p in range(k0, k1):
                k = order[p] if shared else p
                i = xr[k]
                move_planned(cols, vals, lasts, auxs, rows, i, d, plan, k, has_last, has_aux)
                own[n_own + p - k0] = k
                row_homes(rows, i, zi, zh, nz, homes, h)
                h += nz
            m = h
            pass1_rows(table, rows, xr, data, lo, own, n_own, n_own + k1 - k0, y, zi, zv, nz, homes, m, slots,
                       prev, accs, diag, diag_last, diag_aux, target, cum_eta, eta, th, lam, delta, prox_diag)
            n_own += k1 - k0
        if shared:
            meet(sync, tid, n_threads, seq + 3, False)
        if tid == 0:  # (every move of this triplet is done: no thread reads an old segment)
            release_planned(cols, state, n_rows, d, plan)
            if shared:  # (every sweep of this triplet is done too)
                reset_claims(sync, n_threads, SWEEPS)
        margin = 0.0
        for k in range(n_rows):  # in row order, whichever thread summed the row
            margin += data[lo + k] * accs[k]
        loss = 1.0 - y * margin
        if per_triplet:  # (every thread writes the same eta_t: the margin is summed in row order)
            sq_x, sq_z = sq_norms(data, lo, hi, zv, nz)
            eta = pa_step(loss, sq_x, sq_z, C)
            th = lam * eta
            etas[step] = eta
            cum_eta[step] = cum_eta[target] + eta
        if loss <= 0.0:
            if tid == 0:
                losses[t] = 0.0
                steps[t] = 0.0
            # no update: the inserted slots go back to what they held (all of them, so no probe
            # path that passed one of them breaks); under SORS entries that shrank to zero while
            # catching up leave the table
            cum_target = cum_eta[target]
            for q in range(n_own):
                k = own[q]
                i = xr[k]
                if read_directly(rows, i, mode):
                    continue  # (a dense row: nothing inserted, no zero record leaves it)
                e = k * nz
                th_row = pending(rows, i, cum_target, cum_eta, lam) if mode == SORS else 0.0
                for jj in range(nz):
                    s = slots[e]
                    if s >= 0:
                        if prev[e] < 0:
                            table[s]["col"] = prev[e]
                            rows[i, USED] -= 1 if prev[e] == EMPTY else 0
                            rows[i, LIVE] -= 1
                        elif mode == SORS and soft_threshold(value_at(table, s), th_row) == 0.0:
                            remove_at(table, rows, i, s)
                    e += 1
            continue
        if tid == 0:
            losses[t] = loss
        if mode == OASIS:
            sq_x, sq_z = sq_norms(data, lo, hi, zv, nz)
            scale = oasis_tau(loss, sq_x, sq_z, C) * y
        else:
            scale = y
        if tid == 0:
            steps[t] = scale
        # pass 2: write the update through the slots pass 1 found or filled (they stay valid:
        # inserts and tombstones never move other entries), on the rows this thread took
        n_entries = n_rows * nz
        cum_target, cum_step = cum_eta[target], cum_eta[step]
        th_row, th_next = 0.0, 0.0
        for q in range(n_own):
            k = own[q]
            i = xr[k]
            xi = data[lo + k]
            e = k * nz
            if mode == SORS:  # the row's pending threshold before and after this step
                th_row = pending(rows, i, cum_target, cum_eta, lam)
                th_next = pending(rows, i, cum_step, cum_eta, lam)
            # the entry ROW_PREFETCH_DISTANCE ahead in this thread's order: in this row or the next
            ahead_next = own[q + 1] * nz + ROW_PREFETCH_DISTANCE - nz if q + 1 < n_own else -(1 << 40)
            for jj in range(nz):
                f = e + ROW_PREFETCH_DISTANCE if jj + ROW_PREFETCH_DISTANCE < nz else ahead_next + jj
                if 0 <= f < n_entries and slots[U(f)] >= 0:
                    prefetch_item(table, slots[U(f)])
                g = scale * xi * zv[U(jj)]
                s = slots[U(e)]
                if s < 0:
                    if s == -1:  # the diagonal (-2: an entry SORS leaves out)
                        if mode == OASIS:
                            diag[i] += g
                        else:
                            v, h = proximal_entry(diag[i], g, eta, th if prox_diag else 0.0, mode, delta,
                                                  diag_aux[i])
                            diag[i] = v
                            diag_aux[i] = h
                            diag_last[i] = step
                else:
                    stored = value_at(table, s)
                    if mode == OASIS:
                        v = stored + g
                        stored = v
                    elif mode == SORS:
                        v = proximal_entry(soft_threshold(stored, th_row), g, eta, th, mode, delta, 0.0)[0]
                        stored = at_base(v, th_next)
                    else:
                        v, h = proximal_entry(stored, g, eta, th, mode, delta, field(table, s, "aux", 0.0))
                        set_field(table, s, "last", step)
                        set_field(table, s, "aux", h)
                        stored = v
                    set_value_at(table, s, stored)
                    if v == 0.0 and mode != ADASORS:
                        remove_at(table, rows, i, s)
                e += 1
    return stop, step, 0


@numba.njit(cache=True, _nrt=False)
def sweep_row(table, rows, i, target, cum_eta, lam, mode, delta, drop_zeros=True):
    """Apply the pending shrinkage of row i's entries up to step ``target``; with ``drop_zeros``
    zero entries leave a sparse row (a dense row keeps its zero records). A SORS row is rebased:
    its records hold their values at ``target``, which becomes its base step.

    One pass over the segment without a data-dependent branch: a free slot goes through the
    same arithmetic as an entry (its ``last`` read as ``target``, so nothing to apply) and keeps
    its column mark. Whether a slot is free, and whether an entry reached zero, are coin flips to
    the branch predictor on records just loaded from memory (the sweep runs before a row moves,
    on a segment not in cache)."""
    lo = rows[i, OFF]
    drop = drop_zeros and rows[i, SHIFT] >= 0
    cum_target = cum_eta[target]
    th_row = pending(rows, i, cum_target, cum_eta, lam) if learner_mode(table) == SORS else 0.0
    removed = 0
    for s in range(lo, lo + rows[i, CAP]):
        us = U(s)
        c = table[us]["col"]
        live = c >= 0
        if learner_mode(table) == SORS:
            v = soft_threshold(value_at(table, us), th_row)
        else:
            v = catch_up(value_at(table, us), field(table, s, "last", target) if live else target,
                         field(table, s, "aux", 0.0), cum_target, cum_eta, lam, mode, delta)
            set_field(table, s, "last", target)
        set_value_at(table, us, v)
        dead = drop and live and v == 0.0
        table[us]["col"] = TOMBSTONE if dead else c
        removed += 1 if dead else 0
    rows[i, LIVE] -= removed
    rows[i, BASE] = target


@numba.njit(cache=True, _nrt=False)
def finalize_lazy(table, rows, d, diag, diag_last, diag_aux, target, cum_eta, lam, mode, delta, prox_diag,
                  drop_zeros):
    """Apply all pending shrinkage up to step ``target``; with ``drop_zeros`` zero entries leave
    the store (tombstones in sparse rows; a dense row keeps its zero records)."""
    for i in range(d):
        sweep_row(table, rows, i, target, cum_eta, lam, mode, delta, drop_zeros)
    if prox_diag:
        for i in range(diag.shape[0]):
            diag[i] = catch_up(diag[i], diag_last[i], diag_aux[i], cum_eta[target], cum_eta, lam, mode, delta)
            diag_last[i] = target
