import bz2
import gzip
import hashlib
import io
import lzma
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from sklearn.datasets import dump_svmlight_file

from sparsesim.data import dataset_info, fetch_dataset, list_datasets, load_dataset, load_svmlight
from sparsesim.data.builtin import parse_reuters_sgm
from sparsesim.data.catalog import DATASETS, DataFile, DatasetSpec
from sparsesim.data.fetch import verify_file
from sparsesim.data.readers import iter_text_corpus, read_matrix_market, read_svmlight, read_text_corpus
from sparsesim.exceptions import (
    DataNotFoundError,
    FileFormatError,
    InvalidInputError,
    SparsesimError,
    UnknownNameError,
)

SHARED = Path(os.environ.get("SPARSESIM_TEST_SHARED", "/work/shared/data"))


def _svm_bytes(seed=0, n=30, d=12):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.3, random_state=seed, format="csr")
    X.data = np.round(rng.uniform(0.1, 5, X.nnz), 3)
    X = X.tolil()
    X[:, d - 1] = 0.0
    X[0, d - 2] = 1.5  # index d-1 (1-based) present
    X = sp.csr_matrix(X)
    X.eliminate_zeros()
    y = rng.integers(1, 4, size=n)
    buf = io.BytesIO()
    dump_svmlight_file(X, y, buf, zero_based=False)
    return buf.getvalue(), sp.csr_matrix(X), y


def _write(path: Path, raw: bytes, kind: str) -> Path:
    opener = {"plain": open, "bz2": bz2.open, "xz": lzma.open, "gz": gzip.open}[kind]
    with opener(path, "wb") as f:
        f.write(raw)
    return path


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("SPARSESIM_DATA", str(h))
    return h


# ------------------------------------------------------------------ svmlight


@pytest.mark.parametrize("kind", ["plain", "bz2", "xz", "gz"])
def test_read_svmlight_any_compression(tmp_path, kind):
    raw, X, y = _svm_bytes()
    path = _write(tmp_path / f"f.{kind}", raw, kind)
    X2, y2 = read_svmlight(path)
    assert X2.shape == (30, 11)  # 1-based: widest index present is 11
    assert np.allclose(X2.toarray(), X[:, :11].toarray()) and np.array_equal(y2, y)
    data = load_svmlight(path, n_features=20)
    assert data.X.shape == (30, 20) and data.y.dtype == np.int64
    normed = load_svmlight(path, normalize=True)
    norms = np.sqrt(np.asarray(normed.X.multiply(normed.X).sum(axis=1))).ravel()
    assert np.allclose(norms[norms > 0], 1.0)


def test_svmlight_feature_count_mismatch(tmp_path):
    raw, _, _ = _svm_bytes()
    path = _write(tmp_path / "f.svm", raw, "plain")
    with pytest.raises(InvalidInputError, match="f.svm"):
        read_svmlight(path, n_features=5)


@pytest.mark.parametrize("kind", ["bz2", "xz", "gz"])
def test_truncated_compressed_file(tmp_path, kind):
    raw, _, _ = _svm_bytes(n=400)
    path = _write(tmp_path / f"t.{kind}", raw, kind)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(FileFormatError, match=f"t.{kind}"):
        load_svmlight(path)


def test_corrupt_compressed_file(tmp_path):
    raw, _, _ = _svm_bytes(n=400)
    path = _write(tmp_path / "c.xz", raw, "xz")
    data = bytearray(path.read_bytes())
    data[40:60] = b"\x00" * 20
    path.write_bytes(bytes(data))
    with pytest.raises(FileFormatError, match="c.xz"):
        load_svmlight(path)


@pytest.mark.parametrize(
    "content, error",
    [
        (b"1 1:0.5 2:abc\n", FileFormatError),
        (b"1 1:0.5\nnot a line at all\n", FileFormatError),
        # index 0 now means zero-based (auto, as scikit-learn); see tests/test_formats.py
        (b"1 1:nan 2:1\n2 1:1\n", InvalidInputError),
        (b"1 1:inf\n2 1:1\n", InvalidInputError),
        (b"", FileFormatError),
    ],
)
def test_malformed_svmlight(tmp_path, content, error):
    path = tmp_path / "bad.svm"
    path.write_bytes(content)
    with pytest.raises(error, match="bad.svm"):
        load_svmlight(path)


