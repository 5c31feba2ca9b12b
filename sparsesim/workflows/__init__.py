"""End-to-end library functions behind the CLI: train, evaluate, query, demo.

Each is usable from Python directly and returns plain data (dicts/lists) that the CLI prints.
"""

from __future__ import annotations

import functools
import os
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .data import LabelledData, load_dataset
from .data.catalog import load_registered
from .data.mtl_classification import MultiTaskStreams
from .data.readers import _read_text_file, detect_format, open_maybe_compressed, table_format
from .evaluation import evaluate_retrieval
from .distributed import connect, resolve_scheduler
from .exceptions import InvalidInputError
from .indexes import build_index, load_index
from .indexes.sharded import ShardedIndex, is_sharded, load_sharded
from .indexes.storage import check_index_target
from .models import BilinearSimilarity
from .persistence import check_output_file, file_state, replacing_unchanged, target_lock
from .registry import get_algorithm, make_estimator
from .topk import top_k_rows
from .validation import bounded, check_float, check_int, check_n_triplets
from .triplets import stratified_split
from .tuning import task_mean_ap, tune_multitask, tune_online, tune_similarity


def _looks_like_path(name: str) -> bool:
    return os.sep in name or "/" in name or Path(name).suffix != "" or Path(name).exists()


#: data options recorded in a model so later commands read the same kind of file the same way
_RECORDED_OPTIONS = ("text_column", "label_column", "id_column", "encoding")


def model_data_options(model: BilinearSimilarity | None, options: dict | None = None) -> dict:
    """``load_dataset`` options for data read against ``model``: its width, its feature-index base,
    its text featuriser and the table columns it was trained with (explicit ``options`` win;
    a ``zero_based`` that contradicts the model is refused by the reader)."""
    out = {k: v for k, v in (options or {}).items() if v is not None}
    if model is None:
        return out
    meta = model.metadata
    out["n_features"] = model.n_features
    if meta.get("zero_based") is not None:
        out["expect_zero_based"] = bool(meta["zero_based"])
    if model.featurizer is not None:
        out["featurizer"] = model.featurizer
    for key, value in (meta.get("data_options") or {}).items():
        if key in _RECORDED_OPTIONS:
            out.setdefault(key, value)
    return out


def _load_labelled(name_or_path, **options) -> LabelledData:
    """:func:`~sparsesim.data.load_dataset`, refusing data sets that are not one labelled matrix
    (multi-view and multi-task sets are for ``sparsesim experiment``)."""
    data = load_dataset(name_or_path, **options)
    if not isinstance(data, LabelledData):
        raise InvalidInputError(f"data set {bounded(repr(str(name_or_path)), 80)} is a {type(data).__name__} "
                                "(several views or tasks), not one labelled matrix; train, evaluate, query and "
                                "index take single-matrix data sets (run it with `sparsesim experiment`)")
    return data


def load_corpus(name_or_path: str, n_features: int | None = None, model: BilinearSimilarity | None = None,
                options: dict | None = None) -> LabelledData:
    """A registered data set, or a file/folder read the way ``model`` expects (see :func:`model_data_options`)."""
    opts = model_data_options(model, options)
    if n_features is not None:
        opts.setdefault("n_features", n_features)
    if not _looks_like_path(str(name_or_path)):
        opts = {}
    return _load_labelled(name_or_path, **opts)


def _record_data(model: BilinearSimilarity, data: LabelledData, options: dict) -> None:
    """Put what later commands need to read data like ``data`` into the model."""
    if data.info.get("zero_based") is not None:
        model.metadata["zero_based"] = bool(data.info["zero_based"])
    if data.featurizer is not None:
        model.set_featurizer(data.featurizer)
    recorded = {k: options[k] for k in _RECORDED_OPTIONS if options.get(k) is not None}
    if recorded:
        model.metadata["data_options"] = recorded
    if data.class_names:
        model.metadata["class_names"] = {str(k): str(v) for k, v in data.class_names.items()}


