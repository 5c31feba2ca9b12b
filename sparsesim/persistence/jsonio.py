"""Strict JSON: writing without NaN/Infinity and parsing untrusted documents of bounded size and depth."""

from __future__ import annotations

import json
import math
import re

import numpy as np

from ..exceptions import FileFormatError
from ..validation import bounded

#: Largest metadata document (bytes) read from a model file.
MAX_META_BYTES = 1 << 22
#: Deepest nesting of JSON read from a file.
MAX_JSON_DEPTH = 64


def dumps_strict(obj, **kwargs) -> str:
    """``json.dumps`` that refuses NaN/Infinity (they are not JSON): non-finite floats become ``null``."""
    return json.dumps(json_ready(obj), allow_nan=False, **kwargs)


def check_meta_limits(meta, what: str = "model") -> str:
    """``meta`` as the JSON a file stores, refused unless :func:`loads_strict` will read it back:
    at most :data:`MAX_META_BYTES` bytes of UTF-8 and :data:`MAX_JSON_DEPTH` levels of nesting.

    Writers call it before writing (and workflows before training), so no file is written that a
    later read refuses.

    Raises
    ------
    ResourceLimitError
        The metadata is too large or nested too deeply; the message names its largest entries.
    """
    from ..exceptions import ResourceLimitError

    text = dumps_strict(meta, sort_keys=True)
    size = len(text.encode("utf-8"))
    if size > MAX_META_BYTES:
        parts = sorted(((len(dumps_strict(v)), str(k)) for k, v in meta.items()), reverse=True)[:3] \
            if isinstance(meta, dict) else []
        largest = ", ".join(f"{k} ({n:,} bytes)" for n, k in parts)
        raise ResourceLimitError(f"the {what}'s metadata would take {size:,} bytes, over the {MAX_META_BYTES:,} a "
                                 f"{what} file may hold (largest: {largest}); e.g. shorten the label names")
    if _depth(meta, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        raise ResourceLimitError(f"the {what}'s metadata is nested deeper than {MAX_JSON_DEPTH} levels, more than "
                                 f"a {what} file may hold")
    return text


def json_ready(obj):
    """``obj`` with numpy scalars and arrays turned into Python values and non-finite floats into ``None``.

    Dicts, lists and tuples are converted recursively (tuples become lists), so the result can be
    written as strict JSON (no ``NaN`` / ``Infinity`` tokens).

    Parameters
    ----------
    obj : object
        A JSON-like value that may hold numpy scalars or arrays.

    Returns
    -------
    object
        The same structure with only Python scalars, lists and dicts.

    Examples
    --------
    >>> import numpy as np
    >>> json_ready({"a": np.float32(1.5), "b": [float("nan"), np.int32(2)]})
    {'a': 1.5, 'b': [None, 2]}
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, np.floating):
        value = float(obj)
        return value if math.isfinite(value) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, dict):
        return {k: json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_ready(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return json_ready(obj.tolist())
    return obj


def _reject_constant(name):
    raise ValueError(f"{name} is not valid JSON")


def _depth(obj, limit: int) -> int:
    """Nesting depth of parsed JSON, iteratively (never recursion-limited)."""
    stack = [(obj, 1)]
    deepest = 0
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if deepest > limit:
            return deepest
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return deepest


def loads_strict(text, what: str, max_bytes: int = MAX_META_BYTES, max_depth: int = MAX_JSON_DEPTH):
    """Parse untrusted JSON: bounded size and nesting, no NaN/Infinity; errors are FileFormatError."""
    if isinstance(text, (bytes, bytearray)):
        if len(text) > max_bytes:
            raise FileFormatError(f"{what}: metadata of {len(text)} bytes (at most {max_bytes} are read)")
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            raise FileFormatError(f"{what}: metadata is not UTF-8 text") from None
    if len(text) > max_bytes:
        raise FileFormatError(f"{what}: metadata of {len(text)} characters (at most {max_bytes} are read)")
    # cheap pre-check so a 100,000-deep document never reaches the recursive parser
    running = 0
    deepest = 0
    for ch in re.findall(r"[\[\]{}]", text) if text.count("[") + text.count("{") > max_depth else ():
        running += 1 if ch in "[{" else -1
        deepest = max(deepest, running)
        if deepest > max_depth:
            raise FileFormatError(f"{what}: metadata nested deeper than {max_depth} levels")
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise FileFormatError(f"{what}: corrupt metadata ({bounded(exc, 160)})") from None
    if _depth(obj, max_depth) > max_depth:
        raise FileFormatError(f"{what}: metadata nested deeper than {max_depth} levels")
    return obj
