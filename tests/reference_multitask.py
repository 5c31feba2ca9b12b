"""Literal dense OMTRSL (Algorithms 1-2 of Hao et al., IJCAI 2017) for tests only.

The K task matrices are kept as the compound vector w = (vec(M^1); ...; vec(M^K)) in R^{K d^2};
each triplet builds phi_t (zero outside block t_k, vec(X_t) inside, X_t = x_t (x_t^1 - x_t^2)^T),
the loss l = [1 - y_t w^T phi_t]_+, tau = min(C, l / (phi_t^T A_dd^{-1} phi_t)) with
A_dd^{-1} = A^{-1} (x) I_{d^2} and A^{-1} written entry by entry as in the paper, and
w <- w + y_t tau A_dd^{-1} phi_t (eq. 3). No shared/own decomposition, no sparsity.
"""

import numpy as np


def paper_A_inverse(b, K):
    """A^{-1} = 1/((1+b)K) [[b+K, b, ...], [b, b+K, ...], ...] (section 3.2)."""
    Ainv = np.empty((K, K))
    for i in range(K):
        for j in range(K):
            Ainv[i, j] = (b + K if i == j else b) / ((1.0 + b) * K)
    return Ainv


def vec(M):
    return M.reshape(-1, order="F")  # [M11; ...; Md1; ...; Mdd]


def unvec(v, d):
    return v.reshape((d, d), order="F")


def dense_omtrsl(X, triplets, signs, task_ids, K, b, C, query="all", rate=1.0, uniforms=None):
    """Returns ([M^1, ..., M^K], queried flags)."""
    X = np.asarray(X, dtype=float)
    d = X.shape[1]
    Ainv = paper_A_inverse(b, K)
    A_dd_inv = np.kron(Ainv, np.eye(d * d))
    w = np.concatenate([vec(np.eye(d)) for _ in range(K)])  # M^k_0 = I
    queried = []
    for t, (a, p, n) in enumerate(triplets):
        k = int(task_ids[t])
        Xt = np.outer(X[a], X[p] - X[n])
        phi = np.zeros(K * d * d)
        phi[k * d * d:(k + 1) * d * d] = vec(Xt)
        p_t = w @ phi
        if query == "active":
            ask = uniforms[t] < rate / (rate + abs(p_t))
        elif query == "random":
            ask = uniforms[t] < rate
        else:
            ask = True
        queried.append(ask)
        if not ask:
            continue
        y = float(signs[t])
        loss = max(0.0, 1.0 - y * p_t)
        norm = phi @ A_dd_inv @ phi
        if loss > 0 and norm > 0:
            tau = min(C, loss / norm)
            w = w + y * tau * (A_dd_inv @ phi)
    return [unvec(w[k * d * d:(k + 1) * d * d], d) for k in range(K)], np.array(queried)
