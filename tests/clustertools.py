"""The local Dask cluster the distributed tests start: two worker processes, one thread each, 1 GiB
each (a killed worker is restarted by its nanny), no dashboard, bound to the loopback address."""

from __future__ import annotations


def two_worker_cluster():
    """A ``distributed.LocalCluster`` (a context manager) of two one-thread worker processes."""
    import distributed

    return distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, memory_limit="1GiB",
                                    dashboard_address=":0", host="127.0.0.1")
