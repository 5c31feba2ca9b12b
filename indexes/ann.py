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

This module holds the class (parameters, the search setting in use, the public methods); their
work is done by :mod:`~sparsesim.indexes.ann_build` (construction, adding documents),
:mod:`~sparsesim.indexes.ann_calibration` (the calibration grid, recalibration),
:mod:`~sparsesim.indexes.ann_query` (candidates and exact re-ranking) and
:mod:`~sparsesim.indexes.ann_state` (what the index directory stores).
"""

from __future__ import annotations

import numpy as np

from sparsesim.exceptions import InvalidInputError

from . import ann_build, ann_calibration, ann_query, ann_state
from .ann_rerank_w import NarrowW
from .ann_calibration import FALLBACK
from .base import CorpusIndex
from .inputs import SCORE_LIMITS
from .calibration import check_target_recall, remeasure
from .expansion import (embed, expanded_postings, fit_projection, heaps_from_postings, impact_postings,  # noqa: F401
                        light_transpose, postings_from_heaps)

__all__ = ["AnnIndex", "impact_postings", "expanded_postings", "fit_projection"]

_FAISS_KINDS = ("ivf", "hnsw")
_READ_ALLOCATIONS = ("weighted", "threshold", "auto", "uniform")


class AnnIndex(CorpusIndex):
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
        at most ``postings_memory`` bytes (1,420 per list at 47,236 features). A given value is
        used as it is, capped only by a given ``postings_memory``; longer lists let the
        calibration choose a smaller pool (faster queries) at the cost of build memory (8 bytes
        per entry) and disk (3-5 bytes per entry).
    postings_memory : int, optional
        Cap on the expanded postings, counted at 8 bytes per entry (stored compactly at 3-5 bytes
        per entry, :mod:`sparsesim.indexes.ann_postings`). Default 512 MiB; a given value caps a
        given ``postings_per_feature`` too.
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
        keeps the whole index within 1.5x the corpus plus the model (as CSR files, 12 bytes per
        entry) on disk, i.e. 0.95 * (1.5 * (corpus + model) - corpus - the narrow W - postings
        bytes - 8 n), at most 2 GiB (the chosen
        budget is ``rerank_memory_``). A larger budget answers faster (fewer rows of M scattered
        per query; docs/retrieval.md gives measured rates) at 8 n bytes per heavy row.
    heavy_min_nnz : int, default 256
        Rows of M with fewer nonzeros are never precomputed.
    block_size : int, default 256
        Queries per candidate / re-ranking block.
    n_jobs : int, default 1
    random_state : int, default 0
        Seeds the calibration sample, the SVD sample, the randomized SVD and the IVF training.
    read_allocation : {"weighted", "threshold", "auto", "uniform"}, default "weighted"
        How a query's ``n_postings`` x (its features) reads are shared among its features'
        lists: ``"weighted"`` in proportion to |q_i| times the head (largest value) of list i;
        ``"threshold"`` reads every list down to one contribution threshold (the entries with
        |q_i| x score >= tau, tau bisected so the reads stay within the budget: the entries that
        add most to a partial score, whichever list they are in); ``"uniform"``: ``n_postings``
        from every list; each list at most its length. Which holds more of the exact top 10 at
        equal reads depends on the corpus (docs/retrieval.md): weighted on news20 (pool 50, 32
        reads per term: 0.950 against 0.895), threshold on the synthetic RCV1-like corpus (0.985
        against 0.979; it reaches 0.99 with half the reads). ``"auto"``: the calibration measures
        its grid under both weighted and threshold on its selection sample and keeps the allocation
        of the fastest setting meeting the target (weighted when not calibrated);
        ``read_allocation_`` and the calibration record say which. Index files written before an
        allocation was recorded search uniformly; recorded ones keep theirs.
    refit_growth : float or None, default 2.0
        :meth:`add` re-learns everything (:meth:`refit`) once the corpus holds ``refit_growth``
        times the documents the index was learned from; ``None`` never refits on its own.

    Attributes
    ----------
    postings_ : CompactPostings
        Impact-ordered, pruned posting lists of Y = X M^T, with one-byte scores and 2-3 byte
        document ids (:mod:`sparsesim.indexes.ann_postings`).
    postings_model_ : str
        Checksum of the model the postings were built with (a later model can be swapped in by
        :meth:`calibrate` without rebuilding them).
    calibration_ : dict or None
        The calibration record (setting, measured recall, model it was measured with, ...).
    heavy_rows_ : ndarray of int
    Z_ : ndarray (n_documents, n_heavy) float64
    model : BilinearSimilarity
        The similarity served. The index stores its W in a narrow form (16-bit columns, float32
        values, the float64 entries apart: :mod:`sparsesim.indexes.ann_rerank_w`) that queries
        read as it is; a loaded index rebuilds the model's float64 W from it on first access.
    V_, B_ : ndarray (d, dim) float32, only with ``dim > 0``
    faiss_ : faiss.Index or None
    n_fit_documents_ : int
    """

    kind = "ann"
    exact = False
    calibrated = True
    supports_refit = True
    score_limit = SCORE_LIMITS["float32"]  # postings and FAISS vectors are float32

    def __init__(self, model, target_recall=0.95, calibration_size=300, postings_per_feature=None,
                 postings_memory=None, n_postings=None, sparse_pool=None, dim=0, faiss_index="ivf", nlist=None,
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
        self.postings_memory = None if postings_memory is None else int(postings_memory)
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
        self._narrow_w = None  # W in the narrow form, as a loaded index holds it (until ``model`` rebuilds W)

    _PARAMS = ("target_recall", "calibration_size", "postings_per_feature", "postings_memory", "n_postings",
               "sparse_pool", "dim", "faiss_index", "nlist", "nprobe", "hnsw_m", "ef_search", "ef_construction",
               "dense_pool", "svd_sample", "svd_iter", "rerank_memory", "heavy_min_nnz", "block_size",
               "random_state", "refit_growth", "read_allocation")

    def params(self) -> dict:
        return {k: getattr(self, k) for k in self._PARAMS}

    @classmethod
    def _unit_test_params(cls) -> dict:
        return {"calibration_size": 30, "block_size": 8}  # a small calibration sample, several query blocks

    @property
    def _dense_on(self) -> bool:
        return self.dim > 0

    @property
    def model(self):
        """The similarity the index serves (every block of a memory-mapped W checked first; a
        loaded index's W rebuilt from its narrow form, once)."""
        self._verified("model.W.indices", "model.W.data")
        if self._w_pending:
            self._model.W = self._narrow_w.widen()
            self._w_pending = False
        return self._model

    @model.setter
    def model(self, value):
        CorpusIndex.model.fset(self, value)
        self._narrow_w = None
        self._w_pending = False  # whether the model's W is still to be rebuilt from ``_narrow_w``

    def rerank_w(self) -> NarrowW:
        """W in the form the re-ranking kernel reads: the stored narrow form of a loaded index, or
        the model's W held in memory (the scores are the same bits either way)."""
        narrow = self._narrow_w
        return narrow if narrow is not None else NarrowW.of_model(self._model.W)

    def _model_arrays(self) -> dict:
        narrow = NarrowW.split(self.model.W)
        return super()._model_arrays() if narrow is None else narrow.arrays()

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
                value = calibrated.get(name, FALLBACK[name])
            out[name] = int(value)
        if out["n_postings"] and self.postings_length_ is not None:
            out["n_postings"] = min(out["n_postings"], self.postings_length_)
        return out

    def allocation_in_use(self) -> str:
        """The read allocation queries use: the one recorded at build or load (``read_allocation_``;
        under ``"auto"`` the calibration's choice), else the parameter ("auto": weighted)."""
        chosen = getattr(self, "read_allocation_", None)
        if chosen:
            return chosen
        return "weighted" if self.read_allocation == "auto" else self.read_allocation

    def calibration_allocations(self) -> tuple:
        """The read allocations a calibration compares: weighted and threshold under ``"auto"``
        (when the postings stage is on), else the one in use."""
        if self.read_allocation == "auto" and self.n_postings != 0 and self.sparse_pool != 0:
            return ("weighted", "threshold")
        return (self.allocation_in_use(),)

    def default_n_postings(self) -> int:
        """``n_postings`` in use (see :meth:`search_setting`)."""
        return self.search_setting()["n_postings"]

    # -- build (:mod:`sparsesim.indexes.ann_build`) -----------------------------------------
    def _postings_length(self, n: int) -> int:
        return ann_build.postings_length(self, n)

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
        return ann_build.fit(self, X, ids, calibration_queries)

    # -- calibration (:mod:`sparsesim.indexes.ann_calibration`) -----------------------------
    def calibrate(self, queries=None, target_recall=None, model=None, top_k: int = 10, strata=None):
        """(Re)calibrate the search setting without rebuilding the postings or the FAISS stage.

        Parameters
        ----------
        queries : sparse matrix, optional
            Calibration queries, e.g. a query log: half choose the setting, the other half
            certify it (default: two disjoint stratified samples of ``calibration_size``
            held-out corpus documents, see :func:`sparsesim.indexes.calibration.calibrate`).
        target_recall : float, optional
            Default: the index's ``target_recall`` (0.95 if that is None).
        model : BilinearSimilarity, optional
            A retrained model (same features) to serve from now on: the exact re-ranking values
            are recomputed for it, the candidate postings stay those of the model they were
            built with (``postings_model_``), and the calibration measures how well they still
            find the new model's neighbours (it raises the pool sizes as needed).
        top_k : int, default 10
        strata : array-like, optional
            A label per corpus document: the corpus samples take equally many documents from
            each label, and the record gives the recall per label (default: per cluster).

        Returns
        -------
        dict
            The calibration record, also kept in ``calibration_``.
        """
        return ann_calibration.recalibrate(self, queries, target_recall, model, top_k, strata)

    def calibration_hint(self, Qp) -> str | None:
        """Why the target may be out of reach, for the calibration's "not met" warning: the posting
        lists hold the documents with the largest *positive* Y[x, i], so with negative query values
        the documents that score through them (q_i < 0, Y[x, i] < 0) are in no list."""
        negative = float(np.mean(Qp.data < 0)) if Qp.nnz else 0.0
        if negative == 0.0 or self.n_postings == 0:
            return None
        dense = "only the dense stage can find it: build with dim > 0" if not self._dense_on \
            else "only the dense stage can find it"
        return (f"{negative:.0%} of the queries' values are negative, and the posting lists hold the documents "
                f"with the largest positive Y[x, i] = (M x)_i only: a document that scores through negative "
                f"values is in no list ({dense})")

    def calibration_grid(self, top_k: int = 10) -> list:
        """Search settings the calibration measures: families ordered cheapest first (a family
        stops at its first setting that meets the target)."""
        return ann_calibration.calibration_grid(self, top_k)

    # -- growth -----------------------------------------------------------------------------
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

    def _add(self, Xp):
        ann_build.add_documents(self, Xp)

    # -- query (:mod:`sparsesim.indexes.ann_query`) -----------------------------------------
    def _query_rows(self, Qp, k, n_jobs, /, **options):
        return ann_query.query_rows(self, Qp, k, n_jobs, options)

    def _dense_candidates(self, Qp, pool, nprobe, ef_search, n_jobs):
        return ann_query.dense_candidates(self, Qp, pool, nprobe, ef_search, n_jobs)

    def search_metadata(self, **options) -> dict:
        """What answers are computed with: the setting in use (``options`` as passed to
        :meth:`query` override it) and the calibration behind it (JSON-ready; the CLI's
        ``query --json`` prints it)."""
        cal = self.calibration_ or {}
        setting = ann_query.resolved_setting(self, options)  # the query's own setting, checked as it checks it
        return {"kind": self.kind, "setting": setting, "read_allocation": self.allocation_in_use(), "overridden": sorted(k for k, v in options.items() if v is not None),
                "calibrated": bool(cal), "target_recall": cal.get("target_recall"),
                "read_allocations_compared": cal.get("allocations"),
                "calibrated_recall": cal.get("recall"), "calibrated_recall_lower_bound": cal.get("recall_lower_bound"),
                "calibration_queries": cal.get("n_queries"),
                "calibrated_recall_by_stratum": (cal.get("strata") or {}).get("recall"),
                "calibrated_recall_corpus_weighted": cal.get("corpus_weighted"),
                "calibrated_with_model": cal.get("model_checksum"), "model": self.model_checksum()}

    # -- storage (:mod:`sparsesim.indexes.ann_state`) ---------------------------------------
    def _arrays(self) -> dict:
        arrays = super()._arrays()
        arrays.update(ann_state.stored_arrays(self))
        return arrays

    def _extra_files(self) -> dict:
        return ann_state.stored_files(self)

    def _state(self) -> dict:
        return ann_state.manifest_state(self)

    def _restore(self, arrays: dict, extra_files: dict, meta: dict, mmap: bool):
        ann_state.restore(self, arrays, extra_files, meta, mmap)
