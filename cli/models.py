"""``sparsesim train | tune | evaluate | query``: learn a model, choose its parameters, score it, query it."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from sparsesim.exceptions import InvalidInputError
from sparsesim.validation import resolve_name

from . import checks
from .common import (ID_COLUMN_HELP, LABEL_COLUMN_HELP, TEXT_COLUMN_HELP, data_file_options, echo_line, emit, progress_bar,
                     show_progress, total_progress, zero_based_option, app, parse_params, scheduler_option)


@app.command()
def train(
    algorithm: str = typer.Option(..., "--algorithm", "-a", help="Registered algorithm name (see `sparsesim algorithms`)."),
    dataset: str = typer.Option(..., "--dataset", "-d", help="Registered data set name or labelled svmlight path."),
    out: Path = typer.Option(..., "--out", "-o", help="Model file to write (.npz)."),
    triplets: int = typer.Option(100_000, "--triplets", "-n", help="Training triplets."),
    seed: int = typer.Option(0, "--seed", help="Seed of the split and the triplet stream."),
    param: Optional[List[str]] = typer.Option(None, "--param", "-p", metavar="KEY=VALUE", help="KEY=VALUE constructor parameter (repeatable)."),
    train_fraction: float = typer.Option(0.7, "--train-fraction", help="Per-class share of documents used for training."),
    zero_based: str = zero_based_option(),
    text_column: Optional[str] = typer.Option(None, "--text-column", help=TEXT_COLUMN_HELP),
    label_column: Optional[str] = typer.Option(None, "--label-column", help=LABEL_COLUMN_HELP),
    id_column: Optional[str] = typer.Option(None, "--id-column", help=ID_COLUMN_HELP),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace OUT if it exists (otherwise an existing OUT is refused)."),
    max_model_bytes: Optional[str] = typer.Option(
        None, "--max-model-bytes", metavar="SIZE",
        help="Bound on the saved model (OASIS, SORS, AdaSORS): bytes or a size like 300MB; 'none' for no bound. "
             "Default: W keeps at most 20x the training corpus's stored entries."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
):
    """Train a similarity on the training split of a data set and save the model.

    DATASET is a registered name or your own data: an svmlight/LIBSVM file (one- or zero-based,
    compressed or not), a scipy .npz + labels file, a folder of text files with one subfolder per
    label, or a CSV/JSONL file with text and label columns. Text is turned into TF-IDF features
    and the featuriser is saved in the model, so queries can be texts."""
    params = parse_params(param)
    if set(params) - {"*"}:
        raise InvalidInputError("train takes plain --param KEY=VALUE (no ALGORITHM. prefix)")
    algorithm = checks.algorithm_name(algorithm)
    values = checks.fast_param_values(params.get("*", {}))  # checked once: the estimator takes them as they are
    settings = checks.train_settings(triplets, seed, train_fraction)
    dataset = checks.dataset_name(dataset)
    if max_model_bytes is not None:
        values = values.updated({"max_model_bytes": checks.model_bytes(algorithm, max_model_bytes, values)})
    values = checks.algorithm_params(algorithm, values)
    from sparsesim.workflows import train_model

    bar, advance = progress_bar(triplets, f"training {algorithm}", show_progress(json_out),
                             loading=f"loading {dataset}")
    with bar:
        summary = train_model(algorithm, dataset, out, settings=settings, params=values, progress=advance,
                              data_options=data_file_options(zero_based, text_column, label_column, id_column),
                              overwrite=overwrite)
    if json_out:
        emit(summary)
    else:
        learned = (f"{summary['n_triplets']} triplets ({summary['n_updates']} updated the model) in "
                   f"{summary['train_seconds']:.1f} s ({summary['updates_per_second'] or 0:.0f}/s)"
                   if summary["n_triplets"] else f"fitted in {summary['train_seconds']:.1f} s, no triplets")
        echo_line(f"trained {algorithm} on {summary['n_train']} documents of {dataset}: {learned}; "
              f"{_size_text(summary)}; saved {out}")
        if summary.get("resolved_params"):
            typer.echo("parameters: " + ", ".join(f"{k}={_param_text(v)}" for k, v in summary["resolved_params"].items()))


def _param_text(value) -> str:
    """A resolved parameter as ``train`` prints it (``None``: no bound)."""
    return "none" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)


def _size_text(summary: dict) -> str:
    """A model's size as a summary reports it (bilinear: nnz(M) and sparsity; embedding: width, bytes; BM25)."""
    if "nnz" in summary:
        return f"nnz(M) = {summary['nnz']}, sparsity {100 * summary['sparsity']:.3f}%"
    if "n_components" in summary:
        return f"embedding of {summary['n_components']} dimensions, {summary['model_bytes']:,} bytes"
    return "no stored weights (BM25 weighs the corpus searched)"


