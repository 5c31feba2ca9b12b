"""The block-wise ann build (indexes/ann_blockwise.py), corpus directories and the block-wise
synthetic generator: same index as the in-memory build, memory plan refused up front, bad files."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.data.corpus_files import CorpusFiles, write_corpus
from sparsesim.data.synthetic import write_rcv1_like
from sparsesim.exceptions import FileFormatError, InvalidInputError, MemoryBudgetError
from sparsesim.indexes import load_index
from sparsesim.indexes.ann import AnnIndex
from sparsesim.csr_rows import take_rows
from sparsesim.indexes.calibration import exact_top_k
from sparsesim.indexes.ann_blockwise import build_ann_blockwise, exact_top_k_blocks, memory_plan
from sparsesim.learners.bilinear import OASIS

N = 1500


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("blockwise")
    corpus = write_rcv1_like(tmp / "corpus", N, seed=3, block_size=700)
    X, y = corpus.rows(0, N), corpus.labels()
    X = sp.csr_matrix((X.data, X.indices, X.indptr.astype(np.int32)), shape=X.shape)  # scipy's slicing
    model = OASIS(n_triplets=200, random_state=0).fit(X[:600], y[:600]).model_
    return tmp, corpus, X, y, model


def small_budget(model, corpus, rows, **params):
    """A budget that leaves room for ``rows`` documents per block (several blocks on this corpus)."""
    from types import SimpleNamespace

    from sparsesim.indexes import ann_build

    index = AnnIndex(model, **params)
    n, d = corpus.shape
    L = index.postings_length_ = ann_build.postings_length(index, n)
    h = min(d, ann_build.rerank_budget(index, SimpleNamespace(shape=(n, d), nnz=corpus.nnz)) // (8 * n))
    plan = memory_plan(model, n, corpus.nnz, 1 << 40, h, L)
    return plan["fixed"] + plan["per_row"] * rows + 100


def version_files(directory):
    vdir = next(p for p in directory.iterdir() if p.name.startswith("v-"))
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in vdir.iterdir()}


def test_blockwise_index_is_the_in_memory_index(setup):
    tmp, corpus, X, _, model = setup
    params = dict(target_recall=None, rerank_memory=8 * N * 12, n_postings=32, sparse_pool=40)
    budget = small_budget(model, corpus, 512, **params)
    built = build_ann_blockwise(model, corpus, tmp / "bw", memory=budget, **params)
    assert built.plan_["block_rows"] == 512  # three blocks, the last one short
    assert built.heavy_rows_.size > 0
    fresh = AnnIndex(model, **params).fit(X)
    fresh.save(tmp / "mem")
    # every file of the two directories, byte for byte (corpus, Z, postings, ids, model, block digests)
    assert version_files(tmp / "bw") == version_files(tmp / "mem")
    loaded = load_index(tmp / "bw", mmap=True)
    Q = X[::37]
    a, b = loaded.query_rows(Q, 10), fresh.query_rows(Q, 10)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_blockwise_calibration_matches_in_memory(setup):
    tmp, corpus, X, _, model = setup
    params = dict(target_recall=0.9, calibration_size=60, n_postings=48, sparse_pool=50)
    budget = small_budget(model, corpus, 256, **params)
    built = build_ann_blockwise(model, corpus, tmp / "bwcal", memory=budget, **params)
    fresh = AnnIndex(model, **params).fit(X)
    for key in ("rows", "hits", "recall", "recall_lower_bound", "strata", "setting", "met"):
        assert built.calibration_[key] == fresh.calibration_[key], key
    assert built.calibration_["selection"]["rows"] == fresh.calibration_["selection"]["rows"]
    # the exact truth computed a block at a time equals the one over the whole corpus
    Q = take_rows(fresh.X_, np.arange(0, N, 50))
    a, b = built.exact_rows(Q, 10, 1), exact_top_k(fresh, Q, 10)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_progress_reports_every_block_and_truth_reads_the_saved_corpus_a_block_at_a_time(setup):
    tmp, corpus, X, _, model = setup
    params = dict(target_recall=None, n_postings=32, sparse_pool=40)
    calls = []
    build_ann_blockwise(model, corpus, tmp / "progress", memory=small_budget(model, corpus, 512, **params),
                        progress=lambda *call: calls.append(call), **params)
    blocks = [512, 1024, N]
    assert calls == ([("prepare_corpus", b, N) for b in blocks] + [("heavy_values_and_postings", b, N) for b in blocks]
                     + [(stage, done, 1) for stage in ("encode_postings", "calibration", "save") for done in (0, 1)])
    # the benchmark's truth: the saved index's corpus files read a block at a time (pread), any block size
    vdir = next(p for p in (tmp / "progress").iterdir() if p.name.startswith("v-"))
    stored = CorpusFiles.from_files(X.shape[1], *(vdir / f"corpus.{a}.npy" for a in ("indptr", "indices", "data")))
    index = load_index(tmp / "progress", mmap=True)
    Q = index.stored_queries(np.arange(3, N, 61))
    whole = exact_top_k(index, Q, 10)
    for block_rows in (7, 500, N):
        rows, scores = exact_top_k_blocks(model, stored, Q, 10, block_rows)
        assert np.array_equal(rows, whole[0]) and np.array_equal(scores, whole[1])


def test_budget_too_small_is_refused_before_any_write(setup):
    tmp, corpus, _, _, model = setup
    with pytest.raises(MemoryBudgetError, match="memory budget"):
        build_ann_blockwise(model, corpus, tmp / "small", memory="1MiB", target_recall=None)
    assert not (tmp / "small").exists()
    assert not [p for p in tmp.iterdir() if "small" in p.name]  # no staging left behind


def test_dense_stage_and_empty_and_width_are_refused(setup):
    tmp, corpus, X, y, model = setup
    with pytest.raises(InvalidInputError, match="dim"):
        build_ann_blockwise(model, corpus, tmp / "dense", dim=8)
    with pytest.raises(InvalidInputError, match="empty"):
        build_ann_blockwise(model, corpus, tmp / "empty", n_documents=0)
    narrow = write_corpus(tmp / "narrow", X[:20, :100])
    with pytest.raises(InvalidInputError, match="features"):
        build_ann_blockwise(model, narrow, tmp / "narrow-index")


def test_corpus_blocks_with_bad_values_are_refused(setup):
    tmp, _, X, _, model = setup
    bad = X[:40].copy()
    bad.data[5] = np.nan
    corpus = write_corpus(tmp / "nan", bad)
    with pytest.raises(InvalidInputError):
        build_ann_blockwise(model, corpus, tmp / "nan-index", target_recall=None)
    assert not (tmp / "nan-index").exists()


def test_corpus_files_refuse_inconsistent_files(setup):
    tmp, _, X, _, _ = setup
    corpus = write_corpus(tmp / "c", X[:30], y=np.arange(30))
    assert corpus.take([3, 0, 3]).shape == (3, X.shape[1])
    assert (corpus.take([3, 0]) != X[[3, 0]]).nnz == 0
    np.save(tmp / "c" / "indptr.npy", np.arange(31, dtype=np.int64))  # does not end at nnz
    with pytest.raises(FileFormatError, match="row pointers"):
        CorpusFiles(tmp / "c")
    np.save(tmp / "c" / "indptr.npy", np.zeros(31, dtype=np.int32))  # wrong dtype
    with pytest.raises(FileFormatError):
        CorpusFiles(tmp / "c")
    (tmp / "c" / "corpus.json").write_text('{"format": "other"}')
    with pytest.raises(FileFormatError):
        CorpusFiles(tmp / "c")


def test_generator_is_seeded_and_normalised(tmp_path):
    a = write_rcv1_like(tmp_path / "a", 500, seed=7, block_size=200)
    b = write_rcv1_like(tmp_path / "b", 500, seed=7, block_size=200)
    c = write_rcv1_like(tmp_path / "c", 500, seed=8, block_size=200)
    Xa, Xb, Xc = a.rows(0, 500), b.rows(0, 500), c.rows(0, 500)
    assert (Xa != Xb).nnz == 0 and np.array_equal(a.labels(), b.labels())
    assert (Xa != Xc).nnz > 0
    assert np.allclose(np.sqrt(np.asarray(Xa.multiply(Xa).sum(axis=1)).ravel()), 1.0)
    lengths = np.diff(Xa.indptr)
    assert lengths.max() == 75 and lengths.min() > 50
    assert all(np.all(np.diff(Xa.indices[Xa.indptr[r]:Xa.indptr[r + 1]]) > 0) for r in range(500))


def test_generated_values_stay_positive_when_documents_outnumber_features(tmp_path):
    """TF-IDF weights of a real corpus are positive: the generators' IDF counts documents (an IDF
    over the vocabulary size went negative for features in more than e x d documents, which at
    10^7 documents made 36% of the entries negative)."""
    from sparsesim.data.synthetic import rcv1_like

    kw = dict(n_features=300, nnz_per_doc=25, class_vocab=60)
    streamed = write_rcv1_like(tmp_path / "c", 3_000, seed=1, block_size=1_000, **kw).rows(0, 3_000)
    in_memory = rcv1_like(3_000, seed=1, **kw).X
    for X in (streamed, in_memory):
        df = np.bincount(X.indices, minlength=300)
        assert df.max() > np.e * 300  # the case the vocabulary-size IDF got wrong
        assert X.data.min() > 0
