"""The campaign's service, feedback and Dask families (used by ``tests/fuzz_campaign.py``).

* :func:`finite_request`: requests to ``sparsesim serve`` that are valid JSON of finite numbers
  but hostile -- values whose scores overflow float64, ``compare`` with values above 1e154 (the
  cosine column must not be all zeros), ids of every kind in ``/feedback``; each comes with a
  check of its answer.
* :func:`run_feedback_case`: ``learn`` / ``serve --learn`` with a random snapshot path (inside
  the index, the index itself, a missing directory, a FIFO, a symlink, the feedback log, a
  snapshot learned on another index of the same width, its own snapshot, a new file) and random
  ``--resume`` / ``--overwrite``: a clean error or a success, the index's files never changed,
  a snapshot of another index never resumed, a written snapshot always loadable.
* :func:`run_dask_case`: ``index build --scheduler``, ``query --scheduler`` and ``serve
  --scheduler`` against addresses that accept TCP and stay silent, answer HTTP, send garbage,
  or refuse: one ``error:`` line (never "out of memory", never a traceback) within the documented
  10 s plus start-up.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

EXE = [sys.executable, "-m", "sparsesim.cli"]


# --------------------------------------------------------------------------- fixtures
def make_service_fixtures(root: Path) -> None:
    """``m-other.npz`` / ``base-other`` (same width as ``base-exact``, another model: seed 1),
    ``other-snap.npz`` (a snapshot learned on ``base-other``), ``fb.jsonl`` (valid feedback
    for both) and ``base-sharded`` (a 2-shard exact index built in this process)."""
    from sparsesim.data import load_dataset
    from sparsesim.feedback import FeedbackLearner
    from sparsesim.indexes import build_index, load_index
    from sparsesim.indexes.sharded import ShardedIndex
    from sparsesim.models import BilinearSimilarity
    from sparsesim.workflows import train_model

    data = load_dataset("news20-sample")
    if not (root / "base-other").exists():
        train_model("oasis", "news20-sample", root / "m-other.npz", n_triplets=300, seed=1, overwrite=True)
        build_index(BilinearSimilarity.load(root / "m-other.npz"), data.X[:300], kind="exact").save(root / "base-other")
    ids = [v.item() for v in load_index(root / "base-exact").ids_[:40]]
    records = [{"query": ids[i], "preferred": ids[i + 1], "other": ids[i + 2]} for i in range(0, 30, 3)]
    (root / "fb.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if not (root / "other-snap.npz").exists():
        with FeedbackLearner(root / "base-other", snapshot=root / "other-snap.npz") as fl:
            fl.submit(records)
    if not (root / "base-sharded").exists():
        model = BilinearSimilarity.load(root / "m.npz")
        index = ShardedIndex(model, kind="exact", n_shards=2).fit(data.X[:300])
        index.save(root / "base-sharded")
        index.release()


# --------------------------------------------------------------------------- service requests
def finite_request(rng, d: int, ids: list):
    """``(server, method, path, headers, body, check)``; ``check(status, answer) -> outcome or None``
    (None: the generic 2xx/4xx classification holds)."""
    kind = str(rng.choice(["overflow", "compare", "feedback-overflow", "feedback-id", "ask-after-overflow"]))
    headers = {"content-type": "application/json"}
    n = int(rng.integers(1, min(d, 3000)))
    cols = sorted(rng.choice(d, size=n, replace=False).tolist())
    if kind in ("overflow", "ask-after-overflow"):
        big = float(rng.choice([1e308, 1.7e308, 1e200, 1e160]))
        body = {"vectors": [{"indices": cols, "values": [big] * n}], "top_k": int(rng.integers(1, 20))}
        server = "learn" if kind == "ask-after-overflow" or rng.random() < 0.5 else "frozen"
        return server, "POST", "/query", headers, json.dumps(body).encode(), None
    if kind == "compare":
        scale = float(rng.choice([1e155, 1e200, 1e300, 1e-160, 1e-300]))
        values = (rng.random(n) + 0.1).tolist()
        body = {"vectors": [{"indices": cols, "values": [v * scale for v in values]}], "top_k": 5, "compare": True}

        def check(status, answer):
            if status != 200:
                return None  # refused (e.g. scores overflow): the generic rule judges it
            cosine = [h["score"] for h in answer["cosine"][0]]
            return "wrong" if cosine and max(cosine) == 0.0 else None
        return "frozen", "POST", "/query", headers, json.dumps(body).encode(), check
    if kind == "feedback-overflow":
        body = {"query": {"indices": cols, "values": [1e308] * n}, "preferred": ids[1], "other": ids[2]}
        return "learn", "POST", "/feedback", headers, json.dumps(body).encode(), None
    doc = [ids[int(rng.integers(len(ids)))], "caf\udce9.txt", "\ud800", "\x00", "a" * 5000, 10**30, -1][rng.integers(7)]
    body = {"query": ids[0], "preferred": doc, "other": ids[3]}
    return "learn", "POST", "/feedback", headers, json.dumps(body).encode(), None


# --------------------------------------------------------------------------- feedback family
def _tree_digest(directory: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(directory.rglob("*")):
        if path.is_file() and not path.is_symlink():
            digest.update(str(path.relative_to(directory)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


SNAPSHOT_TARGETS = ["inside-version", "inside-index", "index-itself", "missing-dir", "fifo", "symlink",
                    "feedback-log", "other-index", "own", "new", "directory"]


def _snapshot_target(name: str, root: Path, index: Path, command: str) -> Path:
    work = root / "fb-work"
    version = next(p for p in index.iterdir() if p.is_dir())
    if name == "inside-version":
        return version / "model.npz"
    if name == "inside-index":
        return index / "snap.npz"
    if name == "index-itself":
        return index
    if name == "missing-dir":
        return work / "no" / "such" / "snap.npz"
    if name == "fifo":
        if not (work / "fifo.npz").exists():
            os.mkfifo(work / "fifo.npz")
        return work / "fifo.npz"
    if name == "symlink":
        if not (work / "link.npz").is_symlink():
            os.symlink(version / "model.npz", work / "link.npz")
        return work / "link.npz"
    if name == "feedback-log":  # serve does not read it: a copy, so that --overwrite may replace it
        if command == "serve":
            shutil.copy(root / "fb.jsonl", work / "fb-copy.jsonl")
            return work / "fb-copy.jsonl"
        return root / "fb.jsonl"
    if name == "other-index":
        shutil.copy(root / "other-snap.npz", work / "other.npz")
        return work / "other.npz"
    if name == "own":
        return work / "own.npz"  # written by an earlier case, or new
    if name == "directory":
        (work / "adir").mkdir(exist_ok=True)
        return work / "adir"
    return work / f"new-{time.monotonic_ns()}.npz"


def _classify(code, err: str, timed_out: bool) -> str:
    if timed_out:
        return "hang"
    if code is None or code < 0:
        return "dead"
    if "Traceback" in err:
        return "traceback"
    if code not in (0, 2):
        return "unexpected"
    if code == 2 and (not err.strip().splitlines() or not err.strip().splitlines()[-1].startswith("error:")):
        return "unexpected"
    return "ok" if code == 0 else "clean-error"


def _serve_until_up_or_exit(args, timeout: float, on_up=None):
    """Start ``serve ARGS``; return (code, stderr, timed_out): the exit of a refused start, or 0
    once ``/health`` answers (``on_up(base_url)`` is called, then the server is stopped with
    SIGTERM; uvicorn shuts down gracefully and re-raises the signal, so -SIGTERM counts as 0)."""
    import signal

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([*EXE, "serve", *map(str, args), "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, errors="replace")
    deadline = time.monotonic() + timeout
    up = False
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            up = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code in (200, 503)
        except httpx.HTTPError:
            up = False
        if up:
            break
        time.sleep(0.2)
    if up and on_up is not None:
        try:
            on_up(f"http://127.0.0.1:{port}")
        except httpx.HTTPError:
            pass
    if proc.poll() is None:
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            return None, "", True
        if not up:
            return None, err, True
        return (0 if proc.returncode == -signal.SIGTERM else proc.returncode), err, False
    _, err = proc.communicate()
    return proc.returncode, err, False


def run_feedback_case(rng, root: Path, timeout: float) -> tuple[str, str]:
    """One ``learn`` / ``serve --learn`` run with a random snapshot target; (outcome, description)."""
    from sparsesim.models import BilinearSimilarity

    (root / "fb-work").mkdir(exist_ok=True)
    index = root / "fb-index"
    if not index.exists():
        shutil.copytree(root / "base-exact", index)
    before = _tree_digest(index)
    target_name = str(rng.choice(SNAPSHOT_TARGETS))
    command = "serve" if rng.random() < 0.25 else "learn"
    target = _snapshot_target(target_name, root, index, command)
    flags = [f for f in ("--resume", "--overwrite") if rng.random() < 0.3]
    sent = []  # /feedback statuses of a server that started
    if command == "serve":
        flags = [f for f in flags if f != "--resume"]
        args = ["-i", index, "--learn", "--snapshot", target, *flags]

        def send_feedback(base):
            import httpx

            record = json.loads((root / "fb.jsonl").read_text().splitlines()[0])
            sent.append(httpx.post(base + "/feedback", json=record, timeout=30).status_code)

        code, err, timed_out = _serve_until_up_or_exit(args, timeout, on_up=send_feedback)
    else:
        args = ["learn", "-i", index, "-f", root / "fb.jsonl", "-o", target, *flags]
        try:
            proc = subprocess.run([*EXE, *map(str, args)], capture_output=True, text=True, errors="replace",
                                  timeout=timeout)
            code, err, timed_out = proc.returncode, proc.stderr, False
        except subprocess.TimeoutExpired:
            code, err, timed_out = None, "", True
    outcome = _classify(code, err, timed_out)
    what = f"{command} {target_name} {flags}: {err.strip()[-200:]}"
    if _tree_digest(index) != before:
        outcome = "wrong"  # the index's own files changed
        shutil.rmtree(index)
    resumed_other = target_name == "other-index" and "--overwrite" not in flags and (
        command == "serve" or "--resume" in flags)
    if outcome == "ok" and resumed_other:
        outcome = "wrong"  # a snapshot of another index resumed silently
    if outcome == "ok" and (command == "learn" or sent == [202]):  # a snapshot was written: it loads
        try:
            BilinearSimilarity.load(target)
        except Exception:  # noqa: BLE001
            outcome = "partial"
    return outcome, what


# --------------------------------------------------------------------------- Dask family
class FakeScheduler:
    """A loopback TCP server that accepts and stays silent, answers HTTP, or sends garbage."""

    def __init__(self, mode: str):
        self.mode, self.conns = mode, []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.address = f"tcp://127.0.0.1:{self.sock.getsockname()[1]}"
        if mode == "refused":
            self.sock.close()
            return
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            try:
                if self.mode == "http":
                    conn.recv(65536)
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5\r\n\r\nhello")
                elif self.mode == "garbage":
                    conn.sendall(np.random.default_rng(len(self.conns)).integers(0, 256, 4096, np.uint8).tobytes())
            except OSError:
                pass

    def close(self):
        for conn in [self.sock, *self.conns]:
            try:
                conn.close()
            except OSError:
                pass


DASK_MODES = ["silent", "http", "garbage", "refused"]
#: the documented connect timeout, plus interpreter start-up and imports on a loaded machine
DASK_BOUND = 10 + 20


def run_dask_case(rng, root: Path) -> tuple[str, str]:
    """One command against a fake scheduler; (outcome, description)."""
    mode = str(rng.choice(DASK_MODES))
    command = str(rng.choice(["build", "query", "serve"]))
    fake = FakeScheduler(mode)
    out = root / "dask-out"
    shutil.rmtree(out, ignore_errors=True)
    try:
        start = time.monotonic()
        if command == "serve":
            code, err, timed_out = _serve_until_up_or_exit(["-i", root / "base-sharded", "--scheduler", fake.address],
                                                           DASK_BOUND + 30)
        else:
            if command == "build":
                args = ["index", "build", "-m", root / "m.npz", "-d", root / "corpus.svm", "--shards", "2", "-o", out]
            else:
                args = ["query", "--index", root / "base-sharded", "--queries", root / "q.svm"]
            try:
                proc = subprocess.run([*EXE, *map(str, args), "--scheduler", fake.address], capture_output=True,
                                      text=True, errors="replace", timeout=DASK_BOUND + 30)
                code, err, timed_out = proc.returncode, proc.stderr, False
            except subprocess.TimeoutExpired:
                code, err, timed_out = None, "", True
        elapsed = time.monotonic() - start
    finally:
        fake.close()
    outcome = _classify(code, err, timed_out)
    if outcome == "ok":
        outcome = "wrong"  # nothing there is a scheduler
    if outcome == "clean-error" and ("memory" in err.lower() or elapsed > DASK_BOUND):
        outcome = "hang" if elapsed > DASK_BOUND else "wrong"
    if out.exists():
        outcome = "partial" if outcome in ("ok", "clean-error") else outcome
        shutil.rmtree(out, ignore_errors=True)
    return outcome, f"{command} {mode} {elapsed:.1f}s: {err.strip()[-200:]}"
