"""Online Mahalanobis metric learners on pairs: LEGO and RDML, the online metric-learning
baselines of the SORS paper (Yao et al., ICDM 2015, Table II).

Both learn a positive semi-definite A (d x d) of the distance
``d_A(x, x') = (x - x')^T A (x - x')`` from labelled pairs. A triplet (x, x1, x2) with sign +1
gives two pairs, (x, x1) similar and (x, x2) dissimilar (sign -1 swaps the two), learned in that
order; :meth:`fit` draws the SORS protocol's triplets from class labels, as for OASIS.

* :class:`LEGO` (LogDet Exact Gradient Online; Jain, Kulis, Dhillon, Grauman, NIPS 2008): with
  ``z = x - x'``, the prediction ``p = z^T A_t z`` and the pair's target distance ``y``,

  ``ybar = (eta y p - 1 + sqrt((eta y p - 1)^2 + 4 eta p^2)) / (2 eta p)``,
  ``A_{t+1} = A_t - eta (ybar - y) A_t z z^T A_t / (1 + eta (ybar - y) p)``, ``A_1 = I``.

  The target is ``lower`` for a similar pair and ``upper`` for a dissimilar one (as ITML's
  thresholds); ``update="violated"`` (default) leaves a pair alone that already meets its target
  (similar: ``p <= lower``; dissimilar: ``p >= upper``), ``"always"`` takes the squared-loss step
  on every pair. A stays positive definite without a projection.
* :class:`RDML` (Regularized Distance Metric Learning; Jin, Wang, Zhou, NIPS 2009, Algorithm 1):
  with ``y = +1`` (similar) or ``-1`` (dissimilar), a pair classified correctly,
  ``y (b - p) > 0``, leaves A unchanged; otherwise ``A <- pi_S+(A - lam y z z^T)``, ``A_1 = 0``,
  ``b = 1`` in the paper. ``pi_S+`` projects onto the PSD cone: only a similar pair subtracts, and
  a rank-one subtraction from a PSD matrix has at most one negative eigenvalue ``mu`` (eigenvector
  ``v``), so the projection is ``A - mu v v^T``.

Both keep A dense: 8 d^2 bytes, and an LEGO step costs O(d^2), an RDML projection O(d^3). They
refuse data with more than ``max_features`` features (default 4,096: A takes 128 MiB) with an
error that says so; high-dimensional text (news20's 62,061 features would need 31 GB for A) is
what the sparse learners (OASIS, SORS) are for.

The model is the bilinear form of the learned metric, ``S(x, x') = x^T A x'``
(:class:`~sparsesim.models.BilinearSimilarity` with ``W = A``, no identity), so retrieval,
saving and evaluation are those of every other similarity learner; ranking by ``-d_A`` instead
would also subtract each document's own ``x'^T A x'``.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from ..exceptions import DivergenceError, InvalidInputError, ResourceLimitError
from ..memory import MemoryBudget, check_allocation, parse_memory
from ..models import BilinearSimilarity
from ..triplets import iter_sors_triplets
from .base import TripletLearner

__all__ = ["LEGO", "RDML", "MAX_FEATURES", "pair_stream", "pair_statistics"]

#: Default ``max_features``: A (8 d^2 bytes) takes 128 MiB at d = 4,096.
MAX_FEATURES = 4096
_N_STAT_PAIRS = 2000


def pair_stream(triplets: np.ndarray, signs: np.ndarray):
    """The pairs a triplet stream gives: ``(rows a, rows b, labels)`` with label +1 (similar) for
    (anchor, first) and -1 for (anchor, second) when the sign is +1, swapped when it is -1; the
    two pairs of a triplet are consecutive, similar first."""
    n = triplets.shape[0]
    signs = np.ones(n) if signs is None else np.asarray(signs)
    first = np.where(signs > 0, triplets[:, 1], triplets[:, 2])
    second = np.where(signs > 0, triplets[:, 2], triplets[:, 1])
    a = np.repeat(triplets[:, 0], 2)
    b = np.empty(2 * n, dtype=triplets.dtype)
    b[0::2], b[1::2] = first, second
    labels = np.tile([1.0, -1.0], n)
    return a, b, labels


def pair_statistics(X: sp.csr_matrix) -> np.ndarray:
    """Squared Euclidean distances of up to 2,000 row pairs of ``X`` drawn with a fixed seed (what
    the ``"auto"`` rules read; the same corpus always gives the same values)."""
    n = X.shape[0]
    if n < 2:
        return np.ones(1)
    rng = np.random.default_rng(0)
    i = rng.integers(0, n, _N_STAT_PAIRS)
    j = (i + rng.integers(1, n, _N_STAT_PAIRS)) % n
    Z = X[i] - X[j]
    d2 = np.asarray(Z.multiply(Z).sum(axis=1)).ravel()
    d2 = d2[d2 > 0]
    return d2 if d2.size else np.ones(1)


class _DenseMahalanobis(TripletLearner):
    """Dense-A pair learners: state, the feature limit, the SORS protocol stream, model export."""

    @classmethod
    def _unit_test_params(cls) -> dict:
        return {"n_triplets": 120}

    _state_attrs = TripletLearner._state_attrs + ("A_", "resolved_params_", "n_pairs_seen_", "n_pair_updates_")
    _auto_names: tuple = ()

    def _initial_A(self, d: int) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _resolve(self, stats: np.ndarray) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    def _step_pairs(self, X, a, b, labels, losses) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def check_fit_data(self, n_features: int, class_counts=None, n_tasks=None) -> None:
        """Refuse more than ``max_features`` features (or a metric beyond the memory budget)
        before any work; see :meth:`~sparsesim.learners.base.SparsesimEstimator.check_fit_data`."""
        self._check_width(int(n_features))

    def _check_width(self, d: int) -> None:
        limit = self.max_features
        if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1:
            raise InvalidInputError(f"max_features must be a positive integer, got {limit!r}")
        if d > limit:
            raise ResourceLimitError(
                f"{type(self).__name__} keeps a dense d x d metric A ({8 * d * d / 2**30:.1f} GiB at d = {d}) and "
                f"allows at most max_features = {limit} features; raise max_features if that fits in memory, "
                "reduce the features (e.g. TruncatedSVD), or use a sparse similarity learner (oasis, sors-l1) "
                "for high-dimensional data")
        budget = MemoryBudget(parse_memory(self.max_memory), self.max_memory, owner=type(self).__name__)
        check_allocation(budget, 3 * 8 * d * d, f"the dense {d} x {d} metric and its work space",
                         hint="fewer features")

    def _init_state(self, d: int) -> None:
        self._check_width(d)
        super()._init_state(d)
        self.A_ = self._initial_A(d)
        self.n_pairs_seen_ = 0
        self.n_pair_updates_ = 0

    def resolve_params(self, X) -> dict:
        """The numbers this learner's ``"auto"`` parameters resolve to on corpus ``X`` (no training).

        Parameters
        ----------
        X : sparse matrix, shape (n_documents, n_features)

        Returns
        -------
        dict
        """
        from ..validation import check_csr

        return self._resolve(pair_statistics(check_csr(X)))

    def _update(self, X, triplets, signs):
        if not self.__dict__.get("resolved_params_"):  # ({} after a fit of zero triplets)
            self.resolved_params_ = self._resolve(pair_statistics(X))
        a, b, labels = pair_stream(triplets, signs)
        pair_losses = np.zeros(labels.size)
        # one small BLAS call per pair: threads cost far more than they give (40x slower measured on
        # a busy 2-core machine with OpenBLAS's default threads at d = 256)
        with threadpool_limits(limits=1, user_api="blas"):
            self.n_pair_updates_ += self._step_pairs(X, a, b, labels, pair_losses)
        self.n_pairs_seen_ += labels.size
        # a triplet counts as an update when either of its pairs changed A
        return pair_losses[0::2] + pair_losses[1::2], None

    def _triplet_stream(self, y):
        for chunk in iter_sors_triplets(y, self.n_triplets, seed=self.random_state, chunk_size=self._fit_chunk):
            yield {"triplets": chunk}

    @property
    def model_(self) -> BilinearSimilarity:
        """The learned metric's bilinear form ``S(x, x') = x^T A x'`` (W = A, no identity)."""
        self._check_fitted()
        if getattr(self, "_model_cache", None) is None:
            meta = {"algorithm": self._algorithm, "params": dict(self.get_params()),
                    "resolved_params": dict(getattr(self, "resolved_params_", {})),
                    "n_triplets_seen": int(self.n_triplets_seen_), "n_updates": int(self.n_updates_),
                    "train_seconds": float(self.train_seconds_)}
            self._model_cache = BilinearSimilarity(sp.csr_matrix(self.A_), identity=False, metadata=meta)
        return self._model_cache

    def distance_pairs(self, A, B) -> np.ndarray:
        """Row-wise learned distance ``d_A(A[i], B[i])``."""
        from ..validation import check_csr

        self._check_fitted()
        A = check_csr(A, n_features=self.n_features_in_)
        B = check_csr(B, n_features=self.n_features_in_, name="B")
        if A.shape[0] != B.shape[0]:
            raise InvalidInputError(f"A and B need the same number of rows, got {A.shape[0]} and {B.shape[0]}")
        Z = (A - B).toarray() if A.shape[0] * self.n_features_in_ <= 2**24 else None
        if Z is None:
            return np.array([self._distance(A[i] - B[i]) for i in range(A.shape[0])])
        return np.einsum("ij,jk,ik->i", Z, self.A_, Z)

    def _distance(self, z: sp.csr_matrix) -> float:
        idx, v = z.indices, z.data
        return float(v @ self.A_[np.ix_(idx, idx)] @ v)