def train_model(algorithm: str, dataset: str, out: str | os.PathLike, n_triplets: int = 100_000,
                seed: int = 0, params: dict | None = None, train_fraction: float = 0.7,
                progress=None, data_options: dict | None = None) -> dict:
    """Train ``algorithm`` on the per-class ``train_fraction`` split of ``dataset``; save to ``out``.

    ``data_options`` go to :func:`~sparsesim.data.load_dataset` (e.g. ``zero_based``,
    ``text_column``). The model records the feature-index base of an svmlight file, the text
    featuriser of a text corpus and the table columns, so later commands read data the same way.

    Returns
    -------
    dict
        Summary: algorithm, dataset, n_train, n_triplets, n_updates, train_seconds,
        updates_per_second, nnz, sparsity, model path.
    """
    spec = get_algorithm(algorithm)
    if spec.kind not in ("similarity", "baseline"):
        raise InvalidInputError(f"`train` learns single-task similarities; {algorithm!r} is a {spec.kind} "
                                "algorithm (use `sparsesim experiment`)")
    n_triplets = check_n_triplets(n_triplets, "--triplets")
    seed = check_int(seed, "--seed", 0, 2**32 - 1)
    train_fraction = check_float(train_fraction, "--train-fraction", 0, 1, low_open=True, high_open=True)
    out = check_output_file(out, inputs=[dataset] if _looks_like_path(str(dataset)) else [], what="model")
    out_state = file_state(out)
    data_options = {k: v for k, v in (data_options or {}).items() if v is not None}
    data = _load_labelled(dataset, **data_options) if _looks_like_path(str(dataset)) else _load_labelled(dataset)
    train, test = stratified_split(data.y, train_fraction, seed=seed)
    kwargs = dict(params or {})
    if spec.kind == "similarity":
        kwargs.setdefault("n_triplets", n_triplets)
        kwargs.setdefault("random_state", seed)
    est = spec.make(**kwargs)
    est.fit(data.X[train], data.y[train], progress=progress)
    model = est.model_
    model.metadata.update(dataset=str(dataset), split_seed=int(seed), train_fraction=float(train_fraction),
                          n_train=int(train.size))
    _record_data(model, data, data_options)
    with replacing_unchanged(out, out_state):
        model.save(out)
    return _fit_summary(algorithm, dataset, out, train, est, model)


def _fit_summary(algorithm, dataset, out, train, est, model) -> dict:
    seen = int(getattr(est, "n_triplets_seen_", 0))
    seconds = float(getattr(est, "train_seconds_", 0.0))
    return {
        "algorithm": algorithm, "dataset": str(dataset), "model": str(out), "n_train": int(train.size),
        "n_triplets": seen, "n_updates": int(getattr(est, "n_updates_", 0)), "train_seconds": seconds,
        "updates_per_second": seen / seconds if seen and seconds > 0 else None,
        "nnz": model.nnz(), "sparsity": model.sparsity(),
        "resolved_params": dict(getattr(est, "resolved_params_", {})),
    }


def tune_model(algorithm: str, dataset: str, out: str | os.PathLike, n_triplets: int = 100_000, seed: int = 0,
               grid: dict | None = None, params: dict | None = None, n_jobs: int = 1, train_fraction: float = 0.7,
               validation_fraction: float = 0.2, scheduler: str | None = None, progress=None,
               data_options: dict | None = None) -> dict:
    """Choose ``algorithm``'s parameters on the training split of ``dataset`` and save the final model.

    The per-class ``train_fraction`` split is the one ``train`` and ``evaluate`` use (same seed),
    so ``evaluate`` scores the saved model on a test split the search never saw. The search is
    :func:`sparsesim.tuning.tune_similarity` (successive halving; survivors continue training);
    the final model is trained on the whole training split with the chosen parameters.

    Returns
    -------
    dict
        ``train``'s summary plus ``best_params``, ``best_validation_map`` and ``tuning`` (every
        trial, the rungs, timings).
    """
    spec = get_algorithm(algorithm)
    if spec.kind not in ("similarity", "baseline", "multitask-similarity", "multitask-classifier"):
        raise InvalidInputError(f"tune_model has no search for {spec.kind} algorithms such as {algorithm!r}; the oht "
                                "protocol searches them (sparsesim.experiments.oht.tune_transfer, `sparsesim tune`)")
    if n_triplets <= 0:
        raise InvalidInputError(f"--triplets must be positive, got {n_triplets}")
    out = check_output_file(out, inputs=[dataset] if _looks_like_path(str(dataset)) else [], what="model")
    out_state = file_state(out)
    if spec.kind in ("multitask-similarity", "multitask-classifier"):
        tuner = _tune_multitask_model if spec.kind == "multitask-similarity" else _tune_online_model
        summary, model = tuner(algorithm, dataset, int(n_triplets), seed, grid, params, n_jobs, train_fraction,
                               validation_fraction, scheduler, progress)
        with replacing_unchanged(out, out_state):
            model.save(out)
        return dict(summary, model=str(out))
    data_options = {k: v for k, v in (data_options or {}).items() if v is not None}
    data = _load_labelled(dataset, **data_options) if _looks_like_path(str(dataset)) else _load_labelled(dataset)
    train, _ = stratified_split(data.y, train_fraction, seed=seed)
    result = tune_similarity(algorithm, data.X[train], data.y[train], int(n_triplets), grid=grid, params=params,
                             seed=seed, n_jobs=n_jobs, validation_fraction=validation_fraction,
                             scheduler=scheduler, progress=progress)
    est = result.estimator
    model = est.model_
    model.metadata.update(dataset=str(dataset), split_seed=int(seed), train_fraction=float(train_fraction),
                          n_train=int(train.size),
                          tuning={"best_params": result.best_params, "best_validation_map": result.best_score,
                                  "n_trials": len(result.trials), "rungs": result.rungs})
    _record_data(model, data, data_options)
    with replacing_unchanged(out, out_state):
        model.save(out)
    summary = _fit_summary(algorithm, dataset, out, train, est, model)
    summary.update(best_params=result.best_params, best_validation_map=result.best_score,
                   tuning=result.to_dict())
    return summary


