"""First-order online bilinear similarity learners on the shared sparse engine.

* :class:`OASIS` — passive-aggressive (Chechik et al., JMLR 2010).
* :class:`SORS` — sparse online relative similarity, L1 (SORS-I) or off-diagonal L1 (SORS-II)
  proximal updates (Yao et al., ICDM 2015, Algorithm 1, eq. 5-7).
* :class:`AdaSORS` — the AdaGrad variant (Algorithm 2, eq. 8-11).

All learn S(x, x') = x^T M x' from triplets (x, x+, x-) meaning "x is more similar to x+ than
to x-"; M_1 = I. ``partial_fit_triplets(X, triplets)`` takes a CSR corpus and an (n, 3) array of row
indices (a stream of triplets never materialises dense vectors); ``fit(X, y)`` draws the
triplets from class labels with the SORS protocol. The update rules live in
:mod:`sparsesim.engine.rules` as small functions next to their equations.
"""

from __future__ import annotations

import numpy as np

from ..defaults import AUTO, data_statistics, resolve_bilinear, resolve_schedule
from ..engine.bilinear import ADASORS, OASIS as OASIS_MODE, SORS as SORS_MODE, BilinearEngine, StepSchedule
from ..engine.truncation import keep_largest_offdiag
from ..exceptions import InvalidInputError
from ..memory import (TRUNCATE_EVERY, MemoryBudget, model_bytes_for, parse_memory, parse_model_bytes,
                      resolve_model_budget)
from ..models import BilinearSimilarity
from ..triplets import iter_sors_triplets
from ..validation import check_csr, check_n_jobs
from .base import TripletLearner
from .sampled import SampledFit

_REGULARIZERS = ("l1", "offdiag")


