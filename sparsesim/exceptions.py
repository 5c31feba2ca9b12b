"""Errors raised by sparsesim.

Every error a user can cause derives from :class:`SparsesimError`, so the CLI can print
one clear line for any of them (and never a traceback).
"""

import threading


class SparsesimError(Exception):
    """Base class for errors caused by input, configuration or files."""


class InvalidInputError(SparsesimError, ValueError):
    """Data with NaN/inf, wrong shapes, dimension mismatches, unusable labels."""


class UnknownNameError(SparsesimError, KeyError):
    """An algorithm, data set or protocol name that is not registered."""

    def __str__(self):  # KeyError quotes its message; we want it plain
        return str(self.args[0]) if self.args else ""


class DataNotFoundError(SparsesimError, FileNotFoundError):
    """A data set file is not in the data directory (and could not be fetched)."""


class FileFormatError(SparsesimError):
    """A model, index or data file that is truncated, corrupt or of the wrong format."""


class ModelMismatchError(SparsesimError):
    """A model and an index (or data) that do not belong together."""


class MissingDependencyError(SparsesimError, ImportError):
    """An optional extra (e.g. ``sparsesim[dask]``) that a requested feature needs is not installed."""


class ClusterError(SparsesimError, RuntimeError):
    """A Dask scheduler that cannot be reached, or a worker (and its shard) lost during a call."""


class InvalidParameterError(InvalidInputError):
    """A hyper-parameter or option of the wrong type or outside its accepted range
    (the message names the parameter and the accepted range)."""


class InvalidInputTypeError(InvalidInputError, TypeError):
    """Input of a type that cannot be used (e.g. objects that are not numbers); both a ValueError
    and a TypeError, as scikit-learn's conventions expect."""


class ResourceLimitError(InvalidInputError):
    """A request larger than the data or the machine allows (the message says the limit and how
    to raise it); raised before any work starts."""


class ConcurrentWriteError(SparsesimError, OSError):
    """Another process is writing the same target (its lock file is held)."""

    def __str__(self):  # OSError formats (errno, strerror); we want the message
        return str(self.args[0]) if self.args else ""


class UnsafeTargetError(InvalidInputError):
    """An output path that must not be written: a device, a symlink, a directory of another
    kind, or one of the command's own inputs."""


class SmallClassWarning(UserWarning):
    """Documents left out because their class is too small to form a positive pair."""


class LargeOutputWarning(UserWarning):
    """A command is about to write a model or index larger than :data:`sparsesim.memory.LARGE_OUTPUT_BYTES`."""


class MemoryBudgetError(SparsesimError, MemoryError):
    """A run that would cross its memory budget (``max_memory``); stopped before allocating."""


class DivergenceError(InvalidInputError):
    """A learner's weights or interaction matrix overflowed (its parameters are too aggressive)."""


class UnsupportedOperationError(InvalidInputError):
    """An operation an index kind does not offer (e.g. ``calibrate`` on an exact index); the
    message names the capability (:attr:`capability`) the kind lacks."""

    def __init__(self, message: str, capability: str = ""):
        super().__init__(message)
        self.capability = capability


_LAZY_LOCK = threading.Lock()


def __getattr__(name):
    # NotFittedError derives from scikit-learn's, which is imported on first use only (importing
    # scikit-learn takes seconds; the CLI starts without it)
    if name != "NotFittedError":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _LAZY_LOCK:
        if "NotFittedError" not in globals():
            from sklearn.exceptions import NotFittedError as sklearn_not_fitted

            globals()["NotFittedError"] = type("NotFittedError", (InvalidInputError, sklearn_not_fitted), {
                "__module__": __name__,
                "__doc__": "A learner used before ``fit``: scikit-learn's "
                           ":class:`sklearn.exceptions.NotFittedError` (a ValueError and an AttributeError) "
                           "with sparsesim's one-line CLI display.",
            })
    return globals()["NotFittedError"]
