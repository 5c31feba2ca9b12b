"""The sparse engine and the OASIS / SORS / AdaSORS learners against literal dense references."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone

from reference_bilinear import dense_adasors, dense_oasis, dense_sors, dense_sors_pa
from sparsesim.engine.bilinear import BilinearEngine, SORS as SORS_MODE, StepSchedule
from sparsesim.exceptions import InvalidInputError
from sparsesim.learners.bilinear import OASIS, SORS, AdaSORS
from sparsesim.models import BilinearSimilarity


def random_problem(d=30, n=40, T=300, density=0.2, seed=1):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, random_state=seed, format="csr")
    X.data = rng.normal(size=X.data.size)
    triplets = rng.integers(0, n, size=(T, 3))
    return X, triplets, rng


def dense_M(model: BilinearSimilarity):
    M = model.M.toarray()
    return M


def test_oasis_matches_dense_reference():
    X, triplets, rng = random_problem()
    signs = rng.choice([-1.0, 1.0], size=len(triplets))
    est = OASIS(C=0.3, compact=False).partial_fit_triplets(X, triplets[:120], signs[:120]).partial_fit_triplets(X, triplets[120:], signs[120:])
    ref = dense_oasis(X.toarray(), triplets, 0.3, signs=signs)
    np.testing.assert_allclose(dense_M(est.model_), ref, rtol=0, atol=1e-10)
    assert 0 < est.n_updates_ <= len(triplets)


@pytest.mark.parametrize("regularizer", ["l1", "offdiag"])
@pytest.mark.parametrize("schedule", ["constant", "invsqrt"])
def test_sors_matches_dense_reference(regularizer, schedule):
    X, triplets, _ = random_problem()
    est = SORS(regularizer=regularizer, lam=0.05, eta=0.1, schedule=schedule, initial_capacity=16, compact=False)
    est.partial_fit_triplets(X, triplets)
    etas = est.engine_.schedule.etas[1:len(triplets) + 1]
    ref = dense_sors(X.toarray(), triplets, 0.05, etas, offdiag=regularizer == "offdiag")
    np.testing.assert_allclose(dense_M(est.model_), ref, rtol=0, atol=1e-10)
    assert est.model_.nnz() == np.count_nonzero(ref)


@pytest.mark.parametrize("regularizer", ["l1", "offdiag"])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_sors_per_triplet_step_matches_dense_reference(regularizer, n_threads):
    """schedule="pa": eta_t = min(C, l_t / ||x z^T||^2) taken per triplet, then the paper's prox
    at eta_t * lam; in two calls (the steps already taken are kept) and with two threads."""
    X, triplets, rng = random_problem(seed=4)
    signs = rng.choice([-1.0, 1.0], size=len(triplets))
    est = SORS(regularizer=regularizer, lam=0.05, eta=0.3, schedule="pa", initial_capacity=16, compact=False,
               n_threads=n_threads)
    est.partial_fit_triplets(X, triplets[:130], signs[:130]).partial_fit_triplets(X, triplets[130:], signs[130:])
    ref = dense_sors_pa(X.toarray(), triplets, 0.05, 0.3, offdiag=regularizer == "offdiag", signs=signs)
    np.testing.assert_allclose(dense_M(est.model_), ref, rtol=0, atol=1e-10)
    assert est.model_.nnz() == np.count_nonzero(ref)
    etas = est.engine_.schedule.etas[1:len(triplets) + 1]
    assert 0 < np.count_nonzero(etas) < len(triplets) and etas.max() <= 0.3
    assert np.any((etas > 0) & (etas < 0.3)), "the test needs steps below the cap"
    with pytest.raises(InvalidInputError, match="schedule"):
        AdaSORS(schedule="pa").fit(X, np.arange(X.shape[0]) % 3)


def skewed_problem(d=150, n=60, T=400, seed=5):
    """Features 0..7 in most documents, the rest rare: the frequent features' rows of M turn
    dense, the others stay sparse, and z often holds the row's own feature (the diagonal)."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.04, random_state=seed, format="lil")
    X[:, :8] = rng.normal(size=(n, 8)) * (rng.random((n, 8)) < 0.8)
    X = sp.csr_matrix(X)
    X.data = np.where(X.data == 0, 0.5, X.data)
    X.eliminate_zeros()
    triplets = rng.integers(0, n, size=(T, 3))
    return X, triplets[triplets[:, 1] != triplets[:, 2]], rng


