"""LMNN and ITML, the batch metric-learning baselines of the SORS paper (Yao et al., ICDM 2015,
Table II), fitted by `metric-learn <https://contrib.scikit-learn.org/metric-learn/>`_ (an optional
extra: ``pip install 'sparsesim[peers]'``).

* :class:`LMNN` (``lmnn``; Weinberger & Saul, JMLR 2009): the Mahalanobis matrix ``M = L^T L``
  minimising ``(1 - mu) sum_{i, j~>i} d_M(x_i, x_j) + mu sum_{i, j~>i, l: y_l != y_i}
  [1 + d_M(x_i, x_j) - d_M(x_i, x_l)]_+`` over each document's ``n_neighbors`` same-class target
  neighbours ``j`` and the impostors ``l`` (``mu`` is metric-learn's ``regularization``; the SORS
  paper searches ``mu in {0.1, ..., 0.9}``).
* :class:`ITML` (``itml``; Davis, Kulis, Jain, Sra, Dhillon, ICML 2007): ``M`` minimising the
  LogDet divergence to the prior ``M_0 = I`` subject to ``d_M(x, x') <= u`` for similar and
  ``>= l`` for dissimilar pairs drawn from the labels, with slack weighted by ``gamma`` (the SORS
  paper searches ``gamma in {0.1, 1, 10}``), by Bregman projections.

Both keep ``M`` dense (``d x d``) and metric-learn works on dense rows, so they refuse more than
``max_features`` features (default 4,096) and a dense copy of the corpus larger than the memory
budget, with an error that says why. The model is the metric's bilinear form ``S(x, x') = x^T M x'``
(:class:`~sparsesim.models.BilinearSimilarity` with ``W = M``), as for :mod:`.mahalanobis`'s LEGO
and RDML, so saving, serving and evaluation are those of every other learner.

metric-learn 0.7.0 (the current release) passes scikit-learn's ``force_all_finite`` argument, which
scikit-learn 1.8 removed (metric-learn issue #359, fixed upstream and not yet released);
:func:`import_metric_learn` maps the name to ``ensure_all_finite`` in metric-learn's input checks
when the installed scikit-learn needs it.
"""

from __future__ import annotations

import functools
import inspect

import numpy as np
import scipy.sparse as sp

from ..exceptions import InvalidInputError, MissingDependencyError, ResourceLimitError
from ..memory import MemoryBudget, check_allocation, parse_memory
from ..models import BilinearSimilarity
from .batch_baselines import BatchSimilarity
from .mahalanobis import MAX_FEATURES

__all__ = ["LMNN", "ITML", "import_metric_learn", "have_metric_learn"]

_INSTALL = "pip install 'sparsesim[peers]' (or pip install metric-learn)"


def _renamed_finite(func):
    """``func`` (a scikit-learn input check) accepting the removed ``force_all_finite`` name."""

    @functools.wraps(func)
    def call(*args, force_all_finite=None, **kwargs):
        if force_all_finite is not None:
            kwargs.setdefault("ensure_all_finite", force_all_finite)
        return func(*args, **kwargs)

    return call


def import_metric_learn():
    """Import ``metric_learn``, adapting its input checks to the installed scikit-learn.

    Returns
    -------
    module
        ``metric_learn``.

    Raises
    ------
    MissingDependencyError
        metric-learn is not installed.
    """
    try:
        import metric_learn
        from metric_learn import _util
    except ImportError:
        raise MissingDependencyError(f"LMNN and ITML are fitted by metric-learn, which is not installed; {_INSTALL}") \
            from None
    from sklearn.utils import validation

    if "force_all_finite" not in inspect.signature(validation.check_array).parameters \
            and not getattr(_util, "_sparsesim_adapted", False):
        _util.check_array = _renamed_finite(validation.check_array)
        _util.check_X_y = _renamed_finite(validation.check_X_y)
        _util._sparsesim_adapted = True
    return metric_learn


def have_metric_learn() -> bool:
    """Whether metric-learn can be imported."""
    try:
        import_metric_learn()
    except MissingDependencyError:
        return False
    return True


