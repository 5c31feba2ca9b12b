"""Dask scheduler plumbing, sharded indexes (in-process and on a LocalCluster of worker processes)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.distributed import SCHEDULER_ENV, dask_jobs, resolve_scheduler
from sparsesim.exceptions import ClusterError, InvalidInputError
from sparsesim.topk import top_k_rows
from sparsesim.parallel import run_parallel
from clustertools import two_worker_cluster  # noqa: E402

distributed = pytest.importorskip("distributed", reason="the dask extra is not installed")


@pytest.fixture(scope="module")
def cluster():
    """Two worker processes, one thread each, small memory (shared by the module's tests)."""
    with two_worker_cluster() as local:
        yield local


@pytest.fixture(scope="module")
def client(cluster):
    with distributed.Client(cluster, set_as_default=False) as cl:
        yield cl


# --- scheduler address and the trial runner -------------------------------------------------------
def test_resolve_scheduler_reads_env_and_explicit_wins(monkeypatch):
    monkeypatch.delenv(SCHEDULER_ENV, raising=False)
    assert resolve_scheduler(None) is None
    monkeypatch.setenv(SCHEDULER_ENV, "tcp://127.0.0.1:8786")
    assert resolve_scheduler(None) == "tcp://127.0.0.1:8786"
    assert resolve_scheduler("tcp://10.0.0.2:9000") == "tcp://10.0.0.2:9000"
    with pytest.raises(InvalidInputError, match="tcp://HOST:PORT"):
        resolve_scheduler("not an address")


def test_unreachable_scheduler_is_one_clear_error(monkeypatch):
    monkeypatch.delenv(SCHEDULER_ENV, raising=False)
    with pytest.raises(ClusterError, match="cannot reach the Dask scheduler"):
        with dask_jobs("tcp://127.0.0.1:1", n_jobs=1, timeout=1):
            pass


def test_a_cluster_running_another_sparsesim_is_refused(cluster, monkeypatch):
    import sparsesim
    from sparsesim.distributed import connect

    with connect(cluster.scheduler_address) as client:  # the same version everywhere: accepted
        assert client.status == "running"
    monkeypatch.setattr(sparsesim, "__version__", "0.0.0-other")
    with pytest.raises(ClusterError, match=r"runs sparsesim \S+, this process 0.0.0-other; install the same"):
        with connect(cluster.scheduler_address):
            pass


def _sum_times(X, i):
    return float(X.sum()) * i


def test_dask_jobs_in_process_without_scheduler(monkeypatch):
    monkeypatch.delenv(SCHEDULER_ENV, raising=False)
    X = sp.random(50, 40, density=0.1, format="csr", random_state=0)
    with dask_jobs(None, scatter=[X], n_jobs=1) as session:
        assert not session.distributed and session.n_jobs == 1
        out = run_parallel(_sum_times, [(X, i) for i in range(3)], n_jobs=session.n_jobs)
    assert out == [float(X.sum()) * i for i in range(3)]


def _where_am_i(X, i):
    from distributed import get_worker

    return get_worker().address, float(X.sum()) * i


def test_dask_jobs_runs_trials_on_workers_with_data_scattered_once(cluster, client):
    X = sp.random(400, 300, density=0.05, format="csr", random_state=1)
    with dask_jobs(cluster.scheduler_address, scatter=[X]) as session:
        assert session.distributed and session.n_workers == 2 and session.n_jobs == -1
        out = run_parallel(_where_am_i, [(X, i) for i in range(6)], n_jobs=session.n_jobs)
        # the matrix is one scattered key held by the workers, not a payload of every task
        keys = session.client.run_on_scheduler(
            lambda dask_scheduler: [str(k) for k in dask_scheduler.tasks if "csr_matrix" in str(k)])
    assert len(keys) == 1
    assert [v for _, v in out] == [float(X.sum()) * i for i in range(6)]
    assert {addr for addr, _ in out} <= set(cluster.workers[w].worker_address for w in cluster.workers)


# --- deterministic ties -----------------------------------------------------------------------------
def test_top_k_ties_at_the_kth_place_keep_the_lowest_documents():
    rng = np.random.default_rng(0)
    for _ in range(300):
        S = rng.integers(0, 3, size=(4, int(rng.integers(2, 25)))).astype(float)
        k = int(rng.integers(1, S.shape[1] + 1))
        docs, vals = top_k_rows(S, k)
        for r in range(S.shape[0]):
            expect = np.lexsort((np.arange(S.shape[1]), -S[r]))[:k]
            np.testing.assert_array_equal(docs[r], expect)
            np.testing.assert_array_equal(vals[r], S[r, expect])


# --- sharded index, in-process -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus():
    """The embedded news20 sample plus 25 duplicated documents (exact score ties) and a model."""
    from sparsesim.data import load_dataset
    from sparsesim.learners.bilinear import OASIS

    data = load_dataset("news20-sample")
    X = sp.vstack([data.X, data.X[:25]], format="csr")
    model = OASIS(n_triplets=50, random_state=0).fit(data.X, data.y).model_
    return model, X


def _same_answers(a, b, tol=1e-9):
    (ids_a, s_a), (ids_b, s_b) = a, b
    assert [list(r) for r in ids_a] == [list(r) for r in ids_b]
    np.testing.assert_allclose(s_a, s_b, rtol=0, atol=tol)


@pytest.mark.parametrize("strategy", ["corpus", "query"])
def test_sharded_in_process_equals_one_exact_index_with_ties(corpus, strategy):
    from sparsesim.indexes import ExactIndex
    from sparsesim.indexes.sharded import ShardedIndex

    model, X = corpus
    Q = X[::9]
    ref = ExactIndex(model, strategy=strategy).fit(X)
    sharded = ShardedIndex(model, kind="exact", n_shards=3, strategy=strategy).fit(X)
    assert sharded.shard_sizes_ == [141, 142, 142] and not sharded.distributed
    for k in (1, 10, 200):  # 200 > every shard: shards return all their documents
        _same_answers(sharded.query(Q, top_k=k), ref.query(Q, top_k=k))
    # duplicated documents really tie: a query's own copy and its duplicate score the same
    ids, scores = ref.query(X[:1], top_k=2)
    assert list(ids[0]) == [0, X.shape[0] - 25] and scores[0, 0] == scores[0, 1]



@pytest.mark.parametrize("kind,params", [("exact", {}), ("ann", {"target_recall": None, "dim": 8})])
def test_sharded_search_is_faiss_shaped_and_equals_query(corpus, kind, params, tmp_path):
    from sparsesim.exceptions import InvalidInputError
    from sparsesim.indexes.sharded import ShardedIndex, load_sharded

    model, X = corpus
    X, Q = X[:60], X[100:104]
    for ids in (None, [f"d{i}" for i in range(60)]):
        sharded = ShardedIndex(model, kind=kind, n_shards=3, **params).fit(X, ids=ids)
        assert len(sharded) == sharded.ntotal == 60
        for k in (5, 60, 64):
            scores, found = sharded.search(Q, k)
            assert scores.shape == found.shape == (4, k)
            want_ids, want_scores = sharded.query(Q, top_k=min(k, 60))
            np.testing.assert_array_equal(found[:, :60], np.array(want_ids))
            np.testing.assert_array_equal(scores[:, :60], want_scores)
            assert (found[:, 60:] == (-1 if ids is None else "")).all() and np.isneginf(scores[:, 60:]).all()
        with pytest.raises(InvalidInputError, match="k must be a positive integer"):
            sharded.search(Q, 0)
    sharded.save(tmp_path / "s")
    back = load_sharded(tmp_path / "s")
    assert len(back) == 60
    np.testing.assert_array_equal(back.search(Q, 7)[1], sharded.search(Q, 7)[1])

def test_sharded_query_strategy_transforms_each_query_block_once(corpus, monkeypatch):
    """Shards under the exact "query" strategy share one transformed block per query block."""
    from sparsesim.indexes import ExactIndex
    from sparsesim.indexes.shard import Shard
    from sparsesim.indexes.sharded import ShardedIndex

    model, X = corpus
    Q = X[::7]  # 61 queries: 4 blocks of 16
    calls = []
    expand = ExactIndex._expand
    monkeypatch.setattr(ExactIndex, "_expand", lambda self, Qb: calls.append(Qb.shape[0]) or expand(self, Qb))
    ref = ExactIndex(model, strategy="query", block_size=16).fit(X)
    want = ref.query(Q, top_k=7)
    assert calls == [16, 16, 16, 13]
    calls.clear()
    sharded = ShardedIndex(model, kind="exact", n_shards=3, strategy="query", block_size=16).fit(X)
    _same_answers(sharded.query(Q, top_k=7), want)
    assert calls == [16, 16, 16, 13]  # not once per shard
    # shards of the "corpus" strategy search as before, next to expanding ones
    sharded._place.shards[1] = Shard(ExactIndex(model, strategy="corpus").fit(X[141:283], ids=np.arange(141, 283)),
                                       np.arange(141, 283))
    sharded._expanding = None
    calls.clear()
    _same_answers(sharded.query(Q, top_k=7), want)
    assert calls == [16, 16, 16, 13] and sharded._expanding_shards() == [0, 2]


def test_sharded_add_goes_to_the_smallest_shard_and_save_load_round_trip(corpus, tmp_path):
    from sparsesim.exceptions import FileFormatError
    from sparsesim.indexes import ExactIndex
    from sparsesim.indexes.sharded import ShardedIndex, is_sharded, load_sharded

    model, X = corpus
    n = X.shape[0] - 40
    names = np.array([f"doc{i}" for i in range(X.shape[0])])
    ref = ExactIndex(model).fit(X[:n], ids=names[:n])
    sharded = ShardedIndex(model, kind="exact", n_shards=4).fit(X[:n], ids=names[:n])
    assert sharded.shard_sizes_ == [96, 96, 96, 97]
    sharded.add(X[n:n + 30], ids=names[n:n + 30])
    ref.add(X[n:n + 30], ids=names[n:n + 30])
    assert sharded.shard_sizes_ == [126, 96, 96, 97]
    sharded.add(X[n + 30:], ids=names[n + 30:])
    ref.add(X[n + 30:], ids=names[n + 30:])
    assert sharded.shard_sizes_ == [126, 106, 96, 97]
    with pytest.raises(InvalidInputError, match="already in the index"):
        sharded.add(X[:1], ids=["doc3"])
    Q = X[::11]
    _same_answers(sharded.query(Q, top_k=7), ref.query(Q, top_k=7))
    out = sharded.save(tmp_path / "sharded")
    assert is_sharded(out) and sorted(p.name for p in out.iterdir())[:3] == ["manifest.json", "model.npz", "shard-000"]
    assert not list((out / "shard-000").rglob("model*"))  # the model is stored once (no W arrays either)
    with pytest.raises(InvalidInputError, match="already exists"):
        sharded.save(out)
    loaded = load_sharded(out)
    assert loaded.shard_sizes_ == [126, 106, 96, 97]
    _same_answers(loaded.query(Q, top_k=7), ref.query(Q, top_k=7))
    _same_answers(load_sharded(out, mmap=True).query(Q, top_k=7), ref.query(Q, top_k=7))  # blocks checked lazily
    # a modified shard file is refused (the top manifest checks the shard manifests and positions)
    victim = out / "shard-002.positions.npy"
    victim.write_bytes(victim.read_bytes()[:-8] + np.int64(1).tobytes())
    with pytest.raises(FileFormatError, match="sha256"):
        load_sharded(out)


def test_sharded_rejects_bad_parameters(corpus):
    from sparsesim.indexes.sharded import ShardedIndex

    model, X = corpus
    with pytest.raises(InvalidInputError, match="n_shards"):
        ShardedIndex(model, n_shards=0)
    with pytest.raises(InvalidInputError, match="strategy"):
        ShardedIndex(model, strategy="fast")
    with pytest.raises(InvalidInputError, match="cannot fill"):
        ShardedIndex(model, n_shards=5).fit(X[:3])
    with pytest.raises(InvalidInputError, match="larger than the index"):
        ShardedIndex(model, n_shards=2).fit(X[:10]).query(X[:1], top_k=11)


def test_missing_distributed_names_the_extra(monkeypatch):
    import sys

    from sparsesim.distributed import require_distributed
    from sparsesim.exceptions import MissingDependencyError

    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(MissingDependencyError, match=r'pip install "sparsesim\[dask\]"'):
        require_distributed()


# --- sharded index on worker processes ---------------------------------------------------------------
def test_sharded_on_cluster_is_resident_and_exact(corpus, client, tmp_path, monkeypatch):
    from sparsesim.indexes import ExactIndex
    from sparsesim.indexes.sharded import Shard, ShardedIndex, load_sharded

    model, X = corpus
    Q = X[::9]
    ref = ExactIndex(model).fit(X)
    fetched = []  # everything the client pulls from the workers: never a shard
    gather = client.gather
    monkeypatch.setattr(client, "gather", lambda *a, **k: fetched.append(gather(*a, **k)) or fetched[-1])
    sharded = ShardedIndex(model, kind="exact", n_shards=4, client=client).fit(X)
    workers = sorted(client.scheduler_info()["workers"])
    assert sharded.distributed and sorted(set(sharded.shard_workers_)) == workers
    # each shard is held by exactly the worker it was placed on
    held = client.who_has(sharded._place.futures)
    assert [list(held[f.key]) for f in sharded._place.futures] == [[w] for w in sharded.shard_workers_]
    _same_answers(sharded.query(Q, top_k=10), ref.query(Q, top_k=10))
    sharded.add(X[:5], ids=np.arange(X.shape[0], X.shape[0] + 5))
    ref.add(X[:5])
    assert sharded.shard_sizes_[0] == X.shape[0] // 4 + 5
    _same_answers(sharded.query(Q, top_k=10), ref.query(Q, top_k=10))
    out = sharded.save(tmp_path / "on-cluster")  # the workers write their own shards
    sharded.release()
    again = load_sharded(out, client=client)
    assert again.distributed and again.shard_sizes_ == sharded_sizes(out)
    _same_answers(again.query(Q, top_k=10), ref.query(Q, top_k=10))
    _same_answers(load_sharded(out).query(Q, top_k=10), ref.query(Q, top_k=10))  # or into this process
    again.release()
    flat = [x for batch in fetched for x in (batch if isinstance(batch, list) else [batch])]
    assert flat and not any(isinstance(x, (Shard, type(model))) for x in flat)


def test_sharded_on_cluster_transforms_each_query_block_once(corpus, client):
    """On the cluster too: one 'expand' task per query block, its result moved to the other
    worker by Dask, and answers identical to one exact index."""
    from sparsesim.indexes import ExactIndex
    from sparsesim.indexes.sharded import ShardedIndex

    model, X = corpus
    Q = X[::5]  # 85 queries: 6 blocks of 16
    ref = ExactIndex(model, strategy="query", block_size=16).fit(X)
    sharded = ShardedIndex(model, kind="exact", n_shards=4, client=client, strategy="query", block_size=16).fit(X)
    sharded.query(Q[:2], top_k=3)
    with distributed.get_task_stream(client) as stream:
        got = sharded.query(Q, top_k=10)
    _same_answers(got, ref.query(Q, top_k=10))
    names = [t["key"][0] if isinstance(t["key"], tuple) else t["key"] for t in stream.data]
    calls = [n for n in names if str(n).startswith("call_shard")]
    assert len(calls) == 6 + 6 * 4  # per block: one transform, one scoring task per shard
    sharded.release()


def sharded_sizes(directory):
    import json

    return [s["n_documents"] for s in json.loads((directory / "manifest.json").read_text())["shards"]]


def test_sharded_ann_on_cluster_scores_are_exact(corpus, client):
    from sparsesim.indexes import AnnIndex
    from sparsesim.indexes.sharded import ShardedIndex

    model, X = corpus
    Q = X[::13]
    sharded = ShardedIndex(model, kind="ann", n_shards=2, client=client, dim=16, nlist=4).fit(X)
    ids, scores = sharded.query(Q, top_k=5, nprobe=4)
    # every returned score is the exact bilinear score of the returned document
    exact = (Q @ model.M @ X.T).toarray() if sp.issparse(model.M) else None
    rows = [[int(i) for i in r] for r in ids]
    if exact is not None:
        Qn = sp.diags(1 / np.sqrt(Q.multiply(Q).sum(1).A1)) @ Q if model.normalize else Q
        Xn = sp.diags(1 / np.sqrt(X.multiply(X).sum(1).A1)) @ X if model.normalize else X
        exact = (Qn @ model.M @ Xn.T).toarray()
        np.testing.assert_allclose(scores, np.take_along_axis(exact, np.array(rows), axis=1), atol=1e-9)
    assert AnnIndex  # the shard kind
    sharded.release()


def _cached_datasets():
    from sparsesim.experiments import sors

    return sors._dataset.cache_info().currsize


def test_experiment_trials_run_on_the_cluster_with_the_data_scattered_once(cluster, client, monkeypatch, capsys):
    """`experiment --scheduler`: the SORS trials are Dask tasks; the workers never load the data set
    themselves (it arrives as one scattered object), and the results equal an in-process run."""
    import json
    import sys

    from sparsesim.cli.app import main

    def run(extra):
        monkeypatch.setattr(sys, "argv", ["sparsesim", "experiment", "--dataset", "news20-sample", "--algorithms",
                                          "oasis,dot", "--triplets", "150", "--seeds", "0,1", "--json", *extra])
        try:
            main()
        except SystemExit as exc:
            assert not exc.code, capsys.readouterr().err
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    monkeypatch.delenv(SCHEDULER_ENV, raising=False)
    local = run([])
    remote = run(["--scheduler", cluster.scheduler_address, "--n-jobs", "2"])
    keep = ("algorithm", "seed", "map", "ap@10", "map@10", "nnz")
    assert [{k: r[k] for k in keep} for r in remote["results"]] == [{k: r[k] for k in keep} for r in local["results"]]
    assert set(client.run(_cached_datasets).values()) == {0}
    prefixes = client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.task_prefixes))
    assert any("run_one" in p for p in prefixes), prefixes  # the trials did run as Dask tasks


