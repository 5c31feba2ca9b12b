"""The OHT source hypothesis h(x): a text-side classifier carried to images through their K nearest pairs.

:class:`KNNSourceHypothesis` trains the source classifier, scores the co-occurring pairs' texts
and answers ``h(x)`` for target instances through an exact FAISS index over the pairs' images.
The design (steps 1-4) is described in the :mod:`sparsesim.learners.transfer` docstring and in
``docs/transfer.md``.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator

from ..exceptions import InvalidInputError
from .base import check_fitted
from .kernel_pa import check_dense
from .linear_pa import signed_labels


# ----------------------------------------------------------------------------------------------
# The source hypothesis
# ----------------------------------------------------------------------------------------------
class KNNSourceHypothesis(BaseEstimator):
    """Source hypothesis on target instances via the K nearest co-occurring pairs (the
    :mod:`sparsesim.learners.transfer` docstring).

    Parameters
    ----------
    n_neighbors : int, default 100
        ``K`` (the paper's 100); capped at the number of pairs.
    bandwidth : float, default 8.0
        Gaussian similarity width ``b`` for the neighbour weights.
    weighting : {"gaussian", "uniform"}
        ``"uniform"`` gives every neighbour weight 1.
    source_C : float, default 1.0
        Inverse L2 strength of the source logistic regression.

    Attributes
    ----------
    source_model_ : sklearn Pipeline
        StandardScaler + LogisticRegression on the labelled source documents.
    pair_scores_ : ndarray of shape (n_pairs,)
        ``s_j = 2 P(+1 | z_j) - 1`` of every pair's source view.
    pair_target_ : ndarray of shape (n_pairs, d)
        Target view of the pairs (float64, for exact distances).
    index_ : faiss.IndexFlatL2
        Exact L2 index over ``pair_target_`` (float32).
    """

    def __init__(self, n_neighbors: int = 100, bandwidth: float = 8.0, weighting: str = "gaussian",
                 source_C: float = 1.0):
        self.n_neighbors = n_neighbors
        self.bandwidth = bandwidth
        self.weighting = weighting
        self.source_C = source_C

    def fit(self, X_source, y_source, pair_target, pair_source):
        """Train the source classifier, score the pairs' texts and index the pairs' images.

        Parameters
        ----------
        X_source : array (n_source, d_s)
            Labelled source documents.
        y_source : array (n_source,)
            Their labels (two classes; {-1, +1} or {0, 1}).
        pair_target : array (n_pairs, d)
            Target view of the co-occurring pairs.
        pair_source : array (n_pairs, d_s)
            Source view of the same pairs (row ``j`` is the same document).
        """
        import faiss
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        if int(self.n_neighbors) < 1:
            raise InvalidInputError(f"n_neighbors must be >= 1, got {self.n_neighbors}")
        if self.weighting not in ("gaussian", "uniform"):
            raise InvalidInputError(f"weighting must be 'gaussian' or 'uniform', got {self.weighting!r}")
        if self.weighting == "gaussian" and not self.bandwidth > 0:
            raise InvalidInputError(f"bandwidth must be positive, got {self.bandwidth}")
        Xs = check_dense(X_source, "X_source")
        ys = signed_labels(y_source)
        if ys.shape[0] != Xs.shape[0]:
            raise InvalidInputError(f"X_source has {Xs.shape[0]} rows but y_source has {ys.shape[0]} labels")
        if np.unique(ys).size < 2:
            raise InvalidInputError("the labelled source documents hold a single class; two are needed")
        Pt = check_dense(pair_target, "pair_target")
        Ps = check_dense(pair_source, "pair_source", n_features=Xs.shape[1])
        if Pt.shape[0] != Ps.shape[0] or Pt.shape[0] == 0:
            raise InvalidInputError(
                f"pair_target ({Pt.shape[0]} rows) and pair_source ({Ps.shape[0]} rows) must be the same non-empty pairs"
            )
        self.source_model_ = make_pipeline(StandardScaler(), LogisticRegression(C=self.source_C, max_iter=5000))
        self.source_model_.fit(Xs, ys)
        pos = list(self.source_model_.classes_).index(1.0)
        self.pair_scores_ = 2.0 * self.source_model_.predict_proba(Ps)[:, pos] - 1.0
        self.pair_target_ = Pt
        self.index_ = faiss.IndexFlatL2(Pt.shape[1])
        self.index_.add(np.ascontiguousarray(Pt, dtype=np.float32))
        self.n_features_in_ = Pt.shape[1]
        return self

    @property
    def k_(self) -> int:
        return min(int(self.n_neighbors), self.pair_target_.shape[0])

    def kneighbors(self, X):
        """The ``K`` nearest pair images of each row of ``X``: (exact squared distances, indices), nearest first."""
        check_fitted(self, "index_")
        X = check_dense(X, n_features=self.n_features_in_)
        _, idx = self.index_.search(np.ascontiguousarray(X, dtype=np.float32), self.k_)
        diff = self.pair_target_[idx] - X[:, None, :]
        d2 = np.einsum("nkd,nkd->nk", diff, diff)
        return d2, idx

    def neighbor_weights(self, d2: np.ndarray) -> np.ndarray:
        """Gaussian similarities ``exp(-d^2 / (2 b^2))``, scaled per row by ``exp(min d^2 / (2 b^2))``
        (the scale cancels in the weighted mean and keeps far neighbourhoods from underflowing)."""
        if self.weighting == "uniform":
            return np.ones_like(d2)
        return np.exp(-(d2 - d2.min(axis=1, keepdims=True)) / (2.0 * self.bandwidth ** 2))

    def decision_function(self, X) -> np.ndarray:
        """``h(x)`` in [-1, 1] for each row of ``X`` (target view)."""
        d2, idx = self.kneighbors(X)
        w = self.neighbor_weights(d2)
        return (w * self.pair_scores_[idx]).sum(axis=1) / w.sum(axis=1)

    def predict(self, X) -> np.ndarray:
        return np.where(self.decision_function(X) >= 0, 1, -1)
