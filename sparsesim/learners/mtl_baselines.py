"""Online multi-task baselines of the ROMCO paper, from their published update rules.

* **PA-Global** -- one passive-aggressive model for the instances of all tasks.
* **PA-Unique** -- one passive-aggressive model per task, trained on that task only.
  Both reuse :class:`~sparsesim.learners.linear_pa.PassiveAggressiveBinary` (PA-I; ``C = "auto"``,
  ``1 / mean ||x||^2``: the paper's ``C = 1`` on L2-normalised instances).
* **OMTL** -- the multitask Perceptron of Cavallanti, Cesa-Bianchi & Gentile (JMLR 2010) with the
  fixed interaction matrix ``A = (m + 1) I - 1 1^T`` (identity plus the Laplacian of the clique): on a
  mistake on task ``i`` every task ``j`` moves by ``y (A^{-1})_{ji} x`` with
  ``A^{-1} = (I + 1 1^T) / (m + 1)``, i.e. ``2/(m+1)`` for the task itself and ``1/(m+1)`` for the others
  (:func:`omtl_interaction_inverse`).
* **OMTLLOG / OMTLVON** -- Saha, Rai, Daume III & Venkatasubramanian (AISTATS 2011): the same
  Perceptron step with an *adaptive* interaction matrix, initialised ``A = I / m``, updated after each
  mistake once the warm-up of ``epoch`` instances is over, by the Bregman-divergence step
  ``argmin_A  tr(W A W^T) + D(A, A_prev) / eta`` (W = d x m weights). Its first-order condition gives
  the closed forms used here (:func:`logdet_interaction_update`, :func:`vonneumann_interaction_update`):

  - LogDet divergence:      ``A^{-1} <- A^{-1} + eta * W^T W``
  - von Neumann divergence: ``log A^{-1} <- log A^{-1} + eta * W^T W``  (``A = exp(log A - eta W^T W)``)

  with ``W`` the weights before the current update. For von Neumann the eigenvalues of
  ``log A^{-1}`` are capped at ``VN_LOG_CAP`` (= 50) to keep the numbers finite: the update is
  unbounded by construction (the paper reports OMTLVON as unstable on spam, Table II).

Instances of one round are processed in ascending task order (each sees the updates made by the
previous tasks of the same round), which is the single-instance protocol of these algorithms applied
to ROMCO's rounds. ``W^T W`` is maintained incrementally in ``O(nnz * m + m^2)`` per mistake and
recomputed every ``gram_refresh`` mistakes.

CW-COL (Li et al. 2011) and OSMTL-e (Murugesan et al. 2016) are not implemented: their update rules
could not be checked against the original papers here.
"""

from __future__ import annotations

import numpy as np

from ..exceptions import DivergenceError, InvalidInputError
from .linear_pa import PA_VARIANTS, PassiveAggressiveBinary
from .mtl_online import OnlineMultiTaskClassifier, Round

__all__ = [
    "DivergenceError",
    "omtl_interaction_inverse",
    "multitask_perceptron_step",
    "logdet_interaction_update",
    "vonneumann_interaction_update",
    "PAGlobal",
    "PAUnique",
    "OMTL",
    "OMTLAdaptive",
    "VN_LOG_CAP",
]

VN_LOG_CAP = 50.0


# --------------------------------------------------------------------------- pure update rules


def omtl_interaction_inverse(m: int) -> np.ndarray:
    """Cavallanti et al. (2010): ``A^{-1}`` for ``A = I + L_clique = (m+1) I - 1 1^T``, i.e.
    ``(I + 1 1^T) / (m + 1)``."""
    return (np.eye(m) + np.ones((m, m))) / (m + 1.0)


def multitask_perceptron_step(Wt: np.ndarray, A_inv: np.ndarray, task: int, indices, values, label: float):
    """The multitask Perceptron update ``w <- w + y (A^{-1} ⊗ I_d) phi`` with ``phi = e_task ⊗ x``:
    row ``j`` of ``Wt`` (``m x d``) moves by ``y * A_inv[j, task] * x``. In place."""
    Wt[:, indices] += label * np.outer(A_inv[:, task], values)
    return Wt


def logdet_interaction_update(A_inv: np.ndarray, WtW: np.ndarray, eta: float) -> np.ndarray:
    """Saha et al. (2011), LogDet divergence: ``A_s^{-1} = A_{s-1}^{-1} + eta * sym(W^T W)``."""
    return A_inv + eta * 0.5 * (WtW + WtW.T)


def vonneumann_interaction_update(log_A_inv: np.ndarray, WtW: np.ndarray, eta: float):
    """Saha et al. (2011), von Neumann divergence: ``log A_s^{-1} = log A_{s-1}^{-1} + eta * sym(W^T W)``.

    Returns ``(log_A_inv_new, A_inv_new)``; eigenvalues of the logarithm are capped at ``VN_LOG_CAP``.
    """
    L = log_A_inv + eta * 0.5 * (WtW + WtW.T)
    w, Q = np.linalg.eigh(0.5 * (L + L.T))
    w = np.minimum(w, VN_LOG_CAP)
    return (Q * w) @ Q.T, (Q * np.exp(w)) @ Q.T


