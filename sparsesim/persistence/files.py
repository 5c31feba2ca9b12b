"""The no-pickle file format for models, safe writes, and the integrity checks of files read back.

A model file is one ``.npz`` archive holding named numeric arrays plus one array named
``__meta__`` with a JSON document (format version, kind, algorithm, parameters, shape,
checksum). Nothing is unpickled on load (``allow_pickle=False``), so loading a file never runs
code.

Integrity on load (files a user did not write are untrusted):

* the archive's members are inspected before anything is read: every member must be a ``.npy``
  array whose header declares a plain numeric (or unicode) dtype and a shape whose byte size
  matches the member's size, so a small file can never make the reader allocate or decompress
  gigabytes (:func:`read_npz`);
* the metadata is parsed as strict JSON of bounded size and depth;
* the checksum (format 2) covers the metadata *and* the arrays (names, dtypes, shapes, bytes);
  format 1 files (checksum over the arrays only) are still read.

Writes (:func:`atomic_write`) go to a temporary file in the target's directory whose name
carries the writer's process id, are flushed, fsynced and renamed over the target, so a crash
or an error never leaves a partial file under the final name; the file gets the permissions the
umask allows (like any file a program creates), not the 0600 of ``mkstemp``. Temporary files
of writers that died are removed by the next write to the same directory
(:func:`sweep_stale_temps`). :func:`target_lock` serialises writers of one target with a lock
file (``fcntl.flock``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import math
import os
import re
import stat
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Callable

import numpy as np
import scipy.sparse as sp

from .exceptions import ConcurrentWriteError, FileFormatError, UnsafeTargetError
from .validation import bounded

FORMAT_VERSION = 2
_META_KEY = "__meta__"
#: Largest metadata document (bytes) read from a model file.
MAX_META_BYTES = 1 << 22
#: Deepest nesting of JSON read from a file.
MAX_JSON_DEPTH = 64
_TEMP_RE = re.compile(r"^\.(?P<name>.+)\.sparsesim-(?P<pid>\d+)-[A-Za-z0-9_]+\.tmp$")


# --------------------------------------------------------------------------- permissions
def current_umask() -> int:
    """The process umask (read without changing it for longer than two system calls)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """Permissions of a newly created regular file under the current umask (0666 & ~umask)."""
    return 0o666 & ~current_umask()


def dir_mode() -> int:
    """Permissions of a newly created directory under the current umask (0777 & ~umask)."""
    return 0o777 & ~current_umask()


# --------------------------------------------------------------------------- strict JSON
def dumps_strict(obj, **kwargs) -> str:
    """``json.dumps`` that refuses NaN/Infinity (they are not JSON): non-finite floats become ``null``."""
    return json.dumps(_finite(obj), allow_nan=False, **kwargs)


def _finite(obj):
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, np.floating):
        value = float(obj)
        return value if math.isfinite(value) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _finite(obj.tolist())
    return obj


def _reject_constant(name):
    raise ValueError(f"{name} is not valid JSON")


def _depth(obj, limit: int) -> int:
    """Nesting depth of parsed JSON, iteratively (never recursion-limited)."""
    stack = [(obj, 1)]
    deepest = 0
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if deepest > limit:
            return deepest
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return deepest


def loads_strict(text, what: str, max_bytes: int = MAX_META_BYTES, max_depth: int = MAX_JSON_DEPTH):
    """Parse untrusted JSON: bounded size and nesting, no NaN/Infinity; errors are FileFormatError."""
    if isinstance(text, (bytes, bytearray)):
        if len(text) > max_bytes:
            raise FileFormatError(f"{what}: metadata of {len(text)} bytes (at most {max_bytes} are read)")
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            raise FileFormatError(f"{what}: metadata is not UTF-8 text") from None
    if len(text) > max_bytes:
        raise FileFormatError(f"{what}: metadata of {len(text)} characters (at most {max_bytes} are read)")
    # cheap pre-check so a 100,000-deep document never reaches the recursive parser
    running = 0
    deepest = 0
    for ch in re.findall(r"[\[\]{}]", text) if text.count("[") + text.count("{") > max_depth else ():
        running += 1 if ch in "[{" else -1
        deepest = max(deepest, running)
        if deepest > max_depth:
            raise FileFormatError(f"{what}: metadata nested deeper than {max_depth} levels")
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise FileFormatError(f"{what}: corrupt metadata ({bounded(exc, 160)})") from None
    if _depth(obj, max_depth) > max_depth:
        raise FileFormatError(f"{what}: metadata nested deeper than {max_depth} levels")
    return obj


