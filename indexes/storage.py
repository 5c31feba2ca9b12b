"""The index directory format: no pickle, checksummed, replaced in one atomic step, memory-mappable.

An index directory holds::

    manifest.json        format, kind, parameters, the model's checksum, the name of the data
                         directory, for every file below its size and sha256, the block size of
                         the block checksums, and a checksum of the manifest itself
    v-XXXXXXXXXXXX/      the data of the current version:
      blocks.sha256        sha256 of every 64 KiB block of every other file (sorted by name)
      model.npz            the model the index was built with, without W (its own checked format:
                           flags, metadata, text featuriser)
      model.W.*.npy        the model's W (CSR indptr / indices / data)
      ids.npy              user ids (int64 or unicode), one per document
      corpus.*.npy         the stored corpus X (CSR indptr / indices / data)
      postings.*.npy       posting lists (exact "corpus" strategy: Y^T; ANN: impact-ordered, pruned
                           Y^T with float32 values)
      heavy.*.npy          ANN: precomputed rows of M for re-ranking
      projection.*.npy     ANN: query map V, document map B = M^T V, singular values
      faiss.index          ANN: the FAISS index (``faiss.write_index``)

Arrays are single ``.npy`` files (not one ``.npz``) so that ``load_index(..., mmap=True)`` can
memory-map them read-only; every one is read with ``allow_pickle=False`` after its header was
checked against the file size.

Writes never lose data. A new index is written into a temporary directory beside the target
and renamed into place (a rename onto an existing directory fails, so two builders of one new
path cannot both succeed). Replacing an index (``overwrite=True``, ``index add``) writes the new
version into a new ``v-*`` directory inside it, then replaces ``manifest.json`` with one
``os.replace`` -- the single atomic step; a kill at any moment leaves the old complete version
or the new one. Old versions and temporaries of killed writers are removed by the next write.
Writers of one target are serialised by a lock file (:func:`sparsesim.persistence.target_lock`).
Format 1 directories (files beside the manifest) are still read, and replaced by format 2.

``load_index`` trusts nothing in the directory: the manifest is validated against a schema
(types, ranges, known values) and its own checksum; every file's size (always) and sha256
(``verify=True``) are checked; arrays must have exactly the dtypes written (nothing is
coerced); and one vectorised structural pass refuses out-of-range or negative indices, a
non-monotone ``indptr``, NaN/inf values, duplicate ids, inconsistent shapes and FAISS
structures whose ids or links point outside the index -- before any compiled kernel reads them.

Memory-mapped loads (``mmap=True``) of format 3 defer the large arrays (``LAZY_CHECKS``: corpus,
posting and W indices and values, the re-ranking table Z): their 64 KiB blocks are hashed against
``blocks.sha256`` and range/finiteness-checked on first use, by the
:class:`~sparsesim.indexes.blocks.BlockGuard` of each array, before a kernel reads them. Load
then reads only the manifest, the block checksums and the small arrays, whatever the index size.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from sparsesim import __version__
from sparsesim.exceptions import (ConcurrentWriteError, FileFormatError, InvalidInputError, ModelMismatchError,
                                  UnsafeTargetError)
from sparsesim.models import BilinearSimilarity
from sparsesim.persistence import (csr_from_arrays, dumps_strict, file_sha256, fsync_dir, fsync_path, loads_strict, make_temp_dir, read_npy,
                                   sweep_stale_temps, target_lock, file_mode)
from sparsesim.validation import (MAX_FEATURES, bounded, check_csr_arrays, check_meta)

from .array_checks import _F64, _I32, _I64, check_csr_structure, check_index_arrays
from .blocks import BLOCK_BYTES, BLOCKS_FILE, DIGEST_BYTES, BlockGuard, file_digests, finite_check, index_check, n_blocks

__all__ = ["save_index", "read_index", "StoredIndex", "read_manifest", "FORMAT_NAME", "FORMAT_VERSION"]

FORMAT_NAME = "sparsesim-index"
FORMAT_VERSION = 3
MANIFEST = "manifest.json"
MODEL_FILE = "model.npz"
MODEL_W = "model.W"  # format 3: the model's W as memory-mappable arrays beside a model.npz without W
_DATA_DIR_RE = re.compile(r"^v-[0-9a-f]{8,32}$")
_FILE_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.]{0,63}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
MAX_DOCUMENTS = 2**40

MANIFEST_SCHEMA = {
    "kind": ("choice", ("exact", "ann")),
    "n_documents": ("int", 0, MAX_DOCUMENTS),
    "n_features": ("int", 1, MAX_FEATURES),
    "id_dtype": ("choice?", ("int", "str")),
    "model": ("dict",),
    "params": ("dict",),
    "state": ("dict",),
    "files": ("dict",),
    "data_dir": ("str?",),
    "manifest_checksum": ("str?",),
    "block_bytes": ("int?", 4096, 1 << 30),
}
MODEL_FACTS_SCHEMA = {
    "checksum": ("str",),
    "n_features": ("int", 1, MAX_FEATURES),
    "identity": ("bool",),
    "normalize": ("bool",),
}
STATE_SCHEMA = {
    "strategy_": ("choice?", ("corpus", "query")),
    "nlist_": ("int?", 1, MAX_DOCUMENTS),
    "build_seconds": ("float?", 0.0, None),
    "n_heavy_rows": ("int?", 0, MAX_FEATURES),
    "n_fit_documents": ("int?", 0, MAX_DOCUMENTS),
    "postings": ("choice?", ("expanded",)),
    "postings_length": ("int?", 1, MAX_DOCUMENTS),
    "postings_model": ("str?",),
    "read_allocation": ("choice?", ("weighted", "uniform")),
    "rerank_memory_": ("int?", 0, 2**50),
    "calibration": ("dict?",),  # checked by AnnIndex against calibration.CALIBRATION_SCHEMA
}


def _model_facts(model: BilinearSimilarity) -> dict:
    return {"checksum": model.checksum(), "n_features": model.n_features, "identity": model.identity,
            "normalize": model.normalize, "nnz": model.nnz(), "algorithm": model.metadata.get("algorithm")}


def manifest_checksum(manifest: dict) -> str:
    """sha256 of the manifest's canonical JSON without its ``manifest_checksum`` key."""
    body = {k: v for k, v in manifest.items() if k != "manifest_checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, allow_nan=False).encode()).hexdigest()


def _is_index_dir(directory: Path) -> bool:
    """Whether ``directory`` is a real directory holding a sparsesim index manifest."""
    if directory.is_symlink() or not directory.is_dir():
        return False
    try:
        with open(directory / MANIFEST, "rb") as handle:
            head = handle.read(1 << 20)
        return isinstance(json.loads(head), dict) and json.loads(head).get("format") == FORMAT_NAME
    except (OSError, ValueError, RecursionError):
        return False


def check_index_target(directory, overwrite: bool = False) -> Path:
    """Refuse an index output path that is not a new path or an index directory of ours.

    Raises
    ------
    UnsafeTargetError
        A symlink, a regular file, a device, or a directory that is not a sparsesim index.
    InvalidInputError
        An index is already there and ``overwrite`` is False.
    """
    directory = Path(directory).expanduser()
    if str(directory) in ("", ".", "/") or directory.name in ("", ".", ".."):
        raise UnsafeTargetError(f"{str(directory)!r} is not a usable index path; name a new directory")
    if directory.is_symlink():
        raise UnsafeTargetError(f"{directory} is a symbolic link; give the path of an index directory")
    if directory.exists():
        if not directory.is_dir():
            raise UnsafeTargetError(f"{directory} exists and is not a directory; refusing to replace it with an index")
        if not _is_index_dir(directory):
            raise UnsafeTargetError(f"{directory} is a directory but not a sparsesim index; refusing to replace it")
        if not overwrite:
            raise InvalidInputError(f"{directory} already exists; choose another directory or pass overwrite=True")
    return directory


def _model_shell(model: BilinearSimilarity) -> BilinearSimilarity:
    """The model without W (flags, metadata, text featuriser): what ``model.npz`` holds in format 3."""
    d = model.n_features
    return BilinearSimilarity(sp.csr_matrix((d, d)), identity=model.identity, normalize=model.normalize,
                              metadata=model.metadata, featurizer=model.featurizer)


def _save_npy(path: Path, arr: np.ndarray):
    arr = np.ascontiguousarray(arr)
    if arr.dtype == object:
        raise TypeError(f"array {path.name!r} has dtype object")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, file_mode())
    with os.fdopen(fd, "wb") as handle:
        np.save(handle, arr, allow_pickle=False)
        handle.flush()
        os.fsync(handle.fileno())


