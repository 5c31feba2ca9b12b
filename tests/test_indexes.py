"""Retrieval indexes: exact equals brute force, ANN recall, storage round trip, refusals, add, ids."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.data.synthetic import rcv1_like
from sparsesim.exceptions import FileFormatError, InvalidInputError, ModelMismatchError, UnknownNameError
from sparsesim.indexes import AnnIndex, ExactIndex, build_index, load_index
from sparsesim.indexes.ann import impact_postings
from sparsesim.learners.bilinear import OASIS
from sparsesim.models import BilinearSimilarity
from sparsesim.indexes.base import prepare_rows


@pytest.fixture(scope="module")
def corpus():
    data = rcv1_like(1300, n_features=3000, nnz_per_doc=30, n_classes=5, class_vocab=300, seed=1)
    return data


@pytest.fixture(scope="module")
def model(corpus):
    X, y = corpus.X[:1000], corpus.y[:1000]
    return OASIS(n_triplets=1500, random_state=0).fit(X, y).model_


@pytest.fixture(scope="module")
def split(corpus):
    return corpus.X[:1000], corpus.X[1000:1200], corpus.X[1200:]


def brute_top(model, Q, X, k):
    S = model.score_matrix(Q, X)
    order = np.argsort(-S, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(S, order, axis=1), S


def recall(found, truth):
    return float(np.mean([len(set(map(int, a)) & set(map(int, b))) / len(b) for a, b in zip(found, truth)]))


# -- exact ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["corpus", "query"])
def test_exact_equals_brute_force(model, split, strategy):
    X, Q, _ = split
    top, vals, _ = brute_top(model, Q, X, 10)
    index = build_index(model, X, kind="exact", strategy=strategy, block_size=7, chunk_size=97)
    assert index.strategy_ == strategy
    ids, scores = index.query(Q, top_k=10)
    np.testing.assert_allclose(scores, vals, rtol=0, atol=1e-10)
    np.testing.assert_array_equal(np.array(ids), top)



@pytest.mark.parametrize("numpy_path", [True, False])
@pytest.mark.parametrize("kind,params", [("exact", {"strategy": "query"}), ("exact", {"strategy": "corpus"}),
                                         ("ann", {"target_recall": None})])
def test_queries_whose_terms_all_have_empty_rows_in_w(split, monkeypatch, numpy_path, kind, params):
    """A model whose W has no entry in the query's rows (``train -a dot``: W empty) answers exactly
    on the numpy path of the first queries and on the kernels (issue 40, family 14)."""
    from sparsesim.indexes import small_batch

    X, Q, _ = split
    d = X.shape[1]
    half = sp.random(d, d, density=0.001, random_state=4, format="csr")
    half = sp.csr_matrix(sp.diags((np.arange(d) >= d // 2).astype(float)) @ half)  # rows of the first half empty
    Q_low = sp.csr_matrix(Q[:6].multiply((np.arange(d) < d // 2)[None, :]))  # terms in the empty rows only
    monkeypatch.setattr(small_batch, "take", lambda n: numpy_path)
    for W, queries in ((sp.csr_matrix((d, d)), Q[:6]), (half, Q_low)):
        model = BilinearSimilarity(W)
        index = build_index(model, X, kind=kind, **params)
        top, vals, _ = brute_top(model, queries, X, 10)
        ids, scores = index.query(queries, top_k=10)
        np.testing.assert_allclose(scores, vals, rtol=0, atol=1e-10)
        assert recall(ids, top) == 1.0
        ids, scores = index.query_similar([0, 1], top_k=5)
        assert scores.shape == (2, 5) and np.isfinite(scores).all()

def test_exact_threads_and_normalize(split):
    X, Q, _ = split
    W = sp.random(X.shape[1], X.shape[1], density=0.002, random_state=0, format="csr")
    m = BilinearSimilarity(W, normalize=True)
    _, vals, _ = brute_top(m, Q * 3.0, X * 2.0, 5)
    for strategy in ("corpus", "query"):
        index = build_index(m, X * 2.0, kind="exact", strategy=strategy, chunk_size=128, n_jobs=2)
        _, s2 = index.query(Q * 3.0, top_k=5)
        _, s1 = index.query(Q * 3.0, top_k=5, n_jobs=1)
        np.testing.assert_allclose(s2, vals, atol=1e-10)
        np.testing.assert_array_equal(s1, s2)


def test_auto_strategy_follows_memory_budget(model, split):
    X = split[0]
    assert build_index(model, X, strategy="auto", corpus_memory=1).strategy_ == "query"
    assert build_index(model, X, strategy="auto", corpus_memory=1 << 34, corpus_ratio=None).strategy_ == "corpus"


def test_auto_strategy_keeps_the_index_within_the_ratio(model, split):
    """Y is precomputed only when the index stays within corpus_ratio x (corpus + W): the cut-over
    sits where corpus + W + the estimate of Y's bytes crosses the ratio, and the ratio is part of
    the saved params."""
    X = split[0]
    probe = ExactIndex(model, corpus_ratio=None)
    Xp = prepare_rows(model, X, "corpus")
    y_bytes = 12 * probe.estimate_corpus_nnz(Xp)
    W = model.W
    inputs = 12 * Xp.nnz + 8 * (Xp.shape[0] + 1) + 12 * W.nnz + 8 * (W.shape[0] + 1)
    ratio = 1.0 + y_bytes / inputs
    assert build_index(model, X, corpus_ratio=ratio * 1.01).strategy_ == "corpus"
    small = build_index(model, X, corpus_ratio=ratio * 0.99)
    assert small.strategy_ == "query" and small.params()["corpus_ratio"] == pytest.approx(ratio * 0.99)
    for bad in ("abc", 0.5, float("nan"), float("inf")):
        with pytest.raises(InvalidInputError, match="corpus_ratio"):
            ExactIndex(model, corpus_ratio=bad)


def test_top_k_equal_to_corpus_size(model, split):
    X, Q, _ = split
    small = X[:15]
    _, vals, _ = brute_top(model, Q[:3], small, 15)
    for strategy in ("corpus", "query"):
        _, scores = build_index(model, small, strategy=strategy, chunk_size=4).query(Q[:3], top_k=15)
        np.testing.assert_allclose(scores, vals, atol=1e-10)


# -- ANN -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("faiss_index,heavy", [("ivf", "default"), ("hnsw", "default"), ("ivf", "none"),
                                               ("ivf", "many")])
def test_ann_recall_and_exact_scores(model, split, faiss_index, heavy):
    X, Q, _ = split
    top, _, S = brute_top(model, Q, X, 10)
    extra = {"default": {}, "none": {"rerank_memory": 0}, "many": {"heavy_min_nnz": 20}}[heavy]
    index = build_index(model, X, kind="ann", faiss_index=faiss_index, dim=32, **extra)
    if heavy == "none":
        assert index.heavy_rows_.size == 0
    if heavy == "many":
        assert index.heavy_rows_.size > 100 and index.Z_.shape == (X.shape[0], index.heavy_rows_.size)
    ids, scores = index.query(Q, top_k=10)
    assert recall(ids, top) >= 0.95
    # returned scores are the exact bilinear scores of the returned documents, sorted
    rows = np.array(ids)
    np.testing.assert_allclose(scores, np.take_along_axis(S, rows, axis=1), atol=1e-10)
    assert np.all(np.diff(scores, axis=1) <= 0)


def test_ann_each_stage_alone_and_pool_growth(model, split):
    X, Q, _ = split
    top, _, _ = brute_top(model, Q, X, 10)
    dense = build_index(model, X, kind="ann", dim=32, n_postings=0)
    sparse_only = build_index(model, X, kind="ann", dim=0)
    assert dense.faiss_ is not None and sparse_only.faiss_ is None
    r_small = recall(dense.query(Q, 10, dense_pool=10)[0], top)
    r_big = recall(dense.query(Q, 10, dense_pool=400, nprobe=64)[0], top)
    assert r_big >= r_small and r_big >= 0.9
    assert recall(sparse_only.query(Q, 10)[0], top) > 0.5
    # a pool as large as the corpus makes the ANN index exact
    full = sparse_only.query(Q, 10, n_postings=10**6, sparse_pool=X.shape[0])[0]
    assert recall(full, top) >= 0.99
    with pytest.raises(InvalidInputError, match="unknown option"):
        dense.query(Q, 10, nprob=3)
    for index in (dense, build_index(model, X, kind="exact")):  # the option named like an argument
        with pytest.raises(InvalidInputError, match="unknown option.*: k"):
            index.query(Q, k=10)
    with pytest.raises(InvalidInputError, match="both candidate stages"):
        AnnIndex(model, dim=0, n_postings=0)


BOUNDS_CHECKED_QUERY = r"""
import numpy as np, scipy.sparse as sp
from sparsesim.indexes import build_index
from sparsesim.models import BilinearSimilarity
rng = np.random.default_rng(0)
X = sp.random(12, 6, density=0.9, format="csr", random_state=0, data_rvs=lambda k: rng.uniform(0.1, 1, k))
model = BilinearSimilarity(sp.csr_matrix((6, 6)), identity=True)
index = build_index(model, X, kind="ann", dim=0, target_recall=None, n_jobs=1)
# every list holds every document: the query lists all 12 and keeps reading postings after that
ids, scores = index.query(X[np.arange(40) % 12], top_k=3, n_postings=10**6, sparse_pool=12)
print(len(ids))
"""


def test_candidate_scratch_holds_every_document_plus_one(tmp_path):
    """The candidate kernel writes each posting's document one past the listed ones (no branch):
    with numba's bounds checks on, a query that lists every document and reads on stays in bounds."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    done = subprocess.run([sys.executable, "-c", BOUNDS_CHECKED_QUERY], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "40"


