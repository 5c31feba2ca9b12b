import numpy as np
import pytest

from sparsesim.exceptions import InvalidInputError
from sparsesim.triplets import (
    iter_omtrsl_triplets,
    iter_sors_triplets,
    omtrsl_triplets,
    sors_triplets,
    stratified_kfold,
    stratified_split,
)


def _labels(seed=0, n=500, k=7):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, size=n)
    y[:k] = np.arange(k)  # every class present
    y[k : 2 * k] = np.arange(k)  # ... at least twice
    return y


# ------------------------------------------------------------------ splits


def test_stratified_split_keeps_every_class_on_both_sides():
    y = np.array([0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 3, 3] * 3 + [9, 9])
    tr, te = stratified_split(y, 0.7, seed=1)
    assert np.intersect1d(tr, te).size == 0
    assert np.array_equal(np.sort(np.concatenate([tr, te])), np.arange(y.size))
    for c in np.unique(y):
        n_c = np.sum(y == c)
        n_tr = np.sum(y[tr] == c)
        assert 1 <= n_tr <= n_c - 1
        assert abs(n_tr - round(0.7 * n_c)) <= 1


def test_stratified_split_fraction_per_class_and_seeded():
    y = _labels(n=2000)
    tr, te = stratified_split(y, 0.7, seed=3)
    for c in np.unique(y):
        assert abs(np.mean(np.isin(np.flatnonzero(y == c), tr)) - 0.7) < 0.02
    tr2, te2 = stratified_split(y, 0.7, seed=3)
    assert np.array_equal(tr, tr2) and np.array_equal(te, te2)
    tr3, _ = stratified_split(y, 0.7, seed=4)
    assert not np.array_equal(tr, tr3)


@pytest.mark.parametrize(
    "y, frac",
    [
        (np.array([0, 0, 0, 1]), 0.7),  # class with a single document
        (np.zeros(10), 0.7),  # one class
        (np.array([0, 0, 1, 1]), 1.0),  # bad fraction
        (np.array([0.0, 0.0, np.nan, 1.0, 1.0]), 0.5),  # NaN label
    ],
)
def test_stratified_split_refuses_bad_input(y, frac):
    with pytest.raises(InvalidInputError):
        stratified_split(y, frac, seed=0)


def test_kfold_partitions_and_stratifies():
    y = _labels(n=503)
    folds = stratified_kfold(y, 5, seed=0)
    tests = np.concatenate([te for _, te in folds])
    assert np.array_equal(np.sort(tests), np.arange(y.size))
    for tr, te in folds:
        assert np.intersect1d(tr, te).size == 0
        assert set(np.unique(y[tr])) == set(np.unique(y))
        for c in np.unique(y):
            assert abs(np.sum(y[te] == c) - np.sum(y == c) / 5) <= 1
    with pytest.raises(InvalidInputError):
        stratified_kfold(y, 1)


# ------------------------------------------------------------------ SORS


def test_sors_class_constraints_hold():
    y = _labels()
    T = sors_triplets(y, 20000, seed=0)
    assert T.shape == (20000, 3) and T.dtype == np.int64
    assert np.all(y[T[:, 0]] == y[T[:, 1]])
    assert np.all(T[:, 0] != T[:, 1])
    assert np.all(y[T[:, 0]] != y[T[:, 2]])
    assert T.min() >= 0 and T.max() < y.size


def test_sors_distributions_are_uniform():
    # 3 classes of sizes 2, 3, 5: anchor uniform over docs; negative uniform over other-class docs
    y = np.array([0, 0, 1, 1, 1, 2, 2, 2, 2, 2])
    T = sors_triplets(y, 200000, seed=1)
    freq = np.bincount(T[:, 0], minlength=10) / len(T)
    assert np.allclose(freq, 0.1, atol=0.005)
    # positive of an anchor of class 2 is uniform over the 4 other class-2 docs
    sel = T[T[:, 0] == 5]
    assert np.allclose(np.bincount(sel[:, 1], minlength=10)[6:] / len(sel), 0.25, atol=0.02)
    # negative of a class-0 anchor is uniform over the 8 other docs
    sel = T[y[T[:, 0]] == 0]
    assert np.allclose(np.bincount(sel[:, 2], minlength=10)[2:] / len(sel), 1 / 8, atol=0.01)


