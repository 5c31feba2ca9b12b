"""The pieces every paper protocol shares (sparsesim/experiments/runner.py)."""

import json
import math

import pytest

from sparsesim.exceptions import InvalidInputError
from sparsesim.experiments import ExperimentConfig, run_experiment
from sparsesim.experiments.runner import (describe_params, figure, fold_jobs, grid_points, mean_std, pm,
                                          protocol_options, summarize, text_table, write_report)
from sparsesim.tuning import evaluate_candidates, rank_candidates


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


@pytest.mark.parametrize("protocol, algorithm", [("cikm15", "oasis"), ("ijcai17", "omtrsl")])
def test_cross_validated_protocols_refuse_a_misspelt_option_before_loading_data(protocol, algorithm):
    with pytest.raises(InvalidInputError, match="unknown option.*fodls"):
        run_experiment(protocol, ExperimentConfig(dataset="no-such-data", algorithms=[algorithm],
                                                  options={"fodls": 3}))


def test_grid_points_every_combination_in_a_fixed_order():
    assert grid_points({"b": [1, 2], "a": [0]}) == [{"a": 0, "b": 1}, {"a": 0, "b": 2}]
    assert grid_points({"b": [1, 2], "C": [3, 4]}, keys=("b", "C")) == [
        {"b": 1, "C": 3}, {"b": 1, "C": 4}, {"b": 2, "C": 3}, {"b": 2, "C": 4}]
    assert grid_points({}) == [{}] and grid_points(None) == [{}]
    with pytest.raises(InvalidInputError, match="'factors' must map"):
        grid_points({"C": []}, "factors")


def test_rank_candidates_breaks_ties_by_the_key_then_by_order():
    scores = {"a": 0.5, "b": 0.9, "c": 0.9, "d": 0.1}
    assert rank_candidates(scores) == ["b", "c", "a", "d"]  # the first of equal scores wins, like max()
    assert rank_candidates(scores, tie_break=lambda k: -ord(k)) == ["c", "b", "a", "d"]


def test_evaluate_candidates_runs_one_batch_and_regroups_per_candidate():
    batches = []

    def run(jobs):
        batches.append(list(jobs))
        return [10 * c + f for c, f in jobs]

    out = evaluate_candidates([1, 2, 3], lambda c: [(c, f) for f in range(c)], run)
    assert out == [[10], [20, 21], [30, 31, 32]] and len(batches) == 1


def test_fold_jobs_are_seed_major_and_can_keep_some_folds():
    folds = {0: [("tr0", "te0"), ("tr1", "te1")], 5: [("u0", "v0"), ("u1", "v1")]}
    jobs = fold_jobs([5, 0], folds.__getitem__, lambda s, f, tr, te: (s, f, tr, te))
    assert jobs == [(5, 0, "u0", "v0"), (5, 1, "u1", "v1"), (0, 0, "tr0", "te0"), (0, 1, "tr1", "te1")]
    assert fold_jobs([0], folds.__getitem__, lambda s, f, tr, te: f, only=[1]) == [1]


def test_summarize_gives_mean_std_per_group_and_mean_curves():
    rows = [{"algorithm": "x", "ap": 1.0, "curve": [0.0, 1.0]}, {"algorithm": "y", "ap": 5.0, "curve": [1.0, 1.0]},
            {"algorithm": "x", "ap": 3.0, "curve": [1.0, 0.0]}]
    out = summarize(rows, ["ap"], curves=["curve"])
    assert list(out) == ["x", "y"]
    assert out["x"] == {"n_runs": 2, "ap": (2.0, 1.0), "curve": [0.5, 0.5]}
    by_size = summarize(rows, ["ap"], by=lambda r: r["ap"] > 2)
    assert by_size[True]["ap"] == (4.0, 1.0) and by_size[False]["n_runs"] == 1


def test_describe_params_in_name_order():
    assert describe_params({"eta": 1.0, "C": 0.01, "identity": False}) == "C=0.01, eta=1, identity=False"


def test_pm_and_text_table_align_their_cells():
    assert pm((0.25, 0.05), 1, 100, 6) == "  25.0 ±  5.0" and pm(None) == "-"
    lines = text_table([("name", 6), ("value", 8)], [["a", "1.5"], ["longer", "22"]])
    assert lines == ["name      value", "-" * 15, "a           1.5", "longer       22"]


def test_figure_writes_a_png_and_closes_it(tmp_path):
    import matplotlib.pyplot as plt

    with figure(tmp_path / "f.png", ncols=2, title="t") as (fig, axes):
        assert len(axes) == 2
        axes[0].plot([0, 1], [1, 0])
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG" and not plt.get_fignums()
    with figure(tmp_path / "new" / "g.png", nrows=2, ncols=3) as (fig, axes):
        assert len(axes) == 6
    assert (tmp_path / "new" / "g.png").stat().st_size > 0  # the folder is created


def test_mean_std_of_the_finite_values():
    assert mean_std([1.0, 3.0, float("nan")]) == (2.0, 1.0)
    assert all(math.isnan(v) for v in mean_std([float("nan")]))
    assert all(math.isnan(v) for v in mean_std(iter([])))


def test_write_report_is_strict_json_in_a_new_folder(tmp_path):
    path = write_report({"a": float("nan"), "b": [1, 2.5]}, tmp_path / "new", "r.json")
    assert path == tmp_path / "new" / "r.json"
    assert json.loads(path.read_text()) == {"a": None, "b": [1, 2.5]}
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]  # no temporary left behind


def test_factors_helpers_check_tie_scale_and_name():
    from sparsesim.experiments.runner import auto_names, check_factors, factor_label, factor_points, scale_auto

    names = {"romco-nucl": auto_names("romco-nucl", {"lam2": 0.1}, ("eta1", "eta2", "lam1", "lam2", "C")),
             "pa-unique": auto_names("pa-unique", {}, ("eta1", "eta2", "lam1", "lam2", "C"))}
    assert names == {"romco-nucl": {"eta1", "eta2", "lam1"}, "pa-unique": {"C"}}
    grid = check_factors({"eta1,eta2": [1, 2], "C": [3]}, names)
    assert grid == {"eta1,eta2": [1.0, 2.0], "C": [3.0]} and check_factors(None, names) == {}
    for bad, message in [({"C": [True]}, "positive finite"), ({"C": [float("inf")]}, "positive finite"),
                         ({"lam2": [1]}, "'auto' value of lam2"), ({"C": 1}, "'factors' must map")]:
        with pytest.raises(InvalidInputError, match=message):
            check_factors(bad, names)
    points = factor_points(grid, names["romco-nucl"])
    assert points == [{"eta1,eta2": 1.0}, {"eta1,eta2": 2.0}] and factor_points(grid, set()) == [{}]
    assert scale_auto({"eta1": 0.5, "eta2": 0.25, "lam1": 1e-3}, {"eta1,eta2": 2.0}) == {"eta1": 1.0, "eta2": 0.5}
    assert factor_label("romco-nucl", {"eta1,eta2": 2.0, "C": 0.3}) == "romco-nucl Cx0.3,(eta1,eta2)x2"
    assert factor_label("pa-unique", {}) == "pa-unique"
