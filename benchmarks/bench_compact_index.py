"""Benchmark: the ann index's size on disk, build peak, recall and warm queries/s, against an
earlier sparsesim in the same run.

For one corpus and model (the cases and model cache of ``benchmarks/bench_indexes.py``), each
configuration runs in its own subprocess, one after the other, so they share the machine's load:

* ``baseline``: the ann index of the sparsesim source tree given by ``--baseline-src`` (e.g.
  ``git archive <commit> | tar -x -C DIR`` plus the two links ``DIR/sparsesim/indexes -> ../indexes``
  and ``DIR/sparsesim/cli -> ../cli``, the package layout of pyproject.toml), default settings;
* ``compact``: this tree's ann index, default settings;
* ``compact-bigZ``: this tree's ann index with ``rerank_memory`` set to the budget the
  baseline's default chooses (its re-ranking table), to separate the two levers (the stored
  form of the model, the size of Z).

Per configuration: build seconds, build peak RSS (VmHWM), size on disk (every file of the saved
index directory), the calibrated setting, recall@10 against the exact top 10 (ties counted) on
``--queries`` corpus documents (not the calibration sample), and queries/s on one thread of the
saved index loaded memory-mapped (``load_index(DIR, mmap=True)``, what ``sparsesim query --index``
and ``serve`` answer with). The saved indexes of all configurations are kept until the end, then
one process of this tree loads them all and times them in turns (``--rounds`` rounds, best wall
and process CPU time; with each index's own calibrated setting and with the first
configuration's), so a load that changes during the run falls on every configuration alike. Results:
``benchmarks/out/bench_indexes_compact_<corpus>.json`` and a Markdown table on stdout.

Usage::

    SPARSESIM_DATA=/path/to/data python benchmarks/bench_compact_index.py --case news20:oasis:20000 \\
        --baseline-src /tmp/base

Speed numbers depend on the machine and its load (the JSON records ``os.getloadavg()``).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def baseline_budget(X, model) -> int:
    """The re-ranking budget the baseline's default chose (sparsesim before the narrow W, commit
    03ec73b): the index within 3x (corpus + model) with W stored as CSR (12 bytes per entry) and
    compact postings, at most 2 GiB."""
    from sparsesim.indexes.ann_build import entry_bytes

    n, d = X.shape
    corpus = 12 * X.nnz + 8 * (n + 1)
    mbytes = 12 * model.W.nnz + 8 * (d + 1)
    L = max(1, min(max(512, n // 200), (512 << 20) // (8 * d), n))
    return int(max(0, min(2 << 30, 0.95 * (2 * (corpus + mbytes) - entry_bytes(n) * L * d - 16 * d - 8 * n))))


def run_one(args) -> dict:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_indexes as B
    from sparsesim.indexes import ExactIndex, build_index
    from sparsesim.indexes.calibration import recall_counting_ties
    from sparsesim.memory import peak_resident_bytes, reset_peak_resident

    model, X, Q, qrows = B.prepared_case(args.case, args.queries, args.seed, args.model_cache)
    truth = ExactIndex(model, strategy="query").fit(X).query_rows(Q, 10)[1]
    extra = {"rerank_memory": baseline_budget(X, model)} if args.config == "compact-bigZ" else {}
    reset_peak_resident()
    start = time.perf_counter()
    index = build_index(model, X, kind="ann", **extra)
    build = time.perf_counter() - start
    peak = peak_resident_bytes() / 2**30
    _, scores = index.query_rows(Q, 10, n_jobs=1)
    facts = {"rerank_memory": int(index.rerank_memory_ or 0), "n_heavy_rows": int(index.heavy_rows_.size),
             "setting": index.search_setting(), "calibrated_recall": (index.calibration_ or {}).get("recall")}
    target = pathlib.Path(args.keep) / args.config
    index.save(target)
    files = {f.name: f.stat().st_size for f in target.rglob("*") if f.is_file()}
    corpus_bytes = 12 * X.nnz + 8 * (X.shape[0] + 1)  # the corpus and the model as CSR files
    model_bytes = 12 * model.W.nnz + 8 * (X.shape[1] + 1)
    return {"config": args.config, "disk_gib": sum(files.values()) / 2**30,
            "ratio_to_corpus_plus_model": sum(files.values()) / (corpus_bytes + model_bytes),
            "largest_files_mib": {k: round(v / 2**20, 1) for k, v in sorted(files.items(), key=lambda kv: -kv[1])[:6]},
            "build_seconds": build, "build_peak_gib": peak, **facts,
            "recall_at_10": float(recall_counting_ties(scores, truth).mean()),
            "model_w_files_mib": {k: round(v / 2**20, 1) for k, v in files.items() if k.startswith("model.W")},
            "n_documents": int(X.shape[0]), "nnz_W": int(model.W.nnz),
            "corpus_plus_model_gib": (corpus_bytes + model_bytes) / 2**30}


def time_saved(args) -> dict:
    """Queries/s of the saved indexes of every configuration, loaded memory-mapped by this tree
    (it reads the baseline's format too) and timed in turns, so that the machine's load falls on
    all of them alike: ``--rounds`` rounds, in each every index answers the ``--queries`` queries
    once; the best wall and process CPU time per index, with its own calibrated setting and with
    the first configuration's setting (the layouts at equal reads and pool)."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_indexes as B
    from sparsesim.indexes import load_index
    from sparsesim.indexes.base import prepare_rows

    corpus = args.case.split(":")[0]
    X, _, qrows, _, _ = B.load_corpus(corpus, args.queries, args.seed)
    configs = [c for c in args.time_saved.split(",") if (pathlib.Path(args.keep) / c).is_dir()]
    loaded = {c: load_index(pathlib.Path(args.keep) / c, mmap=True) for c in configs}
    Q = prepare_rows(loaded[configs[0]].model, X, "corpus")[qrows]
    common = loaded[configs[0]].search_setting()
    out = {}
    for c, index in loaded.items():
        index.verify_all()
        index.query_rows(Q, 10, n_jobs=1)  # warm: pages in, kernels loaded
        index.query_rows(Q, 10, n_jobs=1, **common)
        out[c] = {"own": [np.inf, np.inf], "common": [np.inf, np.inf]}
    for _ in range(args.rounds):
        for c, index in loaded.items():
            for label, opts in (("own", {}), ("common", common)):
                t, cpu = time.perf_counter(), time.process_time()
                index.query_rows(Q, 10, n_jobs=1, **opts)
                best = out[c][label]
                best[0], best[1] = min(best[0], time.perf_counter() - t), min(best[1], time.process_time() - cpu)
    nq = Q.shape[0]
    return {c: {"qps_1_wall": nq / v["own"][0], "qps_1_cpu": nq / v["own"][1],
                "qps_1_wall_common_setting": nq / v["common"][0], "qps_1_cpu_common_setting": nq / v["common"][1],
                "common_setting": common} for c, v in out.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", default="news20:oasis:20000", help="CORPUS:MODEL:TRIPLETS")
    parser.add_argument("--baseline-src", help="an earlier sparsesim source tree (see above); omitted: no baseline")
    parser.add_argument("--configs", default="baseline,compact,compact-bigZ")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-cache", default=str(pathlib.Path(tempfile.gettempdir()) / "sparsesim-bench-models"))
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "out"))
    parser.add_argument("--tmp", default=None, help="directory for the saved indexes (default: the system's)")
    parser.add_argument("--rounds", type=int, default=7, help="timing rounds (each index answers once per round)")
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--keep", help=argparse.SUPPRESS)
    parser.add_argument("--time-saved", help=argparse.SUPPRESS)
    parser.add_argument("--json", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.config:
        pathlib.Path(args.json).write_text(json.dumps(run_one(args)))
        return
    if args.time_saved:
        pathlib.Path(args.json).write_text(json.dumps(time_saved(args)))
        return
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    rows = []
    out = {"case": args.case, "queries": args.queries, "loadavg_start": os.getloadavg(), "rows": rows,
           "command": "python benchmarks/bench_compact_index.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    corpus = args.case.split(":")[0]
    path = pathlib.Path(args.out) / f"bench_indexes_compact_{corpus}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    keep = pathlib.Path(tempfile.mkdtemp(prefix="bench-compact-", dir=args.tmp))
    common_args = ["--case", args.case, "--queries", str(args.queries), "--seed", str(args.seed),
                   "--model-cache", args.model_cache, "--keep", str(keep)]
    for config in configs:
        if config == "baseline" and not args.baseline_src:
            continue
        env = dict(os.environ)
        if config == "baseline":
            env["PYTHONPATH"] = os.pathsep.join([str(pathlib.Path(args.baseline_src).resolve()),
                                                 env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
            result_path = handle.name
        cmd = [sys.executable, __file__, *common_args, "--config", config, "--json", result_path]
        subprocess.run(cmd, check=True, env=env, cwd=str(ROOT))
        row = json.loads(pathlib.Path(result_path).read_text())
        os.unlink(result_path)
        rows.append(row)
        print(f"[{args.case}] {config}: disk {row['disk_gib']:.2f} GiB ({row['ratio_to_corpus_plus_model']:.2f}x), "
              f"peak {row['build_peak_gib']:.2f} GiB, recall {row['recall_at_10']:.3f}", flush=True)
        out["loadavg_end"] = os.getloadavg()
        path.write_text(json.dumps(out, indent=1))  # after every configuration: a stopped run keeps its rows
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        result_path = handle.name
    try:  # the timing: this tree loads every saved index and times them in turns
        subprocess.run([sys.executable, __file__, *common_args, "--rounds", str(args.rounds), "--time-saved",
                        ",".join(r["config"] for r in rows), "--json", result_path], check=True, cwd=str(ROOT))
        rates = json.loads(pathlib.Path(result_path).read_text())
    finally:
        os.unlink(result_path)
        shutil.rmtree(keep, ignore_errors=True)
    for r in rows:
        r.update(rates.get(r["config"], {}))
    out["loadavg_end"] = os.getloadavg()
    path.write_text(json.dumps(out, indent=1))
    print("| configuration | disk GiB | x (corpus + model) | h | build peak GiB | setting | recall@10 | "
          "queries/s wall / CPU | at the first's setting |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['config']} | {r['disk_gib']:.2f} | {r['ratio_to_corpus_plus_model']:.2f} | {r['n_heavy_rows']:,} | "
              f"{r['build_peak_gib']:.2f} | {r['setting']} | {r['recall_at_10']:.3f} | {r['qps_1_wall']:,.0f} / "
              f"{r['qps_1_cpu']:,.0f} | {r['qps_1_wall_common_setting']:,.0f} / {r['qps_1_cpu_common_setting']:,.0f} |")


if __name__ == "__main__":
    main()
