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
    n_neighbors : int or "auto", default 100
        ``K`` (the paper's 100); capped at the number of pairs. ``"auto"``: the K of
        :data:`K_CANDIDATES` whose leave-one-out h of the pairs agrees in sign with the pairs' own
        source scores most often (:func:`choose_neighbors`; pairs only, no target labels).
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
    n_neighbors_ : int
        The K in use (``"auto"`` resolved).
    neighbor_agreement_ : dict
        With ``"auto"``: leave-one-out sign agreement of each candidate K.
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

        auto = isinstance(self.n_neighbors, str) and self.n_neighbors == "auto"
        if not auto and (isinstance(self.n_neighbors, (bool, str)) or int(self.n_neighbors) < 1):
            raise InvalidInputError(f"n_neighbors must be >= 1 or 'auto', got {self.n_neighbors!r}")
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
        self.neighbor_agreement_ = {}
        if auto:
            self.n_neighbors_, self.neighbor_agreement_ = choose_neighbors(self, K_CANDIDATES)
        else:
            self.n_neighbors_ = int(self.n_neighbors)
        return self

    @property
    def k_(self) -> int:
        return min(int(self.n_neighbors_), self.pair_target_.shape[0])

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


K_CANDIDATES = (5, 10, 25, 50, 100, 200)


def choose_neighbors(source: KNNSourceHypothesis, candidates=K_CANDIDATES) -> tuple[int, dict]:
    """``(K, agreement)``: the K of ``candidates`` (capped at the pairs but one) whose
    leave-one-out source hypothesis of every pair image, ``h_{-j}(u_j)`` from the K nearest
    *other* pairs, has the sign of the pair's own text score ``s_j`` most often; ties go to the
    larger K. Reads the fitted pairs only (their images and source scores), never a target label.
    """
    n = source.pair_target_.shape[0]
    ks = sorted({min(int(k), n - 1) for k in candidates if n > 1})
    if not ks:
        return 1, {}
    Pt = source.pair_target_
    _, idx = source.index_.search(np.ascontiguousarray(Pt, dtype=np.float32), min(ks[-1] + 1, n))
    # drop each pair itself (not necessarily first among exact duplicates)
    own = idx == np.arange(n)[:, None]
    keep = np.where(own.any(axis=1)[:, None], ~own, np.arange(idx.shape[1])[None, :] < idx.shape[1] - 1)
    idx = idx[keep].reshape(n, -1)[:, :ks[-1]]
    diff = Pt[idx] - Pt[:, None, :]
    w = source.neighbor_weights(np.einsum("nkd,nkd->nk", diff, diff))
    ws = np.cumsum(w * source.pair_scores_[idx], axis=1)
    wt = np.cumsum(w, axis=1)
    sign = np.where(source.pair_scores_ >= 0, 1, -1)
    agreement = {}
    for k in ks:
        h = ws[:, k - 1] / wt[:, k - 1]
        agreement[k] = float(np.mean(np.where(h >= 0, 1, -1) == sign))
    best = max(ks, key=lambda k: (agreement[k], k))
    return int(best), agreement
