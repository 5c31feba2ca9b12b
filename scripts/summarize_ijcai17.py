"""Summarise a runs/ijcai17/<setting>.json report: mean +- std over all (seed, fold) runs, the mean
per seed, paired per-run wins, the chosen parameters and the active/random sweep.

Usage: ``python scripts/summarize_ijcai17.py runs/ijcai17/isolet-tasks.json``
"""

import json
import sys

import numpy as np


def main(path):
    rep = json.load(open(path))
    res = [r for r in rep["results"] if r.get("stage", "cv") == "cv"]
    algs = list(dict.fromkeys(r["algorithm"] for r in res))
    seeds = sorted({r["seed"] for r in res})
    print(f"{rep['dataset']} ({rep.get('representation', '')}), {rep['n_triplets']} triplets, "
          f"{rep['n_folds']} folds x seeds {seeds}, wall {rep.get('wall_seconds', 0):.0f} s")
    print(f"{'algorithm':<14} {'AP@10 mean±std':>16} {'mAP@10 mean±std':>16}  per-seed AP@10 means      query  params")
    for a in algs:
        rs = [r for r in res if r["algorithm"] == a]
        ap = np.array([r["ap@10"] for r in rs])
        mp = np.array([r["map@10"] for r in rs])
        per_seed = [np.mean([r["ap@10"] for r in rs if r["seed"] == s]) for s in seeds]
        q = np.mean([r["query_ratio"] for r in rs])
        params = rep.get("chosen_params", {}).get(a, {})
        print(f"{a:<14} {ap.mean():.4f}±{ap.std():.4f}  {mp.mean():.4f}±{mp.std():.4f}  "
              + " ".join(f"{v:.4f}" for v in per_seed) + f"  {q:6.3f}  {params}")
    key = {(r["algorithm"], r["seed"], r["fold"]): r["ap@10"] for r in res}
    for a, b in (("omtrsl", "ostrsl"), ("ostrsl", "ogrsl"), ("omtrsl", "ogrsl"), ("omtrsl-active", "omtrsl-random")):
        if a in algs and b in algs:
            d = np.array([key[(a, s, f)] - key[(b, s, f)] for (x, s, f) in key if x == a and (b, s, f) in key])
            print(f"{a} - {b}: wins {int((d > 0).sum())}/{d.size}, mean diff {d.mean():+.4f}, "
                  f"range [{d.min():+.4f}, {d.max():+.4f}]")
    if "search" in rep:
        print("search (validation AP@10):")
        for r in rep["search"]["results"]:
            print(f"  {r['algorithm']:<7} " + ", ".join(f"{k}={v:g}" for k, v in sorted(r["params"].items())
                                                     if isinstance(v, (int, float))) + f"  {r['ap@10']:.4f}")
        print("  chosen:", rep["search"]["chosen"])
    for p in rep.get("active_sweep") or []:
        print(f"  delta {p['delta']:g}: query ratio {p['query_ratio']:.3f}, active {p['active_ap@10']:.4f} "
              f"random {p['random_ap@10']:.4f} (mAP@10 {p['active_map@10']:.4f} / {p['random_map@10']:.4f}), "
              f"active wins {sum(x > y for x, y in zip(p['active_ap@10_folds'], p['random_ap@10_folds']))}"
              f"/{len(p['active_ap@10_folds'])}")


if __name__ == "__main__":
    for path in sys.argv[1:]:
        main(path)
