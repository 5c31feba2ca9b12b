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
import zipfile
import zlib
from pathlib import Path
from typing import Iterator

import numpy as np
import scipy.sparse as sp

from ..exceptions import DataNotFoundError, FileFormatError, InvalidInputError
from ..persistence import bounded_stream
from ..validation import MAX_FEATURES, bounded
from .containers import LabelledData

__all__ = [
    "open_maybe_compressed",
    "parse_zero_based",
    "read_svmlight",
    "load_svmlight",
    "read_matrix_market",
    "iter_text_corpus",
    "read_text_corpus",
    "tfidf",
    "l2_normalize",
    "encode_labels",
    "read_npz",
    "read_text_folder",
    "read_text_table",
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
        if head.startswith(magic):  # decompression is bounded (a small file cannot expand into gigabytes)
            return bounded_stream(opener(path, "rb"), path.stat().st_size, str(path))
    return open(path, "rb")


def parse_zero_based(value) -> bool | str:
    """``"auto"``, ``True``/``False`` or the strings ``true``/``false``/``1``/``0`` -> ``"auto"`` or bool."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    text = str(value).strip().lower()
    if text == "auto":
        return "auto"
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise InvalidInputError(f"--zero-based must be auto, true or false, got {value!r}")


def read_svmlight(
    path: str | os.PathLike,
    n_features: int | None = None,
    zero_based: bool | str = "auto",
    dtype=np.float64,
    expect_zero_based: bool | None = None,
    return_base: bool = False,
):
    """Parse an svmlight/LIBSVM file (any supported compression) into ``(X, y)``.

    Parameters
    ----------
    path : path-like
    n_features : int, optional
        Width of ``X`` (use the same value for a train/test pair); by default the largest
        feature index in the file. A file with a larger index is refused.
    zero_based : {"auto", True, False}, default "auto"
        Feature-index base of the file. ``"auto"`` decides as scikit-learn does: a file that
        uses index 0 is zero-based (as ``dump_svmlight_file`` writes by default), any other is
        one-based (the LIBSVM convention).
    expect_zero_based : bool, optional
        The base of the data the file must match (a model's training file). With
        ``zero_based="auto"`` the file is read with this base; a file that uses index 0 when a
        one-based file is expected, or an explicit ``zero_based`` that differs, is refused:
        the features would silently shift by one.
    return_base : bool, default False
        Also return the base the file was read with.

    Returns
    -------
    X : csr_matrix (n, n_features), canonical (sorted indices, no duplicates)
    y : ndarray (n,) of float64
    zero_based : bool
        Only with ``return_base``.

    Raises
    ------
    DataNotFoundError, FileFormatError, InvalidInputError
        Missing file; truncated/corrupt stream or malformed line; NaN/inf values, an index
        beyond ``n_features``, or a base that contradicts ``zero_based``/``expect_zero_based``.
    """
    from sklearn.datasets import load_svmlight_file

    path = Path(path)
    zero_based = parse_zero_based(zero_based)
    raw = _read_bytes(path)
    try:
        # read the indices as written; the base is applied below, where it can be checked
        X, y = load_svmlight_file(io.BytesIO(raw), zero_based=True, dtype=dtype)
    except ValueError as exc:
        raise FileFormatError(f"{path}: not a valid svmlight/LIBSVM file ({bounded(exc, 300)})") from None
    except (TypeError, UnicodeDecodeError, RuntimeError) as exc:
        raise FileFormatError(f"{path}: not a valid svmlight/LIBSVM file ({bounded(exc, 300)})") from None
    except OverflowError:
        raise FileFormatError(f"{path}: a feature index is too large (at most {MAX_FEATURES - 1}) or a value "
                              "overflows") from None
    if X.shape[0] == 0:
        raise FileFormatError(f"{path}: contains no documents")
    X = sp.csr_matrix(X)
    X.sum_duplicates()
    uses_zero = X.indices.size > 0 and int(X.indices.min()) == 0
    if zero_based == "auto":
        base = uses_zero if expect_zero_based is None else bool(expect_zero_based)
    else:
        base = zero_based
        if expect_zero_based is not None and base != bool(expect_zero_based):
            raise InvalidInputError(
                f"{path}: read as {_base_name(base)} (--zero-based {str(base).lower()}) but the model was trained on "
                f"{_base_name(expect_zero_based)} data; features would shift by one (drop --zero-based, or "
                f"rewrite the file {_base_name(expect_zero_based)})")
    if uses_zero and not base:
        if expect_zero_based is False and zero_based == "auto":
            raise InvalidInputError(
                f"{path}: uses feature index 0, so it is zero-based, but the model was trained on one-based data; "
                "features would shift by one (write the file one-based, e.g. dump_svmlight_file(..., "
                "zero_based=False), or train on zero-based data)")
        raise InvalidInputError(f"{path}: uses feature index 0, which a one-based (LIBSVM) file cannot; "
                                "read it with --zero-based true (or auto)")
    indices = X.indices if base else X.indices - 1
    width = (int(indices.max()) + 1) if indices.size else 0
    if n_features is not None:
        if width > n_features:
            raise InvalidInputError(
                f"{path}: uses feature index {int(X.indices.max())} ({_base_name(base)}), i.e. {width} features, but "
                f"{n_features} are expected (feature-count mismatch)")
        width = int(n_features)
    X = sp.csr_matrix((X.data, indices.astype(np.int32, copy=False), X.indptr), shape=(X.shape[0], width))
    if not np.all(np.isfinite(X.data)):
        bad = int(np.count_nonzero(~np.isfinite(X.data)))
        raise InvalidInputError(f"{path}: contains {bad} NaN or infinite feature value(s)")
    if not np.all(np.isfinite(y)):
        raise InvalidInputError(f"{path}: contains NaN or infinite labels")
    X.sort_indices()
    if return_base:
        return X, np.asarray(y), bool(base)
    return X, np.asarray(y)


def _base_name(zero_based) -> str:
    return "zero-based" if zero_based else "one-based"


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
    zero_based: bool | str = "auto",
    expect_zero_based: bool | None = None,
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
    zero_based : {"auto", True, False}, default "auto"
        See :func:`read_svmlight`; the base used is recorded as ``info["zero_based"]``.
    expect_zero_based : bool, optional
        See :func:`read_svmlight`.

    Returns
    -------
    LabelledData
        ``name`` is the path; labels are int64 when they are whole numbers.
    """
    X, y, base = read_svmlight(path, n_features=n_features, zero_based=zero_based,
                               expect_zero_based=expect_zero_based, return_base=True)
    if normalize:
        X = l2_normalize(X)
    return LabelledData(
        X=X,
        y=_labels_as_int(y),
        name=str(path),
        info={
            "representation": "as stored" + (", rows L2-normalised" if normalize else ""),
            "files": [str(path)],
            "format": "svmlight",
            "zero_based": base,
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


# --------------------------------------------------------------------------- labels, npz, text


def encode_labels(labels) -> tuple[np.ndarray, dict | None]:
    """Labels as int64 codes plus ``{code: name}`` for string labels.

    Whole-number labels (``1``, ``"3"``, ``2.0``) stay numbers and get no names; any other
    labels are sorted and numbered 0..K-1, and ``class_names`` maps each code back to its name.
    """
    arr = np.asarray(labels)
    if arr.ndim != 1:
        raise InvalidInputError(f"labels must be one per document, got shape {arr.shape}")
    if arr.dtype.kind in "iub":
        return arr.astype(np.int64), None
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)):
            raise InvalidInputError("labels contain NaN or infinite values")
        if np.all(arr == np.round(arr)):
            return arr.astype(np.int64), None
        arr = arr.astype(str)
    names = np.array(["" if v is None else str(v) for v in arr.tolist()])
    try:
        return np.array([int(v) for v in names], dtype=np.int64), None
    except ValueError:
        pass
    classes, codes = np.unique(names, return_inverse=True)
    return codes.astype(np.int64), {i: str(c) for i, c in enumerate(classes)}


def _read_lines(path: Path, what: str) -> list[str]:
    try:
        with open_maybe_compressed(path) as handle:
            return [ln.strip() for ln in handle.read().decode("utf-8").splitlines() if ln.strip()]
    except (DataNotFoundError, FileFormatError):
        raise
    except (*_STREAM_ERRORS, UnicodeDecodeError) as exc:
        raise FileFormatError(f"{path}: unreadable {what} file ({exc})") from None


def _sibling(path: Path, suffixes) -> Path | None:
    stem = path.name[: -len(".npz")] if path.name.endswith(".npz") else path.stem
    for suffix in suffixes:
        cand = path.with_name(stem + suffix)
        if cand.is_file():
            return cand
    return None


def read_npz(path: str | os.PathLike, labels: str | os.PathLike | None = None,
             ids: str | os.PathLike | None = None, n_features: int | None = None) -> LabelledData:
    """A CSR matrix saved with ``scipy.sparse.save_npz`` plus a labels file (one label per line).

    Parameters
    ----------
    path : path-like
        The ``.npz`` written by ``scipy.sparse.save_npz`` (read without pickle).
    labels : path-like, optional
        Labels file, one per document and line (numbers or strings). Default: the sibling
        ``<name>.labels.txt`` or ``<name>.labels``; without one every label is 0.
    ids : path-like, optional
        Document ids, one per line. Default: the sibling ``<name>.ids.txt`` if present.
    n_features : int, optional
        Width to pad to (a matrix wider than this is refused).
    """
    path = Path(path)
    _check_exists(path)
    try:
        X = sp.load_npz(path)
    except (ValueError, OSError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        raise FileFormatError(f"{path}: not a scipy.sparse.save_npz file ({exc.__class__.__name__}: {exc})") from None
    X = sp.csr_matrix(X, dtype=np.float64)
    if not np.all(np.isfinite(X.data)):
        raise InvalidInputError(f"{path}: contains NaN or infinite values")
    X.sum_duplicates()
    X.sort_indices()
    if n_features is not None:
        if X.shape[1] > n_features:
            raise InvalidInputError(f"{path}: has {X.shape[1]} features but {n_features} are expected "
                                    "(feature-count mismatch)")
        X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], int(n_features)))
    labels_path = Path(labels) if labels is not None else _sibling(path, (".labels.txt", ".labels"))
    class_names = None
    if labels_path is None:
        y = np.zeros(X.shape[0], dtype=np.int64)
    else:
        y, class_names = encode_labels(_read_lines(labels_path, "labels"))
        if y.shape[0] != X.shape[0]:
            raise InvalidInputError(f"{labels_path}: {y.shape[0]} labels for {X.shape[0]} documents in {path}")
    ids_path = Path(ids) if ids is not None else _sibling(path, (".ids.txt",))
    id_array = None
    if ids_path is not None:
        id_array = np.array(_read_lines(ids_path, "ids"))
        if id_array.shape[0] != X.shape[0]:
            raise InvalidInputError(f"{ids_path}: {id_array.shape[0]} ids for {X.shape[0]} documents in {path}")
    files = [str(path)] + [str(p) for p in (labels_path, ids_path) if p is not None]
    return LabelledData(X=X, y=y, name=str(path), ids=id_array, class_names=class_names,
                        info={"representation": "as stored", "files": files, "format": "npz"})


