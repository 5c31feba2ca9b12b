"""Layer rules: the import-linter contracts of pyproject.toml hold, and no import circle exists.

Both are checked on the package as it is installed (``sparsesim.indexes`` and ``sparsesim.cli``
inside ``sparsesim``), rebuilt here as a tree of links from the ``package-dir`` map of
pyproject.toml, so the result does not depend on how (or whether) the checkout is installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml on Python 3.10 needs tomli")

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"

grimp = pytest.importorskip("grimp", reason="import-linter (and grimp) are test dependencies")


@pytest.fixture(scope="module")
def installed_tree(tmp_path_factory) -> Path:
    """``tmp/sparsesim`` laid out as the wheel lays it out, made of links into the checkout."""
    config = tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]
    package_dir = config["package-dir"]
    tree = tmp_path_factory.mktemp("installed")
    top = tree / "sparsesim"
    top.mkdir()
    for entry in (ROOT / package_dir["sparsesim"]).iterdir():
        if entry.name != "__pycache__":
            os.symlink(entry, top / entry.name)
    for package, folder in package_dir.items():
        if package != "sparsesim":
            os.symlink(ROOT / folder, tree / package.replace(".", "/"))
    return tree


def test_import_linter_contracts(installed_tree):
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())",
         str(PYPROJECT)],
        cwd=installed_tree, env={**os.environ, "PYTHONPATH": str(installed_tree)},
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return out


def test_no_import_circle(installed_tree):
    """No module imports itself back through others, counting imports inside functions too."""
    sys.path.insert(0, str(installed_tree))
    saved = {name: mod for name, mod in sys.modules.items() if name == "sparsesim" or name.startswith("sparsesim.")}
    try:
        for name in saved:
            del sys.modules[name]
        graph = grimp.build_graph("sparsesim", cache_dir=None)
    finally:
        sys.path.remove(str(installed_tree))
        for name in [n for n in sys.modules if n == "sparsesim" or n.startswith("sparsesim.")]:
            del sys.modules[name]
        sys.modules.update(saved)
    assert {"sparsesim.indexes.storage", "sparsesim.cli.app"} <= set(graph.modules)
    cycles = _cycles(graph)
    assert not cycles, f"import circles: {cycles}"
