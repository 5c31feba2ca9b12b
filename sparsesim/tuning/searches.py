"""The public searches, one per protocol: triplet-learned similarities, multi-task similarities
and online multi-task classifiers."""

from __future__ import annotations

import time

import numpy as np

from ..evaluation import evaluate_retrieval
from ..exceptions import InvalidInputError
from ..registry import get_algorithm
from ..triplets import class_split, omtrsl_triplets, sors_triplets, stratified_split, usable_rows
from ..validation import check_csr, check_labels, check_task_streams
from .candidates import TUNABLE_KINDS, default_grid, grid_points
from .halving import TuneResult, check_search, check_threads_fit, halving_search, trial_base
from .trials import StreamProblem, TaskTripletProblem, TripletProblem


def tune_similarity(algorithm: str, X, y, n_triplets: int, grid: dict | None = None, params: dict | None = None,
                    seed: int = 0, n_jobs: int = 1, validation_fraction: float = 0.2, factor: int = 3,
                    min_budget: int = 500, scheduler: str | None = None, park_bytes: int = 2 << 30,
                    progress=None, final: bool = True, validation: str = "documents") -> TuneResult:
    """Choose the parameters of a triplet-learned similarity by successive halving, then train it.

    Parameters
    ----------
    algorithm : str
        A registered algorithm of kind ``"similarity"`` or ``"baseline"`` (baselines have nothing
        to tune and are just fitted).
    X : sparse matrix, shape (n_documents, n_features)
        The *training* part only (the caller keeps the test part away).
    y : array, shape (n_documents,)
    n_triplets : int
        Triplet budget of one full run (the final model's budget and the last rung's).
    grid : dict, optional
        ``{param: [values]}``; default :func:`default_grid`. A value ``"auto"`` is allowed.
    params : dict, optional
        Fixed constructor parameters for every trial (e.g. ``compact``); grid values win.
    seed : int
        Seed of the validation split, the triplet streams and the learners.
    n_jobs : int
        Trials run at once (joblib); with a Dask ``scheduler`` every worker thread is used.
    validation_fraction : float
        Share of every class held out for validation (with ``validation="classes"``: share of the
        classes).
    factor : int
        Successive-halving reduction factor (budget x factor, candidates / factor per rung).
    min_budget : int
        Smallest first-rung budget (fewer rungs when ``n_triplets`` is small).
    scheduler : str, optional
        Dask scheduler address (default ``$SPARSESIM_SCHEDULER``; none: in-process).
    park_bytes : int
        Bytes of survivor state held between rungs, at most: each trial of a rung brings its
        learner back only within an equal share; a larger one is rebuilt from its triplets at
        the next rung (more compute, bounded memory).
    progress : callable, optional
        ``progress(done_trial_steps, total_trial_steps)``.
    final : bool
        Train the final model on all of ``X`` (else ``estimator`` is ``None``).
    validation : {"documents", "classes"}
        ``"documents"``: trials learn from part of every class and are scored on retrieval among
        the held-out documents of the same classes. ``"classes"`` (class-disjoint, for models that
        must serve classes never seen in training): a seeded ``validation_fraction`` of the classes,
        at least two (:func:`sparsesim.triplets.class_split`), is held out whole; trials learn
        from the other classes and are scored on retrieval among the held-out classes' documents.

    Returns
    -------
    TuneResult
    """
    spec = get_algorithm(algorithm)
    if spec.kind not in TUNABLE_KINDS:
        raise InvalidInputError(f"tuning supports similarity learners from triplets; {algorithm!r} is a "
                                f"{spec.kind} algorithm (its protocol has its own search: sparsesim experiment)")
    check_search(n_triplets, validation_fraction, factor)
    if validation not in ("documents", "classes"):
        raise InvalidInputError(f"validation must be 'documents' or 'classes', got {validation!r}")
    X = check_csr(X)
    y = check_labels(y, X.shape[0], min_per_class=1)
    rows = usable_rows(y, warn=True)
    if rows is not None:
        X, y = X[rows], y[rows]
    if validation == "classes":  # at least two classes held out; too few classes are refused before any work
        n_classes = np.unique(y).size
        share = max(validation_fraction, 2.0 / n_classes) if n_classes >= 4 else validation_fraction
        fit_classes, _ = class_split(y, share, seed=seed)
    base = dict(params or {})
    start_all = time.perf_counter()
    if spec.kind == "baseline":
        est = spec.make(**base).fit(X, y) if final else None
        return TuneResult(algorithm, {}, float("nan"), [], [], est, 0.0, time.perf_counter() - start_all)
    base = trial_base(spec, base, seed, n_triplets, n_jobs)
    check_threads_fit(base.get("n_threads", 1), n_jobs, scheduler)

    # validation part of the training part; classes too small to keep a validation pair stay in fit
    if validation == "classes":
        in_fit = np.isin(y, fit_classes)
        fit_rows, val_rows = np.flatnonzero(in_fit), np.flatnonzero(~in_fit)
    else:
        fit_rows, val_rows = stratified_split(y, 1.0 - validation_fraction, seed=seed)
    X_fit, y_fit, X_val, y_val = X[fit_rows], y[fit_rows], X[val_rows], y[val_rows]
    keep = usable_rows(y_fit, warn=False)
    if keep is not None:
        X_fit, y_fit = X_fit[keep], y_fit[keep]
    if spec.make().tune_by_fit:
        return _fit_search(algorithm, base, params, grid, validation, X, y, X_fit, y_fit, X_val, y_val, progress,
                           final, start_all)
    triplets = sors_triplets(y_fit, int(n_triplets), seed=seed)

    problem = TripletProblem(X_fit, triplets, X_val, y_val, y_fit, int(seed))  # y_fit: mining samplers' pools
    result = halving_search(algorithm, problem, X_fit, base, params, grid, int(n_triplets), factor, min_budget,
                     scheduler, n_jobs, park_bytes, progress, probe=lambda est: est.partial_fit_triplets(
                         X_fit, triplets[:1]))
    if final:
        t0 = time.perf_counter()
        if "max_memory" not in (params or {}):  # the final model trains alone: the whole default budget
            base.pop("max_memory", None)
        result.estimator = spec.make(**dict(base, **result.best_params)).fit(X, y)
        result.final_seconds = time.perf_counter() - t0
    result.search_seconds = time.perf_counter() - start_all - result.final_seconds
    result.info.update(n_fit=int(X_fit.shape[0]), n_validation=int(X_val.shape[0]), n_triplets=int(n_triplets),
                       validation=validation)
    return result