def _write_version(index, vdir: Path) -> dict:
    """Write the index's files into ``vdir``; returns {file name: {bytes, sha256}}.

    Every file's blocks are hashed in the same pass as its sha256; the block digests go to
    ``blocks.sha256`` (files in sorted-name order), itself listed with its sha256.
    """
    model = index.model
    _model_shell(model).save(vdir / MODEL_FILE)
    names = [MODEL_FILE]
    W = model.W
    arrays = {f"{MODEL_W}.indptr": np.asarray(W.indptr, np.int64), f"{MODEL_W}.indices": np.asarray(W.indices, np.int32),
              f"{MODEL_W}.data": np.asarray(W.data, np.float64)}
    arrays.update(index._arrays())
    for name, arr in arrays.items():
        _save_npy(vdir / f"{name}.npy", arr)
        names.append(f"{name}.npy")
    for fname, writer in index._extra_files().items():
        writer(vdir / fname)
        os.chmod(vdir / fname, file_mode())
        fsync_path(vdir / fname)
        names.append(fname)
    files, blocks = {}, []
    for fname in sorted(names):
        whole, digests = file_digests(vdir / fname, BLOCK_BYTES)
        files[fname] = {"bytes": (vdir / fname).stat().st_size, "sha256": whole}
        blocks.append(digests)
    fd = os.open(vdir / BLOCKS_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, file_mode())
    with os.fdopen(fd, "wb") as handle:
        handle.write(b"".join(blocks))
        handle.flush()
        os.fsync(handle.fileno())
    files[BLOCKS_FILE] = {"bytes": (vdir / BLOCKS_FILE).stat().st_size, "sha256": file_sha256(vdir / BLOCKS_FILE)}
    fsync_path(vdir, directory=True)
    return files


