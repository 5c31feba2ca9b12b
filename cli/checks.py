"""Checks of a command's option values that run before anything heavy loads.

Each command calls these first, so a typo or an out-of-range value is refused with one
``error:`` line in well under a second, before a data set, model or index is read. Names are
matched as the library matches them (:func:`sparsesim.validation.resolve_name`: exact, then
case-insensitive, else "did you mean ...?" with the known names), and the names handed on to the
library are the registered spellings.
"""

from __future__ import annotations

from sparsesim.validation import (COMMON_PARAM_SPEC, check_float, check_int, check_n_jobs, check_param_values,
                                  check_top_k_value, check_train_settings, resolve_name)

__all__ = ["algorithm_name", "dataset_name", "index_kind", "fast_param_values", "algorithm_params",
           "positive", "top_k", "fraction", "train_settings", "jobs", "check_port_free"]


def algorithm_name(name: str) -> str:
    """The registered spelling of an algorithm name."""
    from sparsesim.registry import get_algorithm

    return get_algorithm(name).name


def dataset_name(name: str):
    """The registered spelling of a data set name; a path (existing, or with a directory part
    or a file suffix) is returned as given. Returned as a :class:`~sparsesim.data.DataSource`:
    the path-or-name answer (the one rule, :func:`sparsesim.data.is_data_path`) is handed on."""
    from sparsesim.data import DataSource, data_source
    from sparsesim.data.catalog import get_dataset_spec

    source = data_source(name)
    if source.own:
        return source
    return DataSource(get_dataset_spec(name).name, own=False)


def index_kind(kind: str) -> str:
    """The registered spelling of an index kind (``exact``, ``ann``)."""
    from sparsesim.indexes import INDEX_KINDS

    return resolve_name(kind, INDEX_KINDS, "index kind")


def fast_param_values(params: dict):
    """Check the values of the parameters every registered algorithm shares (``C``, ``eta``,
    ``lam``, ``n_triplets``, ...: :data:`~sparsesim.validation.COMMON_PARAM_SPEC`), by name
    (case-insensitive), without importing any learner. ``"auto"`` values are left to the learner.

    Returns the values as :class:`~sparsesim.validation.CheckedParams`: handed on (through
    :func:`algorithm_params`) to the workflow, whose estimator does not check them again."""
    known = {k.lower(): k for k in COMMON_PARAM_SPEC}
    names = {key: known[str(key).lower()] for key, value in params.items()
             if str(key).lower() in known and not (isinstance(value, str) and value == "auto")}
    return check_param_values(params, {key: COMMON_PARAM_SPEC[name] for key, name in names.items()}, names)


def algorithm_params(algorithm: str, params):
    """``params`` (a dict, or :func:`fast_param_values`' checked values) checked against the
    algorithm's constructor: names in its spelling (an unknown name lists the valid ones, with
    "did you mean"); the values and what was checked of them are kept. The shared values are
    range-checked once, by :func:`fast_param_values`, which the commands call first (before any
    other import)."""
    from sparsesim.registry import get_algorithm
    from sparsesim.validation import CheckedParams

    spec = get_algorithm(algorithm)
    if not isinstance(params, CheckedParams):
        return spec.resolve_params(params)
    return params.renamed({key: name for key in params for name in spec.resolve_params({key: None})})


def model_bytes(algorithm: str, value: str, params: dict):
    """``--max-model-bytes``: a size (bytes, ``300MB``), ``auto`` or ``none``, for a learner that takes it."""
    from sparsesim.memory import parse_model_bytes
    from sparsesim.exceptions import InvalidInputError
    from sparsesim.registry import get_algorithm

    if "max_model_bytes" in params:
        raise InvalidInputError("give the model-size bound once: --max-model-bytes or --param max_model_bytes")
    if "max_model_bytes" not in get_algorithm(algorithm).make().get_params():
        raise InvalidInputError(f"--max-model-bytes bounds the OASIS / SORS / AdaSORS models; {algorithm} has no "
                                "such bound")
    return parse_model_bytes(value, "--max-model-bytes")


def positive(value: int, option: str) -> int:
    """An integer option that must be at least 1 (``--top-k``, ``--k``, ``--shards``)."""
    return check_int(value, option, 1)


def top_k(value: int, option: str = "--top-k"):
    """``--top-k``: an integer >= 1, checked once into the
    :class:`~sparsesim.validation.CheckedTopK` an index compares only with its size."""
    return check_top_k_value(value, option)


def fraction(value: float, option: str) -> float:
    """A share strictly between 0 and 1."""
    return check_float(value, option, 0, 1, low_open=True, high_open=True)


def train_settings(triplets: int, seed: int, train_fraction: float):
    """``--triplets``, ``--seed`` and ``--train-fraction`` of ``train``, checked once into the
    :class:`~sparsesim.validation.TrainSettings` that ``train_model`` takes as it is."""
    return check_train_settings(triplets, seed, train_fraction)


def jobs(value: int, option: str = "--n-jobs") -> int:
    return check_n_jobs(value, option)


def check_port_free(host: str, port: int):
    """Bind ``host:port`` now and return the listening socket (handed to the server), so that a
    port in use is reported before the index loads; raises :class:`PortInUseError`."""
    import errno
    import socket

    from sparsesim.exceptions import InvalidInputError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except socket.gaierror as exc:
        sock.close()
        raise InvalidInputError(f"--host {host!r} is not a known host name or address ({exc.strerror})") from None
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortInUseError(f"port {port} on {host} is already in use (another server is listening there); "
                                 f"stop it or choose another --port") from None
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise PortInUseError(f"no permission to listen on {host}:{port} (ports below 1024 need privileges); "
                                 f"choose another --port") from None
        raise InvalidInputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


class PortInUseError(Exception):
    """The port ``serve`` was asked to listen on is taken (exit status 3, see docs/cli.md)."""
