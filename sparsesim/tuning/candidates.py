"""The candidates of a search: default grids, grid parsing and enumeration, successive-halving
rungs, and the ranking and batch evaluation the paper protocols' searches share."""

from __future__ import annotations

import itertools
import math

from ..exceptions import InvalidInputError
from ..registry import get_algorithm


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
    # the SORS paper's grids (LEGO eta in {0.02, 0.08, 0.32}, RDML lam in {0.01, 0.1}) as multiples
    "lego": {"eta": [0.25, 1.0, 4.0]},
    "rdml": {"lam": [0.1, 1.0, 10.0]},
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
    # proxy-ssi: the proxy softmax's temperature (its "auto" value is log(3 (K - 1)), 4.0 for 20 classes)
    "proxy-ssi": {"scale": [2.5, 4.0, 6.0]},
    # ssi-dwuv: the step of the low-rank (SSI) part, around its default 0.3
    "ssi-dwuv": {"learning_rate": [0.1, 0.3, 1.0]},
    # OASIS, SORS, AdaSORS: the SORS protocol's uniform negatives or semi-hard ones mined by the
    # trial's own model (docs/quality.md, "The sampler in tune")
    **{name: {"sampler": ["uniform", "semihard"]}
       for name in ("oasis", "sors-l1", "sors-offdiag", "adasors-l1", "adasors-offdiag")},
}
TUNABLE_KINDS = ("similarity", "baseline")


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
    return dict(est.resolve_params(X))  # {} for a learner without "auto" parameters


def default_grid(algorithm: str, resolved: dict, fixed=()) -> dict:
    """The default grid of ``algorithm``: multiples of its resolved ``"auto"`` values
    (:data:`DEFAULT_FACTORS`) and the absolute values of :data:`DEFAULT_GRIDS` (empty for
    baselines), but for the parameters the caller set (``fixed``: e.g. a paper run's
    ``sampler="uniform"``), which keep their value."""
    grid = {k: [float(resolved[k]) * f for f in fs] for k, fs in DEFAULT_FACTORS.get(algorithm, {}).items()
            if k in resolved}
    grid.update({k: list(v) for k, v in DEFAULT_GRIDS.get(algorithm, {}).items() if k not in fixed})
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
