"""Cost of the load-time check of derived index arrays (``indexes/verify.py``) on a 10^5-document index.

Same corpus and model as ``bench_index_load.py`` (synthetic RCV1-like, 10^5 documents, 47,236
features, 75 nonzeros each; 200,000 random W entries). Builds an exact (``strategy="corpus"``)
and an ann (``dim=64``) index under ROOT unless they are there already, then loads each one
(sha256 verified, plain and memory-mapped) three times, and reports the best load time (the
derived-array check is skipped once this content passed it) and the best time of
``verify_derived`` itself (what the first load of a content adds; for the ann index it includes
the candidate-stage check of ``indexes/recall_check.py``, also timed alone), as JSON lines.
``--kinds ann`` times an ann index already at ROOT/ann (e.g. one built over news20).

    python benchmarks/bench_verify.py /tmp/index-load
    python benchmarks/bench_verify.py /tmp/news20-index --kinds ann
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from sparsesim.data.synthetic import rcv1_like
from sparsesim.indexes import build_index, load_index
from sparsesim.indexes.recall_check import check_candidate_stage
from sparsesim.indexes.verify import verify_derived
from sparsesim.models import BilinearSimilarity


def main(root: Path, only=None):
    kinds = tuple((k, p) for k, p in (("exact", {"strategy": "corpus"}), ("ann", {"dim": 64})) if only in (None, k))
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
    for kind, _ in kinds:
        for mmap in (False, True):
            best = {"load": 1e9, "derived_check": 1e9, "candidate_check": 1e9}
            for _ in range(3):
                start = time.perf_counter()
                index = load_index(root / kind, mmap=mmap)  # skips the check once this content passed it
                best["load"] = min(best["load"], time.perf_counter() - start)
                start = time.perf_counter()
                verify_derived(index)  # fresh probes, what a first load of this content runs
                best["derived_check"] = min(best["derived_check"], time.perf_counter() - start)
                if kind == "ann":
                    start = time.perf_counter()
                    check_candidate_stage(index, np.random.default_rng())
                    best["candidate_check"] = min(best["candidate_check"], time.perf_counter() - start)
                del index
            print(json.dumps({"kind": kind, "mmap": mmap, **{k: round(v, 3) for k, v in best.items() if v < 1e9}}),
                  flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--kinds", choices=("exact", "ann"), default=None, help="time one kind only")
    args = parser.parse_args()
    main(args.root, args.kinds)
