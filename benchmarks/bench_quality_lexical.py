"""The lexical part of ``proxy-ssi`` alone against BM25 and cosine on the open-set protocol.

For each seed (the split of ``sparsesim experiment --option unseen_classes=0.5``): cosine of the
TF-IDF rows raised entry-wise to gamma and weighted per feature by idf ** beta
(``sparsesim.embedding.lexical_rows``; gamma = 1, beta = 0 is cosine; idf of the training
documents) and BM25 on raw counts, scored by retrieval among (a) a class-disjoint validation part
of the training split (``--validation-fraction`` of the seen classes, at least two, at most 3000
documents), the kind of data ``proxy-ssi`` chooses gamma and beta on, and (b) with ``--test``, the
test documents of the unseen classes.

Run::

    SPARSESIM_DATA=/work/shared/data python benchmarks/bench_quality_lexical.py --dataset news20
    SPARSESIM_DATA=/work/shared/data python benchmarks/bench_quality_lexical.py --dataset reuters21578
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from bench_quality import split
from sparsesim.data import load_dataset
from sparsesim.embedding import lexical_rows
from sparsesim.evaluation import evaluate_retrieval
from sparsesim.registry import make_estimator

OUT = Path(__file__).parent / "out"
GAMMAS = (1.0, 0.75, 0.5, 0.35)
BETAS = (0.0, 0.25, 0.5, 1.0)


def _score(score_fn, y):
    r = evaluate_retrieval(score_fn, y, k=10)
    return {"map": 100 * float(r["map"]), "ap@10": 100 * float(r["ap@10"])}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="news20")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--validation-fraction", type=float, default=0.15, help="share of the seen classes held out")
    ap.add_argument("--test", action="store_true", help="also score the test documents of the unseen classes")
    args = ap.parse_args(argv)
    data = load_dataset(args.dataset)
    X, y = data.X.tocsr(), np.asarray(data.y)
    raw = load_dataset(args.dataset, representation="raw").X.tocsr()
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    runs = []
    for seed in args.seeds:
        tr, te = split(y, "open", seed)
        df = np.bincount(X[tr].indices, minlength=X.shape[1])
        idf = np.log((1.0 + tr.size) / (1.0 + df)) + 1.0
        classes = np.unique(y[tr])
        rng = np.random.default_rng(100 + seed)
        out = rng.permutation(classes)[: max(2, int(round(args.validation_fraction * classes.size)))]
        va = tr[np.isin(y[tr], out)]
        if va.size > 3000:
            va = np.sort(rng.choice(va, 3000, replace=False))
        for part, rows in (("validation", va),) + ((("test", te),) if args.test else ()):
            Xn = sp.csr_matrix(X[rows].multiply(1.0 / np.where(norms[rows] > 0, norms[rows], 1.0)[:, None]))
            for g in GAMMAS:
                for b in BETAS:
                    L = lexical_rows(Xn, g, idf ** b if b else None)
                    S = (L @ L.T).toarray()
                    runs.append({"seed": seed, "part": part, "method": f"lexical gamma={g} beta={b}",
                                 **_score(lambda q: S[q], y[rows])})
            bm25 = make_estimator("bm25").fit(raw[rows], y[rows]).model_
            runs.append({"seed": seed, "part": part, "method": "bm25", **_score(bm25.scorer(raw[rows]), y[rows])})
            print(seed, part, rows.size, "  ".join(f"{r['method']} {r['map']:.1f}/{r['ap@10']:.1f}"
                                                  for r in runs if r["seed"] == seed and r["part"] == part), flush=True)
    summary = {}
    for part in ("validation", "test") if args.test else ("validation",):
        for method in dict.fromkeys(r["method"] for r in runs):
            rs = [r for r in runs if r["part"] == part and r["method"] == method]
            summary[f"{part} {method}"] = {m: float(np.mean([r[m] for r in rs])) for m in ("map", "ap@10")}
    for key, value in summary.items():
        print(f"{key:28s} MAP {value['map']:5.1f}  AP@10 {value['ap@10']:5.1f}")
    OUT.mkdir(exist_ok=True)
    path = OUT / f"bench_quality_lexical_{args.dataset}.json"
    path.write_text(json.dumps({"dataset": args.dataset, "seeds": args.seeds, "summary": summary, "runs": runs,
                                "validation_fraction": args.validation_fraction}, indent=1))
    print("written", path)


if __name__ == "__main__":
    main()
