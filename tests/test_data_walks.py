"""The data walks decide, convert and check each value once (docs/architecture.md, "Data walks").

Each test counts the calls of a check on one walk with a counting wrapper, so a second check of
the same value added later fails here; and the OASIS step the feedback versions use is the one
the engine took (not recomputed beside it).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.feedback import FeedbackLearner
from sparsesim.indexes import build_index
from sparsesim.learners.bilinear import OASIS, SORS


@pytest.fixture(scope="module")
def corpus():
    X = sp.random(40, 20, density=0.25, random_state=3, format="csr")
    y = np.arange(40) % 2
    model = OASIS(C=0.5, n_triplets=100, random_state=0).fit(X, y).model_
    return X, y, model


def counting(monkeypatch, module, name):
    """Replace ``module.name`` by a wrapper that counts its calls; returns the list of call args."""
    real = getattr(module, name)
    calls = []

    def wrapper(*args, **kwargs):
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return calls


def test_the_engine_returns_each_oasis_step(corpus):
    """``last_steps_`` holds tau = min(C, loss / (||x||^2 ||x+ - x-||^2)) of every triplet with a
    loss and 0 for the others: what the feedback versions' factors need, taken from the update."""
    X, y, _ = corpus
    est = OASIS(C=0.05, n_triplets=50, random_state=1, compact=False).fit(X, y)
    rng = np.random.default_rng(0)
    triplets = np.array([[a, int(rng.choice(np.flatnonzero(y == y[a]))), int(rng.choice(np.flatnonzero(y != y[a])))]
                         for a in rng.choice(40, 30)])
    est.partial_fit_triplets(X, triplets)
    losses, steps = est.last_losses_, est.last_steps_
    assert steps.shape == (30,) and (losses > 0).any()
    z = X[triplets[:, 1]] - X[triplets[:, 2]]
    denom = np.asarray(X[triplets[:, 0]].multiply(X[triplets[:, 0]]).sum(1)).ravel() * \
        np.asarray(z.multiply(z).sum(1)).ravel()
    expect = np.where(losses > 0, np.minimum(0.05, losses / np.where(denom > 0, denom, 1.0)), 0.0)
    np.testing.assert_allclose(steps, expect, rtol=1e-12, atol=0)
    assert (steps[losses > 0] > 0).all() and (steps[losses == 0] == 0).all()


def test_sors_steps_are_the_signs_of_its_updates(corpus):
    """SORS and AdaSORS scale every update by its sign (their step size is the schedule's)."""
    X, y, _ = corpus
    est = SORS(lam=1e-4, eta=0.1, n_triplets=50, random_state=1).fit(X, y)
    est.partial_fit_triplets(X, np.array([[0, 2, 1], [1, 3, 0], [4, 6, 5]]), signs=np.array([1.0, -1.0, 1.0]))
    updated = est.last_losses_ > 0
    np.testing.assert_array_equal(est.last_steps_[updated], np.array([1.0, -1.0, 1.0])[updated])
    assert (est.last_steps_[~updated] == 0).all()


