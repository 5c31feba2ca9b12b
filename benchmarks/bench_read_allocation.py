"""How a query's postings reads are shared among its lists: recall@10 and query time of the ann
index under ``read_allocation`` "uniform", "weighted" and "threshold", at equal settings.

Per corpus (the cached OASIS models of ``bench_indexes.py``), one ann build per allocation
(``target_recall=None``: no calibration, the same lists), then for every (``n_postings``,
``sparse_pool``) of a grid: tie-aware recall@10 against the exact top 10 on 300 corpus documents
used as held-out queries (each removed from its own answers; not the calibration's sample), and
the CPU seconds per query of one thread. No parameter is chosen here: the table shows where each
allocation stands, the calibration of a build then picks the fastest setting meeting the target.

    python benchmarks/bench_read_allocation.py --cases news20:oasis:20000,1e5:oasis:3000 \\
        --model-cache /tmp/sparsesim-bench-models --out benchmarks/out/bench_read_allocation.json
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_indexes import get_model, load_corpus  # noqa: E402

ALLOCATIONS = ("uniform", "weighted", "threshold")
READS = (8, 16, 24, 32, 48, 64, 96, 128)
POOLS = (30, 50, 100)


def run_case(case: str, args) -> dict:
    from sparsesim.indexes import build_index
    from sparsesim.indexes.base import prepare_rows
    from sparsesim.indexes.calibration import measure_recall

    corpus, algorithm, triplets = case.split(":")
    X, y, qrows, _, source = load_corpus(corpus, args.queries, args.seed)
    model, _ = get_model(corpus, algorithm, X, y, int(triplets), args.seed, pathlib.Path(args.model_cache))
    X = prepare_rows(model, X, "corpus")
    settings = [{"n_postings": r, "sparse_pool": p} for r in READS for p in POOLS]
    out = {"case": case, "command": "python benchmarks/bench_read_allocation.py " + " ".join(sys.argv[1:]),
           "source": source, "n_documents": int(X.shape[0]), "n_queries": int(qrows.size),
           "loadavg_start": os.getloadavg(), "allocations": {}}
    for alloc in ALLOCATIONS:
        start = time.perf_counter()
        index = build_index(model, X, kind="ann", target_recall=None, read_allocation=alloc, n_jobs=args.build_jobs)
        build = time.perf_counter() - start
        rows = []
        for setting, (recall, cpu) in zip(settings, measure_recall(index, qrows, 10, settings)):
            rows.append({**setting, "recall": float(recall.mean()), "us_per_query": 1e6 * cpu / qrows.size})
            print(f"[{case}] {alloc:9s} reads {setting['n_postings']:4d} pool {setting['sparse_pool']:4d}: "
                  f"recall {rows[-1]['recall']:.3f}, {rows[-1]['us_per_query']:.0f} us", flush=True)
        out["allocations"][alloc] = {"build_seconds": build, "rows": rows}
        del index
    out["loadavg_end"] = os.getloadavg()
    return out


def cheapest(rows, target):
    ok = [r for r in rows if r["recall"] >= target]
    return min(ok, key=lambda r: r["us_per_query"]) if ok else None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="news20:oasis:20000,1e5:oasis:3000")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--build-jobs", type=int, default=2)
    parser.add_argument("--model-cache", default="/tmp/sparsesim-bench-models")
    parser.add_argument("--out", default=str(pathlib.Path(__file__).resolve().parent / "out" / "bench_read_allocation.json"))
    args = parser.parse_args(argv)
    results = [run_case(case, args) for case in args.cases.split(",")]
    for res in results:
        for target in (0.95, 0.99):
            cells = []
            for alloc in ALLOCATIONS:
                best = cheapest(res["allocations"][alloc]["rows"], target)
                cells.append(f"{alloc} " + ("-" if best is None else
                                            f"({best['n_postings']}, {best['sparse_pool']}) {best['us_per_query']:.0f} us"))
            res.setdefault("cheapest", {})[str(target)] = {
                alloc: cheapest(res["allocations"][alloc]["rows"], target) for alloc in ALLOCATIONS}
            print(f"{res['case']} recall >= {target}: " + " | ".join(cells))
    pathlib.Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
