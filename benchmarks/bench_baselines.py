"""Benchmark: the baseline table of docs/quality.md ("Baselines") — registered baselines and two
similarity learners on news20 and Reuters-21578, closed set and open set, 3 seeds.

Every (corpus, protocol, algorithm) runs as its own ``sparsesim experiment`` process, one at a
time, so the peak memory reported is that configuration's (the process's maximum RSS over its
seeds, corpus loading included):

    sparsesim experiment --dataset D --algorithms A --triplets 10000 --seeds 0,1,2 --json \\
        [--option unseen_classes=0.5]

Each run's JSON goes to ``OUT/baselines_{corpus}_{closed|open}_{algorithm}.json``; ``--table``
prints the markdown table from those files (mean ± std over seeds of MAP and AP@10, mean fit
seconds, peak RSS and model bytes).

Run:  python benchmarks/bench_baselines.py [--out benchmarks/out] [--datasets news20,reuters21578]
                                           [--algorithms cosine,bm25,...] [--table]
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

ALGORITHMS = ("cosine", "bm25", "lsa", "logreg-proba", "logreg-scores", "svm-scores", "oasis", "sors-l1")
DATASETS = ("news20", "reuters21578")
PROTOCOLS = {"closed": [], "open": ["--option", "unseen_classes=0.5"]}


def sparsesim_command() -> list[str]:
    exe = Path(sys.executable).with_name("sparsesim")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "sparsesim.cli"]


def run(out: Path, datasets, algorithms, seeds: str, triplets: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for dataset in datasets:
        for protocol, extra in PROTOCOLS.items():
            for algorithm in algorithms:
                target = out / f"baselines_{dataset}_{protocol}_{algorithm}.json"
                cmd = sparsesim_command() + ["experiment", "--dataset", dataset, "--algorithms", algorithm,
                                             "--triplets", str(triplets), "--seeds", seeds, "--json", *extra]
                start = time.perf_counter()
                proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
                if proc.returncode != 0:
                    print(f"FAILED {' '.join(cmd)}\n{proc.stderr[-2000:]}", file=sys.stderr)
                    continue
                report = json.loads(proc.stdout)
                report["command"] = " ".join(["sparsesim"] + cmd[len(sparsesim_command()):])
                report["wall_seconds"] = time.perf_counter() - start
                target.write_text(json.dumps(report, indent=1))
                maps = [r["map"] for r in report["results"]]
                print(f"{dataset} {protocol} {algorithm}: MAP {100 * np.mean(maps):.2f} "
                      f"({report['wall_seconds']:.0f} s)", file=sys.stderr, flush=True)


def _pm(values) -> str:
    return f"{100 * np.mean(values):.1f} ± {100 * np.std(values):.1f}"


def _bytes(n) -> str:
    if n is None:
        return "-"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def table(out: Path, datasets, algorithms) -> str:
    lines = []
    for dataset in datasets:
        for protocol in PROTOCOLS:
            rows = []
            for algorithm in algorithms:
                path = out / f"baselines_{dataset}_{protocol}_{algorithm}.json"
                if not path.exists():
                    continue
                results = json.loads(path.read_text())["results"]
                rows.append((algorithm, results))
            if not rows:
                continue
            title = ("closed set (70/30 split per class)" if protocol == "closed"
                     else "open set (half the classes unseen in training; their test documents query each other)")
            lines += [f"**{dataset}, {title}**, {len(rows[0][1])} seeds", "",
                      "| algorithm | MAP % | AP@10 % | fit s | peak RSS | model bytes |",
                      "|---|---|---|---|---|---|"]
            for algorithm, results in rows:
                lines.append(
                    f"| {algorithm} | {_pm([r['map'] for r in results])} | {_pm([r['ap@10'] for r in results])} | "
                    f"{np.mean([r['train_seconds'] for r in results]):.1f} | "
                    f"{max(r['peak_rss_mb'] for r in results) / 1024:.1f} GiB | "
                    f"{_bytes(np.mean([r['model_bytes'] for r in results]))} |")
            lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--triplets", type=int, default=10_000)
    parser.add_argument("--table", action="store_true", help="print the markdown table of the saved runs")
    args = parser.parse_args()
    datasets, algorithms = args.datasets.split(","), args.algorithms.split(",")
    if not args.table:
        run(args.out, datasets, algorithms, args.seeds, args.triplets)
    print(table(args.out, datasets, algorithms))


if __name__ == "__main__":
    main()