@pytest.mark.parametrize("learner", ["oasis", "sors-l1", "sors-offdiag", "adasors"])
def test_dense_and_sparse_rows_together_match_dense_reference(learner):
    """Pass 1 reads a dense row without probing (its records at off + j, the diagonal's value in
    place of its column's record), and the give-back of a zero-loss triplet skips dense rows:
    on a problem where some rows are dense and the others sparse, every learner still learns
    the literal dense update."""
    X, triplets, rng = skewed_problem()
    signs = rng.choice([-1.0, 1.0], size=len(triplets))
    Xd = X.toarray()
    if learner == "oasis":
        est = OASIS(C=0.3, compact=False).partial_fit_triplets(X, triplets, signs)
        ref = dense_oasis(Xd, triplets, 0.3, signs=signs)
    elif learner.startswith("sors"):
        reg = learner.split("-")[1]
        est = SORS(regularizer=reg, lam=0.02, eta=0.1, compact=False).partial_fit_triplets(X, triplets)
        etas = est.engine_.schedule.etas[1:len(triplets) + 1]
        ref = dense_sors(Xd, triplets, 0.02, etas, offdiag=reg == "offdiag")
    else:
        est = AdaSORS(lam=0.02, eta=0.1, delta=0.1, compact=False, keep_zero_state=True).partial_fit_triplets(X, triplets)
        etas = est.engine_.schedule.etas[1:len(triplets) + 1]
        ref = dense_adasors(Xd, triplets, 0.02, etas, 0.1, offdiag=False)
    rows = est.engine_.store.rows
    n_dense = est.engine_.store.n_dense_rows
    assert 0 < n_dense < np.count_nonzero(rows[:, 1]), "the test needs dense and sparse rows"
    np.testing.assert_allclose(dense_M(est.model_), ref, rtol=0, atol=1e-10)
    assert 0 < est.n_updates_ < len(triplets) or learner == "oasis"


@pytest.mark.parametrize("regularizer", ["l1", "offdiag"])
@pytest.mark.parametrize("schedule", ["constant", "invsqrt"])
def test_adasors_matches_dense_reference(regularizer, schedule):
    X, triplets, _ = random_problem(seed=3)
    est = AdaSORS(regularizer=regularizer, lam=0.05, eta=0.1, delta=0.1, schedule=schedule, initial_capacity=16,
                  compact=False, keep_zero_state=True)
    est.partial_fit_triplets(X, triplets)
    etas = est.engine_.schedule.etas[1:len(triplets) + 1]
    ref = dense_adasors(X.toarray(), triplets, 0.05, etas, 0.1, offdiag=regularizer == "offdiag")
    np.testing.assert_allclose(dense_M(est.model_), ref, rtol=0, atol=1e-10)
    assert est.model_.nnz() == np.count_nonzero(ref)


def eager_sors(X, triplets, lam, eta, prox_diag):
    """Eager truncation: after every step, shrink every stored entry (the engine's lazy rule off)."""
    d = X.shape[1]
    eng = BilinearEngine(d, SORS_MODE, lam=lam, prox_diag=prox_diag, schedule=StepSchedule(eta), initial_capacity=16)
    for t in range(len(triplets)):
        eng.partial_fit(X, triplets[t:t + 1])
        eng.finalize()  # applies this step's shrinkage to every entry now
    return eng.export()


