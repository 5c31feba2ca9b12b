"""Shared machinery of the online multi-task classifiers (ROMCO and its baselines).

Protocol (Yang, Zhao & Gao, ROMCO, Sec. 3.2): there are ``m`` tasks, each with its own stream of
instances ``(x_t^i, y_t^i)`` in one shared feature space. At round ``t`` every task presents its
``t``-th instance; the learner predicts ``sign(z^i . x_t^i)`` for each, then sees the labels and
updates. When the streams have different lengths a task that has run out sits out the remaining
rounds (see :func:`iter_rounds`); the number of rounds is the longest stream.

A prediction with margin exactly 0 (e.g. the all-zero initial model) is counted as a mistake:
no decision was made (the same convention as :class:`~sparsesim.learners.linear_pa.PassiveAggressiveBinary`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from ..defaults import check_auto_positive, is_auto, resolve_online, stream_statistics
from ..exceptions import InvalidInputError
from ..models import MultiTaskLinearModel, json_value
from ..validation import check_csr, check_params, check_task_streams
from .base import OnlineClassifier

__all__ = ["Round", "iter_rounds", "make_round", "OnlineMultiTaskClassifier"]

@dataclass(frozen=True)
class Round:
    """The instances of one round, concatenated in sparse coordinate form.

    Attributes
    ----------
    tasks : ndarray of int, shape (k,)
        Active tasks, ascending.
    ptr : ndarray of int, shape (k + 1,)
        Instance ``j`` (of task ``tasks[j]``) owns entries ``ptr[j]:ptr[j+1]`` of ``feat``/``vals``.
    feat : ndarray of int, shape (nnz,)
        Feature ids (sorted and unique within each instance).
    vals : ndarray of float, shape (nnz,)
    y : ndarray of float, shape (k,)
        Labels in {-1, +1}.
    owner : ndarray of int, shape (nnz,)
        Position ``j`` in ``tasks`` of the instance each entry belongs to.
    """

    tasks: np.ndarray
    ptr: np.ndarray
    feat: np.ndarray
    vals: np.ndarray
    y: np.ndarray
    owner: np.ndarray

    def instance(self, j: int):
        """``(indices, values)`` of the ``j``-th instance of the round."""
        lo, hi = self.ptr[j], self.ptr[j + 1]
        return self.feat[lo:hi], self.vals[lo:hi]


def make_round(tasks, rows, y) -> Round:
    """Build a :class:`Round` from ``rows = [(indices, values), ...]`` (one per active task)."""
    tasks = np.asarray(tasks, dtype=np.int64)
    lens = np.array([len(r[0]) for r in rows], dtype=np.int64)
    ptr = np.concatenate([[0], np.cumsum(lens)])
    feat = np.concatenate([np.asarray(r[0], dtype=np.int64) for r in rows]) if rows else np.zeros(0, np.int64)
    vals = np.concatenate([np.asarray(r[1], dtype=np.float64) for r in rows]) if rows else np.zeros(0)
    owner = np.repeat(np.arange(len(rows)), lens)
    return Round(tasks, ptr, feat, vals, np.asarray(y, dtype=np.float64), owner)


def iter_rounds(X: list, y: list):
    """Yield the :class:`Round` s of per-task streams ``X`` (CSR) / ``y`` (±1), in order.

    Round ``t`` holds the ``t``-th instance of every task whose stream is longer than ``t``.
    """
    lengths = np.array([x.shape[0] for x in X])
    for t in range(int(lengths.max())):
        tasks = np.flatnonzero(lengths > t)
        rows = []
        for i in tasks:
            x = X[i]
            lo, hi = x.indptr[t], x.indptr[t + 1]
            rows.append((x.indices[lo:hi], x.data[lo:hi]))
        yield make_round(tasks, rows, [y[i][t] for i in tasks])


class OnlineMultiTaskClassifier(OnlineClassifier):
    """Base class: round loop, mistake counting, prediction. Subclasses implement
    ``_init_state(n_tasks, n_features)``, ``_learn_round(rnd) -> margins`` (margins of the round's
    instances *before* the update) and ``_weights() -> (n_tasks, n_features)`` array.

    Attributes
    ----------
    n_tasks_ : int
    n_features_in_ : int
    n_rounds_ : int
        Rounds processed.
    n_seen_ : ndarray of int, shape (n_tasks,)
        Instances processed per task.
    n_mistakes_ : ndarray of int, shape (n_tasks,)
        Online mistakes per task (sign of the margin before the update differs from the label;
        margin 0 counts as a mistake).
    online_margins_ : list of ndarray
        Margins before each update, per task, of the last :meth:`partial_fit` call.
    """

    _learner_kind = "multitask-classifier"
    _skipped_checks = {"sklearn_check_estimator": "fit takes one matrix and one label vector per task (lists), "
                                                  "outside scikit-learn's fit(X, y) contract"}
    _state_attrs: tuple = ("n_tasks_", "n_features_in_", "n_rounds_", "n_seen_", "n_mistakes_", "online_margins_",
                           "resolved_params_", "data_statistics_")
    # (kind for :func:`sparsesim.defaults.resolve_online`, the parameters it resolves from "auto")
    _auto_kind: str | None = None
    _auto_names: tuple = ()

    # ---- subclass hooks
    def _init_state(self, n_tasks: int, n_features: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _learn_round(self, rnd: Round) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _weights(self) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _model_parts(self) -> dict:
        """Named (n_features, n_tasks) components of ``coef_`` worth saving (none by default)."""
        return {}

    # ---- data-adaptive defaults
    def _resolved(self, X: list) -> tuple[dict, dict]:
        params = {name: getattr(self, name) for name in self._auto_names}
        for name, value in params.items():
            check_auto_positive(name, value, allow_zero=name.startswith("lam"))
        if not any(is_auto(v) for v in params.values()):
            return {k: float(v) for k, v in params.items()}, {}
        stats = stream_statistics(X)
        return {k: float(v) for k, v in resolve_online(self._auto_kind, params, stats).items()}, stats

    def resolve_params(self, X) -> dict:
        """The numbers the ``"auto"`` parameters resolve to on the task streams ``X`` (no training).

        Parameters
        ----------
        X : list of sparse matrices, one per task

        Returns
        -------
        dict
            Every step/regulariser parameter as a number (explicit values unchanged).
        """
        return self._resolved([check_csr(x) for x in X])[0]

    def _param(self, name: str) -> float:
        """The value in use for ``name``: the resolved one once training has started."""
        resolved = getattr(self, "resolved_params_", None) or {}
        return resolved[name] if name in resolved else getattr(self, name)

    # ---- public API
    def _start(self, n_tasks: int, n_features: int) -> None:
        check_params(self)  # types and ranges (sparsesim.validation), also on the first partial_fit
        self.n_tasks_ = n_tasks
        self.n_features_in_ = n_features
        self.n_rounds_ = 0
        self.n_seen_ = np.zeros(n_tasks, dtype=np.int64)
        self.n_mistakes_ = np.zeros(n_tasks, dtype=np.int64)
        self._init_state(n_tasks, n_features)

    def partial_fit(self, X, y):
        """One online pass over per-task streams (continues from the current model).

        Parameters
        ----------
        X : list of sparse matrices (or 2-D arrays), one per task, same number of columns
        y : list of label vectors in {-1, +1} (or {0, 1}), one per task

        Returns
        -------
        self
        """
        first = not hasattr(self, "n_tasks_")
        X, y = check_task_streams(
            X, y,
            n_features=None if first else self.n_features_in_,
            n_tasks=None if first else self.n_tasks_,
        )
        if first:
            # "auto" parameters read the streams of the first call (one pass: the whole data)
            self.resolved_params_, self.data_statistics_ = self._resolved(X)
            self._start(len(X), X[0].shape[1])
        elif getattr(self, "resolved_params_", None) is None:  # a state set without data (ROMCO.set_state)
            self.resolved_params_, self.data_statistics_ = self._resolved(X)
        margins = [np.empty(x.shape[0]) for x in X]
        # The per-round products are small (m x m by m x d): BLAS threads only add overhead and
        # contention, so the online loop runs single-threaded (parallelism is across runs).
        with threadpool_limits(limits=1, user_api="blas"):
            for t, rnd in enumerate(iter_rounds(X, y)):
                try:
                    p = self._learn_round(rnd)
                except np.linalg.LinAlgError:  # e.g. a step size so large the state overflowed
                    raise InvalidInputError(f"{type(self).__name__}: the online update diverged at round {t} "
                                            f"(non-finite state); use smaller step sizes") from None
                for j, i in enumerate(rnd.tasks):
                    margins[i][t] = p[j]
                wrong = np.sign(p) != rnd.y
                self.n_mistakes_[rnd.tasks] += wrong
                self.n_seen_[rnd.tasks] += 1
                self.n_rounds_ += 1
        self.online_margins_ = margins
        return self

    @property
    def coef_(self) -> np.ndarray:
        """Task weight vectors as a dense ``(n_features, n_tasks)`` matrix (column ``i`` = task ``i``)."""
        return np.asarray(self._weights()).T

    @property
    def model_(self) -> MultiTaskLinearModel:
        """The learned weights as a :class:`MultiTaskLinearModel` (``model_.save(path)`` writes them)."""
        self._check_fitted()
        meta = {"algorithm": type(self).__name__,
                "params": {k: json_value(v) for k, v in self.get_params().items()},
                "resolved_params": dict(getattr(self, "resolved_params_", None) or {}),
                "n_rounds": int(self.n_rounds_), "n_seen": self.n_seen_.tolist(),
                "n_mistakes": self.n_mistakes_.tolist()}
        return MultiTaskLinearModel(self.coef_, parts=self._model_parts(), metadata=meta)

    def decision_function(self, X, task: int) -> np.ndarray:
        """Margins of the rows of ``X`` under the model of ``task``."""
        self._check_fitted()
        if not 0 <= int(task) < self.n_tasks_:
            raise InvalidInputError(f"task {task} out of range 0..{self.n_tasks_ - 1}")
        X = check_csr(X, n_features=self.n_features_in_)
        w = np.asarray(self._weights()[int(task)]).ravel()
        return np.asarray(X @ w).ravel()

    def predict(self, X, task: int) -> np.ndarray:
        """Labels in {-1, +1} of the rows of ``X`` for ``task`` (margin 0 -> +1)."""
        return np.where(self.decision_function(X, task) >= 0, 1, -1)

    @property
    def error_rates_(self) -> np.ndarray:
        """Cumulative online error rate of each task (mistakes / instances seen)."""
        return self.n_mistakes_ / np.maximum(self.n_seen_, 1)


def as_csr_list(X) -> list:
    """Helper for callers holding one dense/sparse matrix per task."""
    return [sp.csr_matrix(x) for x in X]
