"""The no-pickle file format for models (and the manifests of indexes).

A model file is one ``.npz`` archive holding named numeric arrays plus one array named
``__meta__`` with a JSON document (format version, kind, algorithm, parameters, shape,
checksum of the arrays). Nothing is unpickled on load (``allow_pickle=False``), so loading
a file never runs code. Writes are atomic: the archive is written to a temporary file in
the same directory, flushed, fsynced and renamed over the target, so a crash or an error
never leaves a partial file under the final name.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Callable

import numpy as np

from .exceptions import FileFormatError

FORMAT_VERSION = 1
_META_KEY = "__meta__"


def atomic_write(path: str | os.PathLike, write: Callable[[object], None], mode: str = "wb") -> Path:
    """Call ``write(fileobj)`` on a temporary file and rename it to ``path`` when it succeeds.

    Parameters
    ----------
    path : path-like
        Final file name. Its directory must exist.
    write : callable
        Receives an open file object and writes the whole content.
    mode : {"wb", "w"}
        Binary or text mode.

    Returns
    -------
    pathlib.Path
        The written path.
    """
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise FileFormatError(f"cannot write {path}: directory {directory} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, mode) as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def arrays_checksum(arrays: dict[str, np.ndarray]) -> str:
    """sha256 over the names, dtypes, shapes and bytes of ``arrays`` (order independent)."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        arr = np.ascontiguousarray(arrays[name])
        digest.update(name.encode())
        digest.update(str(arr.dtype.str).encode())
        digest.update(repr(arr.shape).encode())
        digest.update(arr.tobytes())
    return digest.hexdigest()


def file_sha256(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def save_bundle(path: str | os.PathLike, arrays: dict[str, np.ndarray], meta: dict, kind: str) -> dict:
    """Write ``arrays`` and ``meta`` atomically as one npz file; returns the stored metadata.

    ``meta`` must be JSON-serialisable. ``format_version``, ``kind`` and ``checksum`` are added.
    """
    for name, arr in arrays.items():
        if name == _META_KEY:
            raise ValueError(f"array name {_META_KEY!r} is reserved")
        if np.asarray(arr).dtype == object:
            raise TypeError(f"array {name!r} has dtype object; only numeric arrays are stored")
    full_meta = dict(meta)
    full_meta.update(format_version=FORMAT_VERSION, kind=kind, checksum=arrays_checksum(arrays))
    payload = dict(arrays)
    payload[_META_KEY] = np.frombuffer(json.dumps(full_meta, sort_keys=True).encode(), dtype=np.uint8)
    atomic_write(path, lambda handle: np.savez(handle, **payload))
    return full_meta


def load_bundle(path: str | os.PathLike, kind: str) -> tuple[dict[str, np.ndarray], dict]:
    """Read a file written by :func:`save_bundle`, verifying format, kind and checksum.

    Raises
    ------
    FileFormatError
        Missing, truncated or corrupt file, wrong kind, newer format version, bad checksum.
    """
    path = Path(path)
    if not path.is_file():
        raise FileFormatError(f"{path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, KeyError) as exc:
        raise FileFormatError(f"{path}: not a readable sparsesim {kind} file ({exc.__class__.__name__}: {exc})") from None
    if _META_KEY not in arrays:
        raise FileFormatError(f"{path}: not a sparsesim {kind} file (no metadata)")
    try:
        meta = json.loads(arrays.pop(_META_KEY).tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FileFormatError(f"{path}: corrupt metadata ({exc})") from None
    if meta.get("kind") != kind:
        raise FileFormatError(f"{path}: holds a {meta.get('kind')!r}, expected a {kind!r}")
    if int(meta.get("format_version", -1)) > FORMAT_VERSION:
        raise FileFormatError(
            f"{path}: format version {meta.get('format_version')} is newer than this sparsesim "
            f"({FORMAT_VERSION}); upgrade sparsesim"
        )
    if arrays_checksum(arrays) != meta.get("checksum"):
        raise FileFormatError(f"{path}: checksum mismatch (file corrupt or modified)")
    return arrays, meta
