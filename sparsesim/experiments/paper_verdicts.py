"""Verdicts of the reproduction report: every paper row against ours, the paper's stated orderings,
and the markdown of an item and of the whole report (:mod:`sparsesim.experiments.paper`).

The rule (:data:`RULE`):

* a number **reproduces** when ``|ours - paper| <= max(tolerance, 2 x paper std, 2 x our std)``
  (in the paper's units; ``tolerance`` is the item's, e.g. 2 MAP points) and **does not** otherwise;
* it is **not comparable** when the paper's data set is unavailable and another stands in (the
  numbers are shown; the orderings are still judged);
* times are shown and never judged (other machines, other languages);
* **not attempted**: the learner is not registered, refuses the data's size (mtLMNN above its
  ``max_features``, asked before the run), no data set is available, or (``--quick``) the run has
  no quick form;
* a stated ordering (``"a > b"``) **holds** when our means are in that order;
* the **ordering** of a column: the share of row pairs (the first judged metric) that our numbers
  order as the paper's do; it reproduces at 80% of the pairs or more.
"""

from __future__ import annotations

import math

RULE = ("a number reproduces when |ours - paper| <= max(tolerance, 2 x paper std, 2 x our std) in the paper's "
        "units; not comparable when another data set stands in for the paper's; times are shown, never judged; "
        "a stated ordering holds when our means are in that order; a column's ordering reproduces when at least "
        "80% of the row pairs are ordered as in the paper")
ORDER_SHARE = 0.8
VERDICTS = ("reproduces", "does not", "not comparable: data substituted", "shown, not judged",
            "paper: not reported", "not attempted: not registered", "not attempted: data unavailable",
            "not attempted: not measured", "not attempted: not run at quick sizes",
            "not attempted: the learner refuses the data's size")


def _metric(item: dict, key: str) -> dict:
    for m in item.get("metrics", []):
        if m["key"] == key:
            return m
    return {"key": key, "name": key, "scale": 1.0, "higher": True, "judged": True}


def _pair(value):
    if isinstance(value, str):
        return None
    if isinstance(value, (int, float)):
        return float(value), 0.0
    return float(value[0]), float(value[1]) if len(value) > 1 else 0.0


def judge_rows(item: dict, run: dict, entry: dict, board: dict) -> list[dict]:
    """One judged entry per paper row and metric of ``run``."""
    out = []
    tol = float(item.get("tolerance") or 0.0)
    for row in run.get("rows", []):
        alg = row["algorithm"]
        for m in item.get("metrics", []):
            key = m["key"]
            if key not in row:
                continue
            paper = _pair(row[key])
            scale = float(m.get("scale", 1.0))
            ours = board.get(alg, {}).get(key)
            rec = {"column": entry["column"], "dataset": entry["dataset"], "name": row["name"], "algorithm": alg,
                   "metric": key, "metric_name": m.get("name", key), "metric_judged": bool(m.get("judged", True)),
                   "paper": None if paper is None else paper[0], "paper_std": None if paper is None else paper[1],
                   "ours": None, "ours_std": None}
            if ours is not None and not (isinstance(ours[0], float) and math.isnan(ours[0])):
                rec["ours"], rec["ours_std"] = scale * float(ours[0]), scale * float(ours[1] if ours[1] == ours[1] else 0)
            if alg in entry["not_registered"]:
                verdict = "not attempted: not registered"
            elif alg in entry.get("refused", {}):
                verdict = "not attempted: the learner refuses the data's size"
            elif entry.get("skipped") or alg in entry.get("left_out", ()):
                verdict = "not attempted: not run at quick sizes"
            elif not entry["dataset"]:
                verdict = "not attempted: data unavailable"
            elif rec["ours"] is None:
                verdict = "not attempted: not measured"
            elif paper is None:
                verdict = "paper: not reported"
            elif not m.get("judged", True):
                verdict = "shown, not judged"
            elif entry["substitution"]:
                verdict = "not comparable: data substituted"
            else:
                bound = max(float(m.get("tolerance", tol)), 2 * rec["paper_std"], 2 * rec["ours_std"])
                rec["bound"] = bound
                verdict = "reproduces" if abs(rec["ours"] - rec["paper"]) <= bound + 1e-12 else "does not"
            rec["verdict"] = verdict
            out.append(rec)
    return out


