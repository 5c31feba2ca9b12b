"""What the ``cikm15`` protocol shows: Table 2 beside the paper's numbers, Fig. 1's curves.

:func:`format_table` prints the protocol's table (query ratio, AP@10, mAP@10 and training time,
mean ± std over folds, at the delta closest to the target query ratio) with the paper's Table 2
row beside each learner; :func:`plot_curves` draws Fig. 1 (AP@10 and mAP@10 against the query
ratio, passive learners as horizontal lines) from the report's runs.
"""

from __future__ import annotations

import numpy as np

from .runner import figure, pm, text_table

# Table 2 of the paper (query %, AP@10, mAP@10) at about 20% queries.
PAPER_TABLE2 = {
    "covtype": {"pars": (20.62, 0.446, 0.334), "paas": (20.71, 0.512, 0.409),
                "cwrs": (20.96, 0.585, 0.476), "cwas": (20.89, 0.624, 0.515)},
    "letter": {"pars": (20.6, 0.198, 0.127), "paas": (20.6, 0.233, 0.158),
               "cwrs": (19.4, 0.362, 0.276), "cwas": (19.4, 0.385, 0.298)},
    "pendigits": {"pars": (22.2, 0.527, 0.418), "paas": (22.2, 0.554, 0.452),
                  "cwrs": (19.3, 0.673, 0.588), "cwas": (19.3, 0.700, 0.619)},
    "satimage": {"pars": (20.4, 0.493, 0.408), "paas": (20.5, 0.509, 0.423),
                 "cwrs": (19.6, 0.643, 0.560), "cwas": (19.5, 0.657, 0.574)},
    "segment": {"pars": (21.2, 0.361, 0.253), "paas": (21.2, 0.436, 0.316),
                "cwrs": (19.2, 0.690, 0.575), "cwas": (19.2, 0.787, 0.729)},
    "shuttle": {"pars": (21.07, 0.435, 0.313), "paas": (20.64, 0.513, 0.403),
                "cwrs": (20.25, 0.502, 0.417), "cwas": (20.84, 0.561, 0.493)},
}


def curves(report):
    """Per algorithm: sorted (mean query ratio, mean AP@10, mean mAP@10) over deltas."""
    out = {}
    for r in report["results"]:
        key = (r["algorithm"], r["delta"] if r["role"] != "passive" else None)
        out.setdefault(key, []).append(r)
    by_algo: dict[str, list] = {}
    for (algo, dl), rs in out.items():
        by_algo.setdefault(algo, []).append((np.mean([r["query_ratio"] for r in rs]),
                                             np.mean([r["ap@10"] for r in rs]),
                                             np.mean([r["map@10"] for r in rs]), len(rs)))
    return {a: sorted(v) for a, v in by_algo.items()}


def vs_passive(results, passive_of, compare) -> dict:
    """Each active learner against its passive version (``passive_of``: active -> passive) at
    ``compare`` queries (the Fig. 1 claim), AP@10 interpolated on the active learner's curve."""
    cur = curves({"results": results})
    out = {}
    for a, p in passive_of.items():
        if a in cur and p in cur:
            pts = cur[a]
            qs = [q for q, *_ in pts]
            if min(qs) <= compare <= max(qs):
                ap = float(np.interp(compare, qs, [x[1] for x in pts]))
                mp = float(np.interp(compare, qs, [x[2] for x in pts]))
                out[a] = {"passive": p, "query_ratio": compare, "ap@10": ap, "map@10": mp,
                          "passive_ap@10": float(cur[p][0][1]), "passive_map@10": float(cur[p][0][2]),
                          "ap@10_fraction": ap / cur[p][0][1] if cur[p][0][1] else float("nan")}
    return out


STYLE = {"paas": ("tab:blue", "-o"), "pars": ("tab:blue", "--s"), "cwas": ("tab:red", "-o"),
         "cwrs": ("tab:red", "--s"), "cwas-d": ("tab:purple", "-o"), "cwrs-d": ("tab:purple", "--s"),
         "oasis": ("tab:blue", ":"), "cws": ("tab:red", ":"), "cws-d": ("tab:purple", ":"),
         "aroma": ("tab:green", ":"), "aroma-d": ("tab:olive", ":")}