def test_tune_trials_run_on_the_cluster_with_the_data_scattered_once(cluster, client, monkeypatch):
    """`tune --scheduler` (tune_similarity with a scheduler): every rung's trials are Dask tasks
    on the workers; the fit/validation matrices are scattered once for the whole search (the same
    keys in every rung), and the trials and the chosen parameters equal an in-process run."""
    from sparsesim import tuning
    from sparsesim.data import load_dataset

    data = load_dataset("news20-sample")
    rung_keys = []
    real = tuning.halving.run_parallel

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        rung_keys.append(client.run_on_scheduler(
            lambda dask_scheduler: sorted(str(k) for k in dask_scheduler.tasks if "csr_matrix" in str(k))))
        return out

    monkeypatch.setattr(tuning.halving, "run_parallel", spy)
    monkeypatch.delenv(SCHEDULER_ENV, raising=False)

    def run(scheduler):
        return tuning.tune_similarity("oasis", data.X, data.y, n_triplets=300, min_budget=100, seed=0,
                                      scheduler=scheduler, final=False).to_dict()
    local = run(None)
    rung_keys.clear()
    before = set(client.run_on_scheduler(  # matrices other tests left on the scheduler
        lambda dask_scheduler: [str(k) for k in dask_scheduler.tasks if "csr_matrix" in str(k)]))
    remote = run(cluster.scheduler_address)
    assert len(remote["rungs"]) == len(rung_keys) >= 2
    sent = [set(keys) - before for keys in rung_keys]
    assert len(sent[0]) == 2 and all(keys == sent[0] for keys in sent)  # X_fit, X_val: once for all rungs
    assert remote["best_params"] == local["best_params"]
    assert [[r["map"] for r in t["rungs"]] for t in remote["trials"]] == \
        [[r["map"] for r in t["rungs"]] for t in local["trials"]]
    prefixes = client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.task_prefixes))
    assert any("run_trial" in p for p in prefixes), prefixes


