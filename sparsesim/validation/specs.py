"""Declarative checks: an estimator's hyper-parameters against a spec (:func:`check_params`,
:data:`COMMON_PARAM_SPEC`, one value: :func:`check_param`) and file metadata against a schema
(:func:`check_meta`).

A parameter value is checked once: :func:`check_params` remembers, on the estimator, each value
it checked (name, spec entry, value) and takes it as it is while the estimator holds it; values
checked before the estimator exists (a command's options) are handed on as
:class:`CheckedParams` and recorded with :func:`record_checked`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ..exceptions import FileFormatError, InvalidParameterError
from .budgets import check_n_triplets, triplet_limit
from .messages import bounded
from .params import MAX_SEED, check_bool, check_choice, check_float, check_int, check_random_state

__all__ = ["COMMON_PARAM_SPEC", "CheckedParams", "check_meta", "check_param", "check_param_values", "check_params",
           "param_spec", "record_checked"]


_POS = {"low_open": True}
#: Hyper-parameters shared by the registered algorithms, checked by name (type and range) before
#: any fit; a class adds or overrides entries in its own ``_param_spec``.
COMMON_PARAM_SPEC = {
    "C": ("float", 0, None, _POS), "source_C": ("float", 0, None, _POS),
    "eta": ("float", 0, None, _POS), "eta1": ("float", 0, None, _POS), "eta2": ("float", 0, None, _POS),
    "lam": ("float", 0, None), "lam1": ("float", 0, None), "lam2": ("float", 0, None),
    "delta": ("float", 0, None, _POS), "gamma": ("float", 0, None, _POS), "sigma": ("float", 0, None, _POS),
    "r": ("float", 0, None, _POS), "b": ("float", 0, None), "alpha": ("float?", 0, None),
    "knn_bandwidth": ("float?", 0, None, _POS), "theta0": ("float", 0, 1),
    "query_rate": ("float", 0, 1), "query_ratio": ("float", 0, 1),
    "query_budget": ("int?", 0, None), "n_neighbors": ("int", 1, None), "epoch": ("int", 0, None),
    "gram_refresh": ("int", 1, None), "initial_capacity": ("int", 1, 2**40),
    "n_triplets": ("n_triplets",), "n_jobs": ("int?", -64, 4096),
    "identity": ("bool",), "normalize": ("bool",), "compact": ("bool",),
    "random_state": ("random_state",),
    "combiner": ("str",), "covariance": ("str",), "divergence": ("str",), "kernel": ("str",),
    "knn_weighting": ("str",), "regularizer": ("str",), "schedule": ("str",), "sigma_step": ("str",),
    "storage": ("str",), "variant": ("str",),
}

# where an estimator keeps what check_params and record_checked found valid: name -> (entry,
# fingerprint of the value, checked value); private (leading underscore, no trailing one: not a
# fitted attribute) and not a parameter, so clone starts without it
_RECORD = "_checked_params"


def _default_of(estimator, pname):
    import inspect

    try:
        param = inspect.signature(type(estimator).__init__).parameters.get(pname)
    except (TypeError, ValueError):
        return None
    return None if param is None else param.default


_CHECKERS = {"int": check_int, "float": check_float, "bool": check_bool, "choice": check_choice,
             "random_state": check_random_state}


def param_spec(estimator) -> dict:
    """The spec :func:`check_params` checks ``estimator`` against by default:
    :data:`COMMON_PARAM_SPEC` updated with the class's own ``_param_spec``."""
    spec = dict(COMMON_PARAM_SPEC)
    spec.update(getattr(type(estimator), "_param_spec", None) or {})
    return spec


def check_param(value, name: str, entry: tuple):
    """Check one value against one spec entry; the checked value (plain Python types).

    ``entry`` is ``(kind, *args)`` as in :func:`check_params`; ``name`` is what the message calls
    the value (a parameter, or a command option such as ``--triplets``).

    Examples
    --------
    >>> from sparsesim.validation import check_param
    >>> check_param(2, "C", ("float", 0, None, {"low_open": True}))
    2.0
    >>> check_param(0, "--triplets", ("n_triplets", {"allow_zero": False}))
    Traceback (most recent call last):
    ...
    sparsesim.exceptions.InvalidParameterError: --triplets must be an integer in [1, inf), got 0
    """
    kind, *args = entry
    kwargs = args.pop() if args and isinstance(args[-1], dict) else {}
    if kind.endswith("?"):
        kind = kind[:-1]
        if value is None:
            return None
    if kind == "str":
        if not isinstance(value, str):
            raise InvalidParameterError(f"{name} must be a string naming an option, got {bounded(repr(value), 80)}")
        return value
    if kind == "n_triplets":  # zero allowed unless the entry says otherwise (a fit of no triplets)
        return check_n_triplets(value, name, **{"allow_zero": True, **kwargs})
    if kind == "choice":
        return check_choice(value, name, *args)
    return _CHECKERS[kind](value, name, *args, **kwargs)


