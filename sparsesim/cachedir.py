"""Where compiled (numba) code is cached: a per-user cache directory, never the installed package.

numba's default (``cache=True``) writes ``__pycache__/*.nbi|*.nbc`` next to the source files,
i.e. into ``site-packages/sparsesim/engine/`` for a regular install. pip does not record those
files, so ``pip install -e .`` after ``pip install .`` leaves a stray ``site-packages/sparsesim``
folder behind that shadows the editable install. sparsesim therefore points numba at
``<user cache dir>/sparsesim/numba`` (``platformdirs.user_cache_dir``) unless the user has set
``NUMBA_CACHE_DIR`` themselves. The setting is applied when :mod:`sparsesim` is imported, before
any compiled function is defined.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["numba_cache_dir", "configure_numba_cache"]


def numba_cache_dir() -> Path:
    """The directory numba caches sparsesim's compiled kernels in.

    ``$NUMBA_CACHE_DIR`` when set, else ``platformdirs.user_cache_dir("sparsesim")/numba``
    (``~/.cache/sparsesim/numba`` on Linux, honouring ``$XDG_CACHE_HOME``).
    """
    explicit = os.environ.get("NUMBA_CACHE_DIR")
    if explicit:
        return Path(explicit)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("sparsesim")) / "numba"


def configure_numba_cache() -> Path:
    """Point numba's cache at :func:`numba_cache_dir` (idempotent); returns the directory.

    Sets ``NUMBA_CACHE_DIR`` for numba imported later, and ``numba.config.CACHE_DIR`` when numba
    was already imported (numba reads the variable once, at import).
    """
    path = numba_cache_dir()
    os.environ.setdefault("NUMBA_CACHE_DIR", str(path))
    numba = sys.modules.get("numba")
    if numba is not None and not getattr(numba.config, "CACHE_DIR", ""):
        numba.config.CACHE_DIR = str(path)
    return path