def test_session_call_retries_a_cancelled_run_once_then_one_cluster_error(cluster):
    from concurrent.futures import CancelledError

    from sparsesim.distributed import DaskSession

    failures = []

    def flaky(n_fail, value):
        if len(failures) < n_fail:
            failures.append(1)
            raise CancelledError("call_shard-1234")
        return value

    session = DaskSession(client=object(), n_jobs=-1, n_workers=2)
    assert session.call(flaky, 1, "ok") == "ok" and len(failures) == 1  # retried once, same answer
    failures.clear()
    with pytest.raises(ClusterError, match=r"failed 2 time\(s\) .*CancelledError.* no partial result"):
        session.call(flaky, 5, "never")
    failures.clear()

    def bad_input():
        failures.append(1)
        raise InvalidInputError("C must be positive")

    with pytest.raises(InvalidInputError):  # the trial's own error: no retry
        session.call(bad_input)
    assert len(failures) == 1
    assert DaskSession(client=None, n_jobs=1, n_workers=0).call(lambda: 3) == 3


def test_trials_stop_waiting_when_every_worker_has_left():
    """The watcher of dask_jobs: no worker for `grace` seconds -> the client's futures are
    cancelled (joblib stops waiting) and the session reports it as one ClusterError."""
    import threading

    from sparsesim.distributed import DaskSession, _watch_workers

    class NoWorkers:  # a client whose scheduler lists no worker
        futures = {"batch-1": None, "batch-2": None}

        def __init__(self):
            self.cancelled = []

        def sync(self, func, **kwargs):
            return {"workers": {}}

        scheduler = type("S", (), {"identity": None})()

        def cancel(self, keys):
            self.cancelled.extend(keys)

    client, gone, stop = NoWorkers(), threading.Event(), threading.Event()
    watcher = threading.Thread(target=_watch_workers, args=(client, gone, stop, 0.2, 0.05), daemon=True)
    watcher.start()
    watcher.join(timeout=10)
    assert gone.is_set() and sorted(client.cancelled) == ["batch-1", "batch-2"]

    from concurrent.futures import CancelledError

    def cancelled():
        raise CancelledError("batch-1")

    session = DaskSession(client=client, n_jobs=-1, n_workers=0, _gone=gone)
    with pytest.raises(ClusterError, match="every Dask worker left the cluster"):
        session.call(cancelled)


