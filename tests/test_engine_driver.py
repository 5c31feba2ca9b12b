"""The engine's shared grow-and-retry loop and work arrays (sparsesim/engine/driver.py)."""

import numpy as np
import scipy.sparse as sp

from sparsesim.engine.driver import YIELD, run_growing, triplet_scratch
from sparsesim.engine.primitives import QUERY_ACTIVE, QUERY_ALL, QUERY_RANDOM, decide_query, sq_norms


def _toy_kernel(capacity, log, yield_at=None):
    """A kernel over triplets 0..9 where triplet t inserts t + 1 entries into a table of ``capacity``."""
    used = [0]

    def kernel(pos):
        log.append(("call", pos))
        for t in range(pos, 10):
            if t == yield_at:
                return t, YIELD
            if used[0] + t + 1 > capacity[0]:
                return t, t + 1
            used[0] += t + 1
        return 10, 0

    return kernel, used


def test_run_growing_makes_room_and_resumes_at_the_triplet_it_stopped():
    capacity, log = [4], []
    kernel, used = _toy_kernel(capacity, log)

    def make_room(need):
        log.append(("room", need))
        capacity[0] *= 2

    assert run_growing(kernel, 0, 10, make_room) == 10
    assert used[0] == sum(range(1, 11))  # every triplet inserted exactly once
    assert log[:4] == [("call", 0), ("room", 3), ("call", 2), ("room", 4)]
    calls = [pos for what, pos in log if what == "call"]
    assert calls == sorted(calls)  # never goes back


def test_run_growing_returns_where_the_kernel_yields_to_its_caller():
    capacity, log = [1000], []
    kernel, used = _toy_kernel(capacity, log, yield_at=6)
    assert run_growing(kernel, 0, 10, lambda need: log.append(("room", need))) == 6
    assert used[0] == sum(range(1, 7))
    assert ("room", 7) not in log


def test_run_growing_asks_at_least_one_insert_of_room():
    asked = []
    state = {"called": 0}

    def kernel(pos):
        state["called"] += 1
        return (pos, 0) if state["called"] == 1 else (5, 0)

    assert run_growing(kernel, 0, 5, asked.append) == 5
    assert asked == [1]


def test_triplet_scratch_is_sized_by_the_longest_row():
    X = sp.csr_matrix(np.array([[1.0, 0, 2, 0], [0, 0, 0, 3], [1, 1, 1, 1]]))
    zi, zv, a, b = triplet_scratch(X, 2)
    assert zi.dtype == np.int64 and zv.dtype == np.float64
    assert zi.shape == zv.shape == (9,)          # x+ - x- has at most 2 * 4 nonzeros
    assert a.shape == b.shape == (4 * 9,) and a.dtype == np.int64
    assert len(triplet_scratch(sp.csr_matrix((0, 3)), 0)) == 2


def test_one_query_policy_with_delta_first():
    assert decide_query(QUERY_ALL, 0.99, 5.0, 1.0, 0.0)
    # active: u < delta / (delta + |p|) = 2 / (2 + 6) = 0.25
    assert decide_query(QUERY_ACTIVE, 0.24, -6.0, 2.0, 0.0)
    assert not decide_query(QUERY_ACTIVE, 0.26, -6.0, 2.0, 0.0)
    assert decide_query(QUERY_RANDOM, 0.3, 100.0, 0.0, 0.4) and not decide_query(QUERY_RANDOM, 0.5, 0.0, 9.0, 0.4)
    data, zv = np.array([3.0, 4.0, 7.0]), np.array([1.0, 2.0, 9.0])
    assert sq_norms(data, 0, 2, zv, 2) == (25.0, 5.0)
