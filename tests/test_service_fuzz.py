"""Fuzzing the real `sparsesim serve` (hypothesis): malformed requests of many shapes get a 4xx JSON
error, valid ones a 2xx answer, and the server keeps answering.

Two servers on free loopback ports, started once: a frozen one and one with ``--learn`` (so
``POST /feedback`` and ``GET /ask`` are live). Requests: random methods and paths, bodies that are
not JSON, JSON of random shape (also nested deeply, NaN/Infinity literals, huge numbers), /query
payloads mutated field by field (texts, vectors with out-of-range or non-integer indices, values
NaN/inf/strings, top_k of every type), wrong content types, bodies over the size limit, feedback
records with bad triplets and ids, and ``/ask?n=`` values. After every request ``/health`` must
answer 200 and the server processes must still be running. ``SPARSESIM_FUZZ_LONG=1`` runs 20x more.
"""

from __future__ import annotations

import json

import pytest

httpx = pytest.importorskip("httpx", reason="the service tests talk HTTP with httpx ([test] extra)")
pytest.importorskip("starlette", reason="sparsesim serve needs the [serve] extra")
pytest.importorskip("uvicorn", reason="sparsesim serve needs the [serve] extra")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from clitools import start_server, stop_server, write_text_index  # noqa: E402
from fuzztools import (ASK_VALUES, METHODS, NESTING_DEPTHS, PATHS, RAW_NUMBERS, SCALE, hypothesis_settings,  # noqa: E402
                       nested_bodies, number_bodies)

FUZZ = hypothesis_settings()
BODY_LIMIT = 20_000
N_DOCS = 12
N_FEATURES_HINT = 10_000  # indices around and beyond the real width are drawn too

TEXTS = {"sport": ["the match ended with a late goal", "the striker scored a goal in the final match",
                   "the team won the cup final", "a penalty goal decided the match"],
         "tech": ["the new laptop has a faster processor", "a software update fixes the processor bug",
                  "the phone runs the new software release", "a laptop with more memory and storage"],
         "food": ["bake the bread with flour and butter", "a recipe for tomato soup with basil",
                  "the chef cooked pasta with tomato sauce", "butter and sugar for the cake recipe"]}


def _start(index_dir, *extra):
    proc, base = start_server(["--index", index_dir, *["--max-top-k", "50", "--max-body-bytes", BODY_LIMIT, *extra]], timeout=90)
    return proc, httpx.Client(base_url=base, timeout=30)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve-fuzz")
    index_dir = write_text_index(root, TEXTS, n_triplets=200)
    frozen = _start(index_dir)
    learning = _start(index_dir, "--learn", "--snapshot", root / "snap.npz")
    info = frozen[1].get("/info").json()
    yield {"frozen": frozen, "learn": learning, "n_features": info["n_features"], "root": root}
    for proc, client in (frozen, learning):
        client.close()
        stop_server(proc)


# --------------------------------------------------------------------------- request strategies
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.sampled_from([0, -1, 1, 2**31, 2**63, 10**400]),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20),
    st.sampled_from(["", " ", "goal", "tomato pasta", "\x00", "é" * 30, "a" * 30_000]),
)
JSON_VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                            st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                           max_leaves=12)
INDEX_VALUES = st.one_of(st.integers(-5, N_FEATURES_HINT), st.sampled_from([-1, 2**31, 2**63, 10**30, 1.5, "3", None,
                                                                           True, [1]]))
NUMBER_VALUES = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-10, 10),
                          st.sampled_from(["1", None, True, [1.0], 10**400, 1e308]))


@st.composite
def vector(draw):
    n = draw(st.integers(0, 5))
    vec = {"indices": draw(st.lists(INDEX_VALUES, min_size=n, max_size=n)),
           "values": draw(st.lists(NUMBER_VALUES, min_size=n, max_size=n))}
    mutation = draw(st.sampled_from(["none", "none", "length", "extra-key", "missing", "not-list"]))
    if mutation == "length":
        vec["values"].append(1.0)
    elif mutation == "extra-key":
        vec["weights"] = [1]
    elif mutation == "missing":
        vec.pop("values")
    elif mutation == "not-list":
        vec["indices"] = draw(SCALARS)
    return vec