def _exit_now():
    import os

    os._exit(1)


def test_trials_recover_when_workers_lose_the_scattered_data(cluster, client, monkeypatch):
    """The failure seen under load: a worker restarted by its nanny (memory limit) takes its copy
    of the scattered data with it, and the next trials are cancelled ('lost dependencies'). The
    session runs them once more with the data scattered again and returns the same answer."""
    monkeypatch.delenv(SCHEDULER_ENV, raising=False)
    X = sp.random(300, 200, density=0.05, format="csr", random_state=2)
    attempts = []

    def counted(*args, **kwargs):
        attempts.append(1)
        return run_parallel(*args, **kwargs)

    want = [float(X.sum()) * i for i in range(3)]
    with dask_jobs(cluster.scheduler_address, scatter=[X]) as session:
        assert session.call(counted, _sum_times, [(X, i) for i in range(3)], n_jobs=-1) == want
        holders = client.run_on_scheduler(lambda dask_scheduler: sorted(
            {w.address for k, ts in dask_scheduler.tasks.items() if "csr_matrix" in str(k) for w in ts.who_has}))
        assert holders
        for worker in holders:  # every copy of X is gone; the nannies start fresh workers
            with pytest.raises(Exception):
                client.run(_exit_now, workers=[worker])
        client.wait_for_workers(2, timeout=60)
        attempts.clear()
        assert session.call(counted, _sum_times, [(X, i) for i in range(3)], n_jobs=-1) == want
    assert len(attempts) == 2  # the first was cancelled, the second ran on the data sent again


