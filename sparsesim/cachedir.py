"""Where compiled (numba) code is cached: a per-user cache directory, never the installed package,
one subdirectory per version of the compiled code.

numba's default (``cache=True``) writes ``__pycache__/*.nbi|*.nbc`` next to the source files,
i.e. into ``site-packages/sparsesim/engine/`` for a regular install. pip does not record those
files, so ``pip install -e .`` after ``pip install .`` leaves a stray ``site-packages/sparsesim``
folder behind that shadows the editable install. sparsesim therefore points numba at
``<user cache dir>/sparsesim/numba/<digest>`` (``platformdirs.user_cache_dir``) unless the user
has set ``NUMBA_CACHE_DIR`` themselves. The setting is applied when :mod:`sparsesim` is
imported, before any compiled function is defined.

Why the digest: numba checks a cached function against its own source file only (modification
time and size), but a kernel inlines compiled helpers from other modules (the row store's probe,
the update rules ...). After an edit, a ``git checkout`` or an upgrade that changed a helper but
not the kernel's file, numba would load the old machine code and compute with the old helper.
``<digest>`` hashes the source of every module that defines compiled code, so any change to one
of them compiles into a fresh directory (and switching back finds the old one again). Directories
not used for ``STALE_DAYS`` days are removed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time
from pathlib import Path

__all__ = ["numba_cache_dir", "configure_numba_cache", "kernel_source_digest"]

STALE_DAYS = 30
# the package's import name -> the directories its modules come from (an editable install maps
# sparsesim.indexes and sparsesim.cli to the checkout's indexes/ and cli/)
_SUBPACKAGES = ("sparsesim.indexes", "sparsesim.cli")


def _source_roots() -> list[Path]:
    roots = [Path(__file__).resolve().parent]
    from importlib.util import find_spec

    for name in _SUBPACKAGES:
        try:
            spec = find_spec(name)
        except (ImportError, ValueError):
            continue
        for loc in (spec.submodule_search_locations or []) if spec else []:
            path = Path(loc).resolve()
            if not any(path == r or r in path.parents for r in roots):
                roots.append(path)
    return roots


def kernel_source_digest(roots: list[Path] | None = None) -> str:
    """sha1 (12 hex digits) of the path and text of every ``.py`` file under ``roots`` (default:
    sparsesim's own package directories) that mentions numba: the modules compiled code comes
    from. Other modules do not change it, so editing them recompiles nothing."""
    digest = hashlib.sha1()
    for root in roots if roots is not None else _source_roots():
        for path in sorted(Path(root).rglob("*.py")):
            try:
                text = path.read_bytes()
            except OSError:
                continue
            if b"numba" in text:
                digest.update(path.relative_to(root).as_posix().encode() + b"\0" + text + b"\0")
    return digest.hexdigest()[:12]


def prune_stale(base: Path, keep: Path, days: float = STALE_DAYS) -> list[Path]:
    """Remove the subdirectories of ``base`` other than ``keep`` not used for ``days`` days (the
    compiled code of sources since edited or upgraded); returns what was removed."""
    removed = []
    cutoff = time.time() - days * 86400.0
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    for entry in entries:
        try:
            if entry != keep and entry.is_dir() and not entry.is_symlink() and entry.stat().st_mtime < cutoff:
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
        except OSError:
            continue
    return removed


def numba_cache_dir() -> Path:
    """The directory numba caches sparsesim's compiled kernels in.

    ``$NUMBA_CACHE_DIR`` when set (numba's own checks then apply), else
    ``platformdirs.user_cache_dir("sparsesim")/numba/<kernel_source_digest()>``
    (``~/.cache/sparsesim/numba/<digest>`` on Linux, honouring ``$XDG_CACHE_HOME``).
    """
    explicit = os.environ.get("NUMBA_CACHE_DIR")
    if explicit:
        return Path(explicit)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("sparsesim")) / "numba" / kernel_source_digest()


def configure_numba_cache() -> Path:
    """Point numba's cache at :func:`numba_cache_dir` (idempotent); returns the directory.

    Sets ``NUMBA_CACHE_DIR`` for numba imported later, and ``numba.config.CACHE_DIR`` when numba
    was already imported (numba reads the variable once, at import). Marks the directory used
    and removes the unused ones beside it (:func:`prune_stale`).
    """
    explicit = bool(os.environ.get("NUMBA_CACHE_DIR"))
    path = numba_cache_dir()
    os.environ.setdefault("NUMBA_CACHE_DIR", str(path))
    numba = sys.modules.get("numba")
    if numba is not None and not getattr(numba.config, "CACHE_DIR", ""):
        numba.config.CACHE_DIR = str(path)
    if not explicit:
        try:
            path.mkdir(parents=True, exist_ok=True)
            os.utime(path)
        except OSError:
            return path  # numba reports an unwritable cache itself, when it first compiles
        prune_stale(path.parent, path)
    return path
