"""The ann index's compact posting lists: encoding, the compiled and numpy readers, hostile files."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.exceptions import FileFormatError
from sparsesim.indexes import build_index, load_index, small_batch
from sparsesim.indexes.ann_postings import CompactPostings


def _impact_lists(d: int, n: int, length: int, seed: int) -> sp.csr_matrix:
    """Random impact-ordered lists (positive values, largest first) over ``n`` documents."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, length + 1, size=d)
    indptr = np.zeros(d + 1, np.int64)
    np.cumsum(lengths, out=indptr[1:])
    docs = np.concatenate([rng.choice(n, size=k, replace=False) for k in lengths]).astype(np.int32)
    vals = np.concatenate([np.sort(rng.gamma(2.0, 1.0, size=k))[::-1] for k in lengths]).astype(np.float32)
    P = sp.csr_matrix((d, n), dtype=np.float32)
    P.indptr, P.indices, P.data = indptr, docs, vals
    return P


@pytest.mark.parametrize("n,layout", [(1000, "u16"), (1 << 16, "u16"), ((1 << 16) + 1, "u24"),
                                      (3_000_000, "u24"), ((1 << 24) + 5, "i32")])
def test_encoding_keeps_documents_and_order_and_bounds_the_score_error(n, layout):
    P = _impact_lists(50, n, 40, seed=n % 97)
    C = CompactPostings.from_csr(P)
    back = C.to_csr()
    np.testing.assert_array_equal(back.indptr, P.indptr)
    np.testing.assert_array_equal(back.indices, P.indices)
    lists = np.repeat(np.arange(50), np.diff(P.indptr))
    half = C.step_[lists].astype(np.float64) / 2
    err = np.abs(back.data.astype(np.float64) - P.data)
    assert np.all(err <= half * (1 + 1e-5) + 1e-6 * np.abs(P.data))
    assert np.all(C.codes[P.indptr[1:][np.diff(P.indptr) > 0] - 1] == 0)  # every list's tail is code 0
    step = np.diff(C.codes.astype(np.int16))
    inner = np.ones(step.size, bool)
    inner[P.indptr[1:-1][(P.indptr[1:-1] > 0) & (P.indptr[1:-1] < P.nnz)] - 1] = False
    assert np.all(step[inner] <= 0)  # impact order kept
    stored = C.arrays()
    assert ("postings.ids_hi" in stored) == (layout == "u24") and ("postings.ids32" in stored) == (layout == "i32")
    per_list = ("postings.indptr", "postings.floor", "postings.step", "postings.error")
    per_entry = sum(a.nbytes for k, a in stored.items() if k not in per_list) / max(P.nnz, 1)
    assert per_entry == {"u16": 3, "u24": 4, "i32": 5}[layout]
    again = CompactPostings.from_arrays(stored, P.shape)
    np.testing.assert_array_equal(again.to_csr().indices, P.indices)


def test_kernel_and_numpy_reader_agree_and_refuse_outside_ids():
    from sparsesim.indexes import compact_numba_kernels
    from sparsesim.indexes.base import query_scratch

    n = 70_000  # ids in two arrays
    P = _impact_lists(300, n, 60, seed=1)
    C = CompactPostings.from_csr(P)
    rng = np.random.default_rng(2)
    Q = sp.random(20, 300, density=0.05, random_state=3, format="csr")
    Q.data = rng.standard_normal(Q.nnz)
    for weighted in (True, False, compact_numba_kernels.THRESHOLD):
        out = np.empty((20, 15), np.int64)
        bad = compact_numba_kernels.compact_sparse_candidates(Q.indptr, Q.indices, Q.data, *C.kernel_args(), n, 8, weighted,
                                                         15, out, *query_scratch.sparse(n))
        assert bad == 0
        np.testing.assert_array_equal(out, small_batch.sparse_candidates(Q, C, n, 8, 15, weighted))
    # a hostile id that the per-block check of the high byte lets through: in [n, 2^16 * (hi + 1))
    C.ids_hi[:] = (n - 1) >> 16
    C.ids[:] = 0xFFFF
    out = np.empty((20, 15), np.int64)
    assert compact_numba_kernels.compact_sparse_candidates(Q.indptr, Q.indices, Q.data, *C.kernel_args(), n, 8, True, 15,
                                                      out, *query_scratch.sparse(n)) > 0
    with pytest.raises(FileFormatError, match="outside"):
        small_batch.sparse_candidates(Q, C, n, 8, 15, True)


