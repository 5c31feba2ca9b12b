"""The index state the service holds: :class:`QueryService`.

One loaded index (single-process, or sharded in this process or on a Dask cluster) with what the
endpoints need beside it: the plain cosine baseline, the snippets, the facts of ``/info``, the
feedback learner of ``serve --learn``, and the reload of a sharded index after a lost worker.
The ``/query`` payload checks it inherits live in :mod:`sparsesim.service.parsing`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..distributed import resolve_scheduler
from ..exceptions import ClusterError
from ..feedback import FeedbackLearner
from ..feedback.snapshots import check_snapshot_target
from ..indexes import plain_value
from ..models import BilinearSimilarity
from ..topk import top_k_rows
from ..validation import CheckedQueries
from .parsing import QueryParsing, RequestError, ServiceLimits

#: seconds between two attempts to load a lost sharded index again from ``/health``
RELOAD_EVERY = 2.0

__all__ = ["QueryService"]


class QueryService(QueryParsing):
    """A loaded index plus what the endpoints need (cosine baseline, snippets, facts).

    Parameters
    ----------
    index_dir : path-like
        Directory written by ``sparsesim index build``.
    limits : ServiceLimits, optional
    mmap : bool, default True
        Memory-map the index arrays (read-only).
    learn : dict, optional
        Keyword arguments of :class:`~sparsesim.feedback.FeedbackLearner` (``snapshot``,
        ``snapshot_every``, ...): learn from feedback while serving. ``None`` serves frozen.
    scheduler : str, optional
        Dask scheduler address (default ``$SPARSESIM_SCHEDULER``) holding the shards of a sharded
        index; only for a sharded index.

    Raises
    ------
    InvalidInputError
        A scheduler for a single-process index, or ``learn`` for a sharded one.
    ClusterError
        The scheduler cannot be reached, or a worker was lost while loading the shards.
    UnsafeTargetError
        ``learn``'s snapshot path breaks the output-path policy (inside the index, no such
        directory, ...); checked before the index is loaded.
    """

    def __init__(self, index_dir, limits: ServiceLimits | None = None, mmap: bool = True,
                 learn: dict | None = None, scheduler: str | None = None):
        from ..indexes import index_class

        self.index_dir = Path(index_dir)
        self.limits = limits or ServiceLimits()
        self.scheduler = resolve_scheduler(scheduler)
        self.mmap = bool(mmap)
        self._reload = threading.Lock()
        self._stale = None  # the index that lost part of itself (a shard): replaced before the next search
        self._load_error = None  # why the last reload failed
        self._reload_tried = 0.0
        self.n_internal_errors = 0
        self._id_rows = None  # document id -> row, built on the first request for snippets
        self._last_internal = None  # (monotonic time, one-line cause) of the last internal error
        if learn is not None and learn.get("snapshot") is not None:  # before any work: the policy
            check_snapshot_target(learn["snapshot"], self.index_dir, bool(learn.get("resume", True)),
                                  bool(learn.get("overwrite", False)))
        kind = index_class(self.index_dir)  # the manifest only: what the index offers, before loading it
        if learn is not None and not kind.supports_learning:
            raise kind.unsupported("learning from feedback (--learn)", "serve a single-process index of a bilinear "
                                   "model (build one without --shards)")
        self.index = self._open()
        X = self.index.X_  # None: no corpus in this process (shards; an embedding index without identity part)
        self._cosine_T = None if X is None else unit_rows(X).T.tocsr()
        self.snippets = self.index.snippets_
        self.labels = self.index.labels_
        self.n_documents = int(self.index.n_documents)
        self.model = self.index.model
        self.feedback = None if learn is None else FeedbackLearner(self.index, **learn)

    def _open(self):
        from ..indexes import open_index

        # blocks not checked yet are checked in the background: the next start is fast from the first query
        return open_index(self.index_dir, mmap=self.mmap, scheduler=self.scheduler,
                          verify_in_background=self.mmap)

    def close(self):
        """Release what the index holds outside this process (shards, the cluster connection)."""
        with contextlib.suppress(Exception):
            self.index.release()

    # -- facts ------------------------------------------------------------------------------
    @property
    def accepts_text(self) -> bool:
        return self.model.featurizer is not None

    @property
    def sharded(self) -> bool:
        """Whether the index is split into shards (``/info`` reports them)."""
        return self.index.sharded

    def info(self) -> dict:
        meta = self.model.metadata
        placement = self.index.placement()
        if placement is not None:
            placement = {"shards": placement["shards"], "scheduler": self.scheduler,
                         "workers": placement["workers"] if self._stale is None else 0,
                         "loaded": self._stale is None and placement["loaded"]}
        manifest = self.index.manifest_ or {}
        return {
            "index": str(self.index_dir), "kind": self.index.kind, "n_documents": self.n_documents,
            "n_features": int(self.index.n_features), "accepts_text": self.accepts_text,
            "snippets": self.snippets is not None or self.labels is not None, "compare": self._cosine_T is not None,
            "sharded": placement,
            "model": {"algorithm": meta.get("algorithm"), "params": meta.get("params"), "nnz": self.model.nnz() if isinstance(self.model, BilinearSimilarity) else None,
                      "dataset": meta.get("dataset"), "checksum": self.index.model_checksum()},
            "index_params": manifest.get("params"), "index_state": manifest.get("state"),
            "limits": asdict(self.limits),
            "feedback": None if self.feedback is None else self.feedback.info(),
            "internal_errors": self.n_internal_errors,
        }

    def health(self) -> tuple[int, dict]:
        """``(HTTP status, body)`` of ``/health``: ``{"status": "ok"}`` when everything works;
        ``"degraded"`` (200) with ``"problems"`` when queries are answered but something is wrong
        (a stopped feedback learner, a failed snapshot, internal errors in the last minute);
        ``"unavailable"`` (503) when queries cannot be answered (a sharded index whose shards are
        lost and cannot be loaded again yet -- this check also tries to load them again)."""
        problems, unavailable = [], False
        if self._stale is None:
            try:
                self.index.check_placement()  # a shard's worker left while idle: load again
            except ClusterError as exc:
                self._load_error = str(exc).splitlines()[0][:300] if str(exc) else None
                self._stale = self.index
        if self._stale is not None:
            if (self._stale is not None and not self._reload.locked()  # a load under way: not a second one
                    and time.monotonic() - self._reload_tried >= RELOAD_EVERY):
                with contextlib.suppress(ClusterError):
                    self._ensure_loaded()
            if self._stale is not None:
                unavailable = True
                problems.append(f"the index's shards are not loaded: {self._load_error or 'a worker was lost'}")
        if self.feedback is not None:
            problems.extend(self.feedback.problems())
        last = self._last_internal
        if last is not None and time.monotonic() - last[0] < 60:
            ago = time.monotonic() - last[0]
            problems.append(f"{self.n_internal_errors} internal error(s) since start, the last {ago:.0f} s ago "
                            f"({last[1]})")
        if not problems:
            return 200, {"status": "ok"}
        return (503 if unavailable else 200), {"status": "unavailable" if unavailable else "degraded",
                                               "problems": problems}

    def record_internal_error(self, cause: str) -> None:
        """Count an internal error (reported by ``/health`` for a minute and by ``/info``)."""
        self.n_internal_errors += 1
        self._last_internal = (time.monotonic(), cause[:200])

    # -- requests ---------------------------------------------------------------------------
    def search(self, Q, top_k: int | None = None, compare: bool = False, snippets: bool = False,
               remember=None) -> dict:
        """Top-k (learned similarity) per query row, plus plain cosine top-k when ``compare``.

        ``Q`` is query rows with ``top_k``, or the :class:`~sparsesim.validation.CheckedQueries`
        of :meth:`parse` (holding both, used as they are). When learning from feedback, the newest
        model version answers (``"version"``) and the queries as sent (``remember``) are kept for
        ``/ask``.
        """
        if self.feedback is not None:
            ids, scores, version = self.feedback.query(Q, top_k, remember=remember)
        elif isinstance(Q, CheckedQueries):  # rows and top_k as checked: the index compares sizes only
            ids, scores = self._query(Q, Q.top_k)
        else:
            ids, scores = self._query(Q, top_k)
        if isinstance(Q, CheckedQueries):
            Q, top_k = Q.rows, Q.top_k
        if not np.isfinite(np.asarray(scores, dtype=np.float64)).all():
            raise RequestError(422, "the query's scores overflow float64 (values too large for this model); "
                                    "scale the query values down")
        out = {"results": [self._hits(row_ids, row_scores, None, snippets) for row_ids, row_scores in zip(ids, scores)]}
        if self.feedback is not None:
            out["version"] = version
        if compare:
            Qn = unit_rows(Q)
            out["cosine"] = []
            for q in range(Qn.shape[0]):  # one dense row of n_documents at a time, never queries x corpus
                dense = (Qn[q] @ self._cosine_T).toarray()
                rows, vals = top_k_rows(dense, top_k)
                out["cosine"].append(self._hits(self.index.ids_[rows[0]], vals[0], rows[0], snippets))
        return out

    def _ensure_loaded(self) -> None:
        """Load an index that lost part of itself (a shard) again, onto the workers there are now.

        Raises
        ------
        ClusterError
            It cannot be loaded now (no workers, the scheduler does not answer, ...): the
            service answers 503 and tries again at the next request or ``/health``.
        """
        if self._stale is None:
            return
        with self._reload:
            if self._stale is None:
                return
            self._reload_tried = time.monotonic()
            with contextlib.suppress(Exception):
                self._stale.release()
            try:
                self.index = self._open()
            except Exception as exc:  # noqa: BLE001 - a server-side outage, never the client's fault
                self._load_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
                raise ClusterError(f"the index's shards are not loaded ({self._load_error}); the server loads them "
                                   f"again when workers are available -- retry later") from None
            self._stale, self._load_error = None, None

    def _query(self, Q, top_k: int):
        """Search the index; after a lost shard (ClusterError), the next call first loads the
        index again onto the workers that remain."""
        self._ensure_loaded()
        index = self.index
        try:
            return index.query(Q, top_k)
        except ClusterError as exc:
            self._stale = index
            self._load_error = str(exc).splitlines()[0][:300] if str(exc) else "a worker was lost"
            raise

    def _hits(self, ids, scores, rows, snippets: bool) -> list[dict]:
        hits = [{"id": plain_value(i), "score": float(s)} for i, s in zip(ids, scores)]
        if snippets and (self.snippets is not None or self.labels is not None):
            if rows is None:
                rows = self._rows_of(ids)
            for hit, r in zip(hits, rows):
                if self.snippets is not None:
                    hit["snippet"] = str(self.snippets[int(r)])
                if self.labels is not None:
                    hit["label"] = str(self.labels[int(r)])
        return hits

    def _rows_of(self, ids) -> list[int]:
        if self._id_rows is None:
            self._id_rows = {plain_value(v): r for r, v in enumerate(self.index.ids_)}
        return [self._id_rows[plain_value(i)] for i in ids]



def unit_rows(X) -> sp.csr_matrix:
    """The rows of ``X`` scaled to unit Euclidean norm (zero rows stay zero), as CSR.

    Every row is first divided by its largest absolute value, so its norm neither overflows
    (values above ~1e154) nor underflows (values below ~1e-154).
    """
    X = sp.csr_matrix(X, dtype=np.float64)
    peak = np.asarray(abs(X).max(axis=1).todense()).ravel()
    Xs = sp.diags(1.0 / np.where(peak > 0, peak, 1.0)) @ X
    norms = np.sqrt(np.asarray(Xs.multiply(Xs).sum(axis=1)).ravel())
    return (sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ Xs).tocsr()
