"""Measure the "auto" factors of the CIKM 2015 family (PA, CW, CW-d, AROMA) on the paper subsets.

For one data set of the ``cikm15`` protocol: the paper-size stratified subset (seed 0), a
stratified 5-fold split of it, the first ``--folds`` folds; per fold ``n_triplets`` (Table 1)
SORS-protocol triplets from the training fold. Every passive learner (PA: OASIS with M_1 = 0,
the passive PAAS; CW: CWS; CW-d: CWS-d; AROMA) runs with its parameters at ``factor / s``
(steps) or ``factor * s`` (regularisers), ``s`` the statistic the learner reads on the training
fold, over a small grid of factors; and, with ``--searched``, at the absolute values the
protocol's 5-fold CV search chose (docs/active.md). AP@10 on the test fold (test documents
query each other), mean over the folds. One JSON line per setting on stdout.

Usage::

    SPARSESIM_DATA=/path/to/data python benchmarks/defaults_grid_cikm15.py segment --learners pa,cw --folds 2
"""

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparsesim.defaults import data_statistics  # noqa: E402
from sparsesim.evaluation import evaluate_retrieval  # noqa: E402
from sparsesim.experiments.cikm15 import PAPER_SIZES, load_cikm15_data, stratified_subsample  # noqa: E402
from sparsesim.learners.bilinear import OASIS  # noqa: E402
from sparsesim.learners.second_order import AROMA, CWS  # noqa: E402
from sparsesim.triplets import sors_triplets, stratified_kfold  # noqa: E402

# factor grids: steps are factor / s, regularisers factor * s
GRIDS = {
    "pa": {"C": [0.05, 0.15, 0.5, 1.5, 5.0]},
    "cw": {"eta": [1.0, 3.0, 10.0, 30.0, 100.0], "gamma": [0.03, 0.3, 3.0]},
    "cw-d": {"eta": [0.05, 0.15, 0.5, 1.5, 5.0, 15.0, 50.0], "gamma": [0.03, 0.3, 3.0]},
    "arow": {"r": [0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0]},
}
STEPS = {"C", "eta"}
# the protocol's 5-fold CV search (docs/active.md, run A): absolute values
SEARCHED = {
    "letter": {"pa": {"C": 0.1}, "cw": {"eta": 0.1, "gamma": 10.0}},
    "pendigits": {"pa": {"C": 0.01}, "cw": {"eta": 1.0, "gamma": 10.0}},
    "satimage": {"pa": {"C": 0.01}, "cw": {"eta": 0.1, "gamma": 10.0}, "cw-d": {"eta": 0.01, "gamma": 0.001}},
    "segment": {"pa": {"C": 0.01}, "cw": {"eta": 1.0, "gamma": 10.0}},
    "shuttle": {"pa": {"C": 1.0}, "cw": {"eta": 100.0, "gamma": 0.1}, "cw-d": {"eta": 1000.0, "gamma": 0.1}},
    "usps": {"pa": {"C": 1e-5}, "cw-d": {"eta": 1e-5, "gamma": 1.0}},
}


def make(learner, params, seed):
    if learner == "pa":
        return OASIS(identity=False, random_state=seed, **params)
    if learner == "cw":
        return CWS(covariance="full", random_state=seed, **params)
    if learner == "cw-d":
        return CWS(covariance="diag", random_state=seed, **params)
    return AROMA(covariance="diag" if learner == "arow-d" else "full", random_state=seed, **params)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--learners", default="pa,cw")
    parser.add_argument("--folds", type=int, default=2)
    parser.add_argument("--grid", action="append", default=[], help="KEY=F1,F2,... replaces a factor list")
    parser.add_argument("--searched", action="store_true", help="also run the CV-searched absolute values")
    args = parser.parse_args(argv)

    data = load_cikm15_data(args.dataset)
    n_inst, n_trip = PAPER_SIZES[args.dataset]
    rows = stratified_subsample(data.y, n_inst, 0)
    X, y = data.X[rows], data.y[rows]
    folds = stratified_kfold(y, 5, seed=0)[:args.folds]
    prepared = []
    for k, (train, test) in enumerate(folds):
        T = sors_triplets(y[train], n_trip, seed=k)
        prepared.append((X[train], X[test], y[test], T, data_statistics(X[train])["s"]))

    for learner in args.learners.split(","):
        grid = dict(GRIDS[learner.replace("arow-d", "arow")])
        for item in args.grid:
            key, values = item.split("=")
            if key in grid:
                grid[key] = [float(v) for v in values.split(",")]
        settings = [("factor", dict(zip(grid, combo))) for combo in itertools.product(*grid.values())]
        if args.searched and learner in SEARCHED.get(args.dataset, {}):
            settings.append(("searched", SEARCHED[args.dataset][learner]))
        for mode, values in settings:
            aps, t0 = [], time.perf_counter()
            for Xtr, Xte, yte, T, s in prepared:
                if mode == "factor":
                    params = {k: (v / s if k in STEPS else v * s) for k, v in values.items()}
                else:
                    params = dict(values)
                est = make(learner, params, 0).partial_fit_triplets(Xtr, T)
                aps.append(evaluate_retrieval(est.model_.scorer(Xte), yte, k=10)["ap@10"])
            print(json.dumps({"dataset": args.dataset, "learner": learner, "mode": mode, "values": values,
                              "s": [p[4] for p in prepared], "ap@10": float(np.mean(aps)),
                              "folds": [float(a) for a in aps], "seconds": time.perf_counter() - t0}), flush=True)


if __name__ == "__main__":
    main()
