"""``kill -9`` at random moments of the writes not covered elsewhere -- a feedback snapshot, ``tune
--out``, ``experiment --out-dir`` and ``index calibrate`` -- leaves the old complete version or the
new one, and the next write sweeps what the killed one left (``train --out``, ``index build`` and
``index add`` are killed in tests/test_safety.py and tests/fuzz_campaign.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from sparsesim.data.synthetic import rcv1_like
from sparsesim.indexes import build_index, load_index
from sparsesim.learners.bilinear import OASIS
from sparsesim.models import BilinearSimilarity
from sparsesim.persistence import target_lock

pytestmark = pytest.mark.slow

EXE = [sys.executable, "-m", "sparsesim.cli"]
TRIALS = 2


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from sklearn.datasets import dump_svmlight_file

    root = tmp_path_factory.mktemp("kills")
    data = rcv1_like(400, n_features=300, nnz_per_doc=20, n_classes=4, class_vocab=60, seed=1)
    dump_svmlight_file(data.X, data.y, str(root / "small.svm"), zero_based=False)
    model = OASIS(n_triplets=500, random_state=0).fit(data.X, data.y).model_
    model.save(root / "old.npz")
    build_index(model, data.X, kind="ann", heavy_min_nnz=5, calibration_size=100).save(root / "ann")
    build_index(model, data.X, kind="exact").save(root / "exact")
    return root


def _run(args, cwd) -> float:
    """Run to completion; its duration (what the random kill moments are drawn from)."""
    start = time.perf_counter()
    res = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    return time.perf_counter() - start


def _kill_after(args, cwd, seconds: float) -> None:
    proc = subprocess.Popen(args, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(seconds)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)


def _age_temporaries(directory: Path) -> list:
    """The temporaries a killed writer left, made old enough for the next write to sweep them."""
    past = time.time() - 60
    left = [p for p in directory.iterdir() if ".sparsesim-" in p.name]
    for p in left:
        os.utime(p, (past, past))
    return left


def _temporaries(directory: Path) -> list:
    return [p.name for p in directory.iterdir() if ".sparsesim-" in p.name or p.name.endswith(".lock")]


def test_kill_during_tune_out(setup, tmp_path):
    root = setup
    args = EXE + ["tune", "-a", "oasis", "-d", str(root / "small.svm"), "-n", "3000", "-g", "C=0.1,1", "-o"]
    full = _run(args + [str(tmp_path / "ref.npz")], tmp_path)
    new = BilinearSimilarity.load(tmp_path / "ref.npz")
    old = (root / "old.npz").read_bytes()
    rng = np.random.default_rng(1)
    for trial in range(TRIALS):
        target = tmp_path / f"t{trial}" / "model.npz"
        target.parent.mkdir()
        shutil.copy(root / "old.npz", target)
        _kill_after(args + [str(target)], tmp_path, float(rng.uniform(0.5, 1.05) * full))
        if target.read_bytes() != old:  # else the old version, untouched
            got = BilinearSimilarity.load(target)  # complete: checksum and structure verified
            assert got.nnz() == new.nnz() and abs(got.W - new.W).max() == 0
        _age_temporaries(target.parent)
        # the next write through the CLI's path (which holds the target's lock, left behind by a
        # writer killed while holding it, and removes it on release) sweeps them
        with target_lock(target):
            BilinearSimilarity.load(root / "old.npz").save(target)
        assert _temporaries(target.parent) == []


def test_kill_during_experiment_out_dir(setup, tmp_path):
    root = setup
    args = EXE + ["experiment", "-d", str(root / "small.svm"), "-a", "oasis", "-n", "2000", "--out-dir"]
    full = _run(args + [str(tmp_path / "ref")], tmp_path)
    reference = sorted(p.name for p in (tmp_path / "ref").iterdir())
    assert "sors_results.json" in reference
    rng = np.random.default_rng(2)
    for trial in range(TRIALS):
        out = tmp_path / f"e{trial}"
        shutil.copytree(tmp_path / "ref", out)
        old = {p.name: p.read_bytes() for p in out.iterdir()}
        _kill_after(args + [str(out)], tmp_path, float(rng.uniform(0.5, 1.05) * full))
        for p in out.iterdir():
            if ".sparsesim-" in p.name:
                continue  # a killed writer's temporary: swept below
            assert p.name in reference
            if p.suffix == ".json" and p.read_bytes() != old[p.name]:
                json.loads(p.read_text())  # a complete new report
            if p.suffix == ".png":
                assert p.read_bytes().endswith(b"IEND\xaeB`\x82")  # a complete image
        _age_temporaries(out)
        _run(args + [str(out)], tmp_path)
        assert _temporaries(out) == []
        assert sorted(p.name for p in out.iterdir()) == reference


def test_kill_during_index_calibrate(setup, tmp_path):
    root = setup
    shutil.copytree(root / "ann", tmp_path / "ref")
    args = EXE + ["index", "calibrate", "--target-recall", "0.8", "--index"]
    full = _run(args + [str(tmp_path / "ref")], tmp_path)
    old_target = load_index(root / "ann").calibration_["target_recall"]
    rng = np.random.default_rng(3)
    outcomes = set()
    for trial in range(TRIALS):
        target = tmp_path / f"i{trial}"
        shutil.copytree(root / "ann", target)
        _kill_after(args + [str(target)], tmp_path, float(rng.uniform(0.3, 1.05) * full))
        index = load_index(target, verify=False)  # never refused: the old or the new complete version
        outcomes.add(index.calibration_["target_recall"])
        assert index.calibration_["target_recall"] in (old_target, 0.8)
        _age_temporaries(target)
        _run(args + [str(target)], tmp_path)
        manifest = json.loads((target / "manifest.json").read_text())
        assert sorted(p.name for p in target.iterdir()) == sorted(["manifest.json", manifest["data_dir"]])
    assert _temporaries(tmp_path) == []


_SNAPSHOT_SCRIPT = """
import sys
import numpy as np
from sparsesim.feedback import FeedbackLearner

