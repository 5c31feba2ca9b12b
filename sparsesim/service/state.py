"""The index state the service holds: :class:`QueryService`.

One loaded index (single-process, or sharded in this process or on a Dask cluster) with what the
endpoints need beside it: the plain cosine baseline, the snippets, the facts of ``/info``, the
feedback learner of ``serve --learn``, and the reload of a sharded index after a lost worker.
The ``/query`` payload checks it inherits live in :mod:`sparsesim.service.parsing`.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import asdict
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..distributed import connect, resolve_scheduler
from ..exceptions import ClusterError, InvalidInputError
from ..feedback import FeedbackLearner
from ..topk import top_k_rows
from .parsing import QueryParsing, ServiceLimits

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
    """

    def __init__(self, index_dir, limits: ServiceLimits | None = None, mmap: bool = True,
                 learn: dict | None = None, scheduler: str | None = None):
        from ..indexes import load_index, read_manifest
        from ..indexes.sharded import is_sharded, read_sharded_manifest

        self.index_dir = Path(index_dir)
        self.limits = limits or ServiceLimits()
        self.scheduler = resolve_scheduler(scheduler)
        self.sharded = is_sharded(self.index_dir)
        self._client = None
        self._exit = contextlib.ExitStack()
        self._reload = threading.Lock()
        self._stale = None  # the sharded index that lost a shard: replaced before the next search
        if self.sharded:
            if learn is not None:
                raise InvalidInputError(f"{self.index_dir} is a sharded index; --learn serves a single-process "
                                        f"index (build one without --shards)")
            self.manifest = read_sharded_manifest(self.index_dir)
            if self.scheduler is not None:
                self._client = self._exit.enter_context(connect(self.scheduler))
            try:
                self.index = self._load_sharded()
            except BaseException:
                self._exit.close()
                raise
            self._cosine_T, self.snippets = None, None
        else:
            if self.scheduler is not None:
                raise InvalidInputError(f"{self.index_dir} is a single-process index; a scheduler serves sharded "
                                        f"indexes (build one with `index build --shards N`), or drop --scheduler")
            # blocks not checked yet are checked in the background: the next start is fast from the first query
            self.index = load_index(self.index_dir, mmap=mmap, verify_in_background=mmap)
            self.manifest = read_manifest(self.index_dir)
            X = self.index.X_  # None: an embedding index without an identity part stores no sparse corpus
            if X is None:
                self._cosine_T = None
            else:
                X = sp.csr_matrix(X)
                norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
                self._cosine_T = (sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ X).T.tocsr()
            self.snippets = self.index.snippets_
        self.model = self.index.model
        self.feedback = None if learn is None else FeedbackLearner(self.index, **learn)

    def _load_sharded(self):
        from ..indexes.sharded import load_sharded

        # on a cluster the workers load their shards; in-process the shards are memory-mapped
        return load_sharded(self.index_dir, client=self._client, mmap=self._client is None)

    def close(self):
        """Release a sharded index's shards and the cluster connection (nothing for a single index)."""
        if self.sharded:
            with contextlib.suppress(Exception):
                self.index.release()
        self._exit.close()

    # -- facts ------------------------------------------------------------------------------
    @property
    def accepts_text(self) -> bool:
        return self.model.featurizer is not None

    def info(self) -> dict:
        meta = self.model.metadata
        sharded = None
        if self.sharded:
            index = self.index
            sharded = {"shards": list(index.shard_sizes_), "scheduler": self.scheduler,
                       "workers": len(set(index.shard_workers_)) if self._client is not None else 0}
        return {
            "index": str(self.index_dir), "kind": self.index.kind, "n_documents": int(self.index.n_documents),
            "n_features": int(self.index.n_features), "accepts_text": self.accepts_text,
            "snippets": self.snippets is not None, "compare": self._cosine_T is not None, "sharded": sharded,
            "model": {"algorithm": meta.get("algorithm"), "params": meta.get("params"), "nnz": self.model.nnz() if hasattr(self.model, "nnz") else None,
                      "dataset": meta.get("dataset"), "checksum": self.manifest["model"].get("checksum")},
            "index_params": self.manifest.get("params"), "index_state": self.manifest.get("state"),
            "limits": asdict(self.limits),
            "feedback": None if self.feedback is None else self.feedback.info(),
        }

    # -- requests ---------------------------------------------------------------------------
    def search(self, Q, top_k: int, compare: bool = False, snippets: bool = False, remember=None) -> dict:
        """Top-k (learned similarity) per query row, plus plain cosine top-k when ``compare``.

        When learning from feedback, the newest model version answers (``"version"``) and the
        queries as sent (``remember``) are kept for ``/ask``.
        """
        if self.feedback is not None:
            ids, scores, version = self.feedback.query(Q, top_k, remember=remember)
        elif self.sharded:
            ids, scores = self._query_sharded(Q, top_k)
        else:
            ids, scores = self.index.query(Q, top_k)
        out = {"results": [self._hits(row_ids, row_scores, None, snippets) for row_ids, row_scores in zip(ids, scores)]}
        if self.feedback is not None:
            out["version"] = version
        if compare:
            norms = np.sqrt(np.asarray(Q.multiply(Q).sum(axis=1)).ravel())
            Qn = sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ Q
            out["cosine"] = []
            for q in range(Qn.shape[0]):  # one dense row of n_documents at a time, never queries x corpus
                dense = (Qn[q] @ self._cosine_T).toarray()
                rows, vals = top_k_rows(dense, top_k)
                out["cosine"].append(self._hits(self.index.ids_[rows[0]], vals[0], rows[0], snippets))
        return out

    def _query_sharded(self, Q, top_k: int):
        """Search the sharded index; after a lost shard (ClusterError), the next call first
        loads the shards again onto the workers that remain."""
        if self._stale is not None:
            with self._reload:
                if self._stale is self.index:
                    with contextlib.suppress(Exception):
                        self.index.release()
                    self.index = self._load_sharded()
                    self._stale = None
        index = self.index
        try:
            return index.query(Q, top_k)
        except ClusterError:
            if self._client is not None:
                self._stale = index
            raise

    def _hits(self, ids, scores, rows, snippets: bool) -> list[dict]:
        hits = [{"id": i.item() if hasattr(i, "item") else i, "score": float(s)} for i, s in zip(ids, scores)]
        if snippets and self.snippets is not None:
            if rows is None:
                rows = self._rows_of(ids)
            for hit, r in zip(hits, rows):
                hit["snippet"] = str(self.snippets[int(r)])
        return hits

    def _rows_of(self, ids) -> list[int]:
        if not hasattr(self, "_id_rows"):
            self._id_rows = {(v.item() if hasattr(v, "item") else v): r for r, v in enumerate(self.index.ids_)}
        return [self._id_rows[i.item() if hasattr(i, "item") else i] for i in ids]

