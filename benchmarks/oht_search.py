"""Parameter search for the OHT protocol (on a split seed kept apart from the reported run).

Stage 1 tunes the target learner (C, sigma) by the PA-II baseline's own mean mistake rate;
stage 2 keeps that learner and tunes K with eta (OHT1) and alpha (OHT2) by the OHT variants'
mean mistake rates. Fewer permutations than the final run. Prints tables and writes
``benchmarks/out/oht_search_<dataset>.json``.

    SPARSESIM_DATA=../shared/data python benchmarks/oht_search.py wikipedia-xmodal --seed 1 --perms 10
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from sparsesim.experiments import ExperimentConfig
from sparsesim.experiments import oht


def mean_rates(dataset, algorithms, params, seed, perms, n_jobs, extra=None):
    cfg = ExperimentConfig(dataset=dataset, algorithms=algorithms, params=params, seeds=[seed], n_jobs=n_jobs,
                           options={"n_permutations": perms, "curve_tasks": [], **(extra or {})})
    rep = oht.run(cfg)
    return {r["algorithm"]: r["mistake_rate"] for r in rep["results"]}, rep


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--perms", type=int, default=10)
    ap.add_argument("--n-jobs", type=int, default=2)
    ap.add_argument("--C", default="0.5,1,5,20")
    ap.add_argument("--sigma", default="2,4,8,16")
    ap.add_argument("--K", default="10,25,50,100,200")
    ap.add_argument("--eta", default="0.5,1,2,4")
    ap.add_argument("--alpha", default="0.5,0.7,0.9,paper")
    ap.add_argument("--pair-classes", default="task")
    args = ap.parse_args()
    floats = lambda s: [float(v) for v in s.split(",")]  # noqa: E731
    extra = {"pair_classes": args.pair_classes}
    t0 = time.perf_counter()
    log = {"dataset": args.dataset, "seed": args.seed, "perms": args.perms, "stage1": [], "stage2": []}

    print(f"stage 1: PA-II target learner on {args.dataset} (split seed {args.seed}, {args.perms} permutations)")
    print(f"{'C':>6}{'sigma':>7}{'pa2 mistake rate':>18}")
    best = None
    for C in floats(args.C):
        for sigma in floats(args.sigma):
            rates, _ = mean_rates(args.dataset, ["pa2"], {"*": {"C": C, "sigma": sigma}}, args.seed, args.perms,
                                  args.n_jobs, extra)
            log["stage1"].append({"C": C, "sigma": sigma, "pa2": rates["pa2"]})
            print(f"{C:>6g}{sigma:>7g}{rates['pa2']:>18.4f}")
            if best is None or rates["pa2"] < best[2]:
                best = (C, sigma, rates["pa2"])
    C, sigma, _ = best
    print(f"-> C = {C:g}, sigma = {sigma:g}")

    print(f"stage 2: K, eta (OHT1), alpha (OHT2) with C = {C:g}, sigma = {sigma:g}")
    print(f"{'K':>5}{'eta/alpha':>11}{'oht1-pa2':>10}{'oht2-pa2':>10}{'pa2':>8}{'w/t/l 1':>10}{'w/t/l 2':>10}")
    etas = floats(args.eta)
    alphas = [None if a == "paper" else float(a) for a in args.alpha.split(",")]
    best1 = best2 = None
    for K in [int(k) for k in args.K.split(",")]:
        for eta, alpha in zip(etas, alphas):
            params = {"*": {"C": C, "sigma": sigma, "n_neighbors": K},
                      "oht1-pa2": {"eta": eta}, "oht2-pa2": {"alpha": alpha}}
            rates, rep = mean_rates(args.dataset, ["pa2", "oht1-pa2", "oht2-pa2"], params, args.seed, args.perms,
                                    args.n_jobs, extra)
            wtl = rep["win_tie_loss"]
            fmt = lambda c: f"{c['win']}/{c['tie']}/{c['loss']}"  # noqa: E731
            log["stage2"].append({"K": K, "eta": eta, "alpha": alpha, **rates, "wtl": wtl})
            print(f"{K:>5}{eta:>5g}/{'paper' if alpha is None else alpha:<5}{rates['oht1-pa2']:>10.4f}"
                  f"{rates['oht2-pa2']:>10.4f}{rates['pa2']:>8.4f}{fmt(wtl['oht1-pa2']):>10}{fmt(wtl['oht2-pa2']):>10}")
            if best1 is None or rates["oht1-pa2"] < best1[2]:
                best1 = (K, eta, rates["oht1-pa2"])
            if best2 is None or rates["oht2-pa2"] < best2[2]:
                best2 = (K, alpha, rates["oht2-pa2"])
    log["best"] = {"C": C, "sigma": sigma, "oht1": {"K": best1[0], "eta": best1[1]},
                   "oht2": {"K": best2[0], "alpha": best2[1]}}
    log["seconds"] = time.perf_counter() - t0
    print(f"-> OHT1: K = {best1[0]}, eta = {best1[1]:g};  OHT2: K = {best2[0]}, alpha = {best2[1]};  "
          f"{log['seconds']:.0f} s")
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    (out / f"oht_search_{args.dataset}.json").write_text(json.dumps(log, indent=1))


if __name__ == "__main__":
    main()
