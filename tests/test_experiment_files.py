"""Experiment files: ``sparsesim experiment --config`` runs the settings a file names; flags win;
every shipped file names a known protocol, data set and algorithms."""

import json

import pytest

from sparsesim.data.catalog import DATASETS
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


@pytest.mark.parametrize("name", shipped_experiments())
def test_shipped_experiment_files_name_known_things(name):
    spec = load_experiment_file(name)
    assert spec["protocol"] in PROTOCOLS
    assert spec["dataset"] in DATASETS
    assert spec["algorithms"] and set(spec["algorithms"]) <= set(ALGORITHMS)
    assert set(spec.get("params", {})) <= set(spec["algorithms"]) | {"*"}
    assert spec.get("description")
