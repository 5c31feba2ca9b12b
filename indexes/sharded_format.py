"""The directory format of a sharded index: its manifest, writing it, and checking its files.

Knows no index class: :class:`~sparsesim.indexes.sharded.ShardedIndex` saves through
:func:`write_sharded_dir`, and :func:`~sparsesim.indexes.sharded.load_sharded` reads through
:func:`read_sharded_manifest`, :func:`check_sharded_files` and :func:`sharded_model`. The
layout is described in :mod:`sparsesim.indexes.sharded`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path

from sparsesim import __version__
from sparsesim.exceptions import FileFormatError, InvalidInputError, ModelMismatchError
from sparsesim.models import BilinearSimilarity
from sparsesim.persistence import file_sha256, fsync_dir

from .kinds import INDEX_KINDS
from .shard import MANIFEST as _MANIFEST, MODEL_FILE as _MODEL

__all__ = ["SHARDED_FORMAT", "SHARDED_VERSION", "is_sharded", "read_sharded_manifest", "write_sharded_dir",
           "check_sharded_files", "sharded_model"]

SHARDED_FORMAT = "sparsesim-sharded-index"
SHARDED_VERSION = 1
_KINDS = INDEX_KINDS


def _model_facts(model: BilinearSimilarity) -> dict:
    return {"checksum": model.checksum(), "n_features": model.n_features, "identity": model.identity,
            "normalize": model.normalize}


def is_sharded(directory) -> bool:
    """Whether ``directory`` holds a sharded index (its manifest says so)."""
    path = Path(directory).expanduser() / _MANIFEST
    try:
        return json.loads(path.read_text()).get("format") == SHARDED_FORMAT
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return False


def read_sharded_manifest(directory: Path) -> dict:
    """The checked manifest of a sharded index directory (raises FileFormatError if it is not one)."""
    path = directory / _MANIFEST
    if not path.is_file():
        raise FileFormatError(f"{directory}: not a sharded index directory (no {_MANIFEST})")
    try:
        manifest = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FileFormatError(f"{path}: corrupt manifest ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != SHARDED_FORMAT:
        raise FileFormatError(f"{path}: not a sharded index manifest")
    if int(manifest.get("format_version", -1)) > SHARDED_VERSION:
        raise FileFormatError(f"{path}: sharded index format {manifest['format_version']} is newer than this "
                              f"sparsesim ({SHARDED_VERSION}); upgrade sparsesim")
    for key in ("kind", "n_documents", "n_features", "model", "params", "shards", "files", "id_dtype"):
        if key not in manifest:
            raise FileFormatError(f"{path}: manifest lacks {key!r}")
    if manifest["kind"] not in _KINDS or not isinstance(manifest["shards"], list) or not manifest["shards"]:
        raise FileFormatError(f"{path}: invalid kind or shard list")
    for fname, facts in manifest["files"].items():
        parts = Path(fname).parts
        if Path(fname).is_absolute() or ".." in parts or any(p.startswith(".") for p in parts):
            raise FileFormatError(f"{path}: invalid file name {fname!r}")
    for shard in manifest["shards"]:
        for key in ("dir", "positions"):
            name = shard.get(key) if isinstance(shard, dict) else None
            if not isinstance(name, str) or "/" in name or "\\" in name or name.startswith(".") or not name:
                raise FileFormatError(f"{path}: invalid shard entry {shard!r}")
    return manifest



def write_sharded_dir(directory, place, shard_sizes, model: BilinearSimilarity, model_file, manifest_facts: dict,
                      overwrite: bool = False) -> Path:
    """Write a sharded index directory atomically (layout: :mod:`sparsesim.indexes.sharded`).

    ``place`` (a :mod:`~sparsesim.indexes.placement` object) saves every shard where it lives;
    ``model_file`` (the saved ``model``, or ``None``) is copied rather than saved again;
    ``manifest_facts`` are the manifest's ``kind``, ``n_documents``, ``n_features``, ``id_dtype``
    and ``params``.
    """
    directory = Path(directory).expanduser().absolute()
    if directory.exists() and not overwrite:
        raise InvalidInputError(f"{directory} already exists; choose another directory or pass overwrite=True")
    parent = directory.parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", suffix=".tmp", dir=parent))
    trash = None
    try:
        names = [f"shard-{i:03d}" for i in range(len(shard_sizes))]
        facts = place.run("save", [(str(tmp), name) for name in names])
        if model_file is not None:  # the same model (the workers checked its checksum)
            shutil.copyfile(model_file, tmp / _MODEL)
        else:
            model.save(tmp / _MODEL)
        files = {_MODEL: {"bytes": (tmp / _MODEL).stat().st_size, "sha256": file_sha256(tmp / _MODEL)}}
        for f in facts:
            files.update(f)
        manifest = {
            "format": SHARDED_FORMAT, "format_version": SHARDED_VERSION, "sparsesim_version": __version__,
            **manifest_facts, "model": _model_facts(model),
            "shards": [{"dir": name, "n_documents": int(size), "positions": f"{name}.positions.npy"}
                       for name, size in zip(names, shard_sizes)],
            "files": files,
        }
        with open(tmp / _MANIFEST, "w") as handle:
            json.dump(manifest, handle, indent=2, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        fsync_dir(tmp)
        if directory.exists():
            trash = parent / f".{directory.name}.old-{uuid.uuid4().hex[:8]}"
            os.rename(directory, trash)
        os.rename(tmp, directory)
        fsync_dir(parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if trash is not None and trash.exists() and not directory.exists():
            os.rename(trash, directory)
        raise
    if trash is not None:
        shutil.rmtree(trash, ignore_errors=True)
    return directory


def check_sharded_files(directory: Path, manifest: dict, verify: bool) -> int:
    """Check every file the manifest lists (present, its size, with ``verify`` its sha256) and that
    every shard's manifest and positions have a checksum; return the bytes of the shard directories."""
    total = 0
    for fname, facts in manifest["files"].items():
        path = directory / fname
        if not path.is_file():
            raise FileFormatError(f"{path}: missing (the sharded index directory is incomplete)")
        if path.stat().st_size != int(facts["bytes"]):
            raise FileFormatError(f"{path}: {path.stat().st_size} bytes, expected {facts['bytes']} "
                                  f"(file truncated or modified)")
        if verify and file_sha256(path) != facts["sha256"]:
            raise FileFormatError(f"{path}: sha256 mismatch (file corrupt or modified)")
    for shard in manifest["shards"]:
        for fname in (f"{shard['dir']}/{_MANIFEST}", shard["positions"]):
            if fname not in manifest["files"]:
                raise FileFormatError(f"{directory / _MANIFEST}: no checksum for {fname}")
        total += sum(p.stat().st_size for p in (directory / shard["dir"]).rglob("*") if p.is_file())
    return total


def sharded_model(directory: Path, manifest: dict, model: BilinearSimilarity | None) -> BilinearSimilarity:
    """The model of a sharded index: the stored copy (``model=None``), or ``model`` once checked
    against the manifest's checksum (FileFormatError, InvalidInputError, ModelMismatchError)."""
    stored = manifest["model"]
    if model is None:
        if _MODEL not in manifest["files"]:
            raise FileFormatError(f"{directory}: no stored model; pass the model")
        model = BilinearSimilarity.load(directory / _MODEL)
        if model.checksum() != stored.get("checksum"):
            raise FileFormatError(f"{directory}: the stored model does not match the manifest")
    elif not isinstance(model, BilinearSimilarity):
        raise InvalidInputError(f"model must be a BilinearSimilarity, got {type(model).__name__}")
    elif model.checksum() != stored.get("checksum"):
        raise ModelMismatchError(f"{directory}: the index was built with model {str(stored.get('checksum'))[:12]}, "
                                 f"not with this model ({model.checksum()[:12]})")
    return model
