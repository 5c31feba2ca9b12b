"""Retrieval indexes over an :class:`~sparsesim.embedding.EmbeddingSimilarity`.

The similarity is S(q, x) = alpha <n(q), n(x)> + <e(q), e(x)>: a dense inner product of
r-dimensional embeddings, plus (when ``identity_weight`` alpha is not 0) the dot product of the
normalised sparse rows. The index stores, per document,

* its embedding e(x): one dense float32 ``(n, r)`` array (``embeddings.npy``);
* when alpha != 0, the sparse row its identity part compares (``corpus.*.npy``, CSR float64, as
  the bilinear indexes store it): n(x), or l(x) under a model with ``lexical_power`` below 1
  (:meth:`~sparsesim.embedding.EmbeddingSimilarity.lexical_rows`); with alpha == 0 the sparse
  corpus is not needed and not stored.

:class:`EmbeddingExactIndex` scores every document: blocks of queries times chunks of documents
(``E_q E_chunk^T`` in float64 from the stored float32 embeddings, plus alpha ``Q_n X_chunk^T``),
top-k per chunk, merged. :class:`EmbeddingAnnIndex` takes candidates from FAISS over the
embeddings (inner-product IVF or HNSW) and, when alpha > 0, from impact-ordered posting lists of
the sparse corpus (the documents sharing the query's heaviest terms), and re-ranks them with
the same exact score; its search setting is calibrated for a target recall like the bilinear ann
index's (:mod:`sparsesim.indexes.calibration`). Scores of both kinds come from the stored
float32 embeddings: they differ from the model's float64 ``score_matrix`` by the float32
rounding of e(x) (relative ~1e-7), and exact and ann agree with each other to ~1e-12.

The directory format is the bilinear indexes' (:mod:`sparsesim.indexes.storage`: checksummed
files and blocks, a checksummed manifest, a versioned data directory inside the index); the
model is stored as its own checked file (``model.npz``), hashed whole at every load.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sparsesim.csr_rows import row_range, take_rows
from sparsesim.embedding import EmbeddingSimilarity
from sparsesim.exceptions import FileFormatError, InvalidInputError
from sparsesim.persistence import csr_from_arrays
from sparsesim.validation import bounded

from .base import CorpusIndex, merge_top_k, normalize_ids, prepare_rows, threaded, top_k_rows
from .document_facts import fact_arrays, restore_facts

__all__ = ["EmbeddedRows", "EmbeddingIndex", "EmbeddingExactIndex"]

_ROWS_PER_BLOCK = 4096


@dataclass
class EmbeddedRows:
    """Prepared rows of an embedding index: the embeddings ``E`` (m x r, float64) and, when the
    model has an identity part, the sparse rows it compares ``X`` (CSR, the model's lexical
    rows), else ``None``."""

    E: np.ndarray
    X: sp.csr_matrix | None

    @property
    def shape(self) -> tuple:
        return self.E.shape

    def rows(self, lo: int, hi: int) -> "EmbeddedRows":
        return EmbeddedRows(self.E[lo:hi], None if self.X is None else row_range(self.X, lo, hi))


class EmbeddingIndex(CorpusIndex):
    """What the exact and ann indexes over an embedding model share (corpus, queries, storage).

    Parameters
    ----------
    model : EmbeddingSimilarity
    block_size : int, default 256
        Queries scored together.
    chunk_size : int, default 65536
        Documents per chunk of the exact scores (a chunk's scores are chunk x block floats).
    n_jobs : int, default 1
    """

    model_class = EmbeddingSimilarity
    supports_learning = False  # the feedback learner updates bilinear models

    @classmethod
    def _unit_test_model(cls, n_features: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        return EmbeddingSimilarity(rng.standard_normal((n_features, 4)), identity_weight=0.5)

    @classmethod
    def _unit_test_params(cls) -> dict:
        return {"block_size": 8, "chunk_size": 16}

    def __init__(self, model, block_size=256, chunk_size=65536, n_jobs=1):
        super().__init__(model, n_jobs=n_jobs)
        if int(block_size) < 1 or int(chunk_size) < 1:
            raise InvalidInputError("block_size and chunk_size must be positive")
        self.block_size = int(block_size)
        self.chunk_size = int(chunk_size)
        self._E = None

    # -- facts ------------------------------------------------------------------------------
    @property
    def sparse_weight(self) -> float:
        """Weight of the sparse dot product ``<Q.X, X>`` in the score (the model's alpha)."""
        return self._model.identity_weight

    @property
    def sparse_part(self) -> bool:
        """Whether the score has an identity part (the sparse corpus is stored and scored)."""
        return self.sparse_weight != 0.0

    @property
    def E_(self) -> np.ndarray:
        """The documents' embeddings, (n_documents, n_components) float32."""
        return self._E

    @property
    def n_documents(self) -> int:
        return 0 if self._E is None else self._E.shape[0]

    @property
    def dim(self) -> int:
        return self._model.n_components

    @property
    def nbytes(self) -> int:
        """Bytes of the index's arrays in memory (embeddings, sparse corpus, postings, ids)."""
        total = 0 if self._E is None else self._E.nbytes
        for X in (self._X, self._postings):
            if X is not None:
                total += X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
        return int(total + (0 if self.ids_ is None else self.ids_.nbytes))

    def reader_model(self) -> EmbeddingSimilarity:
        """The model (reading queries needs its width, normalisation and text featuriser)."""
        return self._model

    # -- rows -------------------------------------------------------------------------------
    def _embed(self, Xp: sp.csr_matrix) -> np.ndarray:
        out = np.empty((Xp.shape[0], self.dim), dtype=np.float32)
        for lo in range(0, Xp.shape[0], _ROWS_PER_BLOCK):
            out[lo:lo + _ROWS_PER_BLOCK] = self._model.embed(row_range(Xp, lo, lo + _ROWS_PER_BLOCK))
        return out

    def prepare_queries(self, Q, name: str = "queries") -> EmbeddedRows:
        Xp = prepare_rows(self._model, Q, name)
        E = self._model.embed(Xp) if Xp.shape[0] else np.zeros((0, self.dim))
        return EmbeddedRows(E, self._model.lexical_rows(Xp) if self.sparse_part else None)

    def stored_queries(self, rows) -> EmbeddedRows:
        rows = np.asarray(rows, dtype=np.int64)
        X = None
        if self.sparse_part:
            self._ensure_rows("corpus", self._X.indptr, rows)
            X = take_rows(self._X, rows)
        return EmbeddedRows(np.asarray(self._E[rows], dtype=np.float64), X)

    # -- build ------------------------------------------------------------------------------
    def fit(self, X, ids=None, calibration_queries=None):
        """Index corpus ``X`` (rows = documents) with user ``ids`` (default: row numbers);
        ``calibration_queries``: the ann kind's calibration queries (default: corpus documents)."""
        start = time.perf_counter()
        Xp = prepare_rows(self._model, X, "corpus")
        self.ids_ = normalize_ids(ids, Xp.shape[0])
        self._E = self._embed(Xp)
        L = self._model.lexical_rows(Xp)
        self.X_ = L if self.sparse_part else None
        self._fit_more(L, calibration_queries)
        self.build_seconds_ = time.perf_counter() - start
        return self

    def _fit_more(self, Xp, calibration_queries=None):
        """What an index kind builds beyond the embeddings and the sparse corpus (``Xp``: the
        documents' lexical rows, as stored)."""

    def add(self, X_new, ids=None):
        """Add documents (with user ids) without rebuilding (see :meth:`Index.add`)."""
        if self.read_only_:
            raise InvalidInputError("this index was loaded memory-mapped (read-only); load it with mmap=False to add")
        Xp = prepare_rows(self._model, X_new, "documents")
        new_ids = normalize_ids(ids, Xp.shape[0], existing=self.ids_)
        if Xp.shape[0] == 0:
            return self
        E_new = self._embed(Xp)
        L = self._model.lexical_rows(Xp)
        self._add_more(L, E_new)
        self._E = np.concatenate([np.asarray(self._E), E_new])
        if self.sparse_part:
            X = sp.vstack([self.X_, L], format="csr")
            X.indices = X.indices.astype(np.int32, copy=False)
            X.indptr = X.indptr.astype(np.int64, copy=False)
            self.X_ = X
        self.ids_ = np.concatenate([self.ids_.astype(new_ids.dtype) if new_ids.dtype.kind == "U" else self.ids_, new_ids])
        return self

    def _add_more(self, Xp, E_new):
        """What an index kind updates when documents are added (before they are appended; ``Xp``:
        their lexical rows)."""

    # -- exact scores -----------------------------------------------------------------------
    def exact_rows(self, Qe: EmbeddedRows, k: int, n_jobs: int = 1):
        """Exact top-``k`` (rows, scores) of prepared queries over every stored document."""
        n = self.n_documents
        E = self._E
        X = self.X_ if self.sparse_part else None  # (a memory-mapped corpus: every block checked first)
        alpha = self.sparse_weight
        chunk = max(self.chunk_size, k)
        bounds = [(lo, min(lo + chunk, n)) for lo in range(0, n, chunk)]
        out_rows, out_scores = [], []
        for qlo in range(0, Qe.shape[0], self.block_size):
            Qb = Qe.rows(qlo, qlo + self.block_size)

            def part(lo, hi, Qb=Qb):
                scores = Qb.E @ np.asarray(E[lo:hi], dtype=np.float64).T
                if X is not None:
                    scores += alpha * (Qb.X @ row_range(X, lo, hi).T).toarray()
                return top_k_rows(scores, k, offset=lo)

            results = threaded(part, bounds, n_jobs)
            rows, scores = merge_top_k(np.hstack([r[0] for r in results]), np.hstack([r[1] for r in results]), k)
            out_rows.append(rows)
            out_scores.append(scores)
        return np.vstack(out_rows), np.vstack(out_scores)

    def rerank(self, Qe: EmbeddedRows, cands: np.ndarray, k: int):
        """Exact scores of each query's candidate documents (``cands``: n_queries x width, -1 for
        none, repeats allowed; documents 0, 1, ... fill a list with fewer than ``k`` distinct
        ones) and its top ``k`` (rows, scores), ties broken by the lower document."""
        n, nq = self.n_documents, Qe.shape[0]
        docs = np.sort(np.asarray(cands, dtype=np.int64).reshape(nq, -1), axis=1)
        docs[:, 1:][docs[:, 1:] == docs[:, :-1]] = -1  # each document once
        distinct = (docs >= 0).sum(axis=1)
        if nq and distinct.min() < k:  # fillers: the first documents not listed yet
            fill = np.full((nq, k), -1, dtype=np.int64)
            for r in np.flatnonzero(distinct < k):
                have = docs[r][docs[r] >= 0]
                extra = np.setdiff1d(np.arange(min(n, have.size + k)), have)[:k - have.size]
                fill[r, :extra.size] = extra
            docs = np.hstack([docs, fill])
        valid = docs >= 0
        safe = np.where(valid, docs, 0)
        scores = np.einsum("qwr,qr->qw", np.asarray(self._E[safe], dtype=np.float64), Qe.E)
        if self.sparse_part:
            scores += self.sparse_weight * self._sparse_dots(Qe.X, safe)
        scores[~valid] = -np.inf
        order = np.lexsort((np.where(valid, docs, n), -scores), axis=1)[:, :k]
        rows = np.take_along_axis(docs, order, axis=1)
        return rows, np.take_along_axis(scores, order, axis=1)

    def _sparse_dots(self, Qx: sp.csr_matrix, docs: np.ndarray) -> np.ndarray:
        """<Qx[q], X[docs[q, j]]> for every entry of ``docs`` (n_queries x width): each stored
        entry of the candidates' rows is matched against its query's sorted terms."""
        nq, width = docs.shape
        d = self.n_features
        flat = docs.ravel()
        self._ensure_rows("corpus", self._X.indptr, np.unique(flat))
        Xc = take_rows(self._X, flat)
        entry_row = np.repeat(np.arange(flat.size), np.diff(Xc.indptr))
        keys = (entry_row // width) * d + Xc.indices  # (query, feature) of every candidate entry
        qkeys = np.repeat(np.arange(nq, dtype=np.int64), np.diff(Qx.indptr)) * d + Qx.indices  # sorted
        if qkeys.size == 0:
            return np.zeros(docs.shape)
        pos = np.minimum(np.searchsorted(qkeys, keys), qkeys.size - 1)
        values = np.where(qkeys[pos] == keys, Xc.data * Qx.data[pos], 0.0)
        return np.bincount(entry_row, weights=values, minlength=flat.size).astype(np.float64).reshape(docs.shape)

    # -- load-time checks -------------------------------------------------------------------
    def verify_derived_arrays(self, rng, sample: int = 4096) -> None:
        """Check what is derived from the stored sparse corpus (when there is one): unit rows under
        a normalising model, and every document's embedding recomputed from it (one pass over
        the corpus, in row blocks; once per index content, see :func:`~sparsesim.indexes.load_index`).

        Raises
        ------
        FileFormatError
            A stored array does not match the corpus and model (the file was altered).
        """
        if not self.sparse_part or self.n_documents == 0:
            return
        X = self.X_
        for lo in range(0, X.shape[0], _ROWS_PER_BLOCK):
            Xs = row_range(X, lo, lo + _ROWS_PER_BLOCK)
            if self._model.normalize:
                norms = np.sqrt(np.asarray(Xs.multiply(Xs).sum(axis=1)).ravel())
                bad = np.flatnonzero((np.diff(Xs.indptr) > 0) & ~(np.abs(norms - 1.0) <= 1e-9))
                if bad.size:
                    raise FileFormatError(f"the model normalises rows, but stored corpus row {lo + int(bad[0])} does "
                                          "not have unit norm; the file was altered")
            want = self._model.embed(self._model.rows_from_lexical(Xs))
            got = np.asarray(self._E[lo:lo + Xs.shape[0]], dtype=np.float64)
            with np.errstate(all="ignore"):
                bad = np.flatnonzero(~(np.abs(got - want) <= 1e-5 * (1.0 + np.abs(want))).all(axis=1))
            if bad.size:
                raise FileFormatError(f"the stored embeddings do not match the stored corpus and model (e.g. row "
                                      f"{lo + int(bad[0])}); the file was altered")

    # -- storage ----------------------------------------------------------------------------
    def _arrays(self) -> dict:
        arrays = {"ids": self.ids_, "embeddings": np.ascontiguousarray(self._E, dtype=np.float32)}
        if self.sparse_part:
            X = self.X_
            arrays.update({"corpus.indptr": np.asarray(X.indptr, np.int64),
                           "corpus.indices": np.asarray(X.indices, np.int32),
                           "corpus.data": np.asarray(X.data, np.float64)})
        arrays.update(fact_arrays(self))
        return arrays

    @classmethod
    def from_stored(cls, stored, mmap: bool = False, n_jobs: int | None = 1) -> "EmbeddingIndex":
        manifest = stored.manifest
        try:
            index = cls(stored.model, n_jobs=n_jobs, **manifest["params"])
        except (TypeError, ValueError, OverflowError, InvalidInputError) as exc:
            raise FileFormatError(f"{stored.directory}: manifest parameters do not fit a {stored.kind} index "
                                  f"({bounded(exc, 200)})") from None
        arrays = stored.arrays
        n, d = manifest["n_documents"], manifest["n_features"]
        index._E = arrays["embeddings"]
        if index.sparse_part:
            index.X_ = csr_from_arrays(arrays, "corpus", (n, d))
        index._guards = dict(stored.guards)
        index._model_checksum = manifest["model"]["checksum"]
        index.ids_ = arrays["ids"]
        restore_facts(index, arrays, n)
        try:
            index._restore(arrays, stored.extra_files, manifest, mmap)
        except KeyError as exc:
            raise FileFormatError(f"{stored.directory}: missing file for {bounded(exc, 80)}") from None
        index.read_only_ = bool(mmap)
        return index


class EmbeddingExactIndex(EmbeddingIndex):
    """Exact top-k under an embedding similarity: every document scored (see the module docstring).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from sparsesim.embedding import EmbeddingSimilarity
    >>> from sparsesim.indexes import build_index
    >>> X = sp.random(50, 30, density=0.2, format="csr", random_state=0)
    >>> model = EmbeddingSimilarity(np.random.default_rng(0).standard_normal((30, 4)), identity_weight=0.5)
    >>> index = build_index(model, X, kind="exact")
    >>> type(index).__name__, index.kind
    ('EmbeddingExactIndex', 'embedding-exact')
    >>> ids, scores = index.query(X[:2], top_k=3)
    >>> bool(np.allclose(scores[:, 0], model.score_matrix(X[:2], X).max(axis=1), rtol=1e-5))
    True
    """

    kind = "embedding-exact"

    def params(self) -> dict:
        return {"block_size": self.block_size, "chunk_size": self.chunk_size}

    def _query_rows(self, Qe, k, n_jobs, /, **options):
        if options:
            raise InvalidInputError(f"unknown option(s) for an exact index: {', '.join(sorted(options))}")
        return self.exact_rows(Qe, k, n_jobs)

    def _state(self) -> dict:
        return {"build_seconds": self.build_seconds_}

    def _restore(self, arrays: dict, extra_files: dict, meta: dict, mmap: bool):
        self.build_seconds_ = float(meta["state"].get("build_seconds") or 0.0)

