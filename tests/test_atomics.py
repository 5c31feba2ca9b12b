"""The atomics training threads share out rows and meet with, run by real threads."""

import threading

import numba
import numpy as np

from sparsesim.engine.atomics import claim, meet, reset_claims, sync_array


@numba.njit(nogil=True)
def _take_all(sync, tid, n_threads, n_items, size, taken, rounds):
    """Each round: thread 0 resets the counter, all meet, then every thread takes chunks of
    ``size`` items until none is left, marking ``taken[round, item]`` with its id + 1."""
    for r in range(rounds):
        if tid == 0:
            reset_claims(sync, n_threads, 1)
        meet(sync, tid, n_threads, 2 * r + 1, False)
        while True:
            k0 = claim(sync, n_threads, size, 1)
            if k0 >= n_items:
                break
            for k in range(k0, min(k0 + size, n_items)):
                taken[r, k] += tid + 1
        meet(sync, tid, n_threads, 2 * r + 2, False)


def test_claims_hand_every_item_to_exactly_one_thread():
    n_threads, n_items, rounds = 2, 1001, 300
    sync = sync_array(n_threads)
    taken = np.zeros((rounds, n_items), np.int64)
    threads = [threading.Thread(target=_take_all, args=(sync, tid, n_threads, n_items, 3, taken, rounds))
               for tid in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    # each item marked once (1 or 2; a double claim would add up to 3, a missed one stay 0)
    assert set(np.unique(taken)) <= {1, 2}
    # both threads took part (a reset that did not reach the other thread would leave it idle)
    assert (taken == 2).any() and (taken == 1).any()


def test_meet_reports_a_short_thread_to_all():
    sync = sync_array(2)
    out = [None, None]

    @numba.njit(nogil=True)
    def step(sync, tid, short):
        return meet(sync, tid, 2, 1, short)

    def run(tid):
        out[tid] = step(sync, tid, tid == 1)

    threads = [threading.Thread(target=run, args=(tid,)) for tid in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert out == [True, True]
