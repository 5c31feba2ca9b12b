"""Checksums: sha256 over named arrays, over a bundle's metadata and arrays, and over a file's bytes."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np


def arrays_checksum(arrays: dict[str, np.ndarray]) -> str:
    """sha256 over the names, dtypes, shapes and bytes of ``arrays`` (order independent)."""
    digest = hashlib.sha256()
    _update_arrays(digest, arrays)
    return digest.hexdigest()


def _update_arrays(digest, arrays):
    for name in sorted(arrays):
        arr = np.ascontiguousarray(arrays[name])
        digest.update(name.encode())
        digest.update(str(arr.dtype.str).encode())
        digest.update(repr(arr.shape).encode())
        digest.update(memoryview(arr).cast("B") if arr.size else b"")


def bundle_checksum(arrays: dict[str, np.ndarray], meta: dict) -> str:
    """sha256 over the metadata (canonical JSON without its ``checksum`` key) and the arrays."""
    digest = hashlib.sha256()
    body = {k: v for k, v in meta.items() if k != "checksum"}
    digest.update(json.dumps(body, sort_keys=True, allow_nan=False).encode())
    digest.update(b"\x00")
    _update_arrays(digest, arrays)
    return digest.hexdigest()


def file_sha256(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()
