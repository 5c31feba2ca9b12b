"""Writing index directories (:mod:`sparsesim.indexes.storage`): checking the target path,
writing a version's files with their checksums, and replacing the manifest in one atomic step.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from sparsesim import __version__
from sparsesim.exceptions import ConcurrentWriteError, FileFormatError, InvalidInputError, UnsafeTargetError
from sparsesim.compact import CompactSimilarity
from sparsesim.models import BilinearSimilarity
from sparsesim.persistence import (dumps_strict, file_sha256, fsync_dir, fsync_path, loads_strict, make_temp_dir,
                                   sweep_stale_temps, target_lock, file_mode)

from .blocks import BLOCK_BYTES, BLOCKS_FILE, file_digests
from .storage_format import (DATA_DIR_RE, FILE_NAME_RE, FORMAT_NAME, FORMAT_VERSION, MANIFEST, MODEL_FILE,
                             file_identity, manifest_checksum, mark_derived_arrays_checked, mark_file_verified)


def _model_facts(model) -> dict:
    if isinstance(model, CompactSimilarity):
        return {"checksum": model.checksum(), "model_kind": "compact-similarity", "n_features": model.n_features,
                "n_components": model.n_components, "normalize": model.normalize, "nnz_w": int(model.W.nnz),
                "algorithm": model.metadata.get("algorithm")}
    if not isinstance(model, BilinearSimilarity):  # an EmbeddingSimilarity
        return {"checksum": model.checksum(), "model_kind": "embedding-similarity", "n_features": model.n_features,
                "n_components": model.n_components, "normalize": model.normalize,
                "identity_weight": model.identity_weight, "lexical_power": model.lexical_power,
                "algorithm": model.metadata.get("algorithm")}
    return {"checksum": model.checksum(), "n_features": model.n_features, "identity": model.identity,
            "normalize": model.normalize, "nnz": model.nnz(), "algorithm": model.metadata.get("algorithm")}


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


class StagedArray:
    """An array an index passes to the writer as a ``.npy`` file it already wrote (same file
    system as the target): the writer moves the file into the new version instead of writing
    the array again (an index built block by block never holds its largest arrays)."""

    def __init__(self, path):
        self.path = Path(path)


def _write_version(index, vdir: Path) -> dict:
    """Write the index's files into ``vdir``; returns {file name: {bytes, sha256}}.

    Every file's blocks are hashed in the same pass as its sha256; the block digests go to
    ``blocks.sha256`` (files in sorted-name order), itself listed with its sha256.
    """
    model = index.model
    names = [MODEL_FILE]
    if isinstance(model, BilinearSimilarity):
        _model_shell(model).save(vdir / MODEL_FILE)
        arrays = index._model_arrays()  # W as the kind stores it (the ann index: narrow, indexes/ann_rerank_w.py)
    else:  # an embedding or compact model: its own file (dense factors, read whole at load)
        model.save(vdir / MODEL_FILE)
        arrays = {}
    arrays.update(index._arrays())
    for name, arr in arrays.items():
        if isinstance(arr, StagedArray):
            os.replace(arr.path, vdir / f"{name}.npy")
        else:
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
        if entry.is_dir() and not entry.is_symlink() and DATA_DIR_RE.match(entry.name) and entry.name != keep:
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
    if index.ids_ is None:
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
            _mark_written(directory / data_dir, checksum, manifest["files"])
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
        _mark_written(vdir, checksum, manifest["files"])
        # the new version is in place; remove the old one
        if old is not None and old.get("data_dir") is None:
            for fname in old.get("files", {}) if isinstance(old.get("files"), dict) else ():
                if isinstance(fname, str) and FILE_NAME_RE.match(fname) and fname != MANIFEST:
                    try:
                        (directory / fname).unlink()
                    except OSError:
                        pass
        _sweep_inside(directory, keep=data_dir)
    return directory


def _mark_written(vdir: Path, checksum: str, files: dict):
    """Record the arrays just written (from this process's own checked arrays) as verified, so a
    memory-mapped load of them needs no block checks (:func:`storage_format.file_identity`)."""
    for fname in files:
        if fname.endswith(".npy"):
            mark_file_verified(file_identity(vdir / fname, checksum))


def _read_manifest_loose(directory: Path):
    try:
        obj = loads_strict((directory / MANIFEST).read_bytes(), str(directory / MANIFEST))
        return obj if isinstance(obj, dict) else None
    except (OSError, FileFormatError):
        return None
