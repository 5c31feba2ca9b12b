"""Measure: exact and ann indexes over an EmbeddingSimilarity on news20 (size, build, recall).

Models (``--models``), fitted on the training split of the SORS protocol
(``stratified_split(y, 0.7, seed=0)``) and indexing the whole corpus:

* ``logreg``: logistic-regression class probabilities (C=10) as the embedding, L2-normalised
  (r = 20), no identity part;
* ``logreg+cos``: the same plus 0.3 x cosine (the sparse corpus is then stored and scored too);
* ``lsa``: a 300-dimensional truncated SVD, normalised embeddings.

Per model: index bytes on disk (exact and ann, default settings: calibrated for recall@10 >=
0.95), build seconds, the calibration record, and recall@10 of the ann index against the exact
index (ties counted) on ``--queries`` test documents used as held-out queries (their own
document removed from both answers), plus the index bytes per corpus stored entry. Times were
measured on a shared machine (load average recorded); do not read them as speed benchmarks.

Usage::

    SPARSESIM_DATA=/path/to/data python benchmarks/bench_embedding_index.py --models logreg,logreg+cos,lsa
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import tempfile
import time

import numpy as np
from sklearn.decomposition import TruncatedSVD
from sklearn.linear_model import LogisticRegression

from sparsesim.data import load_dataset
from sparsesim.embedding import EmbeddingSimilarity
from sparsesim.indexes import build_index, load_index
from sparsesim.indexes.calibration import recall_counting_ties
from sparsesim.triplets import stratified_split

ROOT = pathlib.Path(__file__).resolve().parents[1]


def make_model(name: str, X, y, train) -> EmbeddingSimilarity:
    if name.startswith("logreg"):
        clf = LogisticRegression(C=10, max_iter=1000).fit(X[train], y[train])
        return EmbeddingSimilarity(clf.coef_.T, bias=clf.intercept_, activation="softmax", normalize_embedding=True,
                                   identity_weight=0.3 if name.endswith("+cos") else 0.0,
                                   normalize=name.endswith("+cos"), metadata={"algorithm": name})
    if name == "lsa":
        svd = TruncatedSVD(300, random_state=0).fit(X[train])
        return EmbeddingSimilarity(svd.components_.T, normalize=True, normalize_embedding=True,
                                   metadata={"algorithm": name})
    raise SystemExit(f"unknown model {name!r}")


def dir_bytes(path: pathlib.Path) -> int:
    manifest = json.loads((path / "manifest.json").read_text())
    return int(sum(f["bytes"] for f in manifest["files"].values()))


def run(name: str, data, n_queries: int, workdir: pathlib.Path) -> dict:
    X, y = data.X, data.y
    train, test = stratified_split(y, 0.7, seed=0)
    start = time.perf_counter()
    model = make_model(name, X, y, train)
    out = {"model": name, "n_components": model.n_components, "identity_weight": model.identity_weight,
           "model_bytes": model.nbytes, "fit_seconds": time.perf_counter() - start,
           "n_documents": int(X.shape[0]), "corpus_nnz": int(X.nnz)}
    rows = np.sort(np.random.default_rng(0).choice(test, size=min(n_queries, test.size), replace=False))
    answers = {}
    for kind in ("exact", "ann"):
        start = time.perf_counter()
        index = build_index(model, X, kind=kind, n_jobs=1)
        out[f"{kind}_build_seconds"] = time.perf_counter() - start
        index.save(workdir / f"{name}-{kind}")
        out[f"{kind}_index_bytes"] = dir_bytes(workdir / f"{name}-{kind}")
        if kind == "ann":
            out["calibration"] = {k: index.calibration_[k] for k in ("setting", "recall", "recall_lower_bound", "met")}
        loaded = load_index(workdir / f"{name}-{kind}", mmap=True)
        start = time.process_time()
        found, scores = loaded.query_similar_rows(rows, top_k=10)
        out[f"{kind}_query_cpu_seconds"] = time.process_time() - start
        answers[kind] = scores
    out["ann_recall_at_10_heldout"] = float(np.mean(recall_counting_ties(answers["ann"], answers["exact"])))
    out["n_queries"] = int(rows.size)
    out["load_average"] = os.getloadavg()
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="logreg,logreg+cos,lsa")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "bench_embedding_index.json"))
    args = parser.parse_args()
    data = load_dataset("news20")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            results.append(run(name, data, args.queries, pathlib.Path(tmp)))
            print(json.dumps(results[-1]), flush=True)
    pathlib.Path(args.out).write_text(json.dumps({"command": "python benchmarks/bench_embedding_index.py --models "
                                                  + args.models, "results": results}, indent=2))


if __name__ == "__main__":
    main()
