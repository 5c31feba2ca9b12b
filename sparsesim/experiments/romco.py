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
    warm-up ``epoch``; PA-Global, PA-Unique (C = 1) and OMTL have no free parameter. Explicit
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
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import numpy as np

from ..data.catalog import load_registered
from ..data.mtl_classification import MultiTaskStreams
from ..exceptions import DivergenceError, InvalidInputError, UnknownNameError
from ..parallel import run_parallel
from ..registry import get_algorithm, make_estimator
from . import ExperimentConfig
from .runner import (auto_names, check_factors, factor_label, factor_points, figure, mean_std, protocol_options,
                     scale_auto, write_report)

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

DEFAULT_ALGORITHMS = ["romco-nucl", "romco-logd", "pa-global", "pa-unique", "omtl", "omtllog", "omtlvon"]
LAMBDA_GRID = [10.0 ** k for k in range(-7, 1)]  # 1e-7 .. 1 (paper: Sec. 6.1, 6.5)
UNDECIDED_TOL = 1e-8  # |margin| below it: an undecided prediction
ETA_GRID = [10.0 ** k for k in range(-4, 1)]  # 1e-4 .. 1 (paper: {1e-6..1}; 1e-6/1e-5 never learn)
DEFAULT_OPTIONS = {"shuffles": None, "search": False, "search_seed": 12345, "ablation": False, "sensitivity": False,
                   "sensitivity_shuffles": 3, "checkpoints": 100, "dataset_options": None, "max_per_task": None,
                   "factors": None}
RESOLVABLE = ("eta1", "eta2", "lam1", "lam2", "C")  # the parameters with an "auto" rule (sparsesim.defaults)
ROMCO_SEARCH = "stage 1: eta1 x eta2 at lam1 = lam2 = 1e-4; stage 2: lam1 x lam2 over 1e-7..1; stage 3: eta1 x eta2 again"


# --------------------------------------------------------------------------- one run


def online_metrics(margins: list, labels: list) -> list:
    """Per-task online metrics from the margins before each update.

    Returns a list of dicts ``{n, mistakes, error_rate, f1_pos, f1_neg}``; margin 0 is a mistake and
    counts as a prediction of neither class.
    """
    out = []
    for p, y in zip(margins, labels):
        pred = np.sign(p)
        wrong = pred != y
        row = {"n": int(y.size), "mistakes": int(wrong.sum()), "error_rate": float(wrong.mean())}
        for cls, key in ((1.0, "f1_pos"), (-1.0, "f1_neg")):
            tp = np.sum((pred == cls) & (y == cls))
            fp = np.sum((pred == cls) & (y != cls))
            fn = np.sum((y == cls) & (pred != cls))
            row[key] = float(2 * tp / (2 * tp + fp + fn)) if (2 * tp + fp + fn) else 0.0
        out.append(row)
    return out


def margin_split(margins: list, labels: list) -> dict:
    """Pooled error rates of the undecided (|margin| < ``UNDECIDED_TOL``) and decided predictions."""
    p, y = np.concatenate(margins), np.concatenate(labels)
    undecided = np.abs(p) < UNDECIDED_TOL
    wrong = np.sign(p) != y
    return {"error_pooled": float(wrong.mean()), "undecided_rate": float(undecided.mean()),
            "error_undecided": float(wrong[undecided].mean()) if undecided.any() else float("nan"),
            "error_decided": float(wrong[~undecided].mean()) if (~undecided).any() else float("nan")}


SPLIT_KEYS = ("error_pooled", "undecided_rate", "error_undecided", "error_decided")


def _curve(margins: list, labels: list, checkpoints: np.ndarray) -> np.ndarray:
    """Cumulative error rate of each task after each checkpoint round, shape (tasks, points)."""
    rows = []
    for p, y in zip(margins, labels):
        cum = np.cumsum(np.sign(p) != y)
        r = np.minimum(checkpoints, y.size)
        rows.append(cum[r - 1] / r)
    return np.array(rows)


