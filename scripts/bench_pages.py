"""Render the benchmark reports in benchmarks/out/ as Markdown pages of the documentation site.

The pages are generated, never written by hand: every table cell is a value of a JSON report,
every command is the one the report recorded (or, for the few reports that recorded none, the
command given for that family below), and the machine facts are the ones the report stored.

    python scripts/bench_pages.py OUT_DIR     # writes OUT_DIR/index.md, OUT_DIR/<family>.md

The documentation build calls :func:`render_pages` from ``docs/hooks.py``, so ``mkdocs build``
always shows the reports as they are in ``benchmarks/out``.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "out"

# family: (title, what the benchmark measures, file-name prefixes, command for reports without one)
FAMILIES = {
    "engine": (
        "Update engine",
        "Triplet updates per second of the OASIS / SORS / AdaSORS engine against the naive scipy update, "
        "memory and model size (`benchmarks/bench_sors.py`, `benchmarks/profile_engine.py`). "
        "How to read them: [Update engine](../engine.md).",
        ("bench_sors", "profile_"),
        "python benchmarks/bench_sors.py --help",
    ),
    "quality": (
        "Learned similarity against baselines",
        "Retrieval quality (MAP, AP@10) of the learners beside the baselines a user tries first (cosine, "
        "BM25, LSA, classifier embeddings), closed set and open set (classes unseen in training), with fit "
        "time, peak memory and model bytes (`benchmarks/bench_quality.py`, `sparsesim experiment`). "
        "How to read them: [Learned similarity and baselines](../quality.md).",
        ("bench_quality", "bench_baseline", "baselines_", "compact_", "bench_model_size", "bench_manyclass"),
        "SPARSESIM_DATA=../shared/data python benchmarks/bench_quality.py --help",
    ),
    "indexes": (
        "Retrieval indexes",
        "Exact and ann index: queries per second, recall@10 against exact search, build peak and size "
        "on disk (`benchmarks/bench_indexes.py`); load times (`benchmarks/bench_index_load.py`); "
        "the recall check of the ann candidate stage (`benchmarks/bench_recall_check.py`); the exact "
        "index's two strategies (`benchmarks/bench_exact_strategy.py`). "
        "How to read them: [Retrieval indexes](../guide/indexes.md).",
        ("bench_indexes", "bench_index_load", "bench_recall_check", "bench_embedding_index", "bench_first_batch",
         "bench_calibration", "bench_exact_strategy", "bench_read_allocation"),
        "python benchmarks/bench_indexes.py --help",
    ),
    "distributed": (
        "Dask shards",
        "A sharded exact index on two Dask workers against one process: build time, queries per "
        "second, peak memory per worker, equality of the answers (`benchmarks/bench_distributed.py`); "
        "the block-wise ann build of a corpus on disk within a memory budget, its recall, queries per "
        "second and size on disk (`benchmarks/bench_tenmillion.py`). "
        "How to read them: [Scaling out on a Dask cluster](../guide/dask.md).",
        ("bench_distributed", "bench_tenmillion"),
        "python benchmarks/bench_distributed.py --help",
    ),
    "feedback": (
        "Learning from feedback",
        "A served index learning from feedback triplets while it answers queries: MAP@10 before and "
        "after, the same triplets offline, feedback and queries per second (`benchmarks/bench_feedback.py`). "
        "How to read them: [Learning from feedback](../guide/feedback.md).",
        ("bench_feedback",),
        "SPARSESIM_DATA=../shared/data python benchmarks/bench_feedback.py --documents 2000 --eval 200 --budget 2000",
    ),
    "papers": (
        "The papers' baselines",
        "The baselines the five papers compare against (LMNN, ITML, mtLMNN, MTFL, TRML, CW-COL, OSMTL-e) "
        "run by the papers' protocols (`sparsesim experiment`): the protocol's summary rows, and the "
        "paper's numbers where it has them. How to read them: [The papers' baselines](../baselines.md).",
        ("paper_baselines_",),
        "SPARSESIM_DATA=../shared/data sparsesim experiment --help",
    ),
}

MACHINE_KEYS = ("machine", "cpus", "load_average", "load_average_at_start", "load_average_at_end", "loadavg_start")


def family_of(name: str) -> str | None:
    for fam, (_, _, prefixes, _) in FAMILIES.items():
        if name.startswith(prefixes):
            return fam
    return None


def fmt(value) -> str:
    """One table cell."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
            return f"{value:.3g}"
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.1f}"
    if isinstance(value, list):
        if all(not isinstance(v, (dict, list)) for v in value):
            return ", ".join(fmt(v) for v in value)
        return f"{len(value)} entries"
    if isinstance(value, dict):
        return ", ".join(f"{k}={fmt(v)}" for k, v in value.items() if not isinstance(v, (dict, list)))
    text = str(value).replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= 120 else text[:117] + "..."


