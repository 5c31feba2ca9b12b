"""The lexical part of ``proxy-ssi`` alone against BM25 and cosine on the open-set protocol.

For each seed (the split of ``bench_quality.py --protocol open``): cosine of the TF-IDF rows raised
entry-wise to gamma (``sparsesim.embedding.lexical_rows``; gamma = 1 is cosine) and BM25 on raw
counts, scored by retrieval among (a) the test documents of the unseen classes and (b) a
class-disjoint validation part of the training split (30% of the seen classes, at most 3000
documents), the kind of data ``proxy-ssi`` chooses gamma on.

Run::

    SPARSESIM_DATA=/work/shared/data python benchmarks/bench_quality_lexical.py --dataset news20
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from bench_quality import split
from sparsesim.data import load_dataset
from sparsesim.embedding import lexical_rows
from sparsesim.evaluation import evaluate_retrieval
from sparsesim.registry import make_estimator

OUT = Path(__file__).parent / "out"
GAMMAS = (1.0, 0.75, 0.5, 0.25)


def _score(score_fn, y):
    r = evaluate_retrieval(score_fn, y, k=10)
    return {"map": 100 * float(r["map"]), "ap@10": 100 * float(r["ap@10"])}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="news20")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = ap.parse_args(argv)
    data = load_dataset(args.dataset)
    X, y = data.X.tocsr(), np.asarray(data.y)
    raw = load_dataset(args.dataset, representation="raw").X.tocsr()
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    runs = []
    for seed in args.seeds:
        tr, te = split(y, "open", seed)
        classes = np.unique(y[tr])
        rng = np.random.default_rng(100 + seed)
        out = rng.permutation(classes)[: max(2, int(round(0.3 * classes.size)))]
        va = tr[np.isin(y[tr], out)]
        if va.size > 3000:
            va = np.sort(rng.choice(va, 3000, replace=False))
        for part, rows in (("validation", va), ("test", te)):
            Xn = X[rows].multiply(1.0 / np.where(norms[rows] > 0, norms[rows], 1.0)[:, None]).tocsr()
            for g in GAMMAS:
                L = lexical_rows(Xn, g)
                S = (L @ L.T).toarray()
                runs.append({"seed": seed, "part": part, "method": f"lexical gamma={g}", **_score(lambda q: S[q], y[rows])})
            bm25 = make_estimator("bm25").fit(raw[rows], y[rows]).model_
            runs.append({"seed": seed, "part": part, "method": "bm25", **_score(bm25.scorer(raw[rows]), y[rows])})
            print(seed, part, rows.size, "  ".join(f"{r['method']} {r['map']:.1f}/{r['ap@10']:.1f}"
                                                  for r in runs if r["seed"] == seed and r["part"] == part), flush=True)
    summary = {}
    for part in ("validation", "test"):
        for method in dict.fromkeys(r["method"] for r in runs):
            rs = [r for r in runs if r["part"] == part and r["method"] == method]
            summary[f"{part} {method}"] = {m: float(np.mean([r[m] for r in rs])) for m in ("map", "ap@10")}
    for key, value in summary.items():
        print(f"{key:28s} MAP {value['map']:5.1f}  AP@10 {value['ap@10']:5.1f}")
    OUT.mkdir(exist_ok=True)
    path = OUT / f"bench_quality_lexical_{args.dataset}.json"
    path.write_text(json.dumps({"dataset": args.dataset, "seeds": args.seeds, "summary": summary, "runs": runs},
                               indent=1))
    print("written", path)


if __name__ == "__main__":
    main()
