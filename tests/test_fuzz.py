"""Property-based fuzzing (hypothesis): every bad input ends in a clean error or a correct result.

Families: malformed svmlight files, malformed CSR matrices at every learner, bad parameters for
every registered algorithm and for the index kinds, hostile (re-hashed) model and index files,
and random arguments for every CLI command. The properties: a project exception
(:class:`sparsesim.exceptions.SparsesimError`) or a valid result -- never another exception, a
crash, a hang or a partial file. Everything is written inside pytest's temporary directories.

The fast part runs in CI (well under a minute). ``SPARSESIM_FUZZ_LONG=1`` runs 20x more
examples per property::

    SPARSESIM_FUZZ_LONG=1 python -m pytest -q tests/test_fuzz.py
"""

from __future__ import annotations

import inspect
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from sparsesim.checks import fast_params, learner_kind, make_problem  # noqa: E402
from sparsesim.exceptions import FileFormatError, SparsesimError  # noqa: E402
from sparsesim.models import BilinearSimilarity  # noqa: E402
from sparsesim.persistence import bundle_checksum  # noqa: E402
from sparsesim.registry import ALGORITHMS, make_estimator  # noqa: E402
from sparsesim.validation import check_csr  # noqa: E402
from clitools import run_cli  # noqa: E402

from sparsesim.indexes import build_index, load_index  # noqa: E402
from sparsesim.indexes.compact_index import CompactRows  # noqa: E402
from fuzztools import COMMANDS, FLAGS, LONG, SCALE, hypothesis_settings  # noqa: E402
from indextools import rehash_index  # noqa: E402
from sparsesim.indexes.storage import manifest_checksum  # noqa: E402

FUZZ = hypothesis_settings()

# values a user or a file can hand over where a number, a flag or a name is expected
HOSTILE_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.sampled_from([0, -1, 1, 2**31, 2**63, -2**63]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e309, -1e-320, 2.5, 0.0, float("nan")]),
    st.text(max_size=12), st.sampled_from(["yes", "no", "", "abc", "1e3", "nan", "-1"]),
    st.lists(st.integers(-3, 3), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _clean(exc: BaseException) -> bool:
    return isinstance(exc, SparsesimError)


# --------------------------------------------------------------------------- svmlight files
_TOKENS = st.one_of(
    st.sampled_from(["1", "-1", "+1", "0", "2.5", "nan", "inf", "-inf", "1e400", "abc", "", "#c", "qid:3", "qid:x"]),
    st.builds(lambda i, v: f"{i}:{v}", st.one_of(st.integers(-5, 40), st.sampled_from([2**31, 2**31 - 1, 2**63,
                                                                                        10**30, 0, -1])),
              st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["x", "", "1e999", "0x1"]))),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=8),
)
_LINES = st.lists(st.lists(_TOKENS, min_size=0, max_size=6).map(" ".join), min_size=0, max_size=8)


@settings(max_examples=60 * SCALE, **FUZZ)
@given(lines=_LINES, compress=st.sampled_from(["", "gz", "bz2", "raw-bytes"]), raw=st.binary(max_size=64))
def test_fuzz_svmlight_files(tmp_path_factory, lines, compress, raw):
    import bz2
    import gzip

    from sparsesim.data import load_dataset

    text = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass") if lines else b""
    if compress == "gz":
        text = gzip.compress(text)
    elif compress == "bz2":
        text = bz2.compress(text)
    elif compress == "raw-bytes":
        text = raw + text
    path = tmp_path_factory.mktemp("svm") / "data.svm"
    path.write_bytes(text)
    try:
        data = load_dataset(str(path))
    except Exception as exc:  # noqa: BLE001 - the property: only project errors
        assert _clean(exc), f"{type(exc).__name__}: {exc}"
        assert len(str(exc)) < 2000
        return
    X = data.X
    check_csr(X)  # what a file produces is a valid CSR matrix
    assert X.shape[0] == len(data.y) and np.all(np.isfinite(X.data))


