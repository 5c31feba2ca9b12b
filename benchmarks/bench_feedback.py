"""Benchmark: `sparsesim serve --learn` absorbing label-derived feedback over HTTP while answering queries.

1. A seeded slice of news20 (``$SPARSESIM_DATA``): ``--documents`` corpus documents and
   ``--eval`` held-out query documents, restricted to the ``--features`` most frequent features
   of the corpus (keeps W, which OASIS fills densely on text, within the machine's memory).
2. A triplet budget ``--budget``: OASIS (or SORS-I with ``--lam``) is trained offline on the first 10% of its triplets
   (anchor, same-label, other-label, drawn from the corpus labels), an exact index is built,
   and ``sparsesim serve --learn`` runs on a free loopback port.
3. The other 90% are sent as feedback (``POST /feedback``, ``--batch`` triplets per request,
   anchor as a corpus id) while a second client sends ``POST /query`` (one held-out vector,
   top_k=10) in a loop: queries/s, p50/p99 latency while updates run, feedback triplets/s
   absorbed (sent until applied), and the MAP@10 of the served answers over time.
4. After all feedback is applied, every held-out query is asked once more; its MAP@10 is
   compared with the same OASIS continued offline (``start_from`` + ``partial_fit_triplets``)
   on the same triplets in the same order, scored exactly.

Usage::

    SPARSESIM_DATA=../shared/data python benchmarks/bench_feedback.py [--documents 3000] [--budget 3000] [--rate R]
        [--drift N] [--active LABELS --active-seeds S] [--skip-serve]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import scipy.sparse as sp

from sparsesim.data import load_dataset
from sparsesim.feedback import FeedbackLearner
from sparsesim.indexes import build_index
from sparsesim.learners.bilinear import OASIS, SORS
from sparsesim.metrics import average_precision_at_k


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def label_triplets(y, n, rng):
    """(anchor, same-label, other-label) row triplets drawn from labels ``y``."""
    by = {c: np.flatnonzero(y == c) for c in np.unique(y)}
    out = np.empty((n, 3), np.int64)
    for t in range(n):
        a = rng.integers(len(y))
        same = by[y[a]]
        p = same[rng.integers(len(same))]
        while p == a:
            p = same[rng.integers(len(same))]
        o = rng.integers(len(y))
        while y[o] == y[a]:
            o = rng.integers(len(y))
        out[t] = a, p, o
    return out


def vec(row: sp.csr_matrix) -> dict:
    return {"indices": row.indices.tolist(), "values": row.data.tolist()}


def map10(ids_lists, qy, y):
    rel = np.array([[y[i] == qy[q] for i in ids] for q, ids in enumerate(ids_lists)])
    return float(np.mean(average_precision_at_k(rel, 10)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--documents", type=int, default=3000)
    ap.add_argument("--eval", type=int, default=300)
    ap.add_argument("--features", type=int, default=5000)
    ap.add_argument("--budget", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--active", type=int, default=0, help="also compare /ask-selected with random feedback "
                    "at equal label counts, in process, up to this many labels")
    ap.add_argument("--lam", type=float, default=None, help="learn with SORS-I (L1 weight lam) instead of OASIS")
    ap.add_argument("--active-seeds", type=int, default=1, help="--active: question streams (seeds 1..N) to "
                    "average over")
    ap.add_argument("--skip-serve", action="store_true", help="only the in-process parts (--active, --drift)")
    ap.add_argument("--rate", type=float, default=0.0, help="send feedback at this many triplets/s (0: as fast as "
                    "the server takes it)")
    ap.add_argument("--drift", type=int, default=0, help="also measure, in process, the recall@10 of candidates "
                    "from the starting model's index (pool 200) under the learned model, every this many triplets")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    data = load_dataset("news20")
    rows = rng.permutation(data.X.shape[0])[: args.documents + args.eval]
    X_all = sp.csr_matrix(data.X[rows])
    y_all = np.asarray(data.y)[rows]
    X, y = X_all[: args.documents], y_all[: args.documents]
    keep = np.argsort(-np.asarray((X != 0).sum(axis=0)).ravel(), kind="stable")[: args.features]
    X, Xq = X[:, keep].tocsr(), X_all[args.documents:, keep].tocsr()
    qy = y_all[args.documents:]
    triplets = label_triplets(y, args.budget, rng)
    n0 = args.budget // 10
    t = time.perf_counter()
    make = (lambda: OASIS(random_state=args.seed)) if args.lam is None else \
        (lambda: SORS(lam=args.lam, random_state=args.seed))
    learner = make()
    learner.partial_fit_triplets(X, triplets[:n0])
    model = learner.model_
    print(f"offline model: {n0} triplets, nnz(W) {model.W.nnz}, {time.perf_counter() - t:.1f} s", flush=True)
    result = {"learner": type(make()).__name__, "documents": args.documents, "eval_queries": args.eval,
              "features": args.features, "budget": args.budget, "offline_triplets": n0,
              "command": " ".join(sys.argv), "cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()}
    if not args.skip_serve:
        ids = np.arange(X.shape[0])
        with tempfile.TemporaryDirectory() as tmp:
            build_index(model, X, kind="exact").save(Path(tmp) / "index")
            port = free_port()
            proc = subprocess.Popen([sys.executable, "-m", "sparsesim.cli", "serve", "--index", str(Path(tmp) / "index"),
                                     "--port", str(port), "--learn", "--snapshot", str(Path(tmp) / "snap.npz"),
                                     "--snapshot-every", str(args.budget), "--max-concurrency", "1"],
                                    stderr=subprocess.PIPE, env=dict(os.environ, PYTHONUNBUFFERED="1"))
            base = f"http://127.0.0.1:{port}"
            for _ in range(600):
                try:
                    httpx.get(base + "/health", timeout=1)
                    break
                except httpx.HTTPError:
                    time.sleep(0.2)
            client = httpx.Client(base_url=base, timeout=60)
            qbodies = [{"vectors": [vec(Xq[i])], "top_k": 10} for i in range(Xq.shape[0])]
            client.post("/query", json=qbodies[0])
            iconn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            t_idle = time.perf_counter()
            before = []
            for b in qbodies:
                iconn.request("POST", "/query", body=json.dumps(b).encode(), headers={"Content-Type": "application/json"})
                before.append(json.loads(iconn.getresponse().read())["results"][0])
            idle_qps = len(qbodies) / (time.perf_counter() - t_idle)
            iconn.close()
            map_before = map10([[h["id"] for h in r] for r in before], qy, y)

            done = threading.Event()
            answers = []  # (time, latency, query row, ids, version)

            # the timed clients are the standard library's http.client (one keep-alive connection
            # each): on two shared cores a heavier client would mostly measure itself
            raw_q = [json.dumps(b).encode() for b in qbodies]

            def post(conn, path, body):
                conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                return resp.status, json.loads(resp.read())

            def query_loop():
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                i = 0
                while not done.is_set():
                    q = i % len(qbodies)
                    s = time.perf_counter()
                    _, r = post(conn, "/query", raw_q[q])
                    answers.append((time.perf_counter(), time.perf_counter() - s, q,
                                    [h["id"] for h in r["results"][0]], r["version"]))
                    i += 1
                conn.close()

            fb = triplets[n0:]
            qt = threading.Thread(target=query_loop)
            fconn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            start = time.perf_counter()
            qt.start()
            applied_log = []
            for lo in range(0, len(fb), args.batch):
                if args.rate > 0:  # pace: batch lo is due at start + lo / rate
                    time.sleep(max(0.0, start + lo / args.rate - time.perf_counter()))
                body = [{"query": int(a), "preferred": int(p), "other": int(o)} for a, p, o in fb[lo:lo + args.batch]]
                status, r = post(fconn, "/feedback", json.dumps(body).encode())
                assert status == 202, r
                applied_log.append((time.perf_counter(), r["applied"]))
            sent_done = time.perf_counter()
            while True:
                info = client.get("/info").json()["feedback"]
                applied_log.append((time.perf_counter(), info["applied"]))
                if info["applied"] >= len(fb):
                    break
                time.sleep(0.05)
            applied_done = time.perf_counter()
            time.sleep(1.0)
            done.set()
            qt.join()
            after = [client.post("/query", json=b).json()["results"][0] for b in qbodies]
            map_after = map10([[h["id"] for h in r] for r in after], qy, y)
            info = client.get("/info").json()["feedback"]
            proc.terminate()
            proc.wait(60)

        # offline: the same learner continued on the same triplets, exact scores
        off = make()
        off.partial_fit_triplets(X, triplets)
        scores = off.model_.score_matrix(Xq, X)
        top = np.argsort(-scores, axis=1, kind="stable")[:, :10]
        map_offline = map10([ids[t] for t in top], qy, y)

        during = [a for a in answers if a[0] <= applied_done]
        lat = np.array([a[1] for a in during]) * 1000
        window = max(applied_done - start, 1e-9)
        curve = []
        edges = np.linspace(start, applied_done, 6)
        for lo, hi in zip(edges[:-1], edges[1:]):
            part = [a for a in answers if lo <= a[0] < hi]
            if part:
                applied = max([n for t_, n in applied_log if t_ <= hi] or [0])
                curve.append({"seconds": round(hi - start, 1), "feedback_applied": applied,
                              "served_map10": round(_window_map(part, qy, y), 4), "answers": len(part)})
        result.update({
            "learner": type(off).__name__ + ("" if args.lam is None else f" lam={args.lam}"),
            "documents": args.documents, "eval_queries": args.eval, "features": args.features,
            "budget": args.budget, "offline_triplets": n0, "feedback_triplets": len(fb), "batch": args.batch,
            "map10_before": round(map_before, 4), "map10_served_after": round(map_after, 4),
            "map10_offline_same_triplets": round(map_offline, 4),
            "feedback_per_s": round(len(fb) / (applied_done - start), 1),
            "feedback_sent_seconds": round(sent_done - start, 2), "feedback_applied_seconds": round(applied_done - start, 2),
            "queries_per_s_during_updates": round(len(during) / window, 1),
            "queries_per_s_before_feedback": round(idle_qps, 1), "feedback_rate_asked": args.rate or None,
            "latency_ms_p50": round(float(np.percentile(lat, 50)), 1) if lat.size else None,
            "latency_ms_p99": round(float(np.percentile(lat, 99)), 1) if lat.size else None,
            "model_versions": info["version"], "curve": curve,
        })
    if args.drift:
        result["candidate_drift"] = candidate_drift(make, X, triplets, n0, args.drift)
    if args.active:
        runs = [active_vs_random(make, X, y, Xq, qy, triplets[:n0], args.active, seed=seed)
                for seed in range(1, args.active_seeds + 1)]
        result["active_vs_random"] = {"seeds": list(range(1, args.active_seeds + 1)), "runs": runs, "mean_map10": {
            mode: [round(float(np.mean([r[mode][i]["map10"] for r in runs])), 4) for i in range(len(runs[0][mode]))]
            for mode in runs[0]}}
    result["load_average_at_end"] = os.getloadavg()
    print(json.dumps(result, indent=1))


ACTIVE_RULES = {"active, one per query": {"per_query": 1}, "active, any number per query": {"per_query": 0}}


def active_vs_random(make, X, y, Xq, qy, start_triplets, labels, rounds=8, seed=1):
    """MAP@10 on the held-out queries after equal numbers of labels under several feedback sources.

    A label is one answered question "for query q, is a or b more similar?"; the oracle prefers
    the document that shares q's label (a question where both or neither do yields no triplet,
    but the label is spent). Each round remembers the top 10 of ``step`` random corpus queries
    (queries cost no label). ``active``: the pairs ``ask`` returns (smallest margins among
    neighbouring ranks), and its variants in ``ACTIVE_RULES``; ``random pairs``: random
    neighbouring pairs of the same result lists; ``random triplets``: label-derived (anchor,
    same-label, other-label) triplets.
    """
    out = {}
    step = labels // rounds
    for mode in (*ACTIVE_RULES, "random pairs", "random triplets"):
        learner = make()
        learner.partial_fit_triplets(X, start_triplets)
        local = np.random.default_rng(seed)
        fl = FeedbackLearner(build_index(learner.model_, X, kind="exact"), learner=make(), recent_queries=step)
        curve, spent = [], 0
        while spent < labels:
            records = []
            if mode == "random triplets":
                for a, p, o in label_triplets(y, step, local):
                    records.append({"query": int(a), "preferred": int(p), "other": int(o)})
            else:
                anchors = local.choice(X.shape[0], step, replace=False)
                fl.query(X[anchors], 10, remember=[int(a) for a in anchors])
                if mode in ACTIVE_RULES:
                    asked = fl.ask(step, **ACTIVE_RULES[mode])
                else:
                    pool = []
                    for item, _, rows in list(fl._recent):
                        pool += [(item, int(rows[i]), int(rows[i + 1])) for i in range(len(rows) - 1)]
                    pick = local.choice(len(pool), min(step, len(pool)), replace=False)
                    asked = [{"query": pool[i][0], "first": pool[i][1], "second": pool[i][2]} for i in pick]
                for a in asked[:step]:
                    same = [y[a["first"]] == y[a["query"]], y[a["second"]] == y[a["query"]]]
                    if same[0] != same[1]:
                        p, o = (a["first"], a["second"]) if same[0] else (a["second"], a["first"])
                        records.append({"query": a["query"], "preferred": p, "other": o})
            spent += step
            if records:
                fl.submit(records)
            fl.flush()
            ids, _, _ = fl.query(Xq, 10)
            curve.append({"labels": spent, "triplets": fl.info()["applied"], "map10": round(map10(ids, qy, y), 4)})
        fl.close()
        out[mode] = curve
    return out


def candidate_drift(make, X, triplets, n0, every):
    """Recall@10 of the starting model's candidates (exact index, pool 200, re-ranked under the
    newest version) against exhaustive scoring, on 50 held-out corpus documents, as feedback
    is applied (no refresh: ``min_recall=0``)."""
    learner = make()
    learner.partial_fit_triplets(X, triplets[:n0])
    fl = FeedbackLearner(build_index(learner.model_, X, kind="exact"), learner=make(), exact_limit=0,
                         min_recall=0.0, drift_check_every=1 << 30)
    out = []
    for lo in range(n0, len(triplets) + 1, every):
        if lo > n0:
            fl.submit([{"query": int(a), "preferred": int(p), "other": int(o)} for a, p, o in triplets[lo - every:lo]])
            fl.flush()
        out.append({"triplets": lo - n0, "recall10": round(fl.check_candidates(rebuild=False)["recall"], 4)})
    fl.close()
    return out


def _window_map(part, qy, y):
    rel = np.array([[y[i] == qy[q] for i in ids] for _, _, q, ids, _ in part])
    return float(np.mean(average_precision_at_k(rel, 10)))


if __name__ == "__main__":
    main()