def _tune_multitask_model(algorithm, dataset, n_triplets, seed, grid, params, n_jobs, train_fraction,
                          validation_fraction, scheduler, progress):
    """``tune`` for the OMTRSL family: split per (task, class), search on the training part (validation
    AP@10, mean over tasks), final model on the training part, AP@10 of the test part reported."""
    data = load_dataset(dataset)
    if data.tasks is None:
        raise InvalidInputError(f"{algorithm!r} learns one similarity per task; data set {dataset!r} has no task "
                                "column (e.g. isolet-tasks, news20-tasks)")
    tasks = np.asarray(data.tasks)
    _, strata = np.unique(np.stack([tasks.astype(str), np.asarray(data.y).astype(str)], axis=1), axis=0,
                          return_inverse=True)
    train, test = stratified_split(strata.reshape(-1), train_fraction, seed=seed)
    result = tune_multitask(algorithm, data.X[train], data.y[train], tasks[train], n_triplets, grid=grid,
                            params=params, seed=seed, n_jobs=n_jobs, validation_fraction=validation_fraction,
                            scheduler=scheduler, progress=progress)
    est = result.estimator
    model = est.model_
    test_ap = task_mean_ap(model, data.X[test], np.asarray(data.y)[test], tasks[test], np.unique(tasks))
    model.metadata.update(dataset=str(dataset), split_seed=int(seed), train_fraction=float(train_fraction),
                          n_train=int(train.size), tuning={"best_params": result.best_params, "metric": "ap@10",
                                                           "best_validation": result.best_score,
                                                           "n_trials": len(result.trials), "rungs": result.rungs})
    summary = {"algorithm": algorithm, "dataset": str(dataset), "n_train": int(train.size),
               "n_triplets": int(est.n_triplets_seen_), "n_updates": int(est.n_updates_),
               "train_seconds": float(est.train_seconds_), "resolved_params": dict(est.resolved_params_),
               "metric": "ap@10", "best_params": result.best_params, "best_validation": result.best_score,
               "test_ap@10": test_ap, "n_test": int(test.size), "tuning": result.to_dict()}
    return summary, model


def _tune_online_model(algorithm, dataset, n_triplets, seed, grid, params, n_jobs, train_fraction,
                       validation_fraction, scheduler, progress):
    """``tune`` for the online multi-task classifiers: the search and the final pass run on the task
    streams shuffled with ``seed`` (the ROMCO protocol keeps its search shuffle, 12345, apart from
    the reported ones); scored by the online error rate, mean over tasks."""
    streams = load_registered(dataset)
    if not isinstance(streams, MultiTaskStreams):
        raise InvalidInputError(f"{algorithm!r} learns from per-task streams; {dataset!r} is not a multi-task "
                                "classification data set (e.g. spam-task-a, mhc1, landmine)")
    s = streams.shuffled(seed)
    result = tune_online(algorithm, s.X, s.y, grid=grid, params=params, seed=seed, n_jobs=n_jobs,
                         scheduler=scheduler, progress=progress)
    est = result.estimator
    model = est.model_
    error = float(np.mean(est.error_rates_))
    model.metadata.update(dataset=str(dataset), shuffle_seed=int(seed),
                          tuning={"best_params": result.best_params, "metric": "error_rate",
                                  "best_validation": result.best_score, "n_trials": len(result.trials),
                                  "rungs": result.rungs})
    summary = {"algorithm": algorithm, "dataset": str(dataset), "n_rounds": int(est.n_rounds_),
               "resolved_params": dict(getattr(est, "resolved_params_", None) or {}), "metric": "error_rate",
               "best_params": result.best_params, "best_validation": result.best_score,
               "online_error_rate": error, "tuning": result.to_dict()}
    return summary, model