def test_impact_postings_sorted(split):
    X = split[0]
    P = impact_postings(X)
    assert P.shape == (X.shape[1], X.shape[0]) and P.nnz == X.nnz
    for i in np.flatnonzero(np.diff(P.indptr) > 1)[:50]:
        vals = P.data[P.indptr[i]:P.indptr[i + 1]]
        assert np.all(np.diff(vals) <= 0)
    np.testing.assert_allclose(sp.csr_matrix((P.data, P.indices, P.indptr), shape=P.shape).T.toarray(), X.toarray())


# -- input checks --------------------------------------------------------------------------------
def test_bad_queries_and_parameters_refused(model, split):
    X, Q, _ = split
    for kind in ("exact", "ann"):
        index = build_index(model, X[:200], kind=kind, **({"dim": 8} if kind == "ann" else {}))
        with pytest.raises(InvalidInputError, match="features"):
            index.query(sp.random(2, X.shape[1] + 1, density=0.1, format="csr"), top_k=5)
        with pytest.raises(InvalidInputError, match="larger than the index"):
            index.query(Q[:2], top_k=201)
        with pytest.raises(InvalidInputError, match="positive"):
            index.query(Q[:2], top_k=0)
        bad = Q[:2].copy()
        bad.data[0] = np.nan
        with pytest.raises(InvalidInputError, match="NaN"):
            index.query(bad, top_k=5)
    with pytest.raises(InvalidInputError, match="features"):
        build_index(model, sp.random(5, 10, density=0.5, format="csr"))
    with pytest.raises(UnknownNameError):
        build_index(model, X, kind="lsh")
    with pytest.raises(InvalidInputError, match="strategy"):
        ExactIndex(model, strategy="fast")


