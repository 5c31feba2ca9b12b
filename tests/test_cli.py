"""The CLI end to end on the embedded sample, and its handling of bad input."""

import json
import sys

import numpy as np
import pytest

from sparsesim.cli.app import main
from clitools import run_cli


def assert_clean_error(result, fragment):
    code, out, err = result
    assert code == 2, (code, out, err)
    assert "Traceback" not in err
    assert err.startswith("error: ") and fragment in err, err


@pytest.fixture(scope="module")
def sample_svm(tmp_path_factory):
    from sklearn.datasets import dump_svmlight_file

    from sparsesim.data import load_dataset

    data = load_dataset("news20-sample")
    path = tmp_path_factory.mktemp("svm") / "queries.svm"
    dump_svmlight_file(data.X[:3], data.y[:3], str(path), zero_based=False)
    return path, data


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    model = tmp_path_factory.mktemp("model") / "oasis.npz"
    sys_argv = sys.argv
    sys.argv = ["sparsesim", "train", "--algorithm", "oasis", "--dataset", "news20-sample", "--triplets", "400",
                "--seed", "1", "--out", str(model), "--json"]
    try:
        main()
    finally:
        sys.argv = sys_argv
    return model


def test_train_evaluate_query(trained, sample_svm, monkeypatch, capsys):
    assert trained.is_file()
    code, out, _ = run_cli(["evaluate", "--model", trained, "--dataset", "news20-sample", "--json"], monkeypatch, capsys)
    assert code == 0
    res = json.loads(out)
    assert res["split"] == "test" and 0 < res["map"] <= 1 and "ap@10" in res and "map@10" in res
    path, data = sample_svm
    code, out, _ = run_cli(["query", "--model", trained, "--corpus", "news20-sample", "--queries", path,
                            "--top-k", "4", "--json"], monkeypatch, capsys)
    assert code == 0
    lines = [json.loads(line) for line in out.strip().splitlines()]
    assert [line["query"] for line in lines] == [0, 1, 2]
    for line in lines:
        scores = [r["score"] for r in line["results"]]
        assert len(scores) == 4 and scores == sorted(scores, reverse=True)
    # the reported scores are the exact bilinear scores, and nothing outside the list scores higher
    from sparsesim.models import BilinearSimilarity

    scores = BilinearSimilarity.load(trained).score_matrix(data.X[:3], data.X)
    id_to_row = {data.doc_id(r): r for r in range(data.n_documents)}
    for q, line in enumerate(lines):
        rows = [id_to_row[r["id"]] for r in line["results"]]
        np.testing.assert_allclose([r["score"] for r in line["results"]], scores[q, rows], rtol=1e-12)
        assert np.sort(scores[q])[::-1][3] == pytest.approx(line["results"][3]["score"])
    code, out, _ = run_cli(["query", "--model", trained, "--corpus", "news20-sample", "--query-ids", "5",
                            "--top-k", "3", "--json"], monkeypatch, capsys)
    assert code == 0 and data.doc_id(5) not in [r["id"] for r in json.loads(out)["results"]]


def test_experiment_json(monkeypatch, capsys, tmp_path):
    code, out, err = run_cli(["experiment", "--dataset", "news20-sample", "--algorithms", "dot,cosine,oasis",
                              "--triplets", "300", "--seeds", "0,1", "--json"], monkeypatch, capsys)
    assert code == 0, err
    results = json.loads(out)["results"]
    assert [(r["algorithm"], r["seed"]) for r in results] == [
        ("dot", 0), ("dot", 1), ("cosine", 0), ("cosine", 1), ("oasis", 0), ("oasis", 1)]
    for r in results:
        for key in ("algorithm", "seed", "map", "ap@10", "map@10", "sparsity", "train_seconds", "updates_per_second"):
            assert key in r
    oasis = [r for r in results if r["algorithm"] == "oasis"]
    assert all(r["updates_per_second"] > 0 and r["n_triplets"] == 300 for r in oasis)


