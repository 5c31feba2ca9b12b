"""Keep the rows of a `sparsesim experiment --json` report that the papers' baselines pages show,
as benchmarks/out/paper_baselines_<protocol>_<dataset>.json (rendered by scripts/bench_pages.py).

    python scripts/paper_baselines_record.py REPORT.json --command "sparsesim experiment ..." \
        [--load "9.8 10.5"] [--paper PAPER.json]

The report is what the command printed; the record keeps its command, the load average measured
around the run, the per-run rows (sors) or the protocol's summary rows (romco, ijcai17), and,
with --paper, the paper's numbers for the same algorithms (a JSON list of records).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "benchmarks" / "out"
SORS_KEYS = ("algorithm", "seed", "map", "ap@10", "map@10", "train_seconds", "n_train", "n_test", "resolved_params",
             "tuned_params")


def rows_of(report: dict) -> list[dict]:
    if report["protocol"] == "sors":
        return [{k: r[k] for k in SORS_KEYS if k in r} for r in report["results"]]
    keep = []
    for row in report["summary"]:
        keep.append({k: v for k, v in row.items() if not isinstance(v, (list, dict)) or k == "params"})
    return keep


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--command", required=True)
    parser.add_argument("--load", default=None, help="load average around the run (shared machine)")
    parser.add_argument("--paper", type=Path, default=None)
    parser.add_argument("--name", default=None, help="suffix of the output name (default: the data set)")
    args = parser.parse_args()
    report = json.loads(args.report.read_text())
    record = {"command": args.command, "protocol": report["protocol"], "dataset": report["dataset"],
              "rows": rows_of(report)}
    if args.load:
        record["load_average"] = args.load
    if args.paper:
        record["paper"] = json.loads(args.paper.read_text())
    name = f"paper_baselines_{report['protocol']}_{args.name or report['dataset']}.json"
    OUT.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=OUT, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(record, fh, indent=1)
    os.replace(tmp, OUT / name)
    print(OUT / name)


if __name__ == "__main__":
    main()
