"""PAAS / PARS: dense PA reference, query accounting, budget, oracle, registry."""

import json

import numpy as np
import pytest
import scipy.sparse as sp

from reference_second_order import dense_selective
from sparsesim.engine.primitives import query_probability
from sparsesim.engine.second_order import SparseSecondOrderEngine
from sparsesim.exceptions import DataNotFoundError, InvalidInputError
from sparsesim.learners.active import PAAS, PARS, _rng_for
from sparsesim.models import BilinearSimilarity
from sparsesim.registry import ALGORITHMS, make_estimator
from sparsesim.triplets import sors_triplets

TOL = dict(rtol=1e-10, atol=1e-10)


def _data(n=40, d=8, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * (rng.random((n, d)) < 0.6)
    y = np.arange(n) % 4
    return sp.csr_matrix(X), y


def test_query_probability_is_eq3():
    assert query_probability(2.0, 0.0) == 1.0
    assert query_probability(2.0, -2.0) == 0.5
    assert query_probability(1.0, 3.0) == pytest.approx(0.25)


@pytest.mark.parametrize("policy,kw", [("all", {}), ("active", {"delta": 0.5}), ("random", {"rate": 0.35})])
@pytest.mark.parametrize("identity", [False, True])
def test_pa_engine_matches_dense_reference(policy, kw, identity):
    X, y = _data()
    T = sors_triplets(y, 300, seed=2)
    rng = np.random.default_rng(3)
    signs = np.where(rng.random(300) < 0.3, -1.0, 1.0)
    u = rng.random(300)
    eng = SparseSecondOrderEngine(X.shape[1], rule="pa", policy=policy, C=0.7, identity=identity,
                                  initial_capacity=16, **kw)
    margins, queried, losses, _ = eng.partial_fit(X, T, signs, u)
    M_ref, _, q_ref, m_ref = dense_selective(X.toarray(), T, "pa", policy, u, signs, C=0.7, identity=identity, **kw)
    off, diag = eng.export()
    np.testing.assert_allclose(off.toarray() + np.diag(diag), M_ref, **TOL)
    np.testing.assert_allclose(margins, m_ref, **TOL)
    assert np.array_equal(queried.astype(bool), q_ref)
    assert np.all(losses[~q_ref] == 0)


@pytest.mark.parametrize("cls,kw,policy", [(PAAS, {"delta": 0.4}, "active"), (PARS, {"query_rate": 0.25}, "random")])
def test_learners_match_reference_and_count_queries(cls, kw, policy):
    X, y = _data(seed=5)
    T = sors_triplets(y, 400, seed=6)
    est = cls(C=0.5, random_state=9, **kw).partial_fit_triplets(X, T)
    u = _rng_for(9).random(400)
    M_ref, _, q_ref, _ = dense_selective(X.toarray(), T, "pa", policy, u, C=0.5,
                                         delta=kw.get("delta", 1.0), rate=kw.get("query_rate", 1.0))
    np.testing.assert_allclose(est.model_.W.toarray(), M_ref, **TOL)
    assert est.n_queries_ == q_ref.sum() == est.last_queried_.sum()
    assert est.n_triplets_seen_ == 400
    assert est.query_ratio_ == pytest.approx(q_ref.mean())
    assert 0 < est.n_updates_ <= est.n_queries_ < 400
    assert est.model_.metadata["query_ratio"] == pytest.approx(est.query_ratio_)


def test_delta_controls_the_query_ratio():
    X, y = _data(seed=7)
    ratios = [PAAS(delta=d, n_triplets=2000, random_state=0).fit(X, y).query_ratio_ for d in (2.0 ** -8, 1.0, 2.0 ** 8)]
    assert ratios[0] < ratios[1] < ratios[2]
    assert ratios[2] > 0.95


def test_random_rate_is_respected():
    X, y = _data(seed=8)
    est = PARS(query_rate=0.3, n_triplets=4000, random_state=1).fit(X, y)
    assert abs(est.query_ratio_ - 0.3) < 0.03  # binomial sd ~0.007
    assert PARS(query_rate=0.0, n_triplets=500, random_state=1).fit(X, y).n_queries_ == 0


def test_query_budget_caps_labels_across_calls():
    X, y = _data(seed=9)
    T = sors_triplets(y, 600, seed=1)
    est = PARS(query_rate=0.5, query_budget=25, random_state=0)
    est.partial_fit_triplets(X, T[:30])
    first = est.n_queries_
    assert first < 25
    est.partial_fit_triplets(X, T[30:])
    assert est.n_queries_ == 25
    assert est.n_triplets_seen_ == 600
    # once spent, no more labels: the model no longer changes
    W = est.model_.W.toarray()
    est.partial_fit_triplets(X, T[:100])
    assert est.n_queries_ == 25
    np.testing.assert_array_equal(est.model_.W.toarray(), W)


def test_oracle_is_asked_exactly_for_queried_triplets():
    X, y = _data(seed=10)
    T = sors_triplets(y, 500, seed=3)
    asked = []

    def oracle(triplet):
        asked.append(tuple(triplet))
        a, p, n = triplet
        return 1 if y[a] == y[p] else -1

    with_oracle = PAAS(delta=0.3, random_state=2, oracle=oracle, initial_capacity=16).partial_fit_triplets(X, T)
    plain = PAAS(delta=0.3, random_state=2).partial_fit_triplets(X, T)
    assert len(asked) == with_oracle.n_queries_ == plain.n_queries_
    assert asked == [tuple(t) for t in T[with_oracle.last_queried_]]
    assert np.all(with_oracle.last_labels_[with_oracle.last_queried_] == 1)
    np.testing.assert_allclose(with_oracle.model_.W.toarray(), plain.model_.W.toarray(), **TOL)


def test_oracle_with_table_growth_mid_stream():
    """Regression: a label answered for one triplet must not be reused when the table grows later
    in the same kernel call (many features, tiny initial table, growth after labelled triplets)."""
    X = sp.random(60, 3000, density=0.01, random_state=1, format="csr")
    y = np.arange(60) % 3
    T = sors_triplets(y, 400, seed=2)
    calls = []

    def oracle(t):
        calls.append(tuple(t))
        return 1

    est = PAAS(delta=0.5, random_state=0, oracle=oracle, initial_capacity=16).partial_fit_triplets(X, T)
    assert len(calls) == est.n_queries_
    assert np.all(est.last_labels_[est.last_queried_] == 1)
    plain = PAAS(delta=0.5, random_state=0, initial_capacity=16).partial_fit_triplets(X, T)
    np.testing.assert_allclose(est.model_.W.toarray(), plain.model_.W.toarray(), **TOL)
    from sparsesim.learners.second_order import CWAS

    calls.clear()
    cw = CWAS(covariance="diag", delta=0.5, random_state=0, oracle=oracle, initial_capacity=16).partial_fit_triplets(X, T)
    assert len(calls) == cw.n_queries_


@pytest.mark.parametrize("covariance", ["diag", "full"])
def test_interrupted_oracle_leaves_exact_accounting(covariance):
    """A person who stops answering (KeyboardInterrupt) after 5 labels: the model and counters hold
    exactly the triplets before the interrupted one."""
    from sparsesim.learners.second_order import CWAS

    X, y = _data(seed=16)
    T = sors_triplets(y, 300, seed=5)
    answers = []

    def person(t):
        if len(answers) == 5:
            raise KeyboardInterrupt
        answers.append(1)
        return 1

    est = CWAS(covariance=covariance, delta=0.5, random_state=3, oracle=person)
    with pytest.raises(KeyboardInterrupt):
        est.partial_fit_triplets(X, T)
    done = est.engine_.interrupted_at
    assert est.n_queries_ == 5 and est.n_triplets_seen_ == done < 300
    ref = CWAS(covariance=covariance, delta=0.5, random_state=3).partial_fit_triplets(X, T[:done])
    assert ref.n_queries_ == 5
    np.testing.assert_allclose(est.model_.W.toarray(), ref.model_.W.toarray(), **TOL)


def test_oracle_answers_drive_the_model():
    """An adversarial oracle (always -1) gives a different model than the data's labels."""
    X, y = _data(seed=12)
    T = sors_triplets(y, 200, seed=4)
    liar = PAAS(delta=1.0, random_state=0, oracle=lambda t: -1).partial_fit_triplets(X, T)
    honest = PAAS(delta=1.0, random_state=0).partial_fit_triplets(X, T)
    assert np.all(liar.last_labels_[liar.last_queried_] == -1)
    assert not np.allclose(liar.model_.W.toarray(), honest.model_.W.toarray())


@pytest.mark.parametrize("answer", [0, 2, "yes", None])
def test_bad_oracle_answer_is_refused(answer):
    X, y = _data()
    with pytest.raises(InvalidInputError, match="oracle"):
        PAAS(oracle=lambda t: answer).partial_fit_triplets(X, np.array([[0, 4, 1]]))


def test_same_seed_same_model_and_refit_resets():
    X, y = _data(seed=13)
    a = PAAS(delta=0.2, n_triplets=800, random_state=5).fit(X, y)
    b = PAAS(delta=0.2, n_triplets=800, random_state=5).fit(X, y)
    np.testing.assert_array_equal(a.model_.W.toarray(), b.model_.W.toarray())
    n = a.n_queries_
    a.fit(X, y)
    assert a.n_queries_ == n and a.n_triplets_seen_ == 800
    # the refit restarts the query draws too (state set up again by _init_state)
    np.testing.assert_array_equal(a.model_.W.toarray(), b.model_.W.toarray())
    c = PAAS(delta=0.2, n_triplets=800, random_state=6).fit(X, y)
    assert c.n_queries_ != n or not np.array_equal(a.model_.W.toarray(), c.model_.W.toarray())


@pytest.mark.parametrize("name", ["oasis", "sors-l1", "paas", "pars", "cwas", "cwrs-d", "aroma-d"])
def test_state_is_set_up_in_one_place_and_cleared_by_fit(name):
    X, y = _data(seed=3)
    est = make_estimator(name, n_triplets=50, random_state=0)
    triplets = sors_triplets(y, 30, seed=1)
    est.partial_fit_triplets(X, triplets)
    for attr in est._state_attrs:
        assert hasattr(est, attr), attr
    assert est.n_triplets_seen_ == 30 and est.n_features_in_ == X.shape[1]
    if hasattr(est, "n_queries_"):
        assert est.n_queries_ == est.engine_.n_queries
    est.partial_fit_triplets(X, triplets)                    # a second call keeps the engine and counts on
    assert est.n_triplets_seen_ == 60
    engine = est.engine_
    est.fit(X, y)                                   # fit starts over: new engine, counters from 0
    assert est.engine_ is not engine and est.n_triplets_seen_ == 50


def test_bad_parameters():
    X, y = _data()
    T = np.array([[0, 4, 1]])
    for est in (PAAS(C=0), PAAS(delta=-1), PARS(query_rate=-0.1), PARS(query_rate="a"), PAAS(query_budget=1.5), PAAS(query_budget=2**70), PAAS(query_budget=True),
                PAAS(oracle="human")):
        with pytest.raises(InvalidInputError):
            est.partial_fit_triplets(X, T)
    with pytest.raises(InvalidInputError):
        PAAS().partial_fit_triplets(X, np.array([[0, 4, 99]]))


def test_registry_names_build_similarity_learners():
    names = ["paas", "pars", "cws", "cwas", "cwrs", "cws-d", "cwas-d", "cwrs-d", "aroma", "aroma-d"]
    X, y = _data(seed=14)
    T = sors_triplets(y, 50, seed=0)
    for name in names:
        assert ALGORITHMS[name].kind == "similarity"
        est = make_estimator(name, random_state=0).partial_fit_triplets(X, T)
        assert est.model_.metadata["algorithm"] == name
        assert 0 < est.n_queries_ <= 50
    assert make_estimator("cwas-d").covariance == "diag"
    assert make_estimator("cwas").covariance == "full"


def test_model_save_load_with_oracle_param(tmp_path):
    X, y = _data(seed=15)
    est = PAAS(delta=0.5, n_triplets=300, random_state=0, oracle=lambda t: 1).fit(X, y)
    path = tmp_path / "m.npz"
    est.model_.save(path)
    loaded = BilinearSimilarity.load(path)
    assert loaded.metadata["algorithm"] == "paas"
    np.testing.assert_allclose(loaded.W.toarray(), est.model_.W.toarray())


def test_paas_on_news20_sample_queries_fewer_labels_and_learns():
    from sparsesim.data import load_dataset
    from sparsesim.evaluation import evaluate_retrieval
    from sparsesim.triplets import stratified_split

    try:
        data = load_dataset("news20-sample")
    except DataNotFoundError as exc:  # pragma: no cover - embedded
        pytest.skip(str(exc))
    tr, te = stratified_split(data.y, 0.7, seed=0)
    est = PAAS(delta=0.1, n_triplets=300, random_state=0, identity=True).fit(data.X[tr], data.y[tr])
    assert est.query_ratio_ < 0.9
    learned = evaluate_retrieval(est.model_.scorer(data.X[te]), data.y[te], k=10)["ap@10"]
    before = evaluate_retrieval(BilinearSimilarity(sp.csr_matrix((data.n_features,) * 2)).scorer(data.X[te]),
                                data.y[te], k=10)["ap@10"]
    assert learned > before


# --------------------------------------------------------------------------- the cikm15 protocol


def test_stratified_subsample_sizes_floor_and_disjointness():
    from sparsesim.triplets import stratified_subsample

    y = np.array([0] * 800 + [1] * 150 + [2] * 40 + [3] * 9)
    rows = stratified_subsample(y, 100, seed=0)
    assert rows.size == 100 and np.unique(rows).size == 100
    counts = np.bincount(y[rows], minlength=4)
    assert counts.min() >= 5  # every class keeps min_per_class documents
    assert counts[0] > counts[1] > counts[2]  # otherwise proportional
    other = stratified_subsample(y, 100, seed=1, exclude=rows)
    assert np.intersect1d(rows, other).size == 0
    assert np.bincount(y[other], minlength=4)[3] == 4  # only what is left of the small class
    np.testing.assert_array_equal(rows, stratified_subsample(y, 100, seed=0))


def test_refine_delta_interpolates_between_bracketing_deltas():
    from sparsesim.experiments.cikm15 import refine_delta

    res = [{"delta": 0.25, "query_ratio": 0.10}, {"delta": 1.0, "query_ratio": 0.30}]
    dl = refine_delta(res, 0.2)
    assert 0.25 < dl < 1.0 and dl == pytest.approx(0.5)
    assert refine_delta(res, 0.29) is None  # already within 2 points
    assert refine_delta(res, 0.5) is None  # nothing brackets it


def test_cikm15_protocol_small_run(tmp_path):
    from sparsesim.experiments import ExperimentConfig, run_experiment
    from sparsesim.experiments.cikm15_report import format_table

    config = ExperimentConfig(
        dataset="segment", algorithms=["pars", "cwrs", "cws", "oasis"], seeds=[0], triplets=400,
        params={"*": {"C": 0.1, "eta": 0.1, "gamma": 1.0}}, out_dir=tmp_path / "out",
        options={"n_instances": 100, "folds": 2, "deltas": [2.0 ** -4, 1.0, 16.0], "search": "none"},
    )
    try:
        report = run_experiment("cikm15", config)
    except DataNotFoundError as exc:
        pytest.skip(f"segment not available: {exc}")
    res = report["results"]
    algos = {r["algorithm"] for r in res}
    assert algos == {"paas", "pars", "cwas", "cwrs", "cws", "oasis"}  # active partners added
    for r in res:
        assert {"algorithm", "seed", "fold", "ap@10", "map@10", "query_ratio", "train_seconds",
                "updates_per_second"} <= set(r)
    # each random run was matched to its active partner's observed ratio on the same fold and delta
    for r in res:
        if r["role"] == "random":
            partner = [a for a in res if a["role"] == "active" and a["fold"] == r["fold"] and a["delta"] == r["delta"]
                       and a["algorithm"] == {"pars": "paas", "cwrs": "cwas"}[r["algorithm"]]]
            assert len(partner) == 1
            assert abs(r["query_ratio"] - partner[0]["query_ratio"]) < 0.1
    assert all(r["query_ratio"] == 1.0 for r in res if r["role"] == "passive")
    ratios = sorted({round(r["query_ratio"], 3) for r in res if r["algorithm"] == "paas"})
    assert ratios[0] < 0.5 < ratios[-1]
    assert set(report["table"]) == algos
    assert (tmp_path / "out" / "cikm15_segment.png").stat().st_size > 1000  # the folder is created
    written = json.loads((tmp_path / "out" / "cikm15_segment.json").read_text())
    assert written["table"]["cws"]["ap@10"] == list(report["table"]["cws"]["ap@10"])
    text = format_table(report)
    assert "cwas" in text and "0.787" in text  # the paper's segment number is printed beside ours


def test_cikm15_refuses_unknown_algorithm_and_full_cw_on_high_d(tmp_path):
    from sklearn.datasets import dump_svmlight_file

    from sparsesim.experiments import ExperimentConfig, run_experiment

    with pytest.raises(InvalidInputError, match="cikm15"):
        run_experiment("cikm15", ExperimentConfig(dataset="segment", algorithms=["sors-l1"]))
    rng = np.random.default_rng(0)
    path = tmp_path / "wide.svm"
    dump_svmlight_file(rng.random((60, 70)), np.arange(60) % 3, str(path), zero_based=False)
    base = dict(dataset=str(path), triplets=50, params={"*": {"eta": 1.0, "gamma": 1.0}},
                options={"n_instances": 60, "folds": 2, "search": "none"})
    with pytest.raises(InvalidInputError, match="cws-d"):
        run_experiment("cikm15", ExperimentConfig(algorithms=["cws"], **base))
    report = run_experiment("cikm15", ExperimentConfig(algorithms=["cws-d"], **base))
    assert len(report["results"]) == 2 and report["settings"]["n_features"] == 70


def test_cikm15_factors_run_passive_learners_at_multiples_of_their_auto_values():
    from sparsesim.experiments import ExperimentConfig, run_experiment
    from sparsesim.experiments.cikm15 import load_cikm15_data, run_one
    from sparsesim.experiments.cikm15_report import format_table
    from sparsesim.triplets import stratified_subsample
    from sparsesim.triplets import stratified_kfold
    from sparsesim.tuning import resolved_auto

    config = ExperimentConfig(dataset="segment", algorithms=["oasis", "aroma"], seeds=[0], triplets=300,
                              options={"n_instances": 100, "folds": 2, "factors": {"C": [0.3, 1.0], "r": [10.0]}})
    try:
        report = run_experiment("cikm15", config)
    except DataNotFoundError as exc:
        pytest.skip(f"segment not available: {exc}")
    assert list(report["table"]) == ["oasis Cx0.3", "oasis Cx1", "aroma rx10"]
    assert all(e["n_runs"] == 2 for e in report["table"].values()) and report["search"] == {}
    assert "oasis Cx0.3" in format_table(report)
    # each run: the rule's value on its training fold times the multiplier, the same numbers as that value given
    data = load_cikm15_data("segment")
    rows = stratified_subsample(data.y, 100, 0)
    X, y = data.X[rows], data.y[rows]
    folds = stratified_kfold(y, 2, seed=0)
    for r in report["results"]:
        tr, te = folds[r["fold"]]
        rule, name = ("paas", "C") if r["algorithm"] == "oasis" else ("aroma", "r")
        value = resolved_auto(rule, {}, X[tr], 300)[name] * r["factors"][name]
        assert r["params"] == f"{name}={value:g}"
        given = {"identity": False, "C": value} if name == "C" else {"r": value}
        want = run_one(r["algorithm"], given, X[tr], y[tr], X[te], y[te], sors_triplets(y[tr], 300, seed=r["fold"]),
                       r["fold"])
        assert r["ap@10"] == want["ap@10"]
    # cws given eta: its runs keep that value (and its own gamma) while cws-d's eta is scaled
    mixed = run_experiment("cikm15", ExperimentConfig(
        dataset="segment", algorithms=["cws", "cws-d"], seeds=[0], triplets=300, params={"cws": {"eta": 0.7}},
        options={"n_instances": 100, "folds": 2, "factors": {"eta": [2.0]}}))
    assert list(mixed["table"]) == ["cws", "cws-d etax2"]
    cws_params = {r["params"] for r in mixed["results"] if r["algorithm"] == "cws"}
    assert len(cws_params) == 2 and all("eta=0.7" in p and "gamma=" in p for p in cws_params)
    with pytest.raises(InvalidInputError, match="passive learners"):
        run_experiment("cikm15", ExperimentConfig(dataset="segment", algorithms=["paas"],
                                                  options={"factors": {"C": [1.0]}}))
    with pytest.raises(InvalidInputError, match="'auto' value of eta"):
        run_experiment("cikm15", ExperimentConfig(dataset="segment", algorithms=["oasis"],
                                                  options={"factors": {"eta": [1.0]}}))


def test_cikm15_refuses_a_bad_factors_grid_before_loading_data():
    from sparsesim.experiments import ExperimentConfig, run_experiment

    for factors, message in [({"C": []}, "'factors' must map"), ({"C": [1.0]}, "passive learners"),
                             ({"gamma": [1.0]}, "'auto' value of gamma")]:
        algorithms = ["oasis", "paas"] if message == "passive learners" else ["oasis", "aroma"]
        with pytest.raises(InvalidInputError, match=message):
            run_experiment("cikm15", ExperimentConfig(dataset="no-such-data", algorithms=algorithms,
                                                      options={"factors": factors}))
    # an explicit parameter always wins: a grid over it alone is refused, not applied over it
    with pytest.raises(InvalidInputError, match="'auto' value of C"):
        run_experiment("cikm15", ExperimentConfig(dataset="no-such-data", algorithms=["oasis"],
                                                  params={"oasis": {"C": 0.5}}, options={"factors": {"C": [2.0]}}))


def test_cikm15_search_averages_over_tuning_folds():
    from sparsesim.experiments.cikm15 import _search_family, run_one
    from sparsesim.triplets import stratified_kfold

    X, y = _data(n=60, d=6, seed=21)
    data = type("D", (), {"X": X, "y": y})()
    rows = np.arange(60)
    one = _search_family("pa", data, rows, 200, seed=0, mode="grid", n_jobs=1, fixed={}, n_folds=1)
    three = _search_family("pa", data, rows, 200, seed=0, mode="grid", n_jobs=1, fixed={}, n_folds=3)
    assert one["folds"] == 1 and three["folds"] == 3 and three["n_evaluated"] == 11
    # each score of the 3-fold search is the mean AP@10 of OASIS (M_1 = 0) over the first 3 folds
    folds = stratified_kfold(y, 5, seed=0)[:3]
    C = 0.01
    want = np.mean([run_one("oasis", {"C": C, "identity": False}, X[tr], y[tr], X[te], y[te],
                            sors_triplets(y[tr], 200, seed=7 + 100 * f), 0)["ap@10"]
                    for f, (tr, te) in enumerate(folds)])
    got = next(s["ap@10"] for s in three["scores"] if s["C"] == C)
    assert got == pytest.approx(want, abs=1e-12)
    one_score = next(s["ap@10"] for s in one["scores"] if s["C"] == C)
    first = run_one("oasis", {"C": C, "identity": False}, X[folds[0][0]], y[folds[0][0]], X[folds[0][1]],
                    y[folds[0][1]], sors_triplets(y[folds[0][0]], 200, seed=7), 0)["ap@10"]
    assert one_score == pytest.approx(first, abs=1e-12)  # n_folds=1 is the single 4/5 - 1/5 split


def test_cikm15_auto_search_is_a_bounded_grid_around_the_rule():
    from sparsesim.defaults import PA_C_FACTOR, data_statistics
    from sparsesim.experiments.cikm15 import AUTO_FACTORS, AUTO_FACTORS_2D, _search_family

    X, y = _data(n=60, d=6, seed=21)
    data = type("D", (), {"X": X, "y": y})()
    rows = np.arange(60)
    pa = _search_family("pa", data, rows, 200, seed=0, mode="auto", n_jobs=1, fixed={}, n_folds=2)
    s = data_statistics(X)["s"]
    assert sorted(r["C"] for r in pa["scores"]) == pytest.approx(sorted(PA_C_FACTOR / s * f for f in AUTO_FACTORS))
    assert pa["best"]["C"] in [r["C"] for r in pa["scores"]] and pa["folds"] == 2
    cw = _search_family("cw-d", data, rows, 200, seed=0, mode="auto", n_jobs=1, fixed={}, n_folds=1)
    assert cw["n_evaluated"] == len(AUTO_FACTORS_2D[0]) * len(AUTO_FACTORS_2D[1])
