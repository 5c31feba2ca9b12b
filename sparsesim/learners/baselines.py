"""Fixed similarities used as baselines: the plain dot product and the cosine."""

from __future__ import annotations

import scipy.sparse as sp
from sklearn.base import BaseEstimator

from ..models import BilinearSimilarity
from ..validation import check_csr


class DotProduct(BaseEstimator):
    """S(x, x') = x . x' (M = I). ``fit`` only records the feature count.

    Attributes
    ----------
    n_features_in_ : int
    model_ : BilinearSimilarity
    """

    _normalize = False
    _algorithm = "dot"

    def fit(self, X, y=None, progress=None):
        X = check_csr(X)
        self.n_features_in_ = X.shape[1]
        self.n_triplets_seen_ = 0
        self.n_updates_ = 0
        self.train_seconds_ = 0.0
        return self

    @property
    def model_(self) -> BilinearSimilarity:
        d = self.n_features_in_
        return BilinearSimilarity(sp.csr_matrix((d, d)), identity=True, normalize=self._normalize,
                                  metadata={"algorithm": self._algorithm, "params": {}})


class Cosine(DotProduct):
    """S(x, x') = x . x' / (|x| |x'|)."""

    _normalize = True
    _algorithm = "cosine"