def test_bad_inputs_give_one_clear_line(trained, sample_svm, tmp_path, monkeypatch, capsys):
    path, data = sample_svm
    run = lambda *a: run_cli(list(a), monkeypatch, capsys)  # noqa: E731
    assert_clean_error(run("train", "--algorithm", "nope", "--dataset", "news20-sample", "--out", tmp_path / "m.npz"),
                       "unknown algorithm 'nope'")
    assert_clean_error(run("evaluate", "--model", trained, "--dataset", "no-such-set"), "unknown data set")
    assert_clean_error(run("evaluate", "--model", tmp_path / "missing.npz", "--dataset", "news20-sample"), "no such file")
    truncated = tmp_path / "trunc.npz"
    truncated.write_bytes(trained.read_bytes()[:500])
    assert_clean_error(run("evaluate", "--model", truncated, "--dataset", "news20-sample"), "trunc.npz")
    # NaN in a data file
    nan_file = tmp_path / "nan.svm"
    nan_file.write_text("1 1:0.5 3:nan\n2 2:1.0\n")
    assert_clean_error(run("query", "--model", trained, "--corpus", "news20-sample", "--queries", nan_file), "NaN")
    # more features than the model knows
    wide = tmp_path / "wide.svm"
    wide.write_text(f"1 1:0.5 {data.n_features + 5}:1.0\n2 2:1.0\n")
    assert_clean_error(run("query", "--model", trained, "--corpus", "news20-sample", "--queries", wide), "features")
    # one class only / a class with a single document
    one = tmp_path / "one.svm"
    one.write_text("1 1:0.5\n1 2:1.0\n1 3:1.0\n")
    assert_clean_error(run("train", "--algorithm", "oasis", "--dataset", one, "--out", tmp_path / "x.npz"), "class")
    single = tmp_path / "single.svm"
    single.write_text("1 1:0.5\n1 2:1.0\n1 3:1.0\n2 4:1.0\n")
    assert_clean_error(run("train", "--algorithm", "oasis", "--dataset", single, "--out", tmp_path / "x.npz"), "class")
    assert not (tmp_path / "x.npz").exists()
    # k larger than the corpus
    assert_clean_error(run("query", "--model", trained, "--corpus", "news20-sample", "--queries", path,
                           "--top-k", str(data.n_documents + 1)), "top-k")
    assert_clean_error(run("evaluate", "--model", trained, "--dataset", "news20-sample", "--k", "100000"), "k=")
    # malformed file
    garbage = tmp_path / "garbage.svm"
    garbage.write_text("this is : not svmlight\n")
    assert_clean_error(run("query", "--model", trained, "--corpus", "news20-sample", "--queries", garbage), "garbage")
    # unknown protocol / bad params
    assert_clean_error(run("experiment", "--dataset", "news20-sample", "--algorithms", "oasis", "--protocol", "xyz"),
                       "unknown protocol")
    assert_clean_error(run("train", "--algorithm", "oasis", "--dataset", "news20-sample", "--out", tmp_path / "y.npz",
                           "--param", "nonsense"), "KEY=VALUE")
    assert not (tmp_path / "y.npz").exists()
    assert_clean_error(run("train", "--algorithm", "oasis", "--dataset", "news20-sample", "--out", tmp_path / "z.npz",
                           "--param", "bogus=1"), "bogus")


def test_datasets_commands(monkeypatch, capsys):
    code, out, _ = run_cli(["datasets", "list", "--json"], monkeypatch, capsys)
    names = {row["name"] for row in json.loads(out)["datasets"]}
    assert {"news20", "news20-sample", "reuters21578", "isolet"} <= names
    code, out, _ = run_cli(["datasets", "info", "news20-sample", "--json"], monkeypatch, capsys)
    assert code == 0 and json.loads(out)["name"] == "news20-sample"
    code, out, err = run_cli(["datasets", "fetch", "no-such"], monkeypatch, capsys)
    assert code == 2 and "unknown data set" in err


def test_demo_runs(monkeypatch, capsys):
    code, out, _ = run_cli(["demo", "--triplets", "300", "--json"], monkeypatch, capsys)
    report = json.loads(out)
    # OASIS beside our strongest learner and the baselines a user tries first, same split
    assert code == 0 and set(report["scores"]) == {"oasis", "proxy-ssi", "cosine", "lsa", "logreg-scores"}
    assert len(report["neighbours"]["oasis"]) == 5 and len(report["neighbours"]["cosine"]) == 5
    for row in report["scores"].values():
        assert 0.0 < row["map"] <= 1.0 and row["fit_seconds"] >= 0.0 and row["model_bytes"] > 0
    assert report["best"] == max(report["scores"], key=lambda n: report["scores"][n]["map"])
    # learning from the labels beats the unlearned lexical baseline on this split
    assert report["scores"]["oasis"]["map"] > report["scores"]["cosine"]["map"]


