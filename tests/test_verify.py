"""Derived index arrays (Y = X M^T postings, re-ranking values Z, projections) are checked against
the stored corpus and model at load: a re-hashed file with other finite values there is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.exceptions import FileFormatError
from sparsesim.indexes import build_index, load_index
from sparsesim.indexes.verify import verify_derived
from sparsesim.learners.bilinear import OASIS
from sparsesim.models import BilinearSimilarity

from indextools import rehash_index  # noqa: E402


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    X = sp.random(150, 40, density=0.15, format="csr", random_state=2)
    y = np.repeat(np.arange(5), 30)
    model = OASIS(n_triplets=300, random_state=0).fit(X, y).model_
    normed = BilinearSimilarity(model.W, identity=True, normalize=True)
    root = tmp_path_factory.mktemp("verify")
    build_index(model, X, kind="exact", strategy="corpus").save(root / "exact")
    build_index(normed, X, kind="exact", strategy="corpus").save(root / "exact-normed")
    build_index(model, X, kind="ann", dim=8, n_postings=50, heavy_min_nnz=1, rerank_memory=20 * 8 * 150).save(root / "ann")
    return root, model, X


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _edit(directory: Path, name: str, fn):
    """Replace one array with other *finite* values of the same dtype and shape, then re-hash
    every file and the manifest: a hostile but consistent index."""
    manifest = json.loads((directory / "manifest.json").read_text())
    data = directory / manifest["data_dir"]
    path = data / f"{name}.npy"
    arr = np.load(path).copy()
    new = np.asarray(fn(arr)).astype(arr.dtype)
    assert new.shape == arr.shape and np.all(np.isfinite(new)) and not np.array_equal(new, arr)
    np.save(path, new, allow_pickle=False)
    rehash_index(directory)


def _one(a, f):
    """``a`` with its entry 0 (flat) replaced by ``f(value)``."""
    out = a.copy()
    out.flat[0] = f(out.flat[0])
    return out


ATTACKS = {
    # exact index: Y^T = (X M^T)^T values
    "exact postings: one value doubled": ("exact", "postings.data", lambda a: _one(a, lambda v: 2 * v + 1)),
    "exact postings: values permuted": ("exact", "postings.data", lambda a: a[::-1]),
    "exact postings: all scaled": ("exact", "postings.data", lambda a: 1.5 * a),
    "exact postings: one value +1e-3": ("exact", "postings.data", lambda a: _one(a, lambda v: v + 1e-3)),
    "exact postings: one value zeroed": ("exact", "postings.data", lambda a: _one(a, lambda v: 0.0)),
    # an altered corpus value so large that the probe's own bound overflows (fuzz campaign seed 2030)
    "exact corpus: one value 1e308": ("exact", "corpus.data", lambda a: _one(a, lambda v: 1e308)),
    # normalising model: the stored corpus rows must be unit rows
    "normalised corpus row scaled": ("exact-normed", "corpus.data", lambda a: _one(a, lambda v: 3 * v)),
    # ann: the exact re-ranking values Z
    "ann heavy values: one changed": ("ann", "heavy.Z", lambda a: _one(a, lambda v: v + 0.25)),
    "ann heavy values: rows swapped": ("ann", "heavy.Z", lambda a: np.roll(a, 1, axis=0)),
    "ann heavy rows renamed": ("ann", "heavy.rows", lambda a: _swap_first_heavy_row(a)),
    "ann projection B scaled": ("ann", "projection.B", lambda a: 2 * a),
    "ann candidate postings: all values replaced": ("ann", "postings.floor", lambda a: np.full_like(a, 0.5)),
    "ann candidate postings: all codes replaced": ("ann", "postings.codes", lambda a: np.full_like(a, 255)),
    "ann candidate postings: impact order broken": ("ann", "postings.codes", lambda a: a[::-1]),
}


def _swap_first_heavy_row(rows):
    out = rows.copy()
    free = np.setdiff1d(np.arange(40), rows)
    out[0] = free[0]
    return out


@pytest.mark.parametrize("attack", sorted(ATTACKS))
@pytest.mark.parametrize("mmap", [False, True])
def test_hostile_derived_arrays_refused(indexes, tmp_path, attack, mmap):
    root, _, _ = indexes
    kind, name, fn = ATTACKS[attack]
    d = _copy(root / kind, tmp_path / "idx")
    _edit(d, name, fn)
    with pytest.raises(FileFormatError, match="altered"):
        load_index(d, mmap=mmap)


@pytest.mark.parametrize("kind", ["exact", "exact-normed", "ann"])
def test_genuine_indexes_pass_every_probe(indexes, kind):
    root, _, X = indexes
    for seed in range(20):  # many probe draws: no false alarm from rounding
        verify_derived(load_index(root / kind, mmap=bool(seed % 2)), seed=seed)


def test_grown_and_recalibrated_indexes_pass(indexes, tmp_path):
    root, model, X = indexes
    extra = sp.random(30, 40, density=0.15, format="csr", random_state=9)
    for kind in ("exact", "ann"):
        index = load_index(root / kind)
        index.add(extra, ids=list(range(1000, 1030)))
        index.save(tmp_path / f"{kind}-grown")
        verify_derived(load_index(tmp_path / f"{kind}-grown"))
    # a retrained model swapped into a postings-only ann index: Z is recomputed, postings are of the old model
    y = np.repeat(np.arange(5), 30)
    retrained = OASIS(n_triplets=200, random_state=1).fit(X, y).model_
    index = build_index(model, X, kind="ann", n_postings=50, heavy_min_nnz=1, rerank_memory=8 << 20)
    index.calibrate(model=retrained)
    index.save(tmp_path / "swapped")
    verify_derived(load_index(tmp_path / "swapped"))


def test_single_tampered_entry_detected_with_fresh_probes(indexes, tmp_path):
    """The probes are drawn afresh on every load; a change of 1e-4 (relative) to one value is caught
    every time. (A change near 1e-6 relative sits at the probes' rounding tolerance and escapes a
    load a few times in a hundred -- 7 of 300 measured -- which is why this asserts 1e-4; such a
    change moves scores by about 1e-7.) ``verify=False`` runs the check on every load instead of
    once per index content."""
    root, _, _ = indexes
    d = _copy(root / "exact", tmp_path / "idx")
    _edit(d, "postings.data", lambda a: _one(a, lambda v: v * (1 + 1e-4)))
    for _ in range(30):
        with pytest.raises(FileFormatError):
            load_index(d, verify=False)


@pytest.mark.parametrize("edit", [lambda m: m.update(nnz=m["nnz"] + 1), lambda m: m.update(nnz=0),
                                  lambda m: m.update(sparsity=0.5)])
def test_model_metadata_derived_from_w_must_match(indexes, tmp_path, edit):
    """nnz(M) and the sparsity in a model file's metadata are facts of W: a re-hashed file that
    states others is refused."""
    from sparsesim.persistence import bundle_checksum

    _, model, _ = indexes
    model.save(tmp_path / "m.npz")
    BilinearSimilarity.load(tmp_path / "m.npz")  # the genuine file loads
    with np.load(tmp_path / "m.npz") as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays.pop("__meta__").tobytes())
    edit(meta)
    meta["checksum"] = bundle_checksum(arrays, meta)
    arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez(tmp_path / "h.npz", **arrays)
    with pytest.raises(FileFormatError, match="altered"):
        BilinearSimilarity.load(tmp_path / "h.npz")


def _rehash_bundle(src, dst, meta_edit=None, arr_edit=None):
    from sparsesim.persistence import bundle_checksum

    with np.load(src) as z:
        arrays = {k: z[k].copy() for k in z.files}
    meta = json.loads(arrays.pop("__meta__").tobytes())
    if meta_edit:
        meta_edit(meta)
    if arr_edit:
        arr_edit(arrays)
    meta["checksum"] = bundle_checksum(arrays, meta)
    arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez(dst, **arrays)
    return dst


def _nan_first(arrays):
    arrays["own0_data"] = arrays["own0_data"].copy()
    arrays["own0_data"][0] = np.nan


MULTITASK_ATTACKS = {
    "NaN value": (None, _nan_first),
    "float32 values": (None, lambda a: a.update(own1_data=a["own1_data"].astype(np.float32))),
    "int16 indices": (None, lambda a: a.update(shared_indices=a["shared_indices"].astype(np.int16))),
    "index out of range": (None, lambda a: a.update(own0_indices=np.where(np.arange(a["own0_indices"].size) == 0, 10**6,
                                                                           a["own0_indices"]).astype(np.int32))),
    "n_tasks a string": (lambda m: m.update(n_tasks="2"), None),
    "n_tasks larger": (lambda m: m.update(n_tasks=3), None),
    "has_shared a string": (lambda m: m.update(has_shared="no"), None),
    "tasks of another length": (lambda m: m.update(tasks=[0]), None),
    "extra array": (None, lambda a: a.update(extra=np.zeros(3))),
}


@pytest.mark.parametrize("attack", sorted(MULTITASK_ATTACKS))
def test_hostile_multitask_model_files_refused(tmp_path, attack):
    """A re-hashed multi-task similarity file is checked like a single model: metadata schema,
    exact dtypes, canonical finite matrices."""
    from sparsesim.models import MultiTaskSimilarity

    mats = [sp.random(6, 6, density=0.3, format="csr", random_state=s) for s in range(3)]
    model = MultiTaskSimilarity(mats[:2], mats[2], tasks=["a", "b"])
    model.save(tmp_path / "mt.npz")
    back = MultiTaskSimilarity.load(tmp_path / "mt.npz")  # the genuine file loads, unchanged
    assert back.tasks == ["a", "b"] and all((x != y).nnz == 0 for x, y in zip(back.own, model.own))
    meta_edit, arr_edit = MULTITASK_ATTACKS[attack]
    _rehash_bundle(tmp_path / "mt.npz", tmp_path / "h.npz", meta_edit, arr_edit)
    with pytest.raises(FileFormatError):
        MultiTaskSimilarity.load(tmp_path / "h.npz")


# -- hostile but self-consistent index directories (issue 40, family 14) ---------------------------
@pytest.fixture(scope="module")
def query_strategy_index(indexes, tmp_path_factory):
    """An exact index of the "query" strategy: nothing derived from W is stored, so only the
    model checksum can tell an altered W."""
    root, model, X = indexes
    path = tmp_path_factory.mktemp("query-strategy") / "idx"
    build_index(model, X, kind="exact", strategy="query").save(path)
    return path, X


@pytest.mark.parametrize("mmap", [False, True])
def test_altered_stored_w_refused_memory_mapped_or_not(query_strategy_index, tmp_path, mmap, monkeypatch, capsys):
    from clitools import run_cli

    src, X = query_strategy_index
    load_index(src, mmap=mmap).query(X[:2], top_k=3)  # the genuine index loads and answers
    d = _copy(src, tmp_path / "idx")
    _edit(d, "model.W.data", lambda a: _one(a, lambda v: v + 0.5))  # every checksum but the model's recomputed
    with pytest.raises(FileFormatError, match="is not the model the manifest names"):
        load_index(d, mmap=mmap)
    code, out, err = run_cli(["query", "--index", d, "--query-ids", "0,1"], monkeypatch, capsys)
    assert code == 2 and err.startswith("error:") and "not the model the manifest names" in err and out == ""


def _data_elsewhere(src: Path, tmp_path: Path, data_dir) -> Path:
    """An index whose manifest points at a complete copy of its data outside the directory."""
    d = _copy(src, tmp_path / "idx")
    manifest = json.loads((d / "manifest.json").read_text())
    shutil.copytree(d / manifest["data_dir"], tmp_path / "elsewhere")
    target = str(tmp_path / "elsewhere") if data_dir == "absolute" else data_dir
    rehash_index(d, lambda m: m.update(data_dir=target))
    return d


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("data_dir", ["../elsewhere", "absolute"])
def test_data_directory_outside_the_index_refused_whatever_the_declared_version(
        query_strategy_index, tmp_path, monkeypatch, capsys, version, data_dir):
    src, X = query_strategy_index
    d = _data_elsewhere(src, tmp_path, data_dir)
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["format_version"] = version
    if version == 1:  # format 1 had no manifest checksum: a hostile one leaves it out
        manifest.pop("manifest_checksum")
    else:
        from sparsesim.indexes.storage import manifest_checksum

        manifest["manifest_checksum"] = manifest_checksum(manifest)
    (d / "manifest.json").write_text(json.dumps(manifest))
    for mmap in (False, True):
        with pytest.raises(FileFormatError, match="no longer read" if version == 1 else "invalid data_dir"):
            load_index(d, mmap=mmap)
    from clitools import run_cli

    sp.save_npz(tmp_path / "new.npz", X[:2])
    for args in (["query", "--index", d, "--query-ids", "0"],
                 ["index", "add", "--index", d, "--data", tmp_path / "new.npz"]):
        code, out, err = run_cli(args, monkeypatch, capsys)
        assert code == 2 and err.startswith("error:") and "Traceback" not in err, (args, err)
    assert sorted(p.name for p in (tmp_path / "elsewhere").iterdir()) == \
        sorted(json.loads((src / "manifest.json").read_text())["files"])  # nothing written there


@pytest.mark.parametrize("missing", ["indptr", "indices", "data"])
@pytest.mark.parametrize("mmap", [False, True])
def test_manifest_listing_part_of_the_stored_w_refused(query_strategy_index, tmp_path, missing, mmap):
    src, _ = query_strategy_index
    d = _copy(src, tmp_path / "idx")
    data = d / json.loads((d / "manifest.json").read_text())["data_dir"]
    (data / f"model.W.{missing}.npy").unlink()

    def drop(manifest):
        del manifest["files"][f"model.W.{missing}.npy"]

    rehash_index(d, drop)
    with pytest.raises(FileFormatError, match="the stored model is incomplete"):
        load_index(d, mmap=mmap)
