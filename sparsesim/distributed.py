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
    Context manager for trial runners (tuning, experiments): inside it, every
    ``run_parallel(func, jobs, n_jobs=session.n_jobs)`` runs the jobs as Dask tasks through
    joblib's dask backend, with the objects in ``scatter`` (e.g. the training matrix) sent to
    the workers once instead of with every task; a call whose tasks the cluster cancelled runs
    once more, then fails with one ``ClusterError`` (``session.call``, applied to every
    ``run_parallel`` call of the block). Without an address it yields an in-process session and
    changes nothing.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from concurrent.futures import CancelledError
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from .exceptions import ClusterError, InvalidInputError, MissingDependencyError
from .parallel import run_policy

__all__ = ["SCHEDULER_ENV", "DASK_EXTRA_HINT", "resolve_scheduler", "require_distributed", "connect", "dask_jobs",
           "DaskSession", "worker_addresses", "is_cluster_failure"]

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
        Nothing answers at ``address`` within ``timeout`` (also when something accepts the
        connection there but never answers), what answers is not a Dask scheduler (an HTTP
        server, garbage), or the scheduler or a worker runs another version of sparsesim (or none).
    """
    distributed = require_distributed()
    probe_scheduler(address, timeout)
    try:
        client = distributed.Client(address, timeout=f"{timeout}s", set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise ClusterError(f"cannot reach the Dask scheduler at {address} ({type(exc).__name__}: "
                           f"{str(exc).splitlines()[0] if str(exc) else 'no answer'}); start one with "
                           f"`dask scheduler` or fix --scheduler / {SCHEDULER_ENV}") from None
    try:
        _check_versions(client, address)
        yield client
    finally:
        client.close()


def probe_scheduler(address: str, timeout: float = 10.0) -> dict:
    """Ask the scheduler at ``address`` who it is, within ``timeout`` seconds in all.

    ``distributed.Client`` waits without bound for an address that accepts TCP connections but
    never answers, and reads an answer that is not Dask's protocol as a frame of any length; this
    one request (the scheduler's ``identity``) is bounded in time as a whole and its answer is
    checked, so a wrong address is one clear :class:`~sparsesim.exceptions.ClusterError`.
    Addresses other than ``tcp://`` are not probed (``{}``).

    Returns
    -------
    dict
        The scheduler's identity (``type``, ``id``, ``address``, ...).
    """
    import asyncio
    import logging

    scheme = address.split("://", 1)[0] if "://" in address else "tcp"
    if scheme != "tcp":
        return {}
    target = address if "://" in address else f"tcp://{address}"
    hint = f"check --scheduler / {SCHEDULER_ENV}, or start one with `dask scheduler`"
    host, _, port = target.split("://", 1)[1].partition(":")
    started = time.monotonic()
    try:  # the TCP connection first: a refused or unroutable address is told apart from a silent one
        socket.create_connection((host, int(port or 8786)), timeout=timeout).close()
    except OSError as exc:
        reason = f"no answer within {timeout:g} s" if isinstance(exc, TimeoutError) else _one_line(exc)
        raise ClusterError(f"cannot reach the Dask scheduler at {address} ({reason}); {hint}") from None
    given, timeout = timeout, max(timeout - (time.monotonic() - started), 1.0)
    from distributed.comm import connect as comm_connect

    async def ask():
        comm = await comm_connect(target, timeout=timeout)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    async def bounded():
        return await asyncio.wait_for(ask(), timeout)

    result: dict = {}

    def run():
        try:
            result["answer"] = asyncio.run(bounded())
        except BaseException as exc:  # noqa: BLE001 - reported below as one ClusterError
            result["error"] = exc

    quiet = logging.getLogger("distributed")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # its comm warnings would be a second line beside our error
    try:
        worker = threading.Thread(target=run, name="sparsesim-scheduler-probe", daemon=True)
        worker.start()
        worker.join(timeout + 2.0)  # the loop's own deadline fires first; this bounds a stuck loop too
    finally:
        quiet.setLevel(level)
    if worker.is_alive() or type(result.get("error")) in (asyncio.TimeoutError, TimeoutError):
        raise ClusterError(f"the Dask scheduler at {address} did not answer within {given:g} s (something "
                           f"there accepts connections but does not answer as a scheduler); {hint}")
    exc = result.get("error")
    if exc is not None:
        if isinstance(exc, OSError) and not _is_protocol_error(exc):
            raise ClusterError(f"cannot reach the Dask scheduler at {address} ({_one_line(exc)}); {hint}") from None
        cause = "its answer is not in Dask's message format" if isinstance(exc, MemoryError) else _one_line(exc)[:200]
        raise ClusterError(f"{address} answers, but not as a Dask scheduler ({cause}); {hint}") from None
    answer = result.get("answer")
    if not isinstance(answer, dict) or answer.get("type") != "Scheduler":
        raise ClusterError(f"{address} answers, but not as a Dask scheduler (its answer: "
                           f"{str(answer)[:80]!r}); {hint}")
    return answer


def _is_protocol_error(exc: BaseException) -> bool:
    """An OSError that distributed raised for an answer it could not read (the connection worked)."""
    return type(exc).__module__.split(".")[0] == "distributed" and "closed" in type(exc).__name__.lower() and \
        "connection refused" not in str(exc).lower()


def _check_versions(client, address: str):
    """Refuse a cluster whose scheduler or workers run another sparsesim than this process.

    They unpickle and run this process's functions: with another version a task fails on import,
    and a scheduler that cannot read a task graph never runs it (the caller would wait forever).
    """
    from . import __version__

    try:
        info = client.get_versions(packages=["sparsesim"])
    except Exception:  # noqa: BLE001 - a scheduler that cannot answer: the calls report it themselves
        return
    found = {"scheduler": (info.get("scheduler") or {}).get("packages", {}).get("sparsesim")}
    found.update({f"worker {w}": (v or {}).get("packages", {}).get("sparsesim")
                  for w, v in (info.get("workers") or {}).items()})
    other = sorted((who, v) for who, v in found.items() if v != __version__)
    if other:
        who, version = other[0]
        raise ClusterError(f"the Dask {who} (scheduler {address}) runs sparsesim {version or '(not installed)'}, "
                           f"this process {__version__}; install the same sparsesim on every machine and restart "
                           f"the scheduler and the workers")


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
    retries: int = 1
    _gone: threading.Event | None = None
    _config: dict | None = None

    @property
    def distributed(self) -> bool:
        return self.client is not None

    def call(self, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` (e.g. ``run_parallel(...)``) under the cluster's failure policy.

        In-process this is a plain call. On a cluster, a call whose Dask tasks were cancelled or
        whose workers were lost (``CancelledError``, ``KilledWorker``, a closed connection) runs
        again, up to ``retries`` times, with the ``scatter`` objects sent to the workers anew (a
        worker restarted by its nanny for exceeding its memory limit takes its copies with it;
        the trials are seeded, so a repeat gives the same results); when it fails again, or when every worker has left the cluster (checked every
        few seconds, so the call never waits forever), it raises one
        :class:`~sparsesim.exceptions.ClusterError`. Errors of the trials themselves (bad
        parameters, ...) pass through unchanged. Inside :func:`dask_jobs` every
        :func:`~sparsesim.parallel.run_parallel` call already runs under this policy; the
        ``run_parallel`` calls inside ``fn`` are not retried a second time.
        """
        if self.client is None:
            return fn(*args, **kwargs)
        for attempt in range(self.retries + 1):
            try:
                with run_policy(None):  # the run_parallel calls inside fn: no second retry loop
                    if attempt == 0 or self._config is None:
                        return fn(*args, **kwargs)
                    from joblib import parallel_config

                    with parallel_config(**self._config):  # a fresh backend: the data scattered again
                        return fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - sorted below: only the cluster's own failures
                if self._gone is not None and self._gone.is_set():
                    raise ClusterError("every Dask worker left the cluster while the trials ran; no partial "
                                       "result is reported. Start workers (`dask worker ADDRESS`) and run again") from None
                if not is_cluster_failure(exc):
                    raise
                if attempt == self.retries:
                    raise ClusterError(f"the Dask cluster failed {attempt + 1} time(s) while running the trials "
                                       f"({_one_line(exc)}); no partial result is reported. Check that the "
                                       f"workers are alive and below their memory limit "
                                       f"(`dask worker --memory-limit`)") from None
        raise AssertionError("unreachable")  # pragma: no cover


def is_cluster_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure of the Dask cluster (cancelled tasks, a lost worker or
    connection), as opposed to an error raised by the task's own code."""
    if isinstance(exc, (CancelledError, ClusterError)):
        return True
    kind = type(exc)
    return kind.__module__.split(".")[0] == "distributed" and kind.__name__ in (
        "KilledWorker", "CommClosedError", "FutureCancelledError", "FuturesCancelledError", "CancelledError")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _watch_workers(client, gone: threading.Event, stop: threading.Event, grace: float, every: float = 2.0):
    """Set ``gone`` and cancel the client's futures once no worker has been connected for ``grace`` s."""
    empty_since = None
    while not stop.wait(every):
        try:
            alive = bool(worker_addresses(client))
        except Exception:  # noqa: BLE001 - the scheduler itself is gone: the call fails on its own
            return
        if alive:
            empty_since = None
            continue
        empty_since = empty_since or time.monotonic()
        if time.monotonic() - empty_since >= grace:
            gone.set()
            try:
                client.cancel(list(client.futures))
            except Exception:  # noqa: BLE001
                pass
            return


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
        gone, stop = threading.Event(), threading.Event()
        watcher = threading.Thread(target=_watch_workers, args=(client, gone, stop, wait_for_workers), daemon=True,
                                   name="sparsesim-worker-watch")
        watcher.start()
        session = DaskSession(client=client, n_jobs=-1, n_workers=n_workers, _gone=gone, _config=config)
        try:
            # every run_parallel call of the block (any trial runner) under the session's failure policy
            with parallel_config(**config), run_policy(session.call):
                yield session
        except Exception as exc:  # noqa: BLE001 - a cluster failure outside session.call: one clean error
            if gone.is_set():
                raise ClusterError("every Dask worker left the cluster while the trials ran; no partial result "
                                   "is reported. Start workers (`dask worker ADDRESS`) and run again") from None
            if is_cluster_failure(exc) and not isinstance(exc, ClusterError):
                raise ClusterError(f"the Dask cluster failed while running the trials ({_one_line(exc)}); no "
                                   f"partial result is reported") from None
            raise
        finally:
            stop.set()
            watcher.join(timeout=5)
