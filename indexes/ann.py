"""Approximate top-k under a learned bilinear similarity: expanded-document postings, exact re-ranking.

The score is S(q, x) = q^T M x = sum_i q_i (M x)_i = sum_i q_i Y[x, i] with Y = X M^T. The learned
part of the score lives in Y: the expanded query M^T q is nearly dense (~54,000 of 62,061
features on news20 for an OASIS model from 2*10^4 triplets), but the raw query q stays short
(~80 terms). So the index expands the *documents* once, at build time, and keeps the query raw:

1. **Expanded-postings stage** (the candidate stage that finds the learned neighbours): for every
   feature i, the ``postings_per_feature`` documents with the largest positive Y[x, i], stored
   impact-ordered (largest first, float32) -- static pruning of the posting lists of the
   expanded corpus. A query reads ``n_postings`` x (its features) list entries in all, shared
   among the lists of its own features by |q_i| times the head of each list
   (``read_allocation``), accumulates q_i Y[x, i] (a partial, exact-valued score) and keeps the
   ``sparse_pool`` best documents. It covers the identity part of M (shared terms) and the
   learned W part at once. Measured on full news20 (OASIS): this stage alone holds >= 0.99 of
   the exact top-10 in a pool of 50; the sparse stage over the raw corpus X found 0.62 and the
   dense stage below 0.69.
2. **Dense stage** (optional, ``dim > 0``; off by default because the measurements in
   docs/retrieval.md show it does not earn its build time and memory on the benchmark corpora):
   a truncated SVD of a row sample of Y gives V (d x dim); documents embed as X M^T V, queries
   as Q V, searched by FAISS (inner-product IVF or HNSW) for ``dense_pool`` candidates.

Every candidate is then scored exactly (heavy rows of M precomputed per document in ``Z_``, the
rest of q M scattered once per query) and the top k are returned, so scores are always exact
bilinear scores and only the membership of the top-k can be approximate.

Search-time parameters (``n_postings``, ``sparse_pool``, ``dense_pool``, ``nprobe``) are chosen at
build time by recall calibration (:mod:`sparsesim.indexes.calibration`): the fastest setting whose
recall@10 against the exact top-10 meets ``target_recall`` on sample queries. Explicit parameters
win over calibrated ones; query-time options win over both.
"""

from __future__ import annotations

import math
import time

import numpy as np
import scipy.sparse as sp

from sparsesim.csr_rows import row_arrays, row_range, take_rows
from sparsesim.exceptions import FileFormatError, InvalidInputError
from sparsesim.models import BilinearSimilarity
from sparsesim.persistence import csr_from_arrays

from . import small_batch
from .base import Index, kernels, prepare_rows, query_scratch, threaded
from .calibration import calibrate, check_record, check_target_recall, remeasure
from .expansion import (embed, expanded_postings, fit_projection, heaps_from_postings, impact_postings,  # noqa: F401
                        light_transpose, postings_from_heaps)
from .recall_check import check_setting

__all__ = ["AnnIndex", "impact_postings", "expanded_postings", "fit_projection"]

_FAISS_KINDS = ("ivf", "hnsw")
_READ_ALLOCATIONS = ("weighted", "uniform")
_QUERY_OPTIONS = ("n_postings", "sparse_pool", "dense_pool", "nprobe", "ef_search")
# used when an index is not calibrated and the parameter was not given
_FALLBACK = {"n_postings": 256, "sparse_pool": 100, "dense_pool": 100, "nprobe": 32}


def _faiss():
    import faiss

    return faiss


