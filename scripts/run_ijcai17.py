"""Run the ijcai17 protocol on isolet-tasks and news20-tasks as reported in docs/multitask.md.

Equivalent CLI: ``sparsesim experiment --protocol ijcai17 --dataset isolet-tasks
--algorithms omtrsl,ostrsl,ogrsl,omtrsl-active,omtrsl-random --triplets 30000 --n-jobs 2 --json``
with the options below. Writes ``runs/ijcai17/<setting>.json`` and the PNG figures.

Settings: ``isolet-tasks`` (features as stored), ``isolet-tasks-pca`` (the mtLMNN preprocessing:
PCA keeping 95% of the variance, 173 components), ``news20-tasks``.

Usage: ``SPARSESIM_DATA=... python scripts/run_ijcai17.py [setting ...] [--seeds 0 1 2]
[--algorithms omtrsl,ostrsl,ogrsl] [--fixed '{"omtrsl": {"b": 100, "C": 0.01}}'] [--tag NAME]
[--triplets N] [--n-jobs J] [--grid '{"b_grid": [1, 10, 100], "c_grid": [0.01]}'] [--search-only] [--out DIR]``

``--fixed`` skips the parameter search and the active sweep and uses the given parameters (e.g. the
ones a search on the seed-0 tuning split chose) for more seeds; ``--tag`` names the output file.
``--triplets`` overrides the setting's triplets per run (the triplet-budget experiment),
``--n-jobs`` the parallel runs (default 2), ``--grid`` the search grids. ``--search-only`` runs only
the parameter search (b x C for OMTRSL, C for OSTRSL/OGRSL, on the protocol's 75/25 tuning split of
fold 0's training part, first seed) and writes ``<label>.json`` with ``search`` and ``chosen``; no CV.
"""

import argparse
import json
import time
from pathlib import Path

from sparsesim.experiments import ExperimentConfig, run_experiment
from sparsesim.experiments.ijcai17 import _search, format_table, load_multitask_data, run_one
from sparsesim.parallel import run_parallel

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
    ap.add_argument("--triplets", type=int, default=None, help="triplets per run (default: the setting's)")
    ap.add_argument("--n-jobs", type=int, default=2)
    ap.add_argument("--grid", default=None, help='JSON {"b_grid": [...], "c_grid": [...]}: search grids')
    ap.add_argument("--search-only", action="store_true", help="only the parameter search, no CV")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.settings:
        s = SETTINGS[name]
        params = {a: dict(p) for a, p in s["params"].items()}
        options = dict(s["options"])
        if args.grid:
            options.update(json.loads(args.grid))
        if args.fixed:
            options.update(search=False, active_deltas=None)
            for alg, p in json.loads(args.fixed).items():
                params.setdefault(alg, {}).update(p)
        label = name + (f"-{args.tag}" if args.tag else "")
        config = ExperimentConfig(dataset=s["dataset"], algorithms=args.algorithms.split(","), seeds=list(args.seeds),
                                  triplets=args.triplets or s["triplets"], params=params, n_jobs=args.n_jobs,
                                  out_dir=out / label, options=options)
        t0 = time.time()
        if args.search_only:
            search_only(config, out / f"{label}.json")
            print(f"[{name}] search only, wall {time.time() - t0:.0f} s", flush=True)
            continue
        report = run_experiment("ijcai17", config)
        (out / f"{label}.json").write_text(json.dumps(report, indent=1))
        print(format_table(report))
        print(f"[{name}] seeds {args.seeds} wall {time.time() - t0:.0f} s", flush=True)


def search_only(config, path):
    """The protocol's parameter search (Figure 3) alone: validation AP@10 per grid point."""
    data = load_multitask_data(config.dataset, **config.options.get("dataset_options", {}))
    results, chosen = _search(config, data, config.algorithms, config.triplets,
                              lambda jobs: run_parallel(run_one, jobs, n_jobs=config.n_jobs))
    report = {"protocol": "ijcai17-search", "dataset": config.dataset, "n_triplets": config.triplets,
              "seed": config.seeds[0], "options": config.options, "search": {"results": results, "chosen": chosen}}
    path.write_text(json.dumps(report, indent=1))
    for r in results:
        print(f"  {r['algorithm']:<7} {r['params']}  val AP@10 {r['ap@10']:.4f}  train {r['train_seconds']:.0f} s")
    print("chosen:", chosen)


if __name__ == "__main__":
    main()
