"""What every paper protocol shares: options, the seeds x folds loop, summary, table, report, plots.

A protocol module says what is particular to its paper (how a run trains and scores, what its
table shows); the pieces here are the same for all of them:

* :func:`protocol_options` — the protocol's options over its defaults; a misspelt option is an
  error that lists the known ones, never silently ignored;
* :func:`grid_points` — the points of a parameter grid ``{param: [values]}`` (every combination;
  the same function ``sparsesim tune`` enumerates its grid with, as the protocols' parameter
  searches rank their candidates with :func:`sparsesim.tuning.rank_candidates`);
* :func:`check_factors`, :func:`factor_points`, :func:`scale_auto` and :func:`factor_label` — the
  ``factors`` option (``{param: [multiples]}``): each learner runs at multiples of the values its
  ``"auto"`` parameters resolve to, no search; a key ``"eta1,eta2"`` multiplies both by the same
  number; a parameter given explicitly keeps its value;
* :func:`fold_jobs` — one job per seed and fold, seed-major, the loop of every cross-validated
  protocol;
* :func:`mean_std` and :func:`summarize` — mean and standard deviation per algorithm (or any
  grouping) over seeds and folds;
* :func:`pm`, :func:`describe_params` and :func:`text_table` — the "mean ± std" cells, a learner's
  parameters as text and the aligned text table;
* :func:`write_report` — the report as strict JSON, written atomically into the output folder;
* :func:`figure` — a PNG figure written atomically (matplotlib without a display).
"""

from __future__ import annotations

import contextlib
import numbers
from pathlib import Path

import numpy as np

from ..exceptions import InvalidInputError
from ..defaults import is_auto
from ..persistence import atomic_write, dumps_strict, save_figure
from ..registry import make_estimator
from ..tuning import grid_points

__all__ = ["auto_names", "check_factors", "describe_params", "factor_label", "factor_points", "figure", "fold_jobs",
           "grid_points", "mean_std", "pm", "protocol_options", "scale_auto", "summarize", "text_table",
           "write_report"]


def protocol_options(protocol: str, options: dict, defaults: dict) -> dict:
    """``defaults`` updated by ``options``.

    Parameters
    ----------
    protocol : str
        The protocol's name (for the error message).
    options : dict
        What the experiment file or ``--option`` gave.
    defaults : dict
        Every option the protocol knows, with its default.

    Returns
    -------
    dict
        A new dict: the defaults, then the given options.

    Raises
    ------
    InvalidInputError
        An option the protocol does not know.
    """
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise InvalidInputError(f"protocol {protocol!r}: unknown option(s) {', '.join(unknown)}; "
                                f"known: {', '.join(sorted(defaults))}")
    return {**defaults, **options}


def auto_names(algorithm: str, given: dict, resolvable) -> set[str]:
    """The parameters among ``resolvable`` that ``algorithm`` leaves at ``"auto"``: its constructor's
    ``"auto"`` defaults that ``given`` (the explicit parameters) does not set to a value."""
    defaults = make_estimator(algorithm).get_params()
    return {k for k in resolvable if is_auto(defaults.get(k)) and is_auto(given.get(k, defaults[k]))}


def check_factors(factors, names_of: dict) -> dict:
    """Refuse a malformed ``factors`` option, before any data loads.

    Parameters
    ----------
    factors : dict or None
        ``{param: [multiples]}``; a key ``"a,b"`` multiplies the parameters ``a`` and ``b`` alike.
    names_of : dict
        ``{algorithm: the parameters it leaves at "auto"}`` (:func:`auto_names`).

    Returns
    -------
    dict
        The grid, multiples as floats (empty when ``factors`` is empty).

    Raises
    ------
    InvalidInputError
        Not a mapping of names to non-empty lists, a multiple that is not a positive finite number,
        or a parameter that no algorithm leaves at ``"auto"``.
    """
    if not factors:
        return {}
    grid_points(factors, "factors")
    bad = [v for vs in factors.values() for v in vs
           if isinstance(v, bool) or not isinstance(v, numbers.Real) or not np.isfinite(v) or v <= 0]
    if bad:
        raise InvalidInputError(f"option 'factors': multiples must be positive finite numbers, got {bad[0]!r}")
    known = set().union(*names_of.values()) if names_of else set()
    unknown = sorted({n for key in factors for n in _names(key)} - known)
    if unknown:
        raise InvalidInputError(f"option 'factors': none of {', '.join(names_of)} has an 'auto' value of "
                                f"{', '.join(unknown)} (a parameter given with --param keeps its value; "
                                f"'auto' ones: {', '.join(sorted(known)) or 'none'})")
    return {key: [float(v) for v in vs] for key, vs in factors.items()}


def _names(key: str) -> list[str]:
    return [n.strip() for n in str(key).split(",") if n.strip()]


def factor_points(factors: dict, names) -> list[dict]:
    """The points of the ``factors`` grid a learner with ``"auto"`` parameters ``names`` runs at:
    the keys naming one of them (``[{}]``, its own default, when none does)."""
    return grid_points({k: v for k, v in factors.items() if set(_names(k)) & set(names)}, "factors")