def _fail_first_time(i, failed):
    from concurrent.futures import CancelledError

    if i == 2 and not failed:
        failed.append(i)
        raise CancelledError("lost dependencies")
    return i * 10


def test_every_run_parallel_call_of_a_session_gets_its_failure_policy():
    """Inside dask_jobs, run_parallel itself applies the session's policy: a protocol that calls
    run_parallel directly (not through session.call) has its cancelled call run once more, its
    progress counts every job once, and session.call around run_parallel does not retry twice."""
    from sparsesim.distributed import DaskSession
    from sparsesim.parallel import report_progress, run_policy

    session = DaskSession(client=object(), n_jobs=-1, n_workers=2)
    failed, seen, bar = [], [], []
    with run_policy(session.call), report_progress(lambda new, done: bar.append((new, done))):
        out = run_parallel(_fail_first_time, [(i, failed) for i in range(4)], n_jobs=1, backend="threading",
                           progress=seen.append)
    assert out == [0, 10, 20, 30] and failed == [2]
    assert seen == [1, 2, 3, 4] and sum(d for _, d in bar) == 4 and sum(n for n, _ in bar) == 4
    calls = []
    with run_policy(session.call):
        with pytest.raises(ClusterError, match=r"failed 2 time\(s\)"):
            session.call(lambda: calls.append(1) or run_parallel(_always_cancelled, [(0,)], n_jobs=1,
                                                                   backend="threading"))
    assert len(calls) == 2  # not 2 x 2
    # outside a session nothing is retried
    with pytest.raises(Exception, match="lost"):
        run_parallel(_always_cancelled, [(0,)], n_jobs=1, backend="threading")