def _write_manifest(path: Path, manifest: dict) -> str:
    """Write the manifest with its checksum; returns the checksum."""
    manifest = json.loads(dumps_strict(manifest))  # plain JSON types (what a reader will hash)
    manifest["manifest_checksum"] = manifest_checksum(manifest)
    text = dumps_strict(manifest, indent=2, sort_keys=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, file_mode())
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    return manifest["manifest_checksum"]


def _checked_dir() -> Path:
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("sparsesim")) / "checked-indexes"


def derived_arrays_checked(manifest: dict) -> bool:
    """Whether the derived arrays of exactly this index content were checked before by this user.

    A marker named by the manifest checksum in the user's cache directory (written by this
    user's sparsesim only: after :func:`save_index`, or after a load whose derived-array check
    passed). The manifest checksum covers the sha256 of every file and of every block, so bytes
    that pass those checksums are the bytes that were checked.
    """
    checksum = manifest.get("manifest_checksum")
    return isinstance(checksum, str) and bool(_HEX64.match(checksum)) and (_checked_dir() / checksum).is_file()


def mark_derived_arrays_checked(checksum: str | None) -> None:
    """Record that the index of manifest checksum ``checksum`` passed (best effort: an unwritable
    cache directory only means the check runs again at the next load)."""
    if not isinstance(checksum, str) or not _HEX64.match(checksum):
        return
    try:
        directory = _checked_dir()
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / checksum, os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)
    except OSError:
        pass


