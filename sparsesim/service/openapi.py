"""The HTTP API's OpenAPI 3.1 description (``GET /openapi.json``) and the security headers every
answer carries.

The document is assembled with Starlette's :class:`~starlette.schemas.SchemaGenerator`: the
generator lists the application's routes, and each route's operation (summary, request body,
answers) comes from :data:`OPERATIONS`, so a route without a description (or a description
without a route) is caught by the tests. JSON Schemas of the bodies are in :data:`SCHEMAS`.

:class:`SecurityHeaders` (ASGI middleware) adds to every response ``X-Content-Type-Options:
nosniff``, ``X-Frame-Options: DENY``, ``Referrer-Policy: no-referrer`` and a
``Content-Security-Policy`` that allows nothing but the page's own script, style sheet and
requests to this server (``default-src 'none'``, no inline code, no framing).
"""

from __future__ import annotations

__all__ = ["SecurityHeaders", "openapi_document", "openapi_route", "SECURITY_HEADERS", "OPERATIONS", "SCHEMAS"]

#: The Content-Security-Policy of every answer: the page loads its own script and style sheet,
#: talks only to this server, and cannot be framed; JSON answers need none of it.
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                           "img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")

SECURITY_HEADERS = {
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "content-security-policy": CONTENT_SECURITY_POLICY,
}


class SecurityHeaders:
    """ASGI middleware: :data:`SECURITY_HEADERS` on every HTTP response of the routes (4xx answers
    included; an unexpected exception's 500 is answered by Starlette's outermost error handler)."""

    def __init__(self, app):
        self.app = app
        self._headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in SECURITY_HEADERS.items()]

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                message = dict(message)
                message["headers"] = list(message.get("headers", [])) + [
                    (k, v) for k, v in self._headers if k not in present]
            await send(message)

        await self.app(scope, receive, send_with_headers)


# --------------------------------------------------------------------------- the description
_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}
_HIT = {"type": "object", "required": ["id", "score"], "properties": {
    "id": {"type": ["string", "integer"], "description": "Document id (file path, id column or row number)."},
    "score": {"type": "number", "description": "Learned similarity S(q, d) = q^T M d (unbounded); "
                                               "in the cosine list: the cosine in [0, 1]."},
    "snippet": {"type": "string", "description": "Title and start of the document's text (with snippets)."},
    "label": {"type": "string", "description": "The document's class name, when the index stores one (with snippets)."}}}
_VECTOR = {"type": "object", "required": ["indices", "values"], "additionalProperties": False, "properties": {
    "indices": {"type": "array", "items": {"type": "integer", "minimum": 0}},
    "values": {"type": "array", "items": {"type": "number"}}}}
_QUERY_ID = {"description": "A query: text, sparse vector or corpus document id.",
             "oneOf": [{"type": "string"}, {"type": "integer"}, {"$ref": "#/components/schemas/Vector"}]}

SCHEMAS = {
    "Error": _ERROR,
    "Hit": _HIT,
    "Vector": _VECTOR,
    "QueryRequest": {
        "type": "object", "additionalProperties": False,
        "description": 'Exactly one of "texts" or "vectors". "k", "limit" and "size" are accepted as '
                       'names of "top_k" (give one of them).',
        "properties": {
            "texts": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                      "description": "Query texts (a model trained on text)."},
            "vectors": {"type": "array", "items": {"$ref": "#/components/schemas/Vector"}, "minItems": 1},
            "top_k": {"type": "integer", "minimum": 1, "default": 10,
                      "description": "Results per query, at most the server's --max-top-k and the corpus size."},
            "k": {"type": "integer", "minimum": 1, "description": "Same as top_k."},
            "limit": {"type": "integer", "minimum": 1, "description": "Same as top_k."},
            "size": {"type": "integer", "minimum": 1, "description": "Same as top_k."},
            "compare": {"type": "boolean", "default": False, "description": "Add plain cosine top-k (\"cosine\")."},
            "snippets": {"type": "boolean", "default": False, "description": "Add each hit's snippet."}}},
    "QueryResponse": {
        "type": "object", "required": ["results"], "properties": {
            "results": {"type": "array", "items": {"type": "array", "items": {"$ref": "#/components/schemas/Hit"}},
                        "description": "One ranked list per query, best first."},
            "cosine": {"type": "array", "items": {"type": "array", "items": {"$ref": "#/components/schemas/Hit"}}},
            "version": {"type": "integer", "description": "Model version that answered (--learn servers)."}}},
    "Feedback": {
        "description": "A triplet (preferred ranks above other for query) or a click log.",
        "oneOf": [
            {"type": "object", "required": ["query", "preferred", "other"],
             "properties": {"query": _QUERY_ID, "preferred": {"type": ["string", "integer"]},
                            "other": {"type": ["string", "integer"]}}},
            {"type": "object", "required": ["query", "clicked", "shown"],
             "properties": {"query": _QUERY_ID, "clicked": {"type": "array", "items": {"type": ["string", "integer"]}},
                            "shown": {"type": "array", "items": {"type": ["string", "integer"]}}}}]},
    "FeedbackResponse": {"type": "object", "properties": {
        "queued": {"type": "integer"}, "received": {"type": "integer"}, "applied": {"type": "integer"},
        "version": {"type": "integer"}}},
    "AskResponse": {"type": "object", "required": ["ask"], "properties": {"ask": {"type": "array", "items": {
        "type": "object", "properties": {
            "query": _QUERY_ID, "first": {"type": ["string", "integer"]}, "second": {"type": ["string", "integer"]},
            "margin": {"type": "number"}, "p_query": {"type": "number"}}}}}},
    "Info": {"type": "object", "description": "Index kind and size, model facts, index parameters and state, "
                                              "the service's limits and (--learn) the feedback counters.",
             "properties": {"kind": {"type": "string"}, "n_documents": {"type": "integer"},
                            "n_features": {"type": "integer"}, "accepts_text": {"type": "boolean"},
                            "limits": {"type": "object"}, "feedback": {"type": ["object", "null"]}}},
}