def test_threshold_reads_are_each_querys_largest_contributions_within_its_budget():
    """read_allocation="threshold": the entries a query reads are, across its lists, those with the
    largest |q_i| x (decoded score) -- no unread entry of a list prefix contributes more than a read
    one -- and they fill the budget of ``limit`` x (its terms) to within 1/32 without passing it;
    the kernel and its numpy twin read the same counts; a file whose codes are not impact-ordered
    still gets counts within each list's length."""
    from sparsesim.indexes import compact_numba_kernels as CK

    # the numpy twin keeps its own copy of the search's constants (it must not import numba)
    assert (small_batch.THRESHOLD, small_batch._THRESHOLD_STEPS, small_batch._THRESHOLD_SLACK) == \
        (CK.THRESHOLD, CK.THRESHOLD_STEPS, CK.THRESHOLD_SLACK)
    n = 500
    C = CompactPostings.from_csr(_impact_lists(200, n, 300, seed=5))
    rng = np.random.default_rng(6)
    Q = sp.random(40, 200, density=0.06, random_state=7, format="csr")
    Q.data = rng.standard_normal(Q.nnz)
    lengths = np.diff(C.indptr)
    width = int(np.diff(Q.indptr).max())
    for limit in (3, 20, 80):
        for r in range(Q.shape[0]):
            terms = Q.indices[Q.indptr[r]:Q.indptr[r + 1]].astype(np.int64)
            q = Q.data[Q.indptr[r]:Q.indptr[r + 1]]
            if not terms.size:
                continue
            got = np.empty(width, np.int64)
            CK.threshold_reads(Q.indptr, Q.indices, Q.data, C.indptr, C.codes, C.floor_, C.step_, r, limit,
                               got, np.empty(width, np.int64), np.empty(width, np.int64))
            got = got[:terms.size]
            np.testing.assert_array_equal(got, small_batch.threshold_reads(terms, q, C, limit))
            budget = limit * terms.size
            caps = np.minimum(lengths[terms], budget)
            assert (got >= 0).all() and (got <= caps).all()
            if caps.sum() <= budget:
                np.testing.assert_array_equal(got, caps)
                continue
            assert budget * 31 / 32 <= got.sum() <= budget
            read, unread = [], []
            for i, a, k, cap in zip(terms, np.abs(q), got, caps):  # the definition, list by list
                start = C.indptr[i]
                contrib = a * (np.float64(C.floor_[i]) + C.codes[start:start + cap].astype(np.float64) * np.float64(C.step_[i]))
                read.append(contrib[:k])
                unread.append(contrib[k:])
            read, unread = np.concatenate(read), np.concatenate(unread)
            assert not read.size or not unread.size or read.min() >= unread.max()
    C.codes[:] = rng.integers(0, 256, C.codes.size)  # not impact-ordered: still within each list
    for r in range(Q.shape[0]):
        terms = Q.indices[Q.indptr[r]:Q.indptr[r + 1]].astype(np.int64)
        got = np.empty(width, np.int64)
        CK.threshold_reads(Q.indptr, Q.indices, Q.data, C.indptr, C.codes, C.floor_, C.step_, r, 20, got,
                           np.empty(width, np.int64), np.empty(width, np.int64))
        assert (got[:terms.size] >= 0).all() and (got[:terms.size] <= lengths[terms]).all()
    # ties at the top above the budget: every entry contributes the same, no threshold reads
    # within the budget, so each list reads its entries equal to the largest contribution
    C.codes[:] = 200
    C.floor_[:] = 0.0
    C.step_[:] = 0.5
    Q.data[:] = 1.0
    for r in range(Q.shape[0]):
        terms = Q.indices[Q.indptr[r]:Q.indptr[r + 1]].astype(np.int64)
        if not terms.size:
            continue
        got = np.empty(width, np.int64)
        CK.threshold_reads(Q.indptr, Q.indices, Q.data, C.indptr, C.codes, C.floor_, C.step_, r, 3, got,
                           np.empty(width, np.int64), np.empty(width, np.int64))
        caps = np.minimum(lengths[terms], 3 * terms.size)
        np.testing.assert_array_equal(got[:terms.size], caps)
        np.testing.assert_array_equal(small_batch.threshold_reads(terms, Q.data[Q.indptr[r]:Q.indptr[r + 1]], C, 3),
                                      caps)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    from sparsesim.data.synthetic import rcv1_like
    from sparsesim.models import BilinearSimilarity

    X = rcv1_like(600, n_features=800, nnz_per_doc=20, n_classes=4, class_vocab=150, seed=4).X
    W = sp.random(800, 800, density=0.02, random_state=1, format="csr") * 0.1
    model = BilinearSimilarity(W, identity=True)
    path = tmp_path_factory.mktemp("compact") / "idx"
    build_index(model, X, kind="ann", target_recall=None, n_postings=32, sparse_pool=40).save(path)
    return path, X


