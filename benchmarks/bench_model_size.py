"""Benchmark: what the model-size budget of OASIS / SORS / AdaSORS costs in retrieval quality
(docs/quality.md, "Model size"), and the defaults of the SORS family on many-class corpora
(docs/algorithms.md, "Many classes").

For one corpus, seed and triplet count, every (algorithm, size factor) pair is trained and scored:

* ``--split validation`` (the selection): the per-class 70/30 split of the SORS protocol
  (``stratified_split(y, 0.7, seed)``), then the *training* part split 70/30 again with the same
  seed; learners fit on the first part and its second part queries itself. The test split is never
  read, so a default chosen from these rows is not chosen on the data it is scored on.
Data sets: a registered name; ``NAME-capN`` (every class of NAME cut to at most N documents, a
fixed seed-0 choice: a many-class corpus of few documents per class, e.g. ``reuters21578-cap30``,
57 classes of 19.5 documents on average); ``synthetic-CxN`` (:func:`sparsesim.data.synthetic.rcv1_like`
with C classes and C x N documents).

* ``--split test`` (the report): fit on the whole training part, the test part queries itself
  (the ``sparsesim experiment`` protocol).

A factor F sets ``max_model_bytes`` so that W keeps at most F x nnz(fit corpus) off-diagonal entries;
``none`` is no bound; ``auto`` is the learner's default. ``--param KEY=VALUE`` passes a learner
parameter (numbers parsed). One JSON file per run in OUT:
``bench_model_size_{dataset}_{split}_{triplets}_s{seed}.json`` with one row per (algorithm, factor):
MAP, AP@10, nnz(W), model bytes, fit seconds (measured on a shared, loaded machine) and the resolved
parameters.

Run:  SPARSESIM_DATA=../shared/data python benchmarks/bench_model_size.py --dataset news20 \\
          --algorithms oasis,sors-l1 --factors none,40,20,10,5 --triplets 10000 --split validation
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np


def _value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return None if text == "none" else text


def main(argv=None) -> int:
    from sparsesim.data import load_dataset
    from sparsesim.memory import model_bytes_for
    from sparsesim.evaluation import evaluate_retrieval
    from sparsesim.registry import make_estimator
    from sparsesim.triplets import stratified_split

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--algorithms", default="oasis,sors-l1")
    ap.add_argument("--factors", default="none,40,20,10,5")
    ap.add_argument("--triplets", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--split", choices=("validation", "test"), default="validation")
    ap.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--scale", action="append", default=[], metavar="KEY=M1,M2",
                    help="multiply the resolved 'auto' value of KEY by each multiplier (one row each)")
    ap.add_argument("--tag", default="", help="suffix of the output file name")
    ap.add_argument("--out", default="benchmarks/out")
    args = ap.parse_args(argv)
    params = {k: _value(v) for k, v in (p.split("=", 1) for p in args.param)}

    if args.dataset.startswith("synthetic-"):  # e.g. synthetic-105x17: 105 classes of ~17 documents
        from sparsesim.data.synthetic import rcv1_like

        n_classes, per_class = (int(v) for v in args.dataset[len("synthetic-"):].split("x"))
        data = rcv1_like(n_documents=n_classes * per_class, n_classes=n_classes, seed=args.seed)
    elif "-cap" in args.dataset:  # e.g. reuters21578-cap30: every class cut to at most 30 documents
        name, cap = args.dataset.rsplit("-cap", 1)
        data = load_dataset(name)
        rng = np.random.default_rng(0)
        keep = np.sort(np.concatenate([rng.permutation(np.flatnonzero(data.y == c))[:int(cap)]
                                       for c in np.unique(data.y)]))
        data = type(data)(X=data.X[keep], y=data.y[keep], name=args.dataset)
    else:
        data = load_dataset(args.dataset)
    train, test = stratified_split(data.y, 0.7, seed=args.seed)
    if args.split == "validation":
        labels, counts = np.unique(data.y[train], return_counts=True)
        train = train[np.isin(data.y[train], labels[counts >= 2])]  # classes the second split can cut
        fit_idx, val_idx = stratified_split(data.y[train], 0.7, seed=args.seed)
        fit, evaluate = train[fit_idx], train[val_idx]
    else:
        fit, evaluate = train, test
    Xf, yf, Xe, ye = data.X[fit], data.y[fit], data.X[evaluate], data.y[evaluate]
    rows = []
    scales = [{}]
    for item in args.scale:
        key, values = item.split("=", 1)
        scales = [dict(s, **{key: float(v)}) for s in scales for v in values.split(",")]
    runs = [(a, f, s) for a in args.algorithms.split(",") for f in args.factors.split(",") for s in scales]
    for algorithm, factor, scale in runs:
        if True:
            kwargs = dict(params, n_triplets=args.triplets, random_state=args.seed)
            if scale:
                resolved = make_estimator(algorithm, **kwargs).resolve_params(Xf)
                kwargs.update({key: resolved[key] * mult for key, mult in scale.items()})
            if factor == "none":
                kwargs["max_model_bytes"] = None
            elif factor != "auto":
                kwargs["max_model_bytes"] = model_bytes_for(int(float(factor) * Xf.nnz), Xf.shape[1])
            est = make_estimator(algorithm, **kwargs)
            start = time.perf_counter()
            est.fit(Xf, yf)
            seconds = time.perf_counter() - start
            model = est.model_
            scores = evaluate_retrieval(model.scorer(Xe), ye, k=10)
            row = {"algorithm": algorithm, "factor": factor, "scale": scale, "map": scores["map"], "ap@10": scores["ap@10"],
                   "nnz": int(model.W.nnz), "entries_per_corpus_entry": model.W.nnz / Xf.nnz,
                   "model_bytes": int(model.W.data.nbytes + model.W.indices.nbytes + model.W.indptr.nbytes),
                   "fit_seconds": seconds, "n_updates": int(est.n_updates_),
                   "resolved_params": dict(getattr(est, "resolved_params_", {}))}
            rows.append(row)
            print(f"{args.dataset} {args.split} {algorithm} factor={factor} {scale}: MAP {100 * row['map']:.2f} "
                  f"AP@10 {100 * row['ap@10']:.2f} nnz {row['nnz']:,} ({row['entries_per_corpus_entry']:.1f}x) "
                  f"{seconds:.0f} s", file=sys.stderr, flush=True)
    report = {"dataset": args.dataset, "split": args.split, "seed": args.seed, "triplets": args.triplets,
              "params": params, "n_fit": int(fit.size), "n_evaluate": int(evaluate.size), "fit_nnz": int(Xf.nnz),
              "n_classes": int(np.unique(yf).size), "command": "python benchmarks/bench_model_size.py "
              + " ".join(argv if argv is not None else sys.argv[1:]),
              "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, "rows": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"bench_model_size_{args.dataset}_{args.split}_{args.triplets}_s{args.seed}{args.tag}.json"
    target.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
