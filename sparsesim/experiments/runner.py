"""What every paper protocol shares: its options, its mean ± std, its report file.

A protocol module says what is particular to its paper (how a run trains and scores, what its
table shows); the pieces here are the same for all of them:

* :func:`protocol_options` — the protocol's options over its defaults; a misspelt option is an
  error that lists the known ones, never silently ignored;
* :func:`grid_points` — the points of a parameter grid ``{param: [values]}`` (every combination);
* :func:`mean_std` — mean and standard deviation of the finite values (NaN when there are none);
* :func:`write_report` — the report as strict JSON, written atomically into the output folder.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from ..exceptions import InvalidInputError
from ..persistence import atomic_write, dumps_strict


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


def grid_points(grid: dict | None, option: str = "grid") -> list[dict]:
    """Every combination of a grid ``{param: [values]}`` as a list of ``{param: value}``.

    An empty or missing grid is one point with no parameters (``[{}]``); keys are taken in sorted
    order, so the points come out in the same order whatever order the grid was written in.

    Raises
    ------
    InvalidInputError
        ``grid`` is not a mapping of names to non-empty lists (``option`` names it in the message).
    """
    if not grid:
        return [{}]
    if not isinstance(grid, dict) or not all(isinstance(v, (list, tuple)) and v for v in grid.values()):
        raise InvalidInputError(f"option {option!r} must map parameter names to non-empty lists of values")
    keys = sorted(grid)
    return [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]


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
