"""Protocol ``oht``: online heterogeneous transfer, text -> image (paper ``004``, "Experimental Results").

For every one-vs-one binary task of a multi-view data set (45 for 10 classes; see
:func:`sparsesim.data.multiview.make_transfer_tasks` for the disjoint stream / labelled source /
co-occurring pairs), every algorithm makes one online pass over each of ``n_permutations`` random
orders of the task's target stream (the same orders for every algorithm, so runs are paired).
Per task we report the mean online mistake rate; each algorithm is compared with the FIRST one
listed by a paired t-test over the permutations at the 0.01 level (win / tie / loss) and by
Cohen's d. Tasks run in parallel through :func:`sparsesim.parallel.run_parallel` (FAISS pinned to
one thread inside each worker).

Options (``config.options``): ``n_permutations`` (100), ``target_frac`` (0.4), ``source_frac``
(0.2), ``pair_classes`` ("task" | "all"), ``standardize`` (True), ``tasks`` (0-based task indices,
default all), ``target_view`` / ``source_view`` (override the data set's roles), ``level`` (0.01),
``k_values`` (list of K for the sensitivity plot; default none), ``k_permutations`` (20),
``curve_tasks`` (1-based task numbers for the online mistake curves; default 2, 14, 36, 7, 16, 33),
``grid`` (``{param: [values]}``, a key ``ALG.param`` for one algorithm only: the protocol runs once
per combination and reports every point's mean mistake rates and each algorithm's best point —
the parameter search of ``docs/transfer.md``, on a split seed kept apart from the reported runs),
``factors`` (``{"sigma": [multiples]}``: the protocol runs once per multiple, every algorithm whose
``sigma`` is ``"auto"`` at that multiple of the width it resolves to on each task's target stream;
reported like ``grid``, with ``resolved_params`` per point and algorithm, the mean over tasks).
``config.seeds``: each seed gives one task split and one set of permutations (win / tie / loss
counts add up over seeds x tasks). ``config.triplets`` is not used (a stream is a task's whole
target part).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from pathlib import Path

import numpy as np

from ..data.catalog import get_dataset_spec, load_registered
from ..data.multiview import make_transfer_tasks
from ..defaults import AUTO, is_auto, resolve_sigma
from ..exceptions import InvalidInputError
from ..parallel import run_parallel
from ..registry import get_algorithm
from . import ExperimentConfig
from .runner import auto_names, check_factors, figure, grid_points, protocol_options, scale_auto

DEFAULT_OPTIONS = {
    "n_permutations": 100,
    "target_frac": 0.4,
    "source_frac": 0.2,
    "pair_classes": "task",
    "standardize": True,
    "tasks": None,
    "target_view": None,
    "source_view": None,
    "level": 0.01,
    "k_values": None,
    "k_permutations": 20,
    "curve_tasks": [2, 14, 36, 7, 16, 33],
    "grid": None,
    "factors": None,
}
RESOLVABLE = ("sigma",)  # the parameters with an "auto" rule (sparsesim.defaults)


def _options(config: ExperimentConfig) -> dict:
    opts = protocol_options("oht", config.options, DEFAULT_OPTIONS)
    if int(opts["n_permutations"]) < 2:
        raise InvalidInputError("n_permutations must be at least 2 (the paired t-test needs repeats)")
    return opts


def _make_estimators(config: ExperimentConfig):
    if not config.algorithms:
        raise InvalidInputError("protocol 'oht' needs at least one algorithm (the first is the baseline)")
    estimators = []
    for name in config.algorithms:
        spec = get_algorithm(name)
        if spec.kind != "transfer":
            raise InvalidInputError(f"algorithm {name!r} is of kind {spec.kind!r}; protocol 'oht' runs 'transfer' algorithms")
        est = spec.make(**config.params_for(name))
        est.check_params()
        estimators.append((name, est))
    return estimators


def load_tasks(config: ExperimentConfig, seed: int, opts: dict | None = None):
    """The data set's transfer tasks for split ``seed`` (and the multi-view data)."""
    opts = _options(config) if opts is None else opts
    spec = get_dataset_spec(config.dataset)
    if spec.kind != "multiview":
        raise InvalidInputError(
            f"protocol 'oht' needs a multi-view data set (e.g. wikipedia-xmodal, mfeat); {config.dataset!r} is {spec.kind!r}"
        )
    view_opts = {k: opts[k] for k in ("target_view", "source_view") if opts[k]}
    data = load_registered(config.dataset, **view_opts)
    tasks = make_transfer_tasks(
        data, target_frac=float(opts["target_frac"]), source_frac=float(opts["source_frac"]),
        pair_classes=opts["pair_classes"], standardize=bool(opts["standardize"]),
        random_state=int(seed), tasks=opts["tasks"],
    )
    return data, tasks