def plot_curves(report, path):
    """Fig. 1-style plot: AP@10 and mAP@10 against the query ratio (passive learners as lines)."""
    data = curves(report)
    passive = {r["algorithm"] for r in report["results"] if r["role"] == "passive"}
    sweep = "mean over folds" if report.get("settings", {}).get("curve", True) else \
        "sweep on fold 0, chosen delta over all folds"
    title = (f"{report['dataset']}: cikm15 protocol, {sweep}\n"
             f"(grey line: 30% queries; sparse dotted: 95% of the passive learner)")
    with figure(path, ncols=2, title=title, fontsize=10) as (fig, axes):
        # the Fig. 1 claim: at ~30% queries the active learner is close to its passive version
        for a, v in report.get("vs_passive", {}).items():
            color = STYLE.get(a, ("black", "-"))[0]
            axes[0].plot([100 * v["query_ratio"]], [v["ap@10"]], marker="*", markersize=12, color=color,
                         linestyle="none", label=f"{a.upper()} at {100 * v['query_ratio']:.0f}%: "
                                                 f"{100 * v['ap@10_fraction']:.1f}% of {v['passive'].upper()}")
            axes[0].axhline(0.95 * v["passive_ap@10"], color=color, linestyle=(0, (1, 4)), linewidth=0.8)
        for ax, idx, label in ((axes[0], 1, "AP@10"), (axes[1], 2, "mAP@10")):
            if report.get("vs_passive"):
                ax.axvline(100 * next(iter(report["vs_passive"].values()))["query_ratio"], color="gray",
                           linewidth=0.8, alpha=0.6)
            for algo, pts in data.items():
                color, style = STYLE.get(algo, ("black", "-"))
                if algo in passive:
                    ax.axhline(pts[0][idx], color=color, linestyle=":", label=algo.upper())
                else:
                    ax.plot([100 * p[0] for p in pts], [p[idx] for p in pts], style, color=color,
                            label=algo.upper(), markersize=4)
            ax.set_xlabel("query ratio (%)")
            ax.set_ylabel(label)
            ax.set_xscale("log")
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=7)
    return path


def _pow2(value) -> str:
    e = float(np.log2(value))
    return f"2^{round(e)}" if abs(e - round(e)) < 1e-9 else f"2^{e:.2f}"


def format_table(report) -> str:
    """Table 2 style: query %, AP@10, mAP@10, time (mean +- std over folds), with the paper's numbers."""
    paper = report.get("paper") or {}
    settings = report["settings"]
    lines = [f"cikm15 on {report['dataset']} (target query ratio {100 * report['target_query_ratio']:.0f}%; "
             f"{settings['n_instances']} instances, {settings['n_triplets']} triplets, {settings['folds']}-fold CV)"]
    width = max([9] + [len(k) for k in report["table"]])
    columns = [("algorithm", width), ("delta", 8), ("query %", 15), ("AP@10", 15), ("mAP@10", 15),
               ("time (s)", 15), ("updates/s", 10), ("  paper (query %, AP@10, mAP@10)", 0)]
    rows = []
    for name, e in report["table"].items():
        ref = paper.get(name)
        rows.append([name, "-" if e["delta"] is None else _pow2(e["delta"]), pm(e["query_ratio"], 1, 100, 7),
                     pm(e["ap@10"]), pm(e["map@10"]), pm(e["train_seconds"]),
                     f"{e['updates_per_second'][0]:.0f}", f"  {ref[0]:.1f}, {ref[1]:.3f}, {ref[2]:.3f}" if ref else ""])
    lines += text_table(columns, rows)
    for a, v in report.get("vs_passive", {}).items():
        lines.append(f"{a} at {100 * v['query_ratio']:.0f}% queries (interpolated): AP@10 {v['ap@10']:.3f} = "
                     f"{100 * v['ap@10_fraction']:.1f}% of {v['passive']} ({v['passive_ap@10']:.3f})")
    for fam, s in report.get("search", {}).items():
        best = ", ".join(f"{k}={v:g}" for k, v in s["best"].items())
        lines.append(f"search {fam}: {s['algorithm']} best {best} (AP@10 {s['best_ap@10']:.3f} on "
                     f"{s['tuning_documents']} tuning documents, {s.get('folds', 1)} fold(s), "
                     f"{s['n_evaluated']} settings)")
    if report.get("plot"):
        lines.append(f"plot: {report['plot']}")
    return "\n".join(lines)
