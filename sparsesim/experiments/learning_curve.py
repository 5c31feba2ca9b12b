"""MAP against the number of training triplets: the curve to choose ``--triplets`` from.

:func:`learning_curve` runs a protocol once per triplet budget (same seeds, same splits) and
collects mean MAP per algorithm; :func:`plot_learning_curve` writes it as a PNG. The CLI's
``sparsesim experiment --learning-curve 1000,3000,10000 --out-dir DIR`` writes
``DIR/learning_curve.json`` and ``DIR/learning_curve.png``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from ..exceptions import InvalidInputError
from .runner import figure, mean_std, write_report

__all__ = ["learning_curve", "plot_learning_curve", "write_learning_curve"]


def learning_curve(module, config, budgets) -> dict:
    """Run ``module.run`` at every triplet budget in ``budgets``.

    Returns
    -------
    dict
        ``{"dataset", "protocol", "budgets": [...], "curves": {algorithm: {"map": [...], "std": [...]}},
        "runs": [report, ...]}`` with one mean (and standard deviation over seeds) per budget.
    """
    budgets = sorted({int(b) for b in budgets})
    if not budgets or budgets[0] <= 0:
        raise InvalidInputError("--learning-curve needs positive triplet counts, e.g. 1000,3000,10000")
    runs = []
    curves: dict[str, dict[str, list]] = {}
    for n in budgets:
        cfg = dataclasses.replace(config, triplets=n, options=dict(config.options))
        report = module.run(cfg)
        rows = report.get("results") if isinstance(report, dict) else None
        if not rows or not all("map" in r and "algorithm" in r for r in rows):
            raise InvalidInputError("this protocol's report has no per-run MAP; the learning curve needs one")
        runs.append(report)
        for name in dict.fromkeys(r["algorithm"] for r in rows):
            maps = [float(r["map"]) for r in rows if r["algorithm"] == name]
            curve = curves.setdefault(name, {"map": [], "std": []})
            mean, std = mean_std(maps)
            curve["map"].append(mean)
            curve["std"].append(std)
    return {"dataset": str(config.dataset), "budgets": budgets, "curves": curves, "runs": runs}


def plot_learning_curve(curve: dict, path) -> Path:
    """Write MAP vs triplets (log x axis, one line per algorithm, ±1 std band) as a PNG, atomically."""
    with figure(path, figsize=(6, 4)) as (fig, (ax,)):
        x = np.asarray(curve["budgets"], dtype=float)
        for name, c in curve["curves"].items():
            m, s = np.asarray(c["map"]), np.asarray(c["std"])
            ax.plot(x, m, marker="o", label=name)
            ax.fill_between(x, m - s, m + s, alpha=0.2)
        if len(x) > 1:
            ax.set_xscale("log")
        ax.set_xlabel("training triplets")
        ax.set_ylabel("MAP (held-out)")
        ax.set_title(f"learning curve: {curve['dataset']}")
        ax.grid(True, alpha=0.3)
        ax.legend()
    return Path(path)


def write_learning_curve(curve: dict, out_dir) -> dict:
    """``out_dir/learning_curve.json`` and ``.png``; returns their paths."""
    json_path = write_report({k: curve[k] for k in ("dataset", "budgets", "curves")}, out_dir, "learning_curve.json")
    png = plot_learning_curve(curve, Path(out_dir) / "learning_curve.png")
    return {"json": str(json_path), "png": str(png)}
