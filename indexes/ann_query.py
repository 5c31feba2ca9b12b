"""The query path of an :class:`~sparsesim.indexes.ann.AnnIndex`: candidates from the expanded
postings (and the FAISS stage), their exact re-ranking, and the block checks of a memory-mapped
index before a kernel reads its rows.
"""

from __future__ import annotations

import numpy as np

from sparsesim.csr_rows import row_arrays, row_range
from sparsesim.exceptions import FileFormatError, InvalidInputError
from sparsesim.validation import bounded

from . import small_batch
from .ann_build import faiss_module
from .base import kernels, query_scratch, threaded
from .expansion import embed

QUERY_OPTIONS = ("n_postings", "sparse_pool", "dense_pool", "nprobe", "ef_search")


def resolved_setting(index, options, names: tuple = QUERY_OPTIONS, what: str = "an ANN index") -> dict:
    """The search setting of one call: the index's :meth:`~sparsesim.indexes.ann.AnnIndex.search_setting`
    with the given ``options`` (``QUERY_OPTIONS``; ``None`` values ignored) over it, checked once.

    Used by the query and by :meth:`~sparsesim.indexes.ann.AnnIndex.search_metadata`, so the two
    report and use the same numbers (``names``/``what``: another kind's options, e.g. the
    embedding ann index's). The last checked setting is kept on the index with what it
    was made from: the same options over the same index setting (``query --json`` asks for the
    report, then queries) are not checked again.

    Raises
    ------
    InvalidInputError
        An unknown option name, a value that is not a number, a pool size or ``n_postings`` below
        0, an ``nprobe`` or ``ef_search`` below 1.
    """
    base = index.search_setting()
    key = _setting_key(base, options)
    memo = index.__dict__.get("_setting_memo")
    if key is not None and memo is not None and memo[0] == key:
        return dict(memo[1])
    setting = checked_setting(index, base, options, names, what)
    if key is not None:
        index.__dict__["_setting_memo"] = (key, dict(setting))
    return setting


def _setting_key(base: dict, options) -> tuple | None:
    """What a checked setting is made from, hashable (None when an option value is not)."""
    try:
        key = (tuple(sorted(base.items())), tuple(sorted((k, type(v).__name__, v) for k, v in options.items())))
        hash(key)
    except TypeError:
        return None
    return key


def checked_setting(index, base: dict, options, names: tuple = QUERY_OPTIONS, what: str = "an ANN index") -> dict:
    """``base`` (the index's setting) with ``options`` over it: names, integer values and ranges
    checked (see :func:`resolved_setting`)."""
    unknown = set(options) - set(names)
    if unknown:
        raise InvalidInputError(f"unknown option(s) for {what}: {', '.join(sorted(unknown))}; "
                                f"known: {', '.join(names)}")
    setting = dict(base)
    for name in names:
        if options.get(name) is not None:
            try:
                setting[name] = int(options[name])
            except (TypeError, ValueError, OverflowError):
                raise InvalidInputError(f"{name} must be an integer, got {bounded(repr(options[name]), 40)}") from None
    if min(setting.get("n_postings", 0), setting.get("sparse_pool", 0), setting.get("dense_pool", 0)) < 0 \
            or min(setting.get("nprobe", 1), setting.get("ef_search", index.ef_search)) < 1:
        raise InvalidInputError("pool sizes and n_postings must be >= 0, nprobe and ef_search >= 1")
    return setting