class BaseBilinear(TripletLearner):
    """Single-task bilinear learners on a sparse engine: engine life cycle, SORS protocol, model export."""

    @classmethod
    def _unit_test_params(cls) -> dict:
        return {"n_triplets": 120, "initial_capacity": 256}  # a few hundred updates, a small table that grows

    _algorithm = ""
    _state_attrs = TripletLearner._state_attrs + ("engine_", "resolved_params_", "data_statistics_",
                                                  "model_entries_", "_budget_floor", "_budget_resolved")

    # (kind for :func:`sparsesim.defaults.resolve_bilinear`, names of the parameters it resolves)
    _auto_kind: str | None = None
    _auto_names: tuple = ()

    def _make_engine(self, d: int) -> BilinearEngine:  # pragma: no cover - abstract
        raise NotImplementedError

    def _auto_pending(self) -> bool:
        return self._auto_kind is not None and any(
            isinstance(getattr(self, n), str) and getattr(self, n) == AUTO for n in self._auto_names)

    def _init_state(self, d: int):
        """Create the engine for ``d`` features and zero the counters.

        The one place the fitted state is set up; subclasses that keep more state extend it
        (call ``super()._init_state(d)``) and list the new attributes in ``_state_attrs``.
        With ``"auto"`` parameters the engine is created by the first update, which resolves
        them from its triplets (:meth:`_resolve_auto`).
        """
        # C / eta / lam / delta were checked by check_params before any state is set (fit,
        # partial_fit and start_from reset first): "auto" or a number in range
        parse_model_bytes(self._max_model_bytes)
        if self._auto_pending():
            super()._init_state(d)
            self._no_budget_yet()
            return
        self.resolved_params_ = {n: float(getattr(self, n)) for n in self._auto_names}
        self.data_statistics_ = {}
        engine = self._make_engine(d)  # checks the parameters before any state is set
        super()._init_state(d)
        self.engine_ = engine
        self._no_budget_yet()

    def _no_budget_yet(self) -> None:
        """The model-size bound is resolved by the first update, on its corpus (:meth:`_resolve_budget`)."""
        self.model_entries_, self._budget_floor, self._budget_resolved = None, 0, False

    def _resolve_auto(self, X, triplets):
        """Resolve the ``"auto"`` step/regulariser parameters from the corpus of the first update
        and create the engine.

        Sets ``resolved_params_`` (every parameter of ``_auto_names``, as a number) and
        ``data_statistics_`` (what the rule read, see :func:`sparsesim.defaults.data_statistics`);
        explicit values pass through unchanged. Without triplets (a fit of zero triplets) the
        rule reads unit statistics; the model is then M_1 whatever the values.
        """
        self.resolved_params_, self.data_statistics_ = self._resolved(
            X if triplets is not None and len(triplets) else None)
        self.engine_ = self._make_engine(self.n_features_in_)

    def _resolved(self, X):
        params = {name: getattr(self, name) for name in self._auto_names}  # checked by check_params
        if not self._auto_pending():
            return {k: float(v) for k, v in params.items()}, {}
        stats = data_statistics(X) if X is not None and X.shape[0] >= 2 else {"s": 1.0, "g": 1.0, "n_pairs": 0}
        resolved = resolve_bilinear(self._auto_kind, params, stats, getattr(self, "n_triplets", 100_000))
        return {k: float(v) for k, v in resolved.items()}, stats

    def resolve_params(self, X) -> dict:
        """The numbers this learner's ``"auto"`` parameters resolve to on corpus ``X`` (no training).

        Parameters
        ----------
        X : sparse matrix, shape (n_documents, n_features)

        Returns
        -------
        dict
            Every step/regulariser parameter as a number (explicit values unchanged).
        """
        return self._resolved(check_csr(X))[0]

    def model_bytes_bound(self, X) -> tuple[int, bool]:
        """``(bytes, bounded)``: the size the saved model of a fit on corpus ``X`` can reach, before
        training. With a budget (``max_model_bytes``, resolved on ``X``): that budget, ``bounded``
        True. Without one: what ``n_triplets`` updates can write, about ``r * 2r`` new entries
        each for rows of ``r`` nonzeros on average, at most every off-diagonal entry (``bounded``
        False: an estimate, not a bound).

        Examples
        --------
        >>> from sparsesim.data import load_dataset
        >>> data = load_dataset("news20-sample")
        >>> nbytes, bounded = OASIS(n_triplets=1000).model_bytes_bound(data.X)
        >>> bounded and nbytes <= max(20 * 12 * data.X.nnz + 20 * (data.n_features + 1), 2**27)
        True
        """
        X = check_csr(X)
        d = X.shape[1]
        entries, nbytes = resolve_model_budget(self._max_model_bytes, X.nnz, d)
        if nbytes is not None:
            return int(nbytes), True
        r = X.nnz / max(1, X.shape[0])
        written = min(float(self.n_triplets) * 2.0 * r * r, float(d) * (d - 1))
        return int(model_bytes_for(int(written), d)), False

    def _budget(self) -> MemoryBudget:
        """The memory budget of this fit, resolved from ``max_memory`` when training starts."""
        return MemoryBudget(parse_memory(self.max_memory), self.max_memory, owner=self._algorithm or type(self).__name__)

    def _param(self, name: str) -> float:
        """The value in use for ``name``: the resolved one once training has started."""
        resolved = getattr(self, "resolved_params_", {})
        return resolved[name] if name in resolved else getattr(self, name)

    def _update(self, X, triplets, signs):
        if "engine_" not in self.__dict__:
            if triplets.shape[0] == 0:
                self.last_steps_ = np.zeros(0)
                return np.zeros(0), None
            self._resolve_auto(X, triplets)
        if not self.__dict__.get("_budget_resolved"):
            self._resolve_budget(X)
        # read at every call, not stored in the engine's state: the model does not depend on it
        self.engine_.n_threads = check_n_jobs(self.n_threads, "n_threads")
        limit = self.model_entries_
        n = triplets.shape[0]
        # the scale of each update (OASIS: its step tau), for callers that keep updates as factors
        self.last_steps_ = steps = np.zeros(n)
        if limit is None:
            return self.engine_.partial_fit(X, triplets, signs, steps_out=steps), None
        # truncate to the budget after every TRUNCATE_EVERY triplets of the whole run, so the model
        # does not depend on how the triplets were cut into calls
        losses = np.zeros(n)
        signs = np.ones(n) if signs is None else np.asarray(signs, dtype=np.float64)
        pos = 0
        while pos < n:
            stop = min(n, pos + TRUNCATE_EVERY - self.engine_.n_seen % TRUNCATE_EVERY)
            self.engine_.partial_fit(X, triplets[pos:stop], signs[pos:stop], losses_out=losses[pos:stop],
                                     steps_out=steps[pos:stop])
            pos = stop
            if self.engine_.n_seen % TRUNCATE_EVERY == 0:
                self.engine_.truncate(limit)
        return losses, None

    @property
    def _max_model_bytes(self):
        """``max_model_bytes``; None (no bound) for a learner without that parameter."""
        return getattr(self, "max_model_bytes", None)

    def _resolve_budget(self, X) -> None:
        """Resolve ``max_model_bytes`` on the corpus of the first update: ``model_entries_`` (the
        off-diagonal entries W keeps; None: no bound) and ``resolved_params_["max_model_bytes"]``."""
        entries, nbytes = resolve_model_budget(self._max_model_bytes, X.nnz, self.n_features_in_,
                                               floor_entries=self.__dict__.get("_budget_floor", 0))
        self.model_entries_, self._budget_resolved = entries, True
        if hasattr(self, "max_model_bytes"):
            self.resolved_params_ = dict(getattr(self, "resolved_params_", {}), max_model_bytes=nbytes)

    def start_from(self, model: BilinearSimilarity, X=None):
        """Reset and continue from ``model`` instead of M_1: later :meth:`partial_fit_triplets`
        calls update its M with this learner's rule (how a served model keeps learning).

        Parameters
        ----------
        model : BilinearSimilarity
            Same ``identity`` as this learner; not normalising (the update sees raw rows).
        X : sparse matrix, optional
            Corpus the ``"auto"`` parameters are resolved on (default: unit statistics).
            Per-entry optimiser statistics (AdaSORS's H) start at zero.

        Returns
        -------
        self
        """
        if not isinstance(model, BilinearSimilarity):
            raise InvalidInputError(f"model must be a BilinearSimilarity, got {type(model).__name__}")
        if bool(model.identity) != bool(self.identity):
            raise InvalidInputError(f"the model has identity={model.identity}, the learner identity={self.identity}")
        if model.normalize:
            raise InvalidInputError("a normalising model cannot be continued by a triplet learner")
        self._reset()
        super()._init_state(model.n_features)
        X = None if X is None else check_csr(X, n_features=model.n_features)
        self._resolve_auto(X, np.zeros((1 if X is not None else 0, 3), np.int64))
        self.engine_.store.load_csr(model.W, 1.0 if self.identity else 0.0)
        # the default budget never cuts the model this learner continues from
        W = model.W
        self._budget_floor = int(W.nnz - np.count_nonzero(W.diagonal()))
        return self

    def _triplet_stream(self, y):
        """The SORS protocol: ``n_triplets`` (anchor, same-class, other-class) triplets from ``y``."""
        for chunk in iter_sors_triplets(y, self.n_triplets, seed=self.random_state, chunk_size=self._fit_chunk):
            yield {"triplets": chunk}

    @property
    def store_nbytes_(self) -> int:
        """Bytes the engine's hash storage of W (and its per-entry state) holds now."""
        self._check_fitted()
        store = getattr(self.__dict__.get("engine_"), "store", None)
        return int(getattr(store, "held_nbytes", store.nbytes)) if store is not None else 0

    def _metadata(self) -> dict:
        return {
            "algorithm": self._algorithm,
            "params": {k: v for k, v in self.get_params().items()},
            "resolved_params": dict(getattr(self, "resolved_params_", {})),
            "n_triplets_seen": int(self.n_triplets_seen_),
            "n_updates": int(self.n_updates_),
            "train_seconds": float(self.train_seconds_),
        }

    @property
    def model_(self) -> BilinearSimilarity:
        """The learned :class:`~sparsesim.models.BilinearSimilarity` (all lazy shrinkage applied)."""
        self._check_fitted()
        if getattr(self, "_model_cache", None) is None:
            if "engine_" not in self.__dict__:  # fitted on zero triplets
                self._resolve_auto(None, None)
            identity = bool(self.identity)
            W = self.engine_.export_W(identity)
            if getattr(self, "model_entries_", None) is not None:  # (the triplets since the last truncation)
                W = keep_largest_offdiag(W, self.model_entries_)
            self._model_cache = BilinearSimilarity(W, identity=identity, metadata=self._metadata())
        return self._model_cache

    def score_pairs(self, A, B):
        """Row-wise similarity S(A[i], B[i]) under the learned model."""
        return self.model_.score_pairs(A, B)

    def score_matrix(self, Q, X):
        """Dense similarities of queries ``Q`` against corpus ``X``."""
        return self.model_.score_matrix(Q, X)


