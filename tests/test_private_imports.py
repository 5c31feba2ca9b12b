"""No module imports another module's private (underscore) names.

What one module shares with another is public (no leading underscore) and documented; a private
name stays in its module. The scan reads every ``from X import _name`` in ``sparsesim/``,
``indexes/`` and ``cli/`` (the installed package) with :mod:`ast`. Imports that are still there
are listed in ``KNOWN``, a ratchet: the test fails when a new one appears, and when one listed
here is gone (so the list only shrinks).
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sparsesim", "indexes", "cli")


def private_imports() -> Counter:
    """``(importing file, imported name)`` -> count, for every underscore name imported from
    another module (dunder names such as ``__version__`` are public)."""
    found: Counter = Counter()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                if isinstance(node, ast.ImportFrom):
                    for alias in node.names:
                        name = alias.name
                        if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
                            found[(path.relative_to(ROOT).as_posix(), name)] += 1
    return found


#: the private imports still to be made public (file, name); only ever shrinks. Left: the index
#: storage modules' shared helpers, the persistence, data-reader and tuning re-exports the tests
#: use, the numba kernels module (``indexes/_kernels.py``) and metric-learn's own ``_util``.
KNOWN: frozenset = frozenset({
    ("indexes/execution.py", "_kernels"),
    ("indexes/ann_query.py", "_compact_kernels"),  # the compact lists' numba kernels, like _kernels
    ("indexes/storage.py", "_DATA_DIR_RE"),
    ("indexes/storage.py", "_FILE_RE"),
    ("indexes/storage.py", "_HEX64"),
    ("indexes/storage.py", "_block_digests"),
    ("indexes/storage.py", "_check_model"),
    ("indexes/storage.py", "_check_unchanged_since_load"),
    ("indexes/storage.py", "_checked_dir"),
    ("indexes/storage.py", "_data_path"),
    ("indexes/storage.py", "_is_index_dir"),
    ("indexes/storage.py", "_model_facts"),
    ("indexes/storage.py", "_model_shell"),
    ("indexes/storage.py", "_read_manifest_loose"),
    ("indexes/storage.py", "_save_npy"),
    ("indexes/storage.py", "_stored_w"),
    ("indexes/storage.py", "_sweep_inside"),
    ("indexes/storage.py", "_verify_files"),
    ("indexes/storage.py", "_write_manifest"),
    ("indexes/storage.py", "_write_version"),
    ("indexes/storage_read.py", "_DATA_DIR_RE"),
    ("indexes/storage_read.py", "_F64"),
    ("indexes/storage_read.py", "_FILE_RE"),
    ("indexes/storage_read.py", "_HEX64"),
    ("indexes/storage_read.py", "_I32"),
    ("indexes/storage_read.py", "_I64"),
    ("indexes/storage_write.py", "_DATA_DIR_RE"),
    ("indexes/storage_write.py", "_FILE_RE"),
    ("sparsesim/learners/metric_learn_peers.py", "_util"),
    ("sparsesim/persistence/__init__.py", "_BoundedRaw"),
    ("sparsesim/persistence/__init__.py", "_HELD"),
    ("sparsesim/persistence/__init__.py", "_META_KEY"),
    ("sparsesim/persistence/__init__.py", "_TEMP_RE"),
    ("sparsesim/persistence/__init__.py", "_check_header"),
    ("sparsesim/persistence/__init__.py", "_depth"),
    ("sparsesim/persistence/__init__.py", "_finite"),
    ("sparsesim/persistence/__init__.py", "_npy_header"),
    ("sparsesim/persistence/__init__.py", "_pid_alive"),
    ("sparsesim/persistence/__init__.py", "_reject_constant"),
    ("sparsesim/persistence/__init__.py", "_temp_name"),
    ("sparsesim/persistence/__init__.py", "_update_arrays"),
    ("sparsesim/persistence/bundles.py", "_finite"),
    ("sparsesim/tuning/__init__.py", "_Replay"),
    ("sparsesim/tuning/__init__.py", "_nbytes"),
    ("sparsesim/tuning/__init__.py", "_run_trial"),
    ("sparsesim/tuning/halving.py", "_better"),
    ("sparsesim/tuning/halving.py", "_parts"),
    ("sparsesim/tuning/halving.py", "_run_trial"),
    ("sparsesim/tuning/searches.py", "_StreamProblem"),
    ("sparsesim/tuning/searches.py", "_TaskTripletProblem"),
    ("sparsesim/tuning/searches.py", "_TripletProblem"),
    ("sparsesim/tuning/searches.py", "_check_search"),
    ("sparsesim/tuning/searches.py", "_check_threads_fit"),
    ("sparsesim/tuning/searches.py", "_search"),
    ("sparsesim/tuning/searches.py", "_trial_base"),
})


def test_no_new_private_import():
    new = sorted(set(private_imports()) - KNOWN)
    assert not new, ("private names imported across modules (make the shared name public and documented): "
                     + ", ".join(f"{f}: {n}" for f, n in new))


def test_the_known_list_only_shrinks():
    gone = sorted(KNOWN - set(private_imports()))
    assert not gone, "no longer imported; remove from KNOWN: " + ", ".join(f"{f}: {n}" for f, n in gone)


def test_the_scan_finds_a_private_import(tmp_path, monkeypatch):
    """The scan is not vacuous: a private import in a package file is found."""
    package = tmp_path / "sparsesim"
    package.mkdir()
    (package / "a.py").write_text("from .b import _hidden, public\nfrom .c import __version__\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert private_imports() == Counter({("sparsesim/a.py", "_hidden"): 1})
