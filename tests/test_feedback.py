"""FeedbackLearner: warm start, the same update as offline training, click rule, snapshots, /ask."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.exceptions import InvalidInputError, ResourceLimitError
from sparsesim.feedback import FeedbackLearner, click_triplets
from sparsesim.indexes import build_index
from sparsesim.learners.bilinear import OASIS, SORS
from sparsesim.models import BilinearSimilarity


@pytest.fixture(scope="module")
def corpus():
    X = sp.random(60, 30, density=0.2, random_state=0, format="csr")
    y = np.arange(60) % 3
    model = OASIS(C=0.5, n_triplets=200, random_state=0).fit(X, y).model_
    return X, y, model


def test_start_from_continues_exactly_like_the_original_learner(corpus):
    X, y, _ = corpus
    more = np.array([[0, 3, 4], [5, 8, 1], [2, 5, 7], [9, 12, 10]])
    for make in (lambda: OASIS(C=0.5, n_triplets=200, random_state=0),
                 lambda: SORS(lam=1e-4, eta=0.1, n_triplets=200, random_state=0)):
        a = make().fit(X, y)
        b = make().start_from(a.model_, X)
        assert abs(b.model_.W - a.model_.W).max() == 0.0
        a.partial_fit_triplets(X, more)
        b.partial_fit_triplets(X, more)
        assert abs(b.model_.W - a.model_.W).max() < 1e-12
        assert a.model_.W.nnz > 0


def test_click_rule():
    assert click_triplets(["a", "b", "c", "d"], ["c"]) == [("c", "b"), ("c", "a"), ("c", "d")]
    assert click_triplets(["a", "b", "c"], ["a"]) == [("a", "b")]
    assert click_triplets(["a", "b", "c", "d"], ["b", "d"], max_pairs=2) == [("b", "a"), ("b", "c")]
    assert click_triplets(["a", "b"], ["a", "b"]) == []


@pytest.mark.parametrize("compact, tol", [(False, 1e-12), (True, 1e-6)])
def test_feedback_equals_offline_update_and_changes_scores(corpus, compact, tol):
    # float64 store (compact=False): the published versions (base + low-rank factors of the OASIS
    # steps) equal the learner's own model to rounding; the default float32 store rounds every
    # entry it writes, which the factors do not, so the two differ at float32 precision
    X, _, model = corpus
    index = build_index(model, X, kind="exact")
    records = [{"query": 0, "preferred": 3, "other": 4}, {"query": 5, "preferred": 8, "other": 1},
               {"query": {"indices": [1, 7], "values": [1.0, 2.0]}, "preferred": 11, "other": 12}]
    with FeedbackLearner(index, learner=OASIS(C=0.5, compact=compact)) as fl:
        q0 = X[0]
        before = fl.score(q0, [3, 4])[0]
        assert fl.submit(records) == 3
        fl.flush(timeout=600)
        after = fl.score(q0, [3, 4])[0]
        # offline: the same learner started from the same model, the same triplets in order
        rows = sp.vstack([X[0], X[3], X[4], X[5], X[8], X[1],
                          sp.csr_matrix(([1.0, 2.0], ([0, 0], [1, 7])), shape=(1, 30)), X[11], X[12]], format="csr")
        off = OASIS(C=0.5, compact=compact).start_from(model, X).partial_fit_triplets(rows, np.arange(9).reshape(3, 3))
        expect = off.model_.score_pairs(sp.vstack([q0, q0]), X[[3, 4]])
        np.testing.assert_allclose(after, expect, rtol=tol, atol=tol)
        assert abs(fl.model.W - off.model_.W).max() <= tol * max(1.0, abs(off.model_.W).max())
        # the OASIS step moved the preferred document up relative to the other one
        if before[0] - before[1] < 1:
            assert after[0] - after[1] > before[0] - before[1]
        ids, scores, version = fl.query(X[:1], 5)
        assert version >= 1
        np.testing.assert_allclose(scores[0], np.sort(off.model_.score_matrix(X[:1], X)[0])[::-1][:5],
                                   rtol=tol, atol=tol)
        assert fl.info()["applied"] == 3 and fl.info()["pending"] == 0
        assert fl.info()["publishing"].startswith("low-rank")


def test_low_rank_versions_fold_into_the_base_and_match_the_learner(corpus):
    """Many batches, several rebases: every published version is the learner's model (float64 store)."""
    X, _, model = corpus
    rng = np.random.default_rng(3)
    with FeedbackLearner(build_index(model, X, kind="exact"), learner=OASIS(C=0.5, compact=False),
                         rebase_every=7, max_batch=4) as fl:
        for _ in range(10):
            t = rng.choice(60, size=(5, 3), replace=True)
            fl.submit([{"query": int(a), "preferred": int(p), "other": int(o)} for a, p, o in t if p != o])
            fl.flush(timeout=600)
            assert abs(fl.model.W - fl.learner.model_.W).max() < 1e-12
        info = fl.info()
        assert info["rebases"] >= 2 and info["factored_updates"] < 7
        assert info["version"] >= 10


