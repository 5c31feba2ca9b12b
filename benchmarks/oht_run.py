"""Run the ``oht`` protocol as ``sparsesim experiment --protocol oht`` will (until the CLI is wired).

    SPARSESIM_DATA=../shared/data python benchmarks/oht_run.py wikipedia-xmodal pa2,oht1-pa2,oht2-pa2 \
        --params '{"*": {"C": 5, "sigma": 4}}' --options '{"n_permutations": 100}' --out benchmarks/out/x.json

Prints the table of :func:`sparsesim.experiments.oht.format_table`; ``--out`` saves the JSON report
(plots go to the ``--plots`` directory).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from sparsesim.experiments import ExperimentConfig
from sparsesim.experiments import oht


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("algorithms")
    ap.add_argument("--params", default="{}")
    ap.add_argument("--options", default="{}")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-jobs", type=int, default=2)
    ap.add_argument("--out")
    ap.add_argument("--plots")
    args = ap.parse_args()
    cfg = ExperimentConfig(dataset=args.dataset, algorithms=args.algorithms.split(","),
                           params=json.loads(args.params), options=json.loads(args.options),
                           seeds=[args.seed], n_jobs=args.n_jobs,
                           out_dir=Path(args.plots) if args.plots else None)
    t0 = time.perf_counter()
    report = oht.run(cfg)
    print(oht.format_table(report))
    print(f"wall {time.perf_counter() - t0:.1f} s")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
