"""Active (selective-sampling) online similarity learners: PAAS and PARS (Hao et al., CIKM 2015).

A stream of *unlabelled* triplets (x, x1, x2) arrives; the learner computes the margin
``p_t = x^T M_t (x1 - x2)`` and asks for the label y_t (+1: x is more similar to x1 than to x2)
only when a Bernoulli variable Z_t is 1:

* :class:`PAAS` — ``Pr(Z_t = 1) = delta / (delta + |p_t|)`` (eq. 3): uncertain triplets are asked.
* :class:`PARS` — ``Pr(Z_t = 1) = query_rate`` (uniform random queries; the paper's baseline,
  run at the query ratio PAAS observed).

A queried triplet with hinge loss ``l = max(0, 1 - y_t p_t) > 0`` updates M by the
passive-aggressive step of Algorithm 1, ``M += tau y X``, ``tau = min(C, l / ||X||_F^2)``,
``X = x (x1 - x2)^T``; M_1 = 0. Updates run on the shared sparse engine
(:mod:`sparsesim.engine.second_order`), so any d works; a step costs O(nnz(x) nnz(x1 - x2)).

Query accounting: ``n_queries_`` labels asked, ``query_ratio_ = n_queries_ / n_triplets_seen_``,
an optional ``query_budget`` (no label is asked once it is spent), and labels come from an
``oracle`` callback when one is given (a human in the loop), else from the data.

The shared base :class:`SelectiveBilinear` is also the base of the second-order learners in
:mod:`sparsesim.learners.second_order`.
"""

from __future__ import annotations

import numbers

import numpy as np

from ..engine.second_order import FULL_MAX_D, FullCovarianceEngine, SparseSecondOrderEngine
from ..exceptions import InvalidInputError, ResourceLimitError
from .bilinear import BaseBilinear

__all__ = ["SelectiveBilinear", "PAAS", "PARS"]


def _rng_for(random_state):
    """The query-draw generator: a stream distinct from the triplet stream of the same seed."""
    if isinstance(random_state, np.random.Generator):
        return random_state
    if random_state is None:
        return np.random.default_rng()
    return np.random.default_rng([int(random_state), 0xC1C15])


