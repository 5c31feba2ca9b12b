"""Online multi-task relative similarity learners (Hao et al., IJCAI 2017, ``papers/000``).

* :class:`OMTRSL` — Algorithm 1: K bilinear models M^k coupled through the task-relationship
  matrix A^{-1}(b); every hinge violation moves every task (eq. 4).
* :class:`OMTRSLActive` — Algorithm 2: y_t is asked with probability delta / (delta + |p_t|) (eq. 5).
* :class:`OMTRSLRandom` — the paper's random-query baseline: y_t is asked with a fixed probability
  (set it to the query ratio an active run observed).
* :class:`OSTRSL` — one independent OASIS-style passive-aggressive learner per task (the paper's
  single-task baseline [Chechik et al. 2010]); the K learners train in parallel through
  :func:`sparsesim.parallel.run_parallel`.
* :class:`OGRSL` — one global OASIS-style model learned from the triplets of all tasks.

Every learner takes triplets ``(x_t, x_t^1, x_t^2)`` as row indices of a CSR corpus, a label
``y_t`` in {-1, +1} per triplet (the OMTRSL coin flip: +1 means x_t is closer to x_t^1) and the
task of each triplet; ``fit(X, y, tasks)`` draws the paper's triplet stream from class labels
and a task column. The result is a :class:`MultiTaskSimilarity`: one
:class:`~sparsesim.models.BilinearSimilarity` per task (``model_for(task)``).

The update rules (tau_t, A^{-1}(b), the query probability) are small functions in
:mod:`sparsesim.engine.multitask` next to the paper's equations. With b = 0, OMTRSL is exactly
OSTRSL (A^{-1} = I); OSTRSL and OGRSL use the same engine with one task and b = 0, where the
step is OASIS's ``tau = min(C, l / ||x (x^1 - x^2)^T||_F^2)``. Their shared life cycle (task
coding, the triplet protocol, model export) is in :mod:`~sparsesim.learners.multitask_base`.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from ..defaults import AUTO, check_auto_positive
from ..engine.multitask import MultiTaskEngine
from ..exceptions import InvalidInputError
from ..parallel import run_parallel
from .multitask_base import MultiTaskBase


def _query_rng(random_state):
    """The generator of the query coin flips: a stream independent of the triplet stream."""
    if isinstance(random_state, np.random.Generator):
        return np.random.default_rng(random_state.bit_generator.seed_seq.spawn(1)[0])
    if random_state is None:
        return np.random.default_rng()
    return np.random.default_rng(np.random.SeedSequence(int(random_state), spawn_key=(1,)))


class OMTRSL(MultiTaskBase):
    """OMTRSL: online multi-task relative similarity learning (Algorithm 1).

    M^k_0 = I for every task; on a triplet of task t_k with hinge loss
    l_t = [1 - y_t x_t^T M^{t_k} (x_t^1 - x_t^2)]_+ > 0 every task moves by
    ``y_t tau_t A^{-1}_{k, t_k} x_t (x_t^1 - x_t^2)^T`` with
    ``tau_t = min(C, l_t / ||phi_t||^2_{A_dd^{-1}})`` (eq. 3-4) and
    ``A^{-1} = ((b + K) I + b (11^T - I)) / ((1 + b) K)``. Stored as M^k = I + S + O_k, so a step
    costs two rank-one writes whatever K is (:mod:`sparsesim.engine.multitask`).

    Parameters
    ----------
    C : float or "auto", default "auto"
        Aggressiveness cap of tau_t. ``"auto"``: ``3 * max(1, q) / s`` with ``s`` the mean
        ``||x||^2`` times the mean ``||x - x'||^2`` and ``q`` the typical margin ``|x''^T (x - x')|``
        of the training corpus (:func:`sparsesim.defaults.resolve_bilinear`, kind ``"multitask"``);
        the value used is in ``resolved_params_``.
    b : float or "auto", default "auto"
        How much the tasks share (b = 0: independent tasks; large b: one model). ``"auto"``:
        ``MULTITASK_B_SHARED`` (100) times the mean Jaccard overlap of the tasks' class sets, read
        by :meth:`fit` (tasks over the same classes share, tasks over disjoint classes learn
        apart); without class labels (:meth:`partial_fit_triplets`) 1.
    n_triplets : int, default 20000
        Triplets drawn by :meth:`fit`; ``0`` draws none (the fitted model is the starting point).
    random_state : int, optional
        Seed of the triplet stream drawn by :meth:`fit` (and of the query coins of the
        active / random variants).
    storage : {"auto", "dense", "hash"}, default "auto"
        Dense (K + 1) x d x d arrays, or, for sparse high-dimensional data, the paired hash
        storage (:class:`~sparsesim.engine.paired_store.PairedTaskStore`: S_ij and the first
        writer's O_k,ij in one record per touched pair, an overflow table for other tasks).
    initial_capacity : int, default 65536
        Hash slots reserved ahead.
    compact : bool, default False
        Hash storage only: 16-byte pair records (the first writer's task id and an overflow flag
        packed into the key, S_ij and O_k,ij stored as float32; arithmetic stays float64) instead
        of 32-byte ones. Falls back to the 32-byte records, with a warning giving the reason,
        when d and K do not fit the packed key.
    max_memory : int, str, default "auto"
        Memory budget of the model store (bytes, ``"6GiB"``, ``"80%"`` of the memory available
        when training starts, or ``"auto"``: 70% of it; :mod:`sparsesim.memory`). ``storage="auto"``
        takes the dense arrays only when they fit it; a dense allocation or a hash-table rebuild
        that would cross it stops with :class:`~sparsesim.exceptions.MemoryBudgetError`.

    Attributes
    ----------
    tasks_ : ndarray
        Task labels (position k is task k of the model).
    engine_ : MultiTaskEngine
    n_features_in_, n_triplets_seen_, n_updates_, n_queries_ : int
    train_seconds_ : float
    query_ratio_ : float
    model_ : MultiTaskSimilarity

    Examples
    --------
    >>> import numpy as np
    >>> from sparsesim.data import load_dataset
    >>> from sparsesim.learners.multitask import OMTRSL
    >>> data = load_dataset("news20-sample")
    >>> tasks = np.asarray(data.y) % 2                      # two toy tasks
    >>> est = OMTRSL(C=1.0, b=1.0, n_triplets=500, random_state=0).fit(data.X, data.y, tasks)
    >>> est.model_for(0).n_features == data.n_features
    True
    """

    _algorithm = "omtrsl"
    _query = "all"

    def __init__(self, C=AUTO, b=AUTO, n_triplets=20_000, random_state=None, storage="auto",
                 initial_capacity=65536, compact=False, max_memory="auto"):
        self.C = C
        self.b = b
        self.n_triplets = n_triplets
        self.random_state = random_state
        self.storage = storage
        self.initial_capacity = initial_capacity
        self.compact = compact
        self.max_memory = max_memory

    def _check_params(self):
        super()._check_params()
        check_auto_positive("b", self.b, allow_zero=True)
        self._rate()

    def _rate(self) -> float:
        """The query policy's parameter, checked: ``delta`` (active), ``query_ratio`` (random)."""
        if self._query == "active":
            if not self.delta > 0:
                raise InvalidInputError(f"delta must be positive, got {self.delta}")
            return float(self.delta)
        if self._query == "random":
            if not 0.0 < self.query_ratio <= 1.0:
                raise InvalidInputError(f"query_ratio must be in (0, 1], got {self.query_ratio}")
            return float(self.query_ratio)
        return 1.0

    def _make_engines(self, d):
        self.engine_ = MultiTaskEngine(d, len(self.tasks_), b=self._param("b"), C=self._param("C"), query=self._query, rate=self._rate(),
                                       storage=self.storage, initial_capacity=self.initial_capacity,
                                       compact=self.compact, budget=self._budget())
        if self._query != "all":
            self.query_rng_ = _query_rng(self.random_state)

    def _train(self, X, triplets, signs, codes):
        uniforms = self.query_rng_.random(triplets.shape[0]) if self._query != "all" else None
        losses, _, queried = self.engine_.partial_fit(X, triplets, signs, codes, uniforms)
        return losses, queried

    def _export(self):
        return self.engine_.matrices()


class OMTRSLActive(OMTRSL):
    """OMTRSL-Active (Algorithm 2): ask for y_t with probability delta / (delta + |p_t|) (eq. 5).

    p_t = x_t^T M^{t_k} (x_t^1 - x_t^2) is the current score difference; an unqueried triplet
    leaves every model unchanged. ``query_ratio_`` reports the fraction of labels asked.

    Parameters
    ----------
    C, b, n_triplets, random_state, storage, initial_capacity, compact, max_memory
        As in :class:`OMTRSL`.
    delta : float, default 1.0
        Smoothing of the query probability: larger delta, more queries.
    """

    _algorithm = "omtrsl-active"
    _query = "active"

    def __init__(self, C=AUTO, b=AUTO, delta=1.0, n_triplets=20_000, random_state=None, storage="auto",
                 initial_capacity=65536, compact=False, max_memory="auto"):
        super().__init__(C=C, b=b, n_triplets=n_triplets, random_state=random_state, storage=storage,
                         initial_capacity=initial_capacity, compact=compact, max_memory=max_memory)
        self.delta = delta


class OMTRSLRandom(OMTRSL):
    """OMTRSL-Random: ask for y_t with a fixed probability ``query_ratio`` (the paper's baseline
    for OMTRSL-Active, run at the query ratio the active learner observed).

    Parameters
    ----------
    C, b, n_triplets, random_state, storage, initial_capacity, compact, max_memory
        As in :class:`OMTRSL`.
    query_ratio : float in (0, 1], default 0.2
    """

    _algorithm = "omtrsl-random"
    _query = "random"

    def __init__(self, C=AUTO, b=AUTO, query_ratio=0.2, n_triplets=20_000, random_state=None, storage="auto",
                 initial_capacity=65536, compact=False, max_memory="auto"):
        super().__init__(C=C, b=b, n_triplets=n_triplets, random_state=random_state, storage=storage,
                         initial_capacity=initial_capacity, compact=compact, max_memory=max_memory)
        self.query_ratio = query_ratio


class OGRSL(MultiTaskBase):
    """OGRSL: one global OASIS-style similarity learned from the triplets of every task.

    ``M += y tau x (x^1 - x^2)^T`` with ``tau = min(C, l / ||x (x^1 - x^2)^T||_F^2)`` on every
    positive-loss triplet, whatever its task; every task then uses the same M.

    Parameters
    ----------
    C : float or "auto", default "auto"
        Aggressiveness cap of tau (``"auto"``: as :class:`OMTRSL`).
    n_triplets : int, default 20000
    random_state : int, optional
    storage : {"auto", "dense", "hash"}
    initial_capacity : int
    compact : bool, default False
        16-byte float32 pair records in the hash storage (see :class:`OMTRSL`).
    max_memory : int, str, default "auto"
        Memory budget of the model store (see :class:`OMTRSL`).
    """

    _algorithm = "ogrsl"

    def __init__(self, C=AUTO, n_triplets=20_000, random_state=None, storage="auto", initial_capacity=65536,
                 compact=False, max_memory="auto"):
        self.C = C
        self.n_triplets = n_triplets
        self.random_state = random_state
        self.storage = storage
        self.initial_capacity = initial_capacity
        self.compact = compact
        self.max_memory = max_memory

    def _make_engines(self, d):
        self.engine_ = MultiTaskEngine(d, 1, b=0.0, C=self._param("C"), storage=self.storage,
                                       initial_capacity=self.initial_capacity, compact=self.compact,
                                       budget=self._budget())

    def _train(self, X, triplets, signs, codes):
        losses, _, queried = self.engine_.partial_fit(X, triplets, signs, np.zeros(triplets.shape[0], np.int64))
        return losses, queried

    def _export(self):
        (W,), _ = self.engine_.matrices()
        empty = sp.csr_matrix(W.shape)
        return [empty] * len(self.tasks_), W  # the global model is all "shared"


def _train_task_engine(engine, X, triplets, signs):
    """One OSTRSL task: run its engine on its own triplets (module level: picklable for joblib)."""
    start = time.perf_counter()
    losses, _, queried = engine.partial_fit(X, triplets, signs, np.zeros(triplets.shape[0], np.int64))
    return engine, losses, queried, time.perf_counter() - start


class OSTRSL(MultiTaskBase):
    """OSTRSL: one independent OASIS-style learner per task, trained in parallel.

    Task k's model sees only the triplets of task k (in stream order) and moves by
    ``y tau x (x^1 - x^2)^T``, ``tau = min(C, l / ||x (x^1 - x^2)^T||_F^2)``. Equivalent to
    :class:`OMTRSL` with b = 0 (A^{-1} = I). The K learners of a batch run as K jobs of
    :func:`sparsesim.parallel.run_parallel` (``n_jobs`` workers; ``n_jobs=None`` follows an active
    ``joblib.parallel_config``, e.g. a Dask cluster); the result does not depend on ``n_jobs``.

    Parameters
    ----------
    C : float or "auto", default "auto"
        Aggressiveness cap of tau (``"auto"``: as :class:`OMTRSL`).
    n_triplets : int, default 20000
    random_state : int, optional
    n_jobs : int or None, default 1
    storage : {"auto", "dense", "hash"}
    initial_capacity : int
    compact : bool, default False
        16-byte float32 pair records in each task's hash storage (see :class:`OMTRSL`).
    max_memory : int, str, default "auto"
        Memory budget of all task models together; each task's store gets an equal share (see
        :class:`OMTRSL`).

    Attributes
    ----------
    engines_ : list of MultiTaskEngine
        One single-task engine per task.
    task_seconds_ : ndarray
        Training time of each task's learner (train_seconds_ is the wall time).
    """

    _algorithm = "ostrsl"

    def __init__(self, C=AUTO, n_triplets=20_000, random_state=None, n_jobs=1, storage="auto", initial_capacity=65536,
                 compact=False, max_memory="auto"):
        self.C = C
        self.n_triplets = n_triplets
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.storage = storage
        self.initial_capacity = initial_capacity
        self.compact = compact
        self.max_memory = max_memory

    def _make_engines(self, d):
        budget = self._budget(len(self.tasks_))  # each task's engine: its share of the budget
        self.engines_ = [MultiTaskEngine(d, 1, b=0.0, C=self._param("C"), storage=self.storage,
                                         initial_capacity=self.initial_capacity, compact=self.compact,
                                         budget=budget)
                         for _ in self.tasks_]
        self.task_seconds_ = np.zeros(len(self.tasks_))

    def _train(self, X, triplets, signs, codes):
        n = triplets.shape[0]
        losses = np.zeros(n)
        queried = np.zeros(n, np.int8)
        groups = [np.flatnonzero(codes == k) for k in range(len(self.tasks_))]
        active = [k for k in range(len(self.tasks_)) if groups[k].size]
        jobs = [(self.engines_[k], X, triplets[groups[k]], signs[groups[k]]) for k in active]
        for k, (engine, lk, qk, seconds) in zip(active, run_parallel(_train_task_engine, jobs, n_jobs=self.n_jobs)):
            self.engines_[k] = engine
            losses[groups[k]] = lk
            queried[groups[k]] = qk
            self.task_seconds_[k] += seconds
        return losses, queried

    def _export(self):
        return [e.matrices()[0][0] for e in self.engines_], None