@settings(max_examples=60 * SCALE, **FUZZ)
@given(lines=_LINES, block=st.integers(1, 40), width=st.sampled_from([None, 8, 41]))
def test_fuzz_svmlight_blocks_match_the_whole_file(tmp_path_factory, lines, block, width):
    """The block-wise writer (index build --memory) accepts exactly the plain files the whole-file
    reader accepts, and stores the same rows; anything else is one project error."""
    from sparsesim.data.readers.matrices import read_svmlight
    from sparsesim.data.svmlight_blocks import write_corpus_from_svmlight

    root = tmp_path_factory.mktemp("blocks")
    path = root / "data.svm"
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8", "surrogatepass") if lines else b"")
    outcomes = []
    for read in (lambda: read_svmlight(path, n_features=width or 64)[0],
                 lambda: write_corpus_from_svmlight(path, root / "c", width or 64, block_bytes=block)):
        try:
            outcomes.append(read())
        except Exception as exc:  # noqa: BLE001 - the property: only project errors
            assert _clean(exc), f"{type(exc).__name__}: {exc}"
            outcomes.append(None)
    whole, corpus = outcomes
    assert (whole is None) == (corpus is None), (lines, whole, corpus)
    if whole is not None:
        stored = corpus.rows(0, corpus.n_documents)
        assert stored.shape == whole.shape and (stored != whole).nnz == 0


# --------------------------------------------------------------------------- malformed matrices
@st.composite
def hostile_csr(draw, n=12, d=7):
    nnz = draw(st.integers(0, 30))
    indptr = np.sort(np.asarray(draw(st.lists(st.integers(0, nnz), min_size=n - 1, max_size=n - 1)), dtype=np.int64))
    indptr = np.concatenate([[0], indptr, [nnz]])
    indices = np.asarray(draw(st.lists(st.integers(0, d - 1), min_size=nnz, max_size=nnz)), dtype=np.int32)
    data = np.asarray(draw(st.lists(st.floats(-3, 3, allow_nan=False), min_size=nnz, max_size=nnz)), dtype=np.float64)
    fault = draw(st.sampled_from(["none", "index", "negative", "indptr", "nan", "inf", "short-data", "dtype"]))
    applied = fault in ("none", "indptr", "dtype") or nnz > 0
    if nnz and fault == "index":
        indices[draw(st.integers(0, nnz - 1))] = draw(st.sampled_from([d, d + 1, 2**31 - 1]))
    elif nnz and fault == "negative":
        indices[draw(st.integers(0, nnz - 1))] = draw(st.sampled_from([-1, -d, -2**31]))
    elif fault == "indptr":
        indptr[draw(st.integers(1, n))] = draw(st.sampled_from([nnz + 1, -1, 10**6]))
    elif nnz and fault == "nan":
        data[draw(st.integers(0, nnz - 1))] = np.nan
    elif nnz and fault == "inf":
        data[draw(st.integers(0, nnz - 1))] = -np.inf
    elif nnz and fault == "short-data":
        data = data[:-1]
    X = sp.csr_matrix((n, d))
    X.indptr, X.indices, X.data = indptr, indices, data
    if fault == "dtype":
        X.data = data.astype(draw(st.sampled_from([np.complex128, np.float16, np.int8])))
        if X.data.dtype != np.complex128:
            fault = "none"  # real numbers of another width are valid input
    return X, fault if applied else "none"


SIMILARITY_NAMES = sorted(n for n, s in ALGORITHMS.items() if s.kind in ("similarity", "baseline"))


@settings(max_examples=40 * SCALE, **FUZZ)
@given(case=hostile_csr(), name=st.sampled_from(SIMILARITY_NAMES))
def test_fuzz_matrices_at_every_entry_point(case, name):
    X, fault = case
    y = np.repeat([0, 1, 2], 4)
    est = make_estimator(name)
    est.set_params(**fast_params(est))
    for call in (lambda: est.fit(X, y), lambda: BilinearSimilarity(sp.identity(7, format="csr")).scorer(X)(
            np.arange(min(3, X.shape[0]))), lambda: build_index(BilinearSimilarity(sp.identity(7, format="csr")), X)):
        try:
            call()
        except Exception as exc:  # noqa: BLE001
            assert _clean(exc), f"{name} {fault}: {type(exc).__name__}: {exc}"
        else:
            assert fault == "none", f"{name}: a matrix with fault {fault!r} was accepted"


