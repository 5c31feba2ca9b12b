"""The update rules of the first-order bilinear learners, one small function per rule, and the
helpers every triplet kernel shares (z = x+ - x-, the keys of x z^T, prefetching).

Update rules (one small function per rule; the paper equation is cited at each):

* OASIS (Chechik et al. 2010):   ``M += tau * y x z^T``, ``tau = min(C, l / ||x z^T||_F^2)``
* SORS (Yao et al. 2015, eq. 5-7): ``M = prox_{eta_t lam r}(M - eta_t G)``, soft-threshold by
  ``eta_t * lam`` on every entry (SORS-I) or every off-diagonal entry (SORS-II); ``eta_t`` from
  a fixed schedule, or (``schedule="pa"``) per triplet ``eta_t = min(C, l_t / ||x z^T||_F^2)``,
  the OASIS step (:func:`pa_step`; ``eta_t = 0`` on a triplet of zero loss)
* AdaSORS (eq. 9-11):            ``H_ij = sqrt(H_ij^2 + G_ij^2)``, ``Sigma = delta + H``,
  ``M = prox(M - eta_t G / Sigma)`` with threshold ``lam * eta_t / Sigma_ij``

Exact lazy prox: the L1 prox of every untouched entry is deferred. An entry stores the step
``last`` up to which its shrinkage has been applied; when it is next read or written, the
shrinkage of steps ``last+1 .. t-1`` is applied at once: soft-thresholding composes, k steps of
thresholds th_1..th_k equal one step of threshold sum(th) while the sign does not cross zero,
and an entry that reaches zero stays zero until touched. Under AdaSORS, Sigma_ij only changes
when the entry is touched, so the accumulated threshold is ``lam * (cum_eta[t-1] - cum_eta[last])
/ Sigma_ij``. Under SORS, entries that reach zero leave the table (tombstones), so memory
follows the sparsity of M. Under AdaSORS a zero entry keeps its record, because its H_ij
is part of the exact state (the next touch must see it): memory follows the set of entries
ever touched, while the model (and its reported sparsity) keeps only the nonzeros.

SORS in the row store keeps no ``last`` per entry: every row i has a base step b_i, and an entry
stores its value extrapolated back to b_i, ``u = sign(v) * (|v| + lam * (cum_eta[last] -
cum_eta[b_i]))`` (:func:`at_base`). Its value at step t is then ``soft_threshold(u, lam *
(cum_eta[t] - cum_eta[b_i]))``, one threshold for the whole row: the composition rule above with
the shrinkage of steps b_i+1..last added and taken off again. A record is 8 bytes (compact)
instead of 12, and reading an entry costs no lookup of its ``last``. A row is rebased (every
entry brought to step t, b_i = t) whenever it is swept, and when its pending threshold passes
a limit, so that stored float32 values never carry a large offset.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from .hashstore import home_slot
from sparsesim.prefetch import prefetch

OASIS = 0
SORS = 1
ADASORS = 2


@numba.njit(cache=True, inline="always")
def soft_threshold(v, th):
    """sign(v) * max(|v| - th, 0): the L1 prox (SORS eq. 6/7, AdaSORS eq. 10/11); -0.0 for a
    negative v that reaches zero.

    Written with copysign and max, which compile to single instructions: the sign of an entry is
    a coin flip to the branch predictor, and selects on it were compiled to branches (a SORS
    pass 2 with three of them ran 112 instead of 33 us per triplet)."""
    return math.copysign(max(abs(v) - th, 0.0), v)


@numba.njit(cache=True, inline="always")
def catch_up(v, last, aux, cum_target, cum_eta, lam, mode, delta):
    """Apply the shrinkage of steps last+1..target that an untouched entry skipped (``last <=
    target``; ``cum_target = cum_eta[target]``, read once per update by the caller, since the
    compiler cannot keep it in a register across the loop's stores). No early exit for a current
    entry (``last == target``: the threshold is 0, the value unchanged): the test would be one
    more branch per entry, rarely taken."""
    th = lam * (cum_target - cum_eta[np.uint64(last)])  # (last >= 0: no wraparound code)
    if mode == ADASORS:
        th /= delta + aux
    return soft_threshold(v, th)


@numba.njit(cache=True, inline="always")
def at_base(v, th):
    """The stored form of value ``v`` of a row whose pending threshold is ``th`` (``lam *
    (cum_eta[t] - cum_eta[b_i])`` at the step t of ``v``): ``sign(v) * (|v| + th)``, so that
    ``soft_threshold(at_base(v, th), th') == soft_threshold(v, th' - th)`` up to rounding. A zero
    is stored as ``+-th``, which reads as zero from then on. No branch (see :func:`soft_threshold`)."""
    return math.copysign(abs(v) + th, v)


@numba.njit(cache=True, inline="always")
def oasis_tau(loss, sq_x, sq_z, C):
    """OASIS step: tau = min(C, l / ||x z^T||_F^2), with ||x z^T||_F^2 = ||x||^2 ||z||^2."""
    denom = sq_x * sq_z
    if denom <= 0.0:
        return 0.0
    return min(C, loss / denom)


@numba.njit(cache=True, inline="always")
def pa_step(loss, sq_x, sq_z, cap):
    """SORS step of ``schedule="pa"``: eta_t = min(cap, l_t / ||x z^T||_F^2) for a triplet of
    positive loss (the passive-aggressive step of OASIS, :func:`oasis_tau`), so that the gradient
    step of eq. (5) alone would bring the margin to 1; 0 on a triplet of zero loss or of a zero
    ``x z^T`` (no step and no shrinkage: the prox of eq. 6/7 at threshold ``0 * lam``)."""
    if loss <= 0.0:
        return 0.0
    return oasis_tau(loss, sq_x, sq_z, cap)


@numba.njit(cache=True, inline="always")
def proximal_entry(v, g, eta, lam_eta_shrinks, mode, delta, aux):
    """One entry of the SORS / AdaSORS step, with g = -G_ij.

    Returns the new value and the new H_ij (AdaSORS; unchanged otherwise).
    SORS eq. (5): v + eta g, then soft-threshold eta * lam (eq. 6/7).
    AdaSORS eq. (9): H = sqrt(H^2 + g^2), v + eta g / (delta + H), threshold lam eta / (delta + H).
    """
    if mode == ADASORS:
        aux = np.sqrt(aux * aux + g * g)
        sigma = delta + aux
        v = v + eta * g / sigma
        return soft_threshold(v, lam_eta_shrinks / sigma), aux
    return soft_threshold(v + eta * g, lam_eta_shrinks), aux


@numba.njit(cache=True)
def merge_difference(indptr, indices, data, p, n, zi, zv):
    """z = x_p - x_n as sorted (index, value) pairs in zi/zv; exact zeros dropped. Returns nnz."""
    a, a_end = indptr[p], indptr[p + 1]
    b, b_end = indptr[n], indptr[n + 1]
    m = 0
    while a < a_end or b < b_end:
        if b >= b_end or (a < a_end and indices[a] < indices[b]):
            j, v = indices[a], data[a]
            a += 1
        elif a >= a_end or indices[b] < indices[a]:
            j, v = indices[b], -data[b]
            b += 1
        else:
            j, v = indices[a], data[a] - data[b]
            a += 1
            b += 1
        if v != 0.0:
            zi[m] = j
            zv[m] = v
            m += 1
    return m


PREFETCH_DISTANCE = 12  # entries ahead: enough loads in flight to hide DRAM latency (hash-store kernels)


@numba.njit(cache=True, inline="always")
def outer_keys(indices, lo, hi, zi, nz, d, keybuf):
    """Keys i*d+j of the outer product x z^T in row-major order (x = indices[lo:hi], z = zi[:nz]),
    -1 for a diagonal entry (kept dense beside the table), so the passes can prefetch ahead."""
    e = 0
    for ii in range(lo, hi):
        i = indices[ii]
        base = i * d
        for jj in range(nz):
            j = zi[jj]
            keybuf[e] = -1 if j == i else base + j
            e += 1


@numba.njit(cache=True, inline="always")
def prefetch_ahead(keys, keybuf, n, shift):
    """Start loading the home slots of the first ``n`` off-diagonal keys of ``keybuf``."""
    for e in range(n):
        if keybuf[e] >= 0:
            prefetch(keys, home_slot(keybuf[e], shift))
