"""The model workflows: train, tune and evaluate a saved model, and the demo."""

from __future__ import annotations

import os
import time

import numpy as np

from ..data import load_dataset
from ..data.catalog import load_registered
from ..data.mtl_classification import MultiTaskStreams
from ..compact import CompactSimilarity
from ..embedding import EmbeddingSimilarity
from ..evaluation import evaluate_retrieval
from ..exceptions import InvalidInputError
from ..memory import large_output_warning
from ..models import BilinearSimilarity
from ..model_files import load_similarity_model, model_nbytes
from ..persistence import check_output_path, file_state, replacing_unchanged
from ..registry import get_algorithm, make_estimator
from ..topk import top_k_rows
from ..validation import (CheckedParams, TrainSettings, check_int, check_n_triplets, check_train_settings,
                          record_checked)
from ..triplets import stratified_split
from ..tuning import task_mean_ap, tune_multitask, tune_online, tune_similarity
from ..data import data_source
from .corpus import (load_labelled, load_corpus, record_training, training_metadata,
                     representation_options)


def train_model(algorithm: str, dataset: str, out: str | os.PathLike, n_triplets: int = 100_000,
                seed: int = 0, params: dict | None = None, train_fraction: float = 0.7,
                progress=None, data_options: dict | None = None, overwrite: bool = False,
                settings: TrainSettings | None = None) -> dict:
    """Train ``algorithm`` on the per-class ``train_fraction`` split of ``dataset``; save to ``out``.

    ``out`` follows the output-path policy (:func:`~sparsesim.persistence.check_output_path`),
    checked before the data is read: not inside the data set's file or folder, its directory must
    exist, and an existing file is replaced only with ``overwrite=True``.

    ``data_options`` go to :func:`~sparsesim.data.load_dataset` (e.g. ``zero_based``,
    ``text_column``). The model records the feature-index base of an svmlight file, the text
    featuriser of a text corpus and the table columns, so later commands read data the same way.

    ``n_triplets``, ``seed`` and ``train_fraction`` are checked here; a caller that checked them
    already passes ``settings`` (:func:`~sparsesim.validation.check_train_settings`) instead,
    which is used as it is. ``params`` may be
    :class:`~sparsesim.validation.CheckedParams` (:func:`~sparsesim.validation.check_param_values`):
    the values checked there, like the settings, are not checked again by the estimator's ``fit``.

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
    settings = _checked_settings(settings, n_triplets, seed, train_fraction)
    n_triplets, seed, train_fraction = settings.n_triplets, settings.seed, settings.train_fraction
    dataset = data_source(dataset)  # decided once (or by the CLI): a file or folder of yours, or a registered data set
    own_file = dataset.own
    out = check_output_path(out, inputs=[dataset] if own_file else [], overwrite=overwrite, what="model")
    out_state = file_state(out)
    data_options = {k: v for k, v in (data_options or {}).items() if v is not None}
    kwargs = dict(params or {})
    if spec.kind == "similarity":
        kwargs.setdefault("n_triplets", n_triplets)
    if spec.kind == "similarity" or "random_state" in spec.make().get_params():
        kwargs.setdefault("random_state", seed)
    est = spec.make(**kwargs)
    # the values checked already are not checked again by fit (a value another source replaced is)
    record_checked(est, settings.estimator_params())
    if isinstance(params, CheckedParams):
        record_checked(est, params)
    data, representation = _load_for(est, dataset, data_options if own_file else {}, own_file)
    # built once, before anything else (a model file must hold the data's facts: refused here)
    meta = training_metadata(data, data_options, **_split_facts(dataset, seed, train_fraction, representation))
    train, test = stratified_split(data.y, train_fraction, seed=seed)
    meta["n_train"] = int(train.size)
    notes = [note for note in [_model_size_warning(est, data.X[train])] if note]
    est.fit(data.X[train], data.y[train], progress=progress)
    model = est.model_
    record_training(model, data, meta)
    with replacing_unchanged(out, out_state):
        model.save(out)
    summary = _fit_summary(algorithm, dataset, out, train, est, model)
    if notes:
        summary["warnings"] = notes
    return summary


def _checked_settings(settings, n_triplets, seed, train_fraction) -> TrainSettings:
    """The run's triplets, seed and training share: ``settings`` as they are (checked by the
    caller), else the raw values checked once here."""
    if settings is None:
        return check_train_settings(n_triplets, seed, train_fraction)
    if (n_triplets, seed, train_fraction) != (100_000, 0, 0.7):
        raise InvalidInputError("give n_triplets, seed and train_fraction either as values or in settings, not both")
    return settings


def _model_size_warning(est, X) -> str | None:
    """Warn before training when the model ``est`` would save from corpus ``X`` may pass
    :data:`~sparsesim.memory.LARGE_OUTPUT_BYTES` (learners that know their size ahead)."""
    bound = est.model_bytes_bound(X)
    if bound is None:
        return None
    nbytes, bounded = bound
    if bounded:
        return large_output_warning("the model", nbytes, "may take up to",
                                    "a smaller --max-model-bytes (or max_model_bytes) bounds it")
    return large_output_warning("the model", nbytes, "may take up to",
                                "an estimate from the triplet count and the corpus, as max_model_bytes is None (no "
                                "bound); --max-model-bytes SIZE bounds it")


def _split_facts(dataset, seed, train_fraction, representation) -> dict:
    """The training facts a model records beside its data's (see ``training_metadata``; the
    training-split size ``n_train`` is added once the split is drawn)."""
    facts = {"dataset": str(dataset), "split_seed": int(seed), "train_fraction": float(train_fraction)}
    if representation != "default":
        facts["input_representation"] = representation
    return facts


def _load_for(est, dataset, data_options, own: bool | None = None):
    """``dataset`` read the way estimator ``est`` reads rows (its ``input_representation``, e.g. raw term
    counts for BM25); returns the data and the representation. ``own``: the caller's
    :func:`~sparsesim.data.is_data_path` answer (None: decided here)."""
    representation = est.input_representation
    options = representation_options(dataset, representation, data_options, own=own)
    return load_labelled(dataset, own=own, **options), representation


def _fit_summary(algorithm, dataset, out, train, est, model) -> dict:
    """The summary of a fitted similarity learner: its counters and resolved parameters are the
    fitted attributes every one has (``learners.base``)."""
    seen, seconds = int(est.n_triplets_seen_), float(est.train_seconds_)
    return {
        "algorithm": algorithm, "dataset": str(dataset), "model": str(out), "n_train": int(train.size),
        "n_triplets": seen, "n_updates": int(est.n_updates_), "train_seconds": seconds,
        "updates_per_second": seen / seconds if seen and seconds > 0 else None,
        **model_size(model),
        "resolved_params": dict(est.resolved_params_),
    }


def model_size(model) -> dict:
    """What a summary reports of a model's size: bytes of its arrays, and nnz(M) and sparsity for a
    bilinear model, the width of an embedding model."""
    if isinstance(model, BilinearSimilarity):
        return {"nnz": model.nnz(), "sparsity": model.sparsity(), "model_bytes": model_nbytes(model)}
    out = {"model_bytes": model_nbytes(model)}
    if isinstance(model, (EmbeddingSimilarity, CompactSimilarity)):
        out["n_components"] = model.n_components
    return out


def tune_model(algorithm: str, dataset: str, out: str | os.PathLike, n_triplets: int = 100_000, seed: int = 0,
               grid: dict | None = None, params: dict | None = None, n_jobs: int = 1, train_fraction: float = 0.7,
               validation_fraction: float = 0.2, scheduler: str | None = None, progress=None,
               data_options: dict | None = None, validation: str = "documents", overwrite: bool = False,
               settings: TrainSettings | None = None) -> dict:
    """Choose ``algorithm``'s parameters on the training split of ``dataset`` and save the final model.

    ``out`` follows the output-path policy (:func:`~sparsesim.persistence.check_output_path`;
    an existing file is replaced only with ``overwrite=True``), checked before the search.

    The per-class ``train_fraction`` split is the one ``train`` and ``evaluate`` use (same seed),
    so ``evaluate`` scores the saved model on a test split the search never saw. The search is
    :func:`sparsesim.tuning.tune_similarity` (successive halving; survivors continue training);
    the final model is trained on the whole training split with the chosen parameters.
    ``validation="classes"`` scores trials on classes held out whole from the search's training
    part (for models meant for classes unseen in training; similarity learners only).

    ``n_triplets``, ``seed`` and ``train_fraction`` are checked here, or given checked as
    ``settings`` (:func:`~sparsesim.validation.check_train_settings`), used as they are.

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
    settings = _checked_settings(settings, n_triplets, seed, train_fraction)
    n_triplets, seed, train_fraction = settings.n_triplets, settings.seed, settings.train_fraction
    params = dict(params or {})  # the search builds its own estimators: each checks its values
    dataset = data_source(dataset)  # decided once (or by the CLI)
    own_file = dataset.own
    out = check_output_path(out, inputs=[dataset] if own_file else [], overwrite=overwrite, what="model")
    out_state = file_state(out)
    if spec.kind in ("multitask-similarity", "multitask-classifier"):
        if validation != "documents":
            raise InvalidInputError("class-disjoint validation (--validation classes) is for single-task similarity "
                                    f"learners; {algorithm!r} is a {spec.kind} algorithm")
        tuner = _tune_multitask_model if spec.kind == "multitask-similarity" else _tune_online_model
        summary, model = tuner(algorithm, dataset, int(n_triplets), seed, grid, params, n_jobs, train_fraction,
                               validation_fraction, scheduler, progress)
        with replacing_unchanged(out, out_state):
            model.save(out)
        return dict(summary, model=str(out))
    data_options = {k: v for k, v in (data_options or {}).items() if v is not None}
    data, representation = _load_for(spec.make(**(params or {})), dataset, data_options if own_file else {}, own_file)
    meta = training_metadata(data, data_options, **_split_facts(dataset, seed, train_fraction, representation))
    train, _ = stratified_split(data.y, train_fraction, seed=seed)
    meta["n_train"] = int(train.size)
    result = tune_similarity(algorithm, data.X[train], data.y[train], int(n_triplets), grid=grid, params=params,
                             seed=seed, n_jobs=n_jobs, validation_fraction=validation_fraction,
                             scheduler=scheduler, progress=progress, validation=validation)
    est = result.estimator
    model = est.model_
    record_training(model, data, meta)
    model.metadata["tuning"] = {"best_params": result.best_params, "best_validation_map": result.best_score,
                                "n_trials": len(result.trials), "rungs": result.rungs}
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
               "resolved_params": dict(est.resolved_params_ or {}), "metric": "error_rate",
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
    model = load_similarity_model(model_path)
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
            f"map@{k}": scores[f"map@{k}"], f"map@{k}_hits": scores[f"map@{k}_hits"], **model_size(model),
            "algorithm": meta.get("algorithm")}


