"""Model selection: successive halving over the triplet budget, survivors continue training.

:func:`tune_similarity` is the one search behind ``sparsesim tune`` and ``sparsesim experiment
--tune``. Given the *training* part of a split (the test part is never passed in), it

1. holds out a stratified validation part (``validation_fraction`` of every class) and draws one
   stream of ``n_triplets`` SORS-protocol triplets from the rest (every trial sees the same
   triplets, in the same order);
2. builds the candidate grid: the algorithm's default grid (multiples of its data-adaptive
   ``"auto"`` values, :data:`DEFAULT_FACTORS`, or absolute values in :data:`DEFAULT_GRIDS`), or
   the caller's ``grid``;
3. runs successive halving: rung ``r`` trains every surviving candidate up to
   ``n_triplets / factor**(R - 1 - r)`` triplets — a survivor *continues* from its current model
   with :meth:`partial_fit_triplets` on the next triplets of the stream, it never restarts — and
   scores it on the validation part (MAP, the SORS protocol's metric); the best
   ``1 / factor`` go on. With ``n`` candidates the search costs about ``ceil(log_factor n)`` full
   runs (9 candidates, factor 3: 3 full runs);
4. trains the final model on the whole training part with the chosen parameters (one more full
   run).

Trials of one rung run in parallel through :func:`sparsesim.parallel.run_parallel` (joblib; a
Dask scheduler through :func:`sparsesim.distributed.dask_jobs`). Between rungs the survivors'
states are held by the caller: each trial of a rung brings its learner back only while its store
holds at most an equal share of ``park_bytes``; a larger one keeps only its budget and, if it
survives, is rebuilt at the next rung by training a fresh learner on the triplets it has seen
(chunks equal one call, so the rebuilt state is the same). The states held between rungs thus
stay within ``park_bytes`` by construction, whatever the number of candidates.

The search is built from pieces the paper protocols' own searches use too (``experiment --tune``
with ``--protocol cikm15`` or ``ijcai17`` runs the paper's search: cross validation on a tuning
subset, or a validation split, over the paper's grid): :func:`grid_points` enumerates a grid,
:func:`evaluate_candidates` runs every candidate's jobs in one parallel batch, and
:func:`rank_candidates` orders candidates by score (ties: a given key, then the first).
"""

from __future__ import annotations

import itertools
import math
import os
import time
from dataclasses import dataclass, field, fields

import numpy as np

from .defaults import AUTO, is_auto
from .distributed import dask_jobs
from .evaluation import evaluate_retrieval
from .exceptions import DivergenceError, InvalidInputError, InvalidParameterError, MemoryBudgetError
from .memory import parse_memory
from .parallel import run_parallel
from .registry import get_algorithm
from .triplets import omtrsl_triplets, sors_triplets, stratified_split, usable_rows
from .validation import available_cores, check_csr, check_labels, check_n_jobs, check_task_streams

__all__ = ["DEFAULT_FACTORS", "DEFAULT_GRIDS", "TuneResult", "default_grid", "evaluate_candidates", "grid_points",
           "parse_grid", "rank_candidates", "resolved_auto", "tune_similarity", "tune_multitask", "tune_online",
           "successive_halving_rungs", "task_mean_ap"]

