"""The successive-halving search behind every public search, its result type and the checks
and trial parameters the searches share."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from ..defaults import AUTO, is_auto
from ..distributed import dask_jobs
from ..exceptions import DivergenceError, InvalidInputError, InvalidParameterError
from ..memory import parse_memory
from ..parallel import run_parallel
from ..registry import get_algorithm
from ..validation import available_cores, check_n_jobs
from .candidates import default_grid, grid_points, rank_candidates, resolved_auto, successive_halving_rungs
from .trials import Replay, better_key, problem_parts, run_trial


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


def halving_search(algorithm, problem, X_resolve, base, params, grid, n_total, factor, min_budget, scheduler, n_jobs,
                   park_bytes, progress, probe) -> TuneResult:
    """Successive halving of ``algorithm``'s candidates on ``problem`` (the one search behind
    :func:`tune_similarity`, :func:`tune_multitask` and :func:`tune_online`); no final model.

    ``X_resolve`` is what the ``"auto"`` values of the default grid are resolved on; ``probe(est)``
    feeds one fresh candidate a first example, so a bad name or value fails before the search.
    """
    spec = get_algorithm(algorithm)
    resolved = resolved_auto(algorithm, base, X_resolve, n_total)
    user_grid = grid is not None and len(grid) > 0
    grid = {k: list(v) for k, v in (grid or default_grid(algorithm, resolved, fixed=params or {})).items()}
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
    parts = problem_parts(problem)
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

            results = session.call(run_parallel, run_trial, jobs, n_jobs=session.n_jobs, progress=advance)
            done_steps += len(jobs)
            stops = tuple(int(b) for b, _ in rungs[:r + 1])
            for i, (state, row) in zip(alive, results):
                if isinstance(state, Replay) and state.budget > 0:  # rebuilt rung by rung, as it was fed
                    state = Replay(state.budget, stops)
                states[i] = state
                trials[i]["rungs"].append(row)
            scores = {i: better_key(problem, trials[i]["rungs"][-1][problem.metric]) for i in alive}
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
                                            better_key(problem, trials[i]["rungs"][-1][problem.metric]), -i))
    best_row = trials[best]["rungs"][-1]
    best_params = dict(trials[best]["params"])
    for key, value in best_row["resolved_params"].items():  # record numbers, never "auto"
        if key == "max_model_bytes" and key not in best_params:
            continue  # (a bound resolved on the search's part: the final model resolves its own)
        if is_auto(best_params.get(key, AUTO)):
            best_params[key] = value
    return TuneResult(algorithm, best_params, float(best_row[problem.metric]), trials, rung_info,
                      info={"metric": problem.metric, "factor": int(factor), "grid": grid,
                            "default_grid": not user_grid, "auto_values": resolved})


def check_search(n_total, validation_fraction, factor) -> None:
    """Refuse a search's budget, validation fraction or halving factor before any work.

    Raises
    ------
    InvalidInputError
        ``n_total`` is not a positive integer, ``validation_fraction`` is outside (0, 0.5) or
        ``factor`` is not an integer >= 2.
    """
    if not isinstance(n_total, (int, np.integer)) or n_total <= 0:
        raise InvalidInputError(f"the triplet budget must be a positive integer, got {n_total!r}")
    if not 0.0 < validation_fraction < 0.5:
        raise InvalidInputError(f"validation_fraction must be in (0, 0.5), got {validation_fraction}")
    if not (isinstance(factor, (int, np.integer)) and factor >= 2):
        raise InvalidInputError(f"the halving factor must be an integer >= 2, got {factor!r}")


def check_threads_fit(n_threads, n_jobs, scheduler) -> None:
    """Refuse trials that would run more training threads at once than this machine has cores
    (in-process trials only; a Dask cluster's workers are sized by their own nthreads). The
    threads of one learner wait for each other, so a thread without a core stalls its partners.

    Raises
    ------
    InvalidParameterError
        ``n_threads * n_jobs`` exceeds the cores of this machine.
    """
    if n_threads in (None, 1) or scheduler or os.environ.get("SPARSESIM_SCHEDULER") or not n_jobs:
        return
    threads, jobs = check_n_jobs(n_threads, "n_threads"), check_n_jobs(n_jobs)
    if threads > 1 and jobs > 1 and threads * jobs > available_cores():
        raise InvalidParameterError(
            f"n_threads={threads} with n_jobs={jobs} trials at once needs {threads * jobs} cores; this machine has "
            f"{available_cores()}: use n_threads=1 (trials side by side) or n_jobs=1 (one trial, {threads} threads)")


def trial_base(spec, base: dict, seed: int, n_triplets: int | None, n_jobs) -> dict:
    """The fixed parameters of every trial: the seed, the triplet budget, each trial's memory share.

    Parameters
    ----------
    spec : AlgorithmSpec
        The registered algorithm.
    base : dict
        The caller's fixed parameters (copied, not changed).
    seed : int
    n_triplets : int or None
    n_jobs : int or None
        Trials run at once (each gets ``1 / n_jobs`` of the memory available now).

    Returns
    -------
    dict
    """
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
