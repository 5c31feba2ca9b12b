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
``n_instances`` (subset size), ``scale`` ("auto", "none", "minmax"), ``curve`` (True: sweep
every fold; False: sweep fold 0 only to pick delta, then run the other folds at that delta),
``refine`` (0.02: when no swept delta gives a mean ratio within 2 points of the target, one
more delta is interpolated log-linearly between the bracketing ones and run; 0 disables).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..persistence import save_figure
from ..data import load_dataset
from ..evaluation import evaluate_retrieval
from ..exceptions import InvalidInputError
from ..parallel import run_parallel
from ..registry import get_algorithm, make_estimator
from ..triplets import sors_triplets, stratified_kfold

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

# Table 2 of the paper (query %, AP@10, mAP@10) at about 20% queries.
PAPER_TABLE2 = {
    "covtype": {"pars": (20.62, 0.446, 0.334), "paas": (20.71, 0.512, 0.409),
                "cwrs": (20.96, 0.585, 0.476), "cwas": (20.89, 0.624, 0.515)},
    "letter": {"pars": (20.6, 0.198, 0.127), "paas": (20.6, 0.233, 0.158),
               "cwrs": (19.4, 0.362, 0.276), "cwas": (19.4, 0.385, 0.298)},
    "pendigits": {"pars": (22.2, 0.527, 0.418), "paas": (22.2, 0.554, 0.452),
                  "cwrs": (19.3, 0.673, 0.588), "cwas": (19.3, 0.700, 0.619)},
    "satimage": {"pars": (20.4, 0.493, 0.408), "paas": (20.5, 0.509, 0.423),
                 "cwrs": (19.6, 0.643, 0.560), "cwas": (19.5, 0.657, 0.574)},
    "segment": {"pars": (21.2, 0.361, 0.253), "paas": (21.2, 0.436, 0.316),
                "cwrs": (19.2, 0.690, 0.575), "cwas": (19.2, 0.787, 0.729)},
    "shuttle": {"pars": (21.07, 0.435, 0.313), "paas": (20.64, 0.513, 0.403),
                "cwrs": (20.25, 0.502, 0.417), "cwas": (20.84, 0.561, 0.493)},
}

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


# ----------------------------------------------------------------------------- data