def run_stream(streams: MultiTaskStreams, algorithm: str, params: dict, seed: int,
               checkpoints: int = 100, max_per_task: int | None = None, factors: dict | None = None) -> dict:
    """One online pass of ``algorithm`` over the streams shuffled with ``seed``.

    ``factors`` (``{param: multiple}``, one point of the ``factors`` option) runs the ``"auto"``
    parameters it names at that multiple of the value they resolve to on this pass's streams.
    Returns a flat result dict (plus ``per_task`` and ``curve``); a run whose weights overflow
    (OMTLLOG/OMTLVON with a too large ``eta``) gets ``status="diverged"`` and NaN metrics.
    """
    s = streams.shuffled(seed)
    if max_per_task:
        s = s.head(int(max_per_task))
    if factors:
        names = auto_names(algorithm, params, RESOLVABLE)
        auto = {k: v for k, v in make_estimator(algorithm, **params).resolve_params(s.X).items() if k in names}
        params = {**params, **scale_auto(auto, factors)}
    est = make_estimator(algorithm, **params)
    points = np.unique(np.linspace(1, s.n_rounds, max(2, int(checkpoints))).round().astype(int))
    t0 = time.perf_counter()
    try:
        est.fit(s.X, s.y)
    except DivergenceError as exc:
        return {"algorithm": algorithm, "seed": int(seed), "dataset": streams.name, "status": "diverged",
                "message": str(exc), "error_rate": float("nan"), "f1": float("nan"),
                "f1_pos": float("nan"), "f1_neg": float("nan"), **{k: float("nan") for k in SPLIT_KEYS},
                "train_seconds": time.perf_counter() - t0, "params": dict(params), "per_task": [],
                "curve": None}
    seconds = time.perf_counter() - t0
    extra = {k.rstrip("_"): int(getattr(est, k)) for k in ("n_updates_", "n_materialized_", "n_corrected_", "rank_")
             if hasattr(est, k)}
    per_task = online_metrics(est.online_margins_, s.y)
    for name, row in zip(s.task_names, per_task):
        row["task"] = name
    f1_pos = float(np.mean([r["f1_pos"] for r in per_task]))
    f1_neg = float(np.mean([r["f1_neg"] for r in per_task]))
    return {
        "algorithm": algorithm,
        "seed": int(seed),
        "dataset": streams.name,
        "status": "ok",
        "error_rate": float(np.mean([r["error_rate"] for r in per_task])),
        "f1": 0.5 * (f1_pos + f1_neg),
        "f1_pos": f1_pos,
        "f1_neg": f1_neg,
        **margin_split(est.online_margins_, s.y),
        "train_seconds": seconds,
        "params": {k: (v.item() if hasattr(v, "item") else v) for k, v in params.items()},
        "resolved_params": dict(getattr(est, "resolved_params_", None) or {}),
        **({"factors": dict(factors)} if factors else {}),
        **extra,
        "per_task": per_task,
        "curve": {"rounds": points.tolist(), "per_task": _curve(est.online_margins_, s.y, points).tolist()},
    }


def _error_only(streams, algorithm, params, seed, max_per_task=None) -> float:
    res = run_stream(streams, algorithm, params, seed, checkpoints=2, max_per_task=max_per_task)
    return res["error_rate"]


# --------------------------------------------------------------------------- parameter search


def _best(trials: list) -> dict:
    ok = [t for t in trials if np.isfinite(t["error_rate"])]
    if not ok:
        raise InvalidInputError("every parameter setting diverged in the search")
    return min(ok, key=lambda t: (t["error_rate"], json.dumps(t["params"], sort_keys=True)))


def _evaluate_grid(streams, algorithm, grid: list, seed, n_jobs, max_per_task) -> list:
    errors = run_parallel(_error_only, [(streams, algorithm, p, seed, max_per_task) for p in grid], n_jobs=n_jobs)
    return [{"params": p, "error_rate": e} for p, e in zip(grid, errors)]