def test_the_feedback_walk_checks_a_vector_query_once(corpus, monkeypatch):
    """POST /feedback -> snapshot: a vector query is checked entry by entry when the record is read
    (records.py builds it in canonical form without a second check); the stacked batch (those
    rows and stored corpus rows) goes to the learner's ``partial_fit_triplets`` as
    ``CheckedRows``, not checked again; the versions take the engine's steps."""
    import sparsesim.feedback.learner as feedback_learner
    import sparsesim.feedback.records as records
    import sparsesim.learners.base as learner_base
    import sparsesim.validation.settings as settings

    X, _, model = corpus
    index = build_index(model, X, kind="exact")
    assert not hasattr(records, "check_csr")  # the record reader does not import the CSR check at all
    csr_checks = [counting(monkeypatch, module, "check_csr") for module in (learner_base, settings)]
    batches = counting(monkeypatch, learner_base, "rows_of")
    norm_checks = counting(monkeypatch, records, "is_finite_number")
    factors = counting(monkeypatch, feedback_learner, "oasis_factors")
    with FeedbackLearner(index, learner=OASIS(C=0.5, compact=False), max_batch=64) as fl:
        before_start = [len(c) for c in csr_checks]
        fl.submit([{"query": {"indices": [1, 7, 7], "values": [1.0, 2.0, 0.5]}, "preferred": 11, "other": 12},
                   {"query": 0, "preferred": 3, "other": 4}])
        fl.flush(timeout=120)
        assert [len(c) for c in csr_checks] == before_start  # the batch's rows are not checked again
        assert len(batches) == 1 and isinstance(batches[0][0][0], feedback_learner.CheckedRows)
        assert len(norm_checks) == 3  # each value of the vector once
        assert len(factors) == 1
        Q, Z, steps = factors[0][0]
        np.testing.assert_array_equal(steps, fl.learner.last_steps_)  # the engine's steps, as taken
        assert Q[0, 7] == 2.5 and Q[0].nnz == 2  # duplicates summed in the one conversion
        assert abs(fl.model.W - fl.learner.model_.W).max() < 1e-12
    # a library caller's raw rows are checked once, by partial_fit_triplets; checked rows of
    # another width are refused with the check's own message
    est = OASIS(C=0.5, n_triplets=10, random_state=0, compact=False).fit(X, corpus[1])
    before = len(csr_checks[1])
    est.partial_fit_triplets(X[:6], np.array([[0, 1, 2]]))
    assert len(csr_checks[1]) == before + 1
    from sparsesim.exceptions import InvalidInputError
    from sparsesim.validation import check_rows

    with pytest.raises(InvalidInputError, match="X has 5 features but 20 are expected"):
        est.partial_fit_triplets(check_rows(X[:6, :5]), np.array([[0, 1, 2]]))


def test_cli_param_values_are_range_checked_once(monkeypatch):
    """`train` / `tune`: ``--param`` values are range-checked by ``fast_param_values`` (before any
    import of the library), which hands them on checked; ``algorithm_params`` then only resolves
    the names (and keeps what was checked)."""
    import sparsesim.validation.specs as specs
    from sparsesim.cli import checks

    calls = counting(monkeypatch, specs, "check_param")
    params = {"c": 1, "n_triplets": 100, "sampler": "uniform"}
    values = checks.fast_param_values(params)
    assert [args[1] for args, _ in calls] == ["C", "n_triplets"]  # the shared ones, by their names
    assert dict(values) == params and values.checked["c"][1] == 1.0 and type(values["c"]) is int  # values as given
    resolved = checks.algorithm_params("oasis", values)
    assert dict(resolved) == {"C": 1, "n_triplets": 100, "sampler": "uniform"}
    assert set(resolved.checked) == {"C", "n_triplets"} and resolved.checked["C"] == values.checked["c"]
    assert len(calls) == 2
    assert checks.fast_param_values({"C": "auto"}).checked == {}  # "auto" is the learner's to resolve


def _checks_by_name(monkeypatch):
    """Count every value check (:func:`sparsesim.validation.check_param`, the one per-value check
    of the specs, the train settings and the CLI) by the name it checks."""
    import sparsesim.validation.settings as settings
    import sparsesim.validation.specs as specs

    names = []
    real = specs.check_param

    def wrapper(value, name, entry):
        names.append(name)
        return real(value, name, entry)

    for module in (specs, settings):
        monkeypatch.setattr(module, "check_param", wrapper)
    return names


def test_train_walk_checks_triplets_seed_and_params_once(tmp_path, monkeypatch, capsys):
    """`sparsesim train ... -n N --seed S -p C=...`: the CLI checks ``--triplets``, ``--seed`` and
    the ``--param`` values before the library is imported and hands them on checked; the
    estimator's ``fit`` does not check them again (its other parameters it checks, once). The
    model is the one a library caller's raw values give, bit for bit."""
    from sparsesim.workflows import train_model
    from clitools import run_cli

    names = _checks_by_name(monkeypatch)
    code, _, err = run_cli(["train", "-a", "oasis", "-d", "news20-sample", "-o", tmp_path / "a.npz", "-n", "150",
                            "--seed", "3", "-p", "C=0.5", "-p", "sampler=uniform", "--json"], monkeypatch, capsys)
    assert code == 0, err
    checked = {"--triplets": 1, "--seed": 1, "C": 1}
    assert {name: names.count(name) for name in checked} == checked
    assert "n_triplets" not in names and "random_state" not in names  # fit takes them as they are
    assert names.count("--train-fraction") == 1
    assert len(names) == len(set(names))  # and every other value is checked once too
    # a library caller's raw values: the settings by train_model, C by fit; each once
    names.clear()
    train_model("oasis", "news20-sample", tmp_path / "b.npz", n_triplets=150, seed=3, params={"C": 0.5,
                "sampler": "uniform"})
    assert {name: names.count(name) for name in checked} == checked and len(names) == len(set(names))
    a, b = np.load(tmp_path / "a.npz", allow_pickle=False), np.load(tmp_path / "b.npz", allow_pickle=False)
    assert a.files == b.files
    for key in a.files:  # the same model (the JSON metadata holds the path and the time)
        if a[key].dtype.kind in "fi":
            np.testing.assert_array_equal(a[key], b[key])