def _parse_claim(claim: str, default_metric: str):
    metric, _, body = claim.rpartition(":")
    metric = metric.strip() or default_metric
    for op in (">=", "<=", ">", "<"):
        if op in body:
            a, b = (s.strip() for s in body.split(op, 1))
            return metric, a, op, b
    raise ValueError(f"claim {claim!r}: expected 'a > b' or 'metric: a < b'")


def judge_claims(item: dict, run: dict, entry: dict, board: dict) -> list[dict]:
    """The item's stated orderings on this run's numbers, and the ordering of its rows."""
    judged = [m for m in item.get("metrics", []) if m.get("judged", True)]
    primary = judged[0]["key"] if judged else "map"
    out = []
    if item.get("claims") and (entry.get("skipped") or not entry["dataset"]):
        return [{"column": entry["column"], "claim": "every stated ordering", "metric": primary,
                 "verdict": "not attempted: not run at quick sizes" if entry.get("skipped") and entry["dataset"]
                 else "not attempted: data unavailable"}]
    for claim in item.get("claims", []):
        metric, a, op, b = _parse_claim(claim, primary)
        rec = {"column": entry["column"], "claim": claim, "metric": metric}
        if a in entry["not_registered"] or b in entry["not_registered"]:
            rec["verdict"] = "not attempted: not registered"
        elif a in entry.get("refused", {}) or b in entry.get("refused", {}):
            rec["verdict"] = "not attempted: the learner refuses the data's size"
        elif metric not in board.get(a, {}) or metric not in board.get(b, {}):
            continue  # the claim is about learners this run does not have
        else:
            va, vb = board[a][metric][0], board[b][metric][0]
            ok = {">": va > vb, "<": va < vb, ">=": va >= vb, "<=": va <= vb}[op]
            rec.update(ours=[va, vb], verdict="holds" if ok else "fails")
        out.append(rec)
    if judged and entry["dataset"] and not entry.get("skipped") and run.get("rows"):
        m = judged[0]
        pts = []
        for row in run["rows"]:
            p = _pair(row.get(m["key"], "NA")) if m["key"] in row else None
            ours = board.get(row["algorithm"], {}).get(m["key"])
            if p is not None and ours is not None and row["algorithm"] not in entry["not_registered"]:
                pts.append((row["name"], p[0], float(ours[0])))
        pairs = [(x, y) for i, x in enumerate(pts) for y in pts[i + 1:] if x[1] != y[1]]
        if len(pairs) >= 1:
            agree = sum((x[1] - y[1]) * (x[2] - y[2]) > 0 for x, y in pairs)
            share = agree / len(pairs)
            out.append({"column": entry["column"], "claim": f"ordering of the rows by {m.get('name', m['key'])}",
                        "metric": m["key"], "ours": [agree, len(pairs)],
                        "verdict": "holds" if share >= ORDER_SHARE else "fails"})
    return out


def count(rows: list, claims: list) -> dict:
    """How many row entries and claims got each verdict."""
    out: dict = {"rows": {}, "claims": {}}
    for r in rows:
        out["rows"][r["verdict"]] = out["rows"].get(r["verdict"], 0) + 1
    for c in claims:
        out["claims"][c["verdict"]] = out["claims"].get(c["verdict"], 0) + 1
    return out


def total_counts(items: list) -> dict:
    out: dict = {"rows": {}, "claims": {}}
    for it in items:
        for part in ("rows", "claims"):
            for k, v in it["counts"][part].items():
                out[part][k] = out[part].get(k, 0) + v
    return out


