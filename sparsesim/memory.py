"""Memory budgets: how much a learner may hold, and the one error when a run would need more.

``max_memory`` (a learner parameter) is a number of bytes, a size such as ``"6GiB"`` or
``"512MB"``, a share of the memory available when training starts such as ``"80%"``, or
``"auto"`` (:data:`DEFAULT_SHARE` of the available memory). Available memory is the kernel's
``MemAvailable`` (``/proc/meminfo``), lowered to the cgroup's remaining limit when the process
runs in a container with one.

The budget covers the learner's model store, including the transient copy while its hash table
is rebuilt at a larger size (old and new table exist together). Before a rebuild that would
cross the budget, the engine first applies what the learner's documented rule allows (SORS:
pending shrinkage, zero entries leave; AdaSORS: entries whose value is zero also drop their
AdaGrad statistic) and, if the store still does not fit, stops with :class:`MemoryBudgetError`
naming the budget, the model size and what to change. Nothing is written then (model files are
written only after training, atomically).
"""

from __future__ import annotations

import os
import re

from .exceptions import InvalidParameterError, MemoryBudgetError

__all__ = ["LARGE_OUTPUT_BYTES", "large_output_warning", "MODEL_SIZE_FACTOR", "MODEL_SIZE_FLOOR_BYTES", "TRUNCATE_EVERY",
           "parse_model_bytes", "model_bytes_for", "resolve_model_budget", "DEFAULT_SHARE", "available_memory", "parse_memory", "format_bytes", "MemoryBudget", "budgeted_reserve",
           "check_allocation", "resident_bytes", "peak_resident_bytes", "reset_peak_resident"]

DEFAULT_SHARE = 0.7
LARGE_OUTPUT_BYTES = 10**9  # a model or index file past this size is announced before it is built
# model size of the first-order bilinear learners (max_model_bytes="auto"): entries of W per
# stored entry of the corpus (diagonal included), chosen in docs/quality.md, "Model size"
MODEL_SIZE_FACTOR = 20.0
# ... but never below this many bytes: on a small corpus 20x is a few MB, and cutting there costs
# quality for no real saving (news20-sample, the demo: OASIS 3,000 triplets, MAP 64.8 unbounded,
# 60.7 at 20x = 5.4 MB; its whole unbounded model is 113 MB)
MODEL_SIZE_FLOOR_BYTES = 2**27
TRUNCATE_EVERY = 1024  # triplets between two truncations to the bound
CSR_ENTRY_BYTES = 12  # a saved W's bytes per entry (float64 value, int32 column) ...
CSR_ROW_BYTES = 8  # ... and per row (int64 row pointer)
_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def _cgroup_remaining() -> int | None:
    try:
        with open("/sys/fs/cgroup/memory.max") as fh:
            limit = fh.read().strip()
        if limit == "max":
            return None
        with open("/sys/fs/cgroup/memory.current") as fh:
            current = int(fh.read().strip())
        return max(int(limit) - current, 0)
    except (OSError, ValueError):
        return None


def available_memory() -> int:
    """Bytes this process can still allocate without swapping (MemAvailable, cgroup-limited)."""
    avail = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        avail = None
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            avail = 1 << 34
    cgroup = _cgroup_remaining()
    return int(min(avail, cgroup) if cgroup is not None else avail)