def test_index_build_and_query_match_exact_search(trained, sample_svm, tmp_path, monkeypatch, capsys):
    path, _ = sample_svm
    out = tmp_path / "idx"
    code, _, err = run_cli(["index", "build", "--model", trained, "--data", "news20-sample", "--kind", "exact",
                            "--out", out, "--json"], monkeypatch, capsys)
    assert code == 0, err
    code, via_index, _ = run_cli(["query", "--index", out, "--queries", path, "--top-k", "5", "--json"],
                                 monkeypatch, capsys)
    code2, direct, _ = run_cli(["query", "--model", trained, "--corpus", "news20-sample", "--queries", path,
                                "--top-k", "5", "--json"], monkeypatch, capsys)
    assert code == code2 == 0
    a = [json.loads(line) for line in via_index.strip().splitlines()]
    b = [json.loads(line) for line in direct.strip().splitlines()]
    assert [[r["id"] for r in x["results"]] for x in a] == [[r["id"] for r in x["results"]] for x in b]
    for x, y in zip(a, b):
        np.testing.assert_allclose([r["score"] for r in x["results"]], [r["score"] for r in y["results"]], rtol=1e-9)
    # stored documents (named by their ids) as queries: the same answers as --corpus search by row number
    _, data = sample_svm
    named = f"{data.doc_id(5)},{data.doc_id(8)}"
    code, via_ids, err = run_cli(["query", "--index", out, "--query-ids", named, "--top-k", "5", "--json"],
                                 monkeypatch, capsys)
    code2, direct, _ = run_cli(["query", "--model", trained, "--corpus", "news20-sample", "--query-ids", "5,8",
                                "--top-k", "5", "--json"], monkeypatch, capsys)
    assert code == code2 == 0, err
    a = [json.loads(line) for line in via_ids.strip().splitlines()]
    b = [json.loads(line) for line in direct.strip().splitlines()]
    assert [[r["id"] for r in x["results"]] for x in a] == [[r["id"] for r in x["results"]] for x in b]
    assert [x["query"] for x in a] == named.split(",")
    # the index keeps each document's class name and title: --index answers show them as --corpus does
    facts = [[(r.get("label"), r.get("title")) for r in x["results"]] for x in a]
    assert facts == [[(r.get("label"), r.get("title")) for r in x["results"]] for x in b]
    assert all(label in data.class_names.values() and title for row in facts for label, title in row)
    assert_clean_error(run_cli(["query", "--index", out, "--query-ids", "5"], monkeypatch, capsys), "not in the index")
    assert_clean_error(run_cli(["query", "--index", out, "--query-ids", named, "--queries", path], monkeypatch, capsys),
                       "exactly one of")
    (out / "manifest.json").write_text("corrupt")
    assert_clean_error(run_cli(["query", "--index", out, "--queries", path], monkeypatch, capsys), "manifest")


def test_index_add_appends_documents_like_a_build_over_all(trained, sample_svm, tmp_path, monkeypatch, capsys):
    from sklearn.datasets import dump_svmlight_file

    queries, data = sample_svm
    n = data.X.shape[0]
    parts = {"a": slice(0, n // 2), "b": slice(n // 2, n), "all": slice(0, n)}
    for name, rows in parts.items():
        dump_svmlight_file(data.X[rows], data.y[rows], str(tmp_path / f"{name}.svm"), zero_based=False)
    for kind, params in (("exact", []), ("ann", ["--param", "dim=8", "--param", "heavy_min_nnz=50",
                                                       # fixed setting: a calibrated one is timed, may differ
                                                       "--param", "n_postings=64", "--param", "sparse_pool=100",
                                                       "--param", "dense_pool=100", "--param", "nprobe=32"])):
        grown, whole = tmp_path / f"{kind}-grown", tmp_path / f"{kind}-whole"
        for out, src in ((grown, "a"), (whole, "all")):
            code, _, err = run_cli(["index", "build", "--model", trained, "--data", tmp_path / f"{src}.svm",
                                    "--kind", kind, "--out", out, *params], monkeypatch, capsys)
            assert code == 0, err
        code, out, err = run_cli(["index", "add", "--index", grown, "--data", tmp_path / "b.svm", "--refit", "--json"],
                                 monkeypatch, capsys)
        assert code == 0, err
        summary = json.loads(out)
        assert summary["added"] == n - n // 2 and summary["n_documents"] == n
        if kind == "ann":
            assert summary["n_fit_documents"] == n  # --refit: learned from the whole corpus
        answers = []
        for idx in (grown, whole):
            code, got, err = run_cli(["query", "--index", idx, "--queries", queries, "--top-k", "5", "--json"],
                                     monkeypatch, capsys)
            assert code == 0, err
            answers.append([{k: v for k, v in json.loads(line).items() if k != "search"}
                            for line in got.strip().splitlines()])
        assert answers[0] == answers[1]
    assert_clean_error(run_cli(["index", "add", "--index", tmp_path / "nowhere", "--data", tmp_path / "b.svm"],
                               monkeypatch, capsys), "nowhere")


def test_query_shows_labels_and_titles_of_a_registered_data_set(trained, sample_svm, monkeypatch, capsys):
    _, data = sample_svm
    code, out, err = run_cli(["query", "--model", trained, "--corpus", "news20-sample", "--query-ids", "5",
                              "--top-k", "3", "--json"], monkeypatch, capsys)
    assert code == 0, err
    id_to_row = {data.doc_id(r): r for r in range(data.n_documents)}
    results = json.loads(out)["results"]
    for hit in results:  # each hit's group and Subject line are the corpus's own
        row = id_to_row[hit["id"]]
        assert hit["label"] == data.class_names[int(data.y[row])]
        assert hit["title"] == " ".join(str(data.info["titles"][row]).split())
    code, out, err = run_cli(["query", "--model", trained, "--corpus", "NEWS20-sample", "--query-ids", "5",
                              "--top-k", "3"], monkeypatch, capsys)
    assert code == 0, err
    lines = out.splitlines()[1:]
    assert len(lines) == 3
    for line, hit in zip(lines, results):
        assert hit["label"] in line and hit["title"][:40] in line
