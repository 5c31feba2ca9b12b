"""The ann index's narrow copy of W (16-bit columns, float32 values, float64 entries apart):
exact round trip, bit-identical scores, the previous format, hostile files."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.exceptions import FileFormatError
from sparsesim.indexes import ExactIndex, build_index, load_index, small_batch
from sparsesim.indexes.ann_rerank_w import NarrowW
from sparsesim.models import BilinearSimilarity


def _compact_w(d: int, nnz: int, seed: int) -> sp.csr_matrix:
    """A W as the compact learners leave it: float32 numbers off the diagonal, float64 on it."""
    rng = np.random.default_rng(seed)
    keys = np.unique(rng.integers(0, d * d, size=nnz))
    rows, cols = keys // d, keys % d
    off = rows != cols
    vals = (rng.uniform(-0.4, 0.6, size=int(off.sum())) * 0.25).astype(np.float32).astype(np.float64)
    on = np.sort(rng.choice(d, size=min(d, nnz // 20), replace=False))  # a diagonal entry in some rows
    diag = rng.uniform(0.01, 0.3, on.size) / 3.0  # not float32 numbers
    W = sp.csr_matrix((np.concatenate([vals, diag]), (np.concatenate([rows[off], on]),
                                                      np.concatenate([cols[off], on]))), shape=(d, d))
    W.sort_indices()
    W.indptr = W.indptr.astype(np.int64)
    return W


def _same_csr(A, B) -> bool:
    return (np.array_equal(A.indptr, B.indptr) and np.array_equal(A.indices, B.indices)
            and np.array_equal(A.data, B.data) and A.data.dtype == B.data.dtype == np.float64)


@pytest.mark.parametrize("d,columns", [(300, np.uint16), (1 << 16, np.uint16), ((1 << 16) + 3, np.int32)])
def test_split_and_widen_give_back_the_model_bit_for_bit(d, columns):
    W = _compact_w(d, 20_000 if d > 1000 else 4_500, seed=d % 11)
    narrow = NarrowW.split(W)
    assert narrow.indices.dtype == columns and narrow.data.dtype == np.float32
    assert narrow.rest_pos.size == np.count_nonzero(W.diagonal())  # the diagonal, and nothing else, in float64
    assert np.all(narrow.data[narrow.rest_pos] == 0)
    back = narrow.widen()
    assert _same_csr(back, W) and back.indices.dtype == np.int32
    model = BilinearSimilarity(W, identity=True)
    assert BilinearSimilarity(back, identity=True).checksum() == model.checksum()
    stored = sum(a.nbytes for a in narrow.arrays().values())
    assert stored == NarrowW.stored_bytes(W)
    assert stored < (np.dtype(columns).itemsize + 4 + 1) * W.nnz + 16 * (d + 1) + 16 * d


def test_a_float64_model_stays_wide():
    W = sp.random(200, 200, density=0.1, random_state=0, format="csr")  # float64 values
    assert NarrowW.split(W) is None
    assert NarrowW.stored_bytes(W) == 12 * W.nnz + 8 * 201


def test_kernel_and_numpy_rerank_agree_on_both_forms():
    from sparsesim.indexes import numba_kernels
    from sparsesim.indexes.base import query_scratch

    d, n, k = 400, 300, 7
    W = _compact_w(d, 8_000, seed=3)
    X = sp.random(n, d, density=0.03, random_state=4, format="csr")
    X.indices = X.indices.astype(np.int32)
    X.indptr = X.indptr.astype(np.int64)
    Q = sp.random(12, d, density=0.04, random_state=5, format="csr")
    heavy = np.array([3, 17, 250], dtype=np.int64)
    pos = np.full(d, -1, np.int64)
    pos[heavy] = np.arange(heavy.size)
    Z = (X @ (sp.identity(d, format="csr") + W)[heavy].T).toarray()
    cands = np.random.default_rng(6).integers(-1, n, size=(12, 25)).astype(np.int64)
    out = []
    for form in (NarrowW.split(W), NarrowW.of_model(W)):
        docs, scores = np.full((12, k), -1, np.int64), np.full((12, k), -np.inf)
        qm, stamp = query_scratch.rerank(n, d)
        numba_kernels.rerank(Q.indptr, Q.indices, Q.data, *form.kernel_args(), True, pos, Z, X.indptr, X.indices,
                             X.data, cands, k, docs, scores, qm, stamp, query_scratch.generations(12))
        assert not qm.any()  # the buffer is left clear
        out.append((docs, scores))
        np_docs, np_scores = small_batch.rerank(Q, form, True, pos, Z, X, cands, k)
        np.testing.assert_array_equal(np_docs, docs)
        np.testing.assert_array_equal(np_scores, scores)
    np.testing.assert_array_equal(out[0][0], out[1][0])
    np.testing.assert_array_equal(out[0][1], out[1][1])  # bit-identical, not only close


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    from sparsesim.data.synthetic import rcv1_like

    X = rcv1_like(600, n_features=800, nnz_per_doc=20, n_classes=4, class_vocab=150, seed=4).X
    model = BilinearSimilarity(_compact_w(800, 19_000, seed=1), identity=True)
    index = build_index(model, X, kind="ann", target_recall=None, n_postings=32, sparse_pool=40, rerank_memory=0)
    path = tmp_path_factory.mktemp("narrow") / "idx"
    index.save(path)
    return path, X, model, index.query_rows(X[:40], 10)


def _data(path):
    return path / json.loads((path / "manifest.json").read_text())["data_dir"]


def test_saved_index_stores_w_narrow_and_answers_bit_identically(saved):
    path, X, model, (rows, scores) = saved
    data = _data(path)
    assert np.load(data / "model.W.indices.npy", mmap_mode="r").dtype == np.uint16
    assert np.load(data / "model.W.data.npy", mmap_mode="r").dtype == np.float32
    w_bytes = sum(f.stat().st_size for f in data.glob("model.W.*.npy"))
    assert w_bytes < 0.6 * (12 * model.W.nnz + 8 * 801)
    for kwargs in ({"mmap": True}, {"mmap": False}, {"mmap": True, "model": model}):
        index = load_index(path, **kwargs)
        got_rows, got_scores = index.query_rows(X[:40], 10)
        np.testing.assert_array_equal(got_rows, rows)
        np.testing.assert_array_equal(got_scores, scores)
        assert _same_csr(index.model.W, model.W) and index.model.checksum() == model.checksum()
    # the scores are the exact bilinear scores, the top 10 the exact one on these queries (h = 0:
    # every row of W scattered from the narrow copy)
    S = (X[:40] @ model.M @ X.T).toarray()
    np.testing.assert_allclose(scores, np.take_along_axis(S, rows, axis=1), rtol=1e-12, atol=1e-12)
    exact_rows = ExactIndex(model).fit(X).query_rows(X[:40], 10)[0]
    assert np.mean([np.isin(r, t).mean() for r, t in zip(rows, exact_rows)]) >= 0.9
    # a saved-again loaded index writes the same W
    again = path.parent / "again"
    load_index(path, mmap=True).save(again)
    for name in ("indices", "data", "rest_pos", "rest_val"):
        np.testing.assert_array_equal(np.load(_data(again) / f"model.W.{name}.npy"),
                                      np.load(data / f"model.W.{name}.npy"))


def _rewrite(path, name, edit):
    from indextools import rehash_index

    data = _data(path)
    arr = np.load(data / f"{name}.npy")
    (data / f"{name}.npy").unlink()
    np.save(data / f"{name}.npy", edit(arr))
    rehash_index(path)


def _at(i, value):
    return lambda a: np.where(np.arange(a.size) == i, value, a).astype(a.dtype)


@pytest.mark.parametrize("name,edit,match", [
    ("model.W.rest_pos", lambda a: a + 1, "outside its row|not the model"),
    ("model.W.rest_pos", lambda a: a[::-1].copy(), "outside its row|increasing"),
    ("model.W.rest_ptr", _at(5, 10**6), "monotonically"),
    ("model.W.rest_val", _at(0, np.nan), "NaN"),
    ("model.W.rest_val", lambda a: a[:-1], "model.W|monotonically"),
    ("model.W.indices", _at(7, 0xFFFF), "outside"),
    ("model.W.indices", lambda a: a.astype(np.int32), "expected 1-D uint16"),
    ("model.W.data", lambda a: a.astype(np.float64), "expected 1-D float32"),
    ("model.W.data", _at(2, np.inf), "NaN or infinite"),
    ("model.W.data", lambda a: a[:-3], "lengths|do not form|monoton"),
    ("model.W.data", lambda a: a * np.float32(1.5), None),  # consistent files, another model's values
])
def test_hostile_narrow_w_refused_at_load(saved, tmp_path, name, edit, match):
    path = saved[0]
    victim = tmp_path / "victim"
    shutil.copytree(path, victim)
    _rewrite(victim, name, edit)
    with pytest.raises(FileFormatError, match=match):
        load_index(victim)


def test_hostile_narrow_w_refused_memory_mapped_before_the_kernel_reads_it(saved, tmp_path):
    path, X = saved[0], saved[1]
    victim = tmp_path / "victim"
    shutil.copytree(path, victim)
    _rewrite(victim, "model.W.indices", lambda a: np.full_like(a, 0xFFFF))
    with pytest.raises(FileFormatError, match="outside"):
        index = load_index(victim, mmap=True)
        index.query(X[:20], top_k=5)


def test_the_previous_format_with_a_csr_w_still_loads(saved, tmp_path):
    """A format-4 ann index stores W as the model's CSR: it loads and answers as before."""
    from indextools import rehash_index

    path, X, model, (rows, scores) = saved
    old = tmp_path / "old"
    shutil.copytree(path, old)
    data = _data(old)
    for name in ("rest_ptr", "rest_pos", "rest_val"):
        (data / f"model.W.{name}.npy").unlink()
    for name, arr in (("indptr", model.W.indptr.astype(np.int64)), ("indices", model.W.indices.astype(np.int32)),
                      ("data", model.W.data)):
        (data / f"model.W.{name}.npy").unlink()
        np.save(data / f"model.W.{name}.npy", arr)

    def as_format_4(manifest):
        manifest["format_version"] = 4
        for name in ("rest_ptr", "rest_pos", "rest_val"):
            manifest["files"].pop(f"model.W.{name}.npy")

    rehash_index(old, as_format_4)  # (the block digests of the removed files are dropped with them)
    rehash_index(old)
    index = load_index(old, mmap=True)
    got_rows, got_scores = index.query_rows(X[:40], 10)
    np.testing.assert_array_equal(got_rows, rows)
    np.testing.assert_array_equal(got_scores, scores)


