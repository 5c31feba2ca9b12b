"""`sparsesim serve`: the real server on a free loopback port, spoken to over HTTP (httpx).

Covers the query API (texts, sparse vectors, cosine comparison, snippets), /health and /info,
bad requests answered 4xx with a JSON error while the server keeps answering, and the search
page rendered in a headless Chromium (skipped with a reason when no browser is installed).
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

httpx = pytest.importorskip("httpx", reason="the service tests talk HTTP with httpx ([test] extra)")
pytest.importorskip("starlette", reason="sparsesim serve needs the [serve] extra")
pytest.importorskip("uvicorn", reason="sparsesim serve needs the [serve] extra")

from clitools import start_server, stop_server, write_text_index  # noqa: E402

TOPICS = {
    "sport": ["the match ended with a late goal", "the striker scored a goal in the final match",
              "the team won the cup final after extra time", "a penalty goal decided the match",
              "the coach praised the team after the match", "fans cheered the winning goal"],
    "tech": ["the new laptop has a faster processor", "a software update fixes the processor bug",
             "the phone runs the new software release", "a laptop with more memory and storage",
             "the processor and memory benchmark results", "install the software on the laptop"],
    "food": ["bake the bread with flour and butter", "a recipe for tomato soup with basil",
             "the chef cooked pasta with tomato sauce", "butter and sugar for the cake recipe",
             "fresh basil in the pasta sauce", "slow cooked soup with bread"],
}


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    return write_text_index(tmp_path_factory.mktemp("serve"), TOPICS, n_triplets=500)


@pytest.fixture(scope="module")
def server(index_dir):
    proc, base = start_server(["--index", index_dir, "--max-top-k", "50", "--max-body-bytes", "20000"])
    client = httpx.Client(base_url=base, timeout=10)
    yield client, base
    client.close()
    stop_server(proc)


def test_health_and_info(server):
    client, _ = server
    assert client.get("/health").json() == {"status": "ok"}
    info = client.get("/info").json()
    assert info["n_documents"] == 18 and info["accepts_text"] and info["kind"] == "exact"
    assert info["model"]["algorithm"] == "oasis" and info["limits"]["max_top_k"] == 50


def test_query_texts(server):
    client, _ = server
    r = client.post("/query", json={"texts": ["who scored the goal", "tomato pasta"], "top_k": 3})
    assert r.status_code == 200
    results = r.json()["results"]
    assert len(results) == 2 and all(len(hits) == 3 for hits in results)
    assert "/sport/" in results[0][0]["id"] and "/food/" in results[1][0]["id"]
    scores = [h["score"] for h in results[0]]
    assert scores == sorted(scores, reverse=True)


def test_query_compare_and_snippets(server):
    client, _ = server
    body = client.post("/query", json={"texts": ["laptop memory"], "top_k": 5, "compare": True,
                                       "snippets": True}).json()
    assert len(body["cosine"][0]) == 5 and "/tech/" in body["cosine"][0][0]["id"]
    hit = body["results"][0][0]
    assert hit["snippet"] and "laptop" in body["results"][0][0]["snippet"] + body["results"][0][1]["snippet"]
    # the class name the index stores (here the folder) comes with each hit, in both lists
    for hits in (body["results"][0], body["cosine"][0]):
        assert all(f"/{h['label']}/" in h["id"] for h in hits), hits


def test_query_vectors_match_texts(server, index_dir):
    from sparsesim.indexes import load_index

    client, _ = server
    model = load_index(index_dir).model
    q = model.transform(["bread and butter"])
    vec = {"indices": q.indices.tolist(), "values": q.data.tolist()}
    by_vec = client.post("/query", json={"vectors": [vec], "top_k": 4}).json()["results"]
    by_text = client.post("/query", json={"texts": ["bread and butter"], "top_k": 4}).json()["results"]
    assert by_vec == by_text


BAD = [
    (b"{not json", 400),
    (b"", 400),
    (b"[1, 2]", 422),
    (json.dumps({"texts": "one string"}).encode(), 422),
    (json.dumps({"texts": []}).encode(), 422),
    (json.dumps({"texts": [""]}).encode(), 422),
    (json.dumps({"texts": ["   "]}).encode(), 422),
    (json.dumps({"texts": [3]}).encode(), 422),
    (json.dumps({"texts": ["goal"], "top_k": 10 ** 9}).encode(), 422),
    (json.dumps({"texts": ["goal"], "top_k": 0}).encode(), 422),
    (json.dumps({"texts": ["goal"], "top_k": "5"}).encode(), 422),
    (json.dumps({"texts": ["goal"], "top_k": True}).encode(), 422),
    (json.dumps({"texts": ["goal"], "vectors": []}).encode(), 422),
    (json.dumps({"vectors": [{"indices": [10 ** 9], "values": [1.0]}]}).encode(), 422),
    (json.dumps({"vectors": [{"indices": [0, 1], "values": [1.0]}]}).encode(), 422),
    (json.dumps({"vectors": [{"indices": [0], "values": ["x"]}]}).encode(), 422),
    (b'{"vectors": [{"indices": [0], "values": [NaN]}]}', 422),
    (b'{"vectors": [{"indices": [0], "values": [1' + b"0" * 4000 + b']}]}', 422),  # an int no float holds
    (json.dumps({"texts": ["goal"], "extra": 1}).encode(), 422),
    (json.dumps({"texts": ["x" * 30000]}).encode(), 413),  # over --max-body-bytes 20000
]


@pytest.mark.parametrize("body,status", BAD)
def test_bad_requests_get_4xx_json(server, body, status):
    client, _ = server
    r = client.post("/query", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == status, r.text
    assert isinstance(r.json()["error"], str) and r.json()["error"]
    assert client.get("/health").status_code == 200


def test_wrong_method_and_path_are_json_4xx(server):
    client, _ = server
    assert client.get("/query").status_code == 405
    r = client.get("/nope")
    assert r.status_code == 404 and "error" in r.json()


def test_page_served(server):
    client, _ = server
    r = client.get("/")
    assert r.status_code == 200 and "text/html" in r.headers["content-type"] and '<script src="/page.js">' in r.text
    script = client.get("/page.js")
    assert script.status_code == 200 and '"/query"' in script.text and '"/feedback"' in script.text


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def test_search_page_renders_in_headless_browser(server, tmp_path):
    browser = _browser()
    if browser is None:
        pytest.skip("no Chromium/Chrome installed (e.g. `apt-get install -y chromium`); the page is not rendered")
    _, base = server
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000", "--dump-dom",
           f"{base}/?q=tomato+soup+recipe&k=4"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    dom = proc.stdout
    assert "<ol id=\"learned\">" in dom, proc.stderr[-2000:]
    learned = dom.split('<ol id="learned">', 1)[1].split("</ol>", 1)[0]
    cosine = dom.split('<ol id="cosine">', 1)[1].split("</ol>", 1)[0]
    assert learned.count("<li") == 4 and cosine.count("<li") == 4
    assert "/food/" in learned and "score " in learned and "soup" in learned