# --------------------------------------------------------------------------- PA baselines


class _PABaseline(OnlineMultiTaskClassifier):
    """What PA-Global and PA-Unique share: the PA variant and C, and the round loop that sends
    each instance to the model serving its task (``_model_for``)."""

    _auto_kind = "pa"
    _auto_names = ("C",)

    def __init__(self, variant: str = "pa1", C="auto"):
        self.variant = variant
        self.C = C

    def _new_model(self, n_features: int) -> PassiveAggressiveBinary:
        if self.variant not in PA_VARIANTS:
            raise InvalidInputError(f"unknown PA variant {self.variant!r}; use one of {PA_VARIANTS}")
        model = PassiveAggressiveBinary(variant=self.variant, C=self._param("C"))
        model._init_state(n_features)
        return model

    def _model_for(self, task: int) -> PassiveAggressiveBinary:
        raise NotImplementedError

    def _learn_round(self, rnd: Round) -> np.ndarray:
        out = np.empty(rnd.tasks.size)
        for j, task in enumerate(rnd.tasks):
            idx, val = rnd.instance(j)
            out[j] = self._model_for(task).learn_one(idx, val, rnd.y[j])
        return out


class PAGlobal(_PABaseline):
    """PA-Global: a single passive-aggressive model learns from the instances of every task.

    Parameters
    ----------
    variant : {"pa", "pa1", "pa2"}, default "pa1"
    C : float or "auto", default "auto"
        PA-I/PA-II aggressiveness. ``"auto"``: ``1 / q`` with ``q`` the mean ``||x||^2`` of the
        instances (:func:`sparsesim.defaults.resolve_online`; 1 on L2-normalised rows, the paper's
        setting); the value used is in ``resolved_params_``.
    """

    _state_attrs = OnlineMultiTaskClassifier._state_attrs + ("global_model_",)

    def _init_state(self, n_tasks: int, n_features: int) -> None:
        self.global_model_ = self._new_model(n_features)

    def _model_for(self, task: int) -> PassiveAggressiveBinary:
        return self.global_model_

    def _weights(self) -> np.ndarray:
        return np.tile(self.global_model_.coef_, (self.n_tasks_, 1))


class PAUnique(_PABaseline):
    """PA-Unique: an independent passive-aggressive model per task.

    Parameters
    ----------
    variant : {"pa", "pa1", "pa2"}, default "pa1"
    C : float or "auto", default "auto"
        PA-I/PA-II aggressiveness. ``"auto"``: ``1 / q`` with ``q`` the mean ``||x||^2`` of the
        instances (:func:`sparsesim.defaults.resolve_online`; 1 on L2-normalised rows, the paper's
        setting); the value used is in ``resolved_params_``.
    """

    _state_attrs = OnlineMultiTaskClassifier._state_attrs + ("models_",)

    def _init_state(self, n_tasks: int, n_features: int) -> None:
        self.models_ = [self._new_model(n_features) for _ in range(n_tasks)]

    def _model_for(self, task: int) -> PassiveAggressiveBinary:
        return self.models_[task]

    def _weights(self) -> np.ndarray:
        return np.vstack([m.coef_ for m in self.models_])


# --------------------------------------------------------------------------- multitask perceptrons


class _MultitaskPerceptron(OnlineMultiTaskClassifier):
    """Shared state: ``Wt`` (m x d, row j = w_j), the interaction inverse ``A_inv_`` and ``W^T W``."""

    _state_attrs = OnlineMultiTaskClassifier._state_attrs + ("_Wt", "A_inv_", "_wtw", "n_updates_",
                                                             "_since_refresh", "_n_instances")
    _counters = ("n_updates_",)

    def _weights(self) -> np.ndarray:
        return self._Wt

    def _init_common(self, n_tasks: int, n_features: int, A_inv: np.ndarray) -> None:
        self._Wt = np.zeros((n_tasks, n_features))
        self.A_inv_ = A_inv
        self._wtw = np.zeros((n_tasks, n_tasks))
        self.n_updates_ = 0
        self._since_refresh = 0
        self._n_instances = 0

    def _after_mistake(self, wtw_prev: np.ndarray) -> None:
        """Hook: adapt the interaction matrix (no-op for OMTL)."""

    def _learn_round(self, rnd: Round) -> np.ndarray:
        out = np.empty(rnd.tasks.size)
        Wt = self._Wt
        for j, task in enumerate(rnd.tasks):
            idx, val = rnd.instance(j)
            wx = Wt[:, idx] @ val  # every task's margin on x (m,)
            p = float(wx[task])
            out[j] = p
            self._n_instances += 1
            y = rnd.y[j]
            if np.sign(p) == y:
                continue
            a = self.A_inv_[:, task].copy()
            wtw_prev = self._wtw
            multitask_perceptron_step(Wt, self.A_inv_, task, idx, val, y)
            # W'^T W' = W^T W + y (a c^T + c a^T) + ||x||^2 a a^T, c = W^T x (before the step)
            with np.errstate(over="ignore", invalid="ignore"):
                self._wtw = wtw_prev + y * (np.outer(a, wx) + np.outer(wx, a)) + float(val @ val) * np.outer(a, a)
            if not np.all(np.isfinite(self._wtw)):
                raise DivergenceError(
                    f"{type(self).__name__} diverged: the weights overflowed after {self.n_updates_} "
                    "mistakes (for OMTLLOG/OMTLVON use a smaller eta or normalize=True)"
                )
            self.n_updates_ += 1
            self._since_refresh += 1
            if self._since_refresh >= int(self.gram_refresh):
                self._wtw = Wt @ Wt.T
                self._since_refresh = 0
            self._after_mistake(wtw_prev)
        return out