def test_default_index_fills_but_keeps_within_one_and_a_half_times_corpus_plus_model(tmp_path):
    """The default Z budget counts W as stored (narrow) and, once the lists are built, their real
    size: the saved index ends just under 1.5 x (corpus + model as CSR files)."""
    from sparsesim.data.synthetic import rcv1_like

    X = rcv1_like(3000, n_features=300, nnz_per_doc=20, n_classes=4, class_vocab=80, seed=2).X
    model = BilinearSimilarity(_compact_w(300, 27_000, seed=5), identity=True)
    index = build_index(model, X, kind="ann", target_recall=None, n_postings=8, sparse_pool=30,
                        postings_per_feature=16, heavy_min_nnz=1)
    index.save(tmp_path / "idx")
    disk = sum(f.stat().st_size for f in (tmp_path / "idx").rglob("*") if f.is_file())
    ratio = disk / (12 * X.nnz + 8 * 3001 + 12 * model.W.nnz + 8 * 301)
    assert 1.4 <= ratio <= 1.5
    assert index.Z_.shape[1] == index.heavy_rows_.size > 0
    # the rows added after the postings were built hold the same values as a build that chose them at once
    again = build_index(model, X, kind="ann", target_recall=None, n_postings=8, sparse_pool=30,
                        postings_per_feature=16, heavy_min_nnz=1, rerank_memory=index.rerank_memory_)
    np.testing.assert_array_equal(again.heavy_rows_, index.heavy_rows_)
    np.testing.assert_array_equal(again.Z_, index.Z_)