def _diff(X, i, j, z):
    """z = X[i] - X[j] written into the dense buffer ``z`` (read from the CSR arrays; no row slicing);
    returns the indices and values of its nonzeros."""
    z[:] = 0.0
    lo, hi = X.indptr[i], X.indptr[i + 1]
    z[X.indices[lo:hi]] = X.data[lo:hi]
    lo, hi = X.indptr[j], X.indptr[j + 1]
    z[X.indices[lo:hi]] -= X.data[lo:hi]
    idx = np.flatnonzero(z)
    return idx, z[idx]


class LEGO(_DenseMahalanobis):
    """LEGO: online LogDet metric learning with exact gradient steps (Jain et al., NIPS 2008).

    Parameters
    ----------
    eta : float or "auto", default "auto"
        Step size eta (the SORS paper searches {0.02, 0.08, 0.32}). ``"auto"``: ``0.08 / s^2`` with
        ``s`` the mean squared distance of 2,000 fixed-seed row pairs of the first corpus
        (:func:`pair_statistics`), so the step is the same for data scaled by a constant.
    lower, upper : float or "auto", default "auto"
        Target distance of similar / dissimilar pairs. ``"auto"``: the 5th / 95th percentile of
        the same pair distances (ITML's thresholds).
    update : {"violated", "always"}, default "violated"
        Step only on pairs that miss their target, or on every pair.
    n_triplets : int, default 100000
        Triplets drawn by :meth:`fit` (two pairs each).
    random_state : int, optional
        Seed of the triplet stream drawn by :meth:`fit`.
    max_features : int, default 4096
        Largest feature count accepted (A is dense, 8 d^2 bytes).
    max_memory : int, str, default "auto"
        Memory budget A is checked against (see :mod:`sparsesim.memory`).

    Attributes
    ----------
    A_ : ndarray, shape (n_features, n_features)
        The learned metric.
    n_pairs_seen_, n_pair_updates_ : int
        Pairs received and pairs that changed A.
    resolved_params_ : dict
        ``eta``, ``lower``, ``upper`` as numbers.
    n_features_in_, n_triplets_seen_, n_updates_, train_seconds_, model_
        See :class:`~sparsesim.learners.base.TripletLearner`.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsesim.learners.mahalanobis import LEGO
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.standard_normal((60, 5)), np.repeat([0, 1, 2], 20)
    >>> est = LEGO(n_triplets=300, random_state=0).fit(X, y)
    >>> bool(np.all(np.linalg.eigvalsh(est.A_) > 0))
    True
    """

    _algorithm = "lego"
    _auto_names = ("eta", "lower", "upper")
    _param_spec = {"lower": ("float", 0, None), "upper": ("float", 0, None),
                   "max_features": ("int", 1, None), "update": ("choice", ("violated", "always"))}

    def __init__(self, eta="auto", lower="auto", upper="auto", update="violated", n_triplets=100_000,
                 random_state=None, max_features=MAX_FEATURES, max_memory="auto"):
        self.eta = eta
        self.lower = lower
        self.upper = upper
        self.update = update
        self.n_triplets = n_triplets
        self.random_state = random_state
        self.max_features = max_features
        self.max_memory = max_memory

    def _initial_A(self, d):
        return np.eye(d)

    def _resolve(self, stats):
        s = float(np.mean(stats))
        auto = {"eta": 0.08 / s**2, "lower": float(np.percentile(stats, 5)), "upper": float(np.percentile(stats, 95))}
        out = {name: float(auto[name] if isinstance(getattr(self, name), str) else getattr(self, name))
               for name in self._auto_names}
        if not out["eta"] > 0 or not 0 <= out["lower"] <= out["upper"]:
            raise InvalidInputError(f"LEGO needs eta > 0 and 0 <= lower <= upper, got {out}")
        return out

    def _step_pairs(self, X, a, b, labels, losses):
        if self.update not in ("violated", "always"):
            raise InvalidInputError(f"update must be 'violated' or 'always', got {self.update!r}")
        p_ = self.resolved_params_
        eta, lower, upper = p_["eta"], p_["lower"], p_["upper"]
        always = self.update == "always"
        A = self.A_
        At = A.T  # Fortran view of the C array: BLAS updates it in place
        updated = 0
        z = np.zeros(A.shape[0])
        for t in range(labels.size):
            idx, v = _diff(X, a[t], b[t], z)
            if idx.size == 0:
                continue
            Az = A[:, idx] @ v if 4 * idx.size < A.shape[0] else A @ z
            p = float(v @ Az[idx])
            target = lower if labels[t] > 0 else upper
            if p <= 0 or (not always and (p <= lower if labels[t] > 0 else p >= upper)):
                continue
            with np.errstate(all="ignore"):
                e = np.float64(eta * target * p) - 1.0
                ybar = (e + np.sqrt(e * e + 4.0 * eta * p * p)) / (2.0 * eta * p)
                scale = eta * (ybar - target) / (1.0 + eta * (ybar - target) * p)
            if not np.isfinite(scale):
                raise DivergenceError(f"LEGO: the step of pair {t} is not finite (eta = {eta:g}, target = {target:g}, "
                                      f"distance = {p:g}); use a smaller eta or targets on the data's scale")
            if scale == 0.0:
                continue
            out = scipy.linalg.blas.dger(-scale, Az, Az, a=At, overwrite_a=1)
            if not np.shares_memory(out, A):  # pragma: no cover - f2py copied
                A[...] = out.T
            losses[t] = max(0.5 * (p - target) ** 2, np.finfo(float).tiny)
            updated += 1
        return updated


