"""One helper for every parallel run (folds, seeds, grid points, per-task learners).

It is a thin layer over joblib so that ``joblib.parallel_config(backend="dask")`` (with a
``dask.distributed.Client`` alive) spreads the same runs over a Dask cluster, unchanged.
Results come back in the order of the jobs, so a run with ``n_jobs=4`` returns exactly what
``n_jobs=1`` returns: every job carries its own seed.
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager
from functools import partial
from typing import Any, Callable, Iterable, Sequence

# the caller's progress reporter (see report_progress); joblib workers never see it, only the
# process collecting the results reports
_REPORTER: contextvars.ContextVar = contextvars.ContextVar("sparsesim_progress_reporter", default=None)
# how the joblib part of a call is run (see run_policy): a Dask cluster's failure policy, set by
# sparsesim.distributed.dask_jobs, so that every caller of run_parallel gets it without knowing Dask
_POLICY: contextvars.ContextVar = contextvars.ContextVar("sparsesim_run_policy", default=None)


@contextmanager
def run_policy(policy: Callable[..., Any] | None):
    """Within the block, every :func:`run_parallel` call that uses joblib runs as
    ``policy(run, *args)``, where ``run(*args)`` runs all its jobs and returns their results.

    The policy may call ``run`` again (a retry after a cluster failure, see
    :meth:`sparsesim.distributed.DaskSession.call`); progress is then reported once per job, not
    once per attempt. ``None`` removes an enclosing policy (calls inside a policy run plainly).
    """
    token = _POLICY.set(policy)
    try:
        yield
    finally:
        _POLICY.reset(token)


@contextmanager
def report_progress(reporter: Callable[[int, int], None]):
    """Within the block, every :func:`run_parallel` call reports to ``reporter(new_jobs, finished)``.

    ``reporter(n, 0)`` announces ``n`` more jobs when a call starts and ``reporter(0, 1)`` follows
    each finished job, so a command can show one progress bar over all the runs of a protocol
    (the CLI's ``experiment`` does) without the protocol knowing about it.
    """
    token = _REPORTER.set(reporter)
    try:
        yield
    finally:
        _REPORTER.reset(token)


def run_parallel(
    func: Callable[..., Any],
    jobs: Iterable[Sequence[Any] | dict],
    n_jobs: int | None = 1,
    backend: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[Any]:
    """Run ``func`` over ``jobs`` and return the results in job order.

    Parameters
    ----------
    func : callable
        A picklable function (module level), called as ``func(*job)`` for a sequence job or
        ``func(**job)`` for a dict job.
    jobs : iterable of sequence or dict
        Arguments of each call; each job must carry its own seed for reproducibility.
    n_jobs : int or None
        Worker count; ``1`` runs in this process without joblib (plain loop, easy to debug);
        ``None`` uses the active ``joblib.parallel_config`` (e.g. a Dask cluster).
    backend : str, optional
        joblib backend ("loky", "threading", "dask", ...); default: the active configuration.
    progress : callable, optional
        Called with the number of finished jobs after each job (for progress bars).

    Returns
    -------
    list
        ``[func(job) for job in jobs]`` in order.
    """
    jobs = list(jobs)
    from .job_store import active_store

    store = active_store()
    keys = store.keys(func, jobs) if store is not None and jobs else None
    if keys is not None:
        return _run_stored(store, keys, func, jobs, n_jobs, backend, progress)
    return _run_plain(func, jobs, n_jobs, backend, progress)


def _run_stored(store, keys, func, jobs, n_jobs, backend, progress) -> list:
    """:func:`run_parallel` within :func:`~sparsesim.job_store.use_job_store`: the jobs found in the
    store are not run; the others run (timed) and are stored as each result comes back."""
    from .job_store import timed_call

    results: list[Any] = [None] * len(jobs)
    todo = []
    for i, key in enumerate(keys):
        found, value = store.get(key)
        if found:
            results[i] = value
        else:
            todo.append(i)
    reporter = _REPORTER.get()
    if reporter is not None:  # the jobs found count as finished at once
        reporter(len(jobs) - len(todo), 0)
        for _ in range(len(jobs) - len(todo)):
            reporter(0, 1)

    def keep(at, pair):
        value, seconds = pair
        store.put(keys[todo[at]], value, seconds)

    pairs = _run_plain(timed_call, [(func, jobs[i]) for i in todo], n_jobs, backend, progress, on_result=keep)
    for i, (value, _) in zip(todo, pairs):
        results[i] = value
    return results


def _run_plain(func, jobs: list, n_jobs, backend, progress, on_result=None) -> list:
    reporter = _REPORTER.get()
    if reporter is not None:
        reporter(len(jobs), 0)
        explicit = progress

        def progress(done, _explicit=explicit):
            reporter(0, 1)
            if _explicit is not None:
                _explicit(done)

    def call(job):
        return func(**job) if isinstance(job, dict) else func(*job)

    if n_jobs == 1 and backend is None:
        results = []
        for done, job in enumerate(jobs, start=1):
            results.append(call(job))
            if on_result is not None:
                on_result(done - 1, results[-1])
            if progress is not None:
                progress(done)
        return results

    run = _run_joblib if on_result is None else partial(_run_joblib, on_result=on_result)
    policy = _POLICY.get()
    if policy is None:
        return run(func, jobs, n_jobs, backend, progress)
    if progress is not None:  # a repeated attempt reports only the jobs not reported before
        progress = _monotone(progress)
    with run_policy(None):  # the runs inside the policy are not wrapped again
        return policy(run, func, jobs, n_jobs, backend, progress)


def _monotone(progress: Callable[[int], None]) -> Callable[[int], None]:
    reported = [0]

    def report(done):
        if done > reported[0]:
            reported[0] = done
            progress(done)
    return report


def _run_joblib(func, jobs: list, n_jobs, backend, progress, on_result=None) -> list:
    # imported on first use, not at the top: joblib's import (~0.04 s of CPU) is not needed by a
    # process that runs everything in one thread (``sparsesim query --index`` answering its queries)
    from joblib import Parallel, delayed

    kwargs: dict[str, Any] = {"return_as": "generator"}
    if n_jobs is not None:
        kwargs["n_jobs"] = n_jobs
    if backend is not None:
        kwargs["backend"] = backend
    parallel = Parallel(**kwargs)
    tasks = (delayed(func)(**job) if isinstance(job, dict) else delayed(func)(*job) for job in jobs)
    results = []
    for done, result in enumerate(parallel(tasks), start=1):
        results.append(result)
        if on_result is not None:
            on_result(done - 1, result)
        if progress is not None:
            progress(done)
    return results
