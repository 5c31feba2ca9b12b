"""Online passive-aggressive binary classifiers: PA, PA-I, PA-II (Crammer et al., JMLR 2006).

Written once here and reused by the multi-task (ROMCO baselines) and transfer (OHT) learners;
scikit-learn's ``PassiveAggressiveClassifier`` is deprecated (1.8) and removed in 1.10.

Update on an instance ``x`` with label ``y`` in {-1, +1}: with hinge loss
``l = max(0, 1 - y w.x)``, ``w <- w + tau * y * x`` where

* PA:    ``tau = l / ||x||^2``
* PA-I:  ``tau = min(C, l / ||x||^2)``
* PA-II: ``tau = l / (||x||^2 + 1 / (2C))``
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from ..exceptions import InvalidInputError
from ..validation import check_csr, check_params
from .base import check_fitted

PA_VARIANTS = ("pa", "pa1", "pa2")


def pa_step_size(loss: float, sq_norm: float, variant: str = "pa1", C: float = 1.0) -> float:
    """The passive-aggressive step ``tau`` for hinge ``loss`` and squared norm ``sq_norm``.

    Parameters
    ----------
    loss : float
        Hinge loss of the current instance (``>= 0``).
    sq_norm : float
        ``||x||^2`` (or the kernel value ``k(x, x)``).
    variant : {"pa", "pa1", "pa2"}
    C : float
        Aggressiveness (PA-I cap, PA-II slack weight).

    Returns
    -------
    float
        ``0`` when the loss is zero or the instance is all zeros (PA, PA-I).
    """
    if loss <= 0.0:
        return 0.0
    if variant == "pa":
        return loss / sq_norm if sq_norm > 0 else 0.0
    if variant == "pa1":
        return min(C, loss / sq_norm) if sq_norm > 0 else 0.0
    if variant == "pa2":
        return loss / (sq_norm + 1.0 / (2.0 * C))
    raise InvalidInputError(f"unknown PA variant {variant!r}; use one of {PA_VARIANTS}")


def signed_labels(y) -> np.ndarray:
    y = np.asarray(y)
    values = set(np.unique(y).tolist())
    if values <= {-1, 1}:
        return y.astype(np.float64)
    if values <= {0, 1}:
        return np.where(y == 1, 1.0, -1.0)
    raise InvalidInputError(f"binary labels must be in {{-1, +1}} or {{0, 1}}, got {sorted(values)[:5]}")


def checked_batch(est, X, y, check_X, state_attr: str):
    """(X, y in {-1, +1}) of one ``partial_fit`` batch of an online PA learner. ``check_X(X,
    n_features=...)`` checks the rows; the first batch (``est`` has no ``state_attr`` yet) fixes
    the width and sizes the state (``est._init_state(width)``), later ones must match it."""
    first = not hasattr(est, state_attr)
    X = check_X(X, n_features=None if first else est.n_features_in_)
    y = signed_labels(y)
    if y.shape[0] != X.shape[0]:
        raise InvalidInputError(f"X has {X.shape[0]} rows but y has {y.shape[0]} labels")
    if first:
        est._init_state(X.shape[1])
    return X, y


class PassiveAggressiveBinary(ClassifierMixin, BaseEstimator):
    """Linear online PA / PA-I / PA-II classifier for labels in {-1, +1} (or {0, 1}).

    Parameters
    ----------
    variant : {"pa", "pa1", "pa2"}
    C : float, default 1.0
    fit_intercept : bool, default False
        Append a constant feature 1 (the papers' PA baselines have no bias).

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
    intercept_ : float
    n_features_in_ : int
    n_seen_ : int
        Instances processed.
    n_mistakes_ : int
        Online mistakes (prediction sign before the update differed from the label).
    """

    _param_spec = {"fit_intercept": ("bool",)}

    @classmethod
    def _unit_test_params(cls) -> dict:
        """Settings for the common checks (:mod:`sparsesim.checks`): the defaults are fast."""
        return {}

    def __init__(self, variant: str = "pa1", C: float = 1.0, fit_intercept: bool = False):
        self.variant = variant
        self.C = C
        self.fit_intercept = fit_intercept

    def _init_state(self, n_features: int) -> None:
        check_params(self)  # types and ranges (sparsesim.validation), on fit and the first partial_fit
        if self.variant not in PA_VARIANTS:
            raise InvalidInputError(f"unknown PA variant {self.variant!r}; use one of {PA_VARIANTS}")
        self.coef_ = np.zeros(n_features)
        self.intercept_ = 0.0
        self.n_features_in_ = n_features
        self.n_seen_ = 0
        self.n_mistakes_ = 0
        self.classes_ = np.array([-1, 1])

    def learn_one(self, indices: np.ndarray, values: np.ndarray, label: float) -> float:
        """Predict-then-update on one sparse instance; returns the margin before the update."""
        margin = float(values @ self.coef_[indices]) + self.intercept_
        if np.sign(margin) != label:  # sign(0) counts as a mistake: no decision was made
            self.n_mistakes_ += 1
        loss = max(0.0, 1.0 - label * margin)
        sq_norm = float(values @ values) + (1.0 if self.fit_intercept else 0.0)
        tau = pa_step_size(loss, sq_norm, self.variant, self.C)
        if tau:
            self.coef_[indices] += tau * label * values
            if self.fit_intercept:
                self.intercept_ += tau * label
        self.n_seen_ += 1
        return margin

    def partial_fit(self, X, y, classes=None):
        """One online pass over the rows of ``X`` in order."""
        X, y = checked_batch(self, X, y, check_csr, "coef_")
        for row in range(X.shape[0]):
            lo, hi = X.indptr[row], X.indptr[row + 1]
            self.learn_one(X.indices[lo:hi], X.data[lo:hi], y[row])
        return self

    def fit(self, X, y):
        """Reset and make one online pass over ``X``."""
        for attr in ("coef_",):
            if hasattr(self, attr):
                delattr(self, attr)
        return self.partial_fit(X, y)

    def decision_function(self, X):
        check_fitted(self)
        X = check_csr(X, n_features=self.n_features_in_)
        return X @ self.coef_ + self.intercept_

    def predict(self, X):
        return np.where(self.decision_function(X) >= 0, 1, -1)
