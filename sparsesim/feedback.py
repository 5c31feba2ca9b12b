"""A served index that keeps learning from feedback (:class:`FeedbackLearner`).

Feedback is a triplet ``{"query": Q, "preferred": ID, "other": ID}`` -- for query Q the document
``preferred`` should score higher than ``other`` -- or a click log
``{"query": Q, "shown": [ID, ...], "clicked": [ID, ...]}``. A query Q is a text (models trained on
text), a sparse vector ``{"indices": [...], "values": [...]}`` (zero-based columns) or the id of
a corpus document; an integer, or a string that is a corpus id, names a document, any other
string is a text.

Click rule (Joachims, "Accurately interpreting clickthrough data", SIGIR 2005): ``shown`` is the
list in the order it was displayed. Every clicked document is preferred over every document
shown above it that was not clicked ("click > skip above"), and over the first unclicked document
shown right below it ("click > no-click next"). At most ``max_click_pairs`` triplets come from
one log, the pairs nearest the click first.

One learner thread applies the registered learner's triplet-level update
(``partial_fit_triplets``, the code offline training runs) to batches taken from a bounded queue;
the model it starts from is the index's (or the last snapshot's). The learned model is published
as an immutable version (one reference assignment) as soon as the queue is empty, and at least
every ``publish_seconds`` while feedback keeps arriving: a query reads the current version once
and is answered entirely from it, so reads never wait for writes. Scores are exact
under the newest version: over the whole corpus when it has at most ``exact_limit`` documents,
otherwise over a candidate pool from the index (built with the original model), re-ranked.

Snapshots: every ``snapshot_every`` applied triplets, every ``snapshot_seconds`` and at
:meth:`FeedbackLearner.close` the model is written with the atomic model save (temporary file,
fsync, rename), so the snapshot file is always a complete model; a new learner with the same
``snapshot`` path resumes from it.
"""

from __future__ import annotations

import math
import numbers
import queue
import threading
import time
from collections import deque
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .exceptions import FileFormatError, InvalidInputError, ResourceLimitError
from .indexes import load_index
from .indexes.base import Index
from .models import BilinearSimilarity
from .registry import make_estimator
from .validation import bounded, check_csr, check_float, check_int

__all__ = ["FeedbackLearner", "click_triplets"]

_STOP = object()


def click_triplets(shown: list, clicked: list, max_pairs: int = 10) -> list[tuple]:
    """(preferred, other) pairs of one click log by the rule in the module docstring.

    Parameters
    ----------
    shown : list
        Ids in the order they were displayed (unique).
    clicked : list
        Ids clicked; each must be in ``shown``.
    max_pairs : int, default 10

    Returns
    -------
    list of (preferred_id, other_id)

    Examples
    --------
    >>> click_triplets(["a", "b", "c", "d"], ["c"])
    [('c', 'b'), ('c', 'a'), ('c', 'd')]
    """
    position = {v: i for i, v in enumerate(shown)}
    clicked_set = set(clicked)
    pairs = []
    for c in clicked:
        pc = position[c]
        above = [shown[i] for i in range(pc - 1, -1, -1) if shown[i] not in clicked_set]
        below = next((shown[i] for i in range(pc + 1, len(shown)) if shown[i] not in clicked_set), None)
        pairs.extend((c, s) for s in above)
        if below is not None:
            pairs.append((c, below))
    return pairs[:max_pairs]


def _plain(v):
    return v.item() if isinstance(v, np.generic) else v