# --------------------------------------------------------------------------- bad parameters
def _param_names(name):
    est = make_estimator(name)
    return sorted(p for p in est.get_params(deep=False) if p not in ("oracle",))


PARAM_CASES = [(name, p) for name in sorted(ALGORITHMS) for p in _param_names(name)]


@settings(max_examples=80 * SCALE, **FUZZ)
@given(case=st.sampled_from(PARAM_CASES), value=HOSTILE_VALUES)
def test_fuzz_bad_parameters_every_algorithm(case, value):
    name, param = case
    est = make_estimator(name)
    fast = fast_params(est)
    if param in fast and isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**4:
        assume(False)  # a valid but large budget is slow, not bad
    fast.pop(param, None)
    try:
        est.set_params(**fast, **{param: value})
        problem = make_problem(learner_kind(est))
        est.fit(*problem.fit_args, **problem.fit_kwargs)
    except Exception as exc:  # noqa: BLE001
        assert _clean(exc), f"{name}.{param}={value!r}: {type(exc).__name__}: {exc}"


def _online_classifiers():
    """(name, estimator factory, fit args) of every online classifier: the registered ones and the
    PA components they are built from."""
    from sparsesim.learners.kernel_pa import KernelPassiveAggressive
    from sparsesim.learners.linear_pa import PassiveAggressiveBinary

    out = [(name, lambda name=name: make_estimator(name)) for name in sorted(ALGORITHMS)
           if ALGORITHMS[name].kind in ("transfer", "multitask-classifier")]
    return out + [("PassiveAggressiveBinary", PassiveAggressiveBinary), ("KernelPassiveAggressive", KernelPassiveAggressive)]


ONLINE_CASES = [(name, factory, p) for name, factory in _online_classifiers()
                for p in sorted(factory().get_params(deep=False))]


def _online_problem(est, name):
    if name in ("PassiveAggressiveBinary", "KernelPassiveAggressive"):
        rng = np.random.default_rng(0)
        X = rng.normal(size=(20, 6))
        return (sp.csr_matrix(X) if name == "PassiveAggressiveBinary" else X, np.where(X[:, 0] > 0, 1, -1)), {}
    problem = make_problem(learner_kind(est))
    return problem.fit_args, problem.fit_kwargs


@settings(max_examples=60 * SCALE, **FUZZ)
@given(case=st.sampled_from(ONLINE_CASES), value=HOSTILE_VALUES)
def test_fuzz_online_classifier_parameters_on_first_partial_fit(case, value):
    """An online classifier's first ``partial_fit`` checks its parameters as ``fit`` does: both refuse
    a bad value with a project error, or both accept it."""
    name, factory, param = case
    outcomes = []
    for method in ("fit", "partial_fit"):
        est = factory()
        fast = {k: v for k, v in fast_params(est).items() if k != param}
        est.set_params(**fast, **{param: value})
        args, kwargs = _online_problem(est, name)
        try:
            getattr(est, method)(*args, **kwargs)
            outcomes.append("ok")
        except Exception as exc:  # noqa: BLE001
            assert _clean(exc), f"{name}.{method} {param}={value!r}: {type(exc).__name__}: {exc}"
            outcomes.append("refused")
    assert outcomes[0] == outcomes[1], f"{name} {param}={value!r}: fit {outcomes[0]}, first partial_fit {outcomes[1]}"


def test_first_partial_fit_checks_parameters():
    """The named cases: a bad value is refused on the first ``partial_fit``, naming the parameter."""
    from sparsesim.exceptions import InvalidParameterError
    from sparsesim.learners.linear_pa import PassiveAggressiveBinary

    X = sp.random(10, 5, density=0.5, format="csr", random_state=0)
    y = np.array([1, -1] * 5)
    with pytest.raises(InvalidParameterError, match="C must be"):
        PassiveAggressiveBinary(C="abc").partial_fit(X, y)
    with pytest.raises(InvalidParameterError, match="fit_intercept"):
        PassiveAggressiveBinary(fit_intercept="yes").partial_fit(X, y)
    est = make_estimator("omtllog", epoch=float("nan"))
    args, kwargs = _online_problem(est, "omtllog")
    with pytest.raises(InvalidParameterError, match="epoch"):
        est.partial_fit(*args, **kwargs)
    est = make_estimator("oht1-pa", C=[1, 2])
    args, kwargs = _online_problem(est, "oht1-pa")
    with pytest.raises(InvalidParameterError, match="C must be"):
        est.partial_fit(*args, **kwargs)


