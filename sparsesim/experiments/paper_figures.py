"""The figures of a paper item (:mod:`sparsesim.experiments.paper`): its learning curves, the
figures no protocol draws itself, and our numbers against the paper's."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .runner import figure

__all__ = ["write_figures"]


def write_figures(result: dict, out: Path) -> list[str]:
    """The item's figure: the protocols' own plots (copied by reference) and ``<name>_vs_paper.png``,
    our numbers against the paper's for every judged metric of every attempted row."""
    figures = list(dict.fromkeys(p for run in result["runs"] for p in run.get("plots", [])))
    pairs = [r for r in result["rows"] if r.get("ours") is not None and r.get("paper") is not None
             and r["metric_judged"]]
    curves = [run for run in result["runs"] if run.get("learning_curve")]
    if curves:
        path = out / f"{result['name']}_curve.png"
        with figure(path, ncols=2, title=f"{result['item']}: {result['caption'][:80]}", fontsize=9) as (fig, axes):
            for run in curves:
                lc = run["learning_curve"]
                for alg, c in lc["curves"].items():
                    axes[0].plot(lc["budgets"], [100 * m for m in c["map"]], marker="o", label=f"{alg} ({run['dataset']})")
                for alg, s in lc["sparsity"].items():
                    axes[1].plot(lc["budgets"], [100 * v for v in s], marker="o", label=alg)
            for ax, what in zip(axes, ("MAP (%)", "sparsity of M (%)")):
                ax.set_xscale("log")
                ax.set_xlabel("training triplets (iterations)")
                ax.set_ylabel(what)
                ax.grid(alpha=0.3)
            axes[0].legend(fontsize=7)
        figures.append(str(path))
    kind = result.get("figure")
    if kind:
        path = out / f"{result['name']}_{kind}.png"
        _special_figure(kind, result, path)
        figures.append(str(path))
    if pairs:
        path = out / f"{result['name']}_vs_paper.png"
        labels = [f"{r['column']}\n{r['name']} {r['metric_name']}" for r in pairs]
        with figure(path, figsize=(max(6, 0.45 * len(pairs)), 4.5), title=f"{result['item']}: ours vs the paper",
                    fontsize=10) as (fig, (ax,)):
            x = np.arange(len(pairs))
            ax.bar(x - 0.2, [r["paper"] for r in pairs], width=0.4, label="paper")
            ax.bar(x + 0.2, [r["ours"] for r in pairs], width=0.4, label="sparsesim")
            ax.set_xticks(x)
            ax.set_xticklabels(labels, rotation=90, fontsize=6)
            ax.legend()
            ax.grid(axis="y", alpha=0.3)
        figures.append(str(path))
    return figures


def _special_figure(kind: str, result: dict, path: Path) -> None:
    """The figures no protocol draws itself: a search's scores (CIKM Fig. 2), time against the query
    ratio (CIKM Fig. 4), precision at k (SORS Fig. 2), query time and model size (SORS Fig. 4)."""
    runs = [r for r in result["runs"] if r.get("board") or r.get("points")]
    ncols = max(1, len(runs))
    with figure(path, ncols=ncols, figsize=(4.2 * ncols, 3.8), title=f"{result['item']}: {result['caption'][:90]}",
                fontsize=9) as (fig, axes):
        for ax, run in zip(axes, runs):
            ax.set_title(f"{run['column']} ({run['dataset']})", fontsize=9)
            ax.grid(alpha=0.3)
            if kind == "search":
                for key, s in run.get("search", {}).items():
                    pts = s["scores"]
                    names = sorted({k for p in pts for k in p if k != "ap@10"})
                    if len(names) == 1:
                        ax.plot([p[names[0]] for p in pts], [p["ap@10"] for p in pts], marker="o",
                                label=f"{s['algorithm']} ({names[0]})")
                    else:
                        sc = ax.scatter([p[names[0]] for p in pts], [p["ap@10"] for p in pts],
                                        c=np.log10([p[names[1]] for p in pts]), marker="s", cmap="viridis",
                                        label=f"{s['algorithm']} ({names[0]}; colour log10 {names[1]})")
                        fig.colorbar(sc, ax=ax)
                ax.set_xscale("log")
                ax.set_xlabel("parameter value")
                ax.set_ylabel("validation AP@10 (tuning subset)")
            elif kind == "time_vs_ratio":
                for alg, pts in run.get("points", {}).items():
                    ax.plot([100 * p["query_ratio"] for p in pts], [p["train_seconds"] for p in pts], marker="o",
                            label=alg)
                ax.set_xlabel("query ratio (%)")
                ax.set_ylabel("training seconds")
            elif kind == "precision_at_k":
                for alg, scores in run["board"].items():
                    if "ap_curve" in scores:
                        curve = scores["ap_curve"]
                        ax.plot(range(1, len(curve) + 1), curve, marker="o", label=alg)
                ax.set_xlabel("k")
                ax.set_ylabel("precision at k")
            elif kind == "query_time":
                algs = [a for a, sc in run["board"].items() if "query_seconds" in sc]
                ax.bar(range(len(algs)), [run["board"][a]["query_seconds"][0] for a in algs])
                ax.set_xticks(range(len(algs)))
                ax.set_xticklabels([f"{a}\nnnz {run['board'][a].get('nnz', (0,))[0]:.3g}" for a in algs],
                                   rotation=60, fontsize=7)
                ax.set_ylabel("seconds to rank the test split")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
