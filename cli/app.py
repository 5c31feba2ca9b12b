"""The ``sparsesim`` command line: a thin layer that parses, calls one library function, prints.

Every error a user can cause (a :class:`~sparsesim.exceptions.SparsesimError`, a missing file,
bad option values) is printed as one ``error: ...`` line on stderr with exit status 2 — never a
traceback, never a partial output file (writes are atomic in the library).
"""

from __future__ import annotations

import errno
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import List, Optional

import typer

from sparsesim.exceptions import InvalidInputError, SparsesimError
from sparsesim.persistence import dumps_strict
from sparsesim.validation import (bounded, check_float, check_int, check_n_jobs, check_n_triplets,
                                  check_seed_count)

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Online similarity learning on sparse data, served as top-k retrieval.")
datasets_app = typer.Typer(no_args_is_help=True, help="List, describe and fetch registered data sets.")
app.add_typer(datasets_app, name="datasets")
index_app = typer.Typer(no_args_is_help=True, help="Build retrieval indexes from learned models.")
app.add_typer(index_app, name="index")


_LOADING = None  # the "loading" spinner shown on a terminal until a command's own output starts


def _start_loading() -> None:
    """On a terminal, show a spinner on stderr at once, while heavy modules load (first output < 1 s)."""
    global _LOADING
    if _LOADING is not None or not sys.stderr.isatty() or os.environ.get("SPARSESIM_NO_SPINNER"):
        return
    from rich.console import Console
    from rich.live import Live
    from rich.spinner import Spinner

    _LOADING = Live(Spinner("dots", text="sparsesim: loading..."), console=Console(stderr=True), transient=True,
                    redirect_stdout=False, redirect_stderr=False, refresh_per_second=8)
    _LOADING.start()


def _stop_loading() -> None:
    global _LOADING
    if _LOADING is not None:
        live, _LOADING = _LOADING, None
        live.stop()


def _echo(*args, **kwargs) -> None:
    _stop_loading()
    typer.echo(*args, **kwargs)


def _version_callback(value: bool) -> None:
    if value:
        from sparsesim import __version__

        _echo(f"sparsesim {__version__}")
        raise typer.Exit()


_DEBUG = {"on": False}


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True,
                                 help="Print the version and exit."),
    debug: bool = typer.Option(False, "--debug", help="Show the Python traceback of an error "
                               "(same as SPARSESIM_DEBUG=1)."),
) -> None:
    """Online similarity learning on sparse data, served as top-k retrieval."""
    _DEBUG["on"] = debug
    _start_loading()


# --- helpers ----------------------------------------------------------------------------------
def scheduler_option():
    """``--scheduler ADDRESS`` (default ``$SPARSESIM_SCHEDULER``): run on a Dask cluster."""
    return typer.Option(None, "--scheduler", envvar="SPARSESIM_SCHEDULER", show_envvar=True,
                        help="Dask scheduler address (tcp://HOST:PORT) to run on; needs sparsesim[dask]. "
                             "Default: in this process.")


def _emit(obj) -> None:
    """One line of strict JSON (NaN/Infinity written as null) on stdout."""
    _stop_loading()
    sys.stdout.write(dumps_strict(obj) + "\n")


def _parse_value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_params(items: Optional[List[str]]) -> dict:
    """``["C=0.1", "oasis.C=1"]`` -> ``{"*": {"C": 0.1}, "oasis": {"C": 1}}``."""
    out: dict = {}
    for item in items or []:
        if "=" not in item:
            raise InvalidInputError(f"--param expects KEY=VALUE (or ALGORITHM.KEY=VALUE), got {item!r}")
        key, value = item.split("=", 1)
        scope, _, name = key.rpartition(".")
        if not name:
            raise InvalidInputError(f"--param has an empty key in {item!r}")
        out.setdefault(scope or "*", {})[name] = _parse_value(value)
    return out


def parse_seeds(text: str, n_algorithms: int = 1) -> list[int]:
    """``"0,1,2"`` or ``"0-9"`` (inclusive ranges) or a mix -> list of ints in [0, 2^32 - 1].

    The number of runs is checked against the experiment limit before any range is expanded.
    """
    spans: list[tuple[int, int]] = []
    try:
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            lo, sep, hi = part.partition("-")
            if sep and lo.strip():
                spans.append((int(lo), int(hi)))
            else:
                spans.append((int(part), int(part)))
    except ValueError:
        raise InvalidInputError(f"--seeds expects integers or ranges like 0-9, got {bounded(repr(text), 80)}") from None
    if not spans:
        raise InvalidInputError("--seeds needs at least one seed")
    for lo, hi in spans:
        for value in (lo, hi):
            check_int(value, "--seeds (each seed)", 0, 2**32 - 1)
        if hi < lo:
            raise InvalidInputError(f"--seeds range {lo}-{hi} is empty (the end is below the start)")
    check_seed_count(sum(hi - lo + 1 for lo, hi in spans), n_algorithms)
    return [seed for lo, hi in spans for seed in range(lo, hi + 1)]


def _progress(total: int, description: str, enabled: bool):
    """A rich progress bar on stderr; returns (context manager, advance-to callback)."""
    from contextlib import nullcontext

    _stop_loading()
    if not enabled:
        return nullcontext(), None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=Console(stderr=True), transient=True)
    task = progress.add_task(description, total=total)
    return progress, lambda done: progress.update(task, completed=done)


def _total_progress(progress, advance):
    """Adapt ``advance(done)`` to callbacks that report ``(done, total)``."""
    task = progress.task_ids[0]

    def update(done, total=None):
        if total is not None:
            progress.update(task, total=total)
        advance(done)

    return update


def _show_progress(json_out: bool) -> bool:
    return sys.stderr.isatty()


ZERO_BASED_HELP = ("Feature-index base of svmlight files: auto (index 0 present -> zero-based, as scikit-learn "
                   "decides), true, false. Files read against a model default to the model's base.")


