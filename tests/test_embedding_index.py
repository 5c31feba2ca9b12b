"""Exact and ann indexes over an EmbeddingSimilarity: scores equal the model's, ann at full recall
equals exact, storage round trip (mapped or not), add, calibrate, hostile files, CLI and service."""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.data.synthetic import rcv1_like
from sparsesim.embedding import EmbeddingSimilarity
from sparsesim.exceptions import FileFormatError, InvalidInputError, ModelMismatchError
from sparsesim.indexes import EmbeddingAnnIndex, EmbeddingExactIndex, build_index, load_index

from indextools import rehash_index  # noqa: E402

N, D, R = 1200, 800, 12


@pytest.fixture(scope="module")
def corpus():
    data = rcv1_like(N + 60, n_features=D, nnz_per_doc=25, n_classes=6, class_vocab=120, seed=4)
    return data.X[:N], data.X[N:]


def _model(kind: str) -> EmbeddingSimilarity:
    rng = np.random.default_rng(7)
    P = rng.standard_normal((D, R))
    if kind == "lsa":  # linear, normalised embeddings, no identity part
        return EmbeddingSimilarity(P, normalize=True, normalize_embedding=True)
    if kind == "classifier":  # softmax probabilities plus an identity part
        return EmbeddingSimilarity(P, bias=rng.standard_normal(R), activation="softmax", normalize=True,
                                   normalize_embedding=True, identity_weight=0.6)
    if kind == "lexical":  # proxy-ssi's form: the identity part on rows raised to a power
        return EmbeddingSimilarity(0.3 * P, normalize=True, normalize_embedding=True, identity_weight=2.0,
                                   lexical_power=0.5)
    if kind == "weighted":  # proxy-ssi's form with idf-like weights on the identity part
        return EmbeddingSimilarity(0.3 * P, normalize=True, normalize_embedding=True, identity_weight=2.0,
                                   lexical_power=0.75, lexical_weights=rng.uniform(1.0, 6.0, D))
    return EmbeddingSimilarity(0.3 * P, identity_weight=1.0)  # low-rank bilinear: M = I + P P^T


KINDS = ["lsa", "classifier", "lowrank", "lexical", "weighted"]


def _brute(model, Q, X, k):
    S = model.score_matrix(Q, X)
    order = np.argsort(-S, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(S, order, axis=1)


def _full(index) -> dict:
    """Search options under which the ann index's candidates are every document."""
    return {"nprobe": index.nlist_, "dense_pool": index.n_documents, "n_postings": index.n_documents,
            "sparse_pool": index.n_documents if index.sparse_candidates_on else 0}


@pytest.mark.parametrize("kind", KINDS)
def test_exact_equals_the_models_scores_and_ann_at_full_recall_equals_exact(corpus, kind):
    X, Q = corpus
    model = _model(kind)
    exact = build_index(model, X, kind="exact", block_size=7, chunk_size=301)
    assert isinstance(exact, EmbeddingExactIndex) and exact.kind == "embedding-exact"
    assert (exact.X_ is not None) == (model.identity_weight != 0)  # the sparse corpus only when scored
    top, vals = _brute(model, Q, X, 10)
    rows, scores = exact.query_rows(Q, top_k=10)
    # the stored embeddings are float32: scores agree with the model's to float32 rounding
    np.testing.assert_allclose(scores, vals, rtol=1e-5, atol=1e-6)
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(rows, top)]) >= 0.99
    ann = build_index(model, X, kind="ann", target_recall=None, random_state=1)
    assert isinstance(ann, EmbeddingAnnIndex) and ann.faiss_.ntotal == N
    arows, ascores = ann.query_rows(Q, top_k=10, **_full(ann))
    np.testing.assert_array_equal(arows, rows)
    np.testing.assert_allclose(ascores, scores, rtol=0, atol=1e-12)
    # the default, calibrated setting: met means its certified lower bound reaches the target (and
    # fresh queries get it); not met is said in a warning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calibrated = build_index(model, X, kind="ann", random_state=1)
    record = calibrated.calibration_
    said = any("target is not met" in str(w.message) for w in caught)
    assert said != record["met"]
    assert record["recall_lower_bound"] >= 0.95 or not record["met"]  # met: every estimate's bound reaches it
    _, cscores = calibrated.query_rows(Q, top_k=10)
    kth = scores[:, -1:] - 1e-9
    assert np.mean(cscores >= kth) >= 0.9  # fresh queries: recall counting ties


