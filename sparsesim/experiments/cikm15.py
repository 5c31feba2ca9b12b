"""Protocol ``cikm15``: active online similarity learning (Hao, Zhao, Hoi, Miao, CIKM 2015, §4).

Per data set and seed:

1. **Subset** — a stratified sample of the paper's size (Table 1: letter 1,690, pendigits 650,
   satimage 390, segment 455, shuttle 458 instances; ``usps`` stands in for covtype, 455), with
   at least ``min_per_class`` (5) documents of every class, so 5-fold CV keeps each class in
   every training fold. Shuttle's raw features are min-max scaled to [-1, 1] (the LIBSVM
   ``.scale`` convention the other sets already follow).
2. **Parameter search** in 10^{-5..5} (the paper's space) by 5-fold cross validation on a
   *disjoint* stratified tuning subset of the same size (mean AP@10 over its folds;
   ``search_folds=1``: one 4/5 - 1/5 split): C for the PA family (on OASIS with
   M_1 = 0, the passive PAAS), (eta, gamma) for CW (on CWS; all 121 pairs by default,
   ``search="coordinate"`` for gamma -> eta -> gamma, 31 runs), r for AROMA. ``search="auto"``
   (what ``experiment --tune`` runs) searches a bounded grid around the data-adaptive values of
   :mod:`sparsesim.defaults` instead — C or r times 0.1..10 (5 values), (eta, gamma) times
   0.1..10 x {0.1, 1, 10} (15 pairs) — with the same cross validation; ``"none"`` uses the
   learners' defaults. Active and random
   variants use the parameters of their passive version (the paper tunes the passive versions
   in its Fig. 2). Constructor overrides in ``config.params`` skip the search of a family.
3. **5-fold CV** — per fold, ``n_triplets`` SORS triplets (Table 1 counts) are drawn from the
   training fold; every algorithm sees the same stream. AP@10 and mAP@10 on the test fold
   (test documents query each other).
4. **Query-ratio sweep** — each active learner (PAAS, CWAS, CWAS-d) runs for
   delta in 2^{-10, -8, ..., 10}; its random partner (PARS, CWRS, CWRS-d) runs at the query
   ratio the active learner observed on the same fold and delta. Passive learners (OASIS, CWS,
   CWS-d, AROMA, AROMA-d) query everything.
5. **Table 2** — for each active learner the delta whose mean ratio is closest to
   ``options["query_ratio"]`` (default 0.2), with its random partner at the same delta;
   mean +- std over folds. **Fig. 1** — AP@10 / mAP@10 against the query ratio, written as
   ``cikm15_<dataset>.png`` into ``config.out_dir``.

Options (``config.options``): ``query_ratio`` (0.2), ``deltas`` (list), ``folds`` (5),
``search`` ("grid", "coordinate", "auto" or "none"), ``search_triplets`` (default min(n_triplets, 5000)),
``search_folds`` (5, the paper's "cross validation": mean AP@10 over the 5 folds of the tuning
subset; 1: one 4/5 - 1/5 split, cheaper and noisier),
``n_instances`` (subset size), ``scale`` ("auto", "none", "minmax": the features), ``curve`` (True: sweep
every fold; False: sweep fold 0 only to pick delta, then run the other folds at that delta),
``refine`` (0.02: when no swept delta gives a mean ratio within 2 points of the target, one
more delta is interpolated log-linearly between the bracketing ones and run; 0 disables),
``compare_ratio`` (0.3: the query ratio of ``vs_passive``), ``factors`` (``{param: [multipliers]}``:
instead of searching, every passive learner runs at each combination of multiples of the values
its data-adaptive ``"auto"`` rule (:mod:`sparsesim.defaults`) gives on each training fold — how the
rules' factors were measured; a learner takes the parameters it has and ignores the others).

The seeds x folds loop, the summary (mean ± std), the table layout, the JSON report and the
figure files are :mod:`sparsesim.experiments.runner`'s; the search ranks its candidates with
:func:`sparsesim.tuning.rank_candidates`, as ``sparsesim tune`` does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..data import load_dataset
from ..evaluation import evaluate_retrieval
from ..exceptions import InvalidInputError
from ..parallel import run_parallel
from ..registry import get_algorithm, make_estimator
from ..triplets import sors_triplets, stratified_kfold, stratified_subsample
from ..tuning import evaluate_candidates, rank_candidates, resolved_auto
from .cikm15_report import PAPER_TABLE2, plot_curves, vs_passive
from .runner import (check_factors, describe_params, factor_label, factor_points, fold_jobs, grid_points,
                     protocol_options, scale_auto, summarize, write_report)

PROTOCOL = "cikm15"

# Table 1: instances and triplets per training fold. usps stands in for covtype (455, 10,000).
PAPER_SIZES = {
    "letter": (1690, 10140),
    "pendigits": (650, 16848),
    "satimage": (390, 18000),
    "segment": (455, 25000),
    "shuttle": (458, 4000),
    "usps": (455, 10000),
}
SCALE_DEFAULT = {"shuttle": "minmax"}
DEFAULT_DELTAS = [2.0 ** e for e in range(-10, 11, 2)]
GRID = [10.0 ** e for e in range(-5, 6)]
# search="auto": multiples of the data-adaptive values (sparsesim.defaults) on the tuning subset
AUTO_FACTORS = [0.1, 0.3, 1.0, 3.0, 10.0]
AUTO_FACTORS_2D = ([0.1, 0.3, 1.0, 3.0, 10.0], [0.1, 1.0, 10.0])
# the learner whose "auto" rule a family's search="auto" grid is centred on (OASIS's own rule
# assumes M_1 = I; the PA family here starts from M_1 = 0 like PAAS)
AUTO_RULE_OF = {"pa": "paas", "cw": "cws", "cw-d": "cws-d", "aroma": "aroma", "aroma-d": "aroma-d"}

ACTIVE = {"paas": "pars", "cwas": "cwrs", "cwas-d": "cwrs-d"}  # active -> random partner
RANDOM = {v: k for k, v in ACTIVE.items()}
PASSIVE = ("oasis", "cws", "cws-d", "aroma", "aroma-d")
FAMILY = {
    "oasis": "pa", "paas": "pa", "pars": "pa",
    "cws": "cw", "cwas": "cw", "cwrs": "cw",
    "cws-d": "cw-d", "cwas-d": "cw-d", "cwrs-d": "cw-d",
    "aroma": "aroma", "aroma-d": "aroma-d",
}
PASSIVE_OF = {"paas": "oasis", "cwas": "cws", "cwas-d": "cws-d"}
SEARCH_ALGORITHM = {"pa": "oasis", "cw": "cws", "cw-d": "cws-d", "aroma": "aroma", "aroma-d": "aroma-d"}
SEARCH_PARAMS = {"pa": ("C",), "cw": ("eta", "gamma"), "cw-d": ("eta", "gamma"), "aroma": ("r",),
                 "aroma-d": ("r",)}
# OASIS is the passive PAAS: start from M_1 = 0 like Algorithm 1.
FIXED_PARAMS = {"oasis": {"identity": False}}
DEFAULT_OPTIONS = {"query_ratio": 0.2, "deltas": DEFAULT_DELTAS, "folds": 5, "search": "grid", "search_triplets": None,
                   "search_folds": 5, "n_instances": None, "scale": "auto", "curve": True, "refine": 0.02,
                   "compare_ratio": 0.3, "factors": {}}


# ----------------------------------------------------------------------------- data


def _minmax(X):
    """Scale every feature to [-1, 1] (LIBSVM svm-scale); constant features become 0."""
    D = X.toarray()
    lo, hi = D.min(axis=0), D.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    out = np.where(hi > lo, 2.0 * (D - lo) / span - 1.0, 0.0)
    return sp.csr_matrix(out)


def load_cikm15_data(dataset, scale="auto"):
    """The data set, scaled as the protocol uses it."""
    data = load_dataset(dataset)
    mode = SCALE_DEFAULT.get(str(dataset), "none") if scale == "auto" else scale
    if mode == "minmax":
        if data.n_features > 1000:
            raise InvalidInputError(f"scale='minmax' densifies; refused for d = {data.n_features} > 1000")
        data.X = _minmax(data.X)
    elif mode != "none":
        raise InvalidInputError(f"scale must be 'auto', 'none' or 'minmax', got {scale!r}")
    data.info = dict(data.info, cikm15_scale=mode)
    return data


# ----------------------------------------------------------------------------- one run


def run_one(algorithm, params, X_train, y_train, X_test, y_test, triplets, random_state):
    """Train ``algorithm`` on ``triplets`` over the training rows and evaluate on the test rows."""
    est = make_estimator(algorithm, **params)
    if "random_state" in est.get_params():  # dot and cosine draw nothing
        est.set_params(random_state=random_state)
    est.partial_fit_triplets(X_train, triplets)
    scores = evaluate_retrieval(est.model_.scorer(X_test), y_test, k=10)
    # the counters every triplet learner keeps (learners.base)
    seconds, n_updates, n_seen = float(est.train_seconds_), int(est.n_updates_), int(est.n_triplets_seen_)
    n_queries = est.queried_labels()
    return {
        "algorithm": algorithm,
        "ap@10": float(scores["ap@10"]),
        "map@10": float(scores["map@10"]),
        "map@10_hits": float(scores["map@10_hits"]),
        "map": float(scores["map"]),
        "query_ratio": n_queries / n_seen if n_seen else 0.0,
        "n_queries": n_queries,
        "n_updates": n_updates,
        "n_triplets": n_seen,
        "train_seconds": seconds,
        "updates_per_second": n_updates / seconds if seconds > 0 else 0.0,
    }


def _job(algorithm, params, X, y, train, test, triplets, random_state, extra):
    out = run_one(algorithm, params, X[train], y[train], X[test], y[test], triplets, random_state)
    out.update(extra)
    return out


# ----------------------------------------------------------------------------- search


def _search_family(family, data, rows, n_triplets, seed, mode, n_jobs, fixed, n_folds=1):
    """Best parameters of ``family`` by AP@10 on ``rows``: the mean over the first ``n_folds``
    folds of a stratified 5-fold split (1: one 4/5 - 1/5 split; 5: full 5-fold CV)."""
    algorithm = SEARCH_ALGORITHM[family]
    names = SEARCH_PARAMS[family]
    y = data.y[rows]
    folds = stratified_kfold(y, 5, seed=seed)[:max(1, min(5, int(n_folds)))]
    X = data.X[rows]
    # fold 0 keeps the seed of the single-split search, so n_folds=1 reproduces it
    streams = [sors_triplets(y[tr], n_triplets, seed=seed + 7 + 100 * f) for f, (tr, _) in enumerate(folds)]
    base = {**FIXED_PARAMS.get(algorithm, {}), **fixed}
    scores: dict[tuple, float] = {}

    def jobs_of(candidate):
        return [dict(algorithm=algorithm, params={**base, **dict(zip(names, candidate))}, X=X, y=y, train=tr,
                     test=te, triplets=streams[f], random_state=seed, extra={}) for f, (tr, te) in enumerate(folds)]

    def evaluate(grid):
        todo = [c for c in dict.fromkeys(tuple(p[n] for n in names) for p in grid_points(grid)) if c not in scores]
        runs = evaluate_candidates(todo, jobs_of, lambda jobs: run_parallel(_job, jobs, n_jobs=n_jobs))
        scores.update({c: float(np.mean([r["ap@10"] for r in res])) for c, res in zip(todo, runs)})

    def best():  # equal scores: the values nearest 1 in log scale
        return rank_candidates(scores, tie_break=lambda c: sum(abs(np.log10(v)) for v in c))[0]

    if mode == "auto":  # a bounded grid around the data-adaptive values, read on the tuning subset
        centre = resolved_auto(AUTO_RULE_OF[family], {}, X, n_triplets)
        factors = [AUTO_FACTORS] if len(names) == 1 else AUTO_FACTORS_2D
        evaluate({n: [centre[n] * f for f in fs] for n, fs in zip(names, factors)})
    elif mode == "grid" or len(names) == 1:
        evaluate({n: GRID for n in names})
    else:  # coordinate search: gamma at eta = 1, then eta, then gamma again
        evaluate({"eta": [1.0], "gamma": GRID})
        g = best()[1]
        evaluate({"eta": GRID, "gamma": [g]})
        e = best()[0]
        evaluate({"eta": [e], "gamma": GRID})
    top = best()
    return {
        "algorithm": algorithm,
        "best": dict(zip(names, top)),
        "best_ap@10": scores[top],
        "n_evaluated": len(scores),
        "folds": len(folds),
        "scores": [{**dict(zip(names, c)), "ap@10": s} for c, s in scores.items()],
    }


def _family_params(config, data, algorithms, rows, seed, opts, searches):
    """Per family, the searched parameters (recorded in ``searches``) or the given ones."""
    family_params = {}
    for fam in dict.fromkeys(FAMILY[a] for a in algorithms):
        given = {}
        for a in (a for a in algorithms if FAMILY[a] == fam):
            given.update({k: v for k, v in config.params_for(a).items() if k in SEARCH_PARAMS[fam]})
        if opts["search"] == "none" or opts["factors"] or set(given) >= set(SEARCH_PARAMS[fam]):
            family_params[fam] = given
            continue
        n_inst = opts["n_instances"]
        tune_rows = stratified_subsample(data.y, n_inst, seed + 1000, exclude=rows)
        if len(tune_rows) < max(20, n_inst // 2):
            tune_rows = rows
        searched = SEARCH_ALGORITHM[fam]
        fixed = {k: v for k, v in _accepted(searched, config.params_for(searched)).items()
                 if k not in SEARCH_PARAMS[fam]}
        res = _search_family(fam, data, tune_rows, opts["search_triplets"], seed, opts["search"],
                             int(config.n_jobs), fixed, opts["search_folds"])
        res["tuning_documents"] = int(len(tune_rows))
        res["disjoint"] = bool(tune_rows is not rows)
        searches[f"{fam}/seed{seed}"] = res
        family_params[fam] = {**res["best"], **given}
    return family_params


# ----------------------------------------------------------------------------- protocol


def refine_delta(active_results, target, tol=0.02):
    """A delta between the two swept deltas whose mean query ratios bracket ``target``
    (log-linear interpolation), or None when a swept delta is already within ``tol`` of it
    or no pair brackets it."""
    per = {}
    for r in active_results:
        per.setdefault(r["delta"], []).append(r["query_ratio"])
    pts = sorted((dl, float(np.mean(v))) for dl, v in per.items())
    if not pts or min(abs(q - target) for _, q in pts) <= tol:
        return None
    for (d0, q0), (d1, q1) in zip(pts, pts[1:]):
        if q0 < target < q1:
            w = (target - q0) / (q1 - q0)
            return float(np.exp(np.log(d0) + w * (np.log(d1) - np.log(d0))))
    return None


def _accepted(name, params):
    """``params`` restricted to the constructor parameters of ``name`` (``"*"`` overrides span families)."""
    accepted = set(make_estimator(name).get_params())
    return {k: v for k, v in params.items() if k in accepted}


def _options(opts, config, data):
    """The protocol's options, checked, with the data-dependent defaults filled in."""
    if opts["search"] not in ("coordinate", "grid", "auto", "none"):
        raise InvalidInputError(f"search must be 'coordinate', 'grid', 'auto' or 'none', got {opts['search']!r}")
    default_n, default_t = PAPER_SIZES.get(str(config.dataset), (min(data.n_documents, 500), 10000))
    n_triplets = int(config.triplets or default_t)
    opts.update(query_ratio=float(opts["query_ratio"]), deltas=[float(v) for v in opts["deltas"]],
                folds=int(opts["folds"]), curve=bool(opts["curve"]), refine=float(opts["refine"]),
                n_instances=int(opts["n_instances"] or default_n), n_triplets=n_triplets,
                search_triplets=int(opts["search_triplets"] or min(n_triplets, 5000)),
                search_folds=int(opts["search_folds"]))
    if not 1 <= opts["search_folds"] <= 5:
        raise InvalidInputError(f"search_folds must lie in 1..5, got {opts['search_folds']}")
    return opts


