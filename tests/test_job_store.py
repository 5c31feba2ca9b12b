"""A run over a job store resumes where it stopped and returns what an unbroken run returns."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.job_store import JobStore, Unstorable, decode, encode, use_job_store
from sparsesim.parallel import report_progress, run_parallel

CALLS = []


def fit_like(X, seed, scale=1.0):
    """A job: a result with the types the protocols return (arrays, tuples, int keys, NaN)."""
    CALLS.append(seed)
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(X.shape[1]) * scale
    return {"seed": seed, "score": float(X.sum() * w[0]), "curve": X @ w, "pair": (seed, np.float64(0.1)),
            "by_k": {1: 0.5, 10: float("nan")}, "ok": np.bool_(True), "counts": np.arange(3, dtype=np.int32)}


def stop_at(seed, at):
    if seed == at:
        raise KeyboardInterrupt("stopped")
    return fit_like(np.ones((2, 3)), seed)


def same(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, (bool, np.bool_)):
        return isinstance(b, (bool, np.bool_)) and bool(a) == bool(b)
    if isinstance(a, (int, float, np.number)):  # numpy scalars come back as Python numbers of equal value
        return isinstance(b, (int, float)) and not isinstance(b, bool) and (a == b or (math.isnan(a) and math.isnan(b)))
    return type(a) is type(b) and a == b


def test_encode_decode_round_trip_is_exact():
    value = fit_like(sp.random(5, 4, density=0.5, random_state=0, format="csr"), 3)
    back = decode(json.loads(json.dumps(encode(value))))
    assert same(value, back)
    assert back["curve"].tobytes() == value["curve"].tobytes()  # float64 bits kept
    with pytest.raises(Unstorable):
        encode({"model": object()})
    for bad in ({"__ndarray__": "|O", "shape": [1], "data": [1]}, {"__ndarray__": "<f8", "shape": [2], "data": [1.0]},
                {"__float__": "1e999999"}, 3j):
        with pytest.raises((ValueError, TypeError)):
            decode(bad)


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_a_second_run_reads_every_job_and_returns_the_same(tmp_path, n_jobs):
    X = sp.random(30, 6, density=0.3, random_state=1, format="csr")
    jobs = [(X, seed) for seed in range(4)]
    plain = run_parallel(fit_like, jobs, n_jobs=n_jobs)
    with use_job_store(tmp_path) as store:
        first = run_parallel(fit_like, jobs, n_jobs=n_jobs)
    assert store.misses == 4 and store.hits == 0
    CALLS.clear()
    events = []
    with use_job_store(tmp_path) as store, report_progress(lambda new, done: events.append((new, done))):
        second = run_parallel(fit_like, jobs, n_jobs=n_jobs)
    assert CALLS == [] and store.hits == 4 and store.misses == 0 and store.reused_seconds >= 0
    assert sum(e[0] for e in events) == 4 and sum(e[1] for e in events) == 4
    assert all(same(a, b) and same(a, c) for a, b, c in zip(plain, first, second))


def test_a_stopped_run_resumes_with_the_jobs_it_finished(tmp_path):
    with use_job_store(tmp_path), pytest.raises(KeyboardInterrupt):
        run_parallel(stop_at, [(seed, 2) for seed in range(4)], n_jobs=1)
    assert len(list(tmp_path.glob("*.json"))) == 2  # seeds 0 and 1 were kept, nothing half-written
    assert not list(tmp_path.glob(".tmp-*"))
    CALLS.clear()
    with use_job_store(tmp_path) as store:
        out = run_parallel(stop_at, [(seed, -1) for seed in range(4)], n_jobs=1)
    # other arguments (at = -1): nothing matches, all four run
    assert store.hits == 0 and CALLS == [0, 1, 2, 3]
    CALLS.clear()
    with use_job_store(tmp_path) as store:
        again = run_parallel(stop_at, [(seed, 2) for seed in range(2)] + [(seed, -1) for seed in (2, 3)], n_jobs=1)
    assert store.hits == 4 and CALLS == []
    assert all(same(a, b) for a, b in zip(out, again))


def test_changed_data_or_code_misses(tmp_path, monkeypatch):
    X = np.ones((3, 2))
    with use_job_store(tmp_path):
        run_parallel(fit_like, [(X, 0)], n_jobs=1)
    with use_job_store(tmp_path) as store:
        run_parallel(fit_like, [(X * 2, 0)], n_jobs=1)  # other data
        run_parallel(fit_like, [(X, 0, 2.0)], n_jobs=1)  # other parameter
    assert store.hits == 0 and store.misses == 2
    import sparsesim.job_store as js

    monkeypatch.setattr(js, "code_fingerprint", lambda: "another version of the code")
    with use_job_store(tmp_path) as store:
        run_parallel(fit_like, [(X, 0)], n_jobs=1)
    assert store.hits == 0


def test_damaged_or_foreign_files_are_ignored_and_rerun(tmp_path):
    X = np.ones((3, 2))
    with use_job_store(tmp_path):
        want = run_parallel(fit_like, [(X, 0), (X, 1)], n_jobs=1)
    files = sorted(tmp_path.glob("*.json"))
    files[0].write_text("{not json")
    record = json.loads(files[1].read_text())
    record["key"] = "0" * 64  # a file copied under another job's name
    files[1].write_text(json.dumps(record))
    CALLS.clear()
    with use_job_store(tmp_path) as store, pytest.warns(UserWarning, match="runs again"):
        got = run_parallel(fit_like, [(X, 0), (X, 1)], n_jobs=1)
    assert store.hits == 0 and sorted(CALLS) == [0, 1]
    assert all(same(a, b) for a, b in zip(want, got))


def test_unstorable_results_run_every_time(tmp_path):
    with use_job_store(tmp_path) as store:
        out = run_parallel(dict, [{"model": JobStore}], n_jobs=1)
    assert out == [{"model": JobStore}] and not list(tmp_path.glob("*.json")) and store.misses == 1


def test_cli_experiment_resume_reads_the_runs_back_and_leaves_no_store_behind(tmp_path, monkeypatch, capsys):
    from clitools import run_cli

    from sparsesim.job_store import active_store

    args = ["experiment", "--dataset", "news20-sample", "--algorithms", "cosine,oasis", "--triplets", "200",
            "--seeds", "0,1", "--out-dir", tmp_path / "run", "--resume", "--json"]
    code, first, _ = run_cli(args, monkeypatch, capsys)
    assert code == 0
    stored = sorted((tmp_path / "run" / "jobs").glob("*.json"))
    assert len(stored) >= 4  # two learners x two seeds
    assert active_store() is None  # the store ends with the command
    mtimes = [p.stat().st_mtime_ns for p in stored]
    code, second, _ = run_cli(args, monkeypatch, capsys)
    assert code == 0
    assert [p.stat().st_mtime_ns for p in stored] == mtimes  # nothing run, nothing rewritten
    strip = lambda out: {k: v for k, v in json.loads(out).items() if k not in ("seconds", "out_dir", "plots")}
    assert strip(second) == strip(first)
    code, _, err = run_cli(args[:-4] + ["--resume"], monkeypatch, capsys)
    assert code == 2 and "give --out-dir" in err


def test_a_resumed_paper_item_says_what_it_read_back(tmp_path):
    from sparsesim.data.catalog import load_registered
    from sparsesim.exceptions import DataNotFoundError
    from sparsesim.experiments import paper
    from sparsesim.experiments.paper_verdicts import item_markdown

    try:
        load_registered("mfeat")
    except DataNotFoundError as exc:
        pytest.skip(f"mfeat is not available: {exc}")
    with use_job_store(tmp_path / "jobs"):
        first = paper.run_item("paper-oht-fig1", quick=True)
    with use_job_store(tmp_path / "jobs"):
        second = paper.run_item("paper-oht-fig1", quick=True)
    assert first["job_store"]["jobs_reused"] == 0 and first["job_store"]["jobs_run"] > 0
    assert second["job_store"] == {"jobs_reused": first["job_store"]["jobs_run"], "jobs_run": 0,
                                   "reused_compute_seconds": pytest.approx(second["job_store"]["reused_compute_seconds"])}
    assert second["rows"] == first["rows"] and second["claims"] == first["claims"]
    assert "were read from an earlier, stopped run" in item_markdown(second)