def scale_auto(auto: dict, point: dict) -> dict:
    """``{param: auto[param] * multiple}`` for every parameter of ``point``'s keys found in ``auto``
    (the values the ``"auto"`` parameters resolved to)."""
    return {n: float(auto[n]) * float(m) for key, m in point.items() for n in _names(key) if n in auto}


def factor_label(algorithm: str, point: dict | None) -> str:
    """The name of a run in a table: ``"omtrsl Cx0.3,bx1"`` (a key of tied parameters in brackets:
    ``"romco-nucl (eta1,eta2)x0.6"``), or the algorithm alone without a point."""
    return algorithm if not point else f"{algorithm} " + ",".join(
        f"({k})x{v:g}" if "," in k else f"{k}x{v:g}" for k, v in sorted(point.items()))


def mean_std(values) -> tuple[float, float]:
    """(mean, std) of the finite entries of ``values``; (nan, nan) when none is finite."""
    arr = np.asarray(list(values), dtype=float)
    arr = arr[np.isfinite(arr)]
    if not arr.size:
        return float("nan"), float("nan")
    return float(arr.mean()), float(arr.std())


def write_report(report: dict, out_dir: Path, name: str) -> Path:
    """Write ``report`` as strict JSON (NaN/inf as null) to ``out_dir/name`` atomically.

    Parameters
    ----------
    report : dict
        JSON-serialisable, numpy scalars allowed.
    out_dir : Path
        Created when missing.
    name : str
        File name inside ``out_dir``.

    Returns
    -------
    Path
        The file written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    atomic_write(path, lambda fh: fh.write(dumps_strict(report, indent=1, default=float)), mode="w")
    return path


def fold_jobs(seeds, folds_of, make, only=None) -> list:
    """One job per seed and fold, seed-major: ``make(seed, fold, train, test)``.

    Parameters
    ----------
    seeds : iterable of int
    folds_of : callable
        ``folds_of(seed) -> [(train, test), ...]``: the seed's split into folds.
    make : callable
        Builds the job of one fold.
    only : iterable of int, optional
        The fold indices to run (default: every fold).
    """
    jobs = []
    for seed in seeds:
        folds = folds_of(seed)
        for f in (range(len(folds)) if only is None else only):
            jobs.append(make(seed, f, *folds[f]))
    return jobs


def summarize(results, metrics, by="algorithm", curves=()) -> dict:
    """Mean ± std of ``metrics`` over the results of every group, groups in first-seen order.

    Parameters
    ----------
    results : list of dict
        One row per run.
    metrics : iterable of str
        Keys of scalar values: each becomes ``(mean, std)`` (:func:`mean_std`).
    by : str or callable
        The key that groups the rows, or a function of a row giving its group (one summary per group).
    curves : iterable of str
        Keys of equal-length lists (e.g. AP@k for k = 1..10): each becomes the element-wise mean.

    Returns
    -------
    dict
        ``{group: {"n_runs": int, metric: (mean, std), curve: list}}``.
    """
    groups: dict = {}
    for row in results:
        groups.setdefault(by(row) if callable(by) else row[by], []).append(row)
    out = {}
    for key, rows in groups.items():
        entry = {"n_runs": len(rows)}
        entry.update({m: mean_std(r[m] for r in rows) for m in metrics})
        entry.update({c: np.mean([r[c] for r in rows], axis=0).tolist() for c in curves})
        out[key] = entry
    return out


def describe_params(params: dict) -> str:
    """``"C=0.01, eta=1"``: a learner's parameters in name order, floats in their shortest form."""
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(params.items()))


def pm(pair, digits: int = 3, scale: float = 1.0, width: int = 7) -> str:
    """``"mean ± std"`` of a ``(mean, std)`` pair, both times ``scale``; ``"-"`` for a missing pair."""
    if pair is None:
        return "-"
    return f"{scale * pair[0]:{width}.{digits}f} ± {scale * pair[1]:{max(1, width - 2)}.{digits}f}"


def text_table(columns, rows) -> list[str]:
    """An aligned text table: header, rule, one line per row.

    Parameters
    ----------
    columns : list of (str, int)
        Title and width of each column; the first column is left-aligned, the others right-aligned.
    rows : list of list of str
        The cells, already formatted.
    """

    def line(cells):
        return " ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, (_, w)) in enumerate(zip(cells, columns)))

    head = line([title for title, _ in columns])
    return [head, "-" * len(head)] + [line(cells).rstrip() for cells in rows]


@contextlib.contextmanager
def figure(path: Path, ncols: int = 1, figsize=(10, 4), title: str | None = None, fontsize=None, dpi: int = 90,
           nrows: int = 1):
    """A matplotlib figure of ``nrows`` x ``ncols`` panels, written to ``path`` (PNG, atomically, its
    folder created when missing) on leaving the block.

    Yields ``(fig, axes)``; ``axes`` is a flat list of the panels, row by row, even for one panel.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(nrows, ncols, figsize=figsize, squeeze=False)
    try:
        yield fig, list(axes.ravel())
        if title:
            fig.suptitle(title, fontsize=fontsize)
        fig.tight_layout()
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        save_figure(fig, Path(path), dpi=dpi)
    finally:
        plt.close(fig)
