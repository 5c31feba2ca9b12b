"""The engine of every first-order bilinear learner (OASIS, SORS, AdaSORS): a d x d model M in a
row store plus a dense diagonal, the step-size schedule, and the threads that run the compiled
update loop (:mod:`sparsesim.engine.bilinear_loop`) over it, growing or compacting the store's
pool when the loop stops for room.
"""

from __future__ import annotations

import threading

import numpy as np

from .atomics import sync_array
from .bilinear_loop import REBASE_AT, finalize_lazy, padded_homes, train_triplets
from .bilinear_score import score_pairs_store
from .driver import run_growing, triplet_scratch
from .rowstore import RowStore, planned_slots, record_dtype
from .rules import ADASORS, OASIS, SORS
from .segments import GARBAGE, MIN_CAP
from .store import WritableOnUnpickle
from .truncation import truncate_store

__all__ = ["ADASORS", "OASIS", "SORS", "MODE_LAYOUT", "BilinearEngine", "StepSchedule"]

MODE_LAYOUT = {OASIS: "plain", SORS: "row_lazy", ADASORS: "lazy_aux"}


class StepSchedule:
    """Step sizes eta_t (t = 1, 2, ...) and their prefix sums, grown on demand.

    ``kind="constant"``: eta_t = eta0; ``kind="invsqrt"``: eta_t = eta0 / sqrt(t);
    ``kind="pa"``: eta_t = min(eta0, l_t / ||x z^T||_F^2), written by the update loop as each
    triplet's loss is known (:func:`~sparsesim.engine.rules.pa_step`; the steps not yet taken
    read 0).
    """

    KINDS = ("constant", "invsqrt", "pa")

    def __init__(self, eta0: float, kind: str = "constant"):
        if kind not in self.KINDS:
            raise ValueError(f"unknown step schedule {kind!r}; use one of {self.KINDS}")
        self.eta0 = float(eta0)
        self.kind = kind
        self.etas = np.zeros(1)
        self.cum = np.zeros(1)

    def ensure(self, last_step: int) -> None:
        n = self.etas.shape[0]
        if last_step < n:
            return
        size = max(last_step + 1, 2 * n)
        t = np.arange(n, size, dtype=np.float64)
        if self.kind == "constant":
            new = np.full(t.shape, self.eta0)
        elif self.kind == "invsqrt":
            new = self.eta0 / np.sqrt(t)
        else:  # "pa": the loop writes each step as it takes it
            new = np.zeros(t.shape)
        self.etas = np.concatenate([self.etas, new])
        self.cum = np.cumsum(self.etas)
        self.cum[0] = 0.0

    @property
    def cap(self) -> float:
        """The cap of the per-triplet step (``kind="pa"``), 0 for a fixed schedule: the update
        loop's ``C`` under SORS / AdaSORS."""
        return self.eta0 if self.kind == "pa" else 0.0


