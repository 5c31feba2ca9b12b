"""Construction of an :class:`~sparsesim.indexes.ann.AnnIndex`: the expanded postings, the re-ranking
table of heavy rows, the optional FAISS stage, and adding documents to them.

The functions take the index and set its fitted attributes (``postings_``, ``heavy_rows_``, ``Z_``,
``faiss_``, ...); the index class calls them from ``fit``, ``calibrate`` and ``_add``.
"""

from __future__ import annotations

import math
import time

import numpy as np

from sparsesim.csr_rows import take_rows
from sparsesim.exceptions import InvalidInputError, MemoryBudgetError
from sparsesim.memory import available_memory, format_bytes

from .ann_postings import CompactPostings
from .ann_rerank_w import NarrowW
from .base import prepare_rows
from .expansion import embed, expanded_postings, fit_projection, heaps_from_postings, light_transpose, postings_from_heaps


def faiss_module():
    """The ``faiss`` module, imported on first use (only the dense stage needs it)."""
    import faiss

    return faiss


DEFAULT_POSTINGS_MEMORY = 512 << 20


def postings_length(index, n: int) -> int:
    """Length of each stored expanded posting list for a corpus of ``n`` documents.

    ``postings_per_feature`` when given (capped only by a given ``postings_memory``), otherwise
    ``max(512, n // 200)`` capped by ``postings_memory`` (default 512 MiB at 8 bytes per entry).
    """
    budget = index.postings_memory if index.postings_memory is not None else DEFAULT_POSTINGS_MEMORY
    cap = max(1, budget // (8 * index.n_features))
    if index.postings_per_feature is not None:
        L = index.postings_per_feature
        return int(max(1, min(L, n) if index.postings_memory is None else min(L, cap, n)))
    return int(max(1, min(max(512, n // 200), cap, n)))


def check_postings_fit(index) -> None:
    """Raise :class:`MemoryBudgetError` before building posting lists whose heaps (8 bytes per
    entry) and compact form (at most 6) would not fit the memory available now."""
    if index.n_postings == 0 or index.sparse_pool == 0:
        return
    needed = 14 * index.n_features * index.postings_length_
    available = available_memory()
    if needed > available:
        raise MemoryBudgetError(
            f"the expanded postings ({index.postings_length_:,} entries for each of {index.n_features:,} features) "
            f"need {format_bytes(needed)} while building, more than the {format_bytes(available)} available; give a "
            f"smaller postings_per_feature or postings_memory, or build block-wise within a memory budget from a "
            f"corpus on disk (sparsesim.indexes.ann_blockwise.build_ann_blockwise)")


def fit(index, X, ids=None, calibration_queries=None):
    """Build the expanded postings (and the FAISS stage when ``dim > 0``) of ``index`` for corpus
    ``X``, then calibrate its search setting (see :meth:`AnnIndex.fit`)."""
    start = time.perf_counter()
    Xp = prepare_rows(index.model, X, "corpus", score_limit=index.score_limit)
    if Xp.shape[0] == 0:
        raise InvalidInputError("cannot build an index over an empty corpus")
    index._set_corpus(Xp, ids)
    jobs = max(1, int(index.n_jobs or 1))
    index.postings_length_ = index._postings_length(Xp.shape[0])
    check_postings_fit(index)
    set_heavy_rows(index, Xp, jobs)
    phases = {"heavy_values": time.perf_counter() - start}
    if index.n_postings == 0 or index.sparse_pool == 0:  # the dense stage alone: no postings
        index.postings_length_ = 1
        index.postings_ = CompactPostings.empty(index.n_features, Xp.shape[0])
    else:
        MT_light = light_transpose(index.model.W, index.heavy_rows_)
        heaps = expanded_postings(Xp, MT_light, index.heavy_rows_, index.Z_, index.postings_length_, jobs,
                                  identity=index.model.identity)
        del MT_light
        index.postings_ = CompactPostings.from_csr(postings_from_heaps(*heaps, Xp.shape[0]))
        del heaps
    top_up_heavy_rows(index, Xp, jobs)
    phases["postings"] = time.perf_counter() - start - sum(phases.values())
    index.postings_model_ = index.model_checksum()
    if index._dense_on:
        faiss = faiss_module()
        faiss.omp_set_num_threads(jobs)
        index.V_, index.B_, index.singular_values_ = fit_projection(
            index.model, Xp, index.dim, index.svd_sample, index.svd_iter, index.random_state)
        D = embed(Xp, index.B_, jobs)
        index.faiss_ = new_faiss(index, D)
        index.faiss_.add(D)
        del D
    index.n_fit_documents_ = Xp.shape[0]
    index.calibration_ = None
    index.read_allocation_ = None  # ("auto": until the calibration chooses)
    phases["dense_stage"] = time.perf_counter() - start - sum(phases.values())
    if index.target_recall is not None and Xp.shape[0] > 11:
        index.calibrate(calibration_queries)
    index.build_seconds_ = time.perf_counter() - start
    phases["calibration"] = index.build_seconds_ - sum(phases.values())
    index.build_phases_ = phases  # seconds per build phase (this process only; not saved)
    return index


def new_faiss(index, D):
    """An empty (IVF: trained) FAISS index for the projected documents ``D``; sets ``index.nlist_``."""
    faiss = faiss_module()
    n, dim = D.shape
    if index.faiss_index == "hnsw":
        out = faiss.IndexHNSWFlat(dim, index.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        out.hnsw.efConstruction = index.ef_construction
        index.nlist_ = None
        return out
    nlist = index.nlist if index.nlist is not None else int(round(4 * math.sqrt(n)))
    nlist = max(1, min(nlist, n // 39 if n >= 39 else 1))
    index.nlist_ = nlist
    quantizer = faiss.IndexFlatIP(dim)
    out = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
    out.cp.seed = int(np.random.default_rng(index.random_state).integers(2**31 - 1))
    rng = np.random.default_rng(index.random_state)
    n_train = min(n, 64 * nlist)
    train = D[np.sort(rng.choice(n, size=n_train, replace=False))] if n_train < n else D
    out.train(np.ascontiguousarray(train))
    return out


# -- exact re-ranking: heavy rows of M precomputed per document -------------------------------
def set_heavy_rows(index, Xp, n_jobs):
    """Choose the heavy rows of the index's model for corpus ``Xp`` and precompute their values
    (``rerank_memory_``, ``heavy_rows_``, ``_heavy_pos``, ``Z_``)."""
    index.rerank_memory_ = rerank_budget(index, Xp)
    index.heavy_rows_ = choose_heavy_rows(index, Xp)
    index._heavy_pos = heavy_positions(index, index.heavy_rows_)
    index.Z_ = heavy_values(index, Xp, n_jobs)


def choose_heavy_rows(index, Xp, df=None) -> np.ndarray:
    """Rows i of M whose scatter would dominate q M: the most expensive by nnz(M_i) x df_i
    (``df``: the corpus's document frequencies, counted from ``Xp`` when not given).

    For these rows the values (M x)_i of every document are precomputed (Z, n x h float64,
    at most ``rerank_memory`` bytes), so re-ranking reads one number per heavy query feature
    and candidate instead of scattering a row with thousands of entries.
    """
    W = index.model.W
    n = Xp.shape[0]
    row_nnz = np.diff(W.indptr)  # nnz of the rows of M = I + W: plus a missing diagonal entry
    if index.model.identity:
        row_nnz = row_nnz + (W.diagonal() == 0)
    if df is None:
        df = np.bincount(Xp.indices, minlength=index.n_features)
    h_max = int(index.rerank_memory_ // (8 * max(n, 1)))
    eligible = np.flatnonzero((row_nnz >= index.heavy_min_nnz) & (df > 0))
    if h_max <= 0 or eligible.size == 0:
        return np.zeros(0, dtype=np.int64)
    cost = row_nnz[eligible].astype(np.float64) * df[eligible]
    keep = eligible[np.argsort(-cost, kind="stable")[:h_max]]
    # most frequent features first: the heavy features of a query then share few cache lines of Z[c]
    return keep[np.argsort(-df[keep], kind="stable")].astype(np.int64)


#: the default re-ranking budget keeps the whole index within this many times (corpus + model) on
#: disk, corpus and model counted as CSR files (12 bytes per entry). With the model's W stored
#: narrow (:mod:`.ann_rerank_w`, 6 bytes per entry) the 1.5x index answers at about the speed
#: of the 3x index with a float64 W (docs/retrieval.md, "Compact index").
DISK_RATIO = 1.5


def top_up_heavy_rows(index, Xp, n_jobs):
    """Give Z the bytes the budget held back for the postings but the built lists do not take
    (the budget counts every list at full length, ``rerank_budget``): with the default budget,
    add the next heavy rows (their columns of Z computed now) while the index stays within
    ``DISK_RATIO`` x (corpus + model). The postings do not depend on which rows are heavy."""
    if index.rerank_memory is not None or index.postings_ is None:
        return
    budget = rerank_budget(index, Xp, postings_bytes=index.postings_.nbytes, margin=0.99)
    n = Xp.shape[0]
    old = index.heavy_rows_
    if budget // (8 * max(n, 1)) <= old.size:
        return
    index.rerank_memory_ = budget
    rows = choose_heavy_rows(index, Xp)
    new = rows[~np.isin(rows, old)]
    if new.size == 0:
        return
    Z = np.empty((n, rows.size), dtype=np.float64)
    at = heavy_positions(index, rows)
    Z[:, at[old]] = index.Z_
    index.heavy_rows_ = new
    Z[:, at[new]] = heavy_values(index, Xp, n_jobs)
    index.heavy_rows_ = rows
    index._heavy_pos = at
    index.Z_ = Z


def rerank_budget(index, Xp, postings_bytes=None, margin: float = 0.95) -> int:
    """``rerank_memory``, or the bytes Z may take so that the index (the corpus, the model's W as
    the index stores it, the compact postings -- ``postings_bytes``, or their upper bound before
    they are built --, the ids and Z) stays within ``margin`` x ``DISK_RATIO`` x (corpus + model)
    on disk, at most 2 GiB."""
    if index.rerank_memory is not None:
        return index.rerank_memory
    n, d = Xp.shape
    W = index.model.W
    corpus = 12 * Xp.nnz + 8 * (n + 1)
    model = 12 * W.nnz + 8 * (d + 1)
    stored = corpus + NarrowW.stored_bytes(W)
    if postings_bytes is None:  # before the lists are built: an upper bound (lists can be shorter)
        postings_bytes = entry_bytes(n) * index.postings_length_ * d + 16 * d
    return int(max(0, min(2 << 30, margin * (DISK_RATIO * (corpus + model) - stored - postings_bytes - 8 * n))))


def entry_bytes(n: int) -> int:
    """Bytes per stored posting entry (:mod:`~sparsesim.indexes.ann_postings`) for ``n`` documents."""
    return 3 if n <= 1 << 16 else (4 if n <= 1 << 24 else 5)


def heavy_positions(index, heavy_rows) -> np.ndarray:
    """Position of every feature among ``heavy_rows`` (-1 for a light row)."""
    pos = np.full(index.n_features, -1, dtype=np.int64)
    pos[heavy_rows] = np.arange(heavy_rows.size)
    return pos


def heavy_values(index, Xp, n_jobs, block: int = 256) -> np.ndarray:
    """Z[c, t] = (M x_c)_{heavy_rows[t]} = (X M_H^T)[c, t], computed block by block of heavy rows."""
    H = index.heavy_rows_
    Z = np.empty((Xp.shape[0], H.size), dtype=np.float64)
    W = index.model.W
    for lo in range(0, H.size, block):
        D = np.ascontiguousarray(take_rows(W, H[lo:lo + block]).toarray().T)  # d x b: rows of W, not of I + W
        if index.model.identity:
            D[H[lo:lo + block], np.arange(D.shape[1])] += 1.0
        Z[:, lo:lo + D.shape[1]] = embed(Xp, D, n_jobs, dtype=np.float64)
    return Z


def add_documents(index, Xp):
    """Extend the postings, ``Z_`` and the FAISS stage of ``index`` by the prepared rows ``Xp``
    (before the corpus itself is extended)."""
    jobs = max(1, int(index.n_jobs or 1))
    n_old = index.X_.shape[0]
    Z_new = heavy_values(index, Xp, jobs)
    if index.postings_model_ != index.model_checksum():
        raise InvalidInputError("the index's postings were built with an earlier model; refit() it before "
                                "adding documents")
    if index.n_postings == 0 or index.sparse_pool == 0:
        index.postings_ = CompactPostings.empty(index.n_features, n_old + Xp.shape[0])
    else:
        # the list length a fresh build over all documents would use (it grows with the corpus)
        index.postings_length_ = max(index.postings_length_, index._postings_length(n_old + Xp.shape[0]))
        old = index.postings_
        heaps = heaps_from_postings(old.to_csr(), index.postings_length_)
        MT_light = light_transpose(index.model.W, index.heavy_rows_)
        heaps = expanded_postings(Xp, MT_light, index.heavy_rows_, Z_new, index.postings_length_, jobs,
                                  heaps=heaps, doc0=n_old, identity=index.model.identity)
        # the old entries' scores are decoded ones: their error bound carries over
        index.postings_ = CompactPostings.from_csr(postings_from_heaps(*heaps, n_old + Xp.shape[0]),
                                                   prior_error=old.error_)
    index.Z_ = np.vstack([index.Z_, Z_new])
    if index._dense_on:
        faiss = faiss_module()
        faiss.omp_set_num_threads(jobs)
        index.faiss_.add(embed(Xp, index.B_, jobs))