def _zero_based_option():
    return typer.Option("auto", "--zero-based", help=ZERO_BASED_HELP)


def _data_options(zero_based: str = "auto", text_column=None, label_column=None, id_column=None) -> dict:
    """``load_dataset`` options from the shared data-format options."""
    from sparsesim.data.readers import parse_zero_based

    base = parse_zero_based(zero_based)
    out = {"text_column": text_column, "label_column": label_column, "id_column": id_column}
    if base != "auto":
        out["zero_based"] = base
    return {k: v for k, v in out.items() if v is not None}


TEXT_COLUMN_HELP = "CSV/JSONL: column holding the document text (default: text)."
LABEL_COLUMN_HELP = "CSV/JSONL: column holding the label (default: label)."
ID_COLUMN_HELP = "CSV/JSONL: column holding the document id (default: the row number)."


# --- datasets ---------------------------------------------------------------------------------
@datasets_app.command("list")
def datasets_list(json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")):
    """List registered data sets, whether their files are present, and where `fetch` gets them
    (upstream: downloaded and checksummed; mirror only: needs `--from DIR`)."""
    from sparsesim.data import list_datasets

    rows = list_datasets()
    if json_out:
        _emit({"datasets": rows})
        return
    for row in rows:
        mark = "present" if row.get("available") else "missing"
        _echo(f"{row['name']:<20}{row['kind']:<26}{mark:<9}{row['fetch']:<13}{row['description']}")


@datasets_app.command("info")
def datasets_info(name: str, json_out: bool = typer.Option(False, "--json")):
    """Describe one data set: files, checksums, representation, source."""
    from sparsesim.data import dataset_info

    info = dataset_info(name)
    if json_out:
        _emit(info)
        return
    for key in ("name", "kind", "description", "representation", "source", "data_home"):
        _echo(f"{key:>15}: {info.get(key)}")
    for f in info.get("files", []):
        _echo(f"{'file':>15}: {f['relpath']} ({'present' if f['present'] else 'missing'}) sha256={f['sha256']}")


@datasets_app.command("fetch")
def datasets_fetch(
    name: str,
    mirror: Optional[Path] = typer.Option(None, "--from", help="Copy from an offline mirror directory (e.g. ../shared/data)."),
    force: bool = typer.Option(False, "--force", help="Replace files that are present but differ."),
):
    """Put a data set's files in the data directory, verifying sha256: downloaded from its public
    upstream where one exists (news20, news20-tasks, pendigits, satimage), otherwise copied from a
    mirror folder given with --from DIR (`sparsesim datasets list` shows which is which)."""
    from sparsesim.data import dataset_info, fetch_dataset

    info = dataset_info(name)
    if mirror is None and info["fetch"] == "mirror only" and not info["available"]:
        raise InvalidInputError(f"data set {name!r} has no public upstream; copy it from a mirror folder with "
                                f"`sparsesim datasets fetch {name} --from DIR` (e.g. the shared data folder)")
    bar, _ = _progress(None, f"fetching {name}", sys.stderr.isatty())
    callback = None
    if bar is not None and hasattr(bar, "add_task"):
        task = bar.task_ids[0]

        def callback(relpath, done, total):
            bar.update(task, description=f"fetching {relpath}", completed=done, total=total)
    with bar:
        paths = fetch_dataset(name, mirror=mirror, force=force, progress=callback)
    for path in paths:
        _echo(str(path))


# --- train / evaluate / query ------------------------------------------------------------------
@app.command()
def train(
    algorithm: str = typer.Option(..., "--algorithm", "-a", help="Registered algorithm name (see `sparsesim algorithms`)."),
    dataset: str = typer.Option(..., "--dataset", "-d", help="Registered data set name or labelled svmlight path."),
    out: Path = typer.Option(..., "--out", "-o", help="Model file to write (.npz)."),
    triplets: int = typer.Option(100_000, "--triplets", "-n", help="Training triplets."),
    seed: int = typer.Option(0, "--seed", help="Seed of the split and the triplet stream."),
    param: Optional[List[str]] = typer.Option(None, "--param", "-p", help="KEY=VALUE constructor parameter (repeatable)."),
    train_fraction: float = typer.Option(0.7, "--train-fraction", help="Per-class share of documents used for training."),
    zero_based: str = _zero_based_option(),
    text_column: Optional[str] = typer.Option(None, "--text-column", help=TEXT_COLUMN_HELP),
    label_column: Optional[str] = typer.Option(None, "--label-column", help=LABEL_COLUMN_HELP),
    id_column: Optional[str] = typer.Option(None, "--id-column", help=ID_COLUMN_HELP),
    json_out: bool = typer.Option(False, "--json"),
):
    """Train a similarity on the training split of a data set and save the model.

    DATASET is a registered name or your own data: an svmlight/LIBSVM file (one- or zero-based,
    compressed or not), a scipy .npz + labels file, a folder of text files with one subfolder per
    label, or a CSV/JSONL file with text and label columns. Text is turned into TF-IDF features
    and the featuriser is saved in the model, so queries can be texts."""
    from sparsesim.workflows import train_model

    params = parse_params(param)
    if set(params) - {"*"}:
        raise InvalidInputError("train takes plain --param KEY=VALUE (no ALGORITHM. prefix)")
    bar, advance = _progress(triplets, f"training {algorithm}", _show_progress(json_out))
    with bar:
        summary = train_model(algorithm, dataset, out, n_triplets=triplets, seed=seed,
                              params=params.get("*", {}), train_fraction=train_fraction, progress=advance,
                              data_options=_data_options(zero_based, text_column, label_column, id_column))
    if json_out:
        _emit(summary)
    else:
        _echo(f"trained {algorithm} on {summary['n_train']} documents of {dataset}: "
                   f"{summary['n_triplets']} triplets ({summary['n_updates']} updated the model) in "
                   f"{summary['train_seconds']:.1f} s ({summary['updates_per_second'] or 0:.0f}/s); "
                   f"nnz(M) = {summary['nnz']}, sparsity {100 * summary['sparsity']:.3f}%; saved {out}")
        if summary.get("resolved_params"):
            typer.echo("parameters: " + ", ".join(f"{k}={v:.4g}" for k, v in summary["resolved_params"].items()))


@app.command()
def tune(
    algorithm: str = typer.Option(..., "--algorithm", "-a", help="Registered similarity, multi-task similarity or multi-task classification learner (see `sparsesim algorithms`)."),
    dataset: str = typer.Option(..., "--dataset", "-d", help="Registered data set name or labelled svmlight path."),
    out: Path = typer.Option(..., "--out", "-o", help="Model file to write (.npz), trained with the chosen parameters."),
    triplets: int = typer.Option(100_000, "--triplets", "-n", help="Triplet budget of one full run (and of the final model); the online classifiers make one pass over their streams instead."),
    grid: Optional[List[str]] = typer.Option(None, "--grid", "-g", help="KEY=V1,V2,... (repeatable); default: the algorithm's grid around its data-adaptive values."),
    param: Optional[List[str]] = typer.Option(None, "--param", "-p", help="KEY=VALUE fixed for every trial (repeatable)."),
    n_jobs: int = typer.Option(1, "--n-jobs", "-j", help="Trials run at once (joblib; with SPARSESIM_SCHEDULER set, a Dask cluster)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the split, the validation part and the triplet streams."),
    train_fraction: float = typer.Option(0.7, "--train-fraction", help="Per-class share of documents used for training (the rest is the test split, never seen)."),
    validation_fraction: float = typer.Option(0.2, "--validation-fraction", help="Share of the training split held out to score trials."),
    scheduler: Optional[str] = scheduler_option(),
    json_out: bool = typer.Option(False, "--json", help="Summary with every trial as one JSON object."),
):
    """Choose parameters by successive halving on a validation part of the training split
    (survivors continue training), then train the final model on the whole training split.

    Scored by each family's paper metric: MAP (similarity learners), AP@10 mean over tasks
    (OMTRSL family, per (task, class) split), the online error rate over the streams shuffled
    with --seed (ROMCO and its baselines), the online mistake rate of the oht protocol on split seed
    --seed + 1 (transfer learners: they have no model file, so --out receives an experiment file with
    the chosen values that `experiment --config` runs on split --seed)."""
    from contextlib import nullcontext

    from sparsesim.tuning import parse_grid
    from sparsesim.workflows import tune_model

    params = parse_params(param)
    if set(params) - {"*"}:
        raise InvalidInputError("tune takes plain --param KEY=VALUE (no ALGORITHM. prefix)")
    from sparsesim.registry import get_algorithm

    if get_algorithm(algorithm).kind == "transfer":
        _tune_transfer(algorithm, dataset, out, parse_grid(grid), params.get("*", {}), seed, n_jobs, json_out)
        return
    bar, advance = nullcontext(), None
    if _show_progress(json_out):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                       console=Console(stderr=True), transient=True)
        task = bar.add_task(f"tuning {algorithm} (trial rungs)", total=None)

        def advance(done, total):
            bar.update(task, completed=done, total=total)
    with bar:
        summary = tune_model(algorithm, dataset, out, n_triplets=triplets, seed=seed, grid=parse_grid(grid),
                             params=params.get("*", {}), n_jobs=n_jobs, train_fraction=train_fraction,
                             validation_fraction=validation_fraction, scheduler=scheduler, progress=advance)
    if json_out:
        _emit(summary)
        return
    tuning = summary["tuning"]
    metric = {"ap@10": "validation AP@10 (mean over tasks)", "error_rate": "online error rate (search shuffle)"}.get(
        summary.get("metric"), "validation MAP")
    best = summary.get("best_validation", summary.get("best_validation_map"))
    unit = "rounds" if summary.get("metric") == "error_rate" else "triplets"
    typer.echo(f"{len(tuning['trials'])} trials, {len(tuning['rungs'])} rungs "
               f"({', '.join(str(r['budget']) for r in tuning['rungs'])} {unit}) in {tuning['search_seconds']:.0f} s; "
               f"best {metric} {100 * best:.2f}% with "
               + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in summary["best_params"].items()))
    if summary.get("metric") == "ap@10":
        typer.echo(f"final model: {summary['n_triplets']} triplets on {summary['n_train']} documents; "
                   f"test AP@10 (mean over tasks) {100 * summary['test_ap@10']:.2f}% on {summary['n_test']} documents; "
                   f"saved {out}")
    elif summary.get("metric") == "error_rate":
        typer.echo(f"final model: one pass of {summary['n_rounds']} rounds, online error rate "
                   f"{100 * summary['online_error_rate']:.2f}%; saved {out}")
    else:
        typer.echo(f"final model: {summary['n_triplets']} triplets on {summary['n_train']} documents in "
                   f"{summary['train_seconds']:.1f} s; nnz(M) = {summary['nnz']}; saved {out}")


