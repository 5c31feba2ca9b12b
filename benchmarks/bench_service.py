"""Benchmark: `sparsesim serve` on a 10^4-document text index, over real HTTP.

1. 10^4 20 Newsgroups documents (seeded sample of 20news-bydate from ``$SPARSESIM_DATA``) are
   written as JSONL; OASIS is trained on them (TF-IDF featuriser saved in the model) and an
   exact index is built.
2. ``sparsesim serve`` runs in a subprocess on a free loopback port.
3. One client (``http.client``) sends 1,000 sequential ``POST /query`` (one text each: the
   first 30 words of a random held-out document, top_k=10) over one keep-alive connection:
   requests/s and latency percentiles; every answer is checked (status 200, 10 results).
4. 100 malformed requests (bad JSON, wrong types, huge top_k, empty text, oversized body,
   unknown fields, bad vectors) must each get a 4xx JSON error, with a ``GET /health`` after
   each; then 100 valid queries again.

Usage::

    SPARSESIM_DATA=../shared/data python benchmarks/bench_service.py [--documents 10000] [--requests 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def malformed(i: int, max_body: int) -> tuple[bytes, dict]:
    kinds = [
        b"{not json",
        b"",
        b"[1, 2, 3]",
        json.dumps({"texts": "not a list"}).encode(),
        json.dumps({"texts": []}).encode(),
        json.dumps({"texts": [""]}).encode(),
        json.dumps({"texts": [42]}).encode(),
        json.dumps({"texts": ["goal"], "top_k": 10 ** 9}).encode(),
        json.dumps({"texts": ["goal"], "top_k": "ten"}).encode(),
        json.dumps({"texts": ["goal"], "top_k": -1}).encode(),
        json.dumps({"vectors": [{"indices": [10 ** 12], "values": [1.0]}]}).encode(),
        json.dumps({"vectors": [{"indices": [1, 2], "values": [1.0]}]}).encode(),
        json.dumps({"texts": ["a"], "surprise": True}).encode(),
        json.dumps({"texts": ["x" * (max_body + 10)]}).encode(),
        b"\xff\xfe\x00garbage",
    ]
    return kinds[i % len(kinds)], {"Content-Type": "application/json"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--documents", type=int, default=10_000)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--triplets", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--algorithm", default="oasis")
    ap.add_argument("--param", action="append", default=[], help="learner parameter KEY=VALUE (JSON value)")
    ap.add_argument("--kind", default="exact", choices=["exact", "ann"])
    ap.add_argument("--reuse", action="store_true", help="reuse the model and index of an earlier run in --workdir")
    ap.add_argument("--profile", action="store_true", help="also time the stages of one request in process (JSON, "
                    "featurising, q.M expansion, corpus scoring, top-k, answer) before serving")
    args = ap.parse_args()

    import httpx

    from sparsesim.data import data_home
    from sparsesim.data.readers import read_text_corpus
    from sparsesim.workflows import build_index_from_files, train_model

    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench_service."))
    work.mkdir(parents=True, exist_ok=True)
    tar = data_home() / "news20" / "20news-bydate.tar.xz"
    if not tar.is_file():
        sys.exit(f"needs {tar} (set SPARSESIM_DATA)")
    t0 = time.perf_counter()
    corpus = read_text_corpus(tar)
    rng = np.random.default_rng(args.seed)
    order = rng.permutation(len(corpus["texts"]))
    docs, held = order[: args.documents], order[args.documents:]
    jsonl = work / "news.jsonl"
    with open(jsonl if not (args.reuse and jsonl.is_file()) else os.devnull, "w") as handle:
        for i in docs:
            handle.write(json.dumps({"id": str(corpus["ids"][i]), "text": corpus["texts"][i],
                                     "label": str(corpus["groups"][i])}) + "\n")
    queries = [" ".join(corpus["texts"][i].split()[:30]) for i in rng.choice(held, args.requests + 100)]
    tag = f"{args.algorithm}-{args.kind}-" + "-".join(p.replace("=", "") for p in args.param)
    model, index = work / f"model-{tag}.npz", work / f"index-{tag}"
    params = {k: json.loads(v) for k, v in (p.split("=", 1) for p in args.param)}
    reuse = args.reuse and model.is_file() and index.is_dir()
    summary = None if reuse else train_model(args.algorithm, str(jsonl), model, n_triplets=args.triplets, seed=args.seed, params=params, overwrite=True,
                          data_options={"id_column": "id", "tfidf": {"min_df": 3, "sublinear_tf": True}})
    if not reuse:
        if index.exists():
            import shutil

            shutil.rmtree(index)
        build = build_index_from_files(model, str(jsonl), kind=args.kind, out=index)
        print(f"setup: {args.documents} documents, {args.algorithm} {params}, {summary['n_triplets']} triplets, "
              f"nnz(M)={summary['nnz']}, {args.kind} index built in {build['build_seconds']:.1f} s; "
              f"{time.perf_counter() - t0:.0f} s in all", flush=True)
    else:
        print(f"setup: reusing {model.name} and {index.name}", flush=True)

    if args.profile:
        profile(index, queries[:200])
    port = free_port()
    max_body = 1 << 20
    proc = subprocess.Popen([sys.executable, "-m", "sparsesim.cli", "serve", "--index", str(index), "--port",
                             str(port)], stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        t_start = time.perf_counter()
        while True:
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
            if proc.poll() is not None:
                sys.exit(proc.stderr.read().decode()[-2000:])
        print(f"server answering {time.perf_counter() - t_start:.1f} s after start", flush=True)
        with httpx.Client(base_url=base, timeout=30) as client:
            for q in queries[:20]:  # warm-up
                client.post("/query", json={"texts": [q], "top_k": 10}).raise_for_status()
            import http.client

            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            t1 = time.perf_counter()
            for _ in range(args.requests):
                conn.request("GET", "/health")
                resp = conn.getresponse()
                resp.read()
                if resp.status != 200:
                    sys.exit(f"/health answered {resp.status}")
            conn.close()
            print(f"floor: {args.requests} sequential GET /health: {args.requests / (time.perf_counter() - t1):.0f} "
                  "requests/s (HTTP round trip alone on this machine)", flush=True)
            # the timed client is the standard library's http.client (one keep-alive connection):
            # on two shared cores a heavier client would mostly measure itself
            import http.client

            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            bodies = [json.dumps({"texts": [q], "top_k": 10}).encode() for q in queries[: args.requests]]
            lat, answers = [], []
            t1 = time.perf_counter()
            for body in bodies:
                s = time.perf_counter()
                conn.request("POST", "/query", body=body, headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                answers.append((resp.status, resp.read()))
                lat.append(time.perf_counter() - s)
            wall = time.perf_counter() - t1
            conn.close()
            for status, raw in answers:
                if status != 200 or len(json.loads(raw)["results"][0]) != 10:
                    sys.exit(f"bad answer: {status} {raw[:200]!r}")
            lat_ms = np.array(lat) * 1000
            print(f"{args.requests} sequential POST /query: {args.requests / wall:.0f} requests/s; latency ms "
                  f"p50 {np.percentile(lat_ms, 50):.1f}, p90 {np.percentile(lat_ms, 90):.1f}, "
                  f"p99 {np.percentile(lat_ms, 99):.1f}, max {lat_ms.max():.1f}")
            statuses = []
            for i in range(100):
                body, headers = malformed(i, max_body)
                r = client.post("/query", content=body, headers=headers)
                ok_json = "error" in r.json()
                statuses.append(r.status_code)
                if not (400 <= r.status_code < 500 and ok_json):
                    sys.exit(f"malformed request {i} got {r.status_code}: {r.text[:200]}")
                if client.get("/health").status_code != 200:
                    sys.exit(f"server stopped answering after malformed request {i}")
            counts = {s: statuses.count(s) for s in sorted(set(statuses))}
            good = sum(client.post("/query", json={"texts": [q], "top_k": 10}).status_code == 200
                       for q in queries[args.requests:])
            print(f"100 malformed requests: all 4xx with a JSON error {counts}; /health answered after each; "
                  f"{good}/100 valid queries answered afterwards")
    finally:
        proc.terminate()
        proc.wait(10)


def profile(index_dir, texts) -> None:
    """Mean milliseconds per request of each stage of ``POST /query`` for one text, in process."""
    from sparsesim.service import QueryService
    from sparsesim.topk import top_k_rows

    svc = QueryService(index_dir)
    idx = svc.index
    bodies = [json.dumps({"texts": [t], "top_k": 10}).encode() for t in texts]

    def timed(fn, items):
        fn(items[0])
        t = time.perf_counter()
        out = [fn(x) for x in items]
        return (time.perf_counter() - t) / len(items) * 1000, out

    stages = {}
    stages["JSON decode"], payloads = timed(json.loads, bodies)
    stages["request checks + featurising (TF-IDF)"], Qs = timed(lambda p: svc.parse(p)[0], payloads)
    stages["whole search (service.search)"], results = timed(lambda Q: svc.search(Q, 10), Qs)
    stages["answer JSON encode"], _ = timed(json.dumps, results)
    if getattr(idx, "strategy_", None) == "query":  # the exact index's stages, and scipy on the same arrays
        stages["  index: q.M expansion (dense, d)"], E = timed(idx._expand, Qs)
        stages["  index: corpus scoring kernel + top-k"], _ = timed(lambda e: idx._score_expanded(e, 10, 1), E)
        X = sp_csr(idx.X_)
        stages["  reference: scipy X @ qM (in memory) + top-k"], _ = timed(
            lambda e: top_k_rows((X @ e[:, 0])[None, :], 10), E)
    for name, ms in stages.items():
        print(f"profile: {name:<48} {ms:7.2f} ms", flush=True)


def sp_csr(X):
    import scipy.sparse as sp

    return sp.csr_matrix((np.array(X.data), np.array(X.indices), np.array(X.indptr)), shape=X.shape)


if __name__ == "__main__":
    main()
