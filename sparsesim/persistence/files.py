"""Safe writes: permissions under the umask, atomic replacement of a file through a swept
temporary, fsync, and the checks an output path must pass before it is written."""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
import time
from pathlib import Path
from typing import Callable

from ..exceptions import FileFormatError, SparsesimError, UnsafeTargetError
from ..validation import bounded

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


# --------------------------------------------------------------------------- writes
#: characters of a target's name kept in its temporary's name (a name near the file-system limit
#: must still leave room for the temporary's prefix and suffix)
_TEMP_STEM = 100


def _temp_name(path: Path) -> str:
    return f".{path.name[:_TEMP_STEM]}.sparsesim-{os.getpid()}-"


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
        if not match or (name is not None and match.group("name") != name[:_TEMP_STEM]):
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
    if str(path) in ("", ".") or path.name in ("", ".", ".."):
        raise UnsafeTargetError(f"{str(path)!r} is not a file name; give the path of a file to write")
    directory = path.parent if str(path.parent) else Path(".")
    try:
        if not directory.is_dir():
            raise FileFormatError(f"cannot write {path}: directory {directory} does not exist")
        if path.is_dir() and not path.is_symlink():
            raise UnsafeTargetError(f"{path} is a directory; give the path of a file to write")
    except OSError as exc:  # e.g. a name too long
        raise FileFormatError(f"cannot write {bounded(str(path), 200)}: {exc.strerror or exc}") from None
    sweep_stale_temps(directory, path.name)
    try:
        fd, tmp = tempfile.mkstemp(prefix=_temp_name(path), suffix=".tmp", dir=directory)
    except OSError as exc:
        raise FileFormatError(f"cannot write {bounded(str(path), 200)}: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, mode) as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        fsync_dir(directory)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and not isinstance(exc, SparsesimError):  # e.g. a name too long, a full disk
            raise FileFormatError(f"cannot write {bounded(str(path), 200)}: {exc.strerror or exc}") from None
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


def save_figure(fig, path: str | os.PathLike, **kwargs) -> Path:
    """``fig.savefig`` through :func:`atomic_write` (format from the file suffix): a plot is
    either the old complete file or the new one."""
    path = Path(path)
    fmt = kwargs.pop("format", None) or (path.suffix[1:] or "png")
    return atomic_write(path, lambda handle: fig.savefig(handle, format=fmt, **kwargs))