def _tune_transfer(algorithm, dataset, out, grid, params, seed, n_jobs, json_out):
    """`tune` for the transfer learners (no model format: the chosen values go to an experiment file)."""
    import json as _json

    from sparsesim.experiments.oht import tune_transfer
    from sparsesim.persistence import atomic_write, check_output_file

    out = check_output_file(out, what="experiment file")
    summary = tune_transfer(algorithm, dataset, seed=seed + 1, grid=grid or None, params=params, n_jobs=n_jobs)
    experiment = {"description": f"{algorithm} on {dataset} with the values `sparsesim tune` chose on split seed "
                                 f"{seed + 1}", "protocol": "oht", "dataset": dataset, "algorithms": [algorithm],
                  "seeds": [seed], "params": {algorithm: summary["best_params"]}, "options": {"n_permutations": 100}}
    atomic_write(out, lambda handle: handle.write(_json.dumps(experiment, indent=1) + "\n"), mode="w")
    summary["experiment_file"] = str(out)
    if json_out:
        _emit(summary)
        return
    typer.echo(f"{len(summary['tuning']['points'])} grid points on split seed {seed + 1}; best online mistake rate "
               f"{100 * summary['best_validation']:.2f}% with "
               + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in summary["best_params"].items()))
    typer.echo(f"saved the chosen values as an experiment file: sparsesim experiment --config {out}")


