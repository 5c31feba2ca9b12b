"""Approximate top-k under a learned bilinear similarity: two candidate generators, exact re-ranking.

S(q, x) = q^T M x with M = I + W is not low rank (the identity is full rank), and on sparse text
the nearest documents are the ones sharing rare terms -- a structure no low-dimensional dense
projection keeps (measured: a rank-128 SVD of Y = X M^T alone finds 18% of the exact top-10 in a
pool of 3,000 of 10^5 RCV1-like documents). So the pool of candidates comes from the union of

1. a **sparse stage**, learned from the corpus: impact-ordered posting lists of X (each feature's
   documents sorted by decreasing weight); a query accumulates q_i x_i over the first
   ``n_postings`` entries of each of its features and keeps the ``sparse_pool`` best documents
   (this covers the identity part of M, the shared-term overlap); and
2. a **dense stage**, learned from the corpus and the model: a truncated SVD of (a row sample of)
   Y = X M^T gives V (d x dim); documents are embedded as X M^T V and queries as Q V, so
   their inner product is q^T V V^T M x, the best rank-``dim`` approximation of the score on
   the span the corpus occupies under M (this covers the learned W part); FAISS searches these
   vectors with an inner-product IVF (``faiss.METRIC_INNER_PRODUCT`` passed explicitly) or HNSW
   index and returns ``dense_pool`` candidates.

Every candidate is then scored exactly (q M scattered once per query, one sparse dot per
candidate) and the top k are returned, so scores are always exact bilinear scores and only the
membership of the top-k can be approximate.
"""

from __future__ import annotations

import math
import time

import numpy as np
import scipy.sparse as sp

from sparsesim.exceptions import InvalidInputError

from . import _kernels as K
from .base import Index, prepare_rows, threaded

__all__ = ["AnnIndex", "impact_postings", "fit_projection"]

_FAISS_KINDS = ("ivf", "hnsw")
_QUERY_OPTIONS = ("n_postings", "sparse_pool", "dense_pool", "nprobe", "ef_search")


def _faiss():
    import faiss

    return faiss


def impact_postings(X: sp.csr_matrix) -> sp.csr_matrix:
    """Posting lists of X (features x documents), each list sorted by decreasing value."""
    P = X.T.tocsr()
    row = np.repeat(np.arange(P.shape[0], dtype=np.int64), np.diff(P.indptr))
    order = np.lexsort((P.indices, -P.data, row))
    P.indices = np.ascontiguousarray(P.indices[order]).astype(np.int32, copy=False)
    P.data = np.ascontiguousarray(P.data[order])
    P.indptr = P.indptr.astype(np.int64, copy=False)
    return P


def _transformed_rows_T(Xs, MT, block: int = 256) -> np.ndarray:
    """(Xs M^T)^T as a dense float32 array (features x rows), built block by block."""
    d = MT.shape[1]
    out = np.empty((d, Xs.shape[0]), dtype=np.float32)
    for lo in range(0, Xs.shape[0], block):
        Xb = Xs[lo:lo + block]
        buf = np.zeros((d, Xb.shape[0]))
        K.rows_times_csr_T(Xb.indptr, Xb.indices, Xb.data, MT.indptr, MT.indices, MT.data, buf)
        out[:, lo:lo + Xb.shape[0]] = buf
    return out


