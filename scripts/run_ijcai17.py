"""Run the ijcai17 protocol on isolet-tasks and news20-tasks as reported in docs/multitask.md.

Equivalent CLI (once wired): ``sparsesim experiment --protocol ijcai17 --dataset isolet-tasks
--algorithms omtrsl,ostrsl,ogrsl,omtrsl-active,omtrsl-random --triplets 30000 --n-jobs 2 --json``
with the options below. Writes ``runs/ijcai17/<dataset>.json`` and the PNG figures.

Usage: ``SPARSESIM_DATA=... python scripts/run_ijcai17.py [isolet-tasks|news20-tasks ...]``
"""

import json
import sys
import time
from pathlib import Path

from sparsesim.experiments import ExperimentConfig, run_experiment
from sparsesim.experiments.ijcai17 import format_table

ALGORITHMS = ["omtrsl", "ostrsl", "ogrsl", "omtrsl-active", "omtrsl-random"]
GRID = {"b_grid": [0.1, 1.0, 10.0, 100.0], "c_grid": [0.001, 0.01, 0.1, 1.0]}
SETTINGS = {
    "isolet-tasks": dict(triplets=30_000, params={"omtrsl-active": {"delta": 3.0}},
                         options=dict(folds=5, search=True, active_deltas=[1.0, 3.0, 10.0, 30.0], **GRID)),
    "news20-tasks": dict(triplets=50_000, params={"omtrsl-active": {"delta": 0.1}},
                         options=dict(folds=5, search=True, **GRID)),
}


def main(names):
    out = Path("runs/ijcai17")
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        s = SETTINGS[name]
        config = ExperimentConfig(dataset=name, algorithms=ALGORITHMS, seeds=[0], triplets=s["triplets"],
                                  params=s["params"], n_jobs=2, out_dir=out, options=s["options"])
        t0 = time.time()
        report = run_experiment("ijcai17", config)
        (out / f"{name}.json").write_text(json.dumps(report, indent=1))
        print(format_table(report))
        print(f"[{name}] wall {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or list(SETTINGS))