def _texts_to_data(texts, labels, ids, name, info, featurizer=None, tfidf_options=None) -> LabelledData:
    """Featurise ``texts`` (fit a new TF-IDF featuriser unless ``featurizer`` is given)."""
    from ..text import TextFeaturizer

    if not texts:
        raise FileFormatError(f"{name}: no documents found")
    if featurizer is None:
        featurizer = TextFeaturizer(**(tfidf_options or {}))
        X = featurizer.fit_transform(texts)
    else:
        X = featurizer.transform(texts)
    y, class_names = encode_labels(labels)
    id_array = None if ids is None else np.asarray([str(i) for i in ids])
    if id_array is not None and np.unique(id_array).shape[0] != id_array.shape[0]:
        raise InvalidInputError(f"{name}: document ids must be unique")
    info = dict(info, representation="TF-IDF (scikit-learn TfidfVectorizer, rows L2-normalised)")
    return LabelledData(X=X, y=y, name=name, ids=id_array, class_names=class_names, info=info,
                        texts=list(texts), featurizer=featurizer)


def read_text_folder(path: str | os.PathLike, encoding: str = "utf-8", featurizer=None,
                     tfidf_options: dict | None = None) -> LabelledData:
    """A folder of text files with one subfolder per label (scikit-learn ``load_files`` layout).

    ::

        docs/
            sport/  a.txt  b.txt ...
            tech/   c.txt ...

    Every file is one document (decoded with ``encoding``, undecodable bytes replaced); its
    subfolder name is its label and its path (as given, e.g. ``docs/sport/a.txt``) its id.
    Hidden files are skipped. ``X`` is TF-IDF from a fitted :class:`~sparsesim.text.TextFeaturizer`
    (``data.featurizer``), or from ``featurizer`` when given (a model's, for its queries).
    """
    from sklearn.datasets import load_files

    path = Path(path)
    if not path.is_dir():
        raise DataNotFoundError(f"{path}: no such directory")
    subdirs = [d for d in path.iterdir() if d.is_dir() and not d.name.startswith(".")]
    if not subdirs:
        raise FileFormatError(f"{path}: expected one subfolder per label holding the text files "
                              "(e.g. docs/sport/a.txt, docs/tech/b.txt)")
    bunch = load_files(str(path), encoding=encoding, decode_error="replace", shuffle=False,
                       load_content=True)
    texts = list(bunch.data)
    if not texts:
        raise FileFormatError(f"{path}: the label subfolders hold no files")
    labels = np.asarray(bunch.target_names)[bunch.target]
    ids = [str(Path(f)) for f in bunch.filenames]
    order = np.argsort(ids, kind="stable")
    texts = [texts[i] for i in order]
    return _texts_to_data(texts, labels[order], [ids[i] for i in order], str(path),
                          {"files": [str(path)], "format": "folder"}, featurizer, tfidf_options)


