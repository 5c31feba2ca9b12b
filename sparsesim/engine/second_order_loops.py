"""The compiled kernels of the selective-sampling, second-order bilinear learners (Hao et al.,
CIKM 2015; AROMA): the update rules, one per paper equation, the sparse kernel over the shared
hash store (``train_sparse``) and the full-covariance kernel for small d (``train_full``). The
engines that run them, and the rules' equations, are in :mod:`sparsesim.engine.second_order`.
"""

from __future__ import annotations

import numba

from .hashstore import find, find_or_insert
from .primitives import decide_query, sq_norms
from .rules import merge_difference, oasis_tau

# update rules
PA = 0
CW = 1
AROW = 2
RULES = {"pa": PA, "cw": CW, "arow": AROW}

# kernel status
DONE = 0
NEED_ROOM = 1
NEED_LABEL = 2
NEED_UPDATE = 3


# ------------------------------------------------------------------ small pure update rules


_DIAGONAL = -2  # slot code of a diagonal entry (kept dense beside the table)

# what a kernel does with a triplet after the query step
SKIP = 0      # not queried, or queried with zero hinge loss: the model stays
ASK = 1       # a label must come from the Python oracle (return NEED_LABEL)
UPDATE = 2    # queried with positive loss: update


@numba.njit(cache=True, inline="always")
def query_step(t, start, margin, pending_label, qstate, policy, u, delta, rate, have_labels, signs,
               queried, losses):
    """The query decision and hinge loss of triplet ``t`` (shared by both kernels).

    Returns (action, y, loss): SKIP, ASK or UPDATE (see above). A label pending from the oracle
    belongs to the first triplet of the call and is used without a new draw. Writes
    ``queried[t]`` and ``losses[t]`` (0 unless UPDATE) and counts the query in ``qstate[0]``;
    ``qstate[1] >= 0`` is the budget.
    """
    if pending_label != 0.0 and t == start:
        y = pending_label
    else:
        if (qstate[1] >= 0 and qstate[0] >= qstate[1]) or not decide_query(policy, u, margin, delta, rate):
            queried[t] = 0
            losses[t] = 0.0
            return SKIP, 0.0, 0.0
        if not have_labels:
            return ASK, 0.0, 0.0
        y = signs[t]
    queried[t] = 1
    qstate[0] += 1
    loss = 1.0 - y * margin
    if loss <= 0.0:
        losses[t] = 0.0
        return SKIP, y, 0.0
    losses[t] = loss
    return UPDATE, y, loss


@numba.njit(cache=True, inline="always")
def second_order_scalars(rule, loss, conf, eta, gamma, r, sigma_updated):
    """(kappa, s) of a second-order step with confidence ``conf = phi^T Sigma_t phi``.

    Sigma_{t+1} = Sigma_t - kappa (Sigma_t phi)(Sigma_t phi)^T and
    M_{t+1} = M_t + y s Sigma_t phi.

    * CW, eq. (6): kappa = 1 / (gamma + v); eq. (5): s = eta with Sigma_t; Algorithm 2 uses
      Sigma_{t+1} phi = Sigma_t phi * gamma / (gamma + v), i.e. s = eta gamma / (gamma + v).
    * AROW: beta = 1 / (v + r), alpha = l beta; kappa = beta, s = alpha.
    """
    if rule == CW:
        kappa = 1.0 / (gamma + conf)
        s = eta * gamma * kappa if sigma_updated else eta
        return kappa, s
    beta = 1.0 / (conf + r)
    return beta, loss * beta


@numba.njit(cache=True, inline="always")
def entry_update(m, sigma, xij, y, scale, kappa, s, rule, eta, sigma_updated):
    """One touched entry (i, j) of any sparse step; returns (M'_ij, Sigma'_ij).

    PA (Algorithm 1): M'_ij = M_ij + scale X_ij with scale = tau y; no covariance.
    Diagonal CW (eq. 7-8) / AROW: see :func:`diag_entry_update`.
    """
    if rule == PA:
        return m + scale * xij, sigma
    return diag_entry_update(m, sigma, xij, y, kappa, s, rule, eta, sigma_updated)


