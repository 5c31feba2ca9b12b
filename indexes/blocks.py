"""Per-block checksums of index files, verified on first use of a block.

Every file of an index directory is split into blocks of ``BLOCK_BYTES`` (64 KiB); the sha256 of
every block is stored in one binary file (``blocks.sha256``: 32 bytes per block, the files in
sorted-name order), whose own sha256 is in the manifest. A memory-mapped index does not hash its
large arrays at load: a :class:`BlockGuard` per array hashes a block the first time a query is
about to read an element in it, and runs the array's structural check (index range, finite
values) on the elements of that block, before the compiled kernel reads them. A block whose
digest or content is wrong raises :class:`~sparsesim.exceptions.FileFormatError` and the query
returns no answer. Checked blocks are remembered, so every byte is hashed at most once per load.

Small arrays (``indptr`` arrays, ids, heavy-row numbers) are hashed and checked whole at load,
which also bounds every range a query can ask for.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import numpy as np

from sparsesim.exceptions import FileFormatError
from sparsesim.validation import bounded

__all__ = ["BLOCK_BYTES", "BLOCKS_FILE", "DIGEST_BYTES", "file_digests", "n_blocks", "BlockGuard",
           "index_check", "finite_check"]

BLOCK_BYTES = 1 << 16
BLOCKS_FILE = "blocks.sha256"
DIGEST_BYTES = 32


def n_blocks(size: int, block_bytes: int = BLOCK_BYTES) -> int:
    """Blocks of a file of ``size`` bytes (an empty file has none)."""
    return -(-int(size) // int(block_bytes))


def file_digests(path, block_bytes: int = BLOCK_BYTES) -> tuple[str, bytes]:
    """One pass over a file: its whole sha256 (hex) and the concatenated sha256 of its blocks."""
    whole = hashlib.sha256()
    parts = []
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(block_bytes)
            if not chunk:
                break
            whole.update(chunk)
            parts.append(hashlib.sha256(chunk).digest())
    return whole.hexdigest(), b"".join(parts)


def index_check(bound: int):
    """A block check: integer values in [0, ``bound``)."""
    def check(values: np.ndarray) -> str | None:
        if values.size and (int(values.min()) < 0 or int(values.max()) >= bound):
            return f"values outside [0, {bound})"
        return None
    return check


def finite_check(values: np.ndarray) -> str | None:
    """A block check: no NaN or infinite value."""
    if values.size and not np.isfinite(values).all():
        return "NaN or infinite values"
    return None


class BlockGuard:
    """Lazy integrity and structure checks of one memory-mapped ``.npy`` array.

    Parameters
    ----------
    path : Path
        The ``.npy`` file (its bytes are hashed through a read-only memory map).
    array : ndarray
        The memory-mapped array of that file.
    digests : bytes or None
        The sha256 of every block of the file (``None``: ``verify=False``, only the structural
        check runs).
    check : callable or None
        ``check(values) -> message or None`` on the flat elements of a block.
    block_bytes : int
    on_complete : callable, optional
        Called once, without arguments, when the last block was checked (with ``digests``).
    """

    def __init__(self, path: Path, array: np.ndarray, digests: bytes | None, check=None,
                 block_bytes: int = BLOCK_BYTES, on_complete=None):
        self.path = Path(path)
        self.array = array
        self.size = self.path.stat().st_size
        self.header = self.size - array.nbytes
        self.itemsize = array.dtype.itemsize
        self.block_bytes = int(block_bytes)
        self.n_blocks = n_blocks(self.size, block_bytes)
        if digests is not None and len(digests) != DIGEST_BYTES * self.n_blocks:
            raise FileFormatError(f"{self.path}: {len(digests) // DIGEST_BYTES} block checksums for "
                                  f"{self.n_blocks} blocks")
        if self.header < 0 or self.header % self.itemsize or self.block_bytes % self.itemsize:
            raise FileFormatError(f"{self.path}: array data not aligned to its element size")
        self.digests = digests
        self.check = check
        self.done = np.zeros(self.n_blocks, dtype=bool)
        self.pending = self.n_blocks
        self._raw = np.memmap(self.path, dtype=np.uint8, mode="r") if self.size else np.zeros(0, np.uint8)
        self._flat = array.reshape(-1)
        self._lock = threading.Lock()
        self._on_complete = on_complete if digests is not None else None

    def _verify(self, block: int):
        lo = block * self.block_bytes
        hi = min(lo + self.block_bytes, self.size)
        if self.digests is not None:
            got = hashlib.sha256(memoryview(self._raw[lo:hi])).digest()
            if got != self.digests[block * DIGEST_BYTES:(block + 1) * DIGEST_BYTES]:
                raise FileFormatError(f"{self.path}: sha256 mismatch in bytes {lo}..{hi} (file corrupt or modified)")
        if self.check is not None:
            e0 = max(0, (lo - self.header) // self.itemsize)
            e1 = max(0, (hi - self.header) // self.itemsize)
            problem = self.check(self._flat[e0:e1]) if e1 > e0 else None
            if problem:
                raise FileFormatError(f"{self.path}: {bounded(problem, 200)} (elements {e0}..{e1})")

    def _run(self, blocks: np.ndarray):
        for block in blocks.tolist():
            if self.done[block]:
                continue
            self._verify(block)
            with self._lock:
                if not self.done[block]:
                    self.done[block] = True
                    self.pending -= 1
                    finished = self.pending == 0
                else:
                    finished = False
            if finished and self._on_complete is not None:
                self._on_complete()

    def ensure_all(self):
        """Check every block not checked yet."""
        if self.pending:
            self._run(np.flatnonzero(~self.done))

    def ensure(self, starts, stops):
        """Check the blocks holding flat elements ``[starts[j], stops[j])`` (empty ranges ignored)."""
        if not self.pending:
            return
        starts = np.asarray(starts, dtype=np.int64).ravel()
        stops = np.asarray(stops, dtype=np.int64).ravel()
        keep = stops > starts
        if not keep.all():
            starts, stops = starts[keep], stops[keep]
        if starts.size == 0:
            return
        b0 = (self.header + starts * self.itemsize) // self.block_bytes
        b1 = (self.header + stops * self.itemsize - 1) // self.block_bytes
        lengths = b1 - b0 + 1
        total = int(lengths.sum())
        if total > self.n_blocks:  # ranges cover (nearly) everything: no need to list them
            blocks = np.arange(self.n_blocks)
        else:
            offsets = np.repeat(np.cumsum(lengths) - lengths, lengths)
            blocks = np.repeat(b0, lengths) + (np.arange(total) - offsets)
        blocks = np.unique(blocks)
        blocks = blocks[(blocks >= 0) & (blocks < self.n_blocks)]
        self._run(blocks[~self.done[blocks]])

    def ensure_rows(self, indptr: np.ndarray, rows, limit: int | None = None):
        """Check the elements of CSR rows ``rows`` (at most ``limit`` from each row's start; one
        limit for all rows or one per row)."""
        if not self.pending:
            return
        rows = np.asarray(rows, dtype=np.int64).ravel()
        inside = (rows >= 0) & (rows < indptr.shape[0] - 1)
        rows = rows[inside]
        starts = np.asarray(indptr[rows], dtype=np.int64)
        stops = np.asarray(indptr[rows + 1], dtype=np.int64)
        if limit is not None:
            limit = np.asarray(limit, dtype=np.int64)
            stops = np.minimum(stops, starts + (limit if limit.ndim == 0 else limit.ravel()[inside]))
        self.ensure(starts, stops)
