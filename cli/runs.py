"""``sparsesim experiment | serve | learn``: paper protocols, the query service, learning from feedback."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import List, Optional

import typer

from sparsesim.exceptions import InvalidInputError
from sparsesim.validation import check_float, check_int, check_n_jobs, check_n_triplets, check_seed_count

from . import checks
from .common import echo_line, emit, progress_bar, show_progress, app, parse_params, parse_seeds, scheduler_option


@app.command()
def experiment(
    ctx: typer.Context,
    dataset: Optional[str] = typer.Option(None, "--dataset", "-d", help="Registered data set name or labelled svmlight path."),
    algorithms: Optional[str] = typer.Option(None, "--algorithms", "-a", help="Comma-separated algorithm names."),
    protocol: Optional[str] = typer.Option(None, "--protocol", help="Paper protocol: sors (default), cikm15, ijcai17, romco, oht."),
    triplets: Optional[int] = typer.Option(None, "--triplets", "-n", help="Triplets (rounds) per run; default: the protocol's."),
    seeds: Optional[str] = typer.Option(None, "--seeds", help="Comma-separated seeds, one repeat each (default 0)."),
    config_file: Optional[str] = typer.Option(None, "--config", "-c", help="Experiment file (TOML/JSON) or the name of a "
                                              "shipped one (sparsesim/experiments/configs); flags given here win."),
    param: Optional[List[str]] = typer.Option(None, "--param", "-p", metavar="KEY=VALUE", help="KEY=VALUE or ALGORITHM.KEY=VALUE (repeatable)."),
    option: Optional[List[str]] = typer.Option(None, "--option", metavar="KEY=VALUE", help="Protocol option KEY=VALUE (JSON values), e.g. grid={\"lam\":[1e-5,1e-4]}."),
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
    quick: bool = typer.Option(False, "--quick", help="Paper experiment files (paper-*): the small sizes the test "
                               "suite runs instead of the papers' sizes."),
    resume: bool = typer.Option(False, "--resume", help="Keep every finished run in OUT_DIR/jobs; started again "
                                "with the same --out-dir, skip the runs found there (same code, data and settings)."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
):
    """Run a paper protocol: split, triplets, train each algorithm, evaluate, repeat over seeds.

    The settings can come from an experiment file (--config); flags given on the command line win.
    With --resume a run stopped part way (a closed session, a killed job) starts again where it
    stopped.
    """
    if resume:
        if out_dir is None:
            raise InvalidInputError("--resume keeps the finished runs in OUT_DIR/jobs; give --out-dir")
        if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
            raise InvalidInputError(f"--out-dir {out_dir} exists and is not a directory; give a directory path")
        from sparsesim.job_store import use_job_store

        ctx.with_resource(use_job_store(out_dir / "jobs"))
    from sparsesim.experiments import ExperimentConfig, get_protocol, load_experiment_file
    from sparsesim.registry import get_algorithm

    spec = load_experiment_file(config_file) if config_file is not None else {}
    from sparsesim.experiments import paper

    if paper.is_paper_file(spec):
        _paper_experiment(spec, str(config_file), out_dir, quick, n_jobs, json_out,
                          given=[f for f, v in (("--dataset", dataset), ("--algorithms", algorithms),
                                                ("--protocol", protocol), ("--triplets", triplets), ("--seeds", seeds),
                                                ("--param", param), ("--option", option), ("--tune", tune or None),
                                                ("--learning-curve", learning_curve)) if v is not None])
        return
    if quick:
        raise InvalidInputError("--quick applies to the papers' experiment files (--config paper-...)")
    dataset = dataset if dataset is not None else spec.get("dataset")
    if dataset is None:
        raise InvalidInputError("give --dataset (or an experiment file with `dataset`)")
    dataset = checks.dataset_name(str(dataset))
    if algorithms is not None:
        names = [a.strip() for a in algorithms.split(",") if a.strip()]
    else:
        names = [str(a) for a in spec.get("algorithms", [])]
    if not names:
        raise InvalidInputError("--algorithms needs at least one name")
    names = [get_algorithm(name).name for name in names]
    protocol = protocol if protocol is not None else spec.get("protocol", "sors")
    from sparsesim.experiments import PROTOCOLS
    from sparsesim.validation import resolve_name

    protocol = resolve_name(protocol, PROTOCOLS, "protocol")
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
    scoped_params = {}
    for scope, values in parse_params(param).items():
        scope = scope if scope == "*" else get_algorithm(scope).name
        checks.fast_param_values(values)
        scoped_params.setdefault(scope, {}).update(values)
    scoped = set(scoped_params) - {"*"}
    if scoped - set(names):
        raise InvalidInputError(f"--param names algorithm(s) {', '.join(sorted(scoped - set(names)))} that are not "
                                f"in --algorithms ({', '.join(names)})")
    options = dict(spec.get("options", {}))
    options.update(parse_params(option).get("*", {}))
    if query_ratio is not None:
        options["query_ratio"] = query_ratio
    params = {alg: dict(p) for alg, p in spec.get("params", {}).items()}
    for alg, p in scoped_params.items():
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
                              progress=show_progress(json_out))
    total = len(names) * len(seed_list)
    bar, advance = progress_bar(total, f"{protocol} on {dataset}", config.progress and protocol == "sors")
    if advance is not None:
        config.options["progress_callback"] = advance
    from contextlib import nullcontext

    from sparsesim.parallel import report_progress

    runs_bar = nullcontext()
    if advance is None and config.progress:
        # protocols that run many trainings (cikm15, ijcai17, romco, oht): one bar over all their runs
        bar, _ = progress_bar(0, f"{protocol} on {dataset}: runs", True)
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
        from sparsesim.experiments.learning_curve import learning_curve as run_curve
        from sparsesim.experiments.learning_curve import write_learning_curve

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
            emit({"learning_curve": {k: curve[k] for k in ("dataset", "budgets", "curves")}, "files": files})
        else:
            for name, c in curve["curves"].items():
                pts = ", ".join(f"{b}: {100 * m:.2f}" for b, m in zip(curve["budgets"], c["map"]))
                echo_line(f"{name:<16} MAP % by triplets  {pts}")
            echo_line(f"wrote {files['png']} and {files['json']}")
        return
    with cluster as session, bar, runs_bar:
        if session is not None:
            config.n_jobs = session.n_jobs
        report = module.run(config)
    if json_out:
        emit(report)
    else:
        echo_line(module.format_table(report))


def _paper_experiment(spec, name, out_dir, quick, n_jobs, json_out, given):
    """A paper's table or figure (or with ``include``, the whole reproduction report)."""
    from sparsesim.experiments import paper

    if given:
        raise InvalidInputError(f"a paper experiment file fixes its own settings; {', '.join(given)} cannot change "
                                "them (copy the file and edit it instead)")
    if out_dir is not None and (out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir())):
        raise InvalidInputError(f"--out-dir {out_dir} exists and is not a directory; give a directory path")
    n_jobs = check_n_jobs(n_jobs if n_jobs is not None else 1, "--n-jobs")
    report = paper.run_file(spec, name, out_dir, quick, n_jobs)
    if json_out:
        emit(report)
    else:
        echo_line(paper.format_report(report))


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
    overwrite: bool = typer.Option(False, "--overwrite", help="--learn: start from the index's model and replace an "
                                   "existing --snapshot instead of resuming from it."),
    scheduler: Optional[str] = scheduler_option(),
):
    """Serve an index over HTTP: POST /query (texts or sparse vectors), GET /info, GET /health,
    and a search page at / comparing the learned similarity with plain cosine.

    A sharded index (`index build --shards N`) is served from the Dask cluster at --scheduler:
    its shards stay on the workers while the server runs."""
    for name, value in (("--max-top-k", max_top_k), ("--max-queries", max_queries),
                        ("--max-body-bytes", max_body_bytes), ("--max-concurrency", max_concurrency)):
        if value < 1:
            raise InvalidInputError(f"{name} must be at least 1, got {value}")
    if not 0 <= port <= 65535:
        raise InvalidInputError(f"--port must be in 0..65535, got {port}")
    if learn:
        check_int(snapshot_every, "--snapshot-every", 1)
        check_float(snapshot_seconds, "--snapshot-seconds", 0, None, low_open=True)
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        from sparsesim.exceptions import MissingDependencyError

        raise MissingDependencyError("sparsesim serve needs Starlette and uvicorn: pip install "
                                     "'sparsesim[serve]'") from None
    sock = checks.check_port_free(host, port)  # a port in use is reported before the index loads
    port = sock.getsockname()[1]  # --port 0: the port the system chose
    from sparsesim.service import ServiceLimits
    from sparsesim.service import serve as run_server

    limits = ServiceLimits(max_body_bytes=max_body_bytes, max_queries=max_queries, max_top_k=max_top_k,
                           max_concurrency=max_concurrency)
    learn_options = None
    if learn:
        if snapshot is None:
            snapshot = index.parent / f"{index.name}.feedback.npz"
        from sparsesim.feedback.snapshots import check_snapshot_target

        check_snapshot_target(snapshot, index, not overwrite, overwrite)  # before the index is loaded
        learn_options = {"snapshot": snapshot, "snapshot_every": snapshot_every, "snapshot_seconds": snapshot_seconds,
                         "resume": not overwrite, "overwrite": overwrite}
    elif overwrite:
        raise InvalidInputError("--overwrite applies to --learn (it replaces the feedback snapshot)")
    echo_line(f"loading index {index} ...", err=True)  # also ends the start-up spinner before the server runs
    try:
        run_server(index, host=host, port=port, limits=limits, learn=learn_options, scheduler=scheduler, sock=sock)
    finally:
        sock.close()