@numba.njit(cache=True, inline="always")
def diag_entry_update(m, sigma, xij, y, kappa, s, rule, eta, sigma_updated):
    """One entry of the diagonal CW (eq. 7-8) / AROW step; returns (M'_ij, Sigma'_ij).

    Sigma'_ij = Sigma_ij - kappa Sigma_ij^2 X_ij^2 (eq. 8; AROW with kappa = beta).
    M'_ij = M_ij + y s Sigma_ij X_ij (eq. 7, AROW), or M_ij + y eta Sigma'_ij X_ij
    (CW in the Algorithm 2 order).
    """
    us = sigma * xij
    new_sigma = sigma - kappa * us * us
    if rule == CW and sigma_updated:
        return m + y * eta * new_sigma * xij, new_sigma
    return m + y * s * us, new_sigma


# ------------------------------------------------------------------ the sparse kernel


@numba.njit(cache=True)
def train_sparse(
    keys, vals, auxs, counts, shift, max_used,
    diag, diag_aux, d,
    indptr, indices, data,
    triplets, signs, uniforms, start, stop,
    rule, policy, delta, rate, C, eta, gamma, r, sigma_updated,
    have_labels, pending_label, qstate,
    margins, queried, losses,
    zi, zv, slots,
):
    """Process triplets[start:stop] on the sparse store; returns (next_triplet, status, inserts).

    ``qstate = [labels queried so far, budget or -1]``. With ``have_labels`` False a query
    returns NEED_LABEL at that triplet; the caller asks the oracle and calls again with
    ``pending_label`` = its answer (+-1), which the first triplet then uses without re-drawing.
    ``margins[t]`` gets p_t, ``queried[t]`` Z_t and ``losses[t]`` the hinge loss of a queried
    triplet before its update.
    """
    second = rule != PA
    for t in range(start, stop):
        a = triplets[t, 0]
        nz = merge_difference(indptr, indices, data, triplets[t, 1], triplets[t, 2], zi, zv)
        lo, hi = indptr[a], indptr[a + 1]
        need = (hi - lo) * nz
        if counts[1] + need > max_used:
            return t, NEED_ROOM, need
        # pass 1: margin p = <M, X> and confidence v = sum_ij Sigma_ij X_ij^2
        margin = 0.0
        conf = 0.0
        m = 0
        for ii in range(lo, hi):
            i = indices[ii]
            xi = data[ii]
            base = i * d
            acc = 0.0
            cacc = 0.0
            for jj in range(nz):
                j = zi[jj]
                zj = zv[jj]
                if j == i:
                    v = diag[i]
                    sg = diag_aux[i]
                    slots[m] = _DIAGONAL
                else:
                    s = find(keys, base + j, shift)
                    slots[m] = s  # -1: absent
                    if s >= 0:
                        v = vals[s]
                        sg = auxs[s] if second else 1.0
                    else:
                        v = 0.0
                        sg = 1.0
                acc += zj * v
                if second:
                    cacc += sg * zj * zj
                m += 1
            margin += xi * acc
            if second:
                conf += xi * xi * cacc
        margins[t] = margin
        # query decision (eq. 3 for the active policy) and hinge loss
        action, y, loss = query_step(t, start, margin, pending_label, qstate, policy, uniforms[t], delta, rate,
                                     have_labels, signs, queried, losses)
        if action == ASK:
            return t, NEED_LABEL, 0
        if action == SKIP:
            continue
        if rule == PA:
            sq_x, sq_z = sq_norms(data, lo, hi, zv, nz)
            scale = oasis_tau(loss, sq_x, sq_z, C) * y  # Algorithm 1: tau = min(C, l / ||X||_F^2)
            kappa = 0.0
            s2 = 0.0
        else:
            kappa, s2 = second_order_scalars(rule, loss, conf, eta, gamma, r, sigma_updated)
            scale = 0.0
        # pass 2: write the update on the same entries through the slots cached by pass 1
        m = 0
        for ii in range(lo, hi):
            xi = data[ii]
            for jj in range(nz):
                xij = xi * zv[jj]
                s = slots[m]
                m += 1
                if s == _DIAGONAL:
                    j = zi[jj]
                    diag[j], diag_aux[j] = entry_update(diag[j], diag_aux[j], xij, y, scale, kappa, s2, rule, eta,
                                                        sigma_updated)
                    continue
                if s < 0:
                    s = find_or_insert(keys, vals, indices[ii] * d + zi[jj], shift, counts)
                    sg = 1.0  # Sigma_1 = I
                else:
                    sg = auxs[s] if second else 1.0  # PA's store has no aux field (a one-element dummy)
                vals[s], sg = entry_update(vals[s], sg, xij, y, scale, kappa, s2, rule, eta, sigma_updated)
                if second:
                    auxs[s] = sg
    return stop, DONE, 0


