"""Saved indexes over a compact model (M = D + W + U V^T): the round trip (mapped or not) gives the
same answers, and hostile index directories -- truncated, flipped, wrong dtype or shape, NaN,
altered but consistently rehashed, another model -- are refused with one FileFormatError."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.compact import CompactSimilarity
from sparsesim.data.synthetic import rcv1_like
from sparsesim.exceptions import FileFormatError, ModelMismatchError
from sparsesim.indexes import CompactAnnIndex, CompactExactIndex, build_index, load_index, open_index

from indextools import rehash_index  # noqa: E402

N, D, R = 600, 300, 6


@pytest.fixture(scope="module")
def corpus():
    data = rcv1_like(N + 20, n_features=D, nnz_per_doc=20, n_classes=5, class_vocab=80, seed=3)
    return data.X[:N], data.X[N:]


def _model(seed: int = 0) -> CompactSimilarity:
    rng = np.random.default_rng(seed)
    W = sp.random(D, D, density=0.02, format="csr", random_state=seed)
    W.setdiag(0.0)
    W.eliminate_zeros()
    return CompactSimilarity(1.0 + 0.1 * rng.random(D), 0.3 * W, 0.4 * rng.standard_normal((D, R)),
                             0.4 * rng.standard_normal((D, R)), metadata={"algorithm": "ssi-dwuv"})


@pytest.fixture(scope="module")
def saved(corpus, tmp_path_factory):
    """The two kinds saved, with the answers of the in-memory index that was saved."""
    X, Q = corpus
    root = tmp_path_factory.mktemp("compact-idx")
    model = _model()
    answers = {}
    for kind, params in (("exact", {"ids": [f"d{i}" for i in range(N)]}),
                         ("ann", {"target_recall": 0.9, "calibration_size": 60})):
        index = build_index(model, X, kind=kind, **params)
        answers[kind] = (*index.query(Q, top_k=10), index.calibration_)
        index.save(root / kind)
    return root, model, answers


@pytest.mark.parametrize("kind", ["exact", "ann"])
@pytest.mark.parametrize("mmap", [False, True])
def test_round_trip_gives_the_same_answers(corpus, saved, kind, mmap):
    X, Q = corpus
    root, model, answers = saved
    index = open_index(root / kind, mmap=mmap)
    assert isinstance(index, CompactExactIndex if kind == "exact" else CompactAnnIndex)
    assert index.kind == f"compact-{kind}" and index.model.checksum() == model.checksum()
    ids, scores = index.query(Q, top_k=10)
    want_ids, want_scores, calibration = answers[kind]
    assert [list(r) for r in ids] == [list(r) for r in want_ids]
    np.testing.assert_array_equal(scores, want_scores)
    if kind == "exact":  # and they are the model's top 10 (to the float32 rounding of the embeddings)
        full = model.score_matrix(Q, X)
        np.testing.assert_allclose(scores, -np.sort(-full, axis=1)[:, :10], rtol=1e-6, atol=1e-6)
    else:
        assert index.calibration_ == calibration and index.calibration_["met"]
    manifest = json.loads((root / kind / "manifest.json").read_text())
    assert manifest["model"]["model_kind"] == "compact-similarity" and manifest["model"]["n_components"] == R
    with pytest.raises(ModelMismatchError):
        open_index(root / kind, model=_model(seed=1))  # another model of the same shape


def _data(directory):
    return directory / json.loads((directory / "manifest.json").read_text())["data_dir"]


def _replace(path, fn):
    arr = np.load(path)
    np.save(path, fn(arr.copy()), allow_pickle=False)


def _at(a, pos, value):
    out = a.copy()
    out.flat[pos] = value
    return out


# (index kind, file, change): each written back and every checksum recomputed (a consistent file)
HOSTILE = {
    "an embedding changed": ("exact", "embeddings.npy", lambda a: _at(a, 7, a.flat[7] + np.float32(0.5))),
    "embeddings NaN": ("exact", "embeddings.npy", lambda a: _at(a, 3, np.nan)),
    "embeddings float64": ("exact", "embeddings.npy", lambda a: a.astype(np.float64)),
    "embeddings one column short": ("ann", "embeddings.npy", lambda a: np.ascontiguousarray(a[:, :-1])),
    "embeddings one row short": ("exact", "embeddings.npy", lambda a: np.ascontiguousarray(a[:-1])),
    "corpus value changed": ("exact", "corpus.data.npy", lambda a: _at(a, 5, a.flat[5] * 2.0)),
    "corpus value infinite": ("ann", "corpus.data.npy", lambda a: _at(a, 5, np.inf)),
    "corpus indices int64": ("exact", "corpus.indices.npy", lambda a: a.astype(np.int64)),
    "corpus index past d": ("exact", "corpus.indices.npy", lambda a: _at(a, 0, D + 3)),
    "posting values replaced": ("ann", "postings.data.npy", lambda a: np.full_like(a, 0.5)),
    "posting document past n": ("ann", "postings.indices.npy", lambda a: _at(a, 0, N + 1)),
    "ids duplicated": ("exact", "ids.npy", lambda a: _at(a, 1, a[0])),
}


@pytest.mark.parametrize("attack", sorted(HOSTILE))
@pytest.mark.parametrize("mmap", [False, True])
def test_hostile_but_consistent_files_refused(corpus, saved, tmp_path, attack, mmap):
    X, Q = corpus
    root = saved[0]
    kind, fname, fn = HOSTILE[attack]
    target = tmp_path / "idx"
    shutil.copytree(root / kind, target)
    _replace(_data(target) / fname, fn)
    rehash_index(target)
    with pytest.raises(FileFormatError):
        index = load_index(target, mmap=mmap)
        index.query(Q, top_k=10)  # memory-mapped: a bad block may be refused when first read
        index.verify_all()


@pytest.mark.parametrize("victim", ["model.npz", "embeddings.npy", "corpus.data.npy", "postings.data.npy",
                                    "faiss.index", "ids.npy"])
def test_truncated_flipped_and_missing_files_refused(saved, tmp_path, victim):
    root = saved[0]
    target = tmp_path / "idx"
    shutil.copytree(root / "ann", target)
    path = _data(target) / victim
    raw = bytearray(path.read_bytes())
    flipped = raw.copy()
    flipped[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(flipped))
    with pytest.raises(FileFormatError, match="sha256 mismatch"):
        load_index(target)
    path.write_bytes(bytes(raw[: len(raw) // 2]))
    with pytest.raises(FileFormatError, match="truncated"):
        load_index(target, verify=False)
    path.unlink()
    with pytest.raises(FileFormatError, match="missing"):
        load_index(target)


def test_stored_model_replaced_or_manifest_facts_changed_refused(saved, tmp_path):
    root = saved[0]
    # another compact model in model.npz, every checksum but the manifest's model checksum recomputed
    target = tmp_path / "other"
    shutil.copytree(root / "exact", target)
    _model(seed=1).save(tmp_path / "other.npz")
    shutil.copyfile(tmp_path / "other.npz", _data(target) / "model.npz")
    rehash_index(target)
    with pytest.raises(FileFormatError, match="model"):
        load_index(target)
    # a model file whose U holds a NaN (its own checksum recomputed): the model loader refuses it
    target = tmp_path / "nan"
    shutil.copytree(root / "exact", target)
    from sparsesim.compact import COMPACT_MODEL_KIND
    from sparsesim.persistence import load_bundle, save_bundle

    arrays, meta = load_bundle(_data(target) / "model.npz", kind=COMPACT_MODEL_KIND)
    arrays["U"][0, 0] = np.nan
    meta.pop("checksum", None)
    (_data(target) / "model.npz").unlink()
    save_bundle(_data(target) / "model.npz", arrays, meta, kind=COMPACT_MODEL_KIND)
    rehash_index(target)
    with pytest.raises(FileFormatError, match="NaN"):
        load_index(target)
    # the manifest's model facts edited (its checksum recomputed): rank, kind of model
    for key, value in (("n_components", R + 1), ("model_kind", "embedding-similarity"), ("nnz_w", -1)):
        target = tmp_path / f"facts-{key}"
        shutil.copytree(root / "ann", target)
        rehash_index(target, lambda m, key=key, value=value: m["model"].__setitem__(key, value))
        with pytest.raises(FileFormatError):
            load_index(target)


def test_ann_calibration_stratified_by_labels(corpus):
    """`index build --kind ann` on a labelled corpus calibrates on samples stratified by its labels."""
    X, _ = corpus
    index = build_index(_model(), X, kind="ann", target_recall=None, calibration_size=40)
    labels = np.arange(N) % 4
    record = index.calibrate(strata=labels, target_recall=0.9)
    assert record["target_recall"] == 0.9 and index.calibration_ is record
    with pytest.raises(Exception, match="strata"):
        index.calibrate(strata=labels[:-1])  # one label per corpus document


def test_a_rank_0_model_gets_an_exact_index_and_a_clear_ann_refusal(corpus, tmp_path):
    X, Q = corpus
    W = _model().W
    flat = CompactSimilarity(np.ones(D), W, np.zeros((D, 0)), np.zeros((D, 0)))  # D + W only
    exact = build_index(flat, X, kind="exact")
    exact.save(tmp_path / "idx")
    rows, scores = open_index(tmp_path / "idx").query_rows(Q, top_k=5)
    np.testing.assert_allclose(scores, -np.sort(-flat.score_matrix(Q, X), axis=1)[:, :5], rtol=1e-9, atol=1e-12)
    from sparsesim.exceptions import InvalidInputError

    with pytest.raises(InvalidInputError, match="rank 0"):
        build_index(flat, X, kind="ann")  # (FAISS on 0-wide vectors stopped the process with SIGFPE)