def test_bilinear_steps_are_checked_once_on_the_train_walk(tmp_path, monkeypatch, capsys):
    """SORS's ``eta``/``lam`` and AdaSORS's ``delta`` given with ``-p`` are checked once (by the
    CLI); the learners' ``"auto"`` rule only resolves what ``check_params`` accepted."""
    import sparsesim.defaults as defaults
    import sparsesim.learners.bilinear  # noqa: F401  (the learners' modules loaded, so their names are patched)
    from clitools import run_cli

    names = _checks_by_name(monkeypatch)
    rule = []
    real_rule = defaults.check_auto_positive
    for module in [m for m in list(sys.modules.values()) if getattr(m, "check_auto_positive", None) is real_rule]:
        monkeypatch.setattr(module, "check_auto_positive", lambda *a, **k: rule.append(a[0]) or real_rule(*a, **k))
    for algorithm, params in [("sors-l1", ["eta=0.5", "lam=1e-6"]), ("adasors-l1", ["eta=0.5", "delta=0.1"]),
                              ("oasis", ["C=0.5"])]:
        names.clear()
        args = [x for p in params for x in ("-p", p)]
        code, _, err = run_cli(["train", "-a", algorithm, "-d", "news20-sample", "-o", tmp_path / f"{algorithm}.npz",
                                "-n", "100", *args], monkeypatch, capsys)
        assert code == 0, err
        given = [p.split("=")[0] for p in params]
        assert {name: names.count(name) for name in given} == dict.fromkeys(given, 1), (algorithm, names)
    assert rule == []


def test_cli_refusals_are_unchanged(tmp_path, monkeypatch, capsys):
    """Each refused value gets the one message it had, from the CLI, before the data is read."""
    import sparsesim.workflows.models as models_mod
    from clitools import run_cli

    reads = counting(monkeypatch, models_mod, "load_labelled")
    for args, message in [(["-n", "0"], "--triplets must be an integer in [1, inf), got 0"),
                          (["-n", "-5"], "--triplets must be an integer in [1, inf), got -5"),
                          (["--seed", "-1"], "--seed must be an integer in [0, 4294967295], got -1"),
                          (["-p", "C=-1"], "C must be positive (a finite number in (0, inf)), got -1.0"),
                          (["-p", "c=0"], "C must be positive (a finite number in (0, inf)), got 0.0"),
                          (["-p", "n_triplets=-2"], "n_triplets must be an integer in [0, inf), got -2")]:
        code, _, err = run_cli(["train", "-a", "oasis", "-d", "news20-sample", "-o", tmp_path / "m.npz", *args],
                               monkeypatch, capsys)
        assert (code, err) == (2, f"error: {message}\n")
    assert reads == []


