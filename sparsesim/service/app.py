"""The Starlette application and the uvicorn server of ``sparsesim serve``.

:func:`create_app` holds the routes and their error answers: a bad request is a 4xx JSON
``{"error": ...}``; a server-side failure is a 5xx JSON ``{"error": ...}`` -- 503 while the
service cannot answer (a sharded index whose workers are gone, a full feedback queue, a stopped
feedback learner), 500 for anything unforeseen, whose cause is logged with its traceback under an
``"error_id"`` the answer names -- and the server keeps serving. :func:`serve` loads the index
once and runs uvicorn.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import uuid

from ..exceptions import ClusterError, MissingDependencyError, ResourceLimitError, SparsesimError
from ..feedback.learner import LearnerStoppedError
from .openapi import SecurityHeaders, openapi_route
from .page import page_routes
from .parsing import RequestError, ServiceLimits, json_bytes, parse_json, read_body
from .state import QueryService

__all__ = ["create_app", "serve"]

log = logging.getLogger("sparsesim.service")


def create_app(service: QueryService):
    """The Starlette application answering for ``service``."""
    import anyio
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.requests import ClientDisconnect
    from starlette.responses import Response
    from starlette.routing import Route

    limiter = anyio.CapacityLimiter(service.limits.max_concurrency)
    limit = service.limits.max_body_bytes

    def answer(content, status: int = 200):
        return Response(json_bytes(content), status_code=status, media_type="application/json")

    def error(status: int, message: str, **extra):
        return answer({"error": message, **extra}, status)

    def internal(request, exc: BaseException):
        error_id = uuid.uuid4().hex[:12]
        cause = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        service.record_internal_error(cause)
        log.error("internal error %s on %s %s (%s)", error_id, request.method, request.url.path, cause,
                  exc_info=(type(exc), exc, exc.__traceback__))
        return error(500, f"internal error ({type(exc).__name__}); the server logged its cause as {error_id} and "
                          f"keeps serving", error_id=error_id)

    def endpoint(handler, refusals=()):
        """``handler`` with the error answers: RequestError its status, ``refusals`` ((exception
        classes, status) pairs, first match) before any other project error (422), a client gone
        400, anything else 500 with the cause logged."""
        async def run(request):
            try:
                return await handler(request)
            except RequestError as exc:
                return error(exc.status, str(exc))
            except ClientDisconnect:
                return error(400, "client disconnected")
            except SparsesimError as exc:
                status = next((code for kinds, code in refusals if isinstance(exc, kinds)), 422)
                return error(status, str(exc))
            except Exception as exc:  # noqa: BLE001 - every internal failure: a 500 with a logged cause
                return internal(request, exc)
        return run

    async def query(request):
        body = await read_body(request, limit)
        payload = parse_json(body)
        queries, compare, snippets = service.parse(payload)
        remember = payload.get("texts", payload.get("vectors"))
        result = await anyio.to_thread.run_sync(service.search, queries, None, compare, snippets, remember,
                                                limiter=limiter)
        return answer(result)

    async def feedback(request):
        if service.feedback is None:
            raise RequestError(404, "this server does not learn from feedback (start it with --learn)")
        body = await read_body(request, limit)
        payload = parse_json(body)
        if isinstance(payload, list) and len(payload) > service.limits.max_feedback:
            raise RequestError(422, f"at most {service.limits.max_feedback} feedback records per request")
        queued = await anyio.to_thread.run_sync(service.feedback.submit, payload)
        fb = service.feedback.info()
        return answer({"queued": queued, "received": fb["received"], "applied": fb["applied"],
                       "version": fb["version"]}, 202)

    async def ask(request):
        if service.feedback is None:
            raise RequestError(404, "this server does not learn from feedback (start it with --learn)")
        values = {}
        for name, default in (("n", "10"), ("per_query", "1")):
            raw = request.query_params.get(name, default)
            try:
                values[name] = int(raw)
            except ValueError:
                raise RequestError(422, f"{name} must be an integer, got {raw[:40]!r}") from None
        asked = await anyio.to_thread.run_sync(
            lambda: service.feedback.ask(values["n"], per_query=values["per_query"]), limiter=limiter)
        return answer({"ask": asked})

    async def health(request):
        status, body = await anyio.to_thread.run_sync(service.health)
        return answer(body, status)

    async def info(request):
        return answer(service.info())

    async def not_found(request, exc):
        return error(exc.status_code, exc.detail)  # registered for Starlette's HTTPException only

    async def server_error(request, exc):
        return internal(request, exc)

    unavailable = ((ClusterError, LearnerStoppedError), 503)
    routes = [*page_routes(service.index_dir.name), Route("/health", endpoint(health), methods=["GET"]),
              Route("/info", endpoint(info), methods=["GET"]),
              Route("/query", endpoint(query, [unavailable]), methods=["POST"]),
              Route("/feedback", endpoint(feedback, [unavailable, (ResourceLimitError, 503)]), methods=["POST"]),
              Route("/ask", endpoint(ask, [unavailable]), methods=["GET"])]
    routes.append(openapi_route(routes))  # GET /openapi.json describes every route

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        if service.feedback is not None:  # graceful stop (SIGINT/SIGTERM): apply the queue, final snapshot
            try:
                await anyio.to_thread.run_sync(service.feedback.close)
            except Exception as exc:  # noqa: BLE001 - reported; the server still stops cleanly
                log.error("stopping the feedback learner failed: %s: %s", type(exc).__name__, exc)
                print(f"error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr,
                      flush=True)
                return
            snap = service.feedback.snapshot_info
            if snap is not None:
                print(f"feedback snapshot: {snap['path']} ({snap['n_applied']} triplets applied)", file=sys.stderr,
                      flush=True)

    from starlette.middleware import Middleware

    return Starlette(routes=routes, exception_handlers={HTTPException: not_found, Exception: server_error},
                     lifespan=lifespan, middleware=[Middleware(SecurityHeaders)])


def _log_to_stderr() -> None:
    """The service's log (internal errors with their traceback) to stderr, once."""
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def serve(index_dir, host: str = "127.0.0.1", port: int = 8000, limits: ServiceLimits | None = None,
          log_level: str = "warning", learn: dict | None = None, scheduler: str | None = None,
          sock=None) -> None:
    """Load the index once and serve it with uvicorn until interrupted.

    ``learn`` (keyword arguments of :class:`~sparsesim.feedback.FeedbackLearner`) turns on
    ``POST /feedback`` and ``GET /ask``; the final snapshot is written when the server stops
    (application shutdown, before uvicorn exits). ``scheduler`` (default
    ``$SPARSESIM_SCHEDULER``): the Dask cluster that holds a sharded index's shards. ``sock``: a
    socket already bound to ``host:port`` (``sparsesim serve`` binds it before loading the index,
    so a port in use is reported at once); uvicorn listens on it.
    """
    try:
        import starlette  # noqa: F401
        import uvicorn
    except ImportError:
        raise MissingDependencyError("sparsesim serve needs Starlette and uvicorn: pip install 'sparsesim[serve]'") from None

    _log_to_stderr()
    service = QueryService(index_dir, limits=limits, learn=learn, scheduler=scheduler)
    try:
        app = create_app(service)
        where = ""
        placement = service.index.placement()
        if placement is not None:
            shards = len(placement["shards"])
            where = (f" in {shards} shards on the Dask cluster at {service.scheduler}" if placement["distributed"]
                     else f" in {shards} shards in this process")
        print(f"serving {service.index.kind} index {index_dir} ({service.index.n_documents} documents{where}) at "
              f"http://{host}:{port}/  (POST /query, GET /info, GET /health; Ctrl-C stops)", file=sys.stderr,
              flush=True)
        config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False,
                                limit_concurrency=service.limits.limit_connections, timeout_keep_alive=5)
        server = uvicorn.Server(config)
        server.run(sockets=None if sock is None else [sock])
        if not server.started:  # uvicorn logged why (e.g. the port is taken); its own exit status
            raise SystemExit(3)
    finally:
        service.close()
