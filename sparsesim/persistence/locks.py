"""Serialised writers: the lock file of a target and the check that a target did not change
while a run worked on it."""

from __future__ import annotations

import contextlib
import errno
import os
import time
from pathlib import Path

from ..exceptions import ConcurrentWriteError
from .files import file_mode


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
