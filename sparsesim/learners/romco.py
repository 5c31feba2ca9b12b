"""ROMCO: robust online multi-task classification with correlative and personalized structures
(Yang, Zhao & Gao; Algorithms 1 and 2, equations (13)-(21)).

The ``m`` task models are the columns of ``W = U + V`` (``d x m``): a low-rank shared part ``U``
(nuclear norm for ROMCO-NuCl, log-determinant ``sum log(1 + sigma_i^2)`` for ROMCO-LogD) and a
column-sparse personalized part ``V`` (group lasso ``||V||_{2,1}``). Each round every active task
``i`` predicts ``sign((u^i + v^i) . x^i)`` and suffers the hinge loss ``[1 - y^i (u^i + v^i) . x^i]_+``
(eq. (1), (5)); if any loss is positive (Alg. 1/2, line 9), the gradient step is followed by the
proximal steps

* ``U_hat = U + eta1 * Delta``, ``V_hat = V + eta2 * Delta`` with ``Delta[:, i] = y^i x^i`` for the
  tasks with positive loss (zero columns otherwise) -- the negative hinge-loss gradient;
* ``U <- P diag(sigma*) Q^T`` where ``U_hat = P diag(sigma_hat) Q^T`` and ``sigma*`` is the scalar
  prox of each singular value (eq. (15)-(16) for NuCl: ``[sigma_hat - eta1*lam1]_+``; eq. (20)-(21)
  and Proposition 1 for LogD: the minimiser among 0 and the positive roots of the cubic (21));
* ``v^i <- max(0, 1 - eta2*lam2 / ||v_hat^i||) v_hat^i`` for every column (eq. (18)).

Fast path (cost per round ``O(nnz * m + m^3)``, plus ``O(d * m * k)`` when ``k`` singular values are
set to zero; never more than ``O(d * m^2)``): the SVD goes through the ``m x m`` Gram matrix
``K = U^T U``, which the sparse gradient step updates in ``O(nnz * m)``; ``eigh(K_hat) = Q diag(sigma_hat^2)
Q^T`` gives the right singular vectors and values of ``U_hat`` and ``U* = U_hat Q diag(sigma*/sigma_hat)
Q^T``; the new Gram matrix is ``Q diag(sigma*^2) Q^T``. ``U^T`` is stored as ``N @ B`` (``N`` m x m
invertible, ``B`` m x d): the gradient step adds ``eta1 N^{-1} Delta^T`` to ``B`` and the prox multiplies
``N`` by the m x m matrix above, so ``B`` (the only ``d``-sized part) is touched only on the features of
the round -- except when singular values are set to zero (an in-place rank-k BLAS correction of
``B``) or ``N`` gets ill-conditioned (one ``(m x m) @ (m x d)`` product). Since ``0 <= sigma* <=
sigma_hat`` the ratios are bounded, so small or numerically zero singular values are harmless. ``K`` is
recomputed every ``gram_refresh`` updates to stop rounding drift. ``V`` is stored as a raw matrix times
a per-column scale, so the group shrinkage (18) of all columns costs ``O(m)`` and the sparse gradient
step ``O(nnz)``; column norms are tracked incrementally.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg.blas as _blas
import scipy.sparse as sp

from ..defaults import is_auto
from ..exceptions import InvalidInputError
from .mtl_online import OnlineMultiTaskClassifier, Round

__all__ = [
    "REGULARIZERS",
    "RHO_SCHEDULES",
    "nuclear_prox_sv",
    "logdet_objective",
    "logdet_cubic_roots",
    "logdet_prox_sv",
    "singular_value_prox",
    "spectral_prox_gram",
    "spectral_prox",
    "group_shrink_factors",
    "group_shrink",
    "ROMCO",
]

REGULARIZERS = ("nuclear", "logdet")
RHO_SCHEDULES = ("fixed", "increasing")


# --------------------------------------------------------------------------- scalar proxes


def nuclear_prox_sv(sigma_hat, rho: float) -> np.ndarray:
    """Eq. (15): ``argmin_{s>=0} (s - sigma_hat)^2 / (2 eta1) + lam1 s = [sigma_hat - rho]_+``,
    with ``rho = eta1 * lam1``."""
    return np.maximum(np.asarray(sigma_hat, dtype=np.float64) - rho, 0.0)


def logdet_objective(sigma, sigma_hat, rho: float) -> np.ndarray:
    """``Theta(sigma) = (sigma - sigma_hat)^2 / (2 rho) + log(1 + sigma^2)`` (Proposition 1; eq. (20)
    divided by ``lam1``), with ``rho = eta1 * lam1``."""
    sigma = np.asarray(sigma, dtype=np.float64)
    return (sigma - sigma_hat) ** 2 / (2.0 * rho) + np.log1p(sigma * sigma)


def logdet_cubic_roots(sigma_hat, rho: float) -> np.ndarray:
    """The three (complex) roots of the cubic (21) for each ``sigma_hat``.

    Eq. (21) times ``rho``: ``s^3 - sigma_hat s^2 + (1 + 2 rho) s - sigma_hat = 0``, i.e.
    ``Theta'(s) (1 + s^2) rho = 0``. Solved as the eigenvalues of the companion matrices (a batched
    3x3 eigenproblem), shape ``(len(sigma_hat), 3)``.
    """
    sh = np.atleast_1d(np.asarray(sigma_hat, dtype=np.float64))
    comp = np.zeros((sh.size, 3, 3))
    comp[:, 0, 0] = sh
    comp[:, 0, 1] = -(1.0 + 2.0 * rho)
    comp[:, 0, 2] = sh
    comp[:, 1, 0] = 1.0
    comp[:, 2, 1] = 1.0
    return np.linalg.eigvals(comp)


def logdet_prox_sv(sigma_hat, rho: float) -> np.ndarray:
    """Eq. (20)-(21), Proposition 1: ``argmin_{s >= 0} Theta(s)``, chosen among 0 and the positive
    real roots of the cubic (21) (for ``rho < 4`` the positive root in ``(0, sigma_hat)`` is unique).

    Parameters
    ----------
    sigma_hat : array_like of float >= 0
    rho : float >= 0
        ``eta1 * lam1``; ``rho = 0`` returns ``sigma_hat``.
    """
    sh = np.atleast_1d(np.asarray(sigma_hat, dtype=np.float64)).copy()
    if rho <= 0:
        return sh
    out = np.zeros_like(sh)
    pos = sh > 0
    if not np.any(pos):
        return out
    s = sh[pos]
    roots = logdet_cubic_roots(s, rho)
    # Candidates: real parts of (numerically) real roots, clipped to the feasible half-line and
    # polished by Newton steps on the cubic; any feasible point is a safe candidate because the
    # global minimiser over s >= 0 is 0 or a stationary point (the first-order condition).
    real = np.abs(roots.imag) <= 1e-6 * (1.0 + np.abs(roots))
    cand = np.clip(roots.real, 0.0, None)
    b = 1.0 + 2.0 * rho
    for _ in range(3):
        f = ((cand - s[:, None]) * cand + b) * cand - s[:, None]
        fp = (3.0 * cand - 2.0 * s[:, None]) * cand + b
        step = np.where(fp != 0, f / np.where(fp != 0, fp, 1.0), 0.0)
        cand = np.clip(cand - step, 0.0, None)
    values = logdet_objective(cand, s[:, None], rho)
    values[~real | (cand <= 0)] = np.inf
    zero_value = logdet_objective(0.0, s, rho)
    best = np.argmin(values, axis=1)
    best_val = values[np.arange(s.size), best]
    out[pos] = np.where(best_val < zero_value, cand[np.arange(s.size), best], 0.0)
    return out


def singular_value_prox(sigma_hat, rho: float, regularizer: str) -> np.ndarray:
    """Prox of the regularizer on singular values: NuCl (eq. (15)) or LogD (eq. (20)-(21))."""
    if regularizer == "nuclear":
        return nuclear_prox_sv(sigma_hat, rho)
    if regularizer == "logdet":
        return logdet_prox_sv(sigma_hat, rho)
    raise InvalidInputError(f"unknown regularizer {regularizer!r}; use one of {REGULARIZERS}")


# --------------------------------------------------------------------------- matrix proxes


def _prox_factors(K_hat: np.ndarray, rho: float, regularizer: str):
    """Eigendecomposition of the Gram matrix and the shrink ratio of every singular direction."""
    K_hat = 0.5 * (K_hat + K_hat.T)
    w, Q = np.linalg.eigh(K_hat)
    sigma_hat = np.sqrt(np.clip(w, 0.0, None))
    sigma_new = singular_value_prox(sigma_hat, rho, regularizer)
    ratio = np.divide(sigma_new, sigma_hat, out=np.zeros_like(sigma_hat), where=sigma_hat > 0)
    return Q, np.minimum(ratio, 1.0), sigma_hat, sigma_new


def spectral_prox_gram(K_hat: np.ndarray, rho: float, regularizer: str):
    """Theorems 1-2 through the ``m x m`` Gram matrix ``K_hat = U_hat^T U_hat``.

    With ``K_hat = Q diag(sigma_hat^2) Q^T`` (so ``U_hat = P diag(sigma_hat) Q^T``, ``P = U_hat Q
    diag(1/sigma_hat)``), the prox ``P diag(sigma*) Q^T`` equals ``U_hat Q diag(sigma*/sigma_hat) Q^T``.

    Returns
    -------
    M : ndarray (m, m), symmetric
        ``U* = U_hat @ M``.
    K_new : ndarray (m, m)
        ``U*^T U* = Q diag(sigma*^2) Q^T``.
    sigma_hat, sigma_new : ndarray (m,)
        Singular values before / after the prox (ascending order of ``eigh``).
    """
    Q, ratio, sigma_hat, sigma_new = _prox_factors(K_hat, rho, regularizer)
    return (Q * ratio) @ Q.T, (Q * sigma_new ** 2) @ Q.T, sigma_hat, sigma_new


def spectral_prox(U_hat: np.ndarray, rho: float, regularizer: str) -> np.ndarray:
    """Eq. (13)/(16) (NuCl) or (19) (LogD) for a dense ``d x m`` matrix via its Gram matrix."""
    U_hat = np.asarray(U_hat, dtype=np.float64)
    M, _, _, _ = spectral_prox_gram(U_hat.T @ U_hat, rho, regularizer)
    return U_hat @ M


def group_shrink_factors(norms, tau: float) -> np.ndarray:
    """Eq. (18): the factor ``max(0, 1 - tau / ||v_hat^i||)`` of each column (0 for a zero column)."""
    norms = np.asarray(norms, dtype=np.float64)
    if tau <= 0:
        return np.ones_like(norms)
    return np.where(norms > tau, 1.0 - tau / np.where(norms > 0, norms, 1.0), 0.0)


def group_shrink(V_hat: np.ndarray, tau: float) -> np.ndarray:
    """Eq. (17)-(18) for a dense ``d x m`` matrix: column-wise group shrinkage with ``tau = eta2*lam2``."""
    V_hat = np.asarray(V_hat, dtype=np.float64)
    return V_hat * group_shrink_factors(np.linalg.norm(V_hat, axis=0), tau)


# --------------------------------------------------------------------------- learner


class ROMCO(OnlineMultiTaskClassifier):
    """ROMCO-NuCl (``regularizer="nuclear"``, Algorithm 1) and ROMCO-LogD (``"logdet"``, Algorithm 2).

    Parameters
    ----------
    regularizer : {"nuclear", "logdet"}
        Rank surrogate on the shared part ``U``.
    eta1, eta2 : float > 0 or "auto", default "auto"
        Step sizes of ``U`` and ``V``. ``"auto"``: ``0.5 / q`` with ``q`` the mean ``||x||^2`` of the
        instances (a step moves its own margin by about 0.5).
    lam1, lam2 : float >= 0 or "auto", default "auto"
        Weights of the low-rank (``U``) and group-lasso (``V``) regularizers. ``"auto"``:
        ``0.3 * sqrt(q) / T`` with ``T`` the longest task stream (rounds of one pass): over a pass
        the proximal steps remove 0.3 times the size of one step's write. The rules
        (:func:`sparsesim.defaults.resolve_online`) read the streams of the first
        :meth:`partial_fit` call; the values used are in ``resolved_params_``.
    gram_refresh : int, default 500
        Recompute ``U^T U`` and the column norms of ``V`` from scratch every this many updates.
    rho_schedule : {"fixed", "increasing"}, default "fixed"
        ``rho`` of the prox on ``U`` (eq. (15), (20)-(21)). ``"fixed"``: ``rho = eta1 * lam1`` every
        round. ``"increasing"``: the paper's ROMCO-LogD experiments ("we initialize 1/rho = 1 and
        increase its value in each iteration"): ``1/rho_t = 1 + rho_growth * (t - 1)`` in round
        ``t`` (counted over every :meth:`partial_fit` call since ``fit``), ``lam1`` unused; since
        ``1/rho_t >= 1 > 1/4``, the root of the cubic (21) in ``(0, sigma_hat)`` is unique
        (Proposition 1).
    rho_growth : float > 0, default 1.0
        Growth of ``1/rho`` per round under ``rho_schedule="increasing"`` (the paper does not
        give its rate; 1 makes ``rho_t = 1/t``).

    Attributes
    ----------
    U_, V_ : ndarray (n_features, n_tasks)
        Shared and personalized parts (dense views/copies).
    coef_ : ndarray (n_features, n_tasks)
        ``U_ + V_``.
    n_updates_ : int
        Rounds with a positive loss (rounds that changed the model).
    rank_ : int
        Rank of ``U`` after the last update (number of nonzero singular values).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> rng = np.random.default_rng(0)
    >>> w = rng.normal(size=20)
    >>> X = [sp.csr_matrix(rng.normal(size=(50, 20))) for _ in range(3)]
    >>> y = [np.sign(x @ (w + 0.1 * rng.normal(size=20))) for x in X]
    >>> model = ROMCO("logdet", eta1=0.1, eta2=0.1, lam1=1e-3, lam2=1e-3).fit(X, y)
    >>> model.coef_.shape
    (20, 3)
    """

    _state_attrs = OnlineMultiTaskClassifier._state_attrs + (
        "_Ut", "_Ubuf", "_N", "_Ninv", "_Vr", "_vscale", "_vnorm", "_gram", "n_updates_", "rank_",
        "n_materialized_", "n_corrected_", "_since_refresh")
    _counters = ("n_updates_", "n_materialized_", "n_corrected_", "rank_")

    _auto_kind = "romco"
    _auto_names = ("eta1", "eta2", "lam1", "lam2")

    def __init__(self, regularizer: str = "nuclear", eta1="auto", eta2="auto",
                 lam1="auto", lam2="auto", gram_refresh: int = 500, rho_schedule: str = "fixed",
                 rho_growth: float = 1.0):
        self.regularizer = regularizer
        self.rho_schedule = rho_schedule
        self.rho_growth = rho_growth
        self.eta1 = eta1
        self.eta2 = eta2
        self.lam1 = lam1
        self.lam2 = lam2
        self.gram_refresh = gram_refresh

    # ---- state
    def _check_params(self) -> None:
        if self.regularizer not in REGULARIZERS:
            raise InvalidInputError(f"unknown regularizer {self.regularizer!r}; use one of {REGULARIZERS}")
        for name in ("eta1", "eta2"):
            v = self._param(name)
            if is_auto(v):  # resolved (and checked) by the first partial_fit
                continue
            if not (np.isfinite(v) and v > 0):
                raise InvalidInputError(f"{name} must be a positive number, got {v!r}")
        for name in ("lam1", "lam2"):
            v = self._param(name)
            if is_auto(v):
                continue
            if not (np.isfinite(v) and v >= 0):
                raise InvalidInputError(f"{name} must be a non-negative number, got {v!r}")
        if int(self.gram_refresh) < 1:
            raise InvalidInputError("gram_refresh must be >= 1")
        if self.rho_schedule not in RHO_SCHEDULES:
            raise InvalidInputError(f"rho_schedule must be one of {RHO_SCHEDULES}, got {self.rho_schedule!r}")
        growth = self.rho_growth
        try:  # float(): a Python int past float64 (or int64) is refused here, not in numpy
            value = float(growth) if isinstance(growth, (int, float, np.integer, np.floating)) else float("nan")
        except OverflowError:
            value = float("nan")
        if isinstance(growth, bool) or not (np.isfinite(value) and value > 0):
            raise InvalidInputError(f"rho_growth must be a positive number, got {growth!r}")

    def rho_at(self, t: int) -> float:
        """``rho`` of the prox on ``U`` in round ``t`` (1-based): ``eta1 * lam1``, or
        ``1 / (1 + rho_growth * (t - 1))`` under ``rho_schedule="increasing"``."""
        if self.rho_schedule == "increasing":
            return 1.0 / (1.0 + float(self.rho_growth) * (int(t) - 1))
        return float(self._param("eta1")) * float(self._param("lam1"))

    def _init_state(self, n_tasks: int, n_features: int) -> None:
        self._check_params()
        # U^T = _N @ _Ut: a lazy m x m factor in front of an m x d base (see _learn_round)
        self._Ut = np.zeros((n_tasks, n_features))
        self._Ubuf = np.empty_like(self._Ut)
        self._N = np.eye(n_tasks)
        self._Ninv = np.eye(n_tasks)
        self._Vr = np.zeros((n_tasks, n_features))  # V^T = diag(_vscale) @ _Vr
        self._vscale = np.ones(n_tasks)
        self._vnorm = np.zeros(n_tasks)
        self._gram = np.zeros((n_tasks, n_tasks))  # U^T U
        self.n_updates_ = 0
        self.n_materialized_ = 0
        self.n_corrected_ = 0
        self.rank_ = 0
        self._since_refresh = 0

    def _u_transposed(self) -> np.ndarray:
        return self._Ut if self._N is None else self._N @ self._Ut

    def _weights(self) -> np.ndarray:
        return self._u_transposed() + self._vscale[:, None] * self._Vr

    @property
    def U_(self) -> np.ndarray:
        return self._u_transposed().T

    @property
    def V_(self) -> np.ndarray:
        return (self._vscale[:, None] * self._Vr).T

    def _model_parts(self) -> dict:
        return {"U": self.U_, "V": self.V_}

    def set_state(self, U, V) -> "ROMCO":
        """Start from given ``U``, ``V`` (``d x m`` dense); for tests, benchmarks and warm starts."""
        U = np.asarray(U, dtype=np.float64)
        V = np.asarray(V, dtype=np.float64)
        if U.shape != V.shape or U.ndim != 2:
            raise InvalidInputError(f"U and V must be d x m matrices of one shape, got {U.shape}, {V.shape}")
        if not (np.all(np.isfinite(U)) and np.all(np.isfinite(V))):
            raise InvalidInputError("U and V must be finite")
        self._reset()
        self.resolved_params_ = None  # "auto" parameters: resolved by the next partial_fit's streams
        self._start(U.shape[1], U.shape[0])
        self._Ut[...] = U.T
        self._Vr[...] = V.T
        self._refresh()
        self.rank_ = int(np.linalg.matrix_rank(self._gram)) if U.any() else 0
        return self

    def _refresh(self) -> None:
        B = self._Ut @ self._Ut.T
        self._gram = self._N @ B @ self._N.T
        self._vnorm = self._vscale * np.linalg.norm(self._Vr, axis=1)
        self._since_refresh = 0

    def _materialize(self, T: np.ndarray) -> None:
        """Base <- T @ base (one m x m by m x d product), lazy factor <- identity."""
        np.matmul(T, self._Ut, out=self._Ubuf)
        self._Ut, self._Ubuf = self._Ubuf, self._Ut
        m = self._N.shape[0]
        self._N = np.eye(m)
        self._Ninv = np.eye(m)
        self.n_materialized_ += 1

    def _remove_directions(self, P0: np.ndarray, C: np.ndarray) -> None:
        """``B <- B - C @ (P0 @ B)`` in place: one product ``R = P0 @ B`` and a BLAS rank-k update
        (``dger`` / ``dgemm`` with ``beta = 1`` on the Fortran view ``B^T``), no ``m x d`` temporary."""
        B = self._Ut
        R = P0 @ B  # (k, d)
        BT = B.T  # (d, m), Fortran-contiguous view of B
        if R.shape[0] == 1:
            out = _blas.dger(-1.0, R[0], C[:, 0], a=BT, overwrite_a=True)
        else:
            out = _blas.dgemm(-1.0, R.T, np.asfortranarray(C.T), beta=1.0, c=BT, overwrite_c=True)
        if not np.shares_memory(out, B):  # BLAS wrapper made a copy (should not happen): keep it
            self._Ut = np.ascontiguousarray(out.T)
            self._Ubuf = np.empty_like(self._Ut)
        self.n_corrected_ += 1

    # ---- one round
    def _learn_round(self, rnd: Round) -> np.ndarray:
        """One round of Algorithm 1/2 (see the module docstring for the fast path).

        ``U^T`` is kept as ``N @ B`` (``N`` m x m, invertible; ``B`` m x d). The gradient step adds
        ``eta1 * N^{-1} Delta^T`` to ``B`` (``O(m * nnz)``); the prox multiplies ``N`` by
        ``M = Q diag(ratio) Q^T`` (``O(m^3)``). Only when ``M`` is singular (a singular value is set
        to zero: NuCl with ``sigma_hat <= eta1*lam1``) or ``N`` becomes ill-conditioned is ``B``
        rewritten (``O(d m^2)``). Directions in which ``U_hat`` is numerically null keep ratio 1
        (``U_hat q = 0`` there, so any ratio gives the same ``U*``).
        """
        Ut, Vr, vscale, N = self._Ut, self._Vr, self._vscale, self._N
        k = rnd.tasks.size
        m = self.n_tasks_
        tk = rnd.tasks[rnd.owner]  # task of every entry
        feat, vals = rnd.feat, rnd.vals
        lens_all = np.diff(rnd.ptr)
        nz_all = lens_all > 0
        # Y[:, j] = B[:, x_j] @ x_j, so that U^T x_j = N @ Y[:, j]
        Y = np.zeros((m, k))
        if feat.size:
            Y[:, nz_all] = np.add.reduceat(Ut[:, feat] * vals, rnd.ptr[:-1][nz_all], axis=1)
        # eq. (5): p = (u^i + v^i) . x^i, computed for all tasks before any update
        ux = np.einsum("jk,kj->j", N[rnd.tasks], Y)
        vg = Vr[tk, feat]
        vx = np.bincount(rnd.owner, weights=vals * vg, minlength=k) * vscale[rnd.tasks]
        margins = ux + vx
        loss = 1.0 - rnd.y * margins  # eq. (1) before the [.]_+
        hit = loss > 0.0
        if not np.any(hit):  # Alg. 1/2 line 13: no loss, no update
            return margins
        eta1, eta2 = float(self._param("eta1")), float(self._param("eta2"))
        emask = hit[rnd.owner]
        f = feat[emask]
        te = tk[emask]
        dv = (rnd.y[rnd.owner] * vals)[emask]  # entries of Delta = -grad L_t: column te, row f
        hit_tasks = rnd.tasks[hit]
        lens = lens_all[hit]

        # ---- U: gradient step U_hat = U + eta1 Delta, tracked in the Gram matrix
        K = self._gram.copy()
        if f.size:
            Z = (N @ Y[:, hit]) * rnd.y[hit]  # Z[j, a] = u^j . Delta[:, hit_tasks[a]]
            S = sp.csr_matrix((dv, f, np.concatenate([[0], np.cumsum(lens)])),
                              shape=(hit_tasks.size, self.n_features_in_))
            DD = (S @ S.T).toarray()
            K[:, hit_tasks] += eta1 * Z
            K[hit_tasks, :] += eta1 * Z.T
            K[np.ix_(hit_tasks, hit_tasks)] += eta1 * eta1 * DD
            # B += eta1 N^{-1} Delta^T  (features shared by two tasks' instances are summed)
            contrib = self._Ninv[:, te] * (eta1 * dv)
            order = np.argsort(f, kind="stable")
            fs = f[order]
            first = np.flatnonzero(np.concatenate([[True], fs[1:] != fs[:-1]]))
            Ut[:, fs[first]] += np.add.reduceat(contrib[:, order], first, axis=1)
        # ---- U: proximal step (Theorem 1 / Theorem 2) through the Gram matrix
        rho = self.rho_at(self.n_rounds_ + 1)  # this round's index: n_rounds_ counts the rounds learned
        if rho > 0:
            Q, ratio, sigma_hat, sigma_new = _prox_factors(K, rho, self.regularizer)
            smax = max(float(sigma_hat.max()), 1e-300)
            null = sigma_hat <= 1e-9 * smax  # U_hat q ~ 0: the ratio is irrelevant, keep 1
            ratio = np.where(null, 1.0, ratio)
            sigma_new = np.where(null, sigma_hat, sigma_new)
            killed = ratio <= 1e-12
            # reported rank: singular values above the Gram matrix's rounding noise (~1e-8 sigma_max)
            self.rank_ = int(np.count_nonzero((sigma_new > 1e-7 * smax) & ~killed))
            n_killed = int(np.count_nonzero(killed))
            ratio_kept = np.where(killed, 1.0, ratio)  # M' = Q diag(ratio_kept) Q^T is invertible
            lazy_ok = float(ratio_kept.min()) > 1e-6
            if lazy_ok and 0 < n_killed <= max(1, m // 4):
                # M = M' - Q0 Q0^T (Q0: killed directions). U*^T = M' N B - Q0 (Q0^T N B): keep the
                # lazy factor N <- M' N and remove the killed directions from B with a rank-n_killed
                # correction B <- B - N^{-1} Q0 (Q0^T N B)  (M'^{-1} Q0 = Q0), O(d m n_killed).
                Q0 = Q[:, killed]
                self._remove_directions(Q0.T @ N, self._Ninv @ Q0)
                n_killed = 0
            if n_killed:
                keep = ~killed
                r = int(np.count_nonzero(keep))
                if r == 0:
                    self._Ut[...] = 0.0
                    self._N = np.eye(m)
                    self._Ninv = np.eye(m)
                elif 2 * r < m:  # two thin products: U*^T = Q_r diag(ratio_r) (Q_r^T N B)
                    Qk = Q[:, keep]
                    self._Ut = (Qk * ratio[keep]) @ ((Qk.T @ N) @ self._Ut)
                    self._Ubuf = np.empty_like(self._Ut)
                    self._N = np.eye(m)
                    self._Ninv = np.eye(m)
                    self.n_materialized_ += 1
                else:
                    self._materialize(((Q * ratio) @ Q.T) @ N)
            elif not lazy_ok:
                self._materialize(((Q * ratio) @ Q.T) @ N)
            else:  # lazy: N <- M' N, N^{-1} <- N^{-1} M'^{-1}; rewrite B when N gets ill-conditioned
                self._N = ((Q * ratio_kept) @ Q.T) @ self._N
                self._Ninv = self._Ninv @ ((Q / ratio_kept) @ Q.T)
                # ratios lie in (1e-6, 1], so ||N|| <= 1 and ||N^{-1}|| stays below 1e12 here
                if np.linalg.norm(self._N) * np.linalg.norm(self._Ninv) > 1e6:
                    self._materialize(self._N)
            sigma_new = np.where(killed, 0.0, sigma_new)
            self._gram = (Q * sigma_new ** 2) @ Q.T
        else:  # lam1 = 0: the prox is the identity
            self._gram = K
            ev = np.linalg.eigvalsh(0.5 * (K + K.T))
            self.rank_ = int(np.count_nonzero(ev > 1e-14 * max(float(ev.max()), 1e-300)))

        # ---- V: gradient step V_hat = V + eta2 Delta (raw storage, per-column scale)
        if f.size:
            Vr[te, f] += eta2 * dv / vscale[te]
        norm2 = self._vnorm ** 2
        xx = np.bincount(rnd.owner, weights=vals * vals, minlength=k)
        norm2[hit_tasks] += 2.0 * eta2 * rnd.y[hit] * vx[hit] + eta2 * eta2 * xx[hit]
        norms = np.sqrt(np.clip(norm2, 0.0, None))
        # ---- V: eq. (18) on every column
        factor = group_shrink_factors(norms, eta2 * float(self._param("lam2")))
        vscale *= factor
        self._vnorm = norms * factor
        zeroed = np.flatnonzero(factor == 0.0)
        if zeroed.size:
            Vr[zeroed] = 0.0
            vscale[zeroed] = 1.0
        tiny = np.flatnonzero(vscale < 1e-12)
        if tiny.size:
            Vr[tiny] *= vscale[tiny, None]
            vscale[tiny] = 1.0

        self.n_updates_ += 1
        self._since_refresh += 1
        if self._since_refresh >= int(self.gram_refresh):
            self._refresh()
        return margins