def _factor_names(config, name) -> set[str]:
    """The parameters of learner ``name`` a ``factors`` grid may scale: its family's searched ones
    that ``--param`` does not set (an explicit value always wins)."""
    return set(SEARCH_PARAMS[FAMILY[name]]) - set(config.params_for(name))


def _check_factors(factors, algorithms, config):
    """Refuse a ``factors`` grid that is malformed, names no learner's "auto" value or meets an active learner."""
    if factors and any(a not in PASSIVE for a in algorithms):
        raise InvalidInputError(f"option 'factors' runs the passive learners ({', '.join(PASSIVE)}); "
                                f"leave out {', '.join(a for a in algorithms if a not in PASSIVE)}")
    check_factors(factors, {a: _factor_names(config, a) for a in algorithms})


def _seed_runs(config, data, algorithms, opts, seed, searches) -> list[dict]:
    """Every run of one seed: passive learners on every fold, the delta sweep, the random partners."""
    rows = stratified_subsample(data.y, opts["n_instances"], seed)
    family_params = _family_params(config, data, algorithms, rows, seed, opts, searches)

    def params_of(name):
        p = dict(FIXED_PARAMS.get(name, {}))
        p.update(config.params_for(name))
        p.update(family_params.get(FAMILY[name], {}))
        return _accepted(name, p)

    y, X = data.y[rows], data.X[rows]
    n_folds, target, n_jobs = opts["folds"], opts["query_ratio"], int(config.n_jobs)
    folds = stratified_kfold(y, n_folds, seed=seed)
    streams = [sors_triplets(y[tr], opts["n_triplets"], seed=seed * 1000 + f) for f, (tr, te) in enumerate(folds)]

    def jobs(name, extra, params=None, only=None):
        return fold_jobs([seed], lambda _: folds, lambda s, f, tr, te: dict(
            algorithm=name, params=params_of(name) if params is None else params, X=X, y=y, train=tr, test=te,
            triplets=streams[f], random_state=seed * 1000 + f, extra={"seed": seed, "fold": f, **extra}), only)

    def sweep(name, delta, only):
        return jobs(name, {"role": "active", "delta": delta}, {**params_of(name), "delta": delta}, only)

    def run(batch):
        return run_parallel(_job, batch, n_jobs=n_jobs)

    passive = [a for a in algorithms if a in PASSIVE]
    active = [a for a in algorithms if a in ACTIVE]
    if opts["factors"]:
        results = run([j for a in passive for j in _factor_jobs(a, params_of(a), opts["factors"], jobs, X, folds,
                                                                 opts["n_triplets"], _factor_names(config, a))])
        for r in results:
            r["params"] = describe_params(r.pop("resolved"))
        return results
    sweep_folds = range(n_folds) if opts["curve"] else [0]
    results = run([j for a in passive for j in jobs(a, {"role": "passive", "delta": None})]
                  + [j for a in active for f in sweep_folds for dl in opts["deltas"] for j in sweep(a, dl, [f])])
    if opts["refine"]:
        refined = [refine_delta([r for r in results if r["algorithm"] == a], target, tol=opts["refine"])
                   for a in active]
        results += run([j for a, dl in zip(active, refined) if dl is not None for j in sweep(a, dl, sweep_folds)])
    if not opts["curve"] and active and n_folds > 1:
        extra = []
        for a in active:
            ratios = {r["delta"]: r["query_ratio"] for r in results if r["algorithm"] == a and r["fold"] == 0}
            extra += sweep(a, min(ratios, key=lambda v: abs(ratios[v] - target)), range(1, n_folds))
        results += run(extra)
    partners = [r for r in results if r["role"] == "active" and ACTIVE[r["algorithm"]] in algorithms]
    results += run([jobs(ACTIVE[r["algorithm"]], {"role": "random", "delta": r["delta"]},
                         {**params_of(ACTIVE[r["algorithm"]]), "query_rate": r["query_ratio"]},
                         [r["fold"]])[0] for r in partners])
    for r in results:
        r["params"] = describe_params(params_of(r["algorithm"]))
    return results


