"""Online heterogeneous transfer (OHT1 / OHT2): a text-side hypothesis hedged with an online PA on images.

Paper: "Online Transfer Learning with Heterogeneous Source" (draft, ``papers/004``), Algorithms 1-2.

**The source hypothesis h(x) for a target instance x** (the paper's method section on it is empty;
this is our design, see ``docs/transfer.md``):

1. a classifier is trained on the labelled *source* documents (standardised features, L2 logistic
   regression); its score of a source document ``z`` is ``s(z) = 2 P(y = +1 | z) - 1`` in [-1, 1];
2. the co-occurring pairs ``(u_j, z_j)`` (target view, source view; no labels) give every pair image
   ``u_j`` the score ``s_j = s(z_j)`` of its text;
3. for an incoming image ``x``, a FAISS exact L2 index returns its ``K`` nearest pair images; their
   squared distances are recomputed exactly in float64 and weighted by the Gaussian similarity
   ``w_j = exp(-||x - u_j||^2 / (2 b^2))`` (bandwidth ``b``, by default the target kernel's sigma);
4. ``h(x) = sum_j w_j s_j / sum_j w_j`` (a similarity-weighted mean, in [-1, 1]).

Since ``h`` depends only on x (not on the round), the protocol computes it once per stream document.

**Combination** (``combiner``):

* ``"hedge"`` (OHT1, Algorithm 1): predict ``sign(w^s Omega(h) + w Omega(f) - 1/2)`` with
  ``Omega(z) = max(0, min(1, (z + 1) / 2))`` and update ``theta <- theta exp(-eta (Omega(.) - Omega(y))^2)``;
* ``"discount"`` (OHT2, Algorithm 2): predict ``sign(w^s sign(h) + w sign(f))`` and multiply the
  weight of a hypothesis that erred (``y . score <= 0``) by ``alpha``;
* ``"target"``: the target PA alone (the PA / PA-I / PA-II baselines).

The target learner ``f`` is the PA / PA-I / PA-II of :mod:`~sparsesim.learners.linear_pa`
(``kernel="linear"``) or :mod:`~sparsesim.learners.kernel_pa` (``kernel="gaussian"``); it is updated
exactly as alone (Algorithms 1-2, steps 7-9), so OHT only changes the prediction.

The combination rules are pure functions in :mod:`~sparsesim.learners.transfer_rules`, the source
hypothesis is :mod:`~sparsesim.learners.transfer_source`; both are re-exported here.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import ClassifierMixin

from ..defaults import AUTO, is_auto, resolve_sigma
from ..exceptions import InvalidInputError
from ..validation import check_params as check_param_spec
from .kernel_pa import KernelPassiveAggressive, check_dense, gaussian_kernel, kernel_pa_margins
from .base import OnlineClassifier
from .linear_pa import PA_VARIANTS, PassiveAggressiveBinary, signed_labels
# the update rules and the source hypothesis live in their own modules; re-exported so that
# ``from sparsesim.learners.transfer import ...`` keeps giving the whole family
from .transfer_rules import (  # noqa: F401
    COMBINERS,
    combine_stream,
    default_discount,
    discount_update,
    hedge_update,
    mistakes_of,
    normalized_weights,
    omega,
    oht1_score,
    oht2_score,
)
from .transfer_source import KNNSourceHypothesis

KERNELS = ("gaussian", "linear")


# ----------------------------------------------------------------------------------------------
# OHT1 / OHT2 / PA baselines
# ----------------------------------------------------------------------------------------------
class OHTClassifier(ClassifierMixin, OnlineClassifier):
    """Online heterogeneous transfer classifier (OHT1, OHT2) or its target-only PA baseline.

    Parameters
    ----------
    combiner : {"hedge", "discount", "target"}, default "hedge"
        OHT1 (Algorithm 1), OHT2 (Algorithm 2), or the target PA alone.
    variant : {"pa", "pa1", "pa2"}, default "pa2"
        Target learner's step (step 8 of the algorithms).
    kernel : {"gaussian", "linear"}, default "gaussian"
    C : float, default 5.0
    sigma : float or "auto", default "auto"
        Gaussian kernel width of the target learner (and of the neighbour weights when
        ``knn_bandwidth`` is ``None``). ``"auto"``: ``0.5 * sqrt(mean ||x - x'||^2 / 2)`` over
        pairs of rows (:func:`sparsesim.defaults.resolve_sigma`) of the pairs' target view in
        :meth:`fit_source`, else of the first :meth:`partial_fit` call's rows; the value used
        is ``resolved_params_["sigma"]``. The paper's setting is 8.
    eta : float, default 0.5
        OHT1 learning rate.
    alpha : float or None, default None
        OHT2 discount in (0, 1); ``None`` = the paper's ``sqrt(T) / (sqrt(T) + sqrt(2 ln 4))`` with
        ``T`` the number of rows of the first ``partial_fit`` call.
    theta0 : float, default 0.5
        Prior weight ``theta_1^s`` of the source hypothesis (``theta_1 = 1 - theta0``).
    n_neighbors : int or "auto", default "auto"
        ``K`` of the source hypothesis. ``"auto"``: chosen per source hypothesis from the
        co-occurring pairs alone, the K of 5, 10, 25, 50, 100, 200 whose leave-one-out
        hypothesis on the pairs' images agrees best with their own text scores
        (:func:`~sparsesim.learners.transfer_source.choose_neighbors`; docs/transfer.md,
        "Defaults"). The paper's setting is 100.
    knn_bandwidth : float or None
        Neighbour-weight width; ``None`` = ``sigma``.
    knn_weighting : {"gaussian", "uniform"}
    source_C : float, default 1.0
        Inverse regularisation of the source logistic regression.

    Attributes
    ----------
    source_ : KNNSourceHypothesis
        Set by :meth:`fit_source` (not needed for ``combiner="target"`` or when scores are passed).
    target_ : PassiveAggressiveBinary or KernelPassiveAggressive
    theta_ : ndarray of shape (2,)
        ``(theta^s, theta)`` (unnormalised; rescaled by exact powers of two when small).
    alpha_ : float
        The discount in use (OHT2).
    n_seen_, n_mistakes_ : int
    mistakes_ : list of int
        1/0 per round (for online mistake curves).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> Xt = rng.normal(size=(300, 4)); yt = np.where(Xt[:, 0] > 0, 1, -1)
    >>> Zs = Xt[:, :2] + 0.1 * rng.normal(size=(300, 2))  # a "text" view of the same documents
    >>> clf = OHTClassifier(combiner="hedge", sigma=2.0, n_neighbors=10)
    >>> clf = clf.fit_source(Zs[:100], yt[:100], Xt[100:200], Zs[100:200])
    >>> clf = clf.partial_fit(Xt[200:], yt[200:])
    >>> bool(clf.n_mistakes_ < 50)
    True
    """

    _state_attrs = ("n_features_in_", "target_", "theta_", "alpha_", "n_seen_", "n_mistakes_", "mistakes_",
                    "classes_")  # not source_: fit keeps the source hypothesis

    @property
    def _skipped_checks(self) -> dict:
        skipped = {"check_save_load_round_trip": "the kernel PA target keeps its support vectors in memory only; "
                                                 "OHT has no saved-model format (its protocol scores online mistakes)",
                   "sklearn_check_estimator": "a binary online classifier on labels in {-1, +1} over a dense view, "
                                              "fed source scores (or fit_source) for OHT1/OHT2; scikit-learn's "
                                              "classifier checks need multi-class labels and fit(X, y) alone"}
        if self.combiner == "discount" and self.alpha is None:
            skipped["check_partial_fit_chunks"] = ("alpha=None takes the OHT2 discount from the length T of the first "
                                                   "partial_fit call (the paper's setting), so two chunks use another "
                                                   "discount than one pass")
        return skipped

    @classmethod
    def _unit_test_params(cls) -> dict:
        return {"n_neighbors": 5}  # the small problems of the checks have a few dozen source documents

    def __init__(self, combiner: str = "hedge", variant: str = "pa2", kernel: str = "gaussian",
                 C: float = 5.0, sigma=AUTO, eta: float = 0.5, alpha: float | None = None,
                 theta0: float = 0.5, n_neighbors=AUTO, knn_bandwidth: float | None = None,
                 knn_weighting: str = "gaussian", source_C: float = 1.0):
        self.combiner = combiner
        self.variant = variant
        self.kernel = kernel
        self.C = C
        self.sigma = sigma
        self.eta = eta
        self.alpha = alpha
        self.theta0 = theta0
        self.n_neighbors = n_neighbors
        self.knn_bandwidth = knn_bandwidth
        self.knn_weighting = knn_weighting
        self.source_C = source_C

    # -- configuration checks and helpers used by the protocol's fast path --------------------
    def check_params(self) -> None:
        """Raise :class:`InvalidInputError` for out-of-range parameters."""
        if self.combiner not in COMBINERS:
            raise InvalidInputError(f"unknown combiner {self.combiner!r}; use one of {COMBINERS}")
        if self.variant not in PA_VARIANTS:
            raise InvalidInputError(f"unknown PA variant {self.variant!r}; use one of {PA_VARIANTS}")
        if self.kernel not in KERNELS:
            raise InvalidInputError(f"unknown kernel {self.kernel!r}; use one of {KERNELS}")
        if not self.C > 0 or not (is_auto(self.sigma) or self.sigma > 0):
            raise InvalidInputError(f"C and sigma must be positive (sigma may be 'auto'), got C={self.C}, "
                                    f"sigma={self.sigma}")
        if not self.eta > 0:
            raise InvalidInputError(f"eta must be positive, got {self.eta}")
        if self.alpha is not None and not 0 < self.alpha < 1:
            raise InvalidInputError(f"alpha must be in (0, 1), got {self.alpha}")
        if not 0 < self.theta0 < 1:
            raise InvalidInputError(f"theta0 must be in (0, 1), got {self.theta0}")

    @property
    def uses_source(self) -> bool:
        return self.combiner != "target"

    def _sigma(self) -> float:
        """The kernel width in use: ``sigma``, or its resolved value when it is ``"auto"``."""
        if not is_auto(self.sigma):
            return float(self.sigma)
        resolved = getattr(self, "resolved_params_", None) or {}
        if "sigma" not in resolved:
            raise InvalidInputError("sigma='auto' is resolved from data: call fit_source or partial_fit first, "
                                    "or resolve it with resolve_params(X)")
        return float(resolved["sigma"])

    def resolve_params(self, X) -> dict:
        """``{"sigma": ...}``: the kernel width this classifier uses on target rows ``X`` (no training)."""
        return {"sigma": resolve_sigma(self.sigma, check_dense(X))}

    def make_source(self) -> KNNSourceHypothesis:
        """An unfitted source hypothesis with this classifier's settings."""
        return KNNSourceHypothesis(
            n_neighbors=self.n_neighbors,
            bandwidth=self._sigma() if self.knn_bandwidth is None else self.knn_bandwidth,
            weighting=self.knn_weighting, source_C=self.source_C,
        )

    def source_key(self) -> tuple:
        """Settings that determine the source hypothesis (equal keys give equal ``h``)."""
        s = self.make_source()
        return (s.n_neighbors, s.bandwidth, s.weighting, s.source_C)

    def gram(self, X: np.ndarray) -> np.ndarray:
        """The target kernel's Gram matrix of the rows of ``X``."""
        if self.kernel == "gaussian":
            sigma = resolve_sigma(self.sigma, X) if is_auto(self.sigma) and not hasattr(self, "resolved_params_") \
                else self._sigma()
            return gaussian_kernel(X, X, sigma)
        return X @ X.T

    def target_margins(self, K: np.ndarray, y: np.ndarray, order: np.ndarray) -> np.ndarray:
        """Margins of the target PA learner over documents ``order`` (``K`` = :meth:`gram`), before each update.

        They do not depend on the combiner, so a protocol computes them once per order and
        shares them between OHT1, OHT2 and the target-only baseline.
        """
        return kernel_pa_margins(K, y, order, self.variant, self.C)

    def stream_mistakes(self, h: np.ndarray, margins: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Mistakes (0/1 per round) of one online pass, from source scores ``h``, target ``margins``
        (:meth:`target_margins`) and labels ``y``, all in stream order."""
        alpha = default_discount(len(y)) if self.alpha is None else self.alpha
        scores = combine_stream(h, margins, y, self.combiner, self.eta, alpha, self.theta0)
        return mistakes_of(scores, y)

    # -- estimator API --------------------------------------------------------------------------
    def fit_source(self, X_source, y_source, pair_target, pair_source):
        """Fit the source hypothesis (:class:`KNNSourceHypothesis`) on labelled source documents and pairs."""
        check_param_spec(self)
        self.check_params()
        self.resolved_params_ = {"sigma": resolve_sigma(self.sigma, check_dense(pair_target))}
        self.source_ = self.make_source().fit(X_source, y_source, pair_target, pair_source)
        return self

    def _init_state(self, n_features: int, n_rows: int) -> None:
        check_param_spec(self)  # types and ranges first (sparsesim.validation), also on the first partial_fit
        self.check_params()
        if self.kernel == "gaussian":
            self.target_ = KernelPassiveAggressive(variant=self.variant, C=self.C, sigma=self._sigma())
            self.target_._init_state(n_features)
        else:
            self.target_ = PassiveAggressiveBinary(variant=self.variant, C=self.C)
            self.target_._init_state(n_features)
        self.theta_ = np.array([self.theta0, 1.0 - self.theta0])
        self.alpha_ = default_discount(n_rows) if self.alpha is None else float(self.alpha)
        self.n_features_in_ = n_features
        self.n_seen_ = 0
        self.n_mistakes_ = 0
        self.mistakes_ = []
        self.classes_ = np.array([-1, 1])

    def _source_scores(self, X, source_scores):
        if not self.uses_source:
            return np.zeros(X.shape[0])
        if source_scores is not None:
            h = np.asarray(source_scores, dtype=np.float64).ravel()
            if h.shape[0] != X.shape[0] or not np.all(np.isfinite(h)):
                raise InvalidInputError(f"source_scores must be {X.shape[0]} finite values")
            return h
        if not hasattr(self, "source_"):
            raise InvalidInputError("call fit_source(...) first or pass source_scores=")
        return self.source_.decision_function(X)

    def learn_one(self, x: np.ndarray, label: float, h: float = 0.0) -> float:
        """One round (steps 2-9): returns the combined score before the updates."""
        if self.kernel == "gaussian":
            f = self.target_._margin(x)
        else:
            f = float(x @ self.target_.coef_)
        ts, tt = self.theta_
        if self.combiner == "hedge":
            score = oht1_score(ts, tt, h, f)
            self.theta_ = np.array(hedge_update(ts, tt, h, f, label, self.eta))
        elif self.combiner == "discount":
            score = oht2_score(ts, tt, h, f)
            self.theta_ = np.array(discount_update(ts, tt, h, f, label, self.alpha_))
        else:
            score = f
        mistake = int(np.sign(score) != label)
        self.mistakes_.append(mistake)
        self.n_mistakes_ += mistake
        # steps 7-9: the target PA updates exactly as it would alone
        if self.kernel == "gaussian":
            self.target_.learn_one(x, label)
        else:
            idx = np.flatnonzero(x)
            self.target_.learn_one(idx, x[idx], label)
        self.n_seen_ += 1
        return score

    def partial_fit(self, X, y, source_scores=None, classes=None):
        """One online pass over the rows of ``X`` (target view) in order.

        Parameters
        ----------
        X : array (n, d)
        y : array (n,)
        source_scores : array (n,), optional
            Precomputed ``h(x)`` per row; default: ``self.source_.decision_function(X)``.
        """
        first = not self.__sklearn_is_fitted__()
        X = check_dense(X, n_features=None if first else self.n_features_in_)
        y = signed_labels(y)
        if y.shape[0] != X.shape[0]:
            raise InvalidInputError(f"X has {X.shape[0]} rows but y has {y.shape[0]} labels")
        if X.shape[0] == 0:
            raise InvalidInputError("X has no rows; an online pass needs at least one labelled row")
        if first:
            check_param_spec(self)  # types and ranges before sigma="auto" reads the rows
            self.check_params()
            if not hasattr(self, "source_"):  # else fit_source resolved sigma on the pairs' target view
                self.resolved_params_ = {"sigma": resolve_sigma(self.sigma, X)}
            self._init_state(X.shape[1], X.shape[0])
        h = self._source_scores(X, source_scores)
        for row in range(X.shape[0]):
            self.learn_one(X[row], y[row], h[row])
        return self

    def fit(self, X, y, source_scores=None):
        """Reset the online state (not the source hypothesis) and make one pass over ``X``."""
        return super().fit(X, y, source_scores=source_scores)

    def decision_function(self, X, source_scores=None) -> np.ndarray:
        """Combined scores with the current weights (no update)."""
        self._check_fitted()
        X = check_dense(X, n_features=self.n_features_in_)
        f = np.asarray(self.target_.decision_function(X), dtype=np.float64).ravel()
        h = self._source_scores(X, source_scores)
        ts, tt = self.theta_
        if self.combiner == "hedge":
            return np.array([oht1_score(ts, tt, a, b) for a, b in zip(h, f)])
        if self.combiner == "discount":
            return np.array([oht2_score(ts, tt, a, b) for a, b in zip(h, f)])
        return f

    def predict(self, X, source_scores=None) -> np.ndarray:
        return np.where(self.decision_function(X, source_scores) >= 0, 1, -1)


def run_stream(estimator: OHTClassifier, K: np.ndarray, y: np.ndarray, h: np.ndarray,
               order: np.ndarray, margins: np.ndarray | None = None) -> np.ndarray:
    """Fast path of one online run: mistakes (0/1 per round) of ``estimator`` over documents ``order``.

    ``K`` is the target Gram matrix (``estimator.gram``), ``h`` the source scores per document;
    ``margins`` may pass the PA margins of this order when already computed (they do not depend
    on the combiner). Equal to feeding the rows in ``order`` to ``estimator.partial_fit`` (tested).
    """
    if margins is None:
        margins = kernel_pa_margins(K, y, order, estimator.variant, estimator.C)
    yo = y[order]
    alpha = default_discount(len(order)) if estimator.alpha is None else estimator.alpha
    scores = combine_stream(h[order], margins, yo, estimator.combiner, estimator.eta, alpha, estimator.theta0)
    return mistakes_of(scores, yo)
