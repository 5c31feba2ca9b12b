"""Progress on a terminal: loading as its own phase, bars that move during the work with an ETA,
`evaluate` reporting per block of queries, and the one-time notice that kernels are compiling."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from sparsesim.evaluation import evaluate_retrieval


def test_evaluation_reports_progress_in_small_blocks_with_the_same_scores():
    rng = np.random.default_rng(0)
    n = 300
    labels = rng.integers(0, 5, size=n)
    S = rng.random((n, n))
    calls = []
    with_progress = evaluate_retrieval(lambda rows: S[rows], labels, k=10, progress=lambda d, t: calls.append((d, t)))
    assert calls[0] == (0, n) and calls[-1] == (n, n)
    assert [d for d, _ in calls] == [0, 64, 128, 192, 256, 300]
    assert with_progress == evaluate_retrieval(lambda rows: S[rows], labels, k=10)


@pytest.mark.parametrize("name, params", [("oasis", {}), ("oasis", {"n_threads": 2}), ("sors-l1", {}),
                                          ("cwrs-d", {})])
def test_fit_reports_every_1024_triplets_and_learns_the_same_model(name, params):
    from sparsesim.data import load_dataset
    from sparsesim.registry import make_estimator

    data = load_dataset("news20-sample")
    seen = []
    with_progress = make_estimator(name, n_triplets=2100, random_state=0, **params).fit(
        data.X, data.y, progress=seen.append).model_
    assert seen == [0, 1024, 2048, 2100]
    without = make_estimator(name, n_triplets=2100, random_state=0, **params).fit(data.X, data.y).model_
    assert (with_progress.W != without.W).nnz == 0 and with_progress.W.nnz == without.W.nnz > 0


@pytest.fixture()
def notice(monkeypatch, capsys):
    """The first-compile notice with stderr taken for a terminal; unregistered afterwards."""
    from numba.core import event

    from sparsesim.cli import common

    monkeypatch.setattr(common, "_LIVE", {})

    def run(cache_dir):
        monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # the capture object of the test's call
        monkeypatch.setenv("NUMBA_CACHE_DIR", str(cache_dir))
        common._announce_first_compile()
        listener = common._LIVE.get("listener")
        try:
            from numba import njit

            for _ in range(2):  # two compilations, one notice
                njit(cache=False)(lambda x: x + 1)(int(time.time_ns() % 1000))
        finally:
            if listener is not None:
                event.unregister("numba:compile", listener)
        return capsys.readouterr().err

    return run


def test_first_compile_is_announced_once(notice, tmp_path):
    err = notice(tmp_path)
    assert err.count("first run: compiling the numeric kernels") == 1
    assert "15 s on an idle 2-core machine" in err and str(tmp_path) in err


def test_no_notice_once_kernels_are_cached(notice, tmp_path):
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "kernels.kernel-1.py311.nbi").write_bytes(b"")
    assert notice(tmp_path) == ""


def _terminal_frames(args, timeout=600):
    """Run the CLI with stderr on a pseudo-terminal; the distinct screen lines it drew, in order."""
    import pty

    master, slave = pty.openpty()
    env = dict(os.environ, COLUMNS="120", TERM="xterm")
    proc = subprocess.Popen([sys.executable, "-m", "sparsesim.cli", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    raw = b""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        raw += chunk
    proc.wait(timeout=60)
    os.close(master)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw.decode(errors="replace"))
    frames = []
    for line in re.split(r"[\r\n]", text):
        line = line.strip()
        if line and (not frames or frames[-1] != line):
            frames.append(line)
    return proc.returncode, proc.stdout.read().decode(), frames


@pytest.mark.slow
def test_training_bar_on_a_terminal_has_a_loading_phase_then_moves_with_an_eta(tmp_path):
    code, out, frames = _terminal_frames(["train", "-a", "oasis", "-d", "news20-sample", "-n", "16384",
                                          "-o", tmp_path / "m.npz"])
    assert code == 0 and "trained oasis" in out, frames[-5:]
    loading = [i for i, f in enumerate(frames) if "loading news20-sample" in f]
    training = [i for i, f in enumerate(frames) if "training oasis" in f]
    assert loading and training and loading[0] < training[0]
    counts = {int(m.group(1)) for f in frames for m in [re.search(r"training oasis.*?(\d+)/16384", f)] if m}
    assert 0 in counts and any(0 < c < 16384 for c in counts), counts  # it moved during the run
    assert any(re.search(r"ETA \d+:\d\d:\d\d", f) for f in frames if "training oasis" in f)


@pytest.mark.slow
def test_blockwise_build_bar_on_a_terminal_moves_through_conversion_and_both_passes(tmp_path):
    """index build --memory: the bar counts the converted bytes, then the documents of both passes."""
    from sklearn.datasets import dump_svmlight_file

    from sparsesim.data.synthetic import rcv1_like
    from sparsesim.learners.bilinear import OASIS

    data = rcv1_like(20_000, n_features=2_000, nnz_per_doc=40, n_classes=8, class_vocab=200, seed=0)
    dump_svmlight_file(data.X, data.y, str(tmp_path / "docs.svm"), zero_based=False)
    OASIS(n_triplets=300, random_state=0).fit(data.X[:2000], data.y[:2000]).model_.save(tmp_path / "m.npz")
    code, out, frames = _terminal_frames(["index", "build", "-m", tmp_path / "m.npz", "-d", tmp_path / "docs.svm",
                                          "--kind", "ann", "--memory", "64MiB", "-o", tmp_path / "idx"])
    assert code == 0 and "block by block" in out, frames[-5:]
    counts = [(int(m.group(1)), int(m.group(2))) for f in frames
              for m in [re.search(r"building ann index block by block.*?(\d+)/(\d+)", f)] if m]
    documents = [done for done, total in counts if total == 40_000]
    assert documents and any(0 < done < 40_000 for done in documents), counts  # it moved during the passes


@pytest.mark.slow
def test_demo_bar_names_each_compared_method_as_it_is_fitted():
    code, out, frames = _terminal_frames(["demo", "--triplets", "2000"])
    assert code == 0 and "best MAP on this split" in out, frames[-5:]
    training = [i for i, f in enumerate(frames) if "training OASIS" in f]
    fitting = [min([i for i, f in enumerate(frames) if f"fitting {name}" in f] or [-1])
               for name in ("proxy-ssi", "cosine", "lsa", "logreg-scores")]
    assert training and -1 not in fitting, frames
    assert training[0] < fitting[0] < fitting[1] < fitting[2] < fitting[3]