def _factor_jobs(name, base, factors, jobs, X, folds, n_triplets, scalable):
    """The runs of passive learner ``name`` at every point of ``factors`` (multiples of its "auto"
    values; only the parameters in ``scalable``: one given explicitly keeps its value)."""
    out = []
    rule = AUTO_RULE_OF[FAMILY[name]]
    for f, (tr, _) in enumerate(folds):
        auto = {k: v for k, v in resolved_auto(rule, {}, X[tr], n_triplets).items() if k in scalable}
        for point in factor_points(factors, auto):
            params = {**base, **scale_auto(auto, point)}
            job = jobs(name, {"role": "passive", "delta": None, "factors": point}, params, [f])[0]
            # the values the run used: its auto ones (scaled or not) and the ones given explicitly
            job["extra"]["resolved"] = {**auto, **{k: v for k, v in params.items() if k in SEARCH_PARAMS[FAMILY[name]]}}
            out.append(job)
    return out


def _setting(row) -> str:
    """The table's name of a run: the algorithm, with the multiples of its "auto" values when given."""
    return factor_label(row["algorithm"], row.get("factors"))


def _check_algorithms(config) -> list[str]:
    algorithms = list(dict.fromkeys(config.algorithms))
    for name in algorithms:
        get_algorithm(name)
        if name not in FAMILY:
            raise InvalidInputError(
                f"protocol cikm15 runs {', '.join(sorted(FAMILY))}; {name!r} is not one of them")
    for name in list(algorithms):  # a random variant needs its active partner's ratios
        if name in RANDOM and RANDOM[name] not in algorithms:
            algorithms.insert(algorithms.index(name), RANDOM[name])
    return algorithms


