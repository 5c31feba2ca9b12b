"""Bad input and safety: the validation layer, hostile files, atomic and locked writes, CLI errors."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.exceptions import (ConcurrentWriteError, FileFormatError, InvalidInputError, InvalidParameterError,
                                  UnsafeTargetError)
from sparsesim.learners.bilinear import OASIS
from sparsesim.models import BilinearSimilarity
from sparsesim.persistence import (atomic_write, bundle_checksum, check_output_file, dumps_strict,
                                   read_npz, sweep_stale_temps, target_lock)
from sparsesim.validation import (check_bool, check_csr, check_float, check_int, check_labels, check_random_state)

from sparsesim.indexes import build_index, load_index

from indextools import rehash_index  # noqa: E402


def _hostile_csr(n=4, d=6, indices=None, indptr=None, data=None):
    """A CSR matrix whose arrays are set directly (scipy's constructor would not check them either)."""
    X = sp.csr_matrix((n, d))
    X.indptr = np.asarray(indptr if indptr is not None else [0, 1, 2, 3, 4], dtype=np.int64)
    X.indices = np.asarray(indices if indices is not None else [0, 1, 2, 3], dtype=np.int32)
    X.data = np.asarray(data if data is not None else [1.0, 1.0, 1.0, 1.0])
    return X


HOSTILE = {
    "index beyond n_features": dict(indices=[0, 1, 2, 6]),
    "huge index": dict(indices=[0, 1, 2, 2**31 - 1]),
    "negative index": dict(indices=[0, -1, 2, 3]),
    "indptr past nnz": dict(indptr=[0, 1, 2, 3, 9]),
    "indptr not monotone": dict(indptr=[0, 3, 2, 3, 4]),
    "indptr not from 0": dict(indptr=[1, 1, 2, 3, 4]),
    "NaN value": dict(data=[1.0, np.nan, 1.0, 1.0]),
    "inf value": dict(data=[1.0, np.inf, 1.0, 1.0]),
}


# --------------------------------------------------------------------------- validation layer
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_check_csr_refuses_malformed_matrices(case):
    X = _hostile_csr(**HOSTILE[case])
    with pytest.raises(InvalidInputError):
        check_csr(X)
    with pytest.raises(InvalidInputError):
        check_csr(X.T.T if case.startswith("NaN") else X, n_features=6)


def test_check_csr_canonical_copy_and_types():
    X = _hostile_csr(indices=[0, 1, 1, 3], indptr=[0, 1, 3, 3, 4], data=[1.0, 2.0, 3.0, 4.0])
    before = X.indices.copy()
    out = check_csr(X)
    assert out.has_sorted_indices and out.nnz == 3 and out[1, 1] == 5.0
    np.testing.assert_array_equal(X.indices, before)  # the caller's matrix is untouched
    for bad in (np.array([["a", "b"]]), np.array([[1 + 2j]]), np.array([[object()]], dtype=object)):
        with pytest.raises(InvalidInputError, match="real numbers"):
            check_csr(bad)
    coo = sp.coo_matrix((np.ones(2), (np.array([0, 5]), np.array([0, 1]))), shape=(6, 3))
    coo.row[1] = 9  # beyond the shape
    with pytest.raises(InvalidInputError, match="outside"):
        check_csr(coo)
    with pytest.raises(InvalidInputError, match="overflows"):
        check_csr(_hostile_csr(indices=[0, 0, 1, 2], indptr=[0, 2, 2, 3, 4], data=[1e308, 1e308, 1.0, 1.0]))


def test_every_entry_point_refuses_hostile_matrices():
    rng = np.random.default_rng(0)
    X = sp.random(40, 6, density=0.5, format="csr", random_state=0)
    y = np.repeat([0, 1], 20)
    bad = X.copy()
    bad.indices = bad.indices.copy()
    bad.indices[0] = 6
    model = OASIS(n_triplets=50, random_state=0).fit(X, y).model_
    triplets = rng.integers(0, 40, size=(10, 3))
    calls = {
        "fit": lambda: OASIS(n_triplets=10).fit(bad, y),
        "partial_fit": lambda: OASIS().partial_fit_triplets(bad, triplets),
        "scorer": lambda: model.scorer(bad),
        "score_matrix": lambda: model.score_matrix(bad, X),
        "transform": lambda: model.transform_corpus(bad),
        "index build": lambda: build_index(model, bad),
        "index query": lambda: build_index(model, X).query(bad, top_k=3),
        "index add": lambda: build_index(model, X).add(bad),
    }
    for name, call in calls.items():
        with pytest.raises(InvalidInputError, match="column index 6"):
            call()


def test_parameter_checks_name_the_range():
    with pytest.raises(InvalidParameterError, match=r"n_triplets must be an integer in \[1, inf\), got 2.5"):
        check_int(2.5, "n_triplets", 1)
    with pytest.raises(InvalidParameterError, match="C must be positive"):
        check_float(float("inf"), "C", 0, None, low_open=True)
    with pytest.raises(InvalidParameterError, match=r"C must be positive \(a finite number in \(0, inf\)\)"):
        check_float(0, "C", 0, None, low_open=True)
    with pytest.raises(InvalidParameterError, match="True or False"):
        check_bool("no", "identity")
    with pytest.raises(InvalidParameterError, match="random_state"):
        check_random_state(-1)
    assert check_int(np.int32(3), "k") == 3 and check_random_state(5) == 5
    with pytest.raises(InvalidParameterError):
        check_int(3.0, "k")
    with pytest.raises(InvalidInputError, match="one kind"):
        check_labels(np.array([1, "a", 2.5, 1], dtype=object), 4)


# --------------------------------------------------------------------------- hostile model files
def _rewrite_model(src, dst, meta_edit=None, arr_edit=None):
    with np.load(src) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays.pop("__meta__").tobytes())
    if meta_edit:
        meta_edit(meta)
    if arr_edit:
        arr_edit(arrays)
    meta["checksum"] = bundle_checksum(arrays, meta)  # hostile but consistent
    arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez(dst, **arrays)
    return dst


