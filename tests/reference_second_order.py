"""Literal dense implementations of the CIKM 2015 / AROMA update rules (test references only).

Full matrices everywhere: M is d x d, the full covariance is d^2 x d^2 and
vec(X) = [X_11, ..., X_1d, ..., X_d1, ..., X_dd] (the paper's row-major vec). No laziness, no
symmetry tricks, no sparsity: each step is the paper's formula as written.
"""

import numpy as np


def dense_selective(X, triplets, rule, policy="all", uniforms=None, signs=None, delta=1.0, rate=1.0,
                    C=1.0, eta=1.0, gamma=1.0, r=1.0, covariance="full", sigma_step="previous",
                    budget=None, identity=False):
    """Run one learner over ``triplets``; returns (M, Sigma, queried, margins).

    rule: "pa" (Algorithm 1), "cw" (eq. 5-6 full / eq. 7-8 diagonal), "arow" (AROMA).
    policy: "all", "active" (Z_t = u_t < delta / (delta + |p_t|), eq. 3), "random" (u_t < rate).
    """
    X = np.asarray(X, dtype=float)
    d = X.shape[1]
    n = len(triplets)
    uniforms = np.zeros(n) if uniforms is None else uniforms
    M = np.eye(d) if identity else np.zeros((d, d))
    Sigma = np.eye(d * d) if covariance == "full" else np.ones((d, d))
    queried = np.zeros(n, bool)
    margins = np.zeros(n)
    asked = 0
    for t, (a, p1, p2) in enumerate(triplets):
        y = 1.0 if signs is None else float(signs[t])
        x, z = X[a], X[p1] - X[p2]
        Xt = np.outer(x, z)
        p = np.trace(M.T @ Xt)  # p_t = Tr(M_t^T X_t)
        margins[t] = p
        if budget is not None and asked >= budget:
            continue
        if policy == "active":
            Z = uniforms[t] < delta / (delta + abs(p))
        elif policy == "random":
            Z = uniforms[t] < rate
        else:
            Z = True
        if not Z:
            continue
        queried[t] = True
        asked += 1
        loss = max(0.0, 1.0 - y * p)
        if loss <= 0:
            continue
        if rule == "pa":
            tau = min(C, loss / np.sum(Xt * Xt))
            M = M + tau * y * Xt
            continue
        G = -y * Xt  # subgradient of the hinge loss
        if covariance == "full":
            phi = Xt.reshape(-1)
            if rule == "cw":
                Sigma_new = Sigma - Sigma @ np.outer(phi, phi) @ Sigma / (gamma + phi @ Sigma @ phi)  # eq. (6)
                S = Sigma if sigma_step == "previous" else Sigma_new
                M = (M.reshape(-1) - eta * S @ G.reshape(-1)).reshape(d, d)  # eq. (5)
                Sigma = Sigma_new
            else:
                m = y * p
                beta = 1.0 / (phi @ Sigma @ phi + r)
                alpha = max(0.0, 1.0 - m) * beta
                M = M + (alpha * y * Sigma @ phi).reshape(d, d)
                Sigma = Sigma - beta * Sigma @ np.outer(phi, phi) @ Sigma
        else:
            if rule == "cw":
                Sigma_new = Sigma - Sigma * Xt * Xt * Sigma / (gamma + np.sum(Xt * Sigma * Xt))  # eq. (8)
                S = Sigma if sigma_step == "previous" else Sigma_new
                M = M - eta * S * G  # eq. (7)
                Sigma = Sigma_new
            else:
                m = y * p
                beta = 1.0 / (np.sum(Xt * Sigma * Xt) + r)
                alpha = max(0.0, 1.0 - m) * beta
                M = M + alpha * y * Sigma * Xt
                Sigma = Sigma - beta * Sigma * Xt * Xt * Sigma
    return M, Sigma, queried, margins
