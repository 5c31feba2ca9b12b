"""OMTRSL family: fast path vs the literal Algorithm 1/2, baselines, model files, data, protocol, Dask."""

import json

import numpy as np
import pytest
import scipy.sparse as sp

from reference_bilinear import dense_oasis
from reference_multitask import dense_omtrsl, paper_A_inverse
from sparsesim.engine.multitask import MultiTaskEngine, PairedTaskStore, relationship_inverse, task_coefficients
from sparsesim.exceptions import DataNotFoundError, FileFormatError, InvalidInputError, UnknownNameError
from sparsesim.learners.multitask import (
    OGRSL,
    OMTRSL,
    OSTRSL,
    OMTRSLActive,
    OMTRSLRandom,
)
from sparsesim.models import MultiTaskSimilarity
from sparsesim.registry import algorithms_of_kind, make_estimator


def _problem(seed=0, n=24, d=7, K=3, n_trip=80, density=0.5):
    rng = np.random.default_rng(seed)
    Xd = rng.normal(size=(n, d)) * (rng.random((n, d)) < density)
    trip = rng.integers(0, n, size=(n_trip, 3))
    trip[:, 2] = (trip[:, 1] + 1 + rng.integers(0, n - 1, n_trip)) % n  # x^1 != x^2
    signs = rng.choice([-1.0, 1.0], n_trip)
    tid = rng.integers(0, K, n_trip)
    return Xd, trip, signs, tid, rng.random(n_trip)


def _M(own, shared, k):
    W = own[k].toarray() + (shared.toarray() if shared is not None else 0.0)
    return np.eye(W.shape[0]) + W


