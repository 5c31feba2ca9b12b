"""FeedbackLearner under faults: the snapshot path policy (checked before anything starts), a
snapshot learned on another index refused (featuriser and starting model, not only the width), a
snapshot that fails while serving (learning goes on, reported, retried), a learner thread that
fails (feedback refused with a clear error, queries still answered), and queries whose scores
overflow (refused, never remembered for /ask)."""

from __future__ import annotations

import shutil
import time

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.feature_extraction.text import TfidfVectorizer

from sparsesim.exceptions import FileFormatError, InvalidInputError, ModelMismatchError, UnsafeTargetError
from sparsesim.feedback import FeedbackLearner
from sparsesim.feedback.learner import LearnerStoppedError
from sparsesim.indexes import build_index, load_index
from sparsesim.models import BilinearSimilarity
from sparsesim.text import TextFeaturizer

WORDS_A = [f"alpha{i}" for i in range(12)]
WORDS_B = [f"beta{i}" for i in range(12)]


def _featurizer(words):
    docs = [" ".join(words[i:i + 3]) for i in range(len(words))]
    return TextFeaturizer(TfidfVectorizer(dtype=np.float64).fit(docs))


def _index(tmp_path, name, words, seed):
    """An exact index over 40 random documents of 12 features, a model with a text featuriser of
    ``words`` (12 terms) and a random sparse W of seed ``seed``."""
    rng = np.random.default_rng(0)
    X = sp.random(40, 12, density=0.3, random_state=rng, format="csr")
    W = sp.random(12, 12, density=0.2, random_state=np.random.default_rng(seed), format="csr")
    model = BilinearSimilarity(W, identity=True, featurizer=_featurizer(words))
    build_index(model, X, kind="exact").save(tmp_path / name)
    return tmp_path / name


FEEDBACK = [{"query": 0, "preferred": 3, "other": 4}, {"query": 5, "preferred": 8, "other": 1}]


def test_snapshot_path_is_checked_before_anything_starts(tmp_path):
    idx = _index(tmp_path, "idx", WORDS_A, 1)
    version_dir = next(p for p in idx.iterdir() if p.is_dir())
    for bad, match in [(tmp_path / "no" / "such" / "snap.npz", "does not exist"),
                       (version_dir / "model.npz", "inside the input"),
                       (idx / "snap.npz", "inside the input"),
                       (idx, "is the input")]:
        with pytest.raises(UnsafeTargetError, match=match):
            FeedbackLearner(idx, snapshot=bad)
    assert load_index(idx).n_documents == 40  # the index is untouched
    # an existing snapshot is resumed, or replaced only with overwrite
    with FeedbackLearner(idx, snapshot=tmp_path / "snap.npz") as fl:
        fl.submit(FEEDBACK)
    with pytest.raises(UnsafeTargetError, match="--overwrite"):
        FeedbackLearner(idx, snapshot=tmp_path / "snap.npz", resume=False)
    fl = FeedbackLearner(idx, snapshot=tmp_path / "snap.npz", resume=False, overwrite=True)
    assert fl.n_applied == 0
    fl.close(snapshot=False)


def test_snapshot_learned_on_another_index_is_refused(tmp_path):
    home = _index(tmp_path, "home", WORDS_A, 1)
    other_vocabulary = _index(tmp_path, "vocab", WORDS_B, 1)  # same width, same W, other words
    other_model = _index(tmp_path, "model", WORDS_A, 2)  # same width and words, another W
    snap = tmp_path / "snap.npz"
    with FeedbackLearner(home, snapshot=snap) as fl:
        fl.submit(FEEDBACK)
    assert BilinearSimilarity.load(snap).n_features == 12
    with pytest.raises(ModelMismatchError, match="featuriser"):
        FeedbackLearner(other_vocabulary, snapshot=snap)
    with pytest.raises(ModelMismatchError, match="another index"):
        FeedbackLearner(other_model, snapshot=snap)
    # a model file without the feedback record (not a snapshot of ours) is refused too
    plain = load_index(home).model
    plain.save(tmp_path / "plain.npz")
    with pytest.raises(FileFormatError, match="not a feedback snapshot"):
        FeedbackLearner(home, snapshot=tmp_path / "plain.npz")
    with FeedbackLearner(home, snapshot=snap) as fl:  # its own index: resumed
        assert fl.n_applied == 2 and fl.resumed_from == str(snap)


def test_failed_snapshot_is_reported_and_retried_while_learning_goes_on(tmp_path):
    idx = _index(tmp_path, "idx", WORDS_A, 1)
    snaps = tmp_path / "snaps"
    snaps.mkdir()
    fl = FeedbackLearner(idx, snapshot=snaps / "snap.npz", snapshot_every=1)
    shutil.rmtree(snaps)  # the directory disappears while serving
    fl.submit(FEEDBACK)
    fl.flush(timeout=600)
    assert fl.n_applied == 2 and fl.problems() and "snapshot" in fl.problems()[0]
    fl.submit(FEEDBACK[:1])  # feedback is still taken
    fl.flush(timeout=600)
    assert fl.n_applied == 3
    snaps.mkdir()
    fl.submit(FEEDBACK[1:])
    fl.flush(timeout=600)
    for _ in range(100):  # the retry waits a second after a failure
        if not fl.problems():
            break
        fl.submit(FEEDBACK[:1])
        fl.flush(timeout=600)
        time.sleep(0.1)
    assert fl.problems() == [] and BilinearSimilarity.load(snaps / "snap.npz").metadata["feedback"]["n_applied"] >= 4
    shutil.rmtree(snaps)
    fl.submit(FEEDBACK)
    with pytest.raises(FileFormatError, match="final snapshot .* failed"):
        fl.close()


def test_a_failed_learner_refuses_feedback_and_keeps_answering(tmp_path, monkeypatch):
    idx = _index(tmp_path, "idx", WORDS_A, 1)
    fl = FeedbackLearner(idx)
    before = fl.query(sp.csr_matrix(np.ones((1, 12))), 5)

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(fl.learner, "partial_fit_triplets", broken)
    fl.submit(FEEDBACK)
    with pytest.raises(LearnerStoppedError, match="RuntimeError: boom"):
        fl.flush(timeout=600)
    with pytest.raises(LearnerStoppedError):
        fl.submit(FEEDBACK)
    assert "stopped" in fl.problems()[0]
    after = fl.query(sp.csr_matrix(np.ones((1, 12))), 5)
    assert [list(a) for a in after[0]] == [list(b) for b in before[0]]
    with pytest.raises(LearnerStoppedError):
        fl.close(snapshot=False)


def test_overflowing_scores_are_refused_and_never_asked_about(tmp_path):
    idx = _index(tmp_path, "idx", WORDS_A, 1)
    with FeedbackLearner(idx) as fl:
        fl.query(sp.csr_matrix(np.ones((1, 12))), 5, remember=["fine"])
        huge = sp.csr_matrix(np.full((1, 12), 1e308))
        with pytest.raises(InvalidInputError, match="overflow"):
            fl.query(huge, 5, remember=["huge"])
        asked = fl.ask(10, per_query=0)
        assert asked and all(a["query"] == "fine" and np.isfinite(a["margin"]) for a in asked)
        with pytest.raises(InvalidInputError, match="too large"):
            fl.submit({"query": {"indices": list(range(12)), "values": [1e308] * 12}, "preferred": 1, "other": 2})
