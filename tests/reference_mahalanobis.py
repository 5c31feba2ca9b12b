"""Dense numpy references of LEGO (Jain et al. 2008) and RDML (Jin et al. 2009), written from the
papers' update equations with whole vectors and matrices, for the tests to compare the learners with."""

import numpy as np


def triplet_pairs(triplets, signs):
    """(anchor, other, +1 similar / -1 dissimilar) in learning order: similar pair first."""
    for (x, x1, x2), s in zip(triplets, signs):
        pos, neg = (x1, x2) if s > 0 else (x2, x1)
        yield x, pos, 1.0
        yield x, neg, -1.0


def lego(X, triplets, signs, eta, lower, upper, always=False):
    """A_1 = I; per pair: yhat = z'Az, ybar from the quadratic, A -= eta(ybar-y) Az z'A / (1 + eta(ybar-y) yhat)."""
    X = np.asarray(X, dtype=float)
    A = np.eye(X.shape[1])
    for i, j, label in triplet_pairs(triplets, signs):
        z = X[i] - X[j]
        yhat = z @ A @ z
        y = lower if label > 0 else upper
        if yhat <= 0 or (not always and (yhat <= lower if label > 0 else yhat >= upper)):
            continue
        ybar = (eta * y * yhat - 1 + np.sqrt((eta * y * yhat - 1) ** 2 + 4 * eta * yhat**2)) / (2 * eta * yhat)
        A = A - eta * (ybar - y) * np.outer(A @ z, z @ A) / (1 + eta * (ybar - y) * yhat)
    return A


def project_psd(M):
    """Euclidean projection onto the PSD cone: negative eigenvalues set to zero."""
    w, V = np.linalg.eigh((M + M.T) / 2)
    return (V * np.maximum(w, 0)) @ V.T


def rdml(X, triplets, signs, lam, b):
    """A_0 = 0; a pair with y (b - |z|_A^2) <= 0 gives A = pi_S+(A - lam y z z')."""
    X = np.asarray(X, dtype=float)
    A = np.zeros((X.shape[1], X.shape[1]))
    for i, j, y in triplet_pairs(triplets, signs):
        z = X[i] - X[j]
        if y * (b - z @ A @ z) > 0:
            continue
        A = project_psd(A - lam * y * np.outer(z, z))
    return A
