"""Runs the examples of README.md and docs/**/*.md as tests (Sybil).

* ```python blocks run in one namespace per page, in order; a block written as a ``>>>`` session is a
  doctest, so the output printed in the docs is the output of this run.
* ```console blocks run each ``$ command`` in a shell, in a temporary directory shared by the
  page, and compare its standard output with the lines below it (``...`` matches anything).
* ```bash and other blocks are shown, not run.
* ``<!-- skip: next if(not has_data("news20"), reason="...") -->`` before a block skips it when the
  data directory (``$SPARSESIM_DATA``) lacks that data set.

Docstring examples of the package run in tests/test_docstring_examples.py.
"""

from __future__ import annotations

import doctest
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from sybil import Sybil
from sybil.parsers.markdown import ClearNamespaceParser, CodeBlockParser, PythonCodeBlockParser, SkipParser

OPTIONFLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE

# the examples run in temporary directories: a relative data directory is taken from here
if os.environ.get("SPARSESIM_DATA"):
    os.environ["SPARSESIM_DATA"] = os.path.abspath(os.environ["SPARSESIM_DATA"])
COMMAND_TIMEOUT = 600


def has_data(name: str) -> bool:
    """True when ``$SPARSESIM_DATA`` holds every file of the registered data set ``name``."""
    from sparsesim.data.catalog import get_dataset_spec

    root = os.environ.get("SPARSESIM_DATA")
    if not root:
        return False
    files = get_dataset_spec(name).files
    return all((Path(root) / f.relpath).is_file() for f in files)


def _split_session(source: str) -> list[tuple[str, str]]:
    """``$ cmd`` lines (a trailing backslash continues them) and the output expected after each."""
    steps: list[tuple[str, list[str]]] = []
    lines = source.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("$ "):
            cmd = [line[2:]]
            while cmd[-1].endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd.append(lines[i])
            steps.append(("\n".join(cmd), []))
        elif steps:
            steps[-1][1].append(line)
        i += 1
    return [(cmd, "\n".join(out).strip("\n") + "\n" if any(o.strip() for o in out) else "") for cmd, out in steps]


def evaluate_console(example) -> str | None:
    workdir = example.namespace["_workdir"]
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.setdefault("COLUMNS", "120")
    checker = doctest.OutputChecker()
    for cmd, expected in _split_session(example.parsed):
        proc = subprocess.run(
            ["bash", "-o", "pipefail", "-c", cmd],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
        if proc.returncode != 0:
            return f"$ {cmd}\nexit status {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        if expected and not checker.check_output(expected, proc.stdout, OPTIONFLAGS):
            return f"$ {cmd}\nexpected:\n{expected}got:\n{proc.stdout}"
    return None


def setup(namespace: dict) -> None:
    namespace["_tmp"] = tempfile.TemporaryDirectory(prefix="sparsesim-docs-")
    namespace["_workdir"] = namespace["_tmp"].name
    namespace["_cwd"] = os.getcwd()
    namespace["has_data"] = has_data
    os.chdir(namespace["_workdir"])


def teardown(namespace: dict) -> None:
    os.chdir(namespace["_cwd"])
    namespace["_tmp"].cleanup()


markdown_examples = Sybil(
    parsers=[
        PythonCodeBlockParser(doctest_optionflags=OPTIONFLAGS),
        CodeBlockParser(language="console", evaluator=evaluate_console),
        SkipParser(),
        ClearNamespaceParser(),
    ],
    patterns=["README.md", "docs/*.md", "docs/**/*.md"],
    setup=setup,
    teardown=teardown,
    name="docs",
)

pytest_collect_file = markdown_examples.pytest()
