"""Benchmark: exact vs ann bilinear top-10 retrieval, side by side in one process per case.

Cases (``--cases``, comma-separated ``CORPUS:MODEL``):

* corpora: ``news20`` (full LIBSVM corpus, 15,935 documents, d = 62,061), ``reuters21578``
  (ModApte single-topic documents), ``1e5`` / ``1e6`` (synthetic RCV1-like, d = 47,236, ~75
  nonzeros per document; labelled so in the output);
* models: ``oasis`` (OASIS, ``--triplets`` or ``CORPUS:MODEL:TRIPLETS``; W nearly dense on
  frequent features) and ``sors`` (SORS-I, L1-sparse W), trained on the whole corpus (real
  corpora) or a 10^4-document subset (synthetic).

Per case: the exact index and the ann index with **default settings** (calibrated at build time
for recall@10 >= 0.95) are built in the same process; reported for each: build time, peak RSS of
the build (VmHWM, reset before each phase), size on disk, queries/s on 1 and 2 threads (best of
``--repeats``, after a warm-up), and recall@10 against the exact top-10 (ties counted) on

* **self-queries**: ``--queries`` corpus documents, answered with their own document allowed;
* **held-out queries**: the same documents with their own document removed from both the exact
  and the ann answer (for the synthetic corpora: separate documents that are not in the index).

Then the stage breakdown on the self-queries ("which stage finds which neighbours"): the share of
the exact top-10 that each candidate stage alone brings into a pool of the calibrated size:
expanded-document postings (the default stage), posting lists of the raw corpus X (the identity
part of M only), and a FAISS IVF stage over a rank-128 SVD of Y = X M^T. Optionally the
``pyseismic-lsr`` peer (``--seismic``; needs ``pip install pyseismic-lsr``): its compressed index
over its best published configuration family, compared with the ann index at recall 0.95 and 0.99
(``benchmarks/bench_seismic_peer.py``).

Each case runs in its own subprocess (memory does not carry over); trained models are cached in
``--model-cache``. Results: ``benchmarks/out/bench_indexes.json`` and a Markdown table on stdout.

Usage::

    SPARSESIM_DATA=/path/to/data python benchmarks/bench_indexes.py --cases news20:oasis,reuters21578:oasis
    python benchmarks/bench_indexes.py --cases 1e5:oasis,1e5:sors --triplets 10000

Speed numbers depend on the machine and on its load; the JSON records ``os.getloadavg()``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from sparsesim.memory import peak_resident_bytes, reset_peak_resident, resident_bytes

ROOT = pathlib.Path(__file__).resolve().parents[1]


def peak_gib() -> float:
    peak = peak_resident_bytes()
    return float("nan") if peak is None else peak / 2**30


def disk_gib(path: pathlib.Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**30


def load_corpus(name: str, n_queries: int, seed: int):
    """(X, y, Q_self_rows, Q_heldout or None, description)."""
    from sparsesim.data import load_dataset
    from sparsesim.data.synthetic import rcv1_like

    # not default_rng(seed): the ann calibration draws its 300 held-out documents with that
    # generator, and the benchmark's check must use other queries than the calibration
    rng = np.random.default_rng([seed, 1])
    if name in ("news20", "reuters21578"):
        data = load_dataset(name)
        rows = np.sort(rng.choice(data.n_documents, size=min(n_queries, data.n_documents - 11), replace=False))
        return data.X, data.y, rows, None, f"{name} (real, d={data.n_features:,})"
    n = int(float(name))
    data = rcv1_like(n + n_queries, seed=seed)
    rows = np.sort(rng.choice(n, size=n_queries, replace=False))
    return (data.X[:n], data.y[:n], rows, data.X[n:],
            f"synthetic RCV1-like (d={data.n_features:,}, ~75 nnz/doc, seed {seed})")


def get_model(corpus: str, algorithm: str, X, y, n_triplets: int, seed: int, cache: pathlib.Path):
    from sparsesim.learners.bilinear import OASIS, SORS
    from sparsesim.models import BilinearSimilarity

    cache.mkdir(parents=True, exist_ok=True)
    from sparsesim.data.synthetic import GENERATOR_VERSION

    # a generated corpus changes with its recipe: its models key on the recipe's version
    recipe = f"-v{GENERATOR_VERSION}" if corpus.startswith("1e") else ""
    path = cache / f"{corpus}{recipe}-{algorithm}-{n_triplets}-{seed}.npz"
    if path.is_file():
        return BilinearSimilarity.load(path), None
    # real corpora: the whole corpus (as a user trains); synthetic: a 10^4-document subset
    sub = np.arange(X.shape[0] if X.shape[0] <= 20_000 else 10_000)
    start = time.perf_counter()
    if algorithm == "oasis":
        est = OASIS(n_triplets=n_triplets, random_state=seed)
    else:
        est = SORS(regularizer="l1", n_triplets=n_triplets, random_state=seed)
    model = est.fit(X[sub], y[sub]).model_
    seconds = time.perf_counter() - start
    model.save(path)
    return model, seconds


def profile_parser(doc: str, repeats: int) -> argparse.ArgumentParser:
    """The options every profiling benchmark takes (``--case``, ``--queries``, ``--pool``,
    ``--repeats``, ``--seed``, ``--model-cache``, ``--out``); each adds its own."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", default="news20:oasis:20000", help="CORPUS:MODEL:TRIPLETS")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--pool", type=int, default=70)
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-cache", default=str(pathlib.Path(tempfile.gettempdir()) / "sparsesim-bench-models"))
    parser.add_argument("--out", default=str(pathlib.Path(__file__).resolve().parent / "out"))
    return parser


