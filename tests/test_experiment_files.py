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
