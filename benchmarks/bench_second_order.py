"""Updates per second of the diagonal second-order and active learners against OASIS, same engine.

All learners run on the same sparse hash store (:mod:`sparsesim.engine`) over the same stream of
SORS triplets drawn from the training part of a data set (default: news20, d = 62,061), one
process, one core. "updates" are triplets that changed the model (queried with positive hinge
loss); updates/s = updates / CPU seconds of the process during ``partial_fit`` (CPU time, not
wall time, so that other jobs on a shared machine do not decide the ratio; wall-clock
``train_seconds_`` is printed too). OASIS is the baseline of the same run.

Usage::

    SPARSESIM_DATA=/path/to/data python benchmarks/bench_second_order.py --dataset news20 --triplets 3000

Prints a table and writes ``benchmarks/out/bench_second_order.png``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np


from sparsesim.data import load_dataset
from sparsesim.evaluation import evaluate_retrieval
from sparsesim.registry import make_estimator
from sparsesim.triplets import sors_triplets, stratified_split

LEARNERS = [
    ("oasis", {"C": 1.0, "identity": False}),
    ("paas", {"C": 1.0, "delta": 1.0}),
    ("cws-d", {"eta": 1.0, "gamma": 1.0}),
    ("cwas-d", {"eta": 1.0, "gamma": 1.0, "delta": 1.0}),
    ("cwrs-d", {"eta": 1.0, "gamma": 1.0, "query_rate": 0.3}),
    ("aroma-d", {"r": 1.0}),
]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="news20")
    parser.add_argument("--triplets", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-docs", type=int, default=2000, help="test documents for a quick AP@10 (0: skip)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "out"))
    args = parser.parse_args(argv)

    data = load_dataset(args.dataset)
    train, test = stratified_split(data.y, 0.7, seed=args.seed)
    X_tr, y_tr = data.X[train], data.y[train]
    triplets = sors_triplets(y_tr, args.triplets, seed=args.seed)
    rng = np.random.default_rng(args.seed)
    test = np.sort(rng.choice(test, min(args.eval_docs, test.size), replace=False)) if args.eval_docs else test[:0]
    print(f"{args.dataset}: {data.n_documents} docs, d = {data.n_features}, "
          f"{X_tr.nnz / X_tr.shape[0]:.1f} nnz/doc; {args.triplets} triplets (seed {args.seed})")
    # warm up the compiled kernels (cached on disk; first use loads or compiles them)
    for name, params in LEARNERS:
        make_estimator(name, **params, random_state=0).partial_fit_triplets(X_tr, triplets[:5])

    rows = []
    for name, params in LEARNERS:
        est = make_estimator(name, **params, random_state=args.seed)
        c0 = time.process_time()
        est.partial_fit_triplets(X_tr, triplets)
        cpu = time.process_time() - c0
        store = est.engine_.store
        row = {
            "algorithm": name,
            "queries": getattr(est, "n_queries_", est.n_triplets_seen_),
            "updates": est.n_updates_,
            "seconds": est.train_seconds_,
            "cpu": cpu,
            "updates/s": est.n_updates_ / cpu,
            "triplets/s": est.n_triplets_seen_ / cpu,
            "entries": store.n_entries,
            "MB": store.nbytes / 2 ** 20,
        }
        if test.size:
            row["ap@10"] = evaluate_retrieval(est.model_.scorer(data.X[test]), data.y[test], k=10)["ap@10"]
        rows.append(row)
        del est, store

    base = rows[0]["updates/s"]
    head = (f"{'algorithm':<9} {'queries':>8} {'updates':>8} {'wall s':>8} {'CPU s':>8} {'updates/s':>10} {'vs OASIS':>9} "
            f"{'triplets/s':>10} {'entries':>11} {'MB':>8}" + (f" {'AP@10':>7}" if test.size else ""))
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['algorithm']:<9} {r['queries']:>8} {r['updates']:>8} {r['seconds']:>8.2f} {r['cpu']:>8.2f} "
              f"{r['updates/s']:>10.0f} "
              f"{r['updates/s'] / base:>8.2f}x {r['triplets/s']:>10.0f} {r['entries']:>11,} {r['MB']:>8.0f}"
              + (f" {r['ap@10']:>7.3f}" if test.size else ""))

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3))
    ax.bar([r["algorithm"] for r in rows], [r["updates/s"] for r in rows],
           color=["gray"] + ["tab:blue"] + ["tab:red"] * 3 + ["tab:green"])
    ax.set_ylabel("updates / CPU s")
    ax.set_title(f"{args.dataset} (d = {data.n_features}), {args.triplets} triplets, one core")
    fig.tight_layout()
    path = out / "bench_second_order.png"
    fig.savefig(path, dpi=90)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
