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
    start of each document's text. Answer: ``{"results": [[{"id": ..., "score": ...}, ...], ...]}``.
``GET /health``
    ``{"status": "ok"}``.
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
    A search page: the learned similarity's top-k beside plain cosine's for a typed text.

A *sharded* index (``index build --shards N``) is served from the Dask cluster at ``scheduler``
(or ``$SPARSESIM_SCHEDULER``): its shards are loaded onto the workers and stay there while the
server runs; without a scheduler all shards are loaded into the server's process. ``compare`` is
not available for a sharded index (the corpus is not in the server). A worker lost during a
request answers 503 with a JSON error (never a top-k merged from the surviving shards); the next
request loads the shards again onto the workers that remain.

Limits (bad requests get a 4xx JSON ``{"error": ...}``; the server keeps answering):
request body size (413), texts/vectors per request and ``top_k`` (422), malformed JSON (400), a
``Content-Type`` other than ``application/json`` (415; a request without one is read as JSON),
and concurrent searches (requests wait for one of ``max_concurrency`` slots; uvicorn answers
503 beyond ``limit_connections`` open connections).
"""

from __future__ import annotations

import contextlib
import json
import numbers
import sys
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .distributed import connect, resolve_scheduler
from .exceptions import ClusterError, InvalidInputError, MissingDependencyError, ResourceLimitError, SparsesimError
from .feedback import FeedbackLearner
from .topk import top_k_rows
from .validation import is_finite_number

__all__ = ["ServiceLimits", "QueryService", "create_app", "serve"]


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


class QueryService:
    """A loaded index plus what the endpoints need (cosine baseline, snippets, facts).

    Parameters
    ----------
    index_dir : path-like
        Directory written by ``sparsesim index build``.
    limits : ServiceLimits, optional
    mmap : bool, default True
        Memory-map the index arrays (read-only).
    learn : dict, optional
        Keyword arguments of :class:`~sparsesim.feedback.FeedbackLearner` (``snapshot``,
        ``snapshot_every``, ...): learn from feedback while serving. ``None`` serves frozen.
    scheduler : str, optional
        Dask scheduler address (default ``$SPARSESIM_SCHEDULER``) holding the shards of a sharded
        index; only for a sharded index.

    Raises
    ------
    InvalidInputError
        A scheduler for a single-process index, or ``learn`` for a sharded one.
    ClusterError
        The scheduler cannot be reached, or a worker was lost while loading the shards.
    """

    def __init__(self, index_dir, limits: ServiceLimits | None = None, mmap: bool = True,
                 learn: dict | None = None, scheduler: str | None = None):
        from .indexes import load_index, read_manifest
        from .indexes.sharded import is_sharded, read_sharded_manifest

        self.index_dir = Path(index_dir)
        self.limits = limits or ServiceLimits()
        self.scheduler = resolve_scheduler(scheduler)
        self.sharded = is_sharded(self.index_dir)
        self._client = None
        self._exit = contextlib.ExitStack()
        self._reload = threading.Lock()
        self._stale = None  # the sharded index that lost a shard: replaced before the next search
        if self.sharded:
            if learn is not None:
                raise InvalidInputError(f"{self.index_dir} is a sharded index; --learn serves a single-process "
                                        f"index (build one without --shards)")
            self.manifest = read_sharded_manifest(self.index_dir)
            if self.scheduler is not None:
                self._client = self._exit.enter_context(connect(self.scheduler))
            try:
                self.index = self._load_sharded()
            except BaseException:
                self._exit.close()
                raise
            self._cosine_T, self.snippets = None, None
        else:
            if self.scheduler is not None:
                raise InvalidInputError(f"{self.index_dir} is a single-process index; a scheduler serves sharded "
                                        f"indexes (build one with `index build --shards N`), or drop --scheduler")
            self.index = load_index(self.index_dir, mmap=mmap)
            self.manifest = read_manifest(self.index_dir)
            X = sp.csr_matrix(self.index.X_)
            norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
            self._cosine_T = (sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ X).T.tocsr()
            self.snippets = self.index.snippets_
        self.model = self.index.model
        self.feedback = None if learn is None else FeedbackLearner(self.index, **learn)

    def _load_sharded(self):
        from .indexes.sharded import load_sharded

        # on a cluster the workers load their shards; in-process the shards are memory-mapped
        return load_sharded(self.index_dir, client=self._client, mmap=self._client is None)

    def close(self):
        """Release a sharded index's shards and the cluster connection (nothing for a single index)."""
        if self.sharded:
            with contextlib.suppress(Exception):
                self.index.release()
        self._exit.close()

    # -- facts ------------------------------------------------------------------------------
    @property
    def accepts_text(self) -> bool:
        return self.model.featurizer is not None

    def info(self) -> dict:
        meta = self.model.metadata
        sharded = None
        if self.sharded:
            index = self.index
            sharded = {"shards": list(index.shard_sizes_), "scheduler": self.scheduler,
                       "workers": len(set(index.shard_workers_)) if self._client is not None else 0}
        return {
            "index": str(self.index_dir), "kind": self.index.kind, "n_documents": int(self.index.n_documents),
            "n_features": int(self.index.n_features), "accepts_text": self.accepts_text,
            "snippets": self.snippets is not None, "compare": self._cosine_T is not None, "sharded": sharded,
            "model": {"algorithm": meta.get("algorithm"), "params": meta.get("params"), "nnz": self.model.nnz(),
                      "dataset": meta.get("dataset"), "checksum": self.manifest["model"].get("checksum")},
            "index_params": self.manifest.get("params"), "index_state": self.manifest.get("state"),
            "limits": asdict(self.limits),
            "feedback": None if self.feedback is None else self.feedback.info(),
        }

    # -- requests ---------------------------------------------------------------------------
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
            raise RequestError(422, "compare (plain cosine) needs a single-process index; this server serves a "
                                    "sharded index")
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

    def search(self, Q, top_k: int, compare: bool = False, snippets: bool = False, remember=None) -> dict:
        """Top-k (learned similarity) per query row, plus plain cosine top-k when ``compare``.

        When learning from feedback, the newest model version answers (``"version"``) and the
        queries as sent (``remember``) are kept for ``/ask``.
        """
        if self.feedback is not None:
            ids, scores, version = self.feedback.query(Q, top_k, remember=remember)
        elif self.sharded:
            ids, scores = self._query_sharded(Q, top_k)
        else:
            ids, scores = self.index.query(Q, top_k)
        out = {"results": [self._hits(row_ids, row_scores, None, snippets) for row_ids, row_scores in zip(ids, scores)]}
        if self.feedback is not None:
            out["version"] = version
        if compare:
            norms = np.sqrt(np.asarray(Q.multiply(Q).sum(axis=1)).ravel())
            Qn = sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ Q
            out["cosine"] = []
            for q in range(Qn.shape[0]):  # one dense row of n_documents at a time, never queries x corpus
                dense = (Qn[q] @ self._cosine_T).toarray()
                rows, vals = top_k_rows(dense, top_k)
                out["cosine"].append(self._hits(self.index.ids_[rows[0]], vals[0], rows[0], snippets))
        return out

    def _query_sharded(self, Q, top_k: int):
        """Search the sharded index; after a lost shard (ClusterError), the next call first
        loads the shards again onto the workers that remain."""
        if self._stale is not None:
            with self._reload:
                if self._stale is self.index:
                    with contextlib.suppress(Exception):
                        self.index.release()
                    self.index = self._load_sharded()
                    self._stale = None
        index = self.index
        try:
            return index.query(Q, top_k)
        except ClusterError:
            if self._client is not None:
                self._stale = index
            raise

    def _hits(self, ids, scores, rows, snippets: bool) -> list[dict]:
        hits = [{"id": i.item() if hasattr(i, "item") else i, "score": float(s)} for i, s in zip(ids, scores)]
        if snippets and self.snippets is not None:
            if rows is None:
                rows = self._rows_of(ids)
            for hit, r in zip(hits, rows):
                hit["snippet"] = str(self.snippets[int(r)])
        return hits

    def _rows_of(self, ids) -> list[int]:
        if not hasattr(self, "_id_rows"):
            self._id_rows = {(v.item() if hasattr(v, "item") else v): r for r, v in enumerate(self.index.ids_)}
        return [self._id_rows[i.item() if hasattr(i, "item") else i] for i in ids]