def _task_job(task, task_number: int, estimators, seed: int, n_permutations: int,
              k_values, k_permutations: int, want_curve: bool, factors: dict | None = None) -> dict:
    """All algorithms on all permutations of one task (runs inside a worker); ``factors``
    (``{param: multiple}``) scales the values the ``"auto"`` parameters resolve to."""
    import faiss

    faiss.omp_set_num_threads(1)
    # sigma="auto": resolved on this task's target stream (the same value for the target kernel and
    # the neighbour weights of the source hypothesis)
    estimators = [(name, _on_task(est, task.target_X, factors or {})) for name, est in estimators]
    n = task.target_y.shape[0]
    y = task.target_y
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(task_number), 1]))
    orders = [rng.permutation(n) for _ in range(n_permutations)]

    grams, gram_time = {}, {}
    sources, source_time = {}, {}
    margins, margin_time = {}, {}

    def gram_of(est):
        key = (est.kernel, est.sigma if est.kernel == "gaussian" else None)
        if key not in grams:
            t0 = time.perf_counter()
            grams[key] = est.gram(task.target_X)
            gram_time[key] = time.perf_counter() - t0
        return key

    def source_of(est, n_neighbors=None):
        if n_neighbors is not None:
            est = _with(est, n_neighbors=n_neighbors)
        key = est.source_key()
        if key not in sources:
            t0 = time.perf_counter()
            src = est.make_source().fit(task.source_X, task.source_y, task.pair_target, task.pair_source)
            sources[key] = src.decision_function(task.target_X)
            source_time[key] = time.perf_counter() - t0
        return key

    def margins_of(est, gkey, p):
        key = (gkey, est.variant, est.C, p)
        if key not in margins:
            t0 = time.perf_counter()
            margins[key] = est.target_margins(grams[gkey], y, orders[p])
            margin_time[key] = time.perf_counter() - t0
        return key

    def run_one(est, h, p, gkey):
        mkey = margins_of(est, gkey, p)
        t0 = time.perf_counter()
        yo = y[orders[p]]
        mist = est.stream_mistakes(h[orders[p]], margins[mkey], yo)
        return mist, time.perf_counter() - t0 + margin_time[mkey]

    out = {"task": task.name, "number": task_number, "sizes": task.sizes(), "algorithms": {}}
    zeros = np.zeros(n)
    for name, est in estimators:
        gkey = gram_of(est)
        seconds = gram_time[gkey]
        if est.uses_source:
            skey = source_of(est)
            h = sources[skey]
            seconds += source_time[skey]
            source_acc = float(np.mean(np.sign(h) == y))
        else:
            h, source_acc = zeros, None
        rates = np.empty(n_permutations)
        curve = np.zeros(n) if want_curve else None
        for p in range(n_permutations):
            mist, sec = run_one(est, h, p, gkey)
            seconds += sec
            rates[p] = mist.mean()
            if want_curve:
                curve += np.cumsum(mist) / np.arange(1, n + 1)
        entry = {"rates": rates, "seconds": seconds, "source_accuracy": source_acc,
                 "resolved_params": {"sigma": float(est.sigma)}}
        if want_curve:
            entry["curve"] = curve / n_permutations
        if k_values:
            kp = min(int(k_permutations), n_permutations)
            sweep = {}
            for k in k_values:
                if est.uses_source:
                    hk = sources[source_of(est, n_neighbors=int(k))]
                    sweep[int(k)] = float(np.mean([run_one(est, hk, p, gkey)[0].mean() for p in range(kp)]))
                else:
                    sweep[int(k)] = float(rates[:kp].mean())
            entry["k_sweep"] = sweep
        out["algorithms"][name] = entry
    return out


def _on_task(est, X, factors: dict):
    """``est`` with its ``"auto"`` sigma resolved on the target rows ``X`` (times its multiple in ``factors``)."""
    if not is_auto(est.sigma):
        return est
    auto = {"sigma": resolve_sigma(est.sigma, X)}
    return _with(est, **{**auto, **scale_auto(auto, factors)})