def test_missing_file(tmp_path):
    with pytest.raises(DataNotFoundError, match="nope.svm"):
        load_svmlight(tmp_path / "nope.svm")
    with pytest.raises(DataNotFoundError):
        load_dataset(str(tmp_path / "nope.svm"))


# ------------------------------------------------------------------ MatrixMarket, text


def test_matrix_market_with_labels(tmp_path):
    X = sp.random(8, 5, density=0.4, random_state=1, format="coo")
    buf = io.BytesIO()
    scipy.io.mmwrite(buf, X)
    _write(tmp_path / "m.mtx.gz", buf.getvalue(), "gz")
    (tmp_path / "labels.txt").write_text("\n".join(str(i % 3) for i in range(8)) + "\n")
    data = read_matrix_market(tmp_path / "m.mtx.gz", tmp_path / "labels.txt")
    assert np.allclose(data.X.toarray(), X.toarray())
    assert data.y.tolist() == [i % 3 for i in range(8)]
    (tmp_path / "short.txt").write_text("1\n2\n")
    with pytest.raises(InvalidInputError, match="short.txt"):
        read_matrix_market(tmp_path / "m.mtx.gz", tmp_path / "short.txt")
    (tmp_path / "bad.mtx").write_text("hello\n")
    with pytest.raises(FileFormatError, match="bad.mtx"):
        read_matrix_market(tmp_path / "bad.mtx")


def _make_corpus(root: Path):
    texts = {
        ("c-train", "sci.space", "10"): "Subject: rockets\n\nthe orbit of the shuttle rocket",
        ("c-train", "sci.space", "2"): "Subject: moon\n\nlunar orbit mission to the moon",
        ("c-train", "rec.autos", "5"): "Subject: cars\n\nengine oil for my car",
        ("c-test", "rec.autos", "7"): "Subject: wheels\n\ntires and engine of the car",
        ("c-test", "sci.space", "9"): "Subject: nasa\n\nnasa launches a rocket into orbit",
    }
    for (split, group, name), text in texts.items():
        d = root / "corpus" / split / group
        d.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(text, encoding="latin-1")
    return texts


def test_text_corpus_from_folder_and_tar(tmp_path):
    _make_corpus(tmp_path)
    from_dir = read_text_corpus(tmp_path / "corpus")
    with tarfile.open(tmp_path / "c.tar.xz", "w:xz") as tar:
        tar.add(tmp_path / "corpus", arcname="corpus")
    from_tar = read_text_corpus(tmp_path / "c.tar.xz")
    for key in ("groups", "ids", "split"):
        assert np.array_equal(from_dir[key], from_tar[key])
    assert from_dir["texts"] == from_tar["texts"]
    assert from_dir["ids"].tolist() == [
        "rec.autos/7", "sci.space/9", "rec.autos/5", "sci.space/2", "sci.space/10",
    ]
    assert set(from_dir["split"]) == {"train", "test"}
    only_test = read_text_corpus(tmp_path / "c.tar.xz", splits=("test",))
    assert len(only_test["texts"]) == 2
    (tmp_path / "junk.tar.xz").write_bytes(b"not a tar")
    with pytest.raises(FileFormatError, match="junk"):
        list(iter_text_corpus(tmp_path / "junk.tar.xz"))


