"""The OMTRSL hot loop: K coupled bilinear models updated at the cost of one.

Hao, Zhao, Liu, Hoi, Miao, "Online Multitask Relative Similarity Learning", IJCAI 2017
(``papers/000``). Task k scores S^k(x, x') = x^T M^k x' (eq. 1). On a triplet (x_t, x_t^1, x_t^2)
of task t_k with label y_t and hinge loss l_t = [1 - y_t p_t]_+, p_t = x_t^T M^{t_k} (x_t^1 - x_t^2),
every task moves (eq. 4, Algorithm 1)::

    M^k  <-  M^k + y_t tau_t A^{-1}_{k, t_k} X_t,     X_t = x_t (x_t^1 - x_t^2)^T,  for all k
    tau_t = min(C, l_t / ||phi_t||^2_{A_dd^{-1}})

with the task-relationship matrix of the paper (section 3.2)::

    A^{-1} = 1 / ((1 + b) K) * [[b + K, b, ..., b], [b, b + K, ..., b], ..., [b, ..., b, b + K]]
           = alpha I_K + beta 1 1^T,   alpha = 1 / (1 + b),   beta = b / ((1 + b) K)

(diagonal: (b + K) / ((1 + b) K) = alpha + beta; off-diagonal: b / ((1 + b) K) = beta). Because
phi_t is zero outside block t_k and A_dd = A (x) I_{d^2},
``||phi_t||^2_{A_dd^{-1}} = A^{-1}_{t_k, t_k} ||X_t||_F^2 = (alpha + beta) ||x_t||^2 ||x_t^1 - x_t^2||^2``.

Shared + own decomposition
--------------------------
Since A^{-1}_{k, t_k} = beta + alpha [k = t_k], keep one shared matrix S and one own matrix O_k
per task, M^k = I + S + O_k (S = O_k = 0 at the start, so M^k_0 = I). The update of eq. (4) for all
K tasks is then exactly ``S += beta y tau X_t`` and ``O_{t_k} += alpha y tau X_t``: two rank-one
writes whatever K is, and the margin reads S and O_{t_k} only. By induction M^k = I + S + O_k holds
after every step, so this is Algorithm 1, not an approximation (``tests/test_multitask.py`` checks
it against K dense matrices updated through the compound vectors of eq. 3).

The update rules are in :mod:`sparsesim.engine.multitask_rules`, the hash storage in
:mod:`sparsesim.engine.paired_store`; this module holds the dense storage's kernel and the engine.

Two storages for S, O_1..O_K, chosen per data set (``storage="auto"`` picks by memory):

* ``"dense"`` — one float64 array (K + 1, d, d) (S at index K). Right for low-dimensional dense
  data (isolet: d = 617) or a pruned vocabulary. A triplet whose difference vector has at least
  d / 4 nonzeros reads and writes whole rows contiguously (BLAS dot, vectorised axpy); sparser
  ones visit only the entries (i, j) with x_i != 0 and z_j != 0.
* ``"hash"`` — :class:`PairedTaskStore`: one open-addressing table with one 32-byte record per
  touched pair (i, j), holding S_ij and the own value O_k,ij of the first task k that wrote the
  pair, aligned so that a record never straddles two cache lines; the own values of the other
  tasks that write the pair go to an overflow table keyed ``(i d + j) K + k``, and a per-record
  count tells whether a pair has any. Diagonals are dense (K + 1, d). The margin reads S_ij and
  O_k,ij with one random access when k wrote the pair first (most touches), and the kernel
  (:func:`train_paired`) prefetches pair records two stages ahead and overflow slots one stage
  ahead. The cost of a step depends on the entries it touches, not on K or d.

Selective sampling (Algorithm 2, eq. 5): ``query="active"`` asks for y_t with probability
delta / (delta + |p_t|); ``query="random"`` asks with a fixed probability (OMTRSL-Random). The
uniform draws come from the caller, so a run is reproducible from its seed.
"""

from __future__ import annotations

import warnings

import numba
import numpy as np
import scipy.sparse as sp

from ..memory import budgeted_reserve, check_allocation
from .driver import run_growing, triplet_scratch
from .multitask_rules import (anchor_and_difference, relationship_inverse, skipped_by_random_query,
                              step_coefficients, task_coefficients)
from .paired_store import PackedRecords, PairedTaskStore, WideRecords, train_paired
from .primitives import QUERY_ALL, QUERY_POLICIES
from .store import WritableOnUnpickle

__all__ = ["MultiTaskEngine", "PairedTaskStore", "relationship_inverse", "task_coefficients", "train_dense"]