def _with(est, **params):
    from sklearn.base import clone

    return clone(est).set_params(**params)


def compare(base: np.ndarray, other: np.ndarray, level: float = 0.01) -> tuple[str, float, float]:
    """Paired t-test of ``other`` against ``base`` (mistake rates over the same permutations).

    Returns ``(outcome, p_value, cohens_d)``: ``"win"`` when ``other`` has a significantly
    (p < level) lower mean, ``"loss"`` when significantly higher, else ``"tie"``; Cohen's
    ``d = (mean(base) - mean(other)) / sqrt((var(base) + var(other)) / 2)`` (positive = improvement).
    """
    from scipy import stats

    base = np.asarray(base, dtype=np.float64)
    other = np.asarray(other, dtype=np.float64)
    diff = base - other
    mean_diff = float(diff.mean())
    if np.all(diff == diff[0]):  # constant difference: the t statistic is undefined
        p = 0.0 if mean_diff != 0 else 1.0
    else:
        import warnings

        with warnings.catch_warnings():  # nearly identical samples: scipy warns, the p-value is still right
            warnings.simplefilter("ignore", RuntimeWarning)
            p = float(stats.ttest_rel(other, base).pvalue)
    pooled = math.sqrt((base.var(ddof=1) + other.var(ddof=1)) / 2.0)
    if pooled > 0:
        d = mean_diff / pooled
    else:
        d = 0.0 if mean_diff == 0 else math.copysign(math.inf, mean_diff)
    if p < level and mean_diff > 0:
        return "win", p, d
    if p < level and mean_diff < 0:
        return "loss", p, d
    return "tie", p, d


def run_grid(config: ExperimentConfig, grid: dict) -> dict:
    """The protocol once per point of ``grid``; returns ``{"protocol", "dataset", "grid", "best", "results"}``.

    ``results`` holds one row per (point, algorithm): ``algorithm, params`` (the point),
    ``mistake_rate`` (mean over tasks and seeds) and, against the baseline, ``win, tie, loss``.
    ``best[algorithm]`` is the point of its lowest mean mistake rate.
    """
    def run_point(point):
        params = {alg: dict(p) for alg, p in config.params.items()}
        for key, value in point.items():
            alg, _, name = key.rpartition(".")
            if alg and alg not in config.algorithms:
                raise InvalidInputError(f"option 'grid': {key!r} names {alg!r}, which is not one of the algorithms")
            params.setdefault(alg or "*", {})[name] = value
        options = {k: v for k, v in config.options.items() if k != "grid"}
        return run(dataclasses.replace(config, params=params, options=options, out_dir=None))

    return _points_report(config, grid_points(grid), run_point)


def _points_report(config: ExperimentConfig, points: list, run_point) -> dict:
    """One protocol report per point (``run_point(point)``), summed up: each point's mean mistake
    rate, values used and win / tie / loss per algorithm, and each algorithm's best point."""
    results, rows = [], []
    for point in points:
        report = run_point(point)
        rates, resolved = {}, {}
        for name in config.algorithms:
            mine = [r for r in report["results"] if r["algorithm"] == name]
            rates[name] = float(np.mean([r["mistake_rate"] for r in mine]))
            resolved[name] = {"sigma": float(np.mean([r["resolved_params"]["sigma"] for r in mine]))}
            results.append({"algorithm": name, "params": point, "mistake_rate": rates[name],
                            "resolved_params": resolved[name], **report["win_tie_loss"].get(name, {})})
        rows.append({"point": point, "mistake_rate": rates, "resolved_params": resolved,
                     "win_tie_loss": report["win_tie_loss"]})
    best = {name: min(rows, key=lambda row: row["mistake_rate"][name])["point"] for name in config.algorithms}
    return {"protocol": "oht", "dataset": config.dataset, "baseline": config.algorithms[0], "grid": rows,
            "best": best, "results": results}


