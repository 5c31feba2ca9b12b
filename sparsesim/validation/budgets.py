"""Checks of requests against the machine: memory, triplet, worker and run counts.

Each ceiling has a default (half the memory available now, :data:`DEFAULT_MAX_TRIPLETS`, the
cores this process may use, :data:`DEFAULT_MAX_RUNS`) that an environment variable
(``SPARSESIM_MEMORY_BUDGET``, ``SPARSESIM_MAX_TRIPLETS``, ``SPARSESIM_MAX_JOBS``,
``SPARSESIM_MAX_RUNS``) replaces; a request above it is a
:class:`~sparsesim.exceptions.ResourceLimitError`.
"""

from __future__ import annotations

from ..exceptions import InvalidParameterError, ResourceLimitError
from .messages import bounded
from .params import check_int

__all__ = ["DEFAULT_MAX_RUNS", "DEFAULT_MAX_TRIPLETS", "available_cores", "check_dense_request", "check_n_jobs",
           "check_n_triplets", "check_seed_count", "memory_budget", "triplet_limit"]


def _env_int(name: str, default: int) -> int:
    import os

    raw = os.environ.get(name, "")
    try:
        return int(raw) if raw.strip() else default
    except ValueError:
        raise InvalidParameterError(f"environment variable {name} must be an integer, got {bounded(repr(raw), 40)}") \
            from None


def memory_budget() -> int:
    """Bytes one request may plan to use: ``$SPARSESIM_MEMORY_BUDGET`` or half the memory available now."""
    default = 8 << 30
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    default = int(line.split()[1]) * 1024 // 2
                    break
    except (OSError, ValueError, IndexError):
        pass
    return _env_int("SPARSESIM_MEMORY_BUDGET", default)


#: Default ceiling on triplets per run (raise with ``SPARSESIM_MAX_TRIPLETS``): 100x the largest
#: budget of the paper protocols (10^6).
DEFAULT_MAX_TRIPLETS = 10**8
#: Default ceiling on runs of one ``experiment`` (seeds x algorithms; ``SPARSESIM_MAX_RUNS``).
DEFAULT_MAX_RUNS = 1000


def triplet_limit() -> int:
    """The most triplets one run may request: ``$SPARSESIM_MAX_TRIPLETS``, default :data:`DEFAULT_MAX_TRIPLETS`."""
    return _env_int("SPARSESIM_MAX_TRIPLETS", DEFAULT_MAX_TRIPLETS)


def check_n_triplets(value, name: str = "n_triplets", allow_zero: bool = False) -> int:
    """A triplet count in [1, limit] (the limit: :func:`triplet_limit`, default 10^8)."""
    limit = triplet_limit()
    value = check_int(value, name, 0 if allow_zero else 1)
    if value > limit:
        raise ResourceLimitError(f"{name}={value} is more than the {limit} triplets one run may request "
                                 f"(raise the limit with SPARSESIM_MAX_TRIPLETS={value} if this is intended)")
    return value


def available_cores() -> int:
    """The cores this process may run on (a container or taskset can allow fewer than the machine has)."""
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def check_n_jobs(value, name: str = "n_jobs") -> int:
    """Parallel workers: a positive int (or -1 = all cores, -2 = all but one, ...) up to the cores
    of this machine (``$SPARSESIM_MAX_JOBS`` raises the ceiling). Returns the resolved count."""
    cores = available_cores()
    limit = _env_int("SPARSESIM_MAX_JOBS", cores)
    value = check_int(value, name)
    if value == 0:
        raise InvalidParameterError(f"{name} must be a positive number of workers or -1 (all {cores} cores), got 0")
    if value < 0:
        if -value > cores:
            raise InvalidParameterError(f"{name}={value} would leave no worker on this {cores}-core machine; "
                                        f"use a value in [{-cores}, -1] or a positive count")
        value = cores + 1 + value
    if value > limit:
        raise ResourceLimitError(f"{name}={value} is more than the {limit} workers this machine runs at once "
                                 f"({cores} cores; raise the limit with SPARSESIM_MAX_JOBS={value} if intended)")
    return value


def check_seed_count(count: int, n_algorithms: int = 1) -> None:
    """Refuse an experiment of more runs than ``$SPARSESIM_MAX_RUNS`` (default 1000)."""
    limit = _env_int("SPARSESIM_MAX_RUNS", DEFAULT_MAX_RUNS)
    runs = count * max(1, n_algorithms)
    if runs > limit:
        raise ResourceLimitError(f"{count} seed(s) x {max(1, n_algorithms)} algorithm(s) = {runs} runs; at most "
                                 f"{limit} runs per experiment (raise with SPARSESIM_MAX_RUNS={runs} if intended)")


def check_dense_request(n_bytes: int, what: str) -> None:
    """Refuse planning a dense buffer larger than :func:`memory_budget` (the message says both sizes)."""
    budget = memory_budget()
    if n_bytes > budget:
        raise ResourceLimitError(f"{what} needs {n_bytes / 2**30:.2f} GiB, more than the memory budget of "
                                 f"{budget / 2**30:.2f} GiB (lower the request, or raise SPARSESIM_MEMORY_BUDGET=BYTES)")
