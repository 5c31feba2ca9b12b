"""The IJCAI 2017 OMTRSL protocol (Hao et al., ``papers/000``, section 4).

* 5-fold cross-validation (80% train / 20% test), stratified by (task, class).
* In each fold, a stream of OMTRSL triplets (task drawn uniformly, same-class pair and other-class
  document inside it, fair coin y_t; :func:`sparsesim.triplets.omtrsl_triplets`) is drawn from the
  training documents; every algorithm of the fold sees the same stream (same seed).
* Within each task, each test document queries the task's *other test documents*, ranked by
  S^k(x, x') = x^T M^k x' (eq. 1); AP@k (precision at top k) and mAP@k for k = 1..10, then the
  mean over tasks. ``ap@10`` / ``map@10`` of a result are these task means; ``per_task`` keeps
  the task-level numbers.
* ``omtrsl-random`` queries at the ratio the ``omtrsl-active`` run of the same fold observed.
* Options (``config.options``):

  ``folds`` (5), ``search`` (False: run the parameter search of Figure 3 first and use the best
  validation AP@10 per algorithm), ``search_only`` (False: the search alone, on the first seed, no
  cross-validation), ``b_grid``, ``c_grid`` (search grids), ``active_deltas``
  (a list: the Figure 4 sweep of OMTRSL-Active vs OMTRSL-Random over query ratios),
  ``dataset_options`` (passed to ``load_dataset``), ``backend`` (joblib backend for
  :func:`~sparsesim.parallel.run_parallel`, e.g. ``"dask"``), ``dask_scheduler`` (address of a
  running Dask scheduler to connect a ``Client`` to).

Plots (PNG, when ``config.out_dir`` is set): AP@k / mAP@k against k (Figures 1-2), the parameter
sensitivity (Figure 3), AP@10 against the query ratio (Figure 4). Training time per algorithm
(Table 1) is in ``report["timing"]``.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import numpy as np

from ..persistence import save_figure
from ..data import load_dataset
from ..evaluation import evaluate_retrieval
from ..exceptions import InvalidInputError, UnknownNameError
from ..parallel import run_parallel
from ..registry import get_algorithm, make_estimator
from ..triplets import stratified_kfold, stratified_split

PROTOCOL = "ijcai17"
DEFAULT_ALGORITHMS = ["omtrsl", "ostrsl", "ogrsl", "omtrsl-active", "omtrsl-random"]
DEFAULT_TRIPLETS = 20_000
KS = list(range(1, 11))
DEFAULT_B_GRID = [0.1, 1.0, 10.0, 100.0]
DEFAULT_C_GRID = [0.01, 0.1, 1.0, 10.0]
# paper, Table 1 (seconds, Matlab; the only numbers of the paper's results given as text)
PAPER_TABLE1 = {
    "isolet-tasks": {"mtlmnn": 241.3, "ogrsl": 12.5, "ostrsl": 12.6, "omtrsl": 14.7},
    "news20-tasks": {"mtlmnn": 5371.4, "ogrsl": 111.2, "ostrsl": 114.9, "omtrsl": 126.4},
}
_HAS_B = ("omtrsl", "omtrsl-active", "omtrsl-random")


# --------------------------------------------------------------------------- data and splits


def load_multitask_data(name, **options):
    """Load a multi-task data set (``LabelledData`` with ``tasks``) or refuse a single-task one."""
    data = load_dataset(name, **options)
    if data.tasks is None:
        raise InvalidInputError(
            f"data set {name!r} has no task column; the ijcai17 protocol needs a multi-task data set "
            "(e.g. isolet-tasks, news20-tasks)"
        )
    return data


def _strata(y, tasks):
    """One label per (task, class) pair, so folds are stratified inside every task."""
    _, codes = np.unique(np.stack([np.asarray(tasks), np.asarray(y)], axis=1), axis=0, return_inverse=True)
    return codes.reshape(-1)


def cv_folds(y, tasks, n_folds=5, seed=0):
    """Stratified k-fold over (task, class) pairs: list of (train_idx, test_idx)."""
    return stratified_kfold(_strata(y, tasks), n_splits=n_folds, seed=seed)


# --------------------------------------------------------------------------- one run


def evaluate_tasks(model, X, y, tasks, rows, task_labels, task_names=None) -> dict:
    """Per-task retrieval among ``rows``: each test document of task k queries the task's other
    test documents under ``model.model_for(k)``; returns task means and the per-task list."""
    per_task = []
    for k, label in enumerate(task_labels):
        r = rows[np.asarray(tasks)[rows] == label]
        if r.size < 2:
            continue
        bil = model.model_for(label)
        res = evaluate_retrieval(bil.scorer(X[r]), np.asarray(y)[r], k=10, ks=KS)
        per_task.append({
            "task": task_names[k] if task_names is not None and k < len(task_names) else _plain(label),
            "ap@10": res["ap@10"], "map@10": res["map@10"], "map": res["map"],
            "ap_curve": res["curves"]["ap"], "map_curve": res["curves"]["map"],
            "n_queries": res["n_queries"],
        })
    if not per_task:
        raise InvalidInputError("no task has two or more test documents")
    return {
        "ap@10": float(np.mean([p["ap@10"] for p in per_task])),
        "map@10": float(np.mean([p["map@10"] for p in per_task])),
        "map": float(np.mean([p["map"] for p in per_task])),
        "ap_curve": np.mean([p["ap_curve"] for p in per_task], axis=0).tolist(),
        "map_curve": np.mean([p["map_curve"] for p in per_task], axis=0).tolist(),
        "per_task": per_task,
    }


def _plain(v):
    return v.item() if isinstance(v, np.generic) else v


def run_one(algorithm, params, X, y, tasks, train_idx, eval_idx, n_triplets, seed, task_names=None,
            fold=None, stage="cv"):
    """Train ``algorithm`` on the OMTRSL stream of ``train_idx`` and evaluate on ``eval_idx``.

    Module-level so that :func:`run_parallel` can ship it to workers. Returns a flat result dict.
    """
    params = dict(params)
    if algorithm == "ostrsl":
        params.setdefault("n_jobs", 1)  # the outer runs are already parallel
    est = make_estimator(algorithm, **params, n_triplets=int(n_triplets), random_state=int(seed))
    est.fit(X[train_idx], np.asarray(y)[train_idx], np.asarray(tasks)[train_idx])
    labels = np.unique(np.asarray(tasks))
    ev = evaluate_tasks(est.model_, X, y, tasks, eval_idx, labels, task_names)
    out = {
        "algorithm": algorithm,
        "stage": stage,
        "seed": int(seed),
        "fold": fold,
        "ap@10": ev["ap@10"],
        "map@10": ev["map@10"],
        "map": ev["map"],
        "ap_curve": ev["ap_curve"],
        "map_curve": ev["map_curve"],
        "per_task": ev["per_task"],
        "train_seconds": float(est.train_seconds_),
        "updates_per_second": float(est.updates_per_second_),
        "n_triplets": int(est.n_triplets_seen_),
        "n_updates": int(est.n_updates_),
        "query_ratio": float(est.query_ratio_),
        "params": {k: _plain(v) for k, v in params.items() if k != "n_jobs"},
    }
    return out


# --------------------------------------------------------------------------- the protocol


@contextlib.contextmanager
def _backend_context(options):
    """Connect a Dask client when ``dask_scheduler`` is given (the joblib "dask" backend needs one)."""
    address = options.get("dask_scheduler")
    if address:
        from dask.distributed import Client

        with Client(address):
            yield
    else:
        yield


def _stream_seed(seed, fold):
    return int(seed) * 1000 + int(fold)


def _params(config, algorithm, chosen):
    p = dict(chosen.get(algorithm, {}))
    if algorithm in ("omtrsl-active", "omtrsl-random"):
        base = dict(chosen.get("omtrsl", {}))
        base.update(p)
        p = base
    p.update(config.params_for(algorithm))
    return p


def _search(config, data, algorithms, n_triplets, runner):
    """Figure 3: validation AP@10 over b x C (OMTRSL) and C (OSTRSL, OGRSL) on one split."""
    options = config.options
    seed = int(config.seeds[0])
    strata = _strata(data.y, data.tasks)
    outer_train, _ = cv_folds(data.y, data.tasks, int(options.get("folds", 5)), seed)[0]
    tr, va = stratified_split(strata[outer_train], train_fraction=0.75, seed=seed + 7)
    tr, va = outer_train[tr], outer_train[va]
    b_grid = [float(b) for b in options.get("b_grid", DEFAULT_B_GRID)]
    c_grid = [float(c) for c in options.get("c_grid", DEFAULT_C_GRID)]
    jobs = []
    searched = [a for a in ("omtrsl", "ostrsl", "ogrsl") if a in algorithms or
                (a == "omtrsl" and any(x in algorithms for x in _HAS_B))]
    for alg in searched:
        grid = [{"b": b, "C": c} for b in b_grid for c in c_grid] if alg == "omtrsl" else [{"C": c} for c in c_grid]
        for p in grid:
            fixed = dict(config.params_for(alg))
            fixed.update(p)
            jobs.append((alg, fixed, data.X, data.y, data.tasks, tr, va, n_triplets, _stream_seed(seed, 99),
                         data.task_names, None, "search"))
    results = runner(jobs)
    chosen = {}
    for alg in searched:
        rs = [r for r in results if r["algorithm"] == alg]
        best = max(rs, key=lambda r: r["ap@10"])
        chosen[alg] = {k: v for k, v in best["params"].items() if k in ("b", "C")}
    return results, chosen


def run(config) -> dict:
    """Run the protocol; see the module docstring. Returns ``{"protocol", "dataset", "results", ...}``."""
    options = dict(config.options)
    algorithms = list(config.algorithms) or list(DEFAULT_ALGORITHMS)
    for alg in algorithms:
        spec = get_algorithm(alg)
        if spec.kind != "multitask-similarity":
            raise UnknownNameError(
                f"algorithm {alg!r} is not a multi-task similarity learner; the ijcai17 protocol runs "
                "omtrsl, omtrsl-active, omtrsl-random, ostrsl, ogrsl"
            )
    data = load_multitask_data(config.dataset, **options.get("dataset_options", {}))
    n_triplets = int(config.triplets or options.get("triplets", DEFAULT_TRIPLETS))
    n_folds = int(options.get("folds", 5))
    backend = options.get("backend")
    n_jobs = config.n_jobs if backend is None else (None if config.n_jobs in (None, 1) else config.n_jobs)

    def runner(jobs):
        return run_parallel(run_one, jobs, n_jobs=n_jobs, backend=backend)

    started = time.perf_counter()
    report = {"protocol": PROTOCOL, "dataset": config.dataset, "n_triplets": n_triplets, "n_folds": n_folds,
              "representation": data.info.get("representation", ""), "tasks": list(data.task_names or []),
              "n_documents": int(data.n_documents), "n_features": int(data.n_features)}
    with _backend_context(options):
        chosen = {}
        if options.get("search") or options.get("search_only"):
            search_results, chosen = _search(config, data, algorithms, n_triplets, runner)
            report["search"] = {"results": search_results, "chosen": chosen,
                                "b_grid": options.get("b_grid", DEFAULT_B_GRID),
                                "c_grid": options.get("c_grid", DEFAULT_C_GRID)}
        if options.get("search_only"):  # the parameter search alone: no cross-validation
            report.update(results=[], summary={}, timing={}, wall_seconds=time.perf_counter() - started,
                          chosen_params={a: _params(config, a, chosen) for a in algorithms})
            return report
        folds = {seed: cv_folds(data.y, data.tasks, n_folds, seed) for seed in config.seeds}

        def fold_jobs(alg, params):
            return [(alg, params, data.X, data.y, data.tasks, tr, te, n_triplets, _stream_seed(seed, f),
                     data.task_names, f, "cv")
                    for seed in config.seeds for f, (tr, te) in enumerate(folds[seed])]

        first = [a for a in algorithms if a != "omtrsl-random"]
        jobs = [j for a in first for j in fold_jobs(a, _params(config, a, chosen))]
        results = runner(jobs)
        for r, j in zip(results, jobs):  # keep the fold's seed (not the stream seed) in the result
            r["seed"] = int(j[8] // 1000)
        if "omtrsl-random" in algorithms:
            ratio = {(r["seed"], r["fold"]): r["query_ratio"] for r in results if r["algorithm"] == "omtrsl-active"}
            rjobs = []
            for j in fold_jobs("omtrsl-random", _params(config, "omtrsl-random", chosen)):
                key = (j[8] // 1000, j[10])
                if key in ratio and "query_ratio" not in config.params_for("omtrsl-random"):
                    j = (j[0], dict(j[1], query_ratio=max(ratio[key], 1e-6))) + j[2:]
                rjobs.append(j)
            rres = runner(rjobs)
            for r, j in zip(rres, rjobs):
                r["seed"] = int(j[8] // 1000)
            results += rres
        report["results"] = results
        deltas = options.get("active_deltas")
        if deltas:
            report["active_sweep"] = _active_sweep(config, chosen, [float(x) for x in deltas], fold_jobs, runner)
    report["chosen_params"] = {a: _params(config, a, chosen) for a in algorithms}
    report["summary"] = summarize(results)
    report["timing"] = {a: s["train_seconds"] for a, s in report["summary"].items()}
    report["paper_table1_seconds"] = PAPER_TABLE1.get(config.dataset)
    report["wall_seconds"] = time.perf_counter() - started
    if config.out_dir is not None:
        report["plots"] = write_plots(report, Path(config.out_dir))
    return report


def _active_sweep(config, chosen, deltas, fold_jobs, runner):
    """Figure 4: OMTRSL-Active at several delta and OMTRSL-Random at each observed ratio."""
    base = _params(config, "omtrsl-active", chosen)
    jobs = []
    for delta in deltas:
        jobs += fold_jobs("omtrsl-active", dict(base, delta=delta))
    act = runner(jobs)
    rjobs = []
    for r, j in zip(act, jobs):
        p = {k: v for k, v in j[1].items() if k != "delta"}
        p["query_ratio"] = max(r["query_ratio"], 1e-6)
        rjobs.append(("omtrsl-random", p) + j[2:])
    rnd = runner(rjobs)
    points = []
    for i, delta in enumerate(deltas):
        n = len(act) // len(deltas)
        a = act[i * n:(i + 1) * n]
        r = rnd[i * n:(i + 1) * n]
        points.append({
            "delta": delta,
            "query_ratio": float(np.mean([x["query_ratio"] for x in a])),
            "active_ap@10": float(np.mean([x["ap@10"] for x in a])),
            "random_ap@10": float(np.mean([x["ap@10"] for x in r])),
            "active_map@10": float(np.mean([x["map@10"] for x in a])),
            "random_map@10": float(np.mean([x["map@10"] for x in r])),
            "active_ap@10_folds": [x["ap@10"] for x in a],
            "random_ap@10_folds": [x["ap@10"] for x in r],
        })
    return points


def summarize(results) -> dict:
    """Mean and standard deviation over seeds and folds, per algorithm (cv stage only)."""
    out = {}
    for alg in dict.fromkeys(r["algorithm"] for r in results):
        rs = [r for r in results if r["algorithm"] == alg and r.get("stage", "cv") == "cv"]
        if not rs:
            continue
        out[alg] = {
            "ap@10": float(np.mean([r["ap@10"] for r in rs])),
            "ap@10_std": float(np.std([r["ap@10"] for r in rs])),
            "map@10": float(np.mean([r["map@10"] for r in rs])),
            "map@10_std": float(np.std([r["map@10"] for r in rs])),
            "ap_curve": np.mean([r["ap_curve"] for r in rs], axis=0).tolist(),
            "map_curve": np.mean([r["map_curve"] for r in rs], axis=0).tolist(),
            "train_seconds": float(np.mean([r["train_seconds"] for r in rs])),
            "updates_per_second": float(np.mean([r["updates_per_second"] for r in rs])),
            "query_ratio": float(np.mean([r["query_ratio"] for r in rs])),
            "n_runs": len(rs),
        }
    return out


# --------------------------------------------------------------------------- plots and tables


def write_plots(report, out_dir: Path) -> list[str]:
    """PNG figures like the paper's Figures 1-4 into ``out_dir``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    name = str(report["dataset"]).replace("/", "_")
    paths = []
    summary = report["summary"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for alg, s in summary.items():
        axes[0].plot(KS, s["ap_curve"], marker="o", label=alg)
        axes[1].plot(KS, s["map_curve"], marker="o", label=alg)
    for ax, what in zip(axes, ("AP@k", "mAP@k")):
        ax.set_xlabel("k")
        ax.set_ylabel(what)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"{report['dataset']}: performance with varied k (mean over tasks and folds)")
    fig.tight_layout()
    p = out_dir / f"{name}_ap_map_vs_k.png"
    save_figure(fig, p, dpi=90)
    plt.close(fig)
    paths.append(str(p))
    if "search" in report:
        res = report["search"]["results"]
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        om = [r for r in res if r["algorithm"] == "omtrsl"]
        for c in sorted({r["params"]["C"] for r in om}):
            pts = sorted((r["params"]["b"], r["ap@10"]) for r in om if r["params"]["C"] == c)
            axes[0].plot([x for x, _ in pts], [v for _, v in pts], marker="o", label=f"C={c:g}")
        axes[0].set_xscale("log")
        axes[0].set_xlabel("b")
        axes[0].set_title("OMTRSL")
        for alg in ("ostrsl", "ogrsl"):
            pts = sorted((r["params"]["C"], r["ap@10"]) for r in res if r["algorithm"] == alg)
            if pts:
                axes[1].plot([x for x, _ in pts], [v for _, v in pts], marker="o", label=alg)
        axes[1].set_xscale("log")
        axes[1].set_xlabel("C")
        axes[1].set_title("OSTRSL / OGRSL")
        for ax in axes:
            ax.set_ylabel("validation AP@10")
            ax.grid(alpha=0.3)
            ax.legend()
        fig.suptitle(f"{report['dataset']}: parameter sensitivity (validation split)")
        fig.tight_layout()
        p = out_dir / f"{name}_sensitivity.png"
        save_figure(fig, p, dpi=90)
        plt.close(fig)
        paths.append(str(p))
    if report.get("active_sweep"):
        pts = report["active_sweep"]
        fig, ax = plt.subplots(figsize=(5.5, 4))
        ax.plot([p["query_ratio"] for p in pts], [p["active_ap@10"] for p in pts], marker="o", label="omtrsl-active")
        ax.plot([p["query_ratio"] for p in pts], [p["random_ap@10"] for p in pts], marker="s", label="omtrsl-random")
        for alg, style in (("omtrsl", "--"), ("ostrsl", ":"), ("ogrsl", "-.")):
            if alg in summary:
                ax.axhline(summary[alg]["ap@10"], linestyle=style, color="grey", label=f"{alg} (all labels)")
        ax.set_xlabel("query ratio")
        ax.set_ylabel("AP@10")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_title(f"{report['dataset']}: active vs random queries")
        fig.tight_layout()
        p = out_dir / f"{name}_active.png"
        save_figure(fig, p, dpi=90)
        plt.close(fig)
        paths.append(str(p))
    return paths