@pytest.mark.parametrize("kind", ["classifier", "lsa", "lexical", "weighted"])
@pytest.mark.parametrize("mmap", [False, True])
def test_save_load_query_add_and_search(corpus, tmp_path, kind, mmap):
    X, Q = corpus
    model = _model(kind)
    ids = [f"doc{i}" for i in range(N)]
    for index_kind in ("exact", "ann"):
        index = build_index(model, X, kind=index_kind, ids=ids, target_recall=None) if index_kind == "ann" \
            else build_index(model, X, kind="exact", ids=ids)
        want = index.query(Q, top_k=8)
        index.save(tmp_path / index_kind)
        manifest = json.loads((tmp_path / index_kind / "manifest.json").read_text())
        assert manifest["kind"] == f"embedding-{index_kind}"
        assert manifest["model"]["model_kind"] == "embedding-similarity"
        stored = set(manifest["files"])
        assert "embeddings.npy" in stored and ("corpus.data.npy" in stored) == (model.identity_weight != 0)
        back = load_index(tmp_path / index_kind, mmap=mmap)
        got = back.query(Q, top_k=8)
        np.testing.assert_array_equal(np.array(got[0]), np.array(want[0]))
        np.testing.assert_array_equal(got[1], want[1])
        scores, found = back.search(Q[:3], N + 2)  # faiss-style, padded past the corpus
        assert found.shape == (3, N + 2) and (found[:, N:] == "").all() and np.isneginf(scores[:, N:]).all()
        similar, _ = back.query_similar(["doc5"], top_k=4)
        assert "doc5" not in list(similar[0]) and len(similar[0]) == 4
        load_index(tmp_path / index_kind, model=model)  # the caller's model, checked against the manifest
        with pytest.raises(ModelMismatchError):
            load_index(tmp_path / index_kind, model=EmbeddingSimilarity(model.P + 0.01, bias=model.bias,
                                                                        activation=model.activation,
                                                                        normalize=model.normalize,
                                                                        normalize_embedding=model.normalize_embedding,
                                                                        identity_weight=model.identity_weight))
        if model.lexical_power != 1.0:  # the same arrays with another power are another model
            with pytest.raises(ModelMismatchError, match="lexical_power"):
                load_index(tmp_path / index_kind, model=EmbeddingSimilarity(
                    model.P, bias=model.bias, activation=model.activation, normalize=model.normalize,
                    normalize_embedding=model.normalize_embedding, identity_weight=model.identity_weight))
        if mmap:
            with pytest.raises(InvalidInputError, match="read-only"):
                back.add(Q[:2], ids=["a", "b"])
            continue
        back.add(Q[:20], ids=[f"new{i}" for i in range(20)])
        back.save(tmp_path / index_kind, overwrite=True)
        grown = load_index(tmp_path / index_kind)
        fresh = build_index(model, sp.vstack([X, Q[:20]]).tocsr(), kind="exact", ids=ids + [f"new{i}" for i in range(20)])
        options = _full(grown) if index_kind == "ann" else {}
        got = grown.query(Q[20:], top_k=8, **options)
        ref = fresh.query(Q[20:], top_k=8)
        np.testing.assert_array_equal(np.array(got[0]), np.array(ref[0]))
        np.testing.assert_allclose(got[1], ref[1], rtol=0, atol=1e-12)


def test_calibrate_and_refusals(corpus):
    X, Q = corpus
    model = _model("classifier")
    ann = build_index(model, X, kind="ann", target_recall=None)
    record = ann.calibrate(target_recall=0.9)
    assert record["target_recall"] == 0.9 and ann.search_setting() == {**ann.search_setting(), **record["setting"]}
    record = ann.calibrate(Q, target_recall=0.99)  # the user's own queries
    assert record["queries"] == "given queries" and record["n_queries"] == Q.shape[0] - Q.shape[0] // 2  # certified on the half not used to choose
    with pytest.raises(InvalidInputError, match="own model"):
        ann.calibrate(model=_model("lsa"))
    with pytest.raises(InvalidInputError, match="unknown option"):
        ann.query(Q[:1], top_k=3, strategy="query")
    with pytest.raises(InvalidInputError):
        ann.query(Q[:1, :10], top_k=3)  # wrong width
    with pytest.raises(InvalidInputError, match="unknown parameter"):
        build_index(model, X, kind="exact", strategy="corpus")  # a bilinear index's parameter
    from sparsesim.feedback import FeedbackLearner

    with pytest.raises(InvalidInputError, match="does not support learning from feedback"):
        FeedbackLearner(ann)  # `serve --learn` on an embedding index: refused before serving


def _data(directory):
    return directory / json.loads((directory / "manifest.json").read_text())["data_dir"]


def _replace(path, fn):
    arr = np.load(path)
    np.save(path, fn(arr.copy()), allow_pickle=False)


HOSTILE = {
    "an embedding changed": ("classifier", "ann", "embeddings.npy", lambda a: a + np.float32(0.5) * (np.arange(a.size).reshape(a.shape) == 7)),
    "posting values replaced": ("classifier", "ann", "postings.data.npy", lambda a: np.full_like(a, 0.5)),
    "embeddings NaN": ("lsa", "exact", "embeddings.npy", lambda a: np.where(np.arange(a.size).reshape(a.shape) == 3, np.nan, a).astype(a.dtype)),
    "embeddings float64": ("lsa", "exact", "embeddings.npy", lambda a: a.astype(np.float64)),
    "embeddings one column short": ("lsa", "exact", "embeddings.npy", lambda a: np.ascontiguousarray(a[:, :-1])),
}


