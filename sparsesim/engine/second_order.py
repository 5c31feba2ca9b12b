"""Selective sampling and second-order bilinear updates (Hao et al., CIKM 2015; AROMA).

For a triplet (x, x1, x2) with label y (+1: x is more similar to x1 than to x2) the model
M scores ``p = x^T M (x1 - x2) = <M, X>`` with ``X = x z^T``, ``z = x1 - x2`` and
``phi = vec(X)`` (row-major: phi[i * d + j] = x_i z_j, the paper's vec). Hinge loss
``l = max(0, 1 - y p)``.

Query policies (:mod:`sparsesim.engine.primitives`; the label y is asked for only when Z_t = 1;
a uniform u_t in [0, 1) is drawn for every triplet by the caller, so a run is reproducible and
resumable):

* all (passive):   Z_t = 1
* active:          Z_t = 1 iff u_t < delta / (delta + |p_t|)                       (eq. 3)
* random:          Z_t = 1 iff u_t < rate

Update rules (applied when Z_t = 1 and l > 0):

* PA (PAAS/PARS, Algorithm 1):  M += tau y X, tau = min(C, l / ||X||_F^2)
* CW (CWS/CWAS/CWRS, eq. 5-6): with u = Sigma phi, v = phi^T u,
  Sigma' = Sigma - u u^T / (gamma + v); M += eta y Sigma phi, where Sigma is Sigma_t in eq. (5)
  (``sigma_step="previous"``, the default) or Sigma_{t+1} in the Algorithm 2 box
  (``"updated"``; then Sigma_{t+1} phi = u gamma / (gamma + v)).
* CW diagonal (eq. 7-8): the same with Sigma a d x d matrix of per-entry variances and
  element-wise products: v = sum_ij Sigma_ij X_ij^2,
  Sigma'_ij = Sigma_ij - Sigma_ij^2 X_ij^2 / (gamma + v), M_ij += eta y S_ij X_ij with
  S = Sigma_t (eq. 7) or Sigma_{t+1} (Algorithm 2 order).
* AROW (AROMA, Crammer & Chechik 2012): m = y p, beta = 1 / (v + r), alpha = l beta,
  M += alpha y Sigma phi, Sigma' = Sigma - beta (Sigma phi)(Sigma phi)^T (diagonal: element-wise).

Two stores:

* :class:`SparseSecondOrderEngine` — the shared sparse hash store (any d). PA keeps (key, val)
  records; the diagonal second-order rules keep (key, val, aux) records with aux = Sigma_ij
  (an absent entry has M_ij = 0 and Sigma_ij = 1). A step reads and writes only the
  nnz(x) * nnz(z) entries X touches, like OASIS.
* :class:`FullCovarianceEngine` — dense M (d x d) and the full d^2 x d^2 covariance (small d
  only). Sigma is symmetric, so only its upper triangle is stored up to date; each rank-one
  downdate is deferred and fused with the next step's product Sigma phi (one pass over half
  the matrix per update instead of three passes over all of it).

The compiled kernels are in :mod:`sparsesim.engine.second_order_loops`; this module holds the
engines that run them. Kernels return early (status NEED_ROOM) when the hash table could pass its load limit, and
(status NEED_LABEL) when a label must be asked from a Python oracle; the caller grows the
table (:func:`sparsesim.engine.driver.run_growing`) or asks the oracle and calls again from the
same triplet.
"""

from __future__ import annotations

import numpy as np

from ..exceptions import InvalidInputError
from ..memory import budgeted_reserve, check_allocation
from .driver import YIELD, run_growing, triplet_scratch
from .hashstore import HashStore
from .primitives import QUERY_POLICIES
from .second_order_loops import (DONE, NEED_LABEL, NEED_ROOM, NEED_UPDATE, PA, RULES, flush_downdate, second_order_scalars,
                                 train_full, train_sparse)
from .store import WritableOnUnpickle


class AuxStore(HashStore):
    """A :class:`HashStore` whose records are (key, val, aux): 24 bytes per entry.

    ``aux`` holds the diagonal covariance Sigma_ij of a stored entry; an absent entry has
    M_ij = 0 and Sigma_ij = 1 (Sigma_1 = I). The diagonal of Sigma is ``diag_aux`` (init 1).
    """

    def __init__(self, d: int, diag_init: float = 0.0, initial_capacity: int = 1 << 16):
        super().__init__(d, "plain", diag_init, 16)
        self.layout = "aux"
        self.dtype = np.dtype([("key", np.int64), ("val", np.float64), ("aux", np.float64)])
        cap = 1 << max(4, int(np.ceil(np.log2(max(16, initial_capacity)))))
        self.table = self._empty_table(cap)
        self.diag_aux[:] = 1.0


