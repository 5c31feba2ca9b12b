"""A campaign of generated bad inputs and faults against the CLI and the library; prints the counts.

Families (all generated fresh from ``--seed``; everything is written under ``--work``):

* ``cli``: random arguments for every command (numbers out of range, huge, NaN, strings, paths to
  missing files, directories, FIFOs, symlinks, the command's own inputs), malformed svmlight
  files, hostile model files and hostile index directories given to ``evaluate``/``query``;
  each run is a ``sparsesim`` subprocess.
* ``library``: malformed CSR matrices at fit/scorer/index build/query, bad parameters for every
  registered algorithm and both index kinds, hostile (re-hashed) model and index files; run in
  worker subprocesses (a worker that dies is a dead process, the case is recorded and a new
  worker continues).
* ``kill``: ``kill -9`` at a random moment of ``train --out``, ``index build --out`` and
  ``index add``; the target must then hold the old complete version or the new one.
* ``concurrent``: two ``index add`` runs on one index at once; both must succeed and keep both
  additions (or one must fail with an error), never a lost update.

Outcome classes: ``ok`` (valid result), ``clean-error`` (one ``error:`` line and exit 2, typer's
usage display with exit 2, or a project exception), and the failures ``traceback``, ``dead``
(killed by a signal), ``hang`` (timeout), ``unexpected`` (a non-project exception), ``partial``
(a temporary or incomplete file left), ``wrong`` (an answer that differs from the exact answer
over the accepted data, or non-JSON output).

Usage::

    python scripts/fuzz_campaign.py --work /tmp/campaign --cli 700 --library 1500 --kill 40 --concurrent 20
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

EXE = [sys.executable, "-m", "sparsesim.cli"]
VALUES = ["0", "-1", "1", "2", "3", "10", "2.5", "nan", "inf", "-inf", "1e309", "10**23", "99999999999999999999",
          str(2**63), str(2**31), "", " ", "abc", "news20-sample", "nosuchset", "mfeat", "landmine", "oasis", "sors-l1",
          "adasors-l1", "dot", "cosine", "exact", "ann", "sors", "romco", "0-1000000000", "0,1", "5-3", "C=0.5",
          "C=1e309", "lam=-1", "compact=yes", "initial_capacity=-1", "n_triplets=2.5", "identity=\"no\"",
          "oasis.C=abc", "random_state=-1", "dim=0", "dim=2.5", "dim=100000", "nprobe=0", "frobnicate=1",
          "grid={\"lam\": [1e-5]}", "[" * 60, "/", "-", "auto", "test", "all", "--json", "\x00", "é", "a" * 300]


def _paths(root: Path):
    return [str(root / n) for n in ("m.npz", "q.svm", "bad.svm", "dir", "fifo", "link.npz", "missing.npz",
                                    "out.npz", "idx", "new-idx", "h.npz", "hidx", "hsvm.svm", "bomb.svm.gz")]


COMMANDS = {
    "train": ["--algorithm", "--dataset", "--out", "--triplets", "--seed", "--param", "--train-fraction", "--json"],
    "evaluate": ["--model", "--dataset", "--k", "--split", "--json"],
    "query": ["--model", "--corpus", "--index", "--queries", "--query-ids", "--top-k", "--json"],
    "index build": ["--model", "--data", "--kind", "--out", "--param", "--json"],
    "index add": ["--index", "--data", "--refit", "--json"],
    "experiment": ["--dataset", "--algorithms", "--protocol", "--triplets", "--seeds", "--param", "--option",
                   "--query-ratio", "--n-jobs", "--out-dir", "--json"],
    "demo": ["--triplets", "--seed", "--top-k", "--json"],
    "datasets info": [],
    "datasets fetch": ["--from"],
    "algorithms": ["--json"],
    "frobnicate": [],
}
FLAGS = {"--json", "--refit"}
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
    train_model("oasis", "news20-sample", root / "m.npz", n_triplets=300, seed=0)
    from sparsesim.models import BilinearSimilarity

    model = BilinearSimilarity.load(root / "m.npz")
    build_index(model, data.X[:300], kind="exact").save(root / "base-exact")
    build_index(model, data.X[:300], kind="ann", dim=16).save(root / "base-ann")
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


def mutate_index(rng, src: Path, out: Path) -> str:
    from sparsesim.indexes.storage import manifest_checksum
    from sparsesim.persistence import file_sha256

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
    if action == "manifest":
        section = str(rng.choice(["top", "params", "state", "model"]))
        target = manifest if section == "top" else manifest[section]
        key = str(rng.choice(sorted(k for k in target if k != "files") + ["extra"]))
        target[key] = HOSTILE[rng.integers(len(HOSTILE))]
    for fname, facts in manifest["files"].items():
        facts["bytes"] = (data / fname).stat().st_size
        facts["sha256"] = file_sha256(data / fname)
    try:
        manifest["manifest_checksum"] = manifest_checksum(manifest)
        (out / "manifest.json").write_text(json.dumps(manifest))
    except (TypeError, ValueError):
        pass
    return action


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
        if err.startswith("error:") and (len(lines) != 1 or len(err) > 1000):
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
    pool = VALUES + _paths(root)
    for option in chosen:
        args.append(option)
        if option not in FLAGS:
            args.append(str(rng.choice(pool)))
    # hostile files the command will read
    mutate_svmlight(rng, root / "hsvm.svm")
    mutate_model(rng, root / "m.npz", root / "h.npz")
    mutate_index(rng, root / str(rng.choice(["base-exact", "base-ann"])), root / "hidx")
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
            (root / name).unlink()
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
    return outcome, args, (result[2] or "")[-300:]


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
        old = (root / "m.npz").read_bytes()
        args = ["train", "-a", "oasis", "-d", "news20-sample", "-n", "2000", "--seed", "3", "-o",
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
    rng = np.random.default_rng(args.seed)
    counts = collections.defaultdict(collections.Counter)
    failures = []
    start = time.time()
    families = ["matrix", "param", "index-param", "model-file", "index-file"]
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
    for i in range(args.cli):
        outcome, cli_args, err = run_cli_case(rng, root, args.timeout)
        counts["cli"][outcome] += 1
        if outcome not in ("ok", "clean-error"):
            failures.append(("cli", cli_args, err))
        if i % 100 == 99:
            print(f"cli {i + 1}: {dict(counts['cli'])} ({time.time() - start:.0f} s)", flush=True)
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
