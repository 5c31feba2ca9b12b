"""Experiment files: ``sparsesim experiment --config`` runs the settings a file names; flags win;
every shipped file names a known protocol, data set and algorithms."""

import json

import pytest

from sparsesim.data.catalog import all_datasets
from sparsesim.exceptions import FileFormatError, UnknownNameError
from sparsesim.experiments import PROTOCOLS, load_experiment_file, shipped_experiments
from sparsesim.registry import ALGORITHMS
from clitools import run_cli


def test_config_file_runs_and_flags_win(tmp_path, monkeypatch, capsys):
    path = tmp_path / "small.json"
    path.write_text(json.dumps({"protocol": "sors", "dataset": "news20-sample", "algorithms": ["dot", "oasis"],
                                "seeds": [0, 1], "triplets": 200, "params": {"oasis": {"C": 0.5}}}))
    code, out, err = run_cli(["experiment", "--config", path, "--json"], monkeypatch, capsys)
    assert code == 0, err
    results = json.loads(out)["results"]
    assert [(r["algorithm"], r["seed"]) for r in results] == [("dot", 0), ("dot", 1), ("oasis", 0), ("oasis", 1)]
    assert all(r["params"].get("C") == 0.5 for r in results if r["algorithm"] == "oasis")
    code, out, err = run_cli(["experiment", "--config", path, "--seeds", "3", "--algorithms", "cosine", "--json"],
                             monkeypatch, capsys)
    assert code == 0, err
    assert [(r["algorithm"], r["seed"]) for r in json.loads(out)["results"]] == [("cosine", 3)]


def test_bad_config_files(tmp_path, monkeypatch, capsys):
    with pytest.raises(UnknownNameError, match="shipped experiments"):
        load_experiment_file("no-such-experiment")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"dataset": "news20-sample", "algoritms": ["dot"]}))
    with pytest.raises(FileFormatError, match="algoritms"):
        load_experiment_file(bad)
    code, out, err = run_cli(["experiment", "--config", bad], monkeypatch, capsys)
    assert code == 2 and err.startswith("error: ") and "Traceback" not in err


@pytest.mark.parametrize("name", [n for n in shipped_experiments() if not n.startswith("paper-")])
def test_shipped_experiment_files_name_known_things(name):
    """(The papers' tables and figures, ``paper-*``, are checked in tests/test_paper_report.py.)"""
    spec = load_experiment_file(name)
    assert spec["protocol"] in PROTOCOLS
    assert spec["dataset"] in all_datasets()
    assert spec["algorithms"] and set(spec["algorithms"]) <= set(ALGORITHMS)
    assert set(spec.get("params", {})) <= set(spec["algorithms"]) | {"*"}
    assert spec.get("description")


def test_sors_scale_multiplies_the_resolved_auto_values():
    from sparsesim.data import load_dataset
    from sparsesim.exceptions import InvalidInputError
    from sparsesim.experiments import ExperimentConfig, run_experiment
    from sparsesim.registry import make_estimator
    from sparsesim.triplets import stratified_split

    data = load_dataset("news20-sample")
    train, _ = stratified_split(data.y, 0.7, seed=1)
    auto = make_estimator("sors-l1", n_triplets=150).resolve_params(data.X[train])
    rep = run_experiment("sors", ExperimentConfig(dataset="news20-sample", algorithms=["sors-l1", "cosine"], seeds=[1],
                                                  triplets=150, options={"scale": {"eta": [0.5, 1.0]}}))
    rows = [r for r in rep["results"] if r["algorithm"] == "sors-l1"]
    assert [r["scale"] for r in rows] == [{"eta": 0.5}, {"eta": 1.0}]
    assert rows[0]["resolved_params"]["eta"] == pytest.approx(0.5 * auto["eta"])
    assert {k: rows[1]["resolved_params"][k] for k in auto} == pytest.approx(auto)  # multiplier 1: the default
    assert rows[0]["resolved_params"]["lam"] == pytest.approx(auto["lam"])
    plain = run_experiment("sors", ExperimentConfig(dataset="news20-sample", algorithms=["sors-l1"], seeds=[1],
                                                    triplets=150))["results"][0]
    assert plain["map"] == rows[1]["map"]
    assert [r["algorithm"] for r in rep["results"]].count("cosine") == 1
    with pytest.raises(InvalidInputError, match="resolves no 'auto' value of C"):
        run_experiment("sors", ExperimentConfig(dataset="news20-sample", algorithms=["sors-l1"], triplets=50,
                                                options={"scale": {"C": [2.0]}}))


def test_sors_leaves_out_a_learner_that_refuses_the_data_and_says_why():
    """Learners that refuse a seed's training split (a dense metric above ``max_features``, the full
    covariance above d = 64) are asked before anything runs: the others run, the report and its
    table say why those did not; when every learner refuses, the run is that one error."""
    from sparsesim.exceptions import ResourceLimitError
    from sparsesim.experiments import ExperimentConfig, run_experiment
    from sparsesim.experiments.sors import format_table

    config = ExperimentConfig(dataset="news20-sample", algorithms=["cosine", "lego", "aroma", "lmnn"], seeds=[0],
                              triplets=50)
    report = run_experiment("sors", config)
    assert [r["algorithm"] for r in report["results"]] == ["cosine"]
    assert set(report["refused"]) == {"lego", "aroma", "lmnn"}
    assert "max_features = 4096" in report["refused"]["lego"] and "d <= 64" in report["refused"]["aroma"]
    assert "not run: lego: " in format_table(report)
    with pytest.raises(ResourceLimitError, match="max_features"):
        run_experiment("sors", ExperimentConfig(dataset="news20-sample", algorithms=["lego", "rdml"], triplets=50))


def test_lmnn_refuses_classes_no_larger_than_its_neighbours_before_any_work():
    from sparsesim.exceptions import InvalidInputError, ResourceLimitError
    from sparsesim.learners.metric_learn_peers import LMNN

    LMNN(n_neighbors=3).check_fit_data(10, [5, 4])
    with pytest.raises(InvalidInputError, match="smallest class has 3"):
        LMNN(n_neighbors=3).check_fit_data(10, [5, 3])
    with pytest.raises(ResourceLimitError, match="max_features = 8"):
        LMNN(max_features=8).check_fit_data(10, [5, 5])
