"""Benchmark: the block-wise ann build of a synthetic RCV1-like corpus on disk, within a memory budget.

Steps (one process; run it under ``/usr/bin/time -v`` for the whole process's peak):

1. the corpus: a corpus directory of ``--docs`` + ``--queries`` synthetic RCV1-like documents
   (``sparsesim.data.synthetic.write_rcv1_like``, d = 47,236, 75 nonzeros per document), generated
   block by block into ``<corpus>.partial`` and renamed to ``--corpus`` when complete (an existing
   ``--corpus`` is reused; a ``.partial`` left by an interrupted run is generated again); the last
   ``--queries`` documents are the held-out queries, the index holds the first ``--docs``;
2. the model: OASIS (``--triplets``) on the first 10^4 documents, cached in ``--model-cache``;
3. the build: :func:`sparsesim.indexes.ann_blockwise.build_ann_blockwise` with ``--memory``
   (calibrated at build for recall@10 >= 0.95); the process's VmHWM is reset before it, so
   ``build_peak_gib`` is the build's own peak (interpreter, libraries and model included);
   the build's record (the JSON's build fields) is written to ``<index>.build.json``; with
   ``--resume`` an index directory that has that record is not built again (restart after the
   build: only the queries run), and an unfinished build continues from its last checkpoint
   (``build_ann_blockwise(..., resume=True)``: staged in ``<index>.partial/``, checkpointed after
   the corpus pass and after every block of the second pass; ``build_peak_gib`` is then the
   largest peak of the processes that worked on it, kept in ``<index>.build-peak.json``);
4. queries: the exact top-10 of the 300 held-out documents and 300 corpus documents (other than
   the calibration's, their own document removed from both answers) computed a block at a time
   over the index's stored corpus files (``exact_top_k_blocks``, read with ``pread``); then the
   built index is dropped and the saved index loaded memory-mapped, its answers scored against that
   truth (ties counted); queries/s on 1 and 2 threads and CPU milliseconds per query, best of 3
   after a warm-up.

Memory by design: the build holds what its plan says (``--memory``); the query phase holds one
block of the corpus (the build's block size), the 600 queries and their top-k; the loaded index is
memory-mapped (its touched pages are file-backed: ``query_rss_file_gib`` in the JSON, reclaimable
page cache, beside ``query_rss_anon_gib``). Each stage prints a ``[tenmillion]`` line with the
elapsed seconds and the resident memory, and the build prints each block, so a log shows where a
long run is.

Usage::

    python benchmarks/bench_tenmillion.py --docs 1000000 --memory 3GiB --corpus /tmp/c1e6 \
        --index /tmp/i1e6 --keep-index --resume --out benchmarks/out/bench_tenmillion_1e6.json

Speed depends on the machine and its load; the JSON records ``os.getloadavg()``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pathlib
import shutil
import sys
import time

import numpy as np

from sparsesim.memory import peak_resident_bytes, reset_peak_resident, resident_bytes

ROOT = pathlib.Path(__file__).resolve().parents[1]


def gib(nbytes) -> float:
    return float("nan") if nbytes is None else nbytes / 2**30


def disk_gib(path: pathlib.Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**30


def status_gib(field: str) -> float:
    """A field of /proc/self/status (``RssAnon``, ``RssFile``, ``VmHWM``) in GiB (nan elsewhere)."""
    try:
        for line in pathlib.Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024 / 2**30
    except OSError:
        pass
    return float("nan")


_T0 = time.perf_counter()


def log(message: str) -> None:
    print(f"[tenmillion] {time.perf_counter() - _T0:8.0f}s anon {status_gib('RssAnon'):.2f} GiB "
          f"file {status_gib('RssFile'):.2f} GiB | {message}", flush=True)


class BuildProgress:
    """Logs every block of the build and keeps the largest peak resident memory of the processes
    that worked on one resumable build in ``path`` (a JSON file, rewritten after every block)."""

    def __init__(self, path: pathlib.Path):
        self.path = path
        self.before = 0.0
        if path.is_file():
            try:
                self.before = float(json.loads(path.read_text())["build_peak_gib"])
            except (ValueError, KeyError, TypeError):
                self.before = 0.0

    def peak_gib(self) -> float:
        return max(self.before, gib(peak_resident_bytes()))

    def __call__(self, stage: str, done: int, total: int) -> None:
        log(f"build {stage}: {done:,} / {total:,}")
        write_json(self.path, {"build_peak_gib": self.peak_gib()})


def write_json(path: pathlib.Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=2, default=float))
    os.replace(tmp, path)


def stored_corpus(index_dir: pathlib.Path, n_features: int):
    """The saved index's corpus arrays as a :class:`CorpusFiles` (read with ``pread``)."""
    from sparsesim.data.corpus_files import CorpusFiles

    vdir = max((p for p in index_dir.iterdir() if p.name.startswith("v-")), key=lambda p: p.stat().st_mtime)
    return CorpusFiles.from_files(n_features, *(vdir / f"corpus.{a}.npy" for a in ("indptr", "indices", "data")))


