"""Measure the factors of the data-adaptive default rule (:mod:`sparsesim.defaults`).

For one data set, one seed and one triplet budget, every learner runs with its "auto" values
multiplied by each factor of a small grid (so a factor of 1 is exactly the default), under the
SORS protocol (70/30 split per class, test MAP). One JSON line per run on stdout, one run at a
time in this process.

Usage::

    SPARSESIM_DATA=/path/to/data python benchmarks/defaults_grid.py news20 --triplets 10000 \\
        --learners sors-l1,adasors-l1,oasis > runs/defaults_news20.jsonl
"""

import argparse
import itertools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparsesim.experiments.sors import run_one  # noqa: E402
from sparsesim.learners.bilinear import AdaSORS, OASIS, SORS  # noqa: E402

# multipliers of the resolved "auto" value, per parameter
GRIDS = {
    "oasis": {"C": [0.3, 1.0, 3.0]},
    "sors-l1": {"eta": [0.5, 1.0, 2.0], "lam": [0.33, 1.0, 3.0]},
    "adasors-l1": {"eta": [0.3, 1.0, 3.0], "delta": [0.3, 1.0, 3.0]},
}
CLASSES = {"oasis": OASIS, "sors-l1": SORS, "adasors-l1": AdaSORS}


def resolved_defaults(dataset, algorithm, seed, n_triplets):
    """The "auto" values the learner resolves on this seed's training split."""
    from sparsesim.experiments.sors import _dataset
    from sparsesim.defaults import data_statistics
    from sparsesim.triplets import stratified_split, usable_rows
    from sparsesim.validation import check_csr

    data = _dataset(dataset)
    train, _ = stratified_split(data.y, 0.7, seed=seed)
    X, y = check_csr(data.X[train]), data.y[train]
    rows = usable_rows(y, warn=False)
    if rows is not None:
        X, y = X[rows], y[rows]
    est = CLASSES[algorithm](n_triplets=n_triplets, random_state=seed)
    return est.resolve_params(X), data_statistics(X)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--triplets", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--learners", default="oasis,sors-l1,adasors-l1")
    parser.add_argument("--only-default", action="store_true", help="run factor 1 only")
    parser.add_argument("--axes", action="store_true",
                        help="vary one factor at a time around the default (not the full product)")
    args = parser.parse_args(argv)
    for algorithm in args.learners.split(","):
        base, stats = resolved_defaults(args.dataset, algorithm, args.seed, args.triplets)
        grid = GRIDS[algorithm]
        keys = sorted(grid)
        if args.only_default:
            points = [dict.fromkeys(keys, 1.0)]
        elif args.axes:
            points = [dict.fromkeys(keys, 1.0)] + [dict(dict.fromkeys(keys, 1.0), **{k: v})
                                                    for k in keys for v in grid[k] if v != 1.0]
        else:
            points = [dict(zip(keys, v)) for v in itertools.product(*(grid[k] for k in keys))]
        for point in points:
            params = {k: base[k] * point.get(k, 1.0) for k in base}
            params["compact"] = True
            row = run_one(args.dataset, algorithm, args.seed, args.triplets, params)
            row.update(factors=point, auto=base, statistics=stats)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