def read_text_table(path: str | os.PathLike, text_column: str = "text", label_column: str | None = None,
                    id_column: str | None = None, featurizer=None, tfidf_options: dict | None = None,
                    fmt: str | None = None) -> LabelledData:
    """A CSV (header row) or JSONL (one object per line) file with a text and a label column.

    Parameters
    ----------
    path : path-like
        ``.csv``, ``.tsv``, ``.jsonl`` / ``.ndjson`` (optionally compressed: ``.gz`` etc.).
    text_column, label_column, id_column : str
        Column (CSV header) or key (JSONL) names. A named column must exist. Without
        ``label_column`` the ``label`` column is used when present, else every document gets
        label 0 (a corpus to search, not to train on); without ``id_column`` the row number is
        the id.
    featurizer : TextFeaturizer, optional
        Use this fitted featuriser (a model's) instead of fitting a new one.
    fmt : {"csv", "tsv", "jsonl"}, optional
        Default: from the file name.
    """
    import csv
    import json

    path = Path(path)
    fmt = fmt or table_format(path)
    raw = _read_text_file(path)
    rows: list[dict] = []
    if fmt in ("csv", "tsv"):
        reader = csv.DictReader(io.StringIO(raw), delimiter="\t" if fmt == "tsv" else ",")
        try:
            rows = list(reader)
        except csv.Error as exc:
            raise FileFormatError(f"{path}: not a valid {fmt.upper()} file ({exc})") from None
        columns = reader.fieldnames or []
    else:
        columns = set()
        for lineno, line in enumerate(raw.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise FileFormatError(f"{path}:{lineno}: not a JSON object ({exc})") from None
            if not isinstance(obj, dict):
                raise FileFormatError(f"{path}:{lineno}: expected a JSON object per line, got {type(obj).__name__}")
            rows.append(obj)
            columns.update(obj)
    if not rows:
        raise FileFormatError(f"{path}: contains no documents")
    if text_column not in columns:
        raise InvalidInputError(f"{path}: no column {text_column!r} (columns: {', '.join(sorted(map(str, columns)))}); "
                                "name the text column with --text-column")
    for name, opt in ((label_column, "--label-column"), (id_column, "--id-column")):
        if name is not None and name not in columns:
            raise InvalidInputError(f"{path}: no column {name!r} (columns: {', '.join(sorted(map(str, columns)))}); "
                                    f"name it with {opt}")
    texts, labels, ids = [], [], []
    label_column = label_column or "label"
    use_labels = label_column in columns
    for i, row in enumerate(rows, start=1):
        text = row.get(text_column)
        if not isinstance(text, str):
            raise InvalidInputError(f"{path}: row {i} has no text in column {text_column!r}")
        texts.append(text)
        if use_labels:
            label = row.get(label_column)
            if label is None or label == "":
                raise InvalidInputError(f"{path}: row {i} has no label in column {label_column!r}")
            labels.append(str(label) if not isinstance(label, (int, float)) or isinstance(label, bool) else label)
        if id_column is not None:
            if row.get(id_column) in (None, ""):
                raise InvalidInputError(f"{path}: row {i} has no id in column {id_column!r}")
            ids.append(str(row[id_column]))
    if not use_labels:
        labels = [0] * len(texts)
    elif any(isinstance(v, str) for v in labels):
        labels = [str(v) for v in labels]
    info = {"files": [str(path)], "format": fmt, "text_column": text_column, "label_column": label_column,
            "id_column": id_column}
    return _texts_to_data(texts, labels, ids if id_column is not None else None, str(path), info, featurizer,
                          tfidf_options)


def _read_bytes(path: Path) -> bytes:
    """The (decompressed, bounded) bytes of ``path``; a truncated or corrupt file is a FileFormatError."""
    try:
        with open_maybe_compressed(path) as handle:
            return handle.read()
    except (DataNotFoundError, FileFormatError):
        raise
    except _STREAM_ERRORS as exc:
        raise FileFormatError(f"{path}: truncated or corrupt file ({exc.__class__.__name__}: {exc})") from None


def _read_text_file(path: Path) -> str:
    data = _read_bytes(path)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FileFormatError(f"{path}: not UTF-8 text ({exc})") from None


_COMPRESSED = (".gz", ".bz2", ".xz", ".lzma")


def _plain_suffix(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    while suffixes and suffixes[-1] in _COMPRESSED:
        suffixes.pop()
    return suffixes[-1] if suffixes else ""


def table_format(path: Path) -> str | None:
    """``"csv"``, ``"tsv"`` or ``"jsonl"`` from the file name (compression suffixes ignored), else None."""
    return {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl"}.get(_plain_suffix(Path(path)))


def detect_format(path: str | os.PathLike) -> str:
    """The reader for ``path``: ``folder``, ``npz``, ``csv``/``tsv``/``jsonl``, ``mtx`` or ``svmlight``."""
    path = Path(path)
    if path.is_dir():
        return "folder"
    suffix = _plain_suffix(path)
    if suffix == ".npz":
        return "npz"
    if suffix == ".mtx":
        return "mtx"
    return table_format(path) or "svmlight"