class _MetricLearnPeer(BatchSimilarity):
    """A metric-learn Mahalanobis learner on dense rows behind the sparsesim contract."""

    _supervised = True
    _skipped_checks = dict(
        BatchSimilarity._skipped_checks,
        sklearn_check_estimator="the metric is fitted by metric-learn, which needs every class to hold more "
                                "documents than the neighbours or constraints it draws; scikit-learn's generic "
                                "checks fit classes of one or two rows")
    if not have_metric_learn():
        _skipped_checks.update({name: f"metric-learn is not installed ({_INSTALL})" for name in (
            "check_fit_returns_self_and_defines_state", "check_fit_resets_state", "check_same_seed_same_model",
            "check_save_load_round_trip", "check_bad_input_errors")})

    def _extra_bytes(self, n: int, d: int) -> int:
        return 0

    def check_fit_data(self, n_features: int, class_counts=None, n_tasks=None) -> None:
        """Refuse more than ``max_features`` features before any work (``M`` and the rows are
        dense); see :meth:`~sparsesim.learners.base.SparsesimEstimator.check_fit_data`."""
        d = int(n_features)
        limit = self.max_features
        if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1:
            raise InvalidInputError(f"max_features must be a positive integer, got {limit!r}")
        if d > limit:
            raise ResourceLimitError(
                f"{type(self).__name__} learns a dense d x d metric M ({8 * d * d / 2**30:.1f} GiB at d = {d}) from "
                f"dense rows and allows at most max_features = {limit} features; reduce the features first "
                "(e.g. TruncatedSVD), raise max_features if that fits in memory, or use a sparse similarity "
                "learner (oasis, sors-l1) for high-dimensional data")

    def _dense(self, X) -> np.ndarray:
        n, d = X.shape
        self.check_fit_data(d)
        budget = MemoryBudget(parse_memory(self.max_memory), self.max_memory, owner=type(self).__name__)
        check_allocation(budget, 8 * (2 * n * d + 4 * d * d) + self._extra_bytes(n, d),
                         f"{type(self).__name__}'s dense copy of {n} x {d} rows and its metric",
                         hint="fewer documents or features")
        return X.toarray()

    def _fit_model(self, X, y):
        import_metric_learn()
        learner = self._learner()
        Xd = self._dense(X)
        _, codes = np.unique(y, return_inverse=True)
        learner.fit(Xd, codes)
        M = np.asarray(learner.get_mahalanobis_matrix(), dtype=np.float64)
        if not np.all(np.isfinite(M)):
            raise InvalidInputError(f"{type(self).__name__}: metric-learn returned a non-finite metric")
        self.M_ = M
        return BilinearSimilarity(sp.csr_matrix(M), identity=False, metadata={"algorithm": self._algorithm})


