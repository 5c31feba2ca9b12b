"""The output-path policy every command that writes follows (:func:`check_output_path`).

An output path is checked once, before any work starts (before data is read or a model is
trained), so a refused output costs nothing and destroys nothing:

* the path is not empty, not a symbolic link, and its parent directory exists (nothing is
  created on the way);
* it does not lie inside any input -- a file or directory the command reads, or an index being
  served -- and is not one of them; a directory output does not contain an input either (so
  ``index build -m IDX/v-1/model.npz -o IDX --overwrite`` or ``serve --learn --snapshot
  IDX/v-1/model.npz`` are refused instead of destroying the index they read);
* an existing target is replaced only with ``overwrite=True`` (the CLI's ``--overwrite``);
  the kind of an existing target is checked by the caller's own rules (a regular file for a
  model, an index directory of ours for an index).

Paths are compared after resolving symbolic links and ``..`` (:meth:`pathlib.Path.resolve`),
so another spelling of the same place is the same place.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from ..exceptions import UnsafeTargetError
from .files import check_output_file

__all__ = ["check_output_path", "overlapping_input"]


def _resolved(path: Path) -> Path:
    try:
        return path.expanduser().resolve(strict=False)
    except (OSError, RuntimeError):  # a symlink loop: compare the absolute spelling
        return Path(os.path.abspath(path.expanduser()))


def _inside(path: Path, other: Path) -> bool:
    return path == other or other in path.parents


def overlapping_input(path, inputs: Iterable) -> tuple[Path, str] | None:
    """The first of ``inputs`` that ``path`` would overwrite, and how (``None`` when none).

    ``path`` overlaps an input when it is the input, lies inside it (an input directory), or
    contains it (``path`` is a directory the input lies in). Inputs that are ``None`` are
    skipped; inputs need not exist.
    """
    out = _resolved(Path(path))
    for src in inputs:
        if src is None or str(src) == "":
            continue
        src_path = _resolved(Path(src))
        if out == src_path:
            return Path(src), "is"
        if _inside(out, src_path):
            return Path(src), "inside"
        if _inside(src_path, out):
            return Path(src), "contains"
    return None


def check_output_path(path, inputs: Iterable = (), overwrite: bool = False, what: str = "output",
                      directory: bool = False, flag: str = "--overwrite (overwrite=True) to replace it") -> Path:
    """Refuse an output path the policy above does not allow; return it as a :class:`~pathlib.Path`.

    Parameters
    ----------
    path : path-like
        The file or directory the command will write.
    inputs : iterable of path-like
        Files and directories the command reads or serves (``None`` entries are skipped).
    overwrite : bool, default False
        Whether an existing target may be replaced.
    what : str, default "output"
        How the messages name the output (e.g. ``"model"``, ``"--snapshot"``).
    directory : bool, default False
        The output is a directory (an index): an existing one must be a directory; its format
        is checked by the caller. A file output must be (or become) a regular file.
    flag : str, default "--overwrite (overwrite=True) to replace it"
        What the message tells a user to pass to replace an existing target.

    Raises
    ------
    UnsafeTargetError
        Empty path, symlink, missing parent directory, a path overlapping an input, a target of
        the wrong kind, or an existing target without ``overwrite``.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> check_output_path(d / "model.npz", inputs=[d / "corpus"]).name
    'model.npz'
    >>> check_output_path(d / "corpus" / "model.npz", inputs=[d / "corpus"])
    Traceback (most recent call last):
    ...
    sparsesim.exceptions.UnsafeTargetError: ...
    """
    path = Path(path)
    if str(path) in ("", "."):
        raise UnsafeTargetError(f"{what} path is empty; give a {'directory' if directory else 'file'} name")
    if path.is_symlink():
        raise UnsafeTargetError(f"{path} is a symbolic link; give the {what} path of a "
                                f"{'directory' if directory else 'regular file'}")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UnsafeTargetError(f"cannot write {what} {path}: directory {parent} does not exist (create it first)")
    hit = overlapping_input(path, inputs)
    if hit is not None:
        src, how = hit
        where = {"is": f"is the input {src}", "inside": f"lies inside the input {src}",
                 "contains": f"contains the input {src}"}[how]
        raise UnsafeTargetError(f"{what} {path} {where}; write it somewhere the command does not read")
    if not directory:
        check_output_file(path, what=what)
    elif path.exists() and not path.is_dir():
        raise UnsafeTargetError(f"{path} exists and is not a directory; refusing to replace it")
    if path.exists() and not overwrite:
        raise UnsafeTargetError(f"{what} {path} already exists; choose another path or pass {flag}")
    return path