@app.command()
def learn(
    index: Path = typer.Option(..., "--index", "-i", help="Index directory built by `sparsesim index build`."),
    feedback: Path = typer.Option(..., "--feedback", "-f", help="JSONL file: one feedback record per line "
                                  '(triplet {"query", "preferred", "other"} or click log {"query", "clicked", "shown"}).'),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Model file to write (default: "
                                       "INDEX.feedback.npz beside the index; what `serve --learn` resumes from)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from --out when it exists (else from the index's model)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --out, learning from the index's "
                                   "model (without it or --resume an existing --out is refused)."),
    max_click_pairs: int = typer.Option(10, "--max-click-pairs", help="Triplets taken from one click log."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
):
    """Learn from a batch feedback log with the index's learner (the loop of `serve --learn`,
    without HTTP) and save the updated model. Every line is checked before anything is learned."""
    from sparsesim.feedback import FeedbackLearner
    from sparsesim.feedback.snapshots import check_snapshot_target

    if resume and overwrite:
        raise InvalidInputError("give --resume (continue from --out) or --overwrite (replace it), not both")
    check_int(max_click_pairs, "--max-click-pairs", 1)
    if out is None:
        out = index.parent / f"{index.name}.feedback.npz"
    check_snapshot_target(out, index, resume, overwrite, inputs=(feedback,))
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
                              max_click_pairs=max_click_pairs, overwrite=overwrite)
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
        emit(summary)
    else:
        echo_line(f"learned {summary['triplets']} triplets from {len(records)} records "
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