# -- ids and add ---------------------------------------------------------------------------------
def test_ids_preserved_and_checked(model, split):
    X, Q, _ = split
    names = np.array([f"doc-{i}" for i in range(X.shape[0])])
    index = build_index(model, X, kind="exact", ids=names)
    top, _, _ = brute_top(model, Q, X, 5)
    ids, _ = index.query(Q, top_k=5)
    np.testing.assert_array_equal(np.array(ids), names[top])
    with pytest.raises(InvalidInputError, match="unique"):
        build_index(model, X[:3], ids=["a", "b", "a"])
    with pytest.raises(InvalidInputError, match="one id per document"):
        build_index(model, X[:3], ids=["a", "b"])
    with pytest.raises(InvalidInputError, match="all integers or all strings"):
        build_index(model, X[:2], ids=np.array([1, "b"], dtype=object))
    with pytest.raises(InvalidInputError, match="already in the index"):
        index.add(Q[:1], ids=["doc-3"])
    with pytest.raises(InvalidInputError, match="string ids"):
        index.add(Q[:1])
    with pytest.raises(InvalidInputError, match="strings too"):
        index.add(Q[:1], ids=[7])


@pytest.mark.parametrize("kind", ["exact", "ann"])
def test_query_similar_leaves_each_document_out_of_its_answer(model, split, kind):
    X, _, _ = split
    names = np.array([f"doc-{i}" for i in range(X.shape[0])])
    params = {"target_recall": None, "n_postings": 4096, "sparse_pool": X.shape[0]} if kind == "ann" else {}
    index = build_index(model, X, kind=kind, ids=names, **params)
    rows = np.array([3, 77, 500])
    S = model.score_matrix(X[rows], X)
    S[np.arange(3), rows] = -np.inf  # the document itself is not an answer
    top = np.argsort(-S, axis=1, kind="stable")[:, :6]
    ids, scores = index.query_similar(names[rows], top_k=6)
    np.testing.assert_array_equal(np.array(ids), names[top])
    np.testing.assert_allclose(scores, np.take_along_axis(S, top, axis=1), rtol=0, atol=1e-10)
    with pytest.raises(InvalidInputError, match="not in the index"):
        index.query_similar(["doc-3", "nope"])
    with pytest.raises(InvalidInputError, match="at least one"):
        index.query_similar([])
    with pytest.raises(InvalidInputError, match="other documents"):
        index.query_similar(["doc-3"], top_k=X.shape[0])  # one document fewer than the corpus remains
    numbered = build_index(model, X, kind="exact")
    np.testing.assert_array_equal(numbered.rows_of(["12", 7]), [12, 7])
    for bad in (["x"], [2.5], [10**23]):
        with pytest.raises(InvalidInputError, match="integer"):
            numbered.rows_of(bad)
    with pytest.raises(InvalidInputError, match="not in the index"):
        numbered.rows_of([-1])


