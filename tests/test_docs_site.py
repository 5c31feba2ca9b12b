"""The documentation site builds with ``mkdocs build --strict``: no dead link, no missing anchor,
no page left out of the navigation, every API reference page collected from the docstrings, and
the benchmark pages generated from every report in benchmarks/out/."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("mkdocs", reason="the docs tooling is in the test and docs extras")
pytest.importorskip("mkdocstrings_handlers.python", reason="the docs tooling is in the test and docs extras")


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path):
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    # the API reference was rendered from the docstrings
    learners = (site / "reference" / "learners" / "index.html").read_text()
    assert "partial_fit_triplets" in learners and "OASIS" in learners
    assert "ExactIndex" in (site / "reference" / "indexes" / "index.html").read_text()
    # every benchmark report appears on a generated page, with its recorded command
    pages = "".join(p.read_text() for p in (site / "benchmarks").rglob("index.html"))
    for report in sorted((ROOT / "benchmarks" / "out").glob("bench_*.json")):
        assert report.name in pages, f"{report.name} is on no benchmark page"
        data = json.loads(report.read_text())
        if isinstance(data, dict) and isinstance(data.get("command"), str):
            first_word = data["command"].split()[0]
            assert first_word in pages


def test_bench_pages_tables_come_from_the_reports():
    sys.path.insert(0, str(ROOT / "scripts"))
    from bench_pages import fmt, render_pages

    pages = render_pages()
    assert set(pages) >= {"index.md", "engine.md", "indexes.md", "distributed.md", "feedback.md"}
    report = json.loads((ROOT / "benchmarks" / "out" / "bench_distributed_1e6_idle.json").read_text())
    page = pages["distributed.md"]
    assert report["command"] in page
    assert fmt(report["two_workers"]["queries_per_second"]) in page
    assert "load average at start" in page
