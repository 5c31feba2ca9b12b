"""``sparsesim index build --kind ann --memory``: the block-wise build from an svmlight file or a
corpus directory gives the in-memory build's index; the svmlight file is written into a corpus
directory a block of bytes at a time with the whole-file reader's checks; bad input is one error."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import dump_svmlight_file

from sparsesim.data import load_dataset
from sparsesim.data.corpus_files import CorpusWriter, write_corpus
from sparsesim.data.readers.matrices import read_svmlight
from sparsesim.data.svmlight_blocks import write_corpus_from_svmlight
from sparsesim.exceptions import FileFormatError, InvalidInputError
from sparsesim.learners.bilinear import OASIS

from clitools import run_cli

N = 360


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("blockwise-cli")
    data = load_dataset("news20-sample")
    X, y = data.X[:N], data.y[:N]
    dump_svmlight_file(X, y, str(tmp / "docs.svm"), zero_based=False)
    model = OASIS(n_triplets=300, random_state=0).fit(X, y).model_
    model.save(tmp / "model.npz")
    return tmp, X, y


def _arrays(index_dir):
    [version] = [p for p in index_dir.iterdir() if p.is_dir()]
    return {p.name: np.load(p) for p in version.glob("*.npy")}


def test_memory_build_from_svmlight_is_the_in_memory_index(files, tmp_path, monkeypatch, capsys):
    tmp, X, y = files
    common = ["index", "build", "-m", tmp / "model.npz", "-d", tmp / "docs.svm", "--kind", "ann"]
    code, out, err = run_cli([*common, "-o", tmp_path / "blocks", "--memory", "1GiB", "--json"], monkeypatch, capsys)
    assert code == 0, err
    summary = json.loads(out)
    assert summary["n_documents"] == N and summary["plan"]["block_rows"] > 0 and summary["calibration"]["met"]
    assert not (tmp_path / "blocks.corpus").exists()  # the staged corpus is removed once the index is saved
    code, _, err = run_cli([*common, "-o", tmp_path / "memory"], monkeypatch, capsys)
    assert code == 0, err
    a, b = _arrays(tmp_path / "blocks"), _arrays(tmp_path / "memory")
    b.pop("labels.npy", None)  # the in-memory build keeps the labels as document facts
    assert sorted(a) == sorted(b)
    assert all(np.array_equal(a[name], b[name]) for name in a)


def test_memory_build_from_a_corpus_directory(files, tmp_path, monkeypatch, capsys):
    tmp, X, y = files
    corpus = write_corpus(tmp_path / "corpus", X, y=y, block=100)
    code, out, err = run_cli(["index", "build", "-m", tmp / "model.npz", "-d", corpus.directory, "--kind", "ann",
                              "-o", tmp_path / "idx", "--memory", "1GiB"], monkeypatch, capsys)
    assert code == 0, err
    assert "block by block" in out and f"over {N} documents" in out
    code, out, err = run_cli(["query", "--index", tmp_path / "idx", "-q", tmp / "docs.svm", "-k", "3", "--json"],
                             monkeypatch, capsys)
    assert code == 0, err


@pytest.mark.parametrize("extra, message", [
    (["--kind", "exact", "--memory", "1GiB"], "--kind ann"),
    (["--kind", "ann", "--resume"], "give --memory"),
    (["--kind", "ann", "--memory", "lots"], "memory"),
    (["--kind", "ann", "--memory", "1GiB", "--shards", "2"], "one index"),
])
def test_memory_option_misuse_is_one_error(files, tmp_path, monkeypatch, capsys, extra, message):
    tmp, _, _ = files
    code, out, err = run_cli(["index", "build", "-m", tmp / "model.npz", "-d", tmp / "docs.svm", "-o",
                              tmp_path / "idx", *extra], monkeypatch, capsys)
    assert code == 2 and err.startswith("error:") and message in err and "Traceback" not in err
    assert not (tmp_path / "idx").exists()


def test_memory_build_refuses_what_it_cannot_read_in_blocks(files, tmp_path, monkeypatch, capsys):
    tmp, X, y = files
    gz = tmp_path / "docs.svm.gz"
    gz.write_bytes(gzip.compress((tmp / "docs.svm").read_bytes()))
    wide = tmp_path / "wide.svm"
    dump_svmlight_file(sp.hstack([X, sp.csr_matrix(np.ones((N, 1)))]).tocsr(), y, str(wide), zero_based=False)
    text = tmp_path / "docs.jsonl"
    text.write_text('{"text": "a document"}\n')
    (tmp_path / "taken.corpus").mkdir()  # not a staged corpus of ours
    for data, out, message in ((gz, "a", "compressed"), (wide, "b", "feature-count mismatch"),
                               (text, "c", "svmlight file or a corpus directory"),
                               (tmp / "docs.svm", "taken", "was not written by sparsesim")):
        code, _, err = run_cli(["index", "build", "-m", tmp / "model.npz", "-d", data, "--kind", "ann", "--memory",
                                "1GiB", "-o", tmp_path / out], monkeypatch, capsys)
        assert code == 2 and err.startswith("error:") and message in err, (data, err)
        assert not (tmp_path / out).exists()
    assert (tmp_path / "taken.corpus").is_dir()  # left alone


def test_svmlight_blocks_equal_the_whole_file_reader(tmp_path):
    rng = np.random.default_rng(0)
    X = sp.random(300, 40, density=0.15, format="csr", random_state=1)
    X.data = rng.standard_normal(X.data.size)
    y = rng.integers(0, 4, 300)
    for zero_based in (True, False):
        path = tmp_path / f"docs-{zero_based}.svm"
        Xw = X.copy()
        if zero_based:  # index 0 only in the last rows: "auto" must read the whole file to see it
            Xw = X.tolil()
            Xw[:, 0] = 0
            Xw[-1, 0] = 1.5
            Xw = Xw.tocsr()
        dump_svmlight_file(Xw, y, str(path), zero_based=zero_based)
        whole, wy = read_svmlight(path, n_features=41)
        corpus = write_corpus_from_svmlight(path, tmp_path / f"c-{zero_based}", 41, block_bytes=333)
        assert (corpus.rows(0, 300) != whole).nnz == 0 and np.array_equal(corpus.labels(), wy.astype(np.int64))
    path = tmp_path / "docs-True.svm"
    with pytest.raises(InvalidInputError, match="index 0"):
        write_corpus_from_svmlight(path, tmp_path / "c-one", 41, zero_based=False, block_bytes=333)
    with pytest.raises(InvalidInputError, match="shift by one"):
        write_corpus_from_svmlight(path, tmp_path / "c-exp", 41, expect_zero_based=False, zero_based=True)
    bad = tmp_path / "bad.svm"
    bad.write_text("1 1:0.5 2:0.25\n0 3:nan\n")
    with pytest.raises(InvalidInputError, match="NaN"):
        write_corpus_from_svmlight(bad, tmp_path / "c-bad", 5)
    bad.write_text("1 1:0.5 2:0.25\n0 3:x\n")
    with pytest.raises(FileFormatError, match="not a valid svmlight"):
        write_corpus_from_svmlight(bad, tmp_path / "c-bad2", 5)
    floats = tmp_path / "floats.svm"
    floats.write_text("0.5 1:1\n1.25 2:1\n")  # regression targets: not kept as labels
    assert write_corpus_from_svmlight(floats, tmp_path / "c-floats", 3).labels() is None


def test_resume_reuses_the_staged_corpus_of_the_same_file(files, tmp_path):
    from sparsesim.models import BilinearSimilarity
    from sparsesim.workflows.blockwise import _staged_corpus

    tmp, _, _ = files
    source = tmp_path / "docs.svm"
    source.write_bytes((tmp / "docs.svm").read_bytes())
    model = BilinearSimilarity.load(tmp / "model.npz")
    first = _staged_corpus(source, tmp_path / "idx", model, {}, True, None)
    stamp = (first.directory / "indptr.npy").stat().st_mtime_ns
    again = _staged_corpus(source, tmp_path / "idx", model, {}, True, None)
    assert (again.directory / "indptr.npy").stat().st_mtime_ns == stamp  # reused
    source.write_bytes(source.read_bytes() + b"1 3:0.5\n")  # the file changed: written again
    changed = _staged_corpus(source, tmp_path / "idx", model, {}, True, None)
    assert changed.n_documents == N + 1


def test_a_failed_build_removes_its_converted_corpus_unless_resumable(files, tmp_path, monkeypatch, capsys):
    tmp, _, _ = files
    for resume, kept in (([], False), (["--resume"], True)):
        out = tmp_path / f"idx{len(resume)}"
        code, _, err = run_cli(["index", "build", "-m", tmp / "model.npz", "-d", tmp / "docs.svm", "--kind", "ann",
                                "--memory", "64KiB", "-o", out, *resume], monkeypatch, capsys)
        assert code == 2 and err.startswith("error:") and "memory" in err.lower(), err
        assert not out.exists() and (tmp_path / f"{out.name}.corpus").exists() == kept


def test_a_file_too_large_to_read_whole_is_refused_before_reading(files, tmp_path, monkeypatch, capsys):
    """A plain svmlight file whose parse (2.2x its size) would not fit the available memory is one
    error that names the block-wise build, before a byte is parsed."""
    import sparsesim.memory
    from sparsesim.exceptions import MemoryBudgetError

    tmp, _, _ = files
    size = (tmp / "docs.svm").stat().st_size
    monkeypatch.setattr(sparsesim.memory, "available_memory", lambda: 2 * size)
    with pytest.raises(MemoryBudgetError, match="--memory"):
        read_svmlight(tmp / "docs.svm")
    code, _, err = run_cli(["index", "build", "-m", tmp / "model.npz", "-d", tmp / "docs.svm", "--kind", "ann",
                            "-o", tmp_path / "idx"], monkeypatch, capsys)
    assert code == 2 and err.startswith("error:") and "--memory" in err and len(err.strip().splitlines()) == 1
    monkeypatch.setattr(sparsesim.memory, "available_memory", lambda: 3 * size)
    assert read_svmlight(tmp / "docs.svm")[0].shape[0] == N


def test_a_failed_conversion_leaves_nothing(tmp_path):
    bad = tmp_path / "bad.svm"
    bad.write_text("1 1:0.5 2:0.25\n" * 50 + "0 3:nan\n")
    with pytest.raises(InvalidInputError, match="NaN"):
        write_corpus_from_svmlight(bad, tmp_path / "new", 5, block_bytes=64)
    assert not (tmp_path / "new").exists()  # made by the call: removed
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(InvalidInputError):
        CorpusWriter(tmp_path / "mine", 5)  # not empty: refused before anything is written
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidInputError, match="NaN"):
        write_corpus_from_svmlight(bad, tmp_path / "empty", 5, block_bytes=64)
    assert (tmp_path / "empty").is_dir() and not any((tmp_path / "empty").iterdir())  # its own files removed
    with pytest.raises(FileFormatError, match="no documents"):
        (tmp_path / "blank.svm").write_text("\n# a comment\n\n")
        write_corpus_from_svmlight(tmp_path / "blank.svm", tmp_path / "blank", 5, block_bytes=4)
    assert not (tmp_path / "blank").exists()
