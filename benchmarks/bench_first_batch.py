"""The first batch of queries of a fresh process against the warm batches (issue 43, item 2).

Builds (once per ``ROOT``) an exact and an ann index over a synthetic RCV1-like corpus under a
sparse W, saves them, then for each index runs fresh processes that load it and answer
``--batches`` batches of ``--batch`` queries (documents not in the index), timing the load and
each batch (wall and CPU):

* ``blocks-on-use``: memory-mapped, ``XDG_CACHE_HOME`` pointed at a directory holding the
  user's numba cache and record of checked indexes but no record of verified files: every
  64 KiB block a query reads is hashed and checked first (what a copied index does on its first
  load);
* ``verified``: memory-mapped, the user's cache as the build left it (the files were written by
  this user's sparsesim), so the mapped arrays need no block checks: ``load_index(DIR,
  mmap=True)``;
* ``verified, no warm-up``: the same with ``warm_up=False`` (the load of the one-shot
  ``sparsesim query --index``): the kernels' first call falls on the first batch;
* ``in memory``: ``load_index(DIR)``, every file read and hashed whole at load.

All but ``verified, no warm-up`` load the compiled kernels at load (``load_index``'s default
``warm_up=True``). Nothing is imported before the load but scipy and :mod:`sparsesim.indexes`, so
the load time includes importing numba where the load does it (and the first batch does where
it does not). All answer the same. Times come from a shared machine (the load average is
recorded); ``first_over_warm`` divides the first batch by the fastest later batch of the same
process (wall, and ``first_over_warm_cpu`` for CPU time).

    python benchmarks/bench_first_batch.py /tmp/first-batch --docs 100000

``ROOT`` may also hold indexes built elsewhere (``ROOT/exact``, ``ROOT/ann``, ``ROOT/queries.npz``),
e.g. news20 under an OASIS model with its calibrated ann index and four batches of 300 test-split
documents::

    SPARSESIM_DATA=/path/to/data python benchmarks/bench_calibration_strata.py news20 oasis --save /tmp/n20
    python benchmarks/bench_first_batch.py /tmp/n20 --out benchmarks/out/bench_first_batch_news20.json
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

from platformdirs import user_cache_dir

ROOT = pathlib.Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
import scipy.sparse as sp
from sparsesim.indexes import load_index
path, queries, batch, batches = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
mmap, warm = sys.argv[5] == "1", sys.argv[6] == "1"
Q = sp.load_npz(queries).tocsr()
start, cpu = time.perf_counter(), time.process_time()
index = load_index(path, mmap=mmap, warm_up=warm)
out = {"load_seconds": time.perf_counter() - start, "load_cpu": time.process_time() - cpu,
       "numba_at_load": "numba" in sys.modules, "guards": sorted(index._guards), "batches": []}
for b in range(batches):
    rows = Q[(b * batch) % Q.shape[0]:][:batch]
    w, c = time.perf_counter(), time.process_time()
    index.query(rows, top_k=10)
    out["batches"].append({"wall": time.perf_counter() - w, "cpu": time.process_time() - c})
print(json.dumps(out))
"""

#: mode -> (memory-mapped, warm_up, the user's record of verified files)
MODES = {"blocks-on-use": (True, True, False), "verified": (True, True, True),
         "verified, no warm-up": (True, False, True), "in memory": (False, True, True)}


def build(root: pathlib.Path, n_docs: int):
    import numpy as np
    import scipy.sparse as sp

    from sparsesim.data.synthetic import rcv1_like
    from sparsesim.indexes import build_index
    from sparsesim.models import BilinearSimilarity

    if (root / "ann" / "manifest.json").exists():
        return
    root.mkdir(parents=True, exist_ok=True)
    data = rcv1_like(n_docs + 3000, n_features=20000, nnz_per_doc=60, n_classes=20, class_vocab=800, seed=0)
    X, Q = data.X[:n_docs], data.X[n_docs:]
    W = sp.random(20000, 20000, density=2e-4, random_state=1, format="csr") * 0.1
    model = BilinearSimilarity(W)
    sp.save_npz(root / "queries.npz", Q)
    for kind in ("exact", "ann"):
        build_index(model, X, kind=kind, n_jobs=1).save(root / kind)
    np.save(root / "built.npy", np.array([n_docs]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=pathlib.Path)
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=300)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "bench_first_batch.json"))
    args = parser.parse_args()
    build(args.root, args.docs)
    results = []
    for kind in ("exact", "ann"):
        for mode, (mmap, warm, verified) in MODES.items():
            for _ in range(args.repeats):
                env = dict(os.environ)
                with tempfile.TemporaryDirectory() as cache:
                    if not verified:
                        user = pathlib.Path(user_cache_dir("sparsesim"))
                        (pathlib.Path(cache) / "sparsesim").mkdir()
                        for name in ("numba", "checked-indexes"):
                            os.symlink(user / name, pathlib.Path(cache) / "sparsesim" / name)
                        env["XDG_CACHE_HOME"] = cache
                    proc = subprocess.run([sys.executable, "-c", CHILD, str(args.root / kind),
                                           str(args.root / "queries.npz"), str(args.batch), str(args.batches),
                                           "1" if mmap else "0", "1" if warm else "0"],
                                          env=env, capture_output=True, text=True, check=True)
                record = {"kind": kind, "mode": mode, **json.loads(proc.stdout.splitlines()[-1]),
                          "load_average": os.getloadavg()}
                walls = [b["wall"] for b in record["batches"]]
                cpus = [b["cpu"] for b in record["batches"]]
                record["first_over_warm"] = walls[0] / min(walls[1:])
                record["first_over_warm_cpu"] = cpus[0] / min(cpus[1:])
                print(json.dumps({k: record[k] for k in ("kind", "mode", "first_over_warm", "first_over_warm_cpu",
                                                         "load_seconds", "load_cpu", "load_average")},
                                 default=str), flush=True)
                results.append(record)
    pathlib.Path(args.out).write_text(json.dumps({"command": " ".join(["python", *sys.argv]), "root": str(args.root), "docs": args.docs,
                                                  "results": results}, indent=2))


if __name__ == "__main__":
    main()