@st.composite
def query_payload(draw):
    payload = {}
    which = draw(st.sampled_from(["texts", "vectors", "both", "neither"]))
    if which in ("texts", "both"):
        payload["texts"] = draw(st.one_of(st.lists(st.one_of(st.sampled_from(["goal", "pasta", "laptop memory"]),
                                                             SCALARS), max_size=4),
                                          SCALARS, st.just(["goal"] * 200)))
    if which in ("vectors", "both"):
        payload["vectors"] = draw(st.one_of(st.lists(vector(), max_size=3), SCALARS))
    if draw(st.booleans()):
        payload["top_k"] = draw(st.one_of(SCALARS, st.integers(-3, 60), st.sampled_from([10**9, 2**63, 1.0, "5"])))
    for key in ("compare", "snippets"):
        if draw(st.booleans()):
            payload[key] = draw(st.one_of(st.booleans(), SCALARS))
    if draw(st.integers(0, 9)) == 0:
        payload[draw(st.text(max_size=6))] = draw(SCALARS)
    return payload


@st.composite
def feedback_payload(draw):
    query = draw(st.one_of(st.sampled_from(["goal", "pasta"]), vector(), SCALARS,
                           st.sampled_from(["docs/sport/0.txt", "nosuch"])))
    doc = st.one_of(st.sampled_from(["docs/sport/0.txt", "docs/food/1.txt", "docs/tech/2.txt", "nosuch", ""]),
                    SCALARS, st.integers(-2, 20))
    if draw(st.booleans()):
        record = {"query": query, "preferred": draw(doc), "other": draw(doc)}
    else:
        record = {"query": query, "clicked": draw(st.one_of(st.lists(doc, max_size=3), SCALARS)),
                  "shown": draw(st.one_of(st.lists(doc, max_size=3), SCALARS))}
    for key in list(record):
        if draw(st.integers(0, 5)) == 0:
            record.pop(key)
    return draw(st.sampled_from([record, [record], [record, record]]))


@st.composite
def request(draw):
    kind = draw(st.sampled_from(["query", "query", "query", "feedback", "feedback", "ask", "raw", "raw", "method"]))
    server = "learn" if kind in ("feedback", "ask") or draw(st.booleans()) else "frozen"
    headers = {"content-type": draw(st.sampled_from(["application/json", "application/json", "text/plain",
                                                     "application/x-www-form-urlencoded", "multipart/form-data",
                                                     "application/json; charset=latin-1", ""]))}
    if kind == "query":
        body = json.dumps(draw(query_payload())).encode()
        return server, "POST", "/query", headers, body
    if kind == "feedback":
        body = json.dumps(draw(feedback_payload())).encode()
        return server, "POST", "/feedback", headers, body
    if kind == "ask":
        n = draw(st.one_of(st.integers(-5, 100), st.sampled_from(ASK_VALUES)))
        return server, "GET", f"/ask?n={n}", {}, b""
    if kind == "method":
        return server, draw(st.sampled_from(METHODS)), draw(st.sampled_from(PATHS)), {}, b""
    # raw bodies: not JSON, JSON of random shape, non-standard number literals, deep nesting, oversized
    raw = draw(st.sampled_from(["bytes", "json", "number", "nested", "oversized", "utf16"]))
    if raw == "bytes":
        body = draw(st.binary(max_size=200))
    elif raw == "json":
        body = json.dumps(draw(JSON_VALUES)).encode()
    elif raw == "number":
        literal = draw(st.sampled_from(RAW_NUMBERS))
        body = draw(st.sampled_from(number_bodies(literal, '"texts": ["goal"]'))).encode()
    elif raw == "nested":
        body = draw(st.sampled_from(nested_bodies(draw(st.sampled_from(NESTING_DEPTHS)), "texts"))).encode()
    elif raw == "oversized":
        body = b'{"texts": ["' + b"a" * (BODY_LIMIT + draw(st.integers(1, 5000))) + b'"]}'
    else:
        body = json.dumps({"texts": ["goal"]}).encode("utf-16")
    return server, "POST", draw(st.sampled_from(["/query", "/feedback"])), headers, body


