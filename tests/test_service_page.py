"""The HTTP API's description and conventions, and the search page, through Starlette's TestClient:
``/openapi.json`` (a valid OpenAPI 3.1 document covering every route), ``k``/``limit``/``size`` for
``top_k``, hints for fields other search APIs use, security headers on every answer, a page that
runs under its strict Content-Security-Policy, and subject snippets instead of mail headers.
"""

from __future__ import annotations

import re

import pytest

pytest.importorskip("starlette", reason="sparsesim serve needs the [serve] extra")
pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx ([test] extra)")

from starlette.testclient import TestClient  # noqa: E402

from clitools import write_text_index  # noqa: E402
from sparsesim.service import QueryService, create_app  # noqa: E402
from sparsesim.service.openapi import OPERATIONS, SECURITY_HEADERS  # noqa: E402

MAIL = ("From: cook@example.org\nSubject: Re: best tomato soup\nOrganization: Kitchen\nLines: 3\n\n"
        "a recipe for tomato soup with basil and bread\n")
TOPICS = {
    "sport": ["the match ended with a late goal", "the striker scored a goal in the final match",
              "the team won the cup final after extra time", "a penalty goal decided the match"],
    "tech": ["the new laptop has a faster processor", "a software update fixes the processor bug",
             "the phone runs the new software release", "a laptop with more memory and storage"],
    "food": [MAIL, "the chef cooked pasta with tomato sauce", "butter and sugar for the cake recipe",
             "fresh basil in the pasta sauce"],
}


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    return write_text_index(tmp_path_factory.mktemp("page"), TOPICS, n_triplets=300)


@pytest.fixture(scope="module")
def client(index_dir):
    service = QueryService(index_dir)
    with TestClient(create_app(service)) as c:
        yield c
    service.close()


@pytest.fixture()
def learning_client(index_dir, tmp_path):
    service = QueryService(index_dir, learn={"snapshot": tmp_path / "snap.npz"})
    with TestClient(create_app(service)) as c:
        yield c
    service.close()


# --- security headers --------------------------------------------------------------------------
@pytest.mark.parametrize("method, path, body, status", [
    ("GET", "/", None, 200), ("GET", "/page.js", None, 200), ("GET", "/page.css", None, 200),
    ("GET", "/openapi.json", None, 200), ("GET", "/info", None, 200),
    ("POST", "/query", {"texts": ["goal"], "top_k": 2}, 200), ("POST", "/query", {"texts": []}, 422),
    ("GET", "/nope", None, 404), ("GET", "/query", None, 405),
])
def test_every_answer_carries_the_security_headers(client, method, path, body, status):
    r = client.request(method, path, json=body)
    assert r.status_code == status
    for name, value in SECURITY_HEADERS.items():
        assert r.headers[name] == value


def test_the_policy_is_strict_and_the_page_needs_no_exception_to_it(client):
    csp = {d.split()[0]: d.split()[1:] for d in SECURITY_HEADERS["content-security-policy"].split("; ")}
    assert csp["default-src"] == ["'none'"] and csp["frame-ancestors"] == ["'none'"]
    assert not any("unsafe" in s or s == "*" for sources in csp.values() for s in sources)
    html = client.get("/").text
    # no inline script, no inline style, no event-handler attributes: all would be refused
    assert re.findall(r"<script[^>]*>", html) == ['<script src="/page.js">']
    assert "<style" not in html and " style=" not in html and not re.search(r"\son[a-z]+=", html)
    assert client.get("/page.js").headers["content-type"].startswith("text/javascript")
    assert client.get("/page.css").headers["content-type"].startswith("text/css")


# --- OpenAPI -----------------------------------------------------------------------------------
def test_openapi_document_describes_every_route_and_is_valid(client):
    doc = client.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    routes = {(route.path, method.lower()) for route in client.app.routes for method in route.methods
              if method != "HEAD"}
    described = {(path, method) for path, ops in doc["paths"].items() for method in ops}
    assert described == routes == set(OPERATIONS)
    query = doc["paths"]["/query"]["post"]
    assert set(query["responses"]) >= {"200", "400", "413", "415", "422"}
    schema = doc["components"]["schemas"]["QueryRequest"]["properties"]
    assert {"texts", "vectors", "top_k", "k", "limit", "size", "compare", "snippets"} == set(schema)
    validator = pytest.importorskip("openapi_spec_validator", reason="openapi-spec-validator ([test] extra)")
    validator.validate(doc)