def _rewrite(path, name, edit, manifest_edit=None):
    from indextools import rehash_index

    data = path / json.loads((path / "manifest.json").read_text())["data_dir"]
    arr = np.load(data / f"{name}.npy")
    (data / f"{name}.npy").unlink()
    np.save(data / f"{name}.npy", edit(arr))
    rehash_index(path, manifest_edit)


def test_hostile_postings_refused_at_load(saved, tmp_path):
    import shutil

    path, X = saved
    cases = {"ids": lambda a: np.full_like(a, 0xFFFF),
             "codes": lambda a: a[:-1],
             "indptr": lambda a: np.where(np.arange(a.size) == 3, a[-1] + 7, a),
             "step": lambda a: np.where(np.arange(a.size) == 0, np.nan, a).astype(a.dtype)}
    for name, edit in cases.items():
        victim = tmp_path / name
        shutil.copytree(path, victim)
        _rewrite(victim, f"postings.{name}", edit)
        with pytest.raises(FileFormatError):
            load_index(victim)
    # a memory-mapped load checks the ids of every block a query reads, before the kernel does
    victim = tmp_path / "mmap"
    shutil.copytree(path, victim)
    _rewrite(victim, "postings.ids", lambda a: np.full_like(a, 0xFFFF))
    with pytest.raises(FileFormatError, match="outside"):
        load_index(victim, mmap=True).query(X[:20], top_k=5)


def test_ann_index_of_the_previous_format_asks_for_a_rebuild(saved, tmp_path):
    import shutil

    path, _ = saved
    old = tmp_path / "old"
    shutil.copytree(path, old)

    def as_format_3(manifest):
        manifest["format_version"] = 3

    from indextools import rehash_index

    rehash_index(old, as_format_3)
    with pytest.raises(FileFormatError, match="rebuild it with `sparsesim index build`"):
        load_index(old)


def test_compact_index_answers_with_exact_scores_and_is_smaller(saved):
    from sparsesim.indexes import ExactIndex

    path, X = saved
    index = load_index(path)
    rows, scores = index.query_rows(X[:30], 10)
    exact = ExactIndex(index.model).fit(X)
    want = exact.query_rows(X[:30], 10)[1]
    hit = np.mean([np.isin(r, t).mean() for r, t in zip(rows, exact.query_rows(X[:30], 10)[0])])
    assert hit >= 0.9
    # each returned score is the exact bilinear score of its document
    S = (X[:30] @ index.model.M @ X.T).toarray() if hasattr(index.model, "M") else None
    np.testing.assert_allclose(scores, np.take_along_axis(S, rows, axis=1), rtol=0, atol=1e-10)
    assert scores[:, 0].max() <= want[:, 0].max() + 1e-10
    P = index.postings_
    assert P.nbytes < 0.5 * (P.nnz * 8 + P.indptr.nbytes)