def create_app(service: QueryService):
    """The Starlette application answering for ``service``."""
    import anyio
    from starlette.applications import Starlette
    from starlette.requests import ClientDisconnect
    from starlette.responses import HTMLResponse, JSONResponse
    from starlette.routing import Route

    limiter = anyio.CapacityLimiter(service.limits.max_concurrency)
    limit = service.limits.max_body_bytes

    def error(status: int, message: str):
        return JSONResponse({"error": message}, status_code=status)

    async def read_body(request) -> bytes:
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
        # ValueError covers JSONDecodeError, UnicodeDecodeError and numbers beyond Python's digit limit
        try:
            return json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise RequestError(400, f"the body is not valid JSON ({str(exc)[:200]})") from None

    async def query(request):
        try:
            body = await read_body(request)
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
            body = await read_body(request)
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

    async def page(request):
        return HTMLResponse(_PAGE.replace("__TITLE__", _html_escape(service.index_dir.name)))

    async def not_found(request, exc):
        return error(getattr(exc, "status_code", 404), getattr(exc, "detail", "not found"))

    async def server_error(request, exc):
        return error(500, f"internal error ({type(exc).__name__})")

    routes = [Route("/", page, methods=["GET"]), Route("/health", health, methods=["GET"]),
              Route("/info", info, methods=["GET"]), Route("/query", query, methods=["POST"]),
              Route("/feedback", feedback, methods=["POST"]), Route("/ask", ask, methods=["GET"])]
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

    return Starlette(routes=routes, exception_handlers={HTTPException: not_found, Exception: server_error},
                     lifespan=lifespan)


