"""How an index query runs: thread counts, the worker threads and their scratch arrays, the
compiled kernels, and the merge of candidates into each query's top k.

:func:`resolve_jobs` turns ``n_jobs`` into a thread count, :func:`threaded` runs jobs on a
process-wide thread pool, :data:`query_scratch` holds each thread's reusable kernel scratch
(:class:`QueryScratch`), :func:`kernels` imports the numba kernels on first use, and
:func:`merge_top_k` / :func:`drop_own_rows` shape candidate lists into answers, and
:func:`faiss_layout` an answer into faiss's ``(scores, ids)`` arrays.
"""

from __future__ import annotations

import threading

import numpy as np

from sparsesim.validation import available_cores

__all__ = ["resolve_jobs", "kernels", "QueryScratch", "query_scratch", "threaded", "merge_top_k", "drop_own_rows",
           "faiss_layout"]


def resolve_jobs(n_jobs) -> int:
    if n_jobs is None:
        return 1
    n_jobs = int(n_jobs)
    if n_jobs < 0:
        n_jobs = max(1, available_cores() + 1 + n_jobs)
    return max(1, n_jobs)


def kernels():
    """The compiled (numba) kernels, :mod:`.numba_kernels`, imported on first use.

    Not imported at the top of the modules that call them: importing numba costs about 0.15 s of
    CPU, and a process that loads an index with ``warm_up=False`` and answers a few queries
    through the numpy path (:mod:`.small_batch`) never needs it.
    """
    from . import numba_kernels

    return numba_kernels


class QueryScratch(threading.local):
    """Scratch arrays of the ann query kernels, one set per thread, reused from call to call.

    The candidate stage needs three n_documents-long arrays and re-ranking two more (32 bytes per
    document in all); allocating and first-touching them on every call cost more than the
    search itself for a single query at 10^6 documents. The kernels leave the arrays as they
    found them (accumulators NaN, re-ranking's buffer zero); ``stamp`` is never cleared: each query marks
    its candidates with a fresh generation number (:meth:`generations`). A thread keeps the
    arrays of the last index size it queried (the same memory a call allocated before).
    """

    def __init__(self):
        self.n_documents = self.n_features = -1

    def sparse(self, n_documents: int):
        """(acc, touched, vals) for an index of ``n_documents`` (``acc`` all NaN: untouched).
        ``touched`` has one slot more than there are documents: the kernel writes every posting's
        document at the end of the list before deciding whether to keep it (no branch), so once
        all documents are listed the next write lands one past them."""
        if getattr(self, "acc", None) is None or self.acc.size != n_documents:
            self.acc = np.full(n_documents, np.nan)
            self.touched = np.empty(n_documents + 1, np.int64)
            self.vals = np.empty(n_documents, np.float64)
        return self.acc, self.touched, self.vals

    def rerank(self, n_documents: int, n_features: int):
        """(qm, stamp) for an index of ``n_documents`` documents and ``n_features`` features."""
        if (self.n_documents, self.n_features) != (n_documents, n_features):
            self.qm = np.zeros(n_features, np.float64)
            self.stamp = np.full(n_documents, -1, np.int64)
            self.generation = 0
            self.n_documents, self.n_features = n_documents, n_features
        return self.qm, self.stamp

    def generations(self, count: int) -> int:
        """The first of ``count`` fresh generation numbers for ``stamp``."""
        first = self.generation
        self.generation += count
        return first


query_scratch = QueryScratch()


_POOLS: dict = {}
_POOLS_LOCK = threading.Lock()
_IN_POOL = threading.local()


def _pool_worker_init():
    _IN_POOL.active = True


def _thread_pool(n_jobs: int):
    """A process-wide pool of ``n_jobs`` threads, made once: its threads (and their
    :class:`QueryScratch`) live across calls. A joblib threading pool per call cost ~10 ms per
    call, which made a 300-query batch on 2 threads slower than on one."""
    from concurrent.futures import ThreadPoolExecutor

    with _POOLS_LOCK:
        pool = _POOLS.get(n_jobs)
        if pool is None:
            pool = _POOLS[n_jobs] = ThreadPoolExecutor(n_jobs, thread_name_prefix="sparsesim-index",
                                                       initializer=_pool_worker_init)
        return pool


def threaded(func, jobs, n_jobs: int):
    """Run ``func`` over ``jobs`` on ``n_jobs`` threads (the numba kernels release the GIL);
    results in job order. Inside a pool thread the jobs run in that thread (no nested waits)."""
    if n_jobs == 1 or len(jobs) == 1 or getattr(_IN_POOL, "active", False):
        return [func(*job) for job in jobs]
    pool = _thread_pool(int(n_jobs))
    return [f.result() for f in [pool.submit(func, *job) for job in jobs]]


def merge_top_k(docs: np.ndarray, vals: np.ndarray, k: int):
    """Merge candidate (docs, vals) of shape (n_queries, m) into the k best per row, best first."""
    order = np.lexsort((docs, -vals), axis=1)[:, :k]
    return np.take_along_axis(docs, order, axis=1), np.take_along_axis(vals, order, axis=1)


def drop_own_rows(rows, scores, exclude, k):
    """Per query, the first ``k`` entries other than ``exclude[r]`` (when given): the answers of
    corpus documents used as queries, without the document itself."""
    if exclude is None:
        return rows[:, :k], scores[:, :k]
    out_rows = np.empty((rows.shape[0], k), dtype=rows.dtype)
    out_scores = np.empty((rows.shape[0], k), dtype=scores.dtype)
    for r in range(rows.shape[0]):
        keep = rows[r] != exclude[r]
        out_rows[r] = rows[r][keep][:k]
        out_scores[r] = scores[r][keep][:k]
    return out_rows, out_scores


def faiss_layout(ids, scores, k: int, n_queries: int, id_dtype) -> tuple[np.ndarray, np.ndarray]:
    """An answer ``(ids: list of arrays, scores)`` of at most ``k`` documents per query as faiss
    lays out ``index.search``: ``(scores, ids)``, both of shape (n_queries, k), columns past the
    answer padded with ``-inf`` scores and id ``-1`` (``""`` for an index of string ids)."""
    out_scores = np.full((n_queries, k), -np.inf)
    integer = np.dtype(id_dtype).kind in "iu"
    out_ids = np.full((n_queries, k), -1, dtype=np.int64) if integer else np.full((n_queries, k), "", dtype=id_dtype)
    scores = np.asarray(scores, dtype=np.float64)
    if n_queries and scores.size:
        width = scores.shape[1]
        out_scores[:, :width] = scores
        out_ids[:, :width] = np.asarray(list(ids)).reshape(n_queries, width)
    return out_scores, out_ids