@pytest.mark.parametrize("kind", ["exact", "ann"])
def test_add_documents(model, split, kind):
    X, Q, X_new = split
    params = {"dim": 32, "heavy_min_nnz": 20} if kind == "ann" else {"strategy": "corpus"}
    ids_old = [f"a{i}" for i in range(X.shape[0])]
    ids_new = [f"b{i}" for i in range(X_new.shape[0])]
    index = build_index(model, X, kind=kind, ids=ids_old, **params)
    faiss_before = index.faiss_.ntotal if kind == "ann" else None
    index.add(X_new, ids=ids_new)
    assert index.n_documents == X.shape[0] + X_new.shape[0]
    if kind == "ann":
        assert index.faiss_.ntotal == faiss_before + X_new.shape[0]
    all_X = sp.vstack([X, X_new], format="csr")
    all_ids = np.array(ids_old + ids_new)
    top, vals, _ = brute_top(model, Q, all_X, 10)
    ids, scores = index.query(Q, top_k=10)
    if kind == "exact":
        np.testing.assert_array_equal(np.array(ids), all_ids[top])
        np.testing.assert_allclose(scores, vals, atol=1e-10)
    else:
        assert recall([[int(str(i)[1:]) + (X.shape[0] if str(i)[0] == "b" else 0) for i in row] for row in ids],
                      top) >= 0.95
    # the added documents are found: each new document's own query returns documents from both parts
    found = set(np.concatenate(index.query(X_new, top_k=3)[0]).tolist())
    assert any(f.startswith("b") for f in found)


def test_ann_refits_once_the_corpus_has_grown(model, split):
    """add() keeps the learned parts until the corpus reaches refit_growth x the fitted size; then
    the index is the one a fresh fit over all documents builds (same ids, same answers)."""
    X, Q, X_new = split
    # a fixed search setting: a calibrated one is chosen by timing, which may differ between builds
    params = {"dim": 16, "heavy_min_nnz": 20, "refit_growth": 1.5, "n_postings": 64, "sparse_pool": 100,
              "dense_pool": 100, "nprobe": 32}
    all_X = sp.vstack([X[:200], X_new[:100]], format="csr")
    index = build_index(model, X[:200], kind="ann", **params)
    V0 = index.V_.copy()
    index.add(X_new[:50])  # 250 < 1.5 * 200: appended, nothing re-learned
    assert index.n_fit_documents_ == 200 and np.array_equal(index.V_, V0)
    index.add(X_new[50:100])  # 300 >= 300: refit
    assert index.n_fit_documents_ == 300 and not np.array_equal(index.V_, V0)
    fresh = build_index(model, all_X, kind="ann", **params)
    np.testing.assert_array_equal(index.V_, fresh.V_)
    ids, scores = index.query(Q, top_k=10)
    ids_f, scores_f = fresh.query(Q, top_k=10)
    np.testing.assert_array_equal(np.array(ids), np.array(ids_f))
    np.testing.assert_array_equal(scores, scores_f)
    never = build_index(model, X[:100], kind="ann", dim=16, heavy_min_nnz=20, refit_growth=None)
    never.add(X_new)
    assert never.n_fit_documents_ == 100 and never.n_documents == 100 + X_new.shape[0]
    with pytest.raises(InvalidInputError, match="refit_growth"):
        AnnIndex(model, refit_growth=1.0)


