"""The papers' tables and figures as experiment files, run beside the numbers the papers print.

An experiment file with a ``[paper]`` table (``sparsesim experiment --config paper-sors-table2``)
names one table or figure of one of the five papers. It holds, typed once with the table's
citation, the paper's numbers per row, and one or more *runs*: a protocol of
:data:`sparsesim.experiments.PROTOCOLS` on a data set, with the paper's settings (``quick`` gives
the sizes of the test-suite form). :func:`run_item` runs them, turns every protocol's report into
one scoreboard (``{algorithm: {metric: (mean, std)}}``, :func:`scoreboard`) and judges every row
(:mod:`sparsesim.experiments.paper_verdicts`); ``paper-all`` (:func:`run_all`) runs every item
and writes the reproduction report (``reproduction.json`` and ``reproduction.md``).

Keys of ``[paper]``: ``paper`` (a key of :data:`PAPERS`), ``item`` ("Table II"), ``kind``
("table" or "figure"), ``caption``, ``full_size`` (what size of the item has been run and why not the
paper's, shown in the report while the item is not in it), ``metrics`` (list of ``{key, name, scale, higher, judged}``:
our metric key, the paper's name for it, the factor from ours to the paper's units, whether higher
is better, whether a number is judged — times are not), ``tolerance`` (in the paper's units),
``claims`` (the orderings the paper states, ``"a > b"`` or ``"metric: a > b"``), ``mode``
("protocol" or "curve": a learning curve over ``budgets``) and ``runs`` (list of tables: ``column``,
``dataset`` (empty: the paper's set is unavailable and nothing stands in), ``substitution``,
``protocol``, ``algorithms``, ``seeds``, ``triplets``, ``params``, ``options``, ``quick``, ``rows``:
``[{name, algorithm, <metric key> = [mean, std] or "NA"}]``).

A learner a row names that the registry does not know is reported as "not attempted: not
registered" and the other rows still run. Parameters are chosen only on training data: each run
uses the protocol's own search (cross-validation or ``tune`` on the training split) or the paper's
stated constants; a run whose options would score a grid on its test split is refused.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import threading
import time
from pathlib import Path

import numpy as np

from ..exceptions import InvalidInputError, UnknownNameError
from ..job_store import active_store
from ..memory import peak_resident_bytes
from ..registry import ALGORITHMS
from . import CONFIG_DIR, ExperimentConfig, get_protocol, load_experiment_file, shipped_experiments
from .runner import mean_std, write_report
from . import paper_verdicts as verdicts
from .paper_figures import write_figures

PAPERS = {
    "sors": "Yao, Zhao, Yu, Jin, Li: Sparse Online Relative Similarity Learning (ICDM 2015)",
    "cikm15": "Hao, Zhao, Hoi, Miao: Learning Relative Similarity from Data Streams: Active Online Learning "
              "Approaches (CIKM 2015)",
    "ijcai17": "Hao, Zhao, Liu, Hoi, Miao: Online Multitask Relative Similarity Learning (IJCAI 2017)",
    "romco": "Yang, Zhao, Gao: Robust Online Multi-Task Learning with Correlative and Personalized Structures "
             "(ROMCO)",
    "oht": "Online Transfer Learning with Heterogeneous Source (OHT, draft)",
}
PAPER_KEYS = ("paper", "item", "kind", "caption", "metrics", "tolerance", "claims", "runs", "budgets", "note", "figure",
              "full_size")
FIGURES = ("search", "time_vs_ratio", "precision_at_k", "query_time")
RUN_KEYS = ("column", "dataset", "substitution", "protocol", "algorithms", "seeds", "triplets", "params", "options",
            "quick", "rows", "note")
SWEEP_OPTIONS = {"sors": ("grid", "scale")}  # options that score every point on the test split
# constructor values every paper run states (unless its file sets another): the papers' learners keep
# every entry of M, and learn from one pass of uniformly sampled triplets, last iterate
PAPER_SETTINGS = {"max_model_bytes": None, "sampler": "uniform", "n_passes": 1, "averaging": False,
                  "schedule": "constant"}


def is_paper_file(spec: dict) -> bool:
    """Whether an experiment file describes a paper item (``[paper]``) or the whole report (``include``)."""
    return "paper" in spec or "include" in spec


def paper_items() -> list[str]:
    """The shipped paper items (``paper-*`` experiment files other than ``paper-all``), in file order."""
    return [n for n in shipped_experiments() if n.startswith("paper-") and n != "paper-all"]


def check_item(spec: dict, where: str = "experiment file") -> dict:
    """Refuse a malformed ``[paper]`` table before anything runs; returns it.

    Raises
    ------
    InvalidInputError
        Unknown keys, an unknown paper or protocol, a row without a name, or a sweep that would
        choose on test data.
    """
    item = spec.get("paper")
    if not isinstance(item, dict):
        raise InvalidInputError(f"{where}: [paper] must be a table")
    unknown = sorted(set(item) - set(PAPER_KEYS))
    if unknown:
        raise InvalidInputError(f"{where}: unknown [paper] key(s) {unknown}; known: {', '.join(PAPER_KEYS)}")
    if item.get("paper") not in PAPERS:
        raise InvalidInputError(f"{where}: paper must be one of {', '.join(PAPERS)}")
    if item.get("figure") is not None and item["figure"] not in FIGURES:
        raise InvalidInputError(f"{where}: figure must be one of {', '.join(FIGURES)}")
    if not item.get("runs"):
        raise InvalidInputError(f"{where}: [paper] needs at least one run")
    for run in item["runs"]:
        bad = sorted(set(run) - set(RUN_KEYS))
        if bad:
            raise InvalidInputError(f"{where}: unknown run key(s) {bad}; known: {', '.join(RUN_KEYS)}")
        if run.get("dataset"):
            get_protocol(run.get("protocol", "sors"))
        for key in SWEEP_OPTIONS.get(run.get("protocol", "sors"), ()):
            for opts in (_run_settings(run, False).get("options", {}), _run_settings(run, True).get("options", {})):
                if opts.get(key) and not opts.get("tune") and (item.get("kind") == "table" or run.get("rows")):
                    raise InvalidInputError(f"{where}: option {key!r} scores every point on the test split; a "
                                            "row beside the paper's numbers (a table's, or a figure's) must come "
                                            "from a selection on training data ('tune')")
        for row in run.get("rows", []):
            if not row.get("name") or not row.get("algorithm"):
                raise InvalidInputError(f"{where}: every row needs a name (the paper's) and an algorithm (ours)")
    return item


def _run_settings(run: dict, quick: bool) -> dict:
    """The run with its ``quick`` overrides: ``params`` merge per algorithm, every other key (``options``
    too) is replaced."""
    settings = copy.deepcopy({k: v for k, v in run.items() if k not in ("quick", "rows")})
    if quick:
        q = run.get("quick", {})
        for key, value in q.items():
            if key == "params" and isinstance(value, dict):
                merged = settings.setdefault(key, {})
                for k, v in value.items():
                    if key == "params" and isinstance(v, dict):
                        merged.setdefault(k, {}).update(v)
                    else:
                        merged[k] = v
            else:
                settings[key] = value
    return settings


def registered(names) -> tuple[list[str], list[str]]:
    """``names`` split into the ones the registry knows and the ones it does not (both in order)."""
    known = [n for n in names if n in ALGORITHMS]
    return known, [n for n in names if n not in ALGORITHMS]


def scoreboard(protocol: str, report: dict) -> dict:
    """A protocol's report as ``{algorithm: {metric: (mean, std)}}``.

    * ``sors``: mean ± std over the seeds of every numeric key of its result rows (and ``ap_curve``,
      the precision at k = 1..K when the ``ks`` option is set, element-wise);
    * ``cikm15``: its Table 2 entries (at the delta closest to the target query ratio);
    * ``ijcai17``: its summary (mean over tasks, folds and seeds);
    * ``romco``: its summary (over shuffles), per task as ``task<i>.error``, ``task<i>.f1_pos``,
      ``task<i>.f1_neg``;
    * ``oht``: mean mistake rate over tasks and seeds, and ``win`` / ``tie`` / ``loss`` against the
      baseline (counts over tasks).
    """
    board: dict = {}
    if protocol == "sors":
        for row in report["results"]:
            board.setdefault(row["algorithm"], []).append(row)
        return {alg: _mean_rows(rows) for alg, rows in board.items()}
    if protocol == "cikm15":
        return {alg: {k: tuple(v) for k, v in entry.items() if _is_pair(v)} for alg, entry in report["table"].items()}
    if protocol == "ijcai17":
        return {alg: {k: tuple(v) for k, v in entry.items() if _is_pair(v)} for alg, entry in report["summary"].items()}
    if protocol == "romco":
        for entry in report["summary"]:
            scores = {k[:-5]: (entry[k], entry.get(k[:-5] + "_std", float("nan")))
                      for k in entry if k.endswith("_mean")}
            for i, task in enumerate(entry["per_task"]):
                for key in ("error", "f1_pos", "f1_neg"):
                    scores[f"task{i}.{key}"] = (task[f"{key}_mean"], task[f"{key}_std"])
            board[entry["algorithm"]] = scores
        return board
    if protocol == "oht":
        for row in report["results"]:
            board.setdefault(row["algorithm"], []).append(row)
        out = {alg: _mean_rows(rows) for alg, rows in board.items()}
        for alg, counts in report.get("win_tie_loss", {}).items():
            out[alg].update({k: (float(v), 0.0) for k, v in counts.items()})
        return out
    raise UnknownNameError(f"no scoreboard for protocol {protocol!r}")


def _is_pair(value) -> bool:
    return isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(x, (int, float)) for x in value)


def _mean_rows(rows: list) -> dict:
    out = {}
    for key, value in rows[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = mean_std(r.get(key) if r.get(key) is not None else np.nan for r in rows)
    curves = [r["curves"]["ap"] for r in rows if isinstance(r.get("curves"), dict)]
    if curves:
        out["ap_curve"] = [float(v) for v in np.mean(curves, axis=0)]
    return out


def paper_params(algorithms, params: dict) -> dict:
    """``params`` with the papers' settings written out for every learner that has them, so a change
    of the library's defaults cannot move a paper's numbers (a value the file sets, for the learner
    or under ``"*"``, wins):

    * no model-size bound (:data:`PAPER_SETTINGS`'s ``max_model_bytes``): the papers' learners keep
      every entry of M they learn (their sparsity is one of the reported results);
    * the papers' triplet stream: uniform sampling, one pass, the last iterate (no averaging);
    * SORS's and AdaSORS's constant step (Algorithms 1 and 2; ``schedule="auto"`` takes a
      per-triplet step on corpora of many classes).

    Examples
    --------
    >>> p = paper_params(["oasis", "cosine"], {"oasis": {"max_model_bytes": "400MB"}})
    >>> p["oasis"] == {"max_model_bytes": "400MB", "sampler": "uniform", "n_passes": 1, "averaging": False}
    True
    >>> paper_params(["sors-l1"], {})["sors-l1"]["schedule"]
    'constant'
    >>> "cosine" in p  # nothing of these to state
    False
    """
    out = {key: dict(value) for key, value in params.items()}
    shared = out.get("*", {})
    for name in algorithms:
        spec = ALGORITHMS.get(name)
        if spec is None:
            continue
        names = spec.make().get_params()
        for key, value in PAPER_SETTINGS.items():
            if key in names and key not in shared:
                out.setdefault(name, {}).setdefault(key, value)
    return out


def _run_protocol(settings: dict, out_dir: Path | None, n_jobs: int, cache: dict | None) -> dict:
    """Run one protocol (a learning curve when ``budgets`` is given); the same settings run once per
    :func:`run_all` (``cache``)."""
    protocol = settings.get("protocol", "sors")
    key = json.dumps({k: v for k, v in settings.items() if k not in ("column", "substitution", "note")},
                     sort_keys=True, default=str)
    if cache is not None and key in cache:
        return dict(cache[key], reused=True)
    config = ExperimentConfig(dataset=settings["dataset"], algorithms=list(settings["algorithms"]),
                              seeds=[int(s) for s in settings.get("seeds", [0])], triplets=settings.get("triplets"),
                              params=paper_params(settings["algorithms"], settings.get("params", {})), n_jobs=n_jobs,
                              out_dir=out_dir,
                              options=dict(settings.get("options", {})))
    module = get_protocol(protocol)
    start = time.perf_counter()
    if settings.get("budgets"):
        from .learning_curve import learning_curve, write_learning_curve

        curve = learning_curve(module, config, settings["budgets"])
        report = curve["runs"][-1]
        report["learning_curve"] = {"budgets": curve["budgets"], "curves": curve["curves"],
                                    "sparsity": _curve_sparsity(curve)}
        if out_dir is not None:
            report["plots"] = [write_learning_curve(curve, out_dir)["png"]]
    else:
        report = module.run(config)
    report["seconds"] = time.perf_counter() - start
    if cache is not None:
        cache[key] = report
    return report


def _curve_sparsity(curve: dict) -> dict:
    out: dict = {}
    for report in curve["runs"]:
        for alg, scores in scoreboard("sors", report).items():
            if "sparsity" in scores:
                out.setdefault(alg, []).append(scores["sparsity"][0])
    return out


@contextlib.contextmanager
def machine_load(every: float = 30.0):
    """Record the machine's load while the block runs: yields a dict that holds, once the block ends,
    ``load`` (the 1-minute load average sampled every ``every`` seconds and at both ends:
    ``{"min", "mean", "max", "samples"}``) and ``peak_rss_bytes`` (this process's peak resident
    memory since it started, so it covers the block and what ran before it; None where the system
    does not tell). Empty where there is no load average.

    Examples
    --------
    >>> with machine_load() as machine:
    ...     pass
    >>> machine["load"]["samples"], machine["load"]["min"] <= machine["load"]["max"]
    (2, True)
    """
    if not hasattr(os, "getloadavg"):  # not a Unix
        yield {}
        return
    samples = [os.getloadavg()[0]]
    stop = threading.Event()

    def sample():
        while not stop.wait(every):
            samples.append(os.getloadavg()[0])

    thread = threading.Thread(target=sample, name="machine-load", daemon=True)
    thread.start()
    machine: dict = {}
    try:
        yield machine
    finally:
        stop.set()
        thread.join()
        samples.append(os.getloadavg()[0])
        machine.update(load={"min": min(samples), "mean": float(np.mean(samples)), "max": max(samples),
                             "samples": len(samples)}, peak_rss_bytes=peak_resident_bytes())


def run_item(name_or_spec, out_dir: Path | None = None, quick: bool = False, n_jobs: int = 1,
             cache: dict | None = None) -> dict:
    """Run one paper item (a ``paper-*`` experiment file or its parsed dict) and judge every row.

    Parameters
    ----------
    name_or_spec : str, Path or dict
        A shipped item name, a path, or the parsed file.
    out_dir : Path, optional
        Where the item's JSON (``<name>.json``), table (``<name>.md``) and figures go.
    quick : bool
        Use every run's ``quick`` sizes (the test-suite form).
    n_jobs : int
        Parallel workers inside each protocol.
    cache : dict, optional
        Reports of runs already made in this process, keyed by their settings.

    Returns
    -------
    dict
        ``{"name", "paper", "citation", "item", "kind", "caption", "quick", "runs": [...],
        "rows": [...], "claims": [...], "counts": {...}, "seconds", "figures", "machine"}``
        (``machine``: the load and peak memory while it ran, :func:`machine_load`).
    """
    spec = name_or_spec if isinstance(name_or_spec, dict) else load_experiment_file(name_or_spec)
    name = spec.get("name") or (str(name_or_spec) if not isinstance(name_or_spec, dict) else "paper-item")
    name = Path(name).stem
    item = check_item(spec, name)
    store = active_store()
    before = (store.hits, store.misses, store.reused_seconds) if store is not None else None
    with machine_load() as machine:
        result = _run_checked_item(item, spec, name, out_dir, quick, n_jobs, cache)
    result["machine"] = machine
    if store is not None:  # under ``experiment --resume``: what was read from an earlier, stopped run
        result["job_store"] = {"jobs_reused": store.hits - before[0], "jobs_run": store.misses - before[1],
                               "reused_compute_seconds": store.reused_seconds - before[2]}
    if out_dir is not None:
        out = Path(out_dir) / name
        result["figures"] = write_figures(result, out)
        write_report(result, out, f"{name}.json")
        (out / f"{name}.md").write_text(verdicts.item_markdown(result))
    return result


def _run_checked_item(item: dict, spec: dict, name: str, out_dir, quick: bool, n_jobs: int, cache) -> dict:
    start = time.perf_counter()
    out = Path(out_dir) / name if out_dir is not None else None
    runs, rows, claims = [], [], []
    for run in item["runs"]:
        settings = _run_settings(run, quick)
        settings.pop("skip", None)
        if item.get("budgets"):
            settings["budgets"] = (run.get("quick", {}).get("budgets") if quick else None) or item["budgets"]
        column = run.get("column", run.get("dataset", ""))
        wanted = list(dict.fromkeys(list(settings.get("algorithms", [])) + [r["algorithm"] for r in run.get("rows", [])]))
        known, missing = registered(wanted)
        entry = {"column": column, "dataset": settings.get("dataset") or None,
                 "substitution": run.get("substitution", ""), "protocol": settings.get("protocol", "sors"),
                 "algorithms": known, "not_registered": missing, "note": run.get("note", ""),
                 "settings": {k: settings.get(k) for k in ("seeds", "triplets", "params", "options", "budgets")
                              if settings.get(k) is not None}}
        board, report = {}, None
        if quick and run.get("quick", {}).get("skip"):
            entry["skipped"] = True
        elif settings.get("dataset") and known:
            settings["algorithms"] = [a for a in settings.get("algorithms", known) if a in ALGORITHMS] or known
            if quick:  # the quick form runs fewer learners: their rows say so
                entry["left_out"] = [a for a in known if a not in settings["algorithms"]]
            report = _run_protocol(settings, out, n_jobs, cache)
            board = scoreboard(entry["protocol"], report)
            entry["refused"] = dict(report.get("refused") or {})
            entry["seconds"] = report.get("seconds")
            entry["reused"] = bool(report.get("reused"))
            entry["plots"] = [str(p) for p in (report.get("plots") or ([report["plot"]] if report.get("plot") else []))]
            entry["selection"] = _selection(entry["protocol"], settings)
            if report.get("learning_curve"):
                entry["learning_curve"] = report["learning_curve"]
            if entry["protocol"] == "cikm15":
                entry["search"] = {key: {"algorithm": v["algorithm"], "scores": v["scores"]}
                                   for key, v in report.get("search", {}).items()}
                entry["points"] = _cikm_points(report["results"])
        entry["board"] = {a: {k: v for k, v in s.items()} for a, s in board.items()}
        runs.append(entry)
        rows += verdicts.judge_rows(item, run, entry, board)
    for column in dict.fromkeys(e["column"] for e in runs):  # a column's runs judged together
        mine = [(run, e) for run, e in zip(item["runs"], runs) if e["column"] == column]
        merged = {"column": column, "dataset": next((e["dataset"] for _, e in mine if e["dataset"]), None),
                  "skipped": all(e.get("skipped") for _, e in mine),
                  "not_registered": [a for _, e in mine for a in e["not_registered"]],
                  "refused": {a: why for _, e in mine for a, why in e.get("refused", {}).items()}}
        board = {a: s for _, e in mine for a, s in e["board"].items()}
        claims += verdicts.judge_claims(item, {"rows": [r for run, _ in mine for r in run.get("rows", [])]},
                                        merged, board)
    result = {"name": name, "paper": item["paper"], "citation": PAPERS[item["paper"]], "item": item["item"],
              "kind": item.get("kind", "table"), "caption": item.get("caption", ""), "note": item.get("note", ""),
              "description": spec.get("description", ""), "quick": bool(quick), "metrics": item.get("metrics", []),
              "tolerance": item.get("tolerance"), "runs": runs, "rows": rows, "claims": claims,
              "counts": verdicts.count(rows, claims), "seconds": time.perf_counter() - start,
              "figure": item.get("figure")}
    return result


def _cikm_points(results: list) -> dict:
    """``{algorithm: [{delta, query_ratio, ap@10, train_seconds}, ...]}``: means over folds per delta."""
    groups: dict = {}
    for r in results:
        groups.setdefault((r["algorithm"], r["delta"]), []).append(r)
    out: dict = {}
    for (alg, delta), rs in groups.items():
        out.setdefault(alg, []).append({"delta": delta, **{k: float(np.mean([r[k] for r in rs])) for k in
                                                           ("query_ratio", "ap@10", "train_seconds")}})
    return {alg: sorted(pts, key=lambda p: p["query_ratio"]) for alg, pts in out.items()}


def _selection(protocol: str, settings: dict) -> str:
    opts = settings.get("options", {})
    if protocol == "sors":
        return "tune on a validation part of each seed's training split" if opts.get("tune") else \
            "none: the learners' data-adaptive defaults (or the paper's stated constants); nothing chosen on test data"
    if protocol == "cikm15":
        return f"{opts.get('search', 'grid')} search by {opts.get('search_folds', 5)}-fold CV on a disjoint tuning subset"
    if protocol == "ijcai17":
        return ("b x C chosen per outer fold by CV on its training part" if opts.get("search") else
                "the learners' defaults; nothing chosen on test data")
    if protocol == "romco":
        return ("grid search on a held-out shuffle (search_seed), as the paper" if opts.get("search") else
                "the paper's constants or the learners' defaults")
    return "the settings given (the paper's constants or values chosen on split seed 1, not an evaluated seed)"


def run_all(out_dir: Path | None = None, quick: bool = False, n_jobs: int = 1, items=None, progress=None) -> dict:
    """Every paper item, one reproduction report: ``out_dir/reproduction.json`` and ``.md``.

    Parameters
    ----------
    out_dir : Path, optional
    quick : bool
        The test-suite sizes.
    n_jobs : int
    items : list of str, optional
        The items to run (default: ``paper-all``'s ``include`` list).
    progress : callable, optional
        ``progress(name)`` before each item.
    """
    every = load_experiment_file("paper-all").get("include") or paper_items()
    if items is None:
        items = every
    cache: dict = {}
    start = time.perf_counter()
    results = []
    for name in items:
        if progress is not None:
            progress(name)
        results.append(run_item(name, out_dir, quick=quick, n_jobs=n_jobs, cache=cache))
    not_run = [n for n in every if n not in items]
    report = {"quick": bool(quick), "items": results, "counts": verdicts.total_counts(results),
              "rule": verdicts.RULE, "seconds": time.perf_counter() - start,
              "not_run": not_run, "full_size": full_size_notes(not_run)}
    if out_dir is not None:
        write_report(report, out_dir, "reproduction.json")
        (Path(out_dir) / "reproduction.md").write_text(verdicts.report_markdown(report))
    return report


def full_size_notes(names) -> dict:
    """``{item: its file's full_size note}`` for the items ``names``: what size of the item has been run
    and why not the paper's (an item without a note is left out)."""
    notes = {name: load_experiment_file(name)["paper"].get("full_size", "") for name in names}
    return {name: text for name, text in notes.items() if text}


def run_file(spec: dict, name: str, out_dir: Path | None, quick: bool, n_jobs: int) -> dict:
    """What ``sparsesim experiment --config`` runs for a paper file: the item, or with ``include``
    (``paper-all``) every item listed."""
    if "include" in spec:
        unknown = [n for n in spec["include"] if not (CONFIG_DIR / f"{n}.toml").is_file()]
        if unknown:
            raise UnknownNameError(f"paper-all includes unknown item(s) {', '.join(unknown)}")
        return run_all(out_dir, quick=quick, n_jobs=n_jobs, items=list(spec["include"]))
    spec = dict(spec, name=Path(name).stem)
    return run_item(spec, out_dir, quick=quick, n_jobs=n_jobs)


def format_report(report: dict) -> str:
    """The text the CLI prints: the markdown of an item or of the whole report."""
    return verdicts.report_markdown(report) if "items" in report else verdicts.item_markdown(report)


__all__ = ["PAPERS", "PAPER_SETTINGS", "check_item", "format_report", "full_size_notes", "is_paper_file",
           "machine_load", "paper_items", "paper_params", "registered", "run_all", "run_file", "run_item", "scoreboard", "write_figures"]
