"""Declarative checks: an estimator's hyper-parameters against a spec (:func:`check_params`,
:data:`COMMON_PARAM_SPEC`) and file metadata against a schema (:func:`check_meta`).
"""

from __future__ import annotations

from ..exceptions import FileFormatError, InvalidParameterError
from .budgets import check_n_triplets
from .messages import bounded
from .params import check_bool, check_choice, check_float, check_int, check_random_state

__all__ = ["COMMON_PARAM_SPEC", "check_meta", "check_params"]


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

def _default_of(estimator, pname):
    import inspect

    try:
        param = inspect.signature(type(estimator).__init__).parameters.get(pname)
    except (TypeError, ValueError):
        return None
    return None if param is None else param.default


_CHECKERS = {"int": check_int, "float": check_float, "bool": check_bool, "choice": check_choice,
             "random_state": check_random_state}


def check_params(estimator, spec: dict | None = None) -> dict:
    """Check the hyper-parameters of ``estimator`` against a declarative spec, in one place.

    ``spec`` (default: ``type(estimator)._param_spec``) maps a parameter name to a tuple
    ``(kind, *args)`` with ``kind`` one of ``"int"``, ``"float"``, ``"bool"``, ``"choice"``,
    ``"random_state"``, ``"str"``, ``"n_triplets"`` and the arguments of the matching ``check_*``
    function, plus an optional trailing dict of keyword arguments, e.g. ``{"C": ("float", 0, None,
    {"low_open": True}), "n_triplets": ("int", 1, None)}``; a kind ending in ``?`` also accepts
    ``None``. The default spec is :data:`COMMON_PARAM_SPEC` (the parameters shared by the registered
    algorithms, by name) updated with the class's own ``_param_spec``. Parameters missing on the
    estimator are skipped.

    Returns
    -------
    dict
        The checked values (plain Python types).
    """
    if spec is None:
        spec = dict(COMMON_PARAM_SPEC)
        spec.update(getattr(type(estimator), "_param_spec", None) or {})
    out = {}
    for pname, entry in (spec or {}).items():
        if not hasattr(estimator, pname):
            continue
        kind, *args = entry
        kwargs = args.pop() if args and isinstance(args[-1], dict) else {}
        value = getattr(estimator, pname)
        if isinstance(value, str) and value == "auto" and _default_of(estimator, pname) == "auto":
            out[pname] = value  # resolved from the data by the estimator (see its docstring)
            continue
        if kind.endswith("?"):
            kind = kind[:-1]
            if value is None:
                out[pname] = None
                continue
        if kind == "str":
            if not isinstance(value, str):
                raise InvalidParameterError(f"{pname} must be a string naming an option, got {bounded(repr(value), 80)}")
            out[pname] = value
        elif kind == "n_triplets":
            out[pname] = check_n_triplets(value, pname, allow_zero=True)
        elif kind == "choice":
            out[pname] = check_choice(value, pname, *args)
        else:
            out[pname] = _CHECKERS[kind](value, pname, *args, **kwargs)
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
