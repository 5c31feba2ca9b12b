"""Read-only scores x^T M x' of pairs of rows under the row store of a bilinear engine.

The triplet samplers (:mod:`sparsesim.sampling`) rank a pool of candidates per anchor with the
model being trained. Reading M where it lives, entry by entry, costs O(nnz(x) * nnz(x')) per
pair (the cost of the margin of one update), or, for an anchor scored against many documents
in a row, one scan of the anchor's rows of M into a dense vector of d floats (O(sum of those
rows' lengths) once, then O(nnz(x')) per document), whichever reads fewer entries. M is never
exported, copied or densified. Every entry is read as the update loop would read it at
the current step (SORS: the row's pending shrinkage; AdaSORS: each entry's skipped shrinkage;
the lazily shrunk diagonal), and nothing is written, so scoring does not change the model.
"""

from __future__ import annotations

import numba
import numpy as np

from .rowstore import field, learner_mode, value_at
from .rules import ADASORS, OASIS, SORS, catch_up, soft_threshold
from .segments import BASE, CAP, OFF, SHIFT, col_hash, home, probe

__all__ = ["score_pairs_store"]


# a probed entry costs about this many sequentially scanned ones (a cache miss against a stream)
PROBE_COST = 8


@numba.njit(cache=True, inline="always")
def _entry(table, s, mode, th_row, step, cum_target, cum_eta, lam, delta):
    """The value of record ``s`` of M at ``step``, as the update loop reads it (no write)."""
    v = value_at(table, s)
    if mode == SORS:
        v = soft_threshold(v, th_row)
    elif mode == ADASORS:
        v = catch_up(v, field(table, s, "last", step), field(table, s, "aux", 0.0), cum_target, cum_eta, lam, mode,
                     delta)
    return v


@numba.njit(cache=True, inline="always")
def _row_scan(table, rows, i, d, xv, u, mode, th_row, step, cum_target, cum_eta, lam, delta, clear):
    """u[j] += xv * M_ij over the stored off-diagonal entries of row i (``clear``: set them to 0)."""
    cap = rows[i, CAP]
    off = rows[i, OFF]
    if cap <= 0:
        return
    if rows[i, SHIFT] < 0 and mode != ADASORS:
        for j in range(d):
            if j == i:
                continue
            if clear:
                u[j] = 0.0
            else:
                u[j] += xv * _entry(table, off + j, mode, th_row, step, cum_target, cum_eta, lam, delta)
        return
    for s in range(off, off + cap):
        j = table[s]["col"]
        if j < 0 or j == i:
            continue
        if clear:
            u[j] = 0.0
        else:
            u[j] += xv * _entry(table, s, mode, th_row, step, cum_target, cum_eta, lam, delta)


@numba.njit(cache=True, nogil=True)
def score_pairs_store(table, rows, diag, diag_last, diag_aux, indptr, indices, data, relabel, pairs, step, cum_eta,
                      lam, delta, prox_diag, u, out):
    """``out[t] = X[pairs[t, 0]] M X[pairs[t, 1]]^T`` with M the store's matrix at ``step``.

    ``relabel`` maps X's features to the store's numbers; ``cum_eta`` holds the step sizes'
    prefix sums up to ``step`` (SORS / AdaSORS); ``u``: d zeros of scratch (left zero). Pairs
    that share their anchor one after another are scored from one scan of the anchor's rows
    when that reads fewer entries than probing each pair's. Reads M only.
    """
    mode = learner_mode(table)
    lazy = mode != OASIS
    d = diag.shape[0]
    cum_target = cum_eta[step] if lazy else 0.0
    n = pairs.shape[0]
    t = 0
    while t < n:
        a = pairs[t, 0]
        g = t
        cand = 0
        while g < n and pairs[g, 0] == a:
            cand += indptr[pairs[g, 1] + 1] - indptr[pairs[g, 1]]
            g += 1
        scan = 0
        for ka in range(indptr[a], indptr[a + 1]):
            i = relabel[indices[ka]]
            scan += d if rows[i, SHIFT] < 0 and rows[i, CAP] > 0 else rows[i, CAP]
        nnz_a = indptr[a + 1] - indptr[a]
        if scan + cand < PROBE_COST * nnz_a * cand:
            for ka in range(indptr[a], indptr[a + 1]):
                i = relabel[indices[ka]]
                th_row = lam * (cum_target - cum_eta[np.uint64(rows[i, BASE])]) if mode == SORS else 0.0
                _row_scan(table, rows, i, d, data[ka], u, mode, th_row, step, cum_target, cum_eta, lam, delta, False)
                dv = diag[i]
                if lazy and prox_diag:
                    dv = catch_up(dv, diag_last[i], diag_aux[i], cum_target, cum_eta, lam, mode, delta)
                u[i] += data[ka] * dv
            for q in range(t, g):
                c = pairs[q, 1]
                total = 0.0
                for kc in range(indptr[c], indptr[c + 1]):
                    total += data[kc] * u[relabel[indices[kc]]]
                out[q] = total
            for ka in range(indptr[a], indptr[a + 1]):
                i = relabel[indices[ka]]
                _row_scan(table, rows, i, d, 0.0, u, mode, 0.0, step, cum_target, cum_eta, lam, delta, True)
                u[i] = 0.0
        else:
            for q in range(t, g):
                out[q] = _probe_pair(table, rows, diag, diag_last, diag_aux, indptr, indices, data, relabel, a,
                                     pairs[q, 1], step, cum_target, cum_eta, lam, delta, prox_diag, mode)
        t = g


@numba.njit(cache=True, inline="always")
def _probe_pair(table, rows, diag, diag_last, diag_aux, indptr, indices, data, relabel, a, c, step, cum_target,
                cum_eta, lam, delta, prox_diag, mode):
    """x_a^T M x_c by probing M_ij for every feature i of x_a and j of x_c."""
    lazy = mode != OASIS
    total = 0.0
    for ka in range(indptr[a], indptr[a + 1]):
        i = relabel[indices[ka]]
        th_row = lam * (cum_target - cum_eta[np.uint64(rows[i, BASE])]) if mode == SORS else 0.0
        dv = diag[i]
        if lazy and prox_diag:
            dv = catch_up(dv, diag_last[i], diag_aux[i], cum_target, cum_eta, lam, mode, delta)
        has_row = rows[i, CAP] > 0
        dense = rows[i, SHIFT] < 0
        acc = 0.0
        for kc in range(indptr[c], indptr[c + 1]):
            j = relabel[indices[kc]]
            if j == i:
                acc += data[kc] * dv
                continue
            if not has_row:
                continue
            if dense and mode != ADASORS:
                s = rows[i, OFF] + j
            else:
                s = probe(table, rows, i, j, home(rows, i, j, col_hash(j)))
                if s < 0:
                    continue
            acc += data[kc] * _entry(table, s, mode, th_row, step, cum_target, cum_eta, lam, delta)
        total += data[ka] * acc
    return total
