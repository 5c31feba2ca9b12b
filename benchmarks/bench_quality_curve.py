"""Learning curve on news20: test MAP against the number of triplets, OASIS and proxy-ssi.

Split ``stratified_split(y, 0.7, seed)``; each point is a fresh fit on the training documents
with that budget (OASIS: SORS-protocol triplets; proxy-ssi: anchors, each one proxy triplet
against every class, ``validation="none"`` and alpha = 1 so the budget is the only difference);
test documents query test documents. Writes benchmarks/out/bench_quality_curve.json and
docs/img/quality_curve.png.

    SPARSESIM_DATA=/work/shared/data python benchmarks/bench_quality_curve.py --oasis-max 30000
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


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="news20")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budgets", type=int, nargs="+", default=[1000, 3000, 10000, 30000, 100000])
    ap.add_argument("--oasis-max", type=int, default=30000, help="largest OASIS budget (its model grows with it)")
    args = ap.parse_args(argv)
    data = load_dataset(args.dataset)
    X, y = data.X.tocsr(), np.asarray(data.y)
    tr, te = stratified_split(y, 0.7, args.seed)
    rows = []
    for name in ("proxy-ssi", "oasis"):
        for n in args.budgets:
            if name == "oasis" and n > args.oasis_max:
                continue
            params = {"n_triplets": n, "random_state": args.seed}
            if name == "proxy-ssi":
                params.update(validation="none", identity_weight=1.0, n_epochs=10_000)
            est = make_estimator(name, **params)
            t0 = time.perf_counter()
            est.fit(X[tr], y[tr])
            seconds = time.perf_counter() - t0
            model = est.model_
            r = evaluate_retrieval(model.scorer(X[te]), y[te])
            entries = int(model.P.size) if hasattr(model, "P") else int(model.W.nnz)
            rows.append({"method": name, "n_triplets": n, "map": 100 * r["map"], "ap@10": 100 * r["ap@10"],
                         "fit_seconds": seconds, "model_entries": entries})
            print(rows[-1], flush=True)
    (ROOT / "benchmarks" / "out").mkdir(exist_ok=True)
    (ROOT / "benchmarks" / "out" / "bench_quality_curve.json").write_text(json.dumps(
        {"dataset": args.dataset, "seed": args.seed, "corpus_stored_entries": int(X.nnz), "rows": rows}, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, marker in (("proxy-ssi", "o"), ("oasis", "s")):
        pts = [(r["n_triplets"], r["map"]) for r in rows if r["method"] == name]
        ax.plot(*zip(*pts), marker=marker, label=name)
    ax.set_xscale("log")
    ax.set_xlabel("triplets (proxy-ssi: anchors, each against every class proxy)")
    ax.set_ylabel("test MAP (%)")
    ax.set_title(f"{args.dataset}, split seed {args.seed}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    (ROOT / "docs" / "img").mkdir(parents=True, exist_ok=True)
    fig.savefig(ROOT / "docs" / "img" / "quality_curve.png", dpi=120)


if __name__ == "__main__":
    main()