def _check_unchanged_since_load(index, directory: Path):
    """Refuse to replace the index directory ``index`` was loaded from if another writer replaced it
    since (a read-modify-write must not lose that writer's update)."""
    source = getattr(index, "loaded_from_", None)
    if source is None or source[0] != str(directory.resolve()):
        return
    current = _read_manifest_loose(directory)
    if current is None or current.get("manifest_checksum") != source[1]:
        raise ConcurrentWriteError(f"{directory} was written by another process since this index was loaded from it; "
                                   "load it again and repeat the change (nothing was written)")


def _sweep_inside(directory: Path, keep: str):
    """Remove version directories other than ``keep`` and stale temporaries inside an index directory."""
    for entry in directory.iterdir():
        if entry.is_dir() and not entry.is_symlink() and _DATA_DIR_RE.match(entry.name) and entry.name != keep:
            shutil.rmtree(entry, ignore_errors=True)
    sweep_stale_temps(directory)


def save_index(index, directory, overwrite: bool = False) -> Path:
    """Write ``index`` to ``directory``, replacing an existing index there in one atomic step.

    Raises
    ------
    InvalidInputError
        ``directory`` holds an index and ``overwrite`` is False.
    UnsafeTargetError
        ``directory`` is a symlink, a file, or a directory that is not a sparsesim index.
    ConcurrentWriteError
        Another process held the target's lock for longer than the lock timeout.
    """
    directory = Path(directory).expanduser()
    if index.X_ is None:
        raise InvalidInputError("the index is empty; build it before saving")
    check_index_target(directory, overwrite)
    parent = directory.parent if str(directory.parent) else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    with target_lock(directory):
        exists = check_index_target(directory, overwrite).exists()  # again, under the lock
        data_dir = f"v-{uuid.uuid4().hex[:12]}"
        manifest = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "sparsesim_version": __version__,
            "kind": index.kind,
            "n_documents": int(index.n_documents),
            "n_features": int(index.n_features),
            "id_dtype": "int" if index.ids_.dtype.kind == "i" else "str",
            "model": _model_facts(index.model),
            "params": index.params(),
            "state": index._state(),
            "data_dir": data_dir,
            "block_bytes": BLOCK_BYTES,
        }
        if not exists:
            tmp = make_temp_dir(parent, directory.name)
            try:
                (tmp / data_dir).mkdir(mode=0o777)
                manifest["files"] = _write_version(index, tmp / data_dir)
                checksum = _write_manifest(tmp / MANIFEST, manifest)
                fsync_path(tmp, directory=True)
                try:
                    os.rename(tmp, directory)
                except OSError:
                    if directory.exists():
                        raise InvalidInputError(f"{directory} was created by another process meanwhile; "
                                                "choose another directory") from None
                    raise
                fsync_dir(parent)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            mark_derived_arrays_checked(checksum)  # written from this process's own arrays
            index.loaded_from_ = (str(directory.resolve()), checksum)
            return directory
        _check_unchanged_since_load(index, directory)
        old = _read_manifest_loose(directory)
        vdir = directory / data_dir
        pending = directory / f".{MANIFEST}.sparsesim-{os.getpid()}-{data_dir}.tmp"
        try:
            vdir.mkdir(mode=0o777)
            manifest["files"] = _write_version(index, vdir)
            checksum = _write_manifest(pending, manifest)
            os.replace(pending, directory / MANIFEST)  # the one atomic step
            index.loaded_from_ = (str(directory.resolve()), checksum)
            fsync_dir(directory)
        except BaseException:
            shutil.rmtree(vdir, ignore_errors=True)
            if pending.exists():
                pending.unlink()
            raise
        mark_derived_arrays_checked(checksum)
        # the new version is in place; remove the old one
        if old is not None and old.get("data_dir") is None:
            for fname in old.get("files", {}) if isinstance(old.get("files"), dict) else ():
                if isinstance(fname, str) and _FILE_RE.match(fname) and fname != MANIFEST:
                    try:
                        (directory / fname).unlink()
                    except OSError:
                        pass
        _sweep_inside(directory, keep=data_dir)
    return directory


def _read_manifest_loose(directory: Path):
    try:
        obj = loads_strict((directory / MANIFEST).read_bytes(), str(directory / MANIFEST))
        return obj if isinstance(obj, dict) else None
    except (OSError, FileFormatError):
        return None


