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

  ``folds`` (5), ``search`` (False: choose every algorithm's parameters by the paper's
  cross-validation -- inside each outer fold, the grid of Figure 3 is scored by the mean
  validation AP@10 over ``search_folds`` inner folds of that fold's *training* part, and the
  best point trains the fold's model; the outer test part is never seen by the choice),
  ``search_folds`` (3; 1: one 75/25 split of the training part), ``search_only`` (False: the
  search alone, inside the first seed's first fold, no test evaluation), ``b_grid``, ``c_grid``
  (search grids), ``active_deltas``
  (a list: the Figure 4 sweep of OMTRSL-Active vs OMTRSL-Random over query ratios),
  ``dataset_options`` (passed to ``load_dataset``), ``backend`` (joblib backend for
  :func:`~sparsesim.parallel.run_parallel`, e.g. ``"dask"``), ``dask_scheduler`` (address of a
  running Dask scheduler to connect a ``Client`` to), ``only_folds`` (0-based indices of the folds
  to run; default every fold), ``factors`` (``{param: [multiples]}``: no search; every algorithm
  runs at each combination of multiples of the values its ``"auto"`` ``C`` and ``b`` resolve to on
  the training part of each fold (:mod:`sparsesim.defaults`); a parameter given explicitly keeps
  its value; summary rows are named ``"omtrsl Cx0.3,bx1"``).
* Every run records ``resolved_params``: the numbers its ``"auto"`` parameters resolved to.

Plots (PNG, when ``config.out_dir`` is set): AP@k / mAP@k against k (Figures 1-2), the parameter
sensitivity (Figure 3), AP@10 against the query ratio (Figure 4); tables and plots live in
:mod:`sparsesim.experiments.ijcai17_report`. Training time per algorithm
(Table 1) is in ``report["timing"]``.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import numpy as np

from ..data import load_dataset
from ..evaluation import evaluate_retrieval
from ..exceptions import InvalidInputError, ResourceLimitError, UnknownNameError
from ..parallel import run_parallel
from ..registry import get_algorithm, make_estimator
from ..triplets import stratified_kfold, stratified_split
from ..tuning import evaluate_candidates, rank_candidates
from .ijcai17_report import KS, format_table, write_plots
from .runner import (auto_names, check_factors, factor_label, factor_points, fold_jobs, grid_points, mean_std,
                     protocol_options, scale_auto, summarize, write_report)

__all__ = ["run", "run_one", "format_table", "write_plots", "cv_folds", "search_splits", "evaluate_tasks",
           "load_multitask_data"]

PROTOCOL = "ijcai17"
DEFAULT_ALGORITHMS = ["omtrsl", "ostrsl", "ogrsl", "omtrsl-active", "omtrsl-random"]
DEFAULT_TRIPLETS = 20_000
DEFAULT_B_GRID = [0.1, 1.0, 10.0, 100.0]
DEFAULT_C_GRID = [0.01, 0.1, 1.0, 10.0]
# paper, Table 1 (seconds, Matlab; the only numbers of the paper's results given as text)
PAPER_TABLE1 = {
    "isolet-tasks": {"mtlmnn": 241.3, "ogrsl": 12.5, "ostrsl": 12.6, "omtrsl": 14.7},
    "news20-tasks": {"mtlmnn": 5371.4, "ogrsl": 111.2, "ostrsl": 114.9, "omtrsl": 126.4},
}
_HAS_B = ("omtrsl", "omtrsl-active", "omtrsl-random")
SUMMARY_METRICS = ("ap@10", "map@10", "train_seconds", "updates_per_second", "query_ratio")
DEFAULT_OPTIONS = {"folds": 5, "search": False, "search_only": False, "search_folds": 3, "b_grid": DEFAULT_B_GRID,
                   "c_grid": DEFAULT_C_GRID, "active_deltas": None, "dataset_options": {}, "backend": None,
                   "dask_scheduler": None, "triplets": DEFAULT_TRIPLETS, "only_folds": None, "factors": None}
RESOLVABLE = ("C", "b")  # the parameters with an "auto" rule (sparsesim.defaults)


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
            "ap@10": res["ap@10"], "map@10": res["map@10"], "map@10_hits": res["map@10_hits"], "map": res["map"],
            "ap_curve": res["curves"]["ap"], "map_curve": res["curves"]["map"],
            "n_queries": res["n_queries"],
        })
    if not per_task:
        raise InvalidInputError("no task has two or more test documents")
    return {
        "ap@10": float(np.mean([p["ap@10"] for p in per_task])),
        "map@10": float(np.mean([p["map@10"] for p in per_task])),
        "map@10_hits": float(np.mean([p["map@10_hits"] for p in per_task])),
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
        "map@10_hits": ev["map@10_hits"],
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
        "resolved_params": {k: _plain(v) for k, v in (est.resolved_params_ or {}).items()},
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


def search_splits(data, outer_train, n_inner: int, seed: int) -> list:
    """The (train, validation) splits of the parameter search inside ``outer_train`` (the training
    part of one outer fold): ``n_inner``-fold cross-validation stratified by (task, class), or one
    75/25 split when ``n_inner`` is 1. Every index returned is one of ``outer_train``."""
    outer_train = np.asarray(outer_train)
    sub = _strata(np.asarray(data.y)[outer_train], np.asarray(data.tasks)[outer_train])
    if int(n_inner) <= 1:
        tr, va = stratified_split(sub, train_fraction=0.75, seed=seed + 7)
        return [(outer_train[tr], outer_train[va])]
    return [(outer_train[a], outer_train[b]) for a, b in stratified_kfold(sub, n_splits=int(n_inner), seed=seed + 7)]


def _search(config, data, algorithms, n_triplets, runner, outer_train, seed, fold):
    """Figure 3's grid (b x C for OMTRSL, C for OSTRSL and OGRSL), chosen by cross-validation on
    ``outer_train`` alone: the mean validation AP@10 over the ``search_folds`` inner splits
    (:func:`search_splits`). The outer fold's test part is never seen."""
    options = config.options
    splits = search_splits(data, outer_train, int(options.get("search_folds", DEFAULT_OPTIONS["search_folds"])),
                           seed)
    grid = {"b": [float(b) for b in options.get("b_grid", DEFAULT_B_GRID)],
            "C": [float(c) for c in options.get("c_grid", DEFAULT_C_GRID)]}
    searched = [a for a in ("omtrsl", "ostrsl", "ogrsl") if a in algorithms or
                (a == "omtrsl" and any(x in algorithms for x in _HAS_B))]
    candidates = [(alg, {**config.params_for(alg), **point}) for alg in searched
                  for point in grid_points({k: v for k, v in grid.items() if alg == "omtrsl" or k == "C"},
                                           keys=("b", "C"))]
    runs = evaluate_candidates(candidates, lambda c: [(c[0], c[1], data.X, data.y, data.tasks, tr, va, n_triplets,
                                                       _stream_seed(seed, 99), data.task_names, fold, "search")
                                                      for tr, va in splits], runner)
    results = []
    for rs in runs:
        for inner, r in enumerate(rs):
            r.update(seed=int(seed), inner_fold=inner)
            results.append(r)
    chosen = {}
    for alg in searched:
        scores = {i: float(np.mean([r["ap@10"] for r in rs]))
                  for i, ((a, _), rs) in enumerate(zip(candidates, runs)) if a == alg}
        best = candidates[rank_candidates(scores)[0]][1]
        chosen[alg] = {k: v for k, v in best.items() if k in ("b", "C")}
    return results, chosen


def _with_fold_seeds(results, jobs):
    """Each result keeps its fold's seed (the job carries the stream seed, ``seed * 1000 + fold``)."""
    for r, j in zip(results, jobs):
        r["seed"] = int(j[8] // 1000)
    return results


def _check_options(config, options, algorithms) -> dict:
    """The ``factors`` grid and ``only_folds``, checked before the data set loads."""
    names_of = {a: auto_names(a, config.params_for(a), RESOLVABLE) for a in algorithms}
    factors = check_factors(options["factors"], names_of)
    if factors and (options["search"] or options["search_only"] or options["active_deltas"]
                    or "omtrsl-random" in algorithms):
        raise InvalidInputError("option 'factors' runs each algorithm at multiples of its 'auto' values: leave out "
                                "search, search_only, active_deltas and omtrsl-random (it queries at the ratio "
                                "omtrsl-active observed)")
    only = options["only_folds"]
    n_folds = int(options["folds"])
    if only is not None and (not isinstance(only, list) or not only or not all(
            isinstance(f, int) and not isinstance(f, bool) and 0 <= f < n_folds for f in only)):
        raise InvalidInputError(f"option 'only_folds' must be a non-empty list of fold indices 0..{n_folds - 1}, "
                                f"got {only!r}")
    return {"factors": factors, "names_of": names_of}


def _setting(row) -> str:
    """The summary's name of a run: its algorithm, with the multiples of the ``factors`` option."""
    return factor_label(row["algorithm"], row.get("factors"))


def _factor_jobs(alg, params, names, factors, data, jobs_of):
    """The runs of ``alg`` at every point of ``factors``: multiples of the values its ``"auto"``
    parameters ``names`` resolve to on the training part of each fold."""
    out, points = [], []
    for job in jobs_of(alg, params):
        tr = job[5]
        auto = make_estimator(alg, **params).resolve_params(data.X[tr], np.asarray(data.y)[tr],
                                                            np.asarray(data.tasks)[tr])
        auto = {k: v for k, v in auto.items() if k in names}
        for point in factor_points(factors, names):
            out.append((alg, {**params, **scale_auto(auto, point)}) + job[2:11] + ("factors",))
            points.append(point)
    return out, points


def run(config) -> dict:
    """Run the protocol; see the module docstring. Returns ``{"protocol", "dataset", "results", ...}``."""
    options = protocol_options(PROTOCOL, dict(config.options), DEFAULT_OPTIONS)
    algorithms = list(config.algorithms) or list(DEFAULT_ALGORITHMS)
    for alg in algorithms:
        spec = get_algorithm(alg)
        if spec.kind != "multitask-similarity":
            raise UnknownNameError(
                f"algorithm {alg!r} is not a multi-task similarity learner; the ijcai17 protocol runs "
                "omtrsl, omtrsl-active, omtrsl-random, ostrsl, ogrsl"
            )
    checked = _check_options(config, options, algorithms)
    factors = checked["factors"]
    data = load_multitask_data(config.dataset, **options["dataset_options"])
    refused = _refused(config, algorithms, data)
    algorithms = [a for a in algorithms if a not in refused]
    n_triplets = int(config.triplets or options["triplets"])
    n_folds = int(options["folds"])
    backend = options["backend"]
    n_jobs = config.n_jobs if backend is None else (None if config.n_jobs in (None, 1) else config.n_jobs)

    def runner(jobs):
        return run_parallel(run_one, jobs, n_jobs=n_jobs, backend=backend)

    started = time.perf_counter()
    report = {"protocol": PROTOCOL, "dataset": config.dataset, "n_triplets": n_triplets, "n_folds": n_folds,
              "representation": data.info.get("representation", ""), "tasks": list(data.task_names or []),
              "n_documents": int(data.n_documents), "n_features": int(data.n_features)}
    if refused:
        report["refused"] = refused
    if factors:
        report["factors"] = factors
    if options["only_folds"] is not None:
        report["only_folds"] = list(options["only_folds"])
    with _backend_context(options):
        folds = {seed: cv_folds(data.y, data.tasks, n_folds, seed) for seed in config.seeds}
        fold_ids = list(range(n_folds)) if options["only_folds"] is None else list(options["only_folds"])
        chosen_of = {}  # (seed, fold) -> {algorithm: searched params}, chosen on that fold's training part
        if options["search_only"]:  # the search alone (Figure 3), inside the first seed's first fold
            seed, f = int(config.seeds[0]), fold_ids[0]
            search_results, chosen = _search(config, data, algorithms, n_triplets, runner, folds[seed][f][0], seed, f)
            chosen_of[(seed, f)] = chosen
        elif options["search"]:
            search_results = []
            for seed in config.seeds:
                for f in fold_ids:
                    res, chosen_of[(int(seed), f)] = _search(config, data, algorithms, n_triplets, runner,
                                                             folds[seed][f][0], int(seed), f)
                    search_results += res
        if chosen_of:
            report["search"] = {"results": search_results, "search_folds": int(options["search_folds"]),
                                "chosen": {f"seed {s} fold {f}": c for (s, f), c in chosen_of.items()},
                                "b_grid": options["b_grid"], "c_grid": options["c_grid"]}

        def params_of(alg):
            """The parameters of ``alg`` in each (seed, fold): the search's choice on that fold's training part."""
            return lambda seed, f: _params(config, alg, chosen_of.get((int(seed), f), {}))

        report["chosen_params"] = {a: _agreed([params_of(a)(s, f) for s, f in chosen_of] or [params_of(a)(0, 0)])
                                   for a in algorithms}
        if options["search_only"]:  # the parameter search alone: no cross-validation
            report.update(results=[], summary={}, timing={}, wall_seconds=time.perf_counter() - started)
            return report

        def jobs_of(alg, params):
            """One job per seed and fold; ``params`` is a dict or ``params(seed, fold) -> dict``."""
            pick = params if callable(params) else (lambda seed, f: params)
            return fold_jobs(config.seeds, folds.__getitem__, lambda seed, f, tr, te: (
                alg, pick(seed, f), data.X, data.y, data.tasks, tr, te, n_triplets, _stream_seed(seed, f),
                data.task_names, f, "cv"), options["only_folds"])

        if factors:
            jobs, points = [], []
            for a in algorithms:
                more, pts = _factor_jobs(a, report["chosen_params"][a], checked["names_of"][a], factors, data,
                                         jobs_of)
                jobs, points = jobs + more, points + pts
            results = _with_fold_seeds(runner(jobs), jobs)
            for r, point in zip(results, points):
                if point:
                    r["factors"] = point
        else:
            jobs = [j for a in algorithms if a != "omtrsl-random" for j in jobs_of(a, params_of(a))]
            results = _with_fold_seeds(runner(jobs), jobs)
        if "omtrsl-random" in algorithms:  # at the query ratio omtrsl-active observed on the same fold
            ratio = {(r["seed"], r["fold"]): r["query_ratio"] for r in results if r["algorithm"] == "omtrsl-active"}
            jobs = [j if (j[8] // 1000, j[10]) not in ratio or "query_ratio" in config.params_for("omtrsl-random")
                    else (j[0], dict(j[1], query_ratio=max(ratio[(j[8] // 1000, j[10])], 1e-6))) + j[2:]
                    for j in jobs_of("omtrsl-random", params_of("omtrsl-random"))]
            results += _with_fold_seeds(runner(jobs), jobs)
        report["results"] = results
        if options["active_deltas"]:
            report["active_sweep"] = _active_sweep(params_of("omtrsl-active"),
                                                   [float(x) for x in options["active_deltas"]], jobs_of, runner)
    report["summary"] = summarize(results, SUMMARY_METRICS, by=_setting, curves=("ap_curve", "map_curve"))
    report["resolved_params"] = _resolved_summary(results)
    report["timing"] = {a: s["train_seconds"][0] for a, s in report["summary"].items()}
    report["paper_table1_seconds"] = PAPER_TABLE1.get(config.dataset)
    report["wall_seconds"] = time.perf_counter() - started
    if config.out_dir is not None:
        report["plots"] = write_plots(report, Path(config.out_dir))
        write_report(report, config.out_dir, f"ijcai17_{str(config.dataset).replace('/', '_')}.json")
    return report


def _refused(config, algorithms, data) -> dict:
    """``{algorithm: why}`` for the learners that refuse the data's size (mtLMNN above its
    ``max_features``), asked through ``check_fit_data`` before anything runs; when every learner
    refuses, the first's error."""
    refused = {}
    n_tasks = np.unique(np.asarray(data.tasks)).size
    for alg in algorithms:
        est = make_estimator(alg, **config.params_for(alg))
        try:
            est.check_fit_data(data.n_features, n_tasks=n_tasks)
        except ResourceLimitError as exc:
            refused[alg] = str(exc)
    if refused and len(refused) == len(algorithms):
        raise ResourceLimitError(next(iter(refused.values())))
    return refused


def _resolved_summary(results) -> dict:
    """Per summary row, the values its runs used: the value itself when every run used the same, else
    the mean (an ``"auto"`` value resolves on each fold's training part)."""
    out = {}
    for key in dict.fromkeys(_setting(r) for r in results):
        runs = [r["resolved_params"] for r in results if _setting(r) == key]
        out[key] = {k: runs[0][k] if len({p[k] for p in runs}) == 1 else mean_std(p[k] for p in runs)[0]
                    for k in runs[0]}
    return out


def _agreed(choices: list) -> dict:
    """One dict of parameters for the table: a value every fold chose, or the list of the folds'
    choices (in fold order) where they differ."""
    out = {}
    for key in dict.fromkeys(k for c in choices for k in c):
        values = [c.get(key) for c in choices]
        out[key] = values[0] if all(v == values[0] for v in values) else values
    return out


def _active_sweep(params_of, deltas, jobs_of, runner):
    """Figure 4: OMTRSL-Active at several delta and OMTRSL-Random at each observed ratio; each fold
    keeps the parameters chosen on its training part (``params_of(seed, fold)``)."""
    jobs = []
    for delta in deltas:
        jobs += jobs_of("omtrsl-active", lambda seed, f, delta=delta: dict(params_of(seed, f), delta=delta))
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
