"""Where data set files live: ``$SPARSESIM_DATA`` or a per-user cache directory."""

from __future__ import annotations

import os
from pathlib import Path

from ..exceptions import DataNotFoundError

ENV_VAR = "SPARSESIM_DATA"


def data_home() -> Path:
    """The data directory: ``$SPARSESIM_DATA`` if set, else the user cache dir (``~/.cache/sparsesim``)."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("sparsesim"))


def locate(relpath: str, dataset: str) -> Path:
    """Path of data file ``relpath`` (relative to the data directory) of data set ``dataset``.

    Raises
    ------
    DataNotFoundError
        With one message naming the file to place and the command that would fetch it.
    """
    path = data_home() / relpath
    if not path.is_file():
        raise DataNotFoundError(
            f"data set {dataset!r}: file {relpath} not found in {data_home()} "
            f"(set {ENV_VAR} to the data directory, run `sparsesim datasets fetch {dataset}`, "
            f"or `sparsesim datasets fetch {dataset} --from MIRROR_DIR`)"
        )
    return path