@pytest.mark.parametrize("prox_diag", [True, False])
def test_lazy_and_eager_truncation_agree(prox_diag):
    X, triplets, _ = random_problem(d=25, T=200, seed=5)
    lazy = BilinearEngine(X.shape[1], SORS_MODE, lam=0.02, prox_diag=prox_diag, schedule=StepSchedule(0.2),
                          initial_capacity=16)
    lazy.partial_fit(X, triplets)
    off_l, diag_l = lazy.export()
    off_e, diag_e = eager_sors(X, triplets, 0.02, 0.2, prox_diag)
    np.testing.assert_allclose(off_l.toarray(), off_e.toarray(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(diag_l, diag_e, rtol=0, atol=1e-12)
    assert off_l.nnz == off_e.nnz


@pytest.mark.parametrize("compact", [False, True])
def test_sors_rows_rebased_at_any_threshold_learn_the_same_model(compact):
    """SORS stores an entry's value as of its row's base step (rules.at_base). Rebasing a row
    (every entry brought to the current step) whenever it is touched, or never, or at the
    engine's default threshold changes only rounding (float64), or stays within float32 rounding
    of the dense reference (compact)."""
    X, triplets, _ = random_problem(d=30, n=40, T=600, seed=13)
    models = {}
    for rebase_at in (0.0, 0.25, np.inf):
        eng = BilinearEngine(X.shape[1], SORS_MODE, lam=0.02, schedule=StepSchedule(0.5), initial_capacity=16,
                             compact=compact)
        eng.rebase_at = rebase_at
        eng.partial_fit(X, triplets)
        models[rebase_at] = eng.export_W().toarray()
        assert eng.store.step == len(triplets)
    assert 0.02 * 0.5 * len(triplets) > 20 * 0.25  # (the default threshold was passed many times)
    ref = dense_sors(X.toarray(), triplets, 0.02, np.full(len(triplets), 0.5), offdiag=False) - np.eye(X.shape[1])
    tol = 1e-5 if compact else 1e-12
    np.testing.assert_allclose(models[0.0], ref, rtol=0, atol=tol)
    np.testing.assert_allclose(models[0.25], ref, rtol=0, atol=tol)
    if not compact:  # (float32 records of a row never rebased carry offsets up to 6: not a product setting)
        np.testing.assert_allclose(models[np.inf], ref, rtol=0, atol=tol)


def zipf_problem(d=80, n=60, T=400, seed=17):
    """Rows whose features follow a skewed frequency (feature 79 the most frequent), so that
    ordering the store's features by frequency is far from the identity."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, d + 1)
    p = p[::-1] / p.sum()
    rows = [np.unique(rng.choice(d, size=12, p=p)) for _ in range(n)]
    X = sp.csr_matrix((rng.normal(size=sum(map(len, rows))), np.concatenate(rows),
                       np.concatenate([[0], np.cumsum(list(map(len, rows)))])), shape=(n, d))
    triplets = rng.integers(0, n, size=(T, 3))
    return X, triplets[triplets[:, 1] != triplets[:, 2]], rng


@pytest.mark.parametrize("mode,params", [(0, {"C": 0.3}), (SORS_MODE, {"lam": 0.01}), (2, {"lam": 0.01, "delta": 0.1})])
def test_features_numbered_by_frequency_learn_the_same_model(mode, params):
    """The store numbers features by descending document frequency; the arithmetic is the same
    in any numbering, so the model is too, and exports are in X's numbering. Bit for bit but for
    SORS, whose rows are rebased (a shrinkage split into two subtractions) when they fill up,
    which depends on where in a segment the hash puts each column."""
    X, triplets, _ = zipf_problem()
    engines = {}
    for order in ("frequency", "given"):
        eng = BilinearEngine(X.shape[1], mode, schedule=StepSchedule(0.5), initial_capacity=16, feature_order=order,
                             **params)
        eng.partial_fit(X, triplets[:150])
        eng.partial_fit(X, triplets[150:])
        engines[order] = eng
    freq, given = engines["frequency"], engines["given"]
    df = np.bincount(X.indices, minlength=X.shape[1])
    assert freq.store.relabel[np.argmax(df)] == 0 and not freq.store.identity_order
    assert given.store.identity_order
    W_f, W_g = freq.export_W(), given.export_W()
    assert W_f.nnz > 100 and W_f.has_sorted_indices
    for name in ("indptr", "indices"):
        np.testing.assert_array_equal(getattr(W_f, name), getattr(W_g, name))
    if mode == SORS_MODE:
        np.testing.assert_allclose(W_f.data, W_g.data, rtol=0, atol=1e-12)
    else:
        np.testing.assert_array_equal(W_f.data, W_g.data)
    np.testing.assert_array_equal(freq.export()[1], given.export()[1])


def test_a_warm_start_is_renumbered_with_the_first_update():
    """A model loaded before the first update (a served model that keeps learning) is reloaded
    in the frequency numbering when that update fixes it: the same model as in X's numbering."""
    X, triplets, _ = zipf_problem(seed=19)
    start = sp.random(80, 80, density=0.05, random_state=3, format="csr")
    models = []
    for order in ("frequency", "given"):
        eng = BilinearEngine(80, SORS_MODE, lam=0.01, schedule=StepSchedule(0.5), initial_capacity=16,
                             feature_order=order)
        eng.store.load_csr(start, diag_offset=1.0)
        np.testing.assert_allclose(eng.export_W().toarray(), start.toarray(), rtol=0, atol=1e-15)  # (diag + 1 - 1)
        eng.partial_fit(X, triplets)
        assert eng.store.identity_order == (order == "given")
        models.append(eng.export_W())
    np.testing.assert_allclose(models[0].toarray(), models[1].toarray(), rtol=0, atol=1e-12)
    assert models[0].nnz == models[1].nnz
    with pytest.raises(ValueError, match="permutation"):
        BilinearEngine(5).store.set_order(np.array([0, 0, 1, 2, 3]))
    with pytest.raises(ValueError, match="feature_order"):
        BilinearEngine(5, feature_order="alphabetical")


def test_table_growth_and_sweeps_keep_the_model_exact():
    # the learner reserves its pool up front; an engine started at 16 slots without a reserve
    # goes through many row moves, pool growths and sweeps
    X, triplets, _ = random_problem(d=60, n=50, T=400, density=0.3, seed=7)
    reserved = SORS(lam=0.01, eta=0.5, compact=False).partial_fit_triplets(X, triplets[:1])
    pool = reserved.engine_.store.capacity
    reserved.partial_fit_triplets(X, triplets[1:])
    small = BilinearEngine(X.shape[1], SORS_MODE, lam=0.01, schedule=StepSchedule(0.5), initial_capacity=16)
    small.partial_fit(X, triplets)
    W_small = small.export_W()
    # sweeps split a skipped shrinkage into two subtractions: equal up to rounding
    np.testing.assert_allclose(reserved.model_.W.toarray(), W_small.toarray(), rtol=0, atol=1e-12)
    assert reserved.model_.W.nnz == W_small.nnz
    assert small.store.capacity > 16
    assert reserved.engine_.store.capacity == pool >= 60 * 59  # room for every off-diagonal entry: never grew


def test_pool_reserve_follows_the_data_and_the_budget():
    from sparsesim.engine.rowstore import planned_slots

    X, triplets, _ = random_problem(d=60, n=50, T=20, density=0.3, seed=7)
    # sized from the triplet budget: 2 r^2 entries per triplet, 3 slots each, at most 2 d^2 slots
    r = X.nnz / X.shape[0]
    assert planned_slots(r, 10, 10_000) == int(3 * 10 * 2 * r * r)
    assert planned_slots(r, 10, 60) == 2 * 60 * 60
    few = SORS(lam=0.01, eta=0.5, n_triplets=1, initial_capacity=16, compact=False).partial_fit_triplets(X, triplets[:1])
    assert few.engine_.store.capacity == planned_slots(r, 1, 60) == int(3 * 2 * r * r)
    # within half the memory budget, whatever the triplet budget asks
    est = OASIS(C=0.1, n_triplets=10**6, max_memory=60_000, initial_capacity=16).partial_fit_triplets(X, triplets[:1])
    assert 16 * est.engine_.store.dtype.itemsize < est.engine_.store.nbytes <= 30_000
    assert 30_000 < 2 * 60 * 60 * est.engine_.store.dtype.itemsize
    # memory in use follows the rows, not the reserve
    assert est.store_nbytes_ < est.engine_.store.nbytes


def test_a_pickled_learner_carries_only_the_used_pool():
    import pickle

    X, triplets, _ = random_problem(d=60, n=50, T=200, density=0.3, seed=7)
    est = SORS(lam=0.01, eta=0.5, compact=False).partial_fit_triplets(X, triplets[:100])
    blob = pickle.dumps(est)
    assert len(blob) < est.engine_.store.nbytes / 4  # the reserve is not copied
    again = pickle.loads(blob)
    # the pool comes back at its capacity (untouched address space), so it fills up, and is
    # compacted, exactly when the original's would
    assert again.engine_.store.capacity == est.engine_.store.capacity
    assert again.engine_.store.used_slots == est.engine_.store.used_slots
    est.partial_fit_triplets(X, triplets[100:])
    again.partial_fit_triplets(X, triplets[100:])
    np.testing.assert_allclose(again.model_.W.toarray(), est.model_.W.toarray(), rtol=0, atol=1e-12)
    assert again.model_.W.nnz == est.model_.W.nnz


def test_row_moves_and_compaction_keep_every_entry_reachable():
    """The row store against a dict model: inserts, tombstones, rows moving to larger segments
    (one of them turning dense), and compactions that drop garbage, tombstones and the zero
    records of a dense row that turns sparse again; every entry stays findable with its value
    and statistics."""
    from sparsesim.engine import rowstore, segments as R

    rng = np.random.default_rng(3)
    d = 400
    st = rowstore.RowStore(d, "lazy_aux", initial_capacity=64)
    model = {}

    def room(i, k):  # as the update loop makes room for one row of x
        rows_of_x, plan = np.array([i], np.int32), np.empty((1, 4), np.int64)
        if not R.plan_moves(st.table["col"], st.rows, st.state, rows_of_x, 0, 1, k, d, plan):
            caps, _, size = st.compacted_size(R.fitted_cap(st.rows[i, R.LIVE] + k, d))
            st.compact_pool(caps, size)
            assert R.plan_moves(st.table["col"], st.rows, st.state, rows_of_x, 0, 1, k, d, plan)
        R.move_planned(*st.views(), st.rows, i, d, plan, 0, True, True)
        R.release_planned(st.table["col"], st.state, 1, d, plan)
        assert not R.needs_room(st.rows, i, k)

    def insert(i, j, free):  # as pass 1 inserts an absent entry at the free slot its probe found
        if st.table["col"][free] == R.EMPTY:
            st.rows[i, R.USED] += 1
        st.rows[i, R.LIVE] += 1
        st.table["col"][free] = j
        return free

    def slot(i, j):
        return R.probe(st.table["col"], st.rows, i, j, R.home(st.rows, i, j, np.uint64(R.col_hash(j))))

    for rnd in range(300):
        i = int(rng.choice([5, 7, 11, rng.integers(d)]))
        js = rng.choice(d, size=int(rng.integers(1, 40)), replace=False)
        room(i, len(js))
        for j in js:
            s = slot(i, j)
            if s < 0:
                s = insert(i, j, -2 - s)
            st.table["val"][s], st.table["last"][s], st.table["aux"][s] = rng.normal(), rnd, rnd + 0.5
            model[(i, int(j))] = (st.table["val"][s], rnd)
        for (i2, j2) in [k for k in model if k[0] == i != 5 and rng.random() < 0.3]:  # some entries die
            s = slot(i2, j2)
            st.table["val"][s] = 0.0
            R.remove_at(st.table["col"], st.rows, i2, s)
            del model[(i2, j2)]
        if rnd == 200:  # row 5 loses almost everything: at the next compaction it turns sparse again
            assert st.rows[5, R.SHIFT] < 0, "the test needs a dense row"
            for (i2, j2) in [k for k in model if k[0] == 5][3:]:
                s = slot(i2, j2)
                st.table["val"][s] = 0.0
                R.remove_at(st.table["col"], st.rows, i2, s)
                del model[(i2, j2)]
            caps, _, size = st.compacted_size(0)
            st.compact_pool(caps, size)
            assert st.rows[5, R.SHIFT] >= 0
    assert st.state[R.GARBAGE] > 0 and st.n_dense_rows >= 1
    caps, _, size = st.compacted_size(0)
    st.compact_pool(caps, size)
    assert st.state[R.GARBAGE] == 0 and not np.any(st.table["col"][:st.used_slots] == R.TOMBSTONE)
    for (i, j), (v, rnd) in model.items():
        s = slot(i, j)
        assert s >= 0 and st.table["val"][s] == v and st.table["last"][s] == rnd and st.table["aux"][s] == rnd + 0.5
    W = st.offdiag_csr()
    assert W.nnz == len(model)
    for (i, j), (v, _) in model.items():
        assert W[i, j] == v


def test_fit_is_deterministic_and_learns():
    rng = np.random.default_rng(0)
    n, d = 120, 50
    y = np.repeat([0, 1, 2], n // 3)
    centers = rng.normal(size=(3, d)) * (rng.random((3, d)) < 0.2)
    X = sp.csr_matrix(np.maximum(centers[y] + 0.5 * rng.normal(size=(n, d)) * (rng.random((n, d)) < 0.3), 0))
    a = OASIS(n_triplets=500, random_state=4).fit(X, y)
    b = clone(a).fit(X, y)
    np.testing.assert_array_equal(a.model_.W.toarray(), b.model_.W.toarray())
    c = OASIS(n_triplets=500, random_state=5).fit(X, y)
    assert not np.array_equal(a.model_.W.toarray(), c.model_.W.toarray())
    assert a.get_params()["C"] == "auto" and a.resolved_params_["C"] > 0 and a.n_triplets_seen_ == 500


@pytest.mark.parametrize("cls", [OASIS, SORS, AdaSORS])
def test_bad_input_refused(cls):
    X, triplets, _ = random_problem()
    with pytest.raises(InvalidInputError, match="shape"):
        cls().partial_fit_triplets(X, triplets[:, :2])
    with pytest.raises(InvalidInputError, match="lie in"):
        cls().partial_fit_triplets(X, triplets + 1000)
    bad = X.copy()
    bad.data[0] = np.nan
    with pytest.raises(InvalidInputError, match="NaN"):
        cls().partial_fit_triplets(bad, triplets)
    est = cls().partial_fit_triplets(X, triplets[:5])
    with pytest.raises(InvalidInputError, match="feature-count mismatch"):
        est.partial_fit_triplets(sp.random(5, X.shape[1] + 1, density=0.5, format="csr"), triplets[:2] % 5)
    with pytest.raises(InvalidInputError, match="at least two"):
        cls(n_triplets=10).fit(X, np.zeros(X.shape[0]))


def test_invalid_hyperparameters_refused():
    X, triplets, _ = random_problem()
    with pytest.raises(InvalidInputError, match="regularizer"):
        SORS(regularizer="l2").partial_fit_triplets(X, triplets)
    with pytest.raises(InvalidInputError, match=r"C must be positive \(a finite number in \(0, inf\)\)"):
        OASIS(C=0).partial_fit_triplets(X, triplets)


@pytest.mark.parametrize("cls,params", [(OASIS, {"C": 0.3}), (SORS, {"lam": 0.01}),
                                        (AdaSORS, {"lam": 0.01, "delta": 0.1})])
def test_compact_storage_matches_float64_to_float32_precision(cls, params):
    X, triplets, _ = random_problem(seed=11)
    full = cls(compact=False, **params).partial_fit_triplets(X, triplets)
    small = cls(compact=True, **params).partial_fit_triplets(X, triplets)
    assert small.engine_.store.table.dtype.itemsize < full.engine_.store.table.dtype.itemsize
    np.testing.assert_allclose(small.model_.M.toarray(), full.model_.M.toarray(), rtol=0, atol=1e-4)


BOUNDS_CHECKED_FITS = r"""
from sparsesim.data.synthetic import rcv1_like
from sparsesim.learners.bilinear import OASIS, SORS, AdaSORS
from sparsesim.validation import available_cores
data = rcv1_like(300, seed=0)
X, y = data.X, data.y
for est in (OASIS(n_triplets=400, random_state=0, initial_capacity=16),
            SORS(n_triplets=400, random_state=0, initial_capacity=16, compact=False),
            SORS(regularizer="offdiag", schedule="invsqrt", n_triplets=400, random_state=0, initial_capacity=16),
            AdaSORS(n_triplets=400, random_state=0, initial_capacity=16),
            AdaSORS(n_triplets=400, random_state=0, initial_capacity=16, keep_zero_state=True)):
    est.fit(X, y)
    if available_cores() >= 2:  # and with two threads moving and updating their rows at once
        est.set_params(n_threads=2).fit(X, y)
print("ok")
"""


def test_engine_kernels_stay_in_bounds(tmp_path):
    """The update loop, row moves, sweeps and compactions of every bilinear learner, compiled with
    numba's bounds checks (the kernels are built without them: a stray index would read or write
    another array's memory silently)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    done = subprocess.run([sys.executable, "-c", BOUNDS_CHECKED_FITS], env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "ok"


TWO_CORES = pytest.mark.skipif(__import__("sparsesim.validation", fromlist=["available_cores"]).available_cores() < 2,
                               reason="training threads run one per core; this machine has one")


@TWO_CORES
@pytest.mark.parametrize("cls,params", [(OASIS, {}), (SORS, {"eta": 200.0}),
                                        (SORS, {"regularizer": "offdiag", "schedule": "invsqrt", "eta": 500.0}),
                                        (AdaSORS, {"eta": 5.0}), (AdaSORS, {"eta": 5.0, "keep_zero_state": True})])
def test_two_threads_learn_the_same_model_bit_for_bit(cls, params):
    """Each thread updates its own rows; the pool hands out the same segments and the margin is
    summed in one order, so the model, the pool's layout and when it fills (compactions, which
    AdaSORS's dropped state depends on) are those of one thread. The pool starts at 16 slots
    and is reserved for 50 triplets, so it grows and compacts under the threads."""
    from sparsesim.data.synthetic import rcv1_like

    data = rcv1_like(300, seed=0)
    rng = np.random.default_rng(0)
    triplets = np.tile(np.column_stack([rng.integers(0, 300, 300) for _ in range(3)]), (2, 1))  # seen twice
    runs = []
    for n_threads in (1, 2):
        est = cls(n_triplets=50, initial_capacity=16, n_threads=n_threads, **params)
        compactions = []
        est.partial_fit_triplets(data.X, triplets[:20])  # (creates the engine)
        original = est.engine_._compact
        est.engine_._compact = lambda extra: (compactions.append(extra), original(extra))
        est.partial_fit_triplets(data.X, triplets[20:])
        runs.append((est, len(compactions)))
    (one, grew_one), (two, grew_two) = runs
    assert grew_one > 0 and grew_one == grew_two
    assert two.engine_.n_threads == 2 and one.n_updates_ == two.n_updates_ > 0
    assert one.n_updates_ < len(triplets)  # zero-loss triplets gave the entries they inserted back
    np.testing.assert_array_equal(one.engine_.store.rows, two.engine_.store.rows)
    np.testing.assert_array_equal(one.engine_.store.state, two.engine_.store.state)
    W1, W2 = one.model_.W, two.model_.W
    assert W1.nnz > 0
    for name in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(W1, name), getattr(W2, name))


def test_thread_count_is_validated():
    from sparsesim.exceptions import InvalidParameterError, ResourceLimitError

    X, triplets, _ = random_problem()
    with pytest.raises(InvalidParameterError, match="n_threads"):
        SORS(n_threads=0).partial_fit_triplets(X, triplets)
    with pytest.raises(ResourceLimitError, match="n_threads"):
        SORS(n_threads=10_000).partial_fit_triplets(X, triplets)