def evaluate_model(model_path: str | os.PathLike, dataset: str, k: int = 10, split: str = "auto",
                   data_options: dict | None = None, progress=None) -> dict:
    """MAP, AP@k and mAP@k of a saved model: every document of the split queries all others.

    ``split="auto"`` uses the held-out test split when the model was trained on ``dataset``
    (same seed and fraction as in training), else all documents.
    """
    if split not in ("auto", "test", "all"):
        raise InvalidInputError(f"--split must be auto, test or all, got {split!r}")
    model = BilinearSimilarity.load(model_path)
    data = load_corpus(dataset, model=model, options=data_options)
    meta = model.metadata
    trained_here = meta.get("dataset") == str(dataset) and "split_seed" in meta
    if split == "test" and not trained_here:
        raise InvalidInputError(f"the model was not trained on {dataset!r}; its test split is unknown (use --split all)")
    use_test = split == "test" or (split == "auto" and trained_here)
    if use_test:
        _, rows = stratified_split(data.y, float(meta["train_fraction"]), seed=int(meta["split_seed"]))
        data = data.subset(rows)
    if not 1 <= k < data.n_documents:
        raise InvalidInputError(f"k={k} must be between 1 and the number of other documents ({data.n_documents - 1})")
    scores = evaluate_retrieval(model.scorer(data.X), data.y, k=k, progress=progress)
    return {"model": str(model_path), "dataset": str(dataset), "split": "test" if use_test else "all",
            "n_queries": int(scores["n_queries"]), "map": scores["map"], f"ap@{k}": scores[f"ap@{k}"],
            f"map@{k}": scores[f"map@{k}"], "sparsity": model.sparsity(), "nnz": model.nnz(),
            "algorithm": meta.get("algorithm")}


