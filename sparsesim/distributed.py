"""Scheduler plumbing for running sparsesim on a Dask cluster (optional extra ``sparsesim[dask]``).

Everything here is optional: without a scheduler address (``None`` and no ``SPARSESIM_SCHEDULER``
in the environment) every caller runs in-process as before, and ``distributed`` is never
imported. With an address, the helpers connect a :class:`distributed.Client` to a running
scheduler (``dask scheduler`` + ``dask worker ADDRESS``, see ``docs/distributed.md``).

Public helpers
--------------
``resolve_scheduler(address=None) -> str | None``
    The explicit address, else ``$SPARSESIM_SCHEDULER``, else ``None`` (in-process).
``require_distributed()``
    Import ``distributed`` or raise :class:`~sparsesim.exceptions.MissingDependencyError`
    naming the extra.
``connect(address)``
    Context manager yielding a connected ``Client`` (closed on exit).
``dask_jobs(address, scatter=())``
    Context manager for trial runners (tuning, experiments): inside it,
    ``run_parallel(..., n_jobs=session.n_jobs)`` runs its jobs as Dask tasks through joblib's
    dask backend, with the objects in ``scatter`` (e.g. the training matrix) sent to the
    workers once instead of with every task. Without an address it yields an in-process
    session and changes nothing.
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from .exceptions import ClusterError, InvalidInputError, MissingDependencyError

__all__ = ["SCHEDULER_ENV", "DASK_EXTRA_HINT", "resolve_scheduler", "require_distributed", "connect", "dask_jobs",
           "DaskSession", "worker_addresses"]

SCHEDULER_ENV = "SPARSESIM_SCHEDULER"
DASK_EXTRA_HINT = 'install the optional extra: pip install "sparsesim[dask]"'
_ADDRESS = re.compile(r"^(?:(tcp|tls|ws|wss|inproc|ucx)://)?[^\s/:]+(?::\d{1,5})?$")


def resolve_scheduler(address: str | None = None) -> str | None:
    """The scheduler to use: ``address`` if given, else ``$SPARSESIM_SCHEDULER``, else ``None``.

    An empty string counts as "not set". ``None`` means: run in this process.

    Raises
    ------
    InvalidInputError
        The address is not of the form ``[tcp://]HOST[:PORT]``.
    """
    if address is None or not str(address).strip():
        address = os.environ.get(SCHEDULER_ENV, "")
    address = str(address).strip()
    if not address:
        return None
    if not _ADDRESS.match(address):
        raise InvalidInputError(f"scheduler address {address!r} is not of the form tcp://HOST:PORT "
                                f"(e.g. tcp://127.0.0.1:8786)")
    return address


def require_distributed():
    """Import and return the ``distributed`` module, or raise a one-line error naming the extra."""
    try:
        import distributed  # noqa: WPS433 - optional dependency, imported only when a cluster is used
    except ImportError as exc:
        raise MissingDependencyError(f"running on a Dask scheduler needs the 'distributed' package "
                                     f"({exc.name or exc}); {DASK_EXTRA_HINT}") from None
    return distributed


@contextmanager
def connect(address: str, timeout: float = 10.0) -> Iterator[Any]:
    """A ``distributed.Client`` connected to the scheduler at ``address``, closed on exit.

    Parameters
    ----------
    address : str
        ``tcp://HOST:PORT`` of a running ``dask scheduler``.
    timeout : float, default 10
        Seconds to wait for the connection.

    Raises
    ------
    MissingDependencyError
        ``distributed`` is not installed.
    ClusterError
        Nothing answers at ``address`` within ``timeout``.
    """
    distributed = require_distributed()
    try:
        client = distributed.Client(address, timeout=f"{timeout}s", set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise ClusterError(f"cannot reach the Dask scheduler at {address} ({type(exc).__name__}: "
                           f"{str(exc).splitlines()[0] if str(exc) else 'no answer'}); start one with "
                           f"`dask scheduler` or fix --scheduler / {SCHEDULER_ENV}") from None
    try:
        yield client
    finally:
        client.close()


def worker_addresses(client) -> list[str]:
    """Addresses of the workers currently connected to ``client``'s scheduler, sorted.

    Asks the scheduler directly: ``Client.scheduler_info()`` returns a cached identity that the
    client's periodic refresh may overwrite with one listing no workers.
    """
    try:
        info = client.sync(client.scheduler.identity, n_workers=-1)
    except TypeError:  # pragma: no cover - schedulers whose identity() takes no n_workers
        info = client.sync(client.scheduler.identity)
    return sorted(info.get("workers", {}))


@dataclass
class DaskSession:
    """What :func:`dask_jobs` yields.

    Attributes
    ----------
    client : distributed.Client or None
        ``None`` when running in-process.
    n_jobs : int or None
        What to pass as ``n_jobs`` to :func:`sparsesim.parallel.run_parallel`: ``-1`` on a
        cluster (one joblib slot per worker thread), the caller's own value in-process.
    n_workers : int
        Workers connected (0 in-process).
    """

    client: Any
    n_jobs: int | None
    n_workers: int

    @property
    def distributed(self) -> bool:
        return self.client is not None


@contextmanager
def dask_jobs(address: str | None = None, scatter: Sequence[Any] = (), n_jobs: int | None = 1,
              wait_for_workers: float = 30.0, timeout: float = 10.0) -> Iterator[DaskSession]:
    """Run the ``run_parallel`` calls inside the block as tasks on a Dask cluster.

    Parameters
    ----------
    address : str, optional
        Scheduler address; ``None`` reads ``$SPARSESIM_SCHEDULER``; when neither is set the
        block runs in-process and ``session.n_jobs`` is ``n_jobs`` unchanged.
    scatter : sequence
        Large objects that the jobs receive as arguments (e.g. ``X``, ``y``). They are sent to
        the workers once; every job argument that *is* one of these objects (same ``id``) is
        replaced by a reference to the worker's copy (joblib's dask backend ``scatter``).
    n_jobs : int, optional
        The in-process worker count to hand back when there is no scheduler.
    wait_for_workers : float, default 30
        Seconds joblib waits for at least one worker before failing.
    timeout : float, default 10
        Seconds to wait for the scheduler to answer.

    Yields
    ------
    DaskSession

    Examples
    --------
    >>> from sparsesim.parallel import run_parallel
    >>> with dask_jobs(None, scatter=[X]) as session:            # doctest: +SKIP
    ...     results = run_parallel(fit_one, [(X, p) for p in grid], n_jobs=session.n_jobs)
    """
    address = resolve_scheduler(address)
    if address is None:
        yield DaskSession(client=None, n_jobs=n_jobs, n_workers=0)
        return
    from joblib import parallel_config

    with connect(address, timeout=timeout) as client:
        n_workers = len(worker_addresses(client))
        if n_workers == 0:
            raise ClusterError(f"the Dask scheduler at {address} has no workers; start some with "
                               f"`dask worker {address}`")
        config = {"backend": "dask", "client": client, "wait_for_workers_timeout": wait_for_workers}
        if scatter:
            config["scatter"] = list(scatter)
        with parallel_config(**config):
            yield DaskSession(client=client, n_jobs=-1, n_workers=n_workers)
