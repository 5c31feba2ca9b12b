"""The open-set protocol (`experiment --option unseen_classes=F`) and class-disjoint validation in `tune`."""

import json

import numpy as np
import pytest

from clitools import run_cli
from sparsesim.data import load_dataset
from sparsesim.evaluation import evaluate_retrieval
from sparsesim.exceptions import InvalidInputError
from sparsesim.experiments.sors import run_one
from sparsesim.registry import make_estimator
from sparsesim.triplets import class_split, stratified_split
from sparsesim.tuning import tune_similarity


def test_class_split_is_seeded_disjoint_and_complete():
    y = np.repeat(np.arange(10), 3)
    seen, unseen = class_split(y, 0.5, seed=4)
    assert len(seen) == len(unseen) == 5 and set(seen) | set(unseen) == set(range(10)) and not set(seen) & set(unseen)
    again = class_split(y, 0.5, seed=4)
    assert np.array_equal(again[1], unseen)
    assert any(not np.array_equal(class_split(y, 0.5, seed=s)[1], unseen) for s in range(5, 10))
    assert len(class_split(y, 0.3, seed=0)[1]) == 3
    for bad in (0.0, 1.0, 1.5, 0.1, 0.95, True):
        with pytest.raises(InvalidInputError):
            class_split(y, bad, seed=0)


def _open_rows(y, seed, fraction=0.5):
    train, test = stratified_split(y, 0.7, seed=seed)
    seen, unseen = class_split(y, fraction, seed=seed)
    return train[np.isin(y[train], seen)], test[np.isin(y[test], unseen)], seen, unseen


@pytest.mark.parametrize("algorithm", ["cosine", "logreg-proba", "oasis"])
def test_open_set_run_learns_on_seen_and_scores_unseen(algorithm):
    data = load_dataset("news20-sample")
    row = run_one("news20-sample", algorithm, 1, 300, {}, unseen_classes=0.5)
    train, test, seen, unseen = _open_rows(data.y, 1)
    assert row["open_set"]["unseen_classes"] == unseen.tolist() and row["open_set"]["seen_classes"] == seen.tolist()
    assert (row["n_train"], row["n_test"]) == (train.size, test.size)
    params = {"n_triplets": 300, "random_state": 1} if algorithm == "oasis" else {"random_state": 1} \
        if algorithm != "cosine" else {}
    est = make_estimator(algorithm, **params).fit(data.X[train], data.y[train])
    if algorithm == "logreg-proba":  # the classifier never saw an unseen class
        assert est.model_.metadata["classes"] == seen.tolist()
    want = evaluate_retrieval(est.model_.scorer(data.X[test]), data.y[test])
    assert row["map"] == pytest.approx(want["map"], abs=1e-12)
    assert row["ap@10"] == pytest.approx(want["ap@10"], abs=1e-12)
    closed = run_one("news20-sample", algorithm, 1, 300, {})
    assert "open_set" not in closed and closed["n_test"] > row["n_test"]


def test_open_set_experiment_cli(monkeypatch, capsys):
    code, out, err = run_cli(["experiment", "--dataset", "news20-sample", "--algorithms", "cosine,lsa",
                              "--seeds", "0,1", "--option", "unseen_classes=0.5", "--json"], monkeypatch, capsys)
    assert code == 0, err
    report = json.loads(out)
    assert report["unseen_classes"] == 0.5
    splits = {r["seed"]: tuple(r["open_set"]["unseen_classes"]) for r in report["results"]}
    assert len(set(splits.values())) == 2  # each seed draws its own class split
    code, out, err = run_cli(["experiment", "--dataset", "news20-sample", "--algorithms", "cosine",
                              "--seeds", "0", "--option", "unseen_classes=0.5"], monkeypatch, capsys)
    assert code == 0 and "open set: 50% of the classes unseen" in out, err
    for bad in ("1.5", "0.01", '"half"'):
        code, out, err = run_cli(["experiment", "--dataset", "news20-sample", "--algorithms", "cosine",
                                  "--seeds", "0", "--option", f"unseen_classes={bad}"], monkeypatch, capsys)
        assert code == 2 and err.startswith("error: ") and "Traceback" not in err, (bad, err)


def test_tune_validates_on_held_out_classes():
    data = load_dataset("news20-sample")
    classes = np.unique(data.y)
    result = tune_similarity("oasis", data.X, data.y, 600, grid={"C": [0.1, 1.0]}, seed=2, validation="classes",
                             validation_fraction=0.4)
    held = class_split(data.y, 0.4, seed=2)[1]
    assert result.info["validation"] == "classes"
    assert result.info["n_validation"] == int(np.isin(data.y, held).sum())
    assert result.info["n_fit"] == int((~np.isin(data.y, held)).sum())
    assert result.estimator.n_features_in_ == data.n_features and len(result.trials) >= 2
    docs = tune_similarity("oasis", data.X, data.y, 600, grid={"C": [0.1, 1.0]}, seed=2, validation_fraction=0.4)
    assert docs.info["validation"] == "documents"
    five = np.isin(data.y, classes[:5])  # 0.2 of 5 classes rounds to 1: two are held out
    few = tune_similarity("oasis", data.X[five], data.y[five], 600, grid={"C": [1.0]}, seed=2, validation="classes")
    assert few.info["n_validation"] == 2 * 40
    with pytest.raises(InvalidInputError, match="two classes"):
        tune_similarity("oasis", data.X[np.isin(data.y, classes[:3])], data.y[np.isin(data.y, classes[:3])], 600,
                        validation="classes")
    with pytest.raises(InvalidInputError, match="validation"):
        tune_similarity("oasis", data.X, data.y, 600, validation="folds")


def test_tune_cli_class_disjoint(tmp_path, monkeypatch, capsys):
    code, out, err = run_cli(["tune", "-a", "oasis", "--dataset", "news20-sample", "--triplets", "600", "--grid",
                              "C=0.1,1", "--validation", "classes", "--validation-fraction", "0.4", "--out",
                              tmp_path / "m.npz", "--json"], monkeypatch, capsys)
    assert code == 0, err
    assert json.loads(out)["tuning"]["validation"] == "classes"
    code, out, err = run_cli(["tune", "-a", "oasis", "--dataset", "news20-sample", "--triplets", "600",
                              "--validation", "tasks", "--out", tmp_path / "m2.npz"], monkeypatch, capsys)
    assert code == 2 and "validation" in err


def test_open_set_learner_validates_on_held_out_classes():
    """A learner with its own held-out choices (proxy-ssi) makes them on held-out classes in the
    open-set protocol, as a fit with ``validation="classes"`` does."""
    data = load_dataset("news20-sample")
    row = run_one("news20-sample", "proxy-ssi", 1, 300, {"n_epochs": 1}, unseen_classes=0.5)
    train, test, _, _ = _open_rows(data.y, 1)
    est = make_estimator("proxy-ssi", n_triplets=300, random_state=1, n_epochs=1,
                         validation="classes").fit(data.X[train], data.y[train])
    assert row["map"] == pytest.approx(evaluate_retrieval(est.model_.scorer(data.X[test]), data.y[test])["map"],
                                       abs=1e-12)