def _always_cancelled(i):
    from concurrent.futures import CancelledError

    raise CancelledError("lost dependencies")


def test_protocol_trials_recover_without_calling_the_session(cluster, client, monkeypatch):
    """A trial runner that calls run_parallel inside dask_jobs (as every protocol of
    `experiment --scheduler` does) gets the same recovery as session.call: the data lost with
    its workers is scattered again and the trials run once more."""
    from sparsesim import parallel

    monkeypatch.delenv(SCHEDULER_ENV, raising=False)
    X = sp.random(300, 200, density=0.05, format="csr", random_state=3)
    attempts = []
    real = parallel._run_joblib
    monkeypatch.setattr(parallel, "_run_joblib", lambda *a: attempts.append(1) or real(*a))
    want = [float(X.sum()) * i for i in range(3)]
    with dask_jobs(cluster.scheduler_address, scatter=[X]) as session:
        assert run_parallel(_sum_times, [(X, i) for i in range(3)], n_jobs=session.n_jobs) == want
        holders = client.run_on_scheduler(lambda dask_scheduler: sorted(
            {w.address for k, ts in dask_scheduler.tasks.items() if "csr_matrix" in str(k) for w in ts.who_has}))
        assert holders
        for worker in holders:
            with pytest.raises(Exception):
                client.run(_exit_now, workers=[worker])
        client.wait_for_workers(2, timeout=60)
        attempts.clear()
        assert run_parallel(_sum_times, [(X, i) for i in range(3)], n_jobs=session.n_jobs) == want
    assert len(attempts) == 2


def _die_after(seconds):
    import os
    import time

    time.sleep(seconds)
    os._exit(1)


def test_worker_dying_mid_query_is_a_clear_error_not_a_partial_top_k(corpus, client):
    """Runs last in this module: it kills one worker (the nanny restarts it)."""
    from sparsesim.indexes.sharded import ShardedIndex

    model, X = corpus
    sharded = ShardedIndex(model, kind="exact", n_shards=4, client=client).fit(X)
    victim = sharded.shard_workers_[1]
    # the victim's single thread is busy when the query arrives, then its process dies:
    # the query's tasks for shards 1 and 3 are queued on a worker that disappears
    client.submit(_die_after, 1.0, workers=[victim], pure=False)
    with pytest.raises(ClusterError, match=r"shard 1 was lost .* no partial answer"):
        sharded.query(X[:50], top_k=5)
    # and a later query on the same (now incomplete) index fails the same way, at once
    with pytest.raises(ClusterError, match="was lost"):
        sharded.query(X[:5], top_k=5)