def _tiny_tasks(seed=0, K=3, n_classes=4, per_class=10, d=30):
    """Clustered documents in K tasks; each task shifts the class centres differently."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_classes, d))
    X, y, t = [], [], []
    for k in range(K):
        shift = rng.normal(scale=0.8, size=(n_classes, d))
        for c in range(n_classes):
            X.append(centres[c] + shift[c] + rng.normal(scale=1.2, size=(per_class, d)))
            y += [c] * per_class
            t += [k] * per_class
    return sp.csr_matrix(np.vstack(X)), np.array(y), np.array(t)


# ------------------------------------------------------------------ update rule


def test_task_coefficients_reproduce_the_paper_matrix():
    for b, K in [(0.0, 1), (0.5, 3), (7.0, 4), (100.0, 50)]:
        alpha, beta = task_coefficients(b, K)
        lit = paper_A_inverse(b, K)
        np.testing.assert_allclose(alpha * np.eye(K) + beta * np.ones((K, K)), lit, rtol=0, atol=1e-15)
        np.testing.assert_allclose(relationship_inverse(b, K), lit, rtol=0, atol=1e-15)


@pytest.mark.parametrize("storage", ["dense", "hash"])
@pytest.mark.parametrize("query,rate", [("all", 1.0), ("active", 0.5), ("random", 0.4)])
@pytest.mark.parametrize("b", [0.0, 0.7, 5.0])
@pytest.mark.parametrize("density,d", [(0.1, 12), (1.0, 7)])  # gathered sparse rows / contiguous dense rows
def test_engine_matches_literal_algorithm(storage, query, rate, b, density, d):
    Xd, trip, signs, tid, u = _problem(seed=int(b * 10) + len(query), density=density, d=d)
    K, d = 3, Xd.shape[1]
    ref, asked = dense_omtrsl(Xd, trip, signs, tid, K, b, 0.3, query, rate, u)
    eng = MultiTaskEngine(d, K, b=b, C=0.3, query=query, rate=rate, storage=storage, initial_capacity=16)
    X = sp.csr_matrix(Xd)
    for lo, hi in [(0, 30), (30, 31), (31, 80)]:  # chunking must not matter (and the table grows)
        eng.partial_fit(X, trip[lo:hi], signs[lo:hi], tid[lo:hi], u[lo:hi])
    own, shared = eng.matrices()
    for k in range(K):
        np.testing.assert_allclose(_M(own, shared, k), ref[k], rtol=0, atol=1e-10)
    assert eng.n_queries == int(asked.sum())
    assert (query == "all") == (eng.n_queries == len(trip))


def test_engine_refuses_out_of_range_indices():
    X = sp.csr_matrix(np.eye(4))
    eng = MultiTaskEngine(4, 2, storage="dense")
    with pytest.raises(ValueError, match="task ids"):
        eng.partial_fit(X, np.array([[0, 1, 2]]), np.ones(1), np.array([2]))
    with pytest.raises(ValueError, match="row indices"):
        eng.partial_fit(X, np.array([[0, 1, 4]]), np.ones(1), np.array([0]))
    with pytest.raises(ValueError, match="uniform"):
        MultiTaskEngine(4, 2, query="active").partial_fit(X, np.array([[0, 1, 2]]), np.ones(1), np.array([0]))


def test_hash_and_dense_storage_agree_on_many_sparse_tasks():
    rng = np.random.default_rng(3)
    n, d, K = 200, 400, 50
    X = sp.random(n, d, density=0.03, random_state=4, format="csr")
    trip = rng.integers(0, n, size=(600, 3))
    signs = rng.choice([-1.0, 1.0], 600)
    tid = rng.integers(0, K, 600)
    mats = []
    for storage in ("dense", "hash"):
        e = MultiTaskEngine(d, K, b=2.0, C=0.5, storage=storage, initial_capacity=16)
        e.partial_fit(X, trip, signs, tid)
        mats.append(e.matrices())
    # the hash run grew from 16 slots and sent the own values of later tasks to the overflow table
    st = e.store
    assert st.capacity > 16 and st.overflow.n_entries > 0
    assert st.table.ctypes.data % 64 == 0  # 32-byte records never straddle a cache line
    assert st.n_entries == st.counts[0] + st.overflow.n_entries
    for k in (0, 17, 49):
        np.testing.assert_allclose(_M(*mats[0], k), _M(*mats[1], k), rtol=0, atol=1e-12)
    assert abs(mats[0][1] - mats[1][1]).max() < 1e-12


def test_hash_storage_first_writer_owns_the_pair_record():
    """Two tasks write the same entry: the first keeps its own value in the pair record, the
    second goes to the overflow table, and both read back their own value (plus S)."""
    X = sp.csr_matrix(np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]))
    trip = np.array([[0, 1, 2], [0, 1, 2], [0, 1, 2]])  # X_t = e_0 (e_1 - e_2)^T: entries (0,1), (0,2)
    signs = np.ones(3)
    eng = MultiTaskEngine(3, 2, b=1.0, C=10.0, storage="hash", initial_capacity=16)
    eng.partial_fit(X, trip[:1], signs[:1], np.array([1]))
    st = eng.store
    assert st.counts[0] == 2 and st.overflow.n_entries == 0
    assert set(st.table["tag"][st.table["key"] >= 0]) == {1}
    eng.partial_fit(X, trip[1:], signs[1:], np.array([0, 0]))
    assert st.counts[0] == 2 and st.overflow.n_entries == 2
    assert int(st.table["nover"][st.table["key"] >= 0].sum()) == 2
    ref, _ = dense_omtrsl(X.toarray(), trip, signs, np.array([1, 0, 0]), 2, 1.0, 10.0)
    own, shared = eng.matrices()
    for k in range(2):
        np.testing.assert_allclose(_M(own, shared, k), ref[k], rtol=0, atol=1e-12)


def test_learner_partial_fit_matches_reference_with_named_tasks():
    Xd, trip, signs, tid, _ = _problem(seed=11)
    names = np.array(["comp", "rec", "sci"])
    est = OMTRSL(C=0.3, b=2.0, storage="hash")
    est.partial_fit_triplets(Xd, trip[:40], signs[:40], names[tid[:40]], tasks=names)
    est.partial_fit_triplets(Xd, trip[40:], signs[40:], names[tid[40:]])
    ref, _ = dense_omtrsl(Xd, trip, signs, tid, 3, 2.0, 0.3)
    for k, name in enumerate(names):
        np.testing.assert_allclose(est.model_for(name).M.toarray(), ref[k], rtol=0, atol=1e-10)
    assert est.n_triplets_seen_ == len(trip) and est.query_ratio_ == 1.0


def test_ostrsl_and_ogrsl_are_oasis_per_task_and_global():
    Xd, trip, signs, tid, _ = _problem(seed=5)
    ost = OSTRSL(C=0.4).partial_fit_triplets(Xd, trip, signs, tid)
    for k in range(3):
        sel = tid == k
        ref = dense_oasis(Xd, trip[sel], 0.4, signs=signs[sel])
        np.testing.assert_allclose(ost.model_for(k).M.toarray(), ref, rtol=0, atol=1e-10)
    glob = OGRSL(C=0.4).partial_fit_triplets(Xd, trip, signs, tid)
    ref = dense_oasis(Xd, trip, 0.4, signs=signs)
    for k in range(3):
        np.testing.assert_allclose(glob.model_for(k).M.toarray(), ref, rtol=0, atol=1e-10)
    # b = 0: A^{-1} = I, OMTRSL is OSTRSL
    om = OMTRSL(C=0.4, b=0.0).partial_fit_triplets(Xd, trip, signs, tid)
    for k in range(3):
        np.testing.assert_allclose(om.model_for(k).M.toarray(), ost.model_for(k).M.toarray(), atol=1e-12)


# ------------------------------------------------------------------ behaviour


@pytest.mark.parametrize("cls", [OMTRSL, OMTRSLActive, OMTRSLRandom, OSTRSL, OGRSL])
def test_same_seed_same_model_other_seed_other_model(cls):
    X, y, t = _tiny_tasks()
    m1 = cls(n_triplets=200, random_state=1).fit(X, y, t).model_
    m2 = cls(n_triplets=200, random_state=1).fit(X, y, t).model_
    m3 = cls(n_triplets=200, random_state=2).fit(X, y, t).model_
    for k in range(3):
        assert abs(m1.model_for(k).W - m2.model_for(k).W).max() == 0.0
    assert any(abs(m1.model_for(k).W - m3.model_for(k).W).max() > 0 for k in range(3))


def test_same_seed_gives_every_algorithm_the_same_stream():
    X, y, t = _tiny_tasks()
    # OMTRSL-Random asking every label is OMTRSL: the triplet stream depends only on the seed
    full = OMTRSL(C=0.5, b=1.0, n_triplets=250, random_state=4).fit(X, y, t)
    rnd = OMTRSLRandom(C=0.5, b=1.0, query_ratio=1.0, n_triplets=250, random_state=4).fit(X, y, t)
    for k in range(3):
        assert abs(full.model_for(k).W - rnd.model_for(k).W).max() < 1e-12


def test_active_queries_fewer_labels_with_smaller_delta_and_random_hits_its_ratio():
    X, y, t = _tiny_tasks()
    ratios = [OMTRSLActive(delta=dl, n_triplets=1500, random_state=0).fit(X, y, t).query_ratio_
              for dl in (0.01, 1.0, 100.0)]
    assert ratios[0] < ratios[1] < ratios[2] <= 1.0
    rnd = OMTRSLRandom(query_ratio=0.2, n_triplets=3000, random_state=0).fit(X, y, t)
    assert abs(rnd.query_ratio_ - 0.2) < 0.03


def test_learning_beats_the_identity_on_clustered_tasks():
    from sparsesim.experiments.ijcai17 import evaluate_tasks

    X, y, t = _tiny_tasks(per_class=14)
    rows = np.arange(X.shape[0])
    untrained = evaluate_tasks(OMTRSL(n_triplets=0).fit(X, y, t).model_, X, y, t, rows, np.unique(t))
    trained = evaluate_tasks(OMTRSL(C=0.1, b=1.0, n_triplets=3000, random_state=0).fit(X, y, t).model_,
                             X, y, t, rows, np.unique(t))
    assert trained["map"] > untrained["map"]


def test_evaluation_stays_inside_each_task():
    from sparsesim.evaluation import dot_scorer, evaluate_retrieval
    from sparsesim.experiments.ijcai17 import evaluate_tasks

    X, y, t = _tiny_tasks()
    model = OGRSL(n_triplets=0).fit(X, y, t).model_  # M = I: the dot product
    rows = np.arange(0, X.shape[0], 2)
    ev = evaluate_tasks(model, X, y, t, rows, np.unique(t), ["a", "b", "c"])
    for k, p in enumerate(ev["per_task"]):
        r = rows[t[rows] == k]
        direct = evaluate_retrieval(dot_scorer(X[r]), y[r], k=10)
        assert p["task"] == "abc"[k] and p["ap@10"] == pytest.approx(direct["ap@10"])
    assert ev["ap@10"] == pytest.approx(np.mean([p["ap@10"] for p in ev["per_task"]]))


# ------------------------------------------------------------------ model files


def test_model_save_load_round_trip(tmp_path):
    X, y, t = _tiny_tasks()
    names = np.array(["x", "y", "z"])[t]
    for est in (OMTRSL(n_triplets=200, random_state=0), OGRSL(n_triplets=200, random_state=0)):
        model = est.fit(X, y, names).model_
        path = tmp_path / f"{est._algorithm}.npz"
        model.save(path)
        back = MultiTaskSimilarity.load(path)
        assert back.tasks == ["x", "y", "z"] and back.metadata["algorithm"] == est._algorithm
        for task in ("x", "z"):
            np.testing.assert_array_equal(back.model_for(task).score_matrix(X[:5], X),
                                          model.model_for(task).score_matrix(X[:5], X))
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(FileFormatError):
        MultiTaskSimilarity.load(path)


def test_model_rejects_unknown_task():
    X, y, t = _tiny_tasks()
    model = OMTRSL(n_triplets=50, random_state=0).fit(X, y, t).model_
    with pytest.raises(InvalidInputError, match="unknown task"):
        model.model_for(7)


# ------------------------------------------------------------------ bad input


def test_bad_input_raises_clear_errors():
    X, y, t = _tiny_tasks()
    bad = X.toarray()
    bad[0, 0] = np.nan
    with pytest.raises(InvalidInputError, match="NaN"):
        OMTRSL(n_triplets=10).fit(bad, y, t)
    y1 = y.copy()
    y1[t == 1] = 0  # task 1 has a single class
    with pytest.raises(InvalidInputError, match="class"):
        OMTRSL(n_triplets=10).fit(X, y1, t)
    with pytest.raises(InvalidInputError, match="one task per document"):
        OMTRSL(n_triplets=10).fit(X, y, t[:-1])
    with pytest.raises(InvalidInputError, match=r"C must be positive \(a finite number in \(0, inf\)\)"):
        OMTRSL(C=0.0, n_triplets=10).fit(X, y, t)
    with pytest.raises(InvalidInputError, match="b must be"):
        OMTRSL(b=-1.0, n_triplets=10).fit(X, y, t)
    with pytest.raises(InvalidInputError, match="delta"):
        OMTRSLActive(delta=0.0, n_triplets=10).fit(X, y, t)
    with pytest.raises(InvalidInputError, match="query_ratio"):
        OMTRSLRandom(query_ratio=1.5, n_triplets=10).fit(X, y, t)
    est = OMTRSL().partial_fit_triplets(X, [[0, 1, 2]], [1], [0], tasks=[0, 1, 2])
    with pytest.raises(InvalidInputError, match="unknown task"):
        est.partial_fit_triplets(X, [[0, 1, 2]], [1], [5])
    with pytest.raises(InvalidInputError, match="features"):
        est.partial_fit_triplets(X[:, :10], [[0, 1, 2]], [1], [0])
    with pytest.raises(InvalidInputError, match="triplet indices"):
        est.partial_fit_triplets(X, [[0, 1, 10**6]], [1], [0])
    with pytest.raises(UnknownNameError):
        make_estimator("omtrsl", gamma=3)
    # every learner of the family checks its storage before an engine sees it (fuzz campaign seed 2033)
    for name in algorithms_of_kind("multitask-similarity"):
        est = make_estimator(name, n_triplets=10)
        if "storage" in est.get_params():
            with pytest.raises(InvalidInputError, match="storage must be"):
                est.set_params(storage="abc").fit(X, y, t)


def test_registry_lists_the_family():
    assert set(algorithms_of_kind("multitask-similarity")) >= {"omtrsl", "omtrsl-active", "omtrsl-random",
                                                               "ostrsl", "ogrsl"}
    assert isinstance(make_estimator("omtrsl-active", delta=0.3), OMTRSLActive)


# ------------------------------------------------------------------ real data


def _load(name):
    from sparsesim.data import load_dataset

    try:
        return load_dataset(name)
    except DataNotFoundError as exc:
        pytest.skip(f"data not available: {exc}")


def test_isolet_tasks_are_the_five_speaker_groups():
    data = _load("isolet-tasks")
    assert data.task_names == ["isolet1", "isolet2", "isolet3", "isolet4", "isolet5"]
    assert np.bincount(data.tasks).tolist() == [1560, 1560, 1560, 1558, 1559]
    for k in range(5):
        assert np.unique(data.y[data.tasks == k]).size == 26


def test_news20_tasks_are_the_four_top_level_categories():
    data = _load("news20-tasks")
    assert data.task_names == ["comp", "rec", "sci", "talk"]
    for k, prefix in enumerate(data.task_names):
        groups = {data.class_names[c] for c in np.unique(data.y[data.tasks == k])}
        assert all(g.startswith(prefix + ".") for g in groups)
        assert len(groups) == (5 if prefix == "comp" else 4)
    assert data.n_features == 2000
    assert np.bincount(data.tasks).tolist() == [3966, 3191, 3193, 3197]  # every document of the 17 groups
    # the catalog (`sparsesim datasets list`) states the count the loader gives
    from sparsesim.data.catalog import get_dataset_spec

    assert f"{data.n_documents:,} documents" in get_dataset_spec("news20-tasks").description
    norms = np.sqrt(np.asarray(data.X.multiply(data.X).sum(axis=1)).ravel())
    assert np.allclose(norms[norms > 0], 1.0)


# ------------------------------------------------------------------ protocol


def _tiny_data():
    from sparsesim.data import LabelledData

    X, y, t = _tiny_tasks(per_class=24)
    return LabelledData(X=X, y=y, tasks=t, task_names=["t0", "t1", "t2"], name="tiny", info={})


def test_protocol_runs_end_to_end(tmp_path, monkeypatch):
    from sparsesim.experiments import ExperimentConfig, run_experiment
    from sparsesim.experiments import ijcai17

    monkeypatch.setattr(ijcai17, "load_multitask_data", lambda name, **o: _tiny_data())
    config = ExperimentConfig(
        dataset="tiny", algorithms=["omtrsl", "ostrsl", "ogrsl", "omtrsl-active", "omtrsl-random"], triplets=300,
        params={"omtrsl-active": {"delta": 0.5}}, out_dir=tmp_path / "out",
        options={"folds": 3, "search": True, "b_grid": [0.1, 10.0], "c_grid": [0.1, 1.0], "active_deltas": [0.1, 1.0]},
    )
    report = run_experiment("ijcai17", config)
    json.dumps(report)  # JSON-serialisable
    res = report["results"]
    assert len(res) == 5 * 3 and {r["fold"] for r in res} == {0, 1, 2}
    for r in res:
        assert len(r["per_task"]) == 3 and 0.0 <= r["ap@10"] <= 1.0 and len(r["ap_curve"]) == 10
        assert r["ap@10"] == pytest.approx(np.mean([p["ap@10"] for p in r["per_task"]]))
    act = {r["fold"]: r["query_ratio"] for r in res if r["algorithm"] == "omtrsl-active"}
    for r in res:
        if r["algorithm"] == "omtrsl-random":
            assert r["params"]["query_ratio"] == pytest.approx(act[r["fold"]])
    # the search ran inside every outer fold: 3 inner folds of its training part per candidate
    assert set(report["search"]["chosen"]) == {"seed 0 fold 0", "seed 0 fold 1", "seed 0 fold 2"}
    assert all(c["omtrsl"]["b"] in (0.1, 10.0) for c in report["search"]["chosen"].values())
    assert len(report["search"]["results"]) == (4 + 2 + 2) * 3 * 3
    for r in res:  # each fold's model uses the parameters chosen on that fold's training part
        if r["algorithm"] in ("omtrsl", "ostrsl", "ogrsl"):
            chosen = report["search"]["chosen"][f"seed 0 fold {r['fold']}"][r["algorithm"]]
            assert {k: r["params"][k] for k in chosen} == chosen
    assert len(report["active_sweep"]) == 2
    assert {p.rsplit("_", 1)[-1] for p in report["plots"]} >= {"k.png", "sensitivity.png", "active.png"}
    written = json.loads((tmp_path / "out" / "ijcai17_tiny.json").read_text())
    assert written["summary"]["omtrsl"]["ap@10"] == list(report["summary"]["omtrsl"]["ap@10"])
    assert written["summary"]["omtrsl"]["n_runs"] == 3
    text = ijcai17.format_table(report)
    assert "omtrsl-random" in text and "AP@10" in text
    wins = sum(a["ap@10"] > b["ap@10"] for a in res for b in res
               if a["algorithm"] == "omtrsl" and b["algorithm"] == "ogrsl" and a["fold"] == b["fold"])
    assert f"omtrsl - ogrsl: wins {wins}/3" in text


def test_protocol_leaves_out_a_learner_that_refuses_the_data_and_says_why(monkeypatch):
    """mtLMNN above its ``max_features`` is asked before anything runs: the other learners run, the
    report records why mtLMNN did not, and the reproduction report's rows and orderings with it say
    "not attempted" with that reason; when every learner refuses, the run is one error."""
    from sparsesim.exceptions import ResourceLimitError
    from sparsesim.experiments import ExperimentConfig, ijcai17, paper_verdicts, run_experiment

    monkeypatch.setattr(ijcai17, "load_multitask_data", lambda name, **o: _tiny_data())
    make = lambda algorithms: ExperimentConfig(  # noqa: E731
        dataset="tiny", algorithms=algorithms, triplets=200, params={"mtlmnn": {"max_features": 5}},
        options={"folds": 3})
    report = run_experiment("ijcai17", make(["omtrsl", "mtlmnn"]))
    assert "max_features = 5" in report["refused"]["mtlmnn"]
    assert {r["algorithm"] for r in report["results"]} == {"omtrsl"} and len(report["results"]) == 3
    with pytest.raises(ResourceLimitError, match="max_features = 5"):
        run_experiment("ijcai17", make(["mtlmnn"]))
    item = {"metrics": [{"key": "ap@10", "name": "AP@10"}], "claims": ["omtrsl > mtlmnn"]}
    run = {"rows": [{"name": "mtLMNN", "algorithm": "mtlmnn", "ap@10": [0.5, 0.0]},
                    {"name": "OMTRSL", "algorithm": "omtrsl", "ap@10": [0.6, 0.0]}]}
    entry = {"column": "tiny", "dataset": "tiny", "substitution": "", "not_registered": [],
             "refused": report["refused"]}
    board = {"omtrsl": {"ap@10": report["summary"]["omtrsl"]["ap@10"]}}
    rows = {r["algorithm"]: r["verdict"] for r in paper_verdicts.judge_rows(item, run, entry, board)}
    assert rows["mtlmnn"] == "not attempted: the learner refuses the data's size"
    assert rows["omtrsl"] == "reproduces" or rows["omtrsl"] == "does not"
    claims = paper_verdicts.judge_claims(item, run, entry, board)
    assert claims[0]["verdict"] == "not attempted: the learner refuses the data's size"


def test_protocol_search_only(monkeypatch):
    """``search_only`` runs the parameter search alone: the same search results as a full run, no CV."""
    from sparsesim.experiments import ExperimentConfig, run_experiment
    from sparsesim.experiments import ijcai17

    monkeypatch.setattr(ijcai17, "load_multitask_data", lambda name, **o: _tiny_data())
    options = {"folds": 3, "b_grid": [0.1, 10.0], "c_grid": [0.1]}
    make = lambda extra: ExperimentConfig(dataset="tiny", algorithms=["omtrsl", "ogrsl"], triplets=200,  # noqa: E731
                                          options=dict(options, **extra))
    alone = run_experiment("ijcai17", make({"search_only": True}))
    full = run_experiment("ijcai17", make({"search": True}))
    assert alone["results"] == [] and full["results"]
    first = [r["ap@10"] for r in full["search"]["results"] if r["fold"] == 0]
    assert [r["ap@10"] for r in alone["search"]["results"]] == first
    assert alone["search"]["chosen"]["seed 0 fold 0"] == full["search"]["chosen"]["seed 0 fold 0"]
    assert "parameter search" in ijcai17.format_table(alone)


@pytest.mark.parametrize("search_folds", [2])  # one 75/25 split leaves < 10 validation documents per task here
def test_protocol_search_never_sees_the_fold_test_part(monkeypatch, search_folds):
    """Poison the test part of outer fold 1 (labels shuffled into other classes, rows replaced by
    noise): the search of that fold scores every candidate the same and chooses the same
    parameters, so no reported number comes from parameters chosen on its own test data."""
    from sparsesim.data import LabelledData
    from sparsesim.experiments import ExperimentConfig, ijcai17, run_experiment

    clean = _tiny_data()
    folds = ijcai17.cv_folds(clean.y, clean.tasks, 3, seed=0)
    _, test = folds[1]
    # the outer folds are stratified by label: keep the clean partition for both runs
    monkeypatch.setattr(ijcai17, "cv_folds", lambda *a, **k: folds)
    rng = np.random.default_rng(0)
    X = clean.X.tolil()
    X[test] = sp.random(test.size, clean.X.shape[1], density=0.5, random_state=rng)
    y = clean.y.copy()
    y[test] = (y[test] + 1 + rng.integers(0, 2, test.size)) % (y.max() + 1)
    poisoned = LabelledData(X=X.tocsr(), y=y, tasks=clean.tasks, task_names=clean.task_names, name="tiny", info={})
    for split in ijcai17.search_splits(clean, folds[1][0], search_folds, 0):
        assert not np.intersect1d(np.concatenate(split), test).size
    reports = []
    for data in (clean, poisoned):
        monkeypatch.setattr(ijcai17, "load_multitask_data", lambda name, data=data, **o: data)
        reports.append(run_experiment("ijcai17", ExperimentConfig(
            dataset="tiny", algorithms=["omtrsl", "ogrsl"], triplets=200,
            options={"folds": 3, "only_folds": [1], "search": True, "search_folds": search_folds,
                     "b_grid": [0.1, 10.0], "c_grid": [1e-4, 1.0]})))
    a, b = reports
    assert [r["ap@10"] for r in a["search"]["results"]] == [r["ap@10"] for r in b["search"]["results"]]
    assert a["search"]["chosen"] == b["search"]["chosen"]
    assert len({r["ap@10"] for r in a["search"]["results"]}) > 1  # the candidates do differ
    # the poisoned test part is what the fold is scored on: the reported numbers change
    assert [r["ap@10"] for r in a["results"]] != [r["ap@10"] for r in b["results"]]


def test_protocol_factors_run_at_multiples_of_the_auto_values(monkeypatch):
    """``factors``: each run at a multiple of the value its "auto" C resolves to on the fold's training
    part (explicit b kept); multiple 1 is the default run; every run records the values it used."""
    from sparsesim.experiments import ExperimentConfig, run_experiment
    from sparsesim.experiments import ijcai17
    from sparsesim.registry import make_estimator

    data = _tiny_data()
    monkeypatch.setattr(ijcai17, "load_multitask_data", lambda name, **o: data)
    base = dict(dataset="tiny", algorithms=["omtrsl", "ostrsl"], triplets=200, params={"omtrsl": {"b": 1.0}})
    report = run_experiment("ijcai17", ExperimentConfig(**base, options={"folds": 3, "only_folds": [0, 2],
                                                                         "factors": {"C": [0.3, 1]}}))
    assert list(report["summary"]) == ["omtrsl Cx0.3", "omtrsl Cx1", "ostrsl Cx0.3", "ostrsl Cx1"]
    assert all(s["n_runs"] == 2 for s in report["summary"].values()) and report["factors"] == {"C": [0.3, 1.0]}
    assert "omtrsl Cx0.3" in ijcai17.format_table(report)
    plain = run_experiment("ijcai17", ExperimentConfig(**base, options={"folds": 3}))
    assert {r["fold"] for r in report["results"]} == {0, 2}
    folds = ijcai17.cv_folds(data.y, data.tasks, 3, 0)
    for r in report["results"]:
        tr, te = folds[r["fold"]]
        auto = make_estimator(r["algorithm"]).resolve_params(data.X[tr], data.y[tr], data.tasks[tr])
        want = {"C": auto["C"] * r["factors"]["C"], **({"b": 1.0} if r["algorithm"] == "omtrsl" else {})}
        assert r["resolved_params"] == want
        again = ijcai17.run_one(r["algorithm"], want, data.X, data.y, data.tasks, tr, te, 200, r["fold"])
        assert r["ap@10"] == again["ap@10"]
        if r["factors"]["C"] == 1:  # the default itself
            same = next(p for p in plain["results"] if p["algorithm"] == r["algorithm"] and p["fold"] == r["fold"])
            assert same["ap@10"] == r["ap@10"] and same["resolved_params"] == r["resolved_params"]
    assert report["resolved_params"]["omtrsl Cx1"]["b"] == 1.0


def test_cli_experiment_json_records_each_runs_resolved_params(monkeypatch, capsys):
    from clitools import run_cli
    from sparsesim.experiments import ijcai17
    from sparsesim.registry import make_estimator

    data = _tiny_data()
    monkeypatch.setattr(ijcai17, "load_multitask_data", lambda name, **o: data)
    code, out, err = run_cli(["experiment", "--protocol", "ijcai17", "--dataset", "isolet-tasks", "--algorithms",
                              "omtrsl,ostrsl", "--triplets", "200", "--param", "omtrsl.b=2", "--option", "folds=3",
                              "--option", "only_folds=[1]", "--json"], monkeypatch, capsys)
    assert code == 0, err
    report = json.loads(out)
    tr, _ = ijcai17.cv_folds(data.y, data.tasks, 3, 0)[1]
    auto_c = make_estimator("ostrsl").resolve_params(data.X[tr])["C"]
    assert [(r["algorithm"], r["fold"]) for r in report["results"]] == [("omtrsl", 1), ("ostrsl", 1)]
    assert [r["resolved_params"] for r in report["results"]] == [{"C": auto_c, "b": 2.0}, {"C": auto_c}]
    assert report["resolved_params"] == {"omtrsl": {"C": auto_c, "b": 2.0}, "ostrsl": {"C": auto_c}}


@pytest.mark.parametrize("options, message", [
    ({"factors": {"C": []}}, "'factors' must map"),
    ({"factors": {"b": [1]}}, "'auto' value of b"),
    ({"factors": {"C": [1]}, "search": True}, "leave out search"),
    ({"only_folds": [5]}, "only_folds"),
])
def test_protocol_refuses_bad_factors_and_folds_before_loading_data(options, message):
    from sparsesim.experiments import ExperimentConfig, ijcai17

    with pytest.raises(InvalidInputError, match=message):
        ijcai17.run(ExperimentConfig(dataset="no-such-data", algorithms=["omtrsl", "ostrsl"],
                                     params={"omtrsl": {"b": 1.0}}, options=options))


def test_protocol_refuses_single_task_algorithms_and_data(monkeypatch):
    from sparsesim.data import LabelledData
    from sparsesim.experiments import ExperimentConfig, ijcai17

    with pytest.raises(UnknownNameError, match="multi-task"):
        ijcai17.run(ExperimentConfig(dataset="x", algorithms=["oasis"]))
    monkeypatch.setattr(ijcai17, "load_dataset", lambda name, **o: LabelledData(X=sp.eye(4, format="csr"),
                                                                                y=np.array([0, 0, 1, 1])))
    with pytest.raises(InvalidInputError, match="task column"):
        ijcai17.run(ExperimentConfig(dataset="x", algorithms=["omtrsl"]))


# ------------------------------------------------------------------ Dask


def test_dask_cluster_gives_the_same_numbers_as_one_process():
    distributed = pytest.importorskip("dask.distributed")
    import joblib

    from sparsesim.experiments.ijcai17 import cv_folds, run_one
    from sparsesim.parallel import run_parallel

    X, y, t = _tiny_tasks()
    folds = cv_folds(y, t, 3, seed=0)
    jobs = [(alg, p, X, y, t, tr, te, 200, 10 + f, None, f)
            for alg, p in [("omtrsl", {"b": 1.0, "C": 0.5}), ("ostrsl", {"C": 0.5}), ("ogrsl", {"C": 0.5})]
            for f, (tr, te) in enumerate(folds)]
    local = run_parallel(run_one, jobs, n_jobs=1)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster, distributed.Client(cluster):
        with joblib.parallel_config(backend="dask"):
            remote = run_parallel(run_one, jobs, n_jobs=None)
            # per-task learners of OSTRSL through the same helper
            ost = OSTRSL(C=0.5, n_triplets=200, random_state=3, n_jobs=None).fit(X, y, t)
    assert [r["ap@10"] for r in remote] == [r["ap@10"] for r in local]
    assert [r["map_curve"] for r in remote] == [r["map_curve"] for r in local]
    ref = OSTRSL(C=0.5, n_triplets=200, random_state=3, n_jobs=1).fit(X, y, t)
    for k in range(3):
        assert abs(ost.model_for(k).W - ref.model_for(k).W).max() == 0.0


def test_pca_project_keeps_the_requested_variance_with_fixed_signs():
    from sparsesim.data.multitask import pca_project

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 12)) @ np.diag([5, 4, 3, 1, 1, 1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]) + 3.0
    Z, n = pca_project(X, 0.9)
    Xc = X - X.mean(axis=0)
    total = (Xc ** 2).sum()
    assert (Z ** 2).sum() / total >= 0.9  # at least the requested share of the variance
    _, n_less = pca_project(X, 0.5)
    assert n_less < n < 12 and Z.shape == (200, n)
    np.testing.assert_allclose(Z.mean(axis=0), 0.0, atol=1e-10)  # centred
    Z2, _ = pca_project(X.copy(), 0.9)
    np.testing.assert_array_equal(Z, Z2)  # deterministic
    # fixed sign convention: the components do not depend on the SVD's arbitrary signs, so negating
    # the data negates the projection
    Zneg, _ = pca_project(-X, 0.9)
    np.testing.assert_allclose(Zneg, -Z, atol=1e-9)


@pytest.mark.parametrize("K", [1, 4, 50])
def test_compact_pair_records_match_the_default_layout_to_float32(K):
    """16-byte records (task id and overflow flag packed in the key, float32 values) give the
    default layout's model to float32 precision, through table growth and overflow entries."""
    rng = np.random.default_rng(10 + K)
    n, d = 200, 400
    X = sp.random(n, d, density=0.03, random_state=5, format="csr")
    trip = rng.integers(0, n, size=(600, 3))
    signs = rng.choice([-1.0, 1.0], 600)
    tid = rng.integers(0, K, 600)
    engines = []
    for compact in (False, True):
        e = MultiTaskEngine(d, K, b=2.0, C=0.5, storage="hash", initial_capacity=16, compact=compact)
        losses, margins, _ = e.partial_fit(X, trip, signs, tid)
        engines.append((e, losses, margins))
    (e0, l0, m0), (e1, l1, m1) = engines
    st = e1.store
    assert e1.compact_ and st.compact and st.table.dtype.itemsize == 16 and st.overflow.table["val"].dtype == np.float32
    assert st.capacity > 16 and st.table.ctypes.data % 64 == 0
    assert st.counts[0] == e0.store.counts[0] and st.overflow.n_entries == e0.store.overflow.n_entries
    if K > 1:
        assert st.overflow.n_entries > 0  # pairs written by several tasks
    np.testing.assert_allclose(m1, m0, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(l1, l0, rtol=1e-5, atol=1e-6)
    (own0, s0), (own1, s1) = e0.matrices(), e1.matrices()
    for k in sorted({0, K // 2, K - 1}):
        a, b = _M(own0, s0, k), _M(own1, s1, k)
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5 * abs(a).max())


def test_compact_pair_records_pack_task_and_overflow_flag_and_fall_back_when_too_wide():
    X = sp.csr_matrix(np.eye(3))
    trip = np.array([[0, 1, 2], [0, 1, 2], [0, 1, 2]])
    signs = np.ones(3)
    eng = MultiTaskEngine(3, 2, b=1.0, C=10.0, storage="hash", initial_capacity=16, compact=True)
    eng.partial_fit(X, trip, signs, np.array([1, 0, 0]))
    st = eng.store
    packed = st.table["key"][st.table["key"] >= 0]
    kb = st.kbits
    assert set(packed & ((1 << kb) - 1)) == {1, 2} and set((packed >> kb) & 1) == {1}  # pairs, first writer
    assert set(packed >> (kb + st.tbits)) == {1}  # both pairs have an overflow entry (task 0)
    ref, _ = dense_omtrsl(X.toarray(), trip, signs, np.array([1, 0, 0]), 2, 1.0, 10.0)
    own, shared = eng.matrices()
    for k in range(2):
        np.testing.assert_allclose(_M(own, shared, k), ref[k], rtol=1e-6, atol=1e-6)
    # d = 2^30 + 1, K = 3: 61 key bits + 2 task bits + 1 flag > 63 (the 32-byte layout still fits)
    assert "64 > 63 bits" in PairedTaskStore.compact_unfit_reason((1 << 30) + 1, 3)
    assert PairedTaskStore.compact_unfit_reason(1 << 20, 1 << 20) is None
    with pytest.raises(ValueError, match="63 bits"):
        PairedTaskStore((1 << 30) + 1, 3, compact=True)


def test_compact_probe_hands_its_free_slot_to_the_insert():
    """find_packed returns the pair's slot, or -2 - (the empty slot that ended its probe);
    insert_packed puts the pair there, or at the next empty slot when an insert took it since."""
    from sparsesim.engine.hashstore import EMPTY, home_slot
    from sparsesim.engine.paired_store import find_packed, insert_packed

    st = PairedTaskStore(1000, 4, initial_capacity=64, compact=True)
    keys, svals, ovals = st.table["key"], st.table["s"], st.table["o"]
    pmask = (1 << st.kbits) - 1
    rng = np.random.default_rng(0)
    pairs = [int(p) for p in rng.permutation(1000 * 1000)[:2000]]
    a = next(p for p in pairs if home_slot(p, st.shift) < 50)
    b = next(p for p in pairs if p != a and home_slot(p, st.shift) == home_slot(a, st.shift))
    h = home_slot(a, st.shift)
    free = find_packed(keys, a, st.shift, pmask)
    assert free == -2 - h
    s_a = insert_packed(keys, svals, ovals, a | (3 << st.kbits), -2 - free, st.counts)
    assert s_a == h and keys[h] & pmask == a and find_packed(keys, a, st.shift, pmask) == h
    # b probed before a was inserted: its free slot was taken, the insert moves on along the probe path
    s_b = insert_packed(keys, svals, ovals, b | (1 << st.kbits), h, st.counts)
    assert s_b == h + 1 and find_packed(keys, b, st.shift, pmask) == s_b
    assert keys[h + 2] == EMPTY
    assert list(st.counts) == [2, 2]


def test_overflow_table_runs_at_its_own_lower_load_and_grows_by_doubling_when_large():
    from sparsesim.engine.hashstore import HashStore
    from sparsesim.engine.paired_store import OVERFLOW_MAX_LOAD

    rng = np.random.default_rng(1)
    n, d, K = 150, 300, 50
    X = sp.random(n, d, density=0.05, random_state=2, format="csr")
    e = MultiTaskEngine(d, K, b=1.0, C=1.0, storage="hash", initial_capacity=16, compact=True)
    e.partial_fit(X, rng.integers(0, n, size=(800, 3)), rng.choice([-1.0, 1.0], 800), rng.integers(0, K, 800))
    x = e.store.overflow
    assert x.capacity > 16 and x.counts[1] <= OVERFLOW_MAX_LOAD * x.capacity  # it grew, and its load stayed low
    assert MultiTaskEngine(d, 1, b=0.0, storage="hash", initial_capacity=1 << 12).store.overflow.capacity == 16
    st = HashStore(10, initial_capacity=1 << 8, fast_growth_limit=1 << 10)
    st.counts[:] = 200  # 200 live > 0.45 * 256
    assert st.grown_capacity(0) == 1 << 10  # x4 below the limit
    st.counts[:] = 300
    st.table = st._empty_table(1 << 10)
    assert st.grown_capacity(200) == 1 << 11  # 500 > 0.45 * 1024: x2 at the limit, not x4
    with pytest.raises(ValueError, match="rebuild_load"):
        HashStore(10, max_load=0.5, rebuild_load=0.2)


def test_engine_falls_back_to_32_byte_records_when_compact_does_not_fit(monkeypatch):
    monkeypatch.setattr(PairedTaskStore, "compact_unfit_reason", staticmethod(lambda d, k: "too wide: 64 > 63 bits"))
    with pytest.warns(RuntimeWarning, match="too wide.*32-byte"):
        eng = MultiTaskEngine(5, 2, storage="hash", initial_capacity=16, compact=True)
    assert not eng.compact_ and eng.store.table.dtype.itemsize == 32


@pytest.mark.parametrize("cls", [OMTRSL, OMTRSLActive, OGRSL, OSTRSL])
def test_learners_offer_compact_pair_records(cls):
    X, y, t = _tiny_tasks(K=4)
    models = []
    for compact in (False, True):
        est = cls(n_triplets=300, random_state=0, storage="hash", initial_capacity=16, compact=compact)
        assert est.get_params()["compact"] is compact
        models.append(est.fit(X, y, t).model_)
    engines = getattr(est, "engines_", None) or [est.engine_]
    assert all(e.compact_ and e.store.table.dtype.itemsize == 16 for e in engines)
    for k in range(4):
        a, b = (m.score_matrix(k, X[:10], X) for m in models)
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5 * abs(a).max())