def test_openapi_request_schema_accepts_what_the_server_accepts(client):
    jsonschema = pytest.importorskip("jsonschema")
    doc = client.get("/openapi.json").json()
    schema = {**doc["components"]["schemas"]["QueryRequest"], "components": doc["components"]}
    schema = _inline_refs(schema, doc["components"]["schemas"])
    for body in ({"texts": ["goal"], "top_k": 3}, {"texts": ["goal"], "limit": 2, "compare": True},
                 {"vectors": [{"indices": [0, 3], "values": [1.0, 0.5]}], "size": 1}):
        jsonschema.validate(body, schema)
        assert client.post("/query", json=body).status_code == 200
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"texts": ["goal"], "topk": 3}, schema)
    assert client.post("/query", json={"texts": ["goal"], "topk": 3}).status_code == 422


def _inline_refs(node, schemas):
    if isinstance(node, dict):
        if "$ref" in node:
            return _inline_refs(schemas[node["$ref"].rsplit("/", 1)[1]], schemas)
        return {k: _inline_refs(v, schemas) for k, v in node.items() if k != "components"}
    if isinstance(node, list):
        return [_inline_refs(v, schemas) for v in node]
    return node


# --- aliases and hints -------------------------------------------------------------------------
@pytest.mark.parametrize("alias", ["k", "limit", "size"])
def test_top_k_aliases_answer_like_top_k(client, alias):
    expected = client.post("/query", json={"texts": ["late goal in the match"], "top_k": 3}).json()
    got = client.post("/query", json={"texts": ["late goal in the match"], alias: 3})
    assert got.status_code == 200 and got.json() == expected
    assert len(expected["results"][0]) == 3


def test_two_names_for_top_k_or_other_apis_fields_get_a_hint(client):
    r = client.post("/query", json={"texts": ["goal"], "top_k": 3, "limit": 4})
    assert r.status_code == 422 and "top_k, limit" in r.json()["error"]
    r = client.post("/query", json={"query": "goal"})
    assert r.status_code == 422 and 'send "texts": [TEXT]' in r.json()["error"]
    r = client.post("/query", json={"texts": ["goal"], "topk": 3})
    assert r.status_code == 422 and "did you mean 'top_k'" in r.json()["error"]
    r = client.post("/query", json={"texts": ["goal"], "k": 0})
    assert r.status_code == 422 and "top_k must be between 1 and" in r.json()["error"]


# --- snippets and feedback as the page sends them ------------------------------------------------
def test_mail_snippets_show_the_subject_not_the_headers(client):
    hits = client.post("/query", json={"texts": ["tomato soup recipe"], "top_k": 1, "snippets": True}).json()
    snippet = hits["results"][0][0]["snippet"]
    assert snippet.startswith("Re: best tomato soup \u2014 a recipe for tomato soup")
    assert "From:" not in snippet and "Organization" not in snippet


def test_page_feedback_and_questions_round_trip(learning_client):
    c = learning_client
    assert c.get("/info").json()["feedback"] is not None
    hits = c.post("/query", json={"texts": ["goal in the match"], "top_k": 4, "snippets": True}).json()["results"][0]
    # what the page's "lower" button on the first result posts: the next result preferred over it
    r = c.post("/feedback", json={"query": "goal in the match", "preferred": hits[1]["id"], "other": hits[0]["id"]})
    assert r.status_code == 202 and r.json()["received"] == 1
    asked = c.get("/ask?n=3").json()["ask"]
    assert asked and asked[0]["query"] == "goal in the match"
    ids = {h["id"] for h in hits}
    assert {asked[0]["first"], asked[0]["second"]} <= ids
