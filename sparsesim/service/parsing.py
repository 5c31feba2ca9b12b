"""What a request may ask for, and the checks that turn a request into queries.

Holds :class:`ServiceLimits` (the bounds of one request), :class:`RequestError` (a bad request
and its HTTP status), :func:`read_body` and :func:`parse_json` (the size-capped JSON body of a
request), :class:`QueryParsing`, the ``/query`` payload checks of
:class:`~sparsesim.service.state.QueryService`, and :func:`json_bytes`, the encoding of every
JSON answer (it cannot fail: see its docstring).
"""

from __future__ import annotations

import json
import numbers
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..validation import CheckedQueries, is_finite_number

__all__ = ["ServiceLimits", "RequestError", "QueryParsing", "read_body", "parse_json", "json_bytes", "top_k_of",
           "unknown_fields_message", "QUERY_FIELDS", "TOP_K_ALIASES"]


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



#: The fields of a ``/query`` body.
QUERY_FIELDS = frozenset({"texts", "vectors", "top_k", "compare", "snippets"})
#: Names other search APIs use for ``top_k`` (faiss/this CLI ``k``, OpenSearch ``size``, Qdrant ``limit``).
TOP_K_ALIASES = ("k", "limit", "size")
#: Hints for fields other search APIs use that mean something else here.
_FIELD_HINTS = {"text": 'send "texts": [TEXT] (a list)', "query": 'send "texts": [TEXT] (a list of query texts)',
                "q": 'send "texts": [TEXT] (a list of query texts)', "vector": 'send "vectors": [VECTOR] (a list)',
                "queries": 'send "texts": [...] or "vectors": [...]', "from": "paging is not supported; ask for "
                "a larger top_k", "offset": "paging is not supported; ask for a larger top_k"}


def unknown_fields_message(unknown) -> str:
    """The 422 message for unknown ``/query`` fields: each with a hint or the closest field name."""
    import difflib

    parts = []
    for name in sorted(map(str, unknown)):
        hint = _FIELD_HINTS.get(name.lower())
        if hint is None:
            close = difflib.get_close_matches(name.lower(), sorted(QUERY_FIELDS), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else ""
        parts.append(f"{name[:40]!r}" + (f" ({hint})" if hint else ""))
    return (f"unknown field(s): {', '.join(parts)}; known: {', '.join(sorted(QUERY_FIELDS))} "
            f"(and {', '.join(TOP_K_ALIASES)} for top_k)")


def top_k_of(payload: dict):
    """``top_k`` of a ``/query`` body, also given as ``k``, ``limit`` or ``size`` (one of them)."""
    given = [name for name in ("top_k", *TOP_K_ALIASES) if name in payload]
    if len(given) > 1:
        raise RequestError(422, f"give the result count once: {', '.join(given)} all name top_k")
    return payload[given[0]] if given else 10


class QueryParsing:
    """The ``/query`` payload checks of :class:`~sparsesim.service.state.QueryService`.

    A mixin: it reads the service's ``limits``, ``index``, ``n_documents``, ``model``,
    ``accepts_text`` and ``_cosine_T`` (``None`` when plain cosine is not available).
    """

    def parse(self, payload) -> tuple[CheckedQueries, bool, bool]:
        """Validate a /query payload once; return (queries, compare, snippets) or raise RequestError.

        ``queries`` holds the canonical query rows and ``top_k``, checked here: the search and the
        feedback learner use them as they are."""
        lim = self.limits
        if not isinstance(payload, dict):
            raise RequestError(422, "the body must be a JSON object")
        unknown = set(payload) - QUERY_FIELDS - set(TOP_K_ALIASES)
        if unknown:
            raise RequestError(422, unknown_fields_message(unknown))
        top_k = top_k_of(payload)
        if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral):
            raise RequestError(422, f"top_k must be an integer, got {json.dumps(top_k)[:40]}")
        cap = min(lim.max_top_k, self.n_documents)  # the index's size, also while its shards are reloaded
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
        return CheckedQueries(rows=Q, top_k=int(top_k)), flags[0], flags[1]

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
        Q = sp.csr_matrix(self.model.transform(texts), dtype=np.float64)
        Q.sum_duplicates()  # canonical form (sorted indices), as the vectors below
        return Q

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
        if Q.nnz and not np.isfinite(Q.data).all():  # the one check of these rows: the index trusts them
            raise RequestError(422, "queries: summing duplicate entries overflows to infinity")
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


def _finite_or_null(obj):
    if isinstance(obj, float):
        return obj if np.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _finite_or_null(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_or_null(v) for v in obj]
    return obj


def json_bytes(content) -> bytes:
    """``content`` as the bytes of a JSON answer; never raises for the service's own answers.

    ASCII-only (``\\uXXXX`` escapes), so a document id or snippet that is not valid Unicode (a
    file name in another encoding, read with surrogate escapes) is sent as its escapes and comes
    back unchanged in ``/feedback``; a non-finite float (the answers are checked before, so this
    only guards facts such as ``/info``'s) is written as ``null`` rather than as the invalid
    JSON ``NaN``.

    Examples
    --------
    >>> json_bytes({"id": "caf\\udce9.txt", "score": float("inf")})
    b'{"id":"caf\\\\udce9.txt","score":null}'
    """
    try:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")
    except ValueError:  # a non-finite float somewhere
        return json.dumps(_finite_or_null(content), ensure_ascii=True, allow_nan=False,
                          separators=(",", ":")).encode("ascii")