def read_query_texts(path, text_column: str | None = None, id_column: str | None = None) -> tuple[list, list[str]]:
    """Query texts from ``path``: ``.jsonl`` (one object per line), ``.csv`` / ``.tsv`` (a header
    row; read with the standard ``csv`` module) -- text in ``text_column`` (default ``"text"``),
    id in ``id_column`` (default: an ``"id"`` column/key when present, else the text) -- or any
    other text file (one query per non-empty line).

    Returns
    -------
    names : list
        The query ids (the JSONL id, else the text itself).
    texts : list of str
    """
    path = Path(path)
    if not path.is_file():
        raise InvalidInputError(f"{path}: no such file")
    explicit_id = id_column is not None
    text_column, id_column = text_column or "text", id_column or "id"
    fmt = table_format(path)
    if fmt in ("csv", "tsv"):
        import csv
        import io

        reader = csv.DictReader(io.StringIO(_read_text_file(path)), delimiter="\t" if fmt == "tsv" else ",")
        try:
            rows = list(reader)
        except csv.Error as exc:
            raise InvalidInputError(f"{path}: not a valid {fmt.upper()} file ({exc})") from None
        columns = [c for c in (reader.fieldnames or []) if c is not None]
        for name, option, needed in ((text_column, "--text-column", True), (id_column, "--id-column", explicit_id)):
            if needed and name not in columns:
                raise InvalidInputError(f"{path}: no column {bounded(repr(name), 60)} (columns: "
                                        f"{bounded(', '.join(columns), 200)}); name it with {option}")
        names, texts = [], []
        for lineno, row in enumerate(rows, start=2):
            text = row.get(text_column)
            if not isinstance(text, str) or not text.strip():
                raise InvalidInputError(f"{path}:{lineno}: empty text in column {text_column!r}")
            texts.append(text)
            names.append(row[id_column] if id_column in columns and row.get(id_column) not in (None, "") else text)
    elif fmt == "jsonl":
        import json

        names, texts = [], []
        for lineno, line in enumerate(_read_text_file(path).splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidInputError(f"{path}:{lineno}: not a JSON object ({exc})") from None
            if not isinstance(obj, dict) or not isinstance(obj.get(text_column), str):
                raise InvalidInputError(f"{path}:{lineno}: expected an object with a string {text_column!r}")
            texts.append(obj[text_column])
            names.append(obj.get(id_column, obj[text_column]) if id_column else obj[text_column])
    else:
        texts = [ln.strip() for ln in _read_text_file(path).splitlines() if ln.strip()]
        names = list(texts)
    if not texts:
        raise InvalidInputError(f"{path}: no query texts")
    return names, texts


def _text_file_columns(data_options) -> dict:
    """``text_column`` / ``id_column`` of the CLI's data options, for a query text file."""
    opts = data_options or {}
    return {"text_column": opts.get("text_column"), "id_column": opts.get("id_column")}


def _text_queries(model: BilinearSimilarity, texts) -> sp.csr_matrix:
    texts = [t for t in texts]
    if any(not t.strip() for t in texts):
        raise InvalidInputError("a query text is empty")
    Q = model.transform(texts)
    return Q


def _queries_are_text(model: BilinearSimilarity, queries_path) -> bool:
    """A query file holds text when the model has a text featuriser and the file is not a vector format."""
    return model.featurizer is not None and detect_format(queries_path) in ("svmlight", "jsonl", "csv", "tsv") \
        and not _is_svmlight(queries_path)


def _is_svmlight(path) -> bool:
    """Whether the first non-empty line of ``path`` looks like ``label idx:value ...``."""
    if detect_format(path) != "svmlight":
        return False
    try:
        with open_maybe_compressed(path) as handle:
            head = handle.read(4096).decode("utf-8", errors="replace")
    except Exception:  # noqa: BLE001 - unreadable files are reported by the reader
        return True
    for line in head.splitlines():
        tokens = line.split("#", 1)[0].split()
        if not tokens:
            continue
        try:
            [float(v) for v in tokens[0].split(",") if v]
        except ValueError:
            return False
        return all(":" in t for t in tokens[1:])
    return True


def query_corpus(model_path, corpus: str, queries_path=None, query_ids: str | None = None,
                 top_k: int = 10, block_size: int = 1024, texts=None, data_options: dict | None = None) -> list[dict]:
    """Exact top-k corpus documents for each query (a vector or text file, texts, or corpus row ids).

    A corpus document used as a query is left out of its own results.
    """
    k = top_k
    model = BilinearSimilarity.load(model_path)
    data = load_corpus(corpus, model=model, options=data_options)
    if sum(x is not None for x in (queries_path, query_ids, texts)) != 1:
        raise InvalidInputError("give exactly one of --queries FILE, --text TEXT or --query-ids ID,ID,...")
    self_rows = None
    if texts is not None:
        Q, qnames = _text_queries(model, texts), list(texts)
    elif queries_path is not None and _queries_are_text(model, queries_path):
        qnames, qtexts = read_query_texts(queries_path, **_text_file_columns(data_options))
        Q = _text_queries(model, qtexts)
    elif queries_path is not None:
        qdata = load_corpus(str(queries_path), model=model, options=data_options)
        Q, qnames = qdata.X, [qdata.doc_id(i) for i in range(qdata.n_documents)]
    else:
        try:
            parsed = [int(s) for s in str(query_ids).split(",") if s.strip()]
        except ValueError:
            raise InvalidInputError(f"--query-ids expects comma-separated row numbers, got "
                                    f"{bounded(repr(query_ids), 80)}") from None
        if not parsed or min(parsed) < 0 or max(parsed) >= data.n_documents:
            raise InvalidInputError(f"query ids must be row numbers in [0, {data.n_documents})")
        rows = np.array(parsed, dtype=np.int64)
        Q, qnames, self_rows = data.X[rows], [data.doc_id(r) for r in rows], rows
    available = data.n_documents - (1 if self_rows is not None else 0)
    if not 1 <= k <= available:
        raise InvalidInputError(f"--top-k {k} must be between 1 and the corpus size ({available})")
    answers = []
    for lo in range(0, Q.shape[0], block_size):
        scores = model.score_matrix(Q[lo:lo + block_size], data.X)
        if self_rows is not None:
            scores[np.arange(scores.shape[0]), self_rows[lo:lo + block_size]] = -np.inf
        idx, vals = top_k_rows(scores, k)
        for r in range(idx.shape[0]):
            answers.append(_answer(qnames[lo + r], idx[r], vals[r], data))
    return answers


def _answer(query_id, rows, scores, data: LabelledData) -> dict:
    ids = [data.doc_id(int(j)) for j in rows]
    labels = {}
    if data.class_names:
        labels = {doc: data.class_names.get(data.y[int(j)].item(), "") for doc, j in zip(ids, rows)}
    return {"query": query_id, "results": [(doc, float(s)) for doc, s in zip(ids, scores)], "labels": labels}


#: characters of each document's text kept in an index for display (``sparsesim serve``)
SNIPPET_CHARS = 300


def snippets_of(texts) -> np.ndarray:
    """The first :data:`SNIPPET_CHARS` characters of each text, whitespace collapsed."""
    return np.array([" ".join(str(t).split())[:SNIPPET_CHARS] for t in texts], dtype=str)


def _load_part(path: str, model_path: str, data_options: dict | None = None):
    """``(X, ids)`` of one corpus file, read the way the model expects (a worker building its shard)."""
    model = BilinearSimilarity.load(model_path)
    data = load_corpus(path, model=model, options=data_options)
    return data.X, data.ids


def build_index_from_files(model_path, corpus, kind: str = "exact", out=None, params: dict | None = None,
                           data_options: dict | None = None, target_recall=None, calibration_queries=None,
                           shards: int | None = None, scheduler: str | None = None, n_jobs: int = -1) -> dict:
    """Build a retrieval index (see :mod:`sparsesim.indexes`) over ``corpus`` and save it to ``out``.

    A text corpus is featurised with the model's text featuriser; the start of each document's
    text is kept in the index for display.

    ``corpus`` may be a list of files: one shard per file. ``shards`` splits one corpus into
    that many row blocks. Either builds a :class:`~sparsesim.indexes.sharded.ShardedIndex`; with
    a Dask ``scheduler`` (default ``$SPARSESIM_SCHEDULER``) its shards are built on the workers,
    which also write them into ``out`` (a path the workers see).
    """
    parts = [corpus] if isinstance(corpus, (str, os.PathLike)) else [str(c) for c in corpus]
    if not parts:
        raise InvalidInputError("give a corpus to index")
    scheduler = resolve_scheduler(scheduler)
    if shards is not None and (isinstance(shards, bool) or int(shards) < 1):
        raise InvalidInputError(f"--shards must be a positive integer, got {shards!r}")
    if len(parts) > 1 and shards is not None and int(shards) != len(parts):
        raise InvalidInputError(f"{len(parts)} corpus files make {len(parts)} shards; drop --shards or give "
                                f"--shards {len(parts)}")
    if shards is None and len(parts) == 1 and scheduler is None:
        return _build_plain_index(model_path, parts[0], kind, out, params, data_options, target_recall,
                                  calibration_queries, n_jobs=n_jobs)
    if target_recall is not None or calibration_queries is not None:
        raise InvalidInputError("--target-recall and --calibration-queries apply to single-process ann indexes, "
                                "not to sharded ones")
    n_shards = len(parts) if len(parts) > 1 else int(shards or 1)
    return _build_sharded_index(model_path, parts, kind, out, params, n_shards, scheduler, data_options)


def _build_sharded_index(model_path, parts, kind, out, params, n_shards, scheduler, data_options) -> dict:
    check_index_target(out)
    model = BilinearSimilarity.load(model_path)
    with (connect(scheduler) if scheduler else nullcontext()) as client:
        start = time.perf_counter()
        index = ShardedIndex(model, kind=kind, n_shards=n_shards, client=client, model_file=model_path,
                             **(params or {}))
        try:
            if len(parts) == 1:
                data = load_corpus(parts[0], model=model, options=data_options)
                index.fit(data.X, ids=data.ids)
            else:
                loader = functools.partial(_load_part, model_path=str(Path(model_path).absolute()),
                                           data_options=data_options)
                index.fit_files([str(Path(p).absolute()) for p in parts], loader)
            seconds = time.perf_counter() - start
            index.save(out)
            sizes = list(index.shard_sizes_)
            workers = index.shard_workers_
        finally:
            index.release()
    return {"index": str(out), "kind": kind, "n_documents": int(sum(sizes)), "build_seconds": seconds,
            "shards": sizes, "workers": workers, "scheduler": scheduler}


def _build_plain_index(model_path, corpus, kind, out, params, data_options, target_recall,
                       calibration_queries, n_jobs: int = -1) -> dict:
    check_index_target(out)  # refuse an unusable or existing target before the work
    model = BilinearSimilarity.load(model_path)
    data = load_corpus(corpus, model=model, options=data_options)
    ids = None if data.ids is None else data.ids
    params = dict(params or {})
    if target_recall is not None:
        params["target_recall"] = target_recall
    if kind != "ann" and (target_recall is not None or calibration_queries is not None):
        raise InvalidInputError("--target-recall and --calibration-queries apply to --kind ann")
    calib = None if calibration_queries is None else _read_queries(model, calibration_queries, data_options)[1]
    start = time.perf_counter()
    index = build_index(model, data.X, kind=kind, ids=ids, calibration_queries=calib, n_jobs=n_jobs, **params)
    if data.texts is not None:
        index.snippets_ = snippets_of(data.texts)
    seconds = time.perf_counter() - start
    index.save(out)
    out_summary = {"index": str(out), "kind": kind, "n_documents": int(data.n_documents), "build_seconds": seconds}
    if getattr(index, "calibration_", None) is not None:
        out_summary["calibration"] = index.calibration_
    return out_summary


def calibrate_index(index_dir, queries_path=None, target_recall=None, model_path=None,
                    data_options: dict | None = None) -> dict:
    """Re-run the recall calibration of a saved ann index (optionally for a retrained model) and
    rewrite it atomically; the candidate postings are kept (see ``AnnIndex.calibrate``)."""
    from .indexes import load_index

    check_index_target(index_dir, overwrite=True)
    with target_lock(index_dir):  # from the read to the write: a concurrent `index add` is not lost
        index = load_index(index_dir, check_calibration=False)  # the record is replaced below
        if not hasattr(index, "calibrate"):
            raise InvalidInputError(f"{index_dir} is a {index.kind} index; only ann indexes are calibrated")
        model = BilinearSimilarity.load(model_path) if model_path is not None else None
        queries = None if queries_path is None else _read_queries(model or index.model, queries_path, data_options)[1]
        record = index.calibrate(queries, target_recall=target_recall, model=model)
        index.save(index_dir, overwrite=True)
    return {"index": str(index_dir), "calibration": record}


def add_to_index(index_dir, corpus: str, refit: bool = False, data_options: dict | None = None,
                 scheduler: str | None = None) -> dict:
    """Append the documents of ``corpus`` (their ids when the file has them) to a saved index.

    The index directory is rewritten atomically; an ANN index re-learns its projection and FAISS
    structure when ``refit`` is set or its ``refit_growth`` is reached (see ``AnnIndex.add``).
    A sharded index adds them to its smallest shard (on the cluster at ``scheduler`` if given).
    """
    scheduler = resolve_scheduler(scheduler)
    if is_sharded(index_dir):
        return _add_to_sharded(index_dir, corpus, refit, data_options, scheduler)
    if scheduler is not None:
        raise InvalidInputError(f"{index_dir} is a single-process index; a scheduler serves sharded indexes "
                                f"(build one with `index build --shards N`), or drop --scheduler")
    check_index_target(index_dir, overwrite=True)
    # the lock spans read, add and write: concurrent adds are serialised, none is lost
    with target_lock(index_dir):
        index = load_index(index_dir)
        data = load_corpus(corpus, model=index.model, options=data_options)
        start = time.perf_counter()
        before = index.n_documents
        old_snippets = index.snippets_
        index.add(data.X, ids=data.ids)
        if old_snippets is not None:
            new = snippets_of(data.texts) if data.texts is not None else np.array([""] * data.n_documents)
            index.snippets_ = np.concatenate([np.asarray(old_snippets), new])
        if refit and hasattr(index, "refit") and index.n_fit_documents_ < index.n_documents:
            index.refit()
        seconds = time.perf_counter() - start
        index.save(index_dir, overwrite=True)
    out = {"index": str(index_dir), "kind": index.kind, "added": int(index.n_documents - before),
           "n_documents": int(index.n_documents), "seconds": seconds}
    if hasattr(index, "n_fit_documents_"):
        out["n_fit_documents"] = int(index.n_fit_documents_)
    return out


def _add_to_sharded(index_dir, corpus, refit, data_options, scheduler) -> dict:
    if refit:
        raise InvalidInputError("--refit is for a single ann index; a sharded index adds to its smallest shard")
    with target_lock(index_dir), (connect(scheduler) if scheduler else nullcontext()) as client:
        index = load_sharded(index_dir, client=client)
        try:
            data = load_corpus(corpus, model=index.model, options=data_options)
            start = time.perf_counter()
            before = index.n_documents
            index.add(data.X, ids=data.ids)
            seconds = time.perf_counter() - start
            index.save(index_dir, overwrite=True)
            out = {"index": str(index_dir), "kind": index.kind, "added": int(index.n_documents - before),
                   "n_documents": int(index.n_documents), "shards": list(index.shard_sizes_), "seconds": seconds}
        finally:
            index.release()
    return out


def _read_queries(model, queries_path, data_options=None):
    """(names, matrix) of a query file: text (model trained on text) or vectors."""
    if _queries_are_text(model, queries_path):
        qnames, qtexts = read_query_texts(queries_path, **_text_file_columns(data_options))
        return qnames, _text_queries(model, qtexts)
    qdata = load_corpus(str(queries_path), model=model, options=data_options)
    return [qdata.doc_id(r) for r in range(qdata.n_documents)], qdata.X


def query_index(index_dir, queries_path=None, top_k: int = 10, model_path=None, texts=None,
                data_options: dict | None = None, options: dict | None = None,
                scheduler: str | None = None, query_ids: str | None = None) -> list[dict]:
    """Top-k from a saved retrieval index (see :mod:`sparsesim.indexes`) for a query file, texts,
    or stored documents named by their ids (``query_ids``: "ID,ID,..."; each document is left
    out of its own answer).

    A query file is read as text (one query per line; ``.jsonl``: objects with ``"text"`` and an
    optional ``"id"``) when the model was trained on text, else as vectors read the way the
    model's training file was (same feature-index base).

    A sharded index is loaded onto the Dask cluster at ``scheduler`` (default
    ``$SPARSESIM_SCHEDULER``; its workers read their shards from ``index_dir``) and queried
    there, or without a scheduler loaded into this process.
    """
    if sum(x is not None for x in (queries_path, texts, query_ids)) != 1:
        raise InvalidInputError("give exactly one of --queries FILE, --text TEXT or --query-ids ID,ID,...")
    scheduler = resolve_scheduler(scheduler)
    model = BilinearSimilarity.load(model_path) if model_path is not None else None
    if is_sharded(index_dir):
        if query_ids is not None:
            raise InvalidInputError("--query-ids searches a single-process index; give --queries FILE for a "
                                    "sharded one")
        return _query_sharded(index_dir, queries_path, top_k, model, texts, data_options, options, scheduler)
    if scheduler is not None:
        raise InvalidInputError(f"{index_dir} is a single-process index; a scheduler serves sharded indexes "
                                f"(build one with `index build --shards N`), or drop --scheduler")
    # memory-mapped: the large arrays are checked block by block as the queries read them
    index = load_index(index_dir, model=model, mmap=True)
    options = dict(options or {})
    search = index.search_metadata(**options) if hasattr(index, "search_metadata") else {"kind": index.kind}
    if query_ids is not None:
        names = [s.strip() for s in str(query_ids).split(",") if s.strip()]
        rows = index.rows_of(names)
        ids, scores = index.query_similar_rows(rows, top_k, **options)
        labels = index.ids_[rows]
        return [{"query": labels[r].item(), "results": [(i.item() if hasattr(i, "item") else i, float(s))
                                                       for i, s in zip(ids[r], scores[r])], "search": search}
                for r in range(len(names))]
    model = index.reader_model()  # reading queries needs no W
    if texts is not None:
        qnames, Q = list(texts), _text_queries(model, texts)
    else:
        qnames, Q = _read_queries(model, queries_path, data_options)
    ids, scores = index.query(Q, top_k, **options)
    return [{"query": qnames[r], "results": [(i.item() if hasattr(i, "item") else i, float(s))
                                             for i, s in zip(ids[r], scores[r])], "search": search}
            for r in range(len(qnames))]


def _query_sharded(index_dir, queries_path, top_k, model, texts, data_options, options, scheduler) -> list[dict]:
    with (connect(scheduler) if scheduler else nullcontext()) as client:
        index = load_sharded(index_dir, client=client, model=model)
        try:
            model = index.model
            if texts is not None:
                qnames, Q = list(texts), _text_queries(model, texts)
            else:
                qnames, Q = _read_queries(model, queries_path, data_options)
            ids, scores = index.query(Q, top_k, **dict(options or {}))
            search = {"kind": index.kind, "shards": len(index.shard_sizes_),
                      "workers": len(set(index.shard_workers_)) if scheduler else 0}
        finally:
            index.release()
    return [{"query": qnames[r], "results": [(i.item() if hasattr(i, "item") else i, float(s))
                                             for i, s in zip(ids[r], scores[r])], "search": search}
            for r in range(len(qnames))]


def run_demo(n_triplets: int = 3000, seed: int = 0, top_k: int = 5) -> dict:
    """Train OASIS on the embedded 20 Newsgroups sample and compare it with the dot product."""
    n_triplets = check_n_triplets(n_triplets, "--triplets")
    seed = check_int(seed, "--seed", 0, 2**32 - 1)
    data = load_dataset("news20-sample")
    train, test = stratified_split(data.y, 0.7, seed=seed)
    top_k = check_int(top_k, "--top-k", 1, test.size - 1)
    oasis = make_estimator("oasis", n_triplets=n_triplets, random_state=seed).fit(data.X[train], data.y[train])
    models = {"oasis": oasis.model_, "dot": make_estimator("dot").fit(data.X[train]).model_}
    Xt = data.X[test]
    report = {
        "n_documents": data.n_documents, "n_features": data.n_features,
        "n_classes": len(np.unique(data.y)), "n_train": int(train.size), "n_test": int(test.size),
        "n_triplets": int(oasis.n_triplets_seen_), "train_seconds": float(oasis.train_seconds_),
        "scores": {name: {key: float(v) for key, v in evaluate_retrieval(m.scorer(Xt), data.y[test]).items()
                          if key in ("map", "ap@10", "map@10")} for name, m in models.items()},
    }
    q = int(test[0])
    titles = data.info.get("titles")

    def describe(row):
        return {"id": data.doc_id(row), "group": data.class_names[int(data.y[row])],
                "title": str(titles[row]) if titles is not None else ""}

    report["query"] = describe(q)
    report["neighbours"] = {}
    for name, m in models.items():
        scores = m.score_matrix(data.X[[q]], Xt)
        scores[0, 0] = -np.inf  # the query itself (test[0])
        idx, vals = top_k_rows(scores, top_k)
        report["neighbours"][name] = [dict(describe(int(test[j])), score=float(v)) for j, v in zip(idx[0], vals[0])]
    return report
