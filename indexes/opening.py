"""Opening any index directory, single-process or sharded: :func:`open_index`, :func:`index_class`,
:func:`index_bytes`. The one place that tells the two forms apart."""

from __future__ import annotations

import contextlib
from pathlib import Path

from sparsesim.exceptions import FileFormatError, InvalidInputError
from sparsesim.validation import bounded

from .contract import Index
from .kinds import STORED_KINDS
from .loading import load_index
from .sharded import ShardedIndex, is_sharded, load_sharded, read_sharded_manifest
from .storage import read_manifest

__all__ = ["open_index", "index_class", "index_bytes"]


def index_class(directory) -> type:
    """The class of the index a directory holds, from its manifest alone (nothing else is read):
    its capability flags (``Index.sharded``, ``supports_learning``, ...) can be checked before a load.

    Raises
    ------
    FileFormatError
        Not an index directory, or an unknown kind.
    """
    if is_sharded(directory):
        return ShardedIndex
    kind = read_manifest(directory).get("kind")
    if kind not in STORED_KINDS:
        raise FileFormatError(f"{directory}: unknown index kind {bounded(repr(kind), 60)}")
    return STORED_KINDS[kind]


def index_bytes(directory) -> int:
    """Bytes on disk of a saved index's current version: every file its manifest lists (a
    sharded index: its own files and every shard's)."""
    directory = Path(directory).expanduser()
    if not is_sharded(directory):
        return int(sum(facts["bytes"] for facts in read_manifest(directory)["files"].values()))
    manifest = read_sharded_manifest(directory)
    return int(sum(int(facts["bytes"]) for facts in manifest["files"].values())
               + sum(index_bytes(directory / shard["dir"]) for shard in manifest["shards"]))


def open_index(directory, model=None, mmap: bool = False, scheduler: str | None = None, n_jobs: int | None = 1,
               verify_in_background: bool = False, check_calibration: bool = True, warm_up: bool = True) -> Index:
    """Load the index a directory holds, whatever its form: :func:`load_index` for a
    single-process index, :func:`~sparsesim.indexes.sharded.load_sharded` for a sharded one.

    Parameters
    ----------
    directory : path-like
    model : similarity model, optional
        The model the index must belong to (default: the stored copy).
    mmap : bool, default False
        Memory-map the arrays (read-only: ``add`` is refused). A sharded index loaded onto a
        cluster is read into the workers' memory whatever this says.
    scheduler : str, optional
        Address of the Dask scheduler a sharded index is loaded onto (its workers read their
        shards from ``directory``); the connection is closed by :meth:`Index.release`.
        ``None``: a sharded index is loaded into this process.
    n_jobs : int, default 1
    verify_in_background, check_calibration : bool
        As :func:`load_index` (single-process indexes).
    warm_up : bool, default True
        As :func:`load_index` (for a sharded index, every shard where it is loaded).

    Raises
    ------
    InvalidInputError
        A scheduler for a single-process index.
    FileFormatError, ModelMismatchError, ClusterError
        As :func:`load_index` / :func:`~sparsesim.indexes.sharded.load_sharded`; ``ClusterError``
        also when the scheduler cannot be reached.
    """
    cls = index_class(directory)
    if not cls.sharded:
        if scheduler is not None:
            raise InvalidInputError(f"{directory} is a single-process index; a scheduler serves sharded indexes "
                                    f"(build one with `index build --shards N`), or drop --scheduler")
        return load_index(directory, model=model, mmap=mmap, n_jobs=n_jobs, check_calibration=check_calibration,
                          verify_in_background=verify_in_background, warm_up=warm_up)
    from sparsesim.distributed import connect

    with contextlib.ExitStack() as stack:
        client = stack.enter_context(connect(scheduler)) if scheduler is not None else None
        index = load_sharded(directory, client=client, model=model, mmap=mmap and client is None,
                             n_jobs=1 if n_jobs is None else n_jobs, warm_up=warm_up)
        index.own(stack.pop_all())  # the connection lives as long as the index (closed by release)
    return index