@app.command()
def evaluate(
    model: Path = typer.Option(..., "--model", "-m"),
    dataset: str = typer.Option(..., "--dataset", "-d"),
    k: int = typer.Option(10, "--k"),
    split: str = typer.Option("auto", "--split", help="test | all | auto (test split when the model was trained on this data set)."),
    zero_based: str = _zero_based_option(),
    text_column: Optional[str] = typer.Option(None, "--text-column", help=TEXT_COLUMN_HELP),
    label_column: Optional[str] = typer.Option(None, "--label-column", help=LABEL_COLUMN_HELP),
    json_out: bool = typer.Option(False, "--json"),
):
    """Retrieval quality of a model: every document queries all others (MAP, AP@k, mAP@k)."""
    from sparsesim.workflows import evaluate_model

    bar, advance = _progress(1, "evaluating", _show_progress(json_out))
    with bar:
        result = evaluate_model(model, dataset, k=k, split=split,
                                data_options=_data_options(zero_based, text_column, label_column),
                                progress=None if advance is None else _total_progress(bar, advance))
    if json_out:
        _emit(result)
    else:
        _echo(f"{result['n_queries']} queries ({result['split']} split of {dataset}): "
                   f"MAP {100 * result['map']:.2f}%  AP@{k} {100 * result[f'ap@{k}']:.2f}%  "
                   f"mAP@{k} {100 * result[f'map@{k}']:.2f}%  sparsity {100 * result['sparsity']:.3f}%")


@app.command()
def query(
    model: Optional[Path] = typer.Option(None, "--model", "-m", help="Model file (exact search over --corpus)."),
    corpus: Optional[str] = typer.Option(None, "--corpus", "-c", help="Data set name or svmlight path to search."),
    index: Optional[Path] = typer.Option(None, "--index", help="Index directory built by `sparsesim index build`."),
    queries: Optional[Path] = typer.Option(None, "--queries", "-q", help="Query file: vectors (svmlight, read like the "
                                           "model's training file; labels ignored) or, for a model trained on text, "
                                           "FILE.txt (one query per line), FILE.jsonl ({\"text\": ..., \"id\": ...} per line) or "
                                           "FILE.csv/.tsv (header row; --text-column, --id-column)."),
    text: Optional[List[str]] = typer.Option(None, "--text", "-t", help="A query text (repeatable; model trained on text)."),
    query_ids: Optional[str] = typer.Option(None, "--query-ids", help="Comma-separated ids of corpus documents to use as queries (row numbers with --corpus; the index's document ids with --index), each left out of its own answer."),
    top_k: int = typer.Option(10, "--top-k", "-k"),
    zero_based: str = _zero_based_option(),
    text_column: Optional[str] = typer.Option(None, "--text-column", help=TEXT_COLUMN_HELP),
    id_column: Optional[str] = typer.Option(None, "--id-column", help=ID_COLUMN_HELP),
    param: Optional[List[str]] = typer.Option(None, "--param", "-p", help="--index: search option KEY=VALUE overriding "
                                              "the calibrated setting (ann: n_postings, sparse_pool, dense_pool, nprobe)."),
    json_out: bool = typer.Option(False, "--json", help="One JSON line per query: {query, results: [{id, score}], "
                                  "search} (search: the index kind, setting used and its calibrated recall)."),
    scheduler: Optional[str] = scheduler_option(),
):
    """Top-k most similar corpus documents for each query document or text."""
    from sparsesim.workflows import query_corpus, query_index

    options = _data_options(zero_based, text_column, None, id_column)
    search_options = parse_params(param).get("*", {})
    if index is not None:
        answers = query_index(index, queries, top_k=top_k, model_path=model, texts=text or None, data_options=options,
                              options=search_options, scheduler=scheduler, query_ids=query_ids)
    else:
        if scheduler:
            raise InvalidInputError("--scheduler serves a sharded index: give --index DIR (built with --shards N)")
        if param:
            raise InvalidInputError("--param applies to --index searches")
        if model is None or corpus is None:
            raise InvalidInputError("give --model and --corpus (exact search) or --index DIR")
        answers = query_corpus(model, corpus, queries_path=queries, query_ids=query_ids, top_k=top_k,
                               texts=text or None, data_options=options)
    for answer in answers:
        if json_out:
            line = {"query": answer["query"], "results": [{"id": i, "score": s} for i, s in answer["results"]]}
            if "search" in answer:
                line["search"] = answer["search"]
            _emit(line)
        else:
            _echo(f"query {answer['query']}:")
            for rank, (doc, score) in enumerate(answer["results"], start=1):
                label = answer.get("labels", {}).get(doc, "")
                _echo(f"  {rank:>3}. {str(doc):<28} {score:9.4f}  {label}")


