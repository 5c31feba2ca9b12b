"""What the ``romco`` protocol shows: the cumulative-error curves (Figs. 3-5), the sensitivity
to ``lam1`` / ``lam2`` (Fig. 6) and the human-readable tables.

:func:`plot_curves` and :func:`plot_sensitivity` draw the figures from a report of
:func:`sparsesim.experiments.romco.run`; :func:`format_table` prints its summary (error rate, F1
of both classes, seconds; the ablation; undecided predictions; per task; the search's choice).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .runner import figure

__all__ = ["plot_curves", "plot_sensitivity", "format_table"]

_STYLE = {"romco-logd": ("tab:red", "-"), "romco-nucl": ("tab:orange", "-"), "pa-global": ("tab:gray", "--"),
          "pa-unique": ("black", "--"), "omtl": ("tab:blue", ":"), "omtllog": ("tab:green", "-."),
          "omtlvon": ("tab:purple", "-.")}


def plot_curves(report: dict, path: Path) -> Path:
    """Cumulative error rate vs rounds: one panel per task (up to 12) plus the task average."""
    curves = report["curves"]
    tasks = [t["task"] for t in report["data"]["tasks"]]
    panels = (tasks if len(tasks) <= 12 else []) + ["average over tasks"]
    cols = min(4, len(panels))
    rows = int(np.ceil(len(panels) / cols))
    title = f"{report['dataset']}: cumulative error rate, mean of {len(report['seeds'])} shuffles"
    with figure(path, nrows=rows, ncols=cols, figsize=(3.2 * cols, 2.6 * rows), title=title, fontsize=10
                ) as (fig, axes):
        for k, name in enumerate(panels):
            ax = axes[k]
            lo, hi = np.inf, -np.inf
            for alg, c in curves.items():
                color, ls = _STYLE.get(alg, (None, "-"))
                ys = c["mean"] if name == "average over tasks" else c["per_task"][k]
                rounds = np.array(c["rounds"])
                if name != "average over tasks":
                    n = report["data"]["tasks"][k]["n"]
                    keep = rounds <= n
                    rounds, ys = rounds[keep], np.array(ys)[keep]
                ax.plot(rounds, 100 * np.asarray(ys), color=color, ls=ls, lw=1.2, label=alg)
                late = rounds >= 0.05 * rounds.max()
                if np.any(late):
                    hi = max(hi, 100 * float(np.max(np.asarray(ys)[late])))
                    lo = min(lo, 100 * float(np.min(np.asarray(ys)[late])))
            if np.isfinite(hi) and hi > lo:  # the first rounds (error near 100%) would flatten the rest
                pad = 0.1 * (hi - lo) + 0.1
                ax.set_ylim(max(0.0, lo - pad), hi + pad)
            ax.set_title(name, fontsize=9)
            ax.set_xlabel("rounds", fontsize=8)
            ax.set_ylabel("cumulative error (%)", fontsize=8)
            ax.tick_params(labelsize=7)
        for ax in axes[len(panels):]:
            ax.axis("off")
        axes[0].legend(fontsize=7)
    return path


def plot_sensitivity(report: dict, path: Path) -> Path:
    """Fig. 6: error rate vs lam1 (lam2 fixed) and vs lam2 (lam1 fixed)."""
    sens = report["sensitivity"]
    with figure(path, ncols=2, figsize=(8, 3), title=f"{report['dataset']}: sensitivity to lam1 / lam2",
                fontsize=10) as (fig, axes):
        for ax, which in zip(axes, ("lam1", "lam2")):
            for alg, entry in sens.items():
                color, _ = _STYLE.get(alg, (None, "-"))
                e = entry[which]
                ax.errorbar(e["values"], 100 * np.array(e["error_mean"]), yerr=100 * np.array(e["error_std"]),
                            color=color, marker="o", ms=3, label=alg, capsize=2)
            ax.set_xscale("log")
            other = "lam2" if which == "lam1" else "lam1"
            fixed = {a: entry[which]["fixed"].get(other) for a, entry in sens.items()}
            ax.set_xlabel(f"{which} ({other} fixed: " + ", ".join(f"{v:g}" for v in fixed.values()) + ")",
                          fontsize=8)
            ax.set_ylabel("cumulative error (%)", fontsize=8)
            ax.legend(fontsize=7)
    return path


def _pm(mean, std, scale=100.0) -> str:
    if not np.isfinite(mean):
        return "diverged"
    return f"{scale * mean:6.2f} ({scale * std:.2f})"


def format_table(report: dict) -> str:
    """Human-readable tables: averages over tasks (mean (std over shuffles)), then per task."""
    lines = [
        f"ROMCO protocol on {report['dataset']}: {report['data']['n_tasks']} tasks, "
        f"{report['data']['n_features']} features, {len(report['seeds'])} shuffles "
        f"(majority-class error {100 * report['data'].get('majority_error', float('nan')):.2f} %)",
        "",
        f"{'algorithm':<11} {'error %':>15} {'task std':>8} {'F1 pos %':>15} {'F1 neg %':>15} {'seconds':>8}",
    ]
    for row in report["summary"]:
        lines.append(
            f"{row['algorithm']:<11} {_pm(row['error_rate_mean'], row['error_rate_std']):>15} "
            f"{100 * row['error_rate_task_std']:8.2f} {_pm(row['f1_pos_mean'], row['f1_pos_std']):>15} "
            f"{_pm(row['f1_neg_mean'], row['f1_neg_std']):>15} {row['train_seconds_mean']:8.2f}"
            + (f"  ({row['diverged']} diverged)" if row["diverged"] else "")
        )
    for alg, entry in report.get("ablation", {}).items():
        row = entry["summary"]
        lines.append(
            f"{alg + ' lam=0':<11} {_pm(row['error_rate_mean'], row['error_rate_std']):>15} "
            f"{100 * row['error_rate_task_std']:8.2f} {_pm(row['f1_pos_mean'], row['f1_pos_std']):>15} "
            f"{_pm(row['f1_neg_mean'], row['f1_neg_std']):>15} {row['train_seconds_mean']:8.2f}"
            f"  (ablation: lam1 = lam2 = 0, eta1 = {entry['params'].get('eta1')}, eta2 = {entry['params'].get('eta2')})"
        )
    lines += ["", "predictions pooled over tasks, mean over shuffles: undecided = |margin| < 1e-8 (counted as mistakes)",
              f"{'algorithm':<17} {'error %':>8} {'undecided %':>12} {'err undecided %':>16} {'err decided %':>14}"]
    split_rows = [(r["algorithm"], r) for r in report["summary"]]
    split_rows += [(alg + " lam=0", e["summary"]) for alg, e in report.get("ablation", {}).items()]
    for label, row in split_rows:
        lines.append(f"{label:<17} {100 * row['error_pooled_mean']:8.2f} {100 * row['undecided_rate_mean']:12.2f} "
                     f"{100 * row['error_undecided_mean']:16.1f} {100 * row['error_decided_mean']:14.2f}")
    tasks = report["data"]["tasks"]
    if len(tasks) <= 12:
        lines += ["", "per task: cumulative error % (std over shuffles)"]
        head = f"{'algorithm':<11} " + " ".join(f"{t['task'][:12]:>14}" for t in tasks)
        lines.append(head)
        for row in report["summary"]:
            lines.append(f"{row['algorithm']:<11} " + " ".join(
                f"{_pm(p['error_mean'], p['error_std']):>14}" for p in row["per_task"]))
    if report.get("search"):
        lines += ["", f"parameters chosen on held-out shuffle {report.get('search_seed')}:"]
        for alg, s in report["search"].items():
            lines.append(f"  {alg:<11} {json.dumps(s['best'], sort_keys=True)}  ({s['n_trials']} settings)")
    return "\n".join(lines)
