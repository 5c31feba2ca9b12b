"""Memory-mapped indexes check their large arrays block by block on first use, before a query reads them."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.data.synthetic import rcv1_like
from sparsesim.exceptions import FileFormatError
from sparsesim.indexes import build_index, load_index
from sparsesim.indexes.blocks import BLOCK_BYTES
from sparsesim.models import BilinearSimilarity

from indextools import rehash_index  # noqa: E402

N, D = 1500, 3000


@pytest.fixture(scope="module")
def corpus():
    return rcv1_like(N, n_features=D, nnz_per_doc=30, n_classes=5, class_vocab=300, seed=3).X


@pytest.fixture(scope="module")
def model():
    W = sp.random(D, D, density=0.05, random_state=1, format="csr") * 0.05
    return BilinearSimilarity(W)


@pytest.fixture(scope="module")
def saved(tmp_path_factory, corpus, model):
    """Two ann indexes: every row of W scattered at query time (``light``), and heavy rows in Z."""
    root = tmp_path_factory.mktemp("blocks")
    common = dict(kind="ann", target_recall=None, n_postings=512, sparse_pool=50)
    build_index(model, corpus, rerank_memory=0, **common).save(root / "light")
    build_index(model, corpus, rerank_memory=16 << 20, heavy_min_nnz=1, **common).save(root / "heavy")
    build_index(model, corpus, rerank_memory=0, read_allocation="threshold", **common).save(root / "threshold")
    return root


def _copy(saved, tmp_path, name):
    shutil.copytree(saved / name, tmp_path / name)
    path = tmp_path / name
    return path, path / json.loads((path / "manifest.json").read_text())["data_dir"]


def _poke(path, value, dtype):
    """Overwrite one element in the middle of the array of a .npy file (same size)."""
    arr = np.load(path, mmap_mode="r+")
    flat = arr.reshape(-1)
    flat[flat.size // 2] = np.array(value, dtype=dtype)
    arr.flush()
    del arr


def test_mmap_load_reads_no_large_array_and_checks_on_use(saved, corpus, tmp_path):
    path, _ = _copy(saved, tmp_path, "heavy")  # a copy: files this process has not verified or written
    index = load_index(path, mmap=True, warm_up=False)  # the warm-up would read a few rows
    guards = index._guards
    assert {"corpus.data", "corpus.indices", "postings.codes", "postings.ids", "heavy.Z",
            "model.W.data", "model.W.indices"} <= set(guards)
    assert all(g.pending == g.n_blocks and g.n_blocks >= 1 for g in guards.values())  # nothing hashed at load
    assert guards["heavy.Z"].n_blocks > 100
    ids, scores = index.query(corpus[:1], top_k=10)
    z = guards["heavy.Z"]
    assert 0 < z.n_blocks - z.pending < z.n_blocks  # only the blocks of the candidates' rows
    eager = load_index(saved / "heavy")
    ids2, scores2 = eager.query(corpus[:1], top_k=10)
    np.testing.assert_array_equal(np.array(ids), np.array(ids2))
    np.testing.assert_array_equal(scores, scores2)
    # reaching a whole array from outside the query path checks all of it first
    assert index.Z_ is not None and z.pending == 0
    index.verify_all()
    assert all(g.pending == 0 for g in guards.values())


@pytest.mark.parametrize("name,victim", [("light", "model.W.data"), ("light", "model.W.indices"),
                                         ("light", "corpus.data"), ("light", "corpus.indices"),
                                         ("light", "postings.codes"), ("light", "postings.ids"),
                                         ("threshold", "postings.codes"), ("heavy", "heavy.Z")])
def test_corrupt_block_refused_before_an_answer(saved, corpus, tmp_path, name, victim):
    path, data = _copy(saved, tmp_path, name)
    raw = bytearray((data / f"{victim}.npy").read_bytes())
    assert len(raw) > 2 * BLOCK_BYTES
    raw[len(raw) // 2] ^= 0x01
    (data / f"{victim}.npy").write_bytes(bytes(raw))
    index = load_index(path, mmap=True)  # the large arrays are not hashed at load
    with pytest.raises(FileFormatError, match="sha256 mismatch in bytes"):
        index.query(corpus, top_k=10)  # every document as a query: every block is read
    with pytest.raises(FileFormatError, match="sha256 mismatch"):
        load_index(path, mmap=False)  # read whole: hashed whole at load


@pytest.mark.parametrize("name,victim", [("light", "model.W.data"), ("light", "corpus.indices"),
                                         ("light", "postings.codes"), ("threshold", "postings.codes"),
                                         ("heavy", "heavy.Z")])
def test_corrupt_block_refused_on_the_numpy_path(saved, corpus, tmp_path, monkeypatch, name, victim):
    """The first queries of a process (numpy, indexes/small_batch.py) check the same blocks first."""
    from sparsesim.indexes import small_batch

    monkeypatch.setattr(small_batch, "take", lambda n: True)
    path, data = _copy(saved, tmp_path, name)
    raw = bytearray((data / f"{victim}.npy").read_bytes())
    raw[len(raw) // 2] ^= 0x01
    (data / f"{victim}.npy").write_bytes(bytes(raw))
    index = load_index(path, mmap=True)
    with pytest.raises(FileFormatError, match="sha256 mismatch in bytes"):
        index.query(corpus, top_k=10)


def test_untouched_corrupt_block_found_by_verify_all(saved, corpus, tmp_path):
    path, data = _copy(saved, tmp_path, "heavy")
    raw = bytearray((data / "heavy.Z.npy").read_bytes())
    raw[-3] ^= 0x01  # the last document's re-ranking values
    (data / "heavy.Z.npy").write_bytes(bytes(raw))
    index = load_index(path, mmap=True)
    index.query(corpus[:1], top_k=5)  # answers: its candidates' blocks are intact
    assert not index._guards["heavy.Z"].done[-1]
    with pytest.raises(FileFormatError, match="sha256 mismatch"):
        index.verify_all()
    with pytest.raises(FileFormatError, match="sha256 mismatch"):
        load_index(path, mmap=True).Z_  # the whole table, from outside the query path


@pytest.mark.parametrize("victim,value,dtype,match", [
    ("postings.ids", 60000, np.uint16, r"outside \[0, 1500\)"),
    ("corpus.indices", -5, np.int32, r"outside \[0, 3000\)"),
    ("model.W.indices", 2**31 - 1, np.int32, r"outside \[0, 3000\)"),
    ("corpus.data", np.nan, np.float64, "NaN or infinite"),
    ("postings.floor", np.inf, np.float32, "finite"),
])
def test_out_of_range_values_refused_before_a_kernel_reads_them(saved, corpus, tmp_path, victim, value, dtype, match):
    path, data = _copy(saved, tmp_path, "light")
    _poke(data / f"{victim}.npy", value, dtype)
    with pytest.raises(FileFormatError, match=match):  # no hashing: the structural checks still run
        load_index(path, mmap=True, verify=False).query(corpus, top_k=10)
    with pytest.raises(FileFormatError):
        load_index(path, mmap=False, verify=False)


def test_format_2_directory_still_read_and_checked_whole(saved, corpus, model, tmp_path):
    """A format-2 index (W inside model.npz, whole-file checksums only) loads, memory-mapped too,
    with every array checked at load."""
    path, data = _copy(saved, tmp_path, "light")
    for part in ("indptr", "indices", "data"):
        (data / f"model.W.{part}.npy").unlink()
    (data / "blocks.sha256").unlink()
    (data / "model.npz").unlink()
    model.save(data / "model.npz")

    def as_format_2(manifest):
        manifest["format_version"] = 2
        manifest.pop("block_bytes")
        for name in [f for f in manifest["files"] if f.startswith("model.W.") or f == "blocks.sha256"]:
            del manifest["files"][name]

    rehash_index(path, as_format_2)
    # an ann index of that format holds float32 posting lists: refused with a request to rebuild
    with pytest.raises(FileFormatError, match="rebuild it with `sparsesim index build`"):
        load_index(path, mmap=True)
    exact = tmp_path / "exact"
    build_index(model, corpus, kind="exact", strategy="corpus").save(exact)
    data = exact / json.loads((exact / "manifest.json").read_text())["data_dir"]
    for part in ("indptr", "indices", "data"):
        (data / f"model.W.{part}.npy").unlink()
    (data / "blocks.sha256").unlink()
    (data / "model.npz").unlink()
    model.save(data / "model.npz")
    rehash_index(exact, as_format_2)
    index = load_index(exact, mmap=True)
    assert index._guards == {}
    ids, scores = index.query(corpus[:3], top_k=5)
    ids2, scores2 = build_index(model, corpus, kind="exact", strategy="corpus").query(corpus[:3], top_k=5)
    np.testing.assert_array_equal(np.array(ids), np.array(ids2))
    np.testing.assert_allclose(scores, scores2, rtol=0, atol=1e-12)


# -- fast from the first query: files verified whole (or written) before are not checked again -----
def _wait_until_verified(index, timeout=120.0):
    import time

    deadline = time.time() + timeout
    while any(g.pending for g in index._guards.values()) and time.time() < deadline:
        time.sleep(0.05)
    assert not any(g.pending for g in index._guards.values())


def test_files_written_or_verified_whole_load_without_block_checks(saved, corpus, tmp_path):
    path, data = _copy(saved, tmp_path, "heavy")  # copied: not written or verified by this user yet
    want = load_index(saved / "heavy").query(corpus[:3], top_k=10)
    first = load_index(path, mmap=True)
    assert {"corpus.data", "heavy.Z", "model.W.data"} <= set(first._guards)
    first.verify_all()  # every block hashed and checked: each file is recorded as verified
    again = load_index(path, mmap=True)
    assert again._guards == {}
    got = again.query(corpus[:3], top_k=10)
    np.testing.assert_array_equal(np.array(got[0]), np.array(want[0]))
    np.testing.assert_array_equal(got[1], want[1])
    # a file changed since (same size, one byte): checked block by block again, and refused
    raw = bytearray((data / "heavy.Z.npy").read_bytes())
    raw[len(raw) // 2] ^= 0x01
    (data / "heavy.Z.npy").write_bytes(bytes(raw))
    changed = load_index(path, mmap=True)
    assert set(changed._guards) == {"heavy.Z"}
    with pytest.raises(FileFormatError, match="sha256 mismatch in bytes"):
        changed.query(corpus, top_k=10)
    # an index saved by this process loads without block checks
    build_index(BilinearSimilarity(sp.random(D, D, density=0.01, random_state=5, format="csr")), corpus[:300],
                kind="exact", strategy="corpus").save(tmp_path / "fresh")
    assert load_index(tmp_path / "fresh", mmap=True)._guards == {}


def test_background_verification_checks_every_block_and_records_it(saved, corpus, tmp_path):
    path, data = _copy(saved, tmp_path, "light")
    index = load_index(path, mmap=True, verify_in_background=True)
    index.query(corpus[:2], top_k=5)  # queries run meanwhile, checking what they read themselves
    _wait_until_verified(index)
    assert index.background_error_ is None
    assert load_index(path, mmap=True)._guards == {}
    # a corrupt block is found by the background thread and still refused when a query reads it
    bad, bad_data = _copy(saved, tmp_path / "bad", "light")
    raw = bytearray((bad_data / "corpus.data.npy").read_bytes())
    raw[len(raw) // 2] ^= 0x01
    (bad_data / "corpus.data.npy").write_bytes(bytes(raw))
    index = load_index(bad, mmap=True, verify_in_background=True)
    import time

    deadline = time.time() + 120
    while index.background_error_ is None and time.time() < deadline:
        time.sleep(0.05)
    assert "sha256 mismatch" in index.background_error_
    with pytest.raises(FileFormatError, match="sha256 mismatch"):
        index.query(corpus, top_k=10)
    assert "corpus.data" in load_index(bad, mmap=True)._guards  # never recorded as verified


def test_load_warms_the_kernels_up_and_a_corrupt_warm_row_is_refused_by_the_query(saved, corpus, tmp_path,
                                                                                   monkeypatch):
    """``load_index`` answers one small batch of the index's own documents before returning (the
    kernels' first call in a process falls there, not on the user's first batch); a corrupt block
    among what it reads is not reported by the load, and the query that reads it refuses it."""
    from sparsesim.indexes.base import CorpusIndex

    calls = []
    original = CorpusIndex.warm_up
    monkeypatch.setattr(CorpusIndex, "warm_up", lambda self: calls.append(self) or original(self))
    path, _ = _copy(saved, tmp_path, "heavy")
    index = load_index(path, mmap=True)
    assert calls == [index]
    load_index(path, mmap=True, warm_up=False)
    assert len(calls) == 1
    bad, bad_data = _copy(saved, tmp_path / "bad", "light")
    raw = bytearray((bad_data / "corpus.data.npy").read_bytes())
    raw[200:264] = bytes(64)  # the first rows: the ones the warm-up reads
    raw[len(raw) // 2] ^= 0x01
    (bad_data / "corpus.data.npy").write_bytes(bytes(raw))
    loaded = load_index(bad, mmap=True)  # the warm-up's error is not the load's
    assert len(calls) == 2
    assert loaded._guards["corpus.data"].pending  # the bad blocks were not recorded as checked
    with pytest.raises(FileFormatError, match="sha256 mismatch"):
        loaded.query(corpus, top_k=10)
