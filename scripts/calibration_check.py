"""Check an ann index's certified recall on queries its calibration never saw.

Usage: python scripts/calibration_check.py INDEX_DIR DATASET [--seed S] [--n 300] [--train-fraction 0.7]

Draws two query sets against the exact top-10 of the index's own model and corpus (DATASET is the
labelled corpus the index was built from, e.g. news20): (a) ``n`` fresh corpus documents, balanced
over the labels, outside both calibration samples; (b) ``n`` documents of the held-out split that
``sparsesim train --seed S --train-fraction F`` kept out of training, balanced over the labels and
outside the calibration samples. Every query is removed from its own answer (the documents are in
the corpus). Prints JSON: the manifest's certified recall and bound next to the two measurements.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from sparsesim.data import load_dataset
from sparsesim.indexes import load_index
from sparsesim.indexes.calibration import measure_recall, stratified_split, summary
from sparsesim.triplets import stratified_split as train_test_split


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("index")
    parser.add_argument("dataset")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--train-fraction", type=float, default=0.7)
    args = parser.parse_args()
    index = load_index(args.index)
    data = load_dataset(args.dataset)
    y = np.asarray(data.y)
    cal = index.calibration_
    seed = cal["sample_seed"]
    certification = np.asarray(cal["rows"], dtype=np.int64)
    if cal["selection"].get("rows") is not None:
        selection = np.asarray(cal["selection"]["rows"], dtype=np.int64)
    else:  # a record without its selection rows: stratified by label, replayed from the seed
        selection, again = stratified_split(y, [cal["selection"]["n_queries"], cal["n_queries"]], seed)
        assert np.array_equal(again, certification), "the index was not calibrated on this labelled corpus"
    used = np.zeros(y.size, dtype=bool)
    used[selection] = used[certification] = True
    _, test = train_test_split(y, args.train_fraction, seed=args.seed)
    rng_seed = seed + 1
    out = {"strata": cal["strata"]["by"], "certified_recall": cal["recall"], "certified_lower_bound": cal["recall_lower_bound"],
           "met": cal["met"], "setting": cal["setting"], "target": cal["target_recall"]}
    for name, pool in (("fresh_corpus", np.flatnonzero(~used)), ("held_out_test_split", np.setdiff1d(test, np.flatnonzero(used)))):
        rows = pool[stratified_split(y[pool], [args.n], rng_seed)[0]]
        (per_query, _), = measure_recall(index, np.sort(rows), int(cal["top_k"]), [index.search_setting()])
        recall, lower = summary(per_query)
        out[name] = {"n": int(rows.size), "recall": recall, "lower_bound": lower,
                     "below_10_of_10": int(np.sum(per_query < 1)),
                     "min_label_recall": float(min(per_query[y[np.sort(rows)] == c].mean()
                                                   for c in np.unique(y[rows])))}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
