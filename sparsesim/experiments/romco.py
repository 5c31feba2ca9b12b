"""Protocol ``romco``: online multi-task classification as in Yang, Zhao & Gao (ROMCO), Sec. 6.

For each shuffle seed every task's stream is permuted independently (``MultiTaskStreams.shuffled``),
the learner makes one online pass (rounds formed as in :mod:`sparsesim.learners.mtl_online`), and
its predictions *before* each update are scored:

* cumulative error rate of each task (mistakes / instances; margin 0 counts as a mistake),
  averaged over tasks -> ``error_rate``;
* F1 of the positive and of the negative class per task (online predictions), averaged over tasks
  -> ``f1_pos``, ``f1_neg``, and their mean ``f1``;
* ``train_seconds``: wall time of the whole online pass (prediction + update, as in Table III);
* ``undecided_rate``: share of the predictions (pooled over tasks) with |margin| < 1e-8 — the
  task's weights had seen none of the instance's features; they count as mistakes — and
  ``error_undecided`` / ``error_decided``, the pooled error rates of the two parts
  (``error_pooled`` over all instances);
* ``per_task``: the per-task numbers.

Options (``config.options``)
----------------------------
shuffles : int
    Use seeds ``0..shuffles-1`` (the paper: 10); otherwise ``config.seeds``.
search : bool, default False
    Tune parameters on a held-out shuffle (seed ``search_seed``, not one of the evaluation seeds)
    like the paper: ROMCO over ``eta1, eta2 in {1e-4..1}`` and ``lam1, lam2 in {1e-7..1}`` (staged
    grid, :data:`ROMCO_SEARCH`), OMTLLOG/OMTLVON over ``eta in {1e-7..1}``, ``normalize`` and the
    warm-up ``epoch``, CW-COL and OSMTL-e over :data:`COLLAB_GRIDS`; PA-Global, PA-Unique (C = 1),
    OMTL and the batch MTFL / TRML (default parameters, as the paper) are not searched. Explicit
    ``config.params`` for an algorithm switch its search off.
search_seed : int, default 12345
ablation : bool, default False
    Also run ROMCO-NuCl/LogD with ``lam1 = lam2 = 0`` at their chosen step sizes on the same
    shuffles (``report["ablation"]``): the regularisers' (the task coupling's) share of the result.
sensitivity : bool, default False
    Fig. 6: error rate of ROMCO-NuCl/LogD when ``lam1`` (``lam2`` fixed) or ``lam2`` (``lam1`` fixed)
    sweeps ``{1e-7..1}``, on the first ``sensitivity_shuffles`` (default 3) seeds.
checkpoints : int, default 100
    Points of the cumulative-error curves.
dataset_options : dict
    Passed to the data set loader (e.g. ``{"include_tune": true}`` for spam-task-a).
max_per_task : int, optional
    Truncate every (shuffled) stream, for quick runs (a truncated task left with one class is refused
    with a clear error).
factors : dict, optional
    ``{param: [multiples]}``: no search; every algorithm runs at each combination of multiples of the
    values its ``"auto"`` parameters (``eta1, eta2, lam1, lam2``; ``C`` of PA-Global/-Unique) resolve
    to on each shuffle's streams (:mod:`sparsesim.defaults`); a key ``"eta1,eta2"`` multiplies both
    by the same number; a parameter given explicitly keeps its value. Summary rows are named
    ``"romco-nucl (eta1,eta2)x0.6,(lam1,lam2)x1"``.

Plots (when ``config.out_dir`` is set): ``romco_<dataset>_cumulative_error.png`` (Figs. 3-5) and
``romco_<dataset>_sensitivity.png`` (Fig. 6), plus the report as ``romco_<dataset>.json``.

One online pass and the parameter search are :mod:`.romco_runs`' (re-exported here); the plots
and tables :mod:`.romco_report`'s.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ..data.catalog import load_registered
from ..data.mtl_classification import MultiTaskStreams
from ..exceptions import InvalidInputError, UnknownNameError
from ..parallel import run_parallel
from ..registry import get_algorithm, make_estimator
from . import ExperimentConfig
from .romco_report import format_table, plot_curves, plot_sensitivity
from .romco_runs import (ETA_GRID, LAMBDA_GRID, RESOLVABLE, ROMCO_SEARCH, SPLIT_KEYS,  # noqa: F401 (re-exported)
                         UNDECIDED_TOL, error_only, margin_split, online_metrics, run_stream, search_params)
from .runner import auto_names, check_factors, factor_label, factor_points, mean_std, protocol_options, write_report

__all__ = [
    "DEFAULT_ALGORITHMS",
    "LAMBDA_GRID",
    "ETA_GRID",
    "run",
    "format_table",
    "run_stream",
    "online_metrics",
    "search_params",
]

DEFAULT_ALGORITHMS = ["romco-nucl", "romco-logd", "pa-global", "pa-unique", "omtl", "omtllog", "omtlvon", "cw-col",
                      "osmtl-e", "mtfl", "trml"]
DEFAULT_OPTIONS = {"shuffles": None, "search": False, "search_seed": 12345, "ablation": False, "sensitivity": False,
                   "sensitivity_shuffles": 3, "checkpoints": 100, "dataset_options": None, "max_per_task": None,
                   "factors": None}


# --------------------------------------------------------------------------- protocol


def _load(config: ExperimentConfig) -> MultiTaskStreams:
    opts = dict(config.options.get("dataset_options") or {})
    data = load_registered(config.dataset, **opts)
    if not isinstance(data, MultiTaskStreams):
        raise InvalidInputError(
            f"data set {config.dataset!r} is not a multi-task classification data set "
            "(use spam-task-a, mhc1 or landmine)"
        )
    return data


def _setting(row: dict) -> str:
    """The summary's name of a run: its algorithm, with the multiples of the ``factors`` option."""
    return factor_label(row["algorithm"], row.get("factors"))


