"""A retrieval index split into shards, in one process or resident on the workers of a Dask cluster.

The corpus is partitioned (row blocks of one matrix, or one shard per file); every shard is an
ordinary :class:`~sparsesim.indexes.ExactIndex` or :class:`~sparsesim.indexes.AnnIndex` over
its documents. With a ``distributed.Client`` each shard is built *on* a worker and stays there
(a future pinned to that worker, held in its memory); a query batch is validated and
normalised once here, scattered once to the workers that hold shards, searched by every shard
where it lives, and the per-shard top-k lists are merged here. Shards of the exact
``"query"`` strategy (the corpus kept as is, the queries transformed by the model) share the
transformed queries: every block of ``block_size`` queries is multiplied by the model once, on
one worker (in turn), and Dask moves the dense block to the other workers; each shard then only
scores its own documents.

Exactness. Every document keeps its *position*: its place in the order the documents were
added (row number of the concatenated corpus, then the adds). A shard returns, per query, its
k best (position, score) pairs ordered by (-score, position) with ties at the k-th place broken
by the lower position (see :func:`~sparsesim.indexes.base.top_k_rows`); the merge orders the
union the same way. For the exact kind the merged ids and scores are therefore those of one
:class:`ExactIndex` over the whole corpus, ties included.

Faults. A shard lives on exactly one worker (no replicas). If that worker leaves the cluster,
or the shard's data is lost, while a call is running, the call cancels its tasks and raises
:class:`~sparsesim.exceptions.ClusterError` naming the shard and the worker; it never returns a
top-k merged from the surviving shards. Load the index again to place the shards on the
workers that remain.

Storage. :meth:`ShardedIndex.save` writes a directory::

    manifest.json             format "sparsesim-sharded-index", kind, shard list, model checksum,
                              size and sha256 of every file below
    model.npz                 the model, stored once
    shard-000/ ...            one index directory per shard (its own manifest and checksums; no
                              model copy: it is loaded with the model above)
    shard-000.positions.npy   the positions of the shard's documents (int64)

into a temporary directory next to the target and renames it into place (atomic). On a cluster
the workers write their own shards, so the directory must be on a file system every worker and
the client see under the same path (on one machine, any local path). The format (manifest,
atomic write, file checks) lives in :mod:`sparsesim.indexes.sharded_format`.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import numpy as np

from sparsesim.csr_rows import row_range
from sparsesim.exceptions import FileFormatError, InvalidInputError
from sparsesim.models import BilinearSimilarity

from .kinds import INDEX_KINDS
from .contract import Index
from .execution import resolve_jobs
from .inputs import check_top_k, normalize_ids, prepare_rows
from .inputs import SCORE_LIMITS
from .placement import InProcess, OnCluster
from .shard import MODEL_FILE as _MODEL, Shard, build_shard, build_shard_from_file, call_shard, load_shard, merge_parts
from .sharded_format import SHARDED_VERSION as SHARDED_VERSION  # the format version, for readers of this module
from .sharded_format import (SHARDED_FORMAT, check_sharded_files, is_sharded, read_sharded_manifest, sharded_model,
                             write_sharded_dir)

__all__ = ["ShardedIndex", "Shard", "load_sharded", "is_sharded", "read_sharded_manifest", "SHARDED_FORMAT"]

_KINDS = INDEX_KINDS


class ShardedIndex(Index):
    """An exact or ANN index split into shards, in-process or resident on a Dask cluster.

    Parameters
    ----------
    model : BilinearSimilarity
        The similarity every shard indexes under.
    kind : {"exact", "ann"}, default "exact"
        Index kind of every shard.
    n_shards : int, default 2
        Shards for :meth:`fit` (row blocks); :meth:`fit_files` makes one shard per file.
    client : distributed.Client, optional
        Build and keep the shards on this cluster's workers (round robin over the workers,
        sorted by address). ``None``: all shards in this process.
    n_jobs : int, default 1
        Threads per shard search.
    model_file : path-like, optional
        The saved ``model`` (as written by ``model.save``). On a cluster every worker then reads
        the model from this file (which it must see under the same path) instead of receiving it
        from this process: a large model is never serialised here.
    **params
        Parameters of every shard's index (see :class:`ExactIndex`, :class:`AnnIndex`).

    Attributes
    ----------
    shard_params : dict
        The parameters of every shard's index (also :meth:`params`).
    shard_sizes_ : list of int
        Documents per shard.
    shard_workers_ : list of str
        Worker address of every shard (``"local"`` in-process).
    build_seconds_ : float

    Examples
    --------
    In process (``client=None``); with a ``distributed.Client`` the shards live on its workers:

    >>> from sparsesim.data import load_dataset
    >>> from sparsesim.learners.bilinear import OASIS
    >>> from sparsesim.indexes.sharded import ShardedIndex
    >>> data = load_dataset("news20-sample")
    >>> model = OASIS(n_triplets=500, random_state=0).fit(data.X, data.y).model_
    >>> index = ShardedIndex(model, kind="exact", n_shards=4).fit(data.X)
    >>> index.shard_sizes_
    [100, 100, 100, 100]
    >>> ids, scores = index.query(data.X[:2], top_k=10)
    >>> scores.shape
    (2, 10)
    """

    sharded = True
    supports_learning = False  # the feedback learner needs the corpus in this process
    supports_similar = False
    X_ = None  # the corpus lives in the shards

    def __init__(self, model, kind: str = "exact", n_shards: int = 2, client=None, n_jobs: int = 1,
                 model_file=None, **params):
        if not isinstance(model, BilinearSimilarity):
            raise InvalidInputError(f"model must be a BilinearSimilarity, got {type(model).__name__}")
        if kind not in _KINDS:
            raise InvalidInputError(f"unknown index kind {kind!r} for a sharded index; known: {', '.join(_KINDS)}")
        if isinstance(n_shards, bool) or not isinstance(n_shards, (int, np.integer)) or n_shards < 1:
            raise InvalidInputError(f"n_shards must be a positive integer, got {n_shards!r}")
        probe = _KINDS[kind](model, **params)  # refuse bad parameters here, before anything is shipped
        self.model = model
        self.kind = kind
        self.n_shards = int(n_shards)
        self.shard_params = dict(params)
        self.n_jobs = n_jobs
        self.model_file = None if model_file is None else str(Path(model_file).expanduser().absolute())
        self._place = InProcess() if client is None else OnCluster(client)
        self.shard_sizes_ = []
        self.id_kind_ = None
        self.build_seconds_ = 0.0
        self._block_size = int(getattr(probe, "block_size", 64))
        self._expanding = None  # shards that transform queries with the model (asked once per placement)
        self._placed_sizes = []  # shard sizes as placed (kept by release, for placement())
        self._owned = contextlib.ExitStack()  # a cluster connection opened for this index (open_index)
        self._checksum = None

    # -- facts -----------------------------------------------------------------------------------
    @property
    def n_documents(self) -> int:
        return int(sum(self.shard_sizes_))

    @property
    def exact(self) -> bool:
        """Whether answers are exact: those of one index of the shards' kind over the whole corpus."""
        return _KINDS[self.kind].exact

    def params(self) -> dict:
        return dict(self.shard_params)

    def id_dtype(self):
        return np.dtype(np.int64) if self.id_kind_ != "str" else np.dtype(str)

    def model_checksum(self) -> str:
        if self._checksum is None:
            self._checksum = self.model.checksum()
        return self._checksum

    def search_metadata(self, **options) -> dict:
        """The shards' kind and placement (see :meth:`Index.search_metadata`)."""
        return {"kind": self.kind, "shards": len(self.shard_sizes_),
                "workers": len(set(self.shard_workers_)) if self.distributed else 0}

    def placement(self) -> dict:
        """The shards: their sizes, the workers holding them, whether they are loaded."""
        return {"shards": list(self._placed_sizes), "distributed": self.distributed, "loaded": bool(self.shard_sizes_),
                "workers": len(set(self.shard_workers_)) if self.distributed and self.shard_sizes_ else 0}

    def check_placement(self) -> None:
        """Raise :class:`~sparsesim.exceptions.ClusterError` when a shard's worker left the
        cluster (or the scheduler does not answer); nothing in process."""
        if isinstance(self._place, OnCluster) and self.shard_sizes_:
            self._place.check_alive()

    @classmethod
    def describe_kind(cls) -> str:
        return "a sharded index"

    def query_similar(self, doc_ids, top_k: int = 10, n_jobs: int | None = None, **options):
        """Not offered (``supports_similar`` is False): the stored vectors live in the shards."""
        raise self.unsupported("query_similar (--query-ids)", "give the documents as queries (--queries FILE), "
                               "or search a single-process index")

    def prepare_queries(self, Q, name: str = "queries"):
        self._check_built()
        return prepare_rows(self.model, Q, name)

    @property
    def shard_workers_(self) -> list:
        return list(self._place.workers)

    @property
    def distributed(self) -> bool:
        return isinstance(self._place, OnCluster)

    def __repr__(self):
        return (f"ShardedIndex(kind={self.kind!r}, n_documents={self.n_documents}, shards={self.shard_sizes_}, "
                f"{self._place.describe()})")

    # -- build -----------------------------------------------------------------------------------
    def fit(self, X, ids=None):
        """Index corpus ``X`` as ``n_shards`` contiguous row blocks of (near) equal size.

        Parameters
        ----------
        X : sparse matrix, shape (n_documents, n_features)
        ids : sequence of int or str, optional
            One unique id per document (default: row numbers).

        Returns
        -------
        self
        """
        start = time.perf_counter()
        Xp = prepare_rows(self.model, X, "corpus", score_limit=self._score_limit())
        n = Xp.shape[0]
        if n < self.n_shards:
            raise InvalidInputError(f"{n} documents cannot fill {self.n_shards} shards; use fewer shards")
        all_ids = normalize_ids(ids, n)
        bounds = np.linspace(0, n, self.n_shards + 1).astype(np.int64)
        builders = [(build_shard, (self.model, row_range(Xp, lo, hi), all_ids[lo:hi], int(lo), self.kind, self.shard_params,
                                    resolve_jobs(self.n_jobs)))
                    for lo, hi in zip(bounds[:-1], bounds[1:])]
        self._do_place(builders)
        self.shard_sizes_ = [int(hi - lo) for lo, hi in zip(bounds[:-1], bounds[1:])]
        self._placed_sizes = list(self.shard_sizes_)
        self.id_kind_ = "int" if all_ids.dtype.kind == "i" else "str"
        self.build_seconds_ = time.perf_counter() - start
        return self

    def fit_files(self, paths, loader):
        """Index one shard per file; on a cluster each worker reads its own files.

        Parameters
        ----------
        paths : sequence of path-like
            Corpus parts in order (positions follow this order). Every worker must see them.
        loader : callable
            ``loader(path) -> (X, ids)`` (ids may be ``None``: row numbers of the whole corpus);
            a picklable, module-level function (or ``functools.partial`` of one).

        Returns
        -------
        self
        """
        start = time.perf_counter()
        paths = [str(p) for p in paths]
        if not paths:
            raise InvalidInputError("fit_files needs at least one file")
        self.n_shards = len(paths)
        builders = [(build_shard_from_file, (self.model, path, loader, self.kind, self.shard_params,
                                              resolve_jobs(self.n_jobs))) for path in paths]
        self._do_place(builders)
        facts = self._place.run("facts", [()] * self.n_shards)
        sizes = [f["n_documents"] for f in facts]
        kinds = {f["id_kind"] for f in facts}
        if len(kinds) > 1:
            self._place.release()
            raise InvalidInputError("the files mix integer and string document ids; give every file the same kind")
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self._place.run("shift", [(int(o),) for o in offsets])
        self.shard_sizes_ = [int(s) for s in sizes]
        self._placed_sizes = list(self.shard_sizes_)
        self.id_kind_ = kinds.pop()
        self._check_unique_ids()
        self.build_seconds_ = time.perf_counter() - start
        return self

    def _check_unique_ids(self):
        all_ids = np.concatenate(self._place.run("ids", [()] * self.n_shards))
        if np.unique(all_ids).shape[0] != all_ids.shape[0]:
            self._place.release()
            raise InvalidInputError("document ids are not unique across the files (e.g. row-number ids of "
                                    "several files); give every document its own id")

    def _do_place(self, builders):
        self._expanding = None
        if isinstance(self._place, OnCluster):
            self._place.place(builders, model=self.model, model_file=self.model_file)
        else:
            self._place.place(builders)

    # -- search ----------------------------------------------------------------------------------
    def query(self, Q, top_k: int = 10, n_jobs: int | None = None, **options):
        """The ``top_k`` most similar documents of every query row, merged over all shards.

        Parameters
        ----------
        Q : sparse matrix or array, shape (n_queries, n_features)
        top_k : int, default 10
        n_jobs : int, optional
            Threads per shard search for this call (default: the index's ``n_jobs``).
        **options
            Search options of the shards' index kind (e.g. ``nprobe`` for ann).

        Returns
        -------
        ids : list of ndarray
            Per query, the ids of its ``top_k`` documents, best first.
        scores : ndarray, shape (n_queries, top_k)

        Raises
        ------
        ClusterError
            A shard's worker left the cluster (or lost the shard) during the call.
        """
        Qp = self.prepare_queries(Q)
        k = check_top_k(top_k, self.n_documents)
        if Qp.shape[0] == 0:
            return [], np.empty((0, k))
        jobs = resolve_jobs(self.n_jobs if n_jobs is None else n_jobs)
        expanding = [] if options else self._expanding_shards()
        if len(expanding) > 1:  # transform every query block once, not once per shard
            b, nq = self._block_size, Qp.shape[0]
            blocks = [(lo, min(lo + b, nq)) for lo in range(0, nq, b)]
            parts = self._place.search_shared(Qp, k, jobs, expanding, blocks, b * self.n_features * 8)
        else:
            parts = self._place.run("search", [(k, jobs, options) for _ in self.shard_sizes_], shared=Qp)
        ids, scores = merge_parts(parts, k)
        return list(ids), scores

    # -- grow --------------------------------------------------------------------------------------
    def add(self, X_new, ids=None):
        """Add documents to the smallest shard (the first of several equally small ones).

        Parameters
        ----------
        X_new : sparse matrix, shape (n_new, n_features)
        ids : sequence of int or str, optional
            One unique id per new document (default: continue the row numbering; integer-id
            indexes only).

        Returns
        -------
        self
        """
        self._check_built()
        Xp = prepare_rows(self.model, X_new, "documents", score_limit=self._score_limit())
        m = Xp.shape[0]
        if m == 0:
            return self
        n = self.n_documents
        if ids is None:
            if self.id_kind_ != "int":
                raise InvalidInputError("the index has string ids; pass ids for the new documents")
            new_ids = np.arange(n, n + m, dtype=np.int64)
        else:
            new_ids = normalize_ids(ids, m)
            if (new_ids.dtype.kind == "i") != (self.id_kind_ == "int"):
                kind = "integer" if self.id_kind_ == "int" else "string"
                raise InvalidInputError(f"the index has {kind} ids; the new ids must be {kind}s too")
        clash = np.concatenate(self._place.run("clashes", [(new_ids,) for _ in self.shard_sizes_]))
        if clash.size:
            raise InvalidInputError(f"{clash.size} id(s) already in the index, e.g. {clash[0].item()!r}")
        target = int(np.argmin(self.shard_sizes_))
        args = [() for _ in self.shard_sizes_]
        args[target] = (Xp, new_ids, np.arange(n, n + m, dtype=np.int64))
        self._run_on(target, "add", args[target])
        self.shard_sizes_[target] += m
        return self

    def _run_on(self, shard: int, method: str, args):
        if isinstance(self._place, InProcess):
            return getattr(self._place.shards[shard], method)(*args)
        place = self._place
        task = place._submit(call_shard, place.futures[shard], method, *args, worker=place.workers[shard])
        return place._wait([task], f"the call {method!r}")[0]

    # -- storage -----------------------------------------------------------------------------------
    def save(self, directory, overwrite: bool = False) -> Path:
        """Write the sharded index directory atomically (see the module docstring)."""
        self._check_built()
        facts = {"kind": self.kind, "n_documents": self.n_documents, "n_features": self.n_features,
                 "id_dtype": self.id_kind_, "params": self.shard_params}
        return write_sharded_dir(directory, self._place, self.shard_sizes_, self.model, self.model_file, facts,
                                 overwrite=overwrite)

    def _expanding_shards(self) -> list:
        """The shards whose search starts by transforming the queries with the model (exact
        ``"query"`` strategy): they share one transformed block per query block."""
        if self._expanding is None:
            facts = self._place.run("facts", [()] * len(self.shard_sizes_))
            self._expanding = [i for i, f in enumerate(facts) if f.get("expands_queries")]
        return self._expanding

    def release(self):
        """Drop the shards (frees the workers' memory on a cluster) and close a cluster
        connection opened for this index (:func:`~sparsesim.indexes.open_index`)."""
        try:
            self._place.release()
        finally:
            self._expanding = None
            self.shard_sizes_ = []
            self._owned.close()

    def own(self, context) -> None:
        """Close ``context`` (e.g. the cluster connection the index was loaded over) on :meth:`release`."""
        self._owned.enter_context(context)

    def _score_limit(self) -> float:
        """The score limit of this index's shard kind (:data:`~sparsesim.indexes.inputs.SCORE_LIMITS`)."""
        return SCORE_LIMITS["float32" if self.kind == "ann" else "float64"]

    def _check_built(self):
        if not self.shard_sizes_:
            raise InvalidInputError("the sharded index is empty; fit or load it first")


