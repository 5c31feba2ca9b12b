"""`sparsesim serve --learn` and `sparsesim learn`: the real server on loopback learning from feedback.

Scores served after feedback must equal those of the index's learner applied offline, from the
same starting model, to the same triplets; kill -9 while feedback streams in, then a restart,
resumes from the last snapshot, which always loads (it is never partial).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import numpy as np
import pytest
import scipy.sparse as sp

httpx = pytest.importorskip("httpx", reason="the service tests talk HTTP with httpx ([test] extra)")
pytest.importorskip("starlette", reason="sparsesim serve needs the [serve] extra")
pytest.importorskip("uvicorn", reason="sparsesim serve needs the [serve] extra")

from clitools import run_cli, start_server, write_text_index  # noqa: E402
from test_service import TOPICS  # noqa: E402

from sparsesim.feedback import FeedbackLearner  # noqa: E402
from sparsesim.indexes import load_index  # noqa: E402
from sparsesim.models import BilinearSimilarity  # noqa: E402


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    return write_text_index(tmp_path_factory.mktemp("learn"), TOPICS, n_triplets=300)


def start(index_dir, snapshot, *extra):
    proc, base = start_server(["--index", index_dir, *["--learn", "--snapshot", snapshot, *extra]], timeout=60)
    return proc, httpx.Client(base_url=base, timeout=20)


def stop(proc, sig=signal.SIGTERM):
    proc.send_signal(sig)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_applied(client, n, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        fb = client.get("/info").json()["feedback"]
        if fb["applied"] >= n:
            return fb
        time.sleep(0.05)
    pytest.fail(f"feedback not applied: {fb}")


def ids_of(index):
    return [v.item() for v in index.ids_]


def test_feedback_changes_scores_as_the_update_rule_says(index_dir, tmp_path):
    index = load_index(index_dir)
    ids = ids_of(index)
    sport = [i for i in ids if "/sport/" in i]
    food = [i for i in ids if "/food/" in i]
    text = "the goal in the match"
    feedback = [{"query": text, "preferred": food[0], "other": sport[0]},  # against the labels: must move scores
                {"query": sport[1], "preferred": sport[2], "other": food[1]},
                {"query": text, "clicked": [food[2]], "shown": [sport[3], sport[4], food[2], food[3]]}]
    proc, client = start(index_dir, tmp_path / "snap.npz", "--snapshot-every", 1000)
    try:
        before = client.post("/query", json={"texts": [text], "top_k": len(ids)}).json()
        assert before["version"] == 0
        r = client.post("/feedback", json=feedback)
        assert r.status_code == 202, r.text
        assert r.json()["queued"] == 5  # 2 triplets + click log: food[2] over sport[4], sport[3], food[3]
        fb = wait_applied(client, 5)
        assert fb["pending"] == 0 and fb["version"] >= 1
        # OASIS versions: base + low-rank factors; a small corpus is scored exhaustively (no candidate stage)
        assert fb["publishing"].startswith("low-rank") and fb["scoring"] == "exact" and fb["candidates"] is None
        after = client.post("/query", json={"texts": [text], "top_k": len(ids)}).json()
        served = {h["id"]: h["score"] for h in after["results"][0]}
    finally:
        stop(proc)

    # offline: the index's learner from the index's model, the same triplets in order
    model = index.model
    X = sp.csr_matrix(index.X_)
    row = {v: r for r, v in enumerate(ids)}
    q = model.transform([text])
    triplets = [(q, food[0], sport[0]), (X[row[sport[1]]], sport[2], food[1]),
                (q, food[2], sport[4]), (q, food[2], sport[3]), (q, food[2], food[3])]
    rows = sp.vstack([sp.vstack([a, X[row[p]], X[row[o]]]) for a, p, o in triplets], format="csr")
    learner = FeedbackLearner._default_learner(model)
    assert type(learner).__name__ == "OASIS" and learner.C == model.metadata["resolved_params"]["C"]
    offline = learner.start_from(model, X).partial_fit_triplets(rows, np.arange(15).reshape(5, 3)).model_
    expect = offline.score_matrix(q, X)[0]
    # the served versions (base + low-rank factors of the OASIS steps) carry float64 values, the
    # learner's default store rounds each entry it writes to float32: equal to float32 precision
    for doc, s in served.items():
        assert s == pytest.approx(expect[row[doc]], rel=1e-6, abs=1e-6)
    old = {h["id"]: h["score"] for h in before["results"][0]}
    assert served != old
    assert served[food[0]] - served[sport[0]] > old[food[0]] - old[sport[0]]
    # the final snapshot (SIGTERM) holds every applied triplet
    saved = BilinearSimilarity.load(tmp_path / "snap.npz")
    assert saved.metadata["feedback"]["n_applied"] == 5
    assert abs(saved.W - offline.W).max() < 1e-6 * max(1.0, abs(offline.W).max())


BAD_FEEDBACK = [
    {"query": "goal", "preferred": "nope", "other": "nope2"},
    {"query": "goal", "preferred": 1},
    {"query": {"indices": [10 ** 9], "values": [1.0]}, "preferred": 0, "other": 1},
    {"query": "goal", "clicked": ["x"], "shown": []},
    [],
    "not an object",
]


def test_bad_feedback_gets_4xx_and_server_keeps_serving(index_dir, tmp_path):
    proc, client = start(index_dir, tmp_path / "snap.npz")
    try:
        for body in BAD_FEEDBACK:
            r = client.post("/feedback", json=body)
            assert r.status_code == 422 and "error" in r.json(), body
        r = client.post("/feedback", content=b"{not json")
        assert r.status_code == 400 and "error" in r.json()
        assert client.get("/ask", params={"n": "x"}).status_code == 422
        assert client.get("/health").json() == {"status": "ok"}
        assert client.get("/info").json()["feedback"]["received"] == 0
    finally:
        stop(proc)


def test_ask_and_answer(index_dir, tmp_path):
    proc, client = start(index_dir, tmp_path / "snap.npz")
    try:
        client.post("/query", json={"texts": ["bread and butter", "a fast laptop"], "top_k": 5})
        assert len(client.get("/ask", params={"n": 3}).json()["ask"]) == 2  # default: one per query
        asked = client.get("/ask", params={"n": 3, "per_query": 0}).json()["ask"]
        assert len(asked) == 3
        margins = [abs(a["margin"]) for a in asked]
        assert margins == sorted(margins)
        assert all(a["query"] in ("bread and butter", "a fast laptop") for a in asked)
        answer = [{"query": a["query"], "preferred": a["second"], "other": a["first"]} for a in asked]
        assert client.post("/feedback", json=answer).status_code == 202
        wait_applied(client, 3)
    finally:
        stop(proc)


def test_frozen_server_has_no_feedback(index_dir):
    proc, base = start_server(["--index", index_dir])
    try:
        r = httpx.post(base + "/feedback", json={"query": "goal", "preferred": 0, "other": 1})
        assert r.status_code == 404 and "--learn" in r.json()["error"]
    finally:
        stop(proc)


def test_kill_9_while_streaming_then_restart_resumes_from_last_snapshot(index_dir, tmp_path):
    snap = tmp_path / "snap.npz"
    ids = ids_of(load_index(index_dir))
    proc, client = start(index_dir, snap, "--snapshot-every", 5)
    stop_flag = threading.Event()
    sent = [0]

    def stream():
        rng = np.random.default_rng(0)
        with httpx.Client(base_url=str(client.base_url), timeout=5) as c:
            while not stop_flag.is_set():
                a, p, o = rng.choice(len(ids), 3, replace=False)
                try:
                    if c.post("/feedback", json={"query": ids[a], "preferred": ids[p], "other": ids[o]}).status_code == 202:
                        sent[0] += 1
                except httpx.HTTPError:
                    return

    thread = threading.Thread(target=stream)
    thread.start()
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            fb = client.get("/info").json()["feedback"]
            if fb["snapshot"] is not None and fb["snapshot"]["n_applied"] >= 15:
                break
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)  # while feedback is still streaming in
        proc.wait(10)
    finally:
        stop_flag.set()
        thread.join(10)
    assert sent[0] >= 15
    saved = BilinearSimilarity.load(snap)  # complete: checksum and structure verified
    k = saved.metadata["feedback"]["n_applied"]
    assert 15 <= k <= sent[0]
    proc, client = start(index_dir, snap)
    try:
        fb = client.get("/info").json()["feedback"]
        assert fb["resumed_from"] == str(snap) and fb["applied"] == k
        index = load_index(index_dir)
        X = sp.csr_matrix(index.X_)
        served = client.post("/query", json={"texts": ["the match"], "top_k": len(ids)}).json()["results"][0]
        expect = saved.score_matrix(index.model.transform(["the match"]), X)[0]
        row = {v: r for r, v in enumerate(ids)}
        for hit in served:
            assert hit["score"] == pytest.approx(expect[row[hit["id"]]], abs=1e-9)
    finally:
        stop(proc)


def test_learn_cli_matches_the_library(index_dir, tmp_path, monkeypatch, capsys):
    ids = ids_of(load_index(index_dir))
    log = tmp_path / "fb.jsonl"
    records = [{"query": ids[i], "preferred": ids[(i + 1) % len(ids)], "other": ids[(i + 7) % len(ids)]}
               for i in range(12)]
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "learned.npz"
    code, stdout, err = run_cli(["learn", "--index", index_dir, "--feedback", log, "--out", out, "--json"],
                                monkeypatch, capsys)
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["triplets"] == 12
    with FeedbackLearner(index_dir) as fl:
        fl.submit(records)
        fl.flush()
        assert abs(BilinearSimilarity.load(out).W - fl.model.W).max() < 1e-12
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(records[0]) + "\n" + '{"query": "%s", "preferred": "nope", "other": "%s"}\n' % (ids[0], ids[1]))
    out2 = tmp_path / "never.npz"
    code, stdout, err = run_cli(["learn", "--index", index_dir, "--feedback", bad, "--out", out2], monkeypatch, capsys)
    assert code == 2 and err.startswith("error:") and "line 2" in err and "nope" in err and "Traceback" not in err
    assert not out2.exists()


def test_serve_learn_on_a_compact_index(tmp_path):
    """`serve --learn` over an ssi-dwuv index: POST /feedback is applied by ssi-dwuv's rule, the
    served scores are the learned model's, and the snapshot is a compact model file."""
    from sparsesim.compact import CompactSimilarity
    from sparsesim.workflows import build_index_from_files, train_model

    docs = tmp_path / "docs"
    for label, texts in TOPICS.items():
        (docs / label).mkdir(parents=True)
        for i, text in enumerate(texts):
            (docs / label / f"{i}.txt").write_text(text)
    train_model("ssi-dwuv", str(docs), tmp_path / "model.npz", n_triplets=300, seed=0)
    build_index_from_files(tmp_path / "model.npz", str(docs), kind="ann", out=tmp_path / "index")
    ids = ids_of(load_index(tmp_path / "index"))
    sport = [i for i in ids if "/sport/" in i]
    food = [i for i in ids if "/food/" in i]
    text = "the goal in the match"
    snap = tmp_path / "snap.npz"
    proc, client = start(tmp_path / "index", snap, "--snapshot-every", 1000)
    try:
        before = client.post("/query", json={"texts": [text], "top_k": len(ids)}).json()
        assert before["version"] == 0
        r = client.post("/feedback", json=[{"query": text, "preferred": food[0], "other": sport[0]}] * 3)
        assert r.status_code == 202, r.text
        fb = wait_applied(client, 3)
        assert fb["learner"] == "CompactSSI" and fb["version"] >= 1
        after = client.post("/query", json={"texts": [text], "top_k": len(ids)}).json()
        assert after["version"] >= 1
        served = {h["id"]: h["score"] for h in after["results"][0]}
        old = {h["id"]: h["score"] for h in before["results"][0]}
        assert served[food[0]] - served[sport[0]] > old[food[0]] - old[sport[0]]  # moved as the feedback asked
        assert client.post("/feedback", json={"query": text, "preferred": "nope", "other": sport[0]}).status_code == 422
        assert client.get("/health").status_code == 200  # a bad record is refused, the server keeps serving
    finally:
        stop(proc)
    learned = CompactSimilarity.load(snap)  # the final snapshot, written at shutdown
    assert learned.metadata["feedback"]["n_applied"] == 3
    q = learned.featurizer.transform([text])
    X = load_index(tmp_path / "index").X_
    want = learned.score_matrix(q, X)[0]
    row = {v: r for r, v in enumerate(ids)}
    for doc, score in served.items():
        assert abs(score - want[row[doc]]) <= 1e-9 * max(1.0, abs(score))
