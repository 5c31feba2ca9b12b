"""An svmlight/LIBSVM file written into a corpus directory a block of bytes at a time.

For corpora larger than memory (:func:`sparsesim.indexes.ann_blockwise.build_ann_blockwise` reads a
corpus directory): memory holds one block of the file and its rows, whatever the file's size.
Parsing is scikit-learn's ``load_svmlight_file`` over each block's bytes (a block ends at the first
line break at or after its nominal end, so the blocks partition the lines); every block gets
the checks of :func:`sparsesim.data.readers.matrices.read_svmlight` (finite values and labels,
indices within the width, the index base) before it is written.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from sparsesim.exceptions import FileFormatError, InvalidInputError
from sparsesim.validation import MAX_FEATURES, bounded

from .corpus_files import CorpusFiles, CorpusWriter
from .readers.formats import MAGIC_BYTES, check_exists
from .readers.matrices import base_name, checked_rows, parse_zero_based

__all__ = ["write_corpus_from_svmlight"]

#: bytes of the file parsed at a time (rows of ~75 entries: ~60,000 documents)
BLOCK_BYTES = 64 << 20


def _line_starts(handle, size: int, block_bytes: int):
    """Byte offsets that split the file into blocks of whole lines: 0, then the first line start at
    or after each multiple of ``block_bytes`` (a long line makes its block longer), then ``size``."""
    bounds, pos = [0], 0
    while True:
        target = bounds[-1] + block_bytes
        if target >= size:
            break
        pos = target - 1  # the line that holds byte target - 1 ends the block
        while True:
            chunk = os.pread(handle, 1 << 20, pos)
            if not chunk:
                pos = size
                break
            cut = chunk.find(b"\n")
            if cut >= 0:
                pos += cut + 1
                break
            pos += len(chunk)
        if pos >= size:
            break
        bounds.append(pos)
    bounds.append(size)
    return bounds


def _raw_blocks(path: Path, block_bytes: int):
    """``(start, end, X, y)`` of each block of whole lines of ``path`` (bytes [start, end)), indices as
    written (duplicates summed)."""
    from sklearn.datasets import load_svmlight_file

    handle = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(handle).st_size
        bounds = _line_starts(handle, size, block_bytes)
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            raw = os.pread(handle, hi - lo, lo)
            try:
                # any width up to the limit: the width check against the model's is checked_rows's
                X, y = load_svmlight_file(io.BytesIO(raw), zero_based=True, n_features=MAX_FEATURES,
                                          dtype=np.float64)
            except (ValueError, TypeError, UnicodeDecodeError, RuntimeError) as exc:
                raise FileFormatError(f"{path}: not a valid svmlight/LIBSVM file near byte {lo:,} "
                                      f"({bounded(exc, 300)})") from None
            except OverflowError:
                raise FileFormatError(f"{path}: a feature index is too large (at most {MAX_FEATURES - 1}) or a "
                                      "value overflows") from None
            X = sp.csr_matrix(X)
            X.sum_duplicates()
            yield lo, hi, X, y
    finally:
        os.close(handle)


def _file_base(path: Path, zero_based, expect_zero_based, block_bytes: int) -> bool:
    """The index base to read ``path`` with, decided as :func:`read_svmlight` decides it for the
    whole file (``"auto"`` without an expected base: zero-based exactly when index 0 occurs, which
    takes a first pass over the file)."""
    if zero_based != "auto":
        if expect_zero_based is not None and zero_based != bool(expect_zero_based):
            raise InvalidInputError(
                f"{path}: read as {base_name(zero_based)} (--zero-based {str(zero_based).lower()}) but the model was "
                f"trained on {base_name(expect_zero_based)} data; features would shift by one")
        return bool(zero_based)
    if expect_zero_based is not None:
        return bool(expect_zero_based)
    return any(X.indices.size and int(X.indices.min()) == 0 for _, _, X, _ in _raw_blocks(path, block_bytes))


def write_corpus_from_svmlight(path, directory, n_features: int, zero_based="auto", expect_zero_based=None,
                               block_bytes: int = BLOCK_BYTES, progress=None) -> CorpusFiles:
    """Write the svmlight/LIBSVM file ``path`` into the corpus directory ``directory``, block by block.

    Parameters
    ----------
    path : path-like
        A plain (uncompressed) svmlight/LIBSVM file: blocks are read by seeking.
    directory : path-like
        A new or empty directory (:class:`~sparsesim.data.corpus_files.CorpusWriter`).
    n_features : int
        Width of the corpus (the model's); a larger feature index is refused.
    zero_based, expect_zero_based :
        As in :func:`sparsesim.data.readers.matrices.read_svmlight`.
    block_bytes : int, default 64 MiB
        Bytes parsed at a time.
    progress : callable, optional
        Called as ``progress(bytes_done, bytes_total)`` after each block.

    Returns
    -------
    CorpusFiles
        The corpus, opened: rows as stored (not normalised), labels as int64 when every label is
        a whole number (otherwise none).

    Raises
    ------
    DataNotFoundError, FileFormatError, InvalidInputError
        A missing or compressed file, a malformed line, NaN/inf values or labels, an index beyond
        ``n_features``, a base that contradicts ``zero_based``/``expect_zero_based``, no documents.

    Examples
    --------
    >>> import tempfile, pathlib, scipy.sparse as sp
    >>> from sklearn.datasets import dump_svmlight_file
    >>> tmp = pathlib.Path(tempfile.mkdtemp())
    >>> X = sp.random(50, 12, density=0.3, format="csr", random_state=0)
    >>> X.data = X.data.round(3)  # values the text file holds exactly
    >>> dump_svmlight_file(X, np.arange(50) % 3, str(tmp / "docs.svm"), zero_based=False)
    >>> corpus = write_corpus_from_svmlight(tmp / "docs.svm", tmp / "corpus", 12, block_bytes=200)
    >>> corpus.n_documents, (corpus.rows(0, 50) != X).nnz, corpus.labels()[:4].tolist()
    (50, 0, [0, 1, 2, 0])
    """
    path = Path(path)
    check_exists(path)
    with open(path, "rb") as handle:
        head = handle.read(6)
    if any(head.startswith(magic) for magic, _ in MAGIC_BYTES):
        raise InvalidInputError(f"{path}: is compressed; a corpus larger than memory is read by seeking, so give "
                                "the decompressed file (or a corpus directory)")
    n_features = int(n_features)
    block_bytes = int(block_bytes)
    if block_bytes < 1:
        raise InvalidInputError(f"block_bytes must be positive, got {block_bytes}")
    base = _file_base(path, parse_zero_based(zero_based), expect_zero_based, block_bytes)
    directory = Path(directory)
    existed = directory.exists()
    writer = CorpusWriter(directory, n_features, labels=True)
    size, rows, labelled = path.stat().st_size, 0, True
    try:
        for offset, end, X, y in _raw_blocks(path, block_bytes):
            if X.shape[0]:
                if not base and X.indices.size and int(X.indices.min()) == 0:
                    raise InvalidInputError(f"{path}: uses feature index 0 (near byte {offset:,}), which a "
                                            "one-based (LIBSVM) file cannot; read it with --zero-based true")
                X, y = checked_rows(X, y, path, base, n_features)
                whole = bool(np.all(y == np.round(y)) and np.all(np.abs(y) < 2**62))
                labelled = labelled and whole
                writer.append(X, y.astype(np.int64) if whole else np.zeros(y.size, np.int64))
                rows += X.shape[0]
            if progress is not None:
                progress(end, size)
        if rows == 0:
            raise FileFormatError(f"{path}: contains no documents")
        corpus = writer.close()
    except BaseException:
        writer.abort(remove_directory=not existed)
        raise
    if not labelled:  # labels that are not whole numbers (regression targets) are not kept
        (corpus.directory / "labels.npy").unlink()
        corpus = CorpusFiles(corpus.directory)
    return corpus


def corpus_source_stamp(path) -> dict:
    """What identifies a source file for reuse of a corpus written from it (size, mtime, inode)."""
    st = os.stat(path)
    return {"path": str(Path(path).resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}