class OMTL(_MultitaskPerceptron):
    """OMTL: the multitask Perceptron of Cavallanti et al. (2010) with the clique interaction matrix.

    Parameters
    ----------
    gram_refresh : int, default 1000
        Unused by OMTL itself (kept for the shared bookkeeping).
    """

    def __init__(self, gram_refresh: int = 1000):
        self.gram_refresh = gram_refresh

    def _init_state(self, n_tasks: int, n_features: int) -> None:
        self._init_common(n_tasks, n_features, omtl_interaction_inverse(n_tasks))


class OMTLAdaptive(_MultitaskPerceptron):
    """OMTLLOG (``divergence="logdet"``) / OMTLVON (``"vonneumann"``) of Saha et al. (2011).

    Parameters
    ----------
    divergence : {"logdet", "vonneumann"}
    eta : float > 0
        Learning rate of the interaction matrix.
    epoch : int >= 0
        Warm-up: the interaction matrix stays ``I/m`` during the first ``epoch`` instances (all
        tasks counted), then it is updated after every mistake.
    normalize : bool, default False
        Rescale ``A^{-1}`` to trace ``m`` after each update (a numerical safeguard, not in Saha et
        al.: the unnormalised updates feed back on ``W`` -- ``A^{-1}`` grows with ``||W||^2`` and ``W``
        with ``A^{-1}`` -- and overflow after enough mistakes unless ``eta`` is tiny).
    gram_refresh : int, default 1000
        Recompute ``W^T W`` from scratch every this many mistakes.

    Attributes
    ----------
    A_inv_ : ndarray (m, m)
        Current inverse interaction matrix (the sharing weights of the Perceptron step).
    """

    _state_attrs = _MultitaskPerceptron._state_attrs + ("_log_A_inv",)

    def __init__(self, divergence: str = "logdet", eta: float = 1e-3, epoch: int = 0,
                 normalize: bool = False, gram_refresh: int = 1000):
        self.divergence = divergence
        self.eta = eta
        self.epoch = epoch
        self.normalize = normalize
        self.gram_refresh = gram_refresh

    def _init_state(self, n_tasks: int, n_features: int) -> None:
        if self.divergence not in ("logdet", "vonneumann"):
            raise InvalidInputError(f"unknown divergence {self.divergence!r}; use 'logdet' or 'vonneumann'")
        if not (np.isfinite(self.eta) and self.eta > 0):
            raise InvalidInputError(f"eta must be a positive number, got {self.eta!r}")
        if int(self.epoch) < 0:
            raise InvalidInputError("epoch must be >= 0")
        self._init_common(n_tasks, n_features, float(n_tasks) * np.eye(n_tasks))  # A = I/m
        self._log_A_inv = np.log(float(n_tasks)) * np.eye(n_tasks)

    def _after_mistake(self, wtw_prev: np.ndarray) -> None:
        if self._n_instances < int(self.epoch):
            return
        m = self.n_tasks_
        if self.divergence == "logdet":
            with np.errstate(over="ignore", invalid="ignore"):
                A_inv = logdet_interaction_update(self.A_inv_, wtw_prev, float(self.eta))
            if self.normalize and np.all(np.isfinite(A_inv)):
                A_inv = A_inv * (m / np.trace(A_inv))
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                log_A_inv, A_inv = vonneumann_interaction_update(self._log_A_inv, wtw_prev, float(self.eta))
            if self.normalize and np.all(np.isfinite(A_inv)):
                shift = np.log(m / np.trace(A_inv))
                log_A_inv = log_A_inv + shift * np.eye(m)
                A_inv = A_inv * np.exp(shift)
            self._log_A_inv = log_A_inv
        if not (np.all(np.isfinite(A_inv)) and np.all(np.isfinite(self._wtw))):
            raise DivergenceError(
                f"{'OMTLLOG' if self.divergence == 'logdet' else 'OMTLVON'} diverged (the interaction "
                f"matrix overflowed after {self.n_updates_} mistakes); use a smaller eta or normalize=True"
            )
        self.A_inv_ = A_inv
