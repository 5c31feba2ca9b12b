"""A fresh process's ``load_index`` leaves the query kernels loaded: its first batch of queries
loads or compiles no kernel (asserted on numba's dispatchers, not on time; the measured first and
warm batches are in docs/retrieval.md, "Fast from the first query")."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import scipy.sparse as sp

from sparsesim.data.synthetic import rcv1_like
from sparsesim.indexes import build_index
from sparsesim.models import BilinearSimilarity

# runs in a fresh interpreter: load, list the kernels numba holds, answer 40 queries (past the
# numpy path of the first few), list them again
CHILD = r"""
import json, sys
import scipy.sparse as sp
from sparsesim.indexes import load_index

path, queries, mmap, warm = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4] == "1"
Q = sp.load_npz(queries).tocsr()
index = load_index(path, mmap=mmap, warm_up=warm)
numba_at_load = "numba" in sys.modules


def loaded_kernels():
    if "numba" not in sys.modules:
        return {}
    from numba.core.dispatcher import Dispatcher
    from sparsesim.indexes import compact_numba_kernels, numba_kernels

    return {f"{mod.__name__}.{name}": [str(sig) for sig in getattr(mod, name).signatures]
            for mod in (numba_kernels, compact_numba_kernels) for name in dir(mod)
            if isinstance(getattr(mod, name), Dispatcher) and getattr(mod, name).signatures}


at_load = loaded_kernels()
index.query(Q, top_k=10)
print(json.dumps({"numba_at_load": numba_at_load, "at_load": at_load, "after_query": loaded_kernels()}))
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("warm")
    data = rcv1_like(640, n_features=800, nnz_per_doc=20, n_classes=4, class_vocab=120, seed=0)
    model = BilinearSimilarity(sp.random(800, 800, density=0.02, random_state=0, format="csr"))
    X, Q = data.X[:600], data.X[600:]
    sp.save_npz(root / "queries.npz", sp.csr_matrix(Q))
    build_index(model, X, kind="ann", target_recall=None, n_postings=64, sparse_pool=30).save(root / "ann")
    build_index(model, X, kind="exact", strategy="corpus").save(root / "exact-corpus")
    build_index(model, X, kind="exact", strategy="query").save(root / "exact-query")
    return root


def _fresh(saved, name, mmap, warm) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(saved / name), str(saved / "queries.npz"),
                          "1" if mmap else "0", "1" if warm else "0"],
                         capture_output=True, text=True, check=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name,mmap", [("ann", True), ("ann", False), ("exact-corpus", True),
                                       ("exact-query", False)])
def test_fresh_load_has_the_query_kernels_loaded(saved, name, mmap):
    got = _fresh(saved, name, mmap, warm=True)
    assert got["numba_at_load"] and got["at_load"]  # the load loaded kernels
    # the first batch loads or compiles no kernel (and no other signature of one) that the load did not
    assert got["after_query"] == got["at_load"]


def test_load_without_warm_up_leaves_the_kernels_to_the_first_batch(saved):
    """``warm_up=False`` (what the one-shot ``sparsesim query --index`` uses) imports no numba at
    load; a batch past the numpy path then loads its kernels itself."""
    got = _fresh(saved, "ann", mmap=True, warm=False)
    assert not got["numba_at_load"] and got["at_load"] == {}
    assert got["after_query"]
