"""The resumable block-wise ann build (``build_ann_blockwise(..., resume=True)``): a build stopped
after a block, during calibration or before saving continues from its checkpoint to the same index,
byte for byte; a checkpoint of another build or a damaged one is reported and the build starts over;
nothing is left behind without resume or after success."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.data.synthetic import write_rcv1_like
from sparsesim.exceptions import ConcurrentWriteError, FileFormatError, UnsafeTargetError
from sparsesim.indexes.ann_blockwise import build_ann_blockwise
from sparsesim.learners.bilinear import OASIS
from sparsesim.persistence.npy_stream import NpyAppender
from test_ann_blockwise import small_budget, version_files

N = 1200
PARAMS = dict(target_recall=None, n_postings=32, sparse_pool=40, postings_per_feature=64)


class Stop(Exception):
    """Stands for the end of a session: the process stops there."""


def stop_at(stage, done=None, calls=None):
    def progress(s, d, total):
        if calls is not None:
            calls.append((s, d, total))
        if s == stage and (done is None or d >= done):
            raise Stop(f"{s} {d}")
    return progress


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("resume")
    corpus = write_rcv1_like(tmp / "corpus", N, seed=5, block_size=500)
    X = corpus.rows(0, N)
    X = sp.csr_matrix((X.data, X.indices, X.indptr.astype(np.int32)), shape=X.shape)
    y = corpus.labels()
    model = OASIS(n_triplets=200, random_state=0).fit(X[:500], y[:500]).model_
    other = OASIS(n_triplets=200, random_state=1).fit(X[:500], y[:500]).model_
    budget = small_budget(model, corpus, 256, **PARAMS)  # 5 blocks of 256 documents, the last one short
    reference = build_ann_blockwise(model, corpus, tmp / "reference", memory=budget, **PARAMS)
    assert reference.plan_["block_rows"] == 256
    return tmp, corpus, model, other, budget


def leftovers(tmp, name):
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith(name) or p.name.startswith("." + name))


def test_stopped_builds_resume_to_the_uninterrupted_index(setup):
    tmp, corpus, model, _, budget = setup
    target = tmp / "stopped"
    with pytest.raises(Stop):  # stops after its second block of the second pass
        build_ann_blockwise(model, corpus, target, memory=budget, resume=True,
                            progress=stop_at("heavy_values_and_postings", 512), **PARAMS)
    stage = tmp / "stopped.partial"
    state = json.loads((stage / "checkpoint.json").read_text())
    assert state["done"] == 512 and not target.exists()
    assert sorted(p.name for p in stage.glob("heaps.*")) == ["heaps.512.docs.npy", "heaps.512.vals.npy"]
    # Z holds exactly the rows of the documents done (appended and fsynced before the checkpoint)
    width = state["z_width"]
    assert os.path.getsize(stage / "heavy.Z.npy") == NpyAppender.header_bytes(np.float64, (width,)) + 8 * 512 * width

    calls = []
    with pytest.raises(Stop):  # the second session: the rest of the second pass, then stops in calibration
        build_ann_blockwise(model, corpus, target, memory=budget, resume=True, n_jobs=2,
                            progress=stop_at("encode_postings", 1, calls), **PARAMS)
    assert calls[0] == ("resume", 512, N)
    assert [c[1] for c in calls if c[0] == "heavy_values_and_postings"] == [768, 1024, N]
    assert not [c for c in calls if c[0] == "prepare_corpus"]  # the corpus pass is not done again

    calls = []  # the third session: nothing left of the passes; encodes, saves
    built = build_ann_blockwise(model, corpus, target, memory=budget, resume=True,
                                progress=lambda *c: calls.append(c), **PARAMS)
    assert calls[0] == ("resume", N, N) and not [c for c in calls if c[0] == "heavy_values_and_postings"]
    assert built.resume_["resumed_at"] == N and built.resume_["restarted_because"] is None
    assert version_files(target) == version_files(tmp / "reference")
    assert leftovers(tmp, "stopped") == ["stopped"]  # the staging directory and its lock are gone


def test_stopped_before_saving_and_calibrated_resumes_to_the_same_index(setup):
    tmp, corpus, model, _, budget = setup
    params = dict(PARAMS, target_recall=0.9, calibration_size=40)
    fresh = build_ann_blockwise(model, corpus, tmp / "cal-fresh", memory=budget, **params)
    with pytest.raises(Stop):  # the save's hard links are made, the index is not written yet
        build_ann_blockwise(model, corpus, tmp / "cal", memory=budget, resume=True, progress=stop_at("save"),
                            **params)
    assert (tmp / "cal.partial" / "save").is_dir() and not (tmp / "cal").exists()
    built = build_ann_blockwise(model, corpus, tmp / "cal", memory=budget, resume=True, **params)
    assert built.resume_["resumed_at"] == N
    assert version_files(tmp / "cal") == version_files(tmp / "cal-fresh")
    for key in ("rows", "hits", "recall", "setting", "met"):
        assert built.calibration_[key] == fresh.calibration_[key], key


def test_stopped_while_saving_resumes_from_the_staged_files(setup, monkeypatch):
    from sparsesim.indexes import storage_write

    tmp, corpus, model, _, budget = setup

    def stop(*args, **kwargs):  # the writer has moved the staged arrays into its version directory
        raise Stop("saving")

    with monkeypatch.context() as patch:
        patch.setattr(storage_write, "file_digests", stop)
        with pytest.raises(Stop):
            build_ann_blockwise(model, corpus, tmp / "saving", memory=budget, resume=True, **PARAMS)
    assert not (tmp / "saving").exists() and (tmp / "saving.partial" / "heavy.Z.npy").is_file()
    built = build_ann_blockwise(model, corpus, tmp / "saving", memory=budget, resume=True, **PARAMS)
    assert built.resume_["resumed_at"] == N
    assert version_files(tmp / "saving") == version_files(tmp / "reference")


def test_another_model_corpus_plan_or_parameters_start_over(setup):
    tmp, corpus, model, other, _ = setup
    target = tmp / "changed"
    memory = max(small_budget(m, corpus, 256, **PARAMS) for m in (model, other)) + (1 << 20)  # 256 rows for N - 1
    with pytest.raises(Stop):
        build_ann_blockwise(model, corpus, target, memory=memory, resume=True,
                            progress=stop_at("heavy_values_and_postings", 256), **PARAMS)
    build = dict(model=other, memory=memory, n_documents=None, **PARAMS)
    changes = [("the model", {}), ("the index parameters", dict(sparse_pool=41)),
               ("the number of documents", dict(n_documents=N - 1)),
               ("the build plan", dict(memory=small_budget(other, corpus, 768, **PARAMS)))]
    for reason, change in changes:  # each change against the checkpoint the step before left
        build.update(change)
        calls = []
        with pytest.warns(UserWarning, match="starting over") as caught, pytest.raises(Stop):
            build_ann_blockwise(corpus=corpus, directory=target, resume=True,
                                progress=stop_at("heavy_values_and_postings", 256, calls), **build)
        assert reason in str(caught[0].message)
        assert calls[0][:2] == ("restart", 0) and calls[1][0] == "prepare_corpus"
    # the corpus files touched since: the same build, another corpus identity
    stat = os.stat(corpus.files["data"])
    os.utime(corpus.files["data"], ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    try:
        with pytest.warns(UserWarning, match="the corpus"):
            built = build_ann_blockwise(corpus=corpus, directory=target, resume=True, **build)
    finally:
        os.utime(corpus.files["data"], ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert "the corpus" in built.resume_["restarted_because"] and built.resume_["resumed_at"] is None
    assert leftovers(tmp, "changed") == ["changed"]


@pytest.mark.parametrize("damage", ["truncated heaps", "checkpoint text", "short Z"])
def test_damaged_checkpoint_starts_over_with_a_message(setup, damage):
    tmp, corpus, model, _, budget = setup
    target = tmp / f"damaged-{damage.replace(' ', '-')}"
    with pytest.raises(Stop):
        build_ann_blockwise(model, corpus, target, memory=budget, resume=True,
                            progress=stop_at("heavy_values_and_postings", 512), **PARAMS)
    stage = target.with_name(target.name + ".partial")
    if damage == "truncated heaps":
        path = stage / "heaps.512.vals.npy"
        os.truncate(path, os.path.getsize(path) // 2)
    elif damage == "checkpoint text":
        (stage / "checkpoint.json").write_text('{"done": 51')
    else:
        os.truncate(stage / "heavy.Z.npy", os.path.getsize(stage / "heavy.Z.npy") - 8)
    calls = []
    with pytest.warns(UserWarning, match="damaged.*starting over"):
        built = build_ann_blockwise(model, corpus, target, memory=budget, resume=True,
                                    progress=lambda *c: calls.append(c), **PARAMS)
    assert calls[0] == ("restart", 0, N) and "damaged" in built.resume_["restarted_because"]
    assert version_files(target) == version_files(tmp / "reference")


def test_rows_appended_past_the_checkpoint_are_cut_off(setup):
    tmp, corpus, model, _, budget = setup
    target = tmp / "past"
    with pytest.raises(Stop):
        build_ann_blockwise(model, corpus, target, memory=budget, resume=True,
                            progress=stop_at("heavy_values_and_postings", 256), **PARAMS)
    with open(tmp / "past.partial" / "heavy.Z.npy", "ab") as handle:  # a block written, its checkpoint not
        handle.write(np.arange(1000, dtype=np.float64).tobytes())
    built = build_ann_blockwise(model, corpus, target, memory=budget, resume=True, **PARAMS)
    assert built.resume_["resumed_at"] == 256 and built.resume_["checkpoints"] == 4
    assert version_files(target) == version_files(tmp / "reference")


def test_without_resume_or_before_the_first_checkpoint_nothing_is_left(setup):
    tmp, corpus, model, _, budget = setup
    with pytest.raises(Stop):
        build_ann_blockwise(model, corpus, tmp / "plain", memory=budget,
                            progress=stop_at("heavy_values_and_postings", 512), **PARAMS)
    assert leftovers(tmp, "plain") == []
    with pytest.raises(Stop):  # resumable, but stopped in the corpus pass: nothing to resume from
        build_ann_blockwise(model, corpus, tmp / "early", memory=budget, resume=True,
                            progress=stop_at("prepare_corpus", 512), **PARAMS)
    assert leftovers(tmp, "early") == []
    # the staging of a build without resume whose process was killed: a resumable build of the target removes it
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp / f".early.blocks.sparsesim-{int(dead.stdout)}-abc.tmp"
    stale.mkdir()
    os.utime(stale, (1e9, 1e9))
    with pytest.raises(Stop):
        build_ann_blockwise(model, corpus, tmp / "early", memory=budget, resume=True,
                            progress=stop_at("prepare_corpus", 512), **PARAMS)
    assert leftovers(tmp, "early") == []


def test_staging_directory_of_someone_else_or_in_use_is_refused(setup):
    tmp, corpus, model, _, budget = setup
    (tmp / "theirs.partial").mkdir()
    (tmp / "theirs.partial" / "notes.txt").write_text("mine")
    with pytest.raises(UnsafeTargetError, match="did not create"):
        build_ann_blockwise(model, corpus, tmp / "theirs", memory=budget, resume=True, **PARAMS)
    assert (tmp / "theirs.partial" / "notes.txt").read_text() == "mine"
    # another process building the same index holds the staging directory's lock
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(tmp / ".busy.partial.lock")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(ConcurrentWriteError, match="another process"):
            build_ann_blockwise(model, corpus, tmp / "busy", memory=budget, resume=True, **PARAMS)
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    assert not (tmp / "busy.partial").exists()


HOLD_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(120)
"""


def test_appender_reopens_after_its_synced_rows(tmp_path):
    path = tmp_path / "z.npy"
    out = NpyAppender(path, np.float64, (3,))
    out.append(np.arange(6.0).reshape(2, 3))
    assert out.sync() == 2
    out.append(np.full((1, 3), -1.0))  # written after the sync: not counted by a checkpoint
    out.release()  # the process stops there
    again = NpyAppender.reopen(path, np.float64, (3,), rows=2)
    again.append(np.arange(6.0, 9.0).reshape(1, 3))
    again.close()
    assert np.load(path).tolist() == np.arange(9.0).reshape(3, 3).tolist()
    with pytest.raises(FileFormatError, match="fewer"):
        NpyAppender.reopen(path, np.float64, (3,), rows=4)