# --------------------------------------------------------------------------- writes
def _temp_name(path: Path) -> str:
    return f".{path.name}.sparsesim-{os.getpid()}-"


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale_temps(directory: str | os.PathLike, name: str | None = None, min_age: float = 2.0) -> list[Path]:
    """Remove temporary files/directories left in ``directory`` by writers that died.

    Only names this module creates (``.NAME.sparsesim-PID-XXXX.tmp``) whose process ``PID`` is
    no longer running (and that are at least ``min_age`` seconds old) are removed; ``name``
    restricts the sweep to temporaries of one target. Returns the removed paths.
    """
    import shutil

    directory = Path(directory)
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        match = _TEMP_RE.match(entry.name)
        if not match or (name is not None and match.group("name") != name):
            continue
        if _pid_alive(int(match.group("pid"))):
            continue
        try:
            if now - entry.stat(follow_symlinks=False).st_mtime < min_age:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
            removed.append(Path(entry.path))
        except OSError:
            continue
    return removed


def check_output_file(path: str | os.PathLike, inputs=(), what: str = "output") -> Path:
    """Refuse an output path that must not be replaced by a file.

    Accepted: a path that does not exist yet (in an existing directory) or an existing regular
    file. Refused: a symlink, a directory, a device, FIFO or socket, and any of ``inputs`` (the
    command's own input files, compared by inode).
    """
    path = Path(path)
    if str(path) in ("", "."):
        raise UnsafeTargetError(f"{what} path is empty; give a file name")
    if path.is_symlink():
        raise UnsafeTargetError(f"{path} is a symbolic link; give the {what} path of a regular file")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UnsafeTargetError(f"cannot write {path}: directory {parent} does not exist")
    if path.exists():
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            raise UnsafeTargetError(f"{path} is a directory; give the {what} path of a file")
        if not stat.S_ISREG(mode):
            raise UnsafeTargetError(f"{path} is not a regular file (device, FIFO or socket); refusing to write")
        for src in inputs:
            try:
                if src is not None and Path(src).exists() and os.path.samefile(path, src):
                    raise UnsafeTargetError(f"{path} is one of the command's inputs; refusing to overwrite it")
            except OSError:
                continue
    return path


def atomic_write(path: str | os.PathLike, write: Callable[[object], None], mode: str = "wb") -> Path:
    """Call ``write(fileobj)`` on a temporary file and rename it to ``path`` when it succeeds.

    Parameters
    ----------
    path : path-like
        Final file name. Its directory must exist.
    write : callable
        Receives an open file object and writes the whole content.
    mode : {"wb", "w"}
        Binary or text mode.

    Returns
    -------
    pathlib.Path
        The written path (permissions 0666 minus the umask).
    """
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise FileFormatError(f"cannot write {path}: directory {directory} does not exist")
    sweep_stale_temps(directory, path.name)
    fd, tmp = tempfile.mkstemp(prefix=_temp_name(path), suffix=".tmp", dir=directory)
    try:
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, mode) as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        fsync_dir(directory)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def make_temp_dir(parent: Path, name: str) -> Path:
    """A new temporary directory in ``parent`` for target ``name`` (umask permissions), sweepable."""
    sweep_stale_temps(parent, name)
    tmp = Path(tempfile.mkdtemp(prefix=_temp_name(Path(name)), suffix=".tmp", dir=parent))
    os.chmod(tmp, dir_mode())
    return tmp


