"""Kernel online passive-aggressive classifiers: PA, PA-I, PA-II with a Gaussian kernel.

Crammer et al. (JMLR 2006), kernelised: the classifier is ``f(x) = sum_i a_i k(x_i, x)`` over the
support vectors ``x_i`` (instances that suffered a loss). On ``(x_t, y_t)``:

* margin ``f_t = f(x_t)``; hinge loss ``l_t = max(0, 1 - y_t f_t)``;
* ``tau_t`` from :func:`sparsesim.learners.linear_pa.pa_step_size` with ``||x_t||^2`` replaced by
  ``k(x_t, x_t)`` (= 1 for the Gaussian kernel) -- the same three rules as the linear learner;
* if ``tau_t > 0``: add ``x_t`` as a support vector with coefficient ``a_t = tau_t y_t``.

Gaussian kernel: ``k(x, x') = exp(-||x - x'||^2 / (2 sigma^2))`` (the OHT paper uses sigma = 8).
This learner is meant for dense, low-dimensional views (image descriptors, digit features): it
stores support vectors densely and converts sparse input to dense arrays; for sparse
high-dimensional text use the linear :class:`~sparsesim.learners.linear_pa.PassiveAggressiveBinary`.

Two paths compute the same thing: :class:`KernelPassiveAggressive` (a scikit-learn estimator that
keeps its support vectors) and :func:`kernel_pa_margins` (the protocol's fast path: one pass in a
given order over a precomputed Gram matrix, dual coefficients stored per document). Because the
Gram matrix may be any kernel, ``kernel_pa_margins`` with ``K = X X^T`` is exactly the linear PA of
:mod:`sparsesim.learners.linear_pa` in dual form (tested).
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from ..exceptions import InvalidInputError
from ..validation import check_params
from .base import check_fitted
from .linear_pa import PA_VARIANTS, checked_batch, pa_step_size


def gaussian_kernel(A: np.ndarray, B: np.ndarray, sigma: float) -> np.ndarray:
    """``K[i, j] = exp(-||A_i - B_j||^2 / (2 sigma^2))`` for dense ``A`` (m, d) and ``B`` (n, d)."""
    if not sigma > 0:
        raise InvalidInputError(f"sigma must be positive, got {sigma}")
    A = np.atleast_2d(np.asarray(A, dtype=np.float64))
    B = np.atleast_2d(np.asarray(B, dtype=np.float64))
    sq = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2.0 * (A @ B.T)
    np.maximum(sq, 0.0, out=sq)
    return np.exp(-sq / (2.0 * sigma * sigma))


def _check_variant(variant: str) -> None:
    if variant not in PA_VARIANTS:
        raise InvalidInputError(f"unknown PA variant {variant!r}; use one of {PA_VARIANTS}")


# Kernel PA and OHT work on dense low-dimensional views (image descriptors, topic vectors);
# a sparse input is densified only while its dense form stays under this many bytes, so a
# high-dimensional sparse corpus is refused instead of silently exhausting memory.
MAX_DENSE_BYTES = 1 << 28


def check_dense(X, name="X", n_features=None) -> np.ndarray:
    if hasattr(X, "toarray"):
        n, d = X.shape
        if n * d * 8 > MAX_DENSE_BYTES:
            raise InvalidInputError(
                f"{name} is sparse {n} x {d}: its dense form needs {n * d * 8 / 2**20:.0f} MiB; kernel PA and OHT work "
                "on dense low-dimensional views (for sparse high-dimensional data use "
                "sparsesim.learners.linear_pa.PassiveAggressiveBinary)"
            )
        X = X.toarray()
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X[None, :]
    if X.ndim != 2:
        raise InvalidInputError(f"{name} must be 2-D, got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise InvalidInputError(f"{name} contains NaN or infinite values")
    if n_features is not None and X.shape[1] != n_features:
        raise InvalidInputError(f"{name} has {X.shape[1]} features but {n_features} are expected (feature-count mismatch)")
    return X


def kernel_pa_margins(K: np.ndarray, y: np.ndarray, order: np.ndarray, variant: str = "pa2",
                      C: float = 5.0) -> np.ndarray:
    """Kernel PA over the documents ``order`` of a precomputed Gram matrix; the margins before each update.

    Parameters
    ----------
    K : ndarray of shape (n, n)
        Gram matrix of the stream's documents (``K[i, i]`` plays ``||x_i||^2``).
    y : ndarray of shape (n,)
        Labels in {-1, +1} by document.
    order : ndarray of int
        The documents in the order they arrive (each at most once).
    variant : {"pa", "pa1", "pa2"}
    C : float

    Returns
    -------
    ndarray of shape (len(order),)
        ``f_t(x_t)`` at every round, before the update on round ``t``.
    """
    _check_variant(variant)
    n = K.shape[0]
    coef = np.zeros(n)  # dual coefficient of each document (0 unless it became a support vector)
    margins = np.empty(len(order))
    for t, i in enumerate(order):
        f = float(K[i] @ coef)
        margins[t] = f
        loss = max(0.0, 1.0 - y[i] * f)  # hinge loss, PA eq. (1)
        tau = pa_step_size(loss, float(K[i, i]), variant, C)
        if tau:
            coef[i] += tau * y[i]
    return margins


class KernelPassiveAggressive(ClassifierMixin, BaseEstimator):
    """Online Gaussian-kernel PA / PA-I / PA-II classifier for labels in {-1, +1} (or {0, 1}).

    Parameters
    ----------
    variant : {"pa", "pa1", "pa2"}, default "pa2"
    C : float, default 5.0
        Aggressiveness (PA-I cap, PA-II slack weight); the OHT paper uses 5.
    sigma : float, default 8.0
        Gaussian kernel width.

    Attributes
    ----------
    support_vectors_ : ndarray of shape (n_support, n_features)
    dual_coef_ : ndarray of shape (n_support,)
        ``tau_t * y_t`` of each support vector.
    n_features_in_ : int
    n_seen_ : int
    n_mistakes_ : int
        Online mistakes (``sign(f_t) != y_t``; a zero margin counts as a mistake).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 5)); y = np.where(X[:, 0] * X[:, 1] > 0, 1, -1)
    >>> clf = KernelPassiveAggressive(variant="pa2", C=5.0, sigma=1.0).fit(X, y)
    >>> bool(clf.n_mistakes_ < 100)
    True
    """

    @classmethod
    def _unit_test_params(cls) -> dict:
        """Settings for the common checks (:mod:`sparsesim.checks`): the defaults are fast."""
        return {}

    def __init__(self, variant: str = "pa2", C: float = 5.0, sigma: float = 8.0):
        self.variant = variant
        self.C = C
        self.sigma = sigma

    def _init_state(self, n_features: int) -> None:
        check_params(self)  # types and ranges (sparsesim.validation), on fit and the first partial_fit
        _check_variant(self.variant)
        if not self.sigma > 0 or not self.C > 0:
            raise InvalidInputError(f"sigma and C must be positive, got sigma={self.sigma}, C={self.C}")
        self._sv = np.zeros((16, n_features))
        self._coef = np.zeros(16)
        self._n_sv = 0
        self.n_features_in_ = n_features
        self.n_seen_ = 0
        self.n_mistakes_ = 0
        self.classes_ = np.array([-1, 1])

    @property
    def support_vectors_(self) -> np.ndarray:
        return self._sv[: self._n_sv]

    @property
    def dual_coef_(self) -> np.ndarray:
        return self._coef[: self._n_sv]

    def _margin(self, x: np.ndarray) -> float:
        if self._n_sv == 0:
            return 0.0
        k = gaussian_kernel(x[None, :], self.support_vectors_, self.sigma)[0]
        return float(k @ self.dual_coef_)

    def learn_one(self, x: np.ndarray, label: float) -> float:
        """Predict-then-update on one dense instance; returns the margin before the update."""
        margin = self._margin(x)
        if np.sign(margin) != label:
            self.n_mistakes_ += 1
        loss = max(0.0, 1.0 - label * margin)
        tau = pa_step_size(loss, 1.0, self.variant, self.C)  # k(x, x) = 1 for the Gaussian kernel
        if tau:
            if self._n_sv == self._sv.shape[0]:
                self._sv = np.vstack([self._sv, np.zeros_like(self._sv)])
                self._coef = np.concatenate([self._coef, np.zeros_like(self._coef)])
            self._sv[self._n_sv] = x
            self._coef[self._n_sv] = tau * label
            self._n_sv += 1
        self.n_seen_ += 1
        return margin

    def partial_fit(self, X, y, classes=None):
        """One online pass over the rows of ``X`` in order."""
        X, y = checked_batch(self, X, y, check_dense, "_sv")
        for row in range(X.shape[0]):
            self.learn_one(X[row], y[row])
        return self

    def fit(self, X, y):
        """Reset and make one online pass over ``X``."""
        if hasattr(self, "_sv"):
            del self._sv
        return self.partial_fit(X, y)

    def decision_function(self, X) -> np.ndarray:
        check_fitted(self)
        X = check_dense(X, n_features=self.n_features_in_)
        if self._n_sv == 0:
            return np.zeros(X.shape[0])
        return gaussian_kernel(X, self.support_vectors_, self.sigma) @ self.dual_coef_

    def predict(self, X) -> np.ndarray:
        return np.where(self.decision_function(X) >= 0, 1, -1)