# what the demo sets beside OASIS: our strongest learner on seen classes (docs/quality.md) and the
# baselines a user tries first -- cosine, LSA and a supervised classifier embedding (BM25 needs raw
# term counts, which the embedded TF-IDF sample does not keep)
DEMO_COMPARED = ("proxy-ssi", "cosine", "lsa", "logreg-scores")


def run_demo(n_triplets: int = 3000, seed: int = 0, top_k: int = 5, progress=None, stage=None) -> dict:
    """Train OASIS on the embedded 20 Newsgroups sample and compare it with ``proxy-ssi`` and the
    baselines a user tries first (cosine, LSA, logistic-regression scores as an embedding), each
    fitted on the same training split and scored on the same test split.

    ``progress`` is called with the triplets learned so far (0 when learning starts); ``stage``,
    when given, with a description as each compared method's fit starts.
    """
    n_triplets = check_n_triplets(n_triplets, "--triplets")
    seed = check_int(seed, "--seed", 0, 2**32 - 1)
    data = load_dataset("news20-sample")
    train, test = stratified_split(data.y, 0.7, seed=seed)
    top_k = check_int(top_k, "--top-k", 1, test.size - 1)
    Xtr, ytr = data.X[train], data.y[train]
    oasis = make_estimator("oasis", n_triplets=n_triplets, random_state=seed).fit(Xtr, ytr, progress=progress)
    models = {"oasis": oasis.model_}
    fit_seconds = {"oasis": float(oasis.train_seconds_)}
    for i, name in enumerate(DEMO_COMPARED, 1):
        if stage is not None:
            stage(f"fitting {name} ({i} of {len(DEMO_COMPARED)})")
        spec = get_algorithm(name)
        params = {"random_state": seed} if "random_state" in spec.param_names() else {}
        t0 = time.perf_counter()
        models[name] = make_estimator(name, **params).fit(Xtr, ytr).model_
        fit_seconds[name] = time.perf_counter() - t0
    Xt = data.X[test]
    scores = {name: {key: float(v) for key, v in evaluate_retrieval(m.scorer(Xt), data.y[test]).items()
                     if key in ("map", "ap@10", "map@10")} for name, m in models.items()}
    for name in scores:
        scores[name]["fit_seconds"] = fit_seconds[name]
        scores[name]["model_bytes"] = model_nbytes(models[name])
    report = {
        "n_documents": data.n_documents, "n_features": data.n_features,
        "n_classes": len(np.unique(data.y)), "n_train": int(train.size), "n_test": int(test.size),
        "n_triplets": int(oasis.n_triplets_seen_), "train_seconds": float(oasis.train_seconds_),
        "scores": scores, "best": max(scores, key=lambda n: (scores[n]["map"], n)),
    }
    q = int(test[0])
    titles = data.info.get("titles")

    def describe(row):
        return {"id": data.doc_id(row), "group": data.class_names[int(data.y[row])],
                "title": str(titles[row]) if titles is not None else ""}

    report["query"] = describe(q)
    report["neighbours"] = {}
    for name in ("oasis", "cosine"):
        scores = models[name].score_matrix(data.X[[q]], Xt)
        scores[0, 0] = -np.inf  # the query itself (test[0])
        idx, vals = top_k_rows(scores, top_k)
        report["neighbours"][name] = [dict(describe(int(test[j])), score=float(v)) for j, v in zip(idx[0], vals[0])]
    return report