def test_sors_same_seed_same_stream():
    y = _labels()
    a = sors_triplets(y, 5000, seed=42)
    b = sors_triplets(y, 5000, seed=42)
    c = sors_triplets(y, 5000, seed=43)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    chunks = list(iter_sors_triplets(y, 5000, seed=42, chunk_size=1000))
    assert len(chunks) == 5
    again = np.concatenate(list(iter_sors_triplets(y, 5000, seed=42, chunk_size=1000)))
    assert np.array_equal(np.concatenate(chunks), again)
    # a Generator is accepted too
    g = sors_triplets(y, 10, seed=np.random.default_rng(0))
    assert g.shape == (10, 3)
    assert sors_triplets(y, 0, seed=0).shape == (0, 3)


@pytest.mark.parametrize("y", [np.zeros(10, int), np.array([0, 0, 1]), np.array([]), np.zeros((3, 2))])
def test_sors_refuses_bad_labels(y):
    with pytest.raises(InvalidInputError):
        sors_triplets(y, 10, seed=0)


def test_sors_string_labels():
    y = np.array(["a", "b", "a", "c", "b", "c"])
    T = sors_triplets(y, 1000, seed=0)
    assert np.all(y[T[:, 0]] == y[T[:, 1]]) and np.all(y[T[:, 0]] != y[T[:, 2]])


# ------------------------------------------------------------------ OMTRSL


def test_omtrsl_signs_order_and_constraints():
    y = _labels()
    T, s, t = omtrsl_triplets(y, 20000, seed=0)
    assert T.shape == (20000, 3) and s.shape == (20000,) and t.shape == (20000,)
    assert set(np.unique(s)) == {-1, 1}
    assert abs(np.mean(s == 1) - 0.5) < 0.02
    pos = s == 1
    # y = +1: x_t^1 same class, x_t^2 other class; y = -1: swapped
    assert np.all(y[T[pos, 0]] == y[T[pos, 1]]) and np.all(y[T[pos, 0]] != y[T[pos, 2]])
    assert np.all(y[T[~pos, 0]] == y[T[~pos, 2]]) and np.all(y[T[~pos, 0]] != y[T[~pos, 1]])
    same = np.where(pos, T[:, 1], T[:, 2])
    assert np.all(same != T[:, 0])
    assert np.all(t == 0)


def test_omtrsl_tasks():
    rng = np.random.default_rng(0)
    tasks = np.repeat(np.array([3, 5, 8]), [100, 50, 200])
    y = rng.integers(0, 4, size=tasks.size)
    y[:8] = [0, 0, 1, 1, 2, 2, 3, 3]
    y[100:106] = [0, 0, 1, 1, 2, 2]
    y[150:154] = [0, 0, 1, 1]
    T, s, t = omtrsl_triplets(y, 30000, seed=1, tasks=tasks)
    assert set(np.unique(t)) == {3, 5, 8}
    # a task is drawn uniformly, then the three documents inside it
    assert np.allclose(np.bincount(t)[[3, 5, 8]] / len(t), 1 / 3, atol=0.02)
    for col in range(3):
        assert np.all(tasks[T[:, col]] == t)
    same = np.where(s == 1, T[:, 1], T[:, 2])
    other = np.where(s == 1, T[:, 2], T[:, 1])
    assert np.all(y[same] == y[T[:, 0]]) and np.all(y[other] != y[T[:, 0]]) and np.all(same != T[:, 0])
    # same seed, same stream
    T2, s2, t2 = omtrsl_triplets(y, 30000, seed=1, tasks=tasks)
    assert np.array_equal(T, T2) and np.array_equal(s, s2) and np.array_equal(t, t2)
    chunks = list(iter_omtrsl_triplets(y, 100, seed=1, tasks=tasks, chunk_size=30))
    assert [len(c[0]) for c in chunks] == [30, 30, 30, 10]


def test_omtrsl_refuses_task_with_single_class_or_singleton():
    tasks = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    with pytest.raises(InvalidInputError, match="task"):
        omtrsl_triplets(np.array([0, 0, 1, 1, 2, 2, 2, 2]), 10, seed=0, tasks=tasks)
    with pytest.raises(InvalidInputError, match="task"):
        omtrsl_triplets(np.array([0, 0, 1, 1, 2, 2, 2, 3]), 10, seed=0, tasks=tasks)
    with pytest.raises(InvalidInputError):
        omtrsl_triplets(np.array([0, 1]), 10, seed=0, tasks=np.array([0, 0, 0]))
