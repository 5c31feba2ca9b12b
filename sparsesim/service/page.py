"""The search page served at ``GET /``, its script (``/page.js``) and style sheet (``/page.css``).

The page shows the learned similarity's top-k beside plain cosine's for a typed text, keeps the
query and ``k`` in the address (``/?q=...&k=...``: a search can be bookmarked, shared and
reloaded, and the browser's back button steps through searches), explains the two score scales,
and shows each result's title (a mail's Subject) and the start of its text. On a ``--learn``
server each learned result can be marked to rank higher or lower (``POST /feedback`` with one
triplet) and the page asks the questions the active rule most wants answered (``GET /ask``).

It talks to the service only through ``/info``, ``/query``, ``/feedback`` and ``/ask``. The
script and styles are separate files so that the page runs under a strict
``Content-Security-Policy`` (no inline script or style; see :mod:`sparsesim.service.openapi`).
``__TITLE__`` is replaced by the index's directory name (HTML-escaped, :func:`html_escape`).
"""

from __future__ import annotations

__all__ = ["PAGE", "PAGE_CSS", "PAGE_JS", "html_escape", "page_routes"]


def html_escape(text: str) -> str:
    import html

    return html.escape(text, quote=True)


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>sparsesim: __TITLE__</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/page.css">
</head>
<body>
<h1>sparsesim search</h1>
<p id="facts">loading index facts&hellip;</p>
<form id="form"><label for="q" class="sr">query text</label>
<textarea id="q" name="q" rows="3" placeholder="type a text, e.g. a question or a paragraph"></textarea>
<div class="row"><label>top-k <input id="k" name="k" type="number" min="1" value="10"></label>
<button type="submit">search</button></div></form>
<details id="explain"><summary>How to read the scores</summary>
<p><b>Learned similarity</b>: the model's score S(q, d) = q<sup>T</sup>M d between the query's and the
document's feature vectors (M = I + W, learned from labelled examples and feedback). It is not
bounded and its scale depends on the model, so compare documents by rank, not by value. The bar
beside each score shows it relative to the top result.</p>
<p><b>Plain cosine</b>: the cosine of the angle between the two vectors, from 0 (no term in common)
to 1 (same direction); the baseline the learned similarity is compared with. Results found by both
are shaded.</p>
<p id="explain-learn" hidden>This server learns: mark a learned result <b>&#9650; higher</b> or
<b>&#9660; lower</b> and it is swapped with its neighbour in the model's eyes (one training triplet);
the next searches use the updated model.</p>
</details>
<p id="status" role="status"></p>
<div class="cols">
<section class="col"><h2>learned similarity</h2><ol id="learned"></ol></section>
<section class="col" id="cosine-col"><h2>plain cosine</h2><ol id="cosine"></ol></section>
</div>
<section id="ask" hidden><h2>Help the model learn</h2>
<p>Pairs of neighbouring results the model is least sure how to order.
<button type="button" id="ask-button">suggest questions</button></p>
<ol id="questions"></ol></section>
<script src="/page.js"></script>
</body></html>
"""

PAGE_CSS = """
body{font-family:system-ui,sans-serif;margin:1rem;max-width:72rem;line-height:1.35}
*{box-sizing:border-box}
textarea{width:100%;font:inherit}
.row{display:flex;gap:1rem;align-items:center;margin:.4rem 0;flex-wrap:wrap}
#k{width:5rem}
.cols{display:flex;gap:1.5rem}
.col{flex:1;min-width:0}
ol{padding-left:1.6rem}
li{margin-bottom:.7rem;overflow-wrap:anywhere}
.title{font-weight:600}
.id{font-family:monospace;font-size:.85em;color:#555;word-break:break-all}
.score{color:#444;font-size:.9em}
.bar{display:inline-block;height:.5em;background:#7a9cc6;margin-left:.4em;vertical-align:middle}
.snip{color:#333;font-size:.9em}
.err{color:#b00}
.same{background:#eef6ee}
.fb button,.q button{font-size:.85em;margin:.2rem .4rem 0 0}
.sr{position:absolute;left:-10000px}
details{margin:.5rem 0}
@media (max-width:40rem){.cols{flex-direction:column;gap:0}body{margin:.5rem}}
"""

PAGE_JS = r"""
"use strict";
const $ = (id) => document.getElementById(id);
let canCompare = true;   // false for a sharded index (the corpus is not in the server)
let learning = false;    // a --learn server: feedback buttons and questions
let maxK = 100;
let lastQuery = null;    // the text of the results on screen
const seen = new Map();  // id -> hit, for the questions' titles

function splitSnippet(snippet) {
  // index snippets of mail-like texts read "Subject \u2014 body"; others are the text's start
  const cut = snippet.indexOf(" \u2014 ");
  if (cut > 0 && cut < 200) return [snippet.slice(0, cut), snippet.slice(cut + 3)];
  return ["", snippet];
}

function setStatus(text, isError) {
  $("status").textContent = text;
  $("status").className = isError ? "err" : "";
}

async function postFeedback(record, what) {
  try {
    const r = await fetch("/feedback", {method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify(record)});
    const body = await r.json();
    if (!r.ok) throw new Error(body.error || r.statusText);
    setStatus(what + ": queued (" + body.applied + " of " + body.received +
      " feedback triplets applied; model version " + body.version + "). Search again to see the new ranking.");
  } catch (e) { setStatus("feedback not sent: " + e.message, true); }
}

function feedbackButtons(hits, i) {
  const box = document.createElement("div"); box.className = "fb";
  const add = (label, title, preferred, other) => {
    const b = document.createElement("button"); b.type = "button"; b.textContent = label; b.title = title;
    b.addEventListener("click", () => postFeedback({query: lastQuery, preferred: preferred, other: other},
      label.slice(2) + " " + hits[i].id));
    box.append(b);
  };
  if (i > 0) add("\u25B2 higher", "should rank above the result before it", hits[i].id, hits[i - 1].id);
  if (i + 1 < hits.length) add("\u25BC lower", "should rank below the result after it", hits[i + 1].id, hits[i].id);
  return box;
}

function render(list, hits, other, withFeedback) {
  list.textContent = "";
  const otherIds = new Set(other.map((h) => String(h.id)));
  const top = hits.length ? Math.abs(hits[0].score) || 1 : 1;
  hits.forEach((h, i) => {
    seen.set(String(h.id), h);
    const li = document.createElement("li");
    if (otherIds.has(String(h.id))) li.className = "same";
    const [title, body] = splitSnippet(h.snippet === undefined ? "" : h.snippet);
    if (title) { const t = document.createElement("div"); t.className = "title"; t.textContent = title; li.append(t); }
    if (body) { const s = document.createElement("div"); s.className = "snip"; s.textContent = body; li.append(s); }
    const id = document.createElement("div"); id.className = "id";
    id.textContent = h.label === undefined ? String(h.id) : h.id + " \u00b7 " + h.label;
    const sc = document.createElement("span"); sc.className = "score"; sc.textContent = "score " + h.score.toFixed(4);
    const bar = document.createElement("span"); bar.className = "bar";
    bar.style.width = Math.max(0, Math.min(1, h.score / top)) * 4 + "em";
    sc.append(bar);
    li.append(id, sc);
    if (withFeedback) li.append(feedbackButtons(hits, i));
    list.append(li);
  });
}

async function search(text, k) {
  setStatus("searching\u2026", false);
  try {
    const r = await fetch("/query", {method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify({texts: [text], top_k: k, compare: canCompare, snippets: true})});
    const body = await r.json();
    if (!r.ok) throw new Error(body.error || r.statusText);
    lastQuery = text;
    const cosine = body.cosine ? body.cosine[0] : [];
    render($("learned"), body.results[0], cosine, learning);
    render($("cosine"), cosine, body.results[0], false);
    setStatus(body.results[0].length + " results" + (canCompare ? " (shaded: in both lists)" : "") +
      (body.version !== undefined ? "; model version " + body.version : ""), false);
  } catch (e) { setStatus("error: " + e.message, true); }
}

function fromAddress() {  // the address is the page's state: ?q=TEXT&k=N
  const params = new URLSearchParams(location.search);
  const q = params.get("q") || "";
  const k = Math.max(1, Math.min(maxK, parseInt(params.get("k") || $("k").value || "10", 10) || 10));
  $("q").value = q; $("k").value = k;
  if (q.trim()) search(q.trim(), k);
}

$("form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = $("q").value.trim();
  const k = Math.max(1, Math.min(maxK, parseInt($("k").value, 10) || 10));
  if (!text) return;
  const address = "?" + new URLSearchParams({q: text, k: String(k)}).toString();
  if (address !== location.search) history.pushState(null, "", address);
  search(text, k);
});
window.addEventListener("popstate", fromAddress);

async function ask() {
  try {
    const r = await fetch("/ask?n=3");
    const body = await r.json();
    if (!r.ok) throw new Error(body.error || r.statusText);
    const list = $("questions"); list.textContent = "";
    if (!body.ask.length) { list.textContent = "no questions yet: search first"; return; }
    for (const qn of body.ask) {
      const li = document.createElement("li"); li.className = "q";
      const text = typeof qn.query === "string" ? "\u201C" + qn.query + "\u201D" : "(a vector query)";
      li.append("For " + text + ", which is more similar?");
      for (const [pick, other] of [[qn.first, qn.second], [qn.second, qn.first]]) {
        const hit = seen.get(String(pick));
        const label = hit && hit.snippet ? (splitSnippet(hit.snippet)[0] || hit.snippet.slice(0, 60)) : String(pick);
        const b = document.createElement("button"); b.type = "button"; b.textContent = label; b.title = String(pick);
        b.addEventListener("click", () => { postFeedback({query: qn.query, preferred: pick, other: other}, "answer");
          li.remove(); });
        li.append(document.createElement("br"), b);
      }
      list.append(li);
    }
  } catch (e) { setStatus("questions not available: " + e.message, true); }
}
$("ask-button").addEventListener("click", ask);

fetch("/info").then((r) => r.json()).then((info) => {
  learning = !!info.feedback;
  canCompare = info.compare !== false;
  maxK = Math.min(info.limits.max_top_k, info.n_documents);
  $("k").max = maxK;
  $("facts").textContent = info.n_documents + " documents, " + info.kind + " index, model " +
    (info.model.algorithm || "?") + (learning ? " (learning from feedback)" : "") +
    (info.accepts_text ? "" : " (vectors only: this page needs a model trained on text)") +
    (canCompare ? "" : " (sharded: no plain cosine column)");
  $("ask").hidden = !learning;
  $("explain-learn").hidden = !learning;
  $("cosine-col").hidden = !canCompare;
}).catch(() => {}).finally(fromAddress);  // a search given in the address runs once the page knows the index
"""


def page_routes(title: str):
    """Starlette routes of the page (``/``), its script and its style sheet."""
    from starlette.responses import HTMLResponse, Response
    from starlette.routing import Route

    html = PAGE.replace("__TITLE__", html_escape(title))

    async def page(request):
        return HTMLResponse(html)

    async def script(request):
        return Response(PAGE_JS, media_type="text/javascript; charset=utf-8")

    async def style(request):
        return Response(PAGE_CSS, media_type="text/css; charset=utf-8")

    return [Route("/", page, methods=["GET"]), Route("/page.js", script, methods=["GET"]),
            Route("/page.css", style, methods=["GET"])]
