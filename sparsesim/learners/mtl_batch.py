"""The ROMCO paper's batch multi-task baselines, MTFL and TRML, run online the paper's way: the
learner predicts each instance with the weights of its last training, keeps every instance it has
seen, and retrains on all of them after every ``retrain_every`` (the paper: 100) instances.

Both minimise, over the ``d x m`` weight matrix ``W`` (column ``t`` = task ``t``),

``F(W) = sum_t (1 / n_t) sum_{i in task t} log(1 + exp(-y_i w_t . x_i)) + rho * Omega(W)``

(the logistic loss of each task averaged over its instances, as MALSAR's ``Logistic_*`` solvers),
by accelerated proximal gradient (FISTA, Beck & Teboulle 2009, with backtracking on the step),
warm-started from the previous training's ``W``:

* **MTFL** (``mtfl``; multi-task feature learning, Argyriou, Evgeniou & Pontil, NIPS 2007 / MLJ
  2008): ``Omega(W) = ||W||_{2,1} = sum_j ||W[j, :]||_2`` -- features are shared by all tasks or
  dropped by all (the ``(2,1)``-norm form of the paper's ``min_D tr(W^T D^{-1} W)`` over
  ``D >= 0, tr D <= 1``, whose minimum is ``||W||_{2,1}^2``: the two give the same solutions over
  their regularisation paths). Prox: each row shrinks by ``max(0, 1 - s rho / ||W[j, :]||)``.
* **TRML** (``trml``; trace-norm regularised multi-task learning, Pong, Tseng, Ji & Ye, SIAM J.
  Optim. 2010; Ji & Ye, ICML 2009): ``Omega(W) = ||W||_*`` -- the task vectors share a
  low-dimensional subspace. Prox: singular value thresholding ``[sigma - s rho]_+``, computed
  through the ``m x m`` Gram matrix (:func:`sparsesim.learners.romco.spectral_prox_gram`).

A training run stops when the relative change of ``W`` falls below ``tol`` or after ``max_iter``
iterations. Storing the stream costs its nonzeros; every training costs ``O(max_iter * nnz * m)``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..exceptions import InvalidInputError
from .mtl_online import OnlineMultiTaskClassifier, Round
from .romco import spectral_prox_gram

__all__ = ["MTFL", "TRML", "logistic_task_loss", "row_group_prox", "fista_multitask"]


def logistic_task_loss(W: np.ndarray, X: sp.csr_matrix, y: np.ndarray, task: np.ndarray, counts: np.ndarray):
    """``sum_t mean_{i in t} log(1 + exp(-y_i w_t . x_i))`` and its gradient (``d x m``)."""
    loss, G = _blocks_loss(np.ascontiguousarray(np.asarray(W, dtype=np.float64).T), _task_blocks(X, y, task), counts)
    return loss, G.T


def _task_blocks(X, y, task):
    return [(int(t), X[rows], y[rows]) for t in np.unique(task) for rows in [np.flatnonzero(task == t)]]


def _blocks_loss(WT, blocks, counts, gradient: bool = True):
    """The loss at the task-major weights ``WT`` (``m x d``: row ``t`` = task ``t``, so every
    product reads and writes contiguous memory) and, unless ``gradient`` is False (the step search
    only compares losses), its gradient in the same layout."""
    loss = 0.0
    G = np.zeros_like(WT) if gradient else None
    for t, Xt, yt in blocks:
        margins = yt * (Xt @ WT[t])
        loss += float(np.sum(np.logaddexp(0.0, -margins))) / counts[t]
        if gradient:  # d loss / d (w . x) = -y sigmoid(-y w.x) / n_t
            G[t] = Xt.T @ (-yt * np.exp(-np.logaddexp(0.0, margins)) / counts[t])
    return loss, G


def row_group_prox(W: np.ndarray, tau: float) -> np.ndarray:
    """Prox of ``tau * ||W||_{2,1}``: each row scaled by ``max(0, 1 - tau / ||row||)``."""
    norms = np.linalg.norm(W, axis=1)
    scale = np.where(norms > tau, 1.0 - tau / np.where(norms > 0, norms, 1.0), 0.0)
    return W * scale[:, None]


def _prox_task_major(WT, tau, kind):
    """The prox of ``tau * Omega`` applied to ``W = WT^T``, returned task-major."""
    if kind == "l21":  # a feature's weights across tasks are a column of WT
        norms = np.sqrt(np.einsum("tj,tj->j", WT, WT))
        return WT * np.where(norms > tau, 1.0 - tau / np.where(norms > 0, norms, 1.0), 0.0)
    M, _, _, _ = spectral_prox_gram(WT @ WT.T, tau, "nuclear")  # W M = (M^T WT)^T, M symmetric
    return M @ WT


def fista_multitask(X, y, task, n_tasks, rho, kind, W0=None, max_iter=100, tol=1e-5):
    """Minimise ``logistic_task_loss + rho * Omega`` by FISTA with backtracking.

    Only the features that occur in ``X`` (or that ``W0`` already weights) can be nonzero in any
    iterate -- every other row of ``W`` has a zero gradient, and both proxes keep a zero row zero
    (the group shrink scales it; the singular value thresholding works through ``W^T W``, which
    zero rows leave unchanged) -- so the iterations run over those rows alone: a stream's early
    trainings see a small part of the vocabulary.

    Parameters
    ----------
    X : csr_matrix (n, d)
    y : ndarray (n,) of ±1
    task : ndarray (n,) of int
        Task of each row.
    n_tasks : int
    rho : float >= 0
    kind : {"l21", "trace"}
    W0 : ndarray (d, m), optional
        Starting point (zeros by default).
    max_iter : int
    tol : float
        Stop when ``||W_k - W_{k-1}||_F <= tol * max(1, ||W_k||_F)``.

    Returns
    -------
    W : ndarray (d, m)
    n_iter : int
    """
    X = sp.csr_matrix(X)
    d = X.shape[1]
    W = np.zeros((d, n_tasks)) if W0 is None else np.array(W0, dtype=np.float64)
    used = np.zeros(d, dtype=bool)
    used[X.indices] = True
    used |= np.any(W != 0.0, axis=1)
    active = np.flatnonzero(used)
    column = np.zeros(d, dtype=np.int64)
    column[active] = np.arange(active.size)
    X_active = sp.csr_matrix((X.data, column[X.indices], X.indptr), shape=(X.shape[0], active.size))
    WT, n_iter = _fista_task_major(X_active, y, task, n_tasks, rho, kind, np.ascontiguousarray(W[active].T),
                                   max_iter, tol)
    W[active] = WT.T
    return W, n_iter


def _fista_task_major(X, y, task, n_tasks, rho, kind, WT, max_iter, tol):
    counts = np.bincount(task, minlength=n_tasks).astype(np.float64)
    counts[counts == 0] = 1.0
    Z, t_k, L = WT.copy(), 1.0, 1.0
    blocks = _task_blocks(X, y, task)
    n_iter = 0
    for n_iter in range(1, int(max_iter) + 1):
        f_z, g_z = _blocks_loss(Z, blocks, counts)
        while True:
            W_new = _prox_task_major(Z - g_z / L, rho / L, kind)
            diff = W_new - Z
            f_new, _ = _blocks_loss(W_new, blocks, counts, gradient=False)
            if f_new <= f_z + float(np.sum(g_z * diff)) + 0.5 * L * float(np.sum(diff * diff)) + 1e-12:
                break
            L *= 2.0
            if L > 1e12:
                raise InvalidInputError("the proximal gradient step found no decrease (non-finite data?)")
        t_next = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * t_k * t_k))
        change = np.linalg.norm(W_new - WT)
        Z = W_new + ((t_k - 1.0) / t_next) * (W_new - WT)
        WT, t_k = W_new, t_next
        if change <= tol * max(1.0, np.linalg.norm(WT)):
            break
    return WT, n_iter


class _RetrainedBatch(OnlineMultiTaskClassifier):
    """A batch multi-task learner run online: predict with the last training's weights, store the
    instance, retrain on everything stored after every ``retrain_every`` instances."""

    _kind = ""
    _state_attrs = OnlineMultiTaskClassifier._state_attrs + (
        "W_", "_feat", "_vals", "_lens", "_labels", "_tasks", "n_stored_", "n_retrains_", "n_iter_", "_last_train")
    _param_spec = {"rho": ("float", 0, None), "retrain_every": ("int", 1, None), "max_iter": ("int", 1, None),
                   "tol": ("float", 0, None)}

    @classmethod
    def _unit_test_params(cls) -> dict:
        return {"retrain_every": 12}  # a few retrainings on the checks' small streams

    def __init__(self, rho=0.01, retrain_every=100, max_iter=100, tol=1e-5):
        self.rho = rho
        self.retrain_every = retrain_every
        self.max_iter = max_iter
        self.tol = tol

    def _init_state(self, n_tasks: int, n_features: int) -> None:
        self.W_ = np.zeros((n_features, n_tasks))
        self._feat, self._vals, self._lens, self._labels, self._tasks = [], [], [], [], []
        self.n_stored_ = 0
        self.n_retrains_ = 0
        self.n_iter_ = []
        self._last_train = 0

    def _weights(self) -> np.ndarray:
        return self.W_.T

    def stored(self):
        """The instances stored so far: ``(X csr, y, task)``."""
        lens = np.asarray(self._lens, dtype=np.int64)
        indptr = np.concatenate([[0], np.cumsum(lens)])
        feat = np.concatenate(self._feat) if self._feat else np.zeros(0, np.int64)
        vals = np.concatenate(self._vals) if self._vals else np.zeros(0)
        X = sp.csr_matrix((vals, feat, indptr), shape=(lens.size, self.n_features_in_))
        return X, np.asarray(self._labels, dtype=np.float64), np.asarray(self._tasks, dtype=np.int64)

    def _retrain(self) -> None:
        X, y, task = self.stored()
        self.W_, n_iter = fista_multitask(X, y, task, self.n_tasks_, float(self.rho), self._kind, W0=self.W_,
                                          max_iter=int(self.max_iter), tol=float(self.tol))
        self.n_iter_.append(int(n_iter))
        self.n_retrains_ += 1
        self._last_train = self.n_stored_

    def _learn_round(self, rnd: Round) -> np.ndarray:
        out = np.empty(rnd.tasks.size)
        for j, task in enumerate(rnd.tasks):
            idx, val = rnd.instance(j)
            out[j] = float(val @ self.W_[idx, task])
            self._feat.append(np.array(idx, dtype=np.int64))
            self._vals.append(np.array(val, dtype=np.float64))
            self._lens.append(idx.size)
            self._labels.append(rnd.y[j])
            self._tasks.append(int(task))
            self.n_stored_ += 1
            if self.n_stored_ - self._last_train >= int(self.retrain_every):
                self._retrain()
        return out


class MTFL(_RetrainedBatch):
    """MTFL: multi-task feature learning (``||W||_{2,1}``), retrained every ``retrain_every`` instances.

    Parameters
    ----------
    rho : float >= 0, default 0.01
        Weight of ``||W||_{2,1}``.
    retrain_every : int, default 100
        Instances (all tasks counted) between two trainings; the weights used for a prediction
        are those of the last training (zero before the first: those predictions are undecided).
    max_iter : int, default 100
        FISTA iterations per training at most.
    tol : float, default 1e-5
        Relative change of ``W`` that ends a training.

    Attributes
    ----------
    W_ : ndarray (n_features, n_tasks)
        Weights of the last training.
    n_retrains_ : int
    n_iter_ : list of int
        FISTA iterations of each training.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsesim.learners.mtl_batch import MTFL
    >>> rng = np.random.default_rng(0)
    >>> X = [rng.standard_normal((60, 8)) for _ in range(3)]
    >>> y = [np.where(x[:, 0] > 0, 1, -1) for x in X]
    >>> est = MTFL(retrain_every=30).fit(X, y)
    >>> est.n_retrains_, bool(est.error_rates_.mean() < 0.5)
    (6, True)
    """

    _kind = "l21"


class TRML(_RetrainedBatch):
    """TRML: trace-norm regularised multi-task learning (``||W||_*``), retrained every
    ``retrain_every`` instances.

    Parameters
    ----------
    rho : float >= 0, default 0.01
        Weight of the trace norm ``||W||_*``.
    retrain_every, max_iter, tol
        As in :class:`MTFL`.

    Attributes
    ----------
    W_, n_retrains_, n_iter_
        As in :class:`MTFL`.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsesim.learners.mtl_batch import TRML
    >>> rng = np.random.default_rng(0)
    >>> X = [rng.standard_normal((60, 8)) for _ in range(3)]
    >>> y = [np.where(x[:, 0] > 0, 1, -1) for x in X]
    >>> est = TRML(retrain_every=30).fit(X, y)
    >>> bool(est.error_rates_.mean() < 0.5)
    True
    """

    _kind = "trace"