def _html_escape(text: str) -> str:
    import html

    return html.escape(text, quote=True)


def serve(index_dir, host: str = "127.0.0.1", port: int = 8000, limits: ServiceLimits | None = None,
          log_level: str = "warning", learn: dict | None = None, scheduler: str | None = None) -> None:
    """Load the index once and serve it with uvicorn until interrupted.

    ``learn`` (keyword arguments of :class:`~sparsesim.feedback.FeedbackLearner`) turns on
    ``POST /feedback`` and ``GET /ask``; the final snapshot is written when the server stops
    (application shutdown, before uvicorn exits). ``scheduler`` (default
    ``$SPARSESIM_SCHEDULER``): the Dask cluster that holds a sharded index's shards.
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
        uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False,
                    limit_concurrency=service.limits.limit_connections, timeout_keep_alive=5)
    finally:
        service.close()


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>sparsesim: __TITLE__</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font-family:system-ui,sans-serif;margin:1.5rem;max-width:72rem}
textarea{width:100%;font:inherit} .cols{display:flex;gap:1.5rem} .col{flex:1;min-width:0}
ol{padding-left:1.5rem} li{margin-bottom:.6rem} .id{font-family:monospace;word-break:break-all}
.score{color:#555} .snip{color:#333;font-size:.9em} .err{color:#b00} .same{background:#eef6ee}
</style></head>
<body>
<h1>sparsesim search</h1>
<p id="facts">loading index facts&hellip;</p>
<form id="form"><textarea id="q" rows="3" placeholder="type a text, e.g. a question or a paragraph"></textarea>
<label>top-k <input id="k" type="number" min="1" value="10" style="width:4rem"></label>
<button type="submit">search</button></form>
<p id="status" role="status"></p>
<div class="cols">
<div class="col"><h2>learned similarity</h2><ol id="learned"></ol></div>
<div class="col"><h2>plain cosine</h2><ol id="cosine"></ol></div>
</div>
<script>
const $ = (id) => document.getElementById(id);
function render(list, hits, other) {
  list.textContent = "";
  const otherIds = new Set(other.map((h) => String(h.id)));
  for (const h of hits) {
    const li = document.createElement("li");
    if (otherIds.has(String(h.id))) li.className = "same";
    const id = document.createElement("div"); id.className = "id"; id.textContent = h.id;
    const sc = document.createElement("span"); sc.className = "score"; sc.textContent = "score " + h.score.toFixed(4);
    li.append(id, sc);
    if (h.snippet !== undefined) {
      const sn = document.createElement("div"); sn.className = "snip"; sn.textContent = h.snippet; li.append(sn);
    }
    list.append(li);
  }
}
let canCompare = true;  // false for a sharded index (the corpus is not in the server)
async function search(text, k) {
  $("status").textContent = "searching\\u2026"; $("status").className = "";
  try {
    const r = await fetch("/query", {method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify({texts: [text], top_k: k, compare: canCompare, snippets: true})});
    const body = await r.json();
    if (!r.ok) throw new Error(body.error || r.statusText);
    const cosine = body.cosine ? body.cosine[0] : [];
    render($("learned"), body.results[0], cosine);
    render($("cosine"), cosine, body.results[0]);
    $("status").textContent = body.results[0].length + " results (shaded: in both lists)";
  } catch (e) { $("status").textContent = "error: " + e.message; $("status").className = "err"; }
}
$("form").addEventListener("submit", (ev) => { ev.preventDefault();
  const text = $("q").value.trim(); if (text) search(text, parseInt($("k").value, 10) || 10); });
fetch("/info").then((r) => r.json()).then((info) => {
  $("facts").textContent = info.n_documents + " documents, " + info.kind + " index, model " +
    (info.model.algorithm || "?") + (info.accepts_text ? "" : " (vectors only: this page needs a model trained on text)") +
    (info.compare === false ? " (sharded: no plain cosine column)" : "");
  canCompare = info.compare !== false;
  $("k").max = Math.min(info.limits.max_top_k, info.n_documents);
}).finally(() => {  // a search given in the address runs once the page knows the index
  const params = new URLSearchParams(location.search);
  if (params.get("q")) { $("q").value = params.get("q"); search(params.get("q"), parseInt(params.get("k") || "10", 10)); }
});
</script>
</body></html>
"""