@settings(max_examples=40 * SCALE, **FUZZ)
@given(kind=st.sampled_from(["exact", "ann"]), data=st.data())
def test_fuzz_bad_index_parameters(kind, data):
    from sparsesim.indexes import INDEX_KINDS

    names = [p for p in inspect.signature(INDEX_KINDS[kind].__init__).parameters if p not in ("self", "model")]
    param = data.draw(st.sampled_from(names + ["frobnicate"]))
    value = data.draw(HOSTILE_VALUES)
    X = sp.random(60, 20, density=0.2, format="csr", random_state=0)
    model = BilinearSimilarity(sp.random(20, 20, density=0.1, format="csr", random_state=1))
    if param in ("corpus_memory", "rerank_memory", "svd_sample", "chunk_size", "block_size", "ef_construction",
                 "hnsw_m", "nlist") and isinstance(value, int) and value > 10**5:
        assume(False)
    try:
        index = build_index(model, X, kind=kind, **{param: value})
        index.query(X[:3], top_k=5)
    except Exception as exc:  # noqa: BLE001
        assert _clean(exc), f"{kind}.{param}={value!r}: {type(exc).__name__}: {exc}"


# --------------------------------------------------------------------------- hostile model files
@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz-model") / "m.npz"
    BilinearSimilarity(sp.random(16, 16, density=0.2, format="csr", random_state=3), metadata={"algorithm": "x"}).save(path)
    return path


@settings(max_examples=60 * SCALE, **FUZZ)
@given(data=st.data())
def test_fuzz_hostile_model_files(model_path, tmp_path_factory, data):
    with np.load(model_path) as z:
        arrays = {k: z[k].copy() for k in z.files}
    meta = json.loads(arrays.pop("__meta__").tobytes())
    action = data.draw(st.sampled_from(["meta", "array-value", "array-dtype", "flip", "truncate"]))
    out = tmp_path_factory.mktemp("fuzz-m") / "h.npz"
    if action in ("meta", "array-value", "array-dtype"):
        if action == "meta":
            key = data.draw(st.sampled_from(sorted(meta) + ["extra"]))
            meta[key] = data.draw(HOSTILE_VALUES)
        else:
            name = data.draw(st.sampled_from(sorted(arrays)))
            arr = arrays[name]
            if action == "array-value" and arr.size:
                pos = data.draw(st.integers(0, arr.size - 1))
                arr = arr.astype(np.float64) if arr.dtype.kind == "f" else arr
                arr.flat[pos] = data.draw(st.sampled_from([-1, 10**6, 2**31 - 1, 0, np.nan, np.inf]
                                                          if arr.dtype.kind == "f" else [-1, 10**6, 2**31 - 1, 0]))
            else:
                arr = arr.astype(data.draw(st.sampled_from(["<f4", "<f2", "<i1", "<i8", "<c16", "<U3", "<u4"])))
            arrays[name] = arr
        try:
            meta["checksum"] = bundle_checksum(arrays, meta)
        except (TypeError, ValueError):
            return  # not JSON: such a file cannot carry a valid checksum anyway
        arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
        np.savez(out, **arrays)
    else:
        raw = bytearray(model_path.read_bytes())
        if action == "flip":
            pos = data.draw(st.integers(0, len(raw) - 1))
            raw[pos] ^= data.draw(st.integers(1, 255))
        else:
            raw = raw[:data.draw(st.integers(0, len(raw) - 1))]
        out.write_bytes(bytes(raw))
    try:
        model = BilinearSimilarity.load(out)
    except Exception as exc:  # noqa: BLE001
        assert isinstance(exc, FileFormatError), f"{action}: {type(exc).__name__}: {exc}"
        return
    # accepted: a valid model whose scores are finite
    check_csr(model.W, n_features=model.n_features)
    X = sp.random(5, model.n_features, density=0.3, format="csr", random_state=0)
    assert np.all(np.isfinite(model.score_matrix(X, X)))