# --- index ---------------------------------------------------------------------------------------
@index_app.command("build")
def index_build(
    model: Path = typer.Option(..., "--model", "-m", help="Model file."),
    data: List[str] = typer.Option(..., "--data", "-d", help="Corpus: data set name or svmlight path; repeat "
                                   "with several files for one shard per file."),
    kind: str = typer.Option("exact", "--kind", help="exact | ann"),
    out: Path = typer.Option(..., "--out", "-o", help="Index directory to write."),
    param: Optional[List[str]] = typer.Option(None, "--param", "-p", help="Index parameter KEY=VALUE (ann: dim, nlist, nprobe, pool, ...)."),
    zero_based: str = _zero_based_option(),
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
    json_out: bool = typer.Option(False, "--json"),
):
    """Build an exact or approximate (ann) index over a corpus and save it.

    A text corpus (folder, CSV, JSONL) is featurised with the model's saved featuriser; document
    ids are file paths or the id column."""
    from sparsesim.workflows import build_index_from_files

    params = parse_params(param)
    bar, _ = _progress(None, f"building {kind} index", _show_progress(json_out))
    with bar:
        summary = build_index_from_files(model, data[0] if len(data) == 1 else data, kind=kind, out=out,
                                         params=params.get("*", {}),
                                         data_options=_data_options(zero_based, text_column, None, id_column),
                                         target_recall=target_recall, calibration_queries=calibration_queries,
                                         shards=shards, scheduler=scheduler, n_jobs=n_jobs)
    if json_out:
        _emit(summary)
    else:
        where = ""
        if "shards" in summary:
            place = f"on {len(set(summary['workers']))} Dask worker(s)" if summary["scheduler"] else "in-process"
            where = f" as {len(summary['shards'])} shards {summary['shards']} {place}"
        _echo(f"built {kind} index over {summary['n_documents']} documents{where} in "
                   f"{summary['build_seconds']:.1f} s; saved {out}")
        if "calibration" in summary:
            _echo(_calibration_line(summary["calibration"]))


def _calibration_line(cal: dict) -> str:
    setting = ", ".join(f"{k}={v}" for k, v in cal["setting"].items())
    status = "met" if cal["met"] else "NOT met (most accurate setting kept)"
    return (f"calibrated on {cal['n_queries']} queries: recall@{cal['top_k']} {cal['recall']:.3f} "
            f"(lower bound {cal['recall_lower_bound']:.3f}, target {cal['target_recall']} {status}) with {setting}, "
            f"{cal['qps_one_thread']:.0f} queries/s on one thread")


@index_app.command("calibrate")
def index_calibrate(
    index: Path = typer.Option(..., "--index", "-i", help="ann index directory."),
    model: Optional[Path] = typer.Option(None, "--model", "-m", help="A retrained model (same features) to serve "
                                         "from now on; the postings are kept, the pools re-measured."),
    target_recall: Optional[float] = typer.Option(None, "--target-recall", help="Default: the index's target."),
    calibration_queries: Optional[Path] = typer.Option(None, "--calibration-queries", help="Query file "
                                                        "(default: held-out corpus documents)."),
    zero_based: str = _zero_based_option(),
    json_out: bool = typer.Option(False, "--json"),
):
    """Re-measure the fastest search setting of an ann index that meets the target recall
    (without rebuilding its postings); rewrites the index atomically."""
    from sparsesim.workflows import calibrate_index

    summary = calibrate_index(index, calibration_queries, target_recall=target_recall, model_path=model,
                              data_options=_data_options(zero_based, None, None, None))
    if json_out:
        _emit(summary)
    else:
        _echo(_calibration_line(summary["calibration"]))


@index_app.command("add")
def index_add(
    index: Path = typer.Option(..., "--index", "-i", help="Index directory built by `sparsesim index build`."),
    data: str = typer.Option(..., "--data", "-d", help="Documents to add: data set name or svmlight path."),
    refit: bool = typer.Option(False, "--refit", help="ann: re-learn the projection and FAISS structure now."),
    zero_based: str = _zero_based_option(),
    scheduler: Optional[str] = scheduler_option(),
    json_out: bool = typer.Option(False, "--json"),
):
    """Append documents to a saved index (rewritten atomically); an ann index re-learns its
    projection once the corpus has grown by its refit_growth factor, or now with --refit."""
    from sparsesim.workflows import add_to_index

    bar, _ = _progress(None, "adding to the index", _show_progress(json_out))
    with bar:
        summary = add_to_index(index, data, refit=refit, data_options=_data_options(zero_based), scheduler=scheduler)
    if json_out:
        _emit(summary)
    else:
        fit = f"; learned from {summary['n_fit_documents']}" if "n_fit_documents" in summary else ""
        _echo(f"added {summary['added']} documents to {index}: {summary['n_documents']} in all{fit} "
                   f"({summary['seconds']:.1f} s)")