def _set(key, value):
    return lambda meta: meta.update({key: value})


def _arr(name, fn):
    def edit(arrays):
        arrays[name] = fn(arrays[name].copy())
    return edit


def _neg(a):
    a[0] = -3
    return a


def _big(a):
    a[-1] = 10**6
    return a


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    W = sp.random(30, 30, density=0.2, format="csr", random_state=1)
    path = tmp_path_factory.mktemp("model") / "m.npz"
    BilinearSimilarity(W).save(path)
    return path


@pytest.mark.parametrize("meta_edit,arr_edit", [
    (_set("identity", "no"), None), (_set("normalize", 1.5), None), (_set("n_features", 2**63), None),
    (_set("n_features", "30"), None), (_set("n_features", 31), None), (_set("split_seed", -1), None),
    (_set("train_fraction", 2.0), None), (_set("format_version", "abc"), None),
    (None, _arr("indices", _neg)), (None, _arr("indices", _big)), (None, _arr("data", lambda a: a.astype(np.float32))),
    (None, _arr("data", lambda a: a.astype(np.complex128))), (None, _arr("indices", lambda a: a.astype(np.float64))),
    (None, _arr("indices", lambda a: a.astype(np.int8))), (None, _arr("data", lambda a: np.where(a > 0.5, np.nan, a))),
    (None, _arr("indptr", lambda a: a[::-1].copy())), (None, _arr("data", lambda a: a.astype(str))),
])
def test_hostile_consistent_model_files_refused(model_file, tmp_path, meta_edit, arr_edit):
    path = _rewrite_model(model_file, tmp_path / "h.npz", meta_edit, arr_edit)
    with pytest.raises(FileFormatError):
        BilinearSimilarity.load(path)