# Default grids as multiples of the data-adaptive value (the factor 1 is the default itself).
_CW = {"eta": [0.3, 1.0, 3.0], "gamma": [0.3, 1.0, 3.0]}
DEFAULT_FACTORS = {
    "oasis": {"C": [0.3, 1.0, 3.0]},
    "sors-l1": {"eta": [0.5, 1.0, 2.0], "lam": [0.3, 1.0, 3.0]},
    "sors-offdiag": {"eta": [0.5, 1.0, 2.0], "lam": [0.3, 1.0, 3.0]},
    "adasors-l1": {"eta": [0.3, 1.0, 3.0], "delta": [0.3, 1.0, 3.0]},
    "adasors-offdiag": {"eta": [0.3, 1.0, 3.0], "delta": [0.3, 1.0, 3.0]},
    "paas": {"C": [0.3, 1.0, 3.0]},
    "pars": {"C": [0.3, 1.0, 3.0]},
    **{name: dict(_CW) for name in ("cws", "cws-d", "cwas", "cwas-d", "cwrs", "cwrs-d")},
    "aroma": {"r": [0.3, 1.0, 3.0]},
    "aroma-d": {"r": [0.3, 1.0, 3.0]},
    **{name: {"C": [0.3, 1.0, 3.0]} for name in ("omtrsl", "omtrsl-active", "omtrsl-random", "ostrsl", "ogrsl")},
    **{name: {"eta1": [0.3, 1.0, 3.0], "eta2": [0.01, 0.3, 1.0], "lam1": [1.0, 30.0]}
       for name in ("romco-nucl", "romco-logd")},
    "pa-global": {"C": [0.3, 1.0, 3.0]},
    "pa-unique": {"C": [0.3, 1.0, 3.0]},
}
# Default grids in absolute values, for parameters without an "auto" rule (PAAS's query
# threshold delta is in margin units).
DEFAULT_GRIDS = {
    "paas": {"delta": [0.3, 1.0, 3.0]},
    # OMTRSL's task coupling b is dimensionless (b = 0: independent tasks; large b: one model)
    **{name: {"b": [0.1, 1.0, 10.0, 100.0]} for name in ("omtrsl", "omtrsl-active", "omtrsl-random")},
    **{name: {"eta": [1e-6, 1e-4, 1e-2], "normalize": [False, True]} for name in ("omtllog", "omtlvon")},
}
TUNABLE_KINDS = ("similarity", "baseline")


