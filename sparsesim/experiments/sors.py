"""The SORS protocol (Yao et al., ICDM 2015, Section IV): the one behind ``sparsesim experiment``'s
default.

Per seed: each class is split 70/30 into train and test (:func:`sparsesim.triplets.stratified_split`);
``triplets`` SORS-protocol triplets are drawn from the training documents (anchor uniform, positive
of the same class, negative of another class); every test document then queries all other test
documents, and MAP (full ranking), AP@10 (precision among the top 10), mAP@10 (the IJCAI/CIKM
papers' mAP@k) and mAP@10 hits (``map@10_hits``, cut-off AP over the hits; :mod:`sparsesim.metrics`)
are averaged over queries. The model's sparsity is 1 - nnz(M)/d^2 over all d^2 entries of M.

Options (``ExperimentConfig.options``):

* ``train_fraction`` (default 0.7)
* ``grid``: ``{param: [values]}`` — every algorithm runs at every grid point (e.g. a lambda sweep);
  with ``out_dir`` set, a sparsity-vs-MAP plot (like the paper's Fig. 5) is written. Every point is
  scored on the test split, so a sweep shows sensitivity but selects nothing (the report's
  ``selection`` and the table say so); with ``tune`` the grid is the search's grid instead.
* ``scale``: ``{param: [multipliers]}`` — like ``grid``, but each value multiplies the number the
  learner's ``"auto"`` rule resolves to on the seed's training split (every resolved parameter is
  then passed explicitly; a multiplier of 1 everywhere is the default). This is how the factors
  of the default rule are measured (README, "How the factors were chosen").
* ``k`` (default 10)
* ``ks``: a largest cut-off K: every row also gets ``curves`` (AP@k, mAP@k for k = 1..K: the
  precision-at-k curve of the paper's Fig. 2).
* ``tune``: ``true`` (or a dict of :func:`sparsesim.tuning.tune_similarity` settings): choose
  every learner's parameters per seed by the same successive-halving search as ``sparsesim
  tune`` on a validation part of the training split; ``grid`` then gives its grid. The test split
  is never seen by the choice (``tests/test_tune.py`` poisons it and checks the choice is unchanged).
* ``unseen_classes``: a fraction in (0, 1) turns on the open-set protocol: per seed, that share of
  the classes (:func:`sparsesim.triplets.class_split`) is unseen; learners train on the training
  documents of the other classes only, and the test documents of the unseen classes query each
  other. With ``tune``, the search validates on classes held out from its training part.

Every registered similarity learner runs in this protocol, the SORS paper's Table II baselines too:
``lego`` and ``rdml`` (dense d x d metric, refused above 4,096 features), ``aroma`` (full
covariance, d <= 64) and ``aroma-d``; the shipped experiment files ``sors-usps-baselines`` and
``sors-satimage-baselines`` run them beside OASIS and the SORS learners with ``tune``.

A learner that refuses a seed's training split (its ``check_fit_data``: a dense metric above
``max_features``, the full covariance above d = 64, LMNN's classes no larger than its neighbours)
is asked before anything runs and left out of the run with its reason (the report's ``refused``);
when every learner refuses, the run is that one error.
"""

from __future__ import annotations

import functools
import json
import resource
import time
from pathlib import Path

import numpy as np

from ..data import LabelledData, load_dataset
from ..distributed import dask_jobs
from ..evaluation import evaluate_retrieval
from ..exceptions import InvalidInputError
from ..parallel import run_parallel
from ..registry import get_algorithm
from ..triplets import class_split, stratified_split
from ..model_files import model_nbytes
from ..tuning import tune_similarity
from ..workflows.corpus import representation_options
from . import ExperimentConfig
from .runner import figure, grid_points, protocol_options, write_report
from .runner import summarize as run_summary

DEFAULT_TRIPLETS = 100_000
SWEEP_NOTE = ("none: every grid point is scored on the test split (a sweep, not a selection); the best row's "
              "parameters were chosen on its own test data -- choose with 'tune' (--tune) on the training split")
DEFAULT_OPTIONS = {"train_fraction": 0.7, "grid": {}, "scale": {}, "k": 10, "tune": None, "unseen_classes": None,
                   "progress_callback": None, "ks": None}


@functools.lru_cache(maxsize=2)
def _dataset(name: str, representation: str = "default"):
    # cached per process: a worker running several jobs loads the corpus once
    return load_dataset(name, **representation_options(name, representation))


