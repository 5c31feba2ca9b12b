"""Two more online multi-task baselines of the ROMCO paper (Yang, Zhao & Gao, Sec. 6): CW-COL and
OSMTL-e. The ROMCO paper names them and tunes their parameters on a held-out shuffle but gives no
equations; the update rules below are the ones this module implements, written out so that the
tests (``tests/test_mtl_collab.py``) check the code against them.

* **CW-COL** (confidence-weighted collaborative online multi-task learning; Li, Hoi, Chang, Liu &
  Jain, CIKM 2011 / TKDE 2014): a *global* model learned from the instances of every task and a
  *personal* model per task, each a Gaussian over weights with mean ``mu`` and diagonal covariance
  ``Sigma`` (``mu = 0``, ``Sigma = I`` at the start). Task ``k`` predicts with the mixed mean
  ``mu_k~ = eta mu_g + (1 - eta) mu_k``. With the margin ``p = mu_k~ . x`` and the confidence
  ``v = x^T Sigma~ x`` (``Sigma~ = eta^2 Sigma_g + (1 - eta)^2 Sigma_k``, the variance of the mixed
  weights), an instance with ``y p < 1`` takes the AROW step (Crammer, Kulesza & Dredze 2009) of
  the mixed model, shared between its two parts:

  ``beta = 1 / (v + r)``, ``alpha = (1 - y p) beta``,
  ``mu_g += alpha y eta Sigma_g x``, ``mu_k += alpha y (1 - eta) Sigma_k x``,
  ``Sigma_g -= beta eta^2 (Sigma_g x)^2``, ``Sigma_k -= beta (1 - eta)^2 (Sigma_k x)^2`` (elementwise).

  With ``eta = 0`` it is one AROW learner per task, with ``eta = 1`` one global AROW learner.
* **OSMTL-e** (online smoothed multi-task learning with exponential updates; Murugesan, Liu,
  Carbonell & Yang, NIPS 2016): task ``k`` predicts with a smoothed combination of every task's
  weights, ``f_k(x) = sum_j theta_kj w_j . x`` with ``theta_k = lam e_k + (1 - lam) p_k`` and
  ``p_k`` a distribution over the *other* tasks (uniform at the start; ``lam`` keeps the task's
  own share). After each instance of task ``k``:

  - on a mistake (``y f_k(x) <= 0``), every task's weights move in proportion to their share:
    ``w_j += C theta_kj y x``;
  - the shares follow the exponentially weighted average of the tasks' hinge losses on the
    instance (before the step): ``p_kj <- p_kj exp(-ell_j / tau) / Z`` for ``j != k``, with
    ``ell_j = [1 - y w_j . x]_+``.

Both store dense ``m x d`` state (``CW-COL``: means and variances; ``OSMTL-e``: weights) and touch
only the instance's features per step, ``O(nnz * m)`` for OSMTL-e and ``O(nnz)`` for CW-COL.
"""

from __future__ import annotations

import numpy as np

from ..exceptions import InvalidInputError
from .mtl_online import OnlineMultiTaskClassifier, Round

__all__ = ["CWCOL", "OSMTLE"]


class CWCOL(OnlineMultiTaskClassifier):
    """CW-COL: a global and a personal confidence-weighted model per task, predicted by their mix.

    Parameters
    ----------
    eta : float in [0, 1], default 0.5
        Weight of the global model in every task's prediction.
    r : float > 0, default 1.0
        AROW regularisation: larger values take smaller, more conservative steps.

    Attributes
    ----------
    mu_global_, sigma_global_ : ndarray (n_features,)
        Mean and diagonal covariance of the global model.
    mu_, sigma_ : ndarray (n_tasks, n_features)
        Means and diagonal covariances of the personal models.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsesim.learners.mtl_collab import CWCOL
    >>> rng = np.random.default_rng(0)
    >>> X = [rng.standard_normal((80, 6)) for _ in range(3)]
    >>> y = [np.where(x[:, 0] > 0, 1, -1) for x in X]
    >>> bool(CWCOL().fit(X, y).error_rates_.mean() < 0.3)
    True
    """

    _state_attrs = OnlineMultiTaskClassifier._state_attrs + ("mu_global_", "sigma_global_", "mu_", "sigma_")
    _param_spec = {"eta": ("float", 0, 1), "r": ("float", 0, None, {"low_open": True})}

    def __init__(self, eta=0.5, r=1.0):
        self.eta = eta
        self.r = r

    def _init_state(self, n_tasks: int, n_features: int) -> None:
        self.mu_global_ = np.zeros(n_features)
        self.sigma_global_ = np.ones(n_features)
        self.mu_ = np.zeros((n_tasks, n_features))
        self.sigma_ = np.ones((n_tasks, n_features))

    def _weights(self) -> np.ndarray:
        e = float(self.eta)
        return e * self.mu_global_[None, :] + (1.0 - e) * self.mu_

    def _learn_round(self, rnd: Round) -> np.ndarray:
        e, r = float(self.eta), float(self.r)
        out = np.empty(rnd.tasks.size)
        for j, k in enumerate(rnd.tasks):
            idx, x = rnd.instance(j)
            y = rnd.y[j]
            mg, sg = self.mu_global_, self.sigma_global_
            mk, sk = self.mu_[k], self.sigma_[k]
            p = float(x @ (e * mg[idx] + (1.0 - e) * mk[idx]))
            out[j] = p
            if y * p >= 1.0:
                continue
            sgx, skx = sg[idx] * x, sk[idx] * x
            v = float(x @ (e * e * sgx + (1.0 - e) ** 2 * skx))
            beta = 1.0 / (v + r)
            alpha = (1.0 - y * p) * beta
            mg[idx] += alpha * y * e * sgx
            mk[idx] += alpha * y * (1.0 - e) * skx
            sg[idx] -= beta * e * e * sgx * sgx
            sk[idx] -= beta * (1.0 - e) ** 2 * skx * skx
        return out


