"""Error-message helpers shared by every check.

:func:`bounded` cuts a message built from user or file content to :data:`MAX_MESSAGE`
characters, so a hostile file cannot make a one-line error hundreds of megabytes long.
:func:`resolve_name` looks a user-typed name up among the registered ones: exact, then
case-insensitive, else an error with the closest names (``difflib``) and the full list.
"""

from __future__ import annotations

import difflib

from ..exceptions import UnknownNameError

__all__ = ["MAX_MESSAGE", "bounded", "resolve_name"]

#: Longest error message (characters) built from user or file content.
MAX_MESSAGE = 400


def bounded(text, limit: int = MAX_MESSAGE) -> str:
    """``str(text)`` cut to ``limit`` characters (with a marker saying how much was cut)."""
    text = str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters]"


def resolve_name(name, known, what: str, hint: str = "", error=UnknownNameError) -> str:
    """The registered spelling of ``name`` among ``known``.

    An exact match wins; otherwise a unique case-insensitive match is accepted
    (``OASIS`` -> ``oasis``). Anything else raises ``error`` (default
    :class:`~sparsesim.exceptions.UnknownNameError`) naming the closest known names
    (``difflib``, "did you mean ...?") and every known name.

    Parameters
    ----------
    name : str
        What the user typed.
    known : iterable of str
        The registered names.
    what : str
        What a name names, for the message (``"algorithm"``, ``"data set"``, ...).
    hint : str, optional
        Appended to the message (e.g. "or pass a path").
    error : type, optional
        Exception class raised for an unknown name.

    Returns
    -------
    str

    Examples
    --------
    >>> resolve_name("OASIS", ["oasis", "sors-l1"], "algorithm")
    'oasis'
    >>> resolve_name("oasiss", ["oasis", "sors-l1"], "algorithm")
    Traceback (most recent call last):
    ...
    sparsesim.exceptions.UnknownNameError: unknown algorithm 'oasiss' (did you mean 'oasis'?); known: oasis, sors-l1
    """
    known = list(known)
    if name in known:
        return name
    text = str(name)
    folded = [k for k in known if k.lower() == text.lower()]
    if len(folded) == 1:
        return folded[0]
    if folded:  # names that differ only by case: name them all
        close = folded
    else:
        by_lower: dict = {}
        for k in known:
            by_lower.setdefault(k.lower(), []).append(k)
        lowered = difflib.get_close_matches(text.lower(), list(by_lower), n=3, cutoff=0.6)
        close = [k for low in lowered for k in by_lower[low]]
    guess = ""
    if close:
        guess = " (did you mean " + " or ".join(map(repr, close)) + "?)"
    listed = ", ".join(sorted(known)) or "none"
    raise error(bounded(f"unknown {what} {bounded(repr(text), 80)}{guess}; known: {listed}{hint}", 2000))