def _fingerprint(value):
    """``(type, value)`` of an immutable scalar (equal fingerprints pass the same checks), else None."""
    if type(value) in (int, float, bool, str, type(None)) or isinstance(value, (np.integer, np.floating, np.bool_)):
        return type(value), value
    return None


def _int_range(entry):
    """The integers an entry accepts, as ``(low, high)`` (None: not an integer kind)."""
    kind, *args = entry
    kwargs = args.pop() if args and isinstance(args[-1], dict) else {}
    if kind == "n_triplets":
        return (0 if kwargs.get("allow_zero", True) else 1), triplet_limit()
    if kind == "random_state":
        return 0, MAX_SEED
    if kind in ("int", "int?"):
        low, high = (list(args) + [None, None])[:2]
        return (-math.inf if low is None else low), (math.inf if high is None else high)
    return None


def _covers(entry, checked_entry, value) -> bool:
    """Whether ``value``, which passed ``checked_entry``, passes ``entry`` without evaluating it:
    the same entry, or an integer and an integer range within ``entry``'s."""
    if entry == checked_entry:
        return True
    if type(value) is bool or not isinstance(value, (int, np.integer)):
        return False
    inner, outer = _int_range(checked_entry), _int_range(entry)
    return inner is not None and outer is not None and outer[0] <= inner[0] and inner[1] <= outer[1]


@dataclass(frozen=True, eq=False)
class CheckedParams(Mapping):
    """Parameter values, some of them checked once (build it with :func:`check_param_values`).

    A mapping of the values as given (what the estimator is built with, unchanged); ``checked``
    holds, for each value that was checked, the spec entry it passed and the checked value. Given
    to :func:`record_checked` with the estimator built from them, the estimator's next
    :func:`check_params` takes those values as they are.

    Attributes
    ----------
    values : dict
        Every value, by name, as given.
    checked : dict
        Name -> ``(spec entry, checked value)`` for the values that were checked.
    """

    values: dict
    checked: dict = field(default_factory=dict)

    def __getitem__(self, name):
        return self.values[name]

    def __iter__(self):
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)

    def renamed(self, names: Mapping) -> "CheckedParams":
        """The same values under new names (``names``: old -> new; a later value wins a name)."""
        values, checked = {}, {}
        for old, value in self.values.items():
            new = names.get(old, old)
            values[new] = value
            checked.pop(new, None)
            if old in self.checked:
                checked[new] = self.checked[old]
        return CheckedParams(values, checked)

    def updated(self, values: Mapping) -> "CheckedParams":
        """These values with ``values`` added (or replaced), unchecked."""
        return CheckedParams({**self.values, **values}, {k: v for k, v in self.checked.items() if k not in values})


def check_param_values(values: Mapping, spec: Mapping, names: Mapping | None = None) -> CheckedParams:
    """Check the values whose name has an entry in ``spec`` (:func:`check_param`), once.

    Values without an entry are kept, unchecked (the estimator checks them at ``fit``);
    ``names`` maps a key to the name the messages use (default: the key).

    Examples
    --------
    >>> from sparsesim.validation import COMMON_PARAM_SPEC, check_param_values
    >>> params = check_param_values({"C": 1, "sampler": "uniform"}, COMMON_PARAM_SPEC)
    >>> dict(params), params.checked["C"][1]
    ({'C': 1, 'sampler': 'uniform'}, 1.0)
    """
    checked = {}
    for key, value in values.items():
        entry = spec.get(key)
        if entry is not None:
            checked[key] = (entry, check_param(value, (names or {}).get(key, key), entry))
    return CheckedParams(dict(values), checked)


def record_checked(estimator, params: CheckedParams) -> None:
    """Record on ``estimator`` the values of ``params`` that were checked and that it holds, so
    that its next :func:`check_params` takes them as they are.

    A value is recorded only when the estimator holds it (same type, equal) and the entry it
    passed is the estimator's own for that name, or an integer range within it (a ``--triplets``
    count in [1, limit] passes ``n_triplets``'s [0, limit]); anything else is checked at ``fit``.
    """
    spec = param_spec(estimator)
    record = estimator.__dict__.setdefault(_RECORD, {})
    for name, (checked_entry, value) in params.checked.items():
        entry = spec.get(name)
        if entry is None or not hasattr(estimator, name):
            continue
        held = _fingerprint(getattr(estimator, name))
        if held is not None and held == _fingerprint(params.values[name]) and _covers(entry, checked_entry, value):
            record[name] = (entry, held, value)


