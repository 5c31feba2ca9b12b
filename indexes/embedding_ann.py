"""Approximate top-k under an :class:`~sparsesim.embedding.EmbeddingSimilarity`: FAISS over the
embeddings (plus sparse postings for the identity part), exact re-ranking.

Candidates of a query come from

1. **FAISS** over the documents' embeddings (inner product; IVF-flat by default, or HNSW):
   the ``dense_pool`` documents with the largest <e(q), e(x)>, visiting ``nprobe`` IVF lists;
2. when ``identity_weight`` alpha > 0, **posting lists of the sparse corpus** n(x), impact
   ordered and pruned to the ``postings_per_feature`` heaviest documents per feature: a query
   reads ``n_postings`` entries per term on average (shared among its terms by |q_i| times the
   head of each list) and keeps the ``sparse_pool`` documents of largest partial dot product.

Every candidate is scored exactly (:meth:`EmbeddingIndex.rerank`), so only the membership of the
top k can be approximate; with every IVF list visited (``nprobe`` = ``nlist_``) and a pool of at
least k, the answer is the exact index's. The search setting is calibrated at build time for
``target_recall`` (the fastest setting whose recall@10 lower bound meets it on held-out corpus
documents, :func:`sparsesim.indexes.calibration.calibrate`).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sparsesim.csr_rows import row_arrays, row_range
from sparsesim.exceptions import FileFormatError, InvalidInputError

from . import small_batch
from .ann_build import faiss_module, new_faiss
from .ann_query import ensure_postings_read, resolved_setting
from .base import kernels, query_scratch, threaded
from .calibration import calibrate, check_record, check_target_recall
from .embedding_index import EmbeddedRows, EmbeddingIndex
from .expansion import impact_postings

__all__ = ["EmbeddingAnnIndex"]

_QUERY_OPTIONS = ("nprobe", "dense_pool", "n_postings", "sparse_pool", "ef_search")
_FALLBACK = {"nprobe": 16, "dense_pool": 100, "n_postings": 256, "sparse_pool": 100}


def pruned_postings(Xp: sp.csr_matrix, length: int) -> sp.csr_matrix:
    """Posting lists of ``Xp`` (features x documents), impact-ordered, each cut to its ``length``
    largest values, float32."""
    P = impact_postings(Xp)
    counts = np.minimum(np.diff(P.indptr), length)
    keep = np.repeat(P.indptr[:-1], counts) + (np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts,
                                                                                         counts))
    out = sp.csr_matrix((P.shape[0], P.shape[1]), dtype=np.float32)
    out.indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    out.indices = np.ascontiguousarray(P.indices[keep]).astype(np.int32)
    out.data = np.ascontiguousarray(P.data[keep]).astype(np.float32)
    return out


class EmbeddingAnnIndex(EmbeddingIndex):
    """Approximate top-k under an embedding similarity (see the module docstring).

    Parameters
    ----------
    model : EmbeddingSimilarity
    target_recall : float or None, default 0.95
        Recall@10 the search setting is calibrated for at build time; None: use the given
        parameters (or their fallbacks: nprobe 16, dense_pool 100, n_postings 256, sparse_pool 100).
    calibration_size : int, default 300
        Corpus documents sampled as held-out calibration queries.
    faiss_index : {"ivf", "hnsw"}, default "ivf"
    nlist : int, optional
        IVF lists (default ``4 * sqrt(n)``, at most n / 39).
    nprobe, dense_pool : int, optional
        IVF lists visited and FAISS candidates per query (calibrated when not given).
    hnsw_m, ef_search, ef_construction : int, default 32, 128, 200
    postings_per_feature : int, optional
        Length of each stored posting list of the sparse corpus (alpha > 0 only; default
        ``max(512, n_documents // 200)``).
    n_postings, sparse_pool : int, optional
        Posting entries read per query term on average, candidates kept from them (calibrated
        when not given; ``n_postings=0`` turns the sparse stage off).
    block_size, chunk_size, n_jobs
        As :class:`~sparsesim.indexes.embedding_index.EmbeddingIndex`.
    random_state : int, default 0
        Seeds the calibration sample and the IVF training.
    """

    kind = "embedding-ann"
    exact = False
    calibrated = True

    @classmethod
    def _unit_test_params(cls) -> dict:
        return {"block_size": 8, "chunk_size": 16, "calibration_size": 30, "nlist": 2}

    def __init__(self, model, target_recall=0.95, calibration_size=300, faiss_index="ivf", nlist=None, nprobe=None,
                 dense_pool=None, hnsw_m=32, ef_search=128, ef_construction=200, postings_per_feature=None,
                 n_postings=None, sparse_pool=None, block_size=256, chunk_size=65536, n_jobs=1, random_state=0):
        super().__init__(model, block_size=block_size, chunk_size=chunk_size, n_jobs=n_jobs)
        if faiss_index not in ("ivf", "hnsw"):
            raise InvalidInputError(f"faiss_index must be 'ivf' or 'hnsw', got {faiss_index!r}")
        for name, value in (("nlist", nlist), ("nprobe", nprobe), ("hnsw_m", hnsw_m), ("ef_search", ef_search),
                            ("ef_construction", ef_construction), ("postings_per_feature", postings_per_feature),
                            ("calibration_size", calibration_size)):
            if value is not None and int(value) < 1:
                raise InvalidInputError(f"{name} must be >= 1, got {value}")
        for name, value in (("dense_pool", dense_pool), ("n_postings", n_postings), ("sparse_pool", sparse_pool)):
            if value is not None and int(value) < 0:
                raise InvalidInputError(f"{name} must be >= 0, got {value}")
        self.target_recall = check_target_recall(target_recall)
        self.calibration_size = int(calibration_size)
        self.faiss_index = faiss_index
        self.nlist = None if nlist is None else int(nlist)
        self.nprobe = None if nprobe is None else int(nprobe)
        self.dense_pool = None if dense_pool is None else int(dense_pool)
        self.hnsw_m, self.ef_search, self.ef_construction = int(hnsw_m), int(ef_search), int(ef_construction)
        self.postings_per_feature = None if postings_per_feature is None else int(postings_per_feature)
        self.n_postings = None if n_postings is None else int(n_postings)
        self.sparse_pool = None if sparse_pool is None else int(sparse_pool)
        self.random_state = random_state
        self.faiss_ = None
        self.nlist_ = None
        self.calibration_ = None
        self.n_fit_documents_ = 0
        self.postings_length_ = None

    def params(self) -> dict:
        return {"target_recall": self.target_recall, "calibration_size": self.calibration_size,
                "faiss_index": self.faiss_index, "nlist": self.nlist, "nprobe": self.nprobe,
                "dense_pool": self.dense_pool, "hnsw_m": self.hnsw_m, "ef_search": self.ef_search,
                "ef_construction": self.ef_construction, "postings_per_feature": self.postings_per_feature,
                "n_postings": self.n_postings, "sparse_pool": self.sparse_pool, "block_size": self.block_size,
                "chunk_size": self.chunk_size, "random_state": self.random_state}

    @property
    def sparse_candidates_on(self) -> bool:
        """Whether the sparse postings give candidates (an identity part of positive weight)."""
        return self._model.identity_weight > 0.0

    # -- build ------------------------------------------------------------------------------
    def _fit_more(self, Xp, calibration_queries=None):
        if Xp.shape[0] == 0:
            raise InvalidInputError("an ann index needs at least one document (its FAISS lists are learned from them)")
        self._build_faiss()
        if self.sparse_candidates_on:
            self.postings_length_ = self.postings_per_feature or max(512, Xp.shape[0] // 200)
            self.postings_ = pruned_postings(Xp, self.postings_length_)
        self.n_fit_documents_ = Xp.shape[0]
        self.calibration_ = None
        if self.target_recall is not None and Xp.shape[0] > 11:
            self.calibrate(calibration_queries)

    def _build_faiss(self):
        faiss = faiss_module()
        faiss.omp_set_num_threads(max(1, int(self.n_jobs or 1)))
        E = np.ascontiguousarray(self._E, dtype=np.float32)
        self.faiss_ = new_faiss(self, E)
        self.faiss_.add(E)

    def _add_more(self, Xp, E_new):
        self.faiss_.add(np.ascontiguousarray(E_new, dtype=np.float32))
        if self.sparse_candidates_on:  # the lists as a build over the grown corpus would cut them
            X = sp.vstack([self.X_, Xp], format="csr")
            self.postings_ = pruned_postings(X, self.postings_length_)

    def add(self, X_new, ids=None):
        """Add documents: appended to FAISS (IVF lists fixed) and to the postings; the stored
        calibration record is measured again on the grown index (setting kept)."""
        before = self.n_documents
        super().add(X_new, ids)
        if self.calibration_ is not None and self.n_documents != before and self.n_documents > 11:
            from .calibration import remeasure

            self.calibration_ = remeasure(self, self.calibration_, self.calibration_size, self.random_state,
                                          max(1, int(self.n_jobs or 1)))
        return self

    # -- search setting and calibration -----------------------------------------------------
    def search_setting(self) -> dict:
        """The setting queries use: explicit parameters, else the calibrated ones, else fallbacks."""
        calibrated = (self.calibration_ or {}).get("setting", {})
        out = {}
        for name in ("nprobe", "dense_pool", "n_postings", "sparse_pool"):
            given = getattr(self, name)
            out[name] = given if given is not None else int(calibrated.get(name, _FALLBACK[name]))
        return out

    def calibration_grid(self, top_k: int = 10) -> list:
        """Families of settings, cheapest first within each: growing ``nprobe`` (IVF) at a fixed
        FAISS pool and sparse-stage setting."""
        n = self.n_documents
        probes = [1]
        if self.faiss_index == "ivf":
            while probes[-1] < self.nlist_:
                probes.append(min(2 * probes[-1], self.nlist_))
        pools = sorted({min(n, p) for p in (2 * top_k, 5 * top_k, 20 * top_k)})
        sparse = [(0, 0)] + ([(128, 50)] if self.sparse_candidates_on else [])
        families = []
        for pool in pools:
            for n_postings, sparse_pool in sparse:
                families.append([{"nprobe": p, "dense_pool": pool, "n_postings": n_postings,
                                  "sparse_pool": sparse_pool} for p in probes])
        return families

    def calibrate(self, queries=None, target_recall=None, model=None, top_k: int = 10, strata=None) -> dict:
        """Measure the search settings on held-out corpus documents (or ``queries``) and keep the
        fastest that meets the target recall (see :func:`sparsesim.indexes.calibration.calibrate`;
        ``strata``: a label per corpus document to stratify the held-out samples by)."""
        if model is not None:
            raise InvalidInputError("an embedding index is calibrated for its own model; build a new index for "
                                    "another model")
        target = check_target_recall(target_recall) or self.target_recall or 0.95
        record = calibrate(self, queries, target_recall=target, top_k=top_k, n_queries=self.calibration_size,
                           random_state=self.random_state, n_jobs=max(1, int(self.n_jobs or 1)), strata=strata)
        self.calibration_ = record
        return record

    def search_metadata(self, **options) -> dict:
        """What ``query --json`` reports about the search: the setting, the calibrated recall."""
        setting = self._setting(options)  # the query's own setting, checked as it checks it
        record = self.calibration_ or {}
        return {"kind": self.kind, "setting": setting,
                "overridden": sorted(k for k, v in options.items() if v is not None),
                "calibrated_recall": record.get("recall"), "target_recall": record.get("target_recall")}

    def _setting(self, options) -> dict:
        return resolved_setting(self, options, _QUERY_OPTIONS, "an embedding ann index")

    # -- query ------------------------------------------------------------------------------
    def _query_rows(self, Qe: EmbeddedRows, k, n_jobs, /, **options):
        setting = self._setting(options)
        ef_search = setting.get("ef_search", self.ef_search)
        n, nq = self.n_documents, Qe.shape[0]
        parts = []
        pool = min(setting["dense_pool"], n)
        if pool > 0:
            faiss = faiss_module()
            faiss.omp_set_num_threads(n_jobs)
            if self.faiss_index == "hnsw":
                self.faiss_.hnsw.efSearch = max(ef_search, pool)
            else:
                self.faiss_.nprobe = min(setting["nprobe"], self.faiss_.nlist)
            _, labels = self.faiss_.search(np.ascontiguousarray(Qe.E, dtype=np.float32), pool)
            parts.append(labels.astype(np.int64, copy=False))
        sparse_pool = min(setting["sparse_pool"], n) if self.sparse_candidates_on and setting["n_postings"] else 0
        if sparse_pool > 0:
            parts.append(self._sparse_candidates(Qe.X, setting["n_postings"], sparse_pool))
        cands = np.hstack(parts) if parts else np.full((nq, 0), -1, dtype=np.int64)
        b = max(1, min(self.block_size, -(-nq // max(1, n_jobs))))
        results = threaded(lambda lo, hi: self.rerank(Qe.rows(lo, hi), cands[lo:hi], k),
                           [(lo, min(lo + b, nq)) for lo in range(0, nq, b)], n_jobs)
        return np.vstack([r[0] for r in results]), np.vstack([r[1] for r in results])

    def _sparse_candidates(self, Qx, n_postings: int, pool: int) -> np.ndarray:
        P, n = self._postings, self.n_documents
        q_ptr, q_idx, q_val = row_arrays(Qx, 0, Qx.shape[0])
        if any(g.pending for g in self._guards.values()):  # memory-mapped: the list prefixes read
            ensure_postings_read(self, q_ptr, q_idx, q_val, n_postings, True)
        if small_batch.take(Qx.shape[0]):
            return small_batch.sparse_candidates(row_range(Qx, 0, Qx.shape[0]), P, n, n_postings, pool, True)
        out = np.empty((Qx.shape[0], pool), dtype=np.int64)
        kernels().sparse_candidates(q_ptr, q_idx, q_val, P.indptr, P.indices, P.data, n_postings, True, pool, out,
                                    *query_scratch.sparse(n))
        return out

    # -- load-time checks -------------------------------------------------------------------
    def verify_derived_arrays(self, rng, sample: int = 4096) -> None:
        """The embedding checks of :class:`EmbeddingIndex`, and the posting lists: impact order
        within each list, and ``sample`` random entries equal to the stored corpus's values."""
        super().verify_derived_arrays(rng, sample)
        P = self.postings_ if self.sparse_candidates_on else None
        if P is None or P.nnz == 0:
            return
        step = np.diff(P.data)
        boundary = np.zeros(step.shape, dtype=bool)
        ends = P.indptr[1:-1] - 1
        boundary[ends[(ends >= 0) & (ends < step.size)]] = True
        if np.any((step > 0) & ~boundary):
            raise FileFormatError("the index's posting lists are not impact-ordered; the file was altered")
        entries = np.sort(rng.choice(P.nnz, size=min(sample, P.nnz), replace=False))
        features = np.searchsorted(P.indptr, entries, side="right") - 1
        docs = P.indices[entries].astype(np.int64)
        want = np.asarray(self.X_[docs, features]).ravel().astype(np.float32)
        if not np.array_equal(want, P.data[entries]):
            raise FileFormatError("the index's posting values do not match the stored corpus; the file was altered")

    # -- storage ----------------------------------------------------------------------------
    def _arrays(self) -> dict:
        arrays = super()._arrays()
        if self.sparse_candidates_on:
            P = self.postings_
            arrays.update({"postings.indptr": np.asarray(P.indptr, np.int64),
                           "postings.indices": np.asarray(P.indices, np.int32),
                           "postings.data": np.asarray(P.data, np.float32)})
        return arrays

    def _extra_files(self) -> dict:
        faiss = faiss_module()
        return {"faiss.index": lambda path: faiss.write_index(self.faiss_, str(path))}

    def _state(self) -> dict:
        return {"build_seconds": self.build_seconds_, "nlist_": self.nlist_, "calibration": self.calibration_,
                "n_fit_documents": self.n_fit_documents_, "postings_length": self.postings_length_}

    def _restore(self, arrays: dict, extra_files: dict, meta: dict, mmap: bool):
        state = meta["state"]
        self.build_seconds_ = float(state.get("build_seconds") or 0.0)
        self.nlist_ = state.get("nlist_")
        self.n_fit_documents_ = int(state.get("n_fit_documents") or 0)
        self.postings_length_ = state.get("postings_length")
        if self.sparse_candidates_on:
            if self.postings_length_ is None:
                raise FileFormatError("the index lacks its postings length")
            self._postings = sp.csr_matrix((self.n_features, self.n_documents), dtype=np.float32)
            self._postings.indptr = arrays["postings.indptr"]
            self._postings.indices = arrays["postings.indices"]
            self._postings.data = arrays["postings.data"]
        record = state.get("calibration")
        self.calibration_ = None if record is None else check_record(record, "the index's calibration record")
        if self.faiss_index == "ivf" and self.nlist_ is None:
            raise FileFormatError("the index lacks nlist_ for its IVF structure")
        faiss = faiss_module()
        path = str(extra_files["faiss.index"])
        try:
            self.faiss_ = faiss.read_index(path, faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY) if mmap \
                else faiss.read_index(path)
        except RuntimeError as exc:
            raise FileFormatError(f"{path}: not a readable FAISS index ({str(exc).splitlines()[0][:200]})") from None
        if self.faiss_index == "ivf" and getattr(faiss.downcast_index(self.faiss_), "nlist", None) != self.nlist_:
            raise FileFormatError(f"{path}: FAISS index has another number of lists than the manifest's nlist_")
