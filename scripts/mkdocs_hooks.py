"""MkDocs hook of the documentation site: adds the benchmark pages generated from
benchmarks/out/*.json (scripts/bench_pages.py) to the site at build time."""

from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.structure.files import File

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pages import render_pages  # noqa: E402


def on_files(files, config):
    for name, text in render_pages().items():
        files.append(File.generated(config, f"benchmarks/{name}", content=text))
    return files