def _run_with_oracle(step, n, signs, oracle, triplets, external_update=None, progress=None):
    """Drive a kernel ``step(pos, pending_label) -> (pos, status, need)`` to the end of the chunk.

    ``step`` grows the store itself (NEED_ROOM); here a NEED_LABEL asks ``oracle`` and resumes
    at the same triplet with its answer, and a NEED_UPDATE calls ``external_update(t)`` and
    resumes after triplet t. ``progress[0]`` always holds the number of triplets fully processed
    (so an oracle that raises, or a KeyboardInterrupt at a prompt, leaves exact accounting)."""
    progress = [0] if progress is None else progress
    pos = 0
    pending = 0.0
    while pos < n:
        pos, status, _ = step(pos, pending)
        progress[0] = pos
        pending = 0.0
        if status == NEED_LABEL:
            pending = ask_oracle(oracle, triplets[pos])
            signs[pos] = pending
        elif status == NEED_UPDATE:
            external_update(pos)
            pos += 1
            progress[0] = pos
    return signs


def ask_oracle(oracle, triplet) -> float:
    """Call ``oracle(triplet)`` and check it answered +1 or -1."""
    answer = oracle(np.array(triplet, dtype=np.int64))
    try:
        value = float(answer)
    except (TypeError, ValueError):
        value = 0.0
    if value not in (1.0, -1.0):
        raise InvalidInputError(
            f"the oracle must answer +1 (anchor closer to the first document) or -1, got {answer!r} "
            f"for triplet {tuple(int(v) for v in triplet)}"
        )
    return value


class _EngineBase(WritableOnUnpickle):
    """Shared configuration and the per-chunk outputs of a selective-sampling engine."""

    def __init__(self, d, rule="pa", policy="all", delta=1.0, rate=1.0, C=1.0, eta=1.0, gamma=1.0, r=1.0,
                 sigma_step="previous", query_budget=None):
        self.d = int(d)
        self.rule = RULES[rule]
        self.policy = QUERY_POLICIES[policy]
        self.delta, self.rate, self.C, self.eta, self.gamma, self.r = map(float, (delta, rate, C, eta, gamma, r))
        self.sigma_updated = sigma_step == "updated"
        self.qstate = np.array([0, -1 if query_budget is None else int(query_budget)], np.int64)
        self.n_seen = 0
        self.n_updates = 0

    @property
    def n_queries(self) -> int:
        return int(self.qstate[0])

    def export_W(self, identity: bool = True):
        """M - I (``identity``) or M as one CSR matrix (what the learners' ``model_`` stores)."""
        import scipy.sparse as sp

        off, diag = self.export()
        W = (off + sp.diags(diag - (1.0 if identity else 0.0), format="csr")).tocsr()
        W.eliminate_zeros()
        return W

    def _params(self):
        return (self.rule, self.policy, self.delta, self.rate, self.C, self.eta, self.gamma, self.r,
                self.sigma_updated)

    def partial_fit(self, X, triplets, signs=None, uniforms=None, oracle=None):
        """Process ``triplets`` in order; returns (margins, queried, losses, signs_used).

        ``uniforms[t]`` is the caller's U[0, 1) draw for triplet t; ``oracle(triplet) -> +-1``
        answers queries when given (``signs`` are then ignored), else ``signs`` (default +1)
        are the labels.
        """
        n = triplets.shape[0]
        triplets = np.ascontiguousarray(triplets, dtype=np.int64)
        signs = np.ones(n) if signs is None else np.array(signs, dtype=np.float64)
        if oracle is not None:
            signs = np.zeros(n)
        uniforms = np.zeros(n) if uniforms is None else np.ascontiguousarray(uniforms, dtype=np.float64)
        margins = np.zeros(n)
        queried = np.zeros(n, np.int8)
        losses = np.zeros(n)
        if n:
            step = self._stepper(X, triplets, signs, uniforms, oracle is None, margins, queried, losses)
            progress = [0]
            try:
                _run_with_oracle(step, n, signs, oracle, triplets, getattr(self, "_external_update", None),
                                 progress)
            except BaseException:
                # the model holds the triplets before the interrupted one: count exactly those
                done = progress[0]
                self.qstate[0] -= int(queried[done:].sum())
                queried[done:] = 0
                self.n_seen += done
                self.n_updates += int(np.count_nonzero(losses[:done]))
                self.interrupted_at = done
                raise
        self.n_seen += n
        self.n_updates += int(np.count_nonzero(losses))
        return margins, queried, losses, signs


