"""Benchmark: a sharded ann index on a local Dask cluster of 2 workers against the single ann index.

Corpus: synthetic RCV1-like documents (``sparsesim.data.synthetic.rcv1_like``, d = 47,236, ~75
nonzeros per document) plus ``--queries`` held-out documents of the same recipe; model: OASIS,
``--triplets`` triplets on the first 10^4 documents. Measured (answers against the exact top-10 of
one ``ExactIndex`` over the whole corpus, ties counted):

* **single**: one ``AnnIndex`` calibrated for recall@10 >= 0.95 (its defaults); its setting S,
  certified recall, held-out recall, queries/s on one thread (best of 3 after a warm-up);
* **sharded at S**: ``ShardedIndex(kind="ann", n_shards=2)`` on ``distributed.LocalCluster``
  (2 worker processes x 1 thread), every shard at the setting S; its held-out recall and
  queries/s, and the two identities of docs/distributed.md checked on every query: the answer is
  bit for bit the merge of the two shards' AnnIndex built alone in this process at S, and it
  holds a document of the exact top-10 exactly when that document's shard returned it;
* **sharded, calibrated per shard**: the same with each shard calibrated on its own (target 0.95);
  held-out recall and queries/s;
* **one shard alone**: queries/s of one shard's index (half the corpus) on one thread, the per-shard
  rate of the plan in docs/distributed.md section 9.

Usage::

    python benchmarks/bench_distributed_ann.py --docs 100000 --out benchmarks/out/bench_distributed_ann_1e5.json

Queries/s depend on the machine and its load (recorded as ``loadavg``).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

import numpy as np
import scipy.sparse as sp

ROOT = pathlib.Path(__file__).resolve().parents[1]
K = 10


def best_rate(fn, n: int, repeats: int = 3) -> float:
    fn()
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return n / best


def merged(parts):
    rows = np.hstack([r for r, _ in parts])
    scores = np.hstack([s for _, s in parts])
    order = np.lexsort((rows, -scores), axis=1)[:, :K]
    return np.take_along_axis(rows, order, axis=1), np.take_along_axis(scores, order, axis=1)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--triplets", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--memory-limit", default="3GiB", help="memory limit of each worker")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "bench_distributed_ann.json"))
    args = parser.parse_args(argv)

    import distributed

    from sparsesim.data.synthetic import rcv1_like
    from sparsesim.indexes import AnnIndex, ExactIndex
    from sparsesim.indexes.calibration import recall_counting_ties
    from sparsesim.indexes.sharded import ShardedIndex
    from sparsesim.learners.bilinear import OASIS

    n, m = args.docs, args.queries
    out = {"benchmark": "bench_distributed_ann", "corpus": "synthetic rcv1_like (labelled synthetic)", "docs": n,
           "queries": m, "triplets": args.triplets, "argv": sys.argv[1:], "loadavg_start": os.getloadavg()}
    data = rcv1_like(n_documents=n + m, seed=args.seed)
    X, Q = sp.csr_matrix(data.X[:n]), sp.csr_matrix(data.X[n:])
    model = OASIS(n_triplets=args.triplets, random_state=args.seed).fit(X[:10_000], data.y[:10_000]).model_
    truth_rows, truth_scores = ExactIndex(model).fit(X).query(Q, top_k=K + 1)
    truth_rows, truth_scores = np.asarray(truth_rows), np.asarray(truth_scores)

    def recall(scores) -> float:
        return float(recall_counting_ties(scores, truth_scores[:, :K]).mean())

    t = time.perf_counter()
    single = AnnIndex(model).fit(X)
    setting = {key: single.search_setting()[key] for key in ("n_postings", "sparse_pool")}
    rows, scores = single.query(Q, top_k=K)
    out["single"] = {"build_seconds": time.perf_counter() - t, "setting": setting,
                     "certified_recall": single.calibration_["recall"],
                     "certified_lower_bound": single.calibration_["recall_lower_bound"],
                     "recall_heldout": recall(scores),
                     "qps_1": best_rate(lambda: single.query(Q, top_k=K, n_jobs=1), m)}
    del single
    fixed = dict(setting, target_recall=None)
    half = n // 2
    alone = [AnnIndex(model, **fixed).fit(X[lo:hi]) for lo, hi in ((0, half), (half, n))]
    parts = [(np.asarray(ix.query(Q, top_k=K)[0]) + lo, np.asarray(ix.query(Q, top_k=K)[1]))
             for ix, lo in zip(alone, (0, half))]
    out["one_shard_alone"] = {"documents": half,
                              "qps_1": best_rate(lambda: alone[0].query(Q, top_k=K, n_jobs=1), m)}
    del alone
    want_rows, want_scores = merged(parts)
    shard_rows = np.hstack([r for r, _ in parts])

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  memory_limit=args.memory_limit, dashboard_address=":0",
                                  host="127.0.0.1") as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        for name, params in (("sharded_at_single_setting", fixed), ("sharded_calibrated_per_shard", {})):
            t = time.perf_counter()
            sharded = ShardedIndex(model, kind="ann", n_shards=2, client=client, **params).fit(X)
            build = time.perf_counter() - t
            ids, scores = sharded.query(Q, top_k=K)
            ids = np.asarray(ids)
            record = {"build_seconds": build, "recall_heldout": recall(scores),
                      "workers": len(set(sharded.shard_workers_)),
                      "qps_2_workers": best_rate(lambda: sharded.query(Q, top_k=K), m)}
            if params is fixed:
                record["identical_to_shards_merged"] = int(np.sum(np.all(ids == want_rows, axis=1)
                                                                  & np.all(scores == want_scores, axis=1)))
                same, checked = 0, 0
                for q in range(m):
                    if truth_scores[q, K - 1] - truth_scores[q, K] < 1e-9:
                        continue  # a tie at the k-th place: either document is a correct answer
                    truth = set(truth_rows[q, :K].tolist())
                    checked += 1
                    same += truth & set(ids[q].tolist()) == truth & set(shard_rows[q].tolist())
                record["miss_identity_holds"] = same
                record["miss_identity_checked"] = checked
            out[name] = record
            sharded.release()
    out["loadavg_end"] = os.getloadavg()
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps(out, indent=2, default=float))
    print(json.dumps(out, indent=2, default=float))
    return out


if __name__ == "__main__":
    main()
