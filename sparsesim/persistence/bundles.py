"""Model bundles: named arrays plus JSON metadata in one checksummed ``.npz`` file (no pickle)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..exceptions import FileFormatError
from ..validation import bounded
from .arrays import read_npz
from .checksums import arrays_checksum, bundle_checksum
from .files import atomic_write
from .jsonio import check_meta_limits, json_ready, loads_strict

FORMAT_VERSION = 2
_META_KEY = "__meta__"


def save_bundle(path: str | os.PathLike, arrays: dict[str, np.ndarray], meta: dict, kind: str) -> dict:
    """Write ``arrays`` and ``meta`` atomically as one npz file; returns the stored metadata.

    ``meta`` must be JSON-serialisable (non-finite floats are stored as ``null``).
    ``format_version``, ``kind`` and ``checksum`` (over the metadata and the arrays) are added.
    Metadata that :func:`load_bundle` would refuse (over :data:`~sparsesim.persistence.MAX_META_BYTES`
    or too deeply nested) raises :class:`~sparsesim.exceptions.ResourceLimitError` before anything is
    written.
    """
    for name, arr in arrays.items():
        if name == _META_KEY:
            raise ValueError(f"array name {_META_KEY!r} is reserved")
        if np.asarray(arr).dtype == object:
            raise TypeError(f"array {name!r} has dtype object; only numeric arrays are stored")
    full_meta = json_ready(dict(meta))
    full_meta.update(format_version=FORMAT_VERSION, kind=kind)
    full_meta.pop("checksum", None)
    full_meta["checksum"] = bundle_checksum(arrays, full_meta)
    payload = dict(arrays)
    text = check_meta_limits(full_meta, "model")  # nothing is written that load_bundle refuses
    payload[_META_KEY] = np.frombuffer(text.encode(), dtype=np.uint8)
    atomic_write(path, lambda handle: np.savez(handle, **payload))
    return full_meta


def bundle_kind(path: str | os.PathLike) -> str:
    """The ``kind`` a file written by :func:`save_bundle` declares, read from its metadata alone
    (the arrays are not read and the checksum is not verified: :func:`load_bundle` does that).

    Raises
    ------
    FileFormatError
        Missing or unreadable file, no metadata, metadata without a string ``kind``.
    """
    path = Path(path)
    if not path.is_file():
        raise FileFormatError(f"{path}: no such file")
    raw = read_npz(path, what=str(path), only={_META_KEY}).get(_META_KEY)
    if raw is None or raw.dtype != np.uint8 or raw.ndim != 1:
        raise FileFormatError(f"{path}: not a sparsesim model file (no metadata)")
    meta = loads_strict(raw.tobytes(), str(path))
    kind = meta.get("kind") if isinstance(meta, dict) else None
    if not isinstance(kind, str):
        raise FileFormatError(f"{path}: not a sparsesim model file (its metadata names no kind)")
    return kind


def load_bundle(path: str | os.PathLike, kind: str) -> tuple[dict[str, np.ndarray], dict]:
    """Read a file written by :func:`save_bundle`, verifying format, kind and checksum.

    Raises
    ------
    FileFormatError
        Missing, truncated or corrupt file, wrong kind, unknown format version, bad checksum,
        metadata that is not a JSON object.
    """
    path = Path(path)
    if not path.is_file():
        raise FileFormatError(f"{path}: no such file")
    arrays = read_npz(path, what=str(path))
    if _META_KEY not in arrays:
        raise FileFormatError(f"{path}: not a sparsesim {kind} file (no metadata)")
    raw = arrays.pop(_META_KEY)
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise FileFormatError(f"{path}: metadata of dtype {raw.dtype}, expected uint8 bytes")
    meta = loads_strict(raw.tobytes(), str(path))
    if not isinstance(meta, dict):
        raise FileFormatError(f"{path}: metadata is a JSON {type(meta).__name__}, expected an object")
    if meta.get("kind") != kind:
        raise FileFormatError(f"{path}: holds a {bounded(repr(meta.get('kind')), 60)}, expected a {kind!r}")
    version = meta.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise FileFormatError(f"{path}: invalid format_version {bounded(repr(version), 40)}")
    if version > FORMAT_VERSION:
        raise FileFormatError(
            f"{path}: format version {version} is newer than this sparsesim ({FORMAT_VERSION}); upgrade sparsesim"
        )
    checksum = meta.get("checksum")
    expected = arrays_checksum(arrays) if version == 1 else bundle_checksum(arrays, meta)
    if not isinstance(checksum, str) or checksum != expected:
        raise FileFormatError(f"{path}: checksum mismatch (file corrupt or modified)")
    return arrays, meta
