"""A corpus on disk, read a block of rows at a time: for corpora larger than memory.

A corpus directory holds the CSR arrays of the document matrix as ``.npy`` files, and
optionally one label per document::

    corpus.json    {"format": "sparsesim-corpus", "n_documents": n, "n_features": d}
    indptr.npy     int64, n + 1 row pointers
    indices.npy    int32, feature of every stored entry
    data.npy       float64, value of every stored entry
    labels.npy     int64, one per document (optional)

:func:`write_corpus` writes one from a matrix (or from blocks of rows);
:func:`sparsesim.data.synthetic.write_rcv1_like` generates a synthetic one block by block.
:class:`CorpusFiles` reads rows with ``pread`` (:class:`~sparsesim.persistence.npy_stream.NpyRows`):
a pass over the corpus holds one block in memory, whatever the corpus size. The files are
untrusted: headers and ``indptr`` are checked when the corpus is opened; the rows a block
returns are checked by whoever uses them (an index checks every block it reads, like any
input).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from sparsesim.exceptions import FileFormatError, InvalidInputError
from sparsesim.persistence import atomic_write, dumps_strict, loads_strict
from sparsesim.persistence.npy_stream import NpyAppender, NpyRows

__all__ = ["CorpusFiles", "CorpusWriter", "write_corpus", "CORPUS_FORMAT"]

CORPUS_FORMAT = "sparsesim-corpus"
_META = "corpus.json"


class CorpusWriter:
    """Write a corpus directory block of rows by block of rows.

    Parameters
    ----------
    directory : path-like
        A new or empty directory.
    n_features : int
    labels : bool, default False
        Whether every block comes with labels.
    """

    def __init__(self, directory, n_features: int, labels: bool = False):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        if any(self.directory.iterdir()):
            raise InvalidInputError(f"{self.directory} is not empty; give a new directory for the corpus")
        self.n_features = int(n_features)
        self._indices = NpyAppender(self.directory / "indices.npy", np.int32)
        self._data = NpyAppender(self.directory / "data.npy", np.float64)
        self._labels = NpyAppender(self.directory / "labels.npy", np.int64) if labels else None
        self._indptr = [np.zeros(1, dtype=np.int64)]
        self._nnz = 0

    def append(self, X, y=None) -> None:
        """Append the rows of CSR matrix ``X`` (and their labels ``y``)."""
        X = sp.csr_matrix(X)
        if X.shape[1] != self.n_features:
            raise InvalidInputError(f"block has {X.shape[1]} features, the corpus {self.n_features}")
        self._indices.append(np.asarray(X.indices, dtype=np.int32))
        self._data.append(np.asarray(X.data, dtype=np.float64))
        self._indptr.append(np.asarray(X.indptr[1:], dtype=np.int64) + self._nnz)
        self._nnz += int(X.indptr[-1])
        if self._labels is not None:
            if y is None or len(y) != X.shape[0]:
                raise InvalidInputError("every block needs one label per row")
            self._labels.append(np.asarray(y, dtype=np.int64))

    def abort(self, remove_directory: bool = False) -> None:
        """Give up: close and remove the files written so far (and the directory, when asked)."""
        for appender in (self._indices, self._data, self._labels):
            if appender is not None and not appender._file.closed:
                appender.abort()
        if remove_directory:
            shutil.rmtree(self.directory, ignore_errors=True)
            return
        for name in ("indices.npy", "data.npy", "labels.npy", "indptr.npy", _META):
            (self.directory / name).unlink(missing_ok=True)

    def close(self) -> "CorpusFiles":
        """Finish the files and return the corpus, opened."""
        indptr = np.concatenate(self._indptr)
        self._indices.close()
        self._data.close()
        if self._labels is not None:
            self._labels.close()
        out = NpyAppender(self.directory / "indptr.npy", np.int64)
        out.append(indptr)
        out.close()
        meta = {"format": CORPUS_FORMAT, "n_documents": int(indptr.size - 1), "n_features": self.n_features}
        text = dumps_strict(meta).encode()
        atomic_write(self.directory / _META, lambda handle: handle.write(text))
        return CorpusFiles(self.directory)


def write_corpus(directory, X, y=None, block: int = 100_000) -> "CorpusFiles":
    """Write CSR matrix ``X`` (and labels ``y``) as a corpus directory; returns it opened.

    Examples
    --------
    >>> import tempfile, scipy.sparse as sp
    >>> X = sp.random(5, 8, density=0.4, format="csr", random_state=0)
    >>> corpus = write_corpus(tempfile.mkdtemp(), X, y=[0, 1, 0, 1, 1], block=2)
    >>> (corpus.rows(1, 4) != X[1:4]).nnz, corpus.n_documents, corpus.labels().tolist()
    (0, 5, [0, 1, 0, 1, 1])
    """
    X = sp.csr_matrix(X)
    writer = CorpusWriter(directory, X.shape[1], labels=y is not None)
    y = None if y is None else np.asarray(y)
    for lo in range(0, X.shape[0], block):
        writer.append(X[lo:lo + block], None if y is None else y[lo:lo + block])
    return writer.close()


class CorpusFiles:
    """A corpus directory (see the module docstring), read a block of rows at a time.

    Parameters
    ----------
    directory : path-like

    Raises
    ------
    FileFormatError
        A missing or malformed file, or row pointers that do not describe the stored entries.
    """

    def __init__(self, directory):
        self.directory = Path(directory)
        try:
            meta = loads_strict((self.directory / _META).read_bytes(), str(self.directory / _META))
        except OSError as exc:
            raise FileFormatError(f"{self.directory}: not a corpus directory ({exc.strerror or exc})") from None
        if not isinstance(meta, dict) or meta.get("format") != CORPUS_FORMAT:
            raise FileFormatError(f"{self.directory / _META}: not a {CORPUS_FORMAT} description")
        n, d = meta.get("n_documents"), meta.get("n_features")
        if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**40 for v in (n, d)) or d < 1:
            raise FileFormatError(f"{self.directory / _META}: n_documents / n_features are not valid counts")
        labels = self.directory / "labels.npy"
        self._open(int(n), int(d), self.directory / "indptr.npy", self.directory / "indices.npy",
                   self.directory / "data.npy", labels if labels.exists() else None)

    @classmethod
    def from_files(cls, n_features: int, indptr, indices, data, labels=None) -> "CorpusFiles":
        """A corpus from three ``.npy`` files (int64 ``indptr``, int32 ``indices``, float64 ``data``)
        named individually, e.g. an index's stored corpus arrays."""
        out = cls.__new__(cls)
        out.directory = Path(indptr).parent
        rows = NpyRows(indptr, np.int64)
        n = len(rows) - 1
        rows.close()
        out._open(n, int(n_features), Path(indptr), Path(indices), Path(data), labels)
        return out

    def _open(self, n: int, d: int, indptr, indices, data, labels):
        self.n_documents, self.n_features = n, d
        self._paths = {"indptr": Path(indptr), "indices": Path(indices), "data": Path(data)}
        indptr_file = NpyRows(indptr, np.int64)
        self._indices = NpyRows(indices, np.int32)
        self._data = NpyRows(data, np.float64)
        self.indptr = indptr_file.read(0, len(indptr_file))
        indptr_file.close()
        nnz = len(self._indices)
        if (self.indptr.ndim != 1 or self.indptr.size != n + 1 or self.indptr[0] != 0 or self.indptr[-1] != nnz
                or len(self._data) != nnz or (n and np.any(np.diff(self.indptr) < 0))):
            raise FileFormatError(f"{self.directory}: the row pointers do not describe the {nnz} stored entries of "
                                  f"{n} rows")
        self._labels = NpyRows(labels, np.int64) if labels is not None else None
        if self._labels is not None and len(self._labels) != n:
            raise FileFormatError(f"{labels}: {len(self._labels)} labels for {n} documents")

    @property
    def shape(self) -> tuple:
        return (self.n_documents, self.n_features)

    @property
    def files(self) -> dict:
        """The paths of the ``indptr``, ``indices`` and ``data`` files read (name -> path)."""
        return dict(self._paths)

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])

    def rows(self, lo: int, hi: int) -> sp.csr_matrix:
        """Rows ``lo <= r < hi`` as a new CSR matrix (int64 indptr, int32 indices, unchecked values)."""
        lo, hi = max(0, min(int(lo), self.n_documents)), max(0, min(int(hi), self.n_documents))
        hi = max(lo, hi)
        a, b = int(self.indptr[lo]), int(self.indptr[hi])
        out = sp.csr_matrix((hi - lo, self.n_features))
        out.indptr = self.indptr[lo:hi + 1] - a
        out.indices, out.data = self._indices.read(a, b), self._data.read(a, b)
        return out

    def take(self, rows) -> sp.csr_matrix:
        """Rows ``rows`` (row numbers in ``[0, n)``, any order) as a new CSR matrix."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if rows.size and (rows.min() < 0 or rows.max() >= self.n_documents):
            raise InvalidInputError(f"row numbers must be in [0, {self.n_documents})")
        starts, ends = self.indptr[rows], self.indptr[rows + 1]
        out = sp.csr_matrix((rows.size, self.n_features))
        out.indptr = np.zeros(rows.size + 1, dtype=np.int64)
        np.cumsum(ends - starts, out=out.indptr[1:])
        out.indices = np.concatenate([self._indices.read(a, b) for a, b in zip(starts, ends)] or [np.zeros(0, np.int32)])
        out.data = np.concatenate([self._data.read(a, b) for a, b in zip(starts, ends)] or [np.zeros(0)])
        return out

    def blocks(self, block: int):
        """``(lo, rows)`` for consecutive blocks of ``block`` rows."""
        for lo in range(0, self.n_documents, int(block)):
            yield lo, self.rows(lo, lo + block)

    def labels(self) -> np.ndarray | None:
        """The labels (int64, one per document), or None."""
        return None if self._labels is None else self._labels.read(0, self.n_documents)

    def __repr__(self) -> str:
        return f"CorpusFiles({str(self.directory)!r}, n_documents={self.n_documents}, n_features={self.n_features})"
