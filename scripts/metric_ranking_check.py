"""MAP of a Mahalanobis learner's metric used two ways on one SORS-protocol split: the bilinear
form x^T M x' (what sparsesim's models score) and the distance -d_M(x, x') (what a metric learner
ranks by). Also the identity: cosine-free dot product vs Euclidean distance.

    SPARSESIM_DATA=../shared/data python scripts/metric_ranking_check.py satimage --seed 0 \
        --algorithms itml,lmnn --param lmnn.max_samples=1000
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from sparsesim.data import load_dataset
from sparsesim.evaluation import evaluate_retrieval
from sparsesim.registry import make_estimator
from sparsesim.triplets import stratified_split


def scores(Xt: np.ndarray, M: np.ndarray, how: str):
    XM = Xt @ M
    own = np.einsum("ij,ij->i", XM, Xt)

    def fn(rows):
        s = XM[rows] @ Xt.T
        return s if how == "bilinear" else 2.0 * s - own[None, :]  # -d_M up to the query's own term

    return fn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--algorithms", default="itml,lmnn")
    parser.add_argument("--param", action="append", default=[], help="ALGORITHM.KEY=VALUE")
    args = parser.parse_args()
    data = load_dataset(args.dataset)
    train, test = stratified_split(data.y, 0.7, seed=args.seed)
    Xt, yt = data.X[test].toarray(), data.y[test]
    out = []
    metrics = {"identity": np.eye(data.X.shape[1])}
    for name in args.algorithms.split(","):
        params = {}
        for item in args.param:
            key, value = item.split("=", 1)
            alg, key = key.split(".", 1)
            if alg == name:
                params[key] = json.loads(value)
        est = make_estimator(name, random_state=args.seed, **params).fit(data.X[train], data.y[train])
        metrics[name] = est.M_
    for name, M in metrics.items():
        for how in ("bilinear", "distance"):
            r = evaluate_retrieval(scores(Xt, M, how), yt, k=10)
            out.append({"metric": name, "ranking": how, "map": r["map"], "ap@10": r["ap@10"]})
            print(json.dumps(out[-1]))


if __name__ == "__main__":
    main()