class FeedbackLearner:
    """A model + index + learner that answers queries and learns from feedback at the same time.

    Parameters
    ----------
    index : Index or path-like
        A loaded index or an index directory (loaded memory-mapped).
    learner : TripletLearner, optional
        The learner whose triplet update is applied (it must offer ``start_from``). Default: the
        registered algorithm named in the model's metadata with its resolved parameters, else
        OASIS with ``C="auto"`` resolved on the corpus.
    snapshot : path-like, optional
        Model file the learned model is saved to (and resumed from when ``resume``).
    snapshot_every : int, default 1000
        Applied triplets between snapshots.
    snapshot_seconds : float, default 60
        Seconds between snapshots while updates are pending.
    resume : bool, default True
        Start from ``snapshot`` when that file exists.
    queue_size : int, default 100000
        Triplets waiting for the learner thread; more are refused with ResourceLimitError.
    max_click_pairs : int, default 10
        Triplets taken from one click log.
    exact_limit : int, default 200000
        Corpora up to this many documents are scored exhaustively with the newest model.
    candidate_pool : int, default 200
        Larger corpora: candidates the index returns per query for exact re-ranking.
    recent_queries : int, default 256
        Queries remembered for :meth:`ask`.
    publish_seconds : float, default 0.05
        While feedback keeps arriving, a new model version is published at least this often
        (each publication exports W, O(nnz(W))); it is published at once when the queue empties.
    """

    def __init__(self, index, learner=None, snapshot=None, snapshot_every: int = 1000,
                 snapshot_seconds: float = 60.0, resume: bool = True, queue_size: int = 100_000,
                 max_click_pairs: int = 10, exact_limit: int = 200_000, candidate_pool: int = 200,
                 recent_queries: int = 256, publish_seconds: float = 0.05):
        self.index = index if isinstance(index, Index) else load_index(index, mmap=True)
        self.snapshot_every = check_int(snapshot_every, "snapshot_every", 1)
        self.snapshot_seconds = check_float(snapshot_seconds, "snapshot_seconds", 0.0, low_open=True)
        self.max_click_pairs = check_int(max_click_pairs, "max_click_pairs", 1)
        self.exact_limit = check_int(exact_limit, "exact_limit", 0)
        self.candidate_pool = check_int(candidate_pool, "candidate_pool", 1)
        self.publish_seconds = check_float(publish_seconds, "publish_seconds", 0.0)
        queue_size = check_int(queue_size, "queue_size", 1)
        self.snapshot_path = None if snapshot is None else Path(snapshot)
        base = self.index.model
        self.featurizer = base.featurizer
        self.X = sp.csr_matrix(self.index.X_)
        self._XT = self.X.T.tocsc()
        self._rows = {_plain(v): r for r, v in enumerate(self.index.ids_)}
        self._int_ids = self.index.ids_.dtype.kind == "i"

        start, counters = base, {"n_applied": 0, "n_received": 0}
        self.resumed_from = None
        if resume and self.snapshot_path is not None and self.snapshot_path.exists():
            start = BilinearSimilarity.load(self.snapshot_path)
            if start.n_features != base.n_features:
                raise FileFormatError(f"{self.snapshot_path}: the snapshot has {start.n_features} features, "
                                      f"the index {base.n_features}")
            fb = start.metadata.get("feedback")
            if isinstance(fb, dict) and isinstance(fb.get("n_applied"), int) and fb["n_applied"] >= 0:
                counters["n_applied"] = counters["n_received"] = fb["n_applied"]
            self.resumed_from = str(self.snapshot_path)
        if base.normalize:
            raise InvalidInputError("the index's model normalises documents; feedback learning needs a "
                                    "non-normalising model")
        self.learner = learner if learner is not None else self._default_learner(base)
        if not hasattr(self.learner, "start_from"):
            raise InvalidInputError(f"{type(self.learner).__name__} cannot continue from a saved model "
                                    "(no start_from); use oasis, sors-* or adasors-*")
        self.learner.start_from(start, self.X)
        self._lock = threading.Lock()  # counters and snapshot facts
        self.n_received = counters["n_received"]
        self.n_applied = counters["n_applied"]
        self.n_losses = 0
        self.n_applied_at_start = self.n_applied
        self._learned = self.n_applied  # applied to the learner; n_applied: in the published version
        self._publish_time = time.monotonic()
        self._final_snapshot = True
        self._published = (0, self._with_featurizer(start))
        self.snapshot_info = None
        if self.resumed_from is not None:
            self.snapshot_info = {"path": str(self.snapshot_path), "n_applied": self.n_applied,
                                  "time": self.snapshot_path.stat().st_mtime, "version": 0}
        self._snap_applied = self.n_applied
        self._snap_time = time.monotonic()
        self._recent = deque(maxlen=check_int(recent_queries, "recent_queries", 1))
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self._error = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="sparsesim-feedback-learner", daemon=True)
        self._thread.start()

    # -- set-up ---------------------------------------------------------------------------------
    @staticmethod
    def _default_learner(model: BilinearSimilarity):
        meta = model.metadata
        algorithm = meta.get("algorithm")
        params = dict(meta.get("params") or {}) if isinstance(meta.get("params"), dict) else {}
        resolved = meta.get("resolved_params") if isinstance(meta.get("resolved_params"), dict) else {}
        params.update(resolved)
        if algorithm in ("oasis", "sors-l1", "sors-offdiag", "adasors-l1", "adasors-offdiag"):
            try:
                learner = make_estimator(algorithm, **params)
                if bool(getattr(learner, "identity", True)) == model.identity:
                    return learner
            except (ValueError, TypeError, KeyError):
                pass
        return make_estimator("oasis", identity=model.identity)

    def _with_featurizer(self, model: BilinearSimilarity) -> BilinearSimilarity:
        model.featurizer = self.featurizer
        return model

    # -- reading --------------------------------------------------------------------------------
    @property
    def model(self) -> BilinearSimilarity:
        """The newest published model version."""
        return self._published[1]

    @property
    def version(self) -> int:
        """Number of model versions published since start (0: the starting model)."""
        return self._published[0]

    def query_vectors(self, items) -> sp.csr_matrix:
        """Feature rows (CSR, one per item) of queries given as texts, sparse vectors or corpus ids."""
        if not isinstance(items, (list, tuple)) or not items:
            raise InvalidInputError("queries must be a non-empty list")
        return sp.vstack([self._query_row(q, f"query[{i}]") for i, q in enumerate(items)], format="csr")

    def _query_row(self, q, name: str) -> sp.csr_matrix:
        d = self.index.n_features
        if isinstance(q, bool):
            raise InvalidInputError(f"{name} must be a text, a vector or a corpus id, got a boolean")
        if isinstance(q, numbers.Integral) or (isinstance(q, str) and not self._int_ids and q in self._rows):
            return self.X[self._row_of(q, name)]
        if isinstance(q, str):
            if self.featurizer is None:
                raise InvalidInputError(f"{name}: this model was not trained on text; give a vector or a corpus id")
            if not q.strip():
                raise InvalidInputError(f"{name} is an empty text")
            return sp.csr_matrix(self.featurizer.transform([q]))
        if isinstance(q, dict):
            if set(q) != {"indices", "values"}:
                raise InvalidInputError(f'{name} must be an object with exactly "indices" and "values"')
            idx, val = q["indices"], q["values"]
            if not isinstance(idx, list) or not isinstance(val, list) or len(idx) != len(val) or len(idx) > d:
                raise InvalidInputError(f"{name}: indices and values must be lists of equal length (at most {d})")
            if any(isinstance(j, bool) or not isinstance(j, numbers.Integral) or not 0 <= j < d for j in idx):
                raise InvalidInputError(f"{name}: indices must be integers in [0, {d})")
            if any(isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) for v in val):
                raise InvalidInputError(f"{name}: values must be finite numbers")
            row = sp.csr_matrix((np.asarray(val, np.float64), (np.zeros(len(idx), np.int64),
                                                               np.asarray(idx, np.int64))), shape=(1, d))
            return check_csr(row, name=name, n_features=d)
        raise InvalidInputError(f"{name} must be a text, a vector or a corpus id, got {type(q).__name__}")

    def _row_of(self, doc_id, name: str) -> int:
        key = doc_id
        if isinstance(doc_id, bool) or not isinstance(doc_id, (numbers.Integral, str)):
            raise InvalidInputError(f"{name} must be a document id, got {bounded(repr(doc_id), 60)}")
        if isinstance(doc_id, numbers.Integral):
            key = int(doc_id)
        row = self._rows.get(key)
        if row is None:
            raise InvalidInputError(f"{name}: unknown document id {bounded(repr(doc_id), 80)}")
        return row

    def query(self, Q, top_k: int = 10, remember=None):
        """Top-k documents of each query row under the newest model version.

        Parameters
        ----------
        Q : sparse matrix, shape (n_queries, n_features)
        top_k : int, default 10
        remember : list, optional
            The queries as sent (one per row): kept with their results for :meth:`ask`.

        Returns
        -------
        ids : list of ndarray
        scores : ndarray, shape (n_queries, top_k)
        version : int
            The model version that answered.
        """
        version, model = self._published
        Q = check_csr(Q, name="queries", n_features=self.index.n_features)
        n = self.X.shape[0]
        k = check_int(top_k, "top_k", 1, n)
        QM = model.transform_queries(Q)
        if n <= self.exact_limit:
            scores = (QM @ self._XT).toarray()
            rows = np.argsort(-scores, axis=1, kind="stable")[:, :k]
            vals = np.take_along_axis(scores, rows, axis=1)
        else:
            pool = max(k, min(self.candidate_pool, n))
            cand, _ = self.index.query_rows(Q, pool)
            rows = np.empty((Q.shape[0], k), np.int64)
            vals = np.empty((Q.shape[0], k))
            for i in range(Q.shape[0]):
                s = np.asarray((QM[i] @ self._XT[:, cand[i]]).todense()).ravel()
                order = np.argsort(-s, kind="stable")[:k]
                rows[i], vals[i] = cand[i][order], s[order]
        if remember is not None:
            for i, item in enumerate(remember):
                self._recent.append((item, Q[i], rows[i][: min(k, 10)]))
        return [self.index.ids_[r] for r in rows], vals, version

    def score(self, Q, doc_ids) -> np.ndarray:
        """S(q_i, x_j) under the newest model for query rows ``Q`` and documents ``doc_ids``."""
        rows = [self._row_of(d, "doc_ids") for d in doc_ids]
        return (self.model.transform_queries(Q) @ self._XT[:, rows]).toarray()

    # -- feedback -------------------------------------------------------------------------------
    def parse_feedback(self, records) -> list[tuple]:
        """Check feedback records; return ``(query_row, preferred_row, other_row)`` triplets.

        Raises
        ------
        InvalidInputError
            A record that is not a triplet or click log, an unknown id, a bad query.
        """
        if isinstance(records, dict):
            records = [records]
        if not isinstance(records, list) or not records:
            raise InvalidInputError("feedback must be a record or a non-empty list of records")
        out = []
        for i, rec in enumerate(records):
            name = f"feedback[{i}]"
            if not isinstance(rec, dict) or "query" not in rec:
                raise InvalidInputError(f'{name} must be an object with "query"')
            keys = set(rec)
            if keys == {"query", "preferred", "other"}:
                pairs = [(rec["preferred"], rec["other"])]
            elif keys == {"query", "clicked", "shown"}:
                shown, clicked = rec["shown"], rec["clicked"]
                if not isinstance(shown, list) or not isinstance(clicked, list) or not shown:
                    raise InvalidInputError(f"{name}: shown and clicked must be lists (shown non-empty)")
                if len(shown) > 1000:
                    raise InvalidInputError(f"{name}: at most 1000 shown documents")
                for j, doc in enumerate(shown + clicked):
                    self._row_of(doc, f"{name}.shown/clicked[{j}]")
                if len(set(shown)) != len(shown) or len(set(clicked)) != len(clicked):
                    raise InvalidInputError(f"{name}: shown and clicked must not repeat ids")
                missing = [c for c in clicked if c not in set(shown)]
                if missing:
                    raise InvalidInputError(f"{name}: clicked id {bounded(repr(missing[0]), 60)} was not shown")
                pairs = click_triplets(shown, clicked, self.max_click_pairs)
            else:
                raise InvalidInputError(f'{name} must have "query", "preferred", "other" or "query", "clicked", '
                                        f'"shown"; got {bounded(sorted(map(str, keys)), 120)}')
            qrow = self._query_row(rec["query"], f"{name}.query")
            for a, b in pairs:
                ra, rb = self._row_of(a, f"{name}.preferred"), self._row_of(b, f"{name}.other")
                if ra == rb:
                    raise InvalidInputError(f"{name}: preferred and other are the same document")
                out.append((qrow, ra, rb))
        return out

    def submit(self, records) -> int:
        """Check feedback and queue its triplets for the learner thread; returns how many were queued.

        Raises
        ------
        InvalidInputError
            Bad feedback (nothing is queued).
        ResourceLimitError
            The queue is full (nothing is queued); retry later.
        """
        self._raise_if_failed()
        triplets = self.parse_feedback(records)
        with self._lock:
            if self._closed:
                raise InvalidInputError("the feedback learner is closed")
            free = self._queue.maxsize - self._queue.qsize()
            if len(triplets) > free:
                raise ResourceLimitError(f"the feedback queue is full ({self._queue.maxsize} triplets waiting); "
                                         "retry later")
            for t in triplets:
                self._queue.put_nowait(t)
            self.n_received += len(triplets)
        return len(triplets)

    def _run(self):
        while True:
            item = self._queue.get()
            batch = [item]
            while len(batch) < 512:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = any(b is _STOP for b in batch)
            work = [b for b in batch if b is not _STOP]
            try:
                if work:
                    self._apply(work)
                if self._learned != self.n_applied:
                    snap_due = stop or self._snapshot_due(self._learned)
                    if (snap_due or self._queue.qsize() == 0
                            or time.monotonic() - self._publish_time >= self.publish_seconds):
                        self._publish()
                if work or stop:
                    self._maybe_snapshot(force=stop and self._final_snapshot)
            except Exception as exc:  # kept and raised to callers: the thread must not die silently
                self._error = exc
            finally:
                for _ in batch:
                    self._queue.task_done()
            if stop:
                return

    def _apply(self, work: list[tuple]) -> None:
        """One batch through the learner's triplet update (published by :meth:`_publish`)."""
        m = len(work)
        Xs = sp.vstack([sp.vstack([q, self.X[a], self.X[b]]) for q, a, b in work], format="csr")
        triplets = np.arange(3 * m, dtype=np.int64).reshape(m, 3)
        before = self.learner.n_updates_
        self.learner.partial_fit_triplets(Xs, triplets)
        with self._lock:
            self._learned += m
            self.n_losses += self.learner.n_updates_ - before

    def _publish(self) -> None:
        """Export the learner's model as the next immutable version (one reference assignment)."""
        model = self._with_featurizer(self.learner.model_)
        with self._lock:
            self._published = (self._published[0] + 1, model)
            self.n_applied = self._learned
            self._publish_time = time.monotonic()

    def _snapshot_due(self, applied: int) -> bool:
        return self.snapshot_path is not None and (
            applied - self._snap_applied >= self.snapshot_every
            or time.monotonic() - self._snap_time >= self.snapshot_seconds)

    def _maybe_snapshot(self, force: bool = False) -> None:
        if self.snapshot_path is None:
            return
        if (force or self._snapshot_due(self.n_applied)) and self.n_applied != self._snap_applied:
            self.snapshot()

    def snapshot(self) -> dict:
        """Write the newest model to the snapshot file atomically; returns the snapshot facts."""
        if self.snapshot_path is None:
            raise InvalidInputError("no snapshot path was given")
        version, model = self._published
        applied = self.n_applied
        meta = dict(model.metadata)
        meta["feedback"] = {"n_applied": int(applied), "version": int(version)}
        BilinearSimilarity(model.W, identity=model.identity, normalize=model.normalize, metadata=meta,
                           featurizer=self.featurizer).save(self.snapshot_path)
        info = {"path": str(self.snapshot_path), "n_applied": int(applied), "time": time.time(),
                "version": int(version)}
        with self._lock:
            self.snapshot_info = info
            self._snap_applied = applied
            self._snap_time = time.monotonic()
        return info

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every queued triplet has been applied (and published)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError("feedback still pending")
            time.sleep(0.005)
        self._raise_if_failed()

    def close(self, snapshot: bool = True) -> None:
        """Apply what is queued, write the final snapshot (unless ``snapshot=False``) and stop the
        learner thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._final_snapshot = bool(snapshot)
        self._queue.put(_STOP)
        self._thread.join()
        self._raise_if_failed()

    def _raise_if_failed(self):
        if self._error is not None:
            raise self._error

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- active questions -----------------------------------------------------------------------
    def ask(self, n: int = 10, b: float = 1.0) -> list[dict]:
        """Triplets the active rule most wants labelled, from recent queries' top results.

        PAAS / CWAS selection (query a triplet with probability b / (b + |margin|)): for every
        recent query, pairs of neighbouring results (ranks i, i+1 of its top 10) are scored with
        the newest model; the ``n`` pairs of smallest |margin| S(q, first) - S(q, second) --
        the highest query probability -- come first, at most one per (query, pair).

        Returns
        -------
        list of dict
            ``{"query": ..., "first": id, "second": id, "margin": float, "p_query": float}``.
        """
        n = check_int(n, "n", 1, 1000)
        b = check_float(b, "b", 0.0, low_open=True)
        model = self.model
        cands, seen = [], set()
        for item, qrow, rows in list(self._recent)[::-1]:
            if len(rows) < 2:
                continue
            s = np.asarray((model.transform_queries(qrow) @ self._XT[:, rows]).todense()).ravel()
            key_q = repr(item)
            for i in range(len(rows) - 1):
                key = (key_q, int(rows[i]), int(rows[i + 1]))
                if key in seen:
                    continue
                seen.add(key)
                margin = float(s[i] - s[i + 1])
                cands.append((abs(margin), item, int(rows[i]), int(rows[i + 1]), margin))
        cands.sort(key=lambda c: c[0])
        ids = self.index.ids_
        return [{"query": item, "first": _plain(ids[a]), "second": _plain(ids[c]), "margin": m,
                 "p_query": b / (b + am)} for am, item, a, c, m in cands[:n]]

    # -- facts ----------------------------------------------------------------------------------
    def info(self) -> dict:
        """Counters, model version and the last snapshot (for ``/info``)."""
        with self._lock:
            return {"learner": type(self.learner).__name__, "version": self.version,
                    "learned": int(self._learned),
                    "received": int(self.n_received), "applied": int(self.n_applied),
                    "pending": int(self.n_received - self.n_applied),
                    "not_snapshotted": int(self.n_applied - self._snap_applied),
                    "updates_with_loss": int(self.n_losses), "resumed_from": self.resumed_from,
                    "snapshot": self.snapshot_info, "snapshot_every": self.snapshot_every,
                    "snapshot_seconds": self.snapshot_seconds,
                    "scoring": "exact" if self.X.shape[0] <= self.exact_limit else
                    f"index candidates ({self.candidate_pool}) re-ranked exactly"}