class SelectiveBilinear(BaseBilinear):
    """Base of the selective-sampling learners: query policy, accounting, oracle, engine choice.

    Subclasses set ``_rule`` ("pa", "cw", "arow"), ``_policy`` ("all", "active", "random") and
    provide ``_rule_params()``. Parameters shared by all of them (stored by subclasses):
    ``query_budget``, ``oracle``, ``n_triplets``, ``identity``, ``random_state`` and, for
    second-order rules, ``covariance`` ("full" or "diag").

    Attributes
    ----------
    engine_ : SparseSecondOrderEngine or FullCovarianceEngine
    n_features_in_ : int
    n_triplets_seen_ : int
        Triplets received (queried or not).
    n_queries_ : int
        Labels asked for.
    n_updates_ : int
        Queried triplets with positive hinge loss (that changed the model).
    train_seconds_ : float
        Wall time inside ``partial_fit_triplets`` (includes the oracle's answering time).
    last_queried_ : ndarray of bool
        Which triplets of the last ``partial_fit_triplets`` call were queried.
    last_margins_ : ndarray of float
        Their margins p_t before the update.
    last_labels_ : ndarray of float
        The labels used (+-1 for queried triplets, 0 where no label was asked).
    """

    _rule = "pa"
    _policy = "all"
    covariance = "diag"  # first-order learners: the sparse engine

    def _set_stream_params(self, query_budget, oracle, n_triplets, identity, random_state, initial_capacity,
                           max_memory):
        """Store the parameters every selective learner takes, from its ``__init__`` (which names
        them, for scikit-learn's ``get_params``)."""
        self.query_budget = query_budget
        self.oracle = oracle
        self.n_triplets = n_triplets
        self.identity = identity
        self.random_state = random_state
        self.initial_capacity = initial_capacity
        self.max_memory = max_memory

    def _rule_params(self) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    def _policy_params(self) -> dict:
        """The query policy's parameters, checked: ``delta`` (active) or ``query_rate`` (random)."""
        if self._policy == "active":
            if not self.delta > 0:
                raise InvalidInputError(f"delta must be positive, got {self.delta}")
            return {"delta": float(self.delta)}
        if self._policy == "random":
            return {"rate": check_rate(self.query_rate)}
        return {}

    def _check_common(self):
        budget = self.query_budget
        if budget is not None and (not isinstance(budget, numbers.Integral) or isinstance(budget, bool)
                                   or not 0 <= budget < 2**63):
            raise InvalidInputError(f"query_budget must be None or an integer in [0, 2**63), got {budget!r}")
        if self.oracle is not None and not callable(self.oracle):
            raise InvalidInputError("oracle must be None or a callable oracle(triplet) -> +1 / -1")
        if self.covariance not in ("full", "diag"):
            raise InvalidInputError(f"covariance must be 'full' or 'diag', got {self.covariance!r}")

    def _make_engine(self, d):
        self._check_common()
        kwargs = dict(rule=self._rule, policy=self._policy, identity=bool(self.identity),
                      query_budget=self.query_budget, budget=self._budget())
        kwargs.update(self._rule_params())
        kwargs.update(self._policy_params())
        if self.covariance == "full" and self._rule != "pa":
            self.check_fit_data(d)
            return FullCovarianceEngine(d, **kwargs)
        return SparseSecondOrderEngine(d, initial_capacity=self.initial_capacity, **kwargs)

    def check_fit_data(self, n_features: int, class_counts=None, n_tasks=None) -> None:
        """Refuse more than ``FULL_MAX_D`` features with the full covariance (a d^2 x d^2 matrix)
        before any work; see :meth:`~sparsesim.learners.base.SparsesimEstimator.check_fit_data`."""
        d = int(n_features)
        if self.covariance == "full" and self._rule != "pa" and d > FULL_MAX_D:
            raise ResourceLimitError(
                f"{type(self).__name__} with the full covariance keeps a d^2 x d^2 matrix and allows "
                f"d <= {FULL_MAX_D} only (got d = {d}); use the diagonal variant {self._diag_name()} "
                f"(covariance='diag') for high-dimensional data"
            )

    def _diag_name(self) -> str:
        return type(self).__name__.lower() + "-d"

    _state_attrs = BaseBilinear._state_attrs + ("n_queries_", "_rng", "last_queried_", "last_margins_",
                                                 "last_labels_")

    def queried_labels(self) -> int:
        """The labels this learner asked for (``n_queries_``), not every triplet it saw."""
        return int(self.n_queries_)

    def _init_state(self, d):
        super()._init_state(d)
        self.n_queries_ = 0
        self._rng = _rng_for(self.random_state)

    def partial_fit_triplets(self, X, triplets, signs=None):
        """Receive ``triplets`` in order, asking for labels by the query policy.

        Parameters
        ----------
        X : sparse matrix or array, shape (n_rows, n_features)
        triplets : array of int, shape (n, 3)
            (anchor, first, second) row indices of ``X``.
        signs : array of {-1, +1}, shape (n,), optional
            The labels the default oracle answers with (+1: the anchor is more similar to the
            first document; default all +1, i.e. rows are (anchor, positive, negative)).
            Ignored when the estimator has an ``oracle``.

        Returns
        -------
        self
        """
        return super().partial_fit_triplets(X, triplets, signs)

    def _update(self, X, triplets, signs):
        if "engine_" not in self.__dict__:
            if triplets.shape[0] == 0:
                empty = np.zeros(0)
                self.last_queried_, self.last_margins_, self.last_labels_ = empty.astype(bool), empty, empty
                return empty, empty.astype(bool)
            self._resolve_auto(X, triplets)
        uniforms = self._rng.random(triplets.shape[0])
        try:
            margins, queried, losses, labels = self.engine_.partial_fit(X, triplets, signs, uniforms, self.oracle)
        finally:
            # counters follow the engine, so an oracle error or an interrupt leaves them exact
            self.n_triplets_seen_ = self.engine_.n_seen
            self.n_queries_ = self.engine_.n_queries
            self.n_updates_ = self.engine_.n_updates
        self.last_queried_ = queried.astype(bool)
        self.last_margins_ = margins
        self.last_labels_ = np.where(self.last_queried_, labels, 0.0)
        return losses, queried

    def _count(self, n, losses, queried):
        """The engine keeps the counters (see :meth:`_update`)."""

    @property
    def query_ratio_(self) -> float:
        """Labels asked / triplets seen."""
        seen = getattr(self, "n_triplets_seen_", 0)
        return self.n_queries_ / seen if seen else 0.0

    def _metadata(self) -> dict:
        meta = super()._metadata()
        if meta["params"].get("oracle") is not None:
            meta["params"]["oracle"] = repr(meta["params"]["oracle"])
        meta["n_queries"] = int(self.n_queries_)
        meta["query_ratio"] = float(self.query_ratio_)
        return meta


