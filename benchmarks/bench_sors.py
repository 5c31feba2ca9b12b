"""Benchmark: the sparse proximal engine (SORS-I/II, AdaSORS-I/II, OASIS) against the naive
scipy update ``W = W + tau * outer`` in the same run.

Table 1 — updates/s, peak memory (RSS of a fresh process per configuration), nnz(M) and held-out
triplet accuracy at T = 10^4 and 10^5 triplets, on news20 (needs SPARSESIM_DATA) and on a
synthetic corpus with RCV1 statistics (d = 47,236, 75 nonzeros per document, Zipf feature
frequencies; labelled synthetic). The naive scipy update (SORS-I's rule, SORS-I's parameters)
runs for a small fixed T twice: from W = 0 (its most favourable start: its rate falls as W grows,
since it copies W every step) and, inside each SORS-I run, continuing from the engine's final
model (the same W, so the same work per step). "updates/s" is wall time on one core;
"per CPU s" uses the process's CPU time, which other jobs on a shared machine disturb less.

Table 2 — SORS-I updates/s at d = 10^4, 10^5, 10^6 (synthetic, same nonzeros per document):
the cost of an update depends on the nonzeros it touches, not on d.

Run:  python benchmarks/bench_sors.py [--quick] [--out benchmarks/out] [--json FILE]
Each configuration runs in its own process (one core) so peak memory is per configuration.
``--json FILE`` writes every row (corpus, algorithm, T, updates/s, CPU-s rate, peak RSS, nnz,
store bytes per nonzero, held-out accuracy, and MAP where measured) for machines to read.
``--baseline-python PY`` runs every engine row a second time in the interpreter ``PY`` (e.g. the
virtual environment of an older checkout) for an A/B in the same run; those rows say
``"engine": "baseline"``; ``--repeat N`` runs each pair N times, interleaved (A, B, A, B ...), so
both engines see the same load, and each row carries ``w_sha1``, a checksum of the learned W (equal
checksums: the same model). ``--checkpoints 10000,100000,1000000`` adds, to each engine row, the
rate, nnz, peak memory, held-out accuracy and (news20, ``--map``) the retrieval MAP on the
held-out split at each of those triplet counts (evaluation time is not training time; a child
configuration may list the counts to take MAP at, ``"map": [10000, 100000]``, and prints each
checkpoint on stderr as it is reached). ``--touch-gb G`` writes G GiB in a process that then exits
before every engine row, so that every row starts from the same memory state (on a virtual
machine whose host backs memory when it is first touched, see :func:`touch_memory`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
# SORS parameters chosen on the synthetic corpus at 10^4 triplets (held-out accuracy against
# sparsity; lambda = 1e-5 keeps 8M entries but ranks only ~61-65% of held-out triplets right).
# AdaSORS keeps a record for every entry ever touched, so it stores float32 (compact) here.
DEFAULT_PARAMS = {
    "sors-l1": {"lam": 1e-6, "eta": 1.0},
    "sors-l1+compact": {"lam": 1e-6, "eta": 1.0, "compact": True},
    "sors-offdiag": {"lam": 1e-6, "eta": 1.0},
    "adasors-l1": {"lam": 1e-6, "eta": 1.0, "delta": 0.1, "compact": True},
    "adasors-offdiag": {"lam": 1e-6, "eta": 1.0, "delta": 0.1, "compact": True},
    "oasis": {"C": 1.0, "compact": True},
    # the same runs with two training threads (the model is the same bit for bit)
    "sors-l1+2threads": {"lam": 1e-6, "eta": 1.0, "compact": True, "n_threads": 2},
    "oasis+2threads": {"C": 1.0, "compact": True, "n_threads": 2},
}


def corpus(name: str, seed: int = 0, n_features: int = 47_236, n_documents: int = 10_000):
    if name == "news20":
        from sparsesim.data import load_dataset
        from sparsesim.triplets import stratified_split

        data = load_dataset("news20")
        train, _ = stratified_split(data.y, 0.7, seed=seed)
        return data.subset(train)
    from sparsesim.data.synthetic import rcv1_like

    return rcv1_like(n_documents=n_documents, n_features=n_features, seed=seed)


def heldout_accuracy(model, X, triplets) -> float:
    """Share of held-out triplets ranked right: S(x, x+) > S(x, x-)."""
    pos = model.score_pairs(X[triplets[:, 0]], X[triplets[:, 1]])
    neg = model.score_pairs(X[triplets[:, 0]], X[triplets[:, 2]])
    return float(np.mean(pos > neg))


def naive_steps(W, X, triplets, eta: float, lam: float) -> tuple[float, object]:
    """SORS-I's step written naively with scipy, from model W (= M - I): the margin, then
    ``W = W + eta * outer`` (a copy of W every step), then the L1 soft-threshold over all stored
    entries. Returns (updates per second, final W)."""
    import scipy.sparse as sp

    W = sp.csr_matrix(W)
    lam_eta = lam * eta
    start = time.perf_counter()
    for a, p, n in triplets:
        x, z = X[a], X[p] - X[n]
        margin = float((x @ W @ z.T).toarray()[0, 0] + x.multiply(z).sum())
        if 1.0 - margin > 0:
            W = W + eta * (x.T @ z)
            if lam_eta:
                W.data = np.sign(W.data) * np.maximum(np.abs(W.data) - lam_eta, 0.0)
                W.eliminate_zeros()
    return len(triplets) / (time.perf_counter() - start), W


def heldout_map(model, name: str, seed: int = 0) -> float:
    """Retrieval MAP on the held-out 30% of a real data set (each test document queries the others)."""
    from sparsesim.data import load_dataset
    from sparsesim.evaluation import evaluate_retrieval
    from sparsesim.triplets import stratified_split

    data = load_dataset(name)
    _, test = stratified_split(data.y, 0.7, seed=seed)
    return float(evaluate_retrieval(model.scorer(data.X[test]), data.y[test], k=10)["map"])


def w_checksum(W) -> str:
    """SHA-1 of W's CSR arrays (equal checksums: the same model), read in place: concatenating
    their bytes copied the model twice over, which made an OASIS row's peak memory (16.0 against
    11.1 GB with 3*10^8 entries), not training."""
    digest = hashlib.sha1()
    for arr in (W.indptr, W.indices, W.data):
        digest.update(memoryview(np.ascontiguousarray(arr)).cast("B"))
    return digest.hexdigest()


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu_times() -> np.ndarray:
    """(user, system) CPU seconds of this process so far, every thread included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return np.array([usage.ru_utime, usage.ru_stime])


