"""Measure: saved exact and ann indexes over a compact (ssi-dwuv) model (size, build, q/s, recall).

The model is an ``ssi-dwuv`` model file trained on the training split of the SORS protocol
(``sparsesim train -a ssi-dwuv -d DATASET --seed 0``: ``stratified_split(y, 0.7, seed=0)``,
10^5 triplets, defaults), or trained here with those settings when ``--model`` is not given.
Both index kinds index the whole corpus (default settings; the ann index calibrated for
recall@10 >= 0.95 on held-out corpus documents stratified by label, as ``index build`` does),
are saved, and are loaded memory-mapped as ``query --index`` loads them.

Per kind: bytes on disk (and per corpus stored entry), build seconds (embedding, postings, FAISS,
calibration; saving not counted), CPU seconds of ``--queries`` test documents used as held-out
queries (their own document left out, one thread) and the queries per CPU second; recall@10 of
the ann answers against the exact ones (ties counted). Times were measured on a shared machine
(load average recorded): do not read them as speed benchmarks.

Usage::

    SPARSESIM_DATA=/path/to/data python benchmarks/bench_compact_serving.py --dataset news20 \\
        [--model news20-compact.npz] [--queries 1000]
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
from sparsesim.indexes import build_index, index_bytes, load_index
from sparsesim.indexes.calibration import recall_counting_ties
from sparsesim.model_files import load_similarity_model
from sparsesim.registry import make_estimator
from sparsesim.triplets import stratified_split

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run(dataset: str, model_path, n_queries: int, workdir: pathlib.Path, nprobes=()) -> dict:
    data = load_dataset(dataset)
    X, y = data.X, data.y
    train, test = stratified_split(y, 0.7, seed=0)
    if model_path is None:
        model = make_estimator("ssi-dwuv", random_state=0).fit(X[train], y[train]).model_
    else:
        model = load_similarity_model(model_path)
    out = {"dataset": dataset, "model": None if model_path is None else str(model_path),
           "algorithm": model.metadata.get("algorithm"), "rank": model.rank, "nnz_w": int(model.W.nnz),
           "model_bytes": model.nbytes, "n_documents": int(X.shape[0]), "n_features": int(X.shape[1]),
           "corpus_nnz": int(X.nnz), "split_seed": model.metadata.get("split_seed"),
           "n_triplets_seen": model.metadata.get("n_triplets_seen")}
    rows = np.sort(np.random.default_rng(0).choice(test, size=min(n_queries, test.size), replace=False))
    answers = {}
    for kind in ("exact", "ann"):
        start = time.perf_counter()
        index = build_index(model, X, kind=kind, n_jobs=1, target_recall=None) if kind == "ann" else \
            build_index(model, X, kind=kind, n_jobs=1)
        if kind == "ann":  # as `index build --kind ann` on a labelled corpus: samples stratified by label
            index.target_recall = 0.95
            index.calibrate(strata=y)
        out[f"{kind}_build_seconds"] = time.perf_counter() - start
        index.save(workdir / kind)
        out[f"{kind}_index_bytes"] = index_bytes(workdir / kind)
        out[f"{kind}_bytes_per_corpus_entry"] = out[f"{kind}_index_bytes"] / X.nnz
        if kind == "ann":
            out["calibration"] = {k: index.calibration_[k] for k in ("setting", "recall", "recall_lower_bound", "met")}
        del index
        loaded = load_index(workdir / kind, mmap=True)
        loaded.query_similar_rows(rows[:5], top_k=10)  # kernels compiled and blocks checked before timing
        start = time.process_time()
        _, scores = loaded.query_similar_rows(rows, top_k=10, n_jobs=1)
        seconds = time.process_time() - start
        out[f"{kind}_query_cpu_seconds"] = seconds
        out[f"{kind}_queries_per_cpu_second"] = rows.size / seconds
        answers[kind] = scores
        if kind == "ann":  # other IVF lists visited (the calibrated pools kept): recall and speed
            for nprobe in nprobes:
                setting = {**loaded.search_setting(), "nprobe": int(nprobe)}
                start = time.process_time()
                _, other = loaded.query_similar_rows(rows, top_k=10, n_jobs=1, **setting)
                seconds = time.process_time() - start
                out.setdefault("ann_other_nprobe", {})[str(nprobe)] = {
                    "queries_per_cpu_second": rows.size / seconds,
                    "recall_at_10_vs_exact": float(np.mean(recall_counting_ties(other, answers["exact"])))}
        loaded.release()
    out["ann_recall_at_10_vs_exact"] = float(np.mean(recall_counting_ties(answers["ann"], answers["exact"])))
    out["n_queries"] = int(rows.size)
    out["load_average"] = os.getloadavg()
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="news20")
    parser.add_argument("--model", default=None, help="an ssi-dwuv model file (default: train one here)")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--out", default=None)
    parser.add_argument("--nprobe", default="", help="comma-separated IVF lists to visit besides the calibrated "
                                                       "setting (recall and queries/s of each)")
    args = parser.parse_args()
    out = pathlib.Path(args.out or ROOT / "benchmarks" / "out" / f"bench_indexes_compact_serving_{args.dataset}.json")
    with tempfile.TemporaryDirectory() as tmp:
        result = run(args.dataset, args.model, args.queries, pathlib.Path(tmp),
                     [int(v) for v in args.nprobe.split(",") if v.strip()])
    print(json.dumps(result), flush=True)
    out.write_text(json.dumps({"command": "python benchmarks/bench_compact_serving.py " + " ".join(sys.argv[1:]),
                               "results": [result]}, indent=2))


if __name__ == "__main__":
    main()