@dataclass
class TuneResult:
    """What a search returns.

    Attributes
    ----------
    algorithm : str
    best_params : dict
        Explicit constructor values of the winner (numbers, no ``"auto"``).
    best_score : float
        Its validation MAP at the last rung it ran.
    trials : list of dict
        One per candidate: ``params``, ``rungs`` (budget, validation MAP, nnz, seconds) and
        ``eliminated_at`` (rung index, ``None`` for the winner).
    rungs : list of dict
        Per rung: budget and number of candidates.
    estimator : object
        The final estimator, trained on the whole training part with ``best_params``.
    search_seconds, final_seconds : float
    """

    algorithm: str
    best_params: dict
    best_score: float
    trials: list
    rungs: list
    estimator: object = None
    search_seconds: float = 0.0
    final_seconds: float = 0.0
    info: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-ready summary (no estimator)."""
        return {"algorithm": self.algorithm, "best_params": self.best_params, "best_score": self.best_score,
                "rungs": self.rungs, "trials": self.trials, "search_seconds": self.search_seconds,
                "final_seconds": self.final_seconds, **self.info}


def parse_grid(items) -> dict:
    """``["eta=0.5,1,2", "lam=1e-6,1e-5"]`` -> ``{"eta": [0.5, 1, 2], "lam": [1e-6, 1e-5]}``."""
    grid: dict = {}
    for item in items or []:
        if "=" not in str(item):
            raise InvalidInputError(f"--grid expects KEY=V1,V2,..., got {item!r}")
        key, values = str(item).split("=", 1)
        key = key.strip()
        parsed = []
        for text in (v.strip() for v in values.split(",")):
            if not text:
                continue
            try:
                parsed.append(int(text) if text.lstrip("-").isdigit() else float(text))
            except ValueError:
                parsed.append(text)
        if not key or not parsed:
            raise InvalidInputError(f"--grid {item!r} needs a key and at least one value")
        grid[key] = parsed
    return grid


def successive_halving_rungs(n_candidates: int, n_triplets: int, factor: int = 3,
                             min_budget: int = 500) -> list[tuple[int, int]]:
    """``[(budget, survivors), ...]``: rung budgets grow by ``factor`` up to ``n_triplets`` and the
    candidates shrink by ``factor`` down to one; the first budget is at least ``min_budget``
    (fewer rungs when the budget is small)."""
    if n_candidates <= 1:
        return [(int(n_triplets), 1)]
    n_rungs = int(math.ceil(math.log(n_candidates, factor) - 1e-9)) + 1
    while n_rungs > 1 and n_triplets / factor ** (n_rungs - 1) < min_budget:
        n_rungs -= 1
    return [(int(round(n_triplets / factor ** (n_rungs - 1 - r))), max(1, int(math.ceil(n_candidates / factor ** r))))
            for r in range(n_rungs)]


def resolved_auto(algorithm: str, base_params: dict, X, n_triplets: int) -> dict:
    """The numbers an estimator of ``algorithm`` resolves its ``"auto"`` parameters to on ``X``."""
    spec = get_algorithm(algorithm)
    budget = {"n_triplets": n_triplets} if "n_triplets" in spec.make().get_params() else {}
    est = spec.make(**dict(base_params, **budget))
    return dict(est.resolve_params(X)) if hasattr(est, "resolve_params") else {}


def default_grid(algorithm: str, resolved: dict) -> dict:
    """The default grid of ``algorithm``: multiples of its resolved ``"auto"`` values
    (:data:`DEFAULT_FACTORS`) and the absolute values of :data:`DEFAULT_GRIDS` (empty for
    baselines)."""
    grid = {k: [float(resolved[k]) * f for f in fs] for k, fs in DEFAULT_FACTORS.get(algorithm, {}).items()
            if k in resolved}
    grid.update({k: list(v) for k, v in DEFAULT_GRIDS.get(algorithm, {}).items()})
    return grid


def grid_points(grid: dict | None, option: str = "grid", keys=None) -> list[dict]:
    """Every combination of a grid ``{param: [values]}`` as a list of ``{param: value}``.

    An empty or missing grid is one point with no parameters (``[{}]``); keys are taken in sorted
    order (or in the order of ``keys``; the last varies fastest), so the points come out in the same
    order whatever order the grid was written in.

    Raises
    ------
    InvalidInputError
        ``grid`` is not a mapping of names to non-empty lists (``option`` names it in the message).
    """
    if not grid:
        return [{}]
    if not isinstance(grid, dict) or not all(isinstance(v, (list, tuple)) and v for v in grid.values()):
        raise InvalidInputError(f"option {option!r} must map parameter names to non-empty lists of values")
    keys = [k for k in keys if k in grid] if keys is not None else sorted(grid)
    return [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]


def rank_candidates(scores: dict, tie_break=None) -> list:
    """The keys of ``scores`` ({candidate: score}), best (highest score) first.

    Equal scores are ordered by ``tie_break(candidate)`` (smaller first) when given, then by their
    order in ``scores``, so the first of equally good candidates wins (as with :func:`max`).
    """
    position = {key: i for i, key in enumerate(scores)}
    return sorted(scores, key=lambda key: (-scores[key], tie_break(key) if tie_break else 0, position[key]))


def evaluate_candidates(candidates: list, jobs_of, run) -> list[list]:
    """Run every candidate's jobs in one batch and give each candidate its results.

    Parameters
    ----------
    candidates : list
        What is searched (parameter dicts, tuples, ...).
    jobs_of : callable
        ``jobs_of(candidate) -> list`` of jobs (e.g. one per validation fold).
    run : callable
        ``run(jobs) -> list`` of results in the order of the jobs (e.g. :func:`run_parallel`).

    Returns
    -------
    list of list
        Per candidate, the results of its jobs.
    """
    jobs = [jobs_of(candidate) for candidate in candidates]
    results = run([job for batch in jobs for job in batch]) if jobs else []
    out, start = [], 0
    for batch in jobs:
        out.append(list(results[start:start + len(batch)]))
        start += len(batch)
    return out


def task_mean_ap(model, X, y, tasks, labels, k: int = 10) -> float:
    """AP@k of per-task retrieval (each document of task t queries the task's other documents
    under ``model.model_for(t)``), mean over the tasks with two or more documents: the IJCAI 2017
    protocol's metric."""
    scores = []
    for label in labels:
        rows = np.flatnonzero(tasks == label)
        if rows.size >= 2:
            scores.append(evaluate_retrieval(model.model_for(label).scorer(X[rows]), y[rows], k=k)[f"ap@{k}"])
    return float(np.mean(scores)) if scores else float("nan")