def search_params(streams: MultiTaskStreams, algorithm: str, seed: int = 12345, n_jobs: int = 1,
                  base: dict | None = None, max_per_task: int | None = None) -> dict:
    """Tune ``algorithm`` on the shuffle ``seed`` (the paper's held-out shuffle).

    Returns ``{"best": params, "trials": [{"params", "error_rate"}...], "grid": description}``;
    algorithms without free parameters return ``base`` and no trials.
    """
    base = dict(base or {})
    kind = get_algorithm(algorithm).defaults
    trials: list = []
    if algorithm.startswith("romco") or kind.get("regularizer") in ("nuclear", "logdet"):
        cur = dict(base, lam1=1e-4, lam2=1e-4)
        stage = [dict(cur, eta1=a, eta2=b) for a, b in itertools.product(ETA_GRID, ETA_GRID)]
        trials += _evaluate_grid(streams, algorithm, stage, seed, n_jobs, max_per_task)
        cur = dict(_best(trials)["params"])
        stage = [dict(cur, lam1=a, lam2=b) for a, b in itertools.product(LAMBDA_GRID, LAMBDA_GRID)]
        trials += _evaluate_grid(streams, algorithm, stage, seed, n_jobs, max_per_task)
        cur = dict(_best(trials)["params"])
        stage = [dict(cur, eta1=a, eta2=b) for a, b in itertools.product(ETA_GRID, ETA_GRID)]
        seen = {json.dumps(t["params"], sort_keys=True) for t in trials}
        stage = [p for p in stage if json.dumps(p, sort_keys=True) not in seen]
        trials += _evaluate_grid(streams, algorithm, stage, seed, n_jobs, max_per_task)
        return {"best": _best(trials)["params"], "trials": trials, "grid": ROMCO_SEARCH}
    if kind.get("divergence") in ("logdet", "vonneumann"):
        total = sum(streams.n_samples) if not max_per_task else sum(min(n, max_per_task) for n in streams.n_samples)
        grid = [dict(base, eta=e, normalize=nz, epoch=ep)
                for e, nz, ep in itertools.product([10.0 ** k for k in range(-7, 1)], (False, True),
                                                   (0, total // 10))]
        trials = _evaluate_grid(streams, algorithm, grid, seed, n_jobs, max_per_task)
        return {"best": _best(trials)["params"], "trials": trials,
                "grid": "eta in 1e-7..1 x normalize in {False, True} x epoch in {0, 10% of the instances}"}
    return {"best": base, "trials": [], "grid": "none (no free parameter; C = 1 as in the paper)"}


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
            errs = np.array(run_parallel(_error_only, jobs, n_jobs=n_jobs)).reshape(len(grid), len(seeds))
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


# --------------------------------------------------------------------------- plots and tables

_STYLE = {"romco-logd": ("tab:red", "-"), "romco-nucl": ("tab:orange", "-"), "pa-global": ("tab:gray", "--"),
          "pa-unique": ("black", "--"), "omtl": ("tab:blue", ":"), "omtllog": ("tab:green", "-."),
          "omtlvon": ("tab:purple", "-.")}


def plot_curves(report: dict, path: Path) -> Path:
    """Cumulative error rate vs rounds: one panel per task (up to 12) plus the task average."""
    curves = report["curves"]
    tasks = [t["task"] for t in report["data"]["tasks"]]
    panels = (tasks if len(tasks) <= 12 else []) + ["average over tasks"]
    cols = min(4, len(panels))
    rows = int(np.ceil(len(panels) / cols))
    title = f"{report['dataset']}: cumulative error rate, mean of {len(report['seeds'])} shuffles"
    with figure(path, nrows=rows, ncols=cols, figsize=(3.2 * cols, 2.6 * rows), title=title, fontsize=10
                ) as (fig, axes):
        for k, name in enumerate(panels):
            ax = axes[k]
            lo, hi = np.inf, -np.inf
            for alg, c in curves.items():
                color, ls = _STYLE.get(alg, (None, "-"))
                ys = c["mean"] if name == "average over tasks" else c["per_task"][k]
                rounds = np.array(c["rounds"])
                if name != "average over tasks":
                    n = report["data"]["tasks"][k]["n"]
                    keep = rounds <= n
                    rounds, ys = rounds[keep], np.array(ys)[keep]
                ax.plot(rounds, 100 * np.asarray(ys), color=color, ls=ls, lw=1.2, label=alg)
                late = rounds >= 0.05 * rounds.max()
                if np.any(late):
                    hi = max(hi, 100 * float(np.max(np.asarray(ys)[late])))
                    lo = min(lo, 100 * float(np.min(np.asarray(ys)[late])))
            if np.isfinite(hi) and hi > lo:  # the first rounds (error near 100%) would flatten the rest
                pad = 0.1 * (hi - lo) + 0.1
                ax.set_ylim(max(0.0, lo - pad), hi + pad)
            ax.set_title(name, fontsize=9)
            ax.set_xlabel("rounds", fontsize=8)
            ax.set_ylabel("cumulative error (%)", fontsize=8)
            ax.tick_params(labelsize=7)
        for ax in axes[len(panels):]:
            ax.axis("off")
        axes[0].legend(fontsize=7)
    return path


def plot_sensitivity(report: dict, path: Path) -> Path:
    """Fig. 6: error rate vs lam1 (lam2 fixed) and vs lam2 (lam1 fixed)."""
    sens = report["sensitivity"]
    with figure(path, ncols=2, figsize=(8, 3), title=f"{report['dataset']}: sensitivity to lam1 / lam2",
                fontsize=10) as (fig, axes):
        for ax, which in zip(axes, ("lam1", "lam2")):
            for alg, entry in sens.items():
                color, _ = _STYLE.get(alg, (None, "-"))
                e = entry[which]
                ax.errorbar(e["values"], 100 * np.array(e["error_mean"]), yerr=100 * np.array(e["error_std"]),
                            color=color, marker="o", ms=3, label=alg, capsize=2)
            ax.set_xscale("log")
            other = "lam2" if which == "lam1" else "lam1"
            fixed = {a: entry[which]["fixed"].get(other) for a, entry in sens.items()}
            ax.set_xlabel(f"{which} ({other} fixed: " + ", ".join(f"{v:g}" for v in fixed.values()) + ")",
                          fontsize=8)
            ax.set_ylabel("cumulative error (%)", fontsize=8)
            ax.legend(fontsize=7)
    return path


def _pm(mean, std, scale=100.0) -> str:
    if not np.isfinite(mean):
        return "diverged"
    return f"{scale * mean:6.2f} ({scale * std:.2f})"


def format_table(report: dict) -> str:
    """Human-readable tables: averages over tasks (mean (std over shuffles)), then per task."""
    lines = [
        f"ROMCO protocol on {report['dataset']}: {report['data']['n_tasks']} tasks, "
        f"{report['data']['n_features']} features, {len(report['seeds'])} shuffles "
        f"(majority-class error {100 * report['data'].get('majority_error', float('nan')):.2f} %)",
        "",
        f"{'algorithm':<11} {'error %':>15} {'task std':>8} {'F1 pos %':>15} {'F1 neg %':>15} {'seconds':>8}",
    ]
    for row in report["summary"]:
        lines.append(
            f"{row['algorithm']:<11} {_pm(row['error_rate_mean'], row['error_rate_std']):>15} "
            f"{100 * row['error_rate_task_std']:8.2f} {_pm(row['f1_pos_mean'], row['f1_pos_std']):>15} "
            f"{_pm(row['f1_neg_mean'], row['f1_neg_std']):>15} {row['train_seconds_mean']:8.2f}"
            + (f"  ({row['diverged']} diverged)" if row["diverged"] else "")
        )
    for alg, entry in report.get("ablation", {}).items():
        row = entry["summary"]
        lines.append(
            f"{alg + ' lam=0':<11} {_pm(row['error_rate_mean'], row['error_rate_std']):>15} "
            f"{100 * row['error_rate_task_std']:8.2f} {_pm(row['f1_pos_mean'], row['f1_pos_std']):>15} "
            f"{_pm(row['f1_neg_mean'], row['f1_neg_std']):>15} {row['train_seconds_mean']:8.2f}"
            f"  (ablation: lam1 = lam2 = 0, eta1 = {entry['params'].get('eta1')}, eta2 = {entry['params'].get('eta2')})"
        )
    lines += ["", "predictions pooled over tasks, mean over shuffles: undecided = |margin| < 1e-8 (counted as mistakes)",
              f"{'algorithm':<17} {'error %':>8} {'undecided %':>12} {'err undecided %':>16} {'err decided %':>14}"]
    split_rows = [(r["algorithm"], r) for r in report["summary"]]
    split_rows += [(alg + " lam=0", e["summary"]) for alg, e in report.get("ablation", {}).items()]
    for label, row in split_rows:
        lines.append(f"{label:<17} {100 * row['error_pooled_mean']:8.2f} {100 * row['undecided_rate_mean']:12.2f} "
                     f"{100 * row['error_undecided_mean']:16.1f} {100 * row['error_decided_mean']:14.2f}")
    tasks = report["data"]["tasks"]
    if len(tasks) <= 12:
        lines += ["", "per task: cumulative error % (std over shuffles)"]
        head = f"{'algorithm':<11} " + " ".join(f"{t['task'][:12]:>14}" for t in tasks)
        lines.append(head)
        for row in report["summary"]:
            lines.append(f"{row['algorithm']:<11} " + " ".join(
                f"{_pm(p['error_mean'], p['error_std']):>14}" for p in row["per_task"]))
    if report.get("search"):
        lines += ["", f"parameters chosen on held-out shuffle {report.get('search_seed')}:"]
        for alg, s in report["search"].items():
            lines.append(f"  {alg:<11} {json.dumps(s['best'], sort_keys=True)}  ({s['n_trials']} settings)")
    return "\n".join(lines)
