"""Dask scheduler plumbing, sharded indexes (in-process and on a LocalCluster of worker processes)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.distributed import SCHEDULER_ENV, dask_jobs, resolve_scheduler
from sparsesim.exceptions import ClusterError, InvalidInputError
from sparsesim.topk import top_k_rows
from sparsesim.parallel import run_parallel

distributed = pytest.importorskip("distributed", reason="the dask extra is not installed")


@pytest.fixture(scope="module")
def cluster():
    """Two worker processes, one thread each, small memory (shared by the module's tests)."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, memory_limit="1GiB",
                                  dashboard_address=None, host="127.0.0.1") as local:
        yield local


@pytest.fixture(scope="module")
def client(cluster):
    with distributed.Client(cluster, set_as_default=False) as cl:
        yield cl


# --- scheduler address and the trial runner -------------------------------------------------------
def test_resolve_scheduler_reads_env_and_explicit_wins(monkeypatch):
    monkeypatch.delenv(SCHEDULER_ENV, raising=False)
    assert resolve_scheduler(None) is None
    monkeypatch.setenv(SCHEDULER_ENV, "tcp://127.0.0.1:8786")
    assert resolve_scheduler(None) == "tcp://127.0.0.1:8786"
    assert resolve_scheduler("tcp://10.0.0.2:9000") == "tcp://10.0.0.2:9000"
    with pytest.raises(InvalidInputError, match="tcp://HOST:PORT"):
        resolve_scheduler("not an address")


def test_unreachable_scheduler_is_one_clear_error(monkeypatch):
    monkeypatch.delenv(SCHEDULER_ENV, raising=False)
    with pytest.raises(ClusterError, match="cannot reach the Dask scheduler"):
        with dask_jobs("tcp://127.0.0.1:1", n_jobs=1, timeout=1):
            pass


def _sum_times(X, i):
    return float(X.sum()) * i


def test_dask_jobs_in_process_without_scheduler(monkeypatch):
    monkeypatch.delenv(SCHEDULER_ENV, raising=False)
    X = sp.random(50, 40, density=0.1, format="csr", random_state=0)
    with dask_jobs(None, scatter=[X], n_jobs=1) as session:
        assert not session.distributed and session.n_jobs == 1
        out = run_parallel(_sum_times, [(X, i) for i in range(3)], n_jobs=session.n_jobs)
    assert out == [float(X.sum()) * i for i in range(3)]


def _where_am_i(X, i):
    from distributed import get_worker

    return get_worker().address, float(X.sum()) * i


def test_dask_jobs_runs_trials_on_workers_with_data_scattered_once(cluster, client):
    X = sp.random(400, 300, density=0.05, format="csr", random_state=1)
    with dask_jobs(cluster.scheduler_address, scatter=[X]) as session:
        assert session.distributed and session.n_workers == 2 and session.n_jobs == -1
        out = run_parallel(_where_am_i, [(X, i) for i in range(6)], n_jobs=session.n_jobs)
        # the matrix is one scattered key held by the workers, not a payload of every task
        keys = session.client.run_on_scheduler(
            lambda dask_scheduler: [str(k) for k in dask_scheduler.tasks if "csr_matrix" in str(k)])
    assert len(keys) == 1
    assert [v for _, v in out] == [float(X.sum()) * i for i in range(6)]
    assert {addr for addr, _ in out} <= set(cluster.workers[w].worker_address for w in cluster.workers)


# --- deterministic ties -----------------------------------------------------------------------------
def test_top_k_ties_at_the_kth_place_keep_the_lowest_documents():
    rng = np.random.default_rng(0)
    for _ in range(300):
        S = rng.integers(0, 3, size=(4, int(rng.integers(2, 25)))).astype(float)
        k = int(rng.integers(1, S.shape[1] + 1))
        docs, vals = top_k_rows(S, k)
        for r in range(S.shape[0]):
            expect = np.lexsort((np.arange(S.shape[1]), -S[r]))[:k]
            np.testing.assert_array_equal(docs[r], expect)
            np.testing.assert_array_equal(vals[r], S[r, expect])
