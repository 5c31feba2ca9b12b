"""Time from start to the first answer of a saved ann index, memory-mapped (issue #17: <= 1 s at 10^5 documents).

Builds (once; reused when ``ROOT/index`` exists) an ann index with default settings over
``--corpus`` (default ``1e5``: the synthetic RCV1-like corpus of ``bench_indexes.py``, 10^5
documents, d = 47,236; or a data set such as ``news20``) under a model (``--algorithm oasis|sors``,
``--triplets``, default OASIS 3,000, trained on 10^4 documents of a synthetic corpus or the whole
real corpus; cached in ROOT) and reports its build time and build peak (VmHWM from just before
the build, so the corpus and the model are included) against its size on disk, then measures,
each in ``--repeats`` fresh processes (median, min and max of the wall time from spawning the
process to its exit, and of its user + sys CPU time, which depends less on other load; the page
cache is warm after the first run, the caches are not dropped):

* ``lazy``: ``import sparsesim.indexes``, ``load_index(DIR, mmap=True, warm_up=False)`` (the
  load of ``sparsesim query --index``) and the first query
  (one corpus document, top 10), each phase timed; the large arrays are checked block by block
  as the query reads them (:mod:`sparsesim.indexes.blocks`); the first queries of a process go
  through numpy (:mod:`sparsesim.indexes.small_batch`), so numba is never loaded;
* ``compiled``: the same with numba imported first, so the query goes through the compiled
  kernels (their first call loads numba's compiler and the kernels from its disk cache; the
  default ``load_index(DIR, mmap=True)`` does that work at load, ``warm_up=True``);
* ``eager``: the same load followed by ``verify_all()`` (every block hashed and checked, the work
  a load did before per-block checksums) and the same query;
* ``cli``: ``sparsesim query --index DIR --queries q.svm --top-k 10 --json``, the whole command
  (interpreter start, imports, load, query, output);
* ``cli-npz``: the same with the query in a ``scipy.sparse.save_npz`` file (read by scipy, which
  the index needs anyway; scikit-learn, whose svmlight parser imports all of it, is not loaded);
* ``cli-query-ids``: the same with the stored first document as the query (``--query-ids ID``:
  no query file to parse).

``--index DIR`` measures an existing index instead (e.g. a news20 index from ``sparsesim index
build``); the query is then its first stored document.

    python benchmarks/bench_index_load.py /tmp/index-load
    SPARSESIM_DATA=... python benchmarks/bench_index_load.py /tmp/news20-sors --corpus news20 --algorithm sors --triplets 20000
    python benchmarks/bench_index_load.py /tmp/index-load --index news20-oasis.idx

Prints one JSON object per measurement and writes them to ``benchmarks/out/bench_index_load.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
if sys.argv[2] == "compiled":
    import numba  # numba already loaded: the first query goes through the compiled kernels
import numpy as np
from sparsesim.indexes import load_index
t1 = time.perf_counter()
index = load_index(sys.argv[1], mmap=True, warm_up=False)  # each phase's own cost: the kernels on first use
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
                  "start_to_answer": t4 - t0, "blocks_checked": hashed, "blocks_deferred": total,
                  "numba_loaded": "numba" in sys.modules}))
"""


