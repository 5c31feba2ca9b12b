"""The open-set table of docs/quality.md: every baseline and learner under one protocol.

Every (corpus, algorithm) runs as its own ``sparsesim experiment`` process, one at a time:

    sparsesim experiment --dataset D --algorithms A --seeds 0,1,2 --json --option unseen_classes=0.5 \\
        [--triplets 10000 for oasis / sors-l1] [--param KEY=VALUE ...]

so every row has the same splits: per seed, ``stratified_split(y, 0.7, seed)`` of the documents and
``class_split(y, 0.5, seed)`` of the classes; methods learn from the training documents of the seen
classes, and the test documents of the unseen classes query each other (same label = relevant).
``proxy-ssi`` makes its own choices (pass, alpha, gamma) on seen classes held out of its training
documents (``validation="classes"``, set by the protocol).

Each run's JSON (the command included) goes to ``OUT/bench_quality_open_{dataset}_{algorithm}{tag}.json``;
``--table`` prints the markdown tables (mean over seeds, then per seed) from those files.

Run::

    SPARSESIM_DATA=/work/shared/data python benchmarks/bench_quality_open.py --datasets news20,reuters21578
    python benchmarks/bench_quality_open.py --table
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

BASELINES = ("cosine", "bm25", "lsa", "svm-scores", "logreg-scores", "logreg-proba")
LEARNERS = ("oasis", "sors-l1", "proxy-ssi")
DATASETS = ("news20", "reuters21578")
#: OASIS / SORS at 10^4 triplets: at 10^5 OASIS's W on news20 holds ~300M entries (over 4 GiB).
TRIPLETS = {"oasis": 10_000, "sors-l1": 10_000}
OUT = Path(__file__).parent / "out"


def sparsesim_command() -> list[str]:
    exe = Path(sys.executable).with_name("sparsesim")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "sparsesim.cli"]


def target(out: Path, dataset: str, algorithm: str, tag: str = "") -> Path:
    return out / f"bench_quality_open_{dataset}_{algorithm}{tag}.json"


def run(out: Path, datasets, algorithms, seeds: str, params: list[str], tag: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for dataset in datasets:
        for algorithm in algorithms:
            args = ["experiment", "--dataset", dataset, "--algorithms", algorithm, "--seeds", seeds, "--json",
                    "--option", "unseen_classes=0.5"]
            if algorithm in TRIPLETS:
                args += ["--triplets", str(TRIPLETS[algorithm])]
            for p in params:
                args += ["--param", p]
            start = time.perf_counter()
            proc = subprocess.run(sparsesim_command() + args, capture_output=True, text=True, env=os.environ)
            if proc.returncode != 0:
                print(f"FAILED sparsesim {' '.join(args)}\n{proc.stderr[-2000:]}", file=sys.stderr)
                continue
            report = json.loads(proc.stdout)
            report["command"] = "sparsesim " + " ".join(args)
            report["wall_seconds"] = time.perf_counter() - start
            target(out, dataset, algorithm, tag).write_text(json.dumps(report, indent=1))
            rs = report["results"]
            print(f"{dataset} {algorithm}{tag}: MAP {100 * np.mean([r['map'] for r in rs]):.1f} "
                  f"AP@10 {100 * np.mean([r['ap@10'] for r in rs]):.1f} ({report['wall_seconds']:.0f} s)",
                  file=sys.stderr, flush=True)


def load(out: Path, dataset: str, name: str) -> list[dict] | None:
    """The result rows of ``name`` (an algorithm, optionally followed by its tag); without a run of
    this script, those of ``bench_baselines.py``'s open-set run of the same command, if any."""
    for path in (out / f"bench_quality_open_{dataset}_{name}.json", out / f"baselines_{dataset}_open_{name}.json"):
        if path.exists():
            rows = json.loads(path.read_text())["results"]
            return [dict(r, source=path.name) for r in rows]
    return None


def _entries(row) -> str:
    if row["algorithm"] in ("bm25", "cosine"):
        return "—"
    nnz = row.get("nnz")
    if nnz is None:
        nnz = row.get("model_bytes", 0) // 8 if row["algorithm"] not in ("bm25", "cosine") else 0
    return "—" if not nnz else f"{nnz / 1e6:.1f}M"


def table(out: Path, datasets, names) -> str:
    """Mean over seeds per method (MAP / AP@10, %), then per seed; the best of each column in bold."""
    found = {d: {n: load(out, d, n) for n in names} for d in datasets}
    means = {d: {n: (100 * np.mean([r["map"] for r in rs]), 100 * np.mean([r["ap@10"] for r in rs]))
                 for n, rs in found[d].items() if rs} for d in datasets}
    best = {d: tuple(max(v[i] for v in means[d].values()) for i in (0, 1)) for d in datasets if means[d]}

    def cell(d, n):
        if n not in means[d]:
            return "—"
        return " / ".join(f"**{v:.1f}**" if round(v, 1) == round(best[d][i], 1) else f"{v:.1f}"
                          for i, v in enumerate(means[d][n]))

    lines = ["| method | " + " | ".join(f"{d} MAP / AP@10" for d in datasets) + " | model entries ("
             + " / ".join(datasets) + ") | fit s (" + " / ".join(datasets) + ") |",
             "|---|" + "---|" * (len(datasets) + 2)]
    for n in names:
        if not any(n in means[d] for d in datasets):
            continue
        entries = " / ".join(_entries(found[d][n][0]) if found[d][n] else "—" for d in datasets)
        fits = " / ".join(f"{np.mean([r['train_seconds'] for r in found[d][n]]):.0f}" if found[d][n] else "—"
                          for d in datasets)
        older = [d for d in datasets if found[d][n] and found[d][n][0]["source"].startswith("baselines_")]
        mark = f" ({', '.join(older)}: bench_baselines.py run)" if older else ""
        lines.append(f"| {n}{mark} | " + " | ".join(cell(d, n) for d in datasets) + f" | {entries} | {fits} |")
    lines.append("")
    for d in datasets:
        seeds = sorted({r["seed"] for rs in found[d].values() if rs for r in rs})
        lines += [f"{d}, per class split (MAP / AP@10):", "",
                  "| method | " + " | ".join(f"split {s}" for s in seeds) + " |", "|---|" + "---|" * len(seeds)]
        for n in names:
            rs = found[d].get(n)
            if rs:
                by = {r["seed"]: r for r in rs}
                lines.append(f"| {n} | " + " | ".join(
                    f"{100 * by[s]['map']:.1f} / {100 * by[s]['ap@10']:.1f}" if s in by else "—" for s in seeds) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--algorithms", default=",".join(BASELINES + LEARNERS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--param", action="append", default=[], help="KEY=VALUE passed to experiment --param")
    parser.add_argument("--tag", default="", help="suffix of the result files (a variant's runs)")
    parser.add_argument("--table", action="store_true", help="print the tables of the saved runs only")
    parser.add_argument("--rows", default=None, help="table rows: algorithm[+tag],... (default: --algorithms)")
    args = parser.parse_args(argv)
    datasets, algorithms = args.datasets.split(","), args.algorithms.split(",")
    if not args.table:
        run(args.out, datasets, algorithms, args.seeds, args.param, args.tag)
    print(table(args.out, datasets, (args.rows or args.algorithms).split(",")))


if __name__ == "__main__":
    main()
