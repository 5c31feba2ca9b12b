"""A campaign of generated bad inputs and faults against the CLI and the library; prints the counts.

Families (all generated fresh from ``--seed``; everything is written under ``--work``):

* ``cli``: random arguments for every command (numbers out of range, huge, NaN, strings, paths to
  missing files, directories, FIFOs, symlinks, the command's own inputs), malformed svmlight
  files, hostile model files and hostile index directories given to ``evaluate``/``query``;
  each run is a ``sparsesim`` subprocess.
* ``library``: malformed CSR matrices at fit/scorer/index build/query, bad parameters for every
  registered algorithm (at ``fit``, and at the first ``partial_fit`` of every online classifier,
  which must agree with ``fit``) and both index kinds, hostile (re-hashed) model and index files,
  hostile *derived* index arrays (posting values, re-ranking values, projections, unit corpus
  rows replaced by other finite values and re-hashed: refused, or the answer equals the exact
  answer over the stored corpus and model), and crafted ann *candidate stages* (posting lists with
  entries left out, settings, parameters and calibration-record fields changed, re-hashed:
  refused, or the scores are exact and the recall over every corpus document as a held-out query
  meets the record's own lower confidence bound); run in worker subprocesses (a worker that dies is a
  dead process, the case is recorded and a new worker continues).
* ``service``: malformed requests to two real ``sparsesim serve`` processes (frozen, and
  ``--learn``): bodies that are not JSON, JSON of random shape, NaN/Infinity and huge numbers,
  deep nesting, oversized bodies, wrong content types, unknown paths and methods, bad vectors,
  ``top_k`` of every type, bad feedback triplets and ``/ask`` values. Each must get a 4xx JSON
  error (or a 2xx answer when valid), and ``/health`` must answer after it.
  A fifth of the requests are valid JSON of finite numbers that is hostile all the same
  (:func:`fuzz_service.finite_request`: scores that overflow float64, ``compare`` with values
  beyond 1e154, ids that are not Unicode in ``/feedback``), and every answer must keep ``/health``
  at ``{"status": "ok"}`` (an internal error makes it "degraded").
* ``feedback``: ``learn`` and ``serve --learn`` with random snapshot targets (inside the index,
  the index itself, a missing directory, a FIFO, a symlink, the feedback log, a snapshot learned on
  another index of the same width, ...) and ``--resume``/``--overwrite``: the index's files never
  change, another index's snapshot never resumes (:func:`fuzz_service.run_feedback_case`).
* ``dask``: ``index build``, ``query`` and ``serve`` with ``--scheduler`` at addresses that stay
  silent, answer HTTP, send garbage or refuse: one ``error:`` line within the documented 10 s
  plus start-up (:func:`fuzz_service.run_dask_case`).
* ``folder``, ``table``, ``meta``, ``width``, ``corner`` (library, :mod:`fuzz_ingest`): hostile text
  folders (links leading outside, FIFOs, sockets, hidden files, ``.git``), tables past the JSON
  parser's limits, model metadata around the size and depth limits, query files of other declared
  widths, and the library corners (save paths, complex W, classifiers before ``fit``, corpora
  whose scores overflow at index build and add).
* ``ingest`` (CLI, :mod:`fuzz_ingest`): ``train``, ``index build``, ``query``, ``index add`` and
  ``experiment`` on those files and with the option corners; a word of a file outside the folder
  (or hidden) printed or stored in a written model is ``wrong``.
* ``kill``: ``kill -9`` at a random moment of ``train --out``, ``index build --out`` and
  ``index add``; the target must then hold the old complete version or the new one.
* ``concurrent``: two ``index add`` runs on one index at once; both must succeed and keep both
  additions (or one must fail with an error), never a lost update.

Outcome classes: ``ok`` (valid result), ``clean-error`` (one ``error:`` line and exit 2, usage
errors included, or a project exception), and the failures ``traceback``, ``dead``
(killed by a signal), ``hang`` (timeout), ``unexpected`` (a non-project exception), ``partial``
(a temporary or incomplete file left), ``wrong`` (an answer that differs from the exact answer
over the accepted data, or non-JSON output).

Usage::

    python tests/fuzz_campaign.py --work /tmp/campaign --cli 150 --library 1700 --ingest 300 \
        --service 400 --feedback 60 --dask 12 --kill 12 --concurrent 6 --seed 2028
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from fuzz_service import finite_request, make_service_fixtures, run_dask_case, run_feedback_case
from fuzz_ingest import (LIBRARY_FAMILIES, ingest_cli_case, leaked, library_ingest_case, make_cli_fixtures,
                         make_folder)
from fuzztools import (ASK_VALUES, COMMANDS as TEST_COMMANDS, FLAGS, METHODS, NESTING_DEPTHS, PATHS, RAW_NUMBERS,
                       nested_bodies, number_bodies)
from indextools import rehash_index

EXE = [sys.executable, "-m", "sparsesim.cli"]
VALUES = ["0", "-1", "1", "2", "3", "10", "2.5", "nan", "inf", "-inf", "1e309", "10**23", "99999999999999999999",
          str(2**63), str(2**31), "", " ", "abc", "news20-sample", "nosuchset", "mfeat", "landmine", "oasis", "sors-l1",
          "adasors-l1", "dot", "cosine", "exact", "ann", "sors", "romco", "0-1000000000", "0,1", "5-3", "C=0.5",
          "C=1e309", "lam=-1", "compact=yes", "initial_capacity=-1", "n_triplets=2.5", "identity=\"no\"",
          "oasis.C=abc", "random_state=-1", "dim=0", "dim=2.5", "dim=100000", "nprobe=0", "frobnicate=1",
          "grid={\"lam\": [1e-5]}", ".C=1", "n_jobs=abc", "kind=ann", "1GiB", "64KiB", "50%", "0GiB", "1e30", "[" * 60, "/", "-", "auto", "test", "all", "--json", "\x00", "é", "a" * 300]


def _paths(root: Path):
    return [str(root / n) for n in ("m.npz", "q.svm", "bad.svm", "dir", "fifo", "link.npz", "missing.npz",
                                    "out.npz", "idx", "new-idx", "h.npz", "hidx", "hsvm.svm", "bomb.svm.gz")]


COMMANDS = {**TEST_COMMANDS, "datasets fetch": ["--from"], "frobnicate": []}
REQUIRED = {"train": ["--algorithm", "--dataset", "--out"], "evaluate": ["--model", "--dataset"],
            "index build": ["--model", "--data", "--out"], "index add": ["--index", "--data"],
            "experiment": ["--dataset", "--algorithms"]}


# --------------------------------------------------------------------------- fixtures
def make_fixtures(root: Path):
    from sklearn.datasets import dump_svmlight_file

    from sparsesim.data import load_dataset
    from sparsesim.indexes import build_index
    from sparsesim.workflows import train_model

    root.mkdir(parents=True, exist_ok=True)
    data = load_dataset("news20-sample")
    dump_svmlight_file(data.X[:20], data.y[:20], str(root / "q.svm"), zero_based=False)
    dump_svmlight_file(data.X[:300], data.y[:300], str(root / "corpus.svm"), zero_based=False)
    train_model("oasis", "news20-sample", root / "m.npz", n_triplets=300, seed=0, overwrite=True)
    from sparsesim.models import BilinearSimilarity

    model = BilinearSimilarity.load(root / "m.npz")
    build_index(model, data.X[:300], kind="exact").save(root / "base-exact")
    build_index(model, data.X[:300], kind="ann", dim=16).save(root / "base-ann")
    normed = BilinearSimilarity(model.W, identity=model.identity, normalize=True)
    build_index(normed, data.X[:300], kind="exact", strategy="corpus").save(root / "base-normed")
    (root / "bad.svm").write_bytes(b"1 3:x\n\xff\xfe garbage\n")
    (root / "dir").mkdir(exist_ok=True)
    if not (root / "fifo").exists():
        os.mkfifo(root / "fifo")
    if not (root / "link.npz").exists():
        os.symlink(root / "q.svm", root / "link.npz")
    import gzip

    with gzip.open(root / "bomb.svm.gz", "wb") as handle:
        for _ in range(200):
            handle.write(b"1" * (1 << 20))
    make_cli_fixtures(root)
    return data


def mutate_svmlight(rng, path: Path):
    tokens = ["1", "-1", "nan", "inf", "1e400", "abc", "qid:1", "#", "0:1", "-3:1", f"{2**31}:1", f"{2**63}:1",
              f"{10**30}:1", "5:nan", "5:inf", "5:", ":5", "3:1 3:2", "1:1e308 1:1e308", "\x00", "é:1", "2:0x10"]
    lines = []
    for _ in range(rng.integers(0, 6)):
        k = rng.integers(0, 6)
        lines.append(" ".join([str(rng.choice(["1", "2", "-1"]))] + [str(rng.choice(tokens)) for _ in range(k)]
                              + [f"{rng.integers(1, 5000)}:{rng.normal():.3f}" for _ in range(rng.integers(0, 4))]))
    path.write_bytes("\n".join(lines).encode("utf-8", "surrogatepass"))


def _rehash_model(arrays, meta, out):
    from sparsesim.persistence import bundle_checksum

    try:
        meta["checksum"] = bundle_checksum(arrays, meta)
        arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    except (TypeError, ValueError):
        return False
    np.savez(out, **arrays)
    return True


HOSTILE = [None, True, False, -1, 0, 1, 2**31, 2**63, -2**63, 2.5, 1e308, float("nan"), "abc", "", [1, 2], {"a": 1},
           "yes", "no"]


def mutate_model(rng, src: Path, out: Path) -> str:
    with np.load(src) as z:
        arrays = {k: z[k].copy() for k in z.files}
    meta = json.loads(arrays.pop("__meta__").tobytes())
    action = str(rng.choice(["meta", "value", "dtype", "flip", "truncate", "nest"]))
    if action == "meta":
        key = str(rng.choice(sorted(meta) + ["extra"]))
        meta[key] = HOSTILE[rng.integers(len(HOSTILE))]
        if not _rehash_model(arrays, meta, out):
            shutil.copy(src, out)
    elif action == "nest":
        meta["params"] = json.loads("[" * 200 + "]" * 200)
        arrays["__meta__"] = np.frombuffer(("[" * 100000 + "]" * 100000).encode(), np.uint8) if rng.random() < 0.5 \
            else np.frombuffer(json.dumps(meta).encode(), np.uint8)
        np.savez(out, **arrays)
    elif action in ("value", "dtype"):
        name = str(rng.choice(sorted(arrays)))
        arr = arrays[name]
        if action == "value" and arr.size:
            pos = rng.integers(arr.size)
            arr.flat[pos] = rng.choice([-1, 10**6, 2**31 - 1, 0] if arr.dtype.kind in "iu" else [np.nan, np.inf, 1e308])
        else:
            arr = arr.astype(str(rng.choice(["<f4", "<f2", "<i1", "<i8", "<c16", "<u4"])))
        arrays[name] = arr
        _rehash_model(arrays, meta, out) or shutil.copy(src, out)
    else:
        raw = bytearray(src.read_bytes())
        if action == "flip":
            raw[rng.integers(len(raw))] ^= int(rng.integers(1, 256))
        else:
            raw = raw[:rng.integers(len(raw))]
        out.write_bytes(bytes(raw))
    return action


def _rehash_index(out: Path, manifest_edit=None) -> bool:
    """:func:`indextools.rehash_index`: a hostile but consistent index. False if the edited
    manifest cannot be hashed (the files are re-hashed, the manifest is left as it was)."""
    try:
        rehash_index(out, manifest_edit)
        return True
    except (TypeError, ValueError):
        return False


def mutate_index(rng, src: Path, out: Path) -> str:
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(src, out)
    manifest = json.loads((out / "manifest.json").read_text())
    data = out / manifest["data_dir"]
    action = str(rng.choice(["value", "dtype", "manifest", "flip", "faiss"]))
    names = sorted(f for f in manifest["files"] if f.endswith(".npy"))
    if action in ("value", "dtype"):
        fname = str(rng.choice(names))
        arr = np.load(data / fname).copy()
        if action == "value" and arr.size:
            pos = rng.integers(arr.size)
            if arr.dtype.kind == "f":
                arr.flat[pos] = rng.choice([np.nan, np.inf, -1.0, 1e308])
            elif arr.dtype.kind == "U":
                arr.flat[pos] = arr.flat[(pos + 1) % arr.size]
            else:
                arr.flat[pos] = rng.choice([-1, -2**31, 10**6, 2**31 - 1, 0, int(arr.flat[pos]) + 1])
        else:
            try:
                arr = arr.astype(str(rng.choice(["<f4", "<f8", "<i4", "<i8", "<i2"])))
            except (ValueError, TypeError):
                pass
        np.save(data / fname, arr, allow_pickle=False)
    elif action == "faiss" and "faiss.index" in manifest["files"]:
        raw = bytearray((data / "faiss.index").read_bytes())
        for _ in range(rng.integers(1, 4)):
            raw[rng.integers(len(raw))] ^= int(rng.integers(1, 256))
        (data / "faiss.index").write_bytes(bytes(raw))
    elif action == "flip":
        fname = str(rng.choice(sorted(manifest["files"])))
        raw = bytearray((data / fname).read_bytes())
        raw[rng.integers(len(raw))] ^= 0xFF
        (data / fname).write_bytes(bytes(raw))
        return action  # not re-hashed: the sha256 must catch it
    edit = None
    if action == "manifest":
        section = str(rng.choice(["top", "params", "state", "model"]))
        key_pool = manifest if section == "top" else manifest[section]
        key = str(rng.choice(sorted(k for k in key_pool if k != "files") + ["extra"]))
        value = HOSTILE[rng.integers(len(HOSTILE))]

        def edit(m):
            (m if section == "top" else m[section])[key] = value
    _rehash_index(out, edit)
    return action


# arrays derived from the corpus and the model, per fixture index
DERIVED = {"base-exact": ["postings.data"], "base-ann": ["heavy.Z", "projection.B", "postings.floor"],
           "base-normed": ["corpus.data", "postings.data"]}




def mutate_derived(rng, root: Path, out: Path) -> str:
    """A copy of a fixture index with one derived array replaced by other *finite* values, re-hashed."""
    src = str(rng.choice(sorted(DERIVED)))
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(root / src, out)
    manifest = json.loads((out / "manifest.json").read_text())
    name = str(rng.choice(DERIVED[src]))
    path = out / manifest["data_dir"] / f"{name}.npy"
    arr = np.load(path).copy()
    flat = arr.reshape(-1)
    how = str(rng.choice(["one", "few", "scale", "permute", "noise", "swap", "zero", "tiny", "sign"]))
    pos = rng.integers(flat.size, size=int(rng.integers(1, 6)) if how == "few" else 1)
    if how in ("one", "few"):
        flat[pos] = flat[pos] * rng.uniform(-3, 3) + rng.normal(size=pos.size)
    elif how == "scale":
        flat *= rng.choice([0.5, 0.9, 1.1, 2.0, -1.0])
    elif how == "permute":
        flat[:] = flat[rng.permutation(flat.size)]
    elif how == "noise":
        flat += rng.normal(0, 0.01 * (np.abs(flat).mean() + 1e-12), flat.size)
    elif how == "swap":
        if arr.ndim == 2 and arr.shape[0] > 1:
            a, b = rng.choice(arr.shape[0], 2, replace=False)
            arr[[a, b]] = arr[[b, a]]
        else:
            a, b = rng.choice(flat.size, 2, replace=False)
            flat[[a, b]] = flat[[b, a]]
    elif how == "zero":
        flat[pos] = 0.0
    elif how == "tiny":
        flat[pos] = flat[pos] * (1 + 1e-6) + 1e-9
    else:
        flat[pos] = -flat[pos]
    np.save(path, arr.astype(np.load(path, mmap_mode="r").dtype), allow_pickle=False)
    _rehash_index(out)
    return f"{src}/{name}/{how}"


SETTING_VALUES = [0, 1, 2, 5, 10, 31, 64, 299, 300, 301, 10**6, 2**39]
RECORD_EDITS = ["recall", "recall_lower_bound", "met", "hits", "n_documents", "n_settings", "n_queries",
                "sample_seed", "top_k", "model_checksum", "queries"]


def mutate_candidates(rng, root: Path, out: Path) -> str:
    """A copy of the ann fixture whose candidate stage or calibration record was crafted, re-hashed:
    posting lists with entries left out (values stay exact and impact-ordered), a setting or
    parameter changed, or a record field changed."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(root / "base-ann", out)
    manifest = json.loads((out / "manifest.json").read_text())
    data = out / manifest["data_dir"]
    how = str(rng.choice(["lists", "setting", "params", "record"]))
    edit = None
    if how == "lists":
        indptr = np.load(data / "postings.indptr.npy")
        lengths = np.diff(indptr)
        share = float(rng.choice([0.01, 0.05, 0.2, 1.0]))
        chosen = rng.random(lengths.size) < share
        rank = np.arange(indptr[-1]) - np.repeat(indptr[:-1], lengths)
        cut = int(rng.choice([0, 1, 2, 5, 20]))  # entries from this rank on (or the best one, cut 0) go
        drop = np.repeat(chosen, lengths) & ((rank == 0) if cut == 0 else (rank >= cut))
        keep = ~drop
        new_indptr = np.zeros_like(indptr)
        np.cumsum(np.bincount(np.repeat(np.arange(lengths.size), lengths)[keep], minlength=lengths.size),
                  out=new_indptr[1:])
        # per-entry arrays: CSR (exact index) or the ann index's compact lists (ids, high bytes, codes)
        entries = [p for p in ("indices", "data", "ids", "ids_hi", "ids32", "codes") if (data / f"postings.{p}.npy").is_file()]
        parts = [("indptr", new_indptr)] + [(p, np.load(data / f"postings.{p}.npy")[keep]) for p in entries]
        for part, arr in parts:
            np.save(data / f"postings.{part}.npy", arr, allow_pickle=False)
        how = f"lists/{share}/{cut}"
    elif how in ("setting", "params"):
        key = str(rng.choice(["n_postings", "sparse_pool", "dense_pool", "nprobe"]))
        value = int(rng.choice(SETTING_VALUES))

        def edit(m):
            (m["state"]["calibration"]["setting"] if how == "setting" else m["params"])[key] = value
        how = f"{how}/{key}={value}"
    else:
        key = str(rng.choice(RECORD_EDITS))
        record = manifest["state"]["calibration"]
        old = record.get(key)
        if key == "hits":
            value = [min(record["top_k"], h + int(rng.integers(0, 2))) for h in old]
        elif isinstance(old, bool):
            value = not old
        elif isinstance(old, float):
            value = float(np.clip(old + rng.choice([-0.2, -0.01, 0.01, 0.03, 0.2]), 0.0, 1.0))
        elif isinstance(old, int):
            value = int(max(0, old + rng.choice([-100, -1, 1, 10, 10**6])))
        else:
            value = str(rng.choice(["given queries", "0" * 64]))

        def edit(m):
            m["state"]["calibration"][key] = value
        how = f"record/{key}"
    _rehash_index(out, edit)
    return how


