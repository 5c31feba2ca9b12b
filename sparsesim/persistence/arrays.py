"""Bounded array reads (``.npy`` / ``.npz`` whose headers are checked before any data is read)
and the layout of a CSR matrix as named arrays."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..exceptions import FileFormatError
from ..validation import bounded


# --------------------------------------------------------------------------- bounded reads
def _npy_header(handle, what: str):
    try:
        version = np.lib.format.read_magic(handle)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(handle)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(handle)
        else:
            raise ValueError(f"npy version {version}")
    except (ValueError, OSError, EOFError, SyntaxError, TypeError, MemoryError) as exc:
        raise FileFormatError(f"{what}: not a valid array ({bounded(exc, 160)})") from None
    return shape, fortran, dtype


def _check_header(shape, dtype, what: str, available: int | None):
    if dtype.hasobject or dtype.kind not in "biufU" or dtype.fields is not None or dtype.subdtype is not None:
        raise FileFormatError(f"{what}: arrays of dtype {dtype} are not accepted")
    if not all(isinstance(s, int) and s >= 0 for s in shape):
        raise FileFormatError(f"{what}: invalid array shape {bounded(shape, 80)}")
    nbytes = dtype.itemsize
    for s in shape:
        nbytes *= s
    if available is not None and nbytes != available:
        raise FileFormatError(f"{what}: the array header declares {nbytes} bytes but the file holds {available} "
                              "(truncated or modified)")
    return nbytes


def read_npz(path: str | os.PathLike, what: str | None = None, only=None) -> dict[str, np.ndarray]:
    """Read every array of an ``.npz`` file (or the members named in ``only``), refusing what could
    not be ours before reading it.

    Each member must be an uncompressed (stored) or deflated ``.npy`` whose header declares a
    numeric or unicode dtype and exactly as many bytes as the member holds; the decompressed
    size of a deflated member is bounded by that declared size, so a small file cannot expand
    into gigabytes.
    """
    path = Path(path)
    what = what or str(path)
    size = path.stat().st_size
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise FileFormatError(f"{what}: not a readable archive ({bounded(exc, 160)})") from None
    arrays = {}
    with archive:
        infos = archive.infolist()
        if len(infos) > 4096:
            raise FileFormatError(f"{what}: {len(infos)} archive members (at most 4096 are read)")
        total = sum(info.file_size for info in infos)
        if total > 16 * size + (16 << 20):
            raise FileFormatError(f"{what}: members expand to {total} bytes from a {size}-byte file "
                                  "(refused as a decompression bomb)")
        for info in infos:
            name = info.filename
            if not name.endswith(".npy") or "/" in name or "\\" in name or name.startswith("."):
                raise FileFormatError(f"{what}: unexpected archive member {bounded(name, 80)!r}")
            key = name[:-4]
            if only is not None and key not in only:
                continue
            if key in arrays:
                raise FileFormatError(f"{what}: duplicate archive member {bounded(name, 80)!r}")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise FileFormatError(f"{what}: member {key!r} uses an unsupported compression")
            try:
                with archive.open(info) as handle:
                    shape, fortran, dtype = _npy_header(handle, f"{what}[{key}]")
                    header_len = handle.tell()
                    _check_header(shape, dtype, f"{what}[{key}]", info.file_size - header_len)
                    count = 1
                    for s in shape:
                        count *= s
                    buf = bytearray(count * dtype.itemsize)
                    got = handle.readinto(buf) if buf else 0
                    if got != len(buf) or handle.read(1):
                        raise FileFormatError(f"{what}[{key}]: array data does not match its header")
                    arr = np.frombuffer(buf, dtype=dtype, count=count)
                    arr = arr.reshape(shape[::-1]).T if fortran else arr.reshape(shape)
            except FileFormatError:
                raise
            except (zipfile.BadZipFile, OSError, ValueError, EOFError, zipfile.LargeZipFile, RuntimeError) as exc:
                raise FileFormatError(f"{what}: corrupt member {key!r} ({bounded(exc, 160)})") from None
            arrays[key] = arr
    return arrays


def read_npy(path: str | os.PathLike, mmap: bool = False, what: str | None = None) -> np.ndarray:
    """Read one ``.npy`` file after checking its header against the file size (optionally memory-mapped)."""
    path = Path(path)
    what = what or str(path)
    size = path.stat().st_size
    try:
        with open(path, "rb") as handle:
            shape, _, dtype = _npy_header(handle, what)
            _check_header(shape, dtype, what, size - handle.tell())
    except OSError as exc:
        raise FileFormatError(f"{what}: not readable ({exc.strerror or exc})") from None
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise FileFormatError(f"{what}: not a readable array ({bounded(exc, 160)})") from None


# --------------------------------------------------------------------------- CSR as arrays
def csr_arrays(M, prefix: str, sep: str = ".") -> dict:
    """The arrays that store CSR matrix ``M``: ``{prefix}{sep}indptr`` (int64), ``indices`` (int32), ``data``."""
    return {f"{prefix}{sep}indptr": np.asarray(M.indptr, np.int64),
            f"{prefix}{sep}indices": np.asarray(M.indices, np.int32),
            f"{prefix}{sep}data": np.asarray(M.data, np.float64)}


def csr_from_arrays(arrays, prefix: str, shape, sep: str = ".", full_check: bool = False):
    """The CSR matrix stored by :func:`csr_arrays`, over the stored (possibly memory-mapped) arrays
    without copying them.

    Raises
    ------
    FileFormatError
        Missing arrays, or indptr / indices / data that do not form a ``shape`` matrix.
    """
    try:
        indptr, indices, data = (arrays[f"{prefix}{sep}{part}"] for part in ("indptr", "indices", "data"))
    except KeyError as exc:
        raise FileFormatError(f"missing {prefix} array {exc}") from None
    shape = tuple(int(v) for v in shape)
    if (indptr.ndim != 1 or indptr.shape[0] != shape[0] + 1 or indices.ndim != 1 or indices.shape != data.shape
            or (indptr.shape[0] and indptr[-1] != indices.shape[0])):
        raise FileFormatError(f"inconsistent {prefix} arrays (indptr/indices/data do not match a {shape} matrix)")
    M = sp.csr_matrix(shape)
    M.indptr, M.indices, M.data = indptr, indices, data
    M._shape = shape
    if full_check:
        try:
            M.check_format(full_check=True)
        except ValueError as exc:
            raise FileFormatError(f"inconsistent {prefix} arrays ({exc})") from None
    return M
