"""The exact index's two strategies side by side: what precomputing Y = X M^T costs and buys.

For each case (corpus, model) the exact index is built with ``strategy="query"`` (the corpus
and the model stored as they are; each block of queries expanded to Q M, then multiplied with
the corpus) and with ``strategy="corpus"`` (Y = X M^T precomputed and stored as posting lists)
when Y's estimate is under ``--max-y`` bytes. Reported per strategy: build seconds, bytes
on disk (the saved index directory) against the corpus + model (CSR, 12 bytes per entry), and
queries/s over ``--queries`` corpus documents (one thread, one call with every query, best of
``--repeats`` after a warm-up call), plus what ``"auto"`` chooses. Cases ``CORPUS:MODEL:TRIPLETS``:
corpus ``news20``, ``reuters21578``, ``news20-sample``, ``news20-3`` (news20's first three
classes, about the size of the own-data walkthrough's corpus, docs/guide/own-data.md) or a synthetic
size (``1e5``); model ``oasis``, ``sors`` (SORS-I, L1) or ``cosine`` (M = I, no training).

    SPARSESIM_DATA=... python benchmarks/bench_exact_strategy.py --cases news20-3:oasis:1000,reuters21578:sors:20000

Writes ``benchmarks/out/bench_exact_strategy.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]


def dir_bytes(path: pathlib.Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def load(corpus: str, n_queries: int, seed: int):
    """(X, y, query rows) of a case's corpus."""
    import bench_indexes as B
    from sparsesim.data import load_dataset

    if corpus == "news20-3":
        data = load_dataset("news20")
        rows = np.flatnonzero(np.isin(np.asarray(data.y), np.unique(data.y)[:3]))
        X, y = data.X[rows], np.asarray(data.y)[rows]
    elif corpus == "news20-sample":
        data = load_dataset(corpus)
        X, y = data.X, np.asarray(data.y)
    else:
        X, y, _, _, _ = B.load_corpus(corpus, n_queries, seed)
    rng = np.random.default_rng([seed, 1])
    return X, y, np.sort(rng.choice(X.shape[0], size=min(n_queries, X.shape[0]), replace=False))


def model_of(corpus, algorithm, triplets, X, y, seed, cache):
    import bench_indexes as B
    from sparsesim.models import BilinearSimilarity
    import scipy.sparse as sp

    if algorithm == "cosine":
        return BilinearSimilarity(sp.csr_matrix((X.shape[1], X.shape[1])), identity=True, normalize=True)
    return B.get_model(corpus, algorithm, X, y, triplets, seed, cache)[0]


def timed_queries(index, Q, repeats):
    index.query_rows(Q, top_k=10, n_jobs=1)
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        index.query_rows(Q, top_k=10, n_jobs=1)
        best = min(best, time.perf_counter() - start)
    return Q.shape[0] / best


def run_case(case, args, tmp):
    from sparsesim.indexes import build_index
    from sparsesim.indexes.base import prepare_rows
    from sparsesim.indexes.exact import ExactIndex

    corpus, algorithm, triplets = case.split(":")
    X, y, qrows = load(corpus, args.queries, args.seed)
    model = model_of(corpus, algorithm, int(triplets), X, y, args.seed, pathlib.Path(args.model_cache))
    W = model.W
    corpus_model = 12 * X.nnz + 8 * (X.shape[0] + 1) + 12 * W.nnz + 8 * (W.shape[0] + 1)
    probe = ExactIndex(model)
    Xp = prepare_rows(model, X, "corpus")
    y_nnz = probe.estimate_corpus_nnz(Xp)
    Q = X[qrows]
    row = {"case": case, "n_documents": int(X.shape[0]), "n_features": int(X.shape[1]), "nnz_X": int(X.nnz),
           "nnz_W": int(W.nnz), "corpus_plus_model_bytes": int(corpus_model), "estimated_nnz_Y": int(y_nnz),
           "estimated_Y_bytes": int(12 * y_nnz), "auto_chooses": None, "strategies": {}}
    for strategy in ("query", "corpus"):
        if strategy == "corpus" and 12 * y_nnz > args.max_y:
            row["strategies"][strategy] = {"skipped": f"Y estimated at {12 * y_nnz / 2**30:.1f} GiB > --max-y"}
            continue
        start = time.perf_counter()
        index = build_index(model, X, kind="exact", strategy=strategy)
        build = time.perf_counter() - start
        path = tmp / f"{corpus}-{algorithm}-{strategy}"
        index.save(path)
        size = dir_bytes(path)
        shutil.rmtree(path)
        qps = timed_queries(index, Q, args.repeats)
        row["strategies"][strategy] = {"build_seconds": build, "disk_bytes": int(size),
                                       "disk_over_corpus_plus_model": size / corpus_model, "qps_1": qps}
        print(json.dumps({"case": case, "strategy": strategy, **row["strategies"][strategy]}), flush=True)
        del index
    row["auto_chooses"] = probe._choose_strategy(Xp)
    return row


def main(argv=None):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="news20-3:oasis:1000,news20-3:sors:1000,news20-3:cosine:0,reuters21578:oasis:20000,"
                                           "reuters21578:sors:20000,news20:sors:20000,news20:cosine:0")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-y", type=float, default=4 * 2**30)
    parser.add_argument("--model-cache", default=str(pathlib.Path(tempfile.gettempdir()) / "sparsesim-bench-models"))
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "out"))
    args = parser.parse_args(argv)
    rows = []
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases.split(","):
            rows.append(run_case(case, args, pathlib.Path(tmp)))
    out = {"rows": rows, "loadavg_start": load_start, "loadavg_end": os.getloadavg(),
           "command": "python benchmarks/bench_exact_strategy.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    path = pathlib.Path(args.out) / "bench_exact_strategy.json"
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
