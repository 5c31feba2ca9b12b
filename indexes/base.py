"""What the in-process index kinds share (:class:`CorpusIndex`): the model, the stored corpus,
user ids, input checks, top-k merging.

The contract every kind implements, :class:`Index`, is :mod:`.contract`'s; :class:`CorpusIndex`
implements it for an index whose corpus is held in this process (the exact, ann and embedding
kinds; :class:`~sparsesim.indexes.sharded.ShardedIndex` implements it over shards). The input checks are :mod:`.inputs`' and the query machinery (threads,
scratch arrays, kernels, top-k merging) :mod:`.execution`'s, re-exported here for the index kinds
that import them from this module.
"""

from __future__ import annotations

import abc

import numpy as np
import scipy.sparse as sp

from sparsesim.csr_rows import take_rows
from sparsesim.exceptions import FileFormatError, InvalidInputError
from sparsesim.models import BilinearSimilarity
from sparsesim.persistence import csr_from_arrays
from sparsesim.topk import top_k_rows  # noqa: F401 (the one top-k; indexes use it from here)
from sparsesim.validation import bounded

from .document_facts import fact_arrays, restore_facts
from .execution import (QueryScratch, drop_own_rows, faiss_layout, kernels, merge_top_k,  # noqa: F401
                        query_scratch, resolve_jobs, threaded)
from .inputs import SCORE_LIMITS, check_search_k, check_top_k, normalize_ids, prepare_rows  # noqa: F401
from .contract import Index, answer_records, plain_value  # noqa: F401 (the contract, for the kinds)
from .storage import StoredIndex, save_index

__all__ = ["Index", "CorpusIndex", "prepare_rows", "normalize_ids"]