@app.command()
def tune(
    algorithm: str = typer.Option(..., "--algorithm", "-a", help="Registered similarity, multi-task similarity or multi-task classification learner (see `sparsesim algorithms`)."),
    dataset: str = typer.Option(..., "--dataset", "-d", help="Registered data set name or labelled svmlight path."),
    out: Path = typer.Option(..., "--out", "-o", help="Model file to write (.npz), trained with the chosen parameters."),
    triplets: int = typer.Option(100_000, "--triplets", "-n", help="Triplet budget of one full run (and of the final model); the online classifiers make one pass over their streams instead."),
    grid: Optional[List[str]] = typer.Option(None, "--grid", "-g", metavar="KEY=V1,V2,...", help="KEY=V1,V2,... (repeatable); default: the algorithm's grid around its data-adaptive values."),
    param: Optional[List[str]] = typer.Option(None, "--param", "-p", metavar="KEY=VALUE", help="KEY=VALUE fixed for every trial (repeatable)."),
    n_jobs: int = typer.Option(1, "--n-jobs", "-j", help="Trials run at once (joblib; with SPARSESIM_SCHEDULER set, a Dask cluster)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the split, the validation part and the triplet streams."),
    train_fraction: float = typer.Option(0.7, "--train-fraction", help="Per-class share of documents used for training (the rest is the test split, never seen)."),
    validation_fraction: float = typer.Option(0.2, "--validation-fraction", help="Share of the training split held out to score trials (of its classes with --validation classes)."),
    validation: str = typer.Option("documents", "--validation", help="documents: hold out part of every class; classes: hold out whole classes (for models that must serve classes unseen in training)."),
    scheduler: Optional[str] = scheduler_option(),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace OUT if it exists (otherwise an existing OUT is refused)."),
    json_out: bool = typer.Option(False, "--json", help="Summary with every trial as one JSON object."),
):
    """Choose parameters by successive halving on a validation part of the training split
    (survivors continue training), then train the final model on the whole training split.

    Scored by each family's paper metric: MAP (similarity learners), AP@10 mean over tasks
    (OMTRSL family, per (task, class) split), the online error rate over the streams shuffled
    with --seed (ROMCO and its baselines), the online mistake rate of the oht protocol on split seed
    --seed + 1 (transfer learners: they have no model file, so --out receives an experiment file with
    the chosen values that `experiment --config` runs on split --seed)."""

    params = parse_params(param)
    if set(params) - {"*"}:
        raise InvalidInputError("tune takes plain --param KEY=VALUE (no ALGORITHM. prefix)")
    algorithm = checks.algorithm_name(algorithm)
    checks.fast_param_values(params.get("*", {}))
    settings = checks.train_settings(triplets, seed, train_fraction)
    checks.jobs(n_jobs)
    checks.fraction(validation_fraction, "--validation-fraction")
    dataset = checks.dataset_name(dataset)
    from sparsesim.registry import get_algorithm
    from sparsesim.tuning import parse_grid

    params["*"] = checks.algorithm_params(algorithm, params.get("*", {}))
    parsed_grid = parse_grid(grid)
    if parsed_grid:
        parsed_grid = get_algorithm(algorithm).resolve_params(parsed_grid)
    if get_algorithm(algorithm).kind == "transfer":
        _tune_transfer(algorithm, dataset, out, parsed_grid, params.get("*", {}), seed, n_jobs, json_out,
                       overwrite)
        return
    from sparsesim.workflows import tune_model

    bar, advance = progress_bar(None, f"tuning {algorithm} (trial rungs)", show_progress(json_out),
                             loading=f"loading {dataset}")
    if advance is not None:
        advance = total_progress(bar, advance)
    with bar:
        summary = tune_model(algorithm, dataset, out, settings=settings, grid=parsed_grid,
                             params=params.get("*", {}), n_jobs=n_jobs, validation_fraction=validation_fraction, scheduler=scheduler, progress=advance,
                             validation=validation, overwrite=overwrite)
    if json_out:
        emit(summary)
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
                   f"{summary['train_seconds']:.1f} s; {_size_text(summary)}; saved {out}")


