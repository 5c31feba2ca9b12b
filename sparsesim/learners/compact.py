"""A compact bilinear similarity M = D + W + U V^T learned online from OASIS's triplets.

:class:`CompactSSI` (registry name ``ssi-dwuv``) learns the three parts of a
:class:`~sparsesim.compact.CompactSimilarity` from the same (anchor, same-class, other-class)
triplets as OASIS (the SORS protocol with the same seed gives the same stream): on a violated
ranking constraint, Supervised Semantic Indexing's stochastic gradient step on the low-rank
factors U, V (Bai et al. 2009), then a passive-aggressive step (as OASIS) on the diagonal D and the
values of the sparse part W for the loss that remains. The rules are in
:mod:`sparsesim.engine.compact_rules`.

The size is fixed before learning: ``d + nnz(W) + 2 d r`` numbers, at most ``max_size_ratio``
times the stored entries of the corpus it starts from. W's support (which off-diagonal entries
may be nonzero) is chosen then too: for each feature, the ``support`` features it co-occurs with
most in the corpus (the largest entries of ``n(X)^T n(X)``, rows L2-normalised; over a seeded
sample of :data:`SUPPORT_DOCUMENTS` documents when the corpus has more).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from ..compact import CompactSimilarity
from ..csr_rows import unit_row_data
from ..defaults import AUTO, data_statistics, resolve_bilinear
from ..engine.compact_rules import run_triplets
from ..triplets import iter_sors_triplets
from ..exceptions import InvalidInputError
from ..validation import check_csr, check_fit_matrix, check_params
from .base import TripletLearner

__all__ = ["CompactSSI", "cooccurrence_support", "compact_sizes"]

#: Largest default rank and support per feature (``"auto"`` stays below them when the budget allows more).
MAX_AUTO_RANK = 64
MAX_AUTO_SUPPORT = 32
#: W's support is chosen from the co-occurrences of at most this many documents (a seeded sample).
SUPPORT_DOCUMENTS = 20_000
_BLOCK_FEATURES = 512


def compact_sizes(n_features: int, nnz: int, ratio: float, rank=AUTO, support=AUTO) -> tuple[int, int]:
    """(rank, support per feature) of a compact model within ``ratio * nnz`` numbers.

    ``"auto"`` rank: ``min(64, d, budget // (4 d))`` (the low-rank part at most half the budget);
    ``"auto"`` support: ``min(32, d - 1, (budget - d - 2 d r) // d)``. Explicit values pass through.

    Examples
    --------
    >>> compact_sizes(62061, 900_000, 20.0)
    (64, 32)
    >>> compact_sizes(1000, 5000, 20.0)
    (25, 32)
    """
    d = int(n_features)
    budget = float(ratio) * int(nnz)
    if isinstance(rank, str):
        rank = int(max(0, min(MAX_AUTO_RANK, d, budget // (4 * d))))
    if isinstance(support, str):
        left = budget - d - 2 * d * int(rank)
        support = int(max(0, min(MAX_AUTO_SUPPORT, d - 1, left // d)))
    return int(rank), int(support)


def cooccurrence_support(Xn: sp.csr_matrix, k: int) -> sp.csr_matrix:
    """For each feature i, the ``k`` other features j with the largest ``(Xn^T Xn)_ij`` (ties: the
    lower j), as the pattern of a CSR ``(d, d)`` matrix of zeros (int64 indptr, int32 indices).

    Features that co-occur with fewer than ``k`` others keep all of them. Computed in blocks of
    feature rows, so only ``block x d`` co-occurrences are held at a time.
    """
    d = Xn.shape[1]
    indptr = np.zeros(d + 1, np.int64)
    if k <= 0 or Xn.nnz == 0:
        W = sp.csr_matrix((d, d))
        W.indptr, W.indices = indptr, np.zeros(0, np.int32)
        return W
    XT = Xn.T.tocsr()
    cols = []
    for lo in range(0, d, _BLOCK_FEATURES):
        hi = min(lo + _BLOCK_FEATURES, d)
        C = (XT[lo:hi] @ Xn).tocsr()
        C.sort_indices()
        for r in range(hi - lo):
            s, e = C.indptr[r], C.indptr[r + 1]
            j, v = C.indices[s:e], C.data[s:e]
            keep = (j != lo + r) & (v > 0)
            j, v = j[keep], v[keep]
            if j.size > k:
                order = np.lexsort((j, -v))[:k]
                j = np.sort(j[order])
            cols.append(j.astype(np.int32))
            indptr[lo + r + 1] = indptr[lo + r] + j.size
    indices = np.concatenate(cols) if cols else np.zeros(0, np.int32)
    W = sp.csr_matrix((np.zeros(indices.size), indices, indptr), shape=(d, d))
    W.indptr, W.indices = indptr, indices  # keep the declared dtypes (scipy may narrow them)
    return W


def _unit_rows(X: sp.csr_matrix) -> sp.csr_matrix:
    return sp.csr_matrix((unit_row_data(X), X.indices, X.indptr), shape=X.shape)


class CompactSSI(TripletLearner):
    """Compact similarity M = D + W + U V^T (diagonal, sparse, low rank) learned from triplets.

    On a triplet (a, p, n) with hinge loss ``l = max(0, 1 - a^T M (p - n)) > 0`` (rows
    L2-normalised): ``U += eta a ((p - n) V)^T``, ``V += eta (p - n) (a U)`` (SSI), then
    ``D += tau a * (p - n)`` and ``W += tau a (p - n)^T`` on W's fixed support, with ``tau = min(C,
    l' / |g|^2)`` for the loss ``l'`` left after the low-rank step (passive-aggressive, as OASIS).
    M starts at ``I + U_0 U_0^T`` with ``U_0 = V_0`` a Gaussian random projection scaled by
    ``init_scale / sqrt(r)``, so the first rankings are close to cosine.

    Parameters
    ----------
    rank : int or "auto", default "auto"
        Width r of U and V. ``"auto"``: ``min(64, d, budget // (4 d))`` with ``budget =
        max_size_ratio * nnz(X)`` (see :func:`compact_sizes`).
    support : int or "auto", default "auto"
        Off-diagonal entries of W per feature (the most co-occurring features). ``"auto"``:
        ``min(32, d - 1, (budget - d - 2 d r) // d)``.
    max_size_ratio : float, default 20.0
        The ``"auto"`` sizes keep the model within this many times the corpus's stored entries.
    C : float or "auto", default "auto"
        Cap of the passive-aggressive step on D and W; ``"auto"``: OASIS's rule
        (:func:`sparsesim.defaults.resolve_bilinear`) on the normalised corpus.
    learning_rate : float, default 0.3
        Step eta of the low-rank (SSI) update. Chosen on a validation part of news20's training
        split (seed 0, 2e4 triplets): 0.01 / 0.03 / 0.1 / 0.3 / 1.0 gave MAP 20.6 / 22.4 / 27.5 /
        37.3 / 27.7 (docs/compact.md).
    init_scale : float, default 1.0
        Scale of the initial random projection U_0 = V_0 (0: the low-rank part starts at 0 and,
        its gradient being 0 there, stays 0).
    n_triplets : int, default 100000
        Triplets drawn by :meth:`fit` (the SORS protocol, the stream OASIS draws with the same seed).
    random_state : int, optional
        Seed of the initial projection and of the triplet stream.

    Attributes
    ----------
    diagonal_ : ndarray, shape (n_features,)
    W_ : scipy.sparse.csr_matrix, shape (n_features, n_features)
    U_, V_ : ndarray, shape (n_features, rank_)
    rank_, support_ : int
    resolved_params_ : dict
        ``C``, ``rank`` and ``support`` as numbers.
    model_ : CompactSimilarity

    Examples
    --------
    >>> from sparsesim.data import load_dataset
    >>> from sparsesim.learners.compact import CompactSSI
    >>> data = load_dataset("news20-sample")
    >>> est = CompactSSI(n_triplets=2000, random_state=0).fit(data.X, data.y)
    >>> est.model_.n_entries <= 20 * data.X.nnz
    True
    """

    _algorithm = "ssi-dwuv"
    _state_attrs = TripletLearner._state_attrs + ("diagonal_", "W_", "U_", "V_", "rank_", "support_",
                                                  "resolved_params_")

    @classmethod
    def _unit_test_params(cls) -> dict:
        return {"n_triplets": 120}

    def __init__(self, rank=AUTO, support=AUTO, max_size_ratio=20.0, C=AUTO, learning_rate=0.3, init_scale=1.0,
                 n_triplets=100_000, random_state=None):
        self.rank = rank
        self.support = support
        self.max_size_ratio = max_size_ratio
        self.C = C
        self.learning_rate = learning_rate
        self.init_scale = init_scale
        self.n_triplets = n_triplets
        self.random_state = random_state

    _OPEN = {"low_open": True}
    _param_spec = {
        "rank": ("int", 0, 1 << 14), "support": ("int", 0, None),
        "max_size_ratio": ("float", 0, None, _OPEN), "C": ("float", 0, None),
        "learning_rate": ("float", 0, None), "init_scale": ("float", 0, None), "n_triplets": ("n_triplets",),
    }

    # -- state ----------------------------------------------------------------------------
    def _setup(self, X: sp.csr_matrix) -> None:
        """Resolve the sizes and C from the corpus ``X`` (rows not yet normalised), choose W's
        support, draw the initial projection."""
        Xn = _unit_rows(X)
        d = X.shape[1]
        rank, support = compact_sizes(d, X.nnz, self.max_size_ratio, self.rank, self.support)
        rank, support = min(rank, 1 << 14), min(support, max(d - 1, 0))
        C = self._resolved_C(Xn)
        rng = np.random.default_rng(self.random_state)
        U0 = rng.standard_normal((d, rank)) * (float(self.init_scale) / math.sqrt(max(rank, 1)))
        if Xn.shape[0] > SUPPORT_DOCUMENTS:  # drawn after U0: smaller corpora get the same U0 and support
            Xn = Xn[np.sort(rng.choice(Xn.shape[0], SUPPORT_DOCUMENTS, replace=False))]
        self.diagonal_ = np.ones(d)
        self.W_ = cooccurrence_support(Xn, support)
        self.U_ = U0
        self.V_ = U0.copy()
        self.rank_, self.support_ = int(rank), int(support)
        self.resolved_params_ = {"C": float(C), "rank": int(rank), "support": int(support)}

    def _resolved_C(self, Xn) -> float:
        """``C``, with ``"auto"`` resolved by OASIS's rule on the normalised rows ``Xn`` (1.0 on
        fewer than two rows)."""
        if not isinstance(self.C, str):
            return float(self.C)
        if Xn is None or Xn.shape[0] < 2:
            return 1.0
        return float(resolve_bilinear("oasis", {"C": AUTO}, data_statistics(Xn), int(self.n_triplets))["C"])

    def start_from(self, model: CompactSimilarity, X=None):
        """Reset and continue from ``model``: later :meth:`partial_fit_triplets` calls update its
        D, W, U and V with this learner's rule (how a served compact model keeps learning).

        W's support is the model's stored entries, joined (when ``X`` is given) by the
        co-occurrence support of ``X`` at the model's recorded support per feature (its
        ``resolved_params``, else this learner's ``support`` resolved on ``X``), as :meth:`fit`
        chooses it; ``"auto"`` C is resolved on ``X``.

        Parameters
        ----------
        model : CompactSimilarity
            A normalising model (the rule sees unit rows).
        X : sparse matrix, optional
            The corpus the model serves.

        Returns
        -------
        self

        Examples
        --------
        >>> from sparsesim.data import load_dataset
        >>> data = load_dataset("news20-sample")
        >>> model = CompactSSI(n_triplets=300, random_state=0).fit(data.X, data.y).model_
        >>> more = CompactSSI(random_state=0).start_from(model, data.X)
        >>> bool(np.array_equal(more.model_.U, model.U))
        True
        >>> more.partial_fit_triplets(data.X, np.array([[0, 1, 250]])).n_triplets_seen_
        1
        """
        if not isinstance(model, CompactSimilarity):
            raise InvalidInputError(f"model must be a CompactSimilarity, got {type(model).__name__}")
        if not model.normalize:
            raise InvalidInputError("the compact learner's rule sees unit rows: it continues normalising models only")
        self._reset()
        d = model.n_features
        self._init_state(d)
        Xn = None
        if X is not None:
            Xn = _unit_rows(check_csr(X, n_features=d, name="X"))
            if Xn.shape[0] > SUPPORT_DOCUMENTS:
                rng = np.random.default_rng(self.random_state)
                Xn = Xn[np.sort(rng.choice(Xn.shape[0], SUPPORT_DOCUMENTS, replace=False))]
        resolved = model.metadata.get("resolved_params")
        support = resolved.get("support") if isinstance(resolved, dict) else None
        if not isinstance(support, int) or isinstance(support, bool) or support < 0:
            support = compact_sizes(d, 0 if Xn is None else Xn.nnz, self.max_size_ratio, model.rank,
                                    self.support)[1]
        support = min(int(support), max(d - 1, 0))
        W = model.W.tocsr()
        if Xn is not None and support:
            pattern = cooccurrence_support(Xn, support)

            def entries(M):
                return np.repeat(np.arange(d, dtype=np.int64), np.diff(M.indptr)), M.indices.astype(np.int64)

            (pr, pc), (sr, sc) = entries(pattern), entries(W)
            W = sp.csr_matrix((np.concatenate([np.zeros(pc.size), W.data]),
                               (np.concatenate([pr, sr]), np.concatenate([pc, sc]))), shape=(d, d))
            W.sum_duplicates()  # explicit zeros are kept: they are the support
        W = sp.csr_matrix((np.array(W.data, np.float64), np.array(W.indices, np.int32),
                           np.array(W.indptr, np.int64)), shape=(d, d))
        W.indptr, W.indices = W.indptr.astype(np.int64), W.indices.astype(np.int32)
        self.diagonal_ = np.array(model.diagonal, np.float64)
        self.W_ = W
        self.U_ = np.array(model.U, np.float64, order="C")
        self.V_ = np.array(model.V, np.float64, order="C")
        self.rank_, self.support_ = int(model.rank), int(support)
        self.resolved_params_ = {"C": self._resolved_C(Xn), "rank": int(model.rank), "support": int(support)}
        return self

    def _update(self, X, triplets, signs):
        if "diagonal_" not in self.__dict__:
            self._setup(X)
        cached = getattr(self, "_unit_cache", None)
        if cached is not None and cached[0] is X:  # fit passes the same checked corpus with every batch
            Xn = cached[1]
        else:
            Xn = _unit_rows(X)
            self._unit_cache = (X, Xn)
        losses = np.zeros(triplets.shape[0])
        signs = np.ones(triplets.shape[0]) if signs is None else np.ascontiguousarray(signs, np.float64)
        W = self.W_
        run_triplets(Xn.indptr, Xn.indices, Xn.data, np.ascontiguousarray(triplets, np.int64), signs,
                     self.diagonal_, W.indptr, W.indices, W.data, self.U_, self.V_,
                     float(self.resolved_params_["C"]), float(self.learning_rate), losses)
        return losses, None

    def _triplet_stream(self, y):
        """The SORS protocol: ``n_triplets`` (anchor, same-class, other-class) triplets from ``y``."""
        for chunk in iter_sors_triplets(y, self.n_triplets, seed=self.random_state, chunk_size=self._fit_chunk):
            yield {"triplets": chunk}

    def fit(self, X, y, progress=None):
        """Learn from ``n_triplets`` triplets drawn from labels ``y`` (see :meth:`TripletLearner.fit`).

        The sizes, ``C`` and W's support are resolved from ``X`` before the first triplet.
        """
        check_params(self)
        try:
            super().fit(X, y, progress=progress)
        finally:
            self._unit_cache = None
        if "diagonal_" not in self.__dict__:  # no triplets: the starting model of X
            self._setup(check_fit_matrix(X))
        return self

    def partial_fit_triplets(self, X, triplets, signs=None):
        """Update the model with ``triplets`` over the rows of ``X`` (see
        :meth:`TripletLearner.partial_fit_triplets`). A fresh learner resolves its sizes, ``C`` and
        W's support from this first ``X``; later calls keep them."""
        try:
            return super().partial_fit_triplets(X, triplets, signs)
        finally:
            self._unit_cache = None

    # -- the model ------------------------------------------------------------------------
    @property
    def model_(self) -> CompactSimilarity:
        """The learned :class:`~sparsesim.compact.CompactSimilarity` (normalising)."""
        self._check_fitted()
        if "diagonal_" not in self.__dict__:
            raise AttributeError("model_")  # pragma: no cover - fit always sets the parts up
        if getattr(self, "_model_cache", None) is None:
            W = self.W_.copy()
            W.eliminate_zeros()  # support entries that never moved are not stored
            meta = {"algorithm": self._algorithm, "params": dict(self.get_params()),
                    "resolved_params": dict(self.resolved_params_), "n_triplets_seen": int(self.n_triplets_seen_),
                    "n_updates": int(self.n_updates_), "train_seconds": float(self.train_seconds_)}
            self._model_cache = CompactSimilarity(self.diagonal_.copy(), W, self.U_.copy(), self.V_.copy(),
                                                  normalize=True, metadata=meta)
        return self._model_cache

    def score_pairs(self, A, B):
        """Row-wise similarity S(A[i], B[i]) under the learned model."""
        return self.model_.score_pairs(A, B)

    def score_matrix(self, Q, X):
        """Dense similarities of queries ``Q`` against corpus ``X``."""
        return self.model_.score_matrix(Q, X)
