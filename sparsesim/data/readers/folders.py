"""Walking a folder of documents without reading anything outside it and without blocking.

:func:`walk_documents` lists the regular files under a folder: hidden entries (names starting
with ``.``, files and folders, so ``.git`` is never a label), FIFOs, devices and sockets are
skipped, and symbolic links are followed only while they stay inside the folder (or everywhere
with ``follow_symlinks=True``). :func:`read_document` opens a listed file so that it cannot
block (a FIFO swapped in after the listing is refused, not waited on).
"""

from __future__ import annotations

import os
import stat
import warnings
from typing import NamedTuple

from ...exceptions import FileFormatError

__all__ = ["Document", "SkippedEntryWarning", "walk_documents", "read_document"]


class SkippedEntryWarning(UserWarning):
    """Entries of a document folder left out: links leading outside it, FIFOs, devices, sockets."""


class Document(NamedTuple):
    """A regular file found under a folder: its path relative to the folder, as components, and
    the resolved path it is read from."""

    parts: tuple
    real: str


def _inside(real: str, root: str) -> bool:
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _hidden_within(real: str, root: str) -> bool:
    """Whether ``real`` (inside ``root``) lies in or is a hidden entry of ``root``: a link that stays
    inside the folder must not lead to what the walk itself skips."""
    rel = os.path.relpath(real, root)
    return any(part.startswith(".") for part in rel.split(os.sep) if part not in ("", "."))


def walk_documents(root, max_depth: int, follow_symlinks: bool = False, include_hidden: bool = False,
                   exact_depth: bool = False) -> list[Document]:
    """The regular files under ``root`` at most ``max_depth`` levels down (1: directly in it).

    Parameters
    ----------
    root : path-like
        The folder (itself may be a symbolic link: it is the input the caller named).
    max_depth : int
        How many folder levels to descend (a file directly in ``root`` is at depth 1).
    follow_symlinks : bool, default False
        Follow symbolic links that lead outside ``root`` too. Links that stay inside are always
        followed; a link cycle is never entered twice.
    include_hidden : bool, default False
        Also list entries whose name starts with ``.`` (and what hidden folders hold).
    exact_depth : bool, default False
        Only files at exactly ``max_depth`` (files higher up are skipped silently).

    Returns
    -------
    list of Document
        Sorted by their relative parts. Links leading outside and special files (FIFOs,
        devices, sockets) that were skipped are reported in one :class:`SkippedEntryWarning`.
    """
    root_real = os.path.realpath(root)
    found: list[Document] = []
    skipped = {"outside": 0, "special": 0}
    seen_dirs: set = set()

    def visit(real_dir: str, parts: tuple) -> None:
        try:
            st = os.stat(real_dir)
        except OSError:
            return
        key = (st.st_dev, st.st_ino)
        if key in seen_dirs:
            return
        seen_dirs.add(key)
        try:
            entries = sorted(os.scandir(real_dir), key=lambda e: e.name)
        except OSError as exc:
            raise FileFormatError(f"{os.path.join(str(root), *parts)}: cannot list the folder "
                                  f"({exc.strerror or exc})") from None
        for entry in entries:
            if entry.name.startswith(".") and not include_hidden:
                continue
            here = parts + (entry.name,)
            real = os.path.realpath(entry.path)
            if entry.is_symlink() and not follow_symlinks and not _inside(real, root_real):
                skipped["outside"] += 1
                continue
            if entry.is_symlink() and not include_hidden and _inside(real, root_real) \
                    and _hidden_within(real, root_real):
                continue  # a link to a hidden entry of the folder: skipped like the entry itself
            try:
                mode = os.stat(real).st_mode
            except OSError:  # a dangling link
                skipped["outside" if entry.is_symlink() else "special"] += 1
                continue
            if stat.S_ISDIR(mode):
                if len(here) < max_depth:
                    visit(real, here)
            elif stat.S_ISREG(mode):
                if len(here) == max_depth or (len(here) < max_depth and not exact_depth):
                    found.append(Document(here, real))
            else:
                skipped["special"] += 1

    visit(root_real, ())
    if skipped["outside"] or skipped["special"]:
        what = []
        if skipped["outside"]:
            what.append(f"{skipped['outside']} symbolic link(s) leading outside the folder (pass "
                        "follow_symlinks=True to read them)")
        if skipped["special"]:
            what.append(f"{skipped['special']} FIFO(s), device(s) or socket(s)")
        warnings.warn(SkippedEntryWarning(f"{root}: skipped {' and '.join(what)}"), stacklevel=3)
    found.sort(key=lambda d: d.parts)
    return found


def read_document(doc: Document, shown: str) -> bytes:
    """The bytes of a listed document, opened so that it cannot block: a path that is no longer a
    regular file (a FIFO or a link put there after the listing) is refused with a
    :class:`~sparsesim.exceptions.FileFormatError` naming ``shown``."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(doc.real, flags)
    except OSError as exc:
        raise FileFormatError(f"{shown}: cannot read the document ({exc.strerror or exc})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FileFormatError(f"{shown}: no longer a regular file (changed while the folder was read)")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read()
    except OSError as exc:
        raise FileFormatError(f"{shown}: cannot read the document ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
