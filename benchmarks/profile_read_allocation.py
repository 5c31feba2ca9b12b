"""Time per query of the ann index's weighted and threshold read allocations, each at a given
setting, on one index, interleaved (best of ``--repeats`` passes over ``--queries`` corpus rows,
one thread): what the threshold's search for its contribution threshold costs against the reads
it saves. The index is built once (``target_recall=None``) or read from ``--index``.
``--stage candidates`` times the candidate kernel alone (reads and pool, no re-ranking), where the
threshold's search is a larger share of the time; ``--stage rerank`` the exact re-ranking kernel
alone on the setting's candidates (forming each query's row of M from the light rows of W, then
one row of X and the heavy entries of Z per candidate): a pool of 1 against a pool of P gives
the cost of the row of M and of each re-ranked candidate apart.

    python benchmarks/profile_read_allocation.py --case 1e5:oasis:3000 --model-cache /tmp/sparsesim-bench-models \\
        --setting weighted:96:30 --setting threshold:24:50
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_indexes import get_model, load_corpus  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", default="1e5:oasis:3000")
    parser.add_argument("--setting", action="append", default=[], metavar="ALLOCATION:READS:POOL")
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2, help="times the list of settings is timed, interleaved")
    parser.add_argument("--index", help="a saved ann index of the case's corpus and model (built when absent)")
    parser.add_argument("--model-cache", default="/tmp/sparsesim-bench-models")
    parser.add_argument("--stage", choices=("query", "candidates", "rerank"), default="query",
                        help="time whole queries, the candidate kernel alone, or the re-ranking kernel alone")
    args = parser.parse_args(argv)
    from sparsesim.indexes import build_index, load_index
    from sparsesim.indexes.base import prepare_rows

    corpus, algorithm, triplets = args.case.split(":")
    X, y, _, _, _ = load_corpus(corpus, 300, 0)
    model, _ = get_model(corpus, algorithm, X, y, int(triplets), 0, pathlib.Path(args.model_cache))
    X = prepare_rows(model, X, "corpus")
    if args.index and pathlib.Path(args.index).exists():
        ann = load_index(args.index)
    else:
        ann = build_index(model, X, kind="ann", n_jobs=2, target_recall=None)
        if args.index:
            ann.save(args.index)
    Q = X[np.random.default_rng(5).choice(X.shape[0], min(args.queries, X.shape[0]), replace=False)]
    settings = [s.split(":") for s in (args.setting or ["weighted:96:30", "threshold:24:50"])]
    out = {"case": args.case, "command": "python benchmarks/profile_read_allocation.py " + " ".join(argv or sys.argv[1:]),
           "n_queries": int(Q.shape[0]), "light_w_entries_per_query": _light_entries(ann, Q), "rows": []}
    for _ in range(args.rounds):
        for alloc, reads, pool in settings:
            ann.read_allocation_ = alloc
            options = {"n_postings": int(reads), "sparse_pool": int(pool)}
            timed = {"query": _timed, "candidates": _timed_candidates, "rerank": _timed_rerank}[args.stage]
            timed(ann, Q[:200], options)  # warm
            best = min(timed(ann, Q, options) for _ in range(args.repeats))
            row = {"allocation": alloc, **options, "stage": args.stage, "us_per_query": 1e6 * best / Q.shape[0]}
            out["rows"].append(row)
            print(json.dumps(row), flush=True)
    print(json.dumps(out))
    return 0


def _timed(ann, Q, options):
    start = time.perf_counter()
    ann.query_rows(Q, 10, n_jobs=1, **options)
    return time.perf_counter() - start


def _timed_candidates(ann, Q, options):
    from sparsesim.indexes.ann_query import allocation_code, compact_kernels
    from sparsesim.indexes.execution import query_scratch

    n = ann.n_documents
    out = np.empty((Q.shape[0], options["sparse_pool"]), dtype=np.int64)
    code = allocation_code(ann.read_allocation_)
    start = time.perf_counter()
    compact_kernels().compact_sparse_candidates(Q.indptr, Q.indices, Q.data, *ann._postings.kernel_args(), n,
                                                options["n_postings"], code, options["sparse_pool"], out,
                                                *query_scratch.sparse(n))
    return time.perf_counter() - start


def _candidates(ann, Q, options):
    from sparsesim.indexes.ann_query import allocation_code, compact_kernels
    from sparsesim.indexes.execution import query_scratch

    n = ann.n_documents
    out = np.empty((Q.shape[0], options["sparse_pool"]), dtype=np.int64)
    compact_kernels().compact_sparse_candidates(Q.indptr, Q.indices, Q.data, *ann._postings.kernel_args(), n,
                                                options["n_postings"], allocation_code(ann.read_allocation_),
                                                options["sparse_pool"], out, *query_scratch.sparse(n))
    return out


def _timed_rerank(ann, Q, options, k=10):
    from sparsesim.indexes.base import kernels
    from sparsesim.indexes.execution import query_scratch

    cands = _candidates(ann, Q, options)
    docs = np.full((Q.shape[0], k), -1, dtype=np.int64)
    scores = np.full((Q.shape[0], k), -np.inf)
    W, X = ann.rerank_w(), ann._X
    qm, stamp = query_scratch.rerank(ann.n_documents, ann.n_features)
    start = time.perf_counter()
    kernels().rerank(Q.indptr, Q.indices, Q.data, *W.kernel_args(), bool(ann._model.identity), ann._heavy_pos,
                     ann._Z, X.indptr, X.indices, X.data, cands, k, docs, scores, qm, stamp,
                     query_scratch.generations(Q.shape[0]))
    return time.perf_counter() - start


def _light_entries(ann, Q) -> float:
    """Mean entries of W a query scatters: the rows of its terms that are not heavy."""
    terms = Q.indices[ann._heavy_pos[Q.indices] < 0]
    return float(np.diff(ann.rerank_w().indptr)[terms].sum() / Q.shape[0])


if __name__ == "__main__":
    sys.exit(main())