def _representation(algorithm: str) -> str:
    """How ``algorithm`` reads rows: ``"raw"`` (term counts, e.g. BM25) or ``"default"``."""
    return get_algorithm(algorithm).make().input_representation


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_one(dataset: str, algorithm: str, seed: int, n_triplets: int, params: dict,
            train_fraction: float = 0.7, k: int = 10, tune: dict | None = None,
            scale: dict | None = None, unseen_classes: float | None = None, ks: int | None = None) -> dict:
    """Train ``algorithm`` on one seed's split of ``dataset`` and evaluate it; one result row.

    ``dataset`` is a name (loaded once per process) or the loaded :class:`LabelledData` (what a
    Dask run passes, scattered to the workers once). With ``tune`` (keyword arguments of
    :func:`sparsesim.tuning.tune_similarity`, e.g. a grid), the parameters are chosen first by the
    search on a validation part of the training split (the test split is never seen) and the row
    records the search. With ``scale`` (``{param: multiplier}``) the learner's resolved ``"auto"``
    values, multiplied, are passed explicitly (the row records them under ``scale``). With
    ``unseen_classes`` (a fraction of the classes), the open-set protocol: the seed also splits the
    classes (:func:`sparsesim.triplets.class_split`); the learner sees only the training documents of
    the seen classes, and the test documents of the unseen classes query each other (a search, if
    any, validates on classes held out from its training part).
    """
    data = dataset if isinstance(dataset, LabelledData) else _dataset(dataset, _representation(algorithm))
    train, test, open_set = _split(data.y, seed, train_fraction, unseen_classes)
    spec = get_algorithm(algorithm)
    kwargs = dict(params)
    if spec.kind == "similarity":
        kwargs.setdefault("n_triplets", n_triplets)
    if spec.kind == "similarity" or "random_state" in spec.make().get_params():
        kwargs.setdefault("random_state", seed)
    if open_set and spec.make().get_params().get("validation") == "documents":
        kwargs.setdefault("validation", "classes")  # its own held-out choices: on classes it did not learn
    if scale:
        resolved = spec.make(**kwargs).resolve_params(data.X[train])  # {} without "auto" parameters
        unknown = sorted(set(scale) - set(resolved))
        if unknown:
            raise InvalidInputError(f"option 'scale': {algorithm} resolves no 'auto' value of {', '.join(unknown)} "
                                    f"(it resolves: {', '.join(sorted(resolved)) or 'none'})")
        kwargs.update({key: value * float(scale.get(key, 1.0)) for key, value in resolved.items()})
    start = time.perf_counter()
    search = None
    if tune is not None and spec.kind == "similarity":
        fixed = {key: value for key, value in kwargs.items() if key not in ("n_triplets", "random_state")}
        search = tune_similarity(algorithm, data.X[train], data.y[train], n_triplets, params=fixed, seed=seed,
                                 **({"validation": "classes"} if open_set else {}), **tune)
        est = search.estimator
    else:
        est = spec.make(**kwargs)
        est.fit(data.X[train], data.y[train])
    wall = time.perf_counter() - start
    model = est.model_
    # the counters every similarity learner keeps (learners.base; asserted by the common checks)
    train_seconds, seen, n_updates = float(est.train_seconds_), int(est.n_triplets_seen_), int(est.n_updates_)
    store_mb = est.store_nbytes_ / 2**20
    resolved = dict(est.resolved_params_)
    del est  # free the training store before evaluating (it can be the largest object)
    start = time.perf_counter()
    scores = evaluate_retrieval(model.scorer(data.X[test]), data.y[test], k=k,
                                ks=range(1, int(ks) + 1) if ks else None)
    query_seconds = time.perf_counter() - start
    row = {
        "algorithm": algorithm,
        "seed": int(seed),
        "params": {key: value for key, value in params.items()},
        "map": float(scores["map"]),
        f"ap@{k}": float(scores[f"ap@{k}"]),
        f"map@{k}": float(scores[f"map@{k}"]),
        f"map@{k}_hits": float(scores[f"map@{k}_hits"]),
        "sparsity": model.sparsity(),
        "nnz": model.nnz(),
        "model_bytes": model_nbytes(model),
        "train_seconds": train_seconds,
        "query_seconds": query_seconds,
        "updates_per_second": seen / train_seconds if seen and train_seconds > 0 else None,
        "n_triplets": seen,
        "n_updates": n_updates,
        "model_store_mb": store_mb,
        "peak_rss_mb": _peak_rss_mb(),
        "n_train": int(train.size),
        "n_test": int(test.size),
        "resolved_params": resolved,
    }
    if scale:
        row["scale"] = dict(scale)
    if ks:
        row["curves"] = {key: [float(v) for v in value] for key, value in scores["curves"].items()}
    if open_set is not None:
        row["open_set"] = open_set
    if search is not None:
        row.update(tuned_params=search.best_params, validation_map=search.best_score, wall_seconds=wall,
                   tuning=search.to_dict())
    return row