def check_recall(index) -> str:
    """'ok' when an ann index that loaded reaches the recall its record claims: its recall on every
    corpus document as a held-out query (the whole population, no sampling) is at least the
    record's own lower confidence bound (what a genuine index misses with probability 1e-6)."""
    import math

    from sparsesim.indexes.calibration import measure_recall
    from sparsesim.indexes.recall_check import DELTA, kl_lower_bound

    record = index.calibration_
    if record is None:
        return "ok"
    rows = np.arange(index.n_documents)
    (per_query, _), = measure_recall(index, rows, int(record["top_k"]), [index.search_setting()])
    claimed = kl_lower_bound(record["recall"], int(record["n_queries"]),
                             math.log(int(record.get("n_settings") or 1) / DELTA))
    return "ok" if per_query.mean() >= claimed else "wrong"


def check_answers(index, root: Path) -> str:
    """'ok' when the index answers with the exact scores of the stored corpus and model (an exact index
    also with the exact top-k), else 'wrong'."""
    from sparsesim.data import load_dataset

    Q = load_dataset(str(root / "q.svm"), n_features=index.n_features).X[:4]
    ids, scores = index.query(Q, top_k=5)
    S = index.model.score_matrix(Q, index.X_)
    rows = {v: i for i, v in enumerate(index.ids_.tolist())}
    for q in range(Q.shape[0]):
        got = [rows[i.item() if hasattr(i, "item") else i] for i in ids[q]]
        if not np.allclose(scores[q], S[q, got], rtol=1e-6, atol=1e-9):
            return "wrong"
        if index.kind == "exact" and not np.allclose(np.sort(scores[q])[::-1], np.sort(S[q])[::-1][:5],
                                                     rtol=1e-6, atol=1e-9):
            return "wrong"
    return "ok"