class OASIS(SampledFit, BaseBilinear):
    """OASIS: online passive-aggressive bilinear similarity.

    On a triplet with hinge loss l = max(0, 1 - x^T M (x+ - x-)) > 0:
    ``M += tau x (x+ - x-)^T`` with ``tau = min(C, l / ||x (x+ - x-)^T||_F^2)``; M_1 = I.

    Parameters
    ----------
    C : float or "auto", default "auto"
        Aggressiveness (cap on the step). ``"auto"``: ``3 / (mean ||x||^2 * mean ||x - x'||^2)``
        over the rows of the corpus (see :mod:`sparsesim.defaults`); about 1.5 on L2-normalised text.
    n_triplets : int, default 100000
        Triplets drawn by :meth:`fit` (and the budget the ``"auto"`` rules assume). ``0`` draws none: the fitted model is the starting point
        (M = I with ``identity``, else M = 0).
    identity : bool, default True
        Start from M_1 = I (else 0).
    random_state : int, optional
        Seed of the triplet stream drawn by :meth:`fit`.
    initial_capacity : int, default 65536
        Record slots allocated ahead for W (it grows on demand). The first update reserves more,
        untouched, when ``n_triplets`` updates on the corpus's rows may need it (at most half of
        ``max_memory``; not for AdaSORS without ``keep_zero_state``), so the store rarely grows.
    compact : bool, default True
        Store W's entries in float32 (12 instead of 16 bytes each); arithmetic stays float64.
        MAP is unchanged within 0.1 points (README, "Choosing parameters"); ``False`` stores float64.
    max_memory : int, str, default "auto"
        Memory budget of the model store: bytes, a size like ``"6GiB"``, a share like ``"80%"``
        of the memory available when training starts, or ``"auto"`` (70% of it). A run that
        would cross it stops with :class:`~sparsesim.exceptions.MemoryBudgetError` before
        allocating (see :mod:`sparsesim.memory`).
    max_model_bytes : int, str or None, default "auto"
        Bound on the size of the learned model (W saved as CSR: 12 bytes per entry plus 20 per
        feature): bytes, or a size like ``"300MB"``. ``"auto"``: W, its diagonal included, keeps at
        most 20 times as many entries as the corpus of the first update stores (``X.nnz``);
        ``None``: no bound. After every 1,024 triplets of the run (and in ``model_``) only the entries of largest
        magnitude are kept (see :mod:`sparsesim.defaults`; the MAP this costs is in docs/quality.md,
        "Model size"). The value used is ``resolved_params_["max_model_bytes"]``.
    n_threads : int, default 1
        Threads that train together, each updating the rows of M it takes from x (-1: every
        core). The model is the same whatever the count (they add the margin up in one order);
        2 threads ran 1.42-2.27x as fast as one on the 2-core test machine, at least 1.7x in
        19 of 22 benchmark rounds (README, "Engine speed").
    sampler : {"uniform", "semihard", "hard", "distance-weighted"}, default "uniform"
        How :meth:`fit` chooses each triplet's negative: the SORS protocol's uniform one, or one
        mined from a pool of ``pool_size`` other-class documents ranked by the model being trained
        (:mod:`sparsesim.sampling`; docs/quality.md, "Triplet samplers"). The update rule is the same.
        Measured on a validation split of the training data (SORS-I), ``"semihard"`` gained 4.5 and
        5.6 MAP on news20 and 1.8 and 2.5 on Reuters-21578 at 10^4 and 3*10^4 triplets, for 2-5x
        the fit time; uniform given that time in more triplets came within 0.8 MAP of it or
        beat it, so the default stays uniform. Mine when the number of triplets, not the fit
        time, is the limit.
    pool_size : int, default 16
        Candidate negatives ranked per anchor by a mining ``sampler``.
    n_passes : int, default 1
        Passes of :meth:`fit` over its ``n_triplets`` (anchor, positive) pairs, each in a new
        seeded order (a mining sampler mines again in every pass).
    averaging : bool, default False
        :meth:`fit` returns the mean of M after 60, 70, 80, 90 and 100% of its updates
        (suffix averaging; holds one more copy of W while it sums).

    Attributes
    ----------
    engine_ : BilinearEngine
    n_features_in_ : int
    n_triplets_seen_ : int
    n_updates_ : int
        Triplets whose hinge loss was positive (that changed the model).
    last_losses_ : ndarray
        Hinge loss of each triplet of the last call, before its update (0: no update).
    last_steps_ : ndarray
        Step ``tau_t * y_t`` of each update of the last call (``M += tau_t y_t x_t z_t^T``; 0: no
        update), as the engine took it.
    train_seconds_ : float
    model_ : BilinearSimilarity

    Examples
    --------
    >>> from sparsesim.data import load_dataset
    >>> from sparsesim.learners.bilinear import OASIS
    >>> data = load_dataset("news20-sample")
    >>> model = OASIS(n_triplets=2000, random_state=0).fit(data.X, data.y).model_
    >>> model.n_features == data.n_features
    True
    """

    _algorithm = "oasis"
    _auto_kind = "oasis"
    _auto_names = ("C",)

    def __init__(self, C=AUTO, n_triplets=100_000, identity=True, random_state=None, initial_capacity=65536,
                 compact=True, max_memory="auto", n_threads=1, sampler="uniform", pool_size=16, n_passes=1,
                 averaging=False, max_model_bytes=AUTO):
        self.C = C
        self.sampler = sampler
        self.pool_size = pool_size
        self.n_passes = n_passes
        self.averaging = averaging
        self.max_model_bytes = max_model_bytes
        self.n_threads = n_threads
        self.max_memory = max_memory
        self.n_triplets = n_triplets
        self.identity = identity
        self.random_state = random_state
        self.initial_capacity = initial_capacity
        self.compact = compact

    def _make_engine(self, d):
        return BilinearEngine(d, OASIS_MODE, C=self._param("C"), identity=self.identity,
                              initial_capacity=self.initial_capacity, compact=self.compact, budget=self._budget(),
                              expected_triplets=self.n_triplets)


