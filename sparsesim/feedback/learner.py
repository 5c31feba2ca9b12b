"""A served index that keeps learning from feedback (:class:`FeedbackLearner`).

Feedback records and the click rule: :mod:`sparsesim.feedback.records`.

One learner thread applies the registered learner's triplet-level update
(``partial_fit_triplets``, the code offline training runs) to batches taken from a bounded queue;
the model it starts from is the index's (or the last snapshot's). The learned model is published
as an immutable :class:`~sparsesim.feedback.versions.ModelVersion` (one reference assignment): a query
reads the current version once and is answered entirely from it, so reads never wait for writes.
OASIS versions are published after every batch without copying W (the base model plus the
low-rank factors of the updates since it, folded into a new base every ``rebase_every``
triplets); other learners' versions are a full export of W, published when the queue empties
and at least every ``publish_seconds`` while feedback keeps arriving. Scores are exact under
the newest version: over the whole corpus when it has at most ``exact_limit`` documents,
otherwise over a candidate pool from an index re-ranked exactly. That candidate index was
built with an older model; a refresher thread re-checks its recall against exact scoring on
``drift_sample`` corpus documents every ``drift_check_every`` applied triplets and, when it falls below
``min_recall``, rebuilds the candidate index with the newest model in the background and swaps
it in by reference (queries keep using the old one until then).

Snapshots: every ``snapshot_every`` applied triplets, every ``snapshot_seconds`` and at
:meth:`FeedbackLearner.close` the model is written with the atomic model save (temporary file,
fsync, rename), so the snapshot file is always a complete model; a new learner with the same
``snapshot`` path resumes from it.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..csr_rows import take_rows
from ..engine.bilinear import OASIS as OASIS_MODE
from ..exceptions import FileFormatError, InvalidInputError, ResourceLimitError, SparsesimError
from ..indexes import Index, open_index, plain_value
from ..compact import CompactSimilarity
from ..models import BilinearSimilarity
from ..persistence import file_state, replacing_unchanged
from ..registry import make_estimator
from ..topk import top_k_rows
from ..validation import (CheckedQueries, CheckedRows, CheckedTopK, check_csr, check_float, check_int, check_params,
                          check_queries)
from .candidates import CandidateStage
from .questions import ActiveQuestions
from .records import FeedbackRecords
from .snapshots import check_resumable, check_snapshot_target, snapshot_identity
from .versions import ModelVersion, oasis_factors

__all__ = ["FeedbackLearner", "LearnerStoppedError"]


class LearnerStoppedError(SparsesimError, RuntimeError):
    """The learner thread stopped after an internal error: feedback is refused (queries are still
    answered by the last published version); the message names the cause."""

_STOP = object()


class FeedbackLearner(FeedbackRecords, CandidateStage, ActiveQuestions):
    """A model + index + learner that answers queries and learns from feedback at the same time.

    Parameters
    ----------
    index : Index or path-like
        A loaded index or an index directory (loaded memory-mapped).
    learner : OASIS, SORS or AdaSORS, optional
        The learner whose triplet update is applied (one that continues from a saved model with
        ``start_from``: the bilinear learners of :mod:`sparsesim.learners.bilinear`). Default: the
        registered algorithm named in the model's metadata with its resolved parameters, else
        OASIS with ``C="auto"`` resolved on the corpus (a compact model: ``ssi-dwuv``, its
        recorded parameters or else its defaults).
    snapshot : path-like, optional
        Model file the learned model is saved to (and resumed from when ``resume``). Checked
        at start (:mod:`sparsesim.feedback.snapshots`): never inside the index directory, its
        directory must exist; an existing snapshot resumes only on an index with the same
        starting model and featuriser.
    snapshot_every : int, default 1000
        Applied triplets between snapshots.
    snapshot_seconds : float, default 60
        Seconds between snapshots while updates are pending.
    resume : bool, default True
        Start from ``snapshot`` when that file exists.
    overwrite : bool, default False
        With ``resume=False``: replace an existing ``snapshot`` (otherwise it is refused).
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
        Learners other than OASIS: while feedback keeps arriving, a new model version is
        published at least this often (each publication exports W, O(nnz(W))); it is published
        at once when the queue empties. OASIS publishes after every batch.
    rebase_every : int, default 2000
        OASIS: updates held as low-rank factors before they are folded into a new base model.
        Folding often slows the learner; folding rarely slows each query (it multiplies the
        factors). Measured trade-off: see the feedback guide of the documentation.
    max_batch : int, default 64
        Triplets the learner thread applies in one call (the time it holds the interpreter).
        Larger batches raise the learner's rate and the queries' tail latency.
    drift_check_every : int, default 1000
        Corpora above ``exact_limit``: applied triplets between two recall checks of the candidate
        index (on a news20 slice, the starting index's recall@10 fell from 1.0 to 0.85 within the
        first 900 OASIS triplets; README "Learning from feedback").
    drift_sample : int, default 50
        Corpus documents (held out from their own answer) the recall check scores exactly.
    min_recall : float, default 0.9
        Recall@10 of the candidate stage under the newest model below which the candidate index
        is rebuilt with the newest model.
    """

    def __init__(self, index, learner=None, snapshot=None, snapshot_every: int = 1000,
                 snapshot_seconds: float = 60.0, resume: bool = True, queue_size: int = 100_000,
                 max_click_pairs: int = 10, exact_limit: int = 200_000, candidate_pool: int = 200,
                 recent_queries: int = 256, publish_seconds: float = 0.05, rebase_every: int = 2000,
                 max_batch: int = 64, drift_check_every: int = 1000, drift_sample: int = 50,
                 min_recall: float = 0.9, overwrite: bool = False):
        index_dir = None
        if not isinstance(index, Index):
            index_dir = Path(index)
        elif index.loaded_from_:
            index_dir = Path(index.loaded_from_[0])
        if snapshot is not None:  # before the index is loaded: a refused path costs nothing
            check_snapshot_target(snapshot, index_dir, bool(resume), bool(overwrite))
        self.index = index if isinstance(index, Index) else open_index(index, mmap=True)
        if not self.index.supports_learning:
            raise self.index.unsupported("learning from feedback", "it updates a bilinear model over a corpus held "
                                         "in this process (serve it without --learn)")
        self.snapshot_every = check_int(snapshot_every, "snapshot_every", 1)
        self.snapshot_seconds = check_float(snapshot_seconds, "snapshot_seconds", 0.0, low_open=True)
        self.max_click_pairs = check_int(max_click_pairs, "max_click_pairs", 1)
        self.exact_limit = check_int(exact_limit, "exact_limit", 0)
        self.candidate_pool = check_int(candidate_pool, "candidate_pool", 1)
        self.publish_seconds = check_float(publish_seconds, "publish_seconds", 0.0)
        self.rebase_every = check_int(rebase_every, "rebase_every", 1)
        self.max_batch = check_int(max_batch, "max_batch", 1)
        self.drift_check_every = check_int(drift_check_every, "drift_check_every", 1)
        self.drift_sample = check_int(drift_sample, "drift_sample", 2)
        self.min_recall = check_float(min_recall, "min_recall", 0.0, 1.0)
        queue_size = check_int(queue_size, "queue_size", 1)
        self.snapshot_path = None if snapshot is None else Path(snapshot)
        # the snapshot file as found: a snapshot write refuses if another writer replaced it since
        self._snap_state = None if self.snapshot_path is None else file_state(self.snapshot_path)
        base = self.index.model
        if not isinstance(base, (BilinearSimilarity, CompactSimilarity)):
            raise InvalidInputError(f"feedback learning updates a bilinear or compact model, not the "
                                    f"{type(base).__name__} this index serves (serve it without --learn)")
        self.featurizer = base.featurizer
        self.identity = snapshot_identity(base)
        self.X = sp.csr_matrix(self.index.X_)
        self._rows = {plain_value(v): r for r, v in enumerate(self.index.ids_)}
        self._int_ids = self.index.ids_.dtype.kind == "i"

        start, counters = base, {"n_applied": 0, "n_received": 0}
        self.resumed_from = None
        if resume and self.snapshot_path is not None and self.snapshot_path.exists():
            start = type(base).load(self.snapshot_path)
            if start.n_features != base.n_features:
                raise FileFormatError(f"{self.snapshot_path}: the snapshot has {start.n_features} features, "
                                      f"the index {base.n_features}")
            check_resumable(self.snapshot_path, start, self.identity)
            fb = start.metadata.get("feedback")
            if isinstance(fb, dict) and isinstance(fb.get("n_applied"), int) and fb["n_applied"] >= 0:
                counters["n_applied"] = counters["n_received"] = fb["n_applied"]
            self.resumed_from = str(self.snapshot_path)
        if base.normalize and isinstance(base, BilinearSimilarity):
            raise InvalidInputError("the index's model normalises documents; feedback learning needs a "
                                    "non-normalising model")
        self.learner = learner if learner is not None else self._default_learner(base)
        # (imported here: the service imports this module at start)
        from ..learners.bilinear import BaseBilinear
        from ..learners.compact import CompactSSI

        if not isinstance(self.learner, (BaseBilinear, CompactSSI)):
            raise InvalidInputError(f"{type(self.learner).__name__} cannot continue from a saved model "
                                    "(no start_from); use oasis, sors-*, adasors-* or ssi-dwuv")
        self.learner.start_from(start, self.X)
        # OASIS versions: base + the steps as factors; a compact model is published whole
        self._lowrank = isinstance(self.learner, BaseBilinear) and self.learner.engine_.mode == OASIS_MODE
        self._factors: list[tuple] = []  # OASIS: (A, B) of batches applied but not yet published
        self._lock = threading.Lock()  # counters and snapshot facts
        self.n_received = counters["n_received"]
        self.n_applied = counters["n_applied"]
        self.n_losses = 0
        self.n_applied_at_start = self.n_applied
        self._learned = self.n_applied  # applied to the learner; n_applied: in the published version
        self._publish_time = time.monotonic()
        self._final_snapshot = True
        self._published = ModelVersion(0, self._with_featurizer(start))
        self.n_rebases = 0
        self.snapshot_info = None
        if self.resumed_from is not None:
            self.snapshot_info = {"path": str(self.snapshot_path), "n_applied": self.n_applied,
                                  "time": self.snapshot_path.stat().st_mtime, "version": 0}
        self._snap_applied = self.n_applied
        self._snap_time = time.monotonic()
        self._recent = deque(maxlen=check_int(recent_queries, "recent_queries", 1))
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self._error = None
        self.snapshot_error = None  # the last failed snapshot (retried when the next one is due)
        self._closed = False
        # the candidate stage (corpora above exact_limit) and its drift checks
        self._candidates = self.index
        self.candidate_info = {"built_from_version": 0, "recall": None, "checked_at_version": None,
                               "refreshes": 0, "refreshing": False, "min_recall": self.min_recall}
        self._drift_wake = threading.Event()
        self._checked_applied = self.n_applied
        self._refresher = None
        if self.X.shape[0] > self.exact_limit:
            self._refresher = threading.Thread(target=self._refresh_loop, name="sparsesim-candidate-refresh",
                                               daemon=True)
            self._refresher.start()
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
        if isinstance(model, CompactSimilarity):  # ssi-dwuv with its recorded settings, else its defaults
            try:
                learner = make_estimator("ssi-dwuv", **params)
                check_params(learner)
                return learner
            except (ValueError, TypeError, KeyError):
                return make_estimator("ssi-dwuv")
        if algorithm in ("oasis", "sors-l1", "sors-offdiag", "adasors-l1", "adasors-offdiag"):
            try:
                learner = make_estimator(algorithm, **params)
                if bool(learner.get_params().get("identity", True)) == model.identity:
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
        """The newest published model version as one model."""
        return self._published.model()

    @property
    def version(self) -> int:
        """Number of model versions published since start (0: the starting model)."""
        return self._published.number

    def query(self, Q, top_k: int | None = None, remember=None):
        """Top-k documents of each query row under the newest model version.

        Parameters
        ----------
        Q : sparse matrix, shape (n_queries, n_features), or CheckedQueries
            Query rows, checked here; or rows and ``top_k`` checked already
            (:func:`~sparsesim.validation.check_queries`, the service's request parser),
            used as they are.
        top_k : int, optional
            Results per query (10 when not given); not given with a ``CheckedQueries``.
        remember : list, optional
            The queries as sent (one per row): kept with their results for :meth:`ask`.

        Returns
        -------
        ids : list of ndarray
        scores : ndarray, shape (n_queries, top_k)
        version : int
            The model version that answered.
        """
        current = self._published
        n = self.X.shape[0]
        if isinstance(Q, CheckedQueries):
            if top_k is not None:
                raise InvalidInputError("give top_k in the CheckedQueries or as a value, not both")
        else:
            Q = check_queries(Q, 10 if top_k is None else top_k, self.index.n_features, n)
        Q, k = Q.rows, Q.top_k
        with np.errstate(over="ignore", invalid="ignore"):  # overflowing scores are refused just below
            rows, vals = self._top_rows(current, Q, k, exact=n <= self.exact_limit)
        if not np.isfinite(vals).all():  # refused before it is remembered for ask()
            raise InvalidInputError("the query's scores overflow float64 (values too large); scale the query down")
        if remember is not None:
            for i, item in enumerate(remember):
                self._recent.append((item, Q[i], rows[i][: min(k, 10)]))
        return [self.index.ids_[r] for r in rows], vals, current.number

    def _top_rows(self, version: ModelVersion, Q, k: int, exact: bool, candidates=None):
        """Row numbers and scores of the top ``k`` under ``version``: exhaustive, or the candidate
        index's pool re-ranked exactly. One query row at a time: its q M as one dense vector
        of n_features, its scores ``X @ (q M)`` (never a queries x corpus block). ``Q``: checked
        rows (a query's, or stored corpus rows), which the candidate index takes as they are."""
        rows = np.empty((Q.shape[0], k), np.int64)
        vals = np.empty((Q.shape[0], k))
        cand = None
        if not exact:
            pool = max(k, min(self.candidate_pool, self.X.shape[0]))
            # the rows are checked and 1 <= pool <= the corpus the candidate index holds: not checked again
            cand, _ = (candidates or self._candidates).query_rows(CheckedRows(Q), CheckedTopK(pool))
        for i in range(Q.shape[0]):
            qm = version.dense_query(Q[i])
            if exact:
                top, s = top_k_rows((self.X @ qm)[None, :], k)
                rows[i], vals[i] = top[0], s[0]
            else:
                c = np.sort(np.asarray(cand[i], np.int64))  # ties: the lower document number first
                top, s = top_k_rows((take_rows(self.X, c) @ qm)[None, :], k)
                rows[i], vals[i] = c[top[0]], s[0]
        return rows, vals

    def score(self, Q, doc_ids) -> np.ndarray:
        """S(q_i, x_j) under the newest model for query rows ``Q`` and documents ``doc_ids``."""
        rows = [self._row_of(d, "doc_ids") for d in doc_ids]
        Q = check_csr(Q, name="queries", n_features=self.index.n_features)
        current, Xd = self._published, take_rows(self.X, rows)
        return np.array([Xd @ current.dense_query(Q[i]) for i in range(Q.shape[0])]).reshape(Q.shape[0], len(rows))

    # -- feedback -------------------------------------------------------------------------------
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
            while len(batch) < self.max_batch:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = any(b is _STOP for b in batch)
            work = [b for b in batch if b is not _STOP]
            try:
                try:
                    if work and self._error is None:
                        self._apply(work)
                    if self._learned != self.n_applied:
                        snap_due = stop or self._snapshot_due(self._learned)
                        if (self._lowrank or snap_due or self._queue.qsize() == 0
                                or time.monotonic() - self._publish_time >= self.publish_seconds):
                            self._publish()
                except Exception as exc:  # kept and raised to callers: the thread must not die silently
                    self._error = exc
                if work or stop:  # the published version is saved even after a failed update
                    self._maybe_snapshot(force=stop and self._final_snapshot)
            except Exception as exc:  # a failed snapshot: reported, retried when the next one is due
                self.snapshot_error = exc
                self._snap_retry_at = time.monotonic() + 1.0
            finally:
                for _ in batch:
                    self._queue.task_done()
            if stop:
                return

    def _apply(self, work: list[tuple]) -> None:
        """One batch through the learner's triplet update (published by :meth:`_publish`)."""
        m = len(work)
        queries = [w[0] for w in work]
        if all(isinstance(q, int) for q in queries):
            Q = take_rows(self.X, queries)
        else:
            Q = sp.vstack([take_rows(self.X, [q]) if isinstance(q, int) else q for q in queries], format="csr")
        P = take_rows(self.X, [w[1] for w in work])
        N = take_rows(self.X, [w[2] for w in work])
        # checked rows (stored corpus rows; vectors checked entry by entry when the record was read):
        # the learner takes the stacked batch as it is
        Xs = CheckedRows(sp.vstack([Q, P, N], format="csr"))
        triplets = np.arange(m, dtype=np.int64)[:, None] + np.array([0, m, 2 * m], np.int64)
        before = self.learner.n_updates_
        self.learner.partial_fit_triplets(Xs, triplets)
        if self._lowrank:
            self._factors.append(oasis_factors(Q, (P - N).tocsr(), self.learner.last_steps_))
        with self._lock:
            self._learned += m
            self.n_losses += self.learner.n_updates_ - before

    def _publish(self) -> None:
        """The next immutable version (one reference assignment): OASIS the current version plus
        the factors of the batches since, folded into a new base every ``rebase_every`` updates;
        other learners a full export of W."""
        current = self._published
        if self._lowrank:
            factors, self._factors = self._factors, []
            A = sp.vstack([f[0] for f in factors], format="csr")
            B = sp.vstack([f[1] for f in factors], format="csr")
            nxt = current.with_updates(current.number + 1, A, B)
            if nxt.n_pending >= self.rebase_every:
                nxt = nxt.rebased()
                self.n_rebases += 1
        else:
            nxt = ModelVersion(current.number + 1, self._with_featurizer(self.learner.model_))
        with self._lock:
            self._published = nxt
            self.n_applied = self._learned
            self._publish_time = time.monotonic()
        if self._refresher is not None and self.n_applied - self._checked_applied >= self.drift_check_every:
            self._drift_wake.set()

    def _snapshot_due(self, applied: int) -> bool:
        return self.snapshot_path is not None and (
            applied - self._snap_applied >= self.snapshot_every
            or time.monotonic() - self._snap_time >= self.snapshot_seconds)

    def _maybe_snapshot(self, force: bool = False) -> None:
        if self.snapshot_path is None:
            return
        if not force and self.snapshot_error is not None and time.monotonic() < self._snap_retry_at:
            return
        if (force or self._snapshot_due(self.n_applied)) and self.n_applied != self._snap_applied:
            self.snapshot()

    def snapshot(self) -> dict:
        """Write the newest model to the snapshot file atomically; returns the snapshot facts."""
        if self.snapshot_path is None:
            raise InvalidInputError("no snapshot path was given")
        current = self._published
        version, model = current.number, current.model()
        applied = self.n_applied
        meta = dict(model.metadata)
        meta["feedback"] = {"n_applied": int(applied), "version": int(version), **self.identity}
        # another learner writing the same file meanwhile (a second `learn --resume`, a second server)
        # gets ConcurrentWriteError here instead of one of them silently dropping the other's triplets
        with replacing_unchanged(self.snapshot_path, self._snap_state):
            model.save(self.snapshot_path, metadata=meta)  # the published version itself: no second model object
            self._snap_state = file_state(self.snapshot_path)
        info = {"path": str(self.snapshot_path), "n_applied": int(applied), "time": time.time(),
                "version": int(version)}
        with self._lock:
            self.snapshot_info = info
            self._snap_applied = applied
            self._snap_time = time.monotonic()
            self.snapshot_error = None
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
        self._drift_wake.set()
        if self._refresher is not None:
            self._refresher.join()
        self._raise_if_failed()
        if self._final_snapshot and self.snapshot_error is not None:
            exc = self.snapshot_error
            if isinstance(exc, SparsesimError):  # e.g. another writer replaced the file: its own message
                raise exc
            raise FileFormatError(f"the final snapshot to {self.snapshot_path} failed ({type(exc).__name__}: "
                                  f"{exc}); {self.n_applied - self._snap_applied} applied triplet(s) are not "
                                  f"saved") from exc

    def _raise_if_failed(self):
        exc = self._error
        if exc is not None:
            raise LearnerStoppedError(f"the feedback learner stopped after an internal error ({type(exc).__name__}: "
                                      f"{str(exc)[:300]}); feedback is refused until it is restarted, queries are "
                                      f"answered by model version {self.version}") from exc

    def problems(self) -> list[str]:
        """What keeps the learner from working fully (empty when healthy): a stopped learner
        thread, a failed snapshot."""
        out = []
        if self._error is not None:
            out.append(f"the feedback learner stopped after an internal error ({type(self._error).__name__}: "
                       f"{str(self._error)[:200]}); feedback is refused")
        snap = self.snapshot_error
        if snap is not None:
            out.append(f"the last snapshot to {self.snapshot_path} failed ({type(snap).__name__}: {str(snap)[:200]}); "
                       f"{self.n_applied - self._snap_applied} applied triplet(s) not saved yet, retried at the next "
                       f"snapshot")
        return out

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

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
                    "publishing": ("low-rank factors, folded every %d updates" % self.rebase_every)
                    if self._lowrank else "full export of W",
                    "factored_updates": self._published.n_pending, "rebases": self.n_rebases,
                    "scoring": "exact" if self.X.shape[0] <= self.exact_limit else
                    f"index candidates ({self.candidate_pool}) re-ranked exactly",
                    "candidates": None if self._refresher is None else dict(self.candidate_info)}