# --- experiment ---------------------------------------------------------------------------------
@app.command()
def experiment(
    dataset: Optional[str] = typer.Option(None, "--dataset", "-d", help="Registered data set name or labelled svmlight path."),
    algorithms: Optional[str] = typer.Option(None, "--algorithms", "-a", help="Comma-separated algorithm names."),
    protocol: Optional[str] = typer.Option(None, "--protocol", help="Paper protocol: sors (default), cikm15, ijcai17, romco, oht."),
    triplets: Optional[int] = typer.Option(None, "--triplets", "-n", help="Triplets (rounds) per run; default: the protocol's."),
    seeds: Optional[str] = typer.Option(None, "--seeds", help="Comma-separated seeds, one repeat each (default 0)."),
    config_file: Optional[str] = typer.Option(None, "--config", "-c", help="Experiment file (TOML/JSON) or the name of a "
                                              "shipped one (sparsesim/experiments/configs); flags given here win."),
    param: Optional[List[str]] = typer.Option(None, "--param", "-p", help="KEY=VALUE or ALGORITHM.KEY=VALUE (repeatable)."),
    option: Optional[List[str]] = typer.Option(None, "--option", help="Protocol option KEY=VALUE (JSON values), e.g. grid={\"lam\":[1e-5,1e-4]}."),
    query_ratio: Optional[float] = typer.Option(None, "--query-ratio", help="Target query ratio (active-learning protocols)."),
    n_jobs: Optional[int] = typer.Option(None, "--n-jobs", "-j", help="Parallel runs (joblib; default 1)."),
    out_dir: Optional[Path] = typer.Option(None, "--out-dir", help="Directory for plots and raw results."),
    learning_curve: Optional[str] = typer.Option(None, "--learning-curve", help="Comma-separated triplet budgets, "
                                                 "e.g. 1000,3000,10000: run at each and write learning_curve.png/.json "
                                                 "(MAP vs triplets) to --out-dir."),
    scheduler: Optional[str] = scheduler_option(),
    tune: bool = typer.Option(False, "--tune", help="Choose parameters on training data only: sors protocol: "
                              "`sparsesim tune`'s search per learner and seed (--option grid=... sets its grid); "
                              "cikm15: 5-fold CV over a grid around the auto values (--option search=grid: the paper's "
                              "10^-5..10^5); ijcai17: the paper's Figure 3 search."),
    json_out: bool = typer.Option(False, "--json"),
):
    """Run a paper protocol: split, triplets, train each algorithm, evaluate, repeat over seeds.

    The settings can come from an experiment file (``--config``); flags given on the command line win.
    """
    from sparsesim.experiments import ExperimentConfig, get_protocol, load_experiment_file
    from sparsesim.registry import get_algorithm

    spec = load_experiment_file(config_file) if config_file is not None else {}
    dataset = dataset if dataset is not None else spec.get("dataset")
    if dataset is None:
        raise InvalidInputError("give --dataset (or an experiment file with `dataset`)")
    if algorithms is not None:
        names = [a.strip() for a in algorithms.split(",") if a.strip()]
    else:
        names = [str(a) for a in spec.get("algorithms", [])]
    if not names:
        raise InvalidInputError("--algorithms needs at least one name")
    for name in names:
        get_algorithm(name)
    protocol = protocol or spec.get("protocol", "sors")
    if seeds is not None:
        seed_list = parse_seeds(seeds, len(names))
    else:
        seed_list = [check_int(s, "seeds (experiment file)", 0, 2**32 - 1) for s in spec.get("seeds", [0])]
        check_seed_count(len(seed_list), len(names))
    triplets = triplets if triplets is not None else spec.get("triplets")
    if triplets is not None:
        check_n_triplets(triplets, "--triplets")
    n_jobs = check_n_jobs(n_jobs if n_jobs is not None else spec.get("n_jobs", 1), "--n-jobs")
    out_dir = out_dir if out_dir is not None else (Path(spec["out_dir"]) if spec.get("out_dir") else None)
    if query_ratio is not None:
        check_float(query_ratio, "--query-ratio", 0, 1, low_open=True)
    if out_dir is not None and (out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir())):
        raise InvalidInputError(f"--out-dir {out_dir} exists and is not a directory; give a directory path")
    scoped = set(parse_params(param)) - {"*"}
    if scoped - set(names):
        raise InvalidInputError(f"--param names algorithm(s) {', '.join(sorted(scoped - set(names)))} that are not "
                                f"in --algorithms ({', '.join(names)})")
    options = dict(spec.get("options", {}))
    options.update(parse_params(option).get("*", {}))
    if query_ratio is not None:
        options["query_ratio"] = query_ratio
    params = {alg: dict(p) for alg, p in spec.get("params", {}).items()}
    for alg, p in parse_params(param).items():
        params.setdefault(alg, {}).update(p)
    if tune:
        if protocol == "sors":
            options["tune"] = True
        elif protocol == "cikm15":  # the paper's 5-fold CV on a disjoint tuning subset, bounded grid
            options.setdefault("search", "auto")
            options.setdefault("search_folds", 5)
        elif protocol == "ijcai17":  # the paper's Figure 3 grid (b x C), best validation AP@10
            options.setdefault("search", True)
        else:
            raise InvalidInputError(f"--tune is available for the sors protocol (successive halving), cikm15 "
                                    f"(5-fold CV search) and ijcai17 (the Figure 3 search); the {protocol} "
                                    f"protocol sets its search through --option")
    module = get_protocol(protocol)
    config = ExperimentConfig(dataset=dataset, algorithms=names, seeds=seed_list, triplets=triplets,
                              params=params, n_jobs=n_jobs, out_dir=out_dir, options=options,
                              progress=_show_progress(json_out))
    total = len(names) * len(seed_list)
    bar, advance = _progress(total, f"{protocol} on {dataset}", config.progress and protocol == "sors")
    if advance is not None:
        config.options["progress_callback"] = advance
    from contextlib import nullcontext

    from sparsesim.parallel import report_progress

    runs_bar = nullcontext()
    if advance is None and config.progress:
        # protocols that run many trainings (cikm15, ijcai17, romco, oht): one bar over all their runs
        bar, _ = _progress(0, f"{protocol} on {dataset}: runs", True)
        task = bar.task_ids[0]
        runs_bar = report_progress(lambda new, done: bar.update(task, total=(bar.tasks[0].total or 0) + new,
                                                                 advance=done))
    from sparsesim.distributed import dask_jobs, resolve_scheduler

    address = resolve_scheduler(scheduler)
    cluster = nullcontext()
    if address is not None and protocol == "sors":
        config.scheduler = address  # the protocol scatters its data set to the workers once itself
    elif address is not None:
        cluster = dask_jobs(address, n_jobs=n_jobs)  # runs as Dask tasks through joblib's dask backend
    if learning_curve is not None:
        from sparsesim.experiments.learning_curve import learning_curve as run_curve, write_learning_curve

        if out_dir is None:
            raise InvalidInputError("--learning-curve writes its plot to --out-dir DIR; give one")
        try:
            budgets = [int(b) for b in learning_curve.split(",") if b.strip()]
        except ValueError:
            raise InvalidInputError(f"--learning-curve expects comma-separated integers, got {learning_curve!r}") from None
        if advance is not None:
            bar.update(bar.task_ids[0], total=total * len(set(budgets)))
            done_before = [0]

            def advance_all(done, _adv=advance):
                _adv(done_before[0] + done)
            config.options["progress_callback"] = advance_all
        with cluster as session, bar, runs_bar:
            if session is not None:
                config.n_jobs = session.n_jobs
            curve = run_curve(module, config, budgets) if advance is None else _curve_with_offsets(
                run_curve, module, config, budgets, done_before, total)
        files = write_learning_curve(curve, out_dir)
        if json_out:
            _emit({"learning_curve": {k: curve[k] for k in ("dataset", "budgets", "curves")}, "files": files})
        else:
            for name, c in curve["curves"].items():
                pts = ", ".join(f"{b}: {100 * m:.2f}" for b, m in zip(curve["budgets"], c["map"]))
                _echo(f"{name:<16} MAP % by triplets  {pts}")
            _echo(f"wrote {files['png']} and {files['json']}")
        return
    with cluster as session, bar, runs_bar:
        if session is not None:
            config.n_jobs = session.n_jobs
        report = module.run(config)
    if json_out:
        _emit(report)
    else:
        _echo(module.format_table(report))


