"""File readers: svmlight/LIBSVM (plain, .bz2, .xz, .gz), MatrixMarket, raw text corpora.

Every failure a user can cause (missing file, truncated or corrupt compressed stream, a
malformed line, NaN/inf values, a feature-count mismatch) becomes one
:class:`~sparsesim.exceptions.SparsesimError` whose message names the file.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import tarfile
import zlib
from pathlib import Path
from typing import Iterator

import numpy as np
import scipy.sparse as sp

from ..exceptions import DataNotFoundError, FileFormatError, InvalidInputError
from .containers import LabelledData

__all__ = [
    "open_maybe_compressed",
    "read_svmlight",
    "load_svmlight",
    "read_matrix_market",
    "iter_text_corpus",
    "read_text_corpus",
    "tfidf",
    "l2_normalize",
]

_MAGIC = (
    (b"BZh", bz2.open),
    (b"\xfd7zXZ\x00", lzma.open),
    (b"\x5d\x00\x00", lzma.open),  # legacy .lzma
    (b"\x1f\x8b", gzip.open),
)

# errors raised while decompressing or reading a damaged stream
_STREAM_ERRORS = (EOFError, OSError, lzma.LZMAError, zlib.error)


def _check_exists(path: Path) -> None:
    if not path.exists():
        raise DataNotFoundError(f"{path}: no such file")
    if not path.is_file():
        raise DataNotFoundError(f"{path}: not a regular file")


def open_maybe_compressed(path: str | os.PathLike):
    """Open ``path`` for binary reading, decompressing bz2/xz/lzma/gzip (detected by magic bytes)."""
    path = Path(path)
    _check_exists(path)
    with open(path, "rb") as handle:
        head = handle.read(6)
    for magic, opener in _MAGIC:
        if head.startswith(magic):
            return opener(path, "rb")
    return open(path, "rb")


def read_svmlight(
    path: str | os.PathLike,
    n_features: int | None = None,
    zero_based: bool = False,
    dtype=np.float64,
) -> tuple[sp.csr_matrix, np.ndarray]:
    """Parse an svmlight/LIBSVM file (any supported compression) into ``(X, y)``.

    Parameters
    ----------
    path : path-like
    n_features : int, optional
        Width of ``X`` (use the same value for a train/test pair); by default the largest
        feature index in the file. A file with a larger index is refused.
    zero_based : bool, default False
        LIBSVM files are 1-based; set True only for 0-based files.

    Returns
    -------
    X : csr_matrix (n, n_features), canonical (sorted indices, no duplicates)
    y : ndarray (n,) of float64

    Raises
    ------
    DataNotFoundError, FileFormatError, InvalidInputError
        Missing file; truncated/corrupt stream or malformed line; NaN/inf values or an index
        beyond ``n_features``.
    """
    from sklearn.datasets import load_svmlight_file

    path = Path(path)
    try:
        with open_maybe_compressed(path) as handle:
            raw = handle.read()
    except (DataNotFoundError, FileFormatError):
        raise
    except _STREAM_ERRORS as exc:
        raise FileFormatError(f"{path}: truncated or corrupt file ({exc.__class__.__name__}: {exc})") from None
    try:
        X, y = load_svmlight_file(
            io.BytesIO(raw),
            n_features=n_features,
            zero_based=zero_based,
            dtype=dtype,
        )
    except ValueError as exc:
        msg = str(exc)
        if n_features is not None and ("n_features" in msg or "larger" in msg):
            raise InvalidInputError(f"{path}: {msg} (feature-count mismatch)") from None
        raise FileFormatError(f"{path}: not a valid svmlight/LIBSVM file ({msg})") from None
    except (TypeError, UnicodeDecodeError, RuntimeError) as exc:
        raise FileFormatError(f"{path}: not a valid svmlight/LIBSVM file ({exc})") from None
    if X.shape[0] == 0:
        raise FileFormatError(f"{path}: contains no documents")
    X = sp.csr_matrix(X)
    if not np.all(np.isfinite(X.data)):
        bad = int(np.count_nonzero(~np.isfinite(X.data)))
        raise InvalidInputError(f"{path}: contains {bad} NaN or infinite feature value(s)")
    if not np.all(np.isfinite(y)):
        raise InvalidInputError(f"{path}: contains NaN or infinite labels")
    X.sum_duplicates()
    X.sort_indices()
    return X, np.asarray(y)


def _labels_as_int(y: np.ndarray) -> np.ndarray:
    """Integer labels when all labels are whole numbers, else unchanged."""
    if y.dtype.kind == "f" and np.all(y == np.round(y)):
        return y.astype(np.int64)
    return y


def l2_normalize(X: sp.csr_matrix) -> sp.csr_matrix:
    """Rows scaled to unit L2 norm (all-zero rows stay zero). Returns a new matrix."""
    from sklearn.preprocessing import normalize

    return sp.csr_matrix(normalize(X, norm="l2", copy=True))


def load_svmlight(
    path: str | os.PathLike,
    n_features: int | None = None,
    normalize: bool = False,
    zero_based: bool = False,
) -> LabelledData:
    """Load a labelled svmlight/LIBSVM file as-is (optionally L2-normalising the rows).

    Parameters
    ----------
    path : path-like
        Plain, ``.bz2``, ``.xz`` or ``.gz`` file (compression detected from the content).
    n_features : int, optional
        Width of the matrix (for train/test pairs or to match a model).
    normalize : bool, default False
        Scale every row to unit L2 norm.
    zero_based : bool, default False

    Returns
    -------
    LabelledData
        ``name`` is the path; labels are int64 when they are whole numbers.
    """
    X, y = read_svmlight(path, n_features=n_features, zero_based=zero_based)
    if normalize:
        X = l2_normalize(X)
    return LabelledData(
        X=X,
        y=_labels_as_int(y),
        name=str(path),
        info={
            "representation": "as stored" + (", rows L2-normalised" if normalize else ""),
            "files": [str(path)],
        },
    )


def read_matrix_market(
    path: str | os.PathLike, labels_path: str | os.PathLike | None = None, name: str | None = None
) -> LabelledData:
    """Read a MatrixMarket matrix (documents x features, any compression) plus a labels file.

    The labels file has one label per line (integers are parsed as int, anything else kept as
    strings). Without ``labels_path`` every label is 0 (unlabelled corpus).
    """
    import scipy.io

    path = Path(path)
    try:
        with open_maybe_compressed(path) as handle:
            M = scipy.io.mmread(io.BytesIO(handle.read()))
    except (DataNotFoundError, FileFormatError):
        raise
    except _STREAM_ERRORS as exc:
        raise FileFormatError(f"{path}: truncated or corrupt file ({exc.__class__.__name__}: {exc})") from None
    except (ValueError, IndexError, TypeError) as exc:
        raise FileFormatError(f"{path}: not a valid MatrixMarket file ({exc})") from None
    X = sp.csr_matrix(M, dtype=np.float64)
    if not np.all(np.isfinite(X.data)):
        raise InvalidInputError(f"{path}: contains NaN or infinite values")
    X.sum_duplicates()
    X.sort_indices()
    if labels_path is None:
        y = np.zeros(X.shape[0], dtype=np.int64)
    else:
        labels_path = Path(labels_path)
        try:
            with open_maybe_compressed(labels_path) as handle:
                lines = [ln.strip() for ln in handle.read().decode("utf-8").splitlines() if ln.strip()]
        except (DataNotFoundError, FileFormatError):
            raise
        except (*_STREAM_ERRORS, UnicodeDecodeError) as exc:
            raise FileFormatError(f"{labels_path}: unreadable labels file ({exc})") from None
        try:
            y = np.array([int(v) for v in lines], dtype=np.int64)
        except ValueError:
            y = np.array(lines)
        if y.shape[0] != X.shape[0]:
            raise InvalidInputError(
                f"{labels_path}: {y.shape[0]} labels for {X.shape[0]} documents in {path}"
            )
    return LabelledData(
        X=X, y=y, name=name or str(path),
        info={"representation": "as stored", "files": [str(path)] + ([str(labels_path)] if labels_path else [])},
    )


# --------------------------------------------------------------------------- raw text corpora


def _split_name(dirname: str) -> str:
    """``20news-bydate-train`` -> ``train``; other names unchanged."""
    for key in ("train", "test"):
        if dirname == key or dirname.endswith("-" + key) or dirname.endswith("_" + key):
            return key
    return dirname


def iter_text_corpus(path: str | os.PathLike) -> Iterator[tuple[str, str, str, bytes]]:
    """Yield ``(split, group, doc_name, raw_bytes)`` for every document of a text corpus.

    ``path`` is either a directory laid out as ``<root>/<split>/<group>/<doc>`` (the
    20news-bydate layout; ``root`` may also be the parent of one extra top folder), or a tar
    archive (any compression) holding that layout, read without extracting to disk.
    Split folder names such as ``20news-bydate-train`` are reported as ``train``.
    Documents are yielded sorted by (split, group, doc name).
    """
    path = Path(path)
    if not path.exists():
        raise DataNotFoundError(f"{path}: no such file or directory")
    if path.is_dir():
        docs = []
        for f in path.rglob("*"):
            if f.is_file() and not f.name.startswith("."):
                parts = f.relative_to(path).parts
                if len(parts) >= 3:
                    docs.append((parts[-3], parts[-2], parts[-1], f))
        docs.sort(key=lambda d: (_split_name(d[0]), d[1], _doc_key(d[2])))
        for split, group, name, f in docs:
            yield _split_name(split), group, name, f.read_bytes()
        return
    try:
        with tarfile.open(path, mode="r:*") as tar:
            items = []
            for member in tar:
                if not member.isfile():
                    continue
                parts = member.name.strip("/").split("/")
                if len(parts) < 3 or parts[-1].startswith("."):
                    continue
                data = tar.extractfile(member).read()
                items.append((_split_name(parts[-3]), parts[-2], parts[-1], data))
    except tarfile.TarError as exc:
        raise FileFormatError(f"{path}: not a readable tar archive ({exc})") from None
    except _STREAM_ERRORS as exc:
        raise FileFormatError(f"{path}: truncated or corrupt archive ({exc.__class__.__name__}: {exc})") from None
    if not items:
        raise FileFormatError(f"{path}: no documents in <split>/<group>/<doc> layout")
    items.sort(key=lambda d: (d[0], d[1], _doc_key(d[2])))
    yield from items


def _doc_key(name: str):
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


def read_text_corpus(path: str | os.PathLike, encoding: str = "latin-1", splits=None):
    """Read a ``<split>/<group>/<doc>`` corpus into lists.

    Returns
    -------
    dict with keys ``texts`` (list of str), ``groups`` (ndarray of str), ``ids`` (ndarray of
    ``"group/doc"`` str), ``split`` (ndarray of str).
    """
    texts, groups, ids, split = [], [], [], []
    for s, g, name, data in iter_text_corpus(path):
        if splits is not None and s not in splits:
            continue
        texts.append(data.decode(encoding, errors="replace"))
        groups.append(g)
        ids.append(f"{g}/{name}")
        split.append(s)
    if not texts:
        raise FileFormatError(f"{path}: no documents found (splits={splits})")
    return {"texts": texts, "groups": np.array(groups), "ids": np.array(ids), "split": np.array(split)}


def tfidf(counts_or_texts, **vectorizer_options):
    """TF-IDF with scikit-learn defaults (smooth idf, raw tf) and rows L2-normalised.

    Parameters
    ----------
    counts_or_texts : sparse matrix of term counts, or list of str
        Counts go through ``TfidfTransformer()``; texts through ``TfidfVectorizer(**options)``.

    Returns
    -------
    X : csr_matrix
    vocabulary : ndarray of str or None
        Feature names (texts only).
    """
    from sklearn.feature_extraction.text import TfidfTransformer, TfidfVectorizer

    if sp.issparse(counts_or_texts):
        X = TfidfTransformer().fit_transform(counts_or_texts)
        vocab = None
    else:
        vec = TfidfVectorizer(dtype=np.float64, **vectorizer_options)
        X = vec.fit_transform(counts_or_texts)
        vocab = np.asarray(vec.get_feature_names_out(), dtype=str)
    X = sp.csr_matrix(X, dtype=np.float64)
    X.sort_indices()
    return X, vocab