class CorpusIndex(Index):
    """An index whose corpus, ids and model are held in this process.

    Subclasses implement ``fit``, ``_query_rows(Qp, k, n_jobs, **options)`` (returning row
    numbers and scores), ``_add(Xp)`` and their storage (``_arrays``, ``_state``, ``_restore``).
    """

    kind = ""
    supports_learning = True  # a bilinear model over a corpus in this process (embedding kinds: False)
    #: the largest score documents may reach in this kind of index (see :func:`check_score_range`)
    score_limit = SCORE_LIMITS["float64"]
    #: the similarity class an index kind serves
    model_class = BilinearSimilarity

    def __init__(self, model: BilinearSimilarity, n_jobs: int | None = 1):
        if not isinstance(model, self.model_class):
            raise InvalidInputError(f"model must be a {self.model_class.__name__}, got {type(model).__name__}")
        self._guards = {}  # memory-mapped arrays checked block by block on use (storage.lazy_checks)
        self._postings = None
        self.model = model
        self.n_jobs = n_jobs
        self.X_ = None
        self.ids_ = None
        self.read_only_ = False
        self.build_seconds_ = 0.0
        self.snippets_ = None  # optional: the start of each document's text (shown by `sparsesim serve`)
        self.labels_ = None  # optional: each document's class name (shown by `query --index` and `serve`)

    # -- lazily checked arrays ---------------------------------------------------------------
    # A memory-mapped index checks its large arrays block by block when a query is about to read
    # them (:mod:`sparsesim.indexes.blocks`). The attributes ``model``, ``X_`` (and the index
    # kinds' ``postings_``, ``Z_``) check every block of their arrays first, so code outside the
    # query path never sees unchecked bytes; the query path uses the private attributes after
    # checking the rows it reads.
    def _verified(self, *names):
        for name in names:
            guard = self._guards.get(name)
            if guard is not None and guard.pending:
                guard.ensure_all()

    def _drop_guards(self, *names):
        for name in names:
            self._guards.pop(name, None)

    def _ensure_rows(self, prefix: str, indptr, rows, limit=None):
        """Check the blocks of CSR rows ``rows`` of the arrays ``prefix.indices`` / ``prefix.data``."""
        for part in ("indices", "data"):
            guard = self._guards.get(f"{prefix}.{part}")
            if guard is not None and guard.pending:
                guard.ensure_rows(indptr, rows, limit)

    def warm_up(self):
        """Load the compiled kernels this index's queries use, by answering one small batch of its
        own documents through them: the first kernel call in a process imports numba and sets up
        its compiler (about 0.5 s of CPU, even with the kernels in numba's disk cache), which would
        otherwise fall on the first batch of queries. :func:`~sparsesim.indexes.load_index` calls it
        before returning unless given ``warm_up=False``."""
        n = self.n_documents
        if n:
            from . import small_batch

            rows = np.arange(min(n, small_batch.SMALL_BATCH + 1), dtype=np.int64)  # past the numpy path
            self._query_rows(self.stored_queries(rows), 1, 1)
        return self

    def verify_all(self):
        """Check every block not checked yet (a memory-mapped index otherwise checks blocks on use).

        Raises
        ------
        FileFormatError
            A block's sha256 or content is wrong.
        """
        for guard in list(self._guards.values()):
            guard.ensure_all()
        return self

    @property
    def model(self) -> BilinearSimilarity:
        """The similarity the index serves (every block of a memory-mapped W checked first)."""
        self._verified("model.W.indices", "model.W.data")
        return self._model

    @model.setter
    def model(self, value):
        self._model = value
        self._model_checksum = None
        self._drop_guards("model.W.indices", "model.W.data")

    @property
    def X_(self):
        """The stored corpus, CSR (every block of a memory-mapped corpus checked first)."""
        self._verified("corpus.indices", "corpus.data")
        return self._X

    @X_.setter
    def X_(self, value):
        self._X = value
        self._drop_guards("corpus.indices", "corpus.data")

    @property
    def postings_(self):
        """Posting lists (features x documents) or None (every block checked first)."""
        self._verified(*(name for name in list(self._guards) if name.startswith("postings.")))
        return self._postings

    @postings_.setter
    def postings_(self, value):
        self._postings = value
        self._drop_guards(*(name for name in list(self._guards) if name.startswith("postings.")))

    def model_checksum(self) -> str:
        """The served model's checksum (the manifest's for a loaded index: its bytes are checked
        against the block digests written with it)."""
        if self._model_checksum is None:
            self._model_checksum = self._model.checksum()
        return self._model_checksum

    def reader_model(self) -> BilinearSimilarity:
        """The model without its W: what reading queries needs (width, feature-index base, text
        featuriser, normalisation), without reading W."""
        model = self._model
        d = model.n_features
        return BilinearSimilarity(sp.csr_matrix((d, d)), identity=model.identity, normalize=model.normalize,
                                  metadata=model.metadata, featurizer=model.featurizer)

    # -- facts ------------------------------------------------------------------------------
    @property
    def n_documents(self) -> int:
        return 0 if self._X is None else self._X.shape[0]

    def id_dtype(self):
        return np.dtype(np.int64) if self.ids_ is None else self.ids_.dtype

    @property
    def expands_queries(self) -> bool:
        """Whether a search first transforms the query block with the whole model (the exact
        ``"query"`` strategy): the shards of a sharded index then share one transformed block."""
        return False

    @property
    def n_features(self) -> int:
        return self._model.n_features

    def __repr__(self):
        return f"{type(self).__name__}(n_documents={self.n_documents}, n_features={self.n_features}, {self.params()})"

    # -- public API -------------------------------------------------------------------------
    def query(self, Q, top_k: int = 10, n_jobs: int | None = None, **options):
        """The ``top_k`` most similar documents of every query row.

        Parameters
        ----------
        Q : sparse matrix or array, shape (n_queries, n_features)
            Queries; the width must match the model.
        top_k : int, default 10
            At most the number of documents in the index.
        n_jobs : int, optional
            Threads for this call (default: the index's ``n_jobs``).
        **options
            Index-specific search options (e.g. ``nprobe`` for ANN indexes).

        Returns
        -------
        ids : list of ndarray
            Per query, the ids of its ``top_k`` documents, best first.
        scores : ndarray, shape (n_queries, top_k)
            Their bilinear scores S(q, x) = q^T M x.
        """
        Qp = self.prepare_queries(Q)
        k = check_top_k(top_k, self.n_documents)
        jobs = resolve_jobs(self.n_jobs if n_jobs is None else n_jobs)
        if Qp.shape[0] == 0:
            return [], np.empty((0, k))
        rows, scores = self._query_rows(Qp, k, jobs, **options)
        ids = self.ids_[rows]
        return list(ids), scores

    def rows_of(self, doc_ids) -> np.ndarray:
        """Row numbers of the stored documents with user ids ``doc_ids`` (ints for an index with
        integer ids, strings for one with string ids).

        Raises
        ------
        InvalidInputError
            An id that is not in the index, or of the other kind.
        """
        wanted = np.asarray(list(doc_ids) if not isinstance(doc_ids, np.ndarray) else doc_ids)
        if wanted.ndim != 1 or wanted.size == 0:
            raise InvalidInputError("give at least one document id")
        ids = self.ids_
        if ids.dtype.kind == "i":
            if wanted.dtype.kind != "i":  # (uint64 past int64 would wrap)
                try:
                    wanted = np.array([int(str(v)) for v in wanted], dtype=np.int64)
                except (ValueError, OverflowError):
                    raise InvalidInputError("the index has integer ids; document ids must be integers in the int64 "
                                            "range") from None
            wanted = wanted.astype(np.int64)
        else:
            wanted = wanted.astype(str)
        if ids.shape[0] == 0:
            raise InvalidInputError("the index holds no documents")
        order = np.argsort(ids, kind="stable")
        rows = order[np.clip(np.searchsorted(ids, wanted, sorter=order), 0, ids.shape[0] - 1)]
        missing = ids[rows] != wanted
        if missing.any():
            raise InvalidInputError(f"document id {bounded(repr(wanted[missing][0].item()), 80)} is not in the "
                                    f"index ({self.n_documents} documents)")
        return rows.astype(np.int64)

    def query_similar(self, doc_ids, top_k: int = 10, n_jobs: int | None = None, **options):
        """The ``top_k`` documents most similar to stored documents ("more like this"): each
        document's stored vector is the query and the document is left out of its own answer.

        Parameters
        ----------
        doc_ids : sequence of int or str
            User ids of stored documents.
        top_k : int, default 10
            At most the number of documents in the index minus one.
        n_jobs : int, optional
            Threads for this call (default: the index's ``n_jobs``).
        **options
            Index-specific search options, as in :meth:`query`.

        Returns
        -------
        ids : list of ndarray
            Per query document, the ids of its ``top_k`` most similar other documents, best first.
        scores : ndarray, shape (n_queries, top_k)
            Their bilinear scores.
        """
        return self.query_similar_rows(self.rows_of(doc_ids), top_k, n_jobs, **options)

    def similar_records(self, doc_ids, top_k: int = 10, n_jobs: int | None = None, **options) -> list[dict]:
        """:meth:`query_similar` as records (:meth:`query_records`), each query named by its
        stored id (an id given as the string ``"7"`` of an integer-id index is named ``7``)."""
        rows = self.rows_of(doc_ids)
        ids, scores = self.query_similar_rows(rows, top_k, n_jobs, **options)
        return answer_records(ids, scores, self.ids_[rows])

    def query_similar_rows(self, rows, top_k: int = 10, n_jobs: int | None = None, **options):
        """:meth:`query_similar` for stored documents given by row number (from :meth:`rows_of`)."""
        rows = np.asarray(rows, dtype=np.int64)
        k = check_top_k(top_k, self.n_documents)
        if k > self.n_documents - 1:
            raise InvalidInputError(f"top_k={k}: a stored document has only {self.n_documents - 1} other documents "
                                    f"to be similar to")
        jobs = resolve_jobs(self.n_jobs if n_jobs is None else n_jobs)
        Qp = self.stored_queries(rows)
        found, scores = self._query_rows(Qp, min(k + 1, self.n_documents), jobs, **options)
        found, scores = drop_own_rows(found, scores, rows, k)
        return list(self.ids_[found]), scores

    def query_rows(self, Q, top_k: int = 10, n_jobs: int | None = None, **options):
        """Like :meth:`query` but returns row numbers (n_queries, top_k) instead of user ids."""
        Qp = self.prepare_queries(Q)
        k = check_top_k(top_k, self.n_documents)
        jobs = resolve_jobs(self.n_jobs if n_jobs is None else n_jobs)
        return self._query_rows(Qp, k, jobs, **options)

    def prepare_queries(self, Q, name: str = "queries"):
        """Query rows in the form ``_query_rows`` takes (here: canonical CSR in the model's form)."""
        return prepare_rows(self._model, Q, name)

    def stored_queries(self, rows):
        """Stored documents ``rows`` as prepared queries (their blocks checked first when mapped)."""
        rows = np.asarray(rows, dtype=np.int64)
        self._ensure_rows("corpus", self._X.indptr, rows)
        return take_rows(self._X, rows)  # stored rows are already in the model's form (normalised at build)

    def add(self, X_new, ids=None):
        """Add documents (with user ids) to the index without rebuilding what is already there.

        Parameters
        ----------
        X_new : sparse matrix, shape (n_new, n_features)
        ids : sequence of int or str, optional
            One unique id per new document (default: continue the row numbering; only for
            integer-id indexes).

        Returns
        -------
        self
        """
        if self.read_only_:
            raise InvalidInputError("this index was loaded memory-mapped (read-only); load it with mmap=False to add")
        Xp = prepare_rows(self.model, X_new, "documents", score_limit=self.score_limit)
        new_ids = normalize_ids(ids, Xp.shape[0], existing=self.ids_)
        if Xp.shape[0] == 0:
            return self
        self._add(Xp)
        self.X_ = sp.vstack([self.X_, Xp], format="csr")
        self.X_.indices = self.X_.indices.astype(np.int32, copy=False)
        self.X_.indptr = self.X_.indptr.astype(np.int64, copy=False)
        self.ids_ = np.concatenate([self.ids_.astype(new_ids.dtype) if new_ids.dtype.kind == "U" else self.ids_, new_ids])
        return self

    def save(self, directory, overwrite: bool = False):
        """Write the index directory atomically (see :mod:`sparsesim.indexes.storage`); a
        memory-mapped index checks every block first, so only verified bytes are re-signed."""
        self.verify_all()
        return save_index(self, directory, overwrite=overwrite)

    def _add(self, Xp):
        """Take prepared documents ``Xp`` into the kind's own structures (called by :meth:`add`
        before they join ``X_``). A kind that cannot add sets ``supports_add = False`` and keeps
        this default, which names the capability."""
        raise self.unsupported("add")

    @abc.abstractmethod
    def _query_rows(self, Qp, k: int, n_jobs: int, /, **options):
        """Row numbers and scores (n_queries x k, best first) of prepared queries ``Qp``."""

    @abc.abstractmethod
    def _state(self) -> dict:
        """What the manifest stores as ``state``."""

    @abc.abstractmethod
    def _restore(self, arrays: dict, extra_files: dict, meta: dict, mmap: bool):
        """Set the kind's arrays and state from a verified index directory."""

    @classmethod
    def from_stored(cls, stored: StoredIndex, mmap: bool = False, n_jobs: int | None = 1) -> "CorpusIndex":
        """The index of a verified index directory (:func:`sparsesim.indexes.storage.read_index`)."""
        manifest = stored.manifest
        try:
            index = cls(stored.model, n_jobs=n_jobs, **manifest["params"])
        except (TypeError, ValueError, OverflowError) as exc:
            raise FileFormatError(f"{stored.directory}: manifest parameters do not fit a {stored.kind} index "
                                  f"({bounded(exc, 200)})") from None
        arrays = stored.arrays
        n, d = manifest["n_documents"], manifest["n_features"]
        index.X_ = csr_from_arrays(arrays, "corpus", (n, d))
        index._guards = dict(stored.guards)
        index._model_checksum = stored.manifest["model"]["checksum"] if stored.model is not None else None
        index.ids_ = arrays["ids"]
        restore_facts(index, arrays, n)
        try:
            index._restore(arrays, stored.extra_files, manifest, mmap)
        except KeyError as exc:
            raise FileFormatError(f"{stored.directory}: missing file for {bounded(exc, 80)}") from None
        index.read_only_ = bool(mmap)
        return index

    # -- helpers for subclasses -----------------------------------------------------------
    def _set_corpus(self, Xp, ids):
        self.X_ = Xp
        self.ids_ = normalize_ids(ids, Xp.shape[0])

    def _arrays(self) -> dict:
        """Arrays to store (name -> ndarray); the corpus and ids, plus subclass arrays."""
        X = self.X_
        arrays = {"corpus.indptr": np.asarray(X.indptr, np.int64), "corpus.indices": np.asarray(X.indices, np.int32),
                  "corpus.data": np.asarray(X.data, np.float64), "ids": self.ids_}
        arrays.update(fact_arrays(self))
        return arrays

    def _model_arrays(self) -> dict:
        """The model's W as stored beside ``model.npz``: its CSR arrays (int64 / int32 / float64)."""
        W = self.model.W
        return {"model.W.indptr": np.asarray(W.indptr, np.int64), "model.W.indices": np.asarray(W.indices, np.int32),
                "model.W.data": np.asarray(W.data, np.float64)}

    def _extra_files(self) -> dict:
        """Non-npy files to store: name -> writer(path)."""
        return {}