def _num(value, std=None) -> str:
    if value is None:
        return "—"
    digits = 3 if abs(value) < 10 else 2
    text = f"{value:.{digits}f}"
    if std:
        text += f" ± {std:.{digits}f}"
    return text


def _machine_text(machine: dict | None) -> str:
    """`` wall at a load of ...`` from :func:`sparsesim.experiments.paper.machine_load`'s record."""
    if not machine or not machine.get("load"):
        return ""
    load = machine["load"]
    text = (f", at a machine load of {load['min']:.1f}-{load['max']:.1f} (mean {load['mean']:.1f}; "
            f"1-minute load average, {load['samples']} samples)")
    if machine.get("peak_rss_bytes"):
        text += f"; process peak resident memory {machine['peak_rss_bytes'] / 2**30:.2f} GiB"
    return text


def _curve_table(run: dict) -> list[str]:
    """A learning-curve run's MAP and sparsity of M (%) per learner at every budget."""
    lc = run.get("learning_curve")
    if not lc:
        return []
    budgets = lc["budgets"]
    lines = ["", f"{run['column']} ({run['dataset']}): MAP (%) / sparsity of M (%) after n training triplets", "",
             "| learner | " + " | ".join(f"{b:,}" for b in budgets) + " |", "|---|" + "---:|" * len(budgets)]
    order = [a for a in run.get("algorithms", []) if a in lc["curves"]]  # the run's order (the JSON sorts keys)
    for alg in order + sorted(a for a in lc["curves"] if a not in order):
        curve = lc["curves"][alg]
        sparsity = lc.get("sparsity", {}).get(alg) or [None] * len(budgets)
        cells = [f"{100 * m:.1f} / {100 * s:.2f}" if s is not None else f"{100 * m:.1f}"
                 for m, s in zip(curve["map"], sparsity)]
        lines.append(f"| `{alg}` | " + " | ".join(cells) + " |")
    return lines


def _resumed_text(jobs: dict | None) -> str:
    """What of the item came from an earlier, stopped run (``sparsesim experiment --resume``)."""
    if not jobs or not jobs.get("jobs_reused"):
        return ""
    return (f"; resumed: {jobs['jobs_reused']} of its {jobs['jobs_reused'] + jobs['jobs_run']} runs were read from "
            f"an earlier, stopped run of the same code, whose {jobs['reused_compute_seconds']:.0f} s of compute "
            "the time above does not include")


def item_markdown(result: dict, level: int = 2) -> str:
    """The item's table: every paper row beside ours with its verdict, the stated orderings, the runs."""
    h = "#" * level
    lines = [f"{h} {result['item']} — {result['citation']}", ""]
    if result.get("caption"):
        lines += [f"*{result['caption']}*", ""]
    lines += [f"Experiment file `{result['name']}` (`sparsesim experiment --config {result['name']}"
              f"{' --quick' if result['quick'] else ''}`); {result['seconds']:.1f} s"
              f"{' (quick sizes)' if result['quick'] else ''}{_machine_text(result.get('machine'))}"
              f"{_resumed_text(result.get('job_store'))}.", ""]
    if result.get("note"):
        lines += [result["note"], ""]
    for run in result["runs"]:
        what = run["dataset"] or "not run (data unavailable)"
        sub = f" — substitution: {run['substitution']}" if run["substitution"] else ""
        lines.append(f"* **{run['column']}**: {what}{sub}; selection: {run.get('selection', '—')}"
                     + (f"; not registered: {', '.join(run['not_registered'])}" if run["not_registered"] else "")
                     + "".join(f"; `{a}` not run: {why}" for a, why in (run.get("refused") or {}).items())
                     + (f"; {run['seconds']:.1f} s" if run.get("seconds") is not None else "")
                     + (" (the same run as an earlier item's, reused)" if run.get("reused") else ""))
    if result["rows"]:
        lines += ["", "| data | row | metric | paper | ours | verdict |", "|---|---|---|---:|---:|---|"]
        for r in result["rows"]:
            lines.append(f"| {r['column']} | {r['name']} (`{r['algorithm']}`) | {r['metric_name']} | "
                         f"{_num(r['paper'], r['paper_std'])} | {_num(r['ours'], r['ours_std'])} | {r['verdict']} |")
    if result["claims"]:
        lines += ["", "| data | the paper's ordering | ours | verdict |", "|---|---|---|---|"]
        for c in result["claims"]:
            ours = c.get("ours")
            if ours and c["claim"].startswith("ordering"):
                ours = f"{ours[0]} of {ours[1]} pairs"
            elif ours:
                ours = f"{_num(ours[0])} vs {_num(ours[1])}"
            lines.append(f"| {c['column']} | {c['claim']} | {ours or '—'} | {c['verdict']} |")
    for run in result["runs"]:
        lines += _curve_table(run)
    figs = result.get("figures") or []
    if figs:
        lines += ["", "Figures: " + ", ".join(f"`{f}`" for f in dict.fromkeys(f.split('/')[-1] for f in figs))]
    return "\n".join(lines) + "\n"


