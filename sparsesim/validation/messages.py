"""Error-message helpers shared by every check.

:func:`bounded` cuts a message built from user or file content to :data:`MAX_MESSAGE`
characters, so a hostile file cannot make a one-line error hundreds of megabytes long.
"""

from __future__ import annotations

__all__ = ["MAX_MESSAGE", "bounded"]

#: Longest error message (characters) built from user or file content.
MAX_MESSAGE = 400


def bounded(text, limit: int = MAX_MESSAGE) -> str:
    """``str(text)`` cut to ``limit`` characters (with a marker saying how much was cut)."""
    text = str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters]"