def run_engine(cfg: dict) -> dict:
    from sparsesim.registry import make_estimator
    from sparsesim.triplets import sors_triplets

    data = corpus(cfg["corpus"], n_features=cfg.get("d", 47_236), n_documents=cfg.get("n_documents", 10_000))
    triplets = sors_triplets(data.y, cfg["T"] + 2000, seed=1)
    train_t, test_t = triplets[:cfg["T"]], triplets[cfg["T"]:]
    # "name+label" runs registry algorithm "name" with the parameters given for "name+label"
    est = make_estimator(cfg["algorithm"].split("+")[0], **cfg.get("params", {}), initial_capacity=1 << 20)
    est.partial_fit_triplets(data.X, train_t[:50])  # compile outside the timing
    wall0, cpu0 = est.train_seconds_, _cpu_times()
    cpu_eval = np.zeros(2)
    stops = sorted({c for c in cfg.get("checkpoints", []) if 50 < c < cfg["T"]} | {cfg["T"]})
    checkpoints = []
    done = 50
    for stop in stops:
        for chunk in np.array_split(train_t[done:stop], max(1, (stop - done) // 5000)):
            est.partial_fit_triplets(data.X, chunk)
        done = stop
        if stop == cfg["T"]:
            break
        c0 = _cpu_times()
        model = est.model_
        point = {"T": stop, "updates_per_second": (stop - 50) / (est.train_seconds_ - wall0),
                 "nnz": model.nnz(), "peak_rss_mb": _peak_rss_mb(),
                 "heldout_accuracy": heldout_accuracy(model, data.X, test_t)}
        if cfg.get("map") is True or stop in (cfg.get("map") or []):
            point["map"] = heldout_map(model, cfg["corpus"])
        est._model_cache = None  # the next export sees the next updates
        cpu_eval += _cpu_times() - c0
        checkpoints.append(point)
        print(json.dumps({"checkpoint": point}), file=sys.stderr, flush=True)
    seconds, (user, system) = est.train_seconds_ - wall0, _cpu_times() - cpu0 - cpu_eval
    cpu = user + system
    model = est.model_
    nnz = model.nnz()
    out = {
        "updates_per_second": (cfg["T"] - 50) / seconds,
        "updates_per_cpu_second": (cfg["T"] - 50) / cpu,
        "train_seconds": seconds,
        # every thread's CPU time, in user and kernel mode (first touches of fresh memory are
        # kernel time, and on the test machine their cost varies from run to run)
        "user_seconds": user,
        "system_seconds": system,
        "updated_fraction": est.n_updates_ / est.n_triplets_seen_,
        "nnz": nnz,
        "table_mb": est.store_nbytes_ / 2**20,
        "store_bytes_per_nnz": est.store_nbytes_ / max(1, nnz),
        "heldout_accuracy": heldout_accuracy(model, data.X, test_t),
        "w_sha1": w_checksum(model.W),
    }
    if cfg.get("map"):
        out["map"] = heldout_map(model, cfg["corpus"])
    if checkpoints:
        checkpoints.append({"T": cfg["T"], "updates_per_second": out["updates_per_second"], "nnz": nnz,
                            "peak_rss_mb": _peak_rss_mb(), "heldout_accuracy": out["heldout_accuracy"],
                            **({"map": out["map"]} if "map" in out else {})})
        out["checkpoints"] = checkpoints
    if cfg.get("naive_warm_T"):
        # the naive update continues from this model: the same W, so the same work per step
        sors = cfg.get("naive_params", {})
        rate, _ = naive_steps(model.W, data.X, test_t[:cfg["naive_warm_T"]], sors.get("eta", 0.1), sors.get("lam", 0.0))
        out["naive_warm_updates_per_second"] = rate
    return out


def run_naive(cfg: dict) -> dict:
    """The naive update from W = 0 for a fixed small T (its most favourable start)."""
    import scipy.sparse as sp

    from sparsesim.triplets import sors_triplets

    data = corpus(cfg["corpus"])
    d = data.X.shape[1]
    triplets = sors_triplets(data.y, cfg["T"], seed=1)
    rate, W = naive_steps(sp.csr_matrix((d, d)), data.X, triplets, cfg.get("eta", 0.1), cfg.get("lam", 0.0))
    nbytes = W.data.nbytes + W.indices.nbytes + W.indptr.nbytes
    return {"updates_per_second": rate, "updates_per_cpu_second": None, "nnz": int(W.nnz) + d,
            "table_mb": nbytes / 2**20, "store_bytes_per_nnz": nbytes / max(1, W.nnz),
            "heldout_accuracy": None, "updated_fraction": None}


def child(cfg: dict) -> None:
    out = run_naive(cfg) if cfg["algorithm"] == "naive-scipy" else run_engine(cfg)
    out["peak_rss_mb"] = _peak_rss_mb()
    print(json.dumps(out))


def touch_memory(gib: float) -> None:
    """Write ``gib`` GiB in a process of its own, which then exits. On a virtual machine whose host
    backs guest memory when it is first touched (the test machine: 2-4 ms per 2 MB page), a
    row's kernel time otherwise depends on how much memory the row before it freed: a row that
    follows a 16 GB row took 1-4 s of kernel time, one that follows a 6 GB row 4-10 s.
    Touching the same amount before every row gives every row the same start."""
    from sparsesim.memory import available_memory, format_bytes

    nbytes = int(gib * 2**30)
    if nbytes > 0.9 * available_memory():
        raise SystemExit(f"error: --touch-gb {gib} is more than 90% of the memory available "
                         f"({format_bytes(available_memory())}); give a smaller value")
    subprocess.run([sys.executable, "-c", f"import numpy as np; np.ones({nbytes // 8}).sum()"], check=True)


def spawn(cfg: dict, python: str | None = None) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.run([python or sys.executable, str(HERE), "--child", json.dumps(cfg)], capture_output=True,
                          text=True, env=env)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fmt(row: dict) -> str:
    if "error" in row:
        return f"  error: {row['error']}"
    acc = "-" if row.get("heldout_accuracy") is None else f"{row['heldout_accuracy']:.3f}"
    cpu = "-" if row.get("updates_per_cpu_second") is None else f"{row['updates_per_cpu_second']:.0f}"
    system = "-" if row.get("system_seconds") is None else f"{row['system_seconds']:.1f}"
    return (f"{row['updates_per_second']:>10.0f}{cpu:>10}{system:>7}{row['peak_rss_mb']:>11.0f}{row['nnz']:>13,d}"
            f"{row['table_mb']:>10.0f}{acc:>9}")


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--child")
    parser.add_argument("--quick", action="store_true", help="small T (smoke run)")
    parser.add_argument("--corpora", default="synthetic,news20")
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--naive-T", type=int, default=200, help="naive steps from W = 0 (0: skip)")
    parser.add_argument("--naive-warm-T", type=int, default=50,
                        help="naive steps continuing from SORS-I's model at the end of each run (0: skip)")
    parser.add_argument("--skip-d-table", action="store_true")
    parser.add_argument("--d-table-algorithm", default="sors-l1+compact")
    parser.add_argument("--skip-table-1", action="store_true")
    parser.add_argument("--params", default=json.dumps(DEFAULT_PARAMS))
    parser.add_argument("--algorithms", default=",".join(DEFAULT_PARAMS),
                        help="registry names; 'name+label' runs 'name' with the --params entry of 'name+label'")
    parser.add_argument("--out", default=str(HERE.parent / "out"))
    parser.add_argument("--json", help="write every row here (default: OUT/bench_sors.json)")
    parser.add_argument("--baseline-python", help="also run each engine row with this interpreter (A/B)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run the rows this many times, interleaved: every algorithm in turn (with --baseline-python, "
                             "each engine row and its baseline row in turn)")
    parser.add_argument("--checkpoints", default="", help="triplet counts to report within each engine row")
    parser.add_argument("--map", action="store_true", help="held-out retrieval MAP (real data sets)")
    parser.add_argument("--touch-gb", type=float, default=0.0,
                        help="before every engine row, write this many GiB in a process that then exits, so that "
                             "each row starts from the same memory state (see touch_memory)")
    args = parser.parse_args(argv)
    if args.child:
        child(json.loads(args.child))
        return
    params = json.loads(args.params)
    sizes = [2000] if args.quick else [int(s) for s in args.sizes.split(",")]
    rows = []
    header = (f"{'corpus':<11}{'algorithm':<17}{'T':>8}{'updates/s':>10}{'per CPU s':>10}{'sys s':>7}{'peak MB':>11}"
              f"{'nnz(M)':>13}{'store MB':>10}{'acc':>9}")
    print("Table 1: engine vs naive scipy update (one core, fresh process per row)")
    print(header)
    print("-" * len(header))
    for name in ([] if args.skip_table_1 else args.corpora.split(",")):
        # the naive update runs SORS-I's rule with SORS-I's parameters: the same work per step
        sors = params.get("sors-l1", {})
        naive = {"error": "not run (--naive-T 0)"}
        if args.naive_T > 0 or args.quick:
            naive = spawn({"corpus": name, "algorithm": "naive-scipy", "T": 50 if args.quick else args.naive_T,
                           "eta": sors.get("eta", 0.1), "lam": sors.get("lam", 0.0)})
            print(f"{name:<11}{'naive-scipy':<17}{50 if args.quick else args.naive_T:>8}{fmt(naive)}", flush=True)
            rows.append({"corpus": name, "algorithm": "naive-scipy", "T": args.naive_T, **naive})
        # --repeat: the whole list of rows again (A, B, A, B ...), so that rows compared with each
        # other share time windows; with --baseline-python each row is followed by its baseline
        rounds = 1 if args.baseline_python else max(1, args.repeat)
        for T in (T for T in sizes for _ in range(rounds)):
            for algorithm in args.algorithms.split(","):
                cfg = {"corpus": name, "algorithm": algorithm, "T": T, "params": params.get(algorithm, {}),
                       "checkpoints": [int(c) for c in args.checkpoints.split(",") if c], "map": args.map}
                if algorithm.split("+")[0] == "sors-l1" and args.naive_warm_T:
                    cfg.update(naive_warm_T=args.naive_warm_T, naive_params=sors)
                engines = [("rows", None)] + ([("baseline", args.baseline_python)] if args.baseline_python else [])
                for engine, python in engines * (max(1, args.repeat) if args.baseline_python else 1):
                    if args.touch_gb:
                        touch_memory(args.touch_gb)
                    row = spawn(cfg, python)
                    rows.append({"corpus": name, "algorithm": algorithm, "T": T, "engine": engine,
                                 "touch_gb": args.touch_gb, **row})
                    speedup = ""
                    if "error" not in row and "error" not in naive:
                        speedup = f"  ({row['updates_per_second'] / naive['updates_per_second']:.0f}x naive from W=0"
                        warm = row.get("naive_warm_updates_per_second")
                        if warm:
                            speedup += f"; naive from this model {warm:.1f}/s: {row['updates_per_second'] / warm:.0f}x"
                        speedup += ")"
                    if "map" in row:
                        speedup += f"  MAP {100 * row['map']:.2f}"
                    for point in row.get("checkpoints", [])[:-1]:
                        speedup += (f"\n{'':<11}{'  at T=' + format(point['T'], ','):<17}{point['updates_per_second']:>18.0f}"
                                    f"{point['peak_rss_mb']:>11.0f}{point['nnz']:>13,d}{'':>10}{point['heldout_accuracy']:>9.3f}"
                                    + (f"  MAP {100 * point['map']:.2f}" if "map" in point else ""))
                    label = algorithm + ("" if engine == "rows" else " (base)")
                    print(f"{name:<11}{label:<17}{T:>8}{fmt(row)}{speedup}", flush=True)
    if not args.skip_d_table:
        print(f"\nTable 2: {args.d_table_algorithm} updates/s against d (synthetic, 75 nonzeros per document, 10,000 documents)")
        T = 2000 if args.quick else 20_000
        for d in (10_000, 100_000, 1_000_000):
            cfg = {"corpus": "synthetic", "algorithm": args.d_table_algorithm, "T": T, "d": d,
                   "params": params[args.d_table_algorithm]}
            row = spawn(cfg)
            rows.append({"table": "d", "d": d, "T": T, **row})
            print(f"d={d:>9,d}  T={T}{fmt(row)}", flush=True)
    path = Path(args.json) if args.json else Path(args.out) / "bench_sors.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"command": " ".join(sys.argv), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