def _tune_transfer(algorithm, dataset, out, grid, params, seed, n_jobs, json_out, overwrite=False):
    """`tune` for the transfer learners (no model format: the chosen values go to an experiment file)."""
    import json as _json

    from sparsesim.experiments.oht import tune_transfer
    from sparsesim.persistence import atomic_write, check_output_path

    out = check_output_path(out, overwrite=overwrite, what="experiment file")
    summary = tune_transfer(algorithm, dataset, seed=seed + 1, grid=grid or None, params=params, n_jobs=n_jobs)
    experiment = {"description": f"{algorithm} on {dataset} with the values `sparsesim tune` chose on split seed "
                                 f"{seed + 1}", "protocol": "oht", "dataset": dataset, "algorithms": [algorithm],
                  "seeds": [seed], "params": {algorithm: summary["best_params"]}, "options": {"n_permutations": 100}}
    atomic_write(out, lambda handle: handle.write(_json.dumps(experiment, indent=1) + "\n"), mode="w")
    summary["experiment_file"] = str(out)
    if json_out:
        emit(summary)
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
    zero_based: str = zero_based_option(),
    text_column: Optional[str] = typer.Option(None, "--text-column", help=TEXT_COLUMN_HELP),
    label_column: Optional[str] = typer.Option(None, "--label-column", help=LABEL_COLUMN_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
):
    """Retrieval quality of a model: every document queries all others (MAP, AP@k, mAP@k)."""
    checks.positive(k, "--k")
    split = resolve_name(split, ("test", "all", "auto"), "--split value", error=InvalidInputError)
    dataset = checks.dataset_name(dataset)
    from sparsesim.workflows import evaluate_model

    bar, advance = progress_bar(None, "evaluating (queries)", show_progress(json_out),
                             loading=f"loading {model.name} and {dataset}")
    with bar:
        result = evaluate_model(model, dataset, k=k, split=split,
                                data_options=data_file_options(zero_based, text_column, label_column),
                                progress=None if advance is None else total_progress(bar, advance))
    if json_out:
        emit(result)
    else:
        echo_line(f"{result['n_queries']} queries ({result['split']} split of {dataset}): "
                   f"MAP {100 * result['map']:.2f}%  AP@{k} {100 * result[f'ap@{k}']:.2f}%  "
                   f"mAP@{k} {100 * result[f'map@{k}']:.2f}%  {_size_text(result)}")


@app.command()
def query(
    model: Optional[Path] = typer.Option(None, "--model", "-m", help="Model file (exact search over --corpus)."),
    corpus: Optional[str] = typer.Option(None, "--corpus", "-c", help="Data set name or svmlight path to search."),
    index: Optional[Path] = typer.Option(None, "--index", help="Index directory built by `sparsesim index build`."),
    queries: Optional[Path] = typer.Option(None, "--queries", "-q", help="Query file: vectors (svmlight, read like the "
                                           "model's training file; labels ignored) or, for a model trained on text, "
                                           "FILE.txt (one query per line), FILE.jsonl ({\"text\": ..., \"id\": ...} per line) or "
                                           "FILE.csv/.tsv (header row; --text-column, --id-column)."),
    text: Optional[List[str]] = typer.Option(None, "--text", "-t", metavar="TEXT", help="A query text (repeatable; model trained on text)."),
    query_ids: Optional[str] = typer.Option(None, "--query-ids", help="Comma-separated ids of corpus documents to use as queries (row numbers with --corpus; the index's document ids with --index), each left out of its own answer."),
    top_k: int = typer.Option(10, "--top-k", "-k"),
    zero_based: str = zero_based_option(),
    text_column: Optional[str] = typer.Option(None, "--text-column", help=TEXT_COLUMN_HELP),
    id_column: Optional[str] = typer.Option(None, "--id-column", help=ID_COLUMN_HELP),
    param: Optional[List[str]] = typer.Option(None, "--param", "-p", metavar="KEY=VALUE", help="--index: search option KEY=VALUE overriding "
                                              "the calibrated setting (ann: n_postings, sparse_pool, dense_pool, nprobe)."),
    json_out: bool = typer.Option(False, "--json", help="One JSON line per query: {query, results: [{id, score}], "
                                  "search} (search: the index kind, setting used and its calibrated recall)."),
    scheduler: Optional[str] = scheduler_option(),
):
    """Top-k most similar corpus documents for each query document or text."""
    top_k = checks.top_k(top_k)  # checked once: the index compares it with its size only
    if corpus is not None:
        corpus = checks.dataset_name(corpus)
    from sparsesim.workflows import query_corpus, query_index

    options = data_file_options(zero_based, text_column, None, id_column)
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
            labels, titles = answer.get("labels", {}), answer.get("titles", {})
            line = {"query": answer["query"], "results": [_hit(hit, labels, titles) for hit in answer["results"]]}
            if "search" in answer:
                line["search"] = answer["search"]
            emit(line)
        else:
            echo_line(f"query {answer['query']}:")
            labels, titles = answer.get("labels", {}), answer.get("titles", {})
            for rank, hit in enumerate(answer["results"], start=1):
                doc, score = hit["id"], hit["score"]
                extra = "  ".join(x for x in (labels.get(doc, ""), _quoted(titles.get(doc, ""))) if x)
                echo_line(f"  {rank:>3}. {str(doc):<28} {score:9.4f}  {extra}".rstrip())


def _hit(result: dict, labels: dict, titles: dict) -> dict:
    """One result of ``query --json``: id and score, plus label and title when the corpus has them."""
    hit = dict(result)
    doc = hit["id"]
    if doc in labels:
        hit["label"] = labels[doc]
    if doc in titles:
        hit["title"] = titles[doc]
    return hit


def _quoted(title: str, width: int = 60) -> str:
    if not title:
        return ""
    return '"' + (title if len(title) <= width else title[:width - 1] + "\u2026") + '"'


# --- index ---------------------------------------------------------------------------------------
