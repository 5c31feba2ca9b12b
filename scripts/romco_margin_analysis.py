"""Where do ROMCO's gains come from? Split each run's online predictions into 'undecided'
(|margin| < 1e-8: the task's own weights have not seen the instance's features) and 'decided' ones.

    SPARSESIM_DATA=../shared/data python scripts/romco_margin_analysis.py runs/romco
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's sparsesim first

from sparsesim.data.catalog import load_registered  # noqa: E402
from sparsesim.parallel import run_parallel  # noqa: E402
from sparsesim.registry import make_estimator  # noqa: E402

TOL = 1e-8


def one(streams, alg, params, seed):
    s = streams.shuffled(seed)
    est = make_estimator(alg, **params).fit(s.X, s.y)
    p = np.concatenate(est.online_margins_)
    y = np.concatenate(s.y)
    und = np.abs(p) < TOL
    wrong = np.sign(p) != y
    return [float(wrong.mean()), float(und.mean()), float(wrong[und].mean()) if und.any() else float("nan"),
            float(wrong[~und].mean())]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("search_dir")
    ap.add_argument("--datasets", nargs="*", default=["mhc1", "spam-task-a", "landmine"])
    ap.add_argument("--n-jobs", type=int, default=2)
    args = ap.parse_args()
    for ds in args.datasets:
        prev = json.loads((Path(args.search_dir) / ds / f"romco_{ds}.json").read_text())
        best = {a: prev["search"][a]["best"] for a in prev["search"]}
        streams = load_registered(ds)
        runs = [("romco-nucl", best["romco-nucl"]), ("romco-logd", best["romco-logd"]),
                ("romco-nucl", dict(best["romco-nucl"], lam1=0.0, lam2=0.0)), ("pa-unique", {}), ("pa-global", {})]
        print(f"{ds}: pooled over all instances, mean of 10 shuffles")
        print(f"  {'algorithm':<40} {'error %':>8} {'undecided %':>12} {'err undecided %':>16} {'err decided %':>14}")
        for alg, params in runs:
            res = np.array(run_parallel(one, [(streams, alg, params, s) for s in range(10)], n_jobs=args.n_jobs))
            label = alg + (" lam1=lam2=0" if params.get("lam1") == 0.0 else "")
            m = np.nanmean(res, axis=0) * 100
            print(f"  {label:<40} {m[0]:8.2f} {m[1]:12.2f} {m[2]:16.1f} {m[3]:14.2f}")
        print(flush=True)


if __name__ == "__main__":
    main()
