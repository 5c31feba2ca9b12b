"""The index directory format: no pickle, checksummed, written atomically, memory-mappable.

An index directory holds::

    manifest.json        format, kind, parameters, the model's checksum, and for every file
                         below its size and sha256
    model.npz            the BilinearSimilarity the index was built with (its own checked format)
    ids.npy              user ids (int64 or unicode), one per document
    corpus.*.npy         the stored corpus X (CSR indptr / indices / data)
    postings.*.npy       posting lists (exact "corpus" strategy: Y^T; ANN: impact-ordered X^T)
    projection.*.npy     ANN: query map V, document map B = M^T V, singular values
    faiss.index          ANN: the FAISS index (``faiss.write_index``)

Arrays are single ``.npy`` files (not one ``.npz``) so that ``load_index(..., mmap=True)`` can
memory-map them read-only (``np.load(mmap_mode="r")``; members of a zip archive cannot be
mapped); every one is read with ``allow_pickle=False``. ``save_index`` writes everything into
a temporary directory next to the target, fsyncs it and renames it into place, so a crash never
leaves a half-written index under the final name. ``load_index`` refuses a missing, truncated
or modified file (size and sha256 from the manifest), a newer format, and a model whose
checksum differs from the one the index was built with.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import numpy as np

from sparsesim.exceptions import FileFormatError, InvalidInputError, ModelMismatchError
from sparsesim.models import BilinearSimilarity
from sparsesim.persistence import file_sha256

__all__ = ["save_index", "load_index", "read_manifest", "FORMAT_NAME", "FORMAT_VERSION"]

FORMAT_NAME = "sparsesim-index"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
MODEL_FILE = "model.npz"


def _fsync_path(path: Path, directory: bool = False):
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0)
    try:
        fd = os.open(path, flags)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _model_facts(model: BilinearSimilarity) -> dict:
    return {"checksum": model.checksum(), "n_features": model.n_features, "identity": model.identity,
            "normalize": model.normalize, "nnz": model.nnz(), "algorithm": model.metadata.get("algorithm")}


def save_index(index, directory, overwrite: bool = False) -> Path:
    """Write ``index`` to ``directory`` atomically; returns the directory.

    Raises
    ------
    InvalidInputError
        ``directory`` exists and ``overwrite`` is False.
    """
    from sparsesim import __version__ as version

    directory = Path(directory).expanduser()
    if index.X_ is None:
        raise InvalidInputError("the index is empty; build it before saving")
    if directory.exists() and not overwrite:
        raise InvalidInputError(f"{directory} already exists; choose another directory or pass overwrite=True")
    parent = directory.parent if str(directory.parent) else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", suffix=".tmp", dir=parent))
    trash = None
    try:
        index.model.save(tmp / MODEL_FILE)
        names = [MODEL_FILE]
        for name, arr in index._arrays().items():
            fname = f"{name}.npy"
            arr = np.ascontiguousarray(arr)
            if arr.dtype == object:
                raise TypeError(f"array {name!r} has dtype object")
            with open(tmp / fname, "wb") as handle:
                np.save(handle, arr, allow_pickle=False)
                handle.flush()
                os.fsync(handle.fileno())
            names.append(fname)
        for fname, writer in index._extra_files().items():
            writer(tmp / fname)
            _fsync_path(tmp / fname)
            names.append(fname)
        files = {fname: {"bytes": (tmp / fname).stat().st_size, "sha256": file_sha256(tmp / fname)}
                 for fname in names}
        manifest = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "sparsesim_version": version,
            "kind": index.kind,
            "n_documents": int(index.n_documents),
            "n_features": int(index.n_features),
            "id_dtype": "int" if index.ids_.dtype.kind == "i" else "str",
            "model": _model_facts(index.model),
            "params": index.params(),
            "state": index._state(),
            "files": files,
        }
        with open(tmp / MANIFEST, "w") as handle:
            json.dump(manifest, handle, indent=2, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        _fsync_path(tmp, directory=True)
        if directory.exists():
            trash = parent / f".{directory.name}.old-{uuid.uuid4().hex[:8]}"
            os.rename(directory, trash)
        os.rename(tmp, directory)
        _fsync_path(parent, directory=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if trash is not None and trash.exists() and not directory.exists():
            os.rename(trash, directory)
        raise
    if trash is not None:
        shutil.rmtree(trash, ignore_errors=True)
    return directory


def read_manifest(directory) -> dict:
    """The parsed, format-checked manifest of an index directory."""
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise FileFormatError(f"{directory}: no such index directory")
    path = directory / MANIFEST
    if not path.is_file():
        raise FileFormatError(f"{directory}: not a sparsesim index directory (no {MANIFEST})")
    try:
        manifest = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FileFormatError(f"{path}: corrupt manifest ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise FileFormatError(f"{path}: not a sparsesim index manifest")
    try:
        version = int(manifest.get("format_version", -1))
    except (TypeError, ValueError):
        version = -1
    if version < 1:
        raise FileFormatError(f"{path}: missing or invalid format_version")
    if version > FORMAT_VERSION:
        raise FileFormatError(f"{path}: index format version {version} is newer than this sparsesim "
                              f"({FORMAT_VERSION}); upgrade sparsesim")
    for key in ("kind", "n_documents", "n_features", "model", "params", "state", "files"):
        if key not in manifest:
            raise FileFormatError(f"{path}: manifest lacks {key!r}")
    return manifest


def _verify_files(directory: Path, manifest: dict, verify: bool):
    for fname, facts in manifest["files"].items():
        if "/" in fname or "\\" in fname or fname.startswith("."):
            raise FileFormatError(f"{directory / MANIFEST}: invalid file name {fname!r}")
        path = directory / fname
        if not path.is_file():
            raise FileFormatError(f"{path}: missing (the index directory is incomplete)")
        size = path.stat().st_size
        if size != int(facts["bytes"]):
            raise FileFormatError(f"{path}: {size} bytes, expected {facts['bytes']} (file truncated or modified)")
        if verify and file_sha256(path) != facts["sha256"]:
            raise FileFormatError(f"{path}: sha256 mismatch (file corrupt or modified)")


def _check_model(model: BilinearSimilarity, facts: dict, directory: Path):
    if not isinstance(model, BilinearSimilarity):
        raise InvalidInputError(f"model must be a BilinearSimilarity, got {type(model).__name__}")
    if model.n_features != int(facts["n_features"]):
        raise ModelMismatchError(f"{directory}: the index was built for {facts['n_features']} features, "
                                 f"the model has {model.n_features}")
    if model.identity != bool(facts["identity"]) or model.normalize != bool(facts["normalize"]):
        raise ModelMismatchError(f"{directory}: the model's identity/normalize flags differ from the index's")
    checksum = model.checksum()
    if checksum != facts["checksum"]:
        raise ModelMismatchError(f"{directory}: the index was built with model {facts['checksum'][:12]}, "
                                 f"not with this model ({checksum[:12]})")


def load_index(directory, model: BilinearSimilarity | None = None, mmap: bool = False, verify: bool = True,
               n_jobs: int | None = 1):
    """Read an index directory written by :meth:`Index.save`.

    Parameters
    ----------
    directory : path-like
    model : BilinearSimilarity, optional
        The model the index must belong to (checked against the manifest's checksum); default:
        the copy stored in the index.
    mmap : bool, default False
        Memory-map the arrays read-only and the FAISS index with ``faiss.IO_FLAG_MMAP``; such
        an index answers queries but refuses :meth:`Index.add`.
    verify : bool, default True
        Check every file's sha256 (sizes are always checked).
    n_jobs : int, default 1
        Threads of the loaded index.

    Raises
    ------
    FileFormatError
        Not an index directory, newer format, missing, truncated or corrupt file.
    ModelMismatchError
        ``model`` is not the model the index was built with.
    """
    from .ann import AnnIndex
    from .exact import ExactIndex

    directory = Path(directory).expanduser()
    manifest = read_manifest(directory)
    classes = {"exact": ExactIndex, "ann": AnnIndex}
    kind = manifest["kind"]
    if kind not in classes:
        raise FileFormatError(f"{directory}: unknown index kind {kind!r}")
    _verify_files(directory, manifest, verify)
    stored = manifest["model"]
    if model is None:
        if MODEL_FILE not in manifest["files"]:
            raise FileFormatError(f"{directory}: no stored model; pass the model")
        model = BilinearSimilarity.load(directory / MODEL_FILE)
        try:
            _check_model(model, stored, directory)
        except ModelMismatchError as exc:
            raise FileFormatError(f"{exc} (stored model file inconsistent with the manifest)") from None
    else:
        _check_model(model, stored, directory)
    arrays = {}
    extra = {}
    for fname in manifest["files"]:
        if fname == MODEL_FILE:
            continue
        path = directory / fname
        if fname.endswith(".npy"):
            try:
                arrays[fname[:-4]] = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
            except (ValueError, OSError, EOFError) as exc:
                raise FileFormatError(f"{path}: not a readable array ({exc})") from None
        else:
            extra[fname] = path
    for name in ("ids", "corpus.indptr", "corpus.indices", "corpus.data"):
        if name not in arrays:
            raise FileFormatError(f"{directory}: missing {name}.npy")
    try:
        index = classes[kind](model, n_jobs=n_jobs, **manifest["params"])
    except TypeError as exc:
        raise FileFormatError(f"{directory}: manifest parameters do not fit a {kind} index ({exc})") from None
    from .exact import _csr_from

    n, d = int(manifest["n_documents"]), int(manifest["n_features"])
    index.X_ = _csr_from(arrays, "corpus", (n, d))
    ids = arrays["ids"]
    if ids.shape != (n,) or ids.dtype.kind not in "iU":
        raise FileFormatError(f"{directory}: ids.npy holds {ids.shape} {ids.dtype}, expected ({n},) int or str")
    index.ids_ = ids
    snippets = arrays.get("snippets")
    index.snippets_ = snippets if snippets is not None and snippets.shape == (n,) and snippets.dtype.kind == "U" else None
    try:
        index._restore(arrays, extra, manifest, mmap)
    except KeyError as exc:
        raise FileFormatError(f"{directory}: missing file for {exc}") from None
    index.read_only_ = bool(mmap)
    return index