@dataclass(frozen=True)
class _TripletProblem:
    """The SORS protocol: one stream of triplets over ``X``; validation MAP (higher is better)."""

    X: object
    triplets: np.ndarray
    X_val: object
    y_val: np.ndarray
    metric = "map"
    continues = True  # a survivor continues on the next triplets

    def feed(self, est, start, stop):
        est.partial_fit_triplets(self.X, self.triplets[start:stop])

    def measure(self, est) -> float:
        return float(evaluate_retrieval(est.model_.scorer(self.X_val), self.y_val)["map"])


@dataclass(frozen=True)
class _TaskTripletProblem:
    """The OMTRSL protocol: one stream of (triplet, y_t, task) over ``X``; validation AP@10, mean over tasks."""

    X: object
    triplets: np.ndarray
    signs: np.ndarray
    task_ids: np.ndarray
    tasks: np.ndarray
    X_val: object
    y_val: np.ndarray
    tasks_val: np.ndarray
    metric = "ap@10"
    continues = True

    def feed(self, est, start, stop):
        est.partial_fit_triplets(self.X, self.triplets[start:stop], self.signs[start:stop],
                                 self.task_ids[start:stop], tasks=self.tasks)

    def measure(self, est) -> float:
        return task_mean_ap(est.model_, self.X_val, self.y_val, self.tasks_val, self.tasks)


@dataclass(frozen=True)
class _StreamProblem:
    """Online multi-task classification (ROMCO protocol): the first ``budget`` rounds of the task
    streams; the online (predict-then-update) error rate, mean over tasks (lower is better).

    A task stream may end before a later rung's rounds, so a survivor is replayed from the first
    round at every rung (the search costs the sum of the rung budgets, at most 1.5 full passes
    with factor 3) instead of continuing."""

    X: list
    y: list
    metric = "error_rate"
    continues = False

    def feed(self, est, start, stop):
        est.fit([x[:stop] for x in self.X], [y[:stop] for y in self.y])

    def measure(self, est) -> float:
        return float(np.mean(est.error_rates_))


def _better(problem, value: float) -> float:
    """A key that is larger for better trials (NaN: worst)."""
    if not np.isfinite(value):
        return -np.inf
    return -value if problem.metric == "error_rate" else value


@dataclass(frozen=True)
class _Replay:
    """A survivor set aside between rungs: rebuilt from its first ``budget`` triplets when needed."""

    budget: int


def _parts(problem) -> tuple:
    """The fields of a problem, shallow (each one a top-level argument of a trial, so a Dask run
    scatters every matrix once for the whole search)."""
    return tuple(getattr(problem, f.name) for f in fields(problem))


def _run_trial(algorithm, params, state, problem_type, start, stop, keep_bytes, *parts):
    """Continue one candidate from ``state`` (an estimator, a :class:`_Replay` or ``None``) on
    the part ``[start, stop)`` of the stream of ``problem_type(*parts)`` and score it.

    The trained learner is returned only while its store holds at most ``keep_bytes`` (``None``:
    always); a larger one comes back as a :class:`_Replay` of its budget and is retrained from its
    triplets if it survives, so the caller never holds more than its share of states."""
    problem = problem_type(*parts)
    est = state if state is not None and not isinstance(state, _Replay) else get_algorithm(algorithm).make(**params)
    if not problem.continues:
        start = 0
        est = get_algorithm(algorithm).make(**params)  # replayed from the first round (fit resets anyway)
    elif isinstance(state, _Replay) and state.budget > 0:
        problem.feed(est, 0, state.budget)
    t0 = time.perf_counter()
    try:
        if stop > start:
            problem.feed(est, start, stop)
    except DivergenceError as exc:  # a setting whose state overflows is a failed trial, not a failed search
        return _Replay(0), {"budget": int(stop), problem.metric: float("nan"), "diverged": str(exc),
                            "train_seconds": time.perf_counter() - t0, "resolved_params": {}}
    except MemoryBudgetError as exc:  # so is one whose model outgrows a trial's share of memory
        return _Replay(0), {"budget": int(stop), problem.metric: float("nan"), "over_budget": str(exc),
                            "train_seconds": time.perf_counter() - t0, "resolved_params": {}}
    seconds = time.perf_counter() - t0
    row = {"budget": int(stop), problem.metric: problem.measure(est)}
    nnz = getattr(est.model_, "nnz", None)
    if callable(nnz):
        row["nnz"] = int(nnz())
    row.update(train_seconds=seconds, resolved_params=dict(getattr(est, "resolved_params_", None) or {}))
    est._model_cache = None  # the exported model is rebuilt when needed; do not carry it
    if keep_bytes is not None and _nbytes(est) > keep_bytes:
        return _Replay(int(stop)), row
    return est, row