class RDML(_DenseMahalanobis):
    """RDML: online regularized distance metric learning (Jin, Wang, Zhou, NIPS 2009, Algorithm 1).

    Parameters
    ----------
    lam : float or "auto", default "auto"
        Learning rate lambda (the SORS paper searches {0.01, 0.1}). ``"auto"``: ``0.1 / mean(s)``
        over the squared distances ``s`` of 2,000 fixed-seed row pairs of the first corpus: a step
        moves its own pair's distance by ``lam s^2``, about a tenth of ``b``, whatever the data's
        scale.
    b : float or "auto", default "auto"
        Distance threshold of the pair classifier (1 in the paper, for rows of unit scale).
        ``"auto"``: the median of the same pair distances.
    n_triplets, random_state, max_features, max_memory
        As in :class:`LEGO`.

    Attributes
    ----------
    A_, n_pairs_seen_, n_pair_updates_, resolved_params_
        As in :class:`LEGO` (``lam``, ``b``).

    Examples
    --------
    >>> import numpy as np
    >>> from sparsesim.learners.mahalanobis import RDML
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.standard_normal((60, 5)), np.repeat([0, 1, 2], 20)
    >>> est = RDML(n_triplets=300, random_state=0).fit(X, y)
    >>> bool(np.linalg.eigvalsh(est.A_).min() > -1e-9)
    True
    """

    _algorithm = "rdml"
    _auto_names = ("lam", "b")
    _param_spec = {"lam": ("float", 0, None, {"low_open": True}), "b": ("float", 0, None, {"low_open": True}),
                   "max_features": ("int", 1, None)}

    def __init__(self, lam="auto", b="auto", n_triplets=100_000, random_state=None, max_features=MAX_FEATURES,
                 max_memory="auto"):
        self.lam = lam
        self.b = b
        self.n_triplets = n_triplets
        self.random_state = random_state
        self.max_features = max_features
        self.max_memory = max_memory

    def _initial_A(self, d):
        return np.zeros((d, d))

    def _resolve(self, stats):
        auto = {"lam": 0.1 / float(np.mean(stats)), "b": float(np.median(stats))}
        out = {name: float(auto[name] if isinstance(getattr(self, name), str) else getattr(self, name))
               for name in self._auto_names}
        if not out["lam"] > 0 or not out["b"] > 0:
            raise InvalidInputError(f"RDML needs lam > 0 and b > 0, got {out}")
        return out

    def _step_pairs(self, X, a, b, labels, losses):
        lam, thr = self.resolved_params_["lam"], self.resolved_params_["b"]
        A = self.A_
        updated = 0
        z = np.zeros(A.shape[0])
        for t in range(labels.size):
            idx, v = _diff(X, a[t], b[t], z)
            if idx.size == 0:
                continue
            block = np.ix_(idx, idx)
            p = float(v @ A[block] @ v)
            if not np.isfinite(p):
                raise DivergenceError(f"RDML: the learned distance of pair {t} is not finite (lam = {lam:g}); "
                                      "use a smaller lam")
            y = labels[t]
            if y * (thr - p) > 0:  # classified correctly
                continue
            A[block] -= (lam * y) * np.outer(v, v)
            if y > 0:  # a subtraction may leave one negative eigenvalue: project onto the PSD cone
                mu, vec = scipy.linalg.eigh(A, subset_by_index=[0, 0])
                if mu[0] < 0:
                    u = vec[:, 0]
                    A -= mu[0] * np.outer(u, u)
                A += A.T
                A *= 0.5
            losses[t] = max(0.0, 1.0 - y * (thr - p))
            updated += 1
        return updated
