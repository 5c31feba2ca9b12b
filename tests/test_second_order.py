"""Second-order learners (CWS/CWAS/CWRS full and diagonal, AROMA) against literal dense references."""

import numpy as np
import pytest
import scipy.sparse as sp

from reference_second_order import dense_selective
from sparsesim.engine.second_order import FullCovarianceEngine, SparseSecondOrderEngine
from sparsesim.exceptions import DataNotFoundError, InvalidInputError
from sparsesim.learners.active import _rng_for
from sparsesim.learners.second_order import AROMA, CWAS, CWRS, CWS
from sparsesim.models import BilinearSimilarity
from sparsesim.triplets import sors_triplets

TOL = dict(rtol=1e-10, atol=1e-10)


def _data(n=30, d=5, density=0.7, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * (rng.random((n, d)) < density) * scale
    y = rng.integers(0, 3, n)
    y[:3] = [0, 1, 2]
    return X, y


def _stream(y, n_triplets=150, seed=1, flip=True):
    T = sors_triplets(y, n_triplets, seed=seed)
    rng = np.random.default_rng(seed + 100)
    signs = np.where(rng.random(n_triplets) < 0.5, -1.0, 1.0) if flip else None
    if flip:
        T = T.copy()
        swap = signs < 0
        T[swap, 1], T[swap, 2] = T[swap, 2].copy(), T[swap, 1].copy()
    return T, signs


POLICIES = [("all", {}), ("active", {"delta": 0.7}), ("random", {"rate": 0.4})]


@pytest.mark.parametrize("rule,sigma_step", [("cw", "previous"), ("cw", "updated"), ("arow", "previous")])
@pytest.mark.parametrize("policy,pkw", POLICIES)
@pytest.mark.parametrize("path", ["full-fused", "full-blas", "diag"])
def test_engine_matches_dense_reference(rule, sigma_step, policy, pkw, path):
    X, y = _data()
    T, signs = _stream(y)
    u = np.random.default_rng(5).random(len(T))
    kw = dict(eta=0.3, gamma=0.8, r=0.5, sigma_step=sigma_step, **pkw)
    covariance = "diag" if path == "diag" else "full"
    Engine = FullCovarianceEngine if covariance == "full" else SparseSecondOrderEngine
    extra = {"diag": {"initial_capacity": 16},  # forces table growth
             "full-fused": {"blas_min_d2": 10 ** 9}, "full-blas": {"blas_min_d2": 0}}[path]
    eng = Engine(X.shape[1], rule=rule, policy=policy, **kw, **extra)
    margins, queried, losses, _ = eng.partial_fit(sp.csr_matrix(X), T, signs, u)
    M_ref, S_ref, q_ref, m_ref = dense_selective(X, T, rule, policy, u, signs, covariance=covariance, **kw)
    assert np.array_equal(queried.astype(bool), q_ref)
    assert 0 < queried.sum() <= len(T)
    np.testing.assert_allclose(margins, m_ref, **TOL)
    off, diag = eng.export()
    M = off.toarray() + np.diag(diag)
    np.testing.assert_allclose(M, M_ref, **TOL)
    np.testing.assert_allclose(eng.covariance(), S_ref, **TOL)
    assert np.abs(M_ref).sum() > 0.1  # the run really learned something


@pytest.mark.parametrize("covariance", ["full", "diag"])
def test_chunked_stream_equals_one_pass(covariance):
    """The deferred rank-one downdate (full) and the store (diag) persist across partial_fit calls."""
    X, y = _data(seed=3)
    T, signs = _stream(y, 120, seed=4)
    one = CWS(eta=0.2, gamma=0.5, covariance=covariance).partial_fit_triplets(X, T, signs)
    two = CWS(eta=0.2, gamma=0.5, covariance=covariance)
    for lo in range(0, 120, 37):
        two.partial_fit_triplets(X, T[lo:lo + 37], signs[lo:lo + 37])
    np.testing.assert_allclose(one.model_.W.toarray(), two.model_.W.toarray(), **TOL)
    np.testing.assert_allclose(one.engine_.covariance(), two.engine_.covariance(), **TOL)


@pytest.mark.parametrize("cls,kw,policy", [
    (CWS, {}, "all"), (CWAS, {"delta": 0.5}, "active"), (CWRS, {"query_rate": 0.3}, "random"),
])
@pytest.mark.parametrize("covariance", ["full", "diag"])
def test_learners_match_reference(cls, kw, policy, covariance):
    X, y = _data(n=25, d=4, seed=7)
    T, signs = _stream(y, 100, seed=8)
    est = cls(eta=0.4, gamma=2.0, covariance=covariance, random_state=3, **kw).partial_fit_triplets(X, T, signs)
    u = _rng_for(3).random(len(T))
    rkw = {"delta": kw.get("delta", 1.0), "rate": kw.get("query_rate", 1.0)}
    M_ref, _, q_ref, _ = dense_selective(X, T, "cw", policy, u, signs, eta=0.4, gamma=2.0,
                                         covariance=covariance, **rkw)
    np.testing.assert_allclose(est.model_.W.toarray(), M_ref, **TOL)
    assert est.n_queries_ == q_ref.sum()
    assert est.query_ratio_ == pytest.approx(q_ref.mean())
    assert not est.model_.identity


@pytest.mark.parametrize("covariance", ["full", "diag"])
def test_aroma_matches_reference_and_identity_start(covariance):
    X, y = _data(seed=11)
    T, signs = _stream(y, 100, seed=12)
    est = AROMA(r=0.3, covariance=covariance, identity=True).partial_fit_triplets(X, T, signs)
    M_ref, _, _, _ = dense_selective(X, T, "arow", r=0.3, signs=signs, covariance=covariance, identity=True)
    model = est.model_
    assert model.identity
    np.testing.assert_allclose(model.M.toarray(), M_ref, **TOL)
    assert est.n_queries_ == 100 and est.query_ratio_ == 1.0


def test_diag_on_sparse_high_dim_rows_matches_reference():
    """Sparse rows in d = 60 (hash store, growth from 16 slots) against the dense diagonal rules."""
    rng = np.random.default_rng(2)
    X = sp.random(40, 60, density=0.08, random_state=3, format="csr")
    X.data = rng.standard_normal(X.nnz)
    y = np.arange(40) % 4
    T = sors_triplets(y, 200, seed=9)
    u = rng.random(200)
    for rule in ("cw", "arow"):
        eng = SparseSecondOrderEngine(60, rule=rule, policy="active", delta=0.3, eta=0.5, gamma=0.2, r=2.0,
                                      initial_capacity=16)
        eng.partial_fit(X, T, None, u)
        M_ref, S_ref, _, _ = dense_selective(X.toarray(), T, rule, "active", u, delta=0.3, eta=0.5, gamma=0.2,
                                             r=2.0, covariance="diag")
        off, diag = eng.export()
        np.testing.assert_allclose(off.toarray() + np.diag(diag), M_ref, **TOL)
        np.testing.assert_allclose(eng.covariance(), S_ref, **TOL)


@pytest.mark.parametrize("cls,name", [(CWS, "cws-d"), (CWAS, "cwas-d"), (CWRS, "cwrs-d"), (AROMA, "aroma-d")])
def test_full_covariance_refuses_large_d(cls, name):
    X = sp.random(10, 65, density=0.2, random_state=0, format="csr")
    T = np.array([[0, 1, 2]])
    with pytest.raises(InvalidInputError, match=name):
        cls(covariance="full").partial_fit_triplets(X, T)
    cls(covariance="diag").partial_fit_triplets(X, T)  # the diagonal variant runs


def test_full_covariance_allows_d_64():
    X = sp.random(6, 64, density=0.05, random_state=0, format="csr")
    est = CWS().partial_fit_triplets(X, np.array([[0, 1, 2], [3, 4, 5]]))
    assert est.engine_.S.shape == (4096, 4096)


def test_bad_parameters_and_input():
    X, y = _data()
    T = np.array([[0, 1, 2]])
    for est in (CWS(eta=0), CWS(gamma=-1), CWS(sigma_step="next"), CWS(covariance="block"), AROMA(r=0),
                CWAS(delta=0), CWRS(query_rate=1.5), CWS(query_budget=-2)):
        with pytest.raises(InvalidInputError):
            est.partial_fit_triplets(X, T)
    Xbad = X.copy()
    Xbad[0, 0] = np.nan
    with pytest.raises(InvalidInputError):
        CWS().partial_fit_triplets(Xbad, T)
    est = CWS().partial_fit_triplets(X, T)
    with pytest.raises(InvalidInputError):
        est.partial_fit_triplets(X[:, :3], T)


def test_model_round_trip_and_determinism(tmp_path):
    X, y = _data(n=40, d=6, seed=21)
    a = CWAS(eta=0.5, delta=0.3, n_triplets=300, random_state=4, oracle=lambda t: 1).fit(X, y)
    b = CWAS(eta=0.5, delta=0.3, n_triplets=300, random_state=4).fit(X, y)
    np.testing.assert_array_equal(a.model_.W.toarray(), b.model_.W.toarray())  # same seed, same model
    path = tmp_path / "cwas.npz"
    a.model_.save(path)
    loaded = BilinearSimilarity.load(path)
    assert loaded.metadata["algorithm"] == "cwas"
    assert loaded.metadata["n_queries"] == a.n_queries_
    np.testing.assert_allclose(loaded.W.toarray(), a.model_.W.toarray())


def test_cws_learns_on_real_data_slice():
    """On 200 segment documents, CWS (full) ranks better than its starting point, the dot product."""
    from sparsesim.data import load_dataset
    from sparsesim.evaluation import dot_scorer, evaluate_retrieval
    from sparsesim.triplets import stratified_split

    try:
        data = load_dataset("segment")
    except DataNotFoundError as exc:
        pytest.skip(f"segment not available: {exc}")
    rows = np.random.default_rng(0).choice(data.n_documents, 300, replace=False)
    X, yy = data.X[rows], data.y[rows]
    tr, te = stratified_split(yy, 0.7, seed=0)
    est = CWS(eta=0.1, gamma=1.0, n_triplets=3000, random_state=0).fit(X[tr], yy[tr])
    learned = evaluate_retrieval(est.model_.scorer(X[te]), yy[te], k=10)["ap@10"]
    dot = evaluate_retrieval(dot_scorer(X[te]), yy[te], k=10)["ap@10"]
    assert learned > dot


def test_oracle_with_blas_path_full_covariance():
    """d = 20 (d^2 = 400) takes the BLAS step; oracle answers interleave with external updates."""
    X, y = _data(n=30, d=20, density=0.5, seed=31, scale=0.5)
    T, signs = _stream(y, 80, seed=32)
    lookup = {tuple(t): s for t, s in zip(T, signs)}
    calls = []

    def oracle(t):
        calls.append(tuple(t))
        return lookup[tuple(t)]

    a = CWAS(eta=0.3, gamma=0.5, delta=0.8, random_state=1, oracle=oracle).partial_fit_triplets(X, T)
    assert a.engine_.external
    b = CWAS(eta=0.3, gamma=0.5, delta=0.8, random_state=1).partial_fit_triplets(X, T, signs)
    assert len(calls) == a.n_queries_ == b.n_queries_ > 0
    np.testing.assert_allclose(a.model_.W.toarray(), b.model_.W.toarray(), **TOL)
    u = _rng_for(1).random(80)
    M_ref, S_ref, _, _ = dense_selective(X, T, "cw", "active", u, signs, delta=0.8, eta=0.3, gamma=0.5)
    np.testing.assert_allclose(a.model_.W.toarray(), M_ref, **TOL)
    np.testing.assert_allclose(a.engine_.covariance(), S_ref, **TOL)


@pytest.mark.parametrize("name", ["pars", "cwas-d"])
def test_an_initial_table_larger_than_the_budget_is_refused_before_it_is_allocated(name):
    # found by the campaign (library/param, seed 2811): initial_capacity=2**31 tried to allocate 48 GiB
    from sparsesim.exceptions import MemoryBudgetError
    from sparsesim.registry import make_estimator

    X = sp.random(12, 6, density=0.5, format="csr", random_state=0)
    est = make_estimator(name, initial_capacity=2**31, max_memory="1GiB", n_triplets=10, random_state=0)
    with pytest.raises(MemoryBudgetError, match="initial_capacity"):
        est.fit(X, np.repeat([0, 1, 2], 4))