def test_reuters_sgm_parser_and_modapte_filter():
    sgm = b"""<!DOCTYPE lewis SYSTEM "lewis.dtd">
<REUTERS TOPICS="YES" LEWISSPLIT="TRAIN" CGISPLIT="TRAINING-SET" OLDID="1" NEWID="1">
<TOPICS><D>cocoa</D></TOPICS><TEXT>&#2;
<TITLE>COCOA &lt;REVIEW&gt;</TITLE><BODY>Showers continued.</BODY></TEXT></REUTERS>
<REUTERS TOPICS="YES" LEWISSPLIT="TEST" CGISPLIT="PUBLISHED-TESTSET" OLDID="2" NEWID="2">
<TOPICS><D>grain</D><D>wheat</D></TOPICS><TEXT><TITLE>GRAIN</TITLE><BODY>Wheat up.</BODY></TEXT></REUTERS>
<REUTERS TOPICS="NO" LEWISSPLIT="NOT-USED" CGISPLIT="TRAINING-SET" OLDID="3" NEWID="3">
<TOPICS></TOPICS><TEXT TYPE="UNPROC">&#2; short note </TEXT></REUTERS>
"""
    docs = parse_reuters_sgm(sgm)
    assert [d["newid"] for d in docs] == [1, 2, 3]
    assert docs[0]["topics"] == ["cocoa"] and docs[0]["title"] == "COCOA <REVIEW>"
    assert "Showers continued." in docs[0]["text"]
    assert docs[1]["topics"] == ["grain", "wheat"] and docs[1]["lewissplit"] == "TEST"
    assert docs[2]["topics_attr"] == "NO" and "short note" in docs[2]["text"]


# ------------------------------------------------------------------ registry, load_dataset


EXPECTED = {"news20", "news20-text", "reuters21578", "rcv1-small", "letter", "pendigits", "satimage",
            "segment", "shuttle", "usps", "isolet", "news20-sample"}


def test_registry_lists_and_reports_missing_files(home):
    names = {d["name"] for d in list_datasets()}
    assert EXPECTED <= names
    info = dataset_info("news20")
    assert info["files"][0]["relpath"] == "news20/news20.bz2"
    assert info["files"][0]["present"] is False and info["available"] is False
    assert "TF-IDF" in info["representation"] and info["data_home"] == str(home)
    assert dataset_info("news20-sample")["available"] is True
    with pytest.raises(DataNotFoundError, match="news20/news20.bz2"):
        load_dataset("news20")
    with pytest.raises(UnknownNameError, match="no-such-set"):
        load_dataset("no-such-set")
    with pytest.raises(UnknownNameError):
        dataset_info("no-such-set")


def test_news20_sample_is_embedded(home):
    d = load_dataset("news20-sample")
    assert d.X.shape[0] == 400 and 1000 < d.X.shape[1] <= 5000
    assert len(d.class_names) == 10 and np.bincount(d.y).tolist() == [40] * 10
    norms = np.sqrt(np.asarray(d.X.multiply(d.X).sum(axis=1))).ravel()
    assert np.allclose(norms, 1.0)
    group, _, doc = d.ids[0].partition("/")
    assert group == d.class_names[d.y[0]] and doc.isdigit()
    assert len(d.info["titles"]) == 400 and len(d.info["vocabulary"]) == d.X.shape[1]
    with pytest.raises(InvalidInputError, match="option"):
        load_dataset("news20-sample", bogus=1)
    sample = Path(__file__).resolve().parents[1] / "sparsesim" / "data" / "samples" / "news20_sample.npz"
    assert sample.stat().st_size < 1.5e6


def test_load_dataset_path_and_options(tmp_path):
    raw, _, y = _svm_bytes()
    path = _write(tmp_path / "mine.svm.xz", raw, "xz")
    d = load_dataset(str(path))
    assert d.X.shape == (30, 11) and np.array_equal(d.y, y)
    d = load_dataset(path, n_features=15, normalize=True)
    assert d.X.shape == (30, 15)
    with pytest.raises(InvalidInputError, match="unknown option"):
        load_dataset(path, representation="raw")


# ------------------------------------------------------------------ fetch


def _fake_spec(name, relpath, sha, url=None, content_sha=None):
    return DatasetSpec(
        name=name,
        files=(DataFile(relpath, sha, url=url, content_sha256=content_sha),),
        loader="sparsesim.data.builtin:load_svmlight_set",
        kind="labelled",
        description="fake",
        extra={"n_features": 12},
    )


