"""Measure the "auto" factor of the OMTRSL family's C (and OMTRSL's b) on the IJCAI 2017 data.

For one data set of the ``ijcai17`` protocol: its 5-fold split (seed 0), the first ``--folds``
folds; per fold the protocol's triplet budget (30,000 isolet-tasks, 50,000 news20-tasks) of
OMTRSL-protocol triplets from the training fold (stream seed as the protocol's). Every learner
runs with ``C = factor / s`` (``s`` the statistic the rule reads on the training fold,
:func:`sparsesim.defaults.data_statistics`) over a grid of factors, OMTRSL also over ``b``;
``--searched`` adds the absolute values the protocol's search chose (docs/multitask.md). AP@10
on the test fold (mean over tasks), mean over the folds. One JSON line per setting on stdout.

Usage::

    SPARSESIM_DATA=/path/to/data python benchmarks/defaults_grid_multitask.py news20-tasks --folds 1
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparsesim.defaults import AUTO, data_statistics, resolve_bilinear  # noqa: E402
from sparsesim.experiments.ijcai17 import cv_folds, load_multitask_data, run_one  # noqa: E402

BUDGET = {"isolet-tasks": 30_000, "news20-tasks": 50_000}
SEARCHED = {  # the seed-0 search of the ijcai17 protocol (docs/multitask.md)
    "isolet-tasks": {"omtrsl": {"b": 100.0, "C": 0.01}, "ostrsl": {"C": 0.001}, "ogrsl": {"C": 0.001}},
    "news20-tasks": {"omtrsl": {"b": 0.1, "C": 1.0}, "ostrsl": {"C": 1.0}, "ogrsl": {"C": 1.0}},
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--algorithms", default="omtrsl,ostrsl,ogrsl")
    parser.add_argument("--folds", type=int, default=1)
    parser.add_argument("--factors", default="0.3,1,3,10,100", help="C * s values (with --rule: multiples of it)")
    parser.add_argument("--rule", action="store_true", help="factors multiply the rule's C (factor 1 = the default)")
    parser.add_argument("--b", default="auto", help="OMTRSL b values (a number, K for the number of tasks, or auto)")
    parser.add_argument("--searched", action="store_true")
    parser.add_argument("--fixed", action="store_true", help="also run the former fixed defaults C = 1 (b = 1)")
    args = parser.parse_args(argv)

    data = load_multitask_data(args.dataset)
    n_trip = BUDGET.get(args.dataset, 30_000)
    folds = cv_folds(data.y, data.tasks, 5, 0)[:args.folds]
    K = len(np.unique(data.tasks))
    full = [data_statistics(data.X[tr].tocsr()) for tr, _ in folds]
    # C = factor / stats: with --rule the rule's C is factor 1
    stats = [1.0 / resolve_bilinear("multitask", {"C": AUTO}, st, 1)["C"] if args.rule else st["s"] for st in full]
    b_values = [float(K) if b == "K" else b if b == "auto" else float(b) for b in args.b.split(",")]
    for alg in args.algorithms.split(","):
        settings = []
        for f in (float(v) for v in args.factors.split(",") if v):
            for b in (b_values if alg.startswith("omtrsl") else [None]):
                settings.append(("factor", {"C": f, **({"b": b} if b not in (None, "auto") else {})}))
        if args.searched and alg in SEARCHED.get(args.dataset, {}):
            settings.append(("searched", SEARCHED[args.dataset][alg]))
        if args.fixed:
            settings.append(("fixed", {"C": 1.0, **({"b": 1.0} if alg.startswith("omtrsl") else {})}))
        for mode, values in settings:
            aps, t0 = [], time.perf_counter()
            for k, ((tr, te), s) in enumerate(zip(folds, stats)):
                params = dict(values)
                if mode == "factor":
                    params["C"] = values["C"] / s
                r = run_one(alg, params, data.X, data.y, data.tasks, tr, te, n_trip, k, data.task_names)
                aps.append(r["ap@10"])
            print(json.dumps({"dataset": args.dataset, "algorithm": alg, "mode": mode, "values": values,
                              "s": stats, "K": K, "ap@10": float(np.mean(aps)), "folds": aps,
                              "seconds": time.perf_counter() - t0}), flush=True)


if __name__ == "__main__":
    main()