def _split(y, seed: int, train_fraction: float, unseen_classes: float | None):
    """One seed's ``(train, test, open_set)``: the 70/30 split per class, and with
    ``unseen_classes`` the seen classes' training rows and the unseen classes' test rows."""
    train, test = stratified_split(y, train_fraction, seed=seed)
    open_set = None
    if unseen_classes:
        seen, unseen = class_split(y, unseen_classes, seed=seed)
        train, test = train[np.isin(y[train], seen)], test[np.isin(y[test], unseen)]
        open_set = {"unseen_fraction": float(unseen_classes), "seen_classes": [_label(c) for c in seen],
                    "unseen_classes": [_label(c) for c in unseen]}
    return train, test, open_set


def _refused(config: ExperimentConfig, data: LabelledData, train_fraction: float, unseen) -> dict:
    """``{algorithm: why}`` for the learners that refuse a seed's training split (a dense d x d
    metric above ``max_features``, LMNN's classes smaller than its neighbours, ...), asked through
    ``check_fit_data`` before anything runs; when every learner refuses, the first one's error."""
    counts = {}
    for seed in config.seeds:
        train, _, _ = _split(data.y, seed, train_fraction, unseen)
        counts[seed] = np.unique(data.y[train], return_counts=True)[1]
    errors = {}
    for name in config.algorithms:
        est = get_algorithm(name).make(**config.params_for(name))
        for seed in config.seeds:
            try:
                est.check_fit_data(data.n_features, counts[seed])
            except InvalidInputError as exc:
                errors[name] = exc
                break
    if errors and len(errors) == len(config.algorithms):
        raise next(iter(errors.values()))
    return {name: str(exc) for name, exc in errors.items()}


def _label(value):
    return value.item() if isinstance(value, np.generic) else value


def run(config: ExperimentConfig) -> dict:
    """Run the SORS protocol; returns ``{"protocol", "dataset", "results": [...]}``."""
    for name in config.algorithms:
        spec = get_algorithm(name)
        if spec.kind not in ("similarity", "baseline"):
            raise InvalidInputError(f"algorithm {name!r} ({spec.kind}) does not fit the 'sors' protocol")
    opts = protocol_options("sors", config.options, DEFAULT_OPTIONS)
    data = _dataset(config.dataset)  # fail fast (and clearly) before starting workers
    representations = {name: _representation(name) for name in config.algorithms}
    inputs = {rep: data if rep == "default" else _dataset(config.dataset, rep) for rep in set(representations.values())}
    n_triplets = config.triplets or DEFAULT_TRIPLETS
    train_fraction = float(opts["train_fraction"])
    k = int(opts["k"])
    tune = opts["tune"]
    if tune in (None, False):
        tune = None
    elif tune is True:
        tune = {}
    elif not isinstance(tune, dict):
        raise InvalidInputError("option 'tune' must be true or a dict of search settings (grid, factor, ...)")
    points = [{}] if tune is not None else grid_points(opts["grid"])
    if tune is not None and opts["grid"]:
        tune = dict(tune, grid=opts["grid"])
    scales = grid_points(opts["scale"], "scale")
    unseen = opts["unseen_classes"]
    if unseen in (None, 0, False):
        unseen = None
    else:
        if isinstance(unseen, bool) or not isinstance(unseen, (int, float)):
            raise InvalidInputError(f"option 'unseen_classes' must be a fraction of the classes in (0, 1), got "
                                    f"{unseen!r}")
        class_split(data.y, unseen, seed=0)  # refuses a fraction that leaves fewer than two classes a side
    if tune is not None and scales != [{}]:
        raise InvalidInputError("options 'tune' and 'scale' exclude each other")
    refused = _refused(config, data, train_fraction, unseen)
    jobs = []
    for name in (a for a in config.algorithms if a not in refused):
        kind = get_algorithm(name).kind
        for point in (points if kind == "similarity" else [{}]):
            params = {**config.params_for(name), **point}
            for scale in (scales if kind == "similarity" else [{}]):
                for seed in config.seeds:
                    jobs.append([config.dataset, name, seed, n_triplets, params, train_fraction, k, tune,
                                 scale or None, unseen, opts["ks"]])
    progress = opts["progress_callback"]
    with dask_jobs(config.scheduler, scatter=list(inputs.values()), n_jobs=config.n_jobs) as session:
        if session.distributed:  # the loaded data set travels once, as one scattered object
            for job in jobs:
                job[0] = inputs[representations[job[1]]]
        results = session.call(run_parallel, run_one, jobs, n_jobs=session.n_jobs, progress=progress)
    report = {"protocol": "sors", "dataset": config.dataset, "triplets": n_triplets,
              "train_fraction": train_fraction, "unseen_classes": unseen, "results": results}
    if refused:
        report["refused"] = refused
    if tune is not None:
        report["selection"] = "tune on a validation part of each seed's training split"
    elif len(points) * len(scales) > 1:
        report["selection"] = SWEEP_NOTE
    if config.out_dir is not None:
        out = write_report(report, config.out_dir, "sors_results.json").parent
        if len(points) * len(scales) > 1:
            report["plot"] = str(plot_sparsity_vs_map(results, out / "sors_sparsity_vs_map.png", config.dataset))
    return report


