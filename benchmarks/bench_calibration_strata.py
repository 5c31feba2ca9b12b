"""Certified recall against the recall users get: an ann index calibrated on label-stratified corpus
samples, then measured on fresh stratified corpus queries and on uniformly drawn held-out queries.

    SPARSESIM_DATA=/work/shared/data python benchmarks/bench_calibration_strata.py reuters21578 ssi-dwuv
    SPARSESIM_DATA=/work/shared/data python benchmarks/bench_calibration_strata.py reuters21578 oasis balanced-only

``balanced-only`` reproduces the former rule (the balanced sample's bound alone qualifies and
certifies a setting) by making the corpus-weighted estimate equal to the balanced one.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from sparsesim.data import load_dataset
from sparsesim.registry import make_estimator
from sparsesim.indexes import build_index
from sparsesim.indexes.calibration import exact_top_k, recall_counting_ties
from sparsesim.indexes.base import drop_own_rows
from sparsesim.indexes.calibration_samples import stratified_split as balanced_split
from sparsesim.triplets import stratified_split


def recall_on_rows(index, rows, k=10):
    Qp = index.stored_queries(rows)
    t_rows, t_scores = exact_top_k(index, Qp, k + 1)
    _, truth = drop_own_rows(t_rows, t_scores, rows, k)
    _, found = index.query_similar_rows(rows, top_k=k, n_jobs=1)
    return recall_counting_ties(found, truth)


def main(dataset, algorithm, rule="both", n_queries=300):
    if rule == "balanced-only":
        from sparsesim.indexes import calibration

        calibration.corpus_weighted_summary = lambda per_query, rows, strata, z: calibration.summary(per_query)
    data = load_dataset(dataset)
    X, y = data.X, data.y
    train, test = stratified_split(y, 0.7, seed=0)
    params = {"n_triplets": 20000} if algorithm == "oasis" else {}
    model = make_estimator(algorithm, random_state=0, **params).fit(X[train], y[train]).model_
    index = build_index(model, X, kind="ann", n_jobs=1, target_recall=None)
    index.target_recall = 0.95
    start = time.perf_counter()
    cal = index.calibrate(strata=y)
    seconds = time.perf_counter() - start
    cal_rows = set(cal["rows"]) | set(cal["selection"]["rows"])
    fresh_pool = np.setdiff1d(np.arange(X.shape[0]), np.fromiter(cal_rows, dtype=np.int64))
    fresh = fresh_pool[balanced_split(y[fresh_pool], [n_queries], seed=7)[0]]
    held = np.sort(np.random.default_rng(0).choice(test, size=n_queries,
                                                   replace=False))
    r_fresh, r_held = recall_on_rows(index, fresh), recall_on_rows(index, held)
    big = int(np.bincount(y).argmax())
    out = {"dataset": dataset, "algorithm": algorithm, "rule": rule, "index_kind": index.kind, "setting": cal["setting"],
           "met": cal["met"], "certified_recall": cal["recall"], "certified_lower": cal["recall_lower_bound"],
           "corpus_weighted": cal.get("corpus_weighted"), "n_settings": cal["n_settings"],
           "calibration_seconds": seconds, "fresh_stratified_recall": float(r_fresh.mean()),
           "held_out_uniform_recall": float(r_held.mean()),
           "held_out_largest_class_recall": float(r_held[y[held] == big].mean()),
           "largest_class_share": float(np.mean(y == big))}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:4])
