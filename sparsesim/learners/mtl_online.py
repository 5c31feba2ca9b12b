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

import os
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from ..data.mtl_classification import check_task_streams
from ..exceptions import FileFormatError, InvalidInputError
from ..persistence import load_bundle, save_bundle
from ..validation import check_csr
from .base import OnlineClassifier

__all__ = ["Round", "iter_rounds", "make_round", "OnlineMultiTaskClassifier", "MultiTaskLinearModel"]

LINEAR_MODEL_KIND = "multitask-linear-classifier"


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


def _json_value(v):
    """A JSON-safe copy of a parameter value (numpy scalars unwrapped, other objects by repr)."""
    if isinstance(v, np.generic):
        return v.item()
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    return repr(v)


class MultiTaskLinearModel:
    """The learned weights of an online multi-task classifier: one linear model per task.

    Parameters
    ----------
    coef : array, shape (n_features, n_tasks)
        Column ``i`` is task ``i``'s weight vector (the estimators' ``coef_``).
    parts : dict of str to array of shape (n_features, n_tasks), optional
        Named components whose sum is ``coef`` (ROMCO: ``"U"``, the low-rank part, and ``"V"``, the
        group-sparse part), kept so a learner can resume from them (``ROMCO.set_state(U, V)``).
    metadata : dict, optional
        Algorithm, parameters and training facts (JSON-serialisable), saved with the model.
    """

    def __init__(self, coef, parts: dict | None = None, metadata: dict | None = None):
        coef = np.array(coef, dtype=np.float64)
        if coef.ndim != 2 or coef.shape[1] < 1:
            raise InvalidInputError(f"coef must be an (n_features, n_tasks) matrix, got shape {coef.shape}")
        if not np.all(np.isfinite(coef)):
            raise InvalidInputError("coef contains NaN or infinite values")
        self.coef = coef
        self.parts = {}
        for name, part in (parts or {}).items():
            part = np.array(part, dtype=np.float64)
            if part.shape != coef.shape or not np.all(np.isfinite(part)):
                raise InvalidInputError(f"part {name!r} must be a finite {coef.shape} matrix")
            self.parts[str(name)] = part
        if self.parts and not np.allclose(sum(self.parts.values()), coef, rtol=1e-9, atol=1e-12):
            raise InvalidInputError(f"the parts {sorted(self.parts)} do not add up to coef")
        self.metadata = dict(metadata or {})

    @property
    def n_features(self) -> int:
        return self.coef.shape[0]

    @property
    def n_tasks(self) -> int:
        return self.coef.shape[1]

    def decision_function(self, X, task: int) -> np.ndarray:
        """Margins of the rows of ``X`` (CSR or dense, ``n_features`` columns) for ``task``."""
        if not 0 <= int(task) < self.n_tasks:
            raise InvalidInputError(f"task {task} out of range 0..{self.n_tasks - 1}")
        X = check_csr(X, n_features=self.n_features)
        return np.asarray(X @ self.coef[:, int(task)]).ravel()

    def predict(self, X, task: int) -> np.ndarray:
        """Labels in {-1, +1} for ``task`` (margin 0 -> +1)."""
        return np.where(self.decision_function(X, task) >= 0, 1, -1)

    def save(self, path: str | os.PathLike) -> dict:
        """Write the model atomically (npz + JSON metadata, no pickle). Returns the metadata."""
        meta = dict(self.metadata)
        meta.update(n_features=self.n_features, n_tasks=self.n_tasks, parts=sorted(self.parts))
        arrays = {"coef": self.coef, **{f"part_{name}": part for name, part in self.parts.items()}}
        return save_bundle(path, arrays, meta, kind=LINEAR_MODEL_KIND)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "MultiTaskLinearModel":
        """Read a model written by :meth:`save` (format, kind and checksum verified)."""
        arrays, meta = load_bundle(path, kind=LINEAR_MODEL_KIND)
        try:
            coef = arrays["coef"]
            if coef.shape != (int(meta["n_features"]), int(meta["n_tasks"])):
                raise ValueError(f"coef has shape {coef.shape}")
            parts = {name: arrays[f"part_{name}"] for name in meta.get("parts", [])}
            return cls(coef, parts=parts, metadata=meta)
        except (KeyError, ValueError, TypeError, InvalidInputError) as exc:
            raise FileFormatError(f"{path}: inconsistent multi-task linear model ({exc})") from None

    def __repr__(self):
        return (f"MultiTaskLinearModel(n_features={self.n_features}, n_tasks={self.n_tasks}, "
                f"parts={sorted(self.parts)}, algorithm={self.metadata.get('algorithm')!r})")


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
    _state_attrs: tuple = ("n_tasks_", "n_features_in_", "n_rounds_", "n_seen_", "n_mistakes_", "online_margins_")

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

    # ---- public API
    def _start(self, n_tasks: int, n_features: int) -> None:
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
            self._start(len(X), X[0].shape[1])
        margins = [np.empty(x.shape[0]) for x in X]
        # The per-round products are small (m x m by m x d): BLAS threads only add overhead and
        # contention, so the online loop runs single-threaded (parallelism is across runs).
        with threadpool_limits(limits=1, user_api="blas"):
            for t, rnd in enumerate(iter_rounds(X, y)):
                p = self._learn_round(rnd)
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
                "params": {k: _json_value(v) for k, v in self.get_params().items()},
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