def run(config) -> dict:
    """Run the CIKM 2015 protocol (see the module docstring); returns the report."""
    dataset = str(config.dataset)
    algorithms = _check_algorithms(config)
    opts = protocol_options(PROTOCOL, dict(config.options or {}), DEFAULT_OPTIONS)
    _check_factors(opts["factors"], algorithms, config)
    data = load_cikm15_data(dataset, opts["scale"])
    opts = _options(opts, config, data)
    searches: dict = {}
    results = [r for seed in config.seeds for r in _seed_runs(config, data, algorithms, opts, seed, searches)]
    chosen = _chosen_deltas(results, algorithms, opts["query_ratio"])
    at_target = [r for r in results if r["delta"] == chosen.get(RANDOM.get(r["algorithm"], r["algorithm"]), r["delta"])]
    summary = summarize(at_target, TABLE_METRICS, by=_setting)
    table = {}
    for key, entry in summary.items():
        first = next(r for r in at_target if _setting(r) == key)
        table[key] = {"delta": first["delta"], "params": first["params"], **entry}
    if not opts["factors"]:
        table = {a: table[a] for a in algorithms if a in table}
    report = {
        "protocol": PROTOCOL,
        "dataset": dataset,
        "results": results,
        "table": table,
        "target_query_ratio": opts["query_ratio"],
        "selected_delta": chosen,
        "search": searches,
        "vs_passive": vs_passive(results, PASSIVE_OF, float(opts["compare_ratio"])),
        "settings": {"n_instances": opts["n_instances"], "n_triplets": opts["n_triplets"], "folds": opts["folds"],
                     "deltas": opts["deltas"], "search": opts["search"], "search_triplets": opts["search_triplets"],
                     "search_folds": opts["search_folds"], "curve": opts["curve"],
                     "scale": data.info.get("cikm15_scale"), "seeds": list(config.seeds),
                     "n_features": data.n_features, **({"factors": opts["factors"]} if opts["factors"] else {})},
        "paper": PAPER_TABLE2.get("covtype" if dataset == "usps" else dataset),
    }
    if config.out_dir is not None:
        report["plot"] = str(plot_curves(report, Path(config.out_dir) / f"cikm15_{dataset}.png"))
        write_report(report, config.out_dir, f"cikm15_{dataset}.json")
    return report


TABLE_METRICS = ("query_ratio", "ap@10", "map@10", "train_seconds", "updates_per_second")


def _chosen_deltas(results, algorithms, target) -> dict:
    """Per active learner, the delta run on every fold whose mean query ratio is closest to ``target``."""
    chosen = {}
    for owner in [a for a in algorithms if a in ACTIVE or a in RANDOM]:
        owner = RANDOM.get(owner, owner)
        per_delta: dict = {}
        for r in results:
            if r["algorithm"] == owner:
                per_delta.setdefault(r["delta"], []).append(r["query_ratio"])
        if per_delta and owner not in chosen:
            full = [dl for dl, v in per_delta.items() if len(v) == max(len(x) for x in per_delta.values())]
            chosen[owner] = min(full, key=lambda dl: abs(np.mean(per_delta[dl]) - target))
    return chosen