def _json(ref: str) -> dict:
    return {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}}


def _error(description: str) -> dict:
    return {"description": description, "content": _json("Error")}


_BAD = {"400": _error("Malformed JSON."), "413": _error("Body larger than --max-body-bytes."),
        "415": _error("Content-Type other than application/json."),
        "422": _error("A valid JSON body that asks for something invalid (the message says what).")}

#: Operation per (path, method) of the application's routes.
OPERATIONS = {
    ("/query", "post"): {
        "summary": "Top-k most similar documents for texts or sparse vectors",
        "requestBody": {"required": True, "content": _json("QueryRequest")},
        "responses": {"200": {"description": "Ranked results per query.", "content": _json("QueryResponse")},
                      **_BAD, "503": _error("A Dask worker holding a shard was lost; retry.")}},
    ("/feedback", "post"): {
        "summary": "Learn from feedback (serve --learn)",
        "requestBody": {"required": True, "content": {"application/json": {"schema": {"oneOf": [
            {"$ref": "#/components/schemas/Feedback"},
            {"type": "array", "items": {"$ref": "#/components/schemas/Feedback"}}]}}}},
        "responses": {"202": {"description": "Queued for learning.", "content": _json("FeedbackResponse")},
                      **_BAD, "404": _error("This server does not learn (started without --learn)."),
                      "503": _error("The feedback queue is full; retry later.")}},
    ("/ask", "get"): {
        "summary": "Pairs of results the model most wants labelled (serve --learn)",
        "parameters": [
            {"name": "n", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 10}},
            {"name": "per_query", "in": "query", "schema": {"type": "integer", "minimum": 0, "default": 1},
             "description": "At most this many questions per recent query (0: no limit)."}],
        "responses": {"200": {"description": "Questions, most wanted first.", "content": _json("AskResponse")},
                      "404": _error("This server does not learn (started without --learn)."),
                      "422": _error("n or per_query out of range.")}},
    ("/info", "get"): {"summary": "Index, model and service facts",
                       "responses": {"200": {"description": "Facts.", "content": _json("Info")}}},
    ("/health", "get"): {"summary": "Liveness",
                         "responses": {"200": {"description": "The server answers.", "content": {
                             "application/json": {"schema": {"type": "object"}}}}}},
    ("/", "get"): {"summary": "The search page (HTML)",
                   "responses": {"200": {"description": "HTML page.", "content": {"text/html": {}}}}},
    ("/page.js", "get"): {"summary": "The search page's script",
                          "responses": {"200": {"description": "JavaScript.", "content": {"text/javascript": {}}}}},
    ("/page.css", "get"): {"summary": "The search page's style sheet",
                           "responses": {"200": {"description": "CSS.", "content": {"text/css": {}}}}},
    ("/openapi.json", "get"): {"summary": "This description (OpenAPI 3.1)",
                               "responses": {"200": {"description": "OpenAPI document.",
                                                     "content": {"application/json": {}}}}},
}


def openapi_document(routes, version: str, title: str = "sparsesim serve") -> dict:
    """The OpenAPI 3.1 document of ``routes`` (Starlette routes)."""
    from starlette.schemas import SchemaGenerator

    generator = SchemaGenerator({"openapi": "3.1.0", "info": {"title": title, "version": version}})
    paths: dict = {}
    for endpoint in generator.get_endpoints(routes):
        key = (endpoint.path, endpoint.http_method)
        if key not in OPERATIONS:
            raise KeyError(f"no OpenAPI description of {endpoint.http_method.upper()} {endpoint.path}")
        paths.setdefault(endpoint.path, {})[endpoint.http_method] = OPERATIONS[key]
    return {"openapi": "3.1.0",
            "info": {"title": title, "version": version,
                     "description": "Top-k retrieval with a learned similarity (sparsesim). Bad requests get a "
                                    "4xx JSON {\"error\": ...}; see docs/service.md."},
            "paths": paths, "components": {"schemas": SCHEMAS}}


def openapi_route(routes):
    """``GET /openapi.json`` describing ``routes`` plus itself."""
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from .. import __version__

    document: dict = {}

    async def openapi(request):
        return JSONResponse(document)

    route = Route("/openapi.json", openapi, methods=["GET"], include_in_schema=True)
    document.update(openapi_document([*routes, route], __version__))
    return route