def read_manifest(directory) -> dict:
    """The parsed manifest of an index directory, validated against its schema and checksum."""
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise FileFormatError(f"{directory}: no such index directory")
    path = directory / MANIFEST
    if not path.is_file():
        raise FileFormatError(f"{directory}: not a sparsesim index directory (no {MANIFEST})")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise FileFormatError(f"{path}: not readable ({exc.strerror or exc})") from None
    try:
        manifest = loads_strict(raw, str(path))
    except FileFormatError as exc:
        raise FileFormatError(f"{path}: corrupt manifest ({bounded(exc, 200)})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise FileFormatError(f"{path}: not a sparsesim index manifest")
    version = manifest.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise FileFormatError(f"{path}: missing or invalid format_version")
    if version > FORMAT_VERSION:
        raise FileFormatError(f"{path}: index format version {version} is newer than this sparsesim "
                              f"({FORMAT_VERSION}); upgrade sparsesim")
    check_meta(manifest, MANIFEST_SCHEMA, str(path))
    if version >= 2:
        if manifest.get("manifest_checksum") != manifest_checksum(manifest):
            raise FileFormatError(f"{path}: manifest checksum mismatch (file corrupt or modified)")
        data_dir = manifest.get("data_dir")
        if not isinstance(data_dir, str) or not _DATA_DIR_RE.match(data_dir):
            raise FileFormatError(f"{path}: invalid data_dir {bounded(repr(data_dir), 60)}")
    check_meta(manifest["model"], MODEL_FACTS_SCHEMA, f"{path} (model)")
    check_meta(manifest["state"], STATE_SCHEMA, f"{path} (state)")
    if manifest["model"]["n_features"] != manifest["n_features"]:
        raise FileFormatError(f"{path}: n_features {manifest['n_features']} differs from the model's "
                              f"{manifest['model']['n_features']}")
    if len(manifest["files"]) > 64:
        raise FileFormatError(f"{path}: lists {len(manifest['files'])} files (an index has at most 64)")
    for fname, facts in manifest["files"].items():
        if not _FILE_RE.match(fname) or fname == MANIFEST:
            raise FileFormatError(f"{path}: invalid file name {bounded(repr(fname), 80)}")
        check_meta(facts, {"bytes": ("int", 0, None), "sha256": ("str",)}, f"{path} ({fname})")
        if not _HEX64.match(facts["sha256"]):
            raise FileFormatError(f"{path}: invalid sha256 for {fname}")
    return manifest


def _data_path(directory: Path, manifest: dict) -> Path:
    data_dir = manifest.get("data_dir")
    if data_dir is None:
        return directory
    path = directory / data_dir
    if path.is_symlink() or not path.is_dir():
        raise FileFormatError(f"{path}: missing (the index directory is incomplete)")
    return path


def _verify_files(directory: Path, manifest: dict, verify: bool, deferred=()):
    """Check every file's size, and its sha256 when ``verify`` (except the ``deferred`` ones,
    whose blocks are checked on first use)."""
    for fname, facts in manifest["files"].items():
        path = directory / fname
        if path.is_symlink() or not path.is_file():
            raise FileFormatError(f"{path}: missing (the index directory is incomplete)")
        size = path.stat().st_size
        if size != facts["bytes"]:
            raise FileFormatError(f"{path}: {size} bytes, expected {facts['bytes']} (file truncated or modified)")
        if verify and fname not in deferred and file_sha256(path) != facts["sha256"]:
            raise FileFormatError(f"{path}: sha256 mismatch (file corrupt or modified)")


def _block_digests(directory: Path, manifest: dict, verify: bool) -> dict:
    """{file name: its block digests} from ``blocks.sha256`` (already sha256-checked when ``verify``)."""
    block_bytes = manifest.get("block_bytes")
    files = manifest["files"]
    if block_bytes is None or BLOCKS_FILE not in files:
        return {}
    names = sorted(f for f in files if f != BLOCKS_FILE)
    expected = sum(n_blocks(files[f]["bytes"], block_bytes) for f in names) * DIGEST_BYTES
    if files[BLOCKS_FILE]["bytes"] != expected:
        raise FileFormatError(f"{directory / BLOCKS_FILE}: {files[BLOCKS_FILE]['bytes']} bytes, expected {expected} "
                              "for the files of the manifest")
    raw = (directory / BLOCKS_FILE).read_bytes()
    if len(raw) != expected:
        raise FileFormatError(f"{directory / BLOCKS_FILE}: changed while reading")
    out, at = {}, 0
    for fname in names:
        size = n_blocks(files[fname]["bytes"], block_bytes) * DIGEST_BYTES
        out[fname] = raw[at:at + size]
        at += size
    return out


def _check_model(model: BilinearSimilarity, facts: dict, directory: Path, checksum: bool = True):
    if not isinstance(model, BilinearSimilarity):
        raise InvalidInputError(f"model must be a BilinearSimilarity, got {type(model).__name__}")
    if model.n_features != int(facts["n_features"]):
        raise ModelMismatchError(f"{directory}: the index was built for {facts['n_features']} features, "
                                 f"the model has {model.n_features}")
    if model.identity != bool(facts["identity"]) or model.normalize != bool(facts["normalize"]):
        raise ModelMismatchError(f"{directory}: the model's identity/normalize flags differ from the index's")
    if not checksum:
        return
    checksum = model.checksum()
    if checksum != facts["checksum"]:
        raise ModelMismatchError(f"{directory}: the index was built with model {facts['checksum'][:12]}, "
                                 f"not with this model ({checksum[:12]})")


@dataclass
class StoredIndex:
    """What an index directory holds, read and verified by :func:`read_index`.

    Attributes
    ----------
    manifest : dict
        The schema-checked manifest.
    model : BilinearSimilarity
        The caller's model (checked against the manifest) or the stored copy.
    arrays : dict of str to ndarray
        Every ``NAME.npy`` file by ``NAME`` (memory-mapped read-only when asked), structurally
        checked (:func:`check_index_arrays`).
    extra_files : dict of str to Path
        The other files (e.g. ``faiss.index``), for the index class to read.
    directory : Path
    guards : dict of str to BlockGuard
        For a memory-mapped load, the arrays (by ``NAME``, including ``model.W.indices`` and
        ``model.W.data`` of the stored model) whose blocks are checked on first use; their
        values have not been read yet.
    """

    manifest: dict
    model: BilinearSimilarity
    arrays: dict
    extra_files: dict
    directory: Path
    guards: dict = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.manifest["kind"]


def read_index(directory, model: BilinearSimilarity | None = None, mmap: bool = False,
               verify: bool = True) -> StoredIndex:
    """Read and verify an index directory written by :func:`save_index`, refusing anything inconsistent.

    Knows no index class: :func:`sparsesim.indexes.load_index` turns the result into the index
    of its kind. Each file is checked once; with ``model`` given, the stored copy of the model is
    neither read nor hashed.

    Parameters
    ----------
    directory : path-like
    model : BilinearSimilarity, optional
        The model the index must belong to (checked against the manifest's checksum); default:
        the copy stored in the index.
    mmap : bool, default False
        Memory-map the arrays read-only. For a format-3 index the large arrays
        (:func:`lazy_checks`) are then checked block by block on first use (``guards``) instead
        of whole at load.
    verify : bool, default True
        Check every file's sha256 (whole at load, or per block on first use; sizes, the
        manifest's schema and checksum, dtypes and the structural checks of all arrays always
        run).

    Raises
    ------
    FileFormatError
        Not an index directory, unknown format, missing, truncated, corrupt or inconsistent file.
    ModelMismatchError
        ``model`` is not the model the index was built with.
    """
    directory = Path(directory).expanduser()
    manifest = read_manifest(directory)
    data = _data_path(directory, manifest)
    n, d = manifest["n_documents"], manifest["n_features"]
    files = dict(manifest["files"])
    split_model = f"{MODEL_W}.indptr.npy" in files
    if model is not None:  # the caller's model replaces the stored copy
        for fname in (MODEL_FILE, *(f"{MODEL_W}.{part}.npy" for part in ("indptr", "indices", "data"))):
            files.pop(fname, None)
    lazy = {}
    if mmap and manifest.get("block_bytes") is not None and BLOCKS_FILE in files:
        lazy = {name: check for name, check in lazy_checks(n, d).items() if f"{name}.npy" in files}
    deferred = {f"{name}.npy" for name in lazy}
    _verify_files(data, {**manifest, "files": files}, verify, deferred)
    digests = _block_digests(data, manifest, verify) if deferred and verify else {}
    arrays, extra = {}, {}
    for fname in files:
        if fname in (MODEL_FILE, BLOCKS_FILE):
            continue
        path = data / fname
        if fname.endswith(".npy"):
            arrays[fname[:-4]] = read_npy(path, mmap=mmap)
        else:
            extra[fname] = path
    guards = {name: BlockGuard(data / f"{name}.npy", arrays[name], digests[f"{name}.npy"] if verify else None,
                               check, manifest["block_bytes"]) for name, check in lazy.items()}
    stored = manifest["model"]
    if model is None:
        if MODEL_FILE not in manifest["files"]:
            raise FileFormatError(f"{directory}: no stored model; pass the model")
        model = BilinearSimilarity.load(data / MODEL_FILE)
        if split_model:
            if model.W.nnz:
                raise FileFormatError(f"{data / MODEL_FILE}: holds W although the index stores it beside it")
            W = _stored_w(arrays, d, guards, directory)
            model.W = W
            for key in ("nnz", "sparsity"):
                model.metadata.pop(key, None)
            if isinstance(stored.get("nnz"), int):
                model.metadata["nnz"] = stored["nnz"]
        try:
            # a W checked block by block on use is verified against the manifest's block digests instead
            _check_model(model, stored, directory, checksum=not any(k.startswith(MODEL_W) for k in guards))
        except ModelMismatchError as exc:
            raise FileFormatError(f"{exc} (stored model file inconsistent with the manifest)") from None
    else:
        _check_model(model, stored, directory)
    try:
        check_index_arrays(manifest["kind"], arrays, n, d, manifest, lazy=set(guards))
    except InvalidInputError as exc:
        raise FileFormatError(f"{directory}: {bounded(exc, 300)}") from None
    return StoredIndex(manifest, model, arrays, extra, directory, guards)


def lazy_checks(n: int, d: int) -> dict:
    """The arrays a memory-mapped load checks block by block on first use, with each block's check."""
    return {"corpus.indices": index_check(d), "corpus.data": finite_check,
            "postings.indices": index_check(n), "postings.data": finite_check, "heavy.Z": finite_check,
            f"{MODEL_W}.indices": index_check(d), f"{MODEL_W}.data": finite_check}


def _stored_w(arrays: dict, d: int, guards: dict, directory: Path):
    """W of a format-3 index from its arrays (removed from ``arrays``): checked whole, or its
    ``indptr`` now and its indices and values block by block on use."""
    parts = {part: arrays.pop(f"{MODEL_W}.{part}", None) for part in ("indptr", "indices", "data")}
    if any(v is None for v in parts.values()):
        raise FileFormatError(f"{directory}: incomplete model arrays {MODEL_W}.*")
    try:
        if f"{MODEL_W}.data" in guards:
            check_csr_structure(parts["indptr"], parts["indices"], parts["data"], (d, d), "W", _F64)
        else:
            check_csr_arrays(parts["indptr"], parts["indices"], parts["data"], (d, d), name="W",
                             data_dtypes=(_F64,), sorted_indices=True)
            if parts["indptr"].dtype != _I64 or parts["indices"].dtype != _I32:
                raise InvalidInputError("W index arrays must be int64/int32")
    except InvalidInputError as exc:
        raise FileFormatError(f"{directory}: {bounded(exc, 300)}") from None
    W = csr_from_arrays({f"W.{k}": v for k, v in parts.items()}, "W", (d, d))
    if f"{MODEL_W}.data" not in guards:
        W.has_sorted_indices = True
        W.has_canonical_format = True
    return W