@pytest.fixture
def fake(tmp_path, monkeypatch):
    raw, X, y = _svm_bytes(seed=5)
    mirror = tmp_path / "mirror"
    (mirror / "fake").mkdir(parents=True)
    path = _write(mirror / "fake" / "f.svm.xz", raw, "xz")
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    (upstream / "f.svm").write_bytes(raw)
    (upstream / "f.svm.xz").write_bytes(path.read_bytes())
    specs = {
        "fake-ok": _fake_spec("fake-ok", "fake/f.svm.xz", sha, url=(upstream / "f.svm.xz").as_uri()),
        "fake-bad": _fake_spec("fake-bad", "fake/f.svm.xz", "0" * 64, url=(upstream / "f.svm.xz").as_uri()),
        "fake-content": _fake_spec("fake-content", "fake/f.svm.xz", sha, url=(upstream / "f.svm").as_uri(),
                                   content_sha=hashlib.sha256(raw).hexdigest()),
        "fake-nourl": _fake_spec("fake-nourl", "fake/f.svm.xz", sha),
        "fake-offline": _fake_spec("fake-offline", "fake/f.svm.xz", sha, url=(upstream / "gone.xz").as_uri()),
    }
    for name, spec in specs.items():
        monkeypatch.setitem(DATASETS, name, spec)
    return {"mirror": mirror, "X": X, "y": y, "sha": sha}


def _leftovers(home):
    return [p for p in home.rglob("*") if p.is_file()]


def test_fetch_from_mirror_then_load(home, fake):
    paths = fetch_dataset("fake-ok", mirror=fake["mirror"])
    assert paths == [home / "fake" / "f.svm.xz"]
    assert hashlib.sha256(paths[0].read_bytes()).hexdigest() == fake["sha"]
    d = load_dataset("fake-ok")
    assert d.X.shape == (30, 12) and np.array_equal(d.y, fake["y"])
    assert dataset_info("fake-ok")["available"]
    # already present: no-op; force re-copies
    assert fetch_dataset("fake-ok", mirror=fake["mirror"]) == paths
    assert fetch_dataset("fake-ok", mirror=fake["mirror"], force=True) == paths
    assert _leftovers(home) == paths


def test_fetch_sha_mismatch_leaves_nothing(home, fake):
    with pytest.raises(FileFormatError, match="sha256"):
        fetch_dataset("fake-bad", mirror=fake["mirror"])
    assert _leftovers(home) == []
    with pytest.raises(FileFormatError, match="sha256"):
        fetch_dataset("fake-bad")  # same file from its file:// URL
    assert _leftovers(home) == []


def test_fetch_from_file_url(home, fake):
    seen = []
    paths = fetch_dataset("fake-ok", progress=lambda rel, done, total: seen.append((rel, done)))
    assert hashlib.sha256(paths[0].read_bytes()).hexdigest() == fake["sha"]
    assert seen and seen[-1][0] == "fake/f.svm.xz"


def test_fetch_uncompressed_upstream_is_verified_and_recompressed(home, fake):
    (path,) = fetch_dataset("fake-content")
    assert lzma.decompress(path.read_bytes()) == (fake["mirror"].parent / "upstream" / "f.svm").read_bytes()
    assert verify_file(path, DATASETS["fake-content"].files[0])
    assert fetch_dataset("fake-content") == [path]  # a valid recompressed file counts as present
    assert load_dataset("fake-content").X.shape == (30, 12)


def test_fetch_offline_errors_name_the_file(home, fake):
    with pytest.raises(DataNotFoundError, match=r"fake/f\.svm\.xz"):
        fetch_dataset("fake-nourl")
    with pytest.raises(DataNotFoundError, match=r"fake/f\.svm\.xz"):
        fetch_dataset("fake-offline")
    with pytest.raises(DataNotFoundError, match="mirror"):
        fetch_dataset("fake-ok", mirror=home / "no-mirror")
    empty = home.parent / "empty-mirror"
    empty.mkdir()
    with pytest.raises(DataNotFoundError, match="fake/f.svm.xz"):
        fetch_dataset("fake-ok", mirror=empty)
    assert _leftovers(home) == []


