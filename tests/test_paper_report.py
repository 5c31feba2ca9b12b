"""The papers' tables and figures as experiment files, and the reproduction report.

* a paper item runs beside the paper's numbers; a learner the registry does not know is "not
  attempted: not registered" and the rest still runs; a table may not score a grid on its test split;
* every shipped item and ``paper-all`` are well formed (every learner they run is a known kind for its
  protocol once registered, every row is typed with the paper's numbers);
* ``paper-all --quick`` (the whole report at the test sizes) runs, every row gets a verdict of the
  rule, and some of its numbers are pinned (deterministic runs: the same seed gives the same model);
* docs/reproduction.md is the markdown of docs/reproduction.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparsesim.exceptions import DataNotFoundError, InvalidInputError
from sparsesim.experiments import load_experiment_file, paper
from sparsesim.experiments.paper_verdicts import VERDICTS, report_markdown
from sparsesim.registry import ALGORITHMS
from clitools import run_cli

DOCS = Path(__file__).resolve().parent.parent / "docs"
CLAIM_VERDICTS = {"holds", "fails", "not attempted: not registered", "not attempted: data unavailable",
                  "not attempted: not run at quick sizes"}


def _item(**paper_overrides):
    spec = {"description": "a small item", "paper": {
        "paper": "sors", "item": "Table X", "kind": "table", "caption": "test",
        "tolerance": 1.0,
        "metrics": [{"key": "map", "name": "MAP (%)", "scale": 100.0, "higher": True, "judged": True},
                    {"key": "train_seconds", "name": "Time (s)", "scale": 1.0, "judged": False}],
        "claims": ["oasis > cosine", "no-such-learner > cosine"],
        "runs": [{"column": "sample", "dataset": "news20-sample", "protocol": "sors",
                  "algorithms": ["cosine", "oasis", "no-such-learner"], "seeds": [0], "triplets": 300,
                  "rows": [{"name": "Cos", "algorithm": "cosine", "map": [30.0, 0.5], "train_seconds": 0},
                           {"name": "OASIS", "algorithm": "oasis", "map": [99.0, 0.1], "train_seconds": 5},
                           {"name": "Missing", "algorithm": "no-such-learner", "map": [50.0, 1.0]}]},
                 {"column": "gone", "dataset": "", "protocol": "sors", "algorithms": [],
                  "rows": [{"name": "OASIS", "algorithm": "oasis", "map": "NA"}]}]}}
    spec["paper"].update(paper_overrides)
    return spec


def test_item_runs_beside_the_paper_and_an_unregistered_learner_is_not_attempted(tmp_path):
    result = paper.run_item(dict(_item(), name="paper-test"), tmp_path)
    by = {(r["column"], r["name"], r["metric"]): r for r in result["rows"]}
    cos = by[("sample", "Cos", "map")]
    # ours is the cosine MAP of the sors protocol on the same split, in the paper's units (%)
    from sparsesim.experiments import ExperimentConfig, run_experiment

    direct = run_experiment("sors", ExperimentConfig(dataset="news20-sample", algorithms=["cosine"], seeds=[0],
                                                     triplets=300))["results"][0]["map"]
    assert cos["ours"] == pytest.approx(100 * direct)
    assert cos["verdict"] == ("reproduces" if abs(100 * direct - 30.0) <= 1.0 else "does not")
    assert by[("sample", "OASIS", "map")]["verdict"] == "does not"  # 99% MAP is not what news20-sample gives
    assert by[("sample", "OASIS", "train_seconds")]["verdict"] == "shown, not judged"
    assert by[("sample", "Missing", "map")]["verdict"] == "not attempted: not registered"
    assert by[("gone", "OASIS", "map")]["verdict"] == "not attempted: data unavailable"
    claims = {(c["column"], c["claim"]): c for c in result["claims"]}
    assert claims[("sample", "no-such-learner > cosine")]["verdict"] == "not attempted: not registered"
    oasis, cosine = claims[("sample", "oasis > cosine")]["ours"]
    assert claims[("sample", "oasis > cosine")]["verdict"] == ("holds" if oasis > cosine else "fails")
    assert claims[("gone", "every stated ordering")]["verdict"] == "not attempted: data unavailable"
    assert result["runs"][0]["not_registered"] == ["no-such-learner"]
    out = tmp_path / "paper-test"
    assert (out / "paper-test.md").read_text().count("| sample |") >= 4
    assert json.loads((out / "paper-test.json").read_text())["counts"] == result["counts"]
    assert (out / "paper-test_vs_paper.png").stat().st_size > 0


_REPORT = {"quick": False, "counts": {"rows": {}, "claims": {}}, "rule": "r", "seconds": 0.0}


def test_a_learning_curve_item_records_its_curves_and_the_machine_load(tmp_path):
    spec = _item(kind="figure", budgets=[100, 200], claims=["sparsity: sors-l1 > oasis"],
                 metrics=[{"key": "map", "name": "MAP (%)", "scale": 100.0, "higher": True, "judged": True}])
    spec["paper"]["runs"] = [{"column": "sample", "dataset": "news20-sample", "protocol": "sors",
                              "algorithms": ["sors-l1", "oasis"], "seeds": [0]}]
    result = paper.run_item(dict(spec, name="paper-curve"), tmp_path)
    load = result["machine"]["load"]
    assert load["samples"] >= 2 and 0 <= load["min"] <= load["mean"] <= load["max"]
    assert result["machine"]["peak_rss_bytes"] > 0
    lc = result["runs"][0]["learning_curve"]
    assert lc["budgets"] == [100, 200] and set(lc["curves"]) == set(lc["sparsity"]) == {"oasis", "sors-l1"}
    page = (tmp_path / "paper-curve" / "paper-curve.md").read_text()
    assert "at a machine load of" in page
    assert page.index("| `sors-l1` |") < page.index("| `oasis` |")  # the run's order, not sorted
    from sparsesim.experiments.paper_verdicts import report_markdown as page_of
    from sparsesim.persistence import dumps_strict

    stored = json.loads(dumps_strict(result, default=float, sort_keys=True))  # as docs/reproduction.json keeps it
    assert page_of({**_REPORT, "items": [stored]}) == page_of({**_REPORT, "items": [result]})
    from sparsesim.experiments.paper_verdicts import item_markdown

    shared = item_markdown(dict(result, figures=["a/curve.png", "a/curve.png", "a/other.png"]))
    assert "Figures: `curve.png`, `other.png`" in shared  # a file the runs share is named once
    sors = lc["curves"]["sors-l1"]["map"]
    assert (f"| `sors-l1` | {100 * sors[0]:.1f} / {100 * lc['sparsity']['sors-l1'][0]:.2f} | "
            f"{100 * sors[1]:.1f} / {100 * lc['sparsity']['sors-l1'][1]:.2f} |") in page
    # the ordering is judged at the largest budget, on the sparsity
    claim = result["claims"][0]
    assert claim["ours"] == pytest.approx([lc["sparsity"]["sors-l1"][1], lc["sparsity"]["oasis"][1]])


def test_machine_load_samples_while_the_block_runs():
    import time

    with paper.machine_load(every=0.02) as machine:
        assert machine == {}  # filled in when the block ends
        time.sleep(0.2)
    assert machine["load"]["samples"] >= 4


def test_item_file_through_the_cli(tmp_path, monkeypatch, capsys):
    path = tmp_path / "paper-small.json"
    path.write_text(json.dumps(_item()))
    code, out, err = run_cli(["experiment", "--config", path, "--out-dir", tmp_path / "out", "--quick"],
                             monkeypatch, capsys)
    assert code == 0, err
    assert "Table X" in out and "not attempted: not registered" in out
    assert (tmp_path / "out" / "paper-small" / "paper-small.md").is_file()
    code, out, err = run_cli(["experiment", "--config", path, "--dataset", "news20-sample"], monkeypatch, capsys)
    assert code == 2 and err.startswith("error: ") and "--dataset" in err and "Traceback" not in err
    code, out, err = run_cli(["experiment", "--dataset", "news20-sample", "--algorithms", "cosine", "--quick"],
                             monkeypatch, capsys)
    assert code == 2 and "--quick" in err


def test_a_table_may_not_score_a_grid_on_its_test_split():
    spec = _item()
    spec["paper"]["runs"][0]["options"] = {"grid": {"C": [0.1, 1.0]}}
    with pytest.raises(InvalidInputError, match="test split"):
        paper.check_item(spec)
    spec["paper"]["runs"][0]["options"] = {"grid": {"C": [0.1, 1.0]}, "tune": True}
    paper.check_item(spec)  # with tune the grid is the search's, on the training split
    spec["paper"]["runs"][0]["quick"] = {"options": {"grid": {"C": [0.1]}}}
    with pytest.raises(InvalidInputError, match="test split"):
        paper.check_item(spec)
    with pytest.raises(InvalidInputError, match="unknown"):
        paper.check_item(_item(colour="red"))
    figure = _item(kind="figure")  # a figure's rows beside the paper's numbers are held to the same rule ...
    figure["paper"]["runs"][0]["options"] = {"scale": {"C": [0.5, 2.0]}}
    with pytest.raises(InvalidInputError, match="test split"):
        paper.check_item(figure)
    del figure["paper"]["runs"][0]["rows"]  # ... a sweep drawn as a figure, with no row judged, is not
    paper.check_item(figure)


def test_paper_runs_state_the_papers_settings(monkeypatch):
    """A change of the library's defaults (the sampler, the model-size bound) cannot move a paper run:
    the run passes the papers' values explicitly; a value the file sets (per learner or "*") wins."""
    from sparsesim.learners.bilinear import OASIS

    monkeypatch.setattr(OASIS.__init__, "__defaults__", tuple(
        "semihard" if v == "uniform" else v for v in OASIS.__init__.__defaults__))
    assert ALGORITHMS["oasis"].make().get_params()["sampler"] == "semihard"  # the default moved ...
    params = paper.paper_params(["oasis", "sors-l1", "cosine"], {"sors-l1": {"max_model_bytes": "400MB"},
                                                                 "*": {"n_passes": 2}})
    est = ALGORITHMS["oasis"].make(**{**params.get("*", {}), **params["oasis"]})
    assert est.get_params()["sampler"] == "uniform"  # ... the paper run's does not
    assert est.get_params()["max_model_bytes"] is None and est.get_params()["n_passes"] == 2
    assert params["sors-l1"]["max_model_bytes"] == "400MB" and "n_passes" not in params["sors-l1"]
    assert params["sors-l1"]["schedule"] == "constant"  # Algorithm 1's step, not schedule="auto"
    assert "cosine" not in params


