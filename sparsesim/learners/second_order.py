"""Second-order online similarity learners: CWS / CWAS / CWRS (Hao et al., CIKM 2015) and AROMA.

The model keeps a Gaussian N(vec(M), Sigma) over the bilinear matrix M (d x d). On a
queried triplet with hinge loss ``l = max(0, 1 - y p_t) > 0``, ``phi = vec(x (x1 - x2)^T)``:

* **CW** (Algorithm 2; eq. 5-6): ``Sigma_{t+1} = Sigma_t - Sigma_t phi phi^T Sigma_t / (gamma + phi^T Sigma_t phi)``,
  ``M_{t+1} = M_t + eta y Sigma phi`` with Sigma = Sigma_t (eq. 5, ``sigma_step="previous"``,
  default) or Sigma_{t+1} (the Algorithm 2 box, ``"updated"``). Sigma_1 = I, M_1 = 0.
* **CW diagonal** (eq. 7-8): Sigma is a d x d matrix of per-entry variances and the products
  are element-wise: ``v = sum_ij Sigma_ij X_ij^2``, ``Sigma_ij -= Sigma_ij^2 X_ij^2 / (gamma + v)``,
  ``M_ij += eta y Sigma_ij X_ij``.
* **AROMA** (Crammer & Chechik, ICML 2012): AROW on phi: ``m = y <M, X>``,
  ``beta = 1 / (phi^T Sigma phi + r)``, ``alpha = max(0, 1 - m) beta``,
  ``M += alpha y Sigma phi``, ``Sigma -= beta Sigma phi phi^T Sigma`` (diagonal: element-wise).

The query policy decides which labels are asked: :class:`CWS` asks all (passive), :class:`CWAS`
asks with probability delta / (delta + |p_t|) (eq. 3), :class:`CWRS` uniformly at
``query_rate``. Query accounting, budget and oracle are those of
:class:`~sparsesim.learners.active.SelectiveBilinear`.

``covariance="full"`` keeps the d^2 x d^2 Sigma (8 d^4 bytes) and is allowed for d <= 64 only;
``covariance="diag"`` (CWS-d, CWAS-d, CWRS-d, AROMA-d) runs on the shared sparse engine for any
d at the cost of a first-order step (registry names with the ``-d`` suffix).
"""

from __future__ import annotations

from ..exceptions import InvalidInputError
from .active import SelectiveBilinear

__all__ = ["CWS", "CWAS", "CWRS", "AROMA"]

_SIGMA_STEPS = ("previous", "updated")


class CWS(SelectiveBilinear):
    """CWS: confidence-weighted similarity learning that queries every label (passive CWAS).

    Parameters
    ----------
    eta : float or "auto", default "auto"
        Learning rate eta of eq. (5) / (7). ``"auto"``: ``10 / s`` (full covariance) or
        ``3 / s`` (diagonal), ``s = mean ||x||^2 * mean ||x - x'||^2``
        (:mod:`sparsesim.defaults`).
    gamma : float or "auto", default "auto"
        Regulariser gamma of eq. (6) / (8). ``"auto"``: ``0.3 * s`` (full) or ``1 * s`` (diagonal).
    covariance : {"full", "diag"}, default "full"
        Full d^2 x d^2 Sigma (eq. 5-6; d <= 64) or its diagonal (eq. 7-8; any d).
    sigma_step : {"previous", "updated"}, default "previous"
        Step with Sigma_t as in eq. (5)/(7), or with Sigma_{t+1} as in the Algorithm 2 box.
    query_budget : int, optional
        Ask at most this many labels.
    oracle : callable, optional
        ``oracle(triplet) -> +1 / -1`` answers the queries (default: the data's labels).
    n_triplets : int, default 100000
        Triplets drawn by :meth:`fit`. ``0`` draws none: the fitted model is the starting point
        (M = I with ``identity``, else M = 0).
    identity : bool, default False
        M_1 = I instead of M_1 = 0.
    random_state : int, optional
    initial_capacity : int, default 65536
        Hash slots reserved ahead (diagonal covariance).
    max_memory : int, str, default "auto"
        Memory budget (see :class:`~sparsesim.learners.active.PAAS`); the full covariance's
        8 d^4 bytes are checked against it before they are allocated.

    Attributes
    ----------
    engine_, n_features_in_, n_triplets_seen_, n_queries_, query_ratio_, n_updates_,
    train_seconds_, model_
        See :class:`~sparsesim.learners.active.SelectiveBilinear`.

    Examples
    --------
    >>> from sparsesim.data import load_dataset
    >>> from sparsesim.learners.second_order import CWS
    >>> data = load_dataset("news20-sample")
    >>> est = CWS(covariance="diag", eta=0.1, n_triplets=1000, random_state=0).fit(data.X, data.y)
    >>> est.query_ratio_
    1.0
    """

    _rule = "cw"
    _policy = "all"
    _auto_names = ("eta", "gamma")

    @property
    def _auto_kind(self):
        return "cw-d" if self.covariance == "diag" else "cw"

    def __init__(self, eta="auto", gamma="auto", covariance="full", sigma_step="previous", query_budget=None,
                 oracle=None, n_triplets=100_000, identity=False, random_state=None, initial_capacity=65536,
                 max_memory="auto"):
        self.eta = eta
        self.gamma = gamma
        self.covariance = covariance
        self.sigma_step = sigma_step
        self._set_stream_params(query_budget, oracle, n_triplets, identity, random_state, initial_capacity,
                                max_memory)

    @property
    def _algorithm(self):
        base = {CWS: "cws", CWAS: "cwas", CWRS: "cwrs"}.get(type(self), type(self).__name__.lower())
        return base + ("-d" if self.covariance == "diag" else "")

    def _diag_name(self):
        return self._algorithm + "-d"

    def _rule_params(self):
        eta, gamma = self._param("eta"), self._param("gamma")
        if not eta > 0 or not gamma > 0:
            raise InvalidInputError(f"need eta > 0 and gamma > 0, got eta={eta}, gamma={gamma}")
        if self.sigma_step not in _SIGMA_STEPS:
            raise InvalidInputError(f"sigma_step must be one of {_SIGMA_STEPS}, got {self.sigma_step!r}")
        return {"eta": float(eta), "gamma": float(gamma), "sigma_step": self.sigma_step}