def test_fit_checks_what_set_params_changed():
    """scikit-learn's contract holds for library callers: ``fit`` checks every parameter value it
    did not check before, so a value changed by ``set_params`` (or set by hand) after a check is
    checked at the next ``fit``; an unchanged one is not checked twice."""
    from sparsesim.exceptions import InvalidParameterError
    from sparsesim.validation import check_param_values, check_train_settings, record_checked

    X = sp.random(30, 10, density=0.3, random_state=0, format="csr")
    y = np.arange(30) % 3
    names = []
    import sparsesim.validation.specs as specs

    real = specs.check_param
    specs.check_param = lambda value, name, entry: names.append(name) or real(value, name, entry)
    try:
        est = OASIS(C=0.5, n_triplets=40, random_state=1)
        record_checked(est, check_train_settings(40, seed=1).estimator_params())
        record_checked(est, check_param_values({"C": 0.5}, {"C": ("float", 0, None, {"low_open": True})}))
        names.clear()
        est.fit(X, y)
        assert not {"C", "n_triplets", "random_state"} & set(names)  # handed on checked
        est.set_params(C=-1.0)
        with pytest.raises(InvalidParameterError, match="C must be positive"):
            est.fit(X, y)
        est.set_params(C=0.25, n_triplets=-3)
        with pytest.raises(InvalidParameterError, match=r"n_triplets must be an integer in \[0, inf\), got -3"):
            est.fit(X, y)
        est.n_triplets = 2.5  # set by hand, not through set_params: the same
        with pytest.raises(InvalidParameterError, match="n_triplets must be an integer"):
            est.fit(X, y)
        est.set_params(n_triplets=40, random_state=np.int64(1))  # 40 passed before; an np.int64 seed did not
        names.clear()
        est.fit(X, y)
        assert names.count("random_state") == 1 and names.count("n_triplets") == 0
        names.clear()
        est.fit(X, y)  # nothing changed: nothing checked again
        assert not {"C", "n_triplets", "random_state"} & set(names)
        # a value checked against another range is not taken: the estimator's own entry decides
        other = OASIS(C=0.5)
        record_checked(other, check_param_values({"C": 0.5}, {"C": ("float", 0, 1)}))
        names.clear()
        other.set_params(n_triplets=20).fit(X, y)
        assert names.count("C") == 1
    finally:
        specs.check_param = real
    # same seed, same model whether the values were handed on checked or checked by fit
    plain = OASIS(C=0.25, n_triplets=40, random_state=1).fit(X, y)
    np.testing.assert_array_equal(est.model_.W.toarray(), plain.model_.W.toarray())


@pytest.mark.parametrize("own", [False, True])
def test_train_decides_path_or_name_once(own, tmp_path, monkeypatch):
    """`train_model` asks ``is_data_path`` once and hands the answer to the output-path check, the
    reading options and the reader (registered name and own file alike)."""
    import sparsesim.data as data_pkg
    from sparsesim.data import load_dataset
    from sparsesim.workflows import train_model

    dataset = "news20-sample"
    if own:
        from sklearn.datasets import dump_svmlight_file

        sample = load_dataset("news20-sample")
        dataset = str(tmp_path / "sample.svm")
        dump_svmlight_file(sample.X, sample.y, dataset, zero_based=True)
    calls = []
    real = data_pkg.is_data_path  # the one rule; data_source (workflows, CLI) asks it
    monkeypatch.setattr(data_pkg, "is_data_path", lambda name: calls.append(name) or real(name))
    summary = train_model("oasis", dataset, tmp_path / "m.npz", n_triplets=200, seed=0)
    assert summary["n_train"] > 0 and (tmp_path / "m.npz").is_file()
    assert calls == [dataset]


@pytest.mark.parametrize("own", [False, True])
def test_cli_train_decides_path_or_name_once(own, tmp_path, monkeypatch, capsys):
    """On `sparsesim train -d DATASET` the CLI decides path-or-name (to spell a registered name
    before the library is imported) and hands the answer on: ``is_data_path`` runs once."""
    import sparsesim.data as data_pkg
    from clitools import run_cli

    dataset = "News20-Sample"
    if own:
        from sklearn.datasets import dump_svmlight_file

        sample = data_pkg.load_dataset("news20-sample")
        dataset = str(tmp_path / "sample.svm")
        dump_svmlight_file(sample.X, sample.y, dataset, zero_based=True)
    calls = []
    real = data_pkg.is_data_path
    monkeypatch.setattr(data_pkg, "is_data_path", lambda name: calls.append(str(name)) or real(name))
    code, _, err = run_cli(["train", "-a", "oasis", "-d", dataset, "-o", tmp_path / "m.npz", "-n", "100"],
                           monkeypatch, capsys)
    assert code == 0, err
    assert calls == [dataset]


