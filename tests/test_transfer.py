"""Tests of the online heterogeneous transfer family (OHT1 / OHT2, kernel PA, kNN source, data, protocol)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sparsesim.exceptions import DataNotFoundError, InvalidInputError, UnknownNameError
from sparsesim.learners.kernel_pa import KernelPassiveAggressive, gaussian_kernel, kernel_pa_margins
from sparsesim.learners.linear_pa import PassiveAggressiveBinary, pa_step_size
from sparsesim.learners.transfer import (
    KNNSourceHypothesis,
    OHTClassifier,
    combine_stream,
    default_discount,
    discount_update,
    hedge_update,
    mistakes_of,
    normalized_weights,
    omega,
    oht1_score,
    oht2_score,
    run_stream,
)


# ------------------------------------------------------------------ pure update rules, by hand
def test_omega_projects_onto_unit_interval():
    assert omega(-3.0) == 0.0 and omega(5.0) == 1.0
    assert omega(0.0) == 0.5 and omega(1.0) == 1.0 and omega(-1.0) == 0.0
    np.testing.assert_allclose(omega([0.2, -0.6]), [0.6, 0.2])


def test_hedge_two_rounds_by_hand():
    eta = 0.5
    # round 1: h = 0.6, f = -0.2, y = +1 -> Omega = 0.8, 0.4, 1
    ts, tt = 0.5, 0.5
    s1 = oht1_score(ts, tt, 0.6, -0.2)
    assert s1 == pytest.approx(0.5 * 0.8 + 0.5 * 0.4 - 0.5)  # 0.1 -> predict +1
    ts, tt = hedge_update(ts, tt, 0.6, -0.2, 1.0, eta)
    a, b = 0.5 * math.exp(-0.5 * 0.2 ** 2), 0.5 * math.exp(-0.5 * 0.6 ** 2)
    assert ts == pytest.approx(a, abs=1e-15) and tt == pytest.approx(b, abs=1e-15)
    assert normalized_weights(ts, tt)[0] == pytest.approx(a / (a + b))
    assert normalized_weights(ts, tt)[0] > 0.5  # the better hypothesis gains weight
    # round 2: h = -0.4, f = 0.9, y = -1 -> Omega(y) = 0, losses 0.3^2 and 0.95^2
    ws, wt = a / (a + b), b / (a + b)
    s2 = oht1_score(ts, tt, -0.4, 0.9)
    assert s2 == pytest.approx(ws * 0.3 + wt * 0.95 - 0.5)
    ts2, tt2 = hedge_update(ts, tt, -0.4, 0.9, -1.0, eta)
    assert ts2 == pytest.approx(a * math.exp(-0.5 * 0.09), abs=1e-15)
    assert tt2 == pytest.approx(b * math.exp(-0.5 * 0.9025), abs=1e-15)
    # tiny weights are rescaled by a power of two: exact, and the normalised weights are unchanged
    tiny = hedge_update(1e-300, 3e-300, 0.5, -0.5, 1.0, eta)
    assert max(tiny) > 1e-10
    assert normalized_weights(*tiny)[0] == pytest.approx(
        normalized_weights(1e-300 * math.exp(-0.5 * 0.0625), 3e-300 * math.exp(-0.5 * 0.5625))[0], rel=1e-14)


def test_discount_two_rounds_by_hand():
    alpha = 0.5
    ts, tt = 0.5, 0.5
    assert oht2_score(ts, tt, 0.3, -0.1) == pytest.approx(0.0)  # a tie: a zero score is a mistake
    ts, tt = discount_update(ts, tt, 0.3, -0.1, 1.0, alpha)  # target wrong -> 0.5 * 0.5
    assert (ts, tt) == (0.5, 0.25)
    assert oht2_score(ts, tt, -0.2, 0.4) == pytest.approx(-2 / 3 + 1 / 3)  # source wins the vote
    ts, tt = discount_update(ts, tt, -0.2, 0.4, 1.0, alpha)  # source wrong
    assert (ts, tt) == (0.25, 0.25)
    assert oht2_score(ts, tt, 1.0, -1.0) == 0.0  # equal weights: an exact tie (a mistake)
    # a zero score of a hypothesis counts as a mistake (y * score <= 0)
    assert discount_update(0.5, 0.5, 0.0, 1.0, 1.0, alpha) == (0.25, 0.5)


def test_default_discount_is_papers_beta():
    assert default_discount(100) == pytest.approx(10 / (10 + math.sqrt(2 * math.log(4))))
    assert 0 < default_discount(1) < default_discount(10_000) < 1


def test_combine_stream_matches_stepwise_rules():
    rng = np.random.default_rng(3)
    h, f = rng.uniform(-1.5, 1.5, 30), rng.uniform(-2, 2, 30)
    y = rng.choice([-1.0, 1.0], 30)
    for comb, fn, upd, rate in (("hedge", oht1_score, hedge_update, 0.7), ("discount", oht2_score, discount_update, 0.8)):
        got = combine_stream(h, f, y, comb, eta=0.7, alpha=0.8, theta0=0.3)
        ts, tt = 0.3, 0.7
        for t in range(30):
            assert got[t] == pytest.approx(fn(ts, tt, h[t], f[t]), abs=1e-14)
            ts, tt = upd(ts, tt, h[t], f[t], y[t], rate)
    np.testing.assert_array_equal(combine_stream(h, f, y, "target"), f)
    np.testing.assert_array_equal(mistakes_of([0.0, 1.0, -2.0], [1, 1, 1]), [1, 0, 1])


# ------------------------------------------------------------------ PA variants, by hand
@pytest.mark.parametrize("variant,tau1,tau2", [
    # x1 = (1, 0), y1 = +1: f = 0, loss 1, ||x||^2 = 1.  x2 = (1, 1), y2 = -1: f = tau1, loss 1 + tau1, ||x||^2 = 2
    ("pa", 1.0, 2.0 / 2.0),
    ("pa1", 0.5, 0.5),                       # C = 0.5 caps both steps (1 and 1.5/2 = 0.75)
    ("pa2", 1.0 / 2.0, 1.5 / (2.0 + 1.0)),   # loss / (||x||^2 + 1/(2C)) with 1/(2C) = 1
])
def test_pa_variants_two_rounds_by_hand(variant, tau1, tau2):
    X = np.array([[1.0, 0.0], [1.0, 1.0]])
    y = np.array([1.0, -1.0])
    margins = kernel_pa_margins(X @ X.T, y, np.array([0, 1]), variant, C=0.5)
    np.testing.assert_allclose(margins, [0.0, tau1])
    clf = PassiveAggressiveBinary(variant=variant, C=0.5).fit(X, y)
    np.testing.assert_allclose(clf.coef_, tau1 * X[0] - tau2 * X[1], atol=1e-15)


def test_gaussian_kernel_pa_two_rounds_by_hand():
    X = np.array([[0.0, 0.0], [1.0, 0.0]])  # ||x1 - x2||^2 = 1, sigma = 1 -> k = exp(-1/2)
    y = np.array([1.0, -1.0])
    k12 = math.exp(-0.5)
    clf = KernelPassiveAggressive(variant="pa", C=5.0, sigma=1.0).fit(X, y)
    np.testing.assert_allclose(clf.dual_coef_, [1.0, -(1.0 + k12)])
    clf2 = KernelPassiveAggressive(variant="pa2", C=5.0, sigma=1.0).fit(X, y)
    t1 = 1.0 / (1.0 + 0.1)
    np.testing.assert_allclose(clf2.dual_coef_, [t1, -(1.0 + t1 * k12) / 1.1])
    assert clf2.n_mistakes_ == 2  # f = 0 on round 1 (no decision), f > 0 on round 2


# ------------------------------------------------------------------ dense references (1e-10)
def _dense_reference_oht(X, y, h, combiner, variant, C, kernel, sigma, eta, alpha, theta0):
    """Literal Algorithms 1-2 with a dense target learner (primal w for linear, kernel sums for Gaussian)."""
    n, d = X.shape
    w = np.zeros(d)
    sv, coef = [], []
    ts, tt = theta0, 1 - theta0
    out = []
    for t in range(n):
        x = X[t]
        if kernel == "linear":
            f = float(w @ x)
            sq = float(x @ x)
        else:
            f = sum(a * math.exp(-np.sum((s - x) ** 2) / (2 * sigma ** 2)) for s, a in zip(sv, coef))
            sq = 1.0
        wsn, wtn = ts / (ts + tt), tt / (ts + tt)
        if combiner == "hedge":
            om = lambda z: max(0.0, min(1.0, (z + 1) / 2))  # noqa: E731
            score = wsn * om(h[t]) + wtn * om(f) - 0.5
            ts *= math.exp(-eta * (om(h[t]) - om(y[t])) ** 2)
            tt *= math.exp(-eta * (om(f) - om(y[t])) ** 2)
        elif combiner == "discount":
            score = wsn * np.sign(h[t]) + wtn * np.sign(f)
            ts *= alpha if y[t] * h[t] <= 0 else 1.0
            tt *= alpha if y[t] * f <= 0 else 1.0
        else:
            score = f
        out.append(score)
        loss = max(0.0, 1 - y[t] * f)
        tau = {"pa": loss / sq, "pa1": min(C, loss / sq), "pa2": loss / (sq + 1 / (2 * C))}[variant]
        if kernel == "linear":
            w = w + tau * y[t] * x
        elif tau > 0:
            sv.append(x.copy())
            coef.append(tau * y[t])
    return np.array(out)


@pytest.mark.parametrize("kernel", ["linear", "gaussian"])
@pytest.mark.parametrize("combiner", ["target", "hedge", "discount"])
@pytest.mark.parametrize("variant", ["pa", "pa1", "pa2"])
def test_estimator_and_fast_path_match_dense_reference(kernel, combiner, variant):
    rng = np.random.default_rng(11)
    X = rng.normal(size=(60, 5))
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=60) > 0, 1.0, -1.0)
    h = np.clip(y * 0.4 + rng.normal(scale=0.6, size=60), -1, 1)
    est = OHTClassifier(combiner=combiner, variant=variant, kernel=kernel, C=0.7, sigma=1.5, eta=0.8, alpha=0.6)
    ref = _dense_reference_oht(X, y, h, combiner, variant, 0.7, kernel, 1.5, 0.8, 0.6, 0.5)
    est.partial_fit(X, y, source_scores=h)
    ref_mistakes = (np.sign(ref) != y).astype(int)
    np.testing.assert_array_equal(est.mistakes_, ref_mistakes)
    # fast path over the Gram matrix, in a shuffled order
    order = rng.permutation(60)
    ref_o = _dense_reference_oht(X[order], y[order], h[order], combiner, variant, 0.7, kernel, 1.5, 0.8, 0.6, 0.5)
    margins = kernel_pa_margins(est.gram(X), y, order, variant, 0.7)
    ref_f = _dense_reference_oht(X[order], y[order], h[order], "target", variant, 0.7, kernel, 1.5, 0.8, 0.6, 0.5)
    np.testing.assert_allclose(margins, ref_f, rtol=0, atol=1e-10)
    scores = combine_stream(h[order], margins, y[order], combiner, eta=0.8, alpha=0.6)
    np.testing.assert_allclose(scores, ref_o, rtol=0, atol=1e-10)
    np.testing.assert_array_equal(run_stream(est, est.gram(X), y, h, order, margins),
                                  (np.sign(ref_o) != y[order]).astype(int))


def test_kernel_pa_estimator_matches_fast_path_and_predicts():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(120, 3))
    y = np.where(X[:, 0] * X[:, 1] > 0, 1.0, -1.0)  # not linearly separable
    clf = KernelPassiveAggressive(variant="pa1", C=2.0, sigma=0.8).fit(X, y)
    margins = kernel_pa_margins(gaussian_kernel(X, X, 0.8), y, np.arange(120), "pa1", 2.0)
    assert clf.n_mistakes_ == int(np.sum(np.sign(margins) != y))
    assert clf.n_mistakes_ < 60
    lin = PassiveAggressiveBinary(variant="pa1", C=2.0).fit(X, y)
    assert clf.n_mistakes_ < lin.n_mistakes_  # the kernel helps on XOR-like data
    assert set(np.unique(clf.predict(X))) <= {-1, 1}


# ------------------------------------------------------------------ kNN source hypothesis
def test_knn_source_matches_brute_force():
    rng = np.random.default_rng(7)
    pair_t = rng.normal(size=(300, 6))
    pair_s = pair_t[:, :3] @ rng.normal(size=(3, 4)) + 0.3 * rng.normal(size=(300, 4))
    Xs = rng.normal(size=(80, 4))
    ys = np.where(Xs[:, 0] > 0, 1, -1)
    queries = rng.normal(size=(25, 6))
    src = KNNSourceHypothesis(n_neighbors=17, bandwidth=1.3).fit(Xs, ys, pair_t, pair_s)
    # brute force: all distances, K smallest, Gaussian weights, weighted mean of 2 P(+1|text) - 1
    scores = 2 * src.source_model_.predict_proba(pair_s)[:, list(src.source_model_.classes_).index(1)] - 1
    d2 = ((queries[:, None, :] - pair_t[None, :, :]) ** 2).sum(-1)
    nn = np.argsort(d2, axis=1)[:, :17]
    w = np.exp(-np.take_along_axis(d2, nn, 1) / (2 * 1.3 ** 2))
    expected = (w * scores[nn]).sum(1) / w.sum(1)
    got_d2, got_idx = src.kneighbors(queries)
    np.testing.assert_array_equal(np.sort(got_idx, 1), np.sort(nn, 1))
    np.testing.assert_allclose(got_d2, np.take_along_axis(d2, got_idx, 1), atol=1e-10)
    np.testing.assert_allclose(src.decision_function(queries), expected, rtol=0, atol=1e-10)
    assert np.all(np.abs(expected) <= 1)
    uni = KNNSourceHypothesis(n_neighbors=17, weighting="uniform").fit(Xs, ys, pair_t, pair_s)
    np.testing.assert_allclose(uni.decision_function(queries), scores[nn].mean(1), atol=1e-10)
    # K larger than the pool: capped, h is the weighted mean over all pairs
    big = KNNSourceHypothesis(n_neighbors=10_000, weighting="uniform").fit(Xs, ys, pair_t, pair_s)
    np.testing.assert_allclose(big.decision_function(queries), np.full(25, scores.mean()), atol=1e-10)


def test_source_transfers_label_information():
    """With informative pairs, h alone beats chance on the target view by a wide margin."""
    rng = np.random.default_rng(1)
    n = 600
    y = rng.choice([-1, 1], n)
    target = y[:, None] * 0.8 + rng.normal(size=(n, 5))
    text = y[:, None] * 1.5 + rng.normal(size=(n, 3))
    src = KNNSourceHypothesis(n_neighbors=25, bandwidth=2.0).fit(text[:100], y[:100], target[100:400], text[100:400])
    acc = np.mean(np.sign(src.decision_function(target[400:])) == y[400:])
    assert acc > 0.8


def test_oht_uses_fitted_source_and_is_deterministic():
    rng = np.random.default_rng(2)
    n = 400
    y = rng.choice([-1, 1], n)
    target = y[:, None] * 0.5 + rng.normal(size=(n, 5))
    text = y[:, None] * 1.5 + rng.normal(size=(n, 3))
    runs = []
    for _ in range(2):
        clf = OHTClassifier(combiner="hedge", sigma=3.0, n_neighbors=20)
        clf.fit_source(text[:100], y[:100], target[100:250], text[100:250]).partial_fit(target[250:], y[250:])
        runs.append(list(clf.mistakes_))
    assert runs[0] == runs[1]
    base = OHTClassifier(combiner="target", sigma=3.0).fit(target[250:], y[250:])
    assert clf.n_mistakes_ < base.n_mistakes_
    assert clf.get_params()["combiner"] == "hedge"
    assert clf.predict(target[:10]).shape == (10,)


# ------------------------------------------------------------------ bad input
def test_bad_input_raises_clear_errors():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 3))
    y = np.where(X[:, 0] > 0, 1, -1)
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(InvalidInputError, match="NaN"):
        OHTClassifier(combiner="target").fit(bad, y)
    with pytest.raises(InvalidInputError, match="combiner"):
        OHTClassifier(combiner="vote").fit(X, y)
    with pytest.raises(InvalidInputError, match="alpha"):
        OHTClassifier(combiner="discount", alpha=1.5).fit(X, y, source_scores=np.zeros(20))
    with pytest.raises(InvalidInputError, match="fit_source"):
        OHTClassifier(combiner="hedge").fit(X, y)
    clf = OHTClassifier(combiner="target").fit(X, y)
    with pytest.raises(InvalidInputError, match="mismatch"):
        clf.partial_fit(X[:, :2], y)
    with pytest.raises(InvalidInputError, match="single class"):
        KNNSourceHypothesis().fit(X, np.ones(20), X, X)
    with pytest.raises(InvalidInputError, match="same non-empty pairs"):
        KNNSourceHypothesis().fit(X, y, X, X[:5])
    with pytest.raises(InvalidInputError):
        pa_step_size(1.0, 1.0, "pa3")
    with pytest.raises(InvalidInputError, match="sigma"):
        gaussian_kernel(X, X, 0.0)


def test_registry_names_and_defaults():
    from sparsesim.registry import algorithms_of_kind, make_estimator

    names = set(algorithms_of_kind("transfer"))
    assert {"pa", "pa1", "pa2", "oht1-pa", "oht1-pa1", "oht1-pa2", "oht2-pa", "oht2-pa1", "oht2-pa2"} <= names
    est = make_estimator("oht2-pa1", kernel="linear")
    assert (est.combiner, est.variant, est.kernel, est.C, est.sigma) == ("discount", "pa1", "linear", 5.0, "auto")
    assert make_estimator("pa2").combiner == "target"
    with pytest.raises(UnknownNameError):
        make_estimator("oht3-pa")


# ------------------------------------------------------------------ data and protocol (real files)
def _load(name):
    from sparsesim.data.catalog import load_registered

    try:
        return load_registered(name)
    except DataNotFoundError as exc:
        pytest.skip(f"data file absent: {exc}")


def test_wikipedia_views_and_tasks():
    from sparsesim.data.multiview import make_transfer_tasks

    data = _load("wikipedia-xmodal")
    assert data.view("image").shape == (2866, 128) and data.view("text").shape == (2866, 10)
    np.testing.assert_allclose(data.view("text").sum(1), 1.0, atol=1e-6)  # LDA topic proportions
    tasks = make_transfer_tasks(data, random_state=3)
    assert len(tasks) == 45 and tasks[0].name == "art-vs-biology"
    for task in tasks[::11]:
        a, b = task.classes
        r = task.rows
        assert not (set(r["target"]) & set(r["source"]) or set(r["target"]) & set(r["pairs"])
                    or set(r["source"]) & set(r["pairs"]))
        assert set(np.unique(data.y[r["pairs"]])) == {a, b}
        n_ab = int(np.sum((data.y == a) | (data.y == b)))
        assert abs(task.sizes()["target"] - 0.4 * n_ab) <= 2 and abs(task.sizes()["source"] - 0.2 * n_ab) <= 2
        np.testing.assert_array_equal(task.target_y, np.where(data.y[r["target"]] == a, 1.0, -1.0))
        assert task.source_X.shape[1] == 10 and task.pair_target.shape[1] == 128
    every = make_transfer_tasks(data, pair_classes="all", tasks=[0], random_state=3)[0]
    assert every.sizes()["pairs"] == 2866 - every.sizes()["target"] - every.sizes()["source"]
    np.testing.assert_array_equal(every.rows["target"], tasks[0].rows["target"])  # same split
    with pytest.raises(InvalidInputError):
        make_transfer_tasks(data, target_frac=0.7, source_frac=0.4)


def test_mfeat_roles():
    from sparsesim.data.multiview import make_transfer_tasks

    data = _load("mfeat")
    assert (data.target_view, data.source_view) == ("fou", "pix")
    task = make_transfer_tasks(data, tasks=[44])[0]
    assert task.name == "digit 8-vs-digit 9" and task.sizes() == {"target": 160, "source": 80, "pairs": 160}
    with pytest.raises(InvalidInputError, match="differ"):
        from sparsesim.data.catalog import load_registered
        load_registered("mfeat", target_view="pix", source_view="pix")


def test_protocol_small_run(tmp_path):
    from sparsesim.experiments import ExperimentConfig
    from sparsesim.experiments import oht

    _load("wikipedia-xmodal")
    cfg = ExperimentConfig(dataset="wikipedia-xmodal", algorithms=["pa2", "oht1-pa2", "oht2-pa2"],
                           options={"n_permutations": 4, "tasks": [0, 13], "k_values": [5, 50],
                                    "k_permutations": 2, "curve_tasks": [14]},
                           out_dir=tmp_path)
    rep = oht.run(cfg)
    assert rep["protocol"] == "oht" and rep["baseline"] == "pa2"
    assert set(rep["win_tie_loss"]) == {"oht1-pa2", "oht2-pa2"}
    for counts in rep["win_tie_loss"].values():
        assert sum(counts.values()) == 2
    by_alg = {r["algorithm"]: r for r in rep["results"]}
    for r in rep["results"]:
        assert {"algorithm", "seed", "mistake_rate", "train_seconds", "per_task"} <= set(r)
        assert 0 <= r["mistake_rate"] <= 1 and len(r["per_task"]) == 2
    assert [t["number"] for t in by_alg["pa2"]["per_task"]] == [1, 14]
    assert set(rep["k_sensitivity"]["oht1-pa2"]) == {"5", "50"}
    assert all((tmp_path / p).is_file() for p in rep["plots"]) and len(rep["plots"]) == 3
    again = oht.run(ExperimentConfig(dataset="wikipedia-xmodal", algorithms=["pa2", "oht1-pa2", "oht2-pa2"],
                                     options={"n_permutations": 4, "tasks": [0, 13]}, n_jobs=2))
    assert [r["mistake_rate"] for r in again["results"]] == [r["mistake_rate"] for r in rep["results"]]
    assert "win/tie/loss" in oht.format_table(rep)
    with pytest.raises(InvalidInputError, match="unknown option"):
        oht.run(ExperimentConfig(dataset="wikipedia-xmodal", algorithms=["pa2"], options={"perms": 3}))


def test_compare_outcomes():
    from sparsesim.experiments.oht import compare

    rng = np.random.default_rng(0)
    base = 0.4 + 0.01 * rng.normal(size=50)
    assert compare(base, base - 0.05 + 0.001 * rng.normal(size=50))[0] == "win"
    assert compare(base, base + 0.05 + 0.001 * rng.normal(size=50))[0] == "loss"
    outcome, p, d = compare(base, base + 0.0001 * rng.normal(size=50))
    assert outcome == "tie" and p > 0.01 and abs(d) < 0.2
    assert compare(base, base)[0] == "tie"
    assert compare(base, base - 0.1)[2] > 0.8


def test_oht2_with_equal_priors_does_not_depend_on_alpha():
    """Two hypotheses, theta_1^s = theta_1: the larger weight is the one with fewer mistakes so far,
    whatever alpha is (documented in docs/transfer.md); with unequal priors alpha matters."""
    rng = np.random.default_rng(4)
    h, f = rng.uniform(-1, 1, 200), rng.uniform(-1, 1, 200)
    y = np.where(rng.uniform(size=200) < 0.6, np.sign(h), -np.sign(h))
    a = combine_stream(h, f, y, "discount", alpha=0.3)
    b = combine_stream(h, f, y, "discount", alpha=0.95)
    np.testing.assert_array_equal(np.sign(a), np.sign(b))
    c = combine_stream(h, f, y, "discount", alpha=0.3, theta0=0.7)
    d = combine_stream(h, f, y, "discount", alpha=0.95, theta0=0.7)
    assert np.any(np.sign(c) != np.sign(d))


def test_kernel_pa_refuses_to_densify_a_large_sparse_corpus():
    import scipy.sparse as sp

    from sparsesim.exceptions import InvalidInputError
    from sparsesim.learners.kernel_pa import check_dense

    # built directly: sp.random would shuffle all 6.2e8 positions to place its entries (2 minutes)
    rng = np.random.default_rng(0)
    big = sp.csr_matrix((rng.random(62_000), (rng.integers(0, 10_000, 62_000), rng.integers(0, 62_061, 62_000))),
                        shape=(10_000, 62_061))
    with pytest.raises(InvalidInputError, match="PassiveAggressiveBinary"):
        check_dense(big)
    small = sp.random(20, 8, density=0.5, format="csr", random_state=0)
    np.testing.assert_array_equal(check_dense(small), small.toarray())


def test_protocol_grid_reports_every_point_and_the_best():
    from sparsesim.experiments import ExperimentConfig
    from sparsesim.experiments import oht

    _load("wikipedia-xmodal")
    options = {"n_permutations": 3, "tasks": [0], "curve_tasks": []}
    cfg = ExperimentConfig(dataset="wikipedia-xmodal", algorithms=["pa2", "oht1-pa2"], seeds=[1],
                           options=dict(options, grid={"C": [1.0, 5.0], "oht1-pa2.eta": [0.05, 0.5]}))
    rep = oht.run(cfg)
    assert [row["point"] for row in rep["grid"]] == [{"C": c, "oht1-pa2.eta": e} for c in (1.0, 5.0) for e in (0.05, 0.5)]
    one = oht.run(ExperimentConfig(dataset="wikipedia-xmodal", algorithms=["pa2", "oht1-pa2"], seeds=[1],
                                   params={"*": {"C": 5.0}, "oht1-pa2": {"eta": 0.05}}, options=options))
    same = {r["algorithm"]: r["mistake_rate"] for r in one["results"]}
    assert rep["grid"][2]["mistake_rate"] == same
    # pa2 has no eta: its rate does not move with it
    assert rep["grid"][0]["mistake_rate"]["pa2"] == rep["grid"][1]["mistake_rate"]["pa2"]
    for name in ("pa2", "oht1-pa2"):
        assert rep["grid"][[row["point"] for row in rep["grid"]].index(rep["best"][name])]["mistake_rate"][name] == \
            min(row["mistake_rate"][name] for row in rep["grid"])
    assert len(rep["results"]) == 8 and "best point per algorithm" in oht.format_table(rep)
    with pytest.raises(InvalidInputError, match="not one of the algorithms"):
        oht.run(ExperimentConfig(dataset="wikipedia-xmodal", algorithms=["pa2"],
                                 options=dict(options, grid={"oht2-pa2.alpha": [0.5]})))


def test_protocol_factors_scale_each_tasks_auto_sigma():
    from sparsesim.data.multiview import make_transfer_tasks
    from sparsesim.defaults import AUTO, resolve_sigma
    from sparsesim.experiments import ExperimentConfig
    from sparsesim.experiments import oht

    data = _load("mfeat")
    options = {"n_permutations": 3, "tasks": [0, 7], "curve_tasks": []}
    cfg = ExperimentConfig(dataset="mfeat", algorithms=["pa2", "oht1-pa2"], params={"oht1-pa2": {"sigma": 4.0}},
                           options=dict(options, factors={"sigma": [0.7, 1]}))
    rep = oht.run(cfg)
    assert rep["factors"] == {"sigma": [0.7, 1.0]} and [row["point"] for row in rep["grid"]] == [
        {"sigma": 0.7}, {"sigma": 1.0}]
    tasks = make_transfer_tasks(data, tasks=[0, 7], random_state=0)
    widths = [resolve_sigma(AUTO, t.target_X) for t in tasks]
    for row in rep["grid"]:
        m = row["point"]["sigma"]
        # each task's own "auto" width times the multiple; the explicit sigma of oht1-pa2 wins
        assert row["resolved_params"]["pa2"]["sigma"] == pytest.approx(np.mean([w * m for w in widths]), rel=1e-12)
        assert row["resolved_params"]["oht1-pa2"]["sigma"] == 4.0
    # multiple 1 is the default itself; 0.7 the same as giving the task's value (one task: one sigma)
    plain = oht.run(ExperimentConfig(dataset="mfeat", algorithms=["pa2", "oht1-pa2"],
                                     params={"oht1-pa2": {"sigma": 4.0}}, options=options))
    assert rep["grid"][1]["mistake_rate"] == {r["algorithm"]: r["mistake_rate"] for r in plain["results"]}
    one = oht.run(ExperimentConfig(dataset="mfeat", algorithms=["pa2"],
                                   options=dict(options, tasks=[7], factors={"sigma": [0.7]})))
    given = oht.run(ExperimentConfig(dataset="mfeat", algorithms=["pa2"], params={"pa2": {"sigma": widths[1] * 0.7}},
                                     options=dict(options, tasks=[7])))
    assert one["grid"][0]["mistake_rate"]["pa2"] == given["results"][0]["mistake_rate"]
    assert "sigma x0.7" in oht.format_table(rep)


@pytest.mark.parametrize("factors, extra, message", [
    ({"sigma": []}, {}, "'factors' must map"),
    ({"sigma": [-1]}, {}, "positive finite"),
    ({"C": [1]}, {}, "'auto' value of C"),
    ({"sigma": [1]}, {"grid": {"C": [1.0]}}, "exclude each other"),
])
def test_protocol_refuses_a_bad_factors_grid_before_loading_data(factors, extra, message):
    from sparsesim.experiments import ExperimentConfig
    from sparsesim.experiments import oht

    with pytest.raises(InvalidInputError, match=message):
        oht.run(ExperimentConfig(dataset="no-such-data", algorithms=["pa2"],
                                 options={"factors": factors, **extra}))


@pytest.mark.parametrize("sigma", [{"a": 1}, [1, 2], "", "abc", -1.0, float("nan")])
@pytest.mark.parametrize("method", ["fit", "partial_fit"])
def test_oht_refuses_a_bad_sigma_before_resolving_it(method, sigma):
    """The first partial_fit checks the parameters before sigma is resolved from the data (a dict or
    a list once reached float() there and raised TypeError)."""
    from sparsesim.exceptions import SparsesimError

    X = np.random.default_rng(0).normal(size=(20, 6))
    y = np.where(X[:, 0] > 0, 1, -1)
    with pytest.raises(SparsesimError, match="sigma"):
        getattr(OHTClassifier(sigma=sigma), method)(X, y, source_scores=np.zeros(20))