class CWAS(CWS):
    """CWAS: confidence-weighted active similarity learning (Algorithm 2).

    Asks the label of a triplet with probability delta / (delta + |p_t|) (eq. 3) and applies
    the CW update of :class:`CWS` to queried triplets with positive loss.

    Parameters
    ----------
    eta, gamma, covariance, sigma_step
        As in :class:`CWS`.
    delta : float, default 1.0
        Sampling threshold (larger asks more).
    query_budget, oracle, n_triplets, identity, random_state, initial_capacity, max_memory
        As in :class:`CWS`.
    """

    _policy = "active"

    def __init__(self, eta="auto", gamma="auto", delta=1.0, covariance="full", sigma_step="previous",
                 query_budget=None, oracle=None, n_triplets=100_000, identity=False, random_state=None,
                 initial_capacity=65536, max_memory="auto"):
        super().__init__(eta=eta, gamma=gamma, covariance=covariance, sigma_step=sigma_step,
                         query_budget=query_budget, oracle=oracle, n_triplets=n_triplets, identity=identity,
                         random_state=random_state, initial_capacity=initial_capacity, max_memory=max_memory)
        self.delta = delta


class CWRS(CWS):
    """CWRS: CW similarity learning with uniform random queries at ``query_rate``.

    Parameters
    ----------
    eta, gamma, covariance, sigma_step
        As in :class:`CWS`.
    query_rate : float in [0, 1], default 0.2
    query_budget, oracle, n_triplets, identity, random_state, initial_capacity, max_memory
        As in :class:`CWS`.
    """

    _policy = "random"

    def __init__(self, eta="auto", gamma="auto", query_rate=0.2, covariance="full", sigma_step="previous",
                 query_budget=None, oracle=None, n_triplets=100_000, identity=False, random_state=None,
                 initial_capacity=65536, max_memory="auto"):
        super().__init__(eta=eta, gamma=gamma, covariance=covariance, sigma_step=sigma_step,
                         query_budget=query_budget, oracle=oracle, n_triplets=n_triplets, identity=identity,
                         random_state=random_state, initial_capacity=initial_capacity, max_memory=max_memory)
        self.query_rate = query_rate


class AROMA(SelectiveBilinear):
    """AROMA: adaptive regularisation (AROW) for bilinear similarity, full or diagonal.

    On a triplet with m = y <M, X> < 1: beta = 1 / (phi^T Sigma phi + r), alpha = (1 - m) beta,
    M += alpha y Sigma phi, Sigma -= beta Sigma phi phi^T Sigma (element-wise for
    ``covariance="diag"``). Every label is used (passive).

    Parameters
    ----------
    r : float or "auto", default "auto"
        AROW regulariser. ``"auto"``: ``0.03 * s``, ``s = mean ||x||^2 * mean ||x - x'||^2``
        (:mod:`sparsesim.defaults`).
    covariance : {"full", "diag"}, default "full"
    query_budget, oracle, n_triplets, identity, random_state, initial_capacity, max_memory
        As in :class:`CWS`.
    """

    _rule = "arow"
    _policy = "all"
    _auto_kind = "arow"
    _auto_names = ("r",)

    def __init__(self, r="auto", covariance="full", query_budget=None, oracle=None, n_triplets=100_000,
                 identity=False, random_state=None, initial_capacity=65536, max_memory="auto"):
        self.r = r
        self.covariance = covariance
        self._set_stream_params(query_budget, oracle, n_triplets, identity, random_state, initial_capacity,
                                max_memory)

    @property
    def _algorithm(self):
        return "aroma" + ("-d" if self.covariance == "diag" else "")

    def _diag_name(self):
        return "aroma-d"

    def _rule_params(self):
        r = self._param("r")
        if not r > 0:
            raise InvalidInputError(f"r must be positive, got {r}")
        return {"r": float(r)}
