"""Measure the "auto" factor of the OHT kernel width ``sigma`` on the OHT data sets.

For one data set of the ``oht`` protocol (split seed ``--seed``; the tuned configurations were
chosen on split seed 1): the first ``--tasks`` binary tasks, ``--permutations`` online passes each
(the protocol's paired orders). Every algorithm runs with ``sigma = factor * r``, ``r`` the root of
half the mean squared distance between the task's target rows
(:func:`sparsesim.defaults.kernel_width`), over a grid of factors; ``--fixed`` adds absolute
sigmas (the paper's 8, the tuned 4). Other parameters: the constructor's defaults, or the tuned
configuration's with ``--config``. Mean online mistake rate (%) over tasks and permutations. One
JSON line per setting on stdout.

Usage::

    SPARSESIM_DATA=/path/to/data python benchmarks/defaults_grid_oht.py mfeat --tasks 10
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparsesim.defaults import kernel_width  # noqa: E402
from sparsesim.experiments import ExperimentConfig, load_experiment_file  # noqa: E402
from sparsesim.experiments.oht import _task_job, load_tasks  # noqa: E402
from sparsesim.registry import get_algorithm  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--algorithms", default="pa2,oht1-pa2,oht2-pa2")
    parser.add_argument("--config", help="take the other parameters from this experiment file (e.g. oht-mfeat-tuned)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--permutations", type=int, default=20)
    parser.add_argument("--factors", default="0.25,0.35,0.5,0.7,1")
    parser.add_argument("--fixed", default="4,8")
    args = parser.parse_args(argv)

    params = load_experiment_file(args.config).get("params", {}) if args.config else {}
    config = ExperimentConfig(dataset=args.dataset, algorithms=args.algorithms.split(","), seeds=[args.seed],
                              params=params, options={"tasks": list(range(args.tasks))})
    _, tasks = load_tasks(config, args.seed)
    widths = [kernel_width(t.target_X) for t in tasks]
    settings = [("factor", float(f)) for f in args.factors.split(",") if f]
    settings += [("fixed", float(s)) for s in args.fixed.split(",") if s]
    for mode, value in settings:
        rates = {name: [] for name in config.algorithms}
        t0 = time.perf_counter()
        for number, (task, r) in enumerate(zip(tasks, widths), start=1):
            sigma = value * r if mode == "factor" else value
            ests = []
            for name in config.algorithms:
                params = {k: v for k, v in config.params_for(name).items() if k != "sigma"}
                params["sigma"] = sigma
                ests.append((name, get_algorithm(name).make(**params)))
            out = _task_job(task, number, ests, args.seed, args.permutations, None, 0, False)
            for name in config.algorithms:
                rates[name].append(float(out["algorithms"][name]["rates"].mean()))
        print(json.dumps({"dataset": args.dataset, "mode": mode, "value": value, "config": args.config,
                          "width_mean": float(np.mean(widths)),
                          "mistake_rate": {n: 100 * float(np.mean(v)) for n, v in rates.items()},
                          "seconds": time.perf_counter() - t0}), flush=True)


if __name__ == "__main__":
    main()
