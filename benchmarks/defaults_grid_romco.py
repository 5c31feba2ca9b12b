"""Measure the "auto" factors of ROMCO (steps eta1, eta2; regularisers lam1, lam2) and of the PA
baselines (C) on the ROMCO data sets.

For one data set of the ``romco`` protocol: one online pass per shuffle seed (``--seeds``, not
the protocol's search shuffle 12345) with the parameters at ``factor / q`` (steps, ``q`` the mean
``||x||^2`` of the instances) and ``factor * sqrt(q) / T`` (regularisers, ``T`` the length of
the longest task stream), over a grid of factors; ``--searched`` adds the absolute values the
protocol's search chose (docs/romco.md). Cumulative online error rate (%, mean over tasks), mean
over the seeds. One JSON line per setting on stdout.

Usage::

    SPARSESIM_DATA=/path/to/data python benchmarks/defaults_grid_romco.py mhc1 --seeds 0,1
"""

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparsesim.data.catalog import load_registered  # noqa: E402
from sparsesim.defaults import stream_statistics  # noqa: E402
from sparsesim.experiments.romco import run_stream  # noqa: E402

GRIDS = {
    "romco": {"eta": [0.1, 0.3, 1.0, 3.0], "lam": [0.03, 0.3, 3.0]},
    "pa": {"C": [0.3, 1.0, 3.0]},
}
SEARCHED = {  # the protocol's search on shuffle 12345 (docs/romco.md)
    "mhc1": {"romco-nucl": {"eta1": 1.0, "eta2": 1e-3, "lam1": 1e-4, "lam2": 1e-4},
             "romco-logd": {"eta1": 1.0, "eta2": 1e-3, "lam1": 1e-3, "lam2": 1e-4}},
    # landmine: docs/romco.md gives the chosen steps (eta1 = eta2 = 0.01), the lam values here are 1e-4
    "landmine": {"romco-nucl": {"eta1": 0.01, "eta2": 0.01, "lam1": 1e-4, "lam2": 1e-4}},
    "spam-task-a": {"romco-nucl": {"eta1": 1.0, "eta2": 1.0, "lam1": 1e-3, "lam2": 1e-4},
                    "romco-logd": {"eta1": 1.0, "eta2": 1.0, "lam1": 0.1, "lam2": 1e-4}},
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--algorithms", default="romco-nucl,romco-logd,pa-global,pa-unique")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--grid", action="append", default=[], help="KEY=F1,F2,... replaces a factor list")
    parser.add_argument("--searched", action="store_true")
    parser.add_argument("--paper", action="store_true", help="also run the constructor's fixed values")
    args = parser.parse_args(argv)

    streams = load_registered(args.dataset)
    stats = stream_statistics(streams.X)
    q, T = stats["sq_x"], stats["n_rounds"]
    seeds = [int(s) for s in args.seeds.split(",")]
    for alg in args.algorithms.split(","):
        family = "romco" if alg.startswith("romco") else "pa"
        grid = dict(GRIDS[family])
        for item in args.grid:
            key, values = item.split("=")
            if key in grid:
                grid[key] = [float(v) for v in values.split(",")]
        settings = [("factor", dict(zip(grid, combo))) for combo in itertools.product(*grid.values())]
        if args.searched and alg in SEARCHED.get(args.dataset, {}):
            settings.append(("searched", SEARCHED[args.dataset][alg]))
        if args.paper:
            settings.append(("fixed", {"eta1": 0.1, "eta2": 0.1, "lam1": 1e-4, "lam2": 1e-4} if family == "romco"
                             else {"C": 1.0}))
        for mode, values in settings:
            if mode != "factor":
                params = dict(values)
            elif family == "romco":
                eta = values["eta"] / q
                lam = values["lam"] * np.sqrt(q) / T
                params = {"eta1": eta, "eta2": eta, "lam1": lam, "lam2": lam}
            else:
                params = {"C": values["C"] / q}
            t0 = time.perf_counter()
            errors = [run_stream(streams, alg, params, seed, checkpoints=2)["error_rate"] for seed in seeds]
            print(json.dumps({"dataset": args.dataset, "algorithm": alg, "mode": mode, "values": values,
                              "params": params, "q": q, "T": T, "error": 100 * float(np.mean(errors)),
                              "seeds": [100 * e for e in errors], "seconds": time.perf_counter() - t0}), flush=True)


if __name__ == "__main__":
    main()