def test_add_with_default_ids_continues_numbering(model, split):
    X, Q, X_new = split
    index = build_index(model, X[:100], kind="exact")
    index.add(X_new[:5])
    np.testing.assert_array_equal(index.ids_[-5:], np.arange(100, 105))


# -- storage -------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind,mmap", [("exact", False), ("exact", True), ("ann", False), ("ann", True)])
def test_save_load_round_trip(model, split, tmp_path, kind, mmap):
    X, Q, _ = split
    params = {"dim": 32, "n_postings": 500, "heavy_min_nnz": 20} if kind == "ann" else {"strategy": "corpus"}
    ids = [f"d{i}" for i in range(X.shape[0])]
    index = build_index(model, X, kind=kind, ids=ids, **params)
    before = index.query(Q, top_k=10)
    path = tmp_path / "idx"
    index.save(path)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["kind"] == kind and manifest["model"]["checksum"] == model.checksum()
    assert all(len(f["sha256"]) == 64 for f in manifest["files"].values())
    loaded = load_index(path, mmap=mmap)
    assert type(loaded) is type(index) and loaded.params() == index.params()
    if kind == "ann":
        assert loaded.n_fit_documents_ == index.n_fit_documents_ == X.shape[0]
    after = loaded.query(Q, top_k=10)
    np.testing.assert_array_equal(np.array(after[0]), np.array(before[0]))
    np.testing.assert_array_equal(after[1], before[1])
    loaded_with_model = load_index(path, model=model, mmap=mmap)
    np.testing.assert_array_equal(loaded_with_model.query(Q, top_k=10)[1], before[1])
    if mmap:
        assert isinstance(loaded.X_.data, np.memmap) and not loaded.X_.data.flags.writeable
        with pytest.raises(InvalidInputError, match="read-only"):
            loaded.add(Q[:1], ids=["new"])
    else:
        loaded.add(Q[:2], ids=["q0", "q1"])
        assert loaded.n_documents == X.shape[0] + 2


def test_save_refuses_existing_directory_unless_overwrite(model, split, tmp_path):
    X = split[0][:50]
    index = build_index(model, X)
    index.save(tmp_path / "idx")
    with pytest.raises(InvalidInputError, match="already exists"):
        index.save(tmp_path / "idx")
    index.add(split[1][:3])
    index.save(tmp_path / "idx", overwrite=True)
    assert load_index(tmp_path / "idx").n_documents == 53
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]  # no temporary leftovers


def test_mismatched_model_refused(model, split, tmp_path):
    X = split[0][:100]
    build_index(model, X, kind="ann", dim=8).save(tmp_path / "idx")
    other = BilinearSimilarity(model.W * 1.5)
    with pytest.raises(ModelMismatchError, match="built with model"):
        load_index(tmp_path / "idx", model=other)
    narrow = BilinearSimilarity(sp.csr_matrix((10, 10)))
    with pytest.raises(ModelMismatchError, match="features"):
        load_index(tmp_path / "idx", model=narrow)
    flags = BilinearSimilarity(model.W, normalize=True)
    with pytest.raises(ModelMismatchError):
        load_index(tmp_path / "idx", model=flags)


@pytest.mark.parametrize("victim", ["faiss.index", "corpus.data.npy", "postings.ids.npy", "postings.codes.npy", "model.npz",
                                    "ids.npy", "heavy.Z.npy"])