def stratified_subsample(y, n, seed, min_per_class=5, exclude=None):
    """``n`` document indices drawn per class in proportion to the class sizes, at least
    ``min_per_class`` per class (or all of a smaller class), never from ``exclude``."""
    y = np.asarray(y)
    rng = np.random.default_rng(seed)
    available = np.ones(y.size, bool)
    if exclude is not None:
        available[np.asarray(exclude)] = False
    classes, counts_all = np.unique(y, return_counts=True)
    pools = [np.flatnonzero((y == c) & available) for c in classes]
    sizes = np.array([p.size for p in pools])
    want = np.maximum(np.round(n * counts_all / counts_all.sum()).astype(int), min_per_class)
    want = np.minimum(want, sizes)
    while want.sum() > n:  # trim the largest classes back to n
        k = int(np.argmax(want))
        if want[k] <= min_per_class:
            break
        want[k] -= 1
    while want.sum() < n and np.any(want < sizes):
        k = int(np.argmax(np.where(want < sizes, n * counts_all / counts_all.sum() - want, -np.inf)))
        want[k] += 1
    rows = [rng.choice(p, w, replace=False) for p, w in zip(pools, want) if w >= 2]
    return np.sort(np.concatenate(rows)).astype(np.int64)


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
    if hasattr(est, "random_state"):
        est.set_params(random_state=random_state)
    start = time.perf_counter()
    est.partial_fit_triplets(X_train, triplets)
    wall = time.perf_counter() - start
    scores = evaluate_retrieval(est.model_.scorer(X_test), y_test, k=10)
    seconds = float(getattr(est, "train_seconds_", wall))
    n_updates = int(getattr(est, "n_updates_", 0))
    n_seen = int(getattr(est, "n_triplets_seen_", triplets.shape[0]))
    n_queries = int(getattr(est, "n_queries_", n_seen))
    return {
        "algorithm": algorithm,
        "ap@10": float(scores["ap@10"]),
        "map@10": float(scores["map@10"]),
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
    base = dict(FIXED_PARAMS.get(algorithm, {}))
    base.update(fixed)
    scores: dict[tuple, float] = {}

    def evaluate(candidates):
        todo = [c for c in dict.fromkeys(candidates) if c not in scores]
        jobs = [dict(algorithm=algorithm, params={**base, **dict(zip(names, c))}, X=X, y=y, train=tr, test=te,
                     triplets=streams[f], random_state=seed, extra={})
                for c in todo for f, (tr, te) in enumerate(folds)]
        res = run_parallel(_job, jobs, n_jobs=n_jobs)
        k = len(folds)
        for i, c in enumerate(todo):
            scores[c] = float(np.mean([r["ap@10"] for r in res[i * k:(i + 1) * k]]))

    def best():
        return max(scores, key=lambda c: (scores[c], -sum(abs(np.log10(v)) for v in c)))

    if mode == "auto":  # a bounded grid around the data-adaptive values, read on the tuning subset
        centre = make_estimator(AUTO_RULE_OF[family]).resolve_params(X)
        if len(names) == 1:
            evaluate([(centre[names[0]] * f,) for f in AUTO_FACTORS])
        else:
            evaluate([(centre[names[0]] * a, centre[names[1]] * b)
                      for a in AUTO_FACTORS_2D[0] for b in AUTO_FACTORS_2D[1]])
    elif len(names) == 1:
        evaluate([(v,) for v in GRID])
    elif mode == "grid":
        evaluate([(a, b) for a in GRID for b in GRID])
    else:  # coordinate search: gamma at eta = 1, then eta, then gamma again
        evaluate([(1.0, g) for g in GRID])
        g = best()[1]
        evaluate([(e, g) for e in GRID])
        e = best()[0]
        evaluate([(e, g2) for g2 in GRID])
    top = best()
    return {
        "algorithm": algorithm,
        "best": dict(zip(names, top)),
        "best_ap@10": scores[top],
        "n_evaluated": len(scores),
        "folds": len(folds),
        "scores": [{**dict(zip(names, c)), "ap@10": s} for c, s in scores.items()],
    }


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


def _mean_std(values):
    arr = np.asarray(values, dtype=float)
    return float(arr.mean()), float(arr.std())


def run(config) -> dict:
    """Run the CIKM 2015 protocol (see the module docstring); returns the report."""
    opts = dict(config.options or {})
    dataset = str(config.dataset)
    algorithms = list(dict.fromkeys(config.algorithms))
    for name in algorithms:
        get_algorithm(name)
        if name not in FAMILY:
            raise InvalidInputError(
                f"protocol cikm15 runs {', '.join(sorted(FAMILY))}; {name!r} is not one of them")
    for name in list(algorithms):  # a random variant needs its active partner's ratios
        if name in RANDOM and RANDOM[name] not in algorithms:
            algorithms.insert(algorithms.index(name), RANDOM[name])
    target = float(opts.get("query_ratio", 0.2))
    deltas = [float(v) for v in opts.get("deltas", DEFAULT_DELTAS)]
    n_folds = int(opts.get("folds", 5))
    search_mode = opts.get("search", "grid")
    if search_mode not in ("coordinate", "grid", "auto", "none"):
        raise InvalidInputError(f"search must be 'coordinate', 'grid', 'auto' or 'none', got {search_mode!r}")
    curve = bool(opts.get("curve", True))
    refine = float(opts.get("refine", 0.02))
    data = load_cikm15_data(dataset, opts.get("scale", "auto"))
    default_n, default_t = PAPER_SIZES.get(dataset, (min(data.n_documents, 500), 10000))
    n_inst = int(opts.get("n_instances", default_n))
    n_triplets = int(config.triplets or default_t)
    search_triplets = int(opts.get("search_triplets", min(n_triplets, 5000)))
    search_folds = int(opts.get("search_folds", 5))
    if not 1 <= search_folds <= 5:
        raise InvalidInputError(f"search_folds must lie in 1..5, got {search_folds}")
    n_jobs = int(config.n_jobs)

    results, searches, tables, chosen = [], {}, {}, {}
    for seed in config.seeds:
        rows = stratified_subsample(data.y, n_inst, seed)
        # ---- parameter search per family on a disjoint tuning subset
        family_params = {}
        for fam in dict.fromkeys(FAMILY[a] for a in algorithms):
            members = [a for a in algorithms if FAMILY[a] == fam]
            given = {}
            for a in members:
                given.update({k: v for k, v in config.params_for(a).items() if k in SEARCH_PARAMS[fam]})
            if search_mode == "none" or set(given) >= set(SEARCH_PARAMS[fam]):
                family_params[fam] = given
                continue
            tune_rows = stratified_subsample(data.y, n_inst, seed + 1000, exclude=rows)
            if len(tune_rows) < max(20, n_inst // 2):
                tune_rows = rows
            fixed = {k: v for k, v in _accepted(SEARCH_ALGORITHM[fam], config.params_for(SEARCH_ALGORITHM[fam])).items()
                     if k not in SEARCH_PARAMS[fam]}
            res = _search_family(fam, data, tune_rows, search_triplets, seed, search_mode, n_jobs, fixed,
                                 search_folds)
            res["tuning_documents"] = int(len(tune_rows))
            res["disjoint"] = bool(tune_rows is not rows)
            searches[f"{fam}/seed{seed}"] = res
            family_params[fam] = {**res["best"], **given}

        def params_of(name):
            p = dict(FIXED_PARAMS.get(name, {}))
            p.update(config.params_for(name))
            p.update(family_params.get(FAMILY[name], {}))
            return _accepted(name, p)

        y = data.y[rows]
        X = data.X[rows]
        folds = stratified_kfold(y, n_folds, seed=seed)
        streams = [sors_triplets(y[tr], n_triplets, seed=seed * 1000 + f) for f, (tr, te) in enumerate(folds)]

        def job(name, f, extra, params=None):
            tr, te = folds[f]
            return dict(algorithm=name, params=params if params is not None else params_of(name), X=X, y=y,
                        train=tr, test=te, triplets=streams[f], random_state=seed * 1000 + f,
                        extra={"seed": seed, "fold": f, **extra})

        passive = [a for a in algorithms if a in PASSIVE]
        active = [a for a in algorithms if a in ACTIVE]
        random_ = [a for a in algorithms if a in RANDOM]
        jobs = [job(a, f, {"role": "passive", "delta": None}) for a in passive for f in range(n_folds)]
        sweep_folds = range(n_folds) if curve else [0]
        jobs += [job(a, f, {"role": "active", "delta": dl}, {**params_of(a), "delta": dl})
                 for a in active for f in sweep_folds for dl in deltas]
        run_results = run_parallel(_job, jobs, n_jobs=n_jobs)
        if refine:
            ref_jobs = []
            for a in active:
                dl = refine_delta([r for r in run_results if r["algorithm"] == a], target, tol=refine)
                if dl is not None:
                    ref_jobs += [job(a, f, {"role": "active", "delta": dl}, {**params_of(a), "delta": dl})
                                 for f in sweep_folds]
            run_results += run_parallel(_job, ref_jobs, n_jobs=n_jobs)
        if not curve and active and n_folds > 1:
            extra_jobs = []
            for a in active:
                ratios = {dl: r["query_ratio"] for r in run_results if r["algorithm"] == a and r["fold"] == 0
                          for dl in [r["delta"]]}
                dl = min(ratios, key=lambda v: abs(ratios[v] - target))
                extra_jobs += [job(a, f, {"role": "active", "delta": dl}, {**params_of(a), "delta": dl})
                               for f in range(1, n_folds)]
            run_results += run_parallel(_job, extra_jobs, n_jobs=n_jobs)
        rjobs = []
        for r in run_results:
            if r["role"] == "active" and ACTIVE[r["algorithm"]] in random_:
                partner = ACTIVE[r["algorithm"]]
                rjobs.append(job(partner, r["fold"], {"role": "random", "delta": r["delta"]},
                                 {**params_of(partner), "query_rate": r["query_ratio"]}))
        run_results += run_parallel(_job, rjobs, n_jobs=n_jobs)
        for r in run_results:
            r["params"] = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                                    for k, v in sorted(params_of(r["algorithm"]).items()))
        results += run_results

    # ---- Table 2 (at the target ratio) per seed pooled over folds
    by_algo: dict[str, dict] = {}
    for a in algorithms:
        rows_a = [r for r in results if r["algorithm"] == a]
        if not rows_a:
            continue
        if a in ACTIVE or a in RANDOM:
            owner = a if a in ACTIVE else RANDOM[a]
            if owner not in chosen:
                per_delta = {}
                for r in results:
                    if r["algorithm"] == owner:
                        per_delta.setdefault(r["delta"], []).append(r["query_ratio"])
                full = [dl for dl, v in per_delta.items() if len(v) == max(len(x) for x in per_delta.values())]
                chosen[owner] = min(full, key=lambda dl: abs(np.mean(per_delta[dl]) - target))
            rows_a = [r for r in rows_a if r["delta"] == chosen[owner]]
        entry = {"n_runs": len(rows_a), "delta": rows_a[0]["delta"], "params": rows_a[0]["params"]}
        for key in ("query_ratio", "ap@10", "map@10", "train_seconds", "updates_per_second"):
            entry[key] = _mean_std([r[key] for r in rows_a])
        by_algo[a] = entry
    tables = by_algo

    # ---- active vs its passive version at ~30% queries (Fig. 1 claim), AP@10 interpolated on the curve
    compare = float(opts.get("compare_ratio", 0.3))
    cur = curves({"results": results})
    vs_passive = {}
    for a, p in PASSIVE_OF.items():
        if a in cur and p in cur:
            pts = cur[a]
            qs = [q for q, *_ in pts]
            if min(qs) <= compare <= max(qs):
                ap = float(np.interp(compare, qs, [x[1] for x in pts]))
                mp = float(np.interp(compare, qs, [x[2] for x in pts]))
                vs_passive[a] = {"passive": p, "query_ratio": compare, "ap@10": ap, "map@10": mp,
                                 "passive_ap@10": float(cur[p][0][1]), "passive_map@10": float(cur[p][0][2]),
                                 "ap@10_fraction": ap / cur[p][0][1] if cur[p][0][1] else float("nan")}

    report = {
        "protocol": PROTOCOL,
        "dataset": dataset,
        "results": results,
        "table": tables,
        "target_query_ratio": target,
        "selected_delta": chosen,
        "search": searches,
        "vs_passive": vs_passive,
        "settings": {"n_instances": n_inst, "n_triplets": n_triplets, "folds": n_folds, "deltas": deltas,
                     "search": search_mode, "search_triplets": search_triplets,
                     "search_folds": search_folds, "curve": curve,
                     "scale": data.info.get("cikm15_scale"), "seeds": list(config.seeds),
                     "n_features": data.n_features},
        "paper": PAPER_TABLE2.get("covtype" if dataset == "usps" else dataset),
    }
    if config.out_dir is not None:
        out = Path(config.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        report["plot"] = str(plot_curves(report, out / f"cikm15_{dataset}.png"))
    return report


# ----------------------------------------------------------------------------- output


def curves(report):
    """Per algorithm: sorted (mean query ratio, mean AP@10, mean mAP@10) over deltas."""
    out = {}
    for r in report["results"]:
        key = (r["algorithm"], r["delta"] if r["role"] != "passive" else None)
        out.setdefault(key, []).append(r)
    by_algo: dict[str, list] = {}
    for (algo, dl), rs in out.items():
        by_algo.setdefault(algo, []).append((np.mean([r["query_ratio"] for r in rs]),
                                             np.mean([r["ap@10"] for r in rs]),
                                             np.mean([r["map@10"] for r in rs]), len(rs)))
    return {a: sorted(v) for a, v in by_algo.items()}


STYLE = {"paas": ("tab:blue", "-o"), "pars": ("tab:blue", "--s"), "cwas": ("tab:red", "-o"),
         "cwrs": ("tab:red", "--s"), "cwas-d": ("tab:purple", "-o"), "cwrs-d": ("tab:purple", "--s"),
         "oasis": ("tab:blue", ":"), "cws": ("tab:red", ":"), "cws-d": ("tab:purple", ":"),
         "aroma": ("tab:green", ":"), "aroma-d": ("tab:olive", ":")}


def plot_curves(report, path):
    """Fig. 1-style plot: AP@10 and mAP@10 against the query ratio (passive learners as lines)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = curves(report)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    # the Fig. 1 claim: at ~30% queries the active learner is close to its passive version
    for a, v in report.get("vs_passive", {}).items():
        color = STYLE.get(a, ("black", "-"))[0]
        axes[0].plot([100 * v["query_ratio"]], [v["ap@10"]], marker="*", markersize=12, color=color,
                     linestyle="none", label=f"{a.upper()} at {100 * v['query_ratio']:.0f}%: "
                                             f"{100 * v['ap@10_fraction']:.1f}% of {v['passive'].upper()}")
        axes[0].axhline(0.95 * v["passive_ap@10"], color=color, linestyle=(0, (1, 4)), linewidth=0.8)
    for ax in axes:
        if report.get("vs_passive"):
            ax.axvline(100 * next(iter(report["vs_passive"].values()))["query_ratio"], color="gray",
                       linewidth=0.8, alpha=0.6)
    for ax, idx, label in ((axes[0], 1, "AP@10"), (axes[1], 2, "mAP@10")):
        for algo, pts in data.items():
            color, style = STYLE.get(algo, ("black", "-"))
            if algo in PASSIVE:
                ax.axhline(pts[0][idx], color=color, linestyle=":", label=algo.upper())
            else:
                ax.plot([100 * p[0] for p in pts], [p[idx] for p in pts], style, color=color, label=algo.upper(),
                        markersize=4)
        ax.set_xlabel("query ratio (%)")
        ax.set_ylabel(label)
        ax.set_xscale("log")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    sweep = "mean over folds" if report.get("settings", {}).get("curve", True) else \
        "sweep on fold 0, chosen delta over all folds"
    fig.suptitle(f"{report['dataset']}: cikm15 protocol, {sweep}\n"
                 f"(grey line: 30% queries; sparse dotted: 95% of the passive learner)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=90)
    plt.close(fig)
    return path


def _pow2(value) -> str:
    e = float(np.log2(value))
    return f"2^{round(e)}" if abs(e - round(e)) < 1e-9 else f"2^{e:.2f}"


def format_table(report) -> str:
    """Table 2 style: query %, AP@10, mAP@10, time (mean +- std over folds), with the paper's numbers."""
    paper = report.get("paper") or {}
    lines = [f"cikm15 on {report['dataset']} (target query ratio {100 * report['target_query_ratio']:.0f}%; "
             f"{report['settings']['n_instances']} instances, {report['settings']['n_triplets']} triplets, "
             f"{report['settings']['folds']}-fold CV)"]
    head = (f"{'algorithm':<9} {'delta':>8} {'query %':>15} {'AP@10':>15} {'mAP@10':>15} {'time (s)':>15} "
            f"{'updates/s':>10}  paper (query %, AP@10, mAP@10)")
    lines += [head, "-" * len(head)]
    for algo, e in report["table"].items():
        q, ap, mp, ts, ups = (e[k] for k in ("query_ratio", "ap@10", "map@10", "train_seconds", "updates_per_second"))
        delta = "-" if e["delta"] is None else _pow2(e["delta"])
        ref = paper.get(algo)
        ref_s = f"{ref[0]:.1f}, {ref[1]:.3f}, {ref[2]:.3f}" if ref else ""
        lines.append(f"{algo:<9} {delta:>8} {100 * q[0]:7.1f} ± {100 * q[1]:5.1f} {ap[0]:7.3f} ± {ap[1]:5.3f} "
                     f"{mp[0]:7.3f} ± {mp[1]:5.3f} {ts[0]:7.3f} ± {ts[1]:5.3f} {ups[0]:10.0f}  {ref_s}")
    for a, v in report.get("vs_passive", {}).items():
        lines.append(f"{a} at {100 * v['query_ratio']:.0f}% queries (interpolated): AP@10 {v['ap@10']:.3f} = "
                     f"{100 * v['ap@10_fraction']:.1f}% of {v['passive']} ({v['passive_ap@10']:.3f})")
    for fam, s in report.get("search", {}).items():
        best = ", ".join(f"{k}={v:g}" for k, v in s["best"].items())
        lines.append(f"search {fam}: {s['algorithm']} best {best} (AP@10 {s['best_ap@10']:.3f} on "
                     f"{s['tuning_documents']} tuning documents, {s.get('folds', 1)} fold(s), "
                     f"{s['n_evaluated']} settings)")
    if report.get("plot"):
        lines.append(f"plot: {report['plot']}")
    return "\n".join(lines)
