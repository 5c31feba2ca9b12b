"""A directory of finished jobs, so that a long run stopped part way resumes where it stopped.

Within :func:`use_job_store`, every :func:`sparsesim.parallel.run_parallel` call looks each of its
jobs up by a key -- the job function's qualified name, a digest of its arguments
(``joblib.hash``, which reads numpy arrays and sparse matrices by their bytes) and a digest of
sparsesim's own source files -- and runs only the jobs it does not find; each result is written
as soon as it is back (atomically: a stop loses at most the jobs still running). A run started
again over the same store with the same code and the same arguments returns what an unbroken run
returns; any change to sparsesim's code, to a job's data or parameters, misses and reruns.

Results are stored as JSON with tagged numpy arrays, tuples and non-string dict keys (float64
values round-trip exactly); a result of another type (a fitted model, say) is not stored and its
job reruns. Loading parses JSON only (never pickle); a file that does not parse or does not
decode is ignored with a warning and its job rerun.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import math
import os
import tempfile
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["JobStore", "use_job_store", "active_store", "encode", "decode", "code_fingerprint", "Unstorable"]

_STORE: contextvars.ContextVar = contextvars.ContextVar("sparsesim_job_store", default=None)
_FORMAT = 1
_NUMERIC_KINDS = "biuf"


class Unstorable(TypeError):
    """A result holds a value the store does not encode (the job is then not stored)."""


def encode(value: Any) -> Any:
    """``value`` as JSON-able data: arrays, tuples and dicts with keys other than strings tagged."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        out = float(value)
        return out if math.isfinite(out) else {"__float__": repr(out)}
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in _NUMERIC_KINDS:
            raise Unstorable(f"an array of dtype {value.dtype}")
        return {"__ndarray__": value.dtype.str, "shape": list(value.shape),
                "data": [encode(v) for v in value.ravel().tolist()]}
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and not any(k.startswith("__") for k in value):
            return {k: encode(v) for k, v in value.items()}
        return {"__dict__": [[encode(k), encode(v)] for k, v in value.items()]}
    raise Unstorable(f"a value of type {type(value).__name__}")


def decode(data: Any) -> Any:
    """The value :func:`encode` was given (raises ``ValueError`` on data it did not write)."""
    if data is None or isinstance(data, (bool, str, int, float)):
        return data
    if isinstance(data, list):
        return [decode(v) for v in data]
    if not isinstance(data, dict):
        raise ValueError(f"unexpected {type(data).__name__}")
    if "__float__" in data:
        if data["__float__"] not in ("nan", "inf", "-inf"):
            raise ValueError("bad float tag")
        return float(data["__float__"])
    if "__ndarray__" in data:
        dtype = np.dtype(data["__ndarray__"])
        shape = tuple(int(s) for s in data["shape"])
        if dtype.kind not in _NUMERIC_KINDS or any(s < 0 for s in shape):
            raise ValueError("bad array tag")
        flat = [decode(v) for v in data["data"]]
        if len(flat) != math.prod(shape):
            raise ValueError("array data does not match its shape")
        return np.array(flat, dtype=dtype).reshape(shape)
    if "__tuple__" in data:
        return tuple(decode(v) for v in data["__tuple__"])
    if "__dict__" in data:
        out = {}
        for key, value in data["__dict__"]:
            key = decode(key)
            out[tuple(key) if isinstance(key, list) else key] = decode(value)
        return out
    return {k: decode(v) for k, v in data.items()}


def code_fingerprint() -> str:
    """sha256 over sparsesim's Python source files (the package, its indexes and its CLI)."""
    import importlib.util

    digest = hashlib.sha256()
    for name in ("sparsesim", "sparsesim.indexes", "sparsesim.cli"):
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        root = Path(list(spec.submodule_search_locations)[0]).resolve()
        for path in sorted(root.rglob("*.py")):
            if name == "sparsesim" and path.parent.name in ("indexes", "cli") and path.parent.parent == root:
                continue  # counted under its own package (a symlinked or separate directory)
            digest.update(f"{name}:{path.relative_to(root)}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


class JobStore:
    """Finished jobs of :func:`~sparsesim.parallel.run_parallel` calls, one JSON file each.

    Parameters
    ----------
    directory : path
        Created when missing; the same directory resumes a run.

    Attributes
    ----------
    hits, misses : int
        Jobs found (not run) and jobs run, since the store was opened.
    reused_seconds : float
        The compute time the found jobs took when they were run.
    """

    def __init__(self, directory):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.code = code_fingerprint()
        self.hits = 0
        self.misses = 0
        self.reused_seconds = 0.0

    def keys(self, func, jobs: list) -> list[str] | None:
        """One key per job, or None when an argument cannot be hashed (the call then runs plainly)."""
        import joblib

        name = f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"
        seen: dict[int, tuple[Any, str]] = {}

        def digest(arg):
            hit = seen.get(id(arg))
            if hit is not None and hit[0] is arg:
                return hit[1]
            out = joblib.hash(arg)
            seen[id(arg)] = (arg, out)
            return out

        keys = []
        try:
            for job in jobs:
                parts = ([f"{k}={digest(v)}" for k, v in sorted(job.items())] if isinstance(job, dict)
                         else [digest(v) for v in job])
                keys.append(hashlib.sha256("\n".join([self.code, name, *parts]).encode()).hexdigest())
        except Exception:  # noqa: BLE001 -- an argument joblib cannot hash: no store for this call
            return None
        return keys

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def get(self, key: str) -> tuple[bool, Any]:
        """``(True, result)`` for a stored job, ``(False, None)`` otherwise."""
        path = self._path(key)
        if not path.is_file():
            return False, None
        try:
            record = json.loads(path.read_text())
            if record.get("format") != _FORMAT or record.get("key") != key:
                raise ValueError("not a record of this key")
            value = decode(record["result"])
            seconds = float(record.get("seconds", 0.0))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            warnings.warn(f"job store: {path.name} is unreadable ({exc}); its job runs again", stacklevel=2)
            return False, None
        self.hits += 1
        self.reused_seconds += seconds if math.isfinite(seconds) else 0.0
        return True, value

    def put(self, key: str, value: Any, seconds: float) -> bool:
        """Store a finished job's result (atomically); False when the result cannot be stored."""
        self.misses += 1
        try:
            text = json.dumps({"format": _FORMAT, "key": key, "seconds": seconds, "result": encode(value)})
        except (Unstorable, ValueError):
            return False
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
            os.replace(tmp, self._path(key))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return True


@contextmanager
def use_job_store(directory):
    """Within the block, :func:`~sparsesim.parallel.run_parallel` calls resume from and record into
    a :class:`JobStore` over ``directory`` (yielded)."""
    store = JobStore(directory)
    token = _STORE.set(store)
    try:
        yield store
    finally:
        _STORE.reset(token)


def active_store() -> JobStore | None:
    """The store of the enclosing :func:`use_job_store` block, if any."""
    return _STORE.get()


def timed_call(func, job):
    """``(result, seconds)`` of one job (the form a stored run's workers return)."""
    start = time.perf_counter()
    result = func(**job) if isinstance(job, dict) else func(*job)
    return result, time.perf_counter() - start
