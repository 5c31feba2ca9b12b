"""LMNN and ITML (metric-learn) behind the sparsesim contract, checked against dense numpy
references of their papers' objectives (Weinberger & Saul 2009, eq. (3)-(4); Davis et al. 2007,
eq. (1)-(2))."""

import sys

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.exceptions import MissingDependencyError, ResourceLimitError
from sparsesim.learners import metric_learn_peers
from sparsesim.registry import make_estimator

pytestmark = pytest.mark.skipif(not metric_learn_peers.have_metric_learn(),
                                reason="metric-learn is not installed (pip install 'sparsesim[peers]')")


def _data(seed=0, n_per=25, d=6):
    """Three classes separated along two informative axes, drowned by four noisy ones."""
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(3), n_per)
    X = rng.standard_normal((y.size, d)) * np.array([0.3, 0.3] + [3.0] * (d - 2))
    X[:, 0] += 1.5 * y
    X[:, 1] -= 1.0 * y
    return X, y


def _dist(M, a, b):
    z = a - b
    return np.einsum("ij,jk,ik->i", z, M, z)


def lmnn_objective(M, X, y, k=3, mu=0.5):
    """Weinberger & Saul (2009), eq. (3)-(4): (1 - mu) * pull + mu * sum of impostor hinge losses,
    target neighbours the k nearest same-class points in Euclidean distance."""
    n = X.shape[0]
    E = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    D = np.einsum("ijk,kl,ijl->ij", X[:, None, :] - X[None, :, :], M, X[:, None, :] - X[None, :, :])
    pull = push = 0.0
    for i in range(n):
        same = np.flatnonzero((y == y[i]) & (np.arange(n) != i))
        targets = same[np.argsort(E[i, same])[:k]]
        other = np.flatnonzero(y != y[i])
        for j in targets:
            pull += D[i, j]
            push += np.maximum(0.0, 1.0 + D[i, j] - D[i, other]).sum()
    return (1 - mu) * pull + mu * push


def knn_error(M, X, y, k=3):
    D = np.einsum("ijk,kl,ijl->ij", X[:, None, :] - X[None, :, :], M, X[:, None, :] - X[None, :, :])
    np.fill_diagonal(D, np.inf)
    nn = np.argsort(D, axis=1)[:, :k]
    votes = np.array([np.bincount(y[row], minlength=3).argmax() for row in nn])
    return float(np.mean(votes != y))


def test_lmnn_lowers_its_objective_and_the_knn_error():
    X, y = _data()
    est = make_estimator("lmnn", random_state=0).fit(sp.csr_matrix(X), y)
    M = est.M_
    assert np.linalg.eigvalsh(M).min() > -1e-8
    # the objective is not scale-free: compare with the best multiple of the identity
    best_identity = min(lmnn_objective(c * np.eye(X.shape[1]), X, y) for c in (0.01, 0.03, 0.1, 0.3, 1.0))
    assert lmnn_objective(M, X, y) < best_identity
    assert knn_error(M, X, y) < knn_error(np.eye(X.shape[1]), X, y)


def test_itml_meets_more_of_its_constraints_than_the_prior():
    X, y = _data(seed=1)
    est = make_estimator("itml", random_state=0).fit(sp.csr_matrix(X), y)
    M = est.M_
    assert np.linalg.eigvalsh(M).min() > -1e-8
    # Davis et al. eq. (2): similar pairs below u, dissimilar above l, with u, l the 5th / 95th
    # percentiles of the prior's pair distances (metric-learn's thresholds)
    rng = np.random.default_rng(5)
    i, j = rng.integers(0, y.size, (2, 3000))
    keep = i != j
    i, j = i[keep], j[keep]
    d0 = _dist(np.eye(X.shape[1]), X[i], X[j])
    u, l_ = np.percentile(d0, 5), np.percentile(d0, 95)
    same = y[i] == y[j]

    def met(Mx):
        d = _dist(Mx, X[i], X[j])
        return np.mean(np.where(same, d <= u, d >= l_))

    assert met(M) > met(np.eye(X.shape[1])) + 0.1
    assert knn_error(M, X, y) < knn_error(np.eye(X.shape[1]), X, y)


@pytest.mark.parametrize("name", ["lmnn", "itml"])
def test_model_is_the_bilinear_form_of_the_metric(name):
    X, y = _data(seed=2)
    est = make_estimator(name, random_state=0, max_iter=50).fit(sp.csr_matrix(X), y)
    S = est.model_.score_matrix(sp.csr_matrix(X[:4]), sp.csr_matrix(X))
    np.testing.assert_allclose(S, X[:4] @ est.M_ @ X.T, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", ["lmnn", "itml"])
def test_too_many_features_is_refused_with_the_reason(name):
    X = sp.random(30, 50, density=0.2, format="csr", random_state=0)
    y = np.repeat(np.arange(3), 10)
    with pytest.raises(ResourceLimitError, match="dense d x d metric"):
        make_estimator(name, max_features=40).fit(X, y)


def test_missing_metric_learn_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "metric_learn", None)
    with pytest.raises(MissingDependencyError, match="pip install"):
        metric_learn_peers.import_metric_learn()