def best_rate(fn, n: int, repeats: int = 3) -> tuple:
    """Queries/s (wall clock) and CPU milliseconds per query of ``fn`` answering ``n`` queries:
    the best of ``repeats`` runs after a warm-up (CPU time is the less load-sensitive of the two
    on a shared machine)."""
    fn()
    best, cpu = np.inf, np.inf
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        best = min(best, time.perf_counter() - start)
        cpu = min(cpu, time.process_time() - start_cpu)
    return n / best, 1000 * cpu / n


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--triplets", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--memory", default="3GiB", help="memory budget of the build")
    parser.add_argument("--build-jobs", type=int, default=2)
    parser.add_argument("--postings-per-feature", type=int, default=None,
                        help="length L of each stored posting list (default: the index's own rule)")
    parser.add_argument("--corpus", required=True, help="corpus directory (generated when missing)")
    parser.add_argument("--index", required=True, help="index directory to write (replaced)")
    parser.add_argument("--model-cache", default=str(ROOT / "benchmarks" / "out" / "models"))
    parser.add_argument("--keep-index", action="store_true")
    parser.add_argument("--resume", action="store_true",
                        help="reuse an index directory whose build record <index>.build.json exists; otherwise "
                             "continue an unfinished build from its last checkpoint in <index>.partial/ (written "
                             "after the corpus pass and after every block of the second pass; a checkpoint of "
                             "another model, corpus, --docs, --memory or parameters is reported and the build "
                             "starts over). Without --resume a build starts from scratch")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "bench_tenmillion.json"))
    args = parser.parse_args(argv)

    from sparsesim.data.corpus_files import CorpusFiles
    from sparsesim.data.synthetic import GENERATOR_VERSION, write_rcv1_like
    from sparsesim.indexes import load_index
    from sparsesim.indexes.ann_blockwise import build_ann_blockwise, exact_top_k_blocks
    from sparsesim.indexes.base import drop_own_rows
    from sparsesim.indexes.calibration import recall_counting_ties
    from sparsesim.learners.bilinear import OASIS
    from sparsesim.models import BilinearSimilarity

    out = {"docs": args.docs, "queries": args.queries, "memory": args.memory, "loadavg_start": os.getloadavg(),
           "argv": sys.argv[1:]}
    corpus_dir = pathlib.Path(args.corpus)
    start = time.perf_counter()
    if not (corpus_dir / "corpus.json").exists():
        partial = corpus_dir.with_name(corpus_dir.name + ".partial")
        if partial.exists():
            shutil.rmtree(partial)  # left by an interrupted run of this benchmark
        log(f"generate {args.docs + args.queries:,} documents into {partial}")
        write_rcv1_like(partial, args.docs + args.queries, seed=args.seed)
        os.replace(partial, corpus_dir)
        out["generate_seconds"] = time.perf_counter() - start
        log(f"generated in {out['generate_seconds']:.0f}s")
    corpus = CorpusFiles(corpus_dir)
    if corpus.n_documents < args.docs + args.queries:
        raise SystemExit(f"{corpus_dir} holds {corpus.n_documents} documents, fewer than --docs + --queries")
    if corpus.rows(0, min(corpus.n_documents, 10_000)).data.min() <= 0:
        raise SystemExit(f"{corpus_dir} has values <= 0: it was generated before the synthetic corpus's IDF "
                         "counted documents (its weights went negative past e x 47,236 documents); delete it")
    out["corpus_gib"] = disk_gib(corpus_dir)
    out["generate_peak_gib"] = gib(peak_resident_bytes())

    cache = pathlib.Path(args.model_cache)  # one model per corpus (the IDF is corpus-wide)
    cache.mkdir(parents=True, exist_ok=True)
    # keyed on the generator's version: models cached for earlier corpora are not reused
    model_path = cache / (f"rcv1like-idf{GENERATOR_VERSION}-blocks-{corpus.n_documents}-oasis-{args.triplets}-"
                          f"{args.seed}.npz")
    if model_path.is_file():
        model = BilinearSimilarity.load(model_path)
    else:
        t = time.perf_counter()
        sub = corpus.rows(0, 10_000)
        model = OASIS(n_triplets=args.triplets, random_state=args.seed).fit(sub, corpus.labels()[:10_000]).model_
        model.save(model_path)
        out["train_seconds"] = time.perf_counter() - t
    out["model"] = {"algorithm": "oasis", "n_triplets": args.triplets, "nnz_W": int(model.W.nnz)}
    n, d = args.docs, corpus.n_features
    corpus_bytes = 12 * int(corpus.indptr[n]) + 8 * (n + 1)
    model_bytes = 12 * model.W.nnz + 8 * (d + 1)
    out["corpus_plus_model_gib"] = (corpus_bytes + model_bytes) / 2**30
    log(f"n={n:,} nnz(W)={model.W.nnz:,} memory={args.memory}")

    index_dir = pathlib.Path(args.index)
    record_path = index_dir.with_name(index_dir.name + ".build.json")
    build_keys = ("postings_length", "rss_before_build_gib", "build_seconds", "build_peak_gib", "plan", "build_phases_seconds",
                  "calibration", "calibration_rows", "disk_gib", "build_resume")
    if args.resume and index_dir.is_dir() and record_path.is_file():
        record = json.loads(record_path.read_text())
        out.update({key: record[key] for key in build_keys if key in record})
        out["resumed_after_build"] = True
        log(f"resume: {index_dir} built before ({record['build_seconds']:.0f}s), queries only")
    else:
        if index_dir.exists():
            shutil.rmtree(index_dir)
        record_path.unlink(missing_ok=True)
        peak_path = index_dir.with_name(index_dir.name + ".build-peak.json")
        if not args.resume:
            peak_path.unlink(missing_ok=True)
        reset_peak_resident()
        out["rss_before_build_gib"] = gib(resident_bytes())
        progress = BuildProgress(peak_path)
        t = time.perf_counter()
        built = build_ann_blockwise(model, corpus, index_dir, memory=args.memory, n_documents=n,
                                    n_jobs=args.build_jobs, progress=progress, resume=args.resume,
                                    **({} if args.postings_per_feature is None
                                       else {"postings_per_feature": args.postings_per_feature}))
        # wall clock, plus the seconds of the passes done by earlier processes of a resumed build
        out["build_seconds"] = time.perf_counter() - t + built.resume_["seconds_before"]
        out["build_peak_gib"] = progress.peak_gib()
        out["build_resume"] = built.resume_
        peak_path.unlink(missing_ok=True)
        out["plan"] = built.plan_
        out["postings_length"] = int(built.postings_length_)
        out["build_phases_seconds"] = {k: round(v, 1) for k, v in built.build_phases_.items()}
        out["calibration"] = {k: built.calibration_[k] for k in ("setting", "recall", "recall_lower_bound", "met",
                                                                   "n_queries", "qps_one_thread")}
        out["calibration_rows"] = sorted(int(r) for r in set(built.calibration_["rows"])
                                         | set(built.calibration_["selection"]["rows"]))
        out["disk_gib"] = disk_gib(index_dir)
        del built  # its postings and mapped files: the query phase starts from the saved index alone
        write_json(record_path, {key: out[key] for key in build_keys})
        log(f"build {out['build_seconds']:.0f}s peak {out['build_peak_gib']:.2f} GiB "
            f"disk {out['disk_gib']:.2f} GiB (corpus + model {out['corpus_plus_model_gib']:.2f}) "
            f"calibrated {out['calibration']['setting']} recall {out['calibration']['recall']:.3f}")
    gc.collect()

    # the saved index memory-mapped; the truth a block at a time over its corpus files (pread)
    reset_peak_resident()
    rng = np.random.default_rng([args.seed, 1])
    used = np.asarray(out["calibration_rows"], dtype=np.int64)
    draw = rng.choice(n, size=min(n, args.queries + used.size), replace=False)
    self_rows = np.sort(draw[~np.isin(draw, used)][:args.queries])
    source = stored_corpus(index_dir, d)
    block_rows = int(out["plan"]["block_rows"])
    k = 10
    t = time.perf_counter()
    log("exact top-k of the queries, a block at a time")
    index = load_index(index_dir, mmap=True)
    Qh = index.prepare_queries(corpus.rows(n, n + args.queries))
    Qs = index.stored_queries(self_rows)
    truth_h = exact_top_k_blocks(index.model, source, Qh, k, block_rows, args.build_jobs)
    truth_s = exact_top_k_blocks(index.model, source, Qs, k + 1, block_rows, args.build_jobs)
    out["exact_seconds"] = time.perf_counter() - t
    truth_s = drop_own_rows(*truth_s, self_rows, k)
    log(f"exact top-k in {out['exact_seconds']:.0f}s; querying the memory-mapped index")
    found_h = index.query_rows(Qh, k, n_jobs=1)
    found_s = drop_own_rows(*index.query_rows(Qs, k + 1, n_jobs=1), self_rows, k)
    out["recall_heldout"] = float(recall_counting_ties(found_h[1], truth_h[1]).mean())
    out["recall_corpus_heldout"] = float(recall_counting_ties(found_s[1], truth_s[1]).mean())
    for jobs in (1, 2):
        out[f"qps_{jobs}"], out[f"cpu_ms_per_query_{jobs}"] = best_rate(
            lambda: index.query_rows(Qh, k, n_jobs=jobs), Qh.shape[0])
    out["query_peak_gib"] = gib(peak_resident_bytes())
    out["query_rss_anon_gib"] = status_gib("RssAnon")
    out["query_rss_file_gib"] = status_gib("RssFile")
    out["loadavg_end"] = os.getloadavg()
    out.pop("calibration_rows", None)
    log(f"recall@10 held-out {out['recall_heldout']:.3f}, corpus documents "
        f"{out['recall_corpus_heldout']:.3f}; {out['qps_1']:.0f} q/s (1 thread, {out['cpu_ms_per_query_1']:.3f} CPU ms "
        f"per query), {out['qps_2']:.0f} (2)")
    del index
    if not args.keep_index:
        shutil.rmtree(index_dir, ignore_errors=True)
        record_path.unlink(missing_ok=True)
    write_json(pathlib.Path(args.out), out)
    return out


if __name__ == "__main__":
    main()