with FeedbackLearner(sys.argv[1], snapshot=sys.argv[2], snapshot_every=1) as learner:
    ids = learner.index.ids_
    rng = np.random.default_rng(int(sys.argv[3]))
    print("ready", flush=True)
    while True:  # one triplet, then a snapshot: most of the time is spent writing it
        a, p, o = rng.choice(len(ids), 3, replace=False)
        learner.submit([{"query": int(ids[a]), "preferred": int(ids[p]), "other": int(ids[o])}])
        learner.flush()
        learner.snapshot()
"""


def test_kill_during_feedback_snapshot(setup, tmp_path):
    root = setup
    snap = tmp_path / "snap.npz"
    rng = np.random.default_rng(4)
    applied = []
    for trial in range(TRIALS + 1):
        proc = subprocess.Popen([sys.executable, "-c", _SNAPSHOT_SCRIPT, str(root / "exact"), str(snap), str(trial)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        time.sleep(float(rng.uniform(1.0, 4.0)))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        model = BilinearSimilarity.load(snap)  # complete: checksum and structure verified
        applied.append(model.metadata["feedback"]["n_applied"])
        # the next run resumes from it (and its first snapshot sweeps the killed writer's temporary)
        _age_temporaries(tmp_path)
    # each run resumed from the last complete snapshot and went on from there
    assert all(b >= a for a, b in zip(applied, applied[1:])) and applied[-1] > applied[0] > 0
    from sparsesim.feedback import FeedbackLearner

    with FeedbackLearner(root / "exact", snapshot=snap, snapshot_every=1) as learner:
        assert learner.n_applied == applied[-1]
        learner.snapshot()
    assert _temporaries(tmp_path) == []
