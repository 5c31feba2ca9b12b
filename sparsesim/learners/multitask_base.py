"""The shared life cycle of the OMTRSL family's learners (:mod:`sparsesim.learners.multitask`).

:class:`MultiTaskBase` holds what OMTRSL, its active / random variants, OSTRSL and OGRSL have in
common: task coding, ``"auto"`` parameter resolution, the OMTRSL triplet protocol of :meth:`fit`,
``partial_fit_triplets`` and the export to a :class:`~sparsesim.models.MultiTaskSimilarity`. The
estimators themselves (their engines and update calls) live in :mod:`sparsesim.learners.multitask`.
"""

from __future__ import annotations

import numpy as np

from ..defaults import (AUTO, check_auto_positive, class_overlap, data_statistics, resolve_bilinear,
                        resolve_task_coupling)
from ..memory import MemoryBudget, parse_memory
from ..exceptions import InvalidInputError
from ..models import BilinearSimilarity, MultiTaskSimilarity
from ..triplets import iter_omtrsl_triplets
from ..validation import check_csr, check_fit_matrix, check_labels
from .base import TripletLearner


class MultiTaskBase(TripletLearner):
    """Shared life cycle of the multi-task triplet learners: task coding, the OMTRSL protocol, model export."""

    @classmethod
    def _unit_test_params(cls) -> dict:
        return {"n_triplets": 120, "initial_capacity": 256}  # a few hundred updates, a small table that grows

    _algorithm = ""
    _learner_kind = "multitask-triplet"
    _skipped_checks = {"sklearn_check_estimator": "fit(X, y, tasks) needs the task of every document, outside "
                                                  "scikit-learn's fit(X, y) contract"}
    _state_attrs = TripletLearner._state_attrs + ("tasks_", "n_queries_", "engine_", "engines_", "query_rng_",
                                                  "task_seconds_", "resolved_params_", "data_statistics_")
    _fit_chunk = 65536
    _progress_chunk = None  # progress after each whole chunk

    # -- hooks ------------------------------------------------------------------------------
    def _check_params(self):
        check_auto_positive("C", self.C)
        if not isinstance(self.storage, str) or self.storage not in ("auto", "dense", "hash"):
            raise InvalidInputError(f"storage must be 'auto', 'dense' or 'hash', got {self.storage!r}")

    def _resolved(self, X):
        """``({"C": number[, "b": number]}, statistics)``: explicit values as given; an ``"auto"`` C by
        the OASIS-style rule on corpus ``X`` (:func:`sparsesim.defaults.resolve_bilinear`), an
        ``"auto"`` b from the class overlap of the tasks (:func:`sparsesim.defaults.resolve_task_coupling`)."""
        self._check_params()
        out, stats = {}, {}
        if self.C == AUTO:
            stats = data_statistics(X) if X is not None and X.shape[0] >= 2 else {"s": 1.0, "g": 1.0, "n_pairs": 0}
            out["C"] = float(resolve_bilinear("multitask", {"C": AUTO}, stats, 1)["C"])
        else:
            out["C"] = float(self.C)
        if hasattr(self, "b"):
            overlap = getattr(self, "_class_overlap", None)
            out["b"] = resolve_task_coupling(self.b, overlap)
            if overlap is not None:
                stats = dict(stats, class_overlap=overlap)
        return out, stats

    def resolve_params(self, X, y=None, tasks=None) -> dict:
        """The numbers this learner uses on the documents ``X`` (sparse; no training): ``{"C": ...}``,
        and for OMTRSL ``"b"`` (from the class labels ``y`` and ``tasks`` of the documents when
        given, as :meth:`fit` does). Explicit values are returned unchanged."""
        saved = getattr(self, "_class_overlap", None)
        if y is not None and tasks is not None:
            self._class_overlap = class_overlap(y, tasks)
        try:
            return self._resolved(check_csr(X))[0]
        finally:
            self._class_overlap = saved

    def _param(self, name: str) -> float:
        """The value in use for ``name``: the resolved one once training has started."""
        resolved = getattr(self, "resolved_params_", None) or {}
        return resolved[name] if name in resolved else getattr(self, name)

    def _ensure_engines(self, X):
        """Resolve the ``"auto"`` parameters on the corpus of the first update and build the engines."""
        if getattr(self, "resolved_params_", None) is None:
            self.resolved_params_, self.data_statistics_ = self._resolved(X)
            self._make_engines(self.n_features_in_)

    def _budget(self, share: int = 1) -> MemoryBudget:
        """The memory budget of this fit (``max_memory``), split into ``share`` equal parts."""
        return MemoryBudget(parse_memory(self.max_memory) // max(1, int(share)), self.max_memory,
                            owner=self._algorithm or type(self).__name__)

    def _make_engines(self, d: int):  # pragma: no cover - abstract
        raise NotImplementedError

    def _train(self, X, triplets, signs, codes):  # pragma: no cover - abstract
        raise NotImplementedError

    def _export(self):  # pragma: no cover - abstract
        raise NotImplementedError

    # -- state --------------------------------------------------------------------------------
    def _start(self, d: int, tasks=None):
        """Set the state up for ``d`` features and the task labels ``tasks`` (in order)."""
        labels = np.asarray(tasks)
        if labels.size == 0:
            raise InvalidInputError("no task given")
        if np.unique(labels).size != labels.size:
            raise InvalidInputError("task labels must be distinct")
        self._check_params()
        self.tasks_ = labels
        self._init_state(d)

    def _init_state(self, d: int):
        super()._init_state(d)
        self.n_queries_ = 0
        self.resolved_params_ = None  # set with the engines by the first update (an "auto" C reads its corpus)
        self.data_statistics_ = {}
        if self.C != AUTO:
            self._ensure_engines(None)

    def _update(self, X, triplets, signs, codes):
        if triplets.shape[0] == 0 and getattr(self, "resolved_params_", None) is None:
            return np.zeros(0), np.zeros(0, np.int8)
        self._ensure_engines(X)
        signs = np.ones(triplets.shape[0]) if signs is None else signs
        return self._train(X, triplets, signs, codes)

    def _count(self, n, losses, queried):
        super()._count(n, losses, queried)
        self.n_queries_ += int(np.sum(queried))

    # -- task coding ------------------------------------------------------------------------
    def _task_codes(self, task_ids) -> np.ndarray:
        task_ids = np.asarray(task_ids)
        order = np.argsort(self.tasks_, kind="stable")
        sorted_tasks = self.tasks_[order]
        pos = np.clip(np.searchsorted(sorted_tasks, task_ids), 0, sorted_tasks.size - 1)
        if task_ids.size and not np.all(sorted_tasks[pos] == task_ids):
            unknown = np.unique(task_ids[sorted_tasks[pos] != task_ids])[:5]
            raise InvalidInputError(f"unknown task id(s) {list(unknown)}; known tasks: {list(self.tasks_)}")
        return order[pos].astype(np.int64)

    # -- public API ---------------------------------------------------------------------------
    def partial_fit_triplets(self, X, triplets, signs=None, task_ids=None, tasks=None):
        """Learn from ``triplets`` of rows of ``X``, in order.

        Parameters
        ----------
        X : sparse matrix or array, shape (n_rows, n_features)
        triplets : int array (n, 3)
            Rows (x_t, x_t^1, x_t^2).
        signs : array of {-1, +1} (n,), optional
            y_t: +1 when x_t is more similar to x_t^1 than to x_t^2 (default all +1).
        task_ids : array (n,), optional
            Task label of each triplet (default: all the first task).
        tasks : sequence, optional
            All task labels, in order; needed on the first call when a batch may not show every
            task (as ``classes`` in scikit-learn's ``partial_fit``). Default: the labels seen.

        Returns
        -------
        self
        """
        X = check_csr(X, n_features=getattr(self, "n_features_in_", None))
        n = np.asarray(triplets).shape[0] if np.ndim(triplets) else 0
        first = not self.__sklearn_is_fitted__()
        if task_ids is None:
            task_ids = np.full(n, 0 if first else self.tasks_[0])
        task_ids = np.asarray(task_ids)
        if task_ids.shape != (n,):
            raise InvalidInputError(f"task_ids must hold one task per triplet ({n}), got shape {task_ids.shape}")
        if first:
            self._class_overlap = None  # no class labels here: an "auto" b takes its label-free value
            self._start(X.shape[1], np.unique(task_ids) if tasks is None else tasks)
        elif tasks is not None and not np.array_equal(np.asarray(tasks), self.tasks_):
            raise InvalidInputError(f"tasks {list(tasks)} differ from the tasks of the first call {list(self.tasks_)}")
        return self._learn(X, triplets, signs, codes=self._task_codes(task_ids))

    def _triplet_stream(self, y, tasks):
        """The OMTRSL protocol (:func:`sparsesim.triplets.iter_omtrsl_triplets`)."""
        for trip, signs, task_ids in iter_omtrsl_triplets(y, self.n_triplets, seed=self.random_state, tasks=tasks,
                                                          chunk_size=self._fit_chunk):
            yield {"triplets": trip, "signs": signs, "codes": self._task_codes(task_ids)}

    def fit(self, X, y, tasks, progress=None):
        """Learn from ``n_triplets`` triplets drawn from labels ``y`` and the task column ``tasks``.

        The OMTRSL protocol (:func:`sparsesim.triplets.omtrsl_triplets`): a task is drawn
        uniformly, then a same-class pair and an other-class document inside it, and a fair coin
        gives y_t. The stream depends only on ``random_state``, so every algorithm sees the same
        triplets for the same seed.

        Parameters
        ----------
        X : sparse matrix (n_documents, n_features)
        y : array (n_documents,)
            Class labels (compared within a task).
        tasks : array (n_documents,)
            Task of each document; every task needs two classes and no single-document class.
        progress : callable, optional
            Called with the number of triplets processed after each chunk.

        Returns
        -------
        self
        """
        X = check_fit_matrix(X)
        y = check_labels(y, X.shape[0])
        tasks = np.asarray(tasks)
        if tasks.shape != (X.shape[0],):
            raise InvalidInputError(f"tasks must hold one task per document ({X.shape[0]}), got shape {tasks.shape}")
        self._class_overlap = class_overlap(y, tasks)  # what an "auto" b reads
        return self._fit_stream(X, self._triplet_stream(y, tasks), progress, tasks=np.unique(tasks))

    @property
    def query_ratio_(self) -> float:
        """Fraction of triplets whose label y_t was asked for (1.0 without selective sampling)."""
        self._check_fitted()
        return self.n_queries_ / self.n_triplets_seen_ if self.n_triplets_seen_ else 0.0

    @property
    def updates_per_second_(self) -> float:
        """Model updates (positive-loss triplets) per second of training."""
        self._check_fitted()
        return self.n_updates_ / self.train_seconds_ if self.train_seconds_ > 0 else 0.0

    def _metadata(self) -> dict:
        return {
            "algorithm": self._algorithm,
            "params": {k: v for k, v in self.get_params().items() if isinstance(v, (int, float, str, bool, type(None)))},
            "resolved_params": dict(self.resolved_params_ or {}),
            "n_triplets_seen": int(self.n_triplets_seen_),
            "n_updates": int(self.n_updates_),
            "n_queries": int(self.n_queries_),
            "train_seconds": float(self.train_seconds_),
        }

    @property
    def model_(self) -> MultiTaskSimilarity:
        """The learned :class:`MultiTaskSimilarity`."""
        self._check_fitted()
        if getattr(self, "_model_cache", None) is None:
            self._ensure_engines(None)  # fitted on zero triplets: the model is M_1 whatever C is
            own, shared = self._export()
            self._model_cache = MultiTaskSimilarity(own, shared, tasks=list(self.tasks_), metadata=self._metadata())
        return self._model_cache

    def model_for(self, task) -> BilinearSimilarity:
        """The learned :class:`~sparsesim.models.BilinearSimilarity` of ``task``."""
        return self.model_.model_for(task)

    def score_pairs(self, task, A, B):
        """Row-wise S^task(A[i], B[i])."""
        return self.model_.score_pairs(task, A, B)
