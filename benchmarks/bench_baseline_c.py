"""Benchmark: the regularisation C of the classifier-embedding baselines, chosen on training data only.

For each corpus and seed, the SORS protocol's training split (``stratified_split(y, 0.7, seed)``)
is split again per class, 80/20 (seed + 1000; a class with one training document stays whole in
the 80%); each baseline is fitted on the 80% at every C and
scored by retrieval among the 20% (MAP and AP@10, same-label relevance). The test split is never
read. The defaults of ``logreg-proba``, ``logreg-scores`` and ``svm-scores`` are the C that does
best across the corpora here (docs/quality.md, "Baselines").

Run:  python benchmarks/bench_baseline_c.py [--datasets news20,reuters21578] [--seeds 0]
                                             [--json benchmarks/out/bench_baseline_c.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from sparsesim.data import load_dataset
from sparsesim.evaluation import evaluate_retrieval
from sparsesim.registry import make_estimator
from sparsesim.triplets import stratified_split

GRIDS = {"logreg-proba": [1.0, 10.0, 100.0], "logreg-scores": [1.0, 10.0, 100.0], "svm-scores": [0.1, 1.0, 10.0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="news20,reuters21578")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/out/bench_baseline_c.json"))
    args = parser.parse_args()
    rows = []
    for dataset in args.datasets.split(","):
        data = load_dataset(dataset)
        for seed in (int(s) for s in args.seeds.split(",")):
            train, _ = stratified_split(data.y, 0.7, seed=seed)
            # classes with a single training document stay in the fitting part (nothing to validate on)
            classes, counts = np.unique(data.y[train], return_counts=True)
            split = train[np.isin(data.y[train], classes[counts >= 2])]
            fit, val = stratified_split(data.y[split], 0.8, seed=seed + 1000)
            fit, val = np.sort(np.concatenate([split[fit], np.setdiff1d(train, split)])), split[val]
            for name, grid in GRIDS.items():
                for C in grid:
                    start = time.perf_counter()
                    est = make_estimator(name, C=C, random_state=seed).fit(data.X[fit], data.y[fit])
                    seconds = time.perf_counter() - start
                    scores = evaluate_retrieval(est.model_.scorer(data.X[val]), data.y[val])
                    row = {"dataset": dataset, "seed": seed, "algorithm": name, "C": C, "map": scores["map"],
                           "ap@10": scores["ap@10"], "fit_seconds": seconds, "n_fit": int(fit.size),
                           "n_validation": int(val.size)}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"command": "python benchmarks/bench_baseline_c.py --datasets "
                                     f"{args.datasets} --seeds {args.seeds}", "rows": rows}, indent=1))
    for name, grid in GRIDS.items():
        for C in grid:
            sel = [r for r in rows if r["algorithm"] == name and r["C"] == C]
            print(f"{name:14s} C={C:<6g} " + "  ".join(
                f"{r['dataset']}: MAP {100 * r['map']:.1f} AP@10 {100 * r['ap@10']:.1f}" for r in sel))


if __name__ == "__main__":
    main()
