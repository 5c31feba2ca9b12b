"""Checks of single parameter values: type and range, with the parameter's name and the
accepted range in the message (:func:`check_int`, :func:`check_float`, :func:`check_bool`,
:func:`check_choice`, :func:`check_random_state`), and :func:`is_finite_number` for decoded JSON.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..exceptions import InvalidParameterError
from .messages import bounded

__all__ = ["MAX_SEED", "check_bool", "check_choice", "check_float", "check_int", "check_random_state",
           "is_finite_number"]

#: The largest seed (``random_state``, ``--seed``): numpy's legacy seeding takes [0, 2**32 - 1].
MAX_SEED = 2**32 - 1


def is_finite_number(v) -> bool:
    """Whether a decoded JSON value is a real number (not a bool) that is finite as a float64;
    an integer too large for a float (hundreds of digits) is not."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def _range_text(low, high, low_open=False, high_open=False) -> str:
    if low is None and high is None:
        return "any value"
    lo = "(" if low_open or low is None else "["
    hi = ")" if high_open or high is None else "]"
    return f"{lo}{'-inf' if low is None else low}, {'inf' if high is None else high}{hi}"


def check_int(value, name: str, low=None, high=None, allow_none: bool = False):
    """``value`` as a Python int in ``[low, high]`` (``None`` passes when ``allow_none``).

    Only integers (Python or numpy) are accepted: ``3.0``, ``2.5``, booleans and strings are refused.
    """
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)):
        raise InvalidParameterError(f"{name} must be an integer in {_range_text(low, high)}, got {value!r}")
    if isinstance(value, (numbers.Integral, np.integer)):
        out = int(value)
    else:
        raise InvalidParameterError(f"{name} must be an integer in {_range_text(low, high)}, got "
                                    f"{bounded(repr(value), 80)}")
    if (low is not None and out < low) or (high is not None and out > high):
        raise InvalidParameterError(f"{name} must be an integer in {_range_text(low, high)}, got {out}")
    return out


def check_float(value, name: str, low=None, high=None, low_open: bool = False, high_open: bool = False,
                allow_none: bool = False):
    """``value`` as a finite Python float in the given range (open or closed ends)."""
    if value is None and allow_none:
        return None
    rng = _range_text(low, high, low_open, high_open)
    if low == 0 and low_open and high is None:
        return _check_positive(value, name, rng)
    out = _real(value, f"{name} must be a number in {rng}", f"{name} must be a finite number in {rng}")
    if not math.isfinite(out):
        raise InvalidParameterError(f"{name} must be a finite number in {rng}, got {out}")
    if low is not None and (out < low or (low_open and out == low)):
        raise InvalidParameterError(f"{name} must be a number in {rng}, got {out}")
    if high is not None and (out > high or (high_open and out == high)):
        raise InvalidParameterError(f"{name} must be a number in {rng}, got {out}")
    return out


def _real(value, what, what_finite) -> float:
    """``value`` (a real number, not a bool) as a float; ``what`` / ``what_finite`` start the
    message for a value of another type / one too large for a float."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.integer, np.floating)):
        raise InvalidParameterError(f"{what}, got {bounded(repr(value), 80)}")
    try:
        return float(value)
    except OverflowError:
        raise InvalidParameterError(f"{what_finite}, got a value too large") from None


def _check_positive(value, name, rng):
    what = f"{name} must be positive (a finite number in {rng})"
    out = _real(value, what, what)
    if not math.isfinite(out) or out <= 0:
        raise InvalidParameterError(f"{what}, got {out}")
    return out


def check_bool(value, name: str):
    """``value`` as a bool; only ``True``/``False`` (and numpy bools, 0 and 1) are accepted."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (numbers.Integral, np.integer)) and int(value) in (0, 1):
        return bool(value)
    raise InvalidParameterError(f"{name} must be True or False, got {bounded(repr(value), 80)}")


def check_choice(value, name: str, choices):
    """``value`` if it is one of ``choices``."""
    try:
        ok = value in choices
    except TypeError:
        ok = False
    if not ok or isinstance(value, (bool, np.bool_)) and not any(isinstance(c, bool) for c in choices):
        raise InvalidParameterError(f"{name} must be one of {', '.join(map(repr, choices))}; got "
                                    f"{bounded(repr(value), 80)}")
    return value


def check_random_state(value, name: str = "random_state"):
    """``None``, an int in [0, :data:`MAX_SEED`] or a :class:`numpy.random.Generator`/``RandomState``."""
    if value is None or isinstance(value, (np.random.Generator, np.random.RandomState)):
        return value
    return check_int(value, name, 0, MAX_SEED)