def test_sors_publishes_full_exports(corpus):
    X, _, model = corpus
    with FeedbackLearner(build_index(model, X, kind="exact"), learner=SORS(lam=1e-4, eta=0.1)) as fl:
        fl.submit([{"query": 0, "preferred": 3, "other": 4}])
        fl.flush(timeout=600)
        assert fl.info()["publishing"] == "full export of W"
        assert abs(fl.model.W - fl.learner.model_.W).max() == 0.0


@pytest.mark.parametrize("bad", [
    {"query": 0, "preferred": 3},
    {"query": 0, "preferred": 3, "other": 999},
    {"query": 0, "preferred": 3, "other": 3},
    {"query": True, "preferred": 3, "other": 4},
    {"query": "some text", "preferred": 3, "other": 4},  # model not trained on text
    {"query": {"indices": [40], "values": [1.0]}, "preferred": 3, "other": 4},
    {"query": {"indices": [1], "values": [float("nan")]}, "preferred": 3, "other": 4},
    {"query": 0, "clicked": [9], "shown": [1, 2]},
    {"query": 0, "clicked": [], "shown": [1, 1]},
    [],
    "x",
])
def test_bad_feedback_is_a_project_error(corpus, bad):
    X, _, model = corpus
    with FeedbackLearner(build_index(model, X, kind="exact")) as fl:
        with pytest.raises(InvalidInputError):
            fl.submit(bad)
        assert fl.info()["received"] == 0


def test_full_queue_refuses(corpus):
    X, _, model = corpus
    with FeedbackLearner(build_index(model, X, kind="exact"), queue_size=2) as fl:
        with pytest.raises(ResourceLimitError):
            fl.submit([{"query": 0, "preferred": 3, "other": 4}] * 3)


def test_snapshots_and_resume(corpus, tmp_path):
    X, _, model = corpus
    index = build_index(model, X, kind="exact")
    snap = tmp_path / "snap.npz"
    fl = FeedbackLearner(index, snapshot=snap, snapshot_every=4, snapshot_seconds=3600)
    for i in range(10):
        fl.submit({"query": i, "preferred": (i + 3) % 60, "other": (i + 1) % 60})
    fl.flush(timeout=600)
    assert snap.exists()
    assert fl.info()["snapshot"]["n_applied"] >= 4
    fl.close()  # final snapshot
    saved = BilinearSimilarity.load(snap)
    assert saved.metadata["feedback"]["n_applied"] == 10
    assert abs(saved.W - fl.model.W).max() == 0.0
    again = FeedbackLearner(index, snapshot=snap)
    try:
        assert again.info()["applied"] == 10 and again.resumed_from == str(snap)
        np.testing.assert_allclose(again.score(X[:2], [1, 2]), fl.score(X[:2], [1, 2]), atol=1e-12)
    finally:
        again.close()


def test_ask_returns_the_smallest_margins(corpus):
    X, _, model = corpus
    with FeedbackLearner(build_index(model, X, kind="exact")) as fl:
        fl.query(X[[0, 5]], 6, remember=[0, 5])
        one_each = fl.ask(4)  # default: one question per query
        assert len(one_each) == 2 and {a["query"] for a in one_each} == {0, 5}
        asked = fl.ask(4, per_query=0)
        assert len(asked) == 4
        for q in (0, 5):  # each query's one question is its smallest-margin pair
            assert min(abs(a["margin"]) for a in asked + one_each if a["query"] == q) == \
                next(abs(a["margin"]) for a in one_each if a["query"] == q)
        margins = [abs(a["margin"]) for a in asked]
        assert margins == sorted(margins)
        for a in asked:
            s = fl.score(X[a["query"]], [a["first"], a["second"]])[0]
            assert abs((s[0] - s[1]) - a["margin"]) < 1e-9
        with pytest.raises(InvalidInputError):
            fl.ask(0)