class SORS(SampledFit, BaseBilinear):
    """SORS: sparse online relative similarity by proximal gradient (Algorithm 1).

    ``M_{t+1} = prox_{eta_t lam r}(M_t - eta_t G_t)`` with the hinge subgradient
    ``G_t = -x (x+ - x-)^T`` when the loss is positive; ``r`` is the L1 norm of M (SORS-I,
    ``regularizer="l1"``) or of its off-diagonal part (SORS-II, ``"offdiag"``). The prox is
    applied lazily and exactly (see :mod:`sparsesim.engine.rules`).

    Parameters
    ----------
    regularizer : {"l1", "offdiag"}
    lam : float or "auto", default "auto"
        L1 weight lambda. ``"auto"``: ``3 * mean|x_i| * mean|z_j| / n_triplets`` (an entry must
        be written about three times in the run to survive; see :mod:`sparsesim.defaults`), 9
        instead of 3 with the per-triplet step (``schedule="pa"``).
    eta : float or "auto", default "auto"
        Step size eta (``schedule="constant"``), eta_0 of eta_t = eta_0 / sqrt(t) (``"invsqrt"``),
        or the cap of the per-triplet step (``"pa"``).
        ``"auto"``: ``4 / (mean ||x||^2 * mean ||x - x'||^2)`` (see :mod:`sparsesim.defaults`).
    schedule : {"auto", "constant", "invsqrt", "pa"}, default "auto"
        ``"pa"``: per triplet ``eta_t = min(eta, l_t / ||x z^T||_F^2)``, the passive-aggressive
        step of OASIS (the gradient step alone would bring the triplet's margin to 1; no step and
        no shrinkage on a triplet of zero loss), then the paper's prox at ``eta_t * lam``.
        ``"auto"``: ``"pa"`` when ``fit`` learns from labels of at least 40 classes, else
        ``"constant"`` (also for :meth:`partial_fit_triplets`, which sees no labels); the schedule
        used is ``schedule_`` and in the model's metadata. On many-class corpora the per-triplet
        step ranks as well as OASIS where the constant one was 1.8-4.4 MAP points below it
        (docs/quality.md, "Many classes").
    n_triplets, random_state, initial_capacity, compact, max_memory, n_threads, max_model_bytes
        As in :class:`OASIS`.
    sampler, pool_size, n_passes, averaging
        As in :class:`OASIS`.
    """

    identity = True  # M_1 = I (Algorithm 1, line 2)
    _auto_names = ("eta", "lam")

    @property
    def _auto_kind(self):
        """The default rule of the schedule in use (``resolve_params`` before a fit: without labels)."""
        schedule = self.__dict__.get("schedule_") or resolve_schedule(self.schedule, None)
        return "sors-pa" if schedule == "pa" else "sors"

    _schedules = ("auto", "constant", "invsqrt", "pa")
    _state_attrs = BaseBilinear._state_attrs + ("schedule_",)

    def _fit_labelled(self, X, y, progress=None):
        # the classes fit learns from, read once by _init_state for schedule="auto"
        self._fit_classes = int(np.unique(y).size)
        try:
            return super()._fit_labelled(X, y, progress)
        finally:
            self.__dict__.pop("_fit_classes", None)

    def _init_state(self, d: int):
        if self.schedule not in self._schedules:
            raise InvalidInputError(f"schedule must be one of {self._schedules}, got {self.schedule!r}")
        self.schedule_ = resolve_schedule(self.schedule, self.__dict__.get("_fit_classes"))
        super()._init_state(d)

    def _metadata(self) -> dict:
        return dict(super()._metadata(), schedule=getattr(self, "schedule_", self.schedule))

    def __init__(self, regularizer="l1", lam=AUTO, eta=AUTO, schedule=AUTO, n_triplets=100_000,
                 random_state=None, initial_capacity=65536, compact=True, max_memory="auto", n_threads=1,
                 sampler="uniform", pool_size=16, n_passes=1, averaging=False, max_model_bytes=AUTO):
        self.regularizer = regularizer
        self.sampler = sampler
        self.pool_size = pool_size
        self.n_passes = n_passes
        self.averaging = averaging
        self.max_model_bytes = max_model_bytes
        self.n_threads = n_threads
        self.max_memory = max_memory
        self.lam = lam
        self.eta = eta
        self.schedule = schedule
        self.n_triplets = n_triplets
        self.random_state = random_state
        self.initial_capacity = initial_capacity
        self.compact = compact

    def _check_common(self):
        if self.regularizer not in _REGULARIZERS:
            raise InvalidInputError(f"regularizer must be one of {_REGULARIZERS}, got {self.regularizer!r}")
        if self.schedule not in self._schedules:
            raise InvalidInputError(f"schedule must be one of {self._schedules}, got {self.schedule!r}")
        if "schedule_" not in self.__dict__:  # (start_from: no labels)
            self.schedule_ = resolve_schedule(self.schedule, None)

    @property
    def _algorithm(self):
        return ("sors-" if type(self) is SORS else "adasors-") + str(self.regularizer)

    def _make_engine(self, d):
        self._check_common()
        return BilinearEngine(d, SORS_MODE, lam=self._param("lam"), prox_diag=self.regularizer == "l1",
                              schedule=StepSchedule(self._param("eta"), self.schedule_),
                              initial_capacity=self.initial_capacity, compact=self.compact, budget=self._budget(),
                              expected_triplets=self.n_triplets)