def _online_classifiers():
    from sparsesim.learners.kernel_pa import KernelPassiveAggressive
    from sparsesim.learners.linear_pa import PassiveAggressiveBinary
    from sparsesim.registry import ALGORITHMS, make_estimator

    out = [(n, lambda n=n: make_estimator(n)) for n in sorted(ALGORITHMS)
           if ALGORITHMS[n].kind in ("transfer", "multitask-classifier")]
    return out + [("PassiveAggressiveBinary", PassiveAggressiveBinary), ("KernelPassiveAggressive", KernelPassiveAggressive)]


def online_param_case(rng) -> str:
    """A hostile parameter value on an online classifier: ``fit`` and the first ``partial_fit`` must
    both refuse it with a project error, or both accept it."""
    from sparsesim.checks import fast_params, learner_kind, make_problem
    from sparsesim.exceptions import SparsesimError

    classifiers = _online_classifiers()
    name, factory = classifiers[rng.integers(len(classifiers))]
    param = str(rng.choice(sorted(factory().get_params(deep=False))))
    value = HOSTILE[rng.integers(len(HOSTILE))]
    outcomes = []
    for method in ("fit", "partial_fit"):
        est = factory()
        est.set_params(**{k: v for k, v in fast_params(est).items() if k != param}, **{param: value})
        if name in ("PassiveAggressiveBinary", "KernelPassiveAggressive"):
            X = np.random.default_rng(0).normal(size=(20, 6))
            args, kwargs = ((sp.csr_matrix(X) if name == "PassiveAggressiveBinary" else X), np.where(X[:, 0] > 0, 1, -1)), {}
        else:
            problem = make_problem(learner_kind(est))
            args, kwargs = problem.fit_args, problem.fit_kwargs
        try:
            getattr(est, method)(*args, **kwargs)
            outcomes.append("ok")
        except SparsesimError:
            outcomes.append("clean-error")
    if outcomes[0] != outcomes[1]:
        return "wrong"
    return outcomes[0]