def tune_transfer(algorithm: str, dataset: str, seed: int = 1, grid: dict | None = None, params: dict | None = None,
                  n_permutations: int = 20, n_jobs: int = 1) -> dict:
    """``sparsesim tune`` for the transfer learners: the protocol's grid search (:func:`run_grid`) on
    split ``seed`` (keep it apart from the split seeds you report), scored by the online mistake
    rate, mean over the tasks and ``n_permutations`` orders of each task's stream.

    The default grid: ``sigma`` at 0.7, 1 and 1.4 times its ``"auto"`` value (the mean over the
    split's tasks), and, with a source hypothesis, ``n_neighbors`` in {"auto", 10, 50, 100} and (OHT1) the
    Hedge rate ``eta`` in {0.05, 0.5}.

    Returns
    -------
    dict
        ``algorithm, dataset, split_seed, metric ("mistake_rate"), best_params, best_validation``
        (the best point's mistake rate), ``auto_values`` and ``tuning`` (the grid and every point).
    """
    spec = get_algorithm(algorithm)
    if spec.kind != "transfer":
        raise InvalidInputError(f"tune_transfer searches transfer learners; {algorithm!r} is a {spec.kind} algorithm")
    config = ExperimentConfig(dataset=dataset, algorithms=[algorithm], seeds=[int(seed)],
                              params={algorithm: dict(params or {})}, n_jobs=n_jobs,
                              options={"n_permutations": int(n_permutations)})
    combiner = spec.defaults.get("combiner")
    auto = {}
    if not grid:
        _, tasks = load_tasks(config, int(seed))
        auto["sigma"] = float(np.mean([resolve_sigma(AUTO, t.target_X) for t in tasks]))
        grid = {"sigma": [round(auto["sigma"] * f, 4) for f in (0.7, 1.0, 1.4)]}
        if combiner != "target":
            grid["n_neighbors"] = ["auto", 10, 50, 100]
        if combiner == "hedge":
            grid["eta"] = [0.05, 0.5]
    report = run_grid(config, grid)
    best = dict(report["best"][algorithm])
    return {"algorithm": algorithm, "dataset": dataset, "split_seed": int(seed), "metric": "mistake_rate",
            "best_params": best, "best_validation": min(row["mistake_rate"][algorithm] for row in report["grid"]),
            "auto_values": auto, "tuning": {"grid": grid, "points": report["grid"]}}


def run(config: ExperimentConfig) -> dict:
    """Run the OHT protocol; returns the report (see the module docstring)."""
    opts = _options(config)
    names_of = {name: auto_names(name, config.params_for(name), RESOLVABLE) for name in config.algorithms}
    factors = check_factors(opts["factors"], names_of)
    if factors and opts["grid"]:
        raise InvalidInputError("options 'grid' (given values) and 'factors' (multiples of the 'auto' values) "
                                "exclude each other; give one")
    if opts["grid"]:
        return run_grid(config, opts["grid"])
    if factors:
        quiet = dataclasses.replace(config, out_dir=None)  # one report for all points: no per-point plots
        report = _points_report(config, grid_points(factors, "factors"), lambda point: _run(quiet, opts, point))
        return dict(report, factors=factors)
    return _run(config, opts)


