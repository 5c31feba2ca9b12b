"""proxy-ssi's open-set settings compared on classes held out of the training split (no test class used).

Per seed: the open-set split of ``sparsesim experiment --option unseen_classes=0.5`` (training
documents of the seen classes; the unseen classes are never read). A seeded 30% of the *seen*
classes (at least two) is held out as outer validation; ``proxy-ssi`` (``validation="classes"``)
is fitted on the training documents of the other seen classes under each setting, and scored by
retrieval among the training documents of the held-out seen classes (MAP and AP@10, %), beside
cosine and BM25 on the same documents. This is how the defaults of the open-set case are chosen
without looking at the classes a table reports on.

Run::

    SPARSESIM_DATA=/work/shared/data python benchmarks/bench_quality_folds.py --dataset reuters21578 \\
        --setting validation_folds=1 --setting validation_folds=3
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from bench_quality import split
from sparsesim.data import load_dataset
from sparsesim.evaluation import evaluate_retrieval
from sparsesim.registry import make_estimator
from sparsesim.triplets import class_split

OUT = Path(__file__).parent / "out"


def _score(score_fn, y):
    r = evaluate_retrieval(score_fn, y, k=10)
    return {"map": 100 * float(r["map"]), "ap@10": 100 * float(r["ap@10"])}


def _setting(text: str) -> dict:
    out = {}
    for item in filter(None, text.split(",")):
        key, value = item.split("=", 1)
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="reuters21578")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--setting", action="append", default=[],
                    help="comma-separated KEY=VALUE of proxy-ssi (repeatable; '' = defaults)")
    ap.add_argument("--tag", default="")
    args = ap.parse_args(argv)
    settings = args.setting or [""]
    data = load_dataset(args.dataset)
    X, y = data.X.tocsr(), np.asarray(data.y)
    raw = load_dataset(args.dataset, representation="raw").X.tocsr()
    runs = []
    for seed in args.seeds:
        tr, _ = split(y, "open", seed)
        inner, outer = class_split(y[tr], 0.3, seed=1000 + seed)
        fit_rows, val_rows = tr[np.isin(y[tr], inner)], tr[np.isin(y[tr], outer)]
        yv = y[val_rows]
        base = [("cosine", make_estimator("cosine").fit(X[fit_rows], y[fit_rows]).model_.scorer(X[val_rows])),
                ("bm25", make_estimator("bm25").fit(raw[fit_rows], y[fit_rows]).model_.scorer(raw[val_rows]))]
        for name, score_fn in base:
            runs.append({"seed": seed, "method": name, **_score(score_fn, yv)})
        for text in settings:
            params = dict(_setting(text), validation="classes")
            t0 = time.perf_counter()
            est = make_estimator("proxy-ssi", random_state=seed, **params).fit(X[fit_rows], y[fit_rows])
            row = {"seed": seed, "method": f"proxy-ssi {text}".strip(), "params": params,
                   "fit_seconds": time.perf_counter() - t0, "resolved_params": est.resolved_params_,
                   **_score(est.model_.scorer(X[val_rows]), yv)}
            runs.append(row)
        print(seed, f"{fit_rows.size} fit / {val_rows.size} validation documents, {outer.size} held-out classes:",
              "  ".join(f"{r['method']} {r['map']:.1f}/{r['ap@10']:.1f}" for r in runs if r["seed"] == seed),
              flush=True)
    summary = {}
    for method in dict.fromkeys(r["method"] for r in runs):
        rs = [r for r in runs if r["method"] == method]
        summary[method] = {m: float(np.mean([r[m] for r in rs])) for m in ("map", "ap@10")}
        print(f"{method:40s} MAP {summary[method]['map']:5.1f}  AP@10 {summary[method]['ap@10']:5.1f}")
    OUT.mkdir(exist_ok=True)
    path = OUT / f"bench_quality_folds_{args.dataset}{args.tag}.json"
    path.write_text(json.dumps({"dataset": args.dataset, "seeds": args.seeds, "settings": settings,
                                "summary": summary, "runs": runs}, indent=1, default=float))
    print("written", path)


if __name__ == "__main__":
    main()
