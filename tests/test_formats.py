"""Your own data in: svmlight zero/one-based (auto-detected, recorded, checked), compressed files,
scipy .npz + labels, text folders (load_files layout), CSV/JSONL with named columns, string labels."""

from __future__ import annotations

import bz2
import gzip
import json

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import dump_svmlight_file

from sparsesim.data import load_dataset
from sparsesim.exceptions import InvalidInputError
from sparsesim.models import BilinearSimilarity
from clitools import run_cli


@pytest.fixture(scope="module")
def sample():
    data = load_dataset("news20-sample")
    # keep a small slice; make sure feature 0 and the last feature are used so widths agree
    rows = np.arange(0, 400, 2)
    X = data.X[rows].tolil()
    X[0, 0] = 0.5
    X[1, data.n_features - 1] = 0.25
    return sp.csr_matrix(X), data.y[rows]


@pytest.fixture(scope="module")
def svm_pair(tmp_path_factory, sample):
    X, y = sample
    d = tmp_path_factory.mktemp("svm")
    zero, one = d / "zero.svm", d / "one.svm"
    dump_svmlight_file(X, y, str(zero))  # scikit-learn's default: zero-based
    dump_svmlight_file(X, y, str(one), zero_based=False)
    return zero, one


def test_auto_detects_base_and_records_it(svm_pair, sample):
    X, y = sample
    zero, one = svm_pair
    a, b = load_dataset(zero), load_dataset(one)
    assert a.info["zero_based"] is True and b.info["zero_based"] is False
    assert a.X.shape == b.X.shape == X.shape
    assert abs(a.X - X).max() < 1e-12 and (a.X != b.X).nnz == 0
    np.testing.assert_array_equal(a.y, y)


def test_explicit_base_that_contradicts_the_file_is_refused(svm_pair):
    zero, one = svm_pair
    with pytest.raises(InvalidInputError, match="index 0"):
        load_dataset(zero, zero_based=False)
    # a one-based file read zero-based is a choice the file cannot contradict: width grows by one
    assert load_dataset(one, zero_based=True).n_features == load_dataset(one).n_features + 1


def test_query_file_with_a_contradicting_base_is_an_error(svm_pair):
    zero, one = svm_pair
    # the model was trained one-based; a file using feature 0 would shift every feature
    with pytest.raises(InvalidInputError, match="shift by one"):
        load_dataset(zero, expect_zero_based=False)
    with pytest.raises(InvalidInputError, match="shift by one"):
        load_dataset(one, zero_based=True, expect_zero_based=False)
    # a zero-based model reads a file without index 0 zero-based (no shift)
    data = load_dataset(one, expect_zero_based=True)
    assert data.info["zero_based"] is True


@pytest.mark.parametrize("opener,suffix", [(gzip.open, ".gz"), (bz2.open, ".bz2")])
def test_compressed_zero_based(svm_pair, tmp_path, opener, suffix):
    zero, _ = svm_pair
    path = tmp_path / ("zero.svm" + suffix)
    with opener(path, "wb") as handle:
        handle.write(zero.read_bytes())
    data = load_dataset(path)
    assert data.info["zero_based"] is True and (data.X != load_dataset(zero).X).nnz == 0


