"""``sparsesim serve``: a saved index behind an HTTP JSON API and a small search page.

Built on Starlette (ASGI routing, requests, JSON responses) served by uvicorn: a small,
well-kept stack with no code generation or schema layer to learn, whose only dependencies are
already ones sparsesim's CLI pulls in (anyio, click). The index is loaded once, memory-mapped
(``load_index(mmap=True)``), and shared by all requests.

Endpoints
---------
``POST /query``
    ``{"texts": ["..."], "top_k": 10}`` (a model trained on text) or
    ``{"vectors": [{"indices": [...], "values": [...]}], "top_k": 10}``; optional
    ``"compare": true`` adds plain cosine top-k (``"cosine"``), ``"snippets": true`` adds the
    start of each document's text (a mail's Subject, then its body). ``k``, ``limit`` or ``size``
    may name ``top_k``. Answer: ``{"results": [[{"id": ..., "score": ...}, ...], ...]}``.
``GET /health``
    ``{"status": "ok"}``; ``{"status": "degraded", "problems": [...]}`` (200) while queries are
    answered but the feedback learner stopped, a snapshot failed or internal errors happened in
    the last minute; ``{"status": "unavailable", ...}`` (503) while a sharded index's shards are
    lost and cannot be loaded again (this check also retries the load).
``GET /info``
    Index kind and size, model facts, index parameters and state (incl. any calibrated recall),
    and the service's limits.
``POST /feedback`` (``serve --learn``)
    A feedback record or a list of them: triplets ``{"query": Q, "preferred": ID, "other": ID}`` or
    click logs ``{"query": Q, "clicked": [IDs], "shown": [IDs]}`` (Q: text, vector or corpus id;
    see :mod:`sparsesim.feedback`). Answer 202 ``{"queued": n, ...}``; bad feedback 422, a full
    queue 503. Queries are then answered by the newest learned model version (``"version"``).
``GET /ask?n=10&per_query=1`` (``serve --learn``)
    The triplets of recent queries' results the active rule most wants labelled (at most
    ``per_query`` per query; 0: no limit).
``GET /``
    A search page: the learned similarity's top-k beside plain cosine's for a typed text, the
    query in the address (``/?q=...&k=...``); on a ``--learn`` server, feedback buttons and the
    questions of ``/ask``. Its script and style sheet are ``/page.js`` and ``/page.css``.
``GET /openapi.json``
    The OpenAPI 3.1 description of these endpoints.

Every answer carries ``X-Content-Type-Options: nosniff``, ``X-Frame-Options: DENY``,
``Referrer-Policy: no-referrer`` and a strict ``Content-Security-Policy``.

A *sharded* index (``index build --shards N``) is served from the Dask cluster at ``scheduler``
(or ``$SPARSESIM_SCHEDULER``): its shards are loaded onto the workers and stay there while the
server runs; without a scheduler all shards are loaded into the server's process. ``compare`` is
not available for a sharded index (the corpus is not in the server). A worker lost during a
request answers 503 with a JSON error (never a top-k merged from the surviving shards); the next
request (or ``/health``) loads the shards again onto the workers there are, and answers 503
until it can.

Errors: every answer is ASCII JSON; a server-side failure is a 5xx JSON ``{"error": ...}`` --
503 while the service cannot answer, 500 (with an ``"error_id"`` under which the cause and its
traceback are logged to stderr) for anything unforeseen -- and the server keeps answering;
queries whose scores overflow float64 are refused with 422.

Limits (bad requests get a 4xx JSON ``{"error": ...}``; the server keeps answering):
request body size (413), texts/vectors per request and ``top_k`` (422), malformed JSON (400), a
``Content-Type`` other than ``application/json`` (415; a request without one is read as JSON),
and concurrent searches (requests wait for one of ``max_concurrency`` slots; uvicorn answers
503 beyond ``limit_connections`` open connections).

Modules
-------
``parsing``
    :class:`ServiceLimits`, :class:`RequestError` and the checks of a request's body and payload.
``state``
    :class:`QueryService`: the loaded index and what the endpoints need beside it.
``app``
    :func:`create_app` (the Starlette routes) and :func:`serve` (uvicorn).
``page``
    The search page (HTML, script, style sheet) and its routes.
``openapi``
    The OpenAPI document and the security-header middleware.
"""

from __future__ import annotations

from .app import create_app, serve
from .parsing import RequestError as RequestError  # raised by QueryService.parse
from .parsing import ServiceLimits
from .state import QueryService

__all__ = ["ServiceLimits", "QueryService", "create_app", "serve"]