def report_markdown(report: dict) -> str:
    """The whole reproduction report: totals, then every item."""
    c = report["counts"]
    quick = " --quick" if report["quick"] else ""
    lines = ["# Reproduction report: the five papers' tables and figures", "",
             "Every table and figure of the five papers is one experiment file shipped with sparsesim; "
             "each runs its paper's protocol and writes the table with the paper's numbers beside ours, "
             "a verdict per row, and the figure. This page is generated from the report's JSON "
             "(`docs/reproduction.json`); regenerate both with", "",
             "```bash", f"SPARSESIM_DATA=/path/to/data sparsesim experiment --config paper-all --out-dir DIR{quick}",
             "```", "",
             f"{'Quick sizes (the test-suite form)' if report['quick'] else 'Full sizes'}; "
             f"{len(report['items'])} items; {report['seconds']:.0f} s wall in all.", "",
             f"**Verdict rule**: {report['rule']}.", "",
             "| verdict | row numbers | | verdict | stated orderings |", "|---|---:|---|---|---:|"]
    rows, claims = sorted(c["rows"].items()), sorted(c["claims"].items())
    for i in range(max(len(rows), len(claims))):
        a = rows[i] if i < len(rows) else ("", "")
        b = claims[i] if i < len(claims) else ("", "")
        lines.append(f"| {a[0]} | {a[1]} | | {b[0]} | {b[1]} |")
    lines += ["", "| experiment file | paper | table / figure | reproduces | does not | not comparable | "
              "not attempted | orderings hold / fail | s |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for it in report["items"]:
        rc, cc = it["counts"]["rows"], it["counts"]["claims"]
        lines.append(f"| `{it['name']}` | {it['paper']} | {it['item']} | {rc.get('reproduces', 0)} | "
                     f"{rc.get('does not', 0)} | {rc.get('not comparable: data substituted', 0)} | "
                     f"{sum(v for k, v in rc.items() if k.startswith('not attempted'))} | "
                     f"{cc.get('holds', 0)} / {cc.get('fails', 0)} | {it['seconds']:.0f} |")
    if report.get("not_run"):
        lines += ["", f"Not in this report ({len(report['not_run'])} of "
                  f"{len(report['not_run']) + len(report['items'])} items; each runs with "
                  "`sparsesim experiment --config NAME`, and its quick form runs in the test suite): "
                  + ", ".join(f"`{n}`" for n in report["not_run"]) + "."]
        notes = report.get("full_size") or {}
        if notes:
            lines += ["", "What of them has run, and why not at the papers' sizes:", ""]
            lines += [f"* `{n}`: {notes[n]}" for n in report["not_run"] if n in notes]
    lines.append("")
    for it in report["items"]:
        lines.append(item_markdown(it, level=2))
    return "\n".join(lines)
