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
states are held by the caller; above ``park_bytes`` in all, a survivor keeps only its budget and
is rebuilt at the next rung by training a fresh learner on the triplets it has seen (chunks equal
one call, so the rebuilt state is the same), so that at most the trials in flight are in memory
and nothing is ever serialised and read back.

The search is built from pieces the paper protocols' own searches use too (``experiment --tune``
with ``--protocol cikm15`` or ``ijcai17`` runs the paper's search: cross validation on a tuning
subset, or a validation split, over the paper's grid): :func:`grid_points` enumerates a grid,
:func:`evaluate_candidates` runs every candidate's jobs in one parallel batch, and
:func:`rank_candidates` orders candidates by score (ties: a given key, then the first).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field

import numpy as np

from .defaults import AUTO, is_auto
from .distributed import dask_jobs
from .evaluation import evaluate_retrieval
from .exceptions import InvalidInputError
from .memory import parse_memory
from .parallel import run_parallel
from .registry import get_algorithm
from .triplets import sors_triplets, stratified_split, usable_rows
from .validation import check_csr, check_labels

__all__ = ["DEFAULT_FACTORS", "DEFAULT_GRIDS", "TuneResult", "default_grid", "evaluate_candidates", "grid_points",
           "parse_grid", "rank_candidates", "resolved_auto", "tune_similarity", "successive_halving_rungs"]

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
}
# Default grids in absolute values, for parameters without an "auto" rule (PAAS's query
# threshold delta is in margin units).
DEFAULT_GRIDS = {
    "paas": {"delta": [0.3, 1.0, 3.0]},
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
    est = get_algorithm(algorithm).make(**dict(base_params, n_triplets=n_triplets))
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


def _validation_map(est, X_val, y_val) -> float:
    return float(evaluate_retrieval(est.model_.scorer(X_val), y_val)["map"])


@dataclass(frozen=True)
class _Replay:
    """A survivor set aside between rungs: rebuilt from its first ``budget`` triplets when needed."""

    budget: int


def _run_trial(algorithm, params, state, X, triplets, start, stop, X_val, y_val, set_aside=False):
    """Continue one candidate from ``state`` (an estimator, a :class:`_Replay` or ``None``) on
    ``triplets[start:stop]`` and score it on the validation part."""
    est = state if state is not None and not isinstance(state, _Replay) else get_algorithm(algorithm).make(**params)
    if isinstance(state, _Replay) and state.budget > 0:
        est.partial_fit_triplets(X, triplets[:state.budget])
    t0 = time.perf_counter()
    if stop > start:
        est.partial_fit_triplets(X, triplets[start:stop])
    seconds = time.perf_counter() - t0
    score = _validation_map(est, X_val, y_val)
    model = est.model_
    row = {"budget": int(stop), "map": score, "nnz": int(model.nnz()), "train_seconds": seconds,
           "resolved_params": dict(getattr(est, "resolved_params_", {}))}
    est._model_cache = None  # the exported model is rebuilt when needed; do not carry it
    if set_aside:
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
        Above this many bytes of survivor state, survivors keep only their budget between rungs
        and are rebuilt from their triplets at the next rung (more compute, bounded memory).
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
    if not isinstance(n_triplets, (int, np.integer)) or n_triplets <= 0:
        raise InvalidInputError(f"the triplet budget must be a positive integer, got {n_triplets!r}")
    if not 0.0 < validation_fraction < 0.5:
        raise InvalidInputError(f"validation_fraction must be in (0, 0.5), got {validation_fraction}")
    if not (isinstance(factor, (int, np.integer)) and factor >= 2):
        raise InvalidInputError(f"the halving factor must be an integer >= 2, got {factor!r}")
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
    base.setdefault("random_state", seed)
    base["n_triplets"] = int(n_triplets)
    if "max_memory" in spec.make().get_params() and "max_memory" not in base:
        # trials run side by side: each gets its share of the memory available now
        base["max_memory"] = max(1, parse_memory("auto") // max(1, int(n_jobs) if n_jobs and n_jobs > 0 else 1))

    # validation part of the training part; classes too small to keep a validation pair stay in fit
    fit_rows, val_rows = stratified_split(y, 1.0 - validation_fraction, seed=seed)
    X_fit, y_fit, X_val, y_val = X[fit_rows], y[fit_rows], X[val_rows], y[val_rows]
    keep = usable_rows(y_fit, warn=False)
    if keep is not None:
        X_fit, y_fit = X_fit[keep], y_fit[keep]
    triplets = sors_triplets(y_fit, int(n_triplets), seed=seed)

    resolved = resolved_auto(algorithm, base, X_fit, n_triplets)
    user_grid = grid is not None and len(grid) > 0
    grid = {k: list(v) for k, v in (grid or default_grid(algorithm, resolved)).items()}
    for key in grid:
        if key in ("n_triplets", "random_state"):
            raise InvalidInputError(f"--grid cannot vary {key!r} (the budget and seed are the search's own)")
    candidates = [dict(base, **point) for point in grid_points(grid)]
    for cand in candidates:  # fail fast on a bad name or value: one triplet each, before the search
        spec.make(**dict(cand, initial_capacity=16) if "initial_capacity" in spec.make().get_params() else cand
                  ).partial_fit_triplets(X_fit, triplets[:1])
    rungs = successive_halving_rungs(len(candidates), int(n_triplets), factor, min_budget)
    total_steps = sum(len(candidates) if r == 0 else rungs[r - 1][1] for r in range(len(rungs)))
    hidden = ("n_triplets", "random_state") + (("max_memory",) if "max_memory" not in (params or {}) else ())
    trials = [{"trial": i, "params": {k: v for k, v in c.items() if k not in hidden},
               "rungs": [], "eliminated_at": None} for i, c in enumerate(candidates)]
    states: dict[int, object] = {i: None for i in range(len(candidates))}
    alive = list(range(len(candidates)))
    done_steps = 0
    rung_info = []
    with dask_jobs(scheduler, scatter=[X_fit, X_val, triplets], n_jobs=n_jobs) as session:
        previous = 0
        for r, (budget, _) in enumerate(rungs):
            held = sum(_nbytes(s) for s in states.values() if s is not None and not isinstance(s, _Replay))
            set_aside = park_bytes is not None and held > park_bytes and not session.distributed
            jobs = [(algorithm, candidates[i], states[i], X_fit, triplets, previous, budget, X_val, y_val,
                     set_aside) for i in alive]

            def advance(done, _base=done_steps):
                if progress is not None:
                    progress(_base + done, total_steps)

            results = session.call(run_parallel, _run_trial, jobs, n_jobs=session.n_jobs, progress=advance)
            done_steps += len(jobs)
            for i, (state, row) in zip(alive, results):
                states[i] = state
                trials[i]["rungs"].append(row)
            scores = {i: trials[i]["rungs"][-1]["map"] for i in alive}
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
    best_row = trials[best]["rungs"][-1]
    best_params = dict(trials[best]["params"])
    for key, value in best_row["resolved_params"].items():  # record numbers, never "auto"
        if is_auto(best_params.get(key, AUTO)):
            best_params[key] = value
    search_seconds = time.perf_counter() - start_all
    est = None
    final_seconds = 0.0
    if final:
        t0 = time.perf_counter()
        est = spec.make(**dict(base, **best_params))
        est.fit(X, y)
        final_seconds = time.perf_counter() - t0
    return TuneResult(algorithm, best_params, float(best_row["map"]), trials, rung_info, est, search_seconds,
                      final_seconds, info={"n_fit": int(X_fit.shape[0]), "n_validation": int(X_val.shape[0]),
                                           "n_triplets": int(n_triplets), "factor": int(factor),
                                           "grid": grid, "default_grid": not user_grid,
                                           "auto_values": resolved})