def test_feedback_refuses_a_learner_that_cannot_continue(corpus):
    """Only the bilinear learners continue from a saved model (declared by their class, not probed)."""
    from sparsesim.exceptions import InvalidInputError
    from sparsesim.registry import make_estimator

    X, _, model = corpus
    with pytest.raises(InvalidInputError, match=r"cannot continue from a saved model \(no start_from\); use oasis"):
        FeedbackLearner(build_index(model, X, kind="exact"), learner=make_estimator("dot"))


def test_ann_search_options_are_resolved_by_one_rule(corpus):
    """An ann index's search options are checked and converted by one function
    (``ann_query.resolved_setting``): ``search_metadata`` reports the setting the query uses, and
    a value that is not a number is the project's error in both (it was a bare ValueError)."""
    from sparsesim.exceptions import InvalidInputError

    X, _, model = corpus
    index = build_index(model, X, kind="ann", dim=4)
    meta = index.search_metadata(nprobe=2, n_postings=3)
    assert meta["setting"]["nprobe"] == 2 and meta["setting"]["n_postings"] == 3
    assert meta["overridden"] == ["n_postings", "nprobe"]
    for call in (lambda: index.search_metadata(nprobe="abc"), lambda: index.query(X[:2], 3, nprobe="abc")):
        with pytest.raises(InvalidInputError, match="nprobe must be an integer, got 'abc'"):
            call()
    for call in (lambda: index.search_metadata(sparse_pool=-1), lambda: index.query(X[:2], 3, sparse_pool=-1)):
        with pytest.raises(InvalidInputError, match="pool sizes and n_postings must be >= 0"):
            call()
    with pytest.raises(InvalidInputError, match="unknown option"):
        index.search_metadata(k=3)