def _fit_search(algorithm, base, params, grid, validation, X, y, X_fit, y_fit, X_val, y_val, progress, final,
                start_all) -> TuneResult:
    """Grid search for learners that learn from labels in one ``fit`` (``tune_by_fit``: their passes
    over the data are not a triplet budget to halve): every candidate is fitted on the fit part and
    scored by validation MAP; the winner is fitted on the whole training part."""
    spec = get_algorithm(algorithm)
    base = {k: v for k, v in base.items() if k in spec.make().get_params()}
    if validation == "classes" and "validation" in spec.make().get_params():
        base.setdefault("validation", "classes")  # the learner's own choices hold classes out too
    grid = {k: list(v) for k, v in (grid or default_grid(algorithm, {}, fixed=params or {})).items()}
    points = grid_points(grid)
    trials = []
    for i, point in enumerate(points):
        t0 = time.perf_counter()
        est = spec.make(**dict(base, **point)).fit(X_fit, y_fit)
        score = float(evaluate_retrieval(est.model_.scorer(X_val), y_val)["map"])
        trials.append({"trial": i, "params": dict(point), "score": score, "seconds": time.perf_counter() - t0,
                       "eliminated_at": None})
        if progress is not None:
            progress(i + 1, len(points))
    best = max(trials, key=lambda t: t["score"])  # ties: the first
    for t in trials:
        if t is not best:
            t["eliminated_at"] = 0
    result = TuneResult(algorithm, dict(best["params"]), best["score"], trials,
                        [{"budget": None, "n_candidates": len(points)}])
    if final:
        t0 = time.perf_counter()
        result.estimator = spec.make(**dict(base, **best["params"])).fit(X, y)
        result.final_seconds = time.perf_counter() - t0
    result.search_seconds = time.perf_counter() - start_all - result.final_seconds
    result.info.update(n_fit=int(X_fit.shape[0]), n_validation=int(X_val.shape[0]), validation=validation,
                       search="grid, one fit per candidate")
    return result


