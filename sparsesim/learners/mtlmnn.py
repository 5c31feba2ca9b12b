"""mtLMNN: multi-task large-margin nearest-neighbour metric learning (Parameswaran & Weinberger,
NIPS 2010), the batch baseline of the OMTRSL paper (Hao et al., IJCAI 2017, Table 1 and Figs. 1-2).

Task ``t`` measures ``d_t(x, x') = (x - x')^T (M_0 + M_t) (x - x')`` with a shared ``M_0`` and a
personal ``M_t``, all positive semi-definite, minimising (the paper's eq. (7), hinge form)

``gamma0 ||M_0 - I||_F^2 + sum_t [ gamma ||M_t||_F^2 + sum_{j ~> i} d_t(x_i, x_j)
+ sum_{j ~> i, l: y_l != y_i} [1 + d_t(x_i, x_j) - d_t(x_i, x_l)]_+ ]``

where ``j ~> i`` are the ``n_neighbors`` same-class target neighbours of ``x_i`` in its own task
(Euclidean), and ``l`` the task's documents of other classes. The solver is proximal subgradient
descent on ``(M_0, M_1..M_T)``: a subgradient step on the data terms, then the exact prox of the
Frobenius penalties over the PSD cone (the step's matrix shrunk towards ``I`` resp. ``0`` and its
eigenvalues clipped at 0), with LMNN's step rule: a step that lowers the objective is kept and the step grows
by 1 %, otherwise it is undone and the step halves. The subgradient of the data terms is
``X^T (D - W - W^T) X`` with ``W[i, j]`` counting the pulls and hinge terms of the pair (rows of the
task) and ``D`` the diagonal of ``W``'s row plus column sums.

The metrics are dense ``d x d`` and every iteration compares all pairs of a task, so mtLMNN is for
low-dimensional multi-task sets (isolet-tasks with ``representation="pca"``); it refuses more than
``max_features`` features with an error saying why. The model is the
:class:`~sparsesim.models.MultiTaskSimilarity` ``S_t(x, x') = x^T (I + (M_0 - I) + M_t) x'``, the
bilinear form of each task's metric.
"""

from __future__ import annotations

import time

import numpy as np

from ..exceptions import InvalidInputError, ResourceLimitError
from ..memory import MemoryBudget, check_allocation, parse_memory
from ..models import MultiTaskSimilarity
from ..validation import check_fit_matrix, check_labels
from .base import SparsesimEstimator

__all__ = ["MTLMNN", "mtlmnn_objective", "target_neighbors", "task_terms", "weighted_scatter"]

_BATCH = ("is fitted in one batch from class labels (fit(X, y, tasks)), not from triplets, so learning in chunks "
          "of triplets does not apply")


def target_neighbors(X: np.ndarray, y: np.ndarray, k: int) -> np.ndarray:
    """Row ``i``: the ``k`` nearest (Euclidean) rows of ``x_i``'s class, itself excluded."""
    sq = np.einsum("ij,ij->i", X, X)
    E = sq[:, None] + sq[None, :] - 2.0 * X @ X.T
    E[y[:, None] != y[None, :]] = np.inf
    np.fill_diagonal(E, np.inf)
    return np.argsort(E, axis=1, kind="stable")[:, :k]


def _pair_distances(X, M):
    XM = X @ M
    sq = np.einsum("ij,ij->i", XM, X)
    return sq[:, None] + sq[None, :] - XM @ X.T - (XM @ X.T).T


def task_terms(X, y, T, M):
    """Data part of the objective of one task and its weight matrix W (pulls + active hinge terms)."""
    D = _pair_distances(X, M)
    n = X.shape[0]
    rows = np.arange(n)[:, None]
    dt = D[rows, T]  # (n, k)
    other = y[:, None] != y[None, :]
    W = np.zeros((n, n))
    loss = float(dt.sum())
    for c in range(T.shape[1]):
        slack = (1.0 + dt[:, c:c + 1] - D) * other
        active = slack > 0
        loss += float(slack[active].sum())
        W[np.arange(n), T[:, c]] += 1.0 + active.sum(axis=1)
        W -= active
    return loss, W