def fsync_path(path: str | os.PathLike, directory: bool = False) -> None:
    """fsync a file, or a directory (so a rename in it is durable); ignored where unsupported."""
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0)
    try:
        fd = os.open(path, flags)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a directory (so a rename in it is durable); ignored where unsupported."""
    fsync_path(path, directory=True)


def file_state(path: str | os.PathLike) -> tuple | None:
    """What identifies the file at ``path`` now (inode, size, mtime), or None if there is none."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


@contextlib.contextmanager
def replacing_unchanged(path: str | os.PathLike, state: tuple | None):
    """Hold the write lock of ``path`` and refuse if the file changed since ``state`` was taken.

    A command that reads its target's state when it starts and writes a whole new file at the end
    (``train --out``, ``tune --out``) wraps its write in this, so of two runs writing one file at
    the same time the second fails with :class:`~sparsesim.exceptions.ConcurrentWriteError`
    instead of silently replacing the first one's result.
    """
    with target_lock(path):
        if file_state(path) != state:
            raise ConcurrentWriteError(f"{path} was written by another process while this run worked; "
                                       "nothing was written — choose another file or run again")
        yield


_HELD: dict[str, int] = {}


@contextlib.contextmanager
def target_lock(path: str | os.PathLike, timeout: float | None = None):
    """Hold an exclusive lock for writing ``path`` (a lock file ``.NAME.lock`` beside it).

    Writers of the same target wait for each other (a read-modify-write such as ``index add``
    holds the lock from the read to the rename), up to ``timeout`` seconds (default:
    ``$SPARSESIM_LOCK_TIMEOUT`` or 600); then :class:`~sparsesim.exceptions.ConcurrentWriteError`
    names the lock. The lock is released when the process ends, however it ends; the lock file
    is removed on release (a waiter re-checks that the file it locked is still the lock file).
    Re-entrant within one process.
    """
    import fcntl

    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    key = str(parent.resolve() / path.name)
    if key in _HELD:
        yield parent / f".{path.name}.lock"
        return
    if timeout is None:
        try:
            timeout = float(os.environ.get("SPARSESIM_LOCK_TIMEOUT", "600"))
        except ValueError:
            timeout = 600.0
    lock_path = parent / f".{path.name}.lock"
    deadline = time.monotonic() + max(0.0, timeout)
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, file_mode())
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            if time.monotonic() >= deadline:
                raise ConcurrentWriteError(
                    f"another process is writing {path} (lock {lock_path} held for more than {timeout:g} s); "
                    "wait for it to finish or raise SPARSESIM_LOCK_TIMEOUT") from None
            time.sleep(0.05)
            continue
        try:
            same = os.stat(lock_path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder before us removed that file: lock the current one
    _HELD[key] = fd
    try:
        yield lock_path
    finally:
        del _HELD[key]
        with contextlib.suppress(OSError):
            os.unlink(lock_path)
        os.close(fd)


# --------------------------------------------------------------------------- checksums
def arrays_checksum(arrays: dict[str, np.ndarray]) -> str:
    """sha256 over the names, dtypes, shapes and bytes of ``arrays`` (order independent)."""
    digest = hashlib.sha256()
    _update_arrays(digest, arrays)
    return digest.hexdigest()


def _update_arrays(digest, arrays):
    for name in sorted(arrays):
        arr = np.ascontiguousarray(arrays[name])
        digest.update(name.encode())
        digest.update(str(arr.dtype.str).encode())
        digest.update(repr(arr.shape).encode())
        digest.update(memoryview(arr).cast("B") if arr.size else b"")


def bundle_checksum(arrays: dict[str, np.ndarray], meta: dict) -> str:
    """sha256 over the metadata (canonical JSON without its ``checksum`` key) and the arrays."""
    digest = hashlib.sha256()
    body = {k: v for k, v in meta.items() if k != "checksum"}
    digest.update(json.dumps(body, sort_keys=True, allow_nan=False).encode())
    digest.update(b"\x00")
    _update_arrays(digest, arrays)
    return digest.hexdigest()


def file_sha256(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


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


def read_npz(path: str | os.PathLike, what: str | None = None) -> dict[str, np.ndarray]:
    """Read every array of an ``.npz`` file, refusing what could not be ours before reading it.

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


# --------------------------------------------------------------------------- bundles
def save_bundle(path: str | os.PathLike, arrays: dict[str, np.ndarray], meta: dict, kind: str) -> dict:
    """Write ``arrays`` and ``meta`` atomically as one npz file; returns the stored metadata.

    ``meta`` must be JSON-serialisable (non-finite floats are stored as ``null``).
    ``format_version``, ``kind`` and ``checksum`` (over the metadata and the arrays) are added.
    """
    for name, arr in arrays.items():
        if name == _META_KEY:
            raise ValueError(f"array name {_META_KEY!r} is reserved")
        if np.asarray(arr).dtype == object:
            raise TypeError(f"array {name!r} has dtype object; only numeric arrays are stored")
    full_meta = _finite(dict(meta))
    full_meta.update(format_version=FORMAT_VERSION, kind=kind)
    full_meta.pop("checksum", None)
    full_meta["checksum"] = bundle_checksum(arrays, full_meta)
    payload = dict(arrays)
    payload[_META_KEY] = np.frombuffer(json.dumps(full_meta, sort_keys=True, allow_nan=False).encode(),
                                       dtype=np.uint8)
    atomic_write(path, lambda handle: np.savez(handle, **payload))
    return full_meta


def load_bundle(path: str | os.PathLike, kind: str) -> tuple[dict[str, np.ndarray], dict]:
    """Read a file written by :func:`save_bundle`, verifying format, kind and checksum.

    Raises
    ------
    FileFormatError
        Missing, truncated or corrupt file, wrong kind, unknown format version, bad checksum,
        metadata that is not a JSON object.
    """
    path = Path(path)
    if not path.is_file():
        raise FileFormatError(f"{path}: no such file")
    arrays = read_npz(path, what=str(path))
    if _META_KEY not in arrays:
        raise FileFormatError(f"{path}: not a sparsesim {kind} file (no metadata)")
    raw = arrays.pop(_META_KEY)
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise FileFormatError(f"{path}: metadata of dtype {raw.dtype}, expected uint8 bytes")
    meta = loads_strict(raw.tobytes(), str(path))
    if not isinstance(meta, dict):
        raise FileFormatError(f"{path}: metadata is a JSON {type(meta).__name__}, expected an object")
    if meta.get("kind") != kind:
        raise FileFormatError(f"{path}: holds a {bounded(repr(meta.get('kind')), 60)}, expected a {kind!r}")
    version = meta.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise FileFormatError(f"{path}: invalid format_version {bounded(repr(version), 40)}")
    if version > FORMAT_VERSION:
        raise FileFormatError(
            f"{path}: format version {version} is newer than this sparsesim ({FORMAT_VERSION}); upgrade sparsesim"
        )
    checksum = meta.get("checksum")
    expected = arrays_checksum(arrays) if version == 1 else bundle_checksum(arrays, meta)
    if not isinstance(checksum, str) or checksum != expected:
        raise FileFormatError(f"{path}: checksum mismatch (file corrupt or modified)")
    return arrays, meta


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

def save_figure(fig, path: str | os.PathLike, **kwargs) -> Path:
    """``fig.savefig`` through :func:`atomic_write` (format from the file suffix): a plot is
    either the old complete file or the new one."""
    path = Path(path)
    fmt = kwargs.pop("format", None) or (path.suffix[1:] or "png")
    return atomic_write(path, lambda handle: fig.savefig(handle, format=fmt, **kwargs))


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