def prepared_case(case: str, n_queries: int, seed: int, cache: pathlib.Path):
    """``CORPUS:MODEL:TRIPLETS`` as the profiling benchmarks use it: the (cached) model, the corpus
    prepared for it (``prepare_rows``), the query rows and their row numbers."""
    from sparsesim.indexes.base import prepare_rows

    corpus, algorithm, triplets = case.split(":")
    X, y, qrows, _, _ = load_corpus(corpus, n_queries, seed)
    model, _ = get_model(corpus, algorithm, X, y, int(triplets), seed, pathlib.Path(cache))
    X = prepare_rows(model, X, "corpus")
    return model, X, X[qrows], qrows


REPEATS = 3


def timed(fn):
    """Best wall time of REPEATS calls (after one warm-up call)."""
    fn()
    best = np.inf
    for _ in range(REPEATS):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return out, best


def ann_options(pairs) -> dict:
    """``["rerank_memory=560000000", "read_allocation=threshold", ...]`` as keyword arguments of the
    ann build (numbers as integers, other values as given)."""
    out = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        try:
            out[name.strip()] = int(float(value))
        except ValueError:
            out[name.strip()] = value.strip()
    return out


def drop_self(rows, scores, exclude, k):
    out = np.empty((rows.shape[0], k))
    for r in range(rows.shape[0]):
        out[r] = scores[r][rows[r] != exclude[r]][:k]
    return out


