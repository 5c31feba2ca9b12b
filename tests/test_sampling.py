"""Triplet samplers (sparsesim.sampling), the engine's in-place pair scores and the sampled fit of
OASIS / SORS / AdaSORS (sampler, passes, averaging)."""

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.exceptions import InvalidInputError, InvalidParameterError
from sparsesim.learners.bilinear import OASIS, SORS, AdaSORS
from sparsesim.learners.sampled import AVERAGE_CHECKPOINTS
from sparsesim.sampling import (
    SAMPLERS,
    draw_other_class,
    iter_sampled_triplets,
    select_negatives,
)
from sparsesim.triplets import iter_sors_triplets

LEARNERS = [OASIS, SORS, AdaSORS]


def corpus(n=120, d=60, k=4, seed=0):
    """Rows of a few class-specific features plus noise, L2-normalised; labels 0..k-1."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % k
    X = sp.random(n, d, density=0.08, random_state=seed, format="lil")
    for r in range(n):
        X[r, y[r] * 3 + rng.integers(3)] = 1.0
    X = sp.csr_matrix(X)
    X.data = np.abs(X.data)
    X = sp.csr_matrix(X.multiply(1.0 / np.sqrt(np.asarray(X.multiply(X).sum(1)))))
    return X, y


# ------------------------------------------------------------------ selection rules


def test_semihard_pick_is_the_most_similar_negative_below_the_positive():
    rng = np.random.default_rng(1)
    s_ap = rng.normal(size=500)
    s_an = rng.normal(size=(500, 8))
    pick = select_negatives("semihard", s_ap, s_an)
    chosen = s_an[np.arange(500), pick]
    below = s_an < s_ap[:, None]
    has = below.any(1)
    assert has.any() and (~has).any()
    assert np.all(chosen[has] < s_ap[has])
    np.testing.assert_array_equal(chosen[has], np.where(below, s_an, -np.inf).max(1)[has])
    np.testing.assert_array_equal(chosen[~has], s_an[~has].min(1))
    # the margin condition: whenever a pool document is semi-hard, the pick violates the margin too
    semi = below & (s_an > s_ap[:, None] - 1.0)
    assert semi.any(1).sum() > 50
    rows = semi.any(1)
    assert np.all((chosen[rows] > s_ap[rows] - 1.0) & (chosen[rows] < s_ap[rows]))


def test_hard_pick_is_the_most_similar():
    s_an = np.random.default_rng(2).normal(size=(50, 5))
    np.testing.assert_array_equal(select_negatives("hard", np.zeros(50), s_an), s_an.argmax(1))


def test_distance_weighted_skips_zero_loss_negatives_and_is_seeded():
    rng = np.random.default_rng(3)
    s_ap = np.full(400, 0.8)
    s_an = rng.uniform(-0.5, 0.7, size=(400, 6))
    kw = {"s_aa": np.ones(400), "s_nn": np.ones((400, 6))}
    a = select_negatives("distance-weighted", s_ap, s_an, rng=np.random.default_rng(5), **kw)
    b = select_negatives("distance-weighted", s_ap, s_an, rng=np.random.default_rng(5), **kw)
    np.testing.assert_array_equal(a, b)
    chosen = s_an[np.arange(400), a]
    active = (s_an > s_ap[:, None] - 1.0).any(1)
    assert np.all(chosen[active] > s_ap[active] - 1.0)
    assert len(np.unique(a)) > 1  # it samples, it does not always take one position
    with pytest.raises(InvalidInputError):
        select_negatives("distance-weighted", s_ap, s_an)
    with pytest.raises(InvalidInputError, match="sampler"):
        select_negatives("hardest", s_ap, s_an)


def test_draw_other_class_never_draws_the_anchors_class_and_reaches_every_other_document():
    y = np.array([0] * 5 + [1] * 3 + [2] * 7)
    anchors = np.repeat(np.arange(y.size), 200)
    neg = draw_other_class(y, anchors, 3, np.random.default_rng(0))
    assert neg.shape == (anchors.size, 3)
    assert np.all(y[neg] != y[anchors][:, None])
    for c in range(3):
        got = np.unique(neg[y[anchors] == c])
        np.testing.assert_array_equal(got, np.flatnonzero(y != c))


# ------------------------------------------------------------------ streams


def test_uniform_stream_is_the_sors_protocol():
    y = np.arange(300) % 5
    got = list(iter_sampled_triplets(y, 10_000, seed=7, chunk_size=4096))
    ref = list(iter_sors_triplets(y, 10_000, seed=7, chunk_size=4096))
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, r)


def test_passes_revisit_the_same_pairs_in_a_new_order():
    y = np.arange(90) % 3
    chunks = list(iter_sampled_triplets(y, 500, seed=1, n_passes=3, chunk_size=128))
    t = np.concatenate(chunks)
    assert t.shape == (1500, 3)
    first, second = t[:500], t[500:1000]
    assert not np.array_equal(first, second)
    key = lambda a: sorted(map(tuple, a.tolist()))
    assert key(first) == key(second) == key(t[1000:])


@pytest.mark.parametrize("sampler", [s for s in SAMPLERS if s != "uniform"])
def test_mined_stream_ranks_bounded_pools_with_the_score_callback(sampler):
    X, y = corpus()
    calls = []

    def score(pairs):
        calls.append(len(pairs))
        return np.asarray(X[pairs[:, 0]].multiply(X[pairs[:, 1]]).sum(1)).ravel()

    chunks = list(iter_sampled_triplets(y, 700, seed=3, sampler=sampler, score=score, pool_size=6, chunk_size=512,
                                        ))
    t = np.concatenate(chunks)
    assert t.shape == (700, 3)
    assert np.all(y[t[:, 0]] == y[t[:, 1]]) and np.all(y[t[:, 0]] != y[t[:, 2]])
    # one call per chunk of anchors, each of at most chunk * (pool + 1) pairs (self-scores: + pool + 1)
    per_anchor = 6 + 1 + (7 if sampler == "distance-weighted" else 0)
    assert len(calls) == 2 and max(calls) <= 512 * per_anchor and sum(calls) >= 700 * 7
    # anchors and positives are the SORS protocol's
    ref = np.concatenate(list(iter_sors_triplets(y, 700, seed=3, chunk_size=512)))
    np.testing.assert_array_equal(t[:, :2], ref[:, :2])
    again = np.concatenate(list(iter_sampled_triplets(y, 700, seed=3, sampler=sampler, score=score, pool_size=6,
                                                      chunk_size=512)))
    np.testing.assert_array_equal(t, again)
    if sampler == "hard":  # the pick outranks the SORS negative it replaces
        s_new = score(t[:, [0, 2]])
        s_old = score(ref[:, [0, 2]])
        assert np.all(s_new >= s_old) and np.any(s_new > s_old)


def test_semihard_stream_picks_the_most_similar_pool_document_below_the_positive():
    X, y = corpus(seed=4)

    def score(pairs):  # a scaled cosine, so that margins of 1 bite
        return 3.0 * np.asarray(X[pairs[:, 0]].multiply(X[pairs[:, 1]]).sum(1)).ravel()

    t = np.concatenate(list(iter_sampled_triplets(y, 600, seed=0, sampler="semihard", score=score, pool_size=32)))
    ref = np.concatenate(list(iter_sors_triplets(y, 600, seed=0)))  # its negative is in every pool
    s_ap, s_an, s_old = score(t[:, [0, 1]]), score(t[:, [0, 2]]), score(ref[:, [0, 2]])
    below = s_old < s_ap  # the pool had a document below the positive: the pick is one, at least as close
    assert below.mean() > 0.5
    assert np.all(s_an[below] < s_ap[below]) and np.all(s_an[below] >= s_old[below])
    semi = (s_an < s_ap) & (s_an > s_ap - 1.0)  # semi-hard: updates, and is not harder than the positive
    semi_old = (s_old < s_ap) & (s_old > s_ap - 1.0)
    assert np.all(semi[semi_old]) and semi.mean() > semi_old.mean()


def test_mining_needs_a_score():
    with pytest.raises(InvalidInputError, match="score"):
        next(iter_sampled_triplets(np.arange(20) % 2, 10, seed=0, sampler="hard"))


# ------------------------------------------------------------------ engine scores


@pytest.mark.parametrize("cls,kw", [(OASIS, {}), (SORS, {}), (SORS, {"regularizer": "offdiag", "schedule": "invsqrt"}),
                                    (AdaSORS, {}), (AdaSORS, {"keep_zero_state": True})])
def test_engine_scores_equal_the_exported_model(cls, kw):
    X, y = corpus(n=160, d=80, seed=2)
    est = cls(n_triplets=1500, random_state=0, **kw).fit(X, y)
    rng = np.random.default_rng(0)
    single = rng.integers(0, X.shape[0], size=(300, 2))  # distinct anchors: probed
    grouped = np.stack([np.repeat(rng.integers(0, X.shape[0], 10), 40), rng.integers(0, X.shape[0], 400)], 1)
    got = [est.engine_.score_pairs(X, p) for p in (single, grouped)]
    before = est.engine_.store.table.copy()
    est.engine_.score_pairs(X, grouped)
    assert est.engine_.store.table.tobytes() == before.tobytes()  # reads only
    model = est.model_
    for p, g in zip((single, grouped), got):
        ref = model.score_pairs(X[p[:, 0]], X[p[:, 1]])
        np.testing.assert_allclose(g, ref, rtol=1e-6, atol=1e-6)  # (float32 records)


# ------------------------------------------------------------------ learners


@pytest.mark.parametrize("cls", LEARNERS)
def test_uniform_fit_is_the_sors_protocol_bit_for_bit(cls):
    X, y = corpus()
    fitted = cls(n_triplets=3000, random_state=5, sampler="uniform").fit(X, y).model_.W
    ref = cls(n_triplets=3000, random_state=5)
    for chunk in iter_sors_triplets(y, 3000, seed=5, chunk_size=4096):
        ref.partial_fit_triplets(X, chunk)
    W = ref.model_.W
    assert (fitted != W).nnz == 0 and fitted.nnz == W.nnz


@pytest.mark.parametrize("cls", LEARNERS)
@pytest.mark.parametrize("sampler", ["semihard", "distance-weighted"])
def test_mined_fit_is_seeded(cls, sampler):
    X, y = corpus()
    fit = lambda seed: cls(n_triplets=1500, random_state=seed, sampler=sampler, pool_size=8).fit(X, y)
    a, b, c = fit(0), fit(0), fit(1)
    assert (a.model_.W != b.model_.W).nnz == 0
    assert (a.model_.W != c.model_.W).nnz > 0
    assert a.n_triplets_seen_ == 1500
    u = cls(n_triplets=1500, random_state=0).fit(X, y)
    assert (a.model_.W != u.model_.W).nnz > 0  # the sampler changed which triplets the rule saw


def test_semihard_fit_updates_more_often_than_uniform():
    X, y = corpus(n=200, seed=6)
    u = OASIS(n_triplets=4000, random_state=0).fit(X, y)
    s = OASIS(n_triplets=4000, random_state=0, sampler="semihard").fit(X, y)
    assert s.n_updates_ > u.n_updates_


def test_passes_count_every_triplet():
    X, y = corpus()
    est = SORS(n_triplets=800, random_state=0, n_passes=3).fit(X, y)
    assert est.n_triplets_seen_ == 2400


def test_averaging_returns_the_mean_of_the_checkpoints():
    X, y = corpus()
    n = 1000
    avg = OASIS(n_triplets=n, random_state=2, averaging=True, compact=False).fit(X, y)
    ref = OASIS(n_triplets=n, random_state=2, compact=False)
    t = np.concatenate(list(iter_sors_triplets(y, n, seed=2, chunk_size=4096)))
    done, Ws = 0, []
    for f in AVERAGE_CHECKPOINTS:
        stop = int(np.ceil(f * n))
        ref.partial_fit_triplets(X, t[done:stop])
        done = stop
        Ws.append(ref.model_.W.toarray())
    np.testing.assert_allclose(avg.model_.W.toarray(), np.mean(Ws, axis=0), rtol=0, atol=1e-12)
    assert not np.allclose(Ws[0], Ws[-1])
    # the fitted learner continues from the averaged model
    avg.partial_fit_triplets(X, t[:10])
    assert avg.n_triplets_seen_ == n + 10


@pytest.mark.parametrize("params", [{"sampler": "hardest"}, {"pool_size": 0}, {"n_passes": 0}, {"averaging": "yes"}])
def test_bad_sampling_parameters_are_refused(params):
    X, y = corpus()
    with pytest.raises(InvalidParameterError):
        SORS(n_triplets=10, **params).fit(X, y)