def flatten(d: dict, prefix: str = "") -> dict:
    """Nested dicts as dotted keys; lists of dicts are left out (they become tables)."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            continue
        else:
            out[key] = v
    return out


def tables_of(d, prefix: str = "") -> list[tuple[str, list[dict]]]:
    """Every list of records inside a report, with its dotted path."""
    found = []
    if isinstance(d, list) and d and all(isinstance(x, dict) for x in d):
        found.append((prefix or "rows", d))
    elif isinstance(d, dict):
        for k, v in d.items():
            found.extend(tables_of(v, f"{prefix}.{k}" if prefix else k))
    return found


def table(records: list[dict]) -> list[str]:
    rows = [flatten(r) for r in records]
    columns: list[str] = []
    for r in rows:
        for k in r:
            if k not in columns:
                columns.append(k)
    lines = ["| " + " | ".join(c.replace("_", " ") for c in columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join(fmt(r.get(c)) for c in columns) + " |")
    return lines


def machine_facts(report) -> list[str]:
    if not isinstance(report, dict):
        return []
    facts = []
    for key in MACHINE_KEYS:
        if key in report:
            value = report[key]
            if isinstance(value, dict):
                facts.extend(f"{k.replace('_', ' ')}: {fmt(v)}" for k, v in value.items())
            else:
                facts.append(f"{key.replace('_', ' ')}: {fmt(value)}")
    return facts


def commands_of(report) -> list[str]:
    if isinstance(report, dict) and report.get("command"):
        return [str(report["command"])]
    if isinstance(report, list):
        return sorted({str(r["command"]) for r in report if isinstance(r, dict) and r.get("command")})
    return []


def render_report(path: Path, default_command: str) -> list[str]:
    lines = [f"## `{path.name}`", ""]
    if path.suffix == ".txt":
        return lines + ["```text", path.read_text().rstrip(), "```", ""]
    report = json.loads(path.read_text())
    commands = commands_of(report)
    lines += ["Command:", "", "```bash", *(commands or [default_command + "   # this report recorded no command"]), "```", ""]
    facts = machine_facts(report)
    if facts:
        lines += ["Machine: " + "; ".join(facts) + ".", ""]
    if isinstance(report, dict):
        scalars = {
            k: v
            for k, v in flatten(report).items()
            if k != "command" and k.split(".")[0] not in MACHINE_KEYS
        }
        if scalars:
            lines += ["| field | value |", "|---|---|"]
            lines += [f"| {k} | {fmt(v)} |" for k, v in scalars.items()]
            lines.append("")
    for name, records in tables_of(report):
        if isinstance(report, list):
            for i, rec in enumerate(records):
                lines += [f"### case {i + 1}: {fmt(rec.get('corpus', ''))}", ""]
                facts = machine_facts(rec)
                if facts:
                    lines += ["Machine: " + "; ".join(facts) + ".", ""]
                scalars = {k: v for k, v in flatten(rec).items() if k.split(".")[0] not in MACHINE_KEYS}
                lines += ["| field | value |", "|---|---|"]
                lines += [f"| {k} | {fmt(v)} |" for k, v in scalars.items()]
                lines.append("")
                for sub, sub_records in tables_of(rec):
                    lines += [f"`{sub}`:", "", *table(sub_records), ""]
            continue
        lines += [f"`{name}`:", "", *table(records), ""]
    return lines


def render_pages(out_dir: Path = OUT) -> dict[str, str]:
    """Markdown pages keyed by file name (``index.md`` and one page per benchmark family)."""
    by_family: dict[str, list[Path]] = {fam: [] for fam in FAMILIES}
    for path in sorted(out_dir.glob("*")):
        if path.suffix in (".json", ".txt"):
            fam = family_of(path.name)
            if fam is not None:
                by_family[fam].append(path)
    pages = {}
    index = [
        "# Benchmark reports",
        "",
        "These pages are generated from the JSON reports in `benchmarks/out/` by "
        "`scripts/bench_pages.py` each time the site is built: the tables are the reports' own values, "
        "with the command that produced each report and the machine facts it recorded "
        "(all runs: 2-core virtual machines; a load average above 2 means other jobs shared the cores, "
        "so rates from such runs are lower bounds).",
        "",
        "| benchmark | reports | what it measures |",
        "|---|---|---|",
    ]
    for fam, (title, what, _, default_command) in FAMILIES.items():
        paths = by_family[fam]
        index.append(f"| [{title}]({fam}.md) | {len(paths)} | {what.split(' (')[0]} |")
        body = [f"# {title}", "", what, ""]
        for path in paths:
            body += render_report(path, default_command)
        pages[f"{fam}.md"] = "\n".join(body).rstrip() + "\n"
    pages["index.md"] = "\n".join(index) + "\n"
    return pages


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/bench_pages.py OUT_DIR", file=sys.stderr)
        return 2
    target = Path(argv[0])
    target.mkdir(parents=True, exist_ok=True)
    for name, text in render_pages().items():
        (target / name).write_text(text)
        print(target / name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
