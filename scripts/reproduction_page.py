"""Run the reproduction report and write it as the documentation page.

    SPARSESIM_DATA=/path/to/data python scripts/reproduction_page.py OUT_DIR [--items a,b,...] [--quick]

runs :func:`sparsesim.experiments.paper.run_all` (every item of ``paper-all``, or the ones given; with
``--merge`` added to the report already in ``docs/``) with
its figures and per-item files in ``OUT_DIR``; with ``--reuse`` it runs nothing and reads the items'
files an earlier run wrote (``OUT_DIR/<item>/<item>.json``: each item's file is written when the item
finishes, so a long run stopped part way keeps the items it finished). It then writes ``docs/reproduction.json`` (the report) and
``docs/reproduction.md`` (its markdown, :func:`sparsesim.experiments.paper_verdicts.report_markdown`).
``tests/test_paper_report.py`` checks that the page is the markdown of the JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sparsesim.experiments import load_experiment_file
from sparsesim.experiments.paper import full_size_notes, run_all
from sparsesim.experiments.paper_verdicts import RULE, report_markdown, total_counts
from sparsesim.persistence import dumps_strict

DOCS = Path(__file__).resolve().parent.parent / "docs"
BULKY = ("board", "search", "points")  # a learning curve stays: its MAP and sparsity per budget are the figure


def merge(old: dict, new: dict) -> dict:
    """``old`` with ``new``'s items added (an item run again replaces its earlier entry), in the order of
    ``paper-all``; the totals, the seconds (the sum over the items kept) and the list of items not run
    are recomputed."""
    if bool(old["quick"]) != bool(new["quick"]):
        raise SystemExit("--merge: the report in docs/ and this run differ in --quick")
    by_name = {it["name"]: it for it in old["items"]}
    by_name.update({it["name"]: it for it in new["items"]})
    every = load_experiment_file("paper-all")["include"]
    items = [by_name[n] for n in every if n in by_name]
    not_run = [n for n in every if n not in by_name]
    return dict(new, items=items, counts=total_counts(items), seconds=sum(it["seconds"] for it in items),
                not_run=not_run, full_size=full_size_notes(not_run))


def reuse(out_dir: Path, items: list[str], quick: bool) -> dict:
    """The report of ``items`` from the files a run wrote into ``out_dir`` (one per finished item)."""
    found = []
    for name in items:
        path = out_dir / name / f"{name}.json"
        if not path.is_file():
            raise SystemExit(f"--reuse: {path} is missing (the item has not finished in that directory)")
        item = json.loads(path.read_text())
        if bool(item.get("quick")) != bool(quick):
            raise SystemExit(f"--reuse: {path} was run {'with' if item.get('quick') else 'without'} --quick")
        found.append(item)
    every = load_experiment_file("paper-all")["include"]
    not_run = [n for n in every if n not in items]
    return {"quick": bool(quick), "items": found, "counts": total_counts(found), "rule": RULE,
            "seconds": sum(it["seconds"] for it in found), "not_run": not_run,
            "full_size": full_size_notes(not_run)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--items", default=None, help="comma-separated paper-* items (default: all)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--n-jobs", type=int, default=1)
    parser.add_argument("--merge", action="store_true",
                        help="add the items run to the report already in docs/reproduction.json (same size)")
    parser.add_argument("--resume", action="store_true",
                        help="keep every finished run in OUT_DIR/jobs and skip the runs found there "
                             "(a stopped run starts again where it stopped; same code, data and settings)")
    parser.add_argument("--reuse", action="store_true",
                        help="run nothing: read the items' files an earlier run wrote into OUT_DIR (needs --items)")
    args = parser.parse_args(argv)
    items = [s.strip() for s in args.items.split(",") if s.strip()] if args.items else None
    if args.reuse:
        if not items:
            raise SystemExit("--reuse needs --items")
        report = reuse(args.out_dir, items, args.quick)
    else:
        from contextlib import nullcontext

        from sparsesim.job_store import use_job_store

        with use_job_store(args.out_dir / "jobs") if args.resume else nullcontext():
            report = run_all(args.out_dir, quick=args.quick, n_jobs=args.n_jobs, items=items,
                             progress=lambda name: print(f"running {name}", flush=True))
    data = json.loads(dumps_strict(report, default=float))
    for item in data["items"]:  # the page's numbers; the full boards stay in OUT_DIR/<item>/<item>.json
        for run in item["runs"]:
            for key in BULKY:
                run.pop(key, None)
    if args.merge:
        data = merge(json.loads((DOCS / "reproduction.json").read_text()), data)
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    (DOCS / "reproduction.json").write_text(text)
    # the page is the markdown of the file as read back (its keys sorted), so that it is reproducible from it
    (DOCS / "reproduction.md").write_text(report_markdown(json.loads(text)))
    print(f"wrote {DOCS / 'reproduction.json'} and {DOCS / 'reproduction.md'} ({report['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
