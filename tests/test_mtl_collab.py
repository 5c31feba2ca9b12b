"""CW-COL and OSMTL-e against dense numpy references of the update rules stated in
sparsesim/learners/mtl_collab.py (one instance at a time, dense vectors, round order)."""

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.registry import make_estimator


def _streams(seed=0, m=3, n=50, d=8):
    rng = np.random.default_rng(seed)
    shared = rng.standard_normal(d)
    Xs, ys = [], []
    for _ in range(m):
        X = sp.random(n, d, density=0.5, random_state=rng, data_rvs=rng.standard_normal, format="csr")
        w = shared + 0.5 * rng.standard_normal(d)
        Xs.append(X)
        ys.append(np.where(X @ w > 0, 1.0, -1.0))
    return Xs, ys


def _rounds(Xs, ys):
    for t in range(max(x.shape[0] for x in Xs)):
        for k in range(len(Xs)):
            if t < Xs[k].shape[0]:
                yield t, k, Xs[k][t].toarray().ravel(), ys[k][t]


def cwcol_reference(Xs, ys, eta, r):
    m, d = len(Xs), Xs[0].shape[1]
    mg, sg = np.zeros(d), np.ones(d)
    mk, sk = np.zeros((m, d)), np.ones((m, d))
    margins = [np.zeros(x.shape[0]) for x in Xs]
    for t, k, x, y in _rounds(Xs, ys):
        p = (eta * mg + (1 - eta) * mk[k]) @ x
        margins[k][t] = p
        if y * p < 1:
            v = x @ ((eta ** 2 * sg + (1 - eta) ** 2 * sk[k]) * x)
            beta = 1 / (v + r)
            alpha = (1 - y * p) * beta
            mg_new = mg + alpha * y * eta * sg * x
            mk[k] = mk[k] + alpha * y * (1 - eta) * sk[k] * x
            sg_new = sg - beta * eta ** 2 * (sg * x) ** 2
            sk[k] = sk[k] - beta * (1 - eta) ** 2 * (sk[k] * x) ** 2
            mg, sg = mg_new, sg_new
    return eta * mg[None, :] + (1 - eta) * mk, margins


def osmtl_reference(Xs, ys, lam, C, tau):
    m, d = len(Xs), Xs[0].shape[1]
    W = np.zeros((m, d))
    P = (np.ones((m, m)) - np.eye(m)) / (m - 1)
    margins = [np.zeros(x.shape[0]) for x in Xs]
    for t, k, x, y in _rounds(Xs, ys):
        theta = lam * np.eye(m)[k] + (1 - lam) * P[k]
        own = W @ x
        p = theta @ own
        margins[k][t] = p
        if y * p <= 0:
            W = W + C * y * np.outer(theta, x)
        loss = np.maximum(0, 1 - y * own)
        row = P[k] * np.exp(-loss / tau)
        row[k] = 0
        P[k] = row / row.sum()
    return (lam * np.eye(m) + (1 - lam) * P) @ W, margins


@pytest.mark.parametrize("eta,r", [(0.5, 1.0), (0.2, 0.1), (0.0, 1.0), (1.0, 0.5)])
def test_cwcol_matches_the_dense_reference(eta, r):
    Xs, ys = _streams()
    est = make_estimator("cw-col", eta=eta, r=r).fit(Xs, ys)
    W, margins = cwcol_reference(Xs, ys, eta, r)
    np.testing.assert_allclose(est.coef_.T, W, rtol=1e-10, atol=1e-12)
    for got, want in zip(est.online_margins_, margins):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("lam,C,tau", [(0.5, 1.0, 1.0), (0.8, 0.3, 0.2), (0.0, 1.0, 5.0)])
def test_osmtl_matches_the_dense_reference(lam, C, tau):
    Xs, ys = _streams(seed=1)
    est = make_estimator("osmtl-e", lam=lam, C=C, tau=tau).fit(Xs, ys)
    W, margins = osmtl_reference(Xs, ys, lam, C, tau)
    np.testing.assert_allclose(est.coef_.T, W, rtol=1e-9, atol=1e-12)
    for got, want in zip(est.online_margins_, margins):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_osmtl_shares_move_to_the_task_that_agrees():
    """Two tasks share a concept, a third has the opposite labels: each of the first two gives
    the other most of its share."""
    rng = np.random.default_rng(2)
    w = rng.standard_normal(6)
    Xs = [sp.csr_matrix(rng.standard_normal((300, 6))) for _ in range(3)]
    ys = [np.where(X @ w > 0, 1.0, -1.0) for X in Xs]
    ys[2] = -ys[2]
    est = make_estimator("osmtl-e").fit(Xs, ys)
    P = est.shares_
    assert P[0, 1] > 0.9 * (1 - 0.5) and P[1, 0] > 0.9 * (1 - 0.5)


def test_cwcol_global_model_helps_a_task_with_few_instances():
    rng = np.random.default_rng(3)
    w = rng.standard_normal(20)
    lengths = [400, 400, 30]
    Xs = [sp.csr_matrix(rng.standard_normal((n, 20))) for n in lengths]
    ys = [np.where(X @ w > 0, 1.0, -1.0) for X in Xs]
    shared = make_estimator("cw-col", eta=0.5).fit(Xs, ys)
    alone = make_estimator("cw-col", eta=0.0).fit(Xs, ys)
    X_test = sp.csr_matrix(rng.standard_normal((500, 20)))
    y_test = np.where(X_test @ w > 0, 1, -1)
    error = {name: np.mean(est.predict(X_test, task=2) != y_test) for name, est in (("shared", shared), ("alone", alone))}
    assert error["shared"] < 0.5 * error["alone"], error