def tune_multitask(algorithm: str, X, y, tasks, n_triplets: int, grid: dict | None = None, params: dict | None = None,
                   seed: int = 0, n_jobs: int = 1, validation_fraction: float = 0.2, factor: int = 3,
                   min_budget: int = 500, scheduler: str | None = None, park_bytes: int = 2 << 30,
                   progress=None, final: bool = True) -> TuneResult:
    """Choose the parameters of a multi-task similarity learner (OMTRSL family) by successive halving.

    As :func:`tune_similarity`, on the OMTRSL protocol: the validation part is
    ``validation_fraction`` of every (task, class) pair of the *training* part, one stream of
    ``n_triplets`` OMTRSL triplets (task, same-class pair, other-class document, coin y_t) is drawn
    from the rest, survivors continue on it, and a trial is scored by the IJCAI 2017 metric: AP@10
    of per-task retrieval on the validation part, mean over tasks. The default grid is
    :data:`DEFAULT_FACTORS` (multiples of the ``"auto"`` C) and :data:`DEFAULT_GRIDS` (OMTRSL's b).

    Parameters
    ----------
    algorithm : str
        A registered algorithm of kind ``"multitask-similarity"``.
    X : sparse matrix (n_documents, n_features)
    y, tasks : arrays (n_documents,)
        Class and task of every document (the training part only).
    n_triplets, grid, params, seed, n_jobs, validation_fraction, factor, min_budget, scheduler, park_bytes, progress, final
        As in :func:`tune_similarity`.

    Returns
    -------
    TuneResult
        ``best_score`` is the winner's validation AP@10.
    """
    spec = get_algorithm(algorithm)
    if spec.kind != "multitask-similarity":
        raise InvalidInputError(f"tune_multitask searches multi-task similarity learners; {algorithm!r} is a "
                                f"{spec.kind} algorithm")
    check_search(n_triplets, validation_fraction, factor)
    X = check_csr(X)
    y = check_labels(y, X.shape[0], min_per_class=1)
    tasks = np.asarray(tasks)
    if tasks.shape != (X.shape[0],):
        raise InvalidInputError(f"tasks must hold one task per document ({X.shape[0]}), got shape {tasks.shape}")
    start_all = time.perf_counter()
    base = trial_base(spec, params or {}, seed, n_triplets, n_jobs)
    labels = np.unique(tasks)
    _, strata = np.unique(np.stack([tasks.astype(str), y.astype(str)], axis=1), axis=0, return_inverse=True)
    fit_rows, val_rows = stratified_split(strata.reshape(-1), 1.0 - validation_fraction, seed=seed)
    X_fit, y_fit, t_fit = X[fit_rows], y[fit_rows], tasks[fit_rows]
    triplets, signs, task_ids = omtrsl_triplets(y_fit, int(n_triplets), seed=seed, tasks=t_fit)
    problem = TaskTripletProblem(X_fit, triplets, signs, task_ids, labels, X[val_rows], y[val_rows], tasks[val_rows])
    result = halving_search(algorithm, problem, X_fit, base, params, grid, int(n_triplets), factor, min_budget,
                     scheduler, n_jobs, park_bytes, progress, probe=lambda est: problem.feed(est, 0, 1))
    if final:
        t0 = time.perf_counter()
        result.estimator = spec.make(**dict(base, **result.best_params)).fit(X, y, tasks)
        result.final_seconds = time.perf_counter() - t0
    result.search_seconds = time.perf_counter() - start_all - result.final_seconds
    result.info.update(n_fit=int(fit_rows.size), n_validation=int(val_rows.size), n_triplets=int(n_triplets))
    return result


def tune_online(algorithm: str, X_tasks, y_tasks, grid: dict | None = None, params: dict | None = None,
                seed: int = 0, n_jobs: int = 1, factor: int = 3, min_budget: int = 100,
                scheduler: str | None = None, progress=None, final: bool = True) -> TuneResult:
    """Choose the parameters of an online multi-task classifier (ROMCO and its baselines) by
    successive halving over the rounds of one pass.

    The ROMCO protocol's search runs every setting for one online pass over a held-out shuffle of
    the task streams and keeps the lowest cumulative error rate. Here rung ``r`` runs the
    surviving candidates over the first ``T / factor**(R - 1 - r)`` rounds (``T`` the longest
    stream) and keeps the ``1 / factor`` with the lowest online error rate (mistakes of the
    predictions made before each update, mean over tasks); the online error needs no held-out
    part. The caller passes the streams in the order to search on (e.g. a shuffle kept apart from
    the reported ones). The final model is one pass over the whole streams with the chosen values.

    Parameters
    ----------
    algorithm : str
        A registered algorithm of kind ``"multitask-classifier"``.
    X_tasks, y_tasks : lists
        One matrix and one label vector per task, in stream order.
    grid, params, seed, n_jobs, factor, min_budget, scheduler, progress, final
        As in :func:`tune_similarity` (budgets in rounds).

    Returns
    -------
    TuneResult
        ``best_score`` is the winner's online error rate at the last rung.
    """
    spec = get_algorithm(algorithm)
    if spec.kind != "multitask-classifier":
        raise InvalidInputError(f"tune_online searches online multi-task classifiers; {algorithm!r} is a "
                                f"{spec.kind} algorithm")
    X_tasks, y_tasks = check_task_streams(X_tasks, y_tasks)
    n_rounds = max(int(x.shape[0]) for x in X_tasks)
    check_search(n_rounds, 0.2, factor)
    start_all = time.perf_counter()
    base = trial_base(spec, params or {}, seed, None, n_jobs)
    problem = StreamProblem(list(X_tasks), list(y_tasks))
    # the shortest prefix in which every task has shown both classes (fit refuses a one-class task)
    both = max(max(int(np.argmax(yk != yk[0])), 1) + 1 for yk in y_tasks)
    result = halving_search(algorithm, problem, list(X_tasks), base, params, grid, n_rounds, factor,
                     max(int(min_budget), both), scheduler, n_jobs, None, progress,
                     probe=lambda est: problem.feed(est, 0, both))
    if final:
        t0 = time.perf_counter()
        result.estimator = spec.make(**dict(base, **result.best_params)).fit(list(X_tasks), list(y_tasks))
        result.final_seconds = time.perf_counter() - t0
    result.search_seconds = time.perf_counter() - start_all - result.final_seconds
    result.info.update(n_rounds=n_rounds, n_tasks=len(X_tasks))
    return result