def check_params(estimator, spec: dict | None = None) -> dict:
    """Check the hyper-parameters of ``estimator`` against a declarative spec, in one place.

    ``spec`` (default: :func:`param_spec`) maps a parameter name to a tuple
    ``(kind, *args)`` with ``kind`` one of ``"int"``, ``"float"``, ``"bool"``, ``"choice"``,
    ``"random_state"``, ``"str"``, ``"n_triplets"`` and the arguments of the matching ``check_*``
    function, plus an optional trailing dict of keyword arguments, e.g. ``{"C": ("float", 0, None,
    {"low_open": True}), "n_triplets": ("int", 1, None)}``; a kind ending in ``?`` also accepts
    ``None``. The default spec is :data:`COMMON_PARAM_SPEC` (the parameters shared by the registered
    algorithms, by name) updated with the class's own ``_param_spec``. Parameters missing on the
    estimator are skipped.

    Each value is checked once: a value checked before for this estimator (here, or handed on
    by :func:`record_checked`) under the same entry is taken as it is while the estimator holds
    it; a value changed since (``set_params``, an attribute set) is checked.

    Returns
    -------
    dict
        The checked values (plain Python types).
    """
    if spec is None:
        spec = param_spec(estimator)
    record = estimator.__dict__.setdefault(_RECORD, {})
    out = {}
    for pname, entry in (spec or {}).items():
        if not hasattr(estimator, pname):
            continue
        value = getattr(estimator, pname)
        if isinstance(value, str) and value == "auto" and _default_of(estimator, pname) == "auto":
            out[pname] = value  # resolved from the data by the estimator (see its docstring)
            continue
        held = _fingerprint(value)
        seen = record.get(pname)
        if held is not None and seen is not None and seen[0] == entry and seen[1] == held:
            out[pname] = seen[2]  # checked before, unchanged since
            continue
        out[pname] = check_param(value, pname, entry)
        if held is not None:
            record[pname] = (entry, held, out[pname])
    return out


# --------------------------------------------------------------------------- file metadata
def check_meta(meta, schema: dict, what: str) -> dict:
    """Validate metadata read from a file against ``schema``; errors are FileFormatError.

    ``schema`` maps a key to ``(kind, *args)``: kinds ``"int"``, ``"float"``, ``"bool"``,
    ``"str"``, ``"choice"``, ``"dict"``, ``"list"``; a trailing ``?`` makes the key optional (and
    ``None`` allowed). ``args`` are the bounds / choices of the matching ``check_*`` function.
    Every key of the schema without ``?`` must be present. Checked values are written back as
    plain Python values.
    """
    if not isinstance(meta, dict):
        raise FileFormatError(f"{what}: metadata is a {type(meta).__name__}, expected a JSON object")
    for key, entry in schema.items():
        kind, *args = entry
        optional = kind.endswith("?")
        kind = kind.rstrip("?")
        if key not in meta:
            if optional:
                continue
            raise FileFormatError(f"{what}: metadata lacks {key!r}")
        value = meta[key]
        if value is None and optional:
            continue
        kwargs = args.pop() if args and isinstance(args[-1], dict) else {}
        try:
            if kind in ("int", "float", "bool") and not isinstance(value, (bool, int, float)):
                raise InvalidParameterError(f"{key} must be a JSON {'boolean' if kind == 'bool' else 'number'}, "
                                            f"got {type(value).__name__}")
            if kind == "int":
                meta[key] = check_int(value, key, *args, **kwargs)
            elif kind == "float":
                meta[key] = check_float(value, key, *args, **kwargs)
            elif kind == "bool":
                if not isinstance(value, bool):
                    raise InvalidParameterError(f"{key} must be true or false, got {bounded(repr(value), 40)}")
            elif kind == "str":
                if not isinstance(value, str):
                    raise InvalidParameterError(f"{key} must be a string, got {type(value).__name__}")
            elif kind == "choice":
                check_choice(value, key, *args)
            elif kind in ("dict", "list"):
                if not isinstance(value, dict if kind == "dict" else list):
                    raise InvalidParameterError(f"{key} must be a JSON {'object' if kind == 'dict' else 'array'}, "
                                                f"got {type(value).__name__}")
            else:  # pragma: no cover - schema typo
                raise ValueError(f"unknown schema kind {kind!r}")
        except InvalidParameterError as exc:
            raise FileFormatError(f"{what}: invalid metadata: {bounded(exc, 200)}") from None
    return meta
