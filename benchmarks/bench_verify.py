"""Cost of the load-time check of derived index arrays (``indexes/verify.py``) on a 10^5-document index.

Same corpus and model as ``bench_index_load.py`` (synthetic RCV1-like, 10^5 documents, 47,236
features, 75 nonzeros each; 200,000 random W entries). Builds an exact (``strategy="corpus"``)
and an ann (``dim=64``) index under ROOT unless they are there already, then loads each one
(sha256 verified, plain and memory-mapped) three times and reports the best total load time and
the best time spent in ``verify_derived``, as JSON lines.

    python benchmarks/bench_verify.py /tmp/index-load
"""

import json
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

import sparsesim.indexes as package
from sparsesim.data.synthetic import rcv1_like
from sparsesim.indexes import build_index, load_index
from sparsesim.models import BilinearSimilarity


def main(root: Path):
    kinds = (("exact", {"strategy": "corpus"}), ("ann", {"dim": 64}))
    if not all((root / kind / "manifest.json").exists() for kind, _ in kinds):
        data = rcv1_like(100_000, n_features=47236, nnz_per_doc=75, n_classes=20, class_vocab=2000, seed=0)
        rng = np.random.default_rng(0)
        W = sp.csr_matrix((rng.normal(0, 0.01, 200_000),
                           (rng.integers(0, 47236, 200_000), rng.integers(0, 47236, 200_000))), shape=(47236, 47236))
        model = BilinearSimilarity(W)
        for kind, params in kinds:
            if not (root / kind / "manifest.json").exists():
                build_index(model, data.X, kind=kind, **params).save(root / kind, overwrite=True)
        del data
    original = package.verify_derived
    for kind, _ in kinds:
        for mmap in (False, True):
            best = {"total": 1e9, "derived_check": 1e9}
            for _ in range(3):
                spent = [0.0]

                def timed(*args, **kwargs):
                    start = time.perf_counter()
                    original(*args, **kwargs)
                    spent[0] += time.perf_counter() - start

                package.verify_derived = timed
                start = time.perf_counter()
                index = load_index(root / kind, mmap=mmap)
                total = time.perf_counter() - start
                package.verify_derived = original
                best = {"total": min(best["total"], total), "derived_check": min(best["derived_check"], spent[0])}
                del index
            print(json.dumps({"kind": kind, "mmap": mmap, **{k: round(v, 3) for k, v in best.items()}}), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
