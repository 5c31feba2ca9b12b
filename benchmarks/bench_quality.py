"""Learned similarity against what a practitioner tries first with the same labels.

Closed set: ``stratified_split(y, 0.7, seed)``; every method learns from the training documents;
test documents query test documents (``evaluate_retrieval``, same-label relevance).
Open set: the classes are split in half with ``seed`` (``class_split(y, 0.5, seed)``, the split of
``sparsesim experiment --option unseen_classes=0.5``); methods learn from the training documents of
the seen classes; test documents of the unseen classes query each other. The open-set table of
docs/quality.md comes from ``benchmarks/bench_quality_open.py`` (every row one ``experiment`` run).

Baselines are the registered ones, computed in the same run with their defaults: cosine (tf-idf),
BM25 (bm25s, on raw term counts), LSA (TruncatedSVD), linear-SVM decision scores, logistic-regression
(C=10) decision scores and probabilities as L2-normalised embeddings (the probabilities are the
softmax of the same fitted classifier's scores, as ``logreg-proba`` computes them). The learner is the registered
``proxy-ssi`` with its defaults (open set: ``validation="classes"``, so its choices are made on
classes held out of the seen ones).

Per method the JSON records MAP, AP@10, fit seconds (wall, the machine shared with other jobs),
the peak of traced allocations during fit, and model bytes/entries.

Run (one dataset and protocol at a time keeps a run under 4 GiB)::

    SPARSESIM_DATA=/work/shared/data python benchmarks/bench_quality.py --dataset news20 --protocol closed
    SPARSESIM_DATA=/work/shared/data python benchmarks/bench_quality.py --dataset reuters21578 --protocol open
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc
from pathlib import Path

import numpy as np

from sparsesim.data import load_dataset
from sparsesim.embedding import EmbeddingSimilarity
from sparsesim.evaluation import evaluate_retrieval
from sparsesim.registry import make_estimator
from sparsesim.triplets import class_split, stratified_split

OUT = Path(__file__).parent / "out"


def _retrieval(score_fn, y):
    r = evaluate_retrieval(score_fn, y)
    return {"map": 100 * r["map"], "ap@10": 100 * r["ap@10"]}


def _timed(fit):
    tracemalloc.start()
    t0 = time.perf_counter()
    out = fit()
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return out, seconds, peak


BASELINES = ("cosine", "bm25", "lsa", "svm-scores", "logreg-scores", "logreg-proba")


def baselines(Xtr, ytr, Xte, yte, seed, raw):
    """The registered baselines, fitted on the training documents (BM25 on raw term counts)."""
    rows = []
    for name in BASELINES:
        if name == "logreg-proba":  # the same classifier as logreg-scores (same seed): softmax of its scores
            scores = rows[-1]
            m = logreg.model_
            model = EmbeddingSimilarity(m.P, bias=m.bias, activation="softmax", normalize=True,
                                        normalize_embedding=True)
            row = _retrieval(model.scorer(Xte), yte)
            row.update(method=name, fit_seconds=scores["fit_seconds"], fit_peak_bytes=scores["fit_peak_bytes"],
                       model_bytes=model.nbytes, model_entries=int(model.P.size))
            rows.append(row)
            continue
        est = make_estimator(name)
        if name == "logreg-scores":
            logreg = est
        if "random_state" in est.get_params():
            est.set_params(random_state=seed)
        A, B = (raw if name == "bm25" else (Xtr, Xte))
        _, seconds, peak = _timed(lambda: est.fit(A, ytr))
        model = est.model_
        row = _retrieval(model.scorer(B), yte)
        P = getattr(model, "P", None)
        row.update(method=name, fit_seconds=seconds, fit_peak_bytes=peak, model_bytes=int(getattr(model, "nbytes", 0)),
                   model_entries=int(P.size) if P is not None else 0)
        rows.append(row)
    return rows


def learner(Xtr, ytr, Xte, yte, seed, params):
    est = make_estimator("proxy-ssi", random_state=seed, **params)
    _, seconds, peak = _timed(lambda: est.fit(Xtr, ytr))
    model = est.model_
    row = _retrieval(model.scorer(Xte), yte)
    row.update(method="proxy-ssi", params=params, fit_seconds=seconds, fit_peak_bytes=peak,
               model_bytes=model.nbytes, model_entries=int(model.P.size), n_components=model.n_components,
               identity_weight=model.identity_weight, lexical_power=model.lexical_power, n_epochs=int(est.n_epochs_),
               n_triplets_seen=int(est.n_triplets_seen_),
               validation=[{"epoch": h["epoch"], "best_map": 100 * max(h["map"].values())} for h in est.validation_])
    return row


def split(y, protocol, seed):
    """The documents of ``sparsesim experiment``'s split for ``seed`` (open: ``--option unseen_classes=0.5``)."""
    train, test = stratified_split(y, 0.7, seed)
    if protocol == "closed":
        return train, test
    seen, unseen = class_split(y, 0.5, seed=seed)
    return train[np.isin(y[train], seen)], test[np.isin(y[test], unseen)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="news20")
    ap.add_argument("--protocol", choices=("closed", "open"), default="closed")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--param", action="append", default=[], help="KEY=VALUE for proxy-ssi (repeatable)")
    ap.add_argument("--no-baselines", action="store_true")
    ap.add_argument("--tag", default="")
    args = ap.parse_args(argv)
    params = {}
    for item in args.param:
        k, v = item.split("=", 1)
        try:
            params[k] = json.loads(v)
        except json.JSONDecodeError:
            params[k] = v
    if args.protocol == "open":
        params.setdefault("validation", "classes")
    data = load_dataset(args.dataset)
    X, y = data.X.tocsr(), np.asarray(data.y)
    counts = None if args.no_baselines else load_dataset(args.dataset, representation="raw").X.tocsr()
    results = []
    for seed in args.seeds:
        tr, te = split(y, args.protocol, seed)
        Xtr, ytr, Xte, yte = X[tr], y[tr], X[te], y[te]
        rows = [] if args.no_baselines else baselines(Xtr, ytr, Xte, yte, seed, (counts[tr], counts[te]))
        rows.append(learner(Xtr, ytr, Xte, yte, seed, params))
        for row in rows:
            row.update(seed=seed, n_train=int(tr.size), n_test=int(te.size))
            print(f"seed {seed} {row['method']:22s} MAP {row['map']:5.1f}  AP@10 {row['ap@10']:5.1f}  "
                  f"fit {row['fit_seconds']:6.1f}s", flush=True)
        results.extend(rows)
    summary = {}
    for name in dict.fromkeys(r["method"] for r in results):
        rs = [r for r in results if r["method"] == name]
        summary[name] = {m: float(np.mean([r[m] for r in rs])) for m in ("map", "ap@10", "fit_seconds")}
        summary[name]["map_std"] = float(np.std([r["map"] for r in rs]))
    report = {"dataset": args.dataset, "protocol": args.protocol, "seeds": args.seeds,
              "corpus_stored_entries": int(X.nnz), "n_documents": int(X.shape[0]), "n_features": int(X.shape[1]),
              "learner_params": params, "summary": summary, "runs": results}
    OUT.mkdir(exist_ok=True)
    path = OUT / f"bench_quality_{args.dataset}_{args.protocol}{args.tag}.json"
    path.write_text(json.dumps(report, indent=1, default=float))
    print("\nmean over seeds", args.seeds)
    for name, s in summary.items():
        print(f"{name:22s} MAP {s['map']:5.1f} (sd {s['map_std']:.1f})  AP@10 {s['ap@10']:5.1f}")
    print("written", path)


if __name__ == "__main__":
    main()
