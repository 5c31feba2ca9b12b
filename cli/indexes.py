"""``sparsesim index build | calibrate | add``: retrieval indexes built from learned models."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from sparsesim.exceptions import InvalidInputError
from sparsesim.validation import check_float

from . import checks
from .common import (ID_COLUMN_HELP, TEXT_COLUMN_HELP, data_file_options, echo_line, emit, progress_bar, show_progress,
                     zero_based_option, index_app, parse_params, scheduler_option)


@index_app.command("build")
def index_build(
    model: Path = typer.Option(..., "--model", "-m", help="Model file."),
    data: List[str] = typer.Option(..., "--data", "-d", metavar="DATA", help="Corpus: data set name or svmlight path; repeat "
                                   "with several files for one shard per file."),
    kind: str = typer.Option("exact", "--kind", help="exact | ann"),
    out: Path = typer.Option(..., "--out", "-o", help="Index directory to write."),
    param: Optional[List[str]] = typer.Option(None, "--param", "-p", metavar="KEY=VALUE", help="Index parameter KEY=VALUE (ann: dim, nlist, nprobe, pool, ...)."),
    zero_based: str = zero_based_option(),
    text_column: Optional[str] = typer.Option(None, "--text-column", help=TEXT_COLUMN_HELP),
    id_column: Optional[str] = typer.Option(None, "--id-column", help=ID_COLUMN_HELP),
    target_recall: Optional[float] = typer.Option(None, "--target-recall", help="ann: recall@10 against exact the "
                                                  "search setting is calibrated for (default 0.95)."),
    calibration_queries: Optional[Path] = typer.Option(None, "--calibration-queries", help="ann: query file to "
                                                        "calibrate on (default: 300 held-out corpus documents)."),
    shards: Optional[int] = typer.Option(None, "--shards", help="Split the corpus into N shards (row blocks); with "
                                         "--scheduler each shard is built and kept on a Dask worker."),
    scheduler: Optional[str] = scheduler_option(),
    n_jobs: int = typer.Option(-1, "--n-jobs", "-j", help="Threads for building the index (one machine; "
                                "default -1: every core; the index is the same whatever the count)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace the index at OUT if it exists (otherwise an existing OUT is refused)."),
    memory: Optional[str] = typer.Option(None, "--memory", help="ann: build block by block within this memory "
                                         "budget (e.g. 8GiB, 50%), from an svmlight file or a corpus directory "
                                         "too large to load."),
    resume: bool = typer.Option(False, "--resume", help="With --memory: continue a build that stopped, from its "
                                "last checkpoint."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
):
    """Build an exact or approximate (ann) index over a corpus and save it.

    A text corpus (folder, CSV, JSONL) is featurised with the model's saved featuriser; document
    ids are file paths or the id column. With --memory the ann index is built a block of documents
    at a time (corpus, index and checkpoints on disk)."""
    params = parse_params(param)
    if set(params) - {"*"}:
        raise InvalidInputError("index build takes plain --param KEY=VALUE (no prefix)")
    kind = checks.index_kind(kind)
    from sparsesim.indexes import INDEX_KINDS, check_index_params

    params["*"] = check_index_params(INDEX_KINDS[kind], params.get("*", {}))
    if shards is not None:
        checks.positive(shards, "--shards")
    if target_recall is not None:
        check_float(target_recall, "--target-recall", 0, 1, low_open=True)
    checks.jobs(n_jobs)
    data = [checks.dataset_name(d) for d in data]
    if memory is not None or resume:
        return _build_blockwise(model, data, kind, out, params.get("*", {}), memory, resume, shards, scheduler,
                                zero_based, target_recall, calibration_queries, n_jobs, overwrite, json_out)
    from sparsesim.workflows import build_index_from_files

    bar, _ = progress_bar(None, f"building {kind} index", show_progress(json_out))
    with bar:
        summary = build_index_from_files(model, data[0] if len(data) == 1 else data, kind=kind, out=out,
                                         params=params.get("*", {}),
                                         data_options=data_file_options(zero_based, text_column, None, id_column),
                                         target_recall=target_recall, calibration_queries=calibration_queries,
                                         shards=shards, scheduler=scheduler, n_jobs=n_jobs, overwrite=overwrite)
    if json_out:
        emit(summary)
    else:
        where = ""
        if "shards" in summary:
            place = f"on {len(set(summary['workers']))} Dask worker(s)" if summary["scheduler"] else "in-process"
            where = f" as {len(summary['shards'])} shards {summary['shards']} {place}"
        size = f" ({summary['index_bytes'] / 2**20:,.1f} MiB)" if "index_bytes" in summary else ""
        echo_line(f"built {kind} index over {summary['n_documents']} documents{where} in "
                   f"{summary['build_seconds']:.1f} s; saved {out}{size}")
        if "calibration" in summary:
            echo_line(_calibration_line(summary["calibration"]))


def _build_blockwise(model, data, kind, out, params, memory, resume, shards, scheduler, zero_based, target_recall,
                     calibration_queries, n_jobs, overwrite, json_out):
    """``index build --memory``: the block-wise ann build (one corpus, one process)."""
    from sparsesim.memory import format_bytes, parse_memory

    if memory is None:
        raise InvalidInputError("--resume continues a block-wise build: give --memory too")
    if kind != "ann":
        raise InvalidInputError("--memory builds ann indexes block by block; add --kind ann")
    if shards is not None or scheduler is not None or len(data) != 1:
        raise InvalidInputError("--memory builds one index from one corpus; drop --shards, --scheduler and extra "
                                "--data")
    parse_memory(memory, "--memory")
    from sparsesim.workflows.blockwise import build_ann_blockwise_from_files

    bar, advance = progress_bar(None, "building ann index block by block", show_progress(json_out))
    passes = {"convert": 0, "prepare_corpus": 0, "heavy_values_and_postings": 1}

    def report(phase, done, total):
        if advance is not None and phase in passes:  # the bar: bytes converted, then both passes' documents
            advance(done if phase == "convert" else passes[phase] * total + done,
                    total if phase == "convert" else 2 * total)

    with bar:
        summary = build_ann_blockwise_from_files(model, data[0], out, memory, params=params,
                                                 data_options=data_file_options(zero_based, None, None, None),
                                                 target_recall=target_recall, calibration_queries=calibration_queries,
                                                 n_jobs=n_jobs, overwrite=overwrite, resume=resume, progress=report)
    if json_out:
        emit(summary)
        return
    resumed = summary["resume"].get("resumed_at")
    again = f", resumed after {resumed:,} documents" if resumed else ""
    echo_line(f"built ann index over {summary['n_documents']} documents block by block "
              f"({summary['plan']['block_rows']:,} per block within {memory}{again}) in "
              f"{summary['build_seconds']:.1f} s; saved {out} ({format_bytes(summary['index_bytes'])})")
    if "calibration" in summary:
        echo_line(_calibration_line(summary["calibration"]))


def _calibration_line(cal: dict) -> str:
    setting = ", ".join(f"{k}={v}" for k, v in cal["setting"].items())
    status = "met" if cal["met"] else "NOT met (most accurate setting kept)"
    chosen = f"chosen on {cal['selection']['n_queries']} queries, " if cal.get("selection") else ""
    return (f"{chosen}certified on {cal['n_queries']} others: recall@{cal['top_k']} {cal['recall']:.3f} "
            f"(lower bound {cal['recall_lower_bound']:.3f}{_weighted_note(cal)}, target {cal['target_recall']} "
            f"{status}) with {setting}, "
            f"{cal['qps_one_thread']:.0f} queries/s on one thread")


def _weighted_note(cal: dict) -> str:
    weighted = cal.get("corpus_weighted")
    if not weighted:
        return ""
    return (f"; weighted by corpus share of each stratum {weighted['recall']:.3f}, lower bound "
            f"{weighted['recall_lower_bound']:.3f}")


@index_app.command("calibrate")
def index_calibrate(
    index: Path = typer.Option(..., "--index", "-i", help="ann index directory."),
    model: Optional[Path] = typer.Option(None, "--model", "-m", help="A retrained model (same features) to serve "
                                         "from now on; the postings are kept, the pools re-measured."),
    target_recall: Optional[float] = typer.Option(None, "--target-recall", help="Default: the index's target."),
    calibration_queries: Optional[Path] = typer.Option(None, "--queries", "--calibration-queries", help="Your "
                                                        "query log (any query file `sparsesim query` reads): half "
                                                        "choose the setting, the other half certify its recall "
                                                        "(default: held-out corpus documents, stratified by "
                                                        "cluster)."),
    zero_based: str = zero_based_option(),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
):
    """Re-measure the fastest search setting of an ann index that meets the target recall
    (without rebuilding its postings) and certify its recall on queries the choice did not see;
    rewrites the index atomically."""
    if target_recall is not None:
        check_float(target_recall, "--target-recall", 0, 1, low_open=True)
    from sparsesim.workflows import calibrate_index

    summary = calibrate_index(index, calibration_queries, target_recall=target_recall, model_path=model,
                              data_options=data_file_options(zero_based, None, None, None))
    if json_out:
        emit(summary)
    else:
        echo_line(_calibration_line(summary["calibration"]))


@index_app.command("add")
def index_add(
    index: Path = typer.Option(..., "--index", "-i", help="Index directory built by `sparsesim index build`."),
    data: str = typer.Option(..., "--data", "-d", help="Documents to add: data set name or svmlight path."),
    refit: bool = typer.Option(False, "--refit", help="ann: re-learn the projection and FAISS structure now."),
    zero_based: str = zero_based_option(),
    scheduler: Optional[str] = scheduler_option(),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
):
    """Append documents to a saved index (rewritten atomically); an ann index re-learns its
    projection once the corpus has grown by its refit_growth factor, or now with --refit."""
    data = checks.dataset_name(data)
    from sparsesim.workflows import add_to_index

    bar, _ = progress_bar(None, "adding to the index", show_progress(json_out))
    with bar:
        summary = add_to_index(index, data, refit=refit, data_options=data_file_options(zero_based), scheduler=scheduler)
    if json_out:
        emit(summary)
    else:
        fit = f"; learned from {summary['n_fit_documents']}" if "n_fit_documents" in summary else ""
        echo_line(f"added {summary['added']} documents to {index}: {summary['n_documents']} in all{fit} "
                   f"({summary['seconds']:.1f} s)")


# --- experiment ---------------------------------------------------------------------------------
