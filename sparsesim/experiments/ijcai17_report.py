"""What the ``ijcai17`` protocol shows: the tables (:func:`format_table`) and the figures
(:func:`write_plots`: AP@k / mAP@k against k as the paper's Figures 1-2, the parameter sensitivity of
Figure 3, active against random queries of Figure 4) of a report of
:func:`sparsesim.experiments.ijcai17.run`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .runner import describe_params, figure, pm, text_table

KS = list(range(1, 11))


def search_means(results: list) -> list[dict]:
    """One row per searched (algorithm, parameters): the mean validation AP@10 over its runs (inner
    folds, outer folds and seeds), in first-seen order."""
    groups: dict = {}
    for r in results:
        key = (r["algorithm"], tuple(sorted((k, v) for k, v in r["params"].items() if isinstance(v, (int, float)))))
        groups.setdefault(key, (r, []))[1].append(r["ap@10"])
    return [{"algorithm": r["algorithm"], "params": r["params"], "ap@10": float(np.mean(v)), "n_runs": len(v)}
            for r, v in groups.values()]



def write_plots(report, out_dir: Path) -> list[str]:
    """PNG figures like the paper's Figures 1-4 into ``out_dir``; returns their paths."""
    name = str(report["dataset"]).replace("/", "_")
    summary = report["summary"]
    paths = [out_dir / f"{name}_ap_map_vs_k.png"]
    with figure(paths[-1], ncols=2, title=f"{report['dataset']}: performance with varied k (mean over tasks and folds)"
                ) as (fig, axes):
        for alg, s in summary.items():
            axes[0].plot(KS, s["ap_curve"], marker="o", label=alg)
            axes[1].plot(KS, s["map_curve"], marker="o", label=alg)
        for ax, what in zip(axes, ("AP@k", "mAP@k")):
            ax.set_xlabel("k")
            ax.set_ylabel(what)
            ax.grid(alpha=0.3)
        axes[0].legend()
    if "search" in report:
        res = search_means(report["search"]["results"])
        paths.append(out_dir / f"{name}_sensitivity.png")
        with figure(paths[-1], ncols=2, title=f"{report['dataset']}: parameter sensitivity (validation split)"
                    ) as (fig, axes):
            om = [r for r in res if r["algorithm"] == "omtrsl"]
            for c in sorted({r["params"]["C"] for r in om}):
                pts = sorted((r["params"]["b"], r["ap@10"]) for r in om if r["params"]["C"] == c)
                axes[0].plot([x for x, _ in pts], [v for _, v in pts], marker="o", label=f"C={c:g}")
            axes[0].set_xlabel("b")
            axes[0].set_title("OMTRSL")
            for alg in ("ostrsl", "ogrsl"):
                pts = sorted((r["params"]["C"], r["ap@10"]) for r in res if r["algorithm"] == alg)
                if pts:
                    axes[1].plot([x for x, _ in pts], [v for _, v in pts], marker="o", label=alg)
            axes[1].set_xlabel("C")
            axes[1].set_title("OSTRSL / OGRSL")
            for ax in axes:
                ax.set_xscale("log")
                ax.set_ylabel("validation AP@10")
                ax.grid(alpha=0.3)
                ax.legend()
    if report.get("active_sweep"):
        pts = report["active_sweep"]
        paths.append(out_dir / f"{name}_active.png")
        with figure(paths[-1], figsize=(5.5, 4)) as (fig, (ax,)):
            ax.plot([p["query_ratio"] for p in pts], [p["active_ap@10"] for p in pts], marker="o",
                    label="omtrsl-active")
            ax.plot([p["query_ratio"] for p in pts], [p["random_ap@10"] for p in pts], marker="s",
                    label="omtrsl-random")
            for alg, style in (("omtrsl", "--"), ("ostrsl", ":"), ("ogrsl", "-.")):
                if alg in summary:
                    ax.axhline(summary[alg]["ap@10"][0], linestyle=style, color="grey", label=f"{alg} (all labels)")
            ax.set_xlabel("query ratio")
            ax.set_ylabel("AP@10")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
            ax.set_title(f"{report['dataset']}: active vs random queries")
    return [str(p) for p in paths]


