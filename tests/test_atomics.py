"""The atomics training threads share out rows and meet with, run by real threads."""

import threading

import numba
import numpy as np

from sparsesim.engine.atomics import FLAG, claim, meet, reset_claims, sync_array


@numba.njit(nogil=True)
def _take_all(sync, tid, n_threads, n_items, size, taken, calls, ends, rounds):
    """Each round: thread 0 resets the counter, all meet, then every thread takes chunks of
    ``size`` items until none is left, marking ``taken[round, item]`` with its id + 1 and counting
    its claims in ``calls[round, tid]``; after the round's last meet thread 0 records the counter."""
    for r in range(rounds):
        if tid == 0:
            reset_claims(sync, n_threads, 1)
        meet(sync, tid, n_threads, 2 * r + 1, False)
        while True:
            k0 = claim(sync, n_threads, size, 1)
            calls[r, tid] += 1
            if k0 >= n_items:
                break
            for k in range(k0, min(k0 + size, n_items)):
                taken[r, k] += tid + 1
        meet(sync, tid, n_threads, 2 * r + 2, False)
        if tid == 0:  # only thread 0 resets: the counter holds this round's total until it does
            ends[r] = sync[FLAG * n_threads + 1]


def test_claims_hand_every_item_to_exactly_one_thread():
    """Whatever the scheduling (one thread may take every item on a loaded machine), every item
    is taken exactly once per round, and every thread claims from that round's counter: each
    makes one last claim that finds the work done, so the counter ends at exactly
    ``size * (chunks + threads)`` -- a reset that reached a thread late would change that count."""
    n_threads, n_items, size, rounds = 2, 1001, 3, 300
    sync = sync_array(n_threads)
    taken = np.zeros((rounds, n_items), np.int64)
    calls = np.zeros((rounds, n_threads), np.int64)
    ends = np.zeros(rounds, np.int64)
    threads = [threading.Thread(target=_take_all, args=(sync, tid, n_threads, n_items, size, taken, calls, ends,
                                                        rounds))
               for tid in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    # each item marked once (1 or 2; a double claim would add up to 3, a missed one stay 0)
    assert set(np.unique(taken)) <= {1, 2}
    chunks = -(-n_items // size)
    assert np.all(calls >= 1)  # every thread claimed in every round
    assert np.all(calls.sum(axis=1) == chunks + n_threads)
    assert np.all(ends == size * (chunks + n_threads))


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
