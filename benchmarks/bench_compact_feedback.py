"""Measure: the feedback loop (`serve --learn`'s learner) on a saved compact (ssi-dwuv) index.

An ``ssi-dwuv`` model file trained on the training split (``sparsesim train -a ssi-dwuv -d DATASET
--seed 0``: ``stratified_split(y, 0.7, seed=0)``) serves an exact index of the whole corpus,
opened memory-mapped as ``serve`` opens it. ``--feedback`` triplets (anchor, same-label,
other-label) drawn from the *training* documents' labels (seed 1, the SORS protocol) are submitted
to a :class:`~sparsesim.feedback.FeedbackLearner` in batches of ``--batch``; reported: seconds until
all are applied and published (triplets per second), the versions published, and MAP@10 / MAP of
``--queries`` test documents (each left out of its own answer, ranked among all corpus documents)
under the served model before and after, plus the same learner continued offline on the same
triplets (``start_from`` + ``partial_fit_triplets``) for comparison. Times were measured on a
shared machine (load average recorded): read them as rough.

Usage::

    SPARSESIM_DATA=/path/to/data python benchmarks/bench_compact_feedback.py --dataset news20 \\
        --model news20-compact.npz [--feedback 5000] [--queries 300]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile
import time

import numpy as np

from sparsesim.data import load_dataset
from sparsesim.feedback import FeedbackLearner
from sparsesim.indexes import build_index, open_index
from sparsesim.model_files import load_similarity_model
from sparsesim.registry import make_estimator
from sparsesim.triplets import sors_triplets, stratified_split

ROOT = pathlib.Path(__file__).resolve().parents[1]


def ranking_quality(score_rows, queries, y) -> tuple[float, float]:
    """(MAP@10, MAP) of each query row's ranking of the corpus (its own document left out)."""
    ap10, ap = [], []
    for q, scores in zip(queries, score_rows):
        scores = np.asarray(scores, np.float64).copy()
        scores[q] = -np.inf
        order = np.argsort(-scores, kind="stable")[:-1]
        rel = (y[order] == y[q]).astype(np.float64)
        hits = np.cumsum(rel)
        precision = hits / np.arange(1, rel.size + 1)
        ap.append(float((precision * rel).sum() / max(rel.sum(), 1)))
        top = rel[:10]
        ap10.append(float((precision[:10] * top).sum() / max(top.sum(), 1)))
    return float(np.mean(ap10)), float(np.mean(ap))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="news20")
    parser.add_argument("--model", required=True)
    parser.add_argument("--feedback", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    data = load_dataset(args.dataset)
    X, y = data.X, np.asarray(data.y)
    train, test = stratified_split(y, 0.7, seed=0)
    model = load_similarity_model(args.model)
    queries = np.sort(np.random.default_rng(0).choice(test, size=min(args.queries, test.size), replace=False))
    triplets = train[sors_triplets(y[train], args.feedback, seed=1)]
    out = {"dataset": args.dataset, "model": args.model, "n_documents": int(X.shape[0]), "n_feedback": args.feedback,
           "batch": args.batch, "n_queries": int(queries.size)}
    with tempfile.TemporaryDirectory() as tmp:
        build_index(model, X, kind="exact", n_jobs=1).save(pathlib.Path(tmp) / "idx")
        index = open_index(pathlib.Path(tmp) / "idx", mmap=True)
        with FeedbackLearner(index) as fl:
            Xs = fl.X  # the stored rows n(x)
            before = ranking_quality((Xs @ fl.model.dense_query(Xs[[q]]) for q in queries), queries, y)
            start = time.perf_counter()
            for lo in range(0, len(triplets), args.batch):
                fl.submit([{"query": int(a), "preferred": int(p), "other": int(o)}
                           for a, p, o in triplets[lo:lo + args.batch]])
            fl.flush(timeout=3600)
            seconds = time.perf_counter() - start
            info = fl.info()
            after = ranking_quality((Xs @ fl.model.dense_query(Xs[[q]]) for q in queries), queries, y)
            served = fl.model
        settings = {**model.metadata["params"], **model.metadata["resolved_params"]}  # what the server continues with
        offline = make_estimator("ssi-dwuv", **settings).start_from(model, Xs).partial_fit_triplets(Xs, triplets)
        off = ranking_quality((Xs @ offline.model_.dense_query(Xs[[q]]) for q in queries), queries, y)
    out.update({"apply_seconds": seconds, "triplets_per_second": args.feedback / seconds,
                "versions": info["version"], "updates_with_loss": info["updates_with_loss"],
                "map10_before": before[0], "map_before": before[1], "map10_after": after[0], "map_after": after[1],
                "map10_offline": off[0], "map_offline": off[1],
                "max_abs_diff_U_vs_offline": float(np.abs(served.U - offline.model_.U).max()),
                "model_bytes_before": model.nbytes, "model_bytes_after": served.nbytes,
                "load_average": os.getloadavg()})
    print(json.dumps(out), flush=True)
    path = pathlib.Path(args.out or ROOT / "benchmarks" / "out" / f"bench_feedback_compact_{args.dataset}.json")
    path.write_text(json.dumps({"command": "python benchmarks/bench_compact_feedback.py " + " ".join(sys.argv[1:]),
                                "results": [out]}, indent=2))


if __name__ == "__main__":
    main()