def format_table(report) -> str:
    """Human-readable tables: AP@10 / mAP@10 / time per algorithm, search and active sweep."""
    lines = [f"ijcai17 on {report['dataset']}: {report.get('n_folds')}-fold CV, {report.get('n_triplets')} "
             f"triplets per run, tasks {report.get('tasks')}"]
    lines.append(f"{'algorithm':<15} {'AP@10':>15} {'mAP@10':>15} {'train s':>9} {'updates/s':>11} {'query':>7}  params")
    for alg, s in report["summary"].items():
        params = report.get("chosen_params", {}).get(alg, {})
        lines.append(
            f"{alg:<15} {s['ap@10']:>8.4f}±{s['ap@10_std']:.4f} {s['map@10']:>8.4f}±{s['map@10_std']:.4f} "
            f"{s['train_seconds']:>9.2f} {s['updates_per_second']:>11.0f} {s['query_ratio']:>7.3f}  "
            + ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(params.items()))
        )
    lines.extend(_paired_lines(report.get("results", [])))
    if report.get("paper_table1_seconds"):
        lines.append("paper Table 1 training seconds (Matlab): "
                     + ", ".join(f"{k} {v}" for k, v in report["paper_table1_seconds"].items()))
    if "search" in report:
        lines.append("parameter search (validation AP@10):")
        for r in report["search"]["results"]:
            lines.append(f"  {r['algorithm']:<8} " + ", ".join(f"{k}={v:g}" for k, v in sorted(r["params"].items())
                                                            if isinstance(v, (int, float)))
                         + f"  AP@10={r['ap@10']:.4f}")
        lines.append(f"  chosen: {report['search']['chosen']}")
    if report.get("active_sweep"):
        lines.append(f"{'delta':>8} {'query ratio':>12} {'active AP@10':>13} {'random AP@10':>13}")
        for p in report["active_sweep"]:
            wins = sum(a > r for a, r in zip(p["active_ap@10_folds"], p["random_ap@10_folds"]))
            lines.append(f"{p['delta']:>8g} {p['query_ratio']:>12.3f} {p['active_ap@10']:>13.4f} {p['random_ap@10']:>13.4f}"
                         f"  active wins {wins}/{len(p['active_ap@10_folds'])}")
    return "\n".join(lines)