def test_cli_query_with_a_worker_dying_mid_query_is_one_error_line(corpus, client, cluster, tmp_path, monkeypatch,
                                                                   capsys):
    """`query --scheduler` while a worker dies during the search: exit 2, one `error:` line, no
    result line (the nanny restarts the worker; the index is loaded again by the next command)."""
    from sklearn.datasets import dump_svmlight_file

    from clitools import run_cli
    from sparsesim.indexes.sharded import ShardedIndex

    model, X = corpus
    client.wait_for_workers(2, timeout=60)
    ShardedIndex(model, kind="exact", n_shards=4, client=client).fit(X).save(tmp_path / "sharded")
    dump_svmlight_file(X[:60], np.zeros(60), str(tmp_path / "q.svm"), zero_based=True)
    search = ShardedIndex.query

    def query_while_a_worker_dies(self, Q, *args, **kwargs):
        self._place.client.submit(_die_after, 1.0, workers=[self.shard_workers_[1]], pure=False)
        return search(self, Q, *args, **kwargs)

    monkeypatch.setattr(ShardedIndex, "query", query_while_a_worker_dies)
    monkeypatch.delenv(SCHEDULER_ENV, raising=False)
    code, out, err = run_cli(["query", "--index", tmp_path / "sharded", "--queries", tmp_path / "q.svm", "--json",
                              "--scheduler", cluster.scheduler_address], monkeypatch, capsys)
    assert code == 2 and out == ""
    assert err.startswith("error: shard") and "no partial answer" in err and len(err.strip().splitlines()) == 1


# --- the CLI against a real scheduler and two worker processes -----------------------------------------
def _run(cmd, env, timeout=300):
    import subprocess

    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def dask_processes(tmp_path_factory):
    """``dask scheduler`` + two ``dask worker`` processes on 127.0.0.1, as a user starts them."""
    import os
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    logs = tmp_path_factory.mktemp("dask-logs")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                               "--port", str(port), "--no-dashboard"], env=env,
                              stdout=open(logs / "scheduler.log", "w"), stderr=subprocess.STDOUT)]
    for i in range(2):
        procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
                                       "--nworkers", "1", "--memory-limit", "1GiB", "--host", "127.0.0.1",
                                       "--no-dashboard", "--name", f"w{i}"], env=env,
                                      stdout=open(logs / f"worker{i}.log", "w"), stderr=subprocess.STDOUT))
    try:
        with distributed.Client(address, timeout="30s", set_as_default=False) as probe:
            probe.wait_for_workers(2, timeout=60)
        yield address
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        time.sleep(0.1)


@pytest.fixture(scope="module")
def news20_slice(tmp_path_factory):
    """900 news20 documents as the corpus, 40 others as queries, and a model (svmlight + npz files)."""
    from sklearn.datasets import dump_svmlight_file

    from sparsesim.data import load_dataset
    from sparsesim.exceptions import DataNotFoundError
    from sparsesim.learners.bilinear import OASIS

    try:
        data = load_dataset("news20")
    except DataNotFoundError as exc:
        pytest.skip(f"news20 not available in SPARSESIM_DATA: {exc}")
    rows = np.random.default_rng(0).permutation(data.n_documents)
    base = tmp_path_factory.mktemp("news20-slice")
    dump_svmlight_file(data.X[rows[:900]], data.y[rows[:900]], str(base / "corpus.svm"), zero_based=False)
    dump_svmlight_file(data.X[rows[900:940]], data.y[rows[900:940]], str(base / "queries.svm"), zero_based=False)
    model = OASIS(n_triplets=200, random_state=0).fit(data.X[rows[:900]], data.y[rows[:900]]).model_
    model.save(base / "model.npz")
    return base


