"""`sparsesim serve` under internal failures and hostile-but-finite input, in process (Starlette's
test client over :func:`create_app`): every internal failure is a 5xx JSON error with its cause
logged and the server answers on; /health reports the degraded state; scores that overflow are
refused with 422 (also on a --learn server, whose /ask keeps answering); document ids that are not
valid Unicode are answered and round-trip through /feedback; ``compare`` cosine of very large
values; the snapshot path policy at start."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import scipy.sparse as sp

pytest.importorskip("httpx", reason="the service tests talk HTTP with httpx ([test] extra)")
pytest.importorskip("starlette", reason="sparsesim serve needs the [serve] extra")

from starlette.testclient import TestClient  # noqa: E402

from sparsesim.exceptions import UnsafeTargetError  # noqa: E402
from sparsesim.indexes import build_index  # noqa: E402
from sparsesim.models import BilinearSimilarity  # noqa: E402
from sparsesim.service import QueryService, create_app  # noqa: E402

D = 20
BAD_NAME = b"caf\xe9.txt".decode("utf-8", "surrogateescape")  # a Latin-1 file name read as UTF-8


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    X = sp.random(30, D, density=0.3, random_state=0, format="csr")
    X = (X + sp.eye(30, D, format="csr")).tocsr()  # every document has a nonzero
    ids = [f"doc{i}" for i in range(29)] + [BAD_NAME]
    W = sp.random(D, D, density=0.1, random_state=1, format="csr")
    build_index(BilinearSimilarity(W, identity=True), X, kind="exact", ids=ids).save(root / "idx")
    return root / "idx"


def _vector(values):
    return {"indices": list(range(len(values))), "values": values}


@pytest.fixture()
def frozen(index_dir):
    service = QueryService(index_dir)
    with TestClient(create_app(service)) as client:
        yield service, client
    service.close()


@pytest.fixture()
def learning(index_dir, tmp_path):
    service = QueryService(index_dir, learn={"snapshot": tmp_path / "snap.npz"})
    with TestClient(create_app(service)) as client:
        yield service, client
    service.close()


def test_internal_failure_is_a_logged_500_and_health_reports_it(frozen, monkeypatch, caplog):
    service, client = frozen
    assert client.get("/health").json() == {"status": "ok"}

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(service, "search", broken)
    with caplog.at_level(logging.ERROR, logger="sparsesim.service"):
        r = client.post("/query", json={"vectors": [_vector([1.0])], "top_k": 3})
    assert r.status_code == 500
    body = r.json()
    assert "RuntimeError" in body["error"] and body["error_id"] in body["error"]
    logged = [rec for rec in caplog.records if body["error_id"] in rec.getMessage()]
    assert logged and "disk on fire" in logged[0].getMessage() and logged[0].exc_info is not None
    health = client.get("/health")
    assert health.status_code == 200 and health.json()["status"] == "degraded"
    assert "disk on fire" in health.json()["problems"][0]
    assert client.get("/info").json()["internal_errors"] == 1
    monkeypatch.undo()
    r = client.post("/query", json={"vectors": [_vector([1.0])], "top_k": 3})  # serving on
    assert r.status_code == 200 and len(r.json()["results"][0]) == 3


def test_overflowing_scores_are_a_422(frozen):
    _, client = frozen
    r = client.post("/query", json={"vectors": [_vector([1e308] * D)], "top_k": 3})
    assert r.status_code == 422 and "overflow" in r.json()["error"]
    assert client.get("/health").json() == {"status": "ok"}


def test_learning_server_refuses_overflow_and_keeps_asking(learning):
    _, client = learning
    assert client.post("/query", json={"vectors": [_vector([1.0, 2.0])], "top_k": 5}).status_code == 200
    r = client.post("/query", json={"vectors": [_vector([1e308] * D)], "top_k": 5})
    assert r.status_code == 422 and "overflow" in r.json()["error"]
    r = client.get("/ask?n=5")
    assert r.status_code == 200 and r.json()["ask"]
    r = client.post("/feedback", json={"query": _vector([1e308] * D), "preferred": "doc1", "other": "doc2"})
    assert r.status_code == 422 and "too large" in r.json()["error"]
    assert client.get("/health").json() == {"status": "ok"}


def test_ids_that_are_not_unicode_are_answered_and_round_trip(learning):
    _, client = learning
    r = client.post("/query", json={"vectors": [_vector([1.0] * D)], "top_k": 30})
    assert r.status_code == 200
    ids = [h["id"] for h in r.json()["results"][0]]
    assert BAD_NAME in ids  # the JSON escapes (\udce9) decode to the same string
    body = json.dumps({"query": "doc1", "preferred": BAD_NAME, "other": "doc2"})  # ASCII, with \udce9
    r = client.post("/feedback", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 202, r.text


def test_a_failed_learner_is_a_503_and_a_degraded_health(learning, monkeypatch):
    service, client = learning

    def broken(*args, **kwargs):
        raise RuntimeError("learner bug")

    monkeypatch.setattr(service.feedback.learner, "partial_fit_triplets", broken)
    assert client.post("/feedback", json={"query": "doc1", "preferred": "doc3", "other": "doc2"}).status_code == 202
    with pytest.raises(Exception):
        service.feedback.flush(timeout=600)
    r = client.post("/feedback", json={"query": "doc1", "preferred": "doc3", "other": "doc2"})
    assert r.status_code == 503 and "learner bug" in r.json()["error"]
    health = client.get("/health")
    assert health.status_code == 200 and health.json()["status"] == "degraded"
    assert client.post("/query", json={"vectors": [_vector([1.0])], "top_k": 3}).status_code == 200
    service.feedback._error = None  # let the fixture's shutdown write its snapshot


def test_compare_cosine_of_very_large_values(frozen):
    service, client = frozen
    small = _vector([1.0, 2.0, 0.5])
    large = _vector([1e300, 2e300, 0.5e300])
    a = client.post("/query", json={"vectors": [small], "top_k": 5, "compare": True}).json()["cosine"][0]
    b = client.post("/query", json={"vectors": [large], "top_k": 5, "compare": True}).json()["cosine"][0]
    assert [h["id"] for h in a] == [h["id"] for h in b]
    np.testing.assert_allclose([h["score"] for h in b], [h["score"] for h in a], rtol=1e-12)
    assert max(h["score"] for h in a) > 0


def test_snapshot_policy_is_checked_before_the_index_is_loaded(index_dir, tmp_path):
    version_dir = next(p for p in index_dir.iterdir() if p.is_dir())
    with pytest.raises(UnsafeTargetError, match="inside the input"):
        QueryService(index_dir, learn={"snapshot": version_dir / "model.npz"})
    with pytest.raises(UnsafeTargetError, match="does not exist"):
        QueryService(index_dir, learn={"snapshot": tmp_path / "missing" / "snap.npz"})
