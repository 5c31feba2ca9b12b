"""LEGO and RDML against dense references of their papers' equations, the PSD property, the
feature limit and their place in the SORS protocol."""

import numpy as np
import pytest
import scipy.sparse as sp

from reference_mahalanobis import lego, rdml
from sparsesim.exceptions import ResourceLimitError
from sparsesim.registry import make_estimator
from sparsesim.triplets import sors_triplets


def _problem(seed=0, n=40, d=7):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.6, format="csr", random_state=rng, data_rvs=rng.standard_normal)
    X = sp.csr_matrix(X + sp.csr_matrix((np.ones(n), (np.arange(n), np.arange(n) % d)), shape=(n, d)))
    y = np.repeat(np.arange(4), n // 4)
    T = sors_triplets(y, 150, seed=seed + 1)
    signs = np.where(rng.random(150) < 0.3, -1.0, 1.0)
    return X, y, T, signs


@pytest.mark.parametrize("update", ["violated", "always"])
def test_lego_matches_the_dense_reference(update):
    X, _, T, signs = _problem()
    est = make_estimator("lego", eta=0.05, lower=1.0, upper=4.0, update=update)
    est.partial_fit_triplets(X, T, signs)
    ref = lego(X.toarray(), T, signs, eta=0.05, lower=1.0, upper=4.0, always=update == "always")
    assert est.n_pair_updates_ > 20
    np.testing.assert_allclose(est.A_, ref, rtol=1e-9, atol=1e-10)
    assert np.linalg.eigvalsh(est.A_).min() > 0  # LogDet steps keep A positive definite
    np.testing.assert_allclose(est.model_.score_matrix(X[:3], X), X[:3].toarray() @ ref @ X.toarray().T,
                               rtol=1e-9, atol=1e-10)


def test_rdml_matches_the_dense_reference_with_projections():
    X, _, T, signs = _problem(seed=3)
    est = make_estimator("rdml", lam=0.05, b=3.0)
    est.partial_fit_triplets(X, T, signs)
    ref = rdml(X.toarray(), T, signs, lam=0.05, b=3.0)
    np.testing.assert_allclose(est.A_, ref, rtol=1e-8, atol=1e-9)
    w = np.linalg.eigvalsh(ref)
    assert w.min() > -1e-9 and np.sum(w > 1e-9) >= 2
    # the run took similar-pair steps that needed the projection (A - lam z z' not PSD)
    assert est.n_pair_updates_ > 10


def test_a_step_moves_the_pair_distance_toward_its_target():
    """A similar pair's step shrinks its distance, a dissimilar pair's step grows it (targets chosen
    so that only one of the triplet's two pairs misses its target)."""
    X, _, T, _ = _problem(seed=5)
    i, p, n = T[0]
    cases = (("lego", {"lower": 0.1, "upper": 0.1}, p, -1), ("lego", {"lower": 1e3, "upper": 1e3}, n, +1),
             ("rdml", {"b": 1e-3}, n, +1))
    for name, params, other, direction in cases:
        before = make_estimator(name, **params).partial_fit_triplets(X, T[:0])
        after = make_estimator(name, **params).partial_fit_triplets(X, T[:1])
        assert after.n_pair_updates_ == 1, name
        change = after.distance_pairs(X[[i]], X[[other]])[0] - before.distance_pairs(X[[i]], X[[other]])[0]
        assert direction * change > 0, (name, params)


def test_auto_values_read_the_corpus_and_scale_with_it():
    X, y, _, _ = _problem()
    a = make_estimator("lego").resolve_params(X)
    b = make_estimator("lego").resolve_params(2 * X)
    assert a["lower"] < a["upper"]
    np.testing.assert_allclose([b["lower"], b["upper"], b["eta"]], [4 * a["lower"], 4 * a["upper"], a["eta"] / 16])
    r = make_estimator("rdml").resolve_params(X)
    assert r["lam"] > 0 and r["b"] > 0


@pytest.mark.parametrize("name", ["lego", "rdml"])
def test_too_many_features_is_refused_with_the_reason(name):
    X = sp.random(30, 50, density=0.2, format="csr", random_state=0)
    y = np.repeat([0, 1, 2], 10)
    with pytest.raises(ResourceLimitError, match="dense d x d metric.*max_features = 40.*sparse similarity learner"):
        make_estimator(name, max_features=40, n_triplets=10).fit(X, y)
    est = make_estimator(name, max_features=50, n_triplets=10, random_state=0).fit(X, y)
    assert est.A_.shape == (50, 50)


def test_fit_learns_a_useful_metric_on_separable_data():
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((3, 6)) * 3
    y = np.repeat([0, 1, 2], 30)
    X = centers[y] + rng.standard_normal((90, 6))
    X[:, 3:] = rng.standard_normal((90, 3)) * 6  # noise features the metric should damp
    for name in ("lego", "rdml"):
        est = make_estimator(name, n_triplets=2000, random_state=0).fit(X, y)
        base = make_estimator("dot").fit(X, y)
        assert est.score(X, y) > base.score(X, y), name
