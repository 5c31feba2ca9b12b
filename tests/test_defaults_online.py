"""Data-adaptive defaults of the multi-task, multi-task classification and transfer learners:
the "auto" rules resolve as stated, explicit values win, the values used are recorded."""

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim import defaults
from sparsesim.exceptions import InvalidInputError
from sparsesim.learners.mtl_baselines import PAGlobal, PAUnique
from sparsesim.learners.multitask import OGRSL, OMTRSL, OSTRSL, OMTRSLActive
from sparsesim.learners.romco import ROMCO
from sparsesim.learners.transfer import OHTClassifier
from sparsesim.models import MultiTaskLinearModel, MultiTaskSimilarity


def multitask_problem(n=120, d=30, scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    y = np.tile([0, 1, 2], n // 3)
    tasks = np.repeat([0, 1], n // 2)
    centers = rng.normal(size=(3, d))
    X = np.abs(centers[y] + 0.5 * rng.normal(size=(n, d))) * (rng.random((n, d)) < 0.5)
    return sp.csr_matrix(scale * X), y, tasks


def task_streams(m=3, n=60, d=20, scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d)
    X = [sp.csr_matrix(scale * rng.normal(size=(n + 10 * i, d))) for i in range(m)]
    y = [np.where(x @ w > 0, 1, -1) for x in X]
    return X, y


# --------------------------------------------------------------------------- OMTRSL family
@pytest.mark.parametrize("cls", [OMTRSL, OSTRSL, OGRSL, OMTRSLActive])
def test_multitask_auto_C_follows_the_rule(cls):
    X, y, tasks = multitask_problem()
    X = X / np.sqrt(defaults.data_statistics(X)["margin"]) / 2  # typical margin 1/4 under M = I
    est = cls(n_triplets=300, random_state=0).fit(X, y, tasks)
    stats = defaults.data_statistics(X)
    assert est.resolved_params_["C"] == pytest.approx(defaults.MULTITASK_C_FACTOR / stats["s"])
    assert est.resolve_params(X, y, tasks) == est.resolved_params_
    assert {k: v for k, v in est.data_statistics_.items() if k != "class_overlap"} == stats
    # features x 10: s grows by 10^4, the typical margin to 25 > 1, so C = 3 * 25 / s
    big = cls(n_triplets=300, random_state=0).fit(10.0 * X, y, tasks)
    assert big.resolved_params_["C"] == pytest.approx(est.resolved_params_["C"] * 1e-4 * 25.0)


def test_multitask_auto_equals_the_number_given_explicitly():
    X, y, tasks = multitask_problem()
    auto = OMTRSL(n_triplets=400, random_state=1).fit(X, y, tasks)
    explicit = OMTRSL(C=auto.resolved_params_["C"], n_triplets=400, random_state=1).fit(X, y, tasks)
    for k in (0, 1):
        assert (auto.model_for(k).W != explicit.model_for(k).W).nnz == 0


def test_multitask_explicit_C_wins_and_is_saved(tmp_path):
    X, y, tasks = multitask_problem()
    est = OMTRSL(C=0.25, b=2.0, n_triplets=200, random_state=0).fit(X, y, tasks)
    assert est.resolved_params_ == {"C": 0.25, "b": 2.0} and est.engine_.C == 0.25
    auto = OSTRSL(n_triplets=200, random_state=0).fit(X, y, tasks)
    auto.model_.save(tmp_path / "m.npz")
    back = MultiTaskSimilarity.load(tmp_path / "m.npz")
    assert back.metadata["resolved_params"] == auto.resolved_params_
    assert back.metadata["params"]["C"] == "auto"


def test_omtrsl_auto_b_follows_the_class_overlap():
    X, y, tasks = multitask_problem()  # both tasks label classes 0, 1, 2: overlap 1
    shared = OMTRSL(n_triplets=200, random_state=0).fit(X, y, tasks)
    assert shared.resolved_params_["b"] == defaults.MULTITASK_B_SHARED
    assert shared.data_statistics_["class_overlap"] == 1.0
    y2 = y + 10 * tasks  # task 1's classes renamed: disjoint classes, overlap 0 -> b = 0 (OSTRSL)
    apart = OMTRSL(n_triplets=200, random_state=0).fit(X, y2, tasks)
    assert apart.resolved_params_["b"] == 0.0
    alone = OSTRSL(C=apart.resolved_params_["C"], n_triplets=200, random_state=0).fit(X, y2, tasks)
    for k in (0, 1):
        np.testing.assert_allclose(apart.model_for(k).W.toarray(), alone.model_for(k).W.toarray(), atol=1e-12)
    # one class in common out of 5 (tasks {0,1,2} and {0,3,4}): Jaccard 1/5
    y3 = np.where((tasks == 1) & (y > 0), y + 2, y)
    assert defaults.class_overlap(y3, tasks) == pytest.approx(0.2)
    assert OMTRSL(n_triplets=100, random_state=0).fit(X, y3, tasks).resolved_params_["b"] == pytest.approx(20.0)
    # explicit b wins; without class labels "auto" is 1
    assert OMTRSL(b=0.5, n_triplets=100, random_state=0).fit(X, y, tasks).resolved_params_["b"] == 0.5
    trip = np.array([[0, 3, 1], [6, 9, 7]])
    est = OMTRSL().partial_fit_triplets(X, trip, task_ids=np.array([0, 1]))
    assert est.resolved_params_["b"] == defaults.MULTITASK_B_UNLABELLED


def test_multitask_bad_C_refused():
    X, y, tasks = multitask_problem()
    with pytest.raises(InvalidInputError, match="C must be positive"):
        OMTRSL(C=-1.0, n_triplets=10).fit(X, y, tasks)
    with pytest.raises(Exception, match="C"):
        OMTRSL(C="big", n_triplets=10).fit(X, y, tasks)


# --------------------------------------------------------------------------- ROMCO and PA baselines
@pytest.mark.parametrize("regularizer", ["nuclear", "logdet"])
def test_romco_auto_follows_the_rule(regularizer):
    X, y = task_streams(scale=3.0)
    est = ROMCO(regularizer).fit(X, y)
    n = sum(x.shape[0] for x in X)
    q = sum(float(x.multiply(x).sum()) for x in X) / n
    T = max(x.shape[0] for x in X)
    got = est.resolved_params_
    assert got["eta1"] == pytest.approx(defaults.ROMCO_ETA_FACTOR / q) and got["eta2"] == got["eta1"]
    assert got["lam1"] == pytest.approx(defaults.ROMCO_LAM_FACTOR * np.sqrt(q) / T) and got["lam2"] == got["lam1"]
    assert est.resolve_params(X) == got


def test_romco_auto_is_scale_invariant():
    X, y = task_streams()
    small = ROMCO().fit(X, y)
    big = ROMCO().fit([10.0 * x for x in X], y)
    # every step moves its margin by the same amount: the same mistakes, margins x 1
    assert big.n_mistakes_.tolist() == small.n_mistakes_.tolist()
    for a, b in zip(small.online_margins_, big.online_margins_):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9)


def test_romco_explicit_values_win_and_are_saved(tmp_path):
    X, y = task_streams()
    est = ROMCO(eta1=0.05, lam2=0.0).fit(X, y)
    assert est.resolved_params_["eta1"] == 0.05 and est.resolved_params_["lam2"] == 0.0
    assert est.resolved_params_["eta2"] != 0.05  # still "auto"
    est.model_.save(tmp_path / "r.npz")
    back = MultiTaskLinearModel.load(tmp_path / "r.npz")
    assert back.metadata["resolved_params"] == est.resolved_params_
    explicit = ROMCO(**est.resolved_params_).fit(X, y)
    np.testing.assert_array_equal(explicit.coef_, est.coef_)


def test_romco_bad_values_refused():
    X, y = task_streams()
    with pytest.raises(InvalidInputError, match="eta1"):
        ROMCO(eta1=0.0).fit(X, y)
    with pytest.raises(InvalidInputError, match="lam1"):
        ROMCO(lam1=-1.0).fit(X, y)


@pytest.mark.parametrize("cls", [PAGlobal, PAUnique])
def test_pa_baselines_auto_C(cls, tmp_path):
    X, y = task_streams(scale=2.0)
    est = cls().fit(X, y)
    q = sum(float(x.multiply(x).sum()) for x in X) / sum(x.shape[0] for x in X)
    assert est.resolved_params_ == {"C": pytest.approx(defaults.MTL_PA_C_FACTOR / q)}
    assert cls(C=1.0).fit(X, y).resolved_params_ == {"C": 1.0}
    est.model_.save(tmp_path / "p.npz")
    assert MultiTaskLinearModel.load(tmp_path / "p.npz").metadata["resolved_params"] == est.resolved_params_


# --------------------------------------------------------------------------- OHT
def transfer_problem(seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    Xt = scale * rng.normal(size=(300, 4))
    yt = np.where(Xt[:, 0] > 0, 1, -1)
    Zs = Xt[:, :2] + 0.1 * rng.normal(size=(300, 2))
    return Xt, yt, Zs


def test_oht_auto_sigma_follows_the_rule():
    Xt, yt, Zs = transfer_problem(scale=5.0)
    clf = OHTClassifier(combiner="target").partial_fit(Xt[200:], yt[200:])
    assert clf.resolved_params_ == {"sigma": pytest.approx(defaults.OHT_SIGMA_FACTOR * defaults.kernel_width(Xt[200:]))}
    assert clf.target_.sigma == clf.resolved_params_["sigma"]
    # the width of N(0, s^2 I) rows is about s * sqrt(d) = 10
    assert 8.0 < defaults.kernel_width(Xt) < 12.0
    # with a source, sigma is resolved on the pairs' target view and used by both hypotheses
    hedge = OHTClassifier(combiner="hedge", n_neighbors=10).fit_source(Zs[:100], yt[:100], Xt[100:200], Zs[100:200])
    want = defaults.OHT_SIGMA_FACTOR * defaults.kernel_width(Xt[100:200])
    assert hedge.resolved_params_["sigma"] == pytest.approx(want)
    assert hedge.source_.bandwidth == pytest.approx(want)
    hedge.partial_fit(Xt[200:], yt[200:])
    assert hedge.target_.sigma == pytest.approx(want)


def test_oht_explicit_sigma_wins_and_auto_matches_explicit():
    Xt, yt, _ = transfer_problem()
    clf = OHTClassifier(combiner="target", sigma=2.0).partial_fit(Xt, yt)
    assert clf.resolved_params_ == {"sigma": 2.0}
    auto = OHTClassifier(combiner="target").partial_fit(Xt, yt)
    same = OHTClassifier(combiner="target", sigma=auto.resolved_params_["sigma"]).partial_fit(Xt, yt)
    assert auto.mistakes_ == same.mistakes_
    with pytest.raises(InvalidInputError, match="sigma"):
        OHTClassifier(sigma=-1.0).partial_fit(Xt, yt)


# --------------------------------------------------------------------------- protocol JSON
def _shared(name):
    import os

    from sparsesim.data.catalog import load_registered
    from sparsesim.exceptions import DataNotFoundError

    if not os.environ.get("SPARSESIM_DATA"):
        pytest.skip("needs the shared data (SPARSESIM_DATA)")
    try:
        return load_registered(name)
    except DataNotFoundError as exc:
        pytest.skip(str(exc))


def test_protocols_record_the_resolved_values():
    from sparsesim.experiments import ExperimentConfig, oht, romco

    streams = _shared("mhc1")
    report = romco.run(ExperimentConfig(dataset="mhc1", algorithms=["romco-nucl", "pa-unique"], seeds=[0],
                                        options={"max_per_task": 150}))
    want = ROMCO().resolve_params(streams.head(150).X)
    assert report["resolved_params"]["romco-nucl"] == pytest.approx(want)
    assert all(r["resolved_params"] for r in report["results"])
    _shared("mfeat")
    config = ExperimentConfig(dataset="mfeat", algorithms=["pa2", "oht2-pa2"], seeds=[0],
                              options={"tasks": [0, 1], "n_permutations": 2},
                              params={"oht2-pa2": {"sigma": 3.0}})
    report = oht.run(config)
    _, tasks = oht.load_tasks(config, 0)
    by_alg = {r["algorithm"]: r for r in report["results"]}
    got = [t["resolved_params"]["sigma"] for t in by_alg["pa2"]["per_task"]]
    assert got == pytest.approx([defaults.resolve_sigma("auto", t.target_X) for t in tasks])
    assert [t["resolved_params"]["sigma"] for t in by_alg["oht2-pa2"]["per_task"]] == [3.0, 3.0]  # explicit wins
