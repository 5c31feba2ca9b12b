"""Benchmark: a sharded exact index on 2 Dask workers x 1 thread vs one exact index in one process.

Corpus: synthetic RCV1-like documents (``sparsesim.data.synthetic.rcv1_like``: d = 47,236, ~75
nonzeros per document, Zipf term frequencies; labelled synthetic in the output) plus held-out
query documents of the same distribution. Model: OASIS trained on a 10^4-document subset.

Measured, each phase in its own process(es) so memory does not carry over:

* **one process** (a subprocess): ``ExactIndex`` build time, queries/s, peak resident memory
  (VmHWM) of the process;
* **2 workers x 1 thread** (``distributed.LocalCluster`` with worker processes, this process as
  the client): ``ShardedIndex`` with one shard per worker, each worker reading its shard's rows
  and the model from files (nothing large passes through the client); build time, queries/s,
  peak resident memory of each worker (VmHWM, reset after start-up) and of the client;
* **CPU seconds** of the query batch in the one process, in every worker and in the client
  (which runs the LocalCluster's scheduler too), and what an idle worker spends per second
  (Dask's own heartbeats and monitors). One process over the busiest worker is the throughput
  ratio when every worker has a core of its own, which a machine shared with other jobs does
  not give (the wall-clock ratio is reported as well);
* **identical answers**: ids equal and scores within 1e-9 for every query;
* **scaling by simulation**: the per-query time of one shard as a function of its size (exact
  index over the first n/8, n/4, n/2, n documents, one thread), fitted as t = a + b n, and the
  bytes a shard holds per document; from these, for 10^8 documents and several shard counts:
  documents and memory per shard and the time of one query batch (shards searched in parallel,
  one per worker core, plus the measured merge cost).

Usage::

    python benchmarks/bench_distributed.py --docs 100000 --queries 400
    python benchmarks/bench_distributed.py --docs 1000000 --queries 1000   # needs ~8 GiB free

Writes ``benchmarks/out/bench_distributed.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np
import scipy.sparse as sp

from sparsesim.memory import peak_resident_bytes, reset_peak_resident, resident_bytes

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOP_K = 10
WARM = 256  # queries run before the measured batch (4 blocks of 64: every worker forms one)


def gib(nbytes: int | None) -> float:
    return float("nan") if nbytes is None else nbytes / 2**30


def peak_gib() -> float:
    return gib(peak_resident_bytes())


def rss_gib() -> float:
    return gib(resident_bytes())


def save_csr(path, X):
    np.savez(path, indptr=X.indptr, indices=X.indices, data=X.data, shape=np.array(X.shape))


def load_csr(path):
    with np.load(path, allow_pickle=False) as f:
        return sp.csr_matrix((f["data"], f["indices"], f["indptr"]), shape=tuple(f["shape"]))


def load_part(path):
    """``(X, ids)`` of one shard file (runs on the worker that builds the shard)."""
    with np.load(path, allow_pickle=False) as f:
        X = sp.csr_matrix((f["data"], f["indices"], f["indptr"]), shape=tuple(f["shape"]))
        return X, f["ids"]


# --- phase 0: data and model ------------------------------------------------------------------------
def prepare(work: pathlib.Path, n_docs: int, n_queries: int, n_shards: int, triplets: int, seed: int) -> dict:
    from sparsesim.data.synthetic import rcv1_like
    from sparsesim.learners.bilinear import OASIS

    start = time.perf_counter()
    data = rcv1_like(n_documents=n_docs + n_queries, seed=seed)
    X, Q = data.X[:n_docs].tocsr(), data.X[n_docs:].tocsr()
    train = np.random.default_rng(seed).choice(n_docs, size=min(10_000, n_docs), replace=False)
    est = OASIS(n_triplets=triplets, random_state=seed).fit(X[train], data.y[train])
    est.model_.save(work / "model.npz")
    save_csr(work / "corpus.npz", X)
    save_csr(work / "queries.npz", Q)
    bounds = np.linspace(0, n_docs, n_shards + 1).astype(np.int64)
    for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        np.savez(work / f"part-{i}.npz", indptr=X[lo:hi].indptr, indices=X[lo:hi].indices, data=X[lo:hi].data,
                 shape=np.array(X[lo:hi].shape), ids=np.arange(lo, hi, dtype=np.int64))
    return {"n_documents": n_docs, "n_queries": n_queries, "n_features": X.shape[1], "corpus_nnz": int(X.nnz),
            "model_nnz": int(est.model_.nnz()), "oasis_triplets": triplets, "prepare_seconds": time.perf_counter() - start}


# --- phase 1: one process (run as a subprocess) ------------------------------------------------------
def single(work: pathlib.Path, block_size: int = 64) -> dict:
    from sparsesim.indexes import ExactIndex
    from sparsesim.models import BilinearSimilarity

    imports = rss_gib()  # the interpreter with sparsesim imported
    model = BilinearSimilarity.load(work / "model.npz")
    X, Q = load_csr(work / "corpus.npz"), load_csr(work / "queries.npz")
    base = rss_gib()
    reset_peak_resident()
    start = time.perf_counter()
    index = ExactIndex(model, block_size=block_size).fit(X)
    build = time.perf_counter() - start
    build_peak = peak_gib()
    index.query(Q[:WARM], top_k=TOP_K)  # warm the compiled kernels and the allocator
    reset_peak_resident()
    cpu = time.process_time()
    start = time.perf_counter()
    ids, scores = index.query(Q, top_k=TOP_K)
    seconds = time.perf_counter() - start
    cpu = time.process_time() - cpu
    np.savez(work / "single_answers.npz", ids=np.array(ids), scores=scores)
    return {"build_seconds": build, "query_seconds": seconds, "queries_per_second": Q.shape[0] / seconds,
            "query_cpu_seconds": cpu, "strategy": index.strategy_, "rss_after_imports_gib": imports, "rss_after_load_gib": base, "peak_gib_build": build_peak,
            "peak_gib_query": peak_gib(), "peak_gib": max(build_peak, peak_gib())}


# --- phase 2: two workers ----------------------------------------------------------------------------
def _worker_peak():
    return peak_gib()


def _worker_reset():
    import sparsesim.indexes  # noqa: F401 - the same imports as the one-process run before measuring

    reset_peak_resident()
    return rss_gib()


def on_cluster(work: pathlib.Path, n_workers: int, n_shards: int, memory_limit: str, worker_malloc: str,
               block_size: int = 64) -> dict:
    import dask
    import distributed

    from sparsesim.indexes.sharded import ShardedIndex
    from sparsesim.models import BilinearSimilarity

    model = BilinearSimilarity.load(work / "model.npz")
    Q = load_csr(work / "queries.npz")
    # Dask's nannies start workers with MALLOC_TRIM_THRESHOLD_=65536, which also turns off glibc's
    # adaptive mmap threshold: every large temporary array of a search is then fresh pages from
    # the kernel (measured: ~30% more CPU for an exact search). "glibc" runs the workers with the
    # allocator defaults of the one-process run; "dask" keeps Dask's setting.
    env = {} if worker_malloc == "dask" else {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}
    with dask.config.set(env), \
            distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                                     memory_limit=memory_limit, dashboard_address=":0", host="127.0.0.1") as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(n_workers)
        idle = client.run(_worker_reset)
        reset_peak_resident()  # the client's peak from here on (not the data preparation before)
        client_base = rss_gib()
        start = time.perf_counter()
        index = ShardedIndex(model, kind="exact", n_shards=n_shards, client=client, block_size=block_size,
                             model_file=work / "model.npz").fit_files(
            [work / f"part-{i}.npz" for i in range(n_shards)], load_part)
        build = time.perf_counter() - start
        build_peaks = client.run(_worker_peak)
        index.query(Q[:WARM], top_k=TOP_K)  # the same warm-up; every worker transforms a query block
        client.run(_worker_reset)
        # what a worker spends with nothing to do (heartbeats, memory monitor): part of its batch CPU
        idle_cpu = client.run(time.process_time)
        time.sleep(2.0)
        cpu_before = client.run(time.process_time)
        client_cpu = time.process_time()
        start = time.perf_counter()
        ids, scores = index.query(Q, top_k=TOP_K)
        seconds = time.perf_counter() - start
        client_cpu = time.process_time() - client_cpu
        cpu_after = client.run(time.process_time)
        query_peaks = client.run(_worker_peak)
        workers = sorted(build_peaks)
        index.release()
    single = np.load(work / "single_answers.npz")
    same_ids = bool(np.array_equal(np.array(ids), single["ids"]))
    max_diff = float(np.abs(scores - single["scores"]).max())
    return {"n_workers": n_workers, "threads_per_worker": 1, "n_shards": n_shards, "worker_malloc": worker_malloc,
            "build_seconds": build,
            "query_seconds": seconds, "queries_per_second": Q.shape[0] / seconds,
            "worker_query_cpu_seconds": [cpu_after[w] - cpu_before[w] for w in workers],
            "client_query_cpu_seconds": client_cpu, "block_size": block_size,
            "worker_idle_cpu_per_second": [(cpu_before[w] - idle_cpu[w]) / 2.0 for w in workers],
            "worker_idle_rss_gib": [idle[w] for w in workers],
            "worker_peak_gib": [max(build_peaks[w], query_peaks[w]) for w in workers],
            "client_rss_gib_before": client_base, "client_peak_gib": peak_gib(),
            "identical_ids": same_ids, "max_abs_score_diff": max_diff}


# --- phase 3: scaling by simulation (subprocess) -----------------------------------------------------
def scaling(work: pathlib.Path, fractions=(8, 4, 2, 1)) -> dict:
    from sparsesim.indexes import ExactIndex
    from sparsesim.indexes.shard import merge_parts as _merge
    from sparsesim.models import BilinearSimilarity

    model = BilinearSimilarity.load(work / "model.npz")
    X, Q = load_csr(work / "corpus.npz"), load_csr(work / "queries.npz")
    Q = Q[: min(Q.shape[0], 200)]
    rows = []
    for f in fractions:
        n = X.shape[0] // f
        index = ExactIndex(model).fit(X[:n])
        index.query(Q[:8], top_k=TOP_K)
        start = time.perf_counter()
        index.query(Q, top_k=TOP_K)
        seconds = time.perf_counter() - start
        arrays = index._arrays() if hasattr(index, "_arrays") else {}
        held = sum(np.asarray(a).nbytes for a in arrays.values())
        rows.append({"shard_documents": n, "seconds_per_query": seconds / Q.shape[0], "shard_bytes": held,
                     "strategy": index.strategy_})
        del index
    n = np.array([r["shard_documents"] for r in rows], float)
    t = np.array([r["seconds_per_query"] for r in rows])
    b, a = np.polyfit(n, t, 1)
    bytes_per_doc = float(np.median([r["shard_bytes"] / r["shard_documents"] for r in rows]))
    # merge cost: k candidates from each of S shards per query
    merge = {}
    for shards in (2, 16, 128, 1024):
        rng = np.random.default_rng(0)
        parts = [(rng.integers(0, 10**8, (Q.shape[0], TOP_K)), rng.random((Q.shape[0], TOP_K)),
                  rng.integers(0, 10**8, (Q.shape[0], TOP_K))) for _ in range(shards)]
        start = time.perf_counter()
        _merge(parts, TOP_K)
        merge[shards] = (time.perf_counter() - start) / Q.shape[0]
    return {"measured": rows, "fit_seconds_per_query": {"a": float(a), "b_per_document": float(b)},
            "index_bytes_per_document": bytes_per_doc, "model_bytes": int((work / "model.npz").stat().st_size),
            "merge_seconds_per_query": merge}


def extrapolate(scale: dict, total_docs: float = 1e8, worker_memory_gib: float = 16.0) -> list[dict]:
    a, b = scale["fit_seconds_per_query"]["a"], scale["fit_seconds_per_query"]["b_per_document"]
    per_doc = scale["index_bytes_per_document"]
    merge = scale["merge_seconds_per_query"]
    out = []
    for shards in (16, 64, 128, 256, 512, 1024):
        docs = total_docs / shards
        mem = (docs * per_doc + scale["model_bytes"]) / 2**30
        merge_s = np.interp(np.log(shards), np.log([float(k) for k in merge]), list(merge.values()))
        t = a + b * docs + merge_s
        out.append({"shards": shards, "documents_per_shard": int(docs), "shard_memory_gib": mem,
                    "fits_worker_budget": bool(mem <= worker_memory_gib), "seconds_per_query": t,
                    "queries_per_second_one_stream": 1 / t})
    return out


def _child(phase: str, work: pathlib.Path, block_size: int = 64) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--phase", phase, "--work", str(work), "--block-size",
                           str(block_size)], capture_output=True, text=True, timeout=7200)
    if proc.returncode != 0:
        raise SystemExit(f"phase {phase} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--triplets", type=int, default=1_000, help="OASIS triplets of the model")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-limit", default="3GiB", help="per worker")
    parser.add_argument("--worker-malloc", choices=["glibc", "dask"], default="glibc",
                        help="workers' allocator settings: glibc defaults (as the one process) or Dask's "
                             "MALLOC_TRIM_THRESHOLD_=65536")
    parser.add_argument("--block-size", type=int, default=64,
                        help="queries per block (ExactIndex block_size), both sides; one block is "
                             "block_size x 47,236 x 8 bytes when moved between the workers")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "bench_distributed.json"))
    parser.add_argument("--phase", choices=["single", "scaling"], help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        work = pathlib.Path(args.work)
        print(json.dumps(single(work, args.block_size) if args.phase == "single" else scaling(work)))
        return
    with tempfile.TemporaryDirectory(prefix="bench-distributed-") as tmp:
        work = pathlib.Path(tmp)
        report = {"benchmark": "bench_distributed", "corpus": "synthetic rcv1_like (labelled synthetic)",
                  "machine": {"cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()},
                  "command": " ".join([os.path.basename(sys.executable), *sys.argv])}
        report["data"] = prepare(work, args.docs, args.queries, args.workers, args.triplets, args.seed)
        print("data", report["data"], flush=True)
        report["one_process"] = _child("single", work, args.block_size)
        print("one process", report["one_process"], flush=True)
        report["two_workers"] = on_cluster(work, args.workers, args.workers, args.memory_limit, args.worker_malloc,
                                           args.block_size)
        print("workers", report["two_workers"], flush=True)
        one, two = report["one_process"], report["two_workers"]
        report["ratios"] = {"query_throughput_workers_over_one": two["queries_per_second"] / one["queries_per_second"],
                            # CPU seconds of the one process over those of the busiest worker: the
                            # throughput ratio when every worker has a core of its own
                            "query_cpu_one_over_busiest_worker": one["query_cpu_seconds"] / max(two["worker_query_cpu_seconds"]),
                            "worker_peak_over_one_process_peak": [p / one["peak_gib"] for p in two["worker_peak_gib"]],
                            "worker_peak_above_imports_over_one_process_above_imports": [
                                (p - i) / (one["peak_gib"] - one["rss_after_imports_gib"]) for p, i in
                                zip(two["worker_peak_gib"], two["worker_idle_rss_gib"])]}
        report["scaling"] = _child("scaling", work)
        report["extrapolation_1e8"] = extrapolate(report["scaling"])
        report["machine"]["load_average_at_end"] = os.getloadavg()
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report["ratios"]))
    print(f"{'shards':>7}{'docs/shard':>13}{'GiB/shard':>11}{'fits':>6}{'s/query':>10}")
    for row in report["extrapolation_1e8"]:
        print(f"{row['shards']:>7}{row['documents_per_shard']:>13,}{row['shard_memory_gib']:>11.2f}"
              f"{'yes' if row['fits_worker_budget'] else 'no':>6}{row['seconds_per_query']:>10.4f}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