def _run(config: ExperimentConfig, opts: dict, factors: dict | None = None) -> dict:
    """The protocol's runs, the ``"auto"`` parameters at the multiples ``factors`` (``{param: multiple}``)."""
    estimators = _make_estimators(config)
    names = [n for n, _ in estimators]
    base = names[0]
    n_perm = int(opts["n_permutations"])
    curve_tasks = set(int(c) for c in (opts["curve_tasks"] or []))
    level = float(opts["level"])

    results, task_rows, wtl_counts = [], [], {n: {"win": 0, "tie": 0, "loss": 0} for n in names}
    d_counts = {n: {"large": 0, "medium": 0} for n in names}
    curves, k_sweeps, sizes = {}, {}, []
    t_start = time.perf_counter()
    for seed in config.seeds:
        data, tasks = load_tasks(config, seed, opts)
        numbers = list(range(1, len(tasks) + 1)) if opts["tasks"] is None else [int(k) + 1 for k in opts["tasks"]]
        jobs = [(task, num, estimators, int(seed), n_perm, opts["k_values"], int(opts["k_permutations"]),
                 num in curve_tasks, factors) for task, num in zip(tasks, numbers)]
        progress = None
        if config.progress:
            def progress(done, total=len(jobs)):
                print(f"\roht {config.dataset} seed {seed}: {done}/{total} tasks", end="", file=sys.stderr)
        outs = run_parallel(_task_job, jobs, n_jobs=config.n_jobs, progress=progress)
        if config.progress:
            print(file=sys.stderr)
        per_alg = {n: [] for n in names}
        seconds = {n: 0.0 for n in names}
        for out in outs:
            sizes.append({"task": out["task"], "number": out["number"], "seed": int(seed), **out["sizes"]})
            base_rates = out["algorithms"][base]["rates"]
            row = {"task": out["task"], "number": out["number"], "seed": int(seed)}
            for n in names:
                entry = out["algorithms"][n]
                rates = entry["rates"]
                outcome, p, d = compare(base_rates, rates, level) if n != base else ("tie", 1.0, 0.0)
                if n != base:
                    wtl_counts[n][outcome] += 1
                    if d > 0.8:
                        d_counts[n]["large"] += 1
                    elif d > 0.2:
                        d_counts[n]["medium"] += 1
                per_alg[n].append({"task": out["task"], "number": out["number"],
                                   "mistake_rate": float(rates.mean()), "std": float(rates.std(ddof=1)),
                                   "outcome": outcome, "p_value": p, "cohens_d": d,
                                   "source_accuracy": entry["source_accuracy"],
                                   "resolved_params": entry["resolved_params"]})
                row[n] = float(rates.mean())
                seconds[n] += entry["seconds"]
                if "curve" in entry:
                    curves.setdefault(f"{out['number']}:{out['task']}", {})[n] = entry["curve"].tolist()
                if "k_sweep" in entry:
                    for k, v in entry["k_sweep"].items():
                        k_sweeps.setdefault(n, {}).setdefault(k, []).append(v)
            task_rows.append(row)
        for name, est in estimators:
            task_rates = np.array([r["mistake_rate"] for r in per_alg[name]])
            res = {"algorithm": name, "seed": int(seed), "mistake_rate": float(task_rates.mean()),
                   "mistake_rate_std_over_tasks": float(task_rates.std(ddof=1)) if task_rates.size > 1 else 0.0,
                   "train_seconds": seconds[name], "n_tasks": int(task_rates.size), "n_permutations": n_perm,
                   # the values used, mean over the tasks (sigma="auto" resolves per task: see per_task)
                   "resolved_params": {"sigma": float(np.mean([r["resolved_params"]["sigma"] for r in per_alg[name]]))},
                   "per_task": per_alg[name]}
            if name != base:
                res.update({k: sum(r["outcome"] == k for r in per_alg[name]) for k in ("win", "tie", "loss")})
            results.append(res)

    report = {
        "protocol": "oht",
        "dataset": config.dataset,
        "baseline": base,
        "results": results,
        "win_tie_loss": {n: wtl_counts[n] for n in names[1:]},
        "cohens_d": {n: d_counts[n] for n in names[1:]},
        "tasks": task_rows,
        "task_sizes": sizes,
        "views": {"target": data.target_view, "source": data.source_view},
        "options": {k: v for k, v in opts.items()},
        "params": {n: est.get_params() for n, est in estimators},
        "level": level,
        "wall_seconds": time.perf_counter() - t_start,
    }
    if k_sweeps:
        report["k_sensitivity"] = {n: {str(k): float(np.mean(v)) for k, v in sorted(ks.items())}
                                   for n, ks in k_sweeps.items()}
    if config.out_dir is not None:
        report["plots"] = write_plots(report, curves, Path(config.out_dir))
    return report


