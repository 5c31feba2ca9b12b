"""Every ``>>>`` example in the package's docstrings runs (Sybil's doctest parser), on the
embedded sample or tiny data, and prints what its docstring says.

The package installs ``indexes/`` and ``cli/`` as ``sparsesim.indexes`` and ``sparsesim.cli``
(pyproject ``package-dir``), so each source file is imported under its installed module name.
"""

from __future__ import annotations

import doctest
import importlib
import os
from pathlib import Path

import pytest
from sybil import Sybil
from sybil.document import PythonDocStringDocument
from sybil.example import NotEvaluated
from sybil.parsers.rest import DocTestParser

ROOT = Path(__file__).resolve().parent.parent
# source folder -> installed package name
PACKAGE_DIRS = {ROOT / "sparsesim": "sparsesim", ROOT / "indexes": "sparsesim.indexes", ROOT / "cli": "sparsesim.cli"}


def module_name(path: Path) -> str:
    for folder, package in PACKAGE_DIRS.items():
        if path.is_relative_to(folder):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            return ".".join([package, *parts])
    raise ValueError(f"{path} is not in the package")


class InstalledModuleDocument(PythonDocStringDocument):
    """Imports the module as installed (``sparsesim.indexes.exact``, not ``indexes.exact``)."""

    def import_document(self, example):
        module = importlib.import_module(module_name(Path(self.path)))
        self.namespace.update(module.__dict__)
        self.pop_evaluator(self.import_document)
        raise NotEvaluated()


def _files_with_examples() -> list[Path]:
    files = []
    for folder in PACKAGE_DIRS:
        for path in sorted(folder.rglob("*.py")):
            if "__pycache__" not in path.parts and ">>>" in path.read_text(encoding="utf-8"):
                files.append(path)
    return files


SYBIL = Sybil(
    parsers=[DocTestParser(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)],
    document_types={".py": InstalledModuleDocument},
)
FILES = _files_with_examples()


def test_the_package_has_docstring_examples():
    assert len(FILES) >= 10


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_docstring_examples(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)          # examples that save a file write it here
    document = SYBIL.parse(path)
    examples = list(document.examples())
    assert examples, f"{path} has '>>>' but no parsed example"
    for example in examples:
        example.evaluate()