# --------------------------------------------------------------------------- service family
def _random_json(rng, depth: int = 0):
    pick = int(rng.integers(0, 9 if depth < 3 else 6))
    if pick == 0:
        return None
    if pick == 1:
        return bool(rng.integers(2))
    if pick == 2:
        return [0, -1, 1, 5, 2**31, 2**63, 10**30, -2**63][rng.integers(8)]
    if pick == 3:
        return float(rng.choice([0.5, -1.0, 1e308, 1e-320, 2.5]))
    if pick in (4, 5):
        return str(rng.choice(["", " ", "goal", "abc", "\x00", "é" * 10, "a" * 3000, "texts", "1"]))
    if pick in (6, 7):
        return [_random_json(rng, depth + 1) for _ in range(rng.integers(0, 4))]
    keys = ["texts", "vectors", "top_k", "compare", "snippets", "query", "preferred", "other", "clicked", "shown",
            "indices", "values", "x"]
    return {str(rng.choice(keys)): _random_json(rng, depth + 1) for _ in range(rng.integers(0, 4))}


def _random_vector(rng, d: int):
    n = int(rng.integers(0, 5))
    idx = [int(rng.integers(0, d)) if rng.random() < 0.6 else
           [-1, d, d + 1, 2**31, 2**63, 10**30, 1.5, "3", None, True][rng.integers(10)] for _ in range(n)]
    val = [float(rng.normal()) if rng.random() < 0.7 else
           ["1", None, True, [1.0], 1e308, -1e308, 10**400][rng.integers(7)] for _ in range(n)]
    vec = {"indices": idx, "values": val}
    mutation = rng.integers(0, 8)
    if mutation == 0:
        val.append(1.0)
    elif mutation == 1:
        vec["weights"] = [1]
    elif mutation == 2:
        vec.pop("values")
    elif mutation == 3:
        vec["indices"] = _random_json(rng, 2)
    return vec


