"""Benchmark: the SORS family's defaults against OASIS on many-class corpora of few documents per
class (docs/quality.md, "Many classes").

Test beds (built from the data directory; every cut is a fixed seed-0 choice):

* ``reuters21578-cap30``: Reuters-21578 ModApte single-topic documents (the registered
  ``reuters21578``), every topic cut to at most 30 documents: 57 classes, 1,151 documents;
* ``reuters21578-places``: every Reuters-21578 document with exactly one PLACES label (the
  country it is about) whose place has at least 5 such documents, cut to 30 per place:
  65 classes, 1,414 documents;
* ``reuters21578-topicplace``: documents with exactly one topic and one place, labelled by the
  pair (``earn|usa``, ``acq|uk``, ...), pairs of at least 5 documents cut to 20: 130 classes,
  1,455 documents (11 per class);
* ``synthetic-CxN``: :func:`sparsesim.data.synthetic.rcv1_like` with C classes and C x N documents;
* any registered name, optionally ``NAME-capN``.

Reuters texts are TF-IDF of title and body with L2-normalised rows, as the registered corpus.

Splits: ``--split validation`` (the selection) splits the SORS protocol's training part
(``stratified_split(y, 0.7, seed)``) 70/30 again with the same seed and scores the second part;
the test split is never read. ``--split test`` (the report) fits on the training part and scores
the test part (the ``sparsesim experiment`` protocol).

Each ``--config NAME=ALGORITHM[:SETTINGS]`` is one row; SETTINGS is a comma-separated list of
``key=value`` (an explicit parameter) or ``key*m`` (the learner's resolved ``"auto"`` value of
``key`` times m). One JSON file per run in OUT:
``bench_manyclass_{dataset}_{split}_{triplets}_s{seed}{tag}.json`` with one row per config: MAP,
AP@10, nnz(W), fit seconds (measured on a shared, loaded machine), the resolved parameters.

Run:  SPARSESIM_DATA=../shared/data python benchmarks/bench_manyclass.py --dataset reuters21578-cap30 \\
          --config oasis=oasis --config sors-l1=sors-l1 --triplets 10000 --split validation
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

_D_RE = re.compile(rb"<D>(.*?)</D>", re.DOTALL)


def _value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"none": None, "true": True, "false": False}.get(text, text)


def _cap(X, y, cap: int, min_docs: int = 2):
    """Rows of classes with at least ``min_docs`` documents, each class cut to ``cap`` (seed 0)."""
    rng = np.random.default_rng(0)
    labels, counts = np.unique(y, return_counts=True)
    keep = np.sort(np.concatenate([rng.permutation(np.flatnonzero(y == c))[:cap]
                                   for c in labels[counts >= min_docs]]))
    return X[keep], y[keep]


def reuters_labelled(kind: str, min_docs: int, cap: int):
    """Reuters-21578 documents with one PLACES label (``kind="places"``) or one topic and one
    place (``"topicplace"``), TF-IDF (L2 rows) of title and body."""
    from sparsesim.data.builtin import parse_reuters_sgm
    from sparsesim.data.paths import locate
    from sparsesim.data.readers import tfidf

    path = locate("reuters21578/reuters21578.tar.xz", "reuters21578")
    texts, labels = [], []
    with tarfile.open(path, mode="r:*") as tar:
        for member in sorted((m for m in tar if m.isfile() and m.name.endswith(".sgm")), key=lambda m: m.name):
            raw = tar.extractfile(member).read()
            for body, doc in zip(re.finditer(rb"<REUTERS[^>]*>(.*?)</REUTERS>", raw, re.DOTALL), parse_reuters_sgm(raw)):
                places = re.search(rb"<PLACES>(.*?)</PLACES>", body.group(1), re.DOTALL)
                places = _D_RE.findall(places.group(1)) if places else []
                if len(places) != 1 or not doc["text"]:
                    continue
                if kind == "topicplace":
                    if len(doc["topics"]) != 1:
                        continue
                    labels.append(doc["topics"][0] + "|" + places[0].decode("latin-1"))
                else:
                    labels.append(places[0].decode("latin-1"))
                texts.append(doc["text"])
    counts = Counter(labels)
    keep = [i for i, lab in enumerate(labels) if counts[lab] >= min_docs]
    X, _ = tfidf([texts[i] for i in keep])
    _, y = np.unique([labels[i] for i in keep], return_inverse=True)
    return _cap(X, y.astype(np.int64), cap)


def load(name: str):
    """``(X, y)`` of a test bed (see the module docstring)."""
    from sparsesim.data import load_dataset

    if name.startswith("synthetic-"):
        from sparsesim.data.synthetic import rcv1_like

        n_classes, per_class = (int(v) for v in name[len("synthetic-"):].split("x"))
        data = rcv1_like(n_documents=n_classes * per_class, n_classes=n_classes, seed=0)
        return data.X, data.y
    if name == "reuters21578-places":
        return reuters_labelled("places", 5, 30)
    if name == "reuters21578-topicplace":
        return reuters_labelled("topicplace", 5, 20)
    if "-cap" in name:
        base, cap = name.rsplit("-cap", 1)
        data = load_dataset(base)
        return _cap(data.X, data.y, int(cap))
    data = load_dataset(name)
    return data.X, data.y


def parse_config(text: str):
    """``NAME=ALGORITHM[:k=v,k*m,...]`` -> (name, algorithm, explicit params, multipliers)."""
    name, _, rest = text.partition("=")
    algorithm, _, settings = rest.partition(":")
    params, scale = {}, {}
    for item in filter(None, settings.split(",")):
        if "*" in item:
            key, mult = item.split("*", 1)
            scale[key] = float(mult)
        else:
            key, value = item.split("=", 1)
            params[key] = _value(value)
    return name, algorithm or name, params, scale


def main(argv=None) -> int:
    from sparsesim.evaluation import evaluate_retrieval
    from sparsesim.registry import make_estimator
    from sparsesim.triplets import stratified_split

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--config", action="append", required=True, metavar="NAME=ALGORITHM[:SETTINGS]")
    ap.add_argument("--triplets", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--split", choices=("validation", "test"), default="validation")
    ap.add_argument("--tag", default="", help="suffix of the output file name")
    ap.add_argument("--out", default="benchmarks/out")
    args = ap.parse_args(argv)

    X, y = load(args.dataset)
    train, test = stratified_split(y, 0.7, seed=args.seed)
    if args.split == "validation":
        labels, counts = np.unique(y[train], return_counts=True)
        train = train[np.isin(y[train], labels[counts >= 2])]  # classes the second split can cut
        fit_idx, val_idx = stratified_split(y[train], 0.7, seed=args.seed)
        fit, evaluate = train[fit_idx], train[val_idx]
    else:
        fit, evaluate = train, test
    Xf, yf, Xe, ye = X[fit], y[fit], X[evaluate], y[evaluate]
    rows = []
    for config in args.config:
        name, algorithm, params, scale = parse_config(config)
        accepted = make_estimator(algorithm).get_params()
        kwargs = dict(params, **{k: v for k, v in (("n_triplets", args.triplets), ("random_state", args.seed))
                                 if k in accepted})
        if scale:
            resolved = make_estimator(algorithm, **kwargs).resolve_params(Xf)
            kwargs.update({key: resolved[key] * mult for key, mult in scale.items()})
        est = make_estimator(algorithm, **kwargs)
        start = time.perf_counter()
        est.fit(Xf, yf)
        seconds = time.perf_counter() - start
        model = est.model_
        scores = evaluate_retrieval(model.scorer(Xe), ye, k=10)
        W = getattr(model, "W", None)
        row = {"config": name, "algorithm": algorithm, "params": params, "scale": scale,
               "map": scores["map"], "ap@10": scores["ap@10"],
               "nnz": int(W.nnz) if W is not None else None, "fit_seconds": seconds,
               "n_updates": int(getattr(est, "n_updates_", 0)), "schedule": getattr(est, "schedule_", None),
               "resolved_params": {k: v for k, v in getattr(est, "resolved_params_", {}).items()}}
        rows.append(row)
        print(f"{args.dataset} {args.split} {args.triplets} {name}: MAP {100 * row['map']:.2f} "
              f"AP@10 {100 * row['ap@10']:.2f} nnz {row['nnz']} {seconds:.0f} s", file=sys.stderr, flush=True)
    report = {"dataset": args.dataset, "split": args.split, "seed": args.seed, "triplets": args.triplets,
              "n_fit": int(fit.size), "n_evaluate": int(evaluate.size), "fit_nnz": int(Xf.nnz),
              "n_classes": int(np.unique(yf).size), "docs_per_class": float(fit.size / np.unique(yf).size),
              "command": "python benchmarks/bench_manyclass.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, "rows": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"bench_manyclass_{args.dataset}_{args.split}_{args.triplets}_s{args.seed}{args.tag}.json"
    target.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
