"""benchmarks/diagnose_ann_lists.py computes the posting lists a query reads without building the
index and runs the index's candidate stage over them: its pool recall must be the recall@10 of a
real ann index with the same list length and setting (re-ranking is exact)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import diagnose_ann_lists  # noqa: E402

from sparsesim.data.synthetic import write_rcv1_like  # noqa: E402
from sparsesim.indexes.ann import AnnIndex  # noqa: E402
from sparsesim.indexes.exact import ExactIndex  # noqa: E402
from sparsesim.learners.bilinear import OASIS  # noqa: E402


def test_pool_recall_equals_a_built_index(tmp_path):
    n, m = 2000, 40
    corpus = write_rcv1_like(tmp_path / "c", n + m, n_features=2000, nnz_per_doc=30, class_vocab=200, seed=2,
                             block_size=700)
    X, Q = corpus.rows(0, n), corpus.rows(n, n + m)
    model = OASIS(n_triplets=400, random_state=0).fit(X[:800], corpus.labels()[:800]).model_
    model.save(tmp_path / "m.npz")
    out = diagnose_ann_lists.main(["--corpus", str(tmp_path / "c"), "--model", str(tmp_path / "m.npz"),
                                   "--n-total", str(n), "--prefixes", f"1000,{n}", "--lengths", "15,50",
                                   "--queries", str(m), "--reads", "4,16", "--pools", "10,40", "--block", "500",
                                   "--out", str(tmp_path / "o.json")])
    truth, _ = ExactIndex(model).fit(X).query_rows(Q, 10)
    checked = []
    for L in (15, 50):
        index = AnnIndex(model, postings_per_feature=L, target_recall=None, rerank_memory=0).fit(X)
        row = out["prefixes"][str(n)]["lengths"][str(L)]
        for entry in row["settings"]:
            found, _ = index.query_rows(Q, 10, n_postings=entry["n_postings"], sparse_pool=entry["sparse_pool"])
            real = np.mean([np.isin(truth[r], found[r]).mean() for r in range(m)])
            assert entry["pool_recall_one_byte"] == real, (L, entry)
            assert entry["pool_recall_one_byte"] <= row["truth_in_lists"]
            checked.append(real)
    assert min(checked) < 1.0 and max(checked) > 0.5  # settings that separate, not all-or-nothing
    assert set(out["prefixes"]) == {"1000", str(n)}
