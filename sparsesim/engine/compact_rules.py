"""Update rules of the compact similarity M = D + W + U V^T, one small compiled function per rule.

The learner (:class:`sparsesim.learners.compact.CompactSSI`) scores two documents as

.. math::

    S(x, x') = x^T (D + W + U V^T) x' = \\sum_j D_j x_j x'_j + x^T W x' + \\langle x U, x' V \\rangle

with ``D`` a diagonal (a vector of length d), ``W`` a sparse off-diagonal matrix whose support is
fixed before learning (CSR ``W_indptr, W_indices, W_data``; only the values move) and ``U, V``
dense ``(d, r)`` (Supervised Semantic Indexing's low-rank, diagonal-preserving form, Bai et al.
2009). On a triplet (a, p, n) with sign ``s`` (+1: the anchor should be closer to p), write
``z = s (p - n)`` and the hinge loss of the ranking constraint

    l = max(0, 1 - a^T M z) = max(0, 1 - [m_lin + m_lr]),
    m_lin = sum_i a_i (D_i z_i + sum_{j in supp W_i} W_ij z_j),     m_lr = <a U, z V>.

When ``l > 0`` the rule takes two steps, one on each kind of part:

1. the low-rank part, SSI's stochastic gradient step (learning rate ``eta``), both gradients
   formed before either factor moves::

       U_i += eta a_i (z V)     for every nonzero a_i
       V_j += eta z_j (a U)     for every nonzero z_j

2. the linear part (D and the values of W on their fixed support), a passive-aggressive step
   (Crammer et al. 2006, as OASIS) on the loss left after step 1, ``l' = max(0, 1 - m_lin - m_lr')``
   with ``m_lr'`` the low-rank margin after step 1::

       g_D = a * z (elementwise),  g_W[i, j] = a_i z_j on the support
       tau = min(C, l' / (|g_D|^2 + |g_W|^2))
       D += tau g_D,  W += tau g_W

A row of U, V or W is touched only when its feature occurs in a document of the triplet: one
update costs O(nnz(a) (r + k) + nnz(z) r) with k the support of W per feature; the corpus is
never densified (``z`` is scattered into a dense work vector of length d and cleared after).
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True)
def scatter_difference(indptr, indices, data, p, n, sign, z, seen, touched):
    """z = sign (x_p - x_n) scattered into the dense ``z`` (zero on entry); each feature written is
    marked in ``seen`` and listed once in ``touched``. Returns how many (``touched[:m]``)."""
    m = 0
    for q in range(indptr[p], indptr[p + 1]):
        j = indices[q]
        if not seen[j]:
            seen[j] = True
            touched[m] = j
            m += 1
        z[j] += sign * data[q]
    for q in range(indptr[n], indptr[n + 1]):
        j = indices[q]
        if not seen[j]:
            seen[j] = True
            touched[m] = j
            m += 1
        z[j] -= sign * data[q]
    return m


@numba.njit(cache=True)
def clear_difference(z, seen, touched, m):
    """Zero the entries of ``z`` and ``seen`` listed in ``touched[:m]``."""
    for q in range(m):
        z[touched[q]] = 0.0
        seen[touched[q]] = False


@numba.njit(cache=True)
def linear_margin(indptr, indices, data, a, D, W_indptr, W_indices, W_data, z):
    """m_lin = sum_i a_i (D_i z_i + sum_{j in supp W_i} W_ij z_j) for the anchor row ``a``."""
    total = 0.0
    for q in range(indptr[a], indptr[a + 1]):
        i = indices[q]
        acc = D[i] * z[i]
        for w in range(W_indptr[i], W_indptr[i + 1]):
            acc += W_data[w] * z[W_indices[w]]
        total += data[q] * acc
    return total


@numba.njit(cache=True)
def linear_grad_sq(indptr, indices, data, a, W_indptr, W_indices, z):
    """|g_D|^2 + |g_W|^2 with g_D = a * z and g_W[i, j] = a_i z_j on the support of W."""
    total = 0.0
    for q in range(indptr[a], indptr[a + 1]):
        i = indices[q]
        acc = z[i] * z[i]
        for w in range(W_indptr[i], W_indptr[i + 1]):
            zj = z[W_indices[w]]
            acc += zj * zj
        total += data[q] * data[q] * acc
    return total


@numba.njit(cache=True)
def linear_pa_step(indptr, indices, data, a, D, W_indptr, W_indices, W_data, z, tau):
    """D_i += tau a_i z_i and W_ij += tau a_i z_j (support of W) for every nonzero a_i."""
    for q in range(indptr[a], indptr[a + 1]):
        i = indices[q]
        step = tau * data[q]
        D[i] += step * z[i]
        for w in range(W_indptr[i], W_indptr[i + 1]):
            W_data[w] += step * z[W_indices[w]]


@numba.njit(cache=True)
def lowrank_factors(indptr, indices, data, a, U, V, z, touched, m, u, v):
    """u = a U and v = z V (z given by its nonzeros ``touched[:m]``); returns <u, v> = m_lr."""
    r = U.shape[1]
    for c in range(r):
        u[c] = 0.0
        v[c] = 0.0
    for q in range(indptr[a], indptr[a + 1]):
        i = indices[q]
        x = data[q]
        for c in range(r):
            u[c] += x * U[i, c]
    for q in range(m):
        j = touched[q]
        x = z[j]
        if x == 0.0:
            continue
        for c in range(r):
            v[c] += x * V[j, c]
    s = 0.0
    for c in range(r):
        s += u[c] * v[c]
    return s


@numba.njit(cache=True)
def lowrank_sgd_step(indptr, indices, data, a, U, V, z, touched, m, u, v, eta):
    """U_i += eta a_i v (nonzero a_i) and V_j += eta z_j u (nonzero z_j), with the u = a U and
    v = z V formed before the step."""
    r = U.shape[1]
    for q in range(indptr[a], indptr[a + 1]):
        i = indices[q]
        step = eta * data[q]
        for c in range(r):
            U[i, c] += step * v[c]
    for q in range(m):
        j = touched[q]
        x = z[j]
        if x == 0.0:
            continue
        step = eta * x
        for c in range(r):
            V[j, c] += step * u[c]


@numba.njit(cache=True)
def run_triplets(indptr, indices, data, triplets, signs, D, W_indptr, W_indices, W_data, U, V, C, eta, losses):
    """Apply the rule of the module docstring to every triplet, in order.

    ``losses[t]`` receives the hinge loss of triplet t before its update (0: no update)."""
    d = D.shape[0]
    r = U.shape[1]
    z = np.zeros(d)
    longest = 0
    for i in range(indptr.shape[0] - 1):
        longest = max(longest, indptr[i + 1] - indptr[i])
    touched = np.empty(2 * longest + 1, np.int64)
    seen = np.zeros(d, np.bool_)
    u = np.empty(r)
    v = np.empty(r)
    for t in range(triplets.shape[0]):
        a = triplets[t, 0]
        m = scatter_difference(indptr, indices, data, triplets[t, 1], triplets[t, 2], signs[t], z, seen,
                               touched)
        m_lin = linear_margin(indptr, indices, data, a, D, W_indptr, W_indices, W_data, z)
        m_lr = lowrank_factors(indptr, indices, data, a, U, V, z, touched, m, u, v) if r > 0 else 0.0
        loss = 1.0 - m_lin - m_lr
        if loss <= 0.0:
            losses[t] = 0.0
            clear_difference(z, seen, touched, m)
            continue
        losses[t] = loss
        if r > 0 and eta > 0.0:
            lowrank_sgd_step(indptr, indices, data, a, U, V, z, touched, m, u, v, eta)
            m_lr = lowrank_factors(indptr, indices, data, a, U, V, z, touched, m, u, v)
        left = 1.0 - m_lin - m_lr
        if left > 0.0 and C > 0.0:
            sq = linear_grad_sq(indptr, indices, data, a, W_indptr, W_indices, z)
            if sq > 0.0:
                tau = min(C, left / sq)
                linear_pa_step(indptr, indices, data, a, D, W_indptr, W_indices, W_data, z, tau)
        clear_difference(z, seen, touched, m)
