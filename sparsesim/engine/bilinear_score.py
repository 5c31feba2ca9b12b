"""Read-only scores x^T M x' of pairs of rows under the row store of a bilinear engine.

The triplet samplers (:mod:`sparsesim.sampling`) rank a pool of candidates per anchor with the
model being trained. For an anchor scored against
a group of documents, only the entries M_ij with i a feature of the anchor and j a feature of
some document of the group are read: a dense row at those columns directly, a sparse row by
probing them or by scanning the row, whichever reads fewer entries. M is never
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


@numba.njit(cache=True, nogil=True)
def score_pairs_store(table, rows, diag, diag_last, diag_aux, indptr, indices, data, relabel, pairs, step, cum_eta,
                      lam, delta, prox_diag, pos, out):
    """``out[t] = X[pairs[t, 0]] M X[pairs[t, 1]]^T`` with M the store's matrix at ``step``.

    ``relabel`` maps X's features to the store's numbers; ``cum_eta`` holds the step sizes'
    prefix sums up to ``step`` (SORS / AdaSORS); ``pos``: d entries of -1 (scratch, left -1).
    Pairs that share their anchor one after another form a group: J, the union of the group's
    candidate features, is gathered once, and u = x_a M restricted to J is accumulated row by row
    of x_a (each row read directly at J when dense, else scanned or probed at J, whichever reads
    fewer entries); each pair is then x_c . u. Reads M only.
    """
    mode = learner_mode(table)
    lazy = mode != OASIS
    n = pairs.shape[0]
    longest = 0
    t = 0
    while t < n:
        g, cand = t, 0
        while g < n and pairs[g, 0] == pairs[t, 0]:
            cand += indptr[pairs[g, 1] + 1] - indptr[pairs[g, 1]]
            g += 1
        longest = max(longest, cand)
        t = g
    cols_j = np.empty(longest, np.int64)
    hash_j = np.empty(longest, np.uint64)
    u = np.empty(longest)
    cum_target = cum_eta[step] if lazy else 0.0
    t = 0
    while t < n:
        a = pairs[t, 0]
        g = t
        nj = 0
        while g < n and pairs[g, 0] == a:
            c = pairs[g, 1]
            for kc in range(indptr[c], indptr[c + 1]):
                j = relabel[indices[kc]]
                if pos[j] < 0:
                    pos[j] = nj
                    cols_j[nj] = j
                    hash_j[nj] = col_hash(j)
                    u[nj] = 0.0
                    nj += 1
            g += 1
        for ka in range(indptr[a], indptr[a + 1]):
            i = relabel[indices[ka]]
            xv = data[ka]
            if pos[i] >= 0:  # the diagonal
                dv = diag[i]
                if lazy and prox_diag:
                    dv = catch_up(dv, diag_last[i], diag_aux[i], cum_target, cum_eta, lam, mode, delta)
                u[pos[i]] += xv * dv
            cap = rows[i, CAP]
            if cap <= 0:
                continue
            th_row = lam * (cum_target - cum_eta[np.uint64(rows[i, BASE])]) if mode == SORS else 0.0
            off = rows[i, OFF]
            if rows[i, SHIFT] < 0 and mode != ADASORS:  # dense: M_ij at its own slot
                for k in range(nj):
                    j = cols_j[k]
                    if j != i:
                        u[k] += xv * _entry(table, off + j, mode, th_row, step, cum_target, cum_eta, lam, delta)
            elif cap < PROBE_COST * nj:
                for s in range(off, off + cap):
                    j = table[s]["col"]
                    if j < 0 or j == i or pos[j] < 0:
                        continue
                    u[pos[j]] += xv * _entry(table, s, mode, th_row, step, cum_target, cum_eta, lam, delta)
            else:
                for k in range(nj):
                    j = cols_j[k]
                    if j == i:
                        continue
                    s = probe(table, rows, i, j, home(rows, i, j, hash_j[k]))
                    if s >= 0:
                        u[k] += xv * _entry(table, s, mode, th_row, step, cum_target, cum_eta, lam, delta)
        for q in range(t, g):
            c = pairs[q, 1]
            total = 0.0
            for kc in range(indptr[c], indptr[c + 1]):
                total += data[kc] * u[pos[relabel[indices[kc]]]]
            out[q] = total
        for k in range(nj):
            pos[cols_j[k]] = -1
        t = g
