"""Opening data files: decompression chosen by magic bytes (bounded), whole-file reads whose
failures name the file, and the choice of a reader from a path."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import zlib
from pathlib import Path

from ...exceptions import DataNotFoundError, FileFormatError
from ...persistence import bounded_stream

MAGIC_BYTES = (
    (b"BZh", bz2.open),
    (b"\xfd7zXZ\x00", lzma.open),
    (b"\x5d\x00\x00", lzma.open),  # legacy .lzma
    (b"\x1f\x8b", gzip.open),
)

# errors raised while decompressing or reading a damaged stream
STREAM_ERRORS = (EOFError, OSError, lzma.LZMAError, zlib.error)


def check_exists(path: Path) -> None:
    if not path.exists():
        raise DataNotFoundError(f"{path}: no such file")
    if not path.is_file():
        raise DataNotFoundError(f"{path}: not a regular file")


def open_maybe_compressed(path: str | os.PathLike):
    """Open ``path`` for binary reading, decompressing bz2/xz/lzma/gzip (detected by magic bytes)."""
    path = Path(path)
    check_exists(path)
    with open(path, "rb") as handle:
        head = handle.read(6)
    for magic, opener in MAGIC_BYTES:
        if head.startswith(magic):  # decompression is bounded (a small file cannot expand into gigabytes)
            return bounded_stream(opener(path, "rb"), path.stat().st_size, str(path))
    return open(path, "rb")


def read_bytes(path: Path) -> bytes:
    """The (decompressed, bounded) bytes of ``path``; a truncated or corrupt file is a FileFormatError."""
    try:
        with open_maybe_compressed(path) as handle:
            return handle.read()
    except (DataNotFoundError, FileFormatError):
        raise
    except STREAM_ERRORS as exc:
        raise FileFormatError(f"{path}: truncated or corrupt file ({exc.__class__.__name__}: {exc})") from None


def read_text_file(path: Path) -> str:
    data = read_bytes(path)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FileFormatError(f"{path}: not UTF-8 text ({exc})") from None


def read_lines(path: Path, what: str) -> list[str]:
    try:
        with open_maybe_compressed(path) as handle:
            return [ln.strip() for ln in handle.read().decode("utf-8").splitlines() if ln.strip()]
    except (DataNotFoundError, FileFormatError):
        raise
    except (*STREAM_ERRORS, UnicodeDecodeError) as exc:
        raise FileFormatError(f"{path}: unreadable {what} file ({exc})") from None


COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz", ".lzma")


def plain_suffix(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    while suffixes and suffixes[-1] in COMPRESSED_SUFFIXES:
        suffixes.pop()
    return suffixes[-1] if suffixes else ""


def table_format(path: Path) -> str | None:
    """``"csv"``, ``"tsv"`` or ``"jsonl"`` from the file name (compression suffixes ignored), else None."""
    return {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl"}.get(plain_suffix(Path(path)))


def detect_format(path: str | os.PathLike) -> str:
    """The reader for ``path``: ``folder``, ``npz``, ``csv``/``tsv``/``jsonl``, ``mtx`` or ``svmlight``."""
    path = Path(path)
    if path.is_dir():
        return "folder"
    suffix = plain_suffix(path)
    if suffix == ".npz":
        return "npz"
    if suffix == ".mtx":
        return "mtx"
    return table_format(path) or "svmlight"