# --------------------------------------------------------------------------- hostile index files
@pytest.fixture(scope="module")
def index_dirs(tmp_path_factory):
    rng = np.random.default_rng(4)
    X = sp.random(80, 24, density=0.2, format="csr", random_state=4)
    model = BilinearSimilarity(sp.random(24, 24, density=0.1, format="csr", random_state=5))
    root = tmp_path_factory.mktemp("fuzz-index")
    ids = [f"d{i}" for i in range(80)]
    build_index(model, X, kind="exact", strategy="corpus").save(root / "exact")
    build_index(model, X, kind="ann", dim=6, n_postings=30, heavy_min_nnz=1, ids=ids).save(root / "ann")
    compact = CompactRows._unit_test_model(24, seed=6)  # M = D + W + U V^T: the compact kinds
    build_index(compact, X, kind="exact").save(root / "compact-exact")
    build_index(compact, X, kind="ann", ids=ids, calibration_size=20).save(root / "compact-ann")
    return root, X, rng


def _rehash(directory: Path):
    rehash_index(directory)


@settings(max_examples=50 * SCALE, **FUZZ)
@given(kind=st.sampled_from(["exact", "ann", "compact-exact", "compact-ann"]), data=st.data())
def test_fuzz_hostile_index_files(index_dirs, tmp_path_factory, kind, data):
    import shutil

    root, X, _ = index_dirs
    d = tmp_path_factory.mktemp("fuzz-i") / "idx"
    shutil.copytree(root / kind, d)
    manifest = json.loads((d / "manifest.json").read_text())
    names = sorted(f[:-4] for f in manifest["files"] if f.endswith(".npy"))
    action = data.draw(st.sampled_from(["value", "dtype", "manifest"]))
    if action == "manifest":
        section = data.draw(st.sampled_from(["top", "params", "state", "model"]))
        target = manifest if section == "top" else manifest[section]
        key = data.draw(st.sampled_from(sorted(k for k in target if k not in ("files",)) + ["extra"]))
        target[key] = data.draw(HOSTILE_VALUES)
        try:
            manifest["manifest_checksum"] = manifest_checksum(manifest)
        except (TypeError, ValueError):
            return
        (d / "manifest.json").write_text(json.dumps(manifest))
    else:
        name = data.draw(st.sampled_from(names))
        path = d / manifest["data_dir"] / f"{name}.npy"
        arr = np.load(path).copy()
        if action == "value" and arr.size:
            pos = data.draw(st.integers(0, arr.size - 1))
            if arr.dtype.kind == "f":
                arr.flat[pos] = data.draw(st.sampled_from([np.nan, np.inf, -1.0, 1e308, 0.0]))
            elif arr.dtype.kind == "U":
                arr.flat[pos] = arr.flat[(pos + 1) % arr.size]
            else:
                value = data.draw(st.sampled_from([-1, -2**31, 10**6, 2**31 - 1, 0, int(arr.flat[pos]) + 1]))
                arr.flat[pos] = np.int64(value).astype(arr.dtype)  # wraps in the compact lists' unsigned arrays
        else:
            try:
                arr = arr.astype(data.draw(st.sampled_from(["<f4", "<f8", "<i4", "<i8", "<i2", "<U4"])))
            except (ValueError, TypeError):
                return  # e.g. string ids that are not numbers: no such file can be made
        np.save(path, arr, allow_pickle=False)
        _rehash(d)
    try:
        index = load_index(d, mmap=data.draw(st.booleans()))
    except Exception as exc:  # noqa: BLE001
        assert isinstance(exc, FileFormatError), f"{action}: {type(exc).__name__}: {exc}"
        return
    # accepted: answers are the exact bilinear scores of the loaded corpus (ANN: of its candidates);
    # a memory-mapped index may refuse a bad block only when a query (or X_) first reads it
    Q = X[:4]
    try:
        ids, scores = index.query(Q, top_k=5)
        S = index.model.score_matrix(Q, index.X_)
    except FileFormatError:
        assert index.read_only_, "a fully loaded index refuses bad files at load"
        return
    assert np.all(np.isfinite(scores))
    rows = {v: i for i, v in enumerate(index.ids_.tolist())}
    for q in range(4):
        got = [rows[i.item() if hasattr(i, "item") else i] for i in ids[q]]
        np.testing.assert_allclose(scores[q], S[q, got], rtol=1e-6, atol=1e-9)
        if index.kind == "exact":
            np.testing.assert_allclose(np.sort(scores[q])[::-1], np.sort(S[q])[::-1][:5], rtol=1e-6, atol=1e-9)