@numba.njit(cache=True)
def train_dense(
    W, n_tasks, indptr, indices, data, triplets, signs, task_ids, uniforms, start, stop,
    mode, rate, alpha, beta, C, zi, zv, zd, losses, margins, queried,
):
    """Process triplets[start:stop] on W = [O_1, ..., O_K, S] (shape (K + has_shared, d, d)).

    ``losses[t]`` receives the hinge loss (0 when not queried), ``margins[t]`` p_t (NaN when
    the random mode skipped the triplet without computing it), ``queried[t]`` 1 when y_t was asked.
    ``zd`` is a zeroed length-d work vector. When z = x^1 - x^2 has at least d / 4 nonzeros the
    rows are read and written contiguously (BLAS dot, vectorised axpy) instead of gathered.
    """
    shared = n_tasks
    use_shared = beta != 0.0
    d = W.shape[1]
    for t in range(start, stop):
        k = task_ids[t]
        if skipped_by_random_query(mode, uniforms, t, rate, losses, margins, queried):
            continue
        nz, lo, hi = anchor_and_difference(t, triplets, indptr, indices, data, zi, zv)
        dense_rows = 4 * nz >= d
        # p_t = x^T (I + S + O_k) z
        p = 0.0
        if dense_rows:
            for jj in range(nz):
                zd[zi[jj]] = zv[jj]
            for ii in range(lo, hi):
                i = indices[ii]
                acc = np.dot(W[k, i], zd)
                if use_shared:
                    acc += np.dot(W[shared, i], zd)
                p += data[ii] * (acc + zd[i])
        else:
            for ii in range(lo, hi):
                i = indices[ii]
                acc = 0.0
                for jj in range(nz):
                    j = zi[jj]
                    v = W[k, i, j]
                    if use_shared:
                        v += W[shared, i, j]
                    if i == j:
                        v += 1.0
                    acc += zv[jj] * v
                p += data[ii] * acc
        update, ga, gb = step_coefficients(t, p, mode, uniforms, rate, signs, data, lo, hi, zv, nz,
                                           alpha, beta, C, losses, margins, queried)
        if not update:
            if dense_rows:
                for jj in range(nz):
                    zd[zi[jj]] = 0.0
            continue
        if dense_rows:
            for ii in range(lo, hi):
                i = indices[ii]
                ca = ga * data[ii]
                cb = gb * data[ii]
                row = W[k, i]
                for j in range(d):
                    row[j] += ca * zd[j]
                if use_shared:
                    srow = W[shared, i]
                    for j in range(d):
                        srow[j] += cb * zd[j]
            for jj in range(nz):
                zd[zi[jj]] = 0.0
        else:
            for ii in range(lo, hi):
                i = indices[ii]
                xi = data[ii]
                for jj in range(nz):
                    j = zi[jj]
                    w = xi * zv[jj]
                    W[k, i, j] += ga * w
                    if use_shared:
                        W[shared, i, j] += gb * w
    return stop


