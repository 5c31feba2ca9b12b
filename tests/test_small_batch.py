"""The ann index's numpy path for a few queries answers exactly what the compiled kernels answer."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.data.synthetic import rcv1_like
from sparsesim.indexes import build_index, small_batch

N, D = 1200, 2000


@pytest.fixture(scope="module")
def corpus():
    return rcv1_like(N + 100, n_features=D, nnz_per_doc=30, n_classes=5, class_vocab=300, seed=5).X


def _model(identity: bool, normalize: bool = False):
    from sparsesim.models import BilinearSimilarity

    W = sp.random(D, D, density=0.03, random_state=2, format="csr") * 0.1
    W = W + sp.diags(np.linspace(0.5, 1.5, D)) * 0.01  # some rows with many entries
    return BilinearSimilarity(W, identity=identity, normalize=normalize)


def _answers(index, Q, numpy_path: bool, monkeypatch, batch: int, **options):
    monkeypatch.setattr(small_batch, "take", lambda n: numpy_path)
    parts = [index.query_rows(Q[lo:lo + batch], 10, **options) for lo in range(0, Q.shape[0], batch)]
    return np.vstack([p[0] for p in parts]), np.vstack([p[1] for p in parts])


@pytest.mark.parametrize("identity,normalize,params,options", [
    (True, False, {}, {}),
    (False, False, {}, {}),
    (True, True, {"rerank_memory": 0}, {}),                              # every row of M scattered
    (True, False, {"rerank_memory": 64 << 20, "heavy_min_nnz": 1}, {}),  # many rows precomputed in Z
    (True, False, {"dim": 16}, {"dense_pool": 20}),                      # FAISS candidates as well
    (True, False, {}, {"sparse_pool": 3, "n_postings": 4}),              # fewer candidates than k: fillers
    (False, False, {"dim": 16}, {"n_postings": 0, "dense_pool": 5}),     # dense stage alone
    (True, False, {"read_allocation": "uniform"}, {"n_postings": 16}),   # the same reads from every list
    (True, False, {"read_allocation": "threshold"}, {"n_postings": 16}),  # reads down to one contribution
])
def test_numpy_path_equals_kernels(corpus, monkeypatch, identity, normalize, params, options):
    X, Q = corpus[:N], corpus[N:]
    index = build_index(_model(identity, normalize), X, kind="ann", target_recall=None, **params)
    want_rows, want_scores = _answers(index, Q, False, monkeypatch, 256, **options)
    for batch in (1, small_batch.SMALL_BATCH):
        rows, scores = _answers(index, Q, True, monkeypatch, batch, **options)
        np.testing.assert_array_equal(rows, want_rows)
        np.testing.assert_array_equal(scores, want_scores)  # bit for bit: the same sums in the same order
    assert np.isfinite(want_scores).all() and (want_rows >= 0).all()


def test_the_first_queries_of_a_process_take_the_numpy_path(monkeypatch):
    monkeypatch.setattr(small_batch, "_cold_left", [small_batch.COLD_QUERIES])
    monkeypatch.delitem(__import__("sys").modules, "numba", raising=False)
    assert small_batch.take(small_batch.SMALL_BATCH)
    assert not small_batch.take(small_batch.SMALL_BATCH + 1)  # a larger batch: the kernels
    taken = small_batch.SMALL_BATCH
    while small_batch.take(1):
        taken += 1
    assert taken == small_batch.COLD_QUERIES  # then the kernels, for good


def test_numpy_path_not_taken_once_numba_is_loaded(monkeypatch):
    import numba  # noqa: F401

    monkeypatch.setattr(small_batch, "_cold_left", [small_batch.COLD_QUERIES])
    assert not small_batch.take(1)


@pytest.mark.parametrize("strategy,identity", [("corpus", True), ("query", True), ("query", False)])
def test_exact_index_numpy_path_equals_kernels(corpus, monkeypatch, strategy, identity):
    X, Q = corpus[:N], corpus[N:]
    index = build_index(_model(identity), X, kind="exact", strategy=strategy)
    want_rows, want_scores = _answers(index, Q, False, monkeypatch, 256)
    for batch in (1, small_batch.SMALL_BATCH):
        rows, scores = _answers(index, Q, True, monkeypatch, batch)
        np.testing.assert_array_equal(rows, want_rows)
        np.testing.assert_array_equal(scores, want_scores)


def test_pool_selection_keeps_the_best_with_ties_to_the_smaller_document():
    """The kernels' top selection (a bounded heap) against a full sort by (-value, document)."""
    from sparsesim.indexes.numba_kernels import top_of

    rng = np.random.default_rng(11)
    for trial in range(400):
        n, k = int(rng.integers(1, 300)), int(rng.integers(1, 80))
        vals = rng.integers(0, 4, n).astype(np.float64) if trial % 2 else rng.standard_normal(n)
        docs = rng.permutation(5 * n)[:n].astype(np.int64)
        want = np.lexsort((docs, -vals))[:k]
        np.testing.assert_array_equal(top_of(docs, vals, n, k), want)


def test_reused_query_scratch_leaves_no_trace(corpus, monkeypatch):
    """The kernels' per-thread scratch is reused across calls, indexes of other sizes and threads:
    answers equal those of a fresh process-state, and the scratch is left clean."""
    from sparsesim.indexes.base import query_scratch

    monkeypatch.setattr(small_batch, "take", lambda n: False)
    X, Q = corpus[:N], corpus[N:]
    big = build_index(_model(True), X, kind="ann", target_recall=None)
    small = build_index(_model(True), X[:400], kind="ann", target_recall=None)
    want_big = big.query_rows(Q, 10)
    want_small = small.query_rows(Q, 10)
    for _ in range(2):  # alternate sizes, one query at a time and in blocks, 1 and 2 threads
        for index, want in ((big, want_big), (small, want_small)):
            singles = [index.query_rows(Q[i:i + 1], 10) for i in range(0, Q.shape[0], 7)]
            np.testing.assert_array_equal(np.vstack([s[0] for s in singles]), want[0][::7])
            for jobs in (1, 2):
                rows, scores = index.query_rows(Q, 10, n_jobs=jobs)
                np.testing.assert_array_equal(rows, want[0])
                np.testing.assert_array_equal(scores, want[1])
    acc, _, _ = query_scratch.sparse(small.n_documents)
    qm, stamp = query_scratch.rerank(small.n_documents, small.n_features)
    assert np.isnan(acc).all() and not qm.any()
    assert stamp.max() < query_scratch.generations(0)
