"""How often the load-time check of the ann candidate stage (``indexes/recall_check.py``) refuses a
genuine index, and how often it catches crafted posting lists that lower recall by X.

Builds an ann index (synthetic RCV1-like corpus, OASIS model), then

* runs the check ``--honest`` times with fresh probes on the genuine index (refusals counted);
* for each share f in ``--shares``: removes the best entry of the lists of a random share f of
  the features (values stay exact and impact-ordered; only which documents are listed changes),
  measures the recall drop X on 400 held-out corpus queries against the genuine index, and runs
  the check ``--crafted`` times (a fresh probe each time), counting refusals; the module's bound
  says at least 1 - (1 - X)^32.

    python benchmarks/bench_recall_check.py --out benchmarks/out/bench_recall_check.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from sparsesim.data.synthetic import rcv1_like
from sparsesim.exceptions import FileFormatError
from sparsesim.indexes import build_index
from sparsesim.indexes.calibration import measure_recall
from sparsesim.indexes.recall_check import LIST_PROBES, check_candidate_stage
from sparsesim.learners.bilinear import OASIS


def refusals(index, runs: int, seed0: int) -> int:
    count = 0
    for r in range(runs):
        try:
            check_candidate_stage(index, np.random.default_rng(seed0 + r))
        except FileFormatError:
            count += 1
    return count


def without_best_entry(P: sp.csr_matrix, features: np.ndarray) -> sp.csr_matrix:
    """``P`` with the first (largest) entry of the lists of ``features`` removed."""
    drop = P.indptr[features][np.diff(P.indptr)[features] > 0]
    keep = np.ones(P.nnz, dtype=bool)
    keep[drop] = False
    counts = np.diff(P.indptr)
    counts[features] = np.maximum(counts[features] - 1, 0)
    indptr = np.zeros_like(P.indptr)
    np.cumsum(counts, out=indptr[1:])
    return sp.csr_matrix((P.data[keep], P.indices[keep], indptr), shape=P.shape)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=3000)
    parser.add_argument("--honest", type=int, default=200)
    parser.add_argument("--crafted", type=int, default=50)
    parser.add_argument("--shares", default="0.002,0.005,0.01,0.02,0.05")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    data = rcv1_like(args.documents, n_features=5000, nnz_per_doc=40, n_classes=10, class_vocab=400, seed=args.seed)
    model = OASIS(n_triplets=3000, random_state=args.seed).fit(data.X, data.y).model_
    index = build_index(model, data.X, kind="ann", heavy_min_nnz=20)
    record = index.calibration_
    rows = np.sort(np.random.default_rng(args.seed + 1).choice(index.n_documents, 400, replace=False))
    setting = index.search_setting()
    (honest_recall, _), = measure_recall(index, rows, 10, [setting])
    start = time.perf_counter()
    honest = refusals(index, args.honest, 10_000)
    out = {"documents": args.documents, "record": {k: record[k] for k in ("recall", "n_queries", "setting")},
           "honest_recall": float(honest_recall.mean()), "honest_checks": args.honest, "honest_refused": honest,
           "seconds_per_check": (time.perf_counter() - start) / args.honest, "list_probes": LIST_PROBES,
           "crafted": []}
    print(json.dumps({k: v for k, v in out.items() if k != "crafted"}), flush=True)
    genuine = index.postings_
    rng = np.random.default_rng(args.seed + 2)
    for share in (float(s) for s in args.shares.split(",")):
        features = np.sort(rng.choice(index.n_features, size=max(1, int(share * index.n_features)), replace=False))
        index.postings_ = without_best_entry(genuine, features)
        (crafted_recall, _), = measure_recall(index, rows, 10, [setting])
        drop = float(honest_recall.mean() - crafted_recall.mean())
        affected = float(np.mean(crafted_recall != honest_recall))
        caught = refusals(index, args.crafted, 20_000)
        row = {"share_of_lists": share, "recall": float(crafted_recall.mean()), "recall_drop": drop,
               "queries_affected": affected, "checks": args.crafted, "refused": caught,
               "bound_from_drop": 1 - (1 - max(drop, 0.0)) ** LIST_PROBES}
        out["crafted"].append(row)
        print(json.dumps(row), flush=True)
    index.postings_ = genuine
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
