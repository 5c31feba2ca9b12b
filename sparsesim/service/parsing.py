"""What a request may ask for, and the checks that turn a request into queries.

Holds :class:`ServiceLimits` (the bounds of one request), :class:`RequestError` (a bad request
and its HTTP status), :func:`read_body` and :func:`parse_json` (the size-capped JSON body of a
request) and :class:`QueryParsing`, the ``/query`` payload checks of
:class:`~sparsesim.service.state.QueryService`.
"""

from __future__ import annotations

import json
import numbers
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..validation import is_finite_number

__all__ = ["ServiceLimits", "RequestError", "QueryParsing", "read_body", "parse_json"]


@dataclass(frozen=True)
class ServiceLimits:
    """Bounds on what one request may ask for.

    Attributes
    ----------
    max_body_bytes : int
        Largest request body (bytes); larger bodies get 413.
    max_queries : int
        Texts or vectors per request.
    max_top_k : int
        Largest ``top_k`` (also capped at the corpus size).
    max_text_chars : int
        Longest query text.
    max_concurrency : int
        Searches computed at once; further requests wait their turn.
    limit_connections : int
        Open connections uvicorn accepts before answering 503.
    max_feedback : int
        Feedback records per ``POST /feedback``.
    """

    max_body_bytes: int = 1 << 20
    max_queries: int = 64
    max_top_k: int = 100
    max_text_chars: int = 20_000
    max_concurrency: int = 2
    limit_connections: int = 64
    max_feedback: int = 10_000


class RequestError(Exception):
    """A bad request: ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status



class QueryParsing:
    """The ``/query`` payload checks of :class:`~sparsesim.service.state.QueryService`.

    A mixin: it reads the service's ``limits``, ``index``, ``model``, ``accepts_text`` and
    ``_cosine_T`` (``None`` when plain cosine is not available).
    """

    def parse(self, payload) -> tuple[sp.csr_matrix, int, bool, bool]:
        """Validate a /query payload; return (queries, top_k, compare, snippets) or raise RequestError."""
        lim = self.limits
        if not isinstance(payload, dict):
            raise RequestError(422, "the body must be a JSON object")
        unknown = set(payload) - {"texts", "vectors", "top_k", "compare", "snippets"}
        if unknown:
            raise RequestError(422, f"unknown field(s): {', '.join(sorted(map(str, unknown)))}")
        top_k = payload.get("top_k", 10)
        if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral):
            raise RequestError(422, f"top_k must be an integer, got {json.dumps(top_k)[:40]}")
        cap = min(lim.max_top_k, self.index.n_documents)
        if not 1 <= top_k <= cap:
            raise RequestError(422, f"top_k must be between 1 and {cap}")
        flags = []
        for key in ("compare", "snippets"):
            value = payload.get(key, False)
            if not isinstance(value, bool):
                raise RequestError(422, f"{key} must be true or false")
            flags.append(value)
        if flags[0] and self._cosine_T is None:
            raise RequestError(422, "compare (plain cosine) needs the index's sparse corpus; this server serves a "
                                    "sharded index or an embedding index without one")
        has_texts, has_vectors = "texts" in payload, "vectors" in payload
        if has_texts == has_vectors:
            raise RequestError(422, 'give exactly one of "texts" or "vectors"')
        items = payload["texts"] if has_texts else payload["vectors"]
        name = "texts" if has_texts else "vectors"
        if not isinstance(items, list) or not items:
            raise RequestError(422, f"{name} must be a non-empty list")
        if len(items) > lim.max_queries:
            raise RequestError(422, f"at most {lim.max_queries} {name} per request, got {len(items)}")
        Q = self._texts(items) if has_texts else self._vectors(items)
        return Q, int(top_k), flags[0], flags[1]

    def _texts(self, texts) -> sp.csr_matrix:
        if not self.accepts_text:
            raise RequestError(422, "this index's model was not trained on text; send \"vectors\"")
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise RequestError(422, f"texts[{i}] must be a string")
            if not text.strip():
                raise RequestError(422, f"texts[{i}] is empty")
            if len(text) > self.limits.max_text_chars:
                raise RequestError(422, f"texts[{i}] is longer than {self.limits.max_text_chars} characters")
        return self.model.transform(texts)

    def _vectors(self, vectors) -> sp.csr_matrix:
        d = self.index.n_features
        rows, cols, vals = [], [], []
        for i, vec in enumerate(vectors):
            if not isinstance(vec, dict) or set(vec) != {"indices", "values"}:
                raise RequestError(422, f'vectors[{i}] must be an object with "indices" and "values"')
            idx, val = vec["indices"], vec["values"]
            if not isinstance(idx, list) or not isinstance(val, list) or len(idx) != len(val):
                raise RequestError(422, f"vectors[{i}]: indices and values must be lists of the same length")
            if len(idx) > d:
                raise RequestError(422, f"vectors[{i}] has more entries than the {d} features")
            for j in idx:
                if isinstance(j, bool) or not isinstance(j, numbers.Integral) or not 0 <= j < d:
                    raise RequestError(422, f"vectors[{i}]: indices must be integers in [0, {d})")
            for v in val:
                if not is_finite_number(v):
                    raise RequestError(422, f"vectors[{i}]: values must be finite numbers")
            rows.extend([i] * len(idx))
            cols.extend(idx)
            vals.extend(val)
        Q = sp.csr_matrix((np.asarray(vals, dtype=np.float64), (np.asarray(rows, dtype=np.int64),
                                                                 np.asarray(cols, dtype=np.int64))),
                          shape=(len(vectors), d))
        Q.sum_duplicates()
        return Q


async def read_body(request, limit: int) -> bytes:
    """The body of a JSON request, at most ``limit`` bytes, or raise RequestError."""
    ctype = request.headers.get("content-type")  # a request without one is read as JSON
    if ctype is not None and ctype.split(";")[0].strip().lower() != "application/json":
        raise RequestError(415, f"send the body as application/json, not {ctype[:60]!r}")
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise RequestError(413, f"request body larger than {limit} bytes")
        except ValueError:
            raise RequestError(400, "invalid Content-Length") from None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(413, f"request body larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json(body: bytes):
    """The decoded JSON body, or raise RequestError (400)."""
    # ValueError covers JSONDecodeError, UnicodeDecodeError and numbers beyond Python's digit limit
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise RequestError(400, f"the body is not valid JSON ({str(exc)[:200]})") from None