def summarize(results: list[dict], k: int = 10) -> list[dict]:
    """Mean and std over seeds of each (algorithm, params) group, in first-seen order
    (:func:`.runner.summarize`); a metric no run of the group has is ``None``."""
    metrics = ("map", f"ap@{k}", f"map@{k}", f"map@{k}_hits", "sparsity", "nnz", "model_bytes", "train_seconds", "updates_per_second",
               "peak_rss_mb")
    rows = [{**{m: r.get(m) for m in metrics}, "group": (r["algorithm"], json.dumps(r.get("params", {}),
                                                                                      sort_keys=True))}
            for r in results]
    summary = []
    for (algorithm, params), entry in run_summary(rows, metrics, by="group").items():
        row = {"algorithm": algorithm, "params": json.loads(params), "n_seeds": entry["n_runs"]}
        row.update({m: None if np.isnan(entry[m][0]) else entry[m] for m in metrics})
        summary.append(row)
    return summary


def format_table(report: dict) -> str:
    """Human-readable table: mean ± std over seeds (percentages for MAP, AP@10, sparsity)."""
    rows = summarize(report["results"])
    header = f"{'algorithm':<18}{'params':<26}{'MAP %':>14}{'AP@10 %':>14}{'mAP@10 %':>14}{'mAP@10 hits %':>15}" \
             f"{'sparsity %':>12}{'nnz(M)':>14}{'train s':>10}{'upd/s':>9}"
    lines = [f"SORS protocol on {report['dataset']}: {report['triplets']} triplets, "
             f"{int(report['train_fraction'] * 100)}/{100 - int(report['train_fraction'] * 100)} split "
             f"per class, seeds: {rows[0]['n_seeds'] if rows else 0}"
             + (f"; open set: {100 * report['unseen_classes']:g}% of the classes unseen in training, test documents "
                "of those classes query each other" if report.get("unseen_classes") else ""),
             header, "-" * len(header)]

    def pct(pair, digits=2):
        return "-" if pair is None else f"{100 * pair[0]:.{digits}f}±{100 * pair[1]:.{digits}f}"

    if report.get("selection") == SWEEP_NOTE:
        lines.insert(1, f"parameter selection: {SWEEP_NOTE}")
    lines[1:1] = [f"not run: {name}: {why}" for name, why in (report.get("refused") or {}).items()]
    for row in rows:
        params = ",".join(f"{k}={v}" for k, v in row["params"].items() if k not in ("n_triplets", "random_state"))
        ups = "-" if row["updates_per_second"] is None else f"{row['updates_per_second'][0]:.0f}"
        lines.append(
            f"{row['algorithm']:<18}{params[:25]:<26}{pct(row['map']):>14}{pct(row['ap@10']):>14}"
            f"{pct(row['map@10']):>14}{pct(row['map@10_hits']):>15}{_num(row['sparsity'], 100, '.3f'):>12}{_num(row['nnz'], 1, '.0f'):>14}"
            f"{row['train_seconds'][0]:>10.1f}{ups:>9}"
        )
    return "\n".join(lines)


def _num(pair, scale, fmt) -> str:
    return "-" if pair is None else format(scale * pair[0], fmt)


def plot_sparsity_vs_map(results: list[dict], path: Path, dataset: str) -> Path:
    """Sparsity (x) against MAP (y), one line per algorithm over the grid (like SORS Fig. 5)."""
    with figure(path, figsize=(6, 4), dpi=110) as (fig, (ax,)):
        for algorithm in dict.fromkeys(r["algorithm"] for r in results):
            rows = [r for r in summarize(results) if r["algorithm"] == algorithm and r["sparsity"] is not None]
            if not rows:
                continue
            pts = sorted((100 * r["sparsity"][0], 100 * r["map"][0]) for r in rows)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=algorithm)
        ax.set_xlabel("sparsity of M (%)")
        ax.set_ylabel("MAP (%)")
        ax.set_title(f"Sparsity vs MAP on {dataset}")
        ax.grid(alpha=0.3)
        ax.legend()
    return path
