"""Bounded decompression: a compressed file may expand only so far (no decompression bombs)."""

from __future__ import annotations

import io
import os

from ..exceptions import FileFormatError


def read_bounded(handle, limit: int, what: str) -> bytes:
    """Read a (decompressing) stream, refusing one that expands beyond ``limit`` bytes."""
    data = handle.read(limit + 1)
    if len(data) > limit:
        raise FileFormatError(
            f"{what}: expands to more than {limit} bytes when decompressed (refused as a possible decompression "
            "bomb; raise SPARSESIM_MAX_DECOMPRESSED=BYTES for a genuinely large file)")
    return data


def decompression_limit(compressed_size: int) -> int:
    """Bytes a compressed file of ``compressed_size`` may expand to: ``$SPARSESIM_MAX_DECOMPRESSED``,
    else max(64 MiB, 100 x the compressed size)."""
    env = os.environ.get("SPARSESIM_MAX_DECOMPRESSED")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            pass
    return max(64 << 20, 100 * int(compressed_size))


class _BoundedRaw(io.RawIOBase):
    """A raw stream over a decompressing file object that refuses to deliver more than ``limit`` bytes."""

    def __init__(self, inner, limit: int, what: str):
        super().__init__()
        self._inner, self._limit, self._what, self._count = inner, int(limit), what, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self._inner.readinto(buffer)
        self._count += n or 0
        if self._count > self._limit:
            raise FileFormatError(
                f"{self._what}: expands to more than {self._limit} bytes when decompressed (refused as a possible "
                "decompression bomb; set SPARSESIM_MAX_DECOMPRESSED=BYTES for a genuinely large file)")
        return n

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            super().close()


def bounded_stream(inner, compressed_size: int, what: str):
    """Wrap a decompressing binary stream so that reading more than :func:`decompression_limit`
    bytes raises :class:`~sparsesim.exceptions.FileFormatError` (a small file cannot expand into
    gigabytes)."""
    return io.BufferedReader(_BoundedRaw(inner, decompression_limit(compressed_size), what))