def _summarise(results: list, algorithms: list, task_names: list) -> list:
    rows = []
    for alg in algorithms:
        rs = [r for r in results if _setting(r) == alg]
        ok = [r for r in rs if r["status"] == "ok"]
        row = {"algorithm": alg, "runs": len(rs), "diverged": len(rs) - len(ok)}
        for key in ("error_rate", "f1", "f1_pos", "f1_neg", "train_seconds"):
            row[f"{key}_mean"], row[f"{key}_std"] = mean_std(r[key] for r in ok)
        for key in SPLIT_KEYS:  # a shuffle without undecided predictions has no error on them
            row[f"{key}_mean"] = mean_std(r[key] for r in ok)[0]
        per_task = []
        for t, name in enumerate(task_names):
            entry = {"task": name}
            for key, field in (("error", "error_rate"), ("f1_pos", "f1_pos"), ("f1_neg", "f1_neg")):
                entry[f"{key}_mean"], entry[f"{key}_std"] = mean_std(r["per_task"][t][field] for r in ok)
            per_task.append(entry)
        row["per_task"] = per_task
        row["error_rate_task_std"] = mean_std(p["error_mean"] for p in per_task)[1]
        rows.append(row)
    return rows


def _curves(results: list, algorithms: list) -> dict:
    out = {}
    for alg in algorithms:
        cs = [r["curve"] for r in results if _setting(r) == alg and r.get("curve")]
        if not cs:
            continue
        per_task = np.mean([np.array(c["per_task"]) for c in cs], axis=0)
        out[alg] = {"rounds": cs[0]["rounds"], "per_task": per_task.tolist(),
                    "mean": per_task.mean(axis=0).tolist()}
    return out


def _sensitivity(streams, algorithms, params, seeds, n_jobs, max_per_task) -> dict:
    out = {}
    for alg in algorithms:
        if not alg.startswith("romco"):
            continue
        # the values in use: an "auto" parameter resolves on the streams (as in every run)
        part = streams.shuffled(seeds[0]).head(int(max_per_task)) if max_per_task else streams
        full = make_estimator(alg, **params[alg]).resolve_params(part.X)
        base = dict(params[alg], **{k: full[k] for k in ("lam1", "lam2", "eta1", "eta2")})
        entry = {}
        for which in ("lam1", "lam2"):
            grid = [dict(base, **{which: v}) for v in LAMBDA_GRID]
            jobs = [(streams, alg, p, s, max_per_task) for p in grid for s in seeds]
            errs = np.array(run_parallel(error_only, jobs, n_jobs=n_jobs)).reshape(len(grid), len(seeds))
            entry[which] = {"values": LAMBDA_GRID, "error_mean": errs.mean(1).tolist(),
                            "error_std": errs.std(1).tolist(),
                            "fixed": {k: base[k] for k in ("lam1", "lam2", "eta1", "eta2") if k in base}}
        out[alg] = entry
    return out