class SparseSecondOrderEngine(_EngineBase):
    """PA, diagonal CW or diagonal AROW with a query policy on the sparse hash store (any d).

    Parameters
    ----------
    d : int
    rule : {"pa", "cw", "arow"}
    policy : {"all", "active", "random"}
    delta, rate : float
        Active sampling threshold (eq. 3) / random query rate.
    C : float
        PA cap (Algorithm 1).
    eta, gamma : float
        CW learning rate and regulariser (eq. 7-8).
    r : float
        AROW regulariser.
    sigma_step : {"previous", "updated"}
        CW: step with Sigma_t (eq. 7) or Sigma_{t+1} (Algorithm 2 order).
    identity : bool
        M_1 = I (else M_1 = 0, the paper's initialisation).
    query_budget : int, optional
        Stop querying after this many labels.
    initial_capacity : int
    """

    def __init__(self, d, rule="pa", policy="all", delta=1.0, rate=1.0, C=1.0, eta=1.0, gamma=1.0, r=1.0,
                 sigma_step="previous", identity=False, query_budget=None, initial_capacity=1 << 16, budget=None):
        super().__init__(d, rule, policy, delta, rate, C, eta, gamma, r, sigma_step, query_budget)
        self.budget = budget  # sparsesim.memory.MemoryBudget: checked before every table rebuild
        diag_init = 1.0 if identity else 0.0
        # the first table is allocated here, before any rebuild check: refuse one larger than the budget
        # (records of key + value, plus the per-entry variance for the second-order rules)
        cap = 1 << max(4, int(np.ceil(np.log2(max(16, int(initial_capacity))))))
        check_allocation(budget, cap * (16 if self.rule == PA else 24), f"the initial table of {cap:,} entries",
                         hint="a smaller initial_capacity")
        if self.rule == PA:
            self.store = HashStore(self.d, "plain", diag_init, initial_capacity)
        else:
            self.store = AuxStore(self.d, diag_init, initial_capacity)

    def _stepper(self, X, triplets, signs, uniforms, have_labels, margins, queried, losses):
        zi, zv, slots = triplet_scratch(X)
        st = self.store
        n = triplets.shape[0]
        params = self._params()

        def step(pos, pending):
            status = [DONE]

            def call(p):
                # a pending label belongs to triplet ``pos``: no longer once the kernel has passed it
                nxt, status[0], need = train_sparse(
                    st.table["key"], st.table["val"], st.field("aux"), st.counts, st.shift, st.max_used(),
                    st.diag, st.diag_aux, self.d, X.indptr, X.indices, X.data,
                    triplets, signs, uniforms, p, n, *params,
                    have_labels, pending if p == pos else 0.0, self.qstate, margins, queried, losses, zi, zv, slots,
                )
                return nxt, need if status[0] == NEED_ROOM else YIELD

            return run_growing(call, pos, n, budgeted_reserve(st, self.budget)), status[0], 0

        return step

    def export(self):
        """(off-diagonal CSR, diagonal copy) of M."""
        return self.store.offdiag_csr(), self.store.diag.copy()

    def export_W(self, identity: bool = True):
        """M - I (``identity``) or M as one CSR matrix, in one pass over the store."""
        return self.store.to_csr(1.0 if identity else 0.0)

    def covariance(self):
        """The diagonal covariance as a dense (d, d) array (small d only; absent entries are 1)."""
        st = self.store
        if st.layout != "aux":
            raise ValueError("the PA rule keeps no covariance")
        S = np.ones((self.d, self.d))
        keys = st.table["key"]
        live = keys >= 0
        S.flat[keys[live]] = st.table["aux"][live]
        S[np.diag_indices(self.d)] = st.diag_aux
        return S