def fit_projection(model, Xp, dim: int, sample: int, n_iter: int, random_state, max_bytes: int = 1 << 30):
    """Learn V (d x dim) from a truncated SVD of a row sample of Y = X M^T.

    Returns ``(V, B)`` with ``B = M^T V`` (float32, d x dim): documents embed as ``X B``,
    queries as ``Q V``.
    """
    from sklearn.utils.extmath import randomized_svd

    n, d = Xp.shape
    rng = np.random.default_rng(random_state)
    cap = max(dim + 1, max_bytes // (4 * d))  # the dense sample is d x n_sample float32
    n_sample = int(min(n, sample, cap))
    rows = np.sort(rng.choice(n, size=n_sample, replace=False))
    M = model.M.tocsr()
    YsT = _transformed_rows_T(Xp[rows], M.T.tocsr())
    rank = min(dim, min(YsT.shape) - 1) if min(YsT.shape) > 1 else 1
    seed = int(rng.integers(2**31 - 1))
    U, s, _ = randomized_svd(YsT, rank, n_iter=n_iter, random_state=seed)
    del YsT
    V = np.zeros((d, dim), dtype=np.float64)
    V[:, :rank] = U
    B = np.zeros((d, dim), dtype=np.float64)
    K.csr_T_times_dense(M.indptr, M.indices, M.data, V, B)
    return np.ascontiguousarray(V, dtype=np.float32), np.ascontiguousarray(B, dtype=np.float32), s


def _embed(Xp, dense, n_jobs, chunk: int = 65536, dtype=np.float32) -> np.ndarray:
    """X @ dense (rows x dim), chunked over rows in threads."""
    out = np.empty((Xp.shape[0], dense.shape[1]), dtype=dtype)

    def part(lo, hi):
        K.csr_times_dense(Xp.indptr, Xp.indices, Xp.data, lo, hi, dense, out[lo:hi])

    threaded(part, [(lo, min(lo + chunk, Xp.shape[0])) for lo in range(0, Xp.shape[0], chunk)], n_jobs)
    return out


class AnnIndex(Index):
    """Approximate bilinear top-k: sparse + FAISS dense candidates, exact re-ranking.

    Parameters
    ----------
    model : BilinearSimilarity
    dim : int, default 128
        Projection dimension of the dense stage; 0 disables it (sparse stage only).
    faiss_index : {"ivf", "hnsw"}, default "ivf"
        FAISS structure over the projected documents, inner-product metric.
    nlist : int, optional
        IVF lists (default ``4 * sqrt(n)``, at most n / 39).
    nprobe : int, default 32
        IVF lists visited per query.
    hnsw_m : int, default 32
        HNSW graph degree.
    ef_search, ef_construction : int, default 128, 200
        HNSW search / construction breadth.
    dense_pool : int, default 100
        Candidates from the dense stage.
    n_postings : int, optional
        Posting-list entries read per query feature in the sparse stage (0 disables it);
        default ``max(200, n_documents // 1000)`` (the benchmark: 200 suffices at 10^4-10^5
        documents, 10^6 documents need ~1000 for recall@10 >= 0.95 with margin).
    sparse_pool : int, default 100
        Candidates from the sparse stage.
    svd_sample : int, default 4000
        Rows of Y = X M^T the SVD is learned from (capped so the dense sample stays <= 1 GiB).
    svd_iter : int, default 4
        Power iterations of the randomized SVD.
    rerank_memory : int, default 2 GiB
        Budget (bytes) for Z, the precomputed values (M x)_i of every document on the "heavy"
        rows i of M (n x h float64); 0 scatters every row of q M at query time.
    heavy_min_nnz : int, default 256
        Rows of M with fewer nonzeros are never precomputed.
    block_size : int, default 256
        Queries per candidate / re-ranking block.
    n_jobs : int, default 1
        Threads (joblib threads for the numba kernels, ``faiss.omp_set_num_threads`` for FAISS).
    random_state : int, default 0
        Seeds the SVD sample, the randomized SVD and the IVF training sample.
    refit_growth : float or None, default 2.0
        :meth:`add` re-learns the projection, the FAISS structure and the heavy rows from the
        whole corpus (:meth:`refit`) once the corpus holds ``refit_growth`` times the documents
        they were learned from (the IVF centroids and the SVD sample of a corpus that grew
        several-fold no longer describe it); ``None`` never refits on its own.

    Attributes
    ----------
    V_, B_ : ndarray (d, dim) float32
        Query map and document map (B = M^T V).
    faiss_ : faiss.Index or None
    postings_ : csr_matrix
        Impact-ordered posting lists of X.
    singular_values_ : ndarray
    heavy_rows_ : ndarray of int
        Rows of M whose per-document values are precomputed in ``Z_``.
    Z_ : ndarray (n_documents, n_heavy) float64
    n_fit_documents_ : int
        Documents the projection, FAISS structure and heavy rows were learned from.
    """

    kind = "ann"

    def __init__(self, model, dim=128, faiss_index="ivf", nlist=None, nprobe=32, hnsw_m=32, ef_search=128,
                 ef_construction=200, dense_pool=100, n_postings=None, sparse_pool=100, svd_sample=4000,
                 svd_iter=4, rerank_memory=2 << 30, heavy_min_nnz=256, block_size=256, n_jobs=1, random_state=0,
                 refit_growth=2.0):
        super().__init__(model, n_jobs=n_jobs)
        if faiss_index not in _FAISS_KINDS:
            raise InvalidInputError(f"faiss_index must be one of {_FAISS_KINDS}, got {faiss_index!r}")
        for name, value in (("dim", dim), ("dense_pool", dense_pool), ("n_postings", n_postings or 0),
                            ("sparse_pool", sparse_pool)):
            if int(value) < 0:
                raise InvalidInputError(f"{name} must be >= 0, got {value}")
        for name, value in (("nprobe", nprobe), ("hnsw_m", hnsw_m), ("ef_search", ef_search),
                            ("ef_construction", ef_construction), ("svd_sample", svd_sample),
                            ("block_size", block_size)):
            if int(value) < 1:
                raise InvalidInputError(f"{name} must be >= 1, got {value}")
        if nlist is not None and int(nlist) < 1:
            raise InvalidInputError(f"nlist must be >= 1, got {nlist}")
        if (int(dim) == 0 or int(dense_pool) == 0) and (n_postings == 0 or int(sparse_pool) == 0):
            raise InvalidInputError("both candidate stages are disabled; enable the dense or the sparse stage")
        self.dim = int(dim)
        self.faiss_index = faiss_index
        self.nlist = None if nlist is None else int(nlist)
        self.nprobe = int(nprobe)
        self.hnsw_m = int(hnsw_m)
        self.ef_search = int(ef_search)
        self.ef_construction = int(ef_construction)
        self.dense_pool = int(dense_pool)
        self.n_postings = None if n_postings is None else int(n_postings)
        self.sparse_pool = int(sparse_pool)
        self.svd_sample = int(svd_sample)
        self.svd_iter = int(svd_iter)
        if int(rerank_memory) < 0 or int(heavy_min_nnz) < 1:
            raise InvalidInputError("rerank_memory must be >= 0 and heavy_min_nnz >= 1")
        self.rerank_memory = int(rerank_memory)
        self.heavy_min_nnz = int(heavy_min_nnz)
        self.block_size = int(block_size)
        self.random_state = random_state
        if refit_growth is not None and not float(refit_growth) > 1.0:
            raise InvalidInputError(f"refit_growth must be > 1 (or None), got {refit_growth}")
        self.refit_growth = None if refit_growth is None else float(refit_growth)
        self.n_fit_documents_ = 0
        self.V_ = self.B_ = None
        self.faiss_ = None
        self.postings_ = None
        self.singular_values_ = None
        self.nlist_ = None
        self.heavy_rows_ = None
        self.Z_ = None
        self._heavy_pos = None
        self._M = None

    def params(self) -> dict:
        return {k: getattr(self, k) for k in ("dim", "faiss_index", "nlist", "nprobe", "hnsw_m", "ef_search",
                                                 "ef_construction", "dense_pool", "n_postings", "sparse_pool",
                                                 "svd_sample", "svd_iter", "rerank_memory", "heavy_min_nnz", "block_size",
                                                 "random_state", "refit_growth")}

    def default_n_postings(self) -> int:
        """``n_postings`` in use: the parameter, or max(200, n_documents // 1000)."""
        if self.n_postings is not None:
            return self.n_postings
        return max(200, self.n_documents // 1000)

    @property
    def _dense_on(self) -> bool:
        return self.dim > 0

    def _m(self):
        if self._M is None:
            self._M = self.model.M.tocsr()
        return self._M

    # -- build ------------------------------------------------------------------------------
    def fit(self, X, ids=None):
        """Learn the projection, build the FAISS index and the posting lists for corpus ``X``."""
        start = time.perf_counter()
        Xp = prepare_rows(self.model, X, "corpus")
        if Xp.shape[0] == 0:
            raise InvalidInputError("cannot build an index over an empty corpus")
        self._set_corpus(Xp, ids)
        jobs = max(1, int(self.n_jobs or 1))
        faiss = _faiss()
        faiss.omp_set_num_threads(jobs)
        self.postings_ = impact_postings(Xp)
        self.heavy_rows_ = self._choose_heavy_rows(Xp)
        self._heavy_pos = self._positions(self.heavy_rows_)
        self.Z_ = self._heavy_values(Xp, jobs)
        if self._dense_on:
            self.V_, self.B_, self.singular_values_ = fit_projection(
                self.model, Xp, self.dim, self.svd_sample, self.svd_iter, self.random_state)
            D = _embed(Xp, self.B_, jobs)
            self.faiss_ = self._new_faiss(D)
            self.faiss_.add(D)
        self.n_fit_documents_ = Xp.shape[0]
        self.build_seconds_ = time.perf_counter() - start
        return self

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
        M = self._m()
        n = Xp.shape[0]
        row_nnz = np.diff(M.indptr)
        df = np.bincount(Xp.indices, minlength=self.n_features)
        h_max = int(self.rerank_memory // (8 * max(n, 1)))
        eligible = np.flatnonzero((row_nnz >= self.heavy_min_nnz) & (df > 0))
        if h_max <= 0 or eligible.size == 0:
            return np.zeros(0, dtype=np.int64)
        cost = row_nnz[eligible].astype(np.float64) * df[eligible]
        keep = eligible[np.argsort(-cost, kind="stable")[:h_max]]
        # most frequent features first: the heavy features of a query then share few cache lines of Z[c]
        return keep[np.argsort(-df[keep], kind="stable")].astype(np.int64)

    def _positions(self, heavy_rows) -> np.ndarray:
        pos = np.full(self.n_features, -1, dtype=np.int64)
        pos[heavy_rows] = np.arange(heavy_rows.size)
        return pos

    def _heavy_values(self, Xp, n_jobs, block: int = 256) -> np.ndarray:
        """Z[c, t] = (M x_c)_{heavy_rows[t]} = (X M_H^T)[c, t], computed block by block of heavy rows."""
        H = self.heavy_rows_
        Z = np.empty((Xp.shape[0], H.size), dtype=np.float64)
        M = self._m()
        for lo in range(0, H.size, block):
            D = np.ascontiguousarray(M[H[lo:lo + block]].toarray().T)  # d x b
            Z[:, lo:lo + D.shape[1]] = _embed(Xp, D, n_jobs, dtype=np.float64)
        return Z

    def _add(self, Xp):
        X_all = sp.vstack([self.X_, Xp], format="csr")
        self.Z_ = np.vstack([self.Z_, self._heavy_values(Xp, max(1, int(self.n_jobs or 1)))])
        if self._dense_on:
            faiss = _faiss()
            faiss.omp_set_num_threads(max(1, int(self.n_jobs or 1)))
            self.faiss_.add(_embed(Xp, self.B_, max(1, int(self.n_jobs or 1))))
        self.postings_ = impact_postings(X_all)

    # -- query ------------------------------------------------------------------------------
    def _query_rows(self, Qp, k, n_jobs, **options):
        unknown = set(options) - set(_QUERY_OPTIONS)
        if unknown:
            raise InvalidInputError(f"unknown option(s) for an ANN index: {', '.join(sorted(unknown))}; "
                                    f"known: {', '.join(_QUERY_OPTIONS)}")
        n_postings = options.get("n_postings", self.n_postings)
        n_postings = self.default_n_postings() if n_postings is None else int(n_postings)
        sparse_pool = int(options.get("sparse_pool", self.sparse_pool))
        dense_pool = int(options.get("dense_pool", self.dense_pool))
        nprobe = int(options.get("nprobe", self.nprobe))
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
        b = self.block_size
        blocks = [(lo, min(lo + b, nq)) for lo in range(0, nq, b)]
        if sparse_pool > 0:
            P = self.postings_

            def sparse_block(lo, hi):
                Qb = Qp[lo:hi]
                out = np.empty((hi - lo, sparse_pool), dtype=np.int64)
                K.sparse_candidates(Qb.indptr, Qb.indices, Qb.data, P.indptr, P.indices, P.data, n,
                                    n_postings, sparse_pool, out)
                return out

            parts.append(np.vstack(threaded(sparse_block, blocks, n_jobs)))
        cands = np.hstack(parts) if parts else np.full((nq, 0), -1, dtype=np.int64)
        M, X = self._m(), self.X_

        def rerank_block(lo, hi):
            Qb = Qp[lo:hi]
            docs = np.full((hi - lo, k), -1, dtype=np.int64)
            scores = np.full((hi - lo, k), -np.inf)
            K.rerank(Qb.indptr, Qb.indices, Qb.data, M.indptr, M.indices, M.data, self._heavy_pos, self.Z_,
                     X.indptr, X.indices, X.data,
                     np.ascontiguousarray(cands[lo:hi]), self.n_features, k, docs, scores)
            return docs, scores

        results = threaded(rerank_block, blocks, n_jobs)
        return np.vstack([r[0] for r in results]), np.vstack([r[1] for r in results])

    def _dense_candidates(self, Qp, pool, nprobe, ef_search, n_jobs):
        faiss = _faiss()
        faiss.omp_set_num_threads(n_jobs)
        Qv = _embed(Qp, self.V_, n_jobs)
        if self.faiss_index == "hnsw":
            self.faiss_.hnsw.efSearch = max(ef_search, pool)
        else:
            self.faiss_.nprobe = min(nprobe, self.faiss_.nlist)
        _, labels = self.faiss_.search(Qv, pool)
        return labels.astype(np.int64, copy=False)

    # -- storage ----------------------------------------------------------------------------
    def _arrays(self) -> dict:
        arrays = super()._arrays()
        P = self.postings_
        arrays.update({"postings.indptr": np.asarray(P.indptr, np.int64),
                       "postings.indices": np.asarray(P.indices, np.int32),
                       "postings.data": np.asarray(P.data, np.float64),
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
                "n_fit_documents": int(self.n_fit_documents_)}

    def _restore(self, arrays: dict, extra_files: dict, meta: dict, mmap: bool):
        from .exact import _csr_from

        self.postings_ = _csr_from(arrays, "postings", (self.n_features, self.X_.shape[0]))
        self.heavy_rows_ = arrays["heavy.rows"]
        self.Z_ = arrays["heavy.Z"]
        n, h = self.X_.shape[0], self.heavy_rows_.shape[0]
        if (self.heavy_rows_.ndim != 1 or self.Z_.shape != (n, h) or np.unique(self.heavy_rows_).size != h
                or (h and (self.heavy_rows_.min() < 0 or self.heavy_rows_.max() >= self.n_features))):
            from sparsesim.exceptions import FileFormatError

            raise FileFormatError(f"heavy-row arrays have shapes {self.heavy_rows_.shape}, {self.Z_.shape}; "
                                  f"expected (h,) and ({n}, h)")
        self._heavy_pos = self._positions(self.heavy_rows_)
        self.nlist_ = meta["state"].get("nlist_")
        self.n_fit_documents_ = int(meta["state"].get("n_fit_documents", n))  # older files: as stored
        self.build_seconds_ = float(meta["state"].get("build_seconds", 0.0))
        if self._dense_on:
            self.V_ = arrays["projection.V"]
            self.B_ = arrays["projection.B"]
            self.singular_values_ = arrays["projection.singular_values"]
            if self.V_.shape != (self.n_features, self.dim) or self.B_.shape != (self.n_features, self.dim):
                from sparsesim.exceptions import FileFormatError

                raise FileFormatError(f"projection arrays have shape {self.V_.shape}, expected "
                                      f"({self.n_features}, {self.dim})")
            faiss = _faiss()
            path = str(extra_files["faiss.index"])
            try:
                index = faiss.read_index(path, faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY) if mmap \
                    else faiss.read_index(path)
            except RuntimeError as exc:
                from sparsesim.exceptions import FileFormatError

                raise FileFormatError(f"{path}: not a readable FAISS index ({str(exc).splitlines()[0]})") from None
            if index.ntotal != self.X_.shape[0] or index.d != self.dim:
                from sparsesim.exceptions import FileFormatError

                raise FileFormatError(f"{path}: FAISS index holds {index.ntotal} vectors of dimension {index.d}, "
                                      f"expected {self.X_.shape[0]} of dimension {self.dim}")
            self.faiss_ = index
