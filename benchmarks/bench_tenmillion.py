"""Benchmark: the block-wise ann build of a synthetic RCV1-like corpus on disk, within a memory budget.

Steps (one process; run it under ``/usr/bin/time -v`` for the whole process's peak):

1. the corpus: a corpus directory of ``--docs`` + ``--queries`` synthetic RCV1-like documents
   (``sparsesim.data.synthetic.write_rcv1_like``, d = 47,236, 75 nonzeros per document), generated
   block by block when ``--corpus`` does not exist yet; the last ``--queries`` documents are the
   held-out queries, the index holds the first ``--docs``;
2. the model: OASIS (``--triplets``) on the first 10^4 documents, cached in ``--model-cache``;
3. the build: :func:`sparsesim.indexes.ann_blockwise.build_ann_blockwise` with ``--memory``
   (calibrated at build for recall@10 >= 0.95); the process's VmHWM is reset before it, so
   ``build_peak_gib`` is the build's own peak (interpreter, libraries and model included);
4. queries: the saved index loaded memory-mapped; the 300 held-out documents and 300 corpus
   documents (other than the calibration's, their own document removed from both answers) against
   the exact top-10 computed block by block over the stored corpus (ties counted); queries/s on 1
   and 2 threads, best of 3 after a warm-up.

Usage::

    python benchmarks/bench_tenmillion.py --docs 1000000 --memory 3GiB --corpus /tmp/c1e6 \
        --index /tmp/i1e6 --out benchmarks/out/bench_tenmillion_1e6.json

Speed depends on the machine and its load; the JSON records ``os.getloadavg()``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import sys
import time

import numpy as np

from sparsesim.memory import peak_resident_bytes, reset_peak_resident, resident_bytes

ROOT = pathlib.Path(__file__).resolve().parents[1]


def gib(nbytes) -> float:
    return float("nan") if nbytes is None else nbytes / 2**30


def disk_gib(path: pathlib.Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**30


def best_rate(fn, n: int, repeats: int = 3) -> float:
    fn()
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return n / best


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--triplets", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--memory", default="3GiB", help="memory budget of the build")
    parser.add_argument("--build-jobs", type=int, default=2)
    parser.add_argument("--corpus", required=True, help="corpus directory (generated when missing)")
    parser.add_argument("--index", required=True, help="index directory to write (replaced)")
    parser.add_argument("--model-cache", default=str(ROOT / "benchmarks" / "out" / "models"))
    parser.add_argument("--keep-index", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "bench_tenmillion.json"))
    args = parser.parse_args(argv)

    from sparsesim.data.corpus_files import CorpusFiles
    from sparsesim.data.synthetic import write_rcv1_like
    from sparsesim.indexes import load_index
    from sparsesim.indexes.ann_blockwise import build_ann_blockwise
    from sparsesim.indexes.calibration import recall_counting_ties
    from sparsesim.indexes.base import drop_own_rows
    from sparsesim.learners.bilinear import OASIS
    from sparsesim.models import BilinearSimilarity

    out = {"docs": args.docs, "queries": args.queries, "memory": args.memory, "loadavg_start": os.getloadavg(),
           "argv": sys.argv[1:]}
    corpus_dir = pathlib.Path(args.corpus)
    start = time.perf_counter()
    if not (corpus_dir / "corpus.json").exists():
        write_rcv1_like(corpus_dir, args.docs + args.queries, seed=args.seed)
        out["generate_seconds"] = time.perf_counter() - start
    corpus = CorpusFiles(corpus_dir)
    if corpus.n_documents < args.docs + args.queries:
        raise SystemExit(f"{corpus_dir} holds {corpus.n_documents} documents, fewer than --docs + --queries")
    out["corpus_gib"] = disk_gib(corpus_dir)
    out["generate_peak_gib"] = gib(peak_resident_bytes())

    cache = pathlib.Path(args.model_cache)
    cache.mkdir(parents=True, exist_ok=True)
    model_path = cache / f"rcv1like-blocks-oasis-{args.triplets}-{args.seed}.npz"
    if model_path.is_file():
        model = BilinearSimilarity.load(model_path)
    else:
        t = time.perf_counter()
        sub = corpus.rows(0, 10_000)
        model = OASIS(n_triplets=args.triplets, random_state=args.seed).fit(sub, corpus.labels()[:10_000]).model_
        model.save(model_path)
        out["train_seconds"] = time.perf_counter() - t
    out["model"] = {"algorithm": "oasis", "n_triplets": args.triplets, "nnz_W": int(model.W.nnz)}
    n, d = args.docs, corpus.n_features
    corpus_bytes = 12 * int(corpus.indptr[n]) + 8 * (n + 1)
    model_bytes = 12 * model.W.nnz + 8 * (d + 1)
    out["corpus_plus_model_gib"] = (corpus_bytes + model_bytes) / 2**30
    print(f"[tenmillion] n={n:,} nnz(W)={model.W.nnz:,} memory={args.memory}", flush=True)

    index_dir = pathlib.Path(args.index)
    if index_dir.exists():
        shutil.rmtree(index_dir)
    reset_peak_resident()
    out["rss_before_build_gib"] = gib(resident_bytes())
    t = time.perf_counter()
    built = build_ann_blockwise(model, corpus, index_dir, memory=args.memory, n_documents=n, n_jobs=args.build_jobs)
    out["build_seconds"] = time.perf_counter() - t
    out["build_peak_gib"] = gib(peak_resident_bytes())
    out["plan"] = built.plan_
    out["build_phases_seconds"] = {k: round(v, 1) for k, v in built.build_phases_.items()}
    out["calibration"] = {k: built.calibration_[k] for k in ("setting", "recall", "recall_lower_bound", "met",
                                                               "n_queries", "qps_one_thread")}
    out["disk_gib"] = disk_gib(index_dir)
    print(f"[tenmillion] build {out['build_seconds']:.0f}s peak {out['build_peak_gib']:.2f} GiB "
          f"disk {out['disk_gib']:.2f} GiB (corpus + model {out['corpus_plus_model_gib']:.2f}) "
          f"calibrated {built.calibration_['setting']} recall {built.calibration_['recall']:.3f}", flush=True)

    # queries against the loaded index; truth a block at a time over the stored corpus
    reset_peak_resident()
    index = load_index(index_dir, mmap=True)
    rng = np.random.default_rng([args.seed, 1])
    used = set(built.calibration_["rows"]) | set(built.calibration_["selection"]["rows"])
    pool = np.setdiff1d(np.arange(n), np.fromiter(used, dtype=np.int64))
    self_rows = np.sort(rng.choice(pool, size=args.queries, replace=False))
    Qh = index.prepare_queries(corpus.rows(n, n + args.queries))
    Qs = index.stored_queries(self_rows)
    k = 10
    t = time.perf_counter()
    truth_h = built.exact_rows(Qh, k, args.build_jobs)
    truth_s = built.exact_rows(Qs, k + 1, args.build_jobs)
    out["exact_seconds"] = time.perf_counter() - t
    truth_s = drop_own_rows(*truth_s, self_rows, k)
    found_h = index.query_rows(Qh, k, n_jobs=1)
    found_s = drop_own_rows(*index.query_rows(Qs, k + 1, n_jobs=1), self_rows, k)
    out["recall_heldout"] = float(recall_counting_ties(found_h[1], truth_h[1]).mean())
    out["recall_corpus_heldout"] = float(recall_counting_ties(found_s[1], truth_s[1]).mean())
    for jobs in (1, 2):
        out[f"qps_{jobs}"] = best_rate(lambda: index.query_rows(Qh, k, n_jobs=jobs), Qh.shape[0])
    out["query_peak_gib"] = gib(peak_resident_bytes())
    out["loadavg_end"] = os.getloadavg()
    print(f"[tenmillion] recall@10 held-out {out['recall_heldout']:.3f}, corpus documents "
          f"{out['recall_corpus_heldout']:.3f}; {out['qps_1']:.0f} q/s (1 thread), {out['qps_2']:.0f} (2)", flush=True)
    if not args.keep_index:
        shutil.rmtree(index_dir, ignore_errors=True)
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps(out, indent=2, default=float))
    return out


if __name__ == "__main__":
    main()