def test_drift_check_rebuilds_the_candidate_index_while_queries_answer(corpus, monkeypatch):
    """Above exact_limit the candidates come from an index built with an older model: the refresher
    measures their recall under the newest version and rebuilds them (in the background) when it
    falls below min_recall; queries answer throughout and match exhaustive scoring afterwards."""
    import sparsesim.feedback.candidates as feedback_module

    X, y, model = corpus
    slow_builds = []

    def slow_build(*args, **kwargs):  # a build long enough for queries to arrive meanwhile
        slow_builds.append(time.monotonic())
        time.sleep(0.5)
        return build_index(*args, **kwargs)

    monkeypatch.setattr(feedback_module, "build_index", slow_build)
    fl = FeedbackLearner(build_index(model, X, kind="exact"), learner=OASIS(C=0.5, compact=False), exact_limit=0,
                         candidate_pool=10, drift_check_every=1, min_recall=1.0, max_batch=8)
    answered, errors, during, stop = [], [], [], threading.Event()

    def ask_queries():
        while not stop.is_set():
            try:
                _, _, v = fl.query(X[:3], 10)
                answered.append(v)
                if fl.candidate_info["refreshing"]:
                    during.append(v)
            except Exception as exc:  # noqa: BLE001 - the test reports any failure
                errors.append(exc)

    worker = threading.Thread(target=ask_queries)
    worker.start()
    try:
        rng = np.random.default_rng(0)
        # feedback against the labels: the model changes a lot, the old candidates go stale
        for _ in range(6):
            t = [(int(a), int(rng.choice(np.flatnonzero(y != y[a]))), int(rng.choice(np.flatnonzero(y == y[a]))))
                 for a in rng.choice(60, 20)]
            fl.submit([{"query": a, "preferred": p, "other": o} for a, p, o in t if p != a and o != a])
            fl.flush(timeout=600)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            info = fl.info()["candidates"]
            if info["refreshes"] >= 1 and not info["refreshing"] and info["checked_at_version"] == fl.version:
                break
            time.sleep(0.05)
    finally:
        stop.set()
        worker.join()
    info = fl.info()["candidates"]
    assert not errors
    assert slow_builds and info["refreshes"] >= 1
    assert info["recall_before_refresh"] < 1.0 <= info["recall"] + 1e-12
    assert during, "no query was answered while the candidate index was rebuilt"
    assert fl._candidates is not fl.index and info["built_from_version"] >= 1
    # rebuilt from the newest version, the candidates give the exhaustive top-k
    assert fl.refresh_candidates()["built_from_version"] == fl.version
    ids, scores, _ = fl.query(X[:5], 10)
    exact = fl.model.score_matrix(X[:5], X)
    np.testing.assert_allclose(scores, -np.sort(-exact, axis=1)[:, :10], atol=1e-9)
    fl.close()


def test_model_version_is_base_plus_factors(corpus):
    from sparsesim.feedback import ModelVersion

    X, _, model = corpus
    rng = np.random.default_rng(0)
    A = sp.random(4, 30, density=0.3, random_state=1, format="csr")
    B = sp.random(4, 30, density=0.3, random_state=2, format="csr")
    v = ModelVersion(0, model).with_updates(1, A[:2], B[:2]).with_updates(2, A[2:], B[2:])
    assert v.number == 2 and v.n_pending == 4
    expect = BilinearSimilarity(model.W + A.T @ B)
    Q = X[rng.choice(60, 5)]
    np.testing.assert_allclose(v.transform_queries(Q).toarray(), expect.transform_queries(Q).toarray(), atol=1e-12)
    np.testing.assert_allclose(v.dense_query(Q[:1]), expect.transform_queries(Q[:1]).toarray().ravel(), atol=1e-12)
    assert abs(v.model().W - expect.W).max() < 1e-12
    folded = v.rebased()
    assert folded.number == 2 and folded.n_pending == 0 and folded.base is v.model()


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_drift_refresh_rebuilds_an_ann_candidate_index():
    """An ann candidate stage is rebuilt with its own kind and parameters; its recall under the
    newest model recovers."""
    from sparsesim.indexes import AnnIndex

    X = sp.random(200, 40, density=0.2, random_state=0, format="csr")
    y = np.arange(200) % 3
    model = OASIS(C=0.5, n_triplets=200, random_state=0).fit(X, y).model_
    index = build_index(model, X, kind="ann", dim=8)
    with FeedbackLearner(index, learner=OASIS(C=0.5), exact_limit=0, candidate_pool=20,
                         drift_check_every=10 ** 9, min_recall=1.0) as fl:
        rng = np.random.default_rng(0)
        t = [(int(a), int(rng.choice(np.flatnonzero(y != y[a]))), int(rng.choice(np.flatnonzero(y == y[a]))))
             for a in rng.choice(200, 100)]  # against the labels: the model moves far
        fl.submit([{"query": a, "preferred": p, "other": o} for a, p, o in t if o != a])
        fl.flush(timeout=600)
        info = fl.check_candidates()
        assert info["refreshes"] == 1 and info["recall"] > info["recall_before_refresh"]
        fresh = fl._candidates
        assert isinstance(fresh, AnnIndex) and fresh is not index and fresh.params() == index.params()
        assert abs(fresh.model.W - fl.model.W).max() == 0.0
