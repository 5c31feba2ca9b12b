"""Start-up cost: the CLI and a one-off index query import only what they use.

Asserted on the modules a fresh process holds (not on time, which depends on the machine): the
measured cost of each heavy import is in docs/retrieval.md ("Footprint and load time").
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.data.synthetic import rcv1_like
from sparsesim.indexes import build_index
from sparsesim.models import BilinearSimilarity

# imported only by the commands and code paths that need them
HEAVY = ("sklearn", "faiss", "matplotlib", "dask", "distributed", "starlette", "uvicorn", "numba", "joblib")

REPORT = "import sys, json; print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))"


def _heavy_modules_after(code: str) -> list:
    out = subprocess.run([sys.executable, "-c", code + "\n" + REPORT.format(heavy=HEAVY)], capture_output=True,
                         text=True, check=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _cli_query(args: list) -> tuple[list, list]:
    """Run ``sparsesim query ARGS --top-k 5 --json`` in a fresh interpreter; returns its JSON answers
    and the heavy libraries it had imported at exit."""
    argv = ["sparsesim", "query", *args, "--top-k", "5", "--json"]
    code = (f"import sys\nfrom sparsesim.cli.app import main\nsys.argv = {argv!r}\n"
            f"try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n")
    out = subprocess.run([sys.executable, "-c", code + REPORT.format(heavy=HEAVY)], capture_output=True, text=True,
                         check=True, timeout=300)
    lines = out.stdout.strip().splitlines()
    return [json.loads(line) for line in lines[:-1]], json.loads(lines[-1])


def test_cli_module_imports_no_heavy_library():
    assert _heavy_modules_after("import sparsesim.cli.app") == []


@pytest.mark.parametrize("kind,params", [("ann", {"target_recall": None, "n_postings": 64, "sparse_pool": 30}),
                                         ("exact", {"strategy": "corpus"}), ("exact", {"strategy": "query"})])
def test_index_query_from_the_cli_imports_no_heavy_library(tmp_path, kind, params):
    from sklearn.datasets import dump_svmlight_file

    data = rcv1_like(400, n_features=600, nnz_per_doc=20, n_classes=4, class_vocab=100, seed=0)
    model = BilinearSimilarity(sp.random(600, 600, density=0.02, random_state=0, format="csr"))
    index = build_index(model, data.X, kind=kind, **params)
    index.save(tmp_path / "idx")
    dump_svmlight_file(data.X[:2], data.y[:2], str(tmp_path / "q.svm"), zero_based=False)  # read as one-based
    want = index.query(data.X[:2], top_k=5)[0]
    answers, heavy = _cli_query(["--index", str(tmp_path / "idx"), "--queries", str(tmp_path / "q.svm")])
    assert [[r["id"] for r in a["results"]] for a in answers] == [list(map(int, ids)) for ids in want]
    # scikit-learn (and the joblib it imports) only for its svmlight parser of the query file
    assert set(heavy) <= {"sklearn", "joblib"}
    assert np.isfinite([r["score"] for a in answers for r in a["results"]]).all()


def test_query_by_document_id_from_the_cli_imports_no_heavy_library(tmp_path):
    """``query --index DIR --query-ids`` reads no query file: no parser, no numba, nothing heavy."""
    data = rcv1_like(300, n_features=500, nnz_per_doc=20, n_classes=4, class_vocab=100, seed=0)
    model = BilinearSimilarity(sp.random(500, 500, density=0.02, random_state=0, format="csr"))
    index = build_index(model, data.X, kind="ann", target_recall=None, n_postings=64, sparse_pool=30)
    index.save(tmp_path / "idx")
    want = index.query_similar([4, 9], top_k=5)[0]
    answers, heavy = _cli_query(["--index", str(tmp_path / "idx"), "--query-ids", "4,9"])
    assert [a["query"] for a in answers] == [4, 9]
    assert [[r["id"] for r in a["results"]] for a in answers] == [list(map(int, ids)) for ids in want]
    assert all(a["query"] not in [r["id"] for r in a["results"]] for a in answers)
    assert heavy == []