def _valid_json_error(response) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("error"), str) and 0 < len(body["error"]) <= 2000


@settings(max_examples=150 * SCALE, **FUZZ)
@given(req=request())
def test_fuzz_service_requests(servers, req):
    server, method, path, headers, body = req
    proc, client = servers[server]
    response = client.request(method, path, headers=headers, content=body)
    status = response.status_code
    assert status < 500, f"{method} {path} {body[:200]!r}: {status} {response.text[:300]}"
    ctype = headers.get("content-type")
    if method == "POST" and path in ("/query", "/feedback") and ctype is not None \
            and ctype.split(";")[0] != "application/json" and not (path == "/feedback" and server == "frozen"):
        assert status == 415, f"{ctype}: {status}"
    if status >= 400:
        if method != "HEAD":
            assert _valid_json_error(response), f"{method} {path}: {status} {response.text[:300]}"
    else:
        assert status in (200, 202), f"{method} {path}: {status}"
        if method != "HEAD":
            assert isinstance(response.json(), dict)
    # the server keeps answering
    assert proc.poll() is None, "the server process died"
    assert client.get("/health").json() == {"status": "ok"}


def test_named_bad_requests(servers):
    """Shapes the fuzzer found or the issue names, one by one."""
    proc, client = servers["frozen"]
    cases = [
        ("POST", "/query", b"[" * 9000 + b"]" * 9000, 400),
        ("POST", "/query", b'{"texts": ["goal"], "top_k": NaN}', 422),
        ("POST", "/query", b'{"vectors": [{"indices": [0], "values": [Infinity]}]}', 422),
        ("POST", "/query", b'{"vectors": [{"indices": [0], "values": [1e999]}]}', 422),
        ("POST", "/query", json.dumps({"texts": ["goal"], "top_k": 10**400}).encode(), 422),
        ("POST", "/query", json.dumps({"vectors": [{"indices": [10**30], "values": [1.0]}]}).encode(), 422),
        ("POST", "/query", b'{"texts": ["' + b"a" * (BODY_LIMIT + 10) + b'"]}', 413),
        ("POST", "/query", b"\xff\xfe{", 400),
        ("PUT", "/query", b"", 405),
        ("GET", "/nosuch", b"", 404),
        ("POST", "/feedback", b'{"query": "goal", "preferred": "x", "other": "y"}', 404),
    ]
    for method, path, body, expected in cases:
        r = client.request(method, path, content=body, headers={"content-type": "application/json"})
        assert r.status_code == expected and _valid_json_error(r), (path, body[:60], r.status_code, r.text[:200])
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
        r = client.post("/query", content=b'{"texts": ["goal"]}', headers={"content-type": ctype})
        assert r.status_code == 415 and _valid_json_error(r)
    assert client.post("/query", content=b'{"texts": ["goal"]}').status_code == 200  # no Content-Type: JSON
    proc, client = servers["learn"]
    for record in ({"query": "goal", "preferred": "nosuch", "other": "docs/food/1.txt"},
                   {"query": {"indices": [-1], "values": [1.0]}, "preferred": 0, "other": 1},
                   {"query": "goal", "preferred": float("nan"), "other": 1},
                   {"query": "goal", "clicked": "x", "shown": 3}):
        r = client.post("/feedback", content=json.dumps(record).encode())
        assert r.status_code == 422 and _valid_json_error(r), (record, r.status_code, r.text[:200])
    assert client.get("/health").json() == {"status": "ok"}