# ------------------------------------------------------------------ the full-covariance kernel


@numba.njit(cache=True)
def fused_downdate_matvec(S, pu, pk, phi, u):
    """Apply the pending downdate S -= pk pu pu^T to the upper triangle of S and return
    u = S phi in the same pass (S symmetric, only i <= j stored up to date)."""
    D = S.shape[0]
    for i in range(D):
        u[i] = 0.0
    for i in range(D):
        fi = phi[i]
        acc = 0.0
        if pk != 0.0:
            ci = pk * pu[i]
            for j in range(i, D):
                s = S[i, j] - ci * pu[j]
                S[i, j] = s
                acc += s * phi[j]
                u[j] += s * fi
        else:
            for j in range(i, D):
                s = S[i, j]
                acc += s * phi[j]
                u[j] += s * fi
        # the diagonal term was added twice (acc and u[i]); remove one
        u[i] += acc - S[i, i] * fi


@numba.njit(cache=True)
def flush_downdate(S, pu, pk):
    """Apply a pending downdate S -= pk pu pu^T to the upper triangle."""
    if pk == 0.0:
        return
    D = S.shape[0]
    for i in range(D):
        ci = pk * pu[i]
        for j in range(i, D):
            S[i, j] -= ci * pu[j]


@numba.njit(cache=True)
def train_full(
    M, S, pend, pk_arr, Xd,
    triplets, signs, uniforms, start, stop,
    rule, policy, delta, rate, C, eta, gamma, r, sigma_updated,
    have_labels, pending_label, qstate,
    margins, queried, losses,
    z, phi, u, external,
):
    """Dense M (d x d) and full covariance S (d^2 x d^2, upper triangle) over triplets[start:stop].

    ``pend``/``pk_arr[0]`` hold the deferred rank-one downdate of the last update. Returns
    (next_triplet, status). Query handling as in :func:`train_sparse`. With ``external`` a
    second-order step is left to the caller (BLAS, for large d^2): the kernel fills ``phi``,
    ``losses[t]`` and ``signs[t]`` and returns NEED_UPDATE at triplet t.
    """
    d = M.shape[0]
    for t in range(start, stop):
        a = triplets[t, 0]
        p1 = triplets[t, 1]
        p2 = triplets[t, 2]
        for j in range(d):
            z[j] = Xd[p1, j] - Xd[p2, j]
        margin = 0.0
        for i in range(d):
            xi = Xd[a, i]
            if xi != 0.0:
                acc = 0.0
                for j in range(d):
                    acc += M[i, j] * z[j]
                margin += xi * acc
        margins[t] = margin
        action, y, loss = query_step(t, start, margin, pending_label, qstate, policy, uniforms[t], delta, rate,
                                     have_labels, signs, queried, losses)
        if action == ASK:
            return t, NEED_LABEL
        if action == SKIP:
            continue
        for i in range(d):
            xi = Xd[a, i]
            for j in range(d):
                phi[i * d + j] = xi * z[j]
        if rule == PA:
            sq_x = 0.0
            for i in range(d):
                sq_x += Xd[a, i] * Xd[a, i]
            sq_z = 0.0
            for j in range(d):
                sq_z += z[j] * z[j]
            coef = oasis_tau(loss, sq_x, sq_z, C) * y  # Algorithm 1: M += tau y X
            step = phi
        else:
            if external:
                signs[t] = y
                return t, NEED_UPDATE
            fused_downdate_matvec(S, pend, pk_arr[0], phi, u)
            conf = 0.0
            for k in range(d * d):
                conf += phi[k] * u[k]
            kappa, s2 = second_order_scalars(rule, loss, conf, eta, gamma, r, sigma_updated)
            for k in range(d * d):
                pend[k] = u[k]
            pk_arr[0] = kappa
            coef = y * s2  # eq. (5) / AROW: M += y s Sigma phi
            step = u
        for i in range(d):
            for j in range(d):
                M[i, j] += coef * step[i * d + j]
    return stop, DONE