def test_model_metadata_is_inside_the_checksum(model_file, tmp_path):
    with np.load(model_file) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays.pop("__meta__").tobytes())
    meta["identity"] = False  # edited without recomputing the checksum
    arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez(tmp_path / "f.npz", **arrays)
    with pytest.raises(FileFormatError, match="checksum"):
        BilinearSimilarity.load(tmp_path / "f.npz")
    for doc in ("[" * 100_000 + "]" * 100_000, "[1, 2]", "null", '"abc"', '{"kind": NaN}'):
        arrays["__meta__"] = np.frombuffer(doc.encode(), np.uint8)
        np.savez(tmp_path / "g.npz", **arrays)
        with pytest.raises(FileFormatError):
            BilinearSimilarity.load(tmp_path / "g.npz")


def test_npz_bombs_refused_before_allocation(tmp_path):
    import zipfile

    # a member whose header declares 10^12 floats in a tiny file
    header = np.lib.format.header_data_from_array_1_0(np.zeros(1))
    header["shape"] = (10**12,)
    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open("data.npy", "w") as f:
            np.lib.format.write_array_header_1_0(f, header)
            f.write(b"\0" * 64)
    with pytest.raises(FileFormatError, match="declares"):
        read_npz(path)
    # a deflated member that expands far beyond the file
    with zipfile.ZipFile(tmp_path / "zeros.npz", "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open("data.npy", "w") as f:
            np.lib.format.write_array(f, np.zeros(40_000_000, np.uint8))
    with pytest.raises(FileFormatError, match="bomb"):
        read_npz(tmp_path / "zeros.npz")


# --------------------------------------------------------------------------- hostile index files
@pytest.fixture(scope="module")
def small_index(tmp_path_factory):
    X = sp.random(120, 40, density=0.15, format="csr", random_state=2)
    y = np.repeat(np.arange(4), 30)
    model = OASIS(n_triplets=300, random_state=0).fit(X, y).model_
    root = tmp_path_factory.mktemp("indexes")
    build_index(model, X, kind="exact", strategy="corpus").save(root / "exact")
    build_index(model, X, kind="ann", dim=8, n_postings=50, heavy_min_nnz=1, rerank_memory=8 << 20).save(root / "ann")
    build_index(model, X, kind="ann", dim=8, faiss_index="hnsw", heavy_min_nnz=1, rerank_memory=8 << 20).save(root / "hnsw")
    return root, model, X


def _copy_index(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def _rehash(directory: Path, manifest_edit=None):
    """Recompute every checksum (a hostile, consistent index)."""
    rehash_index(directory, manifest_edit)


def _edit_array(directory: Path, name: str, fn):
    manifest = json.loads((directory / "manifest.json").read_text())
    path = directory / manifest["data_dir"] / f"{name}.npy"
    np.save(path, fn(np.load(path).copy()), allow_pickle=False)


ARRAY_ATTACKS = {
    "postings index out of range": ("postings.indices", lambda a: np.where(np.arange(a.size) == 0, 10**6, a).astype(a.dtype)),
    "negative postings index": ("postings.indices", lambda a: np.where(np.arange(a.size) == 1, -5, a).astype(a.dtype)),
    "negative corpus index": ("corpus.indices", lambda a: np.where(np.arange(a.size) == 0, -1, a).astype(a.dtype)),
    "corpus index out of range": ("corpus.indices", lambda a: np.where(np.arange(a.size) == 2, 41, a).astype(a.dtype)),
    "corpus indptr past nnz": ("corpus.indptr", lambda a: np.where(np.arange(a.size) == a.size - 1, a[-1] + 7, a)),
    "NaN corpus data": ("corpus.data", lambda a: np.where(np.arange(a.size) == 0, np.nan, a)),
    "NaN postings data": ("postings.data", lambda a: np.where(np.arange(a.size) == 0, np.nan, a)),
    "duplicate ids": ("ids", lambda a: np.where(np.arange(a.size) == 1, a[0], a)),
    "float corpus indices": ("corpus.indices", lambda a: a.astype(np.float64)),
    "int8 corpus indices": ("corpus.indices", lambda a: a.astype(np.int8)),
    "float16 corpus data": ("corpus.data", lambda a: a.astype(np.float16)),
    "complex corpus data": ("corpus.data", lambda a: a.astype(np.complex128)),
    "string corpus data": ("corpus.data", lambda a: a.astype(str)),
    "float ids": ("ids", lambda a: a.astype(np.float64)),
}


@pytest.mark.parametrize("kind", ["exact", "ann"])
@pytest.mark.parametrize("attack", sorted(ARRAY_ATTACKS))
def test_hostile_consistent_index_arrays_refused(small_index, tmp_path, kind, attack):
    root, model, X = small_index
    d = _copy_index(root / kind, tmp_path / "idx")
    name, fn = ARRAY_ATTACKS[attack]
    if kind == "ann":  # the ann index's compact lists: uint16 ids, per-list float32 score floors
        name = {"postings.indices": "postings.ids", "postings.data": "postings.floor"}.get(name, name)
    _edit_array(d, name, fn)
    _rehash(d)
    with pytest.raises(FileFormatError):
        load_index(d)
    with pytest.raises(FileFormatError):  # memory-mapped: at load, on the first use of the bad block, or at verify_all
        index = load_index(d, mmap=True)
        index.query(X, top_k=5)
        index.verify_all()


ANN_ATTACKS = {
    "heavy row out of range": ("heavy.rows", lambda a: np.where(np.arange(a.size) == 0, 10**6, a)),
    "NaN heavy values": ("heavy.Z", lambda a: np.where(np.arange(a.size).reshape(a.shape) == 0, np.nan, a)),
    "NaN projection": ("projection.V", lambda a: np.where(np.arange(a.size).reshape(a.shape) == 0, np.nan, a)
                       .astype(np.float32)),
    "float64 projection": ("projection.B", lambda a: a.astype(np.float64)),
}


@pytest.mark.parametrize("attack", sorted(ANN_ATTACKS))
def test_hostile_consistent_ann_arrays_refused(small_index, tmp_path, attack):
    root, model, X = small_index
    d = _copy_index(root / "ann", tmp_path / "idx")
    name, fn = ANN_ATTACKS[attack]
    _edit_array(d, name, fn)
    _rehash(d)
    with pytest.raises(FileFormatError):
        load_index(d)


MANIFEST_ATTACKS = {
    "wrong n_features": lambda m: m.update(n_features=m["n_features"] + 1),
    "n_features string": lambda m: m.update(n_features=str(m["n_features"])),
    "n_features 2^63": lambda m: m.update(n_features=2**63),
    "n_documents wrong": lambda m: m.update(n_documents=m["n_documents"] - 1),
    "id dtype wrong": lambda m: m.update(id_dtype="str"),
    "unknown kind": lambda m: m.update(kind="magic"),
    "params not a dict": lambda m: m.update(params=[1, 2]),
    "param of wrong type": lambda m: m["params"].update(block_size="abc"),
    "unknown param": lambda m: m["params"].update(frobnicate=1),
    "strategy unknown": lambda m: m["state"].update(strategy_="magic"),
    "file name traversal": lambda m: m["files"].update({"../x.npy": {"bytes": 1, "sha256": "0" * 64}}),
    "data dir traversal": lambda m: m.update(data_dir="../elsewhere"),
    "size as string": lambda m: m["files"]["ids.npy"].update(bytes="12"),
    "model flags flipped": lambda m: m["model"].update(identity=not m["model"]["identity"]),
}


@pytest.mark.parametrize("attack", sorted(MANIFEST_ATTACKS))
def test_hostile_consistent_manifests_refused(small_index, tmp_path, attack):
    root, model, X = small_index
    d = _copy_index(root / "exact", tmp_path / "idx")
    _rehash(d, MANIFEST_ATTACKS[attack])
    with pytest.raises(FileFormatError):
        load_index(d)


def test_manifest_edit_without_rehash_refused(small_index, tmp_path):
    root, _, _ = small_index
    d = _copy_index(root / "exact", tmp_path / "idx")
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["params"]["block_size"] = 1
    (d / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(FileFormatError, match="manifest checksum"):
        load_index(d)


@pytest.mark.parametrize("kind", ["ann", "hnsw"])
def test_hostile_faiss_structures_refused(small_index, tmp_path, kind):
    import faiss

    root, _, _ = small_index
    d = _copy_index(root / kind, tmp_path / "idx")
    manifest = json.loads((d / "manifest.json").read_text())
    path = str(d / manifest["data_dir"] / "faiss.index")
    index = faiss.read_index(path)
    if kind == "ann":
        invlists = index.invlists
        lst = next(i for i in range(index.nlist) if invlists.list_size(i) > 0)
        ids = faiss.rev_swig_ptr(invlists.get_ids(lst), invlists.list_size(lst))
        ids[0] = 10**6  # an id beyond the corpus
    else:
        neighbors = faiss.vector_to_array(index.hnsw.neighbors)
        neighbors[0] = 10**6
        faiss.copy_array_to_vector(neighbors, index.hnsw.neighbors)
    faiss.write_index(index, path)
    _rehash(d)
    with pytest.raises(FileFormatError, match="FAISS"):
        load_index(d)


# --------------------------------------------------------------------------- writes
def test_written_files_honour_the_umask(tmp_path, small_index):
    old = os.umask(0o022)
    try:
        atomic_write(tmp_path / "a.txt", lambda f: f.write("x"), mode="w")
        assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644
        root, model, X = small_index
        build_index(model, X).save(tmp_path / "idx")
        manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
        assert stat.S_IMODE((tmp_path / "idx").stat().st_mode) == 0o755
        assert stat.S_IMODE((tmp_path / "idx" / "manifest.json").stat().st_mode) == 0o644
        for fname in manifest["files"]:
            assert stat.S_IMODE((tmp_path / "idx" / manifest["data_dir"] / fname).stat().st_mode) == 0o644
        os.umask(0o077)
        atomic_write(tmp_path / "b.txt", lambda f: f.write("x"), mode="w")
        assert stat.S_IMODE((tmp_path / "b.txt").stat().st_mode) == 0o600
    finally:
        os.umask(old)


def test_stale_temporaries_are_swept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    stale = tmp_path / f".m.npz.sparsesim-{pid}-abc.tmp"
    stale.write_bytes(b"x" * 100)
    stale_dir = tmp_path / f".idx.sparsesim-{pid}-def.tmp"
    stale_dir.mkdir()
    mine = tmp_path / f".m.npz.sparsesim-{os.getpid()}-ghi.tmp"
    mine.write_bytes(b"x")
    other = tmp_path / "keep.tmp"
    other.write_bytes(b"x")
    past = time.time() - 60
    for p in (stale, stale_dir, mine, other):
        os.utime(p, (past, past))
    removed = sweep_stale_temps(tmp_path)
    assert sorted(p.name for p in removed) == sorted([stale.name, stale_dir.name])
    assert mine.exists() and other.exists()


def test_output_targets_checked(tmp_path):
    (tmp_path / "data.svm").write_text("1 1:1\n")
    os.symlink(tmp_path / "data.svm", tmp_path / "link.npz")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    for target, fragment in ((tmp_path / "link.npz", "symbolic link"), (tmp_path / "fifo", "not a regular file"),
                             (tmp_path / "dir", "directory"), (tmp_path / "data.svm", "inputs"),
                             (tmp_path / "missing" / "m.npz", "does not exist"), ("", "empty")):
        with pytest.raises(UnsafeTargetError, match=fragment):
            check_output_file(target, inputs=[tmp_path / "data.svm"])
    assert (tmp_path / "data.svm").read_text() == "1 1:1\n"


def test_index_targets_checked(small_index, tmp_path):
    root, model, X = small_index
    index = build_index(model, X)
    (tmp_path / "file").write_text("keep")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("keep")
    os.symlink(root / "exact", tmp_path / "link")
    for target in ("file", "other", "link"):
        with pytest.raises(UnsafeTargetError):
            index.save(tmp_path / target, overwrite=True)
    assert (tmp_path / "file").read_text() == "keep" and (tmp_path / "other" / "notes.txt").read_text() == "keep"


def test_lock_serialises_writers(tmp_path):
    target = tmp_path / "t"
    order = []

    def hold():
        with target_lock(target):
            order.append("a-in")
            time.sleep(4)
            order.append("a-out")

    thread = threading.Thread(target=hold)
    thread.start()
    time.sleep(0.1)
    code = ("import sys; from sparsesim.persistence import target_lock\n"
            f"with target_lock({str(target)!r}, timeout=0.1): pass\n")
    busy = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert busy.returncode != 0 and "ConcurrentWriteError" in busy.stderr
    thread.join()
    assert order == ["a-in", "a-out"] and not (tmp_path / ".t.lock").exists()
    with target_lock(target, timeout=0.1):
        with target_lock(target, timeout=0.1):  # re-entrant
            pass
    with pytest.raises(ConcurrentWriteError):
        raise ConcurrentWriteError("x")


def test_strict_json():
    assert dumps_strict({"a": float("inf"), "b": [np.float64("nan"), np.int64(3)]}) == '{"a": null, "b": [null, 3]}'


# --------------------------------------------------------------------------- CLI
def _cli(*args, env=None, cwd=None, timeout=120):
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "sparsesim.cli", *map(str, args)], capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=timeout)


@pytest.mark.parametrize("args", [["frobnicate"], ["train"], ["train", "-a", "oasis", "-d", "x", "-o", "m.npz", "-n",
                                                                  "abc"], ["index", "nope"], ["query", "--top-k", "x"]])
def test_cli_usage_errors_exit_2_without_traceback(args, tmp_path):
    res = _cli(*args, cwd=tmp_path)
    assert res.returncode == 2, res
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--help')" in lines[0], res.stderr


def test_cli_os_errors_and_debug_switch(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o555)
    try:
        if os.access(ro, os.W_OK):  # running as root: permissions do not bind
            target = Path("/proc/version")
        else:
            target = ro / "m.npz"
        res = _cli("train", "-a", "oasis", "-d", "news20-sample", "-n", "10", "-o", target)
        assert res.returncode == 2 and "Traceback" not in res.stderr and res.stderr.startswith("error: "), res
        assert len(res.stderr.strip().splitlines()) == 1
    finally:
        os.chmod(ro, 0o755)
    res = _cli("--debug", "query", "--index", tmp_path / "none", "--queries", tmp_path / "none.svm")
    assert res.returncode != 0 and "Traceback" in res.stderr
    res = _cli("query", "--index", tmp_path / "none", "--queries", tmp_path / "none.svm", env={"SPARSESIM_DEBUG": "1"})
    assert "Traceback" in res.stderr


# --------------------------------------------------------------------------- kills and concurrent writers
_ADD_SCRIPT = """
import sys
from sparsesim.workflows import add_to_index
add_to_index(sys.argv[1], sys.argv[2])
"""


@pytest.fixture(scope="module")
def add_setup(tmp_path_factory):
    from sklearn.datasets import dump_svmlight_file

    root = tmp_path_factory.mktemp("adds")
    X = sp.random(300, 50, density=0.1, format="csr", random_state=7)
    y = np.repeat(np.arange(3), 100)
    model = OASIS(n_triplets=200, random_state=0).fit(X[:200], y[:200]).model_
    build_index(model, X[:200]).save(root / "base")
    dump_svmlight_file(X[200:250], y[200:250], str(root / "a.svm"), zero_based=True)
    dump_svmlight_file(X[250:], y[250:], str(root / "b.svm"), zero_based=True)
    return root


def _spawn_add(index_dir, data):
    return subprocess.Popen([sys.executable, "-c", _ADD_SCRIPT, str(index_dir), str(data)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_kill_during_index_add_leaves_old_or_new(add_setup, tmp_path):
    import shutil

    root = add_setup
    start = time.perf_counter()
    shutil.copytree(root / "base", tmp_path / "ref")
    proc = _spawn_add(tmp_path / "ref", root / "a.svm")
    assert proc.wait(timeout=120) == 0, proc.stderr.read()
    full = time.perf_counter() - start
    rng = np.random.default_rng(0)
    outcomes = set()
    for trial in range(4):
        target = tmp_path / f"idx{trial}"
        shutil.copytree(root / "base", target)
        proc = _spawn_add(target, root / "a.svm")
        time.sleep(float(rng.uniform(0.2, full)))
        proc.kill()
        proc.wait(timeout=60)
        n = load_index(target).n_documents  # never refused: the old or the new complete version
        assert n in (200, 250)
        outcomes.add(n)
        # the next write sweeps what the killed one left (after its process is gone)
        past = time.time() - 60
        for leftover in list(target.iterdir()) + list(tmp_path.iterdir()):
            if ".sparsesim-" in leftover.name:
                os.utime(leftover, (past, past))
        proc = _spawn_add(target, root / "b.svm")
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
        assert load_index(target).n_documents == n + 50
        manifest = json.loads((target / "manifest.json").read_text())
        assert sorted(p.name for p in target.iterdir()) == sorted(["manifest.json", manifest["data_dir"]])
    assert not [p for p in tmp_path.iterdir() if p.name.endswith((".tmp", ".lock"))]


def test_concurrent_index_adds_keep_both(add_setup, tmp_path):
    import shutil

    root = add_setup
    shutil.copytree(root / "base", tmp_path / "idx")
    procs = [_spawn_add(tmp_path / "idx", root / name) for name in ("a.svm", "b.svm")]
    codes = [p.wait(timeout=180) for p in procs]
    assert codes == [0, 0], [p.stderr.read() for p in procs]
    index = load_index(tmp_path / "idx")
    assert index.n_documents == 300 and np.unique(index.ids_).size == 300


def test_concurrent_builds_to_one_path_never_both_succeed(add_setup, tmp_path):
    code = ("import sys, scipy.sparse as sp\n"
            "from sparsesim.indexes import load_index\n"
            "idx = load_index(sys.argv[1])\n"
            "idx.save(sys.argv[2])\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(add_setup / "base"), str(tmp_path / "new")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    codes = sorted(p.wait(timeout=120) for p in procs)
    errors = "".join(p.stderr.read() for p in procs)
    assert codes[0] == 0 and codes[1] != 0, (codes, errors)
    assert "already exists" in errors or "meanwhile" in errors, errors
    assert load_index(tmp_path / "new").n_documents == 200


def test_decompression_bomb_refused_quickly(tmp_path, monkeypatch):
    import gzip

    from sparsesim.data import load_dataset

    monkeypatch.setenv("SPARSESIM_MAX_DECOMPRESSED", str(8 << 20))
    path = tmp_path / "bomb.svm.gz"
    with gzip.open(path, "wb") as handle:
        for _ in range(64):
            handle.write(b"1" * (1 << 20))
    assert path.stat().st_size < 200_000
    with pytest.raises(FileFormatError, match="decompression bomb"):
        load_dataset(str(path))


@pytest.mark.parametrize("existed", [False, True])
def test_train_out_written_meanwhile_by_another_run_is_refused(tmp_path, monkeypatch, existed):
    """Two runs writing one model file: the one that finishes second fails and writes nothing."""
    import sparsesim.workflows as workflows

    out = tmp_path / "model.npz"
    if existed:
        out.write_bytes(b"an older model")
    real_fit = OASIS.fit

    def fit_while_another_run_saves(self, *args, **kwargs):
        atomic_write(out, lambda handle: handle.write(b"the other run's model"))
        return real_fit(self, *args, **kwargs)

    monkeypatch.setattr(OASIS, "fit", fit_while_another_run_saves)
    with pytest.raises(ConcurrentWriteError, match="written by another process"):
        workflows.train_model("oasis", "news20-sample", out, n_triplets=20, seed=0, overwrite=True)
    assert out.read_bytes() == b"the other run's model"
    monkeypatch.setattr(OASIS, "fit", real_fit)
    summary = workflows.train_model("oasis", "news20-sample", out, n_triplets=20, seed=0,
                                    overwrite=True)  # alone, with overwrite: replaces
    assert summary["model"] == str(out) and BilinearSimilarity.load(out).n_features > 0


def test_library_read_modify_write_never_loses_another_writers_update(add_setup, tmp_path):
    """Two processes load one index, each adds documents and saves over it: the second save fails
    (ConcurrentWriteError, nothing written) instead of silently dropping the first one's documents."""
    import shutil

    from sklearn.datasets import load_svmlight_file

    root = add_setup
    shutil.copytree(root / "base", tmp_path / "idx")
    mine = load_index(tmp_path / "idx")
    proc = _spawn_add(tmp_path / "idx", root / "b.svm")  # the other writer completes meanwhile
    assert proc.wait(timeout=180) == 0, proc.stderr.read()
    X, _ = load_svmlight_file(str(root / "a.svm"), n_features=50, zero_based=True)
    mine.add(X, ids=list(range(1000, 1000 + X.shape[0])))
    with pytest.raises(ConcurrentWriteError, match="since this index was loaded"):
        mine.save(tmp_path / "idx", overwrite=True)
    assert load_index(tmp_path / "idx").n_documents == 250  # the other writer's documents are kept
    fresh = load_index(tmp_path / "idx")  # loaded again: the change can be repeated
    fresh.add(X, ids=list(range(1000, 1000 + X.shape[0])))
    fresh.save(tmp_path / "idx", overwrite=True)
    fresh.add(X[:2], ids=[5000, 5001])
    fresh.save(tmp_path / "idx", overwrite=True)  # its own earlier save is not "another writer"
    assert load_index(tmp_path / "idx").n_documents == 302


def test_calibrate_and_add_at_once_keep_both(tmp_path, monkeypatch):
    """`index calibrate` holds the index's lock from its read to its write: an `index add` started
    meanwhile waits, and the index ends with the new calibration and the added documents."""
    from sklearn.datasets import dump_svmlight_file

    from sparsesim.indexes.ann import AnnIndex
    from sparsesim.workflows import calibrate_index

    X = sp.random(260, 40, density=0.15, format="csr", random_state=3)
    y = np.repeat(np.arange(2), 130)
    model = OASIS(n_triplets=200, random_state=0).fit(X[:200], y[:200]).model_
    build_index(model, X[:200], kind="ann", n_postings=50, target_recall=None).save(tmp_path / "ann")
    dump_svmlight_file(X[200:], y[200:], str(tmp_path / "new.svm"), zero_based=True)
    real = AnnIndex.calibrate
    spawned = []

    def calibrate_while_another_adds(self, *args, **kwargs):
        spawned.append(_spawn_add(tmp_path / "ann", tmp_path / "new.svm"))
        time.sleep(3.0)  # the add would finish here if it were not waiting for the lock
        return real(self, *args, **kwargs)

    monkeypatch.setattr(AnnIndex, "calibrate", calibrate_while_another_adds)
    calibrate_index(tmp_path / "ann", target_recall=0.9)
    assert spawned[0].wait(timeout=180) == 0, spawned[0].stderr.read()
    index = load_index(tmp_path / "ann")
    assert index.n_documents == 260 and index.calibration_ is not None


def test_two_feedback_learners_on_one_snapshot_never_lose_triplets(add_setup, tmp_path):
    """Two learners (two `learn --resume` runs, two servers) writing one snapshot file: the one that
    writes second fails with ConcurrentWriteError instead of replacing the first one's triplets."""
    from sparsesim.feedback import FeedbackLearner

    index = load_index(add_setup / "base")
    snap = tmp_path / "snap.npz"
    records = [{"query": int(q), "preferred": int(q + 1), "other": int(q + 100)} for q in range(0, 40, 2)]
    first = FeedbackLearner(index, snapshot=snap, snapshot_every=1 << 30)
    second = FeedbackLearner(index, snapshot=snap, snapshot_every=1 << 30)  # both start from no snapshot
    first.submit(records[:10])
    first.close()
    n_first = BilinearSimilarity.load(snap).metadata["feedback"]["n_applied"]
    assert n_first == 10
    second.submit(records[10:])
    with pytest.raises(ConcurrentWriteError, match="written by another process"):
        second.close()
    assert BilinearSimilarity.load(snap).metadata["feedback"]["n_applied"] == n_first  # kept, not replaced
    third = FeedbackLearner(index, snapshot=snap, snapshot_every=1 << 30)  # resumes from the first one's
    third.submit(records[10:])
    third.close()
    assert BilinearSimilarity.load(snap).metadata["feedback"]["n_applied"] == 20