def run(config: ExperimentConfig) -> dict:
    """Run the ROMCO protocol; see the module docstring for the options.

    Returns
    -------
    dict
        ``{"protocol": "romco", "dataset", "data", "seeds", "params", "search", "results",
        "summary", "curves", "ablation", "sensitivity", "plots"}``; ``results`` holds one flat dict per
        (algorithm, seed) with ``algorithm, seed, error_rate, f1, f1_pos, f1_neg, train_seconds,
        per_task`` (``curve`` is moved to ``curves``, averaged over seeds).
    """
    opts = protocol_options("romco", config.options, DEFAULT_OPTIONS)
    algorithms = list(config.algorithms) or list(DEFAULT_ALGORITHMS)
    for alg in algorithms:
        spec = get_algorithm(alg)
        if spec.kind != "multitask-classifier":
            raise UnknownNameError(
                f"algorithm {alg!r} is a {spec.kind!r} learner; protocol romco needs multitask classifiers "
                f"({', '.join(DEFAULT_ALGORITHMS)})"
            )
    seeds = list(range(int(opts["shuffles"]))) if opts.get("shuffles") else [int(s) for s in config.seeds]
    search_seed = int(opts["search_seed"])
    if opts.get("search") and search_seed in seeds:
        raise InvalidInputError(f"search_seed {search_seed} is also an evaluation seed; choose another")
    names_of = {a: auto_names(a, config.params_for(a), RESOLVABLE) for a in algorithms}
    factors = check_factors(opts["factors"], names_of)
    if factors and any(opts.get(k) for k in ("search", "ablation", "sensitivity")):
        raise InvalidInputError("option 'factors' runs each algorithm at multiples of its 'auto' values without a "
                                "search; leave out search, ablation and sensitivity")
    max_per_task = opts.get("max_per_task")
    checkpoints = int(opts["checkpoints"])
    streams = _load(config)

    params, search = {}, {}
    t_search = time.perf_counter()
    for alg in algorithms:
        explicit = config.params_for(alg)
        if opts.get("search") and not config.params.get(alg):
            found = search_params(streams, alg, seed=search_seed, n_jobs=config.n_jobs, base=explicit,
                                  max_per_task=max_per_task)
            search[alg] = found
            params[alg] = found["best"]
        else:
            params[alg] = explicit
    t_search = time.perf_counter() - t_search

    points = {alg: factor_points(factors, names_of[alg]) if factors else [None] for alg in algorithms}
    jobs = [(streams, alg, params[alg], seed, checkpoints, max_per_task, point)
            for alg in algorithms for point in points[alg] for seed in seeds]
    t_eval = time.perf_counter()
    results = run_parallel(run_stream, jobs, n_jobs=config.n_jobs)
    t_eval = time.perf_counter() - t_eval
    settings = list(dict.fromkeys(_setting(r) for r in results)) if factors else algorithms
    curves = _curves(results, settings)
    for r in results:
        r.pop("curve", None)

    ablation = {}
    if opts.get("ablation"):
        for alg in (a for a in algorithms if a.startswith("romco")):
            p = dict(params[alg], lam1=0.0, lam2=0.0)
            res = run_parallel(run_stream, [(streams, alg, p, seed, checkpoints, max_per_task) for seed in seeds],
                               n_jobs=config.n_jobs)
            for r in res:
                r.pop("curve", None)
            ablation[alg] = {"params": p, "results": res,
                             "summary": _summarise(res, [alg], streams.task_names)[0]}

    sensitivity = {}
    if opts.get("sensitivity"):
        sens_seeds = seeds[: int(opts["sensitivity_shuffles"])]
        sensitivity = _sensitivity(streams, algorithms, params, sens_seeds, config.n_jobs, max_per_task)

    report = {
        "protocol": "romco",
        "dataset": config.dataset,
        "data": dict(streams.summary(), info=streams.info),
        "seeds": seeds,
        "params": params,
        # the values used (an "auto" parameter resolved on the streams; the same on every shuffle)
        "resolved_params": {a: next((r["resolved_params"] for r in results if _setting(r) == a
                                     and r.get("resolved_params")), {}) for a in settings},
        "search": {a: {"best": s["best"], "grid": s["grid"], "n_trials": len(s["trials"]),
                       "trials": s["trials"]} for a, s in search.items()},
        "search_seed": search_seed if search else None,
        "results": results,
        "summary": _summarise(results, settings, streams.task_names),
        **({"factors": factors} if factors else {}),
        "curves": curves,
        "ablation": ablation,
        "sensitivity": sensitivity,
        "seconds": {"search": t_search, "evaluation": t_eval},
        "plots": [],
    }
    if config.out_dir:
        out = Path(config.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        stem = f"romco_{config.dataset.replace('/', '_')}"
        report["plots"].append(str(plot_curves(report, out / f"{stem}_cumulative_error.png")))
        if sensitivity:
            report["plots"].append(str(plot_sensitivity(report, out / f"{stem}_sensitivity.png")))
        write_report(report, out, f"{stem}.json")
    return report