class OSMTLE(OnlineMultiTaskClassifier):
    """OSMTL-e: online smoothed multi-task learning with exponentially weighted task shares.

    Parameters
    ----------
    lam : float in [0, 1], default 0.5
        Share of a task's own weights in its prediction (``1``: independent Perceptrons).
    C : float > 0, default 1.0
        Step of the Perceptron update.
    tau : float > 0, default 1.0
        Temperature of the exponential share update (smaller: the shares follow the losses faster).

    Attributes
    ----------
    W_ : ndarray (n_tasks, n_features)
        Every task's own weights ``w_j``.
    shares_ : ndarray (n_tasks, n_tasks)
        ``theta``: row ``k`` is the combination task ``k`` predicts with.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsesim.learners.mtl_collab import OSMTLE
    >>> rng = np.random.default_rng(0)
    >>> X = [rng.standard_normal((80, 6)) for _ in range(3)]
    >>> y = [np.where(x[:, 0] > 0, 1, -1) for x in X]
    >>> est = OSMTLE().fit(X, y)
    >>> bool(est.error_rates_.mean() < 0.3), bool(np.allclose(est.shares_.sum(axis=1), 1.0))
    (True, True)
    """

    _state_attrs = OnlineMultiTaskClassifier._state_attrs + ("W_", "_p")
    _param_spec = {"lam": ("float", 0, 1), "C": ("float", 0, None, {"low_open": True}),
                   "tau": ("float", 0, None, {"low_open": True})}

    def __init__(self, lam=0.5, C=1.0, tau=1.0):
        self.lam = lam
        self.C = C
        self.tau = tau

    def _init_state(self, n_tasks: int, n_features: int) -> None:
        self.W_ = np.zeros((n_tasks, n_features))
        p = np.ones((n_tasks, n_tasks)) - np.eye(n_tasks)
        self._p = p / np.maximum(p.sum(axis=1, keepdims=True), 1.0)

    @property
    def shares_(self) -> np.ndarray:
        """``theta_k = lam e_k + (1 - lam) p_k`` for every task (a single task keeps all of its share)."""
        m = self.W_.shape[0]
        lam = float(self.lam) if m > 1 else 1.0
        return lam * np.eye(m) + (1.0 - lam) * self._p

    def _weights(self) -> np.ndarray:
        return self.shares_ @ self.W_

    def _learn_round(self, rnd: Round) -> np.ndarray:
        C, tau = float(self.C), float(self.tau)
        m = self.W_.shape[0]
        out = np.empty(rnd.tasks.size)
        for j, k in enumerate(rnd.tasks):
            idx, x = rnd.instance(j)
            y = rnd.y[j]
            theta = self.shares_[k]
            margins = self.W_[:, idx] @ x  # every task's own margin on x
            p = float(theta @ margins)
            out[j] = p
            if y * p <= 0:
                self.W_[:, idx] += np.outer(C * theta * y, x)
            if m > 1:
                losses = np.maximum(0.0, 1.0 - y * margins)
                row = self._p[k] * np.exp(-(losses - losses.min()) / tau)
                row[k] = 0.0
                total = row.sum()
                if not np.isfinite(total) or total <= 0:
                    raise InvalidInputError(f"OSMTL-e: the task shares of task {k} vanished (tau = {tau:g}); "
                                            "use a larger tau")
                self._p[k] = row / total
        return out