def _nbytes(est) -> int:
    try:
        return int(getattr(est, "store_nbytes_", 0) or 0)
    except Exception:  # noqa: BLE001 - a learner without a store, or not fitted yet
        return 0


def tune_similarity(algorithm: str, X, y, n_triplets: int, grid: dict | None = None, params: dict | None = None,
                    seed: int = 0, n_jobs: int = 1, validation_fraction: float = 0.2, factor: int = 3,
                    min_budget: int = 500, scheduler: str | None = None, park_bytes: int = 2 << 30,
                    progress=None, final: bool = True) -> TuneResult:
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
        Share of every class held out for validation.
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

    Returns
    -------
    TuneResult
    """
    spec = get_algorithm(algorithm)
    if spec.kind not in TUNABLE_KINDS:
        raise InvalidInputError(f"tuning supports similarity learners from triplets; {algorithm!r} is a "
                                f"{spec.kind} algorithm (its protocol has its own search: sparsesim experiment)")
    _check_search(n_triplets, validation_fraction, factor)
    X = check_csr(X)
    y = check_labels(y, X.shape[0], min_per_class=1)
    rows = usable_rows(y, warn=True)
    if rows is not None:
        X, y = X[rows], y[rows]
    base = dict(params or {})
    start_all = time.perf_counter()
    if spec.kind == "baseline":
        est = spec.make(**base).fit(X, y) if final else None
        return TuneResult(algorithm, {}, float("nan"), [], [], est, 0.0, time.perf_counter() - start_all)
    base = _trial_base(spec, base, seed, n_triplets, n_jobs)
    _check_threads_fit(base.get("n_threads", 1), n_jobs, scheduler)

    # validation part of the training part; classes too small to keep a validation pair stay in fit
    fit_rows, val_rows = stratified_split(y, 1.0 - validation_fraction, seed=seed)
    X_fit, y_fit, X_val, y_val = X[fit_rows], y[fit_rows], X[val_rows], y[val_rows]
    keep = usable_rows(y_fit, warn=False)
    if keep is not None:
        X_fit, y_fit = X_fit[keep], y_fit[keep]
    triplets = sors_triplets(y_fit, int(n_triplets), seed=seed)

    problem = _TripletProblem(X_fit, triplets, X_val, y_val)
    result = _search(algorithm, problem, X_fit, base, params, grid, int(n_triplets), factor, min_budget,
                     scheduler, n_jobs, park_bytes, progress, probe=lambda est: est.partial_fit_triplets(
                         X_fit, triplets[:1]))
    if final:
        t0 = time.perf_counter()
        if "max_memory" not in (params or {}):  # the final model trains alone: the whole default budget
            base.pop("max_memory", None)
        result.estimator = spec.make(**dict(base, **result.best_params)).fit(X, y)
        result.final_seconds = time.perf_counter() - t0
    result.search_seconds = time.perf_counter() - start_all - result.final_seconds
    result.info.update(n_fit=int(X_fit.shape[0]), n_validation=int(X_val.shape[0]), n_triplets=int(n_triplets))
    return result


def _search(algorithm, problem, X_resolve, base, params, grid, n_total, factor, min_budget, scheduler, n_jobs,
            park_bytes, progress, probe) -> TuneResult:
    """Successive halving of ``algorithm``'s candidates on ``problem`` (the one search behind
    :func:`tune_similarity`, :func:`tune_multitask` and :func:`tune_online`); no final model.

    ``X_resolve`` is what the ``"auto"`` values of the default grid are resolved on; ``probe(est)``
    feeds one fresh candidate a first example, so a bad name or value fails before the search.
    """
    spec = get_algorithm(algorithm)
    resolved = resolved_auto(algorithm, base, X_resolve, n_total)
    user_grid = grid is not None and len(grid) > 0
    grid = {k: list(v) for k, v in (grid or default_grid(algorithm, resolved)).items()}
    for key in grid:
        if key in ("n_triplets", "random_state"):
            raise InvalidInputError(f"--grid cannot vary {key!r} (the budget and seed are the search's own)")
    candidates = [dict(base, **point) for point in grid_points(grid)]
    has_capacity = "initial_capacity" in spec.make().get_params()
    for cand in candidates:  # fail fast on a bad name or value: one example each, before the search
        try:
            probe(spec.make(**dict(cand, initial_capacity=16) if has_capacity else cand))
        except DivergenceError:
            pass  # a valid setting that diverges: scored as a failed trial
    rungs = successive_halving_rungs(len(candidates), int(n_total), factor, min_budget)
    total_steps = sum(len(candidates) if r == 0 else rungs[r - 1][1] for r in range(len(rungs)))
    hidden = ("n_triplets", "random_state") + (("max_memory",) if "max_memory" not in (params or {}) else ())
    trials = [{"trial": i, "params": {k: v for k, v in c.items() if k not in hidden},
               "rungs": [], "eliminated_at": None} for i, c in enumerate(candidates)]
    states: dict[int, object] = {i: None for i in range(len(candidates))}
    alive = list(range(len(candidates)))
    done_steps = 0
    rung_info = []
    parts = _parts(problem)
    with dask_jobs(scheduler, scatter=[p for p in parts if not np.isscalar(p)], n_jobs=n_jobs) as session:
        previous = 0
        for r, (budget, _) in enumerate(rungs):
            # every trial of the rung may bring its learner back while it holds at most an equal
            # share of park_bytes, so the states held here stay within park_bytes by construction
            keep_bytes = None if park_bytes is None else int(park_bytes) // len(alive)
            jobs = [(algorithm, candidates[i], states[i], type(problem), previous, budget, keep_bytes, *parts)
                    for i in alive]

            def advance(done, _base=done_steps):
                if progress is not None:
                    progress(_base + done, total_steps)

            results = session.call(run_parallel, _run_trial, jobs, n_jobs=session.n_jobs, progress=advance)
            done_steps += len(jobs)
            for i, (state, row) in zip(alive, results):
                states[i] = state
                trials[i]["rungs"].append(row)
            scores = {i: _better(problem, trials[i]["rungs"][-1][problem.metric]) for i in alive}
            order = rank_candidates(scores, tie_break=lambda i: i)
            keep_n = max(1, int(math.ceil(len(alive) / factor))) if r < len(rungs) - 1 else 1
            survivors, dropped = order[:keep_n], order[keep_n:]
            for i in dropped:
                trials[i]["eliminated_at"] = r
                states[i] = None
            rung_info.append({"rung": r, "budget": int(budget), "candidates": len(alive),
                              "kept": len(survivors)})
            alive = survivors
            previous = budget
    best = alive[0]
    finished = [i for i, t in enumerate(trials) if t["rungs"] and np.isfinite(t["rungs"][-1][problem.metric])]
    if best not in finished and finished:
        # the last rung's candidate failed (diverged, or outgrew its memory share): the winner is
        # the best trial that finished, preferring the longest budget
        best = max(finished, key=lambda i: (trials[i]["rungs"][-1]["budget"],
                                            _better(problem, trials[i]["rungs"][-1][problem.metric]), -i))
    best_row = trials[best]["rungs"][-1]
    best_params = dict(trials[best]["params"])
    for key, value in best_row["resolved_params"].items():  # record numbers, never "auto"
        if is_auto(best_params.get(key, AUTO)):
            best_params[key] = value
    return TuneResult(algorithm, best_params, float(best_row[problem.metric]), trials, rung_info,
                      info={"metric": problem.metric, "factor": int(factor), "grid": grid,
                            "default_grid": not user_grid, "auto_values": resolved})


def _check_search(n_total, validation_fraction, factor) -> None:
    if not isinstance(n_total, (int, np.integer)) or n_total <= 0:
        raise InvalidInputError(f"the triplet budget must be a positive integer, got {n_total!r}")
    if not 0.0 < validation_fraction < 0.5:
        raise InvalidInputError(f"validation_fraction must be in (0, 0.5), got {validation_fraction}")
    if not (isinstance(factor, (int, np.integer)) and factor >= 2):
        raise InvalidInputError(f"the halving factor must be an integer >= 2, got {factor!r}")


def _check_threads_fit(n_threads, n_jobs, scheduler) -> None:
    """Refuse trials that would run more training threads at once than this machine has cores
    (in-process trials only; a Dask cluster's workers are sized by their own nthreads). The
    threads of one learner wait for each other, so a thread without a core stalls its partners."""
    if n_threads in (None, 1) or scheduler or os.environ.get("SPARSESIM_SCHEDULER") or not n_jobs:
        return
    threads, jobs = check_n_jobs(n_threads, "n_threads"), check_n_jobs(n_jobs)
    if threads > 1 and jobs > 1 and threads * jobs > available_cores():
        raise InvalidParameterError(
            f"n_threads={threads} with n_jobs={jobs} trials at once needs {threads * jobs} cores; this machine has "
            f"{available_cores()}: use n_threads=1 (trials side by side) or n_jobs=1 (one trial, {threads} threads)")


def _trial_base(spec, base: dict, seed: int, n_triplets: int | None, n_jobs) -> dict:
    """The fixed parameters of every trial: the seed, the triplet budget, each trial's memory share."""
    names = spec.make().get_params()
    base = dict(base)
    if "random_state" in names:
        base.setdefault("random_state", seed)
    if n_triplets is not None and "n_triplets" in names:
        base["n_triplets"] = int(n_triplets)
    if "max_memory" in names and "max_memory" not in base:
        # trials run side by side: each gets its share of the memory available now
        base["max_memory"] = max(1, parse_memory("auto") // max(1, int(n_jobs) if n_jobs and n_jobs > 0 else 1))
    return base


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
    _check_search(n_triplets, validation_fraction, factor)
    X = check_csr(X)
    y = check_labels(y, X.shape[0], min_per_class=1)
    tasks = np.asarray(tasks)
    if tasks.shape != (X.shape[0],):
        raise InvalidInputError(f"tasks must hold one task per document ({X.shape[0]}), got shape {tasks.shape}")
    start_all = time.perf_counter()
    base = _trial_base(spec, params or {}, seed, n_triplets, n_jobs)
    labels = np.unique(tasks)
    _, strata = np.unique(np.stack([tasks.astype(str), y.astype(str)], axis=1), axis=0, return_inverse=True)
    fit_rows, val_rows = stratified_split(strata.reshape(-1), 1.0 - validation_fraction, seed=seed)
    X_fit, y_fit, t_fit = X[fit_rows], y[fit_rows], tasks[fit_rows]
    triplets, signs, task_ids = omtrsl_triplets(y_fit, int(n_triplets), seed=seed, tasks=t_fit)
    problem = _TaskTripletProblem(X_fit, triplets, signs, task_ids, labels, X[val_rows], y[val_rows], tasks[val_rows])
    result = _search(algorithm, problem, X_fit, base, params, grid, int(n_triplets), factor, min_budget,
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
    _check_search(n_rounds, 0.2, factor)
    start_all = time.perf_counter()
    base = _trial_base(spec, params or {}, seed, None, n_jobs)
    problem = _StreamProblem(list(X_tasks), list(y_tasks))
    # the shortest prefix in which every task has shown both classes (fit refuses a one-class task)
    both = max(max(int(np.argmax(yk != yk[0])), 1) + 1 for yk in y_tasks)
    result = _search(algorithm, problem, list(X_tasks), base, params, grid, n_rounds, factor,
                     max(int(min_budget), both), scheduler, n_jobs, None, progress,
                     probe=lambda est: problem.feed(est, 0, both))
    if final:
        t0 = time.perf_counter()
        result.estimator = spec.make(**dict(base, **result.best_params)).fit(list(X_tasks), list(y_tasks))
        result.final_seconds = time.perf_counter() - t0
    result.search_seconds = time.perf_counter() - start_all - result.final_seconds
    result.info.update(n_rounds=n_rounds, n_tasks=len(X_tasks))
    return result
