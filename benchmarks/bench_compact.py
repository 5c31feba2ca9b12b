"""The compact model family (``ssi-dwuv``, M = D + W + U V^T) against OASIS and cosine.

Closed set: ``stratified_split(y, 0.7, seed)``; the learners learn from the training documents
(the same SORS-protocol triplet stream for OASIS and ssi-dwuv at the same seed); test documents
query test documents (``evaluate_retrieval``, same-label relevance).

With ``--validate`` nothing of the test split is used: the training split is split again
(``stratified_split(y_train, 0.7, seed)``) and the scores are on its held-out part — the run that
chooses defaults.

Per method the JSON records MAP, AP@10, fit seconds (wall, on a machine shared with other jobs),
the peak of traced (Python-allocated) memory during fit, the process's peak RSS after the
method, and the model's bytes and stored numbers (entries) against the corpus's stored entries.

Run (one dataset at a time keeps a run under 4 GiB)::

    SPARSESIM_DATA=/work/shared/data python benchmarks/bench_compact.py --dataset news20 --seeds 0 1 2
    SPARSESIM_DATA=/work/shared/data python benchmarks/bench_compact.py --dataset reuters21578 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

from sparsesim.data import load_dataset
from sparsesim.evaluation import evaluate_retrieval
from sparsesim.model_files import model_nbytes
from sparsesim.registry import make_estimator
from sparsesim.triplets import stratified_split

OUT = Path(__file__).parent / "out"


def _entries(model) -> int:
    n = getattr(model, "n_entries", None)
    if n is not None:
        return int(n)
    W = getattr(model, "W", None)
    return int(W.nnz + (model.n_features if getattr(model, "identity", False) else 0)) if W is not None else 0


def run(method, params, Xtr, ytr, Xte, yte, seed):
    est = make_estimator(method, **params)
    if "random_state" in est.get_params():
        est.set_params(random_state=seed)
    tracemalloc.start()
    t0 = time.perf_counter()
    est.fit(Xtr, ytr)
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    model = est.model_
    r = evaluate_retrieval(model.scorer(Xte), yte)
    return {"method": method, "params": params, "map": 100 * r["map"], "ap@10": 100 * r["ap@10"],
            "fit_seconds": seconds, "fit_traced_peak_bytes": int(peak),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "model_bytes": model_nbytes(model), "model_entries": _entries(model),
            "corpus_train_entries": int(Xtr.nnz), "entries_ratio": _entries(model) / max(1, Xtr.nnz),
            "n_triplets_seen": int(getattr(est, "n_triplets_seen_", 0)),
            "resolved_params": {k: (v if not isinstance(v, np.generic) else v.item())
                                for k, v in dict(getattr(est, "resolved_params_", {})).items()}}


def _parse(items):
    params = {}
    for item in items:
        k, v = item.split("=", 1)
        try:
            params[k] = json.loads(v)
        except json.JSONDecodeError:
            params[k] = v
    return params


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="news20")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--triplets", type=int, default=100_000, help="triplets of ssi-dwuv (its default: 1e5)")
    ap.add_argument("--oasis-triplets", type=int, default=10_000,
                    help="triplets of OASIS (its default, 1e5, needs more memory than a 4 GiB run has on news20)")
    ap.add_argument("--param", action="append", default=[], help="KEY=VALUE for ssi-dwuv (repeatable)")
    ap.add_argument("--methods", nargs="+", default=["cosine", "oasis", "ssi-dwuv"])
    ap.add_argument("--validate", action="store_true", help="score on a held-out part of the training split")
    ap.add_argument("--tag", default="")
    args = ap.parse_args(argv)
    params = _parse(args.param)
    data = load_dataset(args.dataset)
    X, y = data.X.tocsr(), np.asarray(data.y)
    results = []
    for seed in args.seeds:
        tr, te = stratified_split(y, 0.7, seed)
        if args.validate:
            inner_tr, inner_va = stratified_split(y[tr], 0.7, seed)
            tr, te = tr[inner_tr], tr[inner_va]
        Xtr, ytr, Xte, yte = X[tr], y[tr], X[te], y[te]
        for method in args.methods:
            p = {"oasis": {"n_triplets": args.oasis_triplets}, "ssi-dwuv": {"n_triplets": args.triplets, **params}}
            row = run(method, p.get(method, {}), Xtr, ytr, Xte, yte, seed)
            row.update(seed=seed, n_train=int(tr.size), n_test=int(te.size))
            results.append(row)
            print(f"seed {seed} {method:10s} MAP {row['map']:5.1f}  AP@10 {row['ap@10']:5.1f}  fit "
                  f"{row['fit_seconds']:6.1f}s  {row['model_bytes'] / 1e6:8.1f} MB  entries x{row['entries_ratio']:.1f}",
                  flush=True)
    summary = {}
    for name in dict.fromkeys(r["method"] for r in results):
        rs = [r for r in results if r["method"] == name]
        summary[name] = {m: float(np.mean([r[m] for r in rs])) for m in ("map", "ap@10", "fit_seconds", "model_bytes",
                                                                         "entries_ratio")}
        summary[name]["map_std"] = float(np.std([r["map"] for r in rs]))
    report = {"dataset": args.dataset, "protocol": "validation" if args.validate else "closed", "seeds": args.seeds,
              "n_features": int(X.shape[1]), "ssi_params": params, "summary": summary, "runs": results,
              "note": "times measured on a 2-core machine shared with other jobs",
              "command": "SPARSESIM_DATA=/work/shared/data python benchmarks/bench_compact.py "
                         + " ".join(sys.argv[1:] if argv is None else argv)}
    OUT.mkdir(exist_ok=True)
    path = OUT / f"compact_{args.dataset}_{report['protocol']}{args.tag}.json"
    path.write_text(json.dumps(report, indent=1, default=float))
    for name, s in summary.items():
        print(f"{name:10s} MAP {s['map']:5.1f} (sd {s['map_std']:.1f})  AP@10 {s['ap@10']:5.1f}")
    print("written", path)


if __name__ == "__main__":
    main()
