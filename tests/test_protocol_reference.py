"""The cikm15 and ijcai17 protocols give the numbers they gave before they moved onto the shared runner.

``tests/references/protocol_runs.json`` holds the reports of small runs (the ``segment`` data set at
100 documents for cikm15; a synthetic three-task set for ijcai17), recorded by running these same
functions::

    SPARSESIM_DATA=/path/to/data python tests/test_protocol_reference.py --record

Timings (train seconds, updates per second, wall seconds) and plot paths change from run to run and
are left out; every other number — each fold's scores and query ratios, the searched parameters and
their scores, the summaries — must be equal. The ijcai17 summary was recorded in its earlier layout
(``"ap@10"`` mean and ``"ap@10_std"``); :func:`_flat_summary` writes today's ``(mean, std)`` pairs
in that layout to compare them. Keys the reports gained after the recording (ijcai17's
``resolved_params``, :data:`ADDED`) are checked on their own.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.exceptions import DataNotFoundError

REFERENCE = Path(__file__).parent / "references" / "protocol_runs.json"
VOLATILE = {"train_seconds", "updates_per_second", "wall_seconds", "timing", "plot", "plots", "search_seconds"}
ADDED = {"ijcai17": {"resolved_params"}}


def _stable(value, leave_out=frozenset()):
    """``value`` without the keys that measure time (and ``leave_out``), as plain JSON types (tuples
    become lists)."""
    if isinstance(value, dict):
        return {str(k): _stable(v, leave_out) for k, v in value.items() if k not in VOLATILE | leave_out}
    if isinstance(value, (list, tuple)):
        return [_stable(v, leave_out) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _tasks_data():
    """Three tasks of four Gaussian classes (96 documents each) in 30 dense features."""
    from sparsesim.data import LabelledData

    rng = np.random.default_rng(3)
    centres = rng.normal(size=(4, 30))
    X, y, t = [], [], []
    for k in range(3):
        shift = rng.normal(scale=0.8, size=(4, 30))
        for c in range(4):
            X.append(centres[c] + shift[c] + rng.normal(scale=1.2, size=(24, 30)))
            y += [c] * 24
            t += [k] * 24
    return LabelledData(X=sp.csr_matrix(np.vstack(X)), y=np.array(y), tasks=np.array(t),
                        task_names=["t0", "t1", "t2"], name="tasks", info={})


def cikm15_runs() -> dict:
    """Two small cikm15 runs: a coordinate search with the full sweep; the "auto" search over two seeds."""
    from sparsesim.experiments import ExperimentConfig, run_experiment

    sweep = run_experiment("cikm15", ExperimentConfig(
        dataset="segment", algorithms=["paas", "pars", "cwas", "cwrs", "oasis", "cws", "aroma"], seeds=[0],
        triplets=300, options={"n_instances": 100, "folds": 2, "deltas": [2.0 ** -4, 1.0, 16.0],
                               "search": "coordinate", "search_triplets": 150, "search_folds": 2}))
    auto = run_experiment("cikm15", ExperimentConfig(
        dataset="segment", algorithms=["paas", "pars", "cws-d"], seeds=[0, 1], triplets=300,
        params={"cws-d": {"eta": 0.5}},
        options={"n_instances": 100, "folds": 3, "deltas": [2.0 ** -6, 2.0 ** -2, 4.0], "search": "auto",
                 "search_triplets": 150, "search_folds": 1, "curve": False}))
    return {"sweep": _stable(sweep), "auto": _stable(auto)}


def ijcai17_runs(monkeypatch=None) -> dict:
    """A searched ijcai17 run over two seeds with the active sweep, and a search-only run."""
    from sparsesim.experiments import ExperimentConfig, ijcai17, run_experiment

    original = ijcai17.load_multitask_data
    ijcai17.load_multitask_data = lambda name, **options: _tasks_data()
    try:
        full = run_experiment("ijcai17", ExperimentConfig(
            dataset="tasks", algorithms=["omtrsl", "ostrsl", "ogrsl", "omtrsl-active", "omtrsl-random"],
            seeds=[0, 1], triplets=250, params={"omtrsl-active": {"delta": 0.5}},
            options={"folds": 3, "search": True, "b_grid": [0.1, 10.0], "c_grid": [0.1, 1.0],
                     "active_deltas": [0.1, 1.0]}))
        alone = run_experiment("ijcai17", ExperimentConfig(
            dataset="tasks", algorithms=["omtrsl", "ogrsl"], seeds=[2], triplets=200,
            options={"folds": 3, "search_only": True, "b_grid": [0.1, 10.0], "c_grid": [0.1]}))
    finally:
        ijcai17.load_multitask_data = original
    return {"full": _stable(full), "alone": _stable(alone)}


def _reference(name):
    return json.loads(REFERENCE.read_text())[name]


def test_cikm15_reproduces_the_recorded_runs():
    try:
        runs = cikm15_runs()
    except DataNotFoundError as exc:
        pytest.skip(f"segment not available: {exc}")
    ref = _reference("cikm15")
    for name in ("sweep", "auto"):
        assert json.loads(json.dumps(runs[name])) == ref[name], name


def _flat_summary(summary):
    """The summary as recorded: means under the metric's name, standard deviations beside them."""
    flat = {}
    for alg, s in summary.items():
        flat[alg] = {"n_runs": s["n_runs"], "ap_curve": s["ap_curve"], "map_curve": s["map_curve"],
                     "query_ratio": s["query_ratio"][0]}
        for metric in ("ap@10", "map@10"):
            flat[alg][metric], flat[alg][f"{metric}_std"] = s[metric]
    return flat


def _as_recorded(runs):
    """The ijcai17 runs as the reference file keeps them: without the values checked on their own,
    the summary flat."""
    runs = {name: _stable(run, ADDED["ijcai17"]) for name, run in runs.items()}
    runs["full"]["summary"] = _flat_summary(runs["full"]["summary"])
    return runs


def test_ijcai17_reproduces_the_recorded_runs():
    runs = ijcai17_runs()
    # every run records the values it used: here the searched C (and b), given explicitly
    for r in runs["full"]["results"] + runs["full"]["search"]["results"]:
        assert r["resolved_params"] == {k: r["params"][k] for k in ("C", "b") if k in r["params"]}
    assert runs["full"]["resolved_params"]["omtrsl"] == {k: runs["full"]["chosen_params"]["omtrsl"][k]
                                                         for k in ("C", "b")}
    runs = _as_recorded(runs)
    ref = _reference("ijcai17")
    for name in ("full", "alone"):
        assert json.loads(json.dumps(runs[name])) == ref[name], name


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    REFERENCE.parent.mkdir(exist_ok=True)
    REFERENCE.write_text(json.dumps({"cikm15": cikm15_runs(), "ijcai17": _as_recorded(ijcai17_runs())}, indent=1,
                                    sort_keys=True) + "\n")
    print(f"wrote {REFERENCE}")
