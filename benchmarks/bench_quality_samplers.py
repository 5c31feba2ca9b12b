"""Choosing the triplet sampler of OASIS / SORS / AdaSORS on the training split only.

``stratified_split(y, 0.7, seed)`` gives the training part; it is split again
(``stratified_split(y_train, 0.7, seed)``) into a fitting part and a validation part. Each
configuration is fitted on the fitting part and scored by MAP / AP@10 of validation documents
querying validation documents. The test part is never read. Writes
benchmarks/out/bench_quality_samplers_<dataset>.json (one row per learner and configuration).

    SPARSESIM_DATA=/work/shared/data python benchmarks/bench_quality_samplers.py --dataset news20
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc
from pathlib import Path

import numpy as np

from sparsesim.data import load_dataset
from sparsesim.evaluation import evaluate_retrieval
from sparsesim.model_files import model_nbytes
from sparsesim.registry import make_estimator
from sparsesim.triplets import stratified_split, usable_rows

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {
    "uniform": {},
    "semihard": {"sampler": "semihard"},
    "hard": {"sampler": "hard"},
    "distance-weighted": {"sampler": "distance-weighted"},
    "uniform, 2 passes": {"n_passes": 2},
    "semihard, 2 passes": {"sampler": "semihard", "n_passes": 2},
    "uniform, averaging": {"averaging": True},
    "semihard, averaging": {"sampler": "semihard", "averaging": True},
}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="news20")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-triplets", type=int, default=10_000)
    ap.add_argument("--learners", nargs="+", default=["sors-l1", "oasis", "adasors-l1"])
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS))
    args = ap.parse_args(argv)
    data = load_dataset(args.dataset)
    X, y = data.X.tocsr(), np.asarray(data.y)
    tr, _ = stratified_split(y, 0.7, args.seed)
    Xtr, ytr = X[tr], y[tr]
    usable = usable_rows(ytr, warn=False)  # classes with one training document cannot be split
    usable = np.arange(ytr.size) if usable is None else usable
    fit_idx, val_idx = (usable[part] for part in stratified_split(ytr[usable], 0.7, args.seed))
    out = ROOT / "benchmarks" / "out" / f"bench_quality_samplers_{args.dataset}.json"
    rows = json.loads(out.read_text())["rows"] if out.exists() else []
    # rows measured before the model-size bound existed say max_model_bytes: null (no bound)
    done = {(r["learner"], r["config"], r["n_triplets"]) for r in rows if r.get("max_model_bytes")}
    for learner in args.learners:
        for name in args.configs:
            if (learner, name, args.n_triplets) in done:
                continue
            est = make_estimator(learner, n_triplets=args.n_triplets, random_state=args.seed, max_memory="3GiB",
                                 **CONFIGS[name])
            tracemalloc.start()
            t0 = time.perf_counter()
            est.fit(Xtr[fit_idx], ytr[fit_idx])
            seconds = time.perf_counter() - t0
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            model = est.model_
            r = evaluate_retrieval(model.scorer(Xtr[val_idx]), ytr[val_idx])
            rows.append({"learner": learner, "config": name, "params": CONFIGS[name], "n_triplets": args.n_triplets,
                         "validation_map": 100 * r["map"], "validation_ap@10": 100 * r["ap@10"],
                         "n_updates": int(est.n_updates_), "n_triplets_seen": int(est.n_triplets_seen_),
                         "fit_seconds": seconds, "traced_peak_bytes": int(peak), "model_entries": int(model.W.nnz),
                         "model_bytes": int(model_nbytes(model)),
                         "max_model_bytes": est.resolved_params_["max_model_bytes"]})
            print(rows[-1], flush=True)
            del est, model
            out.parent.mkdir(exist_ok=True)
            out.write_text(json.dumps({"dataset": args.dataset, "seed": args.seed, "protocol":
                                       "fit on 70% of the 70% training split, MAP of the other 30% among themselves",
                                       "machine": "2 cores shared with other jobs (times under load)",
                                       "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
