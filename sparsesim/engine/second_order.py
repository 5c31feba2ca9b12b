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

Kernels return early (status NEED_ROOM) when the hash table could pass its load limit, and
(status NEED_LABEL) when a label must be asked from a Python oracle; the caller grows the
table (:func:`sparsesim.engine.driver.run_growing`) or asks the oracle and calls again from the
same triplet.
"""

from __future__ import annotations

import numba
import numpy as np

from ..exceptions import InvalidInputError
from ..memory import budgeted_reserve, check_allocation
from .rules import merge_difference, oasis_tau
from .driver import YIELD, run_growing, triplet_scratch
from .hashstore import HashStore, find, find_or_insert
from .store import WritableOnUnpickle
from .primitives import QUERY_POLICIES, decide_query, sq_norms

# update rules
PA = 0
CW = 1
AROW = 2
RULES = {"pa": PA, "cw": CW, "arow": AROW}

# kernel status
DONE = 0
NEED_ROOM = 1
NEED_LABEL = 2
NEED_UPDATE = 3


# ------------------------------------------------------------------ small pure update rules


_DIAGONAL = -2  # slot code of a diagonal entry (kept dense beside the table)

# what a kernel does with a triplet after the query step
SKIP = 0      # not queried, or queried with zero hinge loss: the model stays
ASK = 1       # a label must come from the Python oracle (return NEED_LABEL)
UPDATE = 2    # queried with positive loss: update


@numba.njit(cache=True, inline="always")
def query_step(t, start, margin, pending_label, qstate, policy, u, delta, rate, have_labels, signs,
               queried, losses):
    """The query decision and hinge loss of triplet ``t`` (shared by both kernels).

    Returns (action, y, loss): SKIP, ASK or UPDATE (see above). A label pending from the oracle
    belongs to the first triplet of the call and is used without a new draw. Writes
    ``queried[t]`` and ``losses[t]`` (0 unless UPDATE) and counts the query in ``qstate[0]``;
    ``qstate[1] >= 0`` is the budget.
    """
    if pending_label != 0.0 and t == start:
        y = pending_label
    else:
        if (qstate[1] >= 0 and qstate[0] >= qstate[1]) or not decide_query(policy, u, margin, delta, rate):
            queried[t] = 0
            losses[t] = 0.0
            return SKIP, 0.0, 0.0
        if not have_labels:
            return ASK, 0.0, 0.0
        y = signs[t]
    queried[t] = 1
    qstate[0] += 1
    loss = 1.0 - y * margin
    if loss <= 0.0:
        losses[t] = 0.0
        return SKIP, y, 0.0
    losses[t] = loss
    return UPDATE, y, loss


@numba.njit(cache=True, inline="always")
def second_order_scalars(rule, loss, conf, eta, gamma, r, sigma_updated):
    """(kappa, s) of a second-order step with confidence ``conf = phi^T Sigma_t phi``.

    Sigma_{t+1} = Sigma_t - kappa (Sigma_t phi)(Sigma_t phi)^T and
    M_{t+1} = M_t + y s Sigma_t phi.

    * CW, eq. (6): kappa = 1 / (gamma + v); eq. (5): s = eta with Sigma_t; Algorithm 2 uses
      Sigma_{t+1} phi = Sigma_t phi * gamma / (gamma + v), i.e. s = eta gamma / (gamma + v).
    * AROW: beta = 1 / (v + r), alpha = l beta; kappa = beta, s = alpha.
    """
    if rule == CW:
        kappa = 1.0 / (gamma + conf)
        s = eta * gamma * kappa if sigma_updated else eta
        return kappa, s
    beta = 1.0 / (conf + r)
    return beta, loss * beta


@numba.njit(cache=True, inline="always")
def entry_update(m, sigma, xij, y, scale, kappa, s, rule, eta, sigma_updated):
    """One touched entry (i, j) of any sparse step; returns (M'_ij, Sigma'_ij).

    PA (Algorithm 1): M'_ij = M_ij + scale X_ij with scale = tau y; no covariance.
    Diagonal CW (eq. 7-8) / AROW: see :func:`diag_entry_update`.
    """
    if rule == PA:
        return m + scale * xij, sigma
    return diag_entry_update(m, sigma, xij, y, kappa, s, rule, eta, sigma_updated)


@numba.njit(cache=True, inline="always")
def diag_entry_update(m, sigma, xij, y, kappa, s, rule, eta, sigma_updated):
    """One entry of the diagonal CW (eq. 7-8) / AROW step; returns (M'_ij, Sigma'_ij).

    Sigma'_ij = Sigma_ij - kappa Sigma_ij^2 X_ij^2 (eq. 8; AROW with kappa = beta).
    M'_ij = M_ij + y s Sigma_ij X_ij (eq. 7, AROW), or M_ij + y eta Sigma'_ij X_ij
    (CW in the Algorithm 2 order).
    """
    us = sigma * xij
    new_sigma = sigma - kappa * us * us
    if rule == CW and sigma_updated:
        return m + y * eta * new_sigma * xij, new_sigma
    return m + y * s * us, new_sigma


# ------------------------------------------------------------------ the sparse kernel


@numba.njit(cache=True)
def train_sparse(
    keys, vals, auxs, counts, shift, max_used,
    diag, diag_aux, d,
    indptr, indices, data,
    triplets, signs, uniforms, start, stop,
    rule, policy, delta, rate, C, eta, gamma, r, sigma_updated,
    have_labels, pending_label, qstate,
    margins, queried, losses,
    zi, zv, slots,
):
    """Process triplets[start:stop] on the sparse store; returns (next_triplet, status, inserts).

    ``qstate = [labels queried so far, budget or -1]``. With ``have_labels`` False a query
    returns NEED_LABEL at that triplet; the caller asks the oracle and calls again with
    ``pending_label`` = its answer (+-1), which the first triplet then uses without re-drawing.
    ``margins[t]`` gets p_t, ``queried[t]`` Z_t and ``losses[t]`` the hinge loss of a queried
    triplet before its update.
    """
    second = rule != PA
    for t in range(start, stop):
        a = triplets[t, 0]
        nz = merge_difference(indptr, indices, data, triplets[t, 1], triplets[t, 2], zi, zv)
        lo, hi = indptr[a], indptr[a + 1]
        need = (hi - lo) * nz
        if counts[1] + need > max_used:
            return t, NEED_ROOM, need
        # pass 1: margin p = <M, X> and confidence v = sum_ij Sigma_ij X_ij^2
        margin = 0.0
        conf = 0.0
        m = 0
        for ii in range(lo, hi):
            i = indices[ii]
            xi = data[ii]
            base = i * d
            acc = 0.0
            cacc = 0.0
            for jj in range(nz):
                j = zi[jj]
                zj = zv[jj]
                if j == i:
                    v = diag[i]
                    sg = diag_aux[i]
                    slots[m] = _DIAGONAL
                else:
                    s = find(keys, base + j, shift)
                    slots[m] = s  # -1: absent
                    if s >= 0:
                        v = vals[s]
                        sg = auxs[s] if second else 1.0
                    else:
                        v = 0.0
                        sg = 1.0
                acc += zj * v
                if second:
                    cacc += sg * zj * zj
                m += 1
            margin += xi * acc
            if second:
                conf += xi * xi * cacc
        margins[t] = margin
        # query decision (eq. 3 for the active policy) and hinge loss
        action, y, loss = query_step(t, start, margin, pending_label, qstate, policy, uniforms[t], delta, rate,
                                     have_labels, signs, queried, losses)
        if action == ASK:
            return t, NEED_LABEL, 0
        if action == SKIP:
            continue
        if rule == PA:
            sq_x, sq_z = sq_norms(data, lo, hi, zv, nz)
            scale = oasis_tau(loss, sq_x, sq_z, C) * y  # Algorithm 1: tau = min(C, l / ||X||_F^2)
            kappa = 0.0
            s2 = 0.0
        else:
            kappa, s2 = second_order_scalars(rule, loss, conf, eta, gamma, r, sigma_updated)
            scale = 0.0
        # pass 2: write the update on the same entries through the slots cached by pass 1
        m = 0
        for ii in range(lo, hi):
            xi = data[ii]
            for jj in range(nz):
                xij = xi * zv[jj]
                s = slots[m]
                m += 1
                if s == _DIAGONAL:
                    j = zi[jj]
                    diag[j], diag_aux[j] = entry_update(diag[j], diag_aux[j], xij, y, scale, kappa, s2, rule, eta,
                                                        sigma_updated)
                    continue
                if s < 0:
                    s = find_or_insert(keys, vals, indices[ii] * d + zi[jj], shift, counts)
                    sg = 1.0  # Sigma_1 = I
                else:
                    sg = auxs[s] if second else 1.0  # PA's store has no aux field (a one-element dummy)
                vals[s], sg = entry_update(vals[s], sg, xij, y, scale, kappa, s2, rule, eta, sigma_updated)
                if second:
                    auxs[s] = sg
    return stop, DONE, 0


# ------------------------------------------------------------------ the full-covariance kernel


@numba.njit(cache=True)
def fused_downdate_matvec(S, pu, pk, phi, u):
    """Apply the pending downdate S -= pk pu pu^T to the upper triangle of S and return
    u = S phi in the same pass (S symmetric, only i <= j stored up to date)."""
    D = S.shape[0]
    for i in range(D):
        u[i] = 0.0
    for i in range(D):
        fi = phi[i]
        acc = 0.0
        if pk != 0.0:
            ci = pk * pu[i]
            for j in range(i, D):
                s = S[i, j] - ci * pu[j]
                S[i, j] = s
                acc += s * phi[j]
                u[j] += s * fi
        else:
            for j in range(i, D):
                s = S[i, j]
                acc += s * phi[j]
                u[j] += s * fi
        # the diagonal term was added twice (acc and u[i]); remove one
        u[i] += acc - S[i, i] * fi


@numba.njit(cache=True)
def flush_downdate(S, pu, pk):
    """Apply a pending downdate S -= pk pu pu^T to the upper triangle."""
    if pk == 0.0:
        return
    D = S.shape[0]
    for i in range(D):
        ci = pk * pu[i]
        for j in range(i, D):
            S[i, j] -= ci * pu[j]


@numba.njit(cache=True)
def train_full(
    M, S, pend, pk_arr, Xd,
    triplets, signs, uniforms, start, stop,
    rule, policy, delta, rate, C, eta, gamma, r, sigma_updated,
    have_labels, pending_label, qstate,
    margins, queried, losses,
    z, phi, u, external,
):
    """Dense M (d x d) and full covariance S (d^2 x d^2, upper triangle) over triplets[start:stop].

    ``pend``/``pk_arr[0]`` hold the deferred rank-one downdate of the last update. Returns
    (next_triplet, status). Query handling as in :func:`train_sparse`. With ``external`` a
    second-order step is left to the caller (BLAS, for large d^2): the kernel fills ``phi``,
    ``losses[t]`` and ``signs[t]`` and returns NEED_UPDATE at triplet t.
    """
    d = M.shape[0]
    for t in range(start, stop):
        a = triplets[t, 0]
        p1 = triplets[t, 1]
        p2 = triplets[t, 2]
        for j in range(d):
            z[j] = Xd[p1, j] - Xd[p2, j]
        margin = 0.0
        for i in range(d):
            xi = Xd[a, i]
            if xi != 0.0:
                acc = 0.0
                for j in range(d):
                    acc += M[i, j] * z[j]
                margin += xi * acc
        margins[t] = margin
        action, y, loss = query_step(t, start, margin, pending_label, qstate, policy, uniforms[t], delta, rate,
                                     have_labels, signs, queried, losses)
        if action == ASK:
            return t, NEED_LABEL
        if action == SKIP:
            continue
        for i in range(d):
            xi = Xd[a, i]
            for j in range(d):
                phi[i * d + j] = xi * z[j]
        if rule == PA:
            sq_x = 0.0
            for i in range(d):
                sq_x += Xd[a, i] * Xd[a, i]
            sq_z = 0.0
            for j in range(d):
                sq_z += z[j] * z[j]
            coef = oasis_tau(loss, sq_x, sq_z, C) * y  # Algorithm 1: M += tau y X
            step = phi
        else:
            if external:
                signs[t] = y
                return t, NEED_UPDATE
            fused_downdate_matvec(S, pend, pk_arr[0], phi, u)
            conf = 0.0
            for k in range(d * d):
                conf += phi[k] * u[k]
            kappa, s2 = second_order_scalars(rule, loss, conf, eta, gamma, r, sigma_updated)
            for k in range(d * d):
                pend[k] = u[k]
            pk_arr[0] = kappa
            coef = y * s2  # eq. (5) / AROW: M += y s Sigma phi
            step = u
        for i in range(d):
            for j in range(d):
                M[i, j] += coef * step[i * d + j]
    return stop, DONE


# ------------------------------------------------------------------ engines


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