_PAIRS = (("omtrsl", "ostrsl"), ("ostrsl", "ogrsl"), ("omtrsl", "ogrsl"), ("omtrsl-active", "omtrsl-random"))


def _paired_lines(results) -> list[str]:
    """Per-seed mean AP@10 of each algorithm, and paired (seed, fold) wins of the paper's comparisons."""
    cv = [r for r in results if r.get("stage", "cv") == "cv"]
    seeds = sorted({r["seed"] for r in cv})
    lines = []
    if len(seeds) > 1:
        for alg in dict.fromkeys(r["algorithm"] for r in cv):
            means = [np.mean([r["ap@10"] for r in cv if r["algorithm"] == alg and r["seed"] == s]) for s in seeds]
            lines.append(f"  {alg:<15} AP@10 per seed {seeds}: " + " ".join(f"{m:.4f}" for m in means))
    key = {(r["algorithm"], r["seed"], r["fold"]): r["ap@10"] for r in cv}
    for a, b in _PAIRS:
        d = np.array([v - key[(b, s, f)] for (x, s, f), v in key.items() if x == a and (b, s, f) in key])
        if d.size:
            lines.append(f"  {a} - {b}: wins {int((d > 0).sum())}/{d.size}, mean diff {d.mean():+.4f}, "
                         f"range [{d.min():+.4f}, {d.max():+.4f}]")
    return lines
