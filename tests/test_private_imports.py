"""No module imports another module's private (underscore) names.

What one module shares with another is public (no leading underscore) and documented; a private
name stays in its module. The scan reads every ``from X import _name`` in ``sparsesim/``,
``indexes/`` and ``cli/`` (the installed package) with :mod:`ast`, where ``X`` is one of the
project's own modules (a relative import or ``sparsesim.*``). A third-party package's private
module is outside the rule: we cannot make its names public (the one such import,
``metric_learn._util``, adapts metric-learn 0.7's input checks to scikit-learn >= 1.8 and is
documented in :mod:`sparsesim.learners.metric_learn_peers`).
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sparsesim", "indexes", "cli")


def own_module(node: ast.ImportFrom) -> bool:
    """Whether an ``import from`` names one of the project's modules (relative, or ``sparsesim.*``)."""
    return node.level > 0 or (node.module or "").split(".")[0] == "sparsesim"


def private_imports() -> Counter:
    """``(importing file, imported name)`` -> count, for every underscore name imported from
    another of the project's modules (dunder names such as ``__version__`` are public)."""
    found: Counter = Counter()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                if isinstance(node, ast.ImportFrom) and own_module(node):
                    for alias in node.names:
                        name = alias.name
                        if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
                            found[(path.relative_to(ROOT).as_posix(), name)] += 1
                elif isinstance(node, ast.Import):  # import sparsesim.indexes._kernels (a private module)
                    for alias in node.names:
                        parts = alias.name.split(".")
                        private = [p for p in parts[1:] if p.startswith("_") and not p.endswith("__")]
                        if parts[0] == "sparsesim" and private:
                            found[(path.relative_to(ROOT).as_posix(), private[0])] += 1
    return found


def test_no_private_import():
    found = sorted(private_imports())
    assert not found, ("private names imported across modules (make the shared name public and documented): "
                       + ", ".join(f"{f}: {n}" for f, n in found))


def test_the_scan_finds_a_private_import(tmp_path, monkeypatch):
    """The scan is not vacuous: a private import in a package file is found."""
    package = tmp_path / "sparsesim"
    package.mkdir()
    (package / "a.py").write_text("from .b import _hidden, public\nfrom .c import __version__\n"
                                  "from sparsesim.d import _other\nfrom . import _module\n"
                                  "from numpy import _private_of_numpy\nimport sparsesim.e._inner\n"
                                  "import sparsesim.__main__\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert private_imports() == Counter({("sparsesim/a.py", "_hidden"): 1, ("sparsesim/a.py", "_other"): 1,
                                         ("sparsesim/a.py", "_module"): 1, ("sparsesim/a.py", "_inner"): 1})
