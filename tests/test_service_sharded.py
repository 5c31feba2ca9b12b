"""`sparsesim serve --scheduler`: a sharded index resident on a LocalCluster of worker processes,
served by the real server (a subprocess) and spoken to over HTTP.

Covers: the served answers equal one in-process exact index (ids, scores to 1e-9); a worker
killed during a request answers 503 with a JSON error (never a partial top-k) while /health keeps
answering, and the next request is answered again from the shards loaded onto the workers left;
every worker gone: 503 (never a 422 blaming top_k) and /health "unavailable" until a worker
returns, then served again.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import scipy.sparse as sp

httpx = pytest.importorskip("httpx", reason="the service tests talk HTTP with httpx ([test] extra)")
pytest.importorskip("starlette", reason="sparsesim serve needs the [serve] extra")
pytest.importorskip("uvicorn", reason="sparsesim serve needs the [serve] extra")
distributed = pytest.importorskip("distributed", reason="the dask extra is not installed")

from clitools import start_server, stop_server  # noqa: E402
from sparsesim.distributed import SCHEDULER_ENV  # noqa: E402
from clustertools import two_worker_cluster  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    """Two worker processes (one thread each) behind nannies that restart a killed worker."""
    with two_worker_cluster() as local, \
            distributed.Client(local, set_as_default=False) as client:
        yield local, client


@pytest.fixture(scope="module")
def sharded(cluster, tmp_path_factory):
    """The embedded news20 sample (plus 25 duplicated documents: exact ties) as a 4-shard exact
    index built on the cluster and saved; the reference answers of one exact index."""
    from sparsesim.data import load_dataset
    from sparsesim.indexes import ExactIndex
    from sparsesim.indexes.sharded import ShardedIndex
    from sparsesim.learners.bilinear import OASIS

    _, client = cluster
    data = load_dataset("news20-sample")
    X = sp.vstack([data.X, data.X[:25]], format="csr")
    model = OASIS(n_triplets=50, random_state=0).fit(data.X, data.y).model_
    out = tmp_path_factory.mktemp("served") / "sharded"
    index = ShardedIndex(model, kind="exact", n_shards=4, client=client).fit(X)
    index.save(out)
    index.release()
    return out, X, ExactIndex(model).fit(X)


@pytest.fixture(scope="module")
def server(cluster, sharded):
    local, _ = cluster
    env = {**{k: v for k, v in os.environ.items() if k != SCHEDULER_ENV},
           SCHEDULER_ENV: local.scheduler_address}  # the scheduler from the environment, as the docs show
    proc, base = start_server(["--index", sharded[0], "--max-queries", "200"], env=env, timeout=120)
    with httpx.Client(base_url=base, timeout=120) as http:
        yield http
    stop_server(proc)


def _vectors(Q) -> list[dict]:
    Q = sp.csr_matrix(Q)
    return [{"indices": Q.indices[Q.indptr[r]:Q.indptr[r + 1]].tolist(),
             "values": Q.data[Q.indptr[r]:Q.indptr[r + 1]].tolist()} for r in range(Q.shape[0])]


def _check_same(body, want, n):
    ids, scores = want
    got_ids = [[h["id"] for h in hits] for hits in body["results"]]
    assert len(got_ids) == n and got_ids == [[int(i) for i in row] for row in ids]
    np.testing.assert_allclose([[h["score"] for h in hits] for hits in body["results"]], scores, rtol=0, atol=1e-9)


def test_served_sharded_index_answers_like_one_exact_index(server, sharded):
    _, X, ref = sharded
    info = server.get("/info").json()
    assert len(info["sharded"]["shards"]) == 4 and sum(info["sharded"]["shards"]) == ref.n_documents
    assert info["sharded"]["workers"] == 2 and info["compare"] is False and info["n_documents"] == ref.n_documents
    Q = X[::4]  # 107 queries, duplicated documents among them (exact ties)
    r = server.post("/query", json={"vectors": _vectors(Q), "top_k": 10})
    assert r.status_code == 200, r.text
    _check_same(r.json(), ref.query(Q, top_k=10), Q.shape[0])
    r = server.post("/query", json={"vectors": _vectors(Q[:2]), "top_k": 5, "compare": True})
    assert r.status_code == 422 and "sharded" in r.json()["error"]


def test_service_without_scheduler_loads_the_shards_here_and_refuses_what_it_cannot_serve(sharded, tmp_path,
                                                                                          monkeypatch):
    from sparsesim.exceptions import InvalidInputError
    from sparsesim.indexes import save_index
    from sparsesim.service import QueryService

    monkeypatch.delenv(SCHEDULER_ENV, raising=False)
    out, X, ref = sharded
    service = QueryService(out)
    try:
        assert service.info()["sharded"] == {"shards": service.index.shard_sizes_, "scheduler": None, "workers": 0,
                                             "loaded": True}
        Q = X[:30]
        _check_same(service.search(Q, 7), ref.query(Q, top_k=7), 30)
    finally:
        service.close()
    with pytest.raises(InvalidInputError, match="learn"):
        QueryService(out, learn={"snapshot": tmp_path / "fb.npz"})
    save_index(ref, tmp_path / "single")
    with pytest.raises(InvalidInputError, match="single-process index; a scheduler serves sharded"):
        QueryService(tmp_path / "single", scheduler="tcp://127.0.0.1:1")


def _die_after(seconds):
    import os
    import time

    time.sleep(seconds)
    os._exit(1)


def test_worker_killed_mid_request_is_a_503_and_the_server_keeps_serving(server, sharded, cluster):
    """Runs last in this module: it kills one worker (its nanny starts a fresh one)."""
    _, X, ref = sharded
    _, client = cluster
    victim = sorted(client.scheduler_info()["workers"])[1]
    # the victim's one thread is busy when the request's tasks arrive, then its process dies
    client.submit(_die_after, 3.0, workers=[victim], pure=False)
    Q = X[::3]
    r = server.post("/query", json={"vectors": _vectors(Q), "top_k": 10})
    assert r.status_code == 503, r.text
    message = r.json()["error"]
    assert "was lost" in message and "no partial answer" in message and "results" not in r.json()
    # /health answers at once: "unavailable" (503) until the shards are loaded again, then "ok"
    health = server.get("/health")
    assert health.status_code in (200, 503) and health.json()["status"] in ("ok", "unavailable")
    client.wait_for_workers(2, timeout=60)
    # the next request loads the shards again onto the workers there are and answers in full
    r = server.post("/query", json={"vectors": _vectors(Q), "top_k": 10})
    assert r.status_code == 200, r.text
    _check_same(r.json(), ref.query(Q, top_k=10), Q.shape[0])


def test_all_workers_gone_is_a_503_then_the_index_recovers_when_a_worker_returns(sharded, tmp_path):
    """Every worker leaves: /query answers 503 naming the outage (never a 422 blaming top_k),
    /health 503 "unavailable", /info still the index's size; a new worker joins: served again."""
    from starlette.testclient import TestClient

    from sparsesim.service import QueryService, create_app

    out, X, ref = sharded
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, memory_limit="1GiB",
                                  dashboard_address=":0", host="127.0.0.1") as local, \
            distributed.Client(local, set_as_default=False) as client:
        service = QueryService(out, scheduler=local.scheduler_address)
        try:
            with TestClient(create_app(service)) as http:
                Q = X[:5]
                body = {"vectors": _vectors(Q), "top_k": 10}
                r = http.post("/query", json=body)
                assert r.status_code == 200
                local.scale(0)
                deadline = time.monotonic() + 60
                while client.scheduler_info(n_workers=-1)["workers"] and time.monotonic() < deadline:
                    time.sleep(0.1)
                for _ in range(2):  # the failing request and the one after it (the reload finds no worker)
                    r = http.post("/query", json=body)
                    assert r.status_code == 503, r.text
                    assert "top_k" not in r.json()["error"]
                health = http.get("/health")
                assert health.status_code == 503 and health.json()["status"] == "unavailable"
                assert "not loaded" in health.json()["problems"][0]
                assert http.get("/info").json()["n_documents"] == ref.n_documents
                local.scale(1)
                client.wait_for_workers(1, timeout=60)
                r = http.post("/query", json=body)
                assert r.status_code == 200, r.text
                _check_same(r.json(), ref.query(Q, top_k=10), Q.shape[0])
                assert http.get("/health").json() == {"status": "ok"}
        finally:
            service.close()
