"""One trial of a search: the protocols' problems (what a candidate trains on and how it is
scored) and the trial runner that continues a candidate over one rung."""

from __future__ import annotations

import time
from dataclasses import dataclass, fields

import numpy as np

from ..evaluation import evaluate_retrieval
from ..exceptions import DivergenceError, MemoryBudgetError
from ..registry import get_algorithm
from ..sampling import mine_negatives

#: anchors mined at a time when a trial's learner has a mining ``sampler`` (as its ``fit`` does)
MINING_CHUNK = 1024


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
class TripletProblem:
    """The SORS protocol: one stream of triplets over ``X``; validation MAP (higher is better).

    With the labels ``y`` of ``X``, a learner whose ``sampler`` mines its negatives (OASIS, SORS,
    AdaSORS with ``sampler="semihard"``, ...) sees the stream's anchors and positives with the
    negatives its sampler picks from a pool of ``pool_size`` ranked by the model trained so far,
    as its ``fit`` would; :data:`MINING_CHUNK` anchors at a time, each chunk's pool drawn from a
    generator seeded by ``(seed, position in the stream)``.
    """

    X: object
    triplets: np.ndarray
    X_val: object
    y_val: np.ndarray
    y: np.ndarray | None = None
    seed: int = 0
    metric = "map"
    continues = True  # a survivor continues on the next triplets

    def feed(self, est, start, stop):
        sampler = est.get_params().get("sampler", "uniform")  # the mining learners take a sampler
        if sampler == "uniform" or self.y is None:
            est.partial_fit_triplets(self.X, self.triplets[start:stop])
            return

        def score(pairs):
            return est.current_scores(self.X, pairs)
        lo = int(start)
        while lo < stop:
            hi = min(int(stop), (lo // MINING_CHUNK + 1) * MINING_CHUNK)
            seeds = np.random.SeedSequence([int(self.seed), lo]).spawn(2)
            pool_rng, pick_rng = (np.random.default_rng(s) for s in seeds)
            est.partial_fit_triplets(self.X, mine_negatives(self.y, self.triplets[lo:hi], sampler, score,
                                                            int(est.pool_size), pool_rng, pick_rng))
            lo = hi

    def measure(self, est) -> float:
        return float(evaluate_retrieval(est.model_.scorer(self.X_val), self.y_val)["map"])


@dataclass(frozen=True)
class TaskTripletProblem:
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
class StreamProblem:
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


def better_key(problem, value: float) -> float:
    """A sort key that is larger for better trials.

    Parameters
    ----------
    problem : TripletProblem, TaskTripletProblem or StreamProblem
        The problem the score was measured on (its ``metric`` says whether lower is better).
    value : float
        The trial's score.

    Returns
    -------
    float
        ``value``, negated for an error rate; ``-inf`` for a non-finite score (the worst).
    """
    if not np.isfinite(value):
        return -np.inf
    return -value if problem.metric == "error_rate" else value


@dataclass(frozen=True)
class Replay:
    """A survivor set aside between rungs: rebuilt from its first ``budget`` triplets when needed,
    fed in the parts ``[0, stops[0]), [stops[0], stops[1]), ...`` it was first fed in (the rung
    budgets; a mining sampler ranks its pools per part, so the rebuilt learner is the same)."""

    budget: int
    stops: tuple = ()


def problem_parts(problem) -> tuple:
    """The fields of a problem, shallow, in declaration order.

    Each one becomes a top-level argument of :func:`run_trial`, so a Dask run scatters every
    matrix once for the whole search; ``type(problem)(*problem_parts(problem))`` rebuilds it.

    Parameters
    ----------
    problem : TripletProblem, TaskTripletProblem or StreamProblem

    Returns
    -------
    tuple
    """
    return tuple(getattr(problem, f.name) for f in fields(problem))


def run_trial(algorithm, params, state, problem_type, start, stop, keep_bytes, *parts):
    """Continue one candidate from ``state`` (an estimator, a :class:`Replay` or ``None``) on
    the part ``[start, stop)`` of the stream of ``problem_type(*parts)`` and score it.

    The trained learner is returned only while its store holds at most ``keep_bytes`` (``None``:
    always); a larger one comes back as a :class:`Replay` of its budget and is retrained from its
    triplets if it survives, so the caller never holds more than its share of states."""
    problem = problem_type(*parts)
    est = state if state is not None and not isinstance(state, Replay) else get_algorithm(algorithm).make(**params)
    if not problem.continues:
        start = 0
        est = get_algorithm(algorithm).make(**params)  # replayed from the first round (fit resets anyway)
    elif isinstance(state, Replay) and state.budget > 0:
        done = 0
        for part_stop in state.stops or (state.budget,):
            problem.feed(est, done, part_stop)
            done = part_stop
    t0 = time.perf_counter()
    try:
        if stop > start:
            problem.feed(est, start, stop)
    except DivergenceError as exc:  # a setting whose state overflows is a failed trial, not a failed search
        return Replay(0), {"budget": int(stop), problem.metric: float("nan"), "diverged": str(exc),
                            "train_seconds": time.perf_counter() - t0, "resolved_params": {}}
    except MemoryBudgetError as exc:  # so is one whose model outgrows a trial's share of memory
        return Replay(0), {"budget": int(stop), problem.metric: float("nan"), "over_budget": str(exc),
                            "train_seconds": time.perf_counter() - t0, "resolved_params": {}}
    seconds = time.perf_counter() - t0
    row = {"budget": int(stop), problem.metric: problem.measure(est)}
    nnz = est.model_.nnz()
    if nnz is not None:
        row["nnz"] = int(nnz)
    row.update(train_seconds=seconds, resolved_params=dict(est.resolved_params_ or {}))
    est._model_cache = None  # the exported model is rebuilt when needed; do not carry it
    if keep_bytes is not None and state_nbytes(est) > keep_bytes:
        return Replay(int(stop)), row
    return est, row


def state_nbytes(est) -> int:
    """Bytes held by a learner's store (``store_nbytes_``); 0 for a learner without one.

    Parameters
    ----------
    est : estimator

    Returns
    -------
    int
    """
    return int(est.store_nbytes_) if est.__sklearn_is_fitted__() else 0
