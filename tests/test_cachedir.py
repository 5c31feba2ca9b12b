"""The compiled-code cache follows the source of every module that defines compiled code."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from sparsesim.cachedir import kernel_source_digest, prune_stale


def _package(root, helper_body: str):
    (root / "engine").mkdir(parents=True, exist_ok=True)
    (root / "engine" / "kernel.py").write_text("import numba\nfrom .helpers import step\n")
    (root / "engine" / "helpers.py").write_text(f"import numba\n\n@numba.njit\ndef step(v):\n    {helper_body}\n")
    (root / "service.py").write_text("def serve():\n    return 1\n")


def test_a_changed_helper_module_changes_the_digest_an_unrelated_module_does_not(tmp_path):
    _package(tmp_path, "return v + 1")
    first = kernel_source_digest([tmp_path])
    (tmp_path / "service.py").write_text("def serve():\n    return 2\n")
    assert kernel_source_digest([tmp_path]) == first  # no compiled code there: nothing recompiles
    # the kernel's own file is untouched; numba alone would reuse its machine code
    (tmp_path / "engine" / "helpers.py").write_text("import numba\n\n@numba.njit\ndef step(v):\n    return v + 2\n")
    second = kernel_source_digest([tmp_path])
    assert second != first
    _package(tmp_path, "return v + 1")  # switching back finds the first directory again
    assert kernel_source_digest([tmp_path]) == first


def test_unused_cache_directories_are_pruned_and_the_current_one_kept(tmp_path):
    keep, old, recent = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for path in (keep, old, recent):
        path.mkdir()
        (path / "f.nbi").write_bytes(b"x")
    long_ago = time.time() - 90 * 86400
    os.utime(old, (long_ago, long_ago))
    os.utime(keep, (long_ago, long_ago))
    assert prune_stale(tmp_path, keep) == [old]
    assert keep.exists() and recent.exists() and not old.exists()


def test_the_default_directory_is_per_digest_and_an_explicit_one_is_kept(tmp_path):
    code = "import os, sparsesim; print(os.environ['NUMBA_CACHE_DIR'])"
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    path = out.stdout.strip()
    assert path == str(tmp_path / "sparsesim" / "numba" / kernel_source_digest())
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "mine")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(tmp_path / "mine")
