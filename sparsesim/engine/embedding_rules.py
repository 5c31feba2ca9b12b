"""Update rules of the low-rank embedding similarity learner, one small compiled function per rule.

The learner (:class:`sparsesim.learners.embedding.ProxySSI`) scores two documents as
``S(x, x') = alpha <x, x'> + <e(x), e(x')>`` with ``e(x) = u / |u|``, ``u = x P`` (rows of the
corpus already L2-normalised, ``P`` dense ``(d, r)``): a rank-r bilinear form M = alpha I + P P^T up
to the normalisation of the embedding (Supervised Semantic Indexing, Bai et al. 2009, with the
cosine of the embeddings as in NormSoftmax). ``alpha`` is not learned by these rules.

Rules (``y`` the anchor's class, ``c_k`` the learned class proxies, ``s`` the temperature):

* proxy rule, an anchor against every class proxy (Movshovitz-Attias et al. 2017; the softmax
  form with normalised proxies and a temperature of NormSoftmax, Zhai & Wu 2019)::

      z_k = s <e, c_k / |c_k|>,  p = softmax(z),  loss = -log p_y
      dL/de   = s sum_k (p_k - [k = y]) c_k / |c_k|
      dL/dc_k = s (p_k - [k = y]) (I - c^_k c^_k^T) e / |c_k|

* triplet rule on documents (a, b, n), the ranking hinge of SSI on the embedding part::

      loss = max(0, margin - sign * (<e_a, e_b> - <e_a, e_n>))
      dL/de_a = -sign (e_b - e_n),  dL/de_b = -sign e_a,  dL/de_n = sign e_a

* through the normalisation: ``dL/du = (I - e e^T) dL/de / |u|``, and for a sparse row x
  ``dL/dP[j] = x_j dL/du`` only on the row's nonzero features j.

Step (AdaGrad with one accumulator per row of ``P`` and per proxy, Duchi et al. 2011)::

      G_j += mean((x_j dL/du)^2),   P[j] -= lr / sqrt(G_j + eps) * x_j dL/du

A row of ``P`` is touched only when its feature occurs in a document of the update, so an
update costs O(nnz(x) r + K r) and the corpus is never densified.
"""

from __future__ import annotations

import math

import numba
import numpy as np

ADAGRAD_EPS = 1e-8


@numba.njit(cache=True)
def embed_row(indptr, indices, data, i, P, u):
    """u = x_i P for the CSR row i; returns |u| (written into ``u``)."""
    r = P.shape[1]
    for a in range(r):
        u[a] = 0.0
    for p in range(indptr[i], indptr[i + 1]):
        j = indices[p]
        v = data[p]
        for a in range(r):
            u[a] += v * P[j, a]
    s = 0.0
    for a in range(r):
        s += u[a] * u[a]
    return math.sqrt(s)


@numba.njit(cache=True)
def through_normalisation(e, norm, ge, gu):
    """gu = (I - e e^T) ge / |u|: the gradient with respect to u of a loss of e = u / |u|."""
    r = e.shape[0]
    dot = 0.0
    for a in range(r):
        dot += e[a] * ge[a]
    inv = 1.0 / norm if norm > 0.0 else 0.0
    for a in range(r):
        gu[a] = (ge[a] - e[a] * dot) * inv


@numba.njit(cache=True)
def adagrad_rows(indptr, indices, data, i, P, GP, gu, lr):
    """For every nonzero x_ij of row i: G_j += mean((x_ij gu)^2); P[j] -= lr / sqrt(G_j + eps) x_ij gu."""
    r = P.shape[1]
    sq = 0.0
    for a in range(r):
        sq += gu[a] * gu[a]
    sq /= r
    for p in range(indptr[i], indptr[i + 1]):
        j = indices[p]
        v = data[p]
        GP[j] += v * v * sq
        step = lr * v / math.sqrt(GP[j] + ADAGRAD_EPS)
        for a in range(r):
            P[j, a] -= step * gu[a]