class AnnIndex(Index):
    """Approximate bilinear top-k: expanded-document postings (+ optional FAISS), exact re-ranking.

    Parameters
    ----------
    model : BilinearSimilarity
    target_recall : float or None, default 0.95
        Recall@10 (against the exact top-10) the search-time parameters are calibrated for at
        build time (:mod:`sparsesim.indexes.calibration`); None skips calibration (then the
        parameters below, or their fallbacks, are used as given).
    calibration_size : int, default 300
        Corpus documents sampled as held-out calibration queries (when no calibration queries
        are passed to :meth:`fit`).
    postings_per_feature : int, optional
        Length L of each stored expanded posting list (the documents with the largest positive
        Y[x, i] per feature i). Default ``max(512, n_documents // 200)``, capped so the lists take
        at most ``postings_memory`` bytes.
    postings_memory : int, default 512 MiB
        Cap on the stored expanded postings (8 bytes per entry).
    n_postings : int, optional
        Entries read per query feature at search time, on average over the query's features
        (see ``read_allocation``); calibrated when not given (fallback 256). 0 disables the stage.
    sparse_pool : int, optional
        Candidates kept from the expanded-postings stage; calibrated when not given (fallback 100).
    dim : int, default 0
        Projection dimension of the optional dense (FAISS) stage; 0 disables it.
    faiss_index : {"ivf", "hnsw"}, default "ivf"
        FAISS structure over the projected documents, inner-product metric.
    nlist : int, optional
        IVF lists (default ``4 * sqrt(n)``, at most n / 39).
    nprobe : int, optional
        IVF lists visited per query; calibrated when not given (fallback 32).
    hnsw_m : int, default 32
    ef_search, ef_construction : int, default 128, 200
    dense_pool : int, optional
        Candidates from the dense stage; calibrated when not given (fallback 100).
    svd_sample : int, default 4000
    svd_iter : int, default 4
    rerank_memory : int, optional
        Budget (bytes) for Z, the precomputed values (M x)_i of every document on the "heavy"
        rows i of M (n x h float64); 0 scatters every row of q M at query time. Default: what
        keeps the whole index within 3x the corpus plus the model on disk, i.e.
        0.9 * (2 * (corpus + model bytes) - postings bytes), at most 2 GiB (the chosen budget is
        ``rerank_memory_``).
    heavy_min_nnz : int, default 256
        Rows of M with fewer nonzeros are never precomputed.
    block_size : int, default 256
        Queries per candidate / re-ranking block.
    n_jobs : int, default 1
    random_state : int, default 0
        Seeds the calibration sample, the SVD sample, the randomized SVD and the IVF training.
    read_allocation : {"weighted", "uniform"}, default "weighted"
        How a query's ``n_postings`` x (its features) reads are shared among its features'
        lists: ``"weighted"`` in proportion to |q_i| times the head (largest value) of list i,
        each list at most its length; ``"uniform"``: ``n_postings`` from every list. At equal reads
        weighted holds more of the exact top 10 in the pool (docs/retrieval.md); index files
        written before this option search uniformly.
    refit_growth : float or None, default 2.0
        :meth:`add` re-learns everything (:meth:`refit`) once the corpus holds ``refit_growth``
        times the documents the index was learned from; ``None`` never refits on its own.

    Attributes
    ----------
    postings_ : csr_matrix (features x documents, float32 values)
        Impact-ordered, pruned posting lists of Y = X M^T.
    postings_model_ : str
        Checksum of the model the postings were built with (a later model can be swapped in by
        :meth:`calibrate` without rebuilding them).
    calibration_ : dict or None
        The calibration record (setting, measured recall, model it was measured with, ...).
    heavy_rows_ : ndarray of int
    Z_ : ndarray (n_documents, n_heavy) float64
    V_, B_ : ndarray (d, dim) float32, only with ``dim > 0``
    faiss_ : faiss.Index or None
    n_fit_documents_ : int
    """

    kind = "ann"

    def __init__(self, model, target_recall=0.95, calibration_size=300, postings_per_feature=None,
                 postings_memory=512 << 20, n_postings=None, sparse_pool=None, dim=0, faiss_index="ivf", nlist=None,
                 nprobe=None, hnsw_m=32, ef_search=128, ef_construction=200, dense_pool=None, svd_sample=4000,
                 svd_iter=4, rerank_memory=None, heavy_min_nnz=256, block_size=256, n_jobs=1, random_state=0,
                 refit_growth=2.0, read_allocation="weighted"):
        super().__init__(model, n_jobs=n_jobs)
        if faiss_index not in _FAISS_KINDS:
            raise InvalidInputError(f"faiss_index must be one of {_FAISS_KINDS}, got {faiss_index!r}")
        for name, value in (("dim", dim), ("dense_pool", dense_pool), ("n_postings", n_postings),
                            ("sparse_pool", sparse_pool), ("postings_memory", postings_memory)):
            if value is not None and int(value) < 0:
                raise InvalidInputError(f"{name} must be >= 0, got {value}")
        for name, value in (("nprobe", nprobe), ("hnsw_m", hnsw_m), ("ef_search", ef_search),
                            ("ef_construction", ef_construction), ("svd_sample", svd_sample),
                            ("block_size", block_size), ("calibration_size", calibration_size),
                            ("postings_per_feature", postings_per_feature)):
            if value is not None and int(value) < 1:
                raise InvalidInputError(f"{name} must be >= 1, got {value}")
        if nlist is not None and int(nlist) < 1:
            raise InvalidInputError(f"nlist must be >= 1, got {nlist}")
        if (int(dim) == 0 or dense_pool == 0) and (n_postings == 0 or sparse_pool == 0):
            raise InvalidInputError("both candidate stages are disabled; enable the dense or the sparse stage")
        if read_allocation not in _READ_ALLOCATIONS:
            raise InvalidInputError(f"read_allocation must be one of {_READ_ALLOCATIONS}, got {read_allocation!r}")
        self.read_allocation = read_allocation
        self.target_recall = check_target_recall(target_recall)
        self.calibration_size = int(calibration_size)
        self.postings_per_feature = None if postings_per_feature is None else int(postings_per_feature)
        self.postings_memory = int(postings_memory)
        self.n_postings = None if n_postings is None else int(n_postings)
        self.sparse_pool = None if sparse_pool is None else int(sparse_pool)
        self.dim = int(dim)
        self.faiss_index = faiss_index
        self.nlist = None if nlist is None else int(nlist)
        self.nprobe = None if nprobe is None else int(nprobe)
        self.hnsw_m = int(hnsw_m)
        self.ef_search = int(ef_search)
        self.ef_construction = int(ef_construction)
        self.dense_pool = None if dense_pool is None else int(dense_pool)
        self.svd_sample = int(svd_sample)
        self.svd_iter = int(svd_iter)
        if (rerank_memory is not None and int(rerank_memory) < 0) or int(heavy_min_nnz) < 1:
            raise InvalidInputError("rerank_memory must be >= 0 and heavy_min_nnz >= 1")
        self.rerank_memory = None if rerank_memory is None else int(rerank_memory)
        self.rerank_memory_ = None
        self.heavy_min_nnz = int(heavy_min_nnz)
        self.block_size = int(block_size)
        self.random_state = random_state
        if refit_growth is not None and not float(refit_growth) > 1.0:
            raise InvalidInputError(f"refit_growth must be > 1 (or None), got {refit_growth}")
        self.refit_growth = None if refit_growth is None else float(refit_growth)
        self.n_fit_documents_ = 0
        self.postings_length_ = None
        self.postings_ = None
        self.postings_model_ = None
        self.calibration_ = None
        self.V_ = self.B_ = None
        self.faiss_ = None
        self.singular_values_ = None
        self.nlist_ = None
        self.heavy_rows_ = None
        self.Z_ = None
        self._heavy_pos = None

    _PARAMS = ("target_recall", "calibration_size", "postings_per_feature", "postings_memory", "n_postings",
               "sparse_pool", "dim", "faiss_index", "nlist", "nprobe", "hnsw_m", "ef_search", "ef_construction",
               "dense_pool", "svd_sample", "svd_iter", "rerank_memory", "heavy_min_nnz", "block_size",
               "random_state", "refit_growth", "read_allocation")

    def params(self) -> dict:
        return {k: getattr(self, k) for k in self._PARAMS}

    @property
    def _dense_on(self) -> bool:
        return self.dim > 0

    @property
    def Z_(self):
        """The re-ranking table (n_documents x n_heavy float64; every block checked first)."""
        self._verified("heavy.Z")
        return self._Z

    @Z_.setter
    def Z_(self, value):
        self._Z = value
        self._drop_guards("heavy.Z")

    def search_setting(self) -> dict:
        """The search-time parameters queries use by default: explicit parameters, else the
        calibrated ones, else the fallbacks."""
        calibrated = (self.calibration_ or {}).get("setting", {})
        out = {}
        names = ("n_postings", "sparse_pool") + (("dense_pool", "nprobe") if self._dense_on else ())
        for name in names:
            value = getattr(self, name)
            if value is None:
                value = calibrated.get(name, _FALLBACK[name])
            out[name] = int(value)
        if out["n_postings"] and self.postings_length_ is not None:
            out["n_postings"] = min(out["n_postings"], self.postings_length_)
        return out

    def default_n_postings(self) -> int:
        """``n_postings`` in use (see :meth:`search_setting`)."""
        return self.search_setting()["n_postings"]

    # -- build ------------------------------------------------------------------------------
    def _postings_length(self, n: int) -> int:
        L = self.postings_per_feature if self.postings_per_feature is not None else max(512, n // 200)
        cap = max(1, self.postings_memory // (8 * self.n_features))
        return int(max(1, min(L, cap, n)))

    def fit(self, X, ids=None, calibration_queries=None):
        """Build the expanded postings (and the FAISS stage when ``dim > 0``) for corpus ``X``,
        then calibrate the search setting for ``target_recall``.

        Parameters
        ----------
        X : sparse matrix, shape (n_documents, n_features)
        ids : sequence, optional
        calibration_queries : sparse matrix, optional
            Queries to calibrate on (default: ``calibration_size`` held-out corpus documents).
        """
        start = time.perf_counter()
        Xp = prepare_rows(self.model, X, "corpus")
        if Xp.shape[0] == 0:
            raise InvalidInputError("cannot build an index over an empty corpus")
        self._set_corpus(Xp, ids)
        jobs = max(1, int(self.n_jobs or 1))
        self.postings_length_ = self._postings_length(Xp.shape[0])
        self.rerank_memory_ = self._rerank_budget(Xp)
        self.heavy_rows_ = self._choose_heavy_rows(Xp)
        self._heavy_pos = self._positions(self.heavy_rows_)
        self.Z_ = self._heavy_values(Xp, jobs)
        phases = {"heavy_values": time.perf_counter() - start}
        if self.n_postings == 0 or self.sparse_pool == 0:  # the dense stage alone: no postings
            self.postings_length_ = 1
            self.postings_ = sp.csr_matrix((self.n_features, Xp.shape[0]), dtype=np.float32)
            self.postings_.indices = self.postings_.indices.astype(np.int32)
            self.postings_.indptr = self.postings_.indptr.astype(np.int64)
        else:
            MT_light = light_transpose(self.model.W, self.heavy_rows_)
            heaps = expanded_postings(Xp, MT_light, self.heavy_rows_, self.Z_, self.postings_length_, jobs,
                                      identity=self.model.identity)
            del MT_light
            self.postings_ = postings_from_heaps(*heaps, Xp.shape[0])
            del heaps
        phases["postings"] = time.perf_counter() - start - sum(phases.values())
        self.postings_model_ = self.model_checksum()
        if self._dense_on:
            faiss = _faiss()
            faiss.omp_set_num_threads(jobs)
            self.V_, self.B_, self.singular_values_ = fit_projection(
                self.model, Xp, self.dim, self.svd_sample, self.svd_iter, self.random_state)
            D = embed(Xp, self.B_, jobs)
            self.faiss_ = self._new_faiss(D)
            self.faiss_.add(D)
            del D
        self.n_fit_documents_ = Xp.shape[0]
        self.calibration_ = None
        phases["dense_stage"] = time.perf_counter() - start - sum(phases.values())
        if self.target_recall is not None and Xp.shape[0] > 11:
            self.calibrate(calibration_queries)
        self.build_seconds_ = time.perf_counter() - start
        phases["calibration"] = self.build_seconds_ - sum(phases.values())
        self.build_phases_ = phases  # seconds per build phase (this process only; not saved)
        return self

    def calibrate(self, queries=None, target_recall=None, model=None, top_k: int = 10):
        """(Re)calibrate the search setting without rebuilding the postings or the FAISS stage.

        Parameters
        ----------
        queries : sparse matrix, optional
            Calibration queries (default: ``calibration_size`` held-out corpus documents).
        target_recall : float, optional
            Default: the index's ``target_recall`` (0.95 if that is None).
        model : BilinearSimilarity, optional
            A retrained model (same features) to serve from now on: the exact re-ranking values
            are recomputed for it, the candidate postings stay those of the model they were
            built with (``postings_model_``), and the calibration measures how well they still
            find the new model's neighbours (it raises the pool sizes as needed).
        top_k : int, default 10

        Returns
        -------
        dict
            The calibration record, also kept in ``calibration_``.
        """
        if model is not None:
            self._swap_model(model)
        target = check_target_recall(target_recall) if target_recall is not None else self.target_recall
        record = calibrate(self, queries, target_recall=0.95 if target is None else target, top_k=top_k,
                           n_queries=self.calibration_size, random_state=self.random_state,
                           n_jobs=max(1, int(self.n_jobs or 1)))
        record["postings_model_checksum"] = self.postings_model_
        self.calibration_ = record
        return record

    def _swap_model(self, model):
        if not isinstance(model, BilinearSimilarity):
            raise InvalidInputError(f"model must be a BilinearSimilarity, got {type(model).__name__}")
        if (model.n_features != self.n_features or model.normalize != self.model.normalize
                or model.identity != self.model.identity):
            raise InvalidInputError("the new model must have the same features and identity/normalize flags "
                                    "as the index's model")
        if self._dense_on:
            raise InvalidInputError("an index with a dense (FAISS) stage learned its projection from the model; "
                                    "rebuild it for a new model")
        self.model = model
        self.rerank_memory_ = self._rerank_budget(self.X_)
        self.heavy_rows_ = self._choose_heavy_rows(self.X_)
        self._heavy_pos = self._positions(self.heavy_rows_)
        self.Z_ = self._heavy_values(self.X_, max(1, int(self.n_jobs or 1)))

    def calibration_grid(self, top_k: int = 10) -> list:
        """Search settings the calibration measures: families ordered cheapest first (a family
        stops at its first setting that meets the target)."""
        L = self.postings_length_ or 1
        if self.n_postings is not None:
            reads = [self.n_postings]
        else:
            # steps of 1.5x up to 512 (2x gaps left 5% of the speed at the target unclaimed: news20
            # SORS-I at recall 0.978 took 128 reads where 96 were enough)
            reads = sorted({min(L, r) for r in (8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024, 2048,
                                                 4096)})
        if self.sparse_pool is not None:
            pools = [self.sparse_pool]
        else:
            # growing pools up to the whole corpus (needed when a retrained model is served from
            # postings built for an earlier one); a family stops at its first qualifying pool
            n = max(self.n_documents, 1)
            pools = sorted({min(n, p * top_k) for p in (1, 2, 3, 5, 7, 10, 15, 20, 50, 100, 200, 500, 1000)})
        if self._dense_on:
            if self.dense_pool is not None:
                dense = [self.dense_pool]
            elif self.n_postings == 0 or self.sparse_pool == 0:  # the dense stage alone
                dense = [p * top_k for p in (1, 2, 5, 10, 20, 50)]
            else:
                dense = [0, 5 * top_k, 20 * top_k]
            probes = [self.nprobe] if self.nprobe is not None else [_FALLBACK["nprobe"]]
        else:
            dense, probes = [None], [None]
        if self.n_postings == 0 or self.sparse_pool == 0:
            reads, pools = [0], [0]
        families = []
        for pr in probes:
            for r in reads:
                family = []
                for p in pools:
                    for dp in dense:
                        setting = {"n_postings": r, "sparse_pool": p}
                        if dp is not None:
                            setting.update(dense_pool=dp, nprobe=pr)
                        family.append(setting)
                families.append(family)
        return families

    def refit(self):
        """Re-learn everything from the stored corpus (same ids): the index a fresh
        :meth:`fit` over all documents builds. For a corpus that grew by :meth:`add`."""
        if self.read_only_:
            raise InvalidInputError("this index was loaded memory-mapped (read-only); load it with mmap=False to refit")
        return self.fit(self.X_, ids=self.ids_)

    def add(self, X_new, ids=None):
        """:meth:`Index.add`, then :meth:`refit` when the corpus reached ``refit_growth`` times
        the documents the index was learned from."""
        super().add(X_new, ids=ids)
        if self.refit_growth is not None and self.n_documents >= self.refit_growth * self.n_fit_documents_:
            self.refit()
        elif self.calibration_ is not None:
            # the record describes the content it is stored with (the load-time check replays it)
            self.calibration_ = remeasure(self, self.calibration_, self.calibration_size, self.random_state,
                                          max(1, int(self.n_jobs or 1)))
        return self

    def _new_faiss(self, D):
        faiss = _faiss()
        n, dim = D.shape
        if self.faiss_index == "hnsw":
            index = faiss.IndexHNSWFlat(dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = self.ef_construction
            self.nlist_ = None
            return index
        nlist = self.nlist if self.nlist is not None else int(round(4 * math.sqrt(n)))
        nlist = max(1, min(nlist, n // 39 if n >= 39 else 1))
        self.nlist_ = nlist
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        index.cp.seed = int(np.random.default_rng(self.random_state).integers(2**31 - 1))
        rng = np.random.default_rng(self.random_state)
        n_train = min(n, 64 * nlist)
        train = D[np.sort(rng.choice(n, size=n_train, replace=False))] if n_train < n else D
        index.train(np.ascontiguousarray(train))
        return index

    # -- exact re-ranking: heavy rows of M precomputed per document -------------------------------
    def _choose_heavy_rows(self, Xp) -> np.ndarray:
        """Rows i of M whose scatter would dominate q M: the most expensive by nnz(M_i) x df_i.

        For these rows the values (M x)_i of every document are precomputed (Z, n x h float64,
        at most ``rerank_memory`` bytes), so re-ranking reads one number per heavy query feature
        and candidate instead of scattering a row with thousands of entries.
        """
        W = self.model.W
        n = Xp.shape[0]
        row_nnz = np.diff(W.indptr)  # nnz of the rows of M = I + W: plus a missing diagonal entry
        if self.model.identity:
            row_nnz = row_nnz + (W.diagonal() == 0)
        df = np.bincount(Xp.indices, minlength=self.n_features)
        h_max = int(self.rerank_memory_ // (8 * max(n, 1)))
        eligible = np.flatnonzero((row_nnz >= self.heavy_min_nnz) & (df > 0))
        if h_max <= 0 or eligible.size == 0:
            return np.zeros(0, dtype=np.int64)
        cost = row_nnz[eligible].astype(np.float64) * df[eligible]
        keep = eligible[np.argsort(-cost, kind="stable")[:h_max]]
        # most frequent features first: the heavy features of a query then share few cache lines of Z[c]
        return keep[np.argsort(-df[keep], kind="stable")].astype(np.int64)

    def _rerank_budget(self, Xp) -> int:
        """``rerank_memory``, or the bytes Z may take so the index stays <= 3x (corpus + model)."""
        if self.rerank_memory is not None:
            return self.rerank_memory
        n, d = Xp.shape
        corpus = 12 * Xp.nnz + 8 * (n + 1)
        model = 12 * self.model.W.nnz + 8 * (d + 1)
        postings = 8 * self.postings_length_ * d  # an upper bound: lists can be shorter
        return int(max(0, min(2 << 30, 0.9 * (2 * (corpus + model) - postings - 8 * n))))

    def _positions(self, heavy_rows) -> np.ndarray:
        pos = np.full(self.n_features, -1, dtype=np.int64)
        pos[heavy_rows] = np.arange(heavy_rows.size)
        return pos

    def _heavy_values(self, Xp, n_jobs, block: int = 256) -> np.ndarray:
        """Z[c, t] = (M x_c)_{heavy_rows[t]} = (X M_H^T)[c, t], computed block by block of heavy rows."""
        H = self.heavy_rows_
        Z = np.empty((Xp.shape[0], H.size), dtype=np.float64)
        W = self.model.W
        for lo in range(0, H.size, block):
            D = np.ascontiguousarray(take_rows(W, H[lo:lo + block]).toarray().T)  # d x b: rows of W, not of I + W
            if self.model.identity:
                D[H[lo:lo + block], np.arange(D.shape[1])] += 1.0
            Z[:, lo:lo + D.shape[1]] = embed(Xp, D, n_jobs, dtype=np.float64)
        return Z

    def _add(self, Xp):
        jobs = max(1, int(self.n_jobs or 1))
        n_old = self.X_.shape[0]
        Z_new = self._heavy_values(Xp, jobs)
        if self.postings_model_ != self.model_checksum():
            raise InvalidInputError("the index's postings were built with an earlier model; refit() it before "
                                    "adding documents")
        if self.n_postings == 0 or self.sparse_pool == 0:
            P = self.postings_
            self.postings_ = sp.csr_matrix((P.data, P.indices, P.indptr), shape=(self.n_features, n_old + Xp.shape[0]))
        else:
            # the list length a fresh build over all documents would use (it grows with the corpus)
            self.postings_length_ = max(self.postings_length_, self._postings_length(n_old + Xp.shape[0]))
            heaps = heaps_from_postings(self.postings_, self.postings_length_)
            MT_light = light_transpose(self.model.W, self.heavy_rows_)
            heaps = expanded_postings(Xp, MT_light, self.heavy_rows_, Z_new, self.postings_length_, jobs,
                                      heaps=heaps, doc0=n_old, identity=self.model.identity)
            self.postings_ = postings_from_heaps(*heaps, n_old + Xp.shape[0])
        self.Z_ = np.vstack([self.Z_, Z_new])
        if self._dense_on:
            faiss = _faiss()
            faiss.omp_set_num_threads(jobs)
            self.faiss_.add(embed(Xp, self.B_, jobs))

    # -- query ------------------------------------------------------------------------------
    def _query_rows(self, Qp, k, n_jobs, /, **options):
        unknown = set(options) - set(_QUERY_OPTIONS)
        if unknown:
            raise InvalidInputError(f"unknown option(s) for an ANN index: {', '.join(sorted(unknown))}; "
                                    f"known: {', '.join(_QUERY_OPTIONS)}")
        setting = self.search_setting()
        for name in ("n_postings", "sparse_pool", "dense_pool", "nprobe"):
            if options.get(name) is not None:
                setting[name] = int(options[name])
        n_postings, sparse_pool = setting["n_postings"], setting["sparse_pool"]
        dense_pool, nprobe = setting.get("dense_pool", 0), setting.get("nprobe", 1)
        ef_search = int(options.get("ef_search", self.ef_search))
        if min(n_postings, sparse_pool, dense_pool) < 0 or min(nprobe, ef_search) < 1:
            raise InvalidInputError("pool sizes and n_postings must be >= 0, nprobe and ef_search >= 1")
        n = self.n_documents
        sparse_pool = min(sparse_pool, n) if n_postings > 0 else 0
        dense_pool = min(dense_pool, n) if self._dense_on else 0
        nq = Qp.shape[0]
        parts = []
        if dense_pool > 0:
            parts.append(self._dense_candidates(Qp, dense_pool, nprobe, ef_search, n_jobs))
        # at most block_size queries per block, and at least one block per thread
        b = max(1, min(self.block_size, -(-nq // max(1, n_jobs))))
        blocks = [(lo, min(lo + b, nq)) for lo in range(0, nq, b)]
        guarded = any(g.pending for g in self._guards.values())
        # the first few queries of a process: numpy, the same answers without loading numba
        few = small_batch.take(nq)
        P = self._postings
        weighted = self.read_allocation == "weighted"
        dense_cands = parts[0] if parts else None  # FAISS answers the whole batch at once
        model = self._model
        W, X, Z = model.W, self._X, self._Z  # W itself: I + W is never formed at query time

        def sparse_block(lo, hi, q_ptr, q_idx, q_val):
            if guarded:  # memory-mapped: check the blocks of the list prefixes read below
                self._ensure_postings_read(q_ptr, q_idx, q_val, n_postings, weighted)
            if few:
                return small_batch.sparse_candidates(row_range(Qp, lo, hi), P, n, n_postings, sparse_pool, weighted)
            out = np.empty((hi - lo, sparse_pool), dtype=np.int64)
            kernels().sparse_candidates(q_ptr, q_idx, q_val, P.indptr, P.indices, P.data, n_postings, weighted,
                                        sparse_pool, out, *query_scratch.sparse(n))
            return out

        def block(lo, hi):  # one task per block: its candidates, then their exact re-ranking
            q_ptr, q_idx, q_val = row_arrays(Qp, lo, hi)
            pieces = [] if dense_cands is None else [dense_cands[lo:hi]]
            if sparse_pool > 0:
                pieces.append(sparse_block(lo, hi, q_ptr, q_idx, q_val))
            cb = np.ascontiguousarray(np.hstack(pieces)) if pieces else np.full((hi - lo, 0), -1, dtype=np.int64)
            if guarded:
                self._check_rerank_rows(row_range(Qp, lo, hi), cb, k)
            if few:
                return small_batch.rerank(row_range(Qp, lo, hi), W, bool(model.identity), self._heavy_pos, Z, X, cb, k)
            docs = np.full((hi - lo, k), -1, dtype=np.int64)
            scores = np.full((hi - lo, k), -np.inf)
            qm, stamp = query_scratch.rerank(n, self.n_features)
            kernels().rerank(q_ptr, q_idx, q_val, W.indptr, W.indices, W.data, bool(model.identity),
                             self._heavy_pos, Z, X.indptr, X.indices, X.data, cb, k, docs, scores, qm, stamp,
                             query_scratch.generations(hi - lo))
            return docs, scores

        results = threaded(block, blocks, n_jobs)
        return np.vstack([r[0] for r in results]), np.vstack([r[1] for r in results])

    def _ensure_postings_read(self, q_ptr, q_idx, q_val, n_postings, weighted):
        """Check the blocks of the posting-list prefixes the queries (q_ptr, q_idx, q_val) read."""
        P = self._postings
        if not weighted:
            self._ensure_rows("postings", P.indptr, q_idx, n_postings)
            return
        self._ensure_rows("postings", P.indptr, q_idx, 1)  # the heads that share the reads out
        reads = np.concatenate([small_batch.read_limits(q_idx[q_ptr[r]:q_ptr[r + 1]].astype(np.int64),
                                                        q_val[q_ptr[r]:q_ptr[r + 1]], P, n_postings, True)
                                for r in range(q_ptr.size - 1)] or [np.zeros(0, np.int64)])
        self._ensure_rows("postings", P.indptr, q_idx, reads)

    def _check_rerank_rows(self, Qb, cands, k):
        """Check the blocks re-ranking reads: the light rows of W of the query terms, and the
        corpus rows and Z rows of the candidates (and of the documents 0, 1, ... that fill a
        pool with fewer than k distinct candidates)."""
        n = self.n_documents
        terms = Qb.indices[self._heavy_pos[Qb.indices] < 0]
        self._ensure_rows("model.W", self._model.W.indptr, terms)
        docs = cands[cands >= 0]
        if cands.shape[1]:
            srt = np.sort(cands, axis=1)
            distinct = (srt[:, :1] >= 0).sum(axis=1) + ((srt[:, 1:] != srt[:, :-1]) & (srt[:, 1:] >= 0)).sum(axis=1)
        else:
            distinct = np.zeros(cands.shape[0], dtype=np.int64)
        if (distinct < k).any():
            docs = np.concatenate([docs, np.arange(min(n, cands.shape[1] + k))])
        docs = np.unique(docs)
        self._ensure_rows("corpus", self._X.indptr, docs)
        guard = self._guards.get("heavy.Z")
        h = self._Z.shape[1]
        if guard is not None and guard.pending and h:
            guard.ensure(docs * h, docs * h + h)

    def _dense_candidates(self, Qp, pool, nprobe, ef_search, n_jobs):
        faiss = _faiss()
        faiss.omp_set_num_threads(n_jobs)
        Qv = embed(Qp, self.V_, n_jobs)
        if self.faiss_index == "hnsw":
            self.faiss_.hnsw.efSearch = max(ef_search, pool)
        else:
            self.faiss_.nprobe = min(nprobe, self.faiss_.nlist)
        _, labels = self.faiss_.search(Qv, pool)
        return labels.astype(np.int64, copy=False)

    def search_metadata(self, **options) -> dict:
        """What answers are computed with: the setting in use (``options`` as passed to
        :meth:`query` override it) and the calibration behind it (JSON-ready; the CLI's
        ``query --json`` prints it)."""
        cal = self.calibration_ or {}
        setting = self.search_setting()
        setting.update({k: int(v) for k, v in options.items() if v is not None})
        return {"kind": self.kind, "setting": setting, "read_allocation": self.read_allocation, "overridden": sorted(k for k, v in options.items() if v is not None),
                "calibrated": bool(cal), "target_recall": cal.get("target_recall"),
                "calibrated_recall": cal.get("recall"), "calibrated_recall_lower_bound": cal.get("recall_lower_bound"),
                "calibration_queries": cal.get("n_queries"),
                "calibrated_with_model": cal.get("model_checksum"), "model": self.model_checksum()}

    # -- storage ----------------------------------------------------------------------------
    def _arrays(self) -> dict:
        arrays = super()._arrays()
        P = self.postings_
        arrays.update({"postings.indptr": np.asarray(P.indptr, np.int64),
                       "postings.indices": np.asarray(P.indices, np.int32),
                       "postings.data": np.asarray(P.data, np.float32),
                       "heavy.rows": np.asarray(self.heavy_rows_, np.int64), "heavy.Z": self.Z_})
        if self._dense_on:
            arrays.update({"projection.V": self.V_, "projection.B": self.B_,
                           "projection.singular_values": np.asarray(self.singular_values_, np.float64)})
        return arrays

    def _extra_files(self) -> dict:
        if not self._dense_on:
            return {}
        faiss = _faiss()
        return {"faiss.index": lambda path: faiss.write_index(self.faiss_, str(path))}

    def _state(self) -> dict:
        return {"nlist_": self.nlist_, "build_seconds": self.build_seconds_, "n_heavy_rows": int(self.heavy_rows_.size),
                "n_fit_documents": int(self.n_fit_documents_), "postings": "expanded",
                "postings_length": int(self.postings_length_), "postings_model": self.postings_model_,
                "read_allocation": self.read_allocation,
                "rerank_memory_": int(self.rerank_memory_),
                "calibration": self.calibration_}

    def _restore(self, arrays: dict, extra_files: dict, meta: dict, mmap: bool):
        state = meta["state"]
        if state.get("postings") != "expanded":
            raise FileFormatError("this ann index was written by an earlier sparsesim (raw-corpus postings); "
                                  "rebuild it with `sparsesim index build`")
        self._postings = csr_from_arrays(arrays, "postings", (self.n_features, self._X.shape[0]))
        if state.get("postings_length") is None:
            raise FileFormatError("the index manifest's state lacks postings_length; rebuild the index")
        self.postings_length_ = int(state["postings_length"])
        # files written before reads were shared out by weight searched every list uniformly
        self.read_allocation = state.get("read_allocation") or "uniform"
        self.rerank_memory_ = state.get("rerank_memory_")
        self.postings_model_ = state.get("postings_model")
        cal = state.get("calibration")
        self.calibration_ = None if cal is None else check_record(cal, "index manifest (state.calibration)")
        self.heavy_rows_ = arrays["heavy.rows"]
        self._Z = arrays["heavy.Z"]
        n, h = self._X.shape[0], self.heavy_rows_.shape[0]
        if (self.heavy_rows_.ndim != 1 or self._Z.shape != (n, h) or np.unique(self.heavy_rows_).size != h
                or (h and (self.heavy_rows_.min() < 0 or self.heavy_rows_.max() >= self.n_features))):
            raise FileFormatError(f"heavy-row arrays have shapes {self.heavy_rows_.shape}, {self._Z.shape}; "
                                  f"expected (h,) and ({n}, h)")
        P = self._postings
        if "postings.indices" not in self._guards and P.indices.size and (
                int(P.indices.min()) < 0 or int(P.indices.max()) >= n):
            raise FileFormatError("expanded postings name documents outside the index")
        self._heavy_pos = self._positions(self.heavy_rows_)
        self.nlist_ = state.get("nlist_")
        # optional state keys may be absent or null (the schema allows both): null reads as absent
        self.n_fit_documents_ = int(n if state.get("n_fit_documents") is None else state["n_fit_documents"])
        self.build_seconds_ = float(state.get("build_seconds") or 0.0)
        if self._dense_on:
            self.V_ = arrays["projection.V"]
            self.B_ = arrays["projection.B"]
            self.singular_values_ = arrays["projection.singular_values"]
            if self.V_.shape != (self.n_features, self.dim) or self.B_.shape != (self.n_features, self.dim):
                raise FileFormatError(f"projection arrays have shape {self.V_.shape}, expected "
                                      f"({self.n_features}, {self.dim})")
            faiss = _faiss()
            path = str(extra_files["faiss.index"])
            try:
                index = faiss.read_index(path, faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY) if mmap \
                    else faiss.read_index(path)
            except RuntimeError as exc:
                raise FileFormatError(f"{path}: not a readable FAISS index ({str(exc).splitlines()[0]})") from None
            if index.ntotal != n or index.d != self.dim:
                raise FileFormatError(f"{path}: FAISS index holds {index.ntotal} vectors of dimension {index.d}, "
                                      f"expected {n} of dimension {self.dim}")
            self.faiss_ = index
        if self.calibration_ is not None:
            check_setting(self, self.calibration_)
