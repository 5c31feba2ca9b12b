"""Time from start to the first answer of a saved ann index, memory-mapped (issue #17: <= 1 s at 10^5 documents).

Builds (once; reused when ``ROOT/index`` exists) an ann index with default settings over the
synthetic RCV1-like corpus of ``bench_indexes.py`` (``--documents``, default 10^5, d = 47,236)
under an OASIS model (``--triplets``, default 3,000, trained on 10^4 documents), then measures,
each in a fresh Python process (best of ``--repeats``; the page cache is warm after the first run,
the caches are not dropped):

* ``lazy``: ``import sparsesim.indexes``, ``load_index(DIR, mmap=True)`` and the first query
  (one corpus document, top 10), each phase timed; the large arrays are checked block by block
  as the query reads them (:mod:`sparsesim.indexes.blocks`);
* ``eager``: the same load followed by ``verify_all()`` (every block hashed and checked, the work
  a load did before per-block checksums) and the same query;
* ``cli``: ``sparsesim query --index DIR --queries q.svm --top-k 10 --json``, wall time of the
  whole command (interpreter start, imports, load, query, output).

``--index DIR`` measures an existing index instead (e.g. a news20 index from ``sparsesim index
build``); the query is then its first stored document.

    python benchmarks/bench_index_load.py /tmp/index-load
    python benchmarks/bench_index_load.py /tmp/index-load --index news20-oasis.idx

Prints one JSON object per measurement and writes them to ``benchmarks/out/bench_index_load.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
from sparsesim.indexes import load_index
t1 = time.perf_counter()
index = load_index(sys.argv[1], mmap=True)
t2 = time.perf_counter()
if sys.argv[2] == "eager":
    index.verify_all()
t3 = time.perf_counter()
q = index._X[int(sys.argv[3]):int(sys.argv[3]) + 1]
ids, scores = index.query(q, top_k=10)
t4 = time.perf_counter()
hashed = sum(g.n_blocks - g.pending for g in index._guards.values())
total = sum(g.n_blocks for g in index._guards.values())
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "verify_all": t3 - t2, "first_query": t4 - t3,
                  "start_to_answer": t4 - t0, "blocks_checked": hashed, "blocks_deferred": total}))
"""


def build(root: pathlib.Path, n: int, triplets: int) -> pathlib.Path:
    import numpy as np
    from sklearn.datasets import dump_svmlight_file

    from sparsesim.data.synthetic import rcv1_like
    from sparsesim.indexes import build_index
    from sparsesim.learners.bilinear import OASIS

    out = root / "index"
    if (out / "manifest.json").is_file():
        return out
    data = rcv1_like(n, seed=0)
    sub = np.arange(min(n, 10_000))
    model = OASIS(n_triplets=triplets, random_state=0).fit(data.X[sub], data.y[sub]).model_
    start = time.perf_counter()
    index = build_index(model, data.X, kind="ann")
    print(json.dumps({"built": str(out), "seconds": round(time.perf_counter() - start, 1),
                      "setting": index.search_setting()}), flush=True)
    index.save(out)
    dump_svmlight_file(data.X[:1], [0], root / "q.svm", zero_based=model.metadata.get("zero_based", True))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root")
    parser.add_argument("--index", help="measure this existing index directory instead of building one")
    parser.add_argument("--documents", type=int, default=100_000)
    parser.add_argument("--triplets", type=int, default=3_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "bench_index_load.json"))
    args = parser.parse_args()
    root = pathlib.Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    index = pathlib.Path(args.index) if args.index else build(root, args.documents, args.triplets)
    size = sum(f.stat().st_size for f in index.rglob("*") if f.is_file())
    results = []
    for mode in ("lazy", "eager"):
        runs = []
        for _ in range(args.repeats):
            proc = subprocess.run([sys.executable, "-c", CHILD, str(index), mode, "0"], capture_output=True,
                                  text=True, check=True)
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        best = min(runs, key=lambda r: r["start_to_answer"])
        results.append({"mode": mode, "index": str(index), "index_gib": round(size / 2**30, 3),
                        **{k: round(v, 3) if isinstance(v, float) else v for k, v in best.items()}})
        print(json.dumps(results[-1]), flush=True)
    queries = root / "q.svm"
    if queries.is_file() and not args.index:
        cli = pathlib.Path(sys.executable).with_name("sparsesim")
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            subprocess.run([str(cli), "query", "--index", str(index), "--queries", str(queries), "--top-k", "10",
                            "--json"], capture_output=True, check=True)
            times.append(time.perf_counter() - start)
        results.append({"mode": "cli", "index": str(index), "index_gib": round(size / 2**30, 3),
                        "start_to_exit": round(min(times), 3)})
        print(json.dumps(results[-1]), flush=True)
    record = {"load_average": os.getloadavg(), "results": results, "command": " ".join(sys.argv)}
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