@app.command()
def serve(
    index: Path = typer.Option(..., "--index", "-i", help="Index directory built by `sparsesim index build`."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on (0.0.0.0: all; mind who can reach it)."),
    port: int = typer.Option(8000, "--port", help="TCP port."),
    max_top_k: int = typer.Option(100, "--max-top-k", help="Largest top_k a request may ask for."),
    max_queries: int = typer.Option(64, "--max-queries", help="Texts or vectors per request."),
    max_body_bytes: int = typer.Option(1 << 20, "--max-body-bytes", help="Largest request body."),
    max_concurrency: int = typer.Option(2, "--max-concurrency", help="Searches computed at once (others wait)."),
    learn: bool = typer.Option(False, "--learn", help="Learn from POST /feedback (and answer GET /ask) while serving."),
    snapshot: Optional[Path] = typer.Option(None, "--snapshot", help="--learn: model file the learned model is "
                                            "saved to and resumed from (default: INDEX.feedback.npz beside the index)."),
    snapshot_every: int = typer.Option(1000, "--snapshot-every", help="--learn: applied triplets between snapshots."),
    snapshot_seconds: float = typer.Option(60.0, "--snapshot-seconds", help="--learn: seconds between snapshots."),
    scheduler: Optional[str] = scheduler_option(),
):
    """Serve an index over HTTP: POST /query (texts or sparse vectors), GET /info, GET /health,
    and a search page at / comparing the learned similarity with plain cosine.

    A sharded index (``index build --shards N``) is served from the Dask cluster at --scheduler:
    its shards stay on the workers while the server runs."""
    from sparsesim.service import ServiceLimits, serve as run_server

    for name, value in (("--max-top-k", max_top_k), ("--max-queries", max_queries),
                        ("--max-body-bytes", max_body_bytes), ("--max-concurrency", max_concurrency)):
        if value < 1:
            raise InvalidInputError(f"{name} must be at least 1, got {value}")
    if not 0 <= port <= 65535:
        raise InvalidInputError(f"--port must be in 0..65535, got {port}")
    limits = ServiceLimits(max_body_bytes=max_body_bytes, max_queries=max_queries, max_top_k=max_top_k,
                           max_concurrency=max_concurrency)
    learn_options = None
    if learn:
        if snapshot is None:
            snapshot = index.parent / f"{index.name}.feedback.npz"
        learn_options = {"snapshot": snapshot, "snapshot_every": snapshot_every, "snapshot_seconds": snapshot_seconds}
    _echo(f"loading index {index} ...", err=True)  # also ends the start-up spinner before the server runs
    run_server(index, host=host, port=port, limits=limits, learn=learn_options, scheduler=scheduler)


@app.command()
def learn(
    index: Path = typer.Option(..., "--index", "-i", help="Index directory built by `sparsesim index build`."),
    feedback: Path = typer.Option(..., "--feedback", "-f", help="JSONL file: one feedback record per line "
                                  '(triplet {"query", "preferred", "other"} or click log {"query", "clicked", "shown"}).'),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Model file to write (default: "
                                       "INDEX.feedback.npz beside the index; what `serve --learn` resumes from)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from --out when it exists (else from the index's model)."),
    max_click_pairs: int = typer.Option(10, "--max-click-pairs", help="Triplets taken from one click log."),
    json_out: bool = typer.Option(False, "--json"),
):
    """Learn from a batch feedback log with the index's learner (the loop of `serve --learn`,
    without HTTP) and save the updated model. Every line is checked before anything is learned."""
    from sparsesim.feedback import FeedbackLearner
    from sparsesim.persistence import check_output_file

    if out is None:
        out = index.parent / f"{index.name}.feedback.npz"
    check_output_file(out, inputs=(feedback,), what="--out")
    records, lines = [], []
    try:
        with open(feedback, encoding="utf-8") as handle:
            for lineno, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    records.append(json.loads(line))
                    lines.append(lineno)
                except json.JSONDecodeError as exc:
                    raise InvalidInputError(f"{feedback}: line {lineno} is not JSON ({exc.msg})") from None
    except UnicodeDecodeError:
        raise InvalidInputError(f"{feedback}: not UTF-8 text") from None
    if not records:
        raise InvalidInputError(f"{feedback}: no feedback records")
    start = time.perf_counter()
    learner = FeedbackLearner(index, snapshot=out, resume=resume, snapshot_every=1 << 62, snapshot_seconds=1e12,
                              max_click_pairs=max_click_pairs)
    try:
        for record, lineno in zip(records, lines):  # check everything first: a bad line learns nothing
            try:
                learner.parse_feedback([record])
            except InvalidInputError as exc:
                raise InvalidInputError(f"{feedback}: line {lineno}: {str(exc).replace('feedback[0]', 'record')}") \
                    from None
        chunk = 1000
        for lo in range(0, len(records), chunk):
            learner.submit(records[lo:lo + chunk])
            learner.flush()
    except BaseException:
        learner.close(snapshot=False)  # a log with a bad record writes nothing
        raise
    learner.close()
    info = learner.info()
    summary = {"out": str(out), "records": len(records), "triplets": info["applied"] - learner.n_applied_at_start,
               "applied_total": info["applied"], "updates_with_loss": info["updates_with_loss"],
               "resumed_from": info["resumed_from"], "seconds": round(time.perf_counter() - start, 3)}
    if json_out:
        _emit(summary)
    else:
        _echo(f"learned {summary['triplets']} triplets from {len(records)} records "
              f"({summary['updates_with_loss']} changed the model) -> {out}")

def _curve_with_offsets(run_curve, module, config, budgets, done_before, per_budget):
    """Run the curve budget by budget so one progress bar spans all of them."""
    curve = None
    for b in sorted(set(budgets)):
        part = run_curve(module, config, [b])
        done_before[0] += per_budget
        if curve is None:
            curve = part
        else:
            curve["budgets"] += part["budgets"]
            curve["runs"] += part["runs"]
            for name, c in part["curves"].items():
                dst = curve["curves"].setdefault(name, {"map": [], "std": []})
                dst["map"] += c["map"]
                dst["std"] += c["std"]
    return curve


@app.command("algorithms")
def algorithms_cmd(json_out: bool = typer.Option(False, "--json")):
    """List registered algorithms."""
    from sparsesim.registry import ALGORITHMS

    rows = [{"name": s.name, "kind": s.kind, "summary": s.summary} for s in ALGORITHMS.values()]
    if json_out:
        _emit({"algorithms": rows})
        return
    for row in rows:
        _echo(f"{row['name']:<18}{row['kind']:<24}{row['summary']}")


@app.command()
def demo(
    triplets: int = typer.Option(3000, "--triplets", "-n"),
    seed: int = typer.Option(0, "--seed"),
    top_k: int = typer.Option(5, "--top-k", "-k"),
    json_out: bool = typer.Option(False, "--json"),
):
    """The quickstart on the embedded 20 Newsgroups sample: train OASIS, compare with the dot
    product, show the nearest neighbours of a document."""
    from sparsesim.workflows import run_demo

    report = run_demo(n_triplets=triplets, seed=seed, top_k=top_k)
    if json_out:
        _emit(report)
        return
    _echo(f"embedded sample: {report['n_documents']} 20 Newsgroups documents, {report['n_features']} "
               f"TF-IDF features, {report['n_classes']} groups; {report['n_train']} train / {report['n_test']} test")
    _echo(f"OASIS: {report['n_triplets']} triplets in {report['train_seconds']:.1f} s")
    _echo(f"{'similarity':<12}{'MAP %':>8}{'AP@10 %':>10}{'mAP@10 %':>10}")
    for name, row in report["scores"].items():
        _echo(f"{name:<12}{100 * row['map']:>8.2f}{100 * row['ap@10']:>10.2f}{100 * row['map@10']:>10.2f}")
    q = report["query"]
    _echo(f"\ntop-{top_k} neighbours of test document {q['id']} [{q['group']}] \"{q['title']}\":")
    for name in ("oasis", "dot"):
        _echo(f"  {name}:")
        for hit in report["neighbours"][name]:
            mark = "+" if hit["group"] == q["group"] else " "
            _echo(f"   {mark} {hit['score']:7.3f}  [{hit['group']}] {hit['title'][:60]}")


def _debugging() -> bool:
    return _DEBUG["on"] or os.environ.get("SPARSESIM_DEBUG", "") not in ("", "0")


def _one_line(text) -> str:
    """A message as one bounded line (newlines folded, at most ~400 characters)."""
    return bounded(" ".join(str(text).split()))


def _os_error_text(exc: OSError) -> str:
    reason = exc.strerror or str(exc) or type(exc).__name__
    hints = {errno.ENOSPC: " (the disk is full)", errno.EROFS: " (read-only file system)",
             errno.EACCES: " (permission denied)", errno.EPERM: " (operation not permitted)",
             errno.EDQUOT: " (disk quota exceeded)"}
    where = f": {exc.filename}" if exc.filename is not None else ""
    hint = hints.get(exc.errno, "") if reason.lower() not in hints.get(exc.errno, "").lower() else ""
    return f"{reason}{where}{hint}"


def _one_line_warning(message, category, filename, lineno, file=None, line=None):
    """The project's own warnings (e.g. classes left out) as one ``warning: ...`` line on stderr."""
    typer.echo(f"warning: {_one_line(message)}", err=True)


def main() -> None:
    """Console entry point: user errors become one ``error:`` line on stderr and exit status 2.

    Usage errors (unknown command or option, missing option, a value of the wrong type) are shown
    by typer's own display, also with exit status 2. ``--debug`` or ``SPARSESIM_DEBUG=1`` shows the
    traceback instead.
    """
    _DEBUG["on"] = "--debug" in sys.argv[1:]
    warnings.showwarning = _one_line_warning
    try:
        try:
            try:
                app(standalone_mode=True)
            finally:
                _stop_loading()
            sys.stdout.flush()
        except SystemExit as exc:
            # click turns a broken pipe into exit 1 after wrapping stdout; a closed reader is not an error
            if exc.code == 1 and type(sys.stdout).__name__ == "PacifyFlushWrapper":
                raise BrokenPipeError from None
            if exc.code in (0, None):
                sys.stdout.flush()
                return
            raise
    except BrokenPipeError:
        # the reader went away (e.g. `sparsesim query ... | head`): stop quietly, as `cat` would
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(0)
    except KeyboardInterrupt:
        _echo("interrupted", err=True)
        raise SystemExit(130)
    except SparsesimError as exc:
        if _debugging():
            raise
        _echo(f"error: {_one_line(exc)}", err=True)
        raise SystemExit(2)
    except OSError as exc:
        if _debugging():
            raise
        _echo(f"error: {_one_line(_os_error_text(exc))}", err=True)
        raise SystemExit(2)
    except MemoryError:
        if _debugging():
            raise
        _echo("error: out of memory (try fewer triplets or a smaller data set)", err=True)
        raise SystemExit(2)
    except (OverflowError, RecursionError) as exc:
        if _debugging():
            raise
        _echo(f"error: a value in the input is too large or too deeply nested ({_one_line(exc)})", err=True)
        raise SystemExit(2)
    except Exception as exc:
        if _debugging():
            raise
        _echo(f"error: unexpected {type(exc).__name__}: {_one_line(exc)} (run with --debug or "
                   "SPARSESIM_DEBUG=1 for the traceback, and please report it)", err=True)
        raise SystemExit(1)
