"""The search page served at ``GET /``: one HTML file with its script.

The page shows the learned similarity's top-k beside plain cosine's for a typed text; it talks
to the service only through ``/info`` and ``/query``. ``__TITLE__`` is replaced by the index's
directory name (HTML-escaped, :func:`_html_escape`).
"""

from __future__ import annotations


def _html_escape(text: str) -> str:
    import html

    return html.escape(text, quote=True)


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
