"""MTFL and TRML (the ROMCO paper's batch baselines, retrained online) against dense numpy
references of their objectives: logistic loss per task + rho ||W||_{2,1} (Argyriou et al. 2008)
or rho ||W||_* (Pong et al. 2010)."""

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.learners.mtl_batch import fista_multitask
from sparsesim.registry import make_estimator


def _problem(seed=0, m=3, n=40, d=10):
    rng = np.random.default_rng(seed)
    shared = rng.standard_normal(d) * (np.arange(d) < 4)
    Xs, ys = [], []
    for t in range(m):
        X = rng.standard_normal((n, d))
        w = shared + 0.3 * rng.standard_normal(d) * (np.arange(d) < 4)
        Xs.append(X)
        ys.append(np.where(X @ w + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0))
    X = np.vstack(Xs)
    y = np.concatenate(ys)
    task = np.repeat(np.arange(m), n)
    return X, y, task, Xs, ys


def dense_objective(W, X, y, task, rho, kind):
    """sum_t mean_{i in t} log(1 + exp(-y_i w_t.x_i)) + rho * Omega(W), written out densely."""
    total = 0.0
    for t in np.unique(task):
        r = task == t
        total += np.mean(np.log1p(np.exp(-y[r] * (X[r] @ W[:, t]))))
    omega = np.linalg.norm(W, axis=1).sum() if kind == "l21" else np.linalg.svd(W, compute_uv=False).sum()
    return total + rho * omega


def dense_gradient(W, X, y, task):
    G = np.zeros_like(W)
    for t in np.unique(task):
        r = task == t
        s = 1.0 / (1.0 + np.exp(y[r] * (X[r] @ W[:, t])))
        G[:, t] = -(X[r] * (y[r] * s)[:, None]).mean(axis=0)
    return G


def dense_prox(V, tau, kind):
    if kind == "l21":
        n = np.linalg.norm(V, axis=1, keepdims=True)
        return V * np.maximum(0.0, 1.0 - tau / np.maximum(n, 1e-300))
    P, s, Qt = np.linalg.svd(V, full_matrices=False)
    return (P * np.maximum(s - tau, 0.0)) @ Qt


@pytest.mark.parametrize("kind", ["l21", "trace"])
@pytest.mark.parametrize("rho", [0.01, 0.1])
def test_solution_is_a_fixed_point_of_the_dense_prox_gradient_map(kind, rho):
    X, y, task, _, _ = _problem()
    W, n_iter = fista_multitask(sp.csr_matrix(X), y, task, 3, rho, kind, max_iter=3000, tol=1e-10)
    step = 0.5
    residual = W - dense_prox(W - step * dense_gradient(W, X, y, task), step * rho, kind)
    assert np.linalg.norm(residual) < 1e-5 * max(1.0, np.linalg.norm(W))
    f = dense_objective(W, X, y, task, rho, kind)
    rng = np.random.default_rng(1)
    for _ in range(20):
        assert f <= dense_objective(W + 1e-3 * rng.standard_normal(W.shape), X, y, task, rho, kind) + 1e-12


@pytest.mark.parametrize("kind", ["l21", "trace"])
def test_features_absent_from_the_data_are_left_out_exactly(kind):
    """The solver iterates over the features the data (or the warm start) use: padding the problem
    with unused columns changes nothing, and a warm start's weight on a feature the data lack is
    still shrunk as the full-size prox-gradient map says."""
    X, y, task, _, _ = _problem(seed=5)
    d = X.shape[1]
    rng = np.random.default_rng(2)
    spots = np.sort(rng.choice(4 * d, size=d, replace=False))   # the used columns among 4d
    X_wide = np.zeros((X.shape[0], 4 * d))
    X_wide[:, spots] = X
    W, n_iter = fista_multitask(sp.csr_matrix(X), y, task, 3, 0.05, kind, max_iter=3000, tol=1e-10)
    W_wide, n_iter_wide = fista_multitask(sp.csr_matrix(X_wide), y, task, 3, 0.05, kind, max_iter=3000, tol=1e-10)
    assert n_iter_wide == n_iter
    np.testing.assert_allclose(W_wide[spots], W, rtol=1e-9, atol=1e-12)
    assert not np.any(np.delete(W_wide, spots, axis=0))
    W0 = np.zeros_like(W_wide)
    W0[np.setdiff1d(np.arange(4 * d), spots)[:3]] = 0.02 * rng.standard_normal((3, 3))  # unused features
    W_warm, _ = fista_multitask(sp.csr_matrix(X_wide), y, task, 3, 0.05, kind, W0=W0, max_iter=3000, tol=1e-10)
    step = 0.5
    residual = W_warm - dense_prox(W_warm - step * dense_gradient(W_warm, X_wide, y, task), step * 0.05, kind)
    assert np.linalg.norm(residual) < 1e-5 * max(1.0, np.linalg.norm(W_warm))


def test_regularisers_give_their_structures():
    X, y, task, _, _ = _problem(seed=3)
    Xs = sp.csr_matrix(X)
    W21, _ = fista_multitask(Xs, y, task, 3, 0.15, "l21", max_iter=2000, tol=1e-10)
    zero_rows = np.linalg.norm(W21, axis=1) < 1e-12
    assert zero_rows.any() and not zero_rows.all()          # features dropped by every task at once
    assert np.all(np.abs(W21[zero_rows]) < 1e-12)
    Wtr, _ = fista_multitask(Xs, y, task, 3, 0.15, "trace", max_iter=2000, tol=1e-10)
    s = np.linalg.svd(Wtr, compute_uv=False)
    assert s[-1] < 1e-8 * s[0] and s[0] > 0                   # lower rank than the 3 tasks


@pytest.mark.parametrize("name", ["mtfl", "trml"])
def test_online_protocol_retrains_every_100_instances(name):
    _, _, _, Xs, ys = _problem(seed=2, n=90)
    est = make_estimator(name).fit(Xs, ys)
    assert est.n_retrains_ == 270 // 100
    # rounds hold one instance of each of the 3 tasks: the first training happens after round 34
    # (instance 100), so the 33 rounds before it predict with zero weights
    for margins in est.online_margins_:
        assert np.all(margins[:33] == 0.0)
        assert np.any(margins[34:] != 0.0)
    # the weights are those of a training on the first 200 stored instances, from its warm start
    assert est.n_stored_ == 270
    X, y, task = est.stored()
    assert X.shape == (270, 10) and set(task) == {0, 1, 2}


def test_batch_baselines_learn_the_shared_task():
    _, _, _, Xs, ys = _problem(seed=4, n=200)
    for name in ("mtfl", "trml"):
        est = make_estimator(name).fit(Xs, ys)
        assert est.error_rates_.mean() < 0.3, name