def test_search_options_are_checked_once_on_the_query_walk(corpus, monkeypatch):
    """`query --index --param ...`: the report (``search_metadata``) and the query use one checked
    setting; the options are checked once, and again only when they or the index's setting change."""
    from sparsesim.indexes import ann_query

    X, _, model = corpus
    index = build_index(model, X, kind="ann", target_recall=None)
    calls = []
    real = ann_query.checked_setting
    monkeypatch.setattr(ann_query, "checked_setting", lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    meta = index.search_metadata(n_postings=3, sparse_pool=20)
    index.query(X[:2], 3, n_postings=3, sparse_pool=20)
    assert meta["setting"]["n_postings"] == 3 and len(calls) == 1
    index.query(X[:2], 3, n_postings=4, sparse_pool=20)  # other options: checked
    assert len(calls) == 2
    index.sparse_pool = 10  # the index's own setting changed: checked again
    index.query(X[:2], 3, n_postings=4)
    assert len(calls) == 3


def test_train_settings_are_checked_once_on_each_walk(tmp_path, monkeypatch, capsys):
    """`sparsesim train`: ``--triplets``/``--seed``/``--train-fraction`` are checked once, by the
    CLI before the library is imported, into the ``TrainSettings`` that ``train_model`` takes as it
    is; a library caller's raw values are checked once, by ``train_model``."""
    import sparsesim.workflows.models as models_mod
    from sparsesim.cli import checks
    from sparsesim.exceptions import InvalidInputError
    from sparsesim.validation import check_train_settings
    from clitools import run_cli

    cli_calls = counting(monkeypatch, checks, "check_train_settings")
    lib_calls = counting(monkeypatch, models_mod, "check_train_settings")
    code, _, err = run_cli(["train", "-a", "oasis", "-d", "news20-sample", "-o", tmp_path / "a.npz",
                            "-n", "150", "--seed", "3", "--train-fraction", "0.6", "--json"], monkeypatch, capsys)
    assert code == 0, err
    assert (len(cli_calls), len(lib_calls)) == (1, 0)
    summary = models_mod.train_model("oasis", "news20-sample", tmp_path / "b.npz", n_triplets=150, seed=3,
                                     train_fraction=0.6)
    assert (len(cli_calls), len(lib_calls)) == (1, 1)
    assert summary["n_triplets"] == 150
    a, b = np.load(tmp_path / "a.npz", allow_pickle=False), np.load(tmp_path / "b.npz", allow_pickle=False)
    for key in a.files:  # the same run by either walk (same seed, same model)
        if a[key].dtype.kind in "fi":  # the arrays (the JSON metadata holds the path and the time)
            np.testing.assert_array_equal(a[key], b[key])
    with pytest.raises(InvalidInputError, match="either as values or in settings, not both"):
        models_mod.train_model("oasis", "news20-sample", tmp_path / "c.npz", n_triplets=10,
                               settings=check_train_settings(150))
    code, _, err = run_cli(["train", "-a", "oasis", "-d", "news20-sample", "-o", tmp_path / "d.npz",
                            "--train-fraction", "1"], monkeypatch, capsys)
    assert code == 2 and err == "error: --train-fraction must be a number in (0, 1), got 1.0\n"


def test_learning_query_checks_vectors_and_top_k_once(corpus, tmp_path, monkeypatch):
    """`POST /query` on a `serve --learn` server: the request parser checks the vectors and
    ``top_k`` once into ``CheckedQueries``, which the feedback learner uses as it is; a library
    caller's raw rows and ``top_k`` are checked once, by the learner."""
    pytest.importorskip("starlette", reason="the service needs the [serve] extra")
    pytest.importorskip("httpx", reason="the test client needs httpx")
    from starlette.testclient import TestClient

    import sparsesim.feedback.learner as feedback_learner
    from sparsesim.exceptions import InvalidInputError
    from sparsesim.service import QueryService, create_app
    from sparsesim.validation import check_queries

    X, _, model = corpus
    build_index(model, X, kind="exact").save(tmp_path / "idx")
    checks = counting(monkeypatch, feedback_learner, "check_queries")
    service = QueryService(tmp_path / "idx", learn={"snapshot": tmp_path / "snap.npz"})
    try:
        with TestClient(create_app(service)) as client:
            r = client.post("/query", json={"vectors": [{"indices": [3, 1, 3], "values": [1.0, 2.0, 0.5]}], "top_k": 4})
            assert r.status_code == 200, r.text
            assert len(checks) == 0  # the parser's check only
            hits = r.json()["results"][0]
            q = sp.csr_matrix((np.array([2.0, 1.5]), np.array([1, 3]), np.array([0, 2])), shape=(1, X.shape[1]))
            ids, scores, _ = service.feedback.query(q, 4)  # a library caller: checked once, here
            assert len(checks) == 1
            assert [h["id"] for h in hits] == [int(i) for i in ids[0]]
            np.testing.assert_allclose([h["score"] for h in hits], scores[0], rtol=1e-12)
            r = client.post("/query", json={"vectors": [{"indices": [1], "values": [1.0]}], "top_k": 41})
            assert r.status_code == 422 and "top_k must be between 1 and 40" in r.json()["error"]
            with pytest.raises(InvalidInputError, match="top_k"):
                service.feedback.query(q, 41)
            with pytest.raises(InvalidInputError, match="not both"):
                service.feedback.query(check_queries(q, 4, X.shape[1], 40), 4)
    finally:
        service.close()


def test_tune_takes_the_same_checked_settings(tmp_path, monkeypatch, capsys):
    """`sparsesim tune` builds the same ``TrainSettings`` before the library is imported and
    ``tune_model`` takes it as it is; a library caller's values are checked by ``tune_model``,
    before any data is read."""
    import sparsesim.workflows.models as models_mod
    from sparsesim.cli import checks
    from sparsesim.exceptions import InvalidParameterError
    from clitools import run_cli

    cli_calls = counting(monkeypatch, checks, "check_train_settings")
    lib_calls = counting(monkeypatch, models_mod, "check_train_settings")
    reads = counting(monkeypatch, models_mod, "load_labelled")
    code, _, err = run_cli(["tune", "-a", "oasis", "-d", "news20-sample", "-o", tmp_path / "t.npz", "-n", "400",
                            "--grid", "C=0.1,1", "--json"], monkeypatch, capsys)
    assert code == 0, err
    assert (len(cli_calls), len(lib_calls), len(reads)) == (1, 0, 1)
    with pytest.raises(InvalidParameterError, match=r"--train-fraction must be a number in \(0, 1\), got 1.5"):
        models_mod.tune_model("oasis", "news20-sample", tmp_path / "u.npz", n_triplets=400, train_fraction=1.5)
    assert (len(lib_calls), len(reads)) == (1, 1)


TEXTS = ["the striker scored a late goal", "the keeper saved the penalty", "a goal in extra time won the cup",
         "the new phone has a faster chip", "the laptop battery lasts all day", "a chip maker opened a new plant",
         "simmer the tomato sauce slowly", "add basil to the pasta sauce", "bake the bread for an hour"]


@pytest.fixture(scope="module")
def text_index(tmp_path_factory):
    """An index directory over nine texts, served with a model that reads text."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import make_pipeline

    from sparsesim.models import BilinearSimilarity

    pipe = make_pipeline(TfidfVectorizer(), OASIS(n_triplets=300, random_state=0)).fit(TEXTS, np.repeat([0, 1, 2], 3))
    model = BilinearSimilarity.from_pipeline(pipe)
    path = tmp_path_factory.mktemp("walks") / "idx"
    build_index(model, model.transform(TEXTS)).save(path)
    return path


def test_query_index_checks_top_k_once(text_index, monkeypatch, capsys):
    """`sparsesim query --index DIR --text T -k K`: the CLI checks that K is an integer >= 1 once,
    before loading, into a ``CheckedTopK``; the index compares it with its size only. A library
    caller's plain ``top_k`` is checked whole by the index, once."""
    import json

    import sparsesim.indexes.base as index_base
    from sparsesim.cli import checks
    from sparsesim.exceptions import InvalidInputError
    from sparsesim.validation import CheckedTopK
    from sparsesim.workflows import query_index
    from clitools import run_cli

    cli_checks = counting(monkeypatch, checks, "check_top_k_value")
    index_checks = counting(monkeypatch, index_base, "check_top_k")
    code, out, err = run_cli(["query", "--index", text_index, "--text", "tomato pasta sauce", "-k", "3", "--json"],
                             monkeypatch, capsys)
    assert code == 0, err
    assert len(cli_checks) == 1 and len(index_checks) == 1
    assert isinstance(index_checks[0][0][0], CheckedTopK)  # the index checks its size bound only
    hits = [h["id"] for h in json.loads(out)["results"]]
    records = query_index(text_index, texts=["tomato pasta sauce"], top_k=3)  # a library caller
    assert len(index_checks) == 2 and type(index_checks[1][0][0]) is int
    assert [h["id"] for h in records[0]["results"]] == hits
    # the same refusals as before, each from the one place that checks it
    code, _, err = run_cli(["query", "--index", text_index, "--text", "x", "-k", "0"], monkeypatch, capsys)
    assert (code, err) == (2, "error: --top-k must be an integer in [1, inf), got 0\n")
    assert len(index_checks) == 2  # refused before the index was opened
    code, _, err = run_cli(["query", "--index", text_index, "--text", "x", "-k", "10"], monkeypatch, capsys)
    assert (code, err) == (2, "error: top_k=10 is larger than the index (9 documents)\n")
    with pytest.raises(InvalidInputError, match="top_k must be a positive integer, got 0"):
        query_index(text_index, texts=["x"], top_k=0)


def test_learning_query_beyond_exact_limit_checks_rows_once(corpus, monkeypatch):
    """A learning index above ``exact_limit`` answers from its candidate index re-ranked exactly:
    the candidate index takes the checked rows and the pool size as they are."""
    import sparsesim.indexes.base as index_base
    import sparsesim.validation.settings as settings
    from sparsesim.validation import CheckedTopK, check_queries

    X, _, model = corpus
    with FeedbackLearner(build_index(model, X, kind="exact"), learner=OASIS(C=0.5, compact=False), exact_limit=10,
                         candidate_pool=25, drift_check_every=10**6) as fl:
        row_checks = counting(monkeypatch, settings, "check_csr")
        k_checks = counting(monkeypatch, index_base, "check_top_k")
        checked = check_queries(X[:3], 4, X.shape[1], X.shape[0])
        ids, scores, _ = fl.query(checked)
        assert len(row_checks) == 1  # check_queries only: not again by the candidate index
        assert len(k_checks) == 1 and k_checks[0][0][0] == 25 and isinstance(k_checks[0][0][0], CheckedTopK)
        raw_ids, raw_scores, _ = fl.query(X[:3], 4)  # a library caller's raw rows: checked once, by the learner
        assert len(row_checks) == 2
        np.testing.assert_array_equal(np.asarray(ids), np.asarray(raw_ids))
        np.testing.assert_array_equal(scores, raw_scores)
        exact_rows, exact_scores = fl._top_rows(fl._published, checked.rows, 4, exact=True)
        np.testing.assert_allclose(scores, exact_scores, rtol=1e-12)  # a pool of 25 of 40 finds these


def test_plain_query_service_checks_once(corpus, tmp_path, monkeypatch):
    """`POST /query` on a server that does not learn: the request parser's ``CheckedQueries`` goes
    to the index as it is (rows not checked again, ``top_k`` compared with the index's size)."""
    pytest.importorskip("starlette", reason="the service needs the [serve] extra")
    pytest.importorskip("httpx", reason="the test client needs httpx")
    from starlette.testclient import TestClient

    import sparsesim.indexes.base as index_base
    import sparsesim.validation.settings as settings
    from sparsesim.service import QueryService, create_app
    from sparsesim.validation import CheckedTopK

    X, _, model = corpus
    index = build_index(model, X, kind="exact")
    index.save(tmp_path / "idx")
    row_checks = counting(monkeypatch, settings, "check_csr")
    service = QueryService(tmp_path / "idx")
    try:
        with TestClient(create_app(service)) as client:
            k_checks = counting(monkeypatch, index_base, "check_top_k")
            before = len(row_checks)
            r = client.post("/query", json={"vectors": [{"indices": [3, 1, 3], "values": [1.0, 2.0, 0.5]}], "top_k": 4})
            assert r.status_code == 200, r.text
            assert len(row_checks) == before
            assert len(k_checks) == 1 and isinstance(k_checks[0][0][0], CheckedTopK)
            q = sp.csr_matrix((np.array([2.0, 1.5]), np.array([1, 3]), np.array([0, 2])), shape=(1, X.shape[1]))
            ids, scores = index.query(q, 4)
            assert [h["id"] for h in r.json()["results"][0]] == [int(i) for i in ids[0]]
            r = client.post("/query", json={"vectors": [{"indices": [2, 2], "values": [1e308, 1e308]}]})
            assert r.status_code == 422 and "summing duplicate entries overflows" in r.json()["error"]
    finally:
        service.close()


def test_model_metadata_fields_are_each_decided_once(tmp_path, monkeypatch):
    """`sparsesim train`: the model's metadata comes from two builders with no field in common
    (the estimator's export: what was learned; ``training_metadata``: the data and the split),
    each called once."""
    import sparsesim.workflows.models as models_mod
    from sparsesim.models import BilinearSimilarity

    seen = []
    real = models_mod.record_training

    def record(model, data, meta):
        seen.append((set(model.metadata), set(meta)))
        return real(model, data, meta)

    monkeypatch.setattr(models_mod, "record_training", record)
    built = counting(monkeypatch, models_mod, "training_metadata")
    models_mod.train_model("oasis", "news20-sample", tmp_path / "m.npz", n_triplets=150, seed=0)
    assert len(built) == 1 and len(seen) == 1
    learned, data_facts = seen[0]
    assert {"algorithm", "params", "resolved_params"} <= learned and {"dataset", "split_seed", "n_train"} <= data_facts
    assert not learned & data_facts
    assert learned | data_facts <= set(BilinearSimilarity.load(tmp_path / "m.npz").metadata)


def test_no_feature_probes_above_indexes():
    """Workflows, the service, the feedback learner and the CLI read the declared surfaces of the
    index and estimator contracts: no ``hasattr`` and no ``getattr`` with a default there."""
    import ast
    from pathlib import Path

    import sparsesim
    import sparsesim.cli

    root = Path(sparsesim.__file__).parent
    files = [*root.glob("workflows/*.py"), *root.glob("service/*.py"), *root.glob("feedback/*.py"),
             *Path(sparsesim.cli.__file__).parent.glob("*.py")]
    assert len(files) > 20
    probes = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and (
                    node.func.id == "hasattr" or (node.func.id == "getattr" and len(node.args) == 3)):
                probes.append(f"{path.name}:{node.lineno}")
    assert probes == []