FULL_MAX_D = 64
BLAS_MIN_D2 = 400  # d^2 from which the full-covariance step calls BLAS (dsymv + dsyr) instead of the fused loop


class FullCovarianceEngine(_EngineBase):
    """PA, CW or AROW with a query policy, dense M and the full d^2 x d^2 covariance.

    Same parameters as :class:`SparseSecondOrderEngine` (no capacity); ``d`` must be at most
    :data:`FULL_MAX_D` (Sigma takes 8 d^4 bytes: 134 MB at d = 64). ``blas_min_d2``: from this
    d^2 on, each step calls BLAS ``dsymv``/``dsyr`` on the upper triangle (several times faster
    for d^2 in the thousands); below it the fused compiled loop avoids the call overhead.
    """

    def __init__(self, d, rule="cw", policy="all", delta=1.0, rate=1.0, C=1.0, eta=1.0, gamma=1.0, r=1.0,
                 sigma_step="previous", identity=False, query_budget=None, blas_min_d2=BLAS_MIN_D2,
                 budget=None):
        super().__init__(d, rule, policy, delta, rate, C, eta, gamma, r, sigma_step, query_budget)
        if self.d > FULL_MAX_D:
            raise ValueError(f"full covariance needs d <= {FULL_MAX_D}, got {self.d}")
        D = self.d * self.d
        check_allocation(budget, 8 * (D * D + 3 * D) if self.rule != PA else 8 * 3 * D,
                         f"the full covariance at d = {self.d}", hint="the diagonal variant (covariance='diag')")
        self.M = np.eye(self.d) if identity else np.zeros((self.d, self.d))
        self.S = np.eye(D) if self.rule != PA else np.zeros((1, 1))
        self.pend = np.zeros(D)
        self.pk = np.zeros(1)
        self.external = self.rule != PA and D >= blas_min_d2
        self._buffers = None
        self.budget = budget

    def _stepper(self, X, triplets, signs, uniforms, have_labels, margins, queried, losses):
        # d <= FULL_MAX_D, so the dense copy is n x (at most 64) values; still counted against the budget
        check_allocation(getattr(self, "budget", None), 8 * X.shape[0] * self.d, f"a dense copy of the {X.shape[0]} x {self.d} corpus",
                         hint="the diagonal variant (covariance='diag')")
        Xd = np.ascontiguousarray(X.toarray())
        d = self.d
        z, phi, u = np.zeros(d), np.zeros(d * d), np.zeros(d * d)
        self._buffers = (phi, signs, losses)
        n = triplets.shape[0]
        params = self._params()

        def step(pos, pending):
            pos, status = train_full(self.M, self.S, self.pend, self.pk, Xd, triplets, signs, uniforms,
                                     pos, n, *params, have_labels, pending, self.qstate,
                                     margins, queried, losses, z, phi, u, self.external)
            return pos, status, 0

        return step

    def _external_update(self, t):
        """The second-order step of triplet t with BLAS on the upper triangle of S (eq. 5-6 / AROW)."""
        from scipy.linalg import blas

        phi, signs, losses = self._buffers
        flush_downdate(self.S, self.pend, self.pk[0])  # no-op unless the fused path left one
        self.pk[0] = 0.0
        SF = self.S.T  # Fortran view: the C upper triangle is its lower triangle
        u = blas.dsymv(1.0, SF, phi, lower=1)
        conf = float(phi @ u)
        kappa, s = second_order_scalars(self.rule, float(losses[t]), conf, self.eta, self.gamma, self.r,
                                        self.sigma_updated)
        out = blas.dsyr(-kappa, u, a=SF, lower=1, overwrite_a=1)
        if not np.shares_memory(out, self.S):  # pragma: no cover - f2py copied (never for a C array's .T)
            self.S[...] = out.T
        self.M += (signs[t] * s) * u.reshape(self.d, self.d)

    def covariance(self):
        """The full symmetric covariance Sigma (d^2 x d^2), pending downdate applied."""
        if self.rule == PA:
            raise ValueError("the PA rule keeps no covariance")
        flush_downdate(self.S, self.pend, self.pk[0])
        self.pk[0] = 0.0
        upper = np.triu(self.S)
        return upper + np.triu(upper, 1).T

    def export(self):
        import scipy.sparse as sp

        M = self.M
        off = M - np.diag(np.diag(M))
        return sp.csr_matrix(off), np.diag(M).copy()