class MultiTaskEngine(WritableOnUnpickle):
    """K coupled bilinear models M^k = I + S + O_k and the OMTRSL triplet loop.

    Parameters
    ----------
    d : int
        Feature count.
    n_tasks : int
        K.
    b : float
        Task-sharing parameter of A^{-1}(b) (b = 0: independent tasks, no shared matrix).
    C : float
        Aggressiveness cap of tau_t.
    query : {"all", "active", "random"}
        Algorithm 1 (ask every y_t), Algorithm 2 (ask with probability delta / (delta + |p_t|)) or
        random queries with probability ``rate``.
    rate : float
        delta (active) or the query probability (random); ignored for "all".
    storage : {"auto", "dense", "hash"}
        See the module docstring; "auto" is dense when (K + 1) d^2 doubles fit ``dense_budget``.
    dense_budget : int
        Bytes the dense storage may take under "auto".
    initial_capacity : int
        Hash slots reserved ahead.
    compact : bool
        Hash storage only: 16-byte pair records with float32 values (see :class:`PairedTaskStore`).
        When (d, K) do not fit the packed key the engine warns with the reason and keeps the
        32-byte layout (``compact_`` tells which layout is in use).
    """

    def __init__(self, d, n_tasks, b=1.0, C=1.0, query="all", rate=1.0, storage="auto",
                 dense_budget=1 << 30, initial_capacity=1 << 16, compact=False, budget=None):
        self.d = int(d)
        self.n_tasks = int(n_tasks)
        self.b = float(b)
        self.C = float(C)
        if query not in QUERY_POLICIES:
            raise ValueError(f"unknown query mode {query!r}; use one of {', '.join(QUERY_POLICIES)}")
        self.query = query
        self.mode = QUERY_POLICIES[query]
        self.rate = float(rate)
        self.alpha, self.beta = task_coefficients(self.b, self.n_tasks)
        n_mats = self.n_tasks + (1 if self.beta != 0.0 else 0)
        self.budget = budget  # sparsesim.memory.MemoryBudget: checked before allocations and rebuilds
        if storage == "auto":
            fits = budget is None or budget.fits(n_mats * self.d * self.d * 8)
            storage = "dense" if n_mats * self.d * self.d * 8 <= dense_budget and fits else "hash"
        if storage not in ("dense", "hash"):
            raise ValueError(f"unknown storage {storage!r}; use 'auto', 'dense' or 'hash'")
        self.storage = storage
        if storage == "dense":
            check_allocation(budget, n_mats * self.d * self.d * 8, f"dense storage of {n_mats} d x d matrices",
                             hint="storage='hash'")
            self.W = np.zeros((n_mats, self.d, self.d))
            self.store = None
        else:
            self.W = None
            reason = PairedTaskStore.compact_unfit_reason(self.d, self.n_tasks) if compact else None
            if reason:
                warnings.warn(f"{reason}; using the 32-byte pair records", RuntimeWarning, stacklevel=2)
            self.store = PairedTaskStore(self.d, self.n_tasks, initial_capacity, compact=bool(compact) and not reason)
        self.compact_ = self.store is not None and self.store.compact
        self.n_seen = 0
        self.n_updates = 0
        self.n_queries = 0

    @property
    def nbytes(self) -> int:
        return self.W.nbytes if self.W is not None else self.store.nbytes

    def partial_fit(self, X, triplets, signs, task_ids, uniforms=None):
        """Process triplets (rows of CSR ``X``) in order.

        Parameters
        ----------
        X : csr_matrix (canonical: sorted indices, no duplicates)
        triplets : int64 array (n, 3)
        signs : float64 array (n,) of +-1 (y_t)
        task_ids : int64 array (n,) in [0, K)
        uniforms : float64 array (n,), optional
            U(0, 1) draws for the query decision (required unless query == "all").

        Returns
        -------
        losses, margins, queried : arrays (n,)
        """
        n = triplets.shape[0]
        triplets = np.ascontiguousarray(triplets, dtype=np.int64)
        signs = np.ascontiguousarray(signs, dtype=np.float64)
        task_ids = np.ascontiguousarray(task_ids, dtype=np.int64)
        if uniforms is None:
            if self.mode != QUERY_ALL:
                raise ValueError("uniform draws are required for active / random queries")
            uniforms = np.zeros(1)
        uniforms = np.ascontiguousarray(uniforms, dtype=np.float64)
        losses = np.zeros(n)
        margins = np.zeros(n)
        queried = np.zeros(n, np.int8)
        if n == 0:
            return losses, margins, queried
        # the kernels do not bounds-check: refuse indices outside the arrays here
        if task_ids.shape != (n,) or task_ids.min() < 0 or task_ids.max() >= self.n_tasks:
            raise ValueError(f"task ids must be one per triplet in [0, {self.n_tasks})")
        if triplets.ndim != 2 or triplets.shape[1] != 3 or triplets.min() < 0 or triplets.max() >= X.shape[0]:
            raise ValueError(f"triplets must be (n, 3) row indices in [0, {X.shape[0]})")
        if signs.shape != (n,) or (self.mode != QUERY_ALL and uniforms.shape != (n,)):
            raise ValueError("signs (and uniforms for active / random queries) must hold one value per triplet")
        if X.shape[1] != self.d:
            raise ValueError(f"X has {X.shape[1]} features, the engine {self.d}")
        if not X.has_sorted_indices:
            X = X.copy()
            X.sort_indices()
        indptr = X.indptr.astype(np.int64, copy=False)
        indices = X.indices.astype(np.int64, copy=False)
        data = X.data.astype(np.float64, copy=False)
        if self.storage == "dense":
            zi, zv = triplet_scratch(X, 0)
            train_dense(self.W, self.n_tasks, indptr, indices, data, triplets, signs, task_ids, uniforms,
                        0, n, self.mode, self.rate, self.alpha, self.beta, self.C, zi, zv, np.zeros(self.d),
                        losses, margins, queried)
        else:
            zi, zv, keybuf, slots, xslots = triplet_scratch(X, 3)
            st = self.store

            def rec():  # the layout accessors of the current table (a grown table is a new array)
                if st.compact:
                    kbits, tmask = st.kbits, (1 << st.tbits) - 1
                    return PackedRecords((1 << kbits) - 1, kbits, tmask, (tmask + 1) << kbits)
                return WideRecords(st.table["tag"], st.table["nover"])

            def call(pos):
                t, x = st.table, st.overflow
                return train_paired(t["key"], t["s"], t["o"], rec(), st.counts, st.shift, st.max_used(),
                                    x.table["key"], x.table["val"], x.counts, x.shift, x.max_used(), st.diag,
                                    self.d, self.n_tasks, indptr, indices, data, triplets, signs, task_ids,
                                    uniforms, pos, n, self.mode, self.rate, self.alpha, self.beta, self.C,
                                    zi, zv, keybuf, slots, xslots, losses, margins, queried)

            run_growing(call, 0, n, budgeted_reserve(st, self.budget))
        self.n_seen += n
        self.n_updates += int(np.count_nonzero(losses))
        self.n_queries += int(queried.sum())
        return losses, margins, queried

    def matrices(self) -> tuple[list[sp.csr_matrix], sp.csr_matrix | None]:
        """([O_1, ..., O_K], S or None) as CSR matrices; M^k = I + S + O_k."""
        if self.W is not None:
            own = [sp.csr_matrix(self.W[k]) for k in range(self.n_tasks)]
            shared = sp.csr_matrix(self.W[self.n_tasks]) if self.W.shape[0] > self.n_tasks else None
        else:
            mats = self.store.matrices()
            own = mats[: self.n_tasks]
            shared = mats[self.n_tasks] if self.beta != 0.0 else None
        for m in own + ([shared] if shared is not None else []):
            m.eliminate_zeros()
        return own, shared