def test_zero_based_file_trains_evaluates_indexes_queries_like_one_based(svm_pair, tmp_path, monkeypatch, capsys):
    zero, one = svm_pair
    outputs = {}
    for name, path in (("zero", zero), ("one", one)):
        model = tmp_path / f"{name}.npz"
        code, out, err = run_cli(["train", "-a", "oasis", "-d", path, "-n", "300", "--seed", "0", "-o", model, "--json"],
                                 monkeypatch, capsys)
        assert code == 0, err
        code, ev, err = run_cli(["evaluate", "-m", model, "-d", path, "--json"], monkeypatch, capsys)
        assert code == 0, err
        idx = tmp_path / f"{name}-index"
        code, _, err = run_cli(["index", "build", "-m", model, "-d", path, "-o", idx], monkeypatch, capsys)
        assert code == 0, err
        code, q, err = run_cli(["query", "--index", idx, "--queries", path, "-k", "5", "--json"], monkeypatch, capsys)
        assert code == 0, err
        outputs[name] = (BilinearSimilarity.load(model), json.loads(ev), q)
    (mz, ez, qz), (mo, eo, qo) = outputs["zero"], outputs["one"]
    assert mz.metadata["zero_based"] is True and mo.metadata["zero_based"] is False
    assert (mz.W != mo.W).nnz == 0
    assert ez["map"] == eo["map"]
    assert qz == qo
    # the zero-based model's index refuses a one-based query file? no: nothing says it is one-based.
    # the one-based model's index refuses the zero-based file (it uses index 0): never a silent shift
    code, out, err = run_cli(["query", "--index", tmp_path / "one-index", "--queries", zero, "--json"], monkeypatch, capsys)
    assert code == 2 and err.startswith("error: ") and "shift by one" in err and out == ""


def test_npz_with_string_labels_and_ids(tmp_path, sample):
    X, y = sample
    path = tmp_path / "corpus.npz"
    sp.save_npz(path, X)
    names = np.array(["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota", "kappa"])[y % 10]
    (tmp_path / "corpus.labels.txt").write_text("\n".join(names) + "\n")
    (tmp_path / "corpus.ids.txt").write_text("\n".join(f"doc-{i}" for i in range(X.shape[0])) + "\n")
    data = load_dataset(path)
    assert (data.X != X).nnz == 0
    assert data.y.dtype == np.int64 and set(data.class_names.values()) == set(names)
    assert [data.class_names[c] for c in data.y[:5]] == list(names[:5])
    assert data.doc_id(3) == "doc-3"
    (tmp_path / "corpus.labels.txt").write_text("a\nb\n")
    with pytest.raises(InvalidInputError, match="2 labels for"):
        load_dataset(path)


def _write_folder(root, docs):
    for label, texts in docs.items():
        (root / label).mkdir(parents=True)
        for i, text in enumerate(texts):
            (root / label / f"{i:02d}.txt").write_text(text)


DOCS = {
    "sport": ["the match ended with a late goal", "the striker scored a goal in the final match",
              "the team won the cup final", "a penalty goal decided the match"],
    "tech": ["the new laptop has a faster processor", "software update fixes the processor bug",
             "the phone runs the new software", "a laptop with more memory and storage"],
}


def test_text_folder_csv_jsonl_give_the_same_corpus(tmp_path):
    _write_folder(tmp_path / "docs", DOCS)
    folder = load_dataset(tmp_path / "docs")
    assert folder.n_documents == 8 and folder.featurizer is not None
    assert folder.doc_id(0) == str(tmp_path / "docs" / "sport" / "00.txt")
    assert folder.class_names == {0: "sport", 1: "tech"}
    rows = [(f"{lab}-{i}", text, lab) for lab, texts in DOCS.items() for i, text in enumerate(texts)]
    csv_path = tmp_path / "docs.csv"
    csv_path.write_text("key,body,topic\n" + "".join(f'{k},"{t}",{lab}\n' for k, t, lab in rows))
    table = load_dataset(csv_path, text_column="body", label_column="topic", id_column="key")
    assert table.doc_id(0) == "sport-0" and table.class_names == folder.class_names
    assert (table.X != folder.X).nnz == 0  # same texts in the same order -> same TF-IDF
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t, "label": lab}) + "\n" for _, t, lab in rows))
    j = load_dataset(jsonl)
    assert (j.X != folder.X).nnz == 0 and j.ids is None
    with pytest.raises(InvalidInputError, match="--text-column"):
        load_dataset(csv_path)  # no "text" column


def test_csv_column_errors_name_the_fix(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("text,topic\nhello world,a\n")
    with pytest.raises(InvalidInputError, match="--label-column"):
        load_dataset(path, label_column="category")