def format_table(report: dict) -> str:
    """Summary table (one row per algorithm and seed) followed by the per-task mistake rates; for
    a grid, one row per point with every algorithm's mean mistake rate, then the best points."""
    if "grid" in report:
        names = list(report["best"])
        lines = [f"OHT protocol on {report['dataset']}: mean mistake rate per grid point (baseline {report['baseline']})",
                 f"{'point':<44}" + "".join(f"{n:>12}" for n in names)]
        for row in report["grid"]:
            point = ", ".join(f"{k} x{v:g}" if "factors" in report else f"{k}={v}"  # factors: multiples of "auto"
                              for k, v in row["point"].items())
            lines.append(f"{point[:44]:<44}" + "".join(f"{row['mistake_rate'][n]:>12.4f}" for n in names))
        lines += ["", "best point per algorithm:"] + [f"  {n:<12} {p}" for n, p in report["best"].items()]
        return "\n".join(lines)
    base = report["baseline"]
    lines = [f"OHT protocol on {report['dataset']} (target view {report['views']['target']}, "
             f"source view {report['views']['source']}); baseline {base}; paired t-test at {report['level']}",
             f"{'algorithm':<12}{'seed':>5}{'mistake rate':>14}{'win/tie/loss':>14}{'d>0.8':>7}{'d>0.2':>7}{'seconds':>10}"]
    for r in report["results"]:
        wtl = f"{r['win']}/{r['tie']}/{r['loss']}" if "win" in r else "-"
        large = sum(t["cohens_d"] > 0.8 for t in r["per_task"]) if "win" in r else ""
        medium = sum(0.2 < t["cohens_d"] <= 0.8 for t in r["per_task"]) if "win" in r else ""
        lines.append(f"{r['algorithm']:<12}{r['seed']:>5}{r['mistake_rate']:>14.4f}{wtl:>14}"
                     f"{large!s:>7}{medium!s:>7}{r['train_seconds']:>10.2f}")
    names = [r["algorithm"] for r in report["results"] if r["seed"] == report["results"][0]["seed"]]
    lines.append("")
    lines.append(f"{'#':>3} {'task':<28}" + "".join(f"{n:>10}" for n in names))
    for row in report["tasks"]:
        lines.append(f"{row['number']:>3} {row['task'][:28]:<28}" + "".join(f"{row[n]:>10.4f}" for n in names))
    if "k_sensitivity" in report:
        lines.append("")
        lines.append("K sensitivity (mean mistake rate over tasks)")
        for n, ks in report["k_sensitivity"].items():
            lines.append(f"  {n:<12}" + "  ".join(f"K={k}: {v:.4f}" for k, v in ks.items()))
    return "\n".join(lines)


def write_plots(report: dict, curves: dict, out_dir: Path) -> list[str]:
    """PNG plots like the paper's Figs. 1-3 into ``out_dir``; returns the file names."""
    base = report["baseline"]
    names = list(report["params"])
    seed0 = report["results"][0]["seed"]
    rows = [r for r in report["tasks"] if r["seed"] == seed0]
    tag = report["dataset"]
    written = [f"oht_{tag}_fig1_tasks.png"]

    others = names[1:] or names
    with figure(out_dir / written[-1], ncols=len(others), figsize=(6 * len(others), 3.6)) as (fig, axes):
        x = np.arange(1, len(rows) + 1)
        for ax, n in zip(axes, others):
            ax.plot(x, [r[base] for r in rows], "o-", ms=3, label=base)
            if n != base:
                ax.plot(x, [r[n] for r in rows], "s-", ms=3, label=n)
            ax.set_xlabel("task")
            ax.set_ylabel("average rate of mistakes")
            ax.set_title(f"{base} vs. {n}")
            ax.legend()

    if curves:
        keys = list(curves)[:6]
        ncol = min(3, len(keys))
        nrow = int(math.ceil(len(keys) / ncol))
        written.append(f"oht_{tag}_fig2_curves.png")
        with figure(out_dir / written[-1], nrows=nrow, ncols=ncol, figsize=(4.5 * ncol, 3.2 * nrow)) as (fig, axes):
            for ax, key in zip(axes, keys):
                for n, c in curves[key].items():
                    ax.plot(np.arange(1, len(c) + 1), c, label=n)
                ax.set_title(f"task {key}", fontsize=9)
                ax.set_xlabel("round")
                ax.set_ylabel("online mistake rate")
            axes[0].legend(fontsize=8)
            for ax in axes[len(keys):]:
                ax.axis("off")

    written.append(f"oht_{tag}_fig3_k_time.png")
    with figure(out_dir / written[-1], ncols=2, figsize=(11, 3.6)) as (fig, (ax, ax_time)):
        if "k_sensitivity" in report:
            for n, ks in report["k_sensitivity"].items():
                ax.plot([int(k) for k in ks], list(ks.values()), "o-", label=n)
            ax.set_xscale("log")
            ax.set_xlabel("K (nearest co-occurring images)")
            ax.set_ylabel("mean rate of mistakes over tasks")
            ax.legend(fontsize=8)
            ax.set_title("(a) sensitivity to K")
        else:
            ax.axis("off")
        secs = [r["train_seconds"] for r in report["results"] if r["seed"] == seed0]
        ax_time.bar(range(len(names)), secs)
        ax_time.set_xticks(range(len(names)))
        ax_time.set_xticklabels(names, rotation=30, fontsize=8)
        ax_time.set_ylabel("seconds (all tasks and permutations)")
        ax_time.set_title("(b) running time")
    return written