@pytest.mark.parametrize("name", paper.paper_items())
def test_shipped_paper_items_are_well_formed(name):
    spec = load_experiment_file(name)
    item = paper.check_item(spec, name)
    assert spec.get("description") and item["item"] and item["caption"]
    assert name in load_experiment_file("paper-all")["include"]
    keys = {m["key"] for m in item["metrics"]}
    for run in item["runs"]:
        assert run.get("column")
        for row in run.get("rows", []):
            assert set(row) - {"name", "algorithm"} <= keys, (name, row)
        if run.get("dataset"):
            for alg in run["algorithms"]:
                assert alg in ALGORITHMS, (name, alg)
        else:
            assert run.get("substitution"), name  # an unavailable data set says so


def test_cikm15_table2_is_fig1_at_the_target_ratio():
    """Table 2 runs exactly Fig. 1's settings (full curves on every fold), so paper-all runs them once and
    Table 2 reads its rows off Fig. 1's runs; only the column names and notes may differ."""
    def runs(name):
        return [{k: v for k, v in run.items() if k not in ("substitution", "note")}
                for run in load_experiment_file(name)["paper"]["runs"]]

    fig1, table2 = runs("paper-cikm15-fig1"), runs("paper-cikm15-table2")
    assert fig1 == table2
    assert all(run["options"].get("curve") for run in fig1)  # the full size sweeps delta on every fold
    every = load_experiment_file("paper-all")["include"]
    assert every.index("paper-cikm15-fig1") < every.index("paper-cikm15-table2")


