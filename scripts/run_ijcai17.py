"""Run the ijcai17 protocol on isolet-tasks and news20-tasks as reported in docs/multitask.md.

Equivalent CLI: ``sparsesim experiment --protocol ijcai17 --dataset isolet-tasks
--algorithms omtrsl,ostrsl,ogrsl,omtrsl-active,omtrsl-random --triplets 30000 --n-jobs 2 --json``
with the options below. Writes ``runs/ijcai17/<setting>.json`` and the PNG figures.

Settings: ``isolet-tasks`` (features as stored), ``isolet-tasks-pca`` (the mtLMNN preprocessing:
PCA keeping 95% of the variance, 173 components), ``news20-tasks``.

Usage: ``SPARSESIM_DATA=... python scripts/run_ijcai17.py [setting ...] [--seeds 0 1 2]
[--algorithms omtrsl,ostrsl,ogrsl] [--fixed '{"omtrsl": {"b": 100, "C": 0.01}}'] [--tag NAME]``

``--fixed`` skips the parameter search and the active sweep and uses the given parameters (e.g. the
ones a search on the seed-0 tuning split chose) for more seeds; ``--tag`` names the output file.
"""

import argparse
import json
import time
from pathlib import Path

from sparsesim.experiments import ExperimentConfig, run_experiment
from sparsesim.experiments.ijcai17 import format_table

ALGORITHMS = ["omtrsl", "ostrsl", "ogrsl", "omtrsl-active", "omtrsl-random"]
GRID = {"b_grid": [0.1, 1.0, 10.0, 100.0], "c_grid": [0.001, 0.01, 0.1, 1.0]}
SETTINGS = {
    "isolet-tasks": dict(dataset="isolet-tasks", triplets=30_000, params={"omtrsl-active": {"delta": 3.0}},
                         options=dict(folds=5, search=True, active_deltas=[1.0, 3.0, 10.0, 30.0], **GRID)),
    "isolet-tasks-pca": dict(dataset="isolet-tasks", triplets=30_000, params={"omtrsl-active": {"delta": 3.0}},
                             options=dict(folds=5, search=True, active_deltas=[1.0, 3.0, 10.0, 30.0],
                                          dataset_options={"representation": "pca"}, **GRID)),
    "news20-tasks": dict(dataset="news20-tasks", triplets=50_000, params={"omtrsl-active": {"delta": 0.1}},
                         options=dict(folds=5, search=True, **GRID)),
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("settings", nargs="*", default=list(SETTINGS))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--out", default="runs/ijcai17")
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS))
    ap.add_argument("--fixed", default=None, help="JSON {algorithm: params}: no search, no sweep")
    ap.add_argument("--tag", default="")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.settings:
        s = SETTINGS[name]
        params = {a: dict(p) for a, p in s["params"].items()}
        options = dict(s["options"])
        if args.fixed:
            options.update(search=False, active_deltas=None)
            for alg, p in json.loads(args.fixed).items():
                params.setdefault(alg, {}).update(p)
        label = name + (f"-{args.tag}" if args.tag else "")
        config = ExperimentConfig(dataset=s["dataset"], algorithms=args.algorithms.split(","), seeds=list(args.seeds),
                                  triplets=s["triplets"], params=params, n_jobs=2, out_dir=out / label,
                                  options=options)
        t0 = time.time()
        report = run_experiment("ijcai17", config)
        (out / f"{label}.json").write_text(json.dumps(report, indent=1))
        print(format_table(report))
        print(f"[{name}] seeds {args.seeds} wall {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
