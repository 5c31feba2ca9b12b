"""One online pass of the ``romco`` protocol and its parameter search (Yang, Zhao & Gao, Sec. 6).

:func:`run_stream` makes one online pass over a shuffle of the streams and scores the
predictions made before each update (:func:`online_metrics`, :func:`margin_split`, the
cumulative-error curve); :func:`search_params` tunes an algorithm on a held-out shuffle over the
paper's grids (:data:`ETA_GRID`, :data:`LAMBDA_GRID`). The protocol itself is
:mod:`sparsesim.experiments.romco`.
"""

from __future__ import annotations

import itertools
import json
import time

import numpy as np

from ..data.mtl_classification import MultiTaskStreams
from ..exceptions import DivergenceError, InvalidInputError
from ..parallel import run_parallel
from ..registry import get_algorithm, make_estimator
from .runner import auto_names, scale_auto

__all__ = ["COLLAB_GRIDS", "LAMBDA_GRID", "ETA_GRID", "UNDECIDED_TOL", "RESOLVABLE", "ROMCO_SEARCH", "SPLIT_KEYS", "online_metrics",
           "margin_split", "run_stream", "search_params"]

LAMBDA_GRID = [10.0 ** k for k in range(-7, 1)]  # 1e-7 .. 1 (paper: Sec. 6.1, 6.5)
UNDECIDED_TOL = 1e-8  # |margin| below it: an undecided prediction
ETA_GRID = [10.0 ** k for k in range(-4, 1)]  # 1e-4 .. 1 (paper: {1e-6..1}; 1e-6/1e-5 never learn)
RESOLVABLE = ("eta1", "eta2", "lam1", "lam2", "C")  # the parameters with an "auto" rule (sparsesim.defaults)
# CW-COL and OSMTL-e (the paper: "tuned with a grid search on a held-out random shuffle"; C = 1)
COLLAB_GRIDS = {"cw-col": {"eta": [0.1, 0.3, 0.5, 0.7, 0.9], "r": [0.01, 0.1, 1.0, 10.0]},
                "osmtl-e": {"lam": [0.1, 0.3, 0.5, 0.7, 0.9], "tau": [0.1, 1.0, 10.0]}}
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
    extra = est.training_counters()
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
        "resolved_params": dict(est.resolved_params_ or {}),
        **({"factors": dict(factors)} if factors else {}),
        **extra,
        "per_task": per_task,
        "curve": {"rounds": points.tolist(), "per_task": _curve(est.online_margins_, s.y, points).tolist()},
    }


def error_only(streams, algorithm, params, seed, max_per_task=None) -> float:
    res = run_stream(streams, algorithm, params, seed, checkpoints=2, max_per_task=max_per_task)
    return res["error_rate"]


# --------------------------------------------------------------------------- parameter search


def _best(trials: list) -> dict:
    ok = [t for t in trials if np.isfinite(t["error_rate"])]
    if not ok:
        raise InvalidInputError("every parameter setting diverged in the search")
    return min(ok, key=lambda t: (t["error_rate"], json.dumps(t["params"], sort_keys=True)))


def _evaluate_grid(streams, algorithm, grid: list, seed, n_jobs, max_per_task) -> list:
    errors = run_parallel(error_only, [(streams, algorithm, p, seed, max_per_task) for p in grid], n_jobs=n_jobs)
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
    if algorithm in COLLAB_GRIDS:
        names = list(COLLAB_GRIDS[algorithm])
        grid = [dict(base, **dict(zip(names, values)))
                for values in itertools.product(*(COLLAB_GRIDS[algorithm][n] for n in names))]
        trials = _evaluate_grid(streams, algorithm, grid, seed, n_jobs, max_per_task)
        return {"best": _best(trials)["params"], "trials": trials,
                "grid": " x ".join(f"{n} in {COLLAB_GRIDS[algorithm][n]}" for n in names)}
    if algorithm in ("mtfl", "trml"):
        return {"best": base, "trials": [], "grid": "none (batch learner at its default parameters, as in the paper)"}
    return {"best": base, "trials": [], "grid": "none (no free parameter; C = 1 as in the paper)"}
