"""Learning curve on news20: test MAP against the number of triplets, by learner and triplet sampler.

Split ``stratified_split(y, 0.7, seed)``; each point is a fresh fit on the training documents
with that budget; test documents query test documents. Bilinear learners (OASIS, SORS-I, ...)
run once per sampler (``uniform``: the SORS protocol; ``semihard`` ...: negatives mined from the
model's ranking of a seeded pool, see docs/quality.md "Triplet samplers"); each learner has its
own largest budget, since OASIS's model grows with the budget. proxy-ssi (anchors, each one proxy
triplet against every class; ``validation="none"``, alpha = 1, so the budget is the only
difference) is the reference line. Points already in the JSON are kept, so a long curve can be
extended run by run. Writes benchmarks/out/bench_quality_curve.json and docs/img/quality_curve.png.

    SPARSESIM_DATA=/work/shared/data python benchmarks/bench_quality_curve.py \\
        --learner-max oasis=10000 sors-l1=1000000 --samplers uniform semihard
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from sparsesim.data import load_dataset
from sparsesim.evaluation import evaluate_retrieval
from sparsesim.registry import make_estimator
from sparsesim.triplets import stratified_split

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out" / "bench_quality_curve.json"


def _fit_point(name, sampler, n, X, y, tr, te, seed, max_memory):
    params = {"n_triplets": n, "random_state": seed}
    if name == "proxy-ssi":
        params.update(validation="none", identity_weight=1.0, n_epochs=10_000)
    else:
        params.update(sampler=sampler, max_memory=max_memory)
    est = make_estimator(name, **params)
    t0 = time.perf_counter()
    est.fit(X[tr], y[tr])
    seconds = time.perf_counter() - t0
    model = est.model_
    r = evaluate_retrieval(model.scorer(X[te]), y[te])
    entries = int(model.P.size) if hasattr(model, "P") else int(model.W.nnz)
    return {"method": name, "sampler": sampler, "n_triplets": n, "map": 100 * r["map"], "ap@10": 100 * r["ap@10"],
            "fit_seconds": seconds, "model_entries": entries,
            "n_updates": int(getattr(est, "n_updates_", 0))}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="news20")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budgets", type=int, nargs="+", default=[1000, 3000, 10000, 30000, 100000, 300000, 1000000])
    ap.add_argument("--learner-max", nargs="+", default=["sors-l1=1000000", "proxy-ssi=30000", "oasis=10000"],
                    help="learner=largest budget (a model that grows with the budget stops where memory does)")
    ap.add_argument("--samplers", nargs="+", default=["uniform", "semihard"])
    ap.add_argument("--max-memory", default="3GiB", help="memory budget of each bilinear fit")
    args = ap.parse_args(argv)
    limits = {k: int(v) for k, v in (item.split("=") for item in args.learner_max)}
    data = load_dataset(args.dataset)
    X, y = data.X.tocsr(), np.asarray(data.y)
    tr, te = stratified_split(y, 0.7, args.seed)
    old = json.loads(OUT.read_text()) if OUT.exists() else {}
    rows = [r for r in old.get("rows", []) if "sampler" in r] if old.get("dataset") == args.dataset else []
    have = {(r["method"], r["sampler"], r["n_triplets"]) for r in rows}
    for name, top in limits.items():
        for sampler in (["-"] if name == "proxy-ssi" else args.samplers):
            for n in args.budgets:
                if n > top or (name, sampler, n) in have:
                    continue
                rows.append(_fit_point(name, sampler, n, X, y, tr, te, args.seed, args.max_memory))
                print(rows[-1], flush=True)
                _write(args, X, rows)
                _plot(args, rows)
    _write(args, X, rows)
    _plot(args, rows)


def _write(args, X, rows):
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps({"dataset": args.dataset, "seed": args.seed, "corpus_stored_entries": int(X.nnz),
                               "machine": "2 cores shared with other jobs (fit times under load)",
                               "rows": sorted(rows, key=lambda r: (r["method"], r["sampler"], r["n_triplets"]))},
                              indent=1))


def _plot(args, rows):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    lines = sorted({(r["method"], r["sampler"]) for r in rows})
    for method, sampler in lines:
        pts = sorted((r["n_triplets"], r["map"]) for r in rows if (r["method"], r["sampler"]) == (method, sampler))
        label = method if sampler == "-" else f"{method}, {sampler}"
        style = "--" if sampler == "uniform" else "-"
        ax.plot(*zip(*pts), style, marker="o" if method == "proxy-ssi" else "s", label=label)
    ax.set_xscale("log")
    ax.set_xlabel("triplets (proxy-ssi: anchors, each against every class proxy)")
    ax.set_ylabel("test MAP (%)")
    ax.set_title(f"{args.dataset}, split seed {args.seed}: uniform (dashed) against mined negatives")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    (ROOT / "docs" / "img").mkdir(parents=True, exist_ok=True)
    fig.savefig(ROOT / "docs" / "img" / "quality_curve.png", dpi=120)


if __name__ == "__main__":
    main()
