"""``.npy`` files written and read a block of rows at a time, never held whole.

:class:`NpyAppender` writes the bytes ``np.save`` would write for the whole array (same header,
same data), one block of rows after the other, so an array larger than memory can be built
block by block. :class:`NpyRows` reads rows of a ``.npy`` file with ``pread`` into fresh
buffers: unlike a memory map, the pages read never count toward the process's resident memory,
so a pass over a file of any size stays within the memory of one block.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from sparsesim.exceptions import FileFormatError

from .arrays import read_npy
from .files import file_mode

__all__ = ["NpyAppender", "NpyRows"]

_PLACEHOLDER_ROWS = 10**12  # the header is written for this many rows, then for the real count


def _header(dtype: np.dtype, shape: tuple) -> bytes:
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": np.lib.format.dtype_to_descr(dtype),
                                              "fortran_order": False, "shape": tuple(int(v) for v in shape)})
    return buf.getvalue()


class NpyAppender:
    """Write one C-ordered ``.npy`` array block by block along its first axis.

    Parameters
    ----------
    path : path-like
        A new file (refused if it exists).
    dtype : dtype
    row_shape : tuple, default ()
        Shape of one row (``()`` for a 1-D array).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "a.npy"
    >>> out = NpyAppender(path, np.int64)
    >>> out.append(np.arange(3)); out.append(np.arange(3, 5))
    >>> _ = out.close()
    >>> np.load(path).tolist(), path.read_bytes() == _saved(np.arange(5))
    ([0, 1, 2, 3, 4], True)
    """

    def __init__(self, path, dtype, row_shape: tuple = ()):
        self.path = Path(path)
        self.dtype = np.dtype(dtype)
        self.row_shape = tuple(int(v) for v in row_shape)
        self.rows = 0
        self._head = len(_header(self.dtype, (_PLACEHOLDER_ROWS,) + self.row_shape))
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, file_mode())
        self._file = os.fdopen(fd, "wb")
        self._file.write(b"\0" * self._head)

    @staticmethod
    def header_bytes(dtype, row_shape: tuple = ()) -> int:
        """Bytes before the first row in a file this class writes (its placeholder header)."""
        return len(_header(np.dtype(dtype), (_PLACEHOLDER_ROWS,) + tuple(int(v) for v in row_shape)))

    @classmethod
    def reopen(cls, path, dtype, row_shape: tuple = (), rows: int = 0) -> "NpyAppender":
        """Continue a file this class was writing after its first ``rows`` rows (anything the
        file holds past them is cut off): a build that stopped resumes appending where its last
        :meth:`sync` left it.

        Raises
        ------
        FileFormatError
            The file is missing or holds fewer than ``rows`` rows.
        """
        out = cls.__new__(cls)
        out.path = Path(path)
        out.dtype = np.dtype(dtype)
        out.row_shape = tuple(int(v) for v in row_shape)
        out.rows = int(rows)
        out._head = len(_header(out.dtype, (_PLACEHOLDER_ROWS,) + out.row_shape))
        row_bytes = out.dtype.itemsize * int(np.prod(out.row_shape, dtype=np.int64))
        end = out._head + out.rows * row_bytes
        try:
            fd = os.open(out.path, os.O_WRONLY)
        except OSError as exc:
            raise FileFormatError(f"{out.path}: cannot continue it ({exc.strerror or exc})") from None
        size = os.fstat(fd).st_size
        if out.rows < 0 or size < end:
            os.close(fd)
            raise FileFormatError(f"{out.path}: holds {size} bytes, fewer than the {end} of its first {rows} rows")
        os.ftruncate(fd, end)
        out._file = os.fdopen(fd, "wb")
        out._file.seek(end)
        return out

    def sync(self) -> int:
        """Flush and fsync the rows appended so far; returns their count (what :meth:`reopen` continues from)."""
        self._file.flush()
        os.fsync(self._file.fileno())
        return self.rows

    def append(self, block) -> None:
        """Append rows (an array of this dtype and row shape)."""
        block = np.ascontiguousarray(block)
        if block.dtype != self.dtype or block.shape[1:] != self.row_shape:
            raise ValueError(f"{self.path.name}: block of {block.dtype} {block.shape[1:]} rows, expected "
                             f"{self.dtype} {self.row_shape}")
        if block.size:
            self._file.write(memoryview(block.reshape(-1)).cast("B"))
        self.rows += block.shape[0]

    def close(self) -> Path:
        """Write the header for the rows appended, flush and fsync; returns the path."""
        head = _header(self.dtype, (self.rows,) + self.row_shape)
        if len(head) != self._head:  # pragma: no cover - header lengths differ only past 10^12 rows
            raise ValueError(f"{self.path.name}: header length changed")
        self._file.seek(0)
        self._file.write(head)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        return self.path

    def release(self) -> None:
        """Close the file as it is, header not written (a stopped build: :meth:`reopen` continues it)."""
        self._file.close()

    def abort(self) -> None:
        """Close and remove the partial file."""
        self._file.close()
        self.path.unlink(missing_ok=True)


def _saved(arr) -> bytes:
    """The bytes ``np.save`` writes for ``arr`` (for the doctest)."""
    import io

    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


class NpyRows:
    """Rows of a ``.npy`` file read on demand with ``pread`` (its header checked against its size).

    Parameters
    ----------
    path : path-like
    dtype : dtype, optional
        Refuse a file of another dtype (:class:`~sparsesim.exceptions.FileFormatError`).

    Attributes
    ----------
    shape : tuple
    dtype : dtype
    """

    def __init__(self, path, dtype=None):
        self.path = Path(path)
        mapped = read_npy(self.path, mmap=True)  # header checked against the file size; no page read
        self.shape, self.dtype, self.offset = mapped.shape, mapped.dtype, int(mapped.offset)
        del mapped
        if dtype is not None and self.dtype != np.dtype(dtype):
            raise FileFormatError(f"{self.path}: holds {self.dtype}, expected {np.dtype(dtype)}")
        self._row_bytes = self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))
        self._fd = os.open(self.path, os.O_RDONLY)

    def __len__(self) -> int:
        return int(self.shape[0])

    def read(self, lo: int, hi: int) -> np.ndarray:
        """Rows ``lo <= r < hi`` as a new array."""
        lo, hi = max(0, int(lo)), min(int(hi), len(self))
        count = max(0, hi - lo)
        buf = bytearray(count * self._row_bytes)
        view = memoryview(buf)
        pos, done = self.offset + lo * self._row_bytes, 0
        while done < len(buf):
            got = os.preadv(self._fd, [view[done:]], pos + done)
            if got <= 0:
                raise FileFormatError(f"{self.path}: file ended early")
            done += got
        return np.frombuffer(buf, dtype=self.dtype).reshape((count,) + tuple(self.shape[1:]))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # pragma: no cover
            pass