class BilinearEngine(WritableOnUnpickle):
    """A d x d model M (sparse off-diagonal store + dense diagonal) and the triplet update loop.

    Parameters
    ----------
    d : int
    mode : {OASIS, SORS, ADASORS}
    C : float
        OASIS aggressiveness.
    lam : float
        L1 weight (SORS / AdaSORS).
    prox_diag : bool
        Shrink the diagonal too (SORS-I / AdaSORS-I) or exempt it (-II).
    delta : float
        AdaSORS smoothing.
    schedule : StepSchedule
        eta_t for SORS / AdaSORS.
    identity : bool
        M_1 = I (else M_1 = 0).
    initial_capacity : int
        Record slots of the pool allocated ahead.
    compact : bool
        float32 storage of values and statistics (see :class:`~sparsesim.engine.rowstore.RowStore`).
    budget : sparsesim.memory.MemoryBudget, optional
        Byte limit of the store, transient copy of a compaction included; a compaction that
        would cross it raises :class:`~sparsesim.exceptions.MemoryBudgetError` before allocating.
    drop_zero_state : bool
        AdaSORS only: whenever the pool is compacted, entries of sparse rows whose value is zero
        leave with their H_ij (memory follows nnz(M); a dropped entry restarts with H_ij = 0).
        ``False`` keeps Algorithm 2 exact (memory follows the entries ever touched).
    expected_triplets : int, optional
        Triplets the run is expected to see (the learner's ``n_triplets``). With a ``budget``,
        the first :meth:`partial_fit` reserves an empty pool sized from them and the rows of
        its corpus (:func:`~sparsesim.engine.rowstore.planned_slots`), at most half the budget,
        so the pool rarely grows; untouched slots cost address space only. Not under
        ``drop_zero_state``, whose model depends on when the pool fills.
    n_threads : int
        Threads that update M together, each its own rows (see :func:`train_triplets`); the
        model is the same as with one thread.
    feature_order : {"frequency", "given"}
        How the store numbers the features, fixed at the first :meth:`partial_fit`: by
        descending document frequency in its ``X`` (the columns most updates touch then share
        a few cache lines of a dense row), or as given. The model is the same either way (bit
        for bit, but for SORS's rounding: its rows are rebased when they fill up, which depends
        on where the hash puts each column); every export is in X's numbering.
    """

    def __init__(self, d, mode=OASIS, C=0.1, lam=0.0, prox_diag=True, delta=1e-2, schedule=None,
                 identity=True, initial_capacity=1 << 16, compact=False, budget=None, drop_zero_state=False,
                 expected_triplets=None, n_threads=1, feature_order="frequency"):
        self.d = int(d)
        self.n_threads = int(n_threads)
        self.mode = int(mode)
        self.C = float(C)
        self.lam = float(lam)
        self.prox_diag = bool(prox_diag)
        self.delta = float(delta)
        self.schedule = schedule or StepSchedule(1.0)
        self.budget = budget
        self.drop_zero_state = bool(drop_zero_state) and self.mode == ADASORS
        if budget is not None:
            itemsize = record_dtype(MODE_LAYOUT[self.mode], compact).itemsize
            need = max(MIN_CAP, int(initial_capacity)) * itemsize + 64 * self.d
            if not budget.fits(need):
                budget.fail(need, 0, 0, itemsize, hint=", a smaller initial_capacity")
        self.store = RowStore(self.d, MODE_LAYOUT[self.mode], 1.0 if identity else 0.0, initial_capacity, compact)
        self.expected_triplets = None if expected_triplets is None else int(expected_triplets)
        self.rebase_at = REBASE_AT  # (SORS: the pending threshold at which a row is rebased)
        if feature_order not in ("frequency", "given"):
            raise ValueError(f"unknown feature_order {feature_order!r}; use 'frequency' or 'given'")
        self.feature_order = feature_order
        self.n_seen = 0
        self.n_updates = 0

    def partial_fit(self, X, triplets, signs=None, losses_out=None, steps_out=None):
        """Update M with ``triplets`` (rows of CSR ``X``) in order; returns the hinge losses.

        ``losses_out`` and ``steps_out`` (float64 arrays of ``len(triplets)``, optional) receive
        each triplet's hinge loss and the scale of its update ``M += step * x z^T`` (OASIS:
        ``tau * y``, the step the update took; 0 without an update), so a caller that needs the
        update as factors (:mod:`sparsesim.feedback.versions`) does not recompute it.
        """
        n = triplets.shape[0]
        triplets = np.ascontiguousarray(triplets, dtype=np.int64)
        signs = np.ones(n) if signs is None else np.ascontiguousarray(signs, dtype=np.float64)
        losses = np.zeros(n) if losses_out is None else losses_out
        steps = np.zeros(n) if steps_out is None else steps_out
        if n == 0:
            return losses
        if self.n_seen == 0:
            self._order_features(X)
            self._reserve(X)
        self.schedule.ensure(self.store.step + n)
        run_growing(self.kernel(X, triplets, signs, losses, steps=steps), 0, n, self._compact)
        self.n_seen += n
        self.n_updates += int(np.count_nonzero(losses))
        return losses

    def score_pairs(self, X, pairs) -> np.ndarray:
        """Scores ``X[a] M X[b]^T`` of the rows ``pairs[t] = (a, b)`` of CSR ``X`` under the current M.

        Reads the store in place (:func:`~sparsesim.engine.bilinear_score.score_pairs_store`: no copy
        of M, d integers of scratch); the model is unchanged. Pairs sharing an anchor should be
        consecutive.
        """
        pairs = np.ascontiguousarray(pairs, dtype=np.int64).reshape(-1, 2)
        out = np.empty(pairs.shape[0])
        if pairs.shape[0] == 0:
            return out
        st = self.store
        self.schedule.ensure(st.step)
        scratch = np.full(self.d, -1, np.int64)
        score_pairs_store(st.table, st.rows, st.diag, st.diag_last, st.diag_aux, X.indptr, X.indices, X.data,
                          st.relabel, pairs, st.step, self.schedule.cum, self.lam, self.delta,
                          self.prox_diag and self.mode != OASIS, scratch, out)
        return out

    def kernel(self, X, triplets, signs, losses, train=train_triplets, extra=(), steps=None):
        """``kernel(pos) -> (next, need)`` for :func:`~sparsesim.engine.driver.run_growing`: runs
        ``train`` (the update loop, or an instrumented copy taking ``extra`` last) from triplet
        ``pos`` with ``n_threads`` threads, each with its own work arrays."""
        st = self.store
        n = triplets.shape[0]
        steps = np.zeros(n) if steps is None else steps
        has_last, has_aux = "last" in st.dtype.names, "aux" in st.dtype.names
        n_threads = getattr(self, "n_threads", 1)  # (an engine pickled before threads existed)
        # per thread: z, its column hashes, the rows of x the thread took, the store's numbers of
        # x's features (zi holds a z of up to 2 r + 1 entries, so it is long enough for the rows
        # of any x); shared: one slot per entry
        # of x z^T (homes, slots, prev), per row of x (accs, plan), the threads' meeting points
        scratch = [triplet_scratch(X, 0) for _ in range(n_threads)]
        slots = triplet_scratch(X)[2]
        prev = np.empty(len(slots), np.int32)  # (what a slot's column held: an int32 like the column)
        # (``homes`` runs ROW_PREFETCH_DISTANCE past its last entry: pass 1 prefetches ahead without a bounds test)
        scratch = [(zi, zv, np.empty(len(zi), np.uint64), np.empty(len(zi), np.int64), padded_homes(len(slots)),
                    np.empty(len(zi), np.int64)) for zi, zv in scratch]
        longest = len(scratch[0][0])
        entries = (slots, prev, np.empty(longest), np.empty((longest, 4), np.int64), np.empty(longest, np.int64))
        sync = sync_array(n_threads)
        rebase_at = float(getattr(self, "rebase_at", REBASE_AT))  # (an engine pickled before rows had a base)

        def run(tid, pos, out):
            cols, vals, lasts, auxs = st.views()
            out[tid] = train(
                st.table, cols, vals, lasts, auxs, st.rows, st.state, self.d, st.diag,
                st.diag_last, st.diag_aux, X.indptr, X.indices, X.data, st.relabel, triplets, signs, pos, n, st.step,
                self.schedule.etas, self.schedule.cum, self.C if self.mode == OASIS else self.schedule.cap,
                self.lam, self.delta,
                self.prox_diag, has_last, has_aux, self.mode == SORS, rebase_at, *scratch[tid], *entries, losses,
                steps, tid, n_threads, sync, *extra,
            )

        def kernel(pos):
            out = [None] * n_threads
            sync[:] = 0
            helpers = [threading.Thread(target=run, args=(tid, pos, out)) for tid in range(1, n_threads)]
            for helper in helpers:
                helper.start()
            run(0, pos, out)
            for helper in helpers:
                helper.join()
            pos, st.step, need = out[0]
            return pos, need

        return kernel


    def _order_features(self, X) -> None:
        """Number the store's features by descending document frequency in ``X`` (ties: the
        lower feature first), before the first update; a matrix loaded into the store before
        (a warm start) is reloaded in the new numbering."""
        st = self.store
        if getattr(self, "feature_order", "given") != "frequency" or not st.identity_order:
            return
        df = np.bincount(X.indices, minlength=self.d)
        relabel = np.empty(self.d, np.int64)
        relabel[np.argsort(-df, kind="stable")] = np.arange(self.d)
        st.renumber(relabel)

    def _reserve(self, X) -> None:
        """Reserve the pool for ``expected_triplets`` updates on the rows of ``X``, within half the budget."""
        st = self.store
        if self.budget is None or self.expected_triplets is None or self.drop_zero_state or st.used_slots:
            return
        want = planned_slots(X.nnz / max(1, X.shape[0]), self.expected_triplets, self.d)
        fixed = st.nbytes - st.table.nbytes
        st.reserve(min(want, (self.budget.limit // 2 - fixed) // st.dtype.itemsize))

    def _compact(self, extra: int) -> None:
        """Make room for ``extra`` more slots, within the budget or not at all.

        While at least half of the used pool is live segments, the pool grows to twice its used
        part by one copy. Otherwise (or when that copy would cross the budget, or AdaSORS drops
        zero-state at compactions) all pending shrinkage is applied (zeros leave under SORS) and
        the pool is rebuilt without free segments and tombstones, at twice the live rows."""
        st = self.store
        garbage, top = int(st.state[GARBAGE]), st.used_slots
        if not self.drop_zero_state and 2 * garbage < top:
            # mostly live segments: grow the pool by copying it (no sweep, no rebuild)
            size = max(2 * top, top + extra)
            if self.budget is None or self.budget.fits(st.nbytes + size * st.dtype.itemsize):
                st.extend_pool(size)
                return
        if self.mode != OASIS:
            self._finalize(drop_zeros=self.mode == SORS or self.drop_zero_state)
        keep_dense = self.mode == ADASORS and not self.drop_zero_state
        caps, total, size = st.compacted_size(extra, keep_dense)
        if self.budget is not None:
            itemsize = st.dtype.itemsize
            fixed = st.nbytes - st.table.nbytes
            if not self.budget.fits(st.nbytes + size * itemsize):
                size = total + extra  # no headroom: the smallest pool that takes the next triplet
                need = st.nbytes + size * itemsize  # old and new pool coexist during the copy
                if not self.budget.fits(need) or not self.budget.fits(fixed + size * itemsize):
                    hint = {OASIS: " or compact=True" if not st.compact else "",
                            SORS: ", a larger lam (a sparser M)" + ("" if st.compact else ", compact=True"),
                            ADASORS: ", a larger lam (a sparser M)" + ("" if st.compact else ", compact=True")}[self.mode]
                    self.budget.fail(need, st.nbytes, st.n_entries, itemsize, hint=hint)
        st.compact_pool(caps, size)

    def _finalize(self, drop_zeros: bool) -> None:
        st = self.store
        finalize_lazy(st.table, st.rows, self.d, st.diag, st.diag_last, st.diag_aux, st.step, self.schedule.cum,
                      self.lam, self.mode, self.delta, self.prox_diag, drop_zeros)

    def finalize(self):
        """Apply pending lazy shrinkage so the stored values are M_{t+1} exactly."""
        if self.mode != OASIS:
            self._finalize(drop_zeros=self.mode == SORS)

    def truncate(self, max_entries: int) -> int:
        """Keep the ``max_entries`` off-diagonal entries of M of largest magnitude (pending shrinkage
        applied first); returns how many were removed
        (:func:`~sparsesim.engine.truncation.truncate_store`). Nothing happens while the store holds
        no more records than that."""
        if self.store.n_entries <= int(max_entries):
            return 0
        self.finalize()
        keep_dense = self.mode == ADASORS and not self.drop_zero_state
        return truncate_store(self.store, int(max_entries), keep_dense)

    def export(self):
        """(off-diagonal CSR, diagonal copy) of the current M, all shrinkage applied."""
        self.finalize()
        return self.store.offdiag_csr(), self.store.diagonal()

    def export_W(self, identity: bool = True):
        """M - I (``identity``) or M as one CSR matrix, all shrinkage applied."""
        self.finalize()
        return self.store.to_csr(1.0 if identity else 0.0)