def test_cli_sharded_build_and_query_on_dask_processes_equal_one_exact_index(dask_processes, news20_slice,
                                                                            tmp_path):
    import json
    import os
    import sys

    env = {k: v for k, v in os.environ.items() if k != SCHEDULER_ENV}
    cli = [sys.executable, "-m", "sparsesim.cli"]
    b = news20_slice
    single = _run([*cli, "index", "build", "--model", b / "model.npz", "--data", b / "corpus.svm", "--kind", "exact",
                   "--out", tmp_path / "single"], env)
    assert single.returncode == 0, single.stderr
    built = _run([*cli, "index", "build", "--model", b / "model.npz", "--data", b / "corpus.svm", "--kind", "exact",
                  "--shards", "4", "--scheduler", dask_processes, "--out", tmp_path / "sharded", "--json"], env)
    assert built.returncode == 0, built.stderr
    summary = json.loads(built.stdout)
    assert summary["shards"] == [225] * 4 and len(set(summary["workers"])) == 2
    ref = _run([*cli, "query", "--index", tmp_path / "single", "--queries", b / "queries.svm", "--top-k", "10",
                "--json"], env)
    # the scheduler from the environment variable, as the docs show
    got = _run([*cli, "query", "--index", tmp_path / "sharded", "--queries", b / "queries.svm", "--top-k", "10",
                "--json"], {**env, SCHEDULER_ENV: dask_processes})
    assert ref.returncode == got.returncode == 0, (ref.stderr, got.stderr)
    a = [json.loads(line) for line in ref.stdout.splitlines()]
    g = [json.loads(line) for line in got.stdout.splitlines()]
    assert len(a) == len(g) == 40
    assert [[r["id"] for r in x["results"]] for x in a] == [[r["id"] for r in x["results"]] for x in g]
    np.testing.assert_allclose([[r["score"] for r in x["results"]] for x in g],
                               [[r["score"] for r in x["results"]] for x in a], rtol=0, atol=1e-9)


def test_cli_scheduler_errors_are_one_line(news20_slice, tmp_path):
    import os
    import sys

    env = {k: v for k, v in os.environ.items() if k != SCHEDULER_ENV}
    cli = [sys.executable, "-m", "sparsesim.cli"]
    b = news20_slice
    res = _run([*cli, "index", "build", "--model", b / "model.npz", "--data", b / "corpus.svm", "--shards", "2",
                "--scheduler", "tcp://127.0.0.1:1", "--out", tmp_path / "x"], env)
    assert res.returncode == 2 and res.stderr.startswith("error: cannot reach the Dask scheduler")
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "x").exists()
    res = _run([*cli, "index", "build", "--model", b / "model.npz", "--data", b / "corpus.svm", "--shards", "0",
                "--out", tmp_path / "y"], env)
    assert res.returncode == 2 and "--shards" in res.stderr and len(res.stderr.strip().splitlines()) == 1


class _FakeScheduler:
    """A TCP server at a free loopback port that accepts connections and then stays silent
    ("silent"), answers HTTP ("http") or sends bytes that are no Dask frame ("garbage")."""

    def __init__(self, mode: str):
        import socket
        import threading

        self.mode, self.conns = mode, []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.address = f"tcp://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            try:
                if self.mode == "http":
                    conn.recv(65536)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                elif self.mode == "garbage":
                    conn.sendall(bytes(range(256)) * 64)
            except OSError:
                pass

    def close(self):
        for conn in [self.sock, *self.conns]:
            conn.close()


@pytest.mark.parametrize("mode, match", [("silent", "did not answer within 3 s"),
                                         ("http", "answers, but not as a Dask scheduler"),
                                         ("garbage", "answers, but not as a Dask scheduler")])
def test_connect_is_bounded_in_time_and_names_the_cause(mode, match):
    import time

    from sparsesim.distributed import connect

    fake = _FakeScheduler(mode)
    try:
        start = time.monotonic()
        with pytest.raises(ClusterError, match=match) as info:
            with connect(fake.address, timeout=3):
                pass
        assert time.monotonic() - start < 3 + 10  # the probe's deadline (3 s), plus slack for a loaded machine
        assert "memory" not in str(info.value)
    finally:
        fake.close()


@pytest.mark.parametrize("mode", ["silent", "http"])
def test_cli_with_a_scheduler_that_does_not_speak_dask_is_one_error_line_within_the_timeout(
        news20_slice, tmp_path, mode):
    import os
    import sys
    import time

    fake = _FakeScheduler(mode)
    env = {k: v for k, v in os.environ.items() if k != SCHEDULER_ENV}
    b = news20_slice
    try:
        start = time.monotonic()
        res = _run([sys.executable, "-m", "sparsesim.cli", "index", "build", "--model", b / "model.npz", "--data",
                    b / "corpus.svm", "--shards", "2", "--scheduler", fake.address, "--out", tmp_path / "x"], env)
        elapsed = time.monotonic() - start
    finally:
        fake.close()
    assert res.returncode == 2 and res.stderr.startswith("error: ") and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "memory" not in res.stderr, res.stderr
    assert elapsed < 10 + 35  # the documented 10 s, plus starting the interpreter on a loaded machine (a hang: 60 s+)
    assert not (tmp_path / "x").exists()