def query_rows(index, Qp, k, n_jobs, options):
    """Row numbers and exact scores of the approximate top ``k`` of the prepared queries ``Qp``
    (``options``: search-time overrides, see ``QUERY_OPTIONS``)."""
    setting = resolved_setting(index, options)
    n_postings, sparse_pool = setting["n_postings"], setting["sparse_pool"]
    dense_pool, nprobe = setting.get("dense_pool", 0), setting.get("nprobe", 1)
    ef_search = setting.get("ef_search", index.ef_search)
    n = index.n_documents
    sparse_pool = min(sparse_pool, n) if n_postings > 0 else 0
    dense_pool = min(dense_pool, n) if index._dense_on else 0
    nq = Qp.shape[0]
    parts = []
    if dense_pool > 0:
        parts.append(dense_candidates(index, Qp, dense_pool, nprobe, ef_search, n_jobs))
    # at most block_size queries per block, and at least one block per thread
    b = max(1, min(index.block_size, -(-nq // max(1, n_jobs))))
    blocks = [(lo, min(lo + b, nq)) for lo in range(0, nq, b)]
    guarded = any(g.pending for g in index._guards.values())
    # the first few queries of a process: numpy, the same answers without loading numba
    few = small_batch.take(nq)
    P = index._postings
    weighted = allocation_code(index.allocation_in_use())
    dense_cands = parts[0] if parts else None  # FAISS answers the whole batch at once
    model = index._model
    W, X, Z = index.rerank_w(), index._X, index._Z  # W itself: I + W is never formed at query time

    def sparse_block(lo, hi, q_ptr, q_idx, q_val):
        if guarded:  # memory-mapped: check the blocks of the list prefixes read below
            ensure_postings_read(index, q_ptr, q_idx, q_val, n_postings, weighted)
        if few:
            return small_batch.sparse_candidates(row_range(Qp, lo, hi), P, n, n_postings, sparse_pool, weighted)
        out = np.empty((hi - lo, sparse_pool), dtype=np.int64)
        bad = compact_kernels().compact_sparse_candidates(q_ptr, q_idx, q_val, *P.kernel_args(), n, n_postings,
                                                          weighted, sparse_pool, out, *query_scratch.sparse(n))
        if bad:
            raise FileFormatError(f"the ann index's posting lists name documents outside [0, {n}); the file was "
                                  "altered")
        return out

    def block(lo, hi):  # one task per block: its candidates, then their exact re-ranking
        q_ptr, q_idx, q_val = row_arrays(Qp, lo, hi)
        pieces = [] if dense_cands is None else [dense_cands[lo:hi]]
        if sparse_pool > 0:
            pieces.append(sparse_block(lo, hi, q_ptr, q_idx, q_val))
        cb = np.ascontiguousarray(np.hstack(pieces)) if pieces else np.full((hi - lo, 0), -1, dtype=np.int64)
        if guarded:
            check_rerank_rows(index, row_range(Qp, lo, hi), cb, k)
        if few:
            return small_batch.rerank(row_range(Qp, lo, hi), W, bool(model.identity), index._heavy_pos, Z, X, cb, k)
        docs = np.full((hi - lo, k), -1, dtype=np.int64)
        scores = np.full((hi - lo, k), -np.inf)
        qm, stamp = query_scratch.rerank(n, index.n_features)
        kernels().rerank(q_ptr, q_idx, q_val, *W.kernel_args(), bool(model.identity),
                         index._heavy_pos, Z, X.indptr, X.indices, X.data, cb, k, docs, scores, qm, stamp,
                         query_scratch.generations(hi - lo))
        return docs, scores

    results = threaded(block, blocks, n_jobs)
    return np.vstack([r[0] for r in results]), np.vstack([r[1] for r in results])


def allocation_code(read_allocation: str) -> int:
    """The kernels' code of an index's ``read_allocation`` (0 uniform, 1 weighted, 2 threshold)."""
    return ("uniform", "weighted", "threshold").index(read_allocation)


def compact_kernels():
    """The compiled candidate kernel over compact postings (:mod:`.compact_numba_kernels`), imported on
    first use (see :func:`sparsesim.indexes.execution.kernels`)."""
    from . import compact_numba_kernels

    return compact_numba_kernels


def _ensure_postings_rows(index, indptr, rows, limit):
    """Check the blocks of the compact postings' arrays holding the list prefixes ``rows``."""
    for name in ("postings.ids", "postings.ids_hi", "postings.ids32", "postings.codes"):
        guard = index._guards.get(name)
        if guard is not None and guard.pending:
            guard.ensure_rows(indptr, rows, limit)


def ensure_postings_read(index, q_ptr, q_idx, q_val, n_postings, weighted):
    """Check the blocks of the posting-list prefixes the queries (q_ptr, q_idx, q_val) read."""
    P = index._postings
    if not weighted:
        _ensure_postings_rows(index, P.indptr, q_idx, n_postings)
        return
    if weighted == small_batch.THRESHOLD:  # the threshold's search reads each list's first budget entries
        budgets = np.repeat(np.diff(q_ptr) * n_postings, np.diff(q_ptr))
        _ensure_postings_rows(index, P.indptr, q_idx, budgets)
        return
    _ensure_postings_rows(index, P.indptr, q_idx, 1)  # the heads that share the reads out
    reads = np.concatenate([small_batch.read_limits(q_idx[q_ptr[r]:q_ptr[r + 1]].astype(np.int64),
                                                    q_val[q_ptr[r]:q_ptr[r + 1]], P, n_postings, True)
                            for r in range(q_ptr.size - 1)] or [np.zeros(0, np.int64)])
    _ensure_postings_rows(index, P.indptr, q_idx, reads)


def check_rerank_rows(index, Qb, cands, k):
    """Check the blocks re-ranking reads: the light rows of W of the query terms, and the
    corpus rows and Z rows of the candidates (and of the documents 0, 1, ... that fill a
    pool with fewer than k distinct candidates)."""
    n = index.n_documents
    terms = Qb.indices[index._heavy_pos[Qb.indices] < 0]
    index._ensure_rows("model.W", index.rerank_w().indptr, terms)
    docs = cands[cands >= 0]
    if cands.shape[1]:
        srt = np.sort(cands, axis=1)
        distinct = (srt[:, :1] >= 0).sum(axis=1) + ((srt[:, 1:] != srt[:, :-1]) & (srt[:, 1:] >= 0)).sum(axis=1)
    else:
        distinct = np.zeros(cands.shape[0], dtype=np.int64)
    if (distinct < k).any():
        docs = np.concatenate([docs, np.arange(min(n, cands.shape[1] + k))])
    docs = np.unique(docs)
    index._ensure_rows("corpus", index._X.indptr, docs)
    guard = index._guards.get("heavy.Z")
    h = index._Z.shape[1]
    if guard is not None and guard.pending and h:
        guard.ensure(docs * h, docs * h + h)


def dense_candidates(index, Qp, pool, nprobe, ef_search, n_jobs):
    """The ``pool`` nearest projected documents of every query by the FAISS stage."""
    faiss = faiss_module()
    faiss.omp_set_num_threads(n_jobs)
    Qv = embed(Qp, index.V_, n_jobs)
    if index.faiss_index == "hnsw":
        index.faiss_.hnsw.efSearch = max(ef_search, pool)
    else:
        index.faiss_.nprobe = min(nprobe, index.faiss_.nlist)
    _, labels = index.faiss_.search(Qv, pool)
    return labels.astype(np.int64, copy=False)