def service_request(rng, d: int, ids: list):
    """(server, method, path, headers, body) of one random, mostly malformed, request."""
    kind = str(rng.choice(["query", "query", "query", "feedback", "feedback", "ask", "raw", "raw", "method"]))
    server = "learn" if kind in ("feedback", "ask") or rng.random() < 0.5 else "frozen"
    ctype = str(rng.choice(["application/json"] * 4 + ["text/plain", "application/x-www-form-urlencoded",
                                                        "multipart/form-data", "application/json; charset=utf-8"]))
    headers = {"content-type": ctype} if rng.random() < 0.9 else {}
    if kind == "query":
        payload = {}
        which = str(rng.choice(["texts", "vectors", "vectors", "both", "neither"]))
        if which in ("texts", "both"):
            payload["texts"] = [str(rng.choice(["goal", "", "a" * 30000])) if rng.random() < 0.6 else _random_json(rng, 2)
                                for _ in range(rng.integers(0, 4))] if rng.random() < 0.8 else _random_json(rng, 2)
        if which in ("vectors", "both"):
            payload["vectors"] = [_random_vector(rng, d) for _ in range(rng.integers(0, 4))] if rng.random() < 0.8 \
                else _random_json(rng, 2)
        if rng.random() < 0.7:
            payload["top_k"] = [1, 5, 0, -1, 50, 51, 301, 10**9, 2**63, 1.0, "5", None, True, 10**400][rng.integers(14)]
        for key in ("compare", "snippets"):
            if rng.random() < 0.3:
                payload[key] = [True, False, 1, "yes", None][rng.integers(5)]
        if rng.random() < 0.1:
            payload["frobnicate"] = 1
        return server, "POST", "/query", headers, json.dumps(payload).encode()
    if kind == "feedback":
        doc = lambda: ids[rng.integers(len(ids))] if rng.random() < 0.5 else _random_json(rng, 2)  # noqa: E731
        query = [lambda: "goal", lambda: _random_vector(rng, d), lambda: _random_json(rng, 2), doc][rng.integers(4)]()
        if rng.random() < 0.5:
            record = {"query": query, "preferred": doc(), "other": doc()}
        else:
            record = {"query": query, "clicked": [doc() for _ in range(rng.integers(0, 3))], "shown": _random_json(rng, 1)}
        if rng.random() < 0.2:
            record.pop(str(rng.choice(sorted(record))))
        body = [record, [record], [record] * 3, []][rng.integers(4)]
        return server, "POST", "/feedback", headers, json.dumps(body).encode()
    if kind == "ask":
        n = [str(rng.integers(-5, 100)), *ASK_VALUES][rng.integers(len(ASK_VALUES) + 1)]
        return server, "GET", f"/ask?n={n}", {}, b""
    if kind == "method":
        return server, str(rng.choice(METHODS)), str(rng.choice(PATHS)), {}, b""
    raw = str(rng.choice(["bytes", "json", "number", "nested", "oversized", "utf16"]))
    if raw == "bytes":
        body = rng.integers(0, 256, rng.integers(0, 200)).astype(np.uint8).tobytes()
    elif raw == "json":
        body = json.dumps(_random_json(rng)).encode()
    elif raw == "number":
        lit = str(rng.choice(RAW_NUMBERS))
        body = str(rng.choice(number_bodies(lit, '"vectors": [{"indices": [0], "values": [1]}]'))).encode()
    elif raw == "nested":
        body = str(rng.choice(nested_bodies(int(rng.choice(NESTING_DEPTHS)), "vectors"))).encode()
    elif raw == "oversized":
        body = b'{"texts": ["' + b"a" * (SERVICE_BODY_LIMIT + int(rng.integers(1, 5000))) + b'"]}'
    else:
        body = json.dumps({"vectors": [{"indices": [0], "values": [1.0]}]}).encode("utf-16")
    return server, "POST", str(rng.choice(["/query", "/feedback"])), headers, body


SERVICE_BODY_LIMIT = 20_000


def _start_server(index_dir: Path, *extra):
    import httpx
    from clitools import start_server  # needs httpx and pytest: only the service family imports it

    proc, base = start_server(["--index", index_dir, "--max-top-k", "50", "--max-body-bytes", SERVICE_BODY_LIMIT,
                               *extra], timeout=120)
    return proc, httpx.Client(base_url=base, timeout=30)


def run_service(n: int, rng, root: Path, counts, failures):
    """``n`` random requests; outcome per request: 'ok' (2xx), 'clean-error' (4xx JSON error), or a failure."""
    import httpx

    from sparsesim.indexes import read_manifest
    from sparsesim.service.openapi import SECURITY_HEADERS

    learn_dir = root / "serve-learn"
    shutil.rmtree(learn_dir, ignore_errors=True)
    shutil.copytree(root / "base-exact", learn_dir)
    servers = {"frozen": _start_server(root / "base-exact"),
               "learn": _start_server(learn_dir, "--learn", "--snapshot", root / "serve-snap.npz")}
    d = read_manifest(root / "base-exact")["n_features"]
    from sparsesim.indexes import load_index

    ids = [v.item() for v in load_index(root / "base-exact").ids_]
    try:
        for _ in range(n):
            if rng.random() < 0.2:
                server, method, path, headers, body, check = finite_request(rng, d, ids)
            else:
                (server, method, path, headers, body), check = service_request(rng, d, ids), None
            proc, client = servers[server]
            try:
                r = client.request(method, path, headers=headers, content=body)
                status = r.status_code
                if status >= 500:
                    outcome = "unexpected"
                elif status >= 400:
                    try:
                        err = r.json() if method != "HEAD" else {"error": "head"}
                        outcome = "clean-error" if isinstance(err, dict) and isinstance(err.get("error"), str) \
                            else "unexpected"
                    except ValueError:
                        outcome = "unexpected"
                else:
                    outcome = "ok"
                if check is not None:
                    try:
                        outcome = check(status, r.json()) or outcome
                    except ValueError:
                        outcome = "unexpected"
                ctype = headers.get("content-type")
                if (method == "POST" and path in ("/query", "/feedback") and ctype is not None
                        and ctype.split(";")[0] != "application/json" and not (server == "frozen" and path == "/feedback")
                        and status != 415):
                    outcome = "wrong"  # a body of another type read as JSON
                if status < 500 and any(r.headers.get(k) != v for k, v in SECURITY_HEADERS.items()):
                    outcome = "no-security-headers"  # issue 40 family 12: every answer carries them
            except httpx.TimeoutException:
                outcome = "hang"
            except httpx.HTTPError as exc:
                outcome = "dead" if proc.poll() is not None else f"unexpected:{type(exc).__name__}"
            if proc.poll() is not None:
                outcome = "dead"
            else:
                try:
                    if client.get("/health").json() != {"status": "ok"}:
                        outcome = "unexpected"
                except (httpx.HTTPError, ValueError):
                    outcome = "dead" if proc.poll() is not None else "hang"
            key = outcome.split(":")[0]
            counts["service"][key] += 1
            if key not in ("ok", "clean-error"):
                failures.append(("service", f"{method} {path} {headers} {body[:200]!r}", outcome))
            if proc.poll() is not None:  # restart a dead server so the campaign goes on
                servers[server] = _start_server(*((root / "base-exact",) if server == "frozen" else
                                                  (learn_dir, "--learn", "--snapshot", root / "serve-snap.npz")))
    finally:
        from clitools import stop_server

        for proc, client in servers.values():
            client.close()
            stop_server(proc)


