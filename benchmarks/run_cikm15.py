"""Run the ``cikm15`` protocol on several data sets and print the Table-2-style tables.

The same thing ``sparsesim experiment --protocol cikm15 --dataset NAME --algorithms ... --json`` does for one
data set; this script loops over data sets, writes ``cikm15_<dataset>.json`` / ``.png`` into ``--out`` and
prints one summary of the paper's orderings at the end.

Usage::

    SPARSESIM_DATA=/path/to/data python benchmarks/run_cikm15.py letter pendigits satimage segment shuttle \
        --algorithms oasis,paas,pars,cws,cwas,cwrs,aroma --n-jobs 2
    python benchmarks/run_cikm15.py usps --algorithms oasis,paas,pars,cws-d,cwas-d,cwrs-d --search coordinate \
        --search-folds 1 --no-curve
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


from sparsesim.experiments import ExperimentConfig, run_experiment
from sparsesim.experiments.cikm15 import format_table
from sparsesim.persistence import atomic_write


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("datasets", nargs="+")
    parser.add_argument("--algorithms", default="oasis,paas,pars,cws,cwas,cwrs,aroma")
    parser.add_argument("--query-ratio", type=float, default=0.2)
    parser.add_argument("--search", default="grid", choices=["grid", "coordinate", "none"])
    parser.add_argument("--search-triplets", type=int, default=None)
    parser.add_argument("--search-folds", type=int, default=5,
                        help="folds of the tuning subset the search averages AP@10 over (1..5)")
    parser.add_argument("--params", default=None,
                        help="constructor overrides as JSON, e.g. '{\"cws\": {\"sigma_step\": \"updated\"}}'")
    parser.add_argument("--no-curve", action="store_true", help="sweep delta on fold 0 only")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "out"))
    args = parser.parse_args(argv)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = []
    for ds in args.datasets:
        options = {"query_ratio": args.query_ratio, "search": args.search, "curve": not args.no_curve}
        if args.search_triplets:
            options["search_triplets"] = args.search_triplets
        options["search_folds"] = args.search_folds
        cfg = ExperimentConfig(dataset=ds, algorithms=args.algorithms.split(","),
                               seeds=[int(s) for s in args.seeds.split(",")], n_jobs=args.n_jobs, out_dir=out,
                               options=options, params=json.loads(args.params) if args.params else {})
        t0 = time.time()
        report = run_experiment("cikm15", cfg)
        wall = time.time() - t0
        report["wall_seconds"] = wall
        print(format_table(report))
        print(f"wall {wall:.0f} s\n", flush=True)
        atomic_write(out / f"cikm15_{ds}.json", lambda f: f.write(json.dumps(report, indent=1, default=str)), mode="w")
        tab = report["table"]

        def ap(a):
            return tab[a]["ap@10"][0] if a in tab else None

        pairs = [("paas", "pars"), ("cwas", "cwrs"), ("cwas", "paas"), ("cwas-d", "cwrs-d"), ("cwas-d", "paas")]
        checks = {f"{a}>{b}": ap(a) > ap(b) for a, b in pairs if ap(a) is not None and ap(b) is not None}
        vs = {a: round(v["ap@10_fraction"], 3) for a, v in report.get("vs_passive", {}).items()}
        summary.append((ds, checks, vs, wall))
    print("orderings at the target ratio (AP@10, mean over folds) and active/passive AP@10 at 30% queries:")
    for ds, checks, vs, wall in summary:
        print(f"  {ds:<10} {checks}  {vs}  ({wall:.0f} s)")


if __name__ == "__main__":
    main()
