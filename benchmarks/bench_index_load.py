"""Cost of the load-time integrity and structural checks of a 10^5-document index.

Builds an exact (corpus strategy) and an ann (dim=64) index over a synthetic RCV1-like corpus
(10^5 documents, 47,236 features, 75 nonzeros each) under a model with 200,000 random W entries,
saves them under ROOT, then times ``load_index`` (best of 3) with and without sha256 verification
and memory-mapping, and the structural checks (``check_index_arrays``, ``check_faiss``) alone.
Peak memory ~1.7 GB.

    python benchmarks/bench_index_load.py /tmp/index-load
"""
import time, json, sys, numpy as np, scipy.sparse as sp
from sparsesim.data.synthetic import rcv1_like
from sparsesim.models import BilinearSimilarity
from sparsesim.indexes import build_index, load_index, read_manifest
import sparsesim.indexes as package
from sparsesim.indexes import storage
root = sys.argv[1]
data = rcv1_like(100_000, n_features=47236, nnz_per_doc=75, n_classes=20, class_vocab=2000, seed=0)
X = data.X
rng = np.random.default_rng(0)
W = sp.csr_matrix((rng.normal(0, 0.01, 200_000), (rng.integers(0, 47236, 200_000), rng.integers(0, 47236, 200_000))),
                  shape=(47236, 47236))
model = BilinearSimilarity(W)
print("corpus", X.shape, X.nnz, flush=True)
for kind, params in (("exact", {"strategy": "corpus"}), ("ann", {"dim": 64})):
    t = time.perf_counter(); idx = build_index(model, X, kind=kind, **params); print(kind, "build", round(time.perf_counter()-t,1), flush=True)
    idx.save(f"{root}/{kind}")
    del idx
    for mmap in (False, True):
        for verify in (True, False):
            best = {}
            for rep in range(3):
                orig = storage.check_index_arrays
                spent = [0.0]
                def timed(*a, **k):
                    s = time.perf_counter(); r = orig(*a, **k); spent[0] += time.perf_counter() - s; return r
                storage.check_index_arrays = timed
                origf = storage.check_faiss
                fspent = [0.0]
                def timedf(*a, **k):
                    s = time.perf_counter(); r = origf(*a, **k); fspent[0] += time.perf_counter() - s; return r
                storage.check_faiss = package.check_faiss = timedf
                t = time.perf_counter(); li = load_index(f"{root}/{kind}", mmap=mmap, verify=verify); total = time.perf_counter() - t
                storage.check_index_arrays = orig; storage.check_faiss = package.check_faiss = origf
                del li
                for k, v in (("total", total), ("arrays", spent[0]), ("faiss", fspent[0])):
                    best[k] = min(best.get(k, 1e9), v)
            print(json.dumps({"kind": kind, "mmap": mmap, "verify_sha256": verify, **{k: round(v, 3) for k, v in best.items()}}), flush=True)