def test_corrupt_or_truncated_files_refused(model, split, tmp_path, victim):
    X = split[0][:200]
    build_index(model, X, kind="ann", dim=8, ids=[f"x{i}" for i in range(200)]).save(tmp_path / "idx")
    data_dir = json.loads((tmp_path / "idx" / "manifest.json").read_text())["data_dir"]
    path = tmp_path / "idx" / data_dir / victim
    raw = bytearray(path.read_bytes())
    # flipped byte, same size: caught by the sha256
    flipped = raw.copy()
    flipped[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(flipped))
    with pytest.raises(FileFormatError, match="sha256 mismatch"):
        load_index(tmp_path / "idx")
    # truncated: caught by the size
    path.write_bytes(bytes(raw[: len(raw) // 2]))
    with pytest.raises(FileFormatError, match="truncated"):
        load_index(tmp_path / "idx", verify=False)
    path.unlink()
    with pytest.raises(FileFormatError, match="missing"):
        load_index(tmp_path / "idx")


def test_not_an_index_refused(tmp_path):
    with pytest.raises(FileFormatError, match="no such index directory"):
        load_index(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileFormatError, match="manifest"):
        load_index(tmp_path / "empty")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "manifest.json").write_text("{not json")
    with pytest.raises(FileFormatError, match="corrupt manifest"):
        load_index(tmp_path / "bad")


def test_newer_format_refused(model, split, tmp_path):
    build_index(model, split[0][:30]).save(tmp_path / "idx")
    mpath = tmp_path / "idx" / "manifest.json"
    manifest = json.loads(mpath.read_text())
    manifest["format_version"] = 99
    mpath.write_text(json.dumps(manifest))
    with pytest.raises(FileFormatError, match="newer"):
        load_index(tmp_path / "idx")


@pytest.mark.parametrize("kind", ["exact", "ann"])
def test_null_optional_state_keys_are_read_as_absent_or_refused(model, split, tmp_path, kind):
    """A re-hashed manifest with an optional state key set to null: the index loads and answers
    as before, or is refused with FileFormatError (fuzz campaign seed 2034, case 607034733)."""
    import shutil

    from indextools import rehash_index

    X, Q, _ = split
    params = {"target_recall": None, "n_postings": 64, "sparse_pool": 50} if kind == "ann" else {}
    index = build_index(model, X[:300], kind=kind, **params)
    index.save(tmp_path / "base")
    want = index.query(Q[:3], top_k=5)
    state = json.loads((tmp_path / "base" / "manifest.json").read_text())["state"]
    for key in sorted(state):
        d = tmp_path / key
        shutil.copytree(tmp_path / "base", d)
        rehash_index(d, lambda m, key=key: m["state"].__setitem__(key, None))
        try:
            got = load_index(d).query(Q[:3], top_k=5)
        except FileFormatError:
            continue
        np.testing.assert_array_equal(np.array(got[0]), np.array(want[0]))
        np.testing.assert_array_equal(got[1], want[1])


def test_query_records_are_json_lines(model, split):
    X, Q, _ = split
    index = build_index(model, X[:100], ids=[f"d{i}" for i in range(100)])
    records = index.query_records(Q[:3], top_k=4, query_ids=["q0", "q1", "q2"])
    ids, scores = index.query(Q[:3], top_k=4)
    line = json.dumps(records[1])
    back = json.loads(line)
    assert back["query"] == "q1" and [r["id"] for r in back["results"]] == list(ids[1])
    np.testing.assert_allclose([r["score"] for r in back["results"]], scores[1])
    assert [r["query"] for r in build_index(model, X[:10]).query_records(Q[:2], top_k=1)] == [0, 1]
    with pytest.raises(InvalidInputError, match="query_ids"):
        index.query_records(Q[:3], top_k=2, query_ids=["a"])


def test_ann_threads_and_hnsw_mmap(model, split, tmp_path):
    X, Q, _ = split
    index = build_index(model, X, kind="ann", faiss_index="hnsw", dim=16, n_jobs=2, block_size=50)
    r2 = index.query(Q, top_k=5)
    r1 = index.query(Q, top_k=5, n_jobs=1)
    np.testing.assert_array_equal(np.array(r1[0]), np.array(r2[0]))
    np.testing.assert_array_equal(r1[1], r2[1])
    index.save(tmp_path / "hnsw")
    loaded = load_index(tmp_path / "hnsw", mmap=True)
    np.testing.assert_array_equal(loaded.query(Q, top_k=5)[1], r1[1])


def test_ann_postings_do_not_depend_on_build_threads(model, split):
    """The build splits each block's documents (products) and features (heaps) over threads;
    the posting lists and the re-ranking table come out bit-identical."""
    X, _, _ = split
    one = build_index(model, X, kind="ann", target_recall=None, n_jobs=1)
    two = build_index(model, X, kind="ann", target_recall=None, n_jobs=2)
    a, b = one.postings_, two.postings_
    for name in ("indptr", "ids", "ids_hi", "ids32", "codes", "floor_", "step_"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    np.testing.assert_array_equal(one.Z_, two.Z_)
    assert set(one.build_phases_) == {"heavy_values", "postings", "dense_stage", "calibration"}


def test_build_and_query_never_form_i_plus_w(model, split, monkeypatch):
    """Build memory: the ann build (with its calibration) and the exact query strategy scatter W
    and add the identity; a copy of I + W (as large as W) is never made."""
    X, Q, _ = split

    def formed(self):
        raise AssertionError("I + W formed")

    monkeypatch.setattr(BilinearSimilarity, "M", property(formed))
    index = build_index(model, X, kind="ann", heavy_min_nnz=1, rerank_memory=200_000)
    assert index.calibration_ is not None and 0 < index.heavy_rows_.size < X.shape[1]
    _, scores = index.query(Q[:5], top_k=5)
    _, exact = ExactIndex(model, strategy="query").fit(X).query(Q[:5], top_k=5)
    monkeypatch.undo()
    _, truth, _ = brute_top(model, Q[:5], X, 5)
    np.testing.assert_allclose(exact, truth, rtol=0, atol=1e-10)
    assert np.all(scores <= truth + 1e-10)


# --------------------------------------------------------------------------- reads shared by weight
@pytest.fixture(scope="module")
def learned_case():
    from sparsesim.data.synthetic import rcv1_like
    from sparsesim.learners.bilinear import OASIS

    data = rcv1_like(3000, seed=3)
    model = OASIS(n_triplets=500, random_state=0).fit(data.X[:1500], data.y[:1500]).model_
    return model, data.X


def test_reads_shared_by_weight_find_more_neighbours_than_uniform_reads(learned_case):
    """At the same total reads per query, reading deeper into the lists whose head contribution
    |q_i| P[i, 0] is largest holds more of the exact top 10 (the default's reason)."""
    from sparsesim.indexes.calibration import measure_recall

    model, X = learned_case
    rows = np.arange(0, X.shape[0], 15)
    settings = [{"n_postings": r, "sparse_pool": 20} for r in (8, 16, 32)]
    got = {}
    for alloc in ("uniform", "weighted", "threshold"):
        index = build_index(model, X, kind="ann", target_recall=None, read_allocation=alloc)
        got[alloc] = np.array([float(r.mean()) for r, _ in measure_recall(index, rows, 10, settings)])
    assert (got["weighted"] >= got["uniform"]).all() and got["weighted"].mean() > got["uniform"].mean() + 0.01
    # on this recipe (not on news20, docs/retrieval.md) reading down to one contribution threshold
    # holds more still (measured 0.952 / 0.966 / 0.977 against 0.930 / 0.957 / 0.971)
    assert (got["threshold"] >= got["weighted"]).all() and got["threshold"].mean() > got["weighted"].mean() + 0.005


def test_auto_read_allocation_keeps_the_faster_qualifying_choice_of_the_selection_sample(learned_case, tmp_path):
    """read_allocation="auto": the calibration measures its grid under weighted and threshold reads
    (selection sample), keeps the allocation whose choice meets the target faster (or, when neither
    does, reaches the higher recall), records both, and queries, saves and loads with it."""
    model, X = learned_case
    index = build_index(model, X, kind="ann", read_allocation="auto")
    cal = index.calibration_
    compared = cal["allocations"]
    assert set(compared) == {"weighted", "threshold"} and cal["read_allocation"] in compared
    chosen, other = compared[cal["read_allocation"]], compared[({"weighted", "threshold"} - {cal["read_allocation"]}).pop()]
    assert chosen["setting"] == cal["setting"]
    if other["qualified"]:
        assert chosen["qualified"] and chosen["qps"] >= other["qps"]
    elif not chosen["qualified"]:
        assert chosen["recall"] >= other["recall"]
    assert index.read_allocation == "auto"
    assert index.allocation_in_use() == cal["read_allocation"] == index.search_metadata()["read_allocation"]
    Q = X[::40]
    fixed = build_index(model, X, kind="ann", target_recall=None, read_allocation=cal["read_allocation"],
                        **cal["setting"])
    np.testing.assert_array_equal(index.query_rows(Q, 10)[0], fixed.query_rows(Q, 10)[0])
    index.save(tmp_path / "auto")
    again = load_index(tmp_path / "auto")
    assert again.allocation_in_use() == cal["read_allocation"] and again.calibration_["allocations"] == compared
    np.testing.assert_array_equal(again.query_rows(Q, 10)[0], index.query_rows(Q, 10)[0])
    # not calibrated: the weighted share
    assert build_index(model, X[:300], kind="ann", target_recall=None, read_allocation="auto").allocation_in_use() \
        == "weighted"


def test_index_files_from_before_weighted_reads_search_uniformly(learned_case, tmp_path):
    """A file without the read_allocation state key (written before it existed) answers as it did."""
    from indextools import rehash_index

    model, X = learned_case
    uniform = build_index(model, X, kind="ann", target_recall=None, read_allocation="uniform", n_postings=16,
                          sparse_pool=20)
    weighted = build_index(model, X, kind="ann", target_recall=None, n_postings=16, sparse_pool=20)
    weighted.save(tmp_path / "idx")

    def as_older(manifest):
        del manifest["state"]["read_allocation"]
        del manifest["params"]["read_allocation"]

    rehash_index(tmp_path / "idx", as_older)
    old = load_index(tmp_path / "idx")
    assert old.allocation_in_use() == "uniform" and old.search_metadata()["read_allocation"] == "uniform"
    Q = X[::40]
    np.testing.assert_array_equal(old.query_rows(Q, 10)[1], uniform.query_rows(Q, 10)[1])
    assert not np.array_equal(weighted.query_rows(Q, 10)[0], uniform.query_rows(Q, 10)[0])
    with pytest.raises(InvalidInputError, match="read_allocation"):
        build_index(model, X[:50], kind="ann", read_allocation="by-magic")
    # a recorded allocation is kept by a saved and loaded index
    threshold = build_index(model, X, kind="ann", target_recall=None, read_allocation="threshold", n_postings=16,
                            sparse_pool=20)
    threshold.save(tmp_path / "thr")
    again = load_index(tmp_path / "thr")
    assert again.allocation_in_use() == "threshold" and again.search_metadata()["read_allocation"] == "threshold"
    np.testing.assert_array_equal(again.query_rows(Q, 10)[0], threshold.query_rows(Q, 10)[0])
    __import__("shutil").copytree(tmp_path / "thr", tmp_path / "copy")  # files this process did not write
    mapped = load_index(tmp_path / "copy", mmap=True, warm_up=False)  # blocks checked as the threshold reads them
    assert any(g.pending for g in mapped._guards.values())
    np.testing.assert_array_equal(mapped.query_rows(Q, 10)[0], threshold.query_rows(Q, 10)[0])
    assert not np.array_equal(threshold.query_rows(Q, 10)[0], weighted.query_rows(Q, 10)[0])


# -- faiss-style search ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind,params", [("exact", {"strategy": "query"}), ("exact", {"strategy": "corpus"}),
                                         ("ann", {"target_recall": None, "dim": 8})])
@pytest.mark.parametrize("string_ids", [False, True])
def test_search_is_faiss_shaped_and_equals_query(model, split, kind, params, string_ids):
    X, Q, _ = split
    X = X[:40]
    ids = [f"doc-{i}" for i in range(40)] if string_ids else list(range(100, 140))
    index = build_index(model, X, kind=kind, ids=ids, **params)
    assert len(index) == index.ntotal == 40
    pad = "" if string_ids else -1
    for k in (1, 10, 40, 45):
        scores, found = index.search(Q[:5], k)
        assert scores.shape == found.shape == (5, k) and scores.dtype == np.float64
        assert found.dtype.kind == ("U" if string_ids else "i")
        want_ids, want_scores = index.query(Q[:5], top_k=min(k, 40))
        np.testing.assert_array_equal(found[:, :min(k, 40)], np.array(want_ids))
        np.testing.assert_array_equal(scores[:, :min(k, 40)], want_scores)
        assert (found[:, 40:] == pad).all() and np.isneginf(scores[:, 40:]).all()
    scores, found = index.search(Q[:0], 3)
    assert scores.shape == found.shape == (0, 3)
    scores, found = index.search(Q[:2].toarray().astype(np.float32), 3)  # dense queries, like faiss's x
    np.testing.assert_array_equal(found, np.array(index.query(Q[:2], top_k=3)[0]))
    for bad in (0, -1, 2.5, True, "3"):
        with pytest.raises(InvalidInputError, match="k must be a positive integer"):
            index.search(Q[:2], bad)
    with pytest.raises(InvalidInputError):
        index.search(Q[:2, :10], 3)  # wrong width
    index.add(Q[5:7], ids=["new-a", "new-b"] if string_ids else [7, 8])
    assert len(index) == index.ntotal == 42
    if kind == "exact":  # exact: the k best of all 42, the added documents among them
        top, vals, _ = brute_top(model, Q[5:7], sp.vstack([X, Q[5:7]]).tocsr(), 42)
        np.testing.assert_allclose(index.search(Q[5:7], 50)[0][:, :42], vals, rtol=0, atol=1e-10)