def _free_memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover - not Linux
        return None
    return None  # pragma: no cover


def load_sharded(directory, client=None, model: BilinearSimilarity | None = None, mmap: bool = False,
                 verify: bool = True, n_jobs: int = 1, warm_up: bool = True) -> ShardedIndex:
    """Read a sharded index directory onto a Dask cluster, or into this process.

    Parameters
    ----------
    directory : path-like
    client : distributed.Client, optional
        Load every shard on a worker (round robin; the workers read their shard directories
        themselves, so they must see ``directory`` under the same path). ``None``: load all
        shards here, refused when the files are larger than the memory available (use
        ``mmap=True`` or a cluster).
    model : BilinearSimilarity, optional
        The model the index must belong to (default: the stored copy).
    mmap : bool, default False
        Memory-map the shards' arrays (read-only: :meth:`ShardedIndex.add` is refused).
    verify : bool, default True
        Check every file's sha256.
    n_jobs : int, default 1
        Threads per shard search.
    warm_up : bool, default True
        Load each shard's query kernels where it is loaded (see :func:`~sparsesim.indexes.load_index`).

    Raises
    ------
    FileFormatError
        Not a sharded index, newer format, missing, truncated or corrupt file.
    ModelMismatchError
        ``model`` is not the model the index was built with.
    ClusterError
        A worker was lost while loading.
    """
    directory = Path(directory).expanduser().absolute()
    if not directory.is_dir():
        raise FileFormatError(f"{directory}: no such index directory")
    manifest = read_sharded_manifest(directory)
    total = check_sharded_files(directory, manifest, verify)
    model_given = model
    model = sharded_model(directory, manifest, model)
    if client is None and not mmap:
        free = _free_memory_bytes()
        if free is not None and total > free:
            raise InvalidInputError(f"{directory}: the shards take {total / 2**30:.1f} GiB, more than the "
                                    f"{free / 2**30:.1f} GiB available here; load it onto a Dask cluster "
                                    f"(--scheduler) or memory-mapped")
    index = ShardedIndex(model, kind=manifest["kind"], n_shards=len(manifest["shards"]), client=client,
                         n_jobs=n_jobs, model_file=directory / _MODEL if model_given is None else None,
                         **manifest["params"])
    builders = [(load_shard, (str(directory / s["dir"]), str(directory / s["positions"]), model, mmap,
                               verify, resolve_jobs(n_jobs), warm_up)) for s in manifest["shards"]]
    index._do_place(builders)
    index.shard_sizes_ = [int(s["n_documents"]) for s in manifest["shards"]]
    index._placed_sizes = list(index.shard_sizes_)
    index.id_kind_ = manifest["id_dtype"]
    index.manifest_ = manifest
    facts = index._place.run("facts", [()] * len(builders))
    if [f["n_documents"] for f in facts] != index.shard_sizes_:
        index.release()
        raise FileFormatError(f"{directory}: shard sizes differ from the manifest")
    return index