def timed_process(cmd: list) -> tuple[float, float, str]:
    """Run ``cmd``: (wall seconds from spawn to exit, user + sys CPU seconds of the process, stdout)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # cumulative: the caller takes differences
    if proc.returncode:
        raise RuntimeError(f"{cmd[:3]} failed: {err.decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, out.decode()


def measure(cmd: list, repeats: int) -> tuple[list, list, list]:
    """``repeats`` fresh runs of ``cmd``: their wall times, CPU times and outputs."""
    walls, cpus, outs = [], [], []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    before = before.ru_utime + before.ru_stime
    for _ in range(repeats):
        wall, after, out = timed_process(cmd)
        walls.append(wall)
        cpus.append(after - before)
        outs.append(out)
        before = after
    return walls, cpus, outs


def summary(values: list) -> dict:
    """Median, min and max (seconds, rounded)."""
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3)}


BUILD = {}  # the build record, when this run built the index


def peak_gib() -> float:
    from sparsesim.memory import peak_resident_bytes

    peak = peak_resident_bytes()
    return float("nan") if peak is None else peak / 2**30


def build(root: pathlib.Path, corpus: str, algorithm: str, triplets: int) -> pathlib.Path:
    """Build (once) the ann index of ``corpus`` (``1e5``-style synthetic size or a data set name)
    under a cached model; prints its build time, build peak and sizes."""
    import numpy as np

    from sparsesim.data import load_dataset
    from sparsesim.data.synthetic import rcv1_like
    from sparsesim.indexes import build_index
    from sparsesim.learners.bilinear import OASIS, SORS
    from sparsesim.models import BilinearSimilarity
    from sparsesim.memory import reset_peak_resident

    out = root / "index"
    if (out / "manifest.json").is_file():
        return out
    if corpus[0].isdigit():
        data = rcv1_like(int(float(corpus)), seed=0)
    else:
        data = load_dataset(corpus)
    X, y = data.X, data.y
    cache = root / f"model-{corpus}-{algorithm}-{triplets}.npz"
    if cache.is_file():
        model = BilinearSimilarity.load(cache)
    else:
        sub = np.arange(X.shape[0] if X.shape[0] <= 20_000 else 10_000)
        est = OASIS(n_triplets=triplets, random_state=0) if algorithm == "oasis" else \
            SORS(regularizer="l1", n_triplets=triplets, random_state=0)
        model = est.fit(X[sub], y[sub]).model_
        model.save(cache)
    reset_peak_resident()  # the peak from here: corpus and model included
    start = time.perf_counter()
    index = build_index(model, X, kind="ann")
    seconds = time.perf_counter() - start
    peak = peak_gib()
    index.save(out)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    inputs = 12 * X.nnz + 8 * X.shape[0] + 12 * model.W.nnz + 8 * model.n_features
    BUILD.update({"built": str(out), "corpus": corpus, "model": f"{algorithm} {triplets}", "nnz_W": int(model.W.nnz),
                  "build_seconds": round(seconds, 1), "build_peak_gib": round(peak, 3),
                  "index_gib": round(size / 2**30, 3), "corpus_plus_model_gib": round(inputs / 2**30, 3),
                  "peak_over_index": round(peak * 2**30 / size, 2), "setting": index.search_setting(),
                  "calibrated_recall": index.calibration_["recall"]})
    print(json.dumps(BUILD), flush=True)
    return out


def query_files(root: pathlib.Path, index_dir: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """An svmlight and an npz file holding the index's first document (the CLI's query)."""
    import scipy.sparse as sp
    from sklearn.datasets import dump_svmlight_file

    from sparsesim.indexes import load_index

    svm, npz = root / "q.svm", root / "q.npz"
    if not (svm.is_file() and npz.is_file()):
        index = load_index(index_dir, mmap=True)
        dump_svmlight_file(index.X_[:1], [0], str(svm),
                           zero_based=index.reader_model().metadata.get("zero_based", True))
        sp.save_npz(npz, sp.csr_matrix(index.X_[:1]))
    return svm, npz


def load_index_ids(index_dir: pathlib.Path):
    from sparsesim.indexes import load_index

    return load_index(index_dir, mmap=True).ids_


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root")
    parser.add_argument("--index", help="measure this existing index directory instead of building one")
    parser.add_argument("--corpus", default="1e5", help="synthetic size (1e5) or a data set name (news20)")
    parser.add_argument("--algorithm", choices=("oasis", "sors"), default="oasis")
    parser.add_argument("--triplets", type=int, default=3_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "bench_index_load.json"))
    args = parser.parse_args()
    root = pathlib.Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    index = pathlib.Path(args.index) if args.index else build(root, args.corpus, args.algorithm, args.triplets)
    size = sum(f.stat().st_size for f in index.rglob("*") if f.is_file())
    results = []
    for mode in ("lazy", "compiled", "eager"):
        walls, cpus, outs = measure([sys.executable, "-c", CHILD, str(index), mode, "0"], args.repeats)
        runs = [json.loads(out.strip().splitlines()[-1]) for out in outs]
        phases = {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0] if isinstance(runs[0][k], float)}
        results.append({"mode": mode, "index": str(index), "index_gib": round(size / 2**30, 3), "repeats": args.repeats,
                        "process_start_to_exit": summary(walls), "cpu_user_sys": summary(cpus),
                        "phases_median": phases, "blocks_checked": runs[0]["blocks_checked"],
                        "blocks_deferred": runs[0]["blocks_deferred"], "numba_loaded": runs[0]["numba_loaded"]})
        print(json.dumps(results[-1]), flush=True)
    svm, npz = query_files(root, index)
    cli = pathlib.Path(sys.executable).with_name("sparsesim")
    first_id = str(load_index_ids(index)[0])
    for mode, source in (("cli", ["--queries", str(svm)]), ("cli-npz", ["--queries", str(npz)]),
                         ("cli-query-ids", ["--query-ids", first_id])):
        walls, cpus, _ = measure([str(cli), "query", "--index", str(index), *source, "--top-k", "10", "--json"],
                                 args.repeats)
        results.append({"mode": mode, "index": str(index), "index_gib": round(size / 2**30, 3),
                        "repeats": args.repeats, "process_start_to_exit": summary(walls), "cpu_user_sys": summary(cpus)})
        print(json.dumps(results[-1]), flush=True)
    record = {"load_average": os.getloadavg(), "build": BUILD or None, "results": results, "command": " ".join(sys.argv)}
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
