"""Re-run the ROMCO evaluation (10 shuffles, sensitivity) with the parameters a previous search
chose (read from its JSON report), plus the ablation ROMCO with lam1 = lam2 = 0 (same step sizes).

    SPARSESIM_DATA=../shared/data python scripts/romco_rerun.py runs/romco --out runs/romco-final
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's sparsesim first

from sparsesim.data.catalog import load_registered  # noqa: E402
from sparsesim.experiments import ExperimentConfig, run_experiment  # noqa: E402
from sparsesim.experiments.romco import DEFAULT_ALGORITHMS, format_table, run_stream  # noqa: E402
from sparsesim.parallel import run_parallel  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("search_dir")
    ap.add_argument("--out", default="runs/romco-final")
    ap.add_argument("--n-jobs", type=int, default=2)
    ap.add_argument("--datasets", nargs="*", default=["mhc1", "spam-task-a", "landmine"])
    args = ap.parse_args()
    for ds in args.datasets:
        prev = json.loads((Path(args.search_dir) / ds / f"romco_{ds}.json").read_text())
        params = {a: prev["search"][a]["best"] for a in prev["search"]}
        cfg = ExperimentConfig(dataset=ds, algorithms=list(DEFAULT_ALGORITHMS), params=params,
                               n_jobs=args.n_jobs, out_dir=Path(args.out) / ds,
                               options={"shuffles": 10, "sensitivity": True})
        report = run_experiment("romco", cfg)
        report["search_from"] = str(Path(args.search_dir) / ds)
        print(format_table(report))
        print("parameters (from the search):")
        for a, p in params.items():
            print(f"  {a:<11} {json.dumps(p, sort_keys=True)}")
        streams = load_registered(ds)
        for alg in ("romco-nucl", "romco-logd"):
            p = dict(params[alg], lam1=0.0, lam2=0.0)
            res = run_parallel(run_stream, [(streams, alg, p, s, 2) for s in range(10)], n_jobs=args.n_jobs)
            e = np.array([r["error_rate"] for r in res])
            fp = np.array([r["f1_pos"] for r in res])
            fn = np.array([r["f1_neg"] for r in res])
            print(f"ablation {alg} lam1=lam2=0 (eta1={p['eta1']}, eta2={p['eta2']}): error "
                  f"{100 * e.mean():.2f} ({100 * e.std():.2f})  F1 pos {100 * fp.mean():.2f}  F1 neg {100 * fn.mean():.2f}")
        print(f"plots: {report['plots']}", flush=True)
        print()


if __name__ == "__main__":
    main()
