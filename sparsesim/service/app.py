"""The Starlette application and the uvicorn server of ``sparsesim serve``.

:func:`create_app` holds the routes and their error answers (a bad request is a 4xx JSON
``{"error": ...}``, never a crash); :func:`serve` loads the index once and runs uvicorn.
"""

from __future__ import annotations

import contextlib
import sys

from ..exceptions import ClusterError, InvalidInputError, MissingDependencyError, ResourceLimitError, SparsesimError
from .openapi import SecurityHeaders, openapi_route
from .page import page_routes
from .parsing import RequestError, ServiceLimits, parse_json, read_body
from .state import QueryService

__all__ = ["create_app", "serve"]


def create_app(service: QueryService):
    """The Starlette application answering for ``service``."""
    import anyio
    from starlette.applications import Starlette
    from starlette.requests import ClientDisconnect
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    limiter = anyio.CapacityLimiter(service.limits.max_concurrency)
    limit = service.limits.max_body_bytes

    def error(status: int, message: str):
        return JSONResponse({"error": message}, status_code=status)

    async def query(request):
        try:
            body = await read_body(request, limit)
            payload = parse_json(body)
            Q, top_k, compare, snippets = service.parse(payload)
            remember = payload.get("texts", payload.get("vectors"))
            result = await anyio.to_thread.run_sync(service.search, Q, top_k, compare, snippets, remember,
                                                    limiter=limiter)
            return JSONResponse(result)
        except RequestError as exc:
            return error(exc.status, str(exc))
        except ClusterError as exc:  # a lost Dask worker: the next request loads the shards again
            return error(503, str(exc))
        except SparsesimError as exc:
            return error(422, str(exc))
        except ClientDisconnect:
            return error(400, "client disconnected")

    async def feedback(request):
        try:
            if service.feedback is None:
                raise RequestError(404, "this server does not learn from feedback (start it with --learn)")
            body = await read_body(request, limit)
            payload = parse_json(body)
            if isinstance(payload, list) and len(payload) > service.limits.max_feedback:
                raise RequestError(422, f"at most {service.limits.max_feedback} feedback records per request")
            queued = await anyio.to_thread.run_sync(service.feedback.submit, payload)
            fb = service.feedback.info()
            return JSONResponse({"queued": queued, "received": fb["received"], "applied": fb["applied"],
                                 "version": fb["version"]}, status_code=202)
        except RequestError as exc:
            return error(exc.status, str(exc))
        except ResourceLimitError as exc:
            return error(503, str(exc))
        except SparsesimError as exc:
            return error(422, str(exc))
        except ClientDisconnect:
            return error(400, "client disconnected")

    async def ask(request):
        try:
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
            return JSONResponse({"ask": asked})
        except RequestError as exc:
            return error(exc.status, str(exc))
        except InvalidInputError as exc:
            return error(422, str(exc))

    async def health(request):
        return JSONResponse({"status": "ok"})

    async def info(request):
        return JSONResponse(service.info())

    async def not_found(request, exc):
        return error(getattr(exc, "status_code", 404), getattr(exc, "detail", "not found"))

    async def server_error(request, exc):
        return error(500, f"internal error ({type(exc).__name__})")

    routes = [*page_routes(service.index_dir.name), Route("/health", health, methods=["GET"]),
              Route("/info", info, methods=["GET"]), Route("/query", query, methods=["POST"]),
              Route("/feedback", feedback, methods=["POST"]), Route("/ask", ask, methods=["GET"])]
    routes.append(openapi_route(routes))  # GET /openapi.json describes every route
    from starlette.exceptions import HTTPException

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        if service.feedback is not None:  # graceful stop (SIGINT/SIGTERM): apply the queue, final snapshot
            await anyio.to_thread.run_sync(service.feedback.close)
            snap = service.feedback.snapshot_info
            if snap is not None:
                print(f"feedback snapshot: {snap['path']} ({snap['n_applied']} triplets applied)", file=sys.stderr,
                      flush=True)

    from starlette.middleware import Middleware

    return Starlette(routes=routes, exception_handlers={HTTPException: not_found, Exception: server_error},
                     lifespan=lifespan, middleware=[Middleware(SecurityHeaders)])



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

    service = QueryService(index_dir, limits=limits, learn=learn, scheduler=scheduler)
    try:
        app = create_app(service)
        where = ""
        if service.sharded:
            shards = len(service.index.shard_sizes_)
            where = (f" in {shards} shards on the Dask cluster at {service.scheduler}" if service.scheduler
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