def _status_bytes(field: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def resident_bytes() -> int | None:
    """Resident memory of this process now (``VmRSS``); None where ``/proc`` does not tell."""
    return _status_bytes("VmRSS")


def peak_resident_bytes() -> int | None:
    """Peak resident memory of this process (``VmHWM``) since it started or since the last
    :func:`reset_peak_resident`. Without ``/proc``: the peak since the start (``ru_maxrss``,
    kilobytes on Linux), or None where neither tells."""
    peak = _status_bytes("VmHWM")
    if peak is None:
        try:
            import resource
        except ImportError:  # not a Unix
            return None
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return peak


def reset_peak_resident() -> bool:
    """Start a new peak: ``peak_resident_bytes`` measures from now (Linux ``clear_refs``). False
    where the kernel does not allow it (the peak then still counts from the process start)."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def format_bytes(n: float) -> str:
    """``1.5 GiB``-style text."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def parse_memory(value, name: str = "max_memory") -> int:
    """``max_memory`` as bytes: a positive number, ``"6GiB"``/``"512MB"``, ``"80%"`` (of the
    memory available now) or ``"auto"`` (:data:`DEFAULT_SHARE` of it)."""
    if isinstance(value, bool):
        raise InvalidParameterError(f"{name} must be bytes, a size like '6GiB', a share like '80%' or 'auto'; "
                                    f"got {value!r}")
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return int(DEFAULT_SHARE * available_memory())
    if isinstance(value, (int, float)):
        if not 0 < value < float("inf"):
            raise InvalidParameterError(f"{name} must be a positive finite number of bytes, got {value!r}")
        return int(value)
    text = str(value).strip()
    if text.endswith("%"):
        try:
            share = float(text[:-1])
        except ValueError:
            share = -1.0
        if not 0 < share <= 100:
            raise InvalidParameterError(f"{name} share must be in (0%, 100%], got {value!r}")
        return int(share / 100.0 * available_memory())
    match = _SIZE.match(text)
    if not match or match.group(2).lower() not in _UNITS:
        raise InvalidParameterError(f"{name} must be bytes, a size like '6GiB', a share like '80%' or 'auto'; "
                                    f"got {value!r}")
    size = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if not 0 < size < float("inf"):
        raise InvalidParameterError(f"{name} must be positive, got {value!r}")
    return int(size)


class MemoryBudget:
    """A byte limit for one learner's store, resolved once when training starts.

    Parameters
    ----------
    limit : int
        Bytes.
    spec : object
        What the user gave (for messages).
    owner : str
        The learner's name (for messages).
    """

    def __init__(self, limit: int, spec=None, owner: str = "learner"):
        self.limit = int(limit)
        self.spec = spec
        self.owner = owner

    def __repr__(self) -> str:
        return f"MemoryBudget({format_bytes(self.limit)}, spec={self.spec!r})"

    def fits(self, nbytes: int) -> bool:
        return int(nbytes) <= self.limit

    def fail(self, need: int, held: int, n_entries: int, entry_bytes: int, hint: str = "") -> None:
        """Raise the one :class:`MemoryBudgetError` naming the budget, the model and the fixes."""
        spec = "" if self.spec in (None, "auto") else f" (max_memory={self.spec!r})"
        raise MemoryBudgetError(
            f"{self.owner}: the model would need {format_bytes(need)} to grow (it holds {n_entries:,} entries "
            f"at {entry_bytes} bytes each, {format_bytes(held)}) but its memory budget is "
            f"{format_bytes(self.limit)}{spec}; use fewer triplets{hint}, or a larger max_memory "
            f"(bytes, '8GiB' or a share like '90%' of available memory)")


def _rebuild_bytes(store, extra: int) -> int:
    """Bytes a table rebuild for ``extra`` more inserts adds while old and new tables coexist
    (0 when ``store`` has room); follows a paired store's overflow table too."""
    total = 0
    for table in (store, getattr(store, "overflow", None)):
        if table is None or table.counts[1] + extra <= table.max_used():
            continue
        total += table.grown_capacity(extra) * table.table.dtype.itemsize
    return total


def budgeted_reserve(store, budget: MemoryBudget | None, hint: str = ""):
    """``store.reserve`` that first checks ``budget``: a rebuild whose old and new tables together
    would cross it raises :class:`MemoryBudgetError` before allocating (no budget: the plain
    ``store.reserve``)."""
    if budget is None:
        return store.reserve

    def reserve(extra: int) -> None:
        grow = _rebuild_bytes(store, int(extra))
        if grow and not budget.fits(store.nbytes + grow):
            budget.fail(store.nbytes + grow, store.nbytes, store.n_entries, store.table.dtype.itemsize, hint=hint)
        store.reserve(extra)

    return reserve


def check_allocation(budget: MemoryBudget | None, nbytes: int, what: str, hint: str = "") -> None:
    """Raise :class:`MemoryBudgetError` before a fixed allocation of ``nbytes`` (a dense matrix, a
    full covariance) that does not fit ``budget``."""
    if budget is None or budget.fits(nbytes):
        return
    spec = "" if budget.spec in (None, "auto") else f" (max_memory={budget.spec!r})"
    raise MemoryBudgetError(
        f"{budget.owner}: {what} needs {format_bytes(nbytes)} but the memory budget is "
        f"{format_bytes(budget.limit)}{spec}; use {hint + ', or ' if hint else ''}a larger max_memory "
        f"(bytes, '8GiB' or a share like '90%' of available memory)")


def large_output_warning(what: str, nbytes: int, how: str, hint: str) -> str | None:
    """Warn (:class:`~sparsesim.exceptions.LargeOutputWarning`, one ``warning:`` line in the CLI)
    that ``what`` may take ``nbytes`` when that passes :data:`LARGE_OUTPUT_BYTES`; returns the
    message (None: no warning). ``how``: e.g. "may take up to" or "will take at least"; ``hint``:
    what makes it smaller."""
    import warnings

    from .exceptions import LargeOutputWarning

    if nbytes is None or int(nbytes) <= LARGE_OUTPUT_BYTES:
        return None
    message = f"{what} {how} {format_bytes(nbytes)} ({int(nbytes):,} bytes); {hint}"
    warnings.warn(LargeOutputWarning(message), stacklevel=2)
    return message


def _is_auto(value) -> bool:
    return isinstance(value, str) and value == "auto"


def parse_model_bytes(value, name: str = "max_model_bytes"):
    """``"auto"``, ``None`` (no bound) or a positive number of bytes (a number, or a size such as
    ``"300MB"`` / ``"1GiB"``); else :class:`InvalidParameterError` naming the parameter."""
    if value is None or _is_auto(value):
        return value
    if isinstance(value, str) and value.strip().lower() in ("none", "unbounded"):
        return None
    if isinstance(value, str) and value.strip().endswith("%"):
        raise InvalidParameterError(f"{name} must be bytes, a size like '300MB', 'auto' or None; got {value!r}")
    return parse_memory(value, name)


def model_bytes_for(entries: int, d: int) -> int:
    """Bytes of a saved W (CSR, float64 values, int32 columns, int64 row pointers) holding
    ``entries`` off-diagonal entries and a full diagonal of ``d``."""
    return CSR_ENTRY_BYTES * (int(entries) + int(d)) + CSR_ROW_BYTES * (int(d) + 1)


def resolve_model_budget(max_model_bytes, corpus_nnz: int, d: int, floor_entries: int = 0):
    """``(entries, bytes)``: how many off-diagonal entries of W a learner keeps, and the size of
    the saved model that makes.

    ``"auto"``: ``MODEL_SIZE_FACTOR * corpus_nnz - d`` entries, so that W with its diagonal
    holds at most ``MODEL_SIZE_FACTOR`` times the corpus's stored entries (none but the diagonal
    when d alone passes that), but never fewer than fit in ``MODEL_SIZE_FLOOR_BYTES`` (128 MiB:
    small corpora are not cut), and at least ``floor_entries`` (the entries of a model a learner
    continues from, which the default never cuts); ``None``: no bound, ``(None, None)``; bytes:
    as many entries as fit (:func:`model_bytes_for`).
    """
    value = parse_model_bytes(max_model_bytes)
    if value is None:
        return None, None
    if _is_auto(value):
        small = (int(MODEL_SIZE_FLOOR_BYTES) - model_bytes_for(0, d)) // CSR_ENTRY_BYTES
        entries = max(int(MODEL_SIZE_FACTOR * max(int(corpus_nnz), 1)) - int(d), small, int(floor_entries), 0)
        return entries, model_bytes_for(entries, d)
    entries = (int(value) - model_bytes_for(0, d)) // CSR_ENTRY_BYTES
    if entries < 1:
        raise InvalidParameterError(
            f"max_model_bytes={max_model_bytes!r} is too small for {d:,} features: a model with a diagonal and one "
            f"more entry needs {model_bytes_for(1, d):,} bytes")
    return int(entries), int(value)
