"""Model selection for the multi-task similarity and online multi-task classification learners."""

import json
import os

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.exceptions import InvalidInputError
from sparsesim.models import MultiTaskLinearModel, MultiTaskSimilarity
from sparsesim.registry import make_estimator
from sparsesim.tuning import task_mean_ap, tune_multitask, tune_online

from clitools import run_cli


def multitask_problem(n=240, d=30, seed=0):
    rng = np.random.default_rng(seed)
    y = np.tile([0, 1, 2], n // 3)
    tasks = np.repeat([0, 1], n // 2)
    X = np.abs(rng.normal(size=(3, d))[y] + 0.5 * rng.normal(size=(n, d))) * (rng.random((n, d)) < 0.5)
    return sp.csr_matrix(X), y, tasks


def task_streams(m=3, d=20, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d)
    X = [sp.csr_matrix(rng.normal(size=(150 + 10 * i, d))) for i in range(m)]
    return X, [np.where(x @ w + 0.3 * rng.normal(size=x.shape[0]) > 0, 1, -1) for x in X]


def test_tune_multitask_scores_by_task_ap_and_continues():
    X, y, tasks = multitask_problem()
    res = tune_multitask("omtrsl", X, y, tasks, 900, seed=2, min_budget=100)
    assert res.info["metric"] == "ap@10"
    # the default grid: C around its "auto" value x b
    assert sorted(res.info["grid"]) == ["C", "b"] and len(res.trials) == 12
    winner = next(t for t in res.trials if t["eliminated_at"] is None)
    assert [r["budget"] for r in winner["rungs"]] == [b["budget"] for b in res.rungs]
    assert res.best_score == winner["rungs"][-1]["ap@10"]
    # the winner, trained in one go on the same stream, gives the same validation score: survivors
    # continued on the next triplets rather than restarting
    from sparsesim.triplets import omtrsl_triplets, stratified_split

    _, strata = np.unique(np.stack([tasks.astype(str), y.astype(str)], axis=1), axis=0, return_inverse=True)
    fit_rows, val_rows = stratified_split(strata.reshape(-1), 0.8, seed=2)
    trip, signs, tids = omtrsl_triplets(y[fit_rows], 900, seed=2, tasks=tasks[fit_rows])
    one = make_estimator("omtrsl", **dict(winner["params"], random_state=2, n_triplets=900))
    one.partial_fit_triplets(X[fit_rows], trip, signs, tids, tasks=np.unique(tasks))
    score = task_mean_ap(one.model_, X[val_rows], y[val_rows], tasks[val_rows], np.unique(tasks))
    assert score == pytest.approx(res.best_score, abs=1e-12)
    assert set(res.best_params) >= {"C", "b"} and all(isinstance(v, float) for v in res.best_params.values())
    assert res.estimator.n_triplets_seen_ == 900


def test_tune_online_prefers_lower_error_and_replays():
    X, y = task_streams()
    res = tune_online("romco-nucl", X, y, min_budget=30, grid={"eta1": [1e-6, 0.05], "eta2": [1e-6, 0.05]})
    assert res.info["metric"] == "error_rate" and len(res.trials) == 4
    errors = {(t["params"]["eta1"], t["params"]["eta2"]): t["rungs"][0]["error_rate"] for t in res.trials}
    assert res.best_score <= min(errors.values()) + 1e-12 or len(res.rungs) > 1
    # a survivor is replayed from the first round: its last rung equals one fresh pass over that prefix
    winner = next(t for t in res.trials if t["eliminated_at"] is None)
    budget = winner["rungs"][-1]["budget"]
    fresh = make_estimator("romco-nucl", **winner["params"]).fit([x[:budget] for x in X], [v[:budget] for v in y])
    assert float(np.mean(fresh.error_rates_)) == pytest.approx(res.best_score, abs=1e-12)
    # tiny steps barely learn: they are not chosen
    assert res.best_params["eta1"] == 0.05 or res.best_params["eta2"] == 0.05


def test_tune_online_diverging_setting_is_a_failed_trial():
    X, y = task_streams()
    res = tune_online("omtllog", X, y, min_budget=30, grid={"eta": [1e-7, 10.0], "normalize": [False]})
    by_eta = {t["params"]["eta"]: t for t in res.trials}
    assert "diverged" in by_eta[10.0]["rungs"][0] and np.isnan(by_eta[10.0]["rungs"][0]["error_rate"])
    assert res.best_params["eta"] == 1e-7


def test_tune_refuses_other_kinds():
    X, y = task_streams()
    with pytest.raises(InvalidInputError, match="multitask-classifier"):
        tune_multitask("romco-nucl", *multitask_problem(), 300)
    with pytest.raises(InvalidInputError, match="multitask-similarity"):
        tune_online("omtrsl", X, y)


needs_data = pytest.mark.skipif(not os.environ.get("SPARSESIM_DATA"), reason="needs the shared data (SPARSESIM_DATA)")


@needs_data
def test_cli_tune_online_classifier(tmp_path, monkeypatch, capsys):
    from sparsesim.exceptions import DataNotFoundError

    try:
        from sparsesim.data.catalog import load_registered

        load_registered("mhc1")
    except DataNotFoundError as exc:
        pytest.skip(str(exc))
    out = tmp_path / "pa.npz"
    code, stdout, err = run_cli(["tune", "--algorithm", "pa-unique", "--dataset", "mhc1", "--out", out, "--json"],
                                monkeypatch, capsys)
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["metric"] == "error_rate" and len(summary["tuning"]["trials"]) == 3
    back = MultiTaskLinearModel.load(out)
    assert back.metadata["resolved_params"]["C"] == summary["best_params"]["C"]
    assert back.metadata["tuning"]["best_params"] == summary["best_params"]
    assert 0.1 < summary["online_error_rate"] < 0.4


@needs_data
def test_cli_tune_transfer_writes_a_runnable_experiment_file(tmp_path, monkeypatch, capsys):
    from sparsesim.experiments import load_experiment_file
    from sparsesim.experiments.oht import tune_transfer

    out = tmp_path / "oht.json"
    code, stdout, err = run_cli(["tune", "--algorithm", "pa2", "--dataset", "mfeat", "--out", out, "--json"],
                                monkeypatch, capsys)
    if code == 2 and "not found" in err:
        pytest.skip(err)
    assert code == 0, err
    summary = json.loads(stdout)
    # the default grid: sigma at 0.7 / 1 / 1.4 x its auto value (no source: no K, no eta)
    widths = summary["tuning"]["grid"]["sigma"]
    assert widths == pytest.approx([summary["auto_values"]["sigma"] * f for f in (0.7, 1.0, 1.4)], rel=1e-3)
    rates = [p["mistake_rate"]["pa2"] for p in summary["tuning"]["points"]]
    assert summary["best_validation"] == min(rates)
    written = load_experiment_file(out)
    assert written["protocol"] == "oht" and written["params"]["pa2"] == summary["best_params"]
    assert written["seeds"] == [0] and summary["split_seed"] == 1  # searched on a split it does not report
    with pytest.raises(InvalidInputError, match="transfer"):
        tune_transfer("omtrsl", "mfeat")


def test_multitask_similarity_model_from_tune_roundtrips(tmp_path):
    X, y, tasks = multitask_problem()
    res = tune_multitask("ostrsl", X, y, tasks, 600, seed=0, min_budget=100)
    res.estimator.model_.save(tmp_path / "m.npz")
    back = MultiTaskSimilarity.load(tmp_path / "m.npz")
    assert back.metadata["resolved_params"]["C"] == res.best_params["C"]
