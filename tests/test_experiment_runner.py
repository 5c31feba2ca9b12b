"""The pieces every paper protocol shares (sparsesim/experiments/runner.py)."""

import json
import math

import pytest

from sparsesim.exceptions import InvalidInputError
from sparsesim.experiments import ExperimentConfig, run_experiment
from sparsesim.experiments.runner import mean_std, protocol_options, write_report


def test_protocol_options_fill_defaults_and_refuse_unknown_names():
    defaults = {"folds": 5, "search": False}
    assert protocol_options("p", {"search": True}, defaults) == {"folds": 5, "search": True}
    assert defaults == {"folds": 5, "search": False}  # not modified
    with pytest.raises(InvalidInputError, match=r"unknown option\(s\) fodls; known: folds, search"):
        protocol_options("p", {"fodls": 3}, defaults)


@pytest.mark.parametrize("protocol", ["sors", "romco", "oht"])
def test_every_converted_protocol_refuses_a_misspelt_option(protocol):
    with pytest.raises(InvalidInputError, match="unknown option"):
        run_experiment(protocol, ExperimentConfig(dataset="news20-sample", algorithms=["dot"],
                                                  options={"trian_fraction": 0.5}))


def test_mean_std_of_the_finite_values():
    assert mean_std([1.0, 3.0, float("nan")]) == (2.0, 1.0)
    assert all(math.isnan(v) for v in mean_std([float("nan")]))
    assert all(math.isnan(v) for v in mean_std(iter([])))


def test_write_report_is_strict_json_in_a_new_folder(tmp_path):
    path = write_report({"a": float("nan"), "b": [1, 2.5]}, tmp_path / "new", "r.json")
    assert path == tmp_path / "new" / "r.json"
    assert json.loads(path.read_text()) == {"a": None, "b": [1, 2.5]}
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]  # no temporary left behind