def weighted_scatter(X, W):
    """``sum_ab W[a, b] (x_a - x_b)(x_a - x_b)^T = X^T (diag(W 1 + W^T 1) - W - W^T) X``."""
    L = np.diag(W.sum(axis=1) + W.sum(axis=0)) - W - W.T
    return X.T @ L @ X


def mtlmnn_objective(M0, Ms, parts, gamma0, gamma) -> float:
    """The objective above for the tasks' ``parts = [(X_t, y_t, targets_t), ...]``."""
    total = gamma0 * float(np.sum((M0 - np.eye(M0.shape[0])) ** 2))
    for Mt, (X, y, T) in zip(Ms, parts):
        total += gamma * float(np.sum(Mt * Mt)) + task_terms(X, y, T, M0 + Mt)[0]
    return total


def _psd(M):
    w, V = np.linalg.eigh(0.5 * (M + M.T))
    return (V * np.maximum(w, 0.0)) @ V.T


class MTLMNN(SparsesimEstimator):
    """mtLMNN: a shared and a per-task PSD metric by large-margin nearest neighbours (batch).

    Parameters
    ----------
    gamma0 : float >= 0, default 1.0
        Weight of ``||M_0 - I||_F^2`` (how far the shared metric may leave the Euclidean one).
    gamma : float >= 0, default 1.0
        Weight of ``||M_t||_F^2`` (how far a task may leave the shared metric).
    n_neighbors : int, default 3
        Target neighbours per document.
    max_iter : int, default 100
        Subgradient steps at most.
    tol : float, default 1e-6
        Stop when a kept step lowers the objective by less than this fraction.
    max_per_task : int, optional
        Learn from a class-stratified sample of at most this many documents per task (all pairs of a
        task are compared every step). ``None``: all of them.
    n_triplets : int, default 0
        Accepted for the protocols' common interface and ignored: mtLMNN learns from class labels.
    random_state : int, optional
        Seed of the ``max_per_task`` sample.
    max_features : int, default 1024
        Largest feature count accepted (``T + 1`` dense ``d x d`` metrics and their eigendecompositions).
    max_memory : int, str, default "auto"

    Attributes
    ----------
    M0_ : ndarray (d, d)
    Ms_ : list of ndarray (d, d)
        Per-task parts; task ``t`` measures with ``M0_ + Ms_[t]``.
    tasks_ : ndarray
        Task labels in the order of ``Ms_``.
    objective_ : list of float
        Objective after every kept step (the first entry: at ``M_0 = I``, ``M_t = 0``).

    Examples
    --------
    >>> import numpy as np
    >>> from sparsesim.learners.mtlmnn import MTLMNN
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((80, 4)); y = np.tile(np.repeat([0, 1], 20), 2); tasks = np.repeat([0, 1], 40)
    >>> X[:, 0] += 3 * y
    >>> est = MTLMNN(max_iter=20).fit(X, y, tasks)
    >>> bool(est.objective_[-1] < est.objective_[0])
    True
    """

    _algorithm = "mtlmnn"
    _learner_kind = "multitask-triplet"
    _skipped_checks = {"check_partial_fit_chunks": _BATCH,
                       "sklearn_check_estimator": "fit(X, y, tasks) needs the task of every document, outside "
                                                  "scikit-learn's fit(X, y) contract"}
    _state_attrs = ("n_features_in_", "n_triplets_seen_", "n_updates_", "train_seconds_", "M0_", "Ms_", "tasks_",
                    "objective_", "resolved_params_", "updates_per_second_", "query_ratio_")
    _param_spec = {"gamma0": ("float", 0, None), "gamma": ("float", 0, None), "n_neighbors": ("int", 1, None),
                   "max_iter": ("int", 1, None), "tol": ("float", 0, None), "max_per_task": ("int?", 2, None),
                   "max_features": ("int", 1, None)}

    @classmethod
    def _unit_test_params(cls) -> dict:
        return {"n_triplets": 120, "n_neighbors": 5}

    def __init__(self, gamma0=1.0, gamma=1.0, n_neighbors=3, max_iter=100, tol=1e-6, max_per_task=None,
                 n_triplets=0, random_state=None, max_features=1024, max_memory="auto"):
        self.gamma0 = gamma0
        self.gamma = gamma
        self.n_neighbors = n_neighbors
        self.max_iter = max_iter
        self.tol = tol
        self.max_per_task = max_per_task
        self.n_triplets = n_triplets
        self.random_state = random_state
        self.max_features = max_features
        self.max_memory = max_memory

    def _parts(self, X, y, tasks):
        labels = np.unique(tasks)
        rng = np.random.default_rng(self.random_state)
        k = int(self.n_neighbors)
        parts = []
        for t in labels:
            rows = np.flatnonzero(tasks == t)
            if self.max_per_task is not None and rows.size > int(self.max_per_task):
                from sklearn.model_selection import train_test_split

                rows, _ = train_test_split(rows, train_size=int(self.max_per_task), stratify=y[rows],
                                           random_state=int(rng.integers(2**31)))
                rows = np.sort(rows)
            yt = y[rows]
            _, counts = np.unique(yt, return_counts=True)
            if counts.min() <= k:
                raise InvalidInputError(f"mtLMNN needs more than n_neighbors = {k} documents of every class in every "
                                        f"task (task {t!r} has a class with {counts.min()}); lower n_neighbors")
            Xt = X[rows].toarray()
            parts.append((Xt, yt, target_neighbors(Xt, yt, k)))
        return labels, parts

    def check_fit_data(self, n_features: int, class_counts=None, n_tasks=None) -> None:
        """Raise :class:`~sparsesim.exceptions.ResourceLimitError` when ``n_features`` are more than
        ``max_features`` (``n_tasks + 1`` dense d x d metrics) before any work; see
        :meth:`~sparsesim.learners.base.SparsesimEstimator.check_fit_data`. (Class sizes are
        checked per task by ``fit``.)"""
        d = int(n_features)
        n_tasks = 1 if n_tasks is None else int(n_tasks)
        limit = self.max_features
        if d > int(limit):
            raise ResourceLimitError(
                f"mtLMNN learns {n_tasks + 1} dense d x d metrics ({8 * d * d * (n_tasks + 1) / 2**30:.2g} GiB "
                f"at d = {d}) and eigendecomposes each at every step; it allows at most max_features = {limit} "
                "features (raise max_features to run it anyway): reduce the features first (e.g. isolet-tasks "
                "with representation='pca'), or use omtrsl for high-dimensional data")

    def _check_size(self, d, parts):
        n_max = max(p[0].shape[0] for p in parts)
        budget = MemoryBudget(parse_memory(self.max_memory), self.max_memory, owner="mtLMNN")
        check_allocation(budget, 8 * (4 * d * d * (len(parts) + 2) + 4 * n_max * n_max),
                         f"mtLMNN's {len(parts) + 1} metrics and the pair distances of {n_max} documents",
                         hint="max_per_task or fewer features")

    def fit(self, X, y, tasks, progress=None):
        """Learn the shared and per-task metrics from class labels within each task.

        Parameters
        ----------
        X : sparse matrix or array, shape (n_documents, n_features)
        y : array, shape (n_documents,)
            Class labels.
        tasks : array, shape (n_documents,)
            Task of every document.
        progress : callable, optional
            Called with 0 when learning starts.

        Returns
        -------
        self
        """
        self._reset()
        X = check_fit_matrix(X)
        y = check_labels(y, X.shape[0], min_per_class=1)
        tasks = np.asarray(tasks)
        if tasks.shape != (X.shape[0],):
            raise InvalidInputError(f"tasks needs one entry per document ({X.shape[0]}), got shape {tasks.shape}")
        _, y = np.unique(y, return_inverse=True)
        d = X.shape[1]
        self.check_fit_data(d, n_tasks=np.unique(tasks).size)  # before the tasks' rows are made dense
        labels, parts = self._parts(X, y, tasks)
        self._check_size(d, parts)
        if progress is not None:
            progress(0)
        start = time.perf_counter()
        g0, g = float(self.gamma0), float(self.gamma)
        M0, Ms = np.eye(d), [np.zeros((d, d)) for _ in parts]

        def state(M0, Ms):
            """Objective and the subgradients of its data terms (the regularisers go into the prox)."""
            loss = g0 * float(np.sum((M0 - np.eye(d)) ** 2))
            grads, G0 = [], np.zeros((d, d))
            for Mt, (Xt, yt, Tt) in zip(Ms, parts):
                task_loss, W = task_terms(Xt, yt, Tt, M0 + Mt)
                S = weighted_scatter(Xt, W)
                loss += g * float(np.sum(Mt * Mt)) + task_loss
                grads.append(S)
                G0 = G0 + S
            return loss, G0, grads

        loss, G0, grads = state(M0, Ms)
        objective = [loss]
        scale = max(float(np.linalg.eigvalsh(0.5 * (G0 + G0.T))[-1]), 1e-12)
        step = 0.1 / scale
        kept = 0
        for _ in range(int(self.max_iter)):
            # proximal steps: argmin ||M - V||^2 / (2 step) + gamma ||M - C||^2 over the PSD cone is the
            # projection of (V + 2 step gamma C) / (1 + 2 step gamma) (the penalty is isotropic)
            M0_new = _psd((M0 - step * G0 + 2.0 * step * g0 * np.eye(d)) / (1.0 + 2.0 * step * g0))
            Ms_new = [_psd((Mt - step * Gt) / (1.0 + 2.0 * step * g)) for Mt, Gt in zip(Ms, grads)]
            new_loss, G0_new, grads_new = state(M0_new, Ms_new)
            if new_loss < loss:
                done = (loss - new_loss) <= float(self.tol) * abs(loss)
                M0, Ms, loss, G0, grads = M0_new, Ms_new, new_loss, G0_new, grads_new
                objective.append(loss)
                kept += 1
                step *= 1.01
                if done:
                    break
            else:
                step *= 0.5
                if step * scale < 1e-12:
                    break
        self.train_seconds_ = time.perf_counter() - start
        self.M0_, self.Ms_, self.tasks_, self.objective_ = M0, Ms, labels, objective
        self.n_features_in_ = int(d)
        self.n_triplets_seen_ = 0
        self.n_updates_ = kept
        self.updates_per_second_ = 0.0
        self.query_ratio_ = 1.0
        self.resolved_params_ = {"n_documents": int(sum(p[0].shape[0] for p in parts)), "n_steps": kept}
        return self

    @property
    def model_(self) -> MultiTaskSimilarity:
        """``S_t(x, x') = x^T (M_0 + M_t) x'`` per task (shared part ``M_0 - I``)."""
        self._check_fitted()
        if getattr(self, "_model_cache", None) is None:
            tasks = [t.item() if hasattr(t, "item") else t for t in self.tasks_]
            meta = {"algorithm": self._algorithm,
                    "params": {k: v for k, v in self.get_params().items()
                               if v is None or isinstance(v, (bool, int, float, str))},
                    "train_seconds": float(self.train_seconds_)}
            self._model_cache = MultiTaskSimilarity(self.Ms_, shared=self.M0_ - np.eye(self.n_features_in_),
                                                    tasks=tasks, metadata=meta)
        return self._model_cache