class PAAS(SelectiveBilinear):
    """PAAS: passive-aggressive active similarity learning (Algorithm 1).

    Parameters
    ----------
    C : float or "auto", default "auto"
        PA aggressiveness: tau = min(C, l / ||X||_F^2). ``"auto"``:
        ``0.5 / (mean ||x||^2 * mean ||x - x'||^2)`` (:mod:`sparsesim.defaults`).
    delta : float, default 1.0
        Sampling threshold: a label is asked with probability delta / (delta + |p_t|) (eq. 3);
        larger delta asks more.
    query_budget : int, optional
        Ask at most this many labels (later triplets are seen but not queried).
    oracle : callable, optional
        ``oracle(triplet) -> +1 or -1`` with ``triplet`` the (anchor, first, second) row
        indices; called once per queried triplet (e.g. to ask a person). Default: the labels
        of the data (``signs`` of :meth:`partial_fit_triplets`, all +1 for triplets drawn by :meth:`fit`).
    n_triplets : int, default 100000
        Triplets drawn by :meth:`fit`. ``0`` draws none: the fitted model is the starting point
        (M = I with ``identity``, else M = 0).
    identity : bool, default False
        M_1 = I instead of the paper's M_1 = 0.
    random_state : int, optional
        Seeds the triplet stream of :meth:`fit` and the query draws.
    initial_capacity : int, default 65536
        Hash slots reserved ahead.
    max_memory : int, str, default "auto"
        Memory budget of the model store (bytes, ``"6GiB"``, ``"80%"`` of the memory available
        when training starts, or ``"auto"``: 70% of it; :mod:`sparsesim.memory`). A table rebuild
        (or the full covariance) that would cross it stops with
        :class:`~sparsesim.exceptions.MemoryBudgetError` before allocating.

    Attributes
    ----------
    n_queries_, query_ratio_, n_updates_, n_triplets_seen_, train_seconds_, model_
        See :class:`SelectiveBilinear`.

    Examples
    --------
    >>> from sparsesim.data import load_dataset
    >>> from sparsesim.learners.active import PAAS
    >>> data = load_dataset("news20-sample")
    >>> est = PAAS(delta=0.5, n_triplets=2000, random_state=0).fit(data.X, data.y)
    >>> 0 < est.query_ratio_ <= 1
    True
    """

    _algorithm = "paas"
    _policy = "active"
    _auto_kind = "pa"
    _auto_names = ("C",)

    def __init__(self, C="auto", delta=1.0, query_budget=None, oracle=None, n_triplets=100_000, identity=False,
                 random_state=None, initial_capacity=65536, max_memory="auto"):
        self.C = C
        self.delta = delta
        self._set_stream_params(query_budget, oracle, n_triplets, identity, random_state, initial_capacity,
                                max_memory)

    def _rule_params(self):
        return pa_rule_params(self._param("C"))


class PARS(SelectiveBilinear):
    """PARS: passive-aggressive similarity learning with uniform random queries.

    Each triplet's label is asked with probability ``query_rate``; queried triplets update M
    as in :class:`PAAS`. The paper runs it at the query ratio PAAS observed.

    Parameters
    ----------
    C : float or "auto", default "auto"
        As in :class:`PAAS`.
    query_rate : float in [0, 1], default 0.2
    query_budget, oracle, n_triplets, identity, random_state, initial_capacity, max_memory
        As in :class:`PAAS`.
    """

    _algorithm = "pars"
    _policy = "random"
    _auto_kind = "pa"
    _auto_names = ("C",)

    def __init__(self, C="auto", query_rate=0.2, query_budget=None, oracle=None, n_triplets=100_000,
                 identity=False, random_state=None, initial_capacity=65536, max_memory="auto"):
        self.C = C
        self.query_rate = query_rate
        self._set_stream_params(query_budget, oracle, n_triplets, identity, random_state, initial_capacity,
                                max_memory)

    def _rule_params(self):
        return pa_rule_params(self._param("C"))


def pa_rule_params(C) -> dict:
    """The passive-aggressive rule's aggressiveness C, checked."""
    if not C > 0:
        raise InvalidInputError(f"C must be positive, got {C}")
    return {"C": float(C)}


def check_rate(rate) -> float:
    """A query rate in [0, 1]."""
    try:
        value = float(rate)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0.0 <= value <= 1.0:
        raise InvalidInputError(f"query_rate must lie in [0, 1], got {rate!r}")
    return value
