"""Fixed similarities used as baselines: the plain dot product and the cosine."""

from __future__ import annotations

import scipy.sparse as sp

from ..models import BilinearSimilarity
from ..validation import check_fit_matrix
from .base import TripletLearner


class DotProduct(TripletLearner):
    """S(x, x') = x . x' (M = I). Learns nothing: ``fit`` records the feature count and triplets
    given to :meth:`partial_fit_triplets` are checked and counted, never used.

    Attributes
    ----------
    n_features_in_ : int
    n_triplets_seen_, n_updates_ : int
        Triplets received; always 0 updates.
    model_ : BilinearSimilarity
    """

    _normalize = False
    _algorithm = "dot"

    def _update(self, X, triplets, signs):
        return (), None

    def _triplet_stream(self, y):
        return iter(())

    def fit(self, X, y=None, progress=None):
        """Record the feature count of ``X`` (``y`` is accepted and ignored)."""
        return self._fit_stream(check_fit_matrix(X), iter(()), progress)

    @property
    def model_(self) -> BilinearSimilarity:
        self._check_fitted()
        d = self.n_features_in_
        return BilinearSimilarity(sp.csr_matrix((d, d)), identity=True, normalize=self._normalize,
                                  metadata={"algorithm": self._algorithm, "params": {}})


class Cosine(DotProduct):
    """S(x, x') = x . x' / (|x| |x'|)."""

    _normalize = True
    _algorithm = "cosine"