@numba.njit(cache=True)
def proxy_rule(indptr, indices, data, i, y, P, C, GP, GC, scale, lr, work):
    """One anchor (row i, class y) against every proxy: the NormSoftmax loss, its AdaGrad step on the
    rows of P under x_i and on every proxy. Returns the loss before the step.

    ``work`` is scratch of shape (4, max(r, K)) (u, e, dL/de, z)."""
    r = P.shape[1]
    K = C.shape[0]
    u = work[0, :r]
    ge = work[1, :r]
    z = work[2, :K]
    gu = work[3, :r]
    norm = embed_row(indptr, indices, data, i, P, u)
    if norm <= 0.0:
        return 0.0
    for a in range(r):
        u[a] /= norm  # u now holds e
    zmax = -np.inf
    for k in range(K):
        cn = 0.0
        dot = 0.0
        for a in range(r):
            cn += C[k, a] * C[k, a]
            dot += C[k, a] * u[a]
        cn = math.sqrt(cn)
        z[k] = scale * dot / cn if cn > 0.0 else 0.0
        zmax = max(zmax, z[k])
    total = 0.0
    for k in range(K):
        z[k] = math.exp(z[k] - zmax)
        total += z[k]
    loss = -math.log(max(z[y] / total, 1e-300))
    for a in range(r):
        ge[a] = 0.0
    for k in range(K):
        w = scale * (z[k] / total - (1.0 if k == y else 0.0))
        cn = 0.0
        dot = 0.0
        for a in range(r):
            cn += C[k, a] * C[k, a]
            dot += C[k, a] * u[a]
        cn = math.sqrt(cn)
        if cn <= 0.0:
            continue
        chat_e = dot / cn
        sq = 0.0
        for a in range(r):
            ge[a] += w * C[k, a] / cn
            g = w * (u[a] - C[k, a] / cn * chat_e) / cn
            sq += g * g
        GC[k] += sq / r
        step = lr / math.sqrt(GC[k] + ADAGRAD_EPS)
        for a in range(r):
            C[k, a] -= step * w * (u[a] - C[k, a] / cn * chat_e) / cn
    through_normalisation(u, norm, ge, gu)
    adagrad_rows(indptr, indices, data, i, P, GP, gu, lr)
    return loss


@numba.njit(cache=True)
def triplet_rule(indptr, indices, data, a_row, b_row, n_row, sign, P, GP, margin, lr, work):
    """The ranking hinge on (anchor, first, second) with ``sign`` (+1: the anchor should be closer to
    the first); gradients of the three documents are formed before any row of P moves. Returns the
    loss before the step. ``work`` is scratch of shape (6, r)."""
    r = P.shape[1]
    ea = work[0]
    eb = work[1]
    en = work[2]
    na = embed_row(indptr, indices, data, a_row, P, ea)
    nb = embed_row(indptr, indices, data, b_row, P, eb)
    nn = embed_row(indptr, indices, data, n_row, P, en)
    if na <= 0.0 or nb <= 0.0 or nn <= 0.0:
        return 0.0
    diff = 0.0
    for a in range(r):
        ea[a] /= na
        eb[a] /= nb
        en[a] /= nn
        diff += ea[a] * (eb[a] - en[a])
    loss = margin - sign * diff
    if loss <= 0.0:
        return 0.0
    ge = work[3]
    ga = work[4]
    gb = work[5]
    for a in range(r):
        ge[a] = -sign * (eb[a] - en[a])
    through_normalisation(ea, na, ge, ga)
    for a in range(r):
        ge[a] = -sign * ea[a]
    through_normalisation(eb, nb, ge, gb)
    for a in range(r):
        ge[a] = sign * ea[a]
    through_normalisation(en, nn, ge, en)  # en is not read again: its gradient takes its place
    adagrad_rows(indptr, indices, data, a_row, P, GP, ga, lr)
    adagrad_rows(indptr, indices, data, b_row, P, GP, gb, lr)
    adagrad_rows(indptr, indices, data, n_row, P, GP, en, lr)
    return loss


@numba.njit(cache=True)
def run_batch(indptr, indices, data, triplets, signs, classes, P, C, GP, GC, scale, margin, triplet_weight, lr,
              losses):
    """Apply, in order, to every triplet t: the proxy rule on its anchor when ``classes[t] >= 0``,
    then the triplet rule (step ``triplet_weight * lr``) when ``triplet_weight > 0``.
    ``losses[t]`` receives the sum of the losses before the steps."""
    r = P.shape[1]
    width = max(r, C.shape[0])
    pwork = np.empty((4, width))
    twork = np.empty((6, r))
    for t in range(triplets.shape[0]):
        loss = 0.0
        if classes[t] >= 0:
            loss += proxy_rule(indptr, indices, data, triplets[t, 0], classes[t], P, C, GP, GC, scale, lr, pwork)
        if triplet_weight > 0.0:
            loss += triplet_rule(indptr, indices, data, triplets[t, 0], triplets[t, 1], triplets[t, 2], signs[t],
                                 P, GP, margin, triplet_weight * lr, twork)
        losses[t] = loss
