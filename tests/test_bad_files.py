"""Hostile files and corners (issue 40: families 7, 10, 13): metadata a model file cannot hold,
query files that declare another width, index parameters that clash with options, corpora whose
scores overflow, and the library corners (fitted checks, complex W, save paths)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import scipy.sparse as sp

from clitools import run_cli
from sparsesim.exceptions import (FileFormatError, InvalidInputError, ResourceLimitError, SparsesimError,
                                  UnsafeTargetError)
from sparsesim.models import BilinearSimilarity


# --------------------------------------------------------------------------- family 7: metadata limits
def _long_label_csv(path, n=300, width=20_000):
    rows = ["text,label"] + [f"word{i % 7} other{i % 3},{chr(97 + i % 2) * width}{i}" for i in range(n)]
    path.write_text("\n".join(rows) + "\n")


def test_train_refuses_label_names_a_model_cannot_hold_before_training(tmp_path, monkeypatch, capsys):
    _long_label_csv(tmp_path / "t.csv")
    out = tmp_path / "m.npz"
    from sparsesim.learners.base import TripletLearner

    def no_fit(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(TripletLearner, "fit", no_fit)
    code, _, err = run_cli(["train", "-a", "oasis", "-d", tmp_path / "t.csv", "-n", "100", "-o", out],
                           monkeypatch, capsys)
    assert code == 2 and err.startswith("error:") and "metadata" in err and "class_names" in err
    assert not out.exists()


def test_no_model_file_is_written_that_a_read_refuses(tmp_path):
    model = BilinearSimilarity(sp.identity(3, format="csr"), metadata={"class_names": {"0": "x" * (5 << 20)}})
    with pytest.raises(ResourceLimitError, match="metadata would take"):
        model.save(tmp_path / "m.npz")
    deep = BilinearSimilarity(sp.identity(3, format="csr"), metadata={"extra": json.loads("[" * 80 + "]" * 80)})
    with pytest.raises(ResourceLimitError, match="nested deeper"):
        deep.save(tmp_path / "m.npz")
    assert os.listdir(tmp_path) == []
    fits = BilinearSimilarity(sp.identity(3, format="csr"), metadata={"class_names": {"0": "x" * (3 << 20)}})
    fits.save(tmp_path / "m.npz")
    assert BilinearSimilarity.load(tmp_path / "m.npz").metadata["class_names"]["0"] == "x" * (3 << 20)


# --------------------------------------------------------------------------- family 10: declared widths
@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("model")
    d = 300
    W = sp.random(d, d, density=0.01, format="csr", random_state=0) * 0.1
    model = BilinearSimilarity(W, metadata={"algorithm": "test"})
    model.save(root / "m.npz")
    from sklearn.datasets import dump_svmlight_file

    X = sp.random(40, d, density=0.05, format="csr", random_state=1)
    dump_svmlight_file(X, np.arange(40) % 3, str(root / "corpus.svm"), zero_based=True)
    return root, model, X


@pytest.mark.parametrize("width", [256, 299, 301, 5000])
def test_a_query_file_that_declares_another_width_is_refused(small_model, tmp_path, monkeypatch, capsys, width):
    root, _, _ = small_model
    sp.save_npz(tmp_path / "q.npz", sp.random(5, width, density=0.1, format="csr", random_state=0))
    code, out, err = run_cli(["query", "-m", root / "m.npz", "--corpus", root / "corpus.svm", "--queries",
                              tmp_path / "q.npz", "-k", "3"], monkeypatch, capsys)
    assert code == 2 and f"a matrix of {width} features" in err and "300 are expected" in err and out == ""


def test_a_query_file_of_the_declared_width_is_answered(small_model, tmp_path, monkeypatch, capsys):
    root, _, _ = small_model
    sp.save_npz(tmp_path / "q.npz", sp.random(5, 300, density=0.1, format="csr", random_state=0))
    code, out, _ = run_cli(["query", "-m", root / "m.npz", "--corpus", root / "corpus.svm", "--queries",
                            tmp_path / "q.npz", "-k", "3", "--json"], monkeypatch, capsys)
    assert code == 0 and len(out.splitlines()) == 5


# --------------------------------------------------------------------------- family 13: library and CLI corners
def test_index_parameters_that_are_options_are_refused(small_model, tmp_path, monkeypatch, capsys):
    root, _, _ = small_model
    for param in ("n_jobs=abc", "n_jobs=2", "kind=ann"):
        code, _, err = run_cli(["index", "build", "-m", root / "m.npz", "-d", root / "corpus.svm", "-o",
                                tmp_path / "idx", "-p", param], monkeypatch, capsys)
        assert code == 2 and "cannot be given as an index parameter" in err, err
    assert not (tmp_path / "idx").exists()


@pytest.mark.parametrize("kind,scale", [("exact", 1e308), ("exact", 1e160), ("ann", 1e100), ("ann", 1e308)])
def test_a_corpus_whose_scores_overflow_is_refused_before_writing(small_model, tmp_path, monkeypatch, capsys,
                                                                   kind, scale):
    from sklearn.datasets import dump_svmlight_file

    root, _, X = small_model
    big = X.copy()
    big.data = np.full_like(big.data, scale)
    dump_svmlight_file(big, np.arange(40) % 3, str(tmp_path / "big.svm"), zero_based=True)
    code, _, err = run_cli(["index", "build", "-m", root / "m.npz", "-d", tmp_path / "big.svm", "-o", tmp_path / "idx",
                            "--kind", kind], monkeypatch, capsys)
    assert code == 2 and "values too large to index" in err, err
    assert not (tmp_path / "idx").exists()


def test_index_add_refuses_documents_whose_scores_overflow(small_model, tmp_path):
    from sparsesim.indexes import build_index, load_index

    _, model, X = small_model
    build_index(model, X, kind="exact").save(tmp_path / "idx")
    big = X[:3].copy()
    big.data[:] = 1e308
    index = load_index(tmp_path / "idx")
    with pytest.raises(InvalidInputError, match="values too large to index"):
        index.add(big)
    assert index.n_documents == 40 and load_index(tmp_path / "idx").n_documents == 40
    index.add(X[:3] * 1e6, ids=[100, 101, 102])  # large but far from overflowing: accepted
    assert np.all(np.isfinite(index.query(X[:2], top_k=5)[1]))


def test_a_normalising_model_gives_unit_rows_for_huge_and_tiny_values(small_model):
    from sparsesim.indexes import build_index

    _, model, X = small_model
    normed = BilinearSimilarity(model.W, normalize=True)
    for factor in (1e300, 1e-300):
        scaled = X.copy()
        scaled.data = scaled.data * factor
        np.testing.assert_allclose(normed.score_matrix(scaled, scaled), normed.score_matrix(X, X), rtol=1e-9, atol=1e-12)
        ids, scores = build_index(normed, scaled).query(scaled[:3], top_k=5)
        ref_ids, ref = build_index(normed, X).query(X[:3], top_k=5)
        np.testing.assert_allclose(scores, ref, rtol=1e-9)


def test_online_classifiers_before_fit_raise_sklearns_not_fitted_error():
    from sklearn.exceptions import NotFittedError

    from sparsesim.learners.kernel_pa import KernelPassiveAggressive
    from sparsesim.learners.linear_pa import PassiveAggressiveBinary
    from sparsesim.learners.transfer_source import KNNSourceHypothesis
    from sparsesim.registry import ALGORITHMS, make_estimator

    X = np.random.default_rng(0).normal(size=(3, 5))
    names = sorted(n for n, s in ALGORITHMS.items() if s.kind == "transfer")
    assert names
    for est in [make_estimator(n) for n in names] + [KernelPassiveAggressive(), KNNSourceHypothesis()]:
        for method in ("predict", "decision_function"):
            with pytest.raises(NotFittedError) as info:
                getattr(est, method)(X)
            assert isinstance(info.value, SparsesimError)
    with pytest.raises(NotFittedError):
        PassiveAggressiveBinary().predict(sp.csr_matrix(X))


def test_complex_w_is_refused():
    with pytest.raises(InvalidInputError, match="real numbers"):
        BilinearSimilarity(sp.identity(3, format="csr", dtype=np.complex128))


def test_zero_triplets_fits_the_starting_point():
    from sparsesim.registry import make_estimator

    X = sp.random(12, 7, density=0.5, format="csr", random_state=0)
    model = make_estimator("oasis", n_triplets=0).fit(X, np.repeat([0, 1, 2], 4)).model_
    assert model.W.nnz == 0 and model.identity  # M = I: the dot product, as documented


def test_model_save_paths_give_project_errors(tmp_path, monkeypatch):
    model = BilinearSimilarity(sp.identity(3, format="csr"))
    with pytest.raises(UnsafeTargetError, match="is a directory"):
        model.save(tmp_path)
    with pytest.raises(FileFormatError, match="cannot write"):
        model.save(tmp_path / ("a" * 300))
    monkeypatch.chdir(tmp_path)
    for empty in ("", "."):
        with pytest.raises(UnsafeTargetError, match="not a file name"):
            model.save(empty)
    long_ok = tmp_path / ("b" * 250)  # a name near the limit still leaves room for the temporary
    model.save(long_ok)
    assert BilinearSimilarity.load(long_ok).n_features == 3


def test_cli_corners_are_refused(monkeypatch, capsys):
    code, _, err = run_cli(["experiment", "-d", "news20-sample", "-a", "dot", "--protocol", ""], monkeypatch, capsys)
    assert code == 2 and "unknown protocol ''" in err
    code, _, err = run_cli(["experiment", "-d", "news20-sample", "-a", "dot", "-p", ".C=1"], monkeypatch, capsys)
    assert code == 2 and "empty algorithm name" in err


@pytest.mark.parametrize("identity", [True, False])
def test_the_norm_bound_holds_for_every_model(identity):
    for d, density in ((40, 0.3), (300, 0.02)):
        W = sp.random(d, d, density=density, format="csr", random_state=d)
        W.data -= 0.5
        model = BilinearSimilarity(W, identity=identity)
        assert np.linalg.norm(model.M.toarray(), 2) <= np.exp(model.log_norm_bound()) * (1 + 1e-12)
    assert BilinearSimilarity(sp.csr_matrix((5, 5)), identity=False).log_norm_bound() == -np.inf
