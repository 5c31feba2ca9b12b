"""Literal dense implementations of the papers' bilinear update rules (test references only).

Each function follows its paper's equations step by step on a dense d x d matrix, with no
laziness and no sparsity tricks, so the fast sparse engine can be checked against it.
"""

import numpy as np


def soft(M, th):
    return np.sign(M) * np.maximum(np.abs(M) - th, 0.0)


def dense_oasis(X, triplets, C, signs=None, identity=True):
    """OASIS: M += tau y x (x+ - x-)^T, tau = min(C, l / ||x (x+ - x-)^T||_F^2)."""
    d = X.shape[1]
    M = np.eye(d) if identity else np.zeros((d, d))
    for t, (a, p, n) in enumerate(triplets):
        y = 1.0 if signs is None else signs[t]
        x, z = X[a], X[p] - X[n]
        loss = max(0.0, 1.0 - y * x @ M @ z)
        if loss > 0:
            V = y * np.outer(x, z)
            tau = min(C, loss / np.sum(V * V))
            M = M + tau * V
    return M


def dense_sors(X, triplets, lam, etas, offdiag, signs=None):
    """SORS Algorithm 1: M_{t+1} = prox_{eta_t lam r}(M_t - eta_t G_t), eq. (5)-(7), M_1 = I."""
    d = X.shape[1]
    M = np.eye(d)
    mask = 1.0 - np.eye(d) if offdiag else np.ones((d, d))
    for t, (a, p, n) in enumerate(triplets):
        y = 1.0 if signs is None else signs[t]
        x, z = X[a], X[p] - X[n]
        loss = max(0.0, 1.0 - y * x @ M @ z)
        G = -y * np.outer(x, z) if loss > 0 else np.zeros((d, d))
        eta = etas[t]
        M = soft(M - eta * G, eta * lam * mask)
    return M


def dense_adasors(X, triplets, lam, etas, delta, offdiag, signs=None):
    """AdaSORS Algorithm 2: H = sqrt(H^2 + G^2), Sigma = delta + H,
    M_{t+1} = prox^{Sigma}_{eta lam r}(M_t - eta G / Sigma), eq. (9)-(11), M_1 = I."""
    d = X.shape[1]
    M = np.eye(d)
    H = np.zeros((d, d))
    mask = 1.0 - np.eye(d) if offdiag else np.ones((d, d))
    for t, (a, p, n) in enumerate(triplets):
        y = 1.0 if signs is None else signs[t]
        x, z = X[a], X[p] - X[n]
        loss = max(0.0, 1.0 - y * x @ M @ z)
        G = -y * np.outer(x, z) if loss > 0 else np.zeros((d, d))
        H = np.sqrt(H * H + G * G)
        S = delta + H
        eta = etas[t]
        M = soft(M - eta * G / S, lam * eta * mask / S)
    return M


def dense_sors_pa(X, triplets, lam, C, offdiag, signs=None):
    """SORS Algorithm 1 with the per-triplet step eta_t = min(C, l_t / ||x (x+ - x-)^T||_F^2)
    (0 on a zero loss or a zero x z^T): M_{t+1} = prox_{eta_t lam r}(M_t - eta_t G_t), M_1 = I."""
    d = X.shape[1]
    M = np.eye(d)
    mask = 1.0 - np.eye(d) if offdiag else np.ones((d, d))
    for t, (a, p, n) in enumerate(triplets):
        y = 1.0 if signs is None else signs[t]
        x, z = X[a], X[p] - X[n]
        loss = max(0.0, 1.0 - y * x @ M @ z)
        G = -y * np.outer(x, z)
        sq = np.sum(G * G)
        eta = min(C, loss / sq) if loss > 0 and sq > 0 else 0.0
        M = soft(M - eta * G, eta * lam * mask)
    return M
