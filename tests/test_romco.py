"""ROMCO-NuCl / ROMCO-LogD: prox operators and rounds against literal dense references."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import brentq, minimize_scalar

from sparsesim.exceptions import DataNotFoundError, InvalidInputError, SparsesimError
from sparsesim.learners.mtl_online import iter_rounds, make_round
from sparsesim.learners.romco import (
    ROMCO,
    group_shrink,
    logdet_cubic_roots,
    logdet_objective,
    logdet_prox_sv,
    nuclear_prox_sv,
    spectral_prox,
)
from sparsesim.registry import make_estimator

# --------------------------------------------------------------------------- dense references


def ref_logdet_scalar(sigma_hat: float, rho: float) -> float:
    """argmin_{s >= 0} (s - sigma_hat)^2/(2 rho) + log(1 + s^2) by 1-D numerical minimisation:
    a fine grid over [0, sigma_hat] locates the basin, then bounded Brent refines it."""
    if sigma_hat == 0:
        return 0.0
    f = lambda s: (s - sigma_hat) ** 2 / (2 * rho) + np.log1p(s * s)  # noqa: E731
    grid = np.linspace(0.0, sigma_hat, 20001)
    i = int(np.argmin(f(grid)))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
    res = minimize_scalar(f, bounds=(lo, hi), method="bounded", options={"xatol": 1e-14})
    x = res.x
    # polish: the minimiser is a zero of Theta' = 2s/(1+s^2) + (s - sigma_hat)/rho (function values
    # alone resolve s only to ~sqrt(machine eps))
    g = lambda s: 2 * s / (1 + s * s) + (s - sigma_hat) / rho  # noqa: E731
    if lo > 0 and g(lo) < 0 < g(hi):
        x = brentq(g, lo, hi, xtol=1e-15, rtol=1e-15)
    best = min([(f(0.0), 0.0), (f(x), x), (f(grid[i]), grid[i])])
    return float(best[1])


def ref_prox_full_svd(U_hat, rho, regularizer):
    """Theorem 1/2 literally: full SVD by numpy, scalar prox per singular value."""
    P, s, Qt = np.linalg.svd(U_hat, full_matrices=True)
    if regularizer == "nuclear":
        s_new = np.maximum(s - rho, 0.0)
    else:
        s_new = np.array([ref_logdet_scalar(v, rho) for v in s])
    r = s.size
    return P[:, :r] @ np.diag(s_new) @ Qt[:r, :]


def ref_romco_round(U, V, xs, tasks, ys, eta1, eta2, lam1, lam2, regularizer):
    """One round of Algorithm 1 / 2 with dense matrices (d x m), exactly as written."""
    d, m = U.shape
    margins = np.array([(U[:, i] + V[:, i]) @ x for i, x in zip(tasks, xs)])
    losses = np.maximum(0.0, 1.0 - np.asarray(ys) * margins)
    if not np.any(losses > 0):
        return U.copy(), V.copy(), margins
    grad = np.zeros((d, m))  # gradient of L_t = sum_i [1 - y_i (u_i + v_i) x_i]_+
    for i, x, y, l in zip(tasks, xs, ys, losses):
        if l > 0:
            grad[:, i] = -y * x
    U_hat = U - eta1 * grad
    V_hat = V - eta2 * grad
    U_new = ref_prox_full_svd(U_hat, eta1 * lam1, regularizer)
    V_new = np.zeros_like(V_hat)
    for i in range(m):  # eq. (18)
        n = np.linalg.norm(V_hat[:, i])
        V_new[:, i] = max(0.0, 1.0 - eta2 * lam2 / n) * V_hat[:, i] if n > 0 else 0.0
    return U_new, V_new, margins


def sparse_rows(rng, k, d, nnz):
    rows = []
    for _ in range(k):
        idx = np.sort(rng.choice(d, size=nnz, replace=False))
        rows.append((idx, rng.normal(size=nnz)))
    return rows


def dense(row, d):
    x = np.zeros(d)
    x[row[0]] = row[1]
    return x


# --------------------------------------------------------------------------- scalar proxes


def test_nuclear_prox_is_soft_threshold():
    s = np.array([0.0, 0.3, 1.0, 2.5])
    assert np.allclose(nuclear_prox_sv(s, 0.5), [0.0, 0.0, 0.5, 2.0])


@pytest.mark.parametrize("rho", [1e-3, 0.1, 1.0, 3.9, 6.0, 25.0])
def test_logdet_prox_matches_numerical_minimisation(rho):
    rng = np.random.default_rng(int(rho * 1000))
    sig = np.concatenate([[0.0, 1e-9, 0.5, 1.0], rng.uniform(0, 3, 20), rng.uniform(3, 30, 20)])
    got = logdet_prox_sv(sig, rho)
    ref = np.array([ref_logdet_scalar(s, rho) for s in sig])
    # compare objective values (ties between two minimisers are possible for rho > 4) and points
    f_got = logdet_objective(got, sig, rho)
    f_ref = logdet_objective(ref, sig, rho)
    assert np.all(f_got <= f_ref + 1e-10 * (1 + np.abs(f_ref)))
    unique = np.abs(f_got - logdet_objective(0.0, sig, rho)) > 1e-6
    assert np.allclose(got[unique], ref[unique], atol=1e-7)
    assert np.all((got >= 0) & (got <= sig + 1e-12))


def test_logdet_cubic_roots_solve_eq21():
    sig = np.array([0.2, 1.0, 7.0])
    rho = 5.0
    roots = logdet_cubic_roots(sig, rho)
    for s, rr in zip(sig, roots):
        coef = [1 / rho, -s / rho, 1 / rho + 2, -s / rho]  # eq. (21)
        assert np.allclose(np.polyval(coef, rr), 0, atol=1e-9)


def test_logdet_nonconvex_case_picks_global_minimiser():
    # rho > 4: Theta can have two local minima; the prox must return the global one (or 0)
    rho = 20.0
    sig = np.linspace(0.01, 40, 400)
    got = logdet_prox_sv(sig, rho)
    grid = np.linspace(0, 40, 200001)
    for s, g in zip(sig[::20], got[::20]):
        vals = logdet_objective(grid[grid <= s + 1e-12], s, rho)
        assert logdet_objective(g, s, rho) <= vals.min() + 1e-8
    # two regimes on this range: the global minimiser jumps from the small root to the large one
    assert np.max(np.diff(got)) > 1.0
    assert np.all(got > 0)  # Theta'(0) = -sigma_hat/rho < 0, so 0 never wins when sigma_hat > 0


def test_logdet_rho_zero_is_identity():
    s = np.array([0.0, 0.7, 3.0])
    assert np.array_equal(logdet_prox_sv(s, 0.0), s)


# --------------------------------------------------------------------------- matrix proxes


@pytest.mark.parametrize("regularizer", ["nuclear", "logdet"])
@pytest.mark.parametrize("shape", [(40, 6), (200, 12), (5, 8)])
def test_spectral_prox_via_gram_matches_full_svd(regularizer, shape):
    rng = np.random.default_rng(shape[0])
    U_hat = rng.normal(size=shape) @ np.diag(np.logspace(-3, 0.5, shape[1]))
    rho = 0.05
    got = spectral_prox(U_hat, rho, regularizer)
    ref = ref_prox_full_svd(U_hat, rho, regularizer)
    assert np.max(np.abs(got - ref)) < 1e-10


def test_spectral_prox_rank_deficient_input():
    rng = np.random.default_rng(3)
    U_hat = rng.normal(size=(30, 2)) @ rng.normal(size=(2, 7))  # rank 2
    for reg in ("nuclear", "logdet"):
        got = spectral_prox(U_hat, 0.1, reg)
        assert np.max(np.abs(got - ref_prox_full_svd(U_hat, 0.1, reg))) < 1e-10
        assert np.linalg.matrix_rank(got, tol=1e-8) <= 2


def test_group_shrink_eq18():
    V = np.array([[3.0, 0.1, 0.0], [4.0, 0.0, 0.0]])
    out = group_shrink(V, 1.0)
    assert np.allclose(out[:, 0], V[:, 0] * (1 - 1 / 5))
    assert np.allclose(out[:, 1:], 0.0)


# --------------------------------------------------------------------------- one round vs Algorithm 1/2


@pytest.mark.parametrize("regularizer", ["nuclear", "logdet"])
@pytest.mark.parametrize("case", ["all-active", "some-tasks", "big-lam2"])
def test_one_round_matches_dense_algorithm(regularizer, case):
    rng = np.random.default_rng(7)
    d, m = 60, 8
    U = rng.normal(size=(d, m)) * 0.3
    V = rng.normal(size=(d, m)) * 0.1
    V[:, 2] = 0.0  # a zeroed personalized column
    tasks = np.arange(m) if case != "some-tasks" else np.array([0, 3, 4, 7])
    rows = sparse_rows(rng, tasks.size, d, 9)
    ys = rng.choice([-1.0, 1.0], size=tasks.size)
    params = dict(eta1=0.3, eta2=0.2, lam1=0.5, lam2=0.8 if case != "big-lam2" else 6.0)
    model = ROMCO(regularizer, **params).set_state(U, V)
    p = model._learn_round(make_round(tasks, rows, ys))
    U_ref, V_ref, p_ref = ref_romco_round(U, V, [dense(r, d) for r in rows], tasks, ys,
                                          regularizer=regularizer, **params)
    assert np.allclose(p, p_ref, atol=1e-12)
    assert np.max(np.abs(model.U_ - U_ref)) < 1e-10
    assert np.max(np.abs(model.V_ - V_ref)) < 1e-10
    assert np.allclose(model._gram, model.U_.T @ model.U_, atol=1e-10)
    assert np.allclose(model._vnorm, np.linalg.norm(model.V_, axis=0), atol=1e-10)


@pytest.mark.parametrize("regularizer", ["nuclear", "logdet"])
@pytest.mark.parametrize("lam1", [0.4, 1e-3])
def test_many_rounds_match_dense_algorithm(regularizer, lam1):
    """A whole stream from zero: low-rank phases, singular values set to zero (materialised rounds)
    and long runs of lazy rounds (small lam1), zeroed V columns."""
    rng = np.random.default_rng(11)
    d, m, T = 50, 6, 60
    X = [sp.random(T - 3 * i, d, density=0.15, random_state=rng, format="csr") for i in range(m)]
    y = [rng.choice([-1.0, 1.0], size=x.shape[0]) for x in X]
    params = dict(eta1=0.5, eta2=0.5, lam1=lam1, lam2=0.3)
    model = ROMCO(regularizer, gram_refresh=7, **params).fit(X, y)
    assert model.n_materialized_ < model.n_updates_  # the lazy path ran
    if lam1 > 0.1 and regularizer == "nuclear":
        assert model.n_corrected_ > 0  # rounds that zeroed a singular value by the rank correction
    U = np.zeros((d, m))
    V = np.zeros((d, m))
    for rnd in iter_rounds(X, y):
        xs = [dense(rnd.instance(j), d) for j in range(rnd.tasks.size)]
        U, V, _ = ref_romco_round(U, V, xs, rnd.tasks, rnd.y, regularizer=regularizer, **params)
    assert np.max(np.abs(model.U_ - U)) < 1e-9
    assert np.max(np.abs(model.V_ - V)) < 1e-9
    assert model.rank_ == np.linalg.matrix_rank(U, tol=1e-9)


def test_no_loss_no_update():
    d, m = 10, 3
    U = np.zeros((d, m))
    U[0] = 5.0
    model = ROMCO("nuclear", lam1=1.0, lam2=1.0).set_state(U, np.zeros((d, m)))
    rows = [(np.array([0]), np.array([1.0]))] * 3
    model._learn_round(make_round([0, 1, 2], rows, [1, 1, 1]))  # margins 5 > 1
    assert np.array_equal(model.U_, U)
    assert model.n_updates_ == 0


def test_same_seed_same_model_and_learns():
    rng = np.random.default_rng(0)
    w = rng.normal(size=30)
    X = [sp.csr_matrix(rng.normal(size=(150, 30))) for _ in range(4)]
    y = [np.sign(x @ (w + 0.3 * rng.normal(size=30))) for x in X]
    for reg in ("nuclear", "logdet"):
        a = ROMCO(reg, eta1=0.1, eta2=0.1, lam1=1e-3, lam2=1e-3).fit(X, y)
        b = ROMCO(reg, eta1=0.1, eta2=0.1, lam1=1e-3, lam2=1e-3).fit(X, y)
        assert np.array_equal(a.coef_, b.coef_)
        late = np.mean([np.mean(np.sign(m[100:]) != t[100:]) for m, t in zip(a.online_margins_, y)])
        assert late < 0.25  # well below chance on related linear tasks
        assert np.allclose(a.decision_function(X[1][:5], 1), X[1][:5] @ a.coef_[:, 1])
        assert set(a.predict(X[1][:5], 1)) <= {-1, 1}


def test_registry_names_build_romco():
    assert make_estimator("romco-nucl").regularizer == "nuclear"
    assert make_estimator("romco-logd", lam1=0.5).get_params()["lam1"] == 0.5


# --------------------------------------------------------------------------- bad input


def test_bad_input_errors():
    rng = np.random.default_rng(1)
    X = [sp.csr_matrix(rng.normal(size=(10, 5))) for _ in range(2)]
    y = [np.array([1, -1] * 5), np.array([1, -1] * 5)]
    with pytest.raises(InvalidInputError, match="only one class"):
        ROMCO().fit(X, [y[0], np.ones(10)])
    with pytest.raises(InvalidInputError, match="different feature counts"):
        ROMCO().fit([X[0], sp.csr_matrix(rng.normal(size=(10, 6)))], y)
    bad = X[0].toarray()
    bad[2, 3] = np.nan
    with pytest.raises(InvalidInputError, match="NaN"):
        ROMCO().fit([bad, X[1]], y)
    with pytest.raises(InvalidInputError, match="labels"):
        ROMCO().fit(X, [y[0], y[1][:7]])
    with pytest.raises(InvalidInputError, match="regularizer"):
        ROMCO(regularizer="trace").fit(X, y)
    with pytest.raises(InvalidInputError, match="eta1"):
        ROMCO(eta1=0).fit(X, y)
    model = ROMCO().fit(X, y)
    with pytest.raises(InvalidInputError, match="feature"):
        model.partial_fit([sp.csr_matrix((3, 4))] * 2, [np.array([1, -1, 1])] * 2)
    with pytest.raises(SparsesimError):
        model.decision_function(X[0], task=5)


# --------------------------------------------------------------------------- real data (small slices)


def test_real_data_slice_beats_chance():
    from sparsesim.data.catalog import load_registered

    try:
        streams = load_registered("mhc1")
    except DataNotFoundError as exc:
        pytest.skip(f"mhc1 data not available: {exc}")
    small = streams.shuffled(0).head(300, tasks=[0, 2, 6, 7])
    model = ROMCO("logdet", eta1=0.5, eta2=0.5, lam1=1e-3, lam2=1e-3).fit(small.X, small.y)
    majority = np.mean([max(np.mean(y > 0), np.mean(y < 0)) for y in small.y])
    assert model.error_rates_.mean() < 1 - majority + 0.05
    assert model.error_rates_.mean() < 0.4


# --------------------------------------------------------------------------- protocol (small slices)


def test_protocol_romco_small(tmp_path):
    from sparsesim.experiments import ExperimentConfig, run_experiment
    from sparsesim.experiments.romco import format_table, search_params
    from sparsesim.data.catalog import load_registered

    try:
        streams = load_registered("mhc1")
    except DataNotFoundError as exc:
        pytest.skip(f"mhc1 data not available: {exc}")
    cfg = ExperimentConfig(dataset="mhc1", algorithms=["romco-logd", "pa-unique", "omtllog"],
                           seeds=[0, 1], out_dir=tmp_path, params={"omtllog": {"eta": 1e-6}},
                           options={"max_per_task": 200, "sensitivity": True, "sensitivity_shuffles": 1})
    rep = run_experiment("romco", cfg)
    assert len(rep["results"]) == 6
    for r in rep["results"]:
        assert {"algorithm", "seed", "error_rate", "f1", "f1_pos", "f1_neg", "train_seconds", "per_task"} <= set(r)
        assert len(r["per_task"]) == 12 and 0 <= r["error_rate"] <= 1
        assert np.isclose(r["error_rate"], np.mean([t["error_rate"] for t in r["per_task"]]))
    same = [r for r in rep["results"] if r["algorithm"] == "pa-unique"]
    again = run_experiment("romco", ExperimentConfig(dataset="mhc1", algorithms=["pa-unique"], seeds=[0, 1],
                                                     options={"max_per_task": 200}))
    assert [r["error_rate"] for r in same] == [r["error_rate"] for r in again["results"]]
    assert all((tmp_path / f"romco_mhc1_{k}.png").exists() for k in ("cumulative_error", "sensitivity"))
    assert (tmp_path / "romco_mhc1.json").exists()
    assert "romco-logd" in format_table(rep)
    found = search_params(streams, "omtlvon", seed=99, max_per_task=150)
    assert len(found["trials"]) == 32 and "eta" in found["best"]
    with pytest.raises(SparsesimError):
        run_experiment("romco", ExperimentConfig(dataset="mhc1", algorithms=["oasis"]))


def test_protocol_romco_ablation_and_margin_split():
    from sparsesim.data.catalog import load_registered
    from sparsesim.experiments import ExperimentConfig, run_experiment
    from sparsesim.experiments.romco import format_table, run_stream

    try:
        streams = load_registered("mhc1")
    except DataNotFoundError as exc:
        pytest.skip(f"mhc1 data not available: {exc}")
    chosen = {"eta1": 0.5, "eta2": 0.5, "lam1": 1e-3, "lam2": 1e-3}
    rep = run_experiment("romco", ExperimentConfig(dataset="mhc1", algorithms=["romco-nucl", "pa-unique"], seeds=[3],
                                                   params={"romco-nucl": chosen},
                                                   options={"max_per_task": 150, "ablation": True}))
    assert list(rep["ablation"]) == ["romco-nucl"]  # only ROMCO has lam1, lam2
    entry = rep["ablation"]["romco-nucl"]
    assert entry["params"] == dict(chosen, lam1=0.0, lam2=0.0)
    direct = run_stream(streams, "romco-nucl", entry["params"], 3, max_per_task=150)
    assert entry["results"][0]["error_rate"] == direct["error_rate"]
    assert entry["summary"]["error_rate_mean"] == direct["error_rate"]
    for r in rep["results"] + entry["results"]:
        u = r["undecided_rate"]
        assert 0 <= u <= 1 and 0 <= r["error_decided"] <= 1
        undecided_part = u * r["error_undecided"] if u > 0 else 0.0
        assert r["error_pooled"] == pytest.approx(undecided_part + (1 - u) * r["error_decided"])
    table = format_table(rep)
    assert "romco-nucl lam=0" in table and "undecided" in table


def test_protocol_romco_factors_run_at_multiples_of_the_auto_values():
    from sparsesim.data.catalog import load_registered
    from sparsesim.experiments import ExperimentConfig, run_experiment
    from sparsesim.experiments.romco import format_table, run_stream

    try:
        streams = load_registered("landmine")
    except DataNotFoundError as exc:
        pytest.skip(f"landmine data not available: {exc}")
    config = ExperimentConfig(dataset="landmine", algorithms=["romco-nucl", "pa-unique"], seeds=[0, 1],
                              params={"romco-nucl": {"lam2": 1e-3}},
                              options={"max_per_task": 150, "factors": {"eta1,eta2": [0.2, 1], "lam1": [3], "C": [3]}})
    rep = run_experiment("romco", config)
    names = [row["algorithm"] for row in rep["summary"]]
    assert names == ["romco-nucl (eta1,eta2)x0.2,lam1x3", "romco-nucl (eta1,eta2)x1,lam1x3", "pa-unique Cx3"]
    assert rep["factors"]["C"] == [3.0] and set(rep["resolved_params"]) == set(names)
    assert "pa-unique Cx3" in format_table(rep)
    for r in rep["results"]:
        # the value the run's own streams resolve "auto" to, times the multiple; lam2 given: kept
        part = streams.shuffled(r["seed"]).head(150)
        auto = make_estimator(r["algorithm"]).resolve_params(part.X)
        given = {"lam2": 1e-3} if r["algorithm"] == "romco-nucl" else {}
        want = {k: auto[k] * m for key, m in r["factors"].items() for k in key.split(",") if k not in given}
        assert r["resolved_params"] == {**auto, **want, **given}
        direct = run_stream(streams, r["algorithm"], {**want, **given}, r["seed"], max_per_task=150)
        assert r["error_rate"] == direct["error_rate"]
    plain = run_experiment("romco", ExperimentConfig(dataset="landmine", algorithms=["romco-nucl"], seeds=[0],
                                                     params={"romco-nucl": {"lam2": 1e-3}},
                                                     options={"max_per_task": 150,
                                                              "factors": {"eta1,eta2": [1], "lam1": [1]}}))
    auto = run_stream(streams, "romco-nucl", {"lam2": 1e-3}, 0, max_per_task=150)
    assert plain["results"][0]["error_rate"] == auto["error_rate"]  # multiple 1: the default itself


@pytest.mark.parametrize("factors, options, message", [
    ({"C": []}, {}, "'factors' must map"),
    ({"C": [0]}, {}, "positive finite"),
    ({"lam2": [1]}, {}, "'auto' value of lam2"),
    ({"C": [1]}, {"ablation": True}, "without a search"),
])
def test_protocol_romco_refuses_a_bad_factors_grid_before_loading_data(factors, options, message):
    from sparsesim.experiments import ExperimentConfig, run_experiment

    with pytest.raises(InvalidInputError, match=message):
        run_experiment("romco", ExperimentConfig(dataset="no-such-data", algorithms=["romco-nucl", "pa-unique"],
                                                 params={"romco-nucl": {"lam2": 0.1}},
                                                 options={"factors": factors, **options}))


@pytest.mark.parametrize("growth", [1.0, 0.25])
def test_increasing_rho_schedule_matches_dense_algorithm(growth):
    """ROMCO-LogD with the paper's schedule (1/rho = 1 at the first round, growing every round)
    equals the dense Algorithm 2 run with rho_t = 1 / (1 + growth (t - 1)), also when the stream
    comes in two partial_fit calls."""
    rng = np.random.default_rng(5)
    d, m, T = 30, 4, 40
    X = [sp.random(T, d, density=0.2, random_state=rng, format="csr") for _ in range(m)]
    y = [rng.choice([-1.0, 1.0], size=T) for _ in range(m)]
    params = dict(eta1=0.5, eta2=0.5, lam1=123.0, lam2=0.2)  # lam1 is not used by the schedule
    model = ROMCO("logdet", rho_schedule="increasing", rho_growth=growth, gram_refresh=5, **params).fit(X, y)
    U = np.zeros((d, m))
    V = np.zeros((d, m))
    rhos = []
    for t, rnd in enumerate(iter_rounds(X, y), start=1):
        rho = 1.0 / (1.0 + growth * (t - 1))
        rhos.append(rho)
        xs = [dense(rnd.instance(j), d) for j in range(rnd.tasks.size)]
        U, V, _ = ref_romco_round(U, V, xs, rnd.tasks, rnd.y, regularizer="logdet",
                                  **dict(params, lam1=rho / params["eta1"]))
    assert model.n_rounds_ == len(rhos) and rhos[0] == 1.0 and rhos[-1] < 0.1
    assert np.max(np.abs(model.U_ - U)) < 1e-9
    assert np.max(np.abs(model.V_ - V)) < 1e-9
    fixed = ROMCO("logdet", gram_refresh=5, **dict(params, lam1=1.0 / params["eta1"])).fit(X, y)
    assert np.max(np.abs(fixed.U_ - U)) > 1e-3  # rho = 1 throughout is a different run
    half = ROMCO("logdet", rho_schedule="increasing", rho_growth=growth, gram_refresh=5, **params)
    half.partial_fit([x[:20] for x in X], [v[:20] for v in y]).partial_fit([x[20:] for x in X], [v[20:] for v in y])
    assert np.max(np.abs(half.U_ - model.U_)) < 1e-9


def test_rho_schedule_bad_values():
    X = [sp.random(10, 5, density=0.5, random_state=0, format="csr") for _ in range(2)]
    y = [np.where(np.arange(10) % 2 == 0, 1.0, -1.0)] * 2
    for bad in ({"rho_schedule": "growing"}, {"rho_growth": 0.0}, {"rho_growth": float("nan")}, {"rho_growth": "1"}):
        with pytest.raises(InvalidInputError):
            ROMCO("logdet", **bad).fit(X, y)
