"""Readers of stored feature matrices: svmlight/LIBSVM, MatrixMarket and ``scipy.sparse.save_npz``
files (with their labels and ids files)."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ...exceptions import DataNotFoundError, FileFormatError, InvalidInputError
from ...validation import MAX_FEATURES, bounded
from ..containers import LabelledData
from .encoding import labels_as_int, encode_labels, l2_normalize
from .formats import MAGIC_BYTES, STREAM_ERRORS, check_exists, read_bytes, read_lines, open_maybe_compressed


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
    check_parse_memory(path)
    raw = read_bytes(path)
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
                f"{path}: read as {base_name(base)} (--zero-based {str(base).lower()}) but the model was trained on "
                f"{base_name(expect_zero_based)} data; features would shift by one (drop --zero-based, or "
                f"rewrite the file {base_name(expect_zero_based)})")
    if uses_zero and not base:
        if expect_zero_based is False and zero_based == "auto":
            raise InvalidInputError(
                f"{path}: uses feature index 0, so it is zero-based, but the model was trained on one-based data; "
                "features would shift by one (write the file one-based, e.g. dump_svmlight_file(..., "
                "zero_based=False), or train on zero-based data)")
        raise InvalidInputError(f"{path}: uses feature index 0, which a one-based (LIBSVM) file cannot; "
                                "read it with --zero-based true (or auto)")
    X, y = checked_rows(X, y, path, base, n_features)
    if return_base:
        return X, y, bool(base)
    return X, y


#: peak memory of reading a plain svmlight file whole, per byte of the file (measured: 2.2, a
#: 363 MiB file of 2*10^5 documents x 75 entries peaked 800 MiB above the interpreter)
PARSE_BYTES_PER_FILE_BYTE = 2.2


def check_parse_memory(path: Path) -> None:
    """Refuse, before reading it, a plain svmlight file whose parse would not fit the available
    memory (a compressed file's expansion is bounded by the decompression limit instead)."""
    from ...exceptions import MemoryBudgetError
    from ...memory import available_memory, format_bytes

    check_exists(path)
    with open(path, "rb") as handle:
        head = handle.read(6)
    if any(head.startswith(magic) for magic, _ in MAGIC_BYTES):
        return
    size = path.stat().st_size
    need, avail = int(PARSE_BYTES_PER_FILE_BYTE * size), available_memory()
    if need > avail:
        raise MemoryBudgetError(f"{path}: reading this {format_bytes(size)} svmlight file whole needs about "
                                f"{format_bytes(need)}, {format_bytes(avail)} is available; an ann index over it "
                                "can be built a block at a time (index build --kind ann --memory SIZE)")


def checked_rows(X: sp.csr_matrix, y, path, base: bool, n_features: int | None):
    """Rows parsed with their indices as written (duplicates summed) -> ``(X, y)`` in ``base``, checked:
    indices within ``n_features`` (when given), values and labels finite, columns sorted."""
    indices = X.indices if base else X.indices - 1
    width = (int(indices.max()) + 1) if indices.size else 0
    if n_features is not None:
        if width > n_features:
            raise InvalidInputError(
                f"{path}: uses feature index {int(X.indices.max())} ({base_name(base)}), i.e. {width} features, but "
                f"{n_features} are expected (feature-count mismatch)")
        width = int(n_features)
    X = sp.csr_matrix((X.data, indices.astype(np.int32, copy=False), X.indptr), shape=(X.shape[0], width))
    if not np.all(np.isfinite(X.data)):
        bad = int(np.count_nonzero(~np.isfinite(X.data)))
        raise InvalidInputError(f"{path}: contains {bad} NaN or infinite feature value(s)")
    if not np.all(np.isfinite(y)):
        raise InvalidInputError(f"{path}: contains NaN or infinite labels")
    X.sort_indices()
    return X, np.asarray(y)


def base_name(zero_based) -> str:
    return "zero-based" if zero_based else "one-based"


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
        y=labels_as_int(y),
        name=str(path),
        info={
            "representation": "as stored" + (", rows L2-normalised" if normalize else ""),
            "files": [str(path)],
            "format": "svmlight",
            "zero_based": base,
        },
    )


def _canonical_csr(M, path) -> sp.csr_matrix:
    """A matrix read from ``path`` as float64 CSR with summed duplicates and sorted columns;
    NaN or infinite values are refused."""
    X = sp.csr_matrix(M, dtype=np.float64)
    if not np.all(np.isfinite(X.data)):
        raise InvalidInputError(f"{path}: contains NaN or infinite values")
    X.sum_duplicates()
    X.sort_indices()
    return X


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
    except STREAM_ERRORS as exc:
        raise FileFormatError(f"{path}: truncated or corrupt file ({exc.__class__.__name__}: {exc})") from None
    except (ValueError, IndexError, TypeError) as exc:
        raise FileFormatError(f"{path}: not a valid MatrixMarket file ({exc})") from None
    X = _canonical_csr(M, path)
    if labels_path is None:
        y = np.zeros(X.shape[0], dtype=np.int64)
    else:
        labels_path = Path(labels_path)
        try:
            with open_maybe_compressed(labels_path) as handle:
                lines = [ln.strip() for ln in handle.read().decode("utf-8").splitlines() if ln.strip()]
        except (DataNotFoundError, FileFormatError):
            raise
        except (*STREAM_ERRORS, UnicodeDecodeError) as exc:
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


def sibling_path(path: Path, suffixes) -> Path | None:
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
        The width expected (a model's). The file declares its width (the matrix shape), so a
        matrix narrower or wider than this is refused, never padded.
    """
    path = Path(path)
    check_exists(path)
    try:
        X = sp.load_npz(path)
    except (ValueError, OSError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        raise FileFormatError(f"{path}: not a scipy.sparse.save_npz file ({exc.__class__.__name__}: {exc})") from None
    X = _canonical_csr(X, path)
    if n_features is not None and X.shape[1] != n_features:
        raise InvalidInputError(f"{path}: a matrix of {X.shape[1]} features (its declared shape is {X.shape}) but "
                                f"{n_features} are expected (feature-count mismatch)")
    labels_path = Path(labels) if labels is not None else sibling_path(path, (".labels.txt", ".labels"))
    class_names = None
    if labels_path is None:
        y = np.zeros(X.shape[0], dtype=np.int64)
    else:
        y, class_names = encode_labels(read_lines(labels_path, "labels"))
        if y.shape[0] != X.shape[0]:
            raise InvalidInputError(f"{labels_path}: {y.shape[0]} labels for {X.shape[0]} documents in {path}")
    ids_path = Path(ids) if ids is not None else sibling_path(path, (".ids.txt",))
    id_array = None
    if ids_path is not None:
        id_array = np.array(read_lines(ids_path, "ids"))
        if id_array.shape[0] != X.shape[0]:
            raise InvalidInputError(f"{ids_path}: {id_array.shape[0]} ids for {X.shape[0]} documents in {path}")
    files = [str(path)] + [str(p) for p in (labels_path, ids_path) if p is not None]
    return LabelledData(X=X, y=y, name=str(path), ids=id_array, class_names=class_names,
                        info={"representation": "as stored", "files": files, "format": "npz"})