class AdaSORS(SORS):
    """AdaSORS: SORS with AdaGrad-style per-entry step sizes (Algorithm 2).

    ``H_ij = sqrt(H_ij^2 + G_ij^2)``, ``Sigma = delta + H``,
    ``M_{t+1} = prox^{Sigma}_{eta lam r}(M_t - eta G_t / Sigma)`` with per-entry threshold
    ``lam eta / Sigma_ij`` (eq. 9-11).

    Parameters
    ----------
    regularizer : {"l1", "offdiag"}
    lam : float or "auto", default "auto"
        As in :class:`SORS`.
    eta : float or "auto", default "auto"
        ``"auto"``: ``30 * delta / (mean ||x||^2 * mean ||x - x'||^2)``.
    delta : float or "auto", default "auto"
        Smoothing that keeps Sigma invertible. ``"auto"``: ``10 * mean|x_i| * mean|z_j|``.
    schedule : {"constant", "invsqrt"}
    n_triplets, random_state, initial_capacity, compact, max_memory, n_threads, max_model_bytes
        As in :class:`OASIS`.
    sampler, pool_size, n_passes, averaging
        As in :class:`OASIS`.
    keep_zero_state : bool, default False
        ``True`` runs Algorithm 2 exactly: an entry whose value is zero keeps its H_ij, so memory
        follows the set of entries ever touched. ``False`` (default): whenever the table fills
        up, entries whose value is zero leave with their H_ij (a dropped entry restarts with
        H_ij = 0 when next written), so memory follows nnz(M). Until the first such sweep both
        are identical.
    """

    _auto_kind = "adasors"
    _auto_names = ("eta", "lam", "delta")
    _schedules = ("constant", "invsqrt")

    def __init__(self, regularizer="l1", lam=AUTO, eta=AUTO, delta=AUTO, schedule="constant",
                 n_triplets=100_000, random_state=None, initial_capacity=65536, compact=True, max_memory="auto",
                 keep_zero_state=False, n_threads=1, sampler="uniform", pool_size=16, n_passes=1, averaging=False,
                 max_model_bytes=AUTO):
        super().__init__(regularizer=regularizer, lam=lam, eta=eta, schedule=schedule,
                         n_triplets=n_triplets, random_state=random_state, initial_capacity=initial_capacity,
                         compact=compact, max_memory=max_memory, n_threads=n_threads, sampler=sampler,
                         pool_size=pool_size, n_passes=n_passes, averaging=averaging,
                         max_model_bytes=max_model_bytes)
        self.delta = delta
        self.keep_zero_state = keep_zero_state

    def _make_engine(self, d):
        self._check_common()
        return BilinearEngine(d, ADASORS, lam=self._param("lam"), delta=self._param("delta"),
                              prox_diag=self.regularizer == "l1",
                              schedule=StepSchedule(self._param("eta"), self.schedule_),
                              initial_capacity=self.initial_capacity, compact=self.compact, budget=self._budget(),
                              expected_triplets=self.n_triplets,
                              drop_zero_state=not self.keep_zero_state)
