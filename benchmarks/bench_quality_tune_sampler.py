"""Does ``tune`` gain from searching the triplet sampler? One search with and one without it.

``stratified_split(y, 0.7, seed)`` gives the training and test parts. :func:`sparsesim.tuning.tune_similarity`
runs on the training part only (its own validation split, successive halving), once over the
learner's default grid and once over the same grid with the ``sampler`` dimension removed (or
added, when the default grid lacks it); each final model, trained on the whole training part with
the chosen parameters, is scored by MAP / AP@10 of test documents querying test documents.
Writes benchmarks/out/bench_quality_tune_sampler_<dataset>.json (one row per learner, split seed and grid;
rows already there are kept, so runs add to each other).

    SPARSESIM_DATA=/work/shared/data python benchmarks/bench_quality_tune_sampler.py \\
        --dataset news20-sample --learners oasis sors-l1 --n-triplets 3000 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import numpy as np

from sparsesim.data import load_dataset
from sparsesim.evaluation import evaluate_retrieval
from sparsesim.model_files import model_nbytes
from sparsesim.triplets import stratified_split
from sparsesim.tuning import tune_similarity

ROOT = Path(__file__).resolve().parents[1]
SAMPLERS = ["uniform", "semihard"]


def _run(learner, X, y, tr, te, n, seed, grid, label, max_memory):
    t0, c0 = time.perf_counter(), time.process_time()
    res = tune_similarity(learner, X[tr], y[tr], n, grid=grid, seed=seed, params={"max_memory": max_memory})
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    model = res.estimator.model_
    r = evaluate_retrieval(model.scorer(X[te]), y[te])
    return res, {"learner": learner, "seed": seed, "grid": label, "n_triplets": n,
                 "n_candidates": len(res.trials), "best_params": res.best_params,
                 "validation_map": 100 * res.best_score, "test_map": 100 * r["map"], "test_ap@10": 100 * r["ap@10"],
                 "search_seconds": res.search_seconds, "final_seconds": res.final_seconds, "seconds": seconds,
                 "cpu_seconds": cpu,
                 "model_bytes": int(model_nbytes(model)),
                 "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="news20-sample")
    ap.add_argument("--learners", nargs="+", default=["oasis", "sors-l1"])
    ap.add_argument("--n-triplets", type=int, default=3000)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--max-memory", default="2GiB", help="memory budget of the trials and the final model")
    args = ap.parse_args(argv)
    data = load_dataset(args.dataset)
    X, y = data.X.tocsr(), np.asarray(data.y)
    out = ROOT / "benchmarks" / "out" / f"bench_quality_tune_sampler_{args.dataset}.json"
    old = json.loads(out.read_text()).get("rows", []) if out.exists() else []
    done = {(r["learner"], r["seed"], r["n_triplets"]) for r in old if r["grid"] != "default"}
    for seed in args.seeds:
        tr, te = stratified_split(y, 0.7, seed)
        for learner in args.learners:
            if (learner, seed, args.n_triplets) in done:  # both grids measured: kept
                continue
            res, row = _run(learner, X, y, tr, te, args.n_triplets, seed, None, "default", args.max_memory)
            _write(out, args, row)
            grid = dict(res.info["grid"])
            if "sampler" in grid:
                grid.pop("sampler")
                label = "default without sampler"
            else:
                grid["sampler"] = list(SAMPLERS)
                label = "default with sampler"
            _write(out, args, _run(learner, X, y, tr, te, args.n_triplets, seed, grid, label, args.max_memory)[1])


def _write(out, args, row):
    print(row, flush=True)
    old = json.loads(out.read_text()) if out.exists() else {}
    key = lambda r: (r["learner"], r["seed"], r["grid"], r["n_triplets"])  # noqa: E731
    rows = [r for r in old.get("rows", []) if key(r) != key(row)] + [row]
    out.parent.mkdir(exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"dataset": args.dataset, "split": "stratified_split(y, 0.7, seed)",
                               "machine": "2 cores shared with other jobs (times under load)",
                               "rows": sorted(rows, key=key)}, indent=1, default=str))
    tmp.replace(out)


if __name__ == "__main__":
    main()
