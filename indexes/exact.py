"""Exact top-k retrieval under a learned bilinear similarity S(q, x) = q^T M x.

Two exact strategies, chosen by the memory the transformed corpus would take:

* ``"corpus"`` -- precompute Y = X M^T once and keep it as posting lists (features x documents);
  a query block costs a sparse product of the queries with Y^T, accumulated into dense
  (block x documents) score rows. Fast when Y stays sparse (M close to I, or an L1-sparse W).
* ``"query"`` -- keep X and M; a query block is transformed once (Q M, dense block x features)
  and multiplied with X chunk by chunk. Memory is X plus bounded buffers whatever M is; this is
  the only option when Y is dense-ish (with a W learned by OASIS from 10^4 triplets, Y has
  ~37,000 of 47,236 entries nonzero per document on the synthetic RCV1-like corpus, so Y for
  10^6 documents would need hundreds of GB).

Both return exact scores; top-k is a partial selection (``np.argpartition``) then a sort of the
k selected. Blocks and chunks bound the memory; joblib threads run the numba kernels (which
release the GIL) over query blocks or document chunks.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from sparsesim.csr_rows import row_range, take_rows
from sparsesim.exceptions import InvalidInputError
from sparsesim.persistence import csr_arrays, csr_from_arrays

from . import small_batch
from .base import CorpusIndex, kernels, merge_top_k, prepare_rows, threaded, top_k_rows

__all__ = ["ExactIndex"]

_STRATEGIES = ("auto", "corpus", "query")


class ExactIndex(CorpusIndex):
    """Exact bilinear top-k over a corpus.

    Parameters
    ----------
    model : BilinearSimilarity
    strategy : {"auto", "corpus", "query"}, default "auto"
        ``"corpus"`` precomputes Y = X M^T; ``"query"`` transforms the queries instead.
        ``"auto"`` estimates nnz(Y) from a sample of rows and precomputes Y when it fits in
        ``corpus_memory`` bytes and keeps the index within ``corpus_ratio`` times the corpus plus
        the model.
    corpus_memory : int, default 1 GiB
        Budget for the precomputed Y (12 bytes per nonzero) under ``"auto"``.
    corpus_ratio : float or None, default 2.5
        Under ``"auto"``, Y is precomputed only when the index (corpus, the model's W and Y, all
        counted as CSR, 12 bytes per entry) stays within this many times the corpus plus W;
        ``None``: no such cap. Such a Y is one of a sparse expansion (M = I or close to it) and
        answers 5.7-12x faster than expanding the queries; on the learned models measured, Y made
        the index 5.6-17x the corpus plus W for answers 1.5-4.6x faster (docs/retrieval.md,
        "How the exact index works").
    block_size : int, default 64
        Queries transformed / scored together.
    chunk_size : int, default 65536
        Documents per chunk under ``"query"`` (a chunk's scores are chunk x block floats).
    n_jobs : int, default 1
        Threads for queries (and the default of :meth:`query`).
    random_state : int, default 0
        Seed of the row sample ``"auto"`` uses.

    Attributes
    ----------
    X_ : csr_matrix
        The stored corpus (normalised when the model normalises).
    ids_ : ndarray
        User id of every row.
    strategy_ : str
        The strategy in use.
    postings_ : csr_matrix or None
        Y^T (features x documents) under ``"corpus"``.
    """

    kind = "exact"

    @classmethod
    def _unit_test_params(cls) -> dict:
        return {"block_size": 8, "chunk_size": 16}  # several blocks and chunks on a small corpus

    def __init__(self, model, strategy="auto", corpus_memory=1 << 30, block_size=64, chunk_size=65536,
                 n_jobs=1, random_state=0, corpus_ratio=2.5):
        super().__init__(model, n_jobs=n_jobs)
        if strategy not in _STRATEGIES:
            raise InvalidInputError(f"strategy must be one of {_STRATEGIES}, got {strategy!r}")
        if int(block_size) < 1 or int(chunk_size) < 1:
            raise InvalidInputError("block_size and chunk_size must be positive")
        self.strategy = strategy
        self.corpus_memory = int(corpus_memory)
        if corpus_ratio is not None:
            try:
                corpus_ratio = float(corpus_ratio)
            except (TypeError, ValueError):
                raise InvalidInputError(f"corpus_ratio must be a number or None, got {corpus_ratio!r}") from None
            if not corpus_ratio >= 1 or corpus_ratio == float("inf"):
                raise InvalidInputError(f"corpus_ratio must be a finite number >= 1 or None, got {corpus_ratio!r}")
        self.corpus_ratio = corpus_ratio
        self.block_size = int(block_size)
        self.chunk_size = int(chunk_size)
        self.random_state = random_state
        self.strategy_ = None
        self.postings_ = None
        self._M = None

    @property
    def expands_queries(self) -> bool:
        return self.strategy_ == "query"

    def params(self) -> dict:
        return {"strategy": self.strategy, "corpus_memory": self.corpus_memory, "corpus_ratio": self.corpus_ratio,
                "block_size": self.block_size, "chunk_size": self.chunk_size, "random_state": self.random_state}

    # -- build ------------------------------------------------------------------------------
    def fit(self, X, ids=None):
        """Index corpus ``X`` (rows = documents) with user ``ids`` (default: row numbers)."""
        start = time.perf_counter()
        Xp = prepare_rows(self.model, X, "corpus", score_limit=self.score_limit)
        self._set_corpus(Xp, ids)
        self.strategy_ = self._choose_strategy(Xp) if self.strategy == "auto" else self.strategy
        self.postings_ = self._transform_postings(Xp) if self.strategy_ == "corpus" else None
        self.build_seconds_ = time.perf_counter() - start
        return self

    def estimate_corpus_nnz(self, Xp, sample: int = 256) -> int:
        """Estimated nnz(X M^T) from a random sample of rows."""
        n = Xp.shape[0]
        if n == 0:
            return 0
        rng = np.random.default_rng(self.random_state)
        rows = np.sort(rng.choice(n, size=min(sample, n), replace=False))
        nnz = (take_rows(Xp, rows) @ self._mt()).nnz
        return int(np.ceil(nnz / rows.size * n))

    def corpus_budget(self, Xp) -> float:
        """Bytes the precomputed Y may take under ``"auto"``: ``corpus_memory``, and at most
        ``(corpus_ratio - 1)`` x (corpus + the model's W), all as CSR (12 bytes per entry), so
        the whole index stays within ``corpus_ratio`` x (corpus + W)."""
        budget = float(self.corpus_memory)
        if self.corpus_ratio is not None:
            W = self.model.W
            inputs = 12 * Xp.nnz + 8 * (Xp.shape[0] + 1) + 12 * W.nnz + 8 * (W.shape[0] + 1)
            budget = min(budget, (self.corpus_ratio - 1.0) * inputs)
        return budget

    def _choose_strategy(self, Xp) -> str:
        return "corpus" if self.estimate_corpus_nnz(Xp) * 12 <= self.corpus_budget(Xp) else "query"

    def _m(self):
        if self._M is None:
            self._M = self.model.M.tocsr()
        return self._M

    def _mt(self):
        return self._m().T.tocsr()

    def _transform_postings(self, Xp, rows_per_chunk: int = 4096) -> sp.csr_matrix:
        MT = self._mt()
        parts = [(row_range(Xp, lo, lo + rows_per_chunk) @ MT).tocsr() for lo in range(0, Xp.shape[0], rows_per_chunk)]
        Y = sp.vstack(parts, format="csr") if parts else sp.csr_matrix((0, self.n_features))
        P = Y.T.tocsr()
        P.sort_indices()
        return P

    def _add(self, Xp):
        if self.strategy_ == "corpus":
            new = self._transform_postings(Xp)
            self.postings_ = sp.hstack([self.postings_, new], format="csr")

    # -- query ------------------------------------------------------------------------------
    def _query_rows(self, Qp, k, n_jobs, /, **options):
        if options:
            raise InvalidInputError(f"unknown option(s) for an exact index: {', '.join(sorted(options))}")
        if small_batch.take(Qp.shape[0]):  # the first few queries of a process: numpy, no numba
            if self.strategy_ == "corpus":
                scores = small_batch.posting_scores(Qp, self.postings_, self.n_documents)
            else:
                scores = small_batch.expanded_scores(Qp, self.model.W, self.model.identity, self.X_)
            return top_k_rows(scores, k)
        if self.strategy_ == "corpus":
            return self._query_corpus(Qp, k, n_jobs)
        return self._query_query(Qp, k, n_jobs)

    def _query_corpus(self, Qp, k, n_jobs):
        n = self.n_documents
        P = self.postings_
        b = max(1, min(self.block_size, (1 << 25) // max(n, 1)))  # <= 256 MB of scores per block

        def block(lo):
            Qb = row_range(Qp, lo, lo + b)
            out = np.zeros((Qb.shape[0], n))
            kernels().accumulate_postings(Qb.indptr, Qb.indices, Qb.data, P.indptr, P.indices, P.data, out)
            return top_k_rows(out, k)

        results = threaded(block, [(lo,) for lo in range(0, Qp.shape[0], b)], n_jobs)
        return np.vstack([r[0] for r in results]), np.vstack([r[1] for r in results])

    def _query_query(self, Qp, k, n_jobs):
        b = self.block_size
        parts = [self._score_expanded(self._expand(row_range(Qp, qlo, qlo + b)), k, n_jobs) for qlo in range(0, Qp.shape[0], b)]
        return np.vstack([p[0] for p in parts]), np.vstack([p[1] for p in parts])

    def _expand(self, Qb) -> np.ndarray:
        """``(Q_b M)^T`` of a prepared query block: dense, contiguous, features x queries.

        The transformed block the ``"query"`` strategy multiplies with the corpus; it depends on
        the model only, so the shards of a sharded index share one per block.
        """
        qm = np.zeros((Qb.shape[0], self.n_features))  # Q_b M, scattered row by row (contiguous writes)
        W = self.model.W  # M = I + W is never formed: W is scattered, then Q_b added
        kernels().rows_times_csr(Qb.indptr, Qb.indices, Qb.data, W.indptr, W.indices, W.data, qm)
        if self.model.identity:
            qm[np.repeat(np.arange(Qb.shape[0]), np.diff(Qb.indptr)), Qb.indices] += Qb.data
        return np.ascontiguousarray(qm.T)  # features x queries: the layout the corpus kernel reads

    def _score_expanded(self, qmt, k, n_jobs):
        """Top-k rows and scores of the corpus for an expanded block ``qmt`` (see :meth:`_expand`)."""
        X = self.X_
        n = self.n_documents
        chunk = max(self.chunk_size, k)
        bounds = [(lo, min(lo + chunk, n)) for lo in range(0, n, chunk)]

        def part(lo, hi):
            out = np.empty((hi - lo, qmt.shape[1]))
            kernels().csr_times_dense(X.indptr, X.indices, X.data, lo, hi, qmt, out)
            return top_k_rows(out.T, k, offset=lo)

        results = threaded(part, bounds, n_jobs)
        docs = np.hstack([r[0] for r in results])
        vals = np.hstack([r[1] for r in results])
        return merge_top_k(docs, vals, k)

    # -- storage ----------------------------------------------------------------------------
    def _arrays(self) -> dict:
        arrays = super()._arrays()
        if self.strategy_ == "corpus":
            arrays.update(csr_arrays(self.postings_, "postings"))
        return arrays

    def _restore(self, arrays: dict, extra_files: dict, meta: dict, mmap: bool):
        self.strategy_ = meta["state"]["strategy_"]
        if self.strategy_ == "corpus":
            self._postings = csr_from_arrays(arrays, "postings", (self.n_features, self._X.shape[0]))
        self.build_seconds_ = float(meta["state"].get("build_seconds") or 0.0)  # optional: absent or null

    def _state(self) -> dict:
        return {"strategy_": self.strategy_, "build_seconds": self.build_seconds_}