# --------------------------------------------------------------------------- CLI commands
@pytest.fixture(scope="module")
def cli_files(tmp_path_factory):
    from sklearn.datasets import dump_svmlight_file

    from sparsesim.data import load_dataset
    from sparsesim.workflows import train_model

    root = tmp_path_factory.mktemp("fuzz-cli")
    data = load_dataset("news20-sample")
    dump_svmlight_file(data.X[:20], data.y[:20], str(root / "q.svm"), zero_based=False)
    train_model("oasis", "news20-sample", root / "m.npz", n_triplets=200, seed=0)
    (root / "bad.svm").write_bytes(b"1 3:x\n\xff\xfe garbage\n")
    (root / "dir").mkdir()
    os.mkfifo(root / "fifo")
    os.symlink(root / "q.svm", root / "link.npz")
    return root


def _cli_value(root: Path):
    return st.one_of(
        st.sampled_from(["0", "-1", "1", "2", "3", "10", "2.5", "nan", "-inf", "1e309", "10**23", "99999999999999999999",
                         "", "abc", "news20-sample", "nosuchset", "oasis", "sors-l1", "dot", "exact", "ann", "sors",
                         "0-1000000000", "0,1", "C=0.5", "lam=-1", "oasis.C=abc", "dim=0", "dim=2.5", "dim=100000",
                         "grid={\"lam\": [1e-5]}", "[" * 50, "/", "-"]),
        st.sampled_from([str(root / n) for n in ("m.npz", "q.svm", "bad.svm", "dir", "fifo", "link.npz", "missing.npz",
                                                   "out.npz", "idx", "new-idx")]),
        st.text(max_size=6),
    )


@settings(max_examples=60 * SCALE, **FUZZ)
@given(command=st.sampled_from(sorted(COMMANDS)), data=st.data())
def test_fuzz_cli_commands(cli_files, command, data, monkeypatch, capsys):
    root = cli_files
    monkeypatch.setenv("SPARSESIM_MAX_TRIPLETS", "2000")  # a valid but long run is refused quickly
    monkeypatch.setenv("SPARSESIM_MAX_RUNS", "2")
    monkeypatch.setenv("SPARSESIM_LOCK_TIMEOUT", "5")
    monkeypatch.chdir(root)
    args = command.split()
    if command == "datasets info":
        args.append(data.draw(_cli_value(root)))
    options = data.draw(st.lists(st.sampled_from(COMMANDS[command]), max_size=6, unique=True)) if COMMANDS[command] \
        else []
    for option in options:
        args.append(option)
        if option not in FLAGS:
            args.append(data.draw(_cli_value(root)))
    before = {p.name: p.stat().st_mtime_ns for p in root.iterdir()}
    code, out, err = run_cli(args, monkeypatch, capsys)
    assert code in (0, 2), (args, code, err[-500:])
    assert "Traceback" not in err and "unexpected" not in err, (args, err[-800:])
    if code == 2 and err.startswith("error:"):
        assert len(err.strip().splitlines()) == 1 and len(err) < 1000, (args, err)
    for line in out.splitlines() if "--json" in args and code == 0 else ():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c} in {line[:80]}"))
    # no temporaries left behind; inputs untouched
    assert not [p.name for p in root.iterdir() if p.name.endswith(".tmp")], args
    for name in ("q.svm", "bad.svm", "m.npz"):
        if name in before and (root / name).exists():
            assert (root / name).stat().st_mtime_ns == before[name], (args, name)
    for name in ("out.npz",):
        if (root / name).exists():
            BilinearSimilarity.load(root / name)  # a model file written by the CLI is complete
            (root / name).unlink()
    for name in ("idx", "new-idx"):
        if (root / name).exists():
            import shutil

            load_index(root / name)  # an index written by the CLI is complete
            shutil.rmtree(root / name)


def test_fuzz_flag_documented():
    assert math.isfinite(SCALE) and (SCALE == 20) == LONG