def format_table(report) -> str:
    """Human-readable tables: AP@10 / mAP@10 / time per algorithm, search and active sweep."""
    only = f"fold(s) {report['only_folds']} of " if report.get("only_folds") else ""
    lines = [f"ijcai17 on {report['dataset']}: {only}{report.get('n_folds')}-fold CV, {report.get('n_triplets')} "
             f"triplets per run, tasks {report.get('tasks')}"]
    resolved = report.get("resolved_params", {})  # the numbers "auto" resolved to (mean over the runs)
    columns = [("algorithm", 15), ("AP@10", 17), ("mAP@10", 17), ("train s", 9), ("updates/s", 11), ("query", 7),
               ("  params", 0)]
    lines += text_table(columns, [
        [alg, pm(s["ap@10"], 4, width=8), pm(s["map@10"], 4, width=8), f"{s['train_seconds'][0]:.2f}",
         f"{s['updates_per_second'][0]:.0f}", f"{s['query_ratio'][0]:.3f}",
         "  " + describe_params(report.get("chosen_params", {}).get(alg) or resolved.get(alg, {}))]
        for alg, s in report["summary"].items()])
    lines.extend(_paired_lines(report.get("results", [])))
    if report.get("paper_table1_seconds"):
        lines.append("paper Table 1 training seconds (Matlab): "
                     + ", ".join(f"{k} {v}" for k, v in report["paper_table1_seconds"].items()))
    if "search" in report:
        lines.append(f"parameter search (validation AP@10, mean over {report['search'].get('search_folds', 1)} "
                     "inner folds of each outer fold's training part and over the outer folds):")
        for r in search_means(report["search"]["results"]):
            lines.append(f"  {r['algorithm']:<8} " + ", ".join(f"{k}={v:g}" for k, v in sorted(r["params"].items())
                                                            if isinstance(v, (int, float)))
                         + f"  AP@10={r['ap@10']:.4f}")
        lines.append(f"  chosen: {report['search']['chosen']}")
    if report.get("active_sweep"):
        lines.append(f"{'delta':>8} {'query ratio':>12} {'active AP@10':>13} {'random AP@10':>13}")
        for p in report["active_sweep"]:
            wins = sum(a > r for a, r in zip(p["active_ap@10_folds"], p["random_ap@10_folds"]))
            lines.append(f"{p['delta']:>8g} {p['query_ratio']:>12.3f} {p['active_ap@10']:>13.4f} {p['random_ap@10']:>13.4f}"
                         f"  active wins {wins}/{len(p['active_ap@10_folds'])}")
    return "\n".join(lines)


_PAIRS = (("omtrsl", "ostrsl"), ("ostrsl", "ogrsl"), ("omtrsl", "ogrsl"), ("omtrsl-active", "omtrsl-random"))


def _paired_lines(results) -> list[str]:
    """Per-seed mean AP@10 of each algorithm, and paired (seed, fold) wins of the paper's comparisons."""
    cv = [r for r in results if r.get("stage", "cv") == "cv"]
    seeds = sorted({r["seed"] for r in cv})
    lines = []
    if len(seeds) > 1:
        for alg in dict.fromkeys(r["algorithm"] for r in cv):
            means = [np.mean([r["ap@10"] for r in cv if r["algorithm"] == alg and r["seed"] == s]) for s in seeds]
            lines.append(f"  {alg:<15} AP@10 per seed {seeds}: " + " ".join(f"{m:.4f}" for m in means))
    key = {(r["algorithm"], r["seed"], r["fold"]): r["ap@10"] for r in cv}
    for a, b in _PAIRS:
        d = np.array([v - key[(b, s, f)] for (x, s, f), v in key.items() if x == a and (b, s, f) in key])
        if d.size:
            lines.append(f"  {a} - {b}: wins {int((d > 0).sum())}/{d.size}, mean diff {d.mean():+.4f}, "
                         f"range [{d.min():+.4f}, {d.max():+.4f}]")
    return lines