# --------------------------------------------------------------------------- CLI family
def classify_cli(proc_result, args, root: Path, timed_out: bool) -> str:
    if timed_out:
        return "hang"
    code, out, err = proc_result
    if code < 0:
        return "dead"
    if "Traceback" in err:
        return "traceback"
    if code == 1 and "unexpected" in err:
        return "unexpected"
    if code not in (0, 2):
        return "unexpected"
    if [p for p in root.iterdir() if p.name.endswith(".tmp")]:
        return "partial"
    if code == 2:
        lines = err.strip().splitlines()
        # one error line, after the warnings (one line each) the command printed first
        if not lines or not lines[-1].startswith("error:") or len(lines[-1]) > 1000 \
                or not all(line.startswith("warning: ") for line in lines[:-1]):
            return "unexpected"
        return "clean-error"
    if "--json" in args:
        for line in out.splitlines():
            try:
                json.loads(line, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
            except ValueError:
                return "wrong"
    return "ok"


def run_cli_case(rng, root: Path, timeout: float):
    command = str(rng.choice(sorted(COMMANDS)))
    args = command.split()
    if command in ("datasets info", "datasets fetch"):
        args.append(str(rng.choice(VALUES + ["news20-sample"])))
    opts = list(COMMANDS[command])
    chosen = [o for o in REQUIRED.get(command, []) if rng.random() < 0.85]
    chosen += [o for o in opts if o not in chosen and rng.random() < 0.35]
    pool = VALUES + _paths(root) + [str(make_folder(rng, root / "cli-folder"))]
    for option in chosen:
        args.append(option)
        if option not in FLAGS:
            args.append(str(rng.choice(pool)))
    # hostile files the command will read
    mutate_svmlight(rng, root / "hsvm.svm")
    mutate_model(rng, root / "m.npz", root / "h.npz")
    mutate_index(rng, root / str(rng.choice(["base-exact", "base-ann"])), root / "hidx")
    outcome, _, err = _run_and_check(args, root, timeout)
    return outcome, args, err


def _run_and_check(args, root: Path, timeout: float):
    """Run ``sparsesim ARGS`` in ``root``; (outcome class, stdout, end of stderr). Outputs written
    (``out.npz``, ``idx``, ``new-idx``) must load; they are removed for the next case."""
    env = dict(os.environ, SPARSESIM_MAX_TRIPLETS="3000", SPARSESIM_MAX_RUNS="2", SPARSESIM_LOCK_TIMEOUT="5",
               SPARSESIM_MAX_DECOMPRESSED=str(16 << 20))
    try:
        proc = subprocess.run(EXE + args, capture_output=True, text=True, errors="replace", cwd=root, env=env,
                              timeout=timeout)
        result = (proc.returncode, proc.stdout, proc.stderr)
        timed_out = False
    except subprocess.TimeoutExpired:
        result, timed_out = (None, "", ""), True
    outcome = classify_cli(result, args, root, timed_out)
    # outputs written must be complete; clean up for the next case
    for name in ("out.npz",):
        if (root / name).exists():
            try:
                from sparsesim.models import BilinearSimilarity

                BilinearSimilarity.load(root / name)
            except Exception:  # noqa: BLE001
                outcome = "partial" if outcome in ("ok", "clean-error") else outcome
    if leaked(result[1] or "", root):
        outcome = "wrong"  # a file outside the folder (or a hidden one) was read
    (root / "out.npz").unlink(missing_ok=True)
    for name in ("idx", "new-idx"):
        if (root / name).exists():
            try:
                from sparsesim.indexes import load_index

                load_index(root / name)
            except Exception:  # noqa: BLE001
                outcome = "partial" if outcome in ("ok", "clean-error") else outcome
            shutil.rmtree(root / name, ignore_errors=True)
    for p in root.iterdir():
        if p.name.endswith(".tmp"):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink()
    return outcome, result[1] or "", (result[2] or "")[-300:]


def run_ingest_case(rng, root: Path, timeout: float):
    """One CLI case on hostile files (:func:`fuzz_ingest.ingest_cli_case`)."""
    args, _ = ingest_cli_case(rng, root)
    outcome, _, err = _run_and_check(args, root, timeout)
    return outcome, args, err


# --------------------------------------------------------------------------- library family (worker)
def library_case(case: dict, root: Path):
    """Run one library case; returns the outcome class (exceptions are classified by the caller)."""
    from sparsesim.checks import fast_params, learner_kind, make_problem
    from sparsesim.indexes import build_index, load_index
    from sparsesim.models import BilinearSimilarity
    from sparsesim.registry import ALGORITHMS, make_estimator

    rng = np.random.default_rng(case["seed"])
    family = case["family"]
    if family == "matrix":
        n, d = 12, 7
        nnz = int(rng.integers(1, 30))
        indptr = np.concatenate([[0], np.sort(rng.integers(0, nnz + 1, n - 1)), [nnz]]).astype(np.int64)
        indices = rng.integers(0, d, nnz).astype(np.int32)
        data = rng.normal(size=nnz)
        fault = str(rng.choice(["index", "negative", "indptr", "nan", "inf", "short", "complex", "strings", "3d"]))
        if fault == "index":
            indices[rng.integers(nnz)] = rng.choice([d, 2**31 - 1])
        elif fault == "negative":
            indices[rng.integers(nnz)] = rng.choice([-1, -2**31])
        elif fault == "indptr":
            indptr[rng.integers(1, n + 1)] = rng.choice([nnz + 1, -1, 10**6])
        elif fault == "nan":
            data[rng.integers(nnz)] = np.nan
        elif fault == "inf":
            data[rng.integers(nnz)] = np.inf
        elif fault == "short":
            data = data[:-1]
        X = sp.csr_matrix((n, d))
        X.indptr, X.indices, X.data = indptr, indices, data
        if fault == "complex":
            X.data = data.astype(np.complex128)
        if fault == "strings":
            X = np.array([["a"] * d] * n)
        if fault == "3d":
            X = np.zeros((2, 2, 2))
        names = sorted(k for k, s in ALGORITHMS.items() if s.kind in ("similarity", "baseline"))
        name = str(rng.choice(names))
        where = str(rng.choice(["fit", "partial", "scorer", "build", "query"]))
        ident = BilinearSimilarity(sp.identity(d, format="csr"))
        if where == "fit":
            est = make_estimator(name)
            est.set_params(**fast_params(est))
            est.fit(X, np.repeat([0, 1, 2], 4))
        elif where == "partial":
            est = make_estimator(name)
            if hasattr(est, "partial_fit_triplets"):
                est.set_params(**fast_params(est))
                est.partial_fit_triplets(X, rng.integers(0, n, (5, 3)))
            else:
                est.fit(X, np.repeat([0, 1, 2], 4))
        elif where == "scorer":
            ident.scorer(X)(np.arange(3))
        elif where == "build":
            build_index(ident, X, kind=str(rng.choice(["exact", "ann"])))
        else:
            good = sp.random(40, d, density=0.4, format="csr", random_state=0)
            build_index(ident, good).query(X, top_k=3)
        return "ok-but-bad"  # a malformed matrix must never be accepted
    if family == "param":
        names = sorted(ALGORITHMS)
        name = str(rng.choice(names))
        est = make_estimator(name)
        params = [p for p in est.get_params(deep=False) if p != "oracle"]
        if not params:  # e.g. the dot product: nothing to set, a parameter name it lacks must be refused
            try:
                make_estimator(name, frobnicate=1)
            except Exception as exc:  # noqa: BLE001
                raise exc
            return "ok-but-bad"
        param = str(rng.choice(params))
        value = HOSTILE[rng.integers(len(HOSTILE))]
        fast = fast_params(est)
        fast.pop(param, None)
        est.set_params(**fast, **{param: value})
        problem = make_problem(learner_kind(est))
        est.fit(*problem.fit_args, **problem.fit_kwargs)
        return "ok"
    if family == "index-param":
        import inspect

        from sparsesim.indexes import INDEX_KINDS

        kind = str(rng.choice(["exact", "ann"]))
        names = [p for p in inspect.signature(INDEX_KINDS[kind].__init__).parameters if p not in ("self", "model")]
        param = str(rng.choice(names + ["frobnicate"]))
        value = HOSTILE[rng.integers(len(HOSTILE))]
        X = sp.random(60, 20, density=0.2, format="csr", random_state=0)
        model = BilinearSimilarity(sp.random(20, 20, density=0.1, format="csr", random_state=1))
        build_index(model, X, kind=kind, **{param: value}).query(X[:3], top_k=5)
        return "ok"
    if family == "model-file":
        out = root / f"lib-{os.getpid()}.npz"
        mutate_model(rng, root / "m.npz", out)
        model = BilinearSimilarity.load(out)
        X = sp.random(4, model.n_features, density=0.01, format="csr", random_state=0)
        ok = bool(np.all(np.isfinite(model.score_matrix(X, X))))
        return "ok" if ok else "wrong"
    if family == "index-file":
        out = root / f"lib-idx-{os.getpid()}"
        mutate_index(rng, root / str(rng.choice(["base-exact", "base-ann"])), out)
        index = load_index(out, mmap=bool(rng.random() < 0.5))
        return check_answers(index, root)
    if family == "derived":
        out = root / f"lib-der-{os.getpid()}"
        mutate_derived(rng, root, out)
        index = load_index(out, mmap=bool(rng.random() < 0.5))
        return check_answers(index, root)
    if family == "candidates":
        out = root / f"lib-cand-{os.getpid()}"
        mutate_candidates(rng, root, out)
        index = load_index(out, mmap=bool(rng.random() < 0.5), verify=False)  # the check runs on every load
        answers = check_answers(index, root)
        return check_recall(index) if answers == "ok" else answers
    if family == "online-param":
        return online_param_case(rng)
    if family in LIBRARY_FAMILIES:
        return library_ingest_case(family, rng, root)
    raise ValueError(family)


def worker_main(root: Path):
    from sparsesim.exceptions import SparsesimError

    for line in sys.stdin:
        case = json.loads(line)
        try:
            outcome = library_case(case, root)
        except SparsesimError:
            outcome = "clean-error"
        except Exception as exc:  # noqa: BLE001
            outcome = f"unexpected:{type(exc).__name__}:{str(exc)[:120]}"
        sys.stdout.write(json.dumps({"id": case["id"], "outcome": outcome}) + "\n")
        sys.stdout.flush()


def run_library(cases, root: Path, timeout: float):
    results = {}
    pending = list(cases)
    while pending:
        proc = subprocess.Popen([sys.executable, __file__, "--worker", "--work", str(root)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, bufsize=1)
        current = None
        while pending:
            current = pending[0]
            proc.stdin.write(json.dumps(current) + "\n")
            proc.stdin.flush()
            start = time.time()
            line = ""
            import select

            while time.time() - start < timeout:
                ready, _, _ = select.select([proc.stdout], [], [], 1.0)
                if ready:
                    line = proc.stdout.readline()
                    break
                if proc.poll() is not None:
                    break
            if line:
                results[current["id"]] = json.loads(line)["outcome"]
                pending.pop(0)
                continue
            if proc.poll() is None:
                proc.kill()
                results[current["id"]] = "hang"
            else:
                results[current["id"]] = f"dead:{proc.returncode}"
            pending.pop(0)
            break
        if proc.poll() is None:
            proc.stdin.close()
            proc.wait(timeout=30)
    return results


# --------------------------------------------------------------------------- kill / concurrent families
def run_kill_case(rng, root: Path):
    from sparsesim.indexes import load_index
    from sparsesim.models import BilinearSimilarity

    what = str(rng.choice(["train", "build", "add"]))
    target = root / "kill-target"
    if what == "train":
        shutil.copy(root / "m.npz", target.with_suffix(".npz"))
        args = ["train", "-a", "oasis", "-d", "news20-sample", "-n", "2000", "--seed", "3", "--overwrite", "-o",
                str(target.with_suffix(".npz"))]
    elif what == "build":
        shutil.rmtree(target, ignore_errors=True)
        args = ["index", "build", "-m", str(root / "m.npz"), "-d", str(root / "corpus.svm"), "-o", str(target)]
    else:
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(root / "base-exact", target)
        args = ["index", "add", "--index", str(target), "-d", str(root / "q.svm")]
    proc = subprocess.Popen(EXE + args, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(float(rng.uniform(0.3, 5.0)))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    try:
        if what == "train":
            model = BilinearSimilarity.load(target.with_suffix(".npz"))
            return "ok" if model.n_features > 0 else "partial"
        if what == "build":
            if not target.exists():
                return "ok"  # nothing before, nothing after: the old state
            return "ok" if load_index(target).n_documents == 300 else "partial"
        n = load_index(target).n_documents
        return "ok" if n in (300, 320) else "partial"
    except Exception:  # noqa: BLE001
        return "partial"
    finally:
        time.sleep(2.1)  # stale temporaries become sweepable (older than 2 s, writer dead)


def run_concurrent_case(rng, root: Path):
    from sparsesim.indexes import load_index
    from sklearn.datasets import dump_svmlight_file
    from sparsesim.data import load_dataset

    target = root / "conc-target"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(root / "base-exact", target)
    data = load_dataset("news20-sample")
    a, b = int(rng.integers(5, 20)), int(rng.integers(5, 20))
    dump_svmlight_file(data.X[300:300 + a], data.y[300:300 + a], str(root / "ca.svm"), zero_based=False)
    dump_svmlight_file(data.X[300 + a:300 + a + b], data.y[300 + a:300 + a + b], str(root / "cb.svm"), zero_based=False)
    procs = [subprocess.Popen(EXE + ["index", "add", "--index", str(target), "-d", str(root / n)], cwd=root,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for n in ("ca.svm", "cb.svm")]
    codes = [p.wait(timeout=300) for p in procs]
    n = load_index(target).n_documents
    expected = 300 + (a if codes[0] == 0 else 0) + (b if codes[1] == 0 else 0)
    if n != expected:
        return "wrong"  # a lost update (or a reported success not in the index)
    return "ok" if codes == [0, 0] else "clean-error"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--cli", type=int, default=700)
    parser.add_argument("--library", type=int, default=1500)
    parser.add_argument("--ingest", type=int, default=200)
    parser.add_argument("--service", type=int, default=400)
    parser.add_argument("--feedback", type=int, default=60)
    parser.add_argument("--dask", type=int, default=12)
    parser.add_argument("--kill", type=int, default=40)
    parser.add_argument("--concurrent", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker_main(args.work)
        return
    root = args.work
    make_fixtures(root)
    if args.service or args.feedback or args.dask:
        make_service_fixtures(root)
    rng = np.random.default_rng(args.seed)
    counts = collections.defaultdict(collections.Counter)
    failures = []
    start = time.time()
    families = ["matrix", "param", "online-param", "index-param", "model-file", "index-file", "derived", "candidates",
                *LIBRARY_FAMILIES]
    cases = [{"id": i, "seed": int(rng.integers(2**31)), "family": families[i % len(families)]}
             for i in range(args.library)]
    for case_id, outcome in run_library(cases, root, args.timeout).items():
        family = cases[case_id]["family"]
        key = outcome.split(":")[0]
        if key == "ok-but-bad":
            key = "wrong"
        counts[f"library/{family}"][key] += 1
        if key not in ("ok", "clean-error"):
            failures.append((f"library/{family}", cases[case_id]["seed"], outcome))
    print(f"library done in {time.time() - start:.0f} s", flush=True)
    if args.service:
        run_service(args.service, rng, root, counts, failures)
        print(f"service done: {dict(counts['service'])} ({time.time() - start:.0f} s)", flush=True)
    for family, count, run in (("feedback", args.feedback, lambda: run_feedback_case(rng, root, args.timeout)),
                               ("dask", args.dask, lambda: run_dask_case(rng, root))):
        for _ in range(count):
            outcome, what = run()
            counts[family][outcome] += 1
            if outcome not in ("ok", "clean-error"):
                failures.append((family, what, outcome))
        if count:
            print(f"{family} done: {dict(counts[family])} ({time.time() - start:.0f} s)", flush=True)
    for i in range(args.cli):
        outcome, cli_args, err = run_cli_case(rng, root, args.timeout)
        counts["cli"][outcome] += 1
        if outcome not in ("ok", "clean-error"):
            failures.append(("cli", cli_args, err))
        if i % 100 == 99:
            print(f"cli {i + 1}: {dict(counts['cli'])} ({time.time() - start:.0f} s)", flush=True)
    for i in range(args.ingest):
        outcome, cli_args, err = run_ingest_case(rng, root, args.timeout)
        counts["ingest"][outcome] += 1
        if outcome not in ("ok", "clean-error"):
            failures.append(("ingest", cli_args, err))
        if i % 100 == 99:
            print(f"ingest {i + 1}: {dict(counts['ingest'])} ({time.time() - start:.0f} s)", flush=True)
    for _ in range(args.kill):
        outcome = run_kill_case(rng, root)
        counts["kill"][outcome] += 1
        if outcome != "ok":
            failures.append(("kill", outcome, ""))
    for _ in range(args.concurrent):
        outcome = run_concurrent_case(rng, root)
        counts["concurrent"][outcome] += 1
        if outcome not in ("ok", "clean-error"):
            failures.append(("concurrent", outcome, ""))
    total = sum(sum(c.values()) for c in counts.values())
    report = {"total": total, "seconds": round(time.time() - start), "counts": {k: dict(v) for k, v in counts.items()},
              "failures": [[str(x)[:300] for x in f] for f in failures[:50]], "n_failures": len(failures)}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