def test_fetch_refuses_a_damaged_present_file(home, fake):
    (home / "fake").mkdir()
    (home / "fake" / "f.svm.xz").write_bytes(b"damaged")
    with pytest.raises(FileFormatError, match="force"):
        fetch_dataset("fake-ok", mirror=fake["mirror"])
    fetch_dataset("fake-ok", mirror=fake["mirror"], force=True)
    assert verify_file(home / "fake" / "f.svm.xz", DATASETS["fake-ok"].files[0])


def test_every_error_is_a_sparsesim_error():
    for exc in (DataNotFoundError, FileFormatError, InvalidInputError, UnknownNameError):
        assert issubclass(exc, SparsesimError)


# ------------------------------------------------------------------ real data (skipped when absent)


def _real(name, **options):
    try:
        return load_dataset(name, **options)
    except DataNotFoundError as exc:
        pytest.skip(f"data file not available: {exc}")


@pytest.fixture
def shared(monkeypatch):
    if not SHARED.is_dir():
        pytest.skip(f"shared data directory {SHARED} not available")
    monkeypatch.setenv("SPARSESIM_DATA", str(SHARED))


def test_registered_sha256_match_the_mirror(shared):
    for name in sorted(EXPECTED - {"news20-sample"}):
        for f in DATASETS[name].files if name in DATASETS else []:
            path = SHARED / f.relpath
            if path.is_file():
                assert verify_file(path, f), f.relpath


def test_real_news20(shared):
    d = _real("news20")
    assert d.X.shape == (15935, 62061) and len(np.unique(d.y)) == 20
    norms = np.sqrt(np.asarray(d.X.multiply(d.X).sum(axis=1))).ravel()
    assert np.allclose(norms[norms > 0], 1.0)
    raw = _real("news20", representation="raw")
    assert raw.X.nnz == 1272569 and np.all(raw.X.data == np.round(raw.X.data))
    with pytest.raises(InvalidInputError, match="representation"):
        load_dataset("news20", representation="bogus")


def test_real_fetch_from_shared_mirror(shared, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSESIM_DATA", str(tmp_path))
    paths = fetch_dataset("letter", mirror=SHARED)
    assert paths == [tmp_path / "letter" / "letter.scale.svm.xz"]
    d = load_dataset("letter")
    assert d.X.shape == (20000, 16) and len(np.unique(d.y)) == 26


def test_real_dense_sets(shared):
    for name, shape, k in [("pendigits", (10992, 16), 10), ("satimage", (6435, 36), 6),
                           ("segment", (2310, 19), 7), ("shuttle", (58000, 9), 7), ("usps", (9298, 256), 10)]:
        d = _real(name)
        assert d.X.shape == shape and len(np.unique(d.y)) == k, name
    p = _real("pendigits")
    assert p.info["n_train"] == 7494 and (p.info["split"] == "test").sum() == 3498


def test_real_isolet_speaker_groups(shared):
    d = _real("isolet")
    assert d.X.shape == (7797, 617)
    assert np.bincount(d.info["speaker_group"]).tolist() == [0, 1560, 1560, 1560, 1558, 1559]


def test_real_rcv1_small(shared):
    d = _real("rcv1-small")
    assert d.X.shape == (1249, 47236) and set(np.unique(d.y)) == {-1, 1}
    assert d.info["duplicates_dropped"] == 1


def test_real_text_corpora(shared):
    d = _real("news20-text", splits=("test",), min_df=2)
    assert d.n_documents == 7532 and len(d.class_names) == 20
    assert set(d.info["split"]) == {"test"} and d.ids[0].startswith("alt.atheism/")
    r = _real("reuters21578")
    assert r.info["n_modapte"] == 12902
    counts = np.bincount(r.y)
    assert counts.min() >= 2 and r.n_documents == counts.sum() <= r.info["n_single_topic"]
    assert r.class_names[int(np.argmax(counts))] == "earn"