def test_paper_all_quick(tmp_path):
    """The whole report at the test sizes: every row judged by the rule; pinned numbers."""
    try:
        report = paper.run_all(tmp_path, quick=True)
    except DataNotFoundError as exc:
        pytest.skip(f"a data set of the quick report is not available: {exc}")
    assert [it["name"] for it in report["items"]] == load_experiment_file("paper-all")["include"]
    assert (tmp_path / "reproduction.md").read_text() == report_markdown(json.loads(
        (tmp_path / "reproduction.json").read_text()))
    rows = [r for it in report["items"] for r in it["rows"]]
    claims = [c for it in report["items"] for c in it["claims"]]
    assert {r["verdict"] for r in rows} <= set(VERDICTS)
    assert {c["verdict"] for c in claims} <= CLAIM_VERDICTS
    for r in rows:
        if r["algorithm"] not in ALGORITHMS:
            assert r["verdict"] == "not attempted: not registered"
        if not r["metric_judged"] and r["ours"] is not None:
            assert r["verdict"] in ("shown, not judged", "paper: not reported")
        if r["verdict"] in ("reproduces", "does not"):
            assert abs(r["ours"] - r["paper"]) <= r["bound"] + 1e-12 or r["verdict"] == "does not"
    items = {it["name"]: it for it in report["items"]}
    sors = items["paper-sors-table2"]
    gisette = [r for r in sors["rows"] if r["column"] == "Gisette"]
    assert gisette and {r["verdict"] for r in gisette} <= {"not attempted: data unavailable",
                                                          "not attempted: not registered"}
    protein = [r for r in sors["rows"] if r["column"] == "Protein" and r["metric"] == "map"
               and r["algorithm"] in ("oasis", "sors-l1")]
    assert {r["verdict"] for r in protein} == {"not comparable: data substituted"}
    # every item that ran at quick sizes wrote its markdown and a figure
    for it in report["items"]:
        assert (tmp_path / it["name"] / f"{it['name']}.md").is_file()
    reference = json.loads((Path(__file__).parent / "references" / "paper_quick.json").read_text())
    pinned = _pinned(report)
    assert pinned.keys() == reference.keys()
    # ROMCO's online learners on the MHC-I slice are mistake-driven: a last-bit floating-point
    # difference between machines (the one the reference was recorded on vs an AMD EPYC) changes
    # which examples update the model, and the quick slice's rates move by up to 4.2 points
    # (OMTLVON error 40.0 vs 37.2); pinned within 6 points there, to 1e-6 everywhere else
    chaotic = {k for k in reference if k.startswith("paper-romco-table4|MHC-I|")}
    assert {k: v for k, v in pinned.items() if k not in chaotic} == pytest.approx(
        {k: v for k, v in reference.items() if k not in chaotic})
    for k in chaotic:
        assert abs(pinned[k] - reference[k]) <= 6.0, (k, pinned[k], reference[k])


def _pinned(report) -> dict:
    """A few of the quick report's numbers (ours, in the paper's units)."""
    out = {}
    for it in report["items"]:
        if it["name"] in ("paper-sors-table2", "paper-cikm15-table2", "paper-romco-table4", "paper-oht-fig1"):
            for r in it["rows"]:
                if r["ours"] is not None and r["metric_judged"]:
                    out[f"{it['name']}|{r['column']}|{r['name']}|{r['metric']}"] = r["ours"]
    return out


def test_reproduction_page_is_the_report():
    data = json.loads((DOCS / "reproduction.json").read_text())
    assert (DOCS / "reproduction.md").read_text() == report_markdown(data)


if __name__ == "__main__":  # record the pinned numbers: SPARSESIM_DATA=... python tests/test_paper_report.py
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        rep = paper.run_all(Path(tmp), quick=True)
    target = Path(__file__).parent / "references" / "paper_quick.json"
    target.write_text(json.dumps(_pinned(rep), indent=1, sort_keys=True) + "\n")
    print(f"wrote {target}")
