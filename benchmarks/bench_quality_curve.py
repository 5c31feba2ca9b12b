"""Learning curve on news20: test MAP against the number of triplets, by learner and triplet sampler.

Split ``stratified_split(y, 0.7, seed)``; each point is a fresh fit on the training documents
with that budget; test documents query test documents. Bilinear learners (OASIS, SORS-I, ...)
run once per sampler (``uniform``: the SORS protocol; ``semihard`` ...: negatives mined from the
model's ranking of a seeded pool, see docs/quality.md "Triplet samplers"); each learner has its
own largest budget, since OASIS's model grows with the budget. proxy-ssi (anchors, each one proxy
triplet against every class; ``validation="none"``, alpha = 1, so the budget is the only
difference) is the reference line. Points already in the JSON are kept (and skipped), and each
new point is added as it finishes, so a long curve can be extended one point per run. Writes
benchmarks/out/bench_quality_curve.json and docs/img/quality_curve.png.

    SPARSESIM_DATA=/work/shared/data python benchmarks/bench_quality_curve.py \\
        --learner-max oasis=10000 sors-l1=1000000 --samplers uniform semihard
    # one point: SORS-I, semihard, 10^6 triplets
    SPARSESIM_DATA=/work/shared/data python benchmarks/bench_quality_curve.py \\
        --budgets 1000000 --learner-max sors-l1=1000000 --samplers semihard
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
import tracemalloc
from pathlib import Path

import numpy as np

from sparsesim.data import load_dataset
from sparsesim.evaluation import evaluate_retrieval
from sparsesim.model_files import model_nbytes
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
    load_before = os.getloadavg()[1]
    tracemalloc.start()
    t0 = time.perf_counter()
    est.fit(X[tr], y[tr])
    seconds = time.perf_counter() - t0
    load_after = os.getloadavg()[1]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    model = est.model_
    r = evaluate_retrieval(model.scorer(X[te]), y[te])
    entries = int(model.P.size) if hasattr(model, "P") else int(model.W.nnz)
    seen = int(getattr(est, "n_triplets_seen_", n))
    return {"method": name, "sampler": sampler, "n_triplets": n, "map": 100 * r["map"], "ap@10": 100 * r["ap@10"],
            "fit_seconds": seconds, "triplets_per_second": seen / seconds if seconds > 0 else None,
            "traced_peak_bytes": int(peak),
            "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "model_entries": entries, "model_bytes": int(model_nbytes(model)),
            "max_model_bytes": (getattr(est, "resolved_params_", None) or {}).get("max_model_bytes"),
            "n_updates": int(getattr(est, "n_updates_", 0)),
            "load_5min": [round(load_before, 1), round(load_after, 1)]}  # machine load when the fit began and ended


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="news20")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budgets", type=int, nargs="+", default=[1000, 10000, 100000, 1000000])
    ap.add_argument("--learner-max", nargs="+", default=["sors-l1=1000000", "oasis=1000000"],
                    help="learner=largest budget (proxy-ssi=N adds the proxy learner as a reference line)")
    ap.add_argument("--samplers", nargs="+", default=["uniform", "semihard"])
    ap.add_argument("--max-memory", default="3GiB", help="memory budget of each bilinear fit")
    args = ap.parse_args(argv)
    limits = {k: int(v) for k, v in (item.split("=") for item in args.learner_max)}
    data = load_dataset(args.dataset)
    X, y = data.X.tocsr(), np.asarray(data.y)
    tr, te = stratified_split(y, 0.7, args.seed)
    have = {_key(r) for r in _stored(args.dataset)}
    for n in args.budgets:
        for name, top in limits.items():
            for sampler in (["-"] if name == "proxy-ssi" else args.samplers):
                if n > top or (name, sampler, n) in have:
                    continue
                row = _fit_point(name, sampler, n, X, y, tr, te, args.seed, args.max_memory)
                print(row, flush=True)
                rows = _write(args, X, row)
                _plot(args, rows)
    _plot(args, _stored(args.dataset))


def _key(row):
    return row["method"], row["sampler"], row["n_triplets"]


def _stored(dataset):
    """The rows of the JSON file for ``dataset`` measured with this script's fields."""
    old = json.loads(OUT.read_text()) if OUT.exists() else {}
    return [r for r in old.get("rows", []) if "model_bytes" in r] if old.get("dataset") == dataset else []


def _write(args, X, row):
    """Add ``row`` to the JSON file (re-read first: several runs may extend it one after another)."""
    rows = [r for r in _stored(args.dataset) if _key(r) != _key(row)] + [row]
    OUT.parent.mkdir(exist_ok=True)
    tmp = OUT.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"dataset": args.dataset, "seed": args.seed, "corpus_stored_entries": int(X.nnz),
                               "machine": "2 cores shared with other jobs (fit times under load)",
                               "rows": sorted(rows, key=_key)}, indent=1))
    tmp.replace(OUT)
    return rows


def _plot(args, rows):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    lines = sorted({(r["method"], r["sampler"]) for r in rows})
    colours = {m: f"C{i}" for i, m in enumerate(sorted({m for m, _ in lines}))}
    for ax, key, label in zip(axes, ("map", "ap@10"), ("test MAP (%)", "test AP@10 (%)")):
        for method, sampler in lines:
            pts = sorted((r["n_triplets"], r[key]) for r in rows if (r["method"], r["sampler"]) == (method, sampler))
            name = method if sampler == "-" else f"{method}, {sampler}"
            style = "--" if sampler == "uniform" else "-"
            ax.plot(*zip(*pts), style, color=colours[method], marker="o" if sampler == "uniform" else "s", label=name)
        ax.set_xscale("log")
        ax.set_xlabel("triplets")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{args.dataset}, split seed {args.seed}, model-size bound at its default: "
                 "uniform (dashed) against mined negatives")
    fig.tight_layout()
    (ROOT / "docs" / "img").mkdir(parents=True, exist_ok=True)
    fig.savefig(ROOT / "docs" / "img" / "quality_curve.png", dpi=120)


if __name__ == "__main__":
    main()