def run_case(corpus: str, algorithm: str, args) -> dict:
    from sparsesim.indexes import build_index
    from sparsesim.indexes import compact_numba_kernels as CK
    from sparsesim.indexes import numba_kernels as K
    from sparsesim.indexes.ann import impact_postings
    from sparsesim.indexes.base import prepare_rows, query_scratch
    from sparsesim.indexes.calibration import recall_counting_ties

    k = 10
    X, y, qrows, Qh, source = load_corpus(corpus, args.queries, args.seed)
    model, train_seconds = get_model(corpus, algorithm, X, y, args.triplets, args.seed, pathlib.Path(args.model_cache))
    X = prepare_rows(model, X, "corpus")
    Q = X[qrows]
    corpus_bytes = 12 * X.nnz + 8 * (X.shape[0] + 1)
    model_bytes = 12 * model.W.nnz + 8 * (X.shape[1] + 1)
    out = {"corpus": corpus, "source": source, "n_documents": int(X.shape[0]), "n_features": int(X.shape[1]),
           "model": {"algorithm": algorithm, "n_triplets": args.triplets, "nnz_W": int(model.W.nnz),
                     "train_seconds": train_seconds},
           "corpus_plus_model_gib": (corpus_bytes + model_bytes) / 2**30,
           "n_self_queries": int(Q.shape[0]), "n_heldout_queries": int(Q.shape[0] if Qh is None else Qh.shape[0]),
           "heldout": "self-queries with their own document removed" if Qh is None else "documents not in the index",
           "loadavg_start": os.getloadavg(), "rows": []}
    print(f"[{corpus}:{algorithm}] n={X.shape[0]:,} nnz(W)={model.W.nnz:,}", flush=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-idx-"))
    results = {}
    try:
        for kind in ("exact", "ann"):
            reset_peak_resident()
            before = resident_bytes() / 2**30  # the interpreter, libraries, corpus and model
            start = time.perf_counter()
            extra = ann_options(args.ann_option) if kind == "ann" else {}
            index = build_index(model, X, kind=kind, n_jobs=args.build_jobs, **extra)
            build_seconds = time.perf_counter() - start
            build_peak = peak_gib()
            index.save(tmp / kind)
            row = {"index": kind, "build_seconds": build_seconds, "build_peak_gib": build_peak,
                   "rss_before_build_gib": before, "disk_gib": disk_gib(tmp / kind)}
            for jobs in (1, 2):
                (rows, scores), sec = timed(functools.partial(index.query_rows, Q, k + 1, n_jobs=jobs))
                row[f"qps_{jobs}"] = Q.shape[0] / sec
            results[kind] = {"self": index.query_rows(Q, k), "self11": (rows, scores)}
            if Qh is not None:
                (hrows, hscores), sec = timed(functools.partial(index.query_rows, Qh, k, n_jobs=1))
                results[kind]["heldout"] = hscores
                row["qps_heldout_1"] = Qh.shape[0] / sec
            if kind == "ann":
                row["setting"] = index.search_setting()
                row["calibration"] = index.calibration_
                row["build_jobs"] = args.build_jobs
                row["options"] = extra
                row["rerank_memory"] = int(index.rerank_memory_ or 0)
                row["n_heavy_rows"] = int(index.heavy_rows_.size)
                row["build_phases_seconds"] = {k: round(v, 1) for k, v in index.build_phases_.items()}
                ann = index
            else:
                del index
            out["rows"].append(row)
            print(f"[{corpus}:{algorithm}] {kind}: build {build_seconds:.1f}s peak {build_peak:.2f} GiB "
                  f"disk {row['disk_gib']:.2f} GiB, {row['qps_1']:.0f} q/s (1 thread) {row['qps_2']:.0f} (2)", flush=True)
        ex, an = results["exact"], results["ann"]
        truth = ex["self"][1]
        rec_self = float(recall_counting_ties(an["self"][1], truth).mean())
        if Qh is None:
            t_h = drop_self(*ex["self11"], qrows, k)
            a_h = drop_self(*an["self11"], qrows, k)
        else:
            t_h, a_h = ex["heldout"], an["heldout"]
        rec_held = float(recall_counting_ties(a_h, t_h).mean())
        arow = out["rows"][1]
        arow.update(recall_self=rec_self, recall_heldout=rec_held, speedup_1=arow["qps_1"] / out["rows"][0]["qps_1"],
                    speedup_2=arow["qps_2"] / out["rows"][0]["qps_2"])
        out["rows"][0].update(recall_self=1.0, recall_heldout=1.0, speedup_1=1.0, speedup_2=1.0)
        cal = ann.calibration_
        out["calibrated_recall"] = cal["recall"]
        out["calibration_check_gap"] = rec_held - cal["recall"]
        print(f"[{corpus}:{algorithm}] ann recall self {rec_self:.3f} held-out {rec_held:.3f} "
              f"(calibrated {cal['recall']:.3f}, setting {cal['setting']}) x{arow['speedup_1']:.1f} exact", flush=True)

        # -- which stage finds which neighbours (candidate pools alone, exact re-ranking) --------
        setting = ann.search_setting()
        pool = setting["sparse_pool"]
        truth_rows = ex["self"][0]

        def share(cands):
            return float(np.mean([np.isin(t, c).mean() for t, c in zip(truth_rows, cands)]))

        def sparse_cands(P, n_postings, weighted=True):
            o = np.empty((Q.shape[0], pool), dtype=np.int64)
            if hasattr(P, "kernel_args"):  # the ann index's compact lists
                CK.compact_sparse_candidates(Q.indptr, Q.indices, Q.data, *P.kernel_args(), X.shape[0], n_postings,
                                             weighted, pool, o, *query_scratch.sparse(X.shape[0]))
                return o
            K.sparse_candidates(Q.indptr, Q.indices, Q.data, P.indptr, P.indices, P.data, n_postings, weighted, pool,
                                o, *query_scratch.sparse(X.shape[0]))
            return o

        stages = {"expanded postings (default stage)": share(sparse_cands(ann.postings_, setting["n_postings"])),
                  "expanded postings, the same reads from every list": share(
                      sparse_cands(ann.postings_, setting["n_postings"], weighted=False)),
                  "raw-corpus postings (identity part only)": share(sparse_cands(impact_postings(X),
                                                                                 max(setting["n_postings"], 256)))}
        del index
        if args.no_dense or model.W.nnz > 50_000_000:
            # learning the projection holds I + W, its transpose and a 4,000 x d sample at once
            stages["FAISS IVF over rank-128 SVD of Y (dense stage)"] = "skipped (--no-dense or nnz(W) > 5e7: memory)"
        else:
            reset_peak_resident()
            dense = build_index(model, X, kind="ann", dim=128, n_postings=0, target_recall=None, dense_pool=pool,
                                rerank_memory=0)
            stages["FAISS IVF over rank-128 SVD of Y (dense stage)"] = share(
                dense._dense_candidates(Q, pool, 32, 128, 1))
            stages["dense stage build peak GiB"] = peak_gib()
            del dense
        out["stages_pool"] = pool
        out["stages"] = stages
        print(f"[{corpus}:{algorithm}] stages (pool {pool}): {stages}", flush=True)
        if args.seismic:
            from bench_seismic_peer import comparison, seismic_peer

            out["seismic_best"] = seismic_peer(model, X, Q, truth, REPEATS, k, args.build_jobs,
                                               log=lambda m: print(m, flush=True))
            out["seismic_at_targets"] = comparison(ann, out["seismic_best"], Q, truth, REPEATS, k,
                                                   log=lambda m: print(m, flush=True))
        del ann
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["loadavg_end"] = os.getloadavg()
    return out


def fmt_table(results: list[dict]) -> str:
    lines = ["| corpus | docs | model (nnz W) | index | build s | build peak GiB | disk GiB (corpus+model) | "
             "q/s 1 thread | q/s 2 threads | x exact (1 thr) | recall@10 self | recall@10 held-out | calibrated |",
             "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for res in results:
        for row in res["rows"]:
            cal = row.get("calibration")
            calib = f"{cal['recall']:.3f} ({', '.join(f'{k}={v}' for k, v in cal['setting'].items())})" if cal else ""
            lines.append(
                f"| {res['corpus']} | {res['n_documents']:,} | {res['model']['algorithm']} ({res['model']['nnz_W'] / 1e6:.1f}M) "
                f"| {row['index']} | {row['build_seconds']:.1f} | {row['build_peak_gib']:.2f} | "
                f"{row['disk_gib']:.2f} ({res['corpus_plus_model_gib']:.2f}) | {row['qps_1']:.0f} | {row['qps_2']:.0f} | "
                f"{row['speedup_1']:.1f}x | {row['recall_self']:.3f} | {row['recall_heldout']:.3f} | {calib} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="news20:oasis,news20:sors,reuters21578:oasis,reuters21578:sors,1e5:oasis",
                        help="comma-separated CORPUS:MODEL[:TRIPLETS] (corpora news20, reuters21578, 1e5, 1e6; models "
                             "oasis, sors)")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--triplets", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--build-jobs", type=int, default=1, help="threads for building the indexes")
    parser.add_argument("--no-dense", action="store_true", help="skip the FAISS stage-breakdown build")
    parser.add_argument("--seismic", action="store_true", help="add the pyseismic-lsr row when installed")
    parser.add_argument("--ann-option", action="append", default=[], metavar="NAME=VALUE",
                        help="an AnnIndex parameter for the ann build, e.g. rerank_memory=560000000 or read_allocation=threshold")
    parser.add_argument("--name", default="bench_indexes",
                        help="file name prefix of the JSON results in --out (default bench_indexes)")
    parser.add_argument("--model-cache", default=str(pathlib.Path(tempfile.gettempdir()) / "sparsesim-bench-models"))
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "out"))
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--json", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    global REPEATS
    REPEATS = max(1, args.repeats)
    if args.one:
        corpus, algorithm, *triplets = args.one.split(":")
        if triplets:
            args.triplets = int(float(triplets[0]))
        res = run_case(corpus, algorithm, args)
        import resource

        res["process_max_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        pathlib.Path(args.json).write_text(json.dumps(res, indent=2, default=float))
        return 0
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for case in args.cases.split(","):
        case = case.strip()
        path = out_dir / f"{args.name}_{case.replace(':', '_')}.json"
        cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--one", case, "--json", str(path),
               "--queries", str(args.queries), "--triplets", str(args.triplets), "--seed", str(args.seed),
               "--repeats", str(args.repeats), "--model-cache", args.model_cache, "--build-jobs", str(args.build_jobs)]
        cmd += ["--no-dense"] if args.no_dense else []
        cmd += ["--seismic"] if args.seismic else []
        cmd += [f"--ann-option={o}" for o in args.ann_option]
        done = subprocess.run(cmd, env=dict(os.environ))
        if done.returncode != 0:
            print(f"case {case} failed (exit {done.returncode}); continuing", flush=True)
            continue
        results.append(json.loads(path.read_text()))
    (out_dir / f"{args.name}.json").write_text(json.dumps(results, indent=2))
    print(fmt_table(results))
    for res in results:
        print(f"- {res['corpus']}:{res['model']['algorithm']}: stages (pool {res['stages_pool']}): {res['stages']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
