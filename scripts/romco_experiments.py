"""Run the ROMCO protocol (search + 10 shuffles + sensitivity) on the given data sets.

    SPARSESIM_DATA=../shared/data python scripts/romco_experiments.py spam-task-a mhc1 landmine \
        --out runs/romco --n-jobs 2

Equivalent CLI (once wired): ``sparsesim experiment --protocol romco --dataset mhc1 --algorithms
romco-nucl,romco-logd,pa-global,pa-unique,omtl,omtllog,omtlvon --seeds 0-9 --option search=true
--option sensitivity=true --n-jobs 2 --out runs/romco --json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's sparsesim first

from sparsesim.experiments import ExperimentConfig, run_experiment  # noqa: E402
from sparsesim.experiments.romco import DEFAULT_ALGORITHMS, format_table  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("datasets", nargs="+")
    ap.add_argument("--out", default="runs/romco")
    ap.add_argument("--n-jobs", type=int, default=2)
    ap.add_argument("--shuffles", type=int, default=10)
    ap.add_argument("--no-search", action="store_true")
    ap.add_argument("--no-sensitivity", action="store_true")
    ap.add_argument("--dataset-option", action="append", default=[], help="key=value for the loader")
    args = ap.parse_args()
    dopts = {}
    for kv in args.dataset_option:
        k, v = kv.split("=", 1)
        dopts[k] = {"true": True, "false": False}.get(v.lower(), v)
    for ds in args.datasets:
        t0 = time.time()
        cfg = ExperimentConfig(
            dataset=ds, algorithms=list(DEFAULT_ALGORITHMS), n_jobs=args.n_jobs,
            out_dir=Path(args.out) / (ds + ("-" + "-".join(f"{k}" for k in dopts) if dopts else "")),
            options={"shuffles": args.shuffles, "search": not args.no_search,
                     "sensitivity": not args.no_sensitivity, "dataset_options": dopts},
        )
        report = run_experiment("romco", cfg)
        print(format_table(report))
        print(f"[{ds}] search {report['seconds']['search']:.0f} s, evaluation "
              f"{report['seconds']['evaluation']:.0f} s, total {time.time() - t0:.0f} s; plots: {report['plots']}")
        print(flush=True)


if __name__ == "__main__":
    main()