@pytest.mark.parametrize("attack", sorted(HOSTILE))
@pytest.mark.parametrize("mmap", [False, True])
def test_hostile_but_consistent_files_refused(corpus, tmp_path, attack, mmap):
    X, _ = corpus
    kind, index_kind, fname, fn = HOSTILE[attack]
    params = {"target_recall": None} if index_kind == "ann" else {}
    build_index(_model(kind), X, kind=index_kind, **params).save(tmp_path / "idx")
    _replace(_data(tmp_path / "idx") / fname, fn)
    rehash_index(tmp_path / "idx")  # every checksum recomputed
    with pytest.raises(FileFormatError):
        load_index(tmp_path / "idx", mmap=mmap)


def test_another_model_file_and_stray_arrays_refused(corpus, tmp_path):
    X, _ = corpus
    build_index(_model("lsa"), X, kind="exact").save(tmp_path / "idx")
    good = tmp_path / "good"
    shutil.copytree(tmp_path / "idx", good)
    # the stored model replaced by another one, every checksum but the manifest's model checksum recomputed
    _model("lowrank").save(tmp_path / "other.npz")
    shutil.copyfile(tmp_path / "other.npz", _data(tmp_path / "idx") / "model.npz")
    rehash_index(tmp_path / "idx")
    with pytest.raises(FileFormatError, match="model"):
        load_index(tmp_path / "idx")
    # a sparse corpus listed for a model without an identity part
    data = _data(good)
    for part, arr in (("indptr", np.zeros(N + 1, np.int64)), ("indices", np.zeros(0, np.int32)),
                      ("data", np.zeros(0))):
        np.save(data / f"corpus.{part}.npy", arr)

    def add_files(manifest):
        for part in ("indptr", "indices", "data"):
            manifest["files"][f"corpus.{part}.npy"] = {"bytes": 0, "sha256": "0" * 64}

    rehash_index(good, add_files)
    rehash_index(good)  # sizes and sha256 of the added files
    with pytest.raises(FileFormatError, match="no use"):
        load_index(good)


def test_cli_build_query_calibrate_add_and_service(corpus, tmp_path, monkeypatch, capsys):
    from clitools import run_cli

    X, Q = corpus
    model = _model("classifier")
    model.save(tmp_path / "m.npz")
    sp.save_npz(tmp_path / "corpus.npz", X)
    sp.save_npz(tmp_path / "q.npz", Q[:3])
    sp.save_npz(tmp_path / "more.npz", Q[3:8])
    for kind in ("exact", "ann"):
        code, out, err = run_cli(["index", "build", "-m", tmp_path / "m.npz", "-d", tmp_path / "corpus.npz", "--kind",
                                  kind, "-o", tmp_path / kind, "--json"], monkeypatch, capsys)
        assert code == 0, err
        summary = json.loads(out)
        assert summary["index_kind"] == f"embedding-{kind}" and summary["n_documents"] == N
        assert summary["index_bytes"] == sum(f["bytes"] for f in json.loads(
            (tmp_path / kind / "manifest.json").read_text())["files"].values()) > N * R * 4
        code, out, err = run_cli(["query", "--index", tmp_path / kind, "-q", tmp_path / "q.npz", "-k", "5", "--json"],
                                 monkeypatch, capsys)
        assert code == 0, err
        lines = [json.loads(line) for line in out.splitlines()]
        assert len(lines) == 3 and all(len(line["results"]) == 5 for line in lines)
        assert lines[0]["search"]["kind"] == f"embedding-{kind}"
        code, out, err = run_cli(["index", "add", "--index", tmp_path / kind, "-d", tmp_path / "more.npz", "--json"],
                                 monkeypatch, capsys)
        assert code == 0, err
        assert json.loads(out)["n_documents"] == N + 5
    code, out, err = run_cli(["index", "calibrate", "--index", tmp_path / "ann", "--target-recall", "0.9", "--json"],
                             monkeypatch, capsys)
    assert code == 0, err
    assert json.loads(out)["calibration"]["target_recall"] == 0.9
    code, out, err = run_cli(["index", "build", "-m", tmp_path / "m.npz", "-d", tmp_path / "corpus.npz", "--shards", "2",
                              "-o", tmp_path / "sharded"], monkeypatch, capsys)
    assert code == 2 and err.startswith("error:") and "embedding model" in err

    from starlette.testclient import TestClient

    from sparsesim.service.app import create_app
    from sparsesim.service.state import QueryService

    with TestClient(create_app(QueryService(tmp_path / "ann"))) as client:
        rows = [{"indices": Q[i].indices.tolist(), "values": Q[i].data.tolist()} for i in range(2)]
        answer = client.post("/query", json={"vectors": rows, "top_k": 4})
        assert answer.status_code == 200, answer.text
        want = load_index(tmp_path / "ann").query(Q[:2], top_k=4)
        assert [[h["id"] for h in r] for r in answer.json()["results"]] == [list(map(int, w)) for w in want[0]]
        assert client.get("/info").status_code == 200