class LMNN(_MetricLearnPeer):
    """LMNN: large-margin nearest-neighbour metric learning (Weinberger & Saul 2009), by metric-learn.

    Parameters
    ----------
    n_neighbors : int, default 3
        Target neighbours per document (same class, nearest in Euclidean distance).
    regularization : float in (0, 1), default 0.5
        ``mu``: weight of the impostor hinge terms against the pull of the target neighbours.
    max_iter : int, default 1000
        Gradient iterations at most.
    learn_rate : float, default 1e-7
        Initial step of metric-learn's gradient descent (adapted during the descent).
    random_state : int, optional
        Seed of metric-learn's initialisation and of the sample ``max_samples`` draws.
    max_samples : int, optional
        Fit on a class-stratified sample of at most this many documents (every iteration compares
        each document with every impostor: the cost grows with the square of the documents).
        ``None``: all of them.
    max_features : int, default 4096
        Largest feature count accepted (``M`` and the rows are dense).
    max_memory : int, str, default "auto"
        Memory budget the dense rows, ``M`` and the pairwise distances are checked against.

    Attributes
    ----------
    M_ : ndarray, shape (n_features, n_features)
        The learned Mahalanobis matrix (positive semi-definite).
    model_ : BilinearSimilarity
        ``S(x, x') = x^T M x'``.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsesim.learners.metric_learn_peers import LMNN
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.standard_normal((60, 5)), np.repeat([0, 1, 2], 20)
    >>> est = LMNN(max_iter=50, random_state=0).fit(X, y)
    >>> bool(np.linalg.eigvalsh(est.M_).min() > -1e-9)
    True
    """

    _algorithm = "lmnn"
    _state_attrs = BatchSimilarity._state_attrs + ("M_",)
    _param_spec = {"n_neighbors": ("int", 1, None), "regularization": ("float", 0, 1),
                   "max_iter": ("int", 1, None), "learn_rate": ("float", 0, None, {"low_open": True}),
                   "max_samples": ("int?", 2, None), "max_features": ("int", 1, None)}

    @classmethod
    def _unit_test_params(cls) -> dict:
        # 30 gradient steps: the checks test the contract, not convergence (1,000 took 12 s a check)
        return {"n_neighbors": 5, "max_iter": 30}

    def __init__(self, n_neighbors=3, regularization=0.5, max_iter=1000, learn_rate=1e-7, random_state=None,
                 max_samples=None, max_features=MAX_FEATURES, max_memory="auto"):
        self.n_neighbors = n_neighbors
        self.max_samples = max_samples
        self.regularization = regularization
        self.max_iter = max_iter
        self.learn_rate = learn_rate
        self.random_state = random_state
        self.max_features = max_features
        self.max_memory = max_memory

    def _extra_bytes(self, n, d):
        return 8 * 3 * n * n  # pairwise distances of the impostor search

    def _learner(self):
        ml = import_metric_learn()
        return ml.LMNN(n_neighbors=int(self.n_neighbors), regularization=float(self.regularization),
                       max_iter=int(self.max_iter), min_iter=min(50, int(self.max_iter)),
                       learn_rate=float(self.learn_rate), random_state=self.random_state)

    def _fit_model(self, X, y):
        if self.max_samples is not None and X.shape[0] > int(self.max_samples):
            from sklearn.model_selection import train_test_split

            keep, _ = train_test_split(np.arange(X.shape[0]), train_size=int(self.max_samples), stratify=y,
                                       random_state=self.random_state)
            keep = np.sort(keep)
            X, y = X[keep], y[keep]
            self.resolved_params_["n_samples"] = int(keep.size)
        _, counts = np.unique(y, return_counts=True)
        self.check_fit_data(X.shape[1], counts)
        return super()._fit_model(X, y)

    def check_fit_data(self, n_features: int, class_counts=None, n_tasks=None) -> None:
        """Refuse more than ``max_features`` features, and a class of no more than ``n_neighbors``
        documents (it has too few target neighbours), before any work."""
        super().check_fit_data(n_features)
        if class_counts is not None and len(class_counts) and int(np.min(class_counts)) <= int(self.n_neighbors):
            raise InvalidInputError(f"LMNN needs more than n_neighbors = {self.n_neighbors} documents in every class "
                                    f"(the smallest class has {int(np.min(class_counts))}); lower n_neighbors")


class ITML(_MetricLearnPeer):
    """ITML: information-theoretic metric learning (Davis et al. 2007), by metric-learn.

    Parameters
    ----------
    gamma : float, default 1.0
        Slack trade-off: larger values let constraints be violated less.
    n_constraints : int, optional
        Similar and dissimilar pairs drawn from the labels (metric-learn's default,
        ``20 * n_classes^2``, when ``None``).
    max_iter : int, default 1000
        Sweeps over the constraints at most.
    random_state : int, optional
        Seed of the pairs drawn from the labels.
    max_features, max_memory
        As in :class:`LMNN`.

    Attributes
    ----------
    M_ : ndarray, shape (n_features, n_features)
    model_ : BilinearSimilarity

    Examples
    --------
    >>> import numpy as np
    >>> from sparsesim.learners.metric_learn_peers import ITML
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.standard_normal((60, 5)), np.repeat([0, 1, 2], 20)
    >>> est = ITML(random_state=0).fit(X, y)
    >>> est.M_.shape
    (5, 5)
    """

    _algorithm = "itml"
    _state_attrs = BatchSimilarity._state_attrs + ("M_",)
    _param_spec = {"gamma": ("float", 0, None, {"low_open": True}), "max_iter": ("int", 1, None), "n_constraints": ("int?", 1, None),
                   "max_features": ("int", 1, None)}

    def __init__(self, gamma=1.0, n_constraints=None, max_iter=1000, random_state=None, max_features=MAX_FEATURES,
                 max_memory="auto"):
        self.gamma = gamma
        self.n_constraints = n_constraints
        self.max_iter = max_iter
        self.random_state = random_state
        self.max_features = max_features
        self.max_memory = max_memory

    @classmethod
    def _unit_test_params(cls) -> dict:
        # 30 Bregman sweeps: the checks test the contract, not convergence (1,000 took 9-24 s a check)
        return {"max_iter": 30}

    def _learner(self):
        ml = import_metric_learn()
        n = None if self.n_constraints is None else int(self.n_constraints)
        return ml.ITML_Supervised(gamma=float(self.gamma), n_constraints=n, max_iter=int(self.max_iter),
                                  random_state=self.random_state)
