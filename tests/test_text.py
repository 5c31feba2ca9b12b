"""Text in: the TF-IDF featuriser saved with the model (no pickle), model.transform, score() for
scikit-learn's search tools, Pipeline([TfidfVectorizer(), learner]), and the CLI from a folder
of .txt files to top-k answers for a free-text query."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline

from sparsesim.exceptions import InvalidInputError
from sparsesim.indexes import build_index
from sparsesim.learners.bilinear import OASIS
from sparsesim.models import BilinearSimilarity
from sparsesim.text import TextFeaturizer
from clitools import run_cli

SPORT = ["the match ended with a late goal", "the striker scored a goal in the final match",
         "the team won the cup final after extra time", "a penalty goal decided the match",
         "the coach praised the team after the match", "fans cheered the winning goal"]
TECH = ["the new laptop has a faster processor", "a software update fixes the processor bug",
        "the phone runs the new software release", "a laptop with more memory and storage",
        "the processor and memory benchmark results", "install the software on the laptop"]
FOOD = ["bake the bread with flour and butter", "a recipe for tomato soup with basil",
        "the chef cooked pasta with tomato sauce", "butter and sugar for the cake recipe",
        "fresh basil in the pasta sauce", "slow cooked soup with bread"]


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "docs"
    for label, texts in (("sport", SPORT), ("tech", TECH), ("food", FOOD)):
        (root / label).mkdir(parents=True)
        for i, text in enumerate(texts):
            (root / label / f"{label}{i}.txt").write_text(text + "\n")
    return root


def _assert_no_pickle(path):
    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            with archive.open(name) as member:
                header = member.read(256)
            assert b"'descr': '|O'" not in header and b"'descr': 'O'" not in header, name
    np.load(path, allow_pickle=False).close()


def test_featurizer_round_trip_in_the_model_file(tmp_path):
    texts = SPORT + TECH
    f = TextFeaturizer(ngram_range=(1, 2), sublinear_tf=True).fit(texts)
    X = f.transform(texts)
    model = BilinearSimilarity(OASIS(n_triplets=200, random_state=0).fit(X, [0] * 6 + [1] * 6).model_.W,
                               featurizer=f)
    path = tmp_path / "m.npz"
    model.save(path)
    _assert_no_pickle(path)
    back = BilinearSimilarity.load(path)
    assert back.featurizer.settings() == f.settings() and back.featurizer.settings()["ngram_range"] == [1, 2]
    Q = ["a late goal in the final", "memory for the laptop", "unknown words only zzz"]
    assert abs(back.transform(Q) - model.transform(Q)).max() == 0
    assert back.transform(Q)[2].nnz == 0


def test_callable_settings_cannot_be_saved():
    with pytest.raises(InvalidInputError, match="pickle"):
        TextFeaturizer(TfidfVectorizer(tokenizer=str.split))


def test_transform_without_featurizer_says_so():
    import scipy.sparse as sp

    with pytest.raises(InvalidInputError, match="not trained on text"):
        BilinearSimilarity(sp.csr_matrix((3, 3))).transform(["hello"])


def test_score_is_map_and_grid_search_works():
    texts, y = SPORT + TECH + FOOD, np.repeat([0, 1, 2], 6)
    pipe = make_pipeline(TfidfVectorizer(), OASIS(n_triplets=300, random_state=0))
    search = GridSearchCV(pipe, {"oasis__C": [0.01, 1.0]}, cv=2).fit(texts, y)
    assert 0 < search.best_score_ <= 1
    # score is the MAP of retrieval by label, so a perfect ranking scores 1
    X = TfidfVectorizer().fit_transform(texts)
    est = OASIS(n_triplets=300, random_state=0).fit(X, y)
    from sparsesim.evaluation import evaluate_retrieval

    assert est.score(X, y) == pytest.approx(evaluate_retrieval(est.model_.scorer(X), y, k=10)["map"])


def test_pipeline_saved_and_queried(tmp_path):
    texts, y = SPORT + TECH + FOOD, np.repeat([0, 1, 2], 6)
    pipe = make_pipeline(TfidfVectorizer(), OASIS(n_triplets=500, random_state=0)).fit(texts, y)
    model = BilinearSimilarity.from_pipeline(pipe)
    model.save(tmp_path / "pipe.npz")
    back = BilinearSimilarity.load(tmp_path / "pipe.npz")
    index = build_index(back, back.transform(texts), ids=[f"d{i}" for i in range(len(texts))])
    ids, scores = index.query(back.transform(["tomato pasta sauce recipe"]), top_k=3)
    assert all(int(i[1:]) >= 12 for i in ids[0])  # food documents
    with pytest.raises(InvalidInputError, match="two steps"):
        BilinearSimilarity.from_pipeline(pipe.steps[1][1])


def test_three_commands_folder_to_text_answers(folder, tmp_path, monkeypatch, capsys):
    model, index = tmp_path / "model.npz", tmp_path / "index"
    code, _, err = run_cli(["train", "-a", "oasis", "-d", folder, "-n", "500", "-o", model], monkeypatch, capsys)
    assert code == 0, err
    _assert_no_pickle(model)
    code, _, err = run_cli(["index", "build", "-m", model, "-d", folder, "-o", index], monkeypatch, capsys)
    assert code == 0, err
    code, out, err = run_cli(["query", "--index", index, "--text", "who scored the winning goal", "-k", "10",
                              "--json"], monkeypatch, capsys)
    assert code == 0, err
    answer = json.loads(out)
    assert answer["query"] == "who scored the winning goal" and len(answer["results"]) == 10
    top = answer["results"][0]["id"]
    assert top.startswith(str(folder / "sport")) and top.endswith(".txt")
    # --queries FILE.txt (one per line) and FILE.jsonl
    (tmp_path / "q.txt").write_text("laptop processor\n\ntomato soup\n")
    code, out, err = run_cli(["query", "--index", index, "--queries", tmp_path / "q.txt", "-k", "2", "--json"],
                             monkeypatch, capsys)
    lines = [json.loads(ln) for ln in out.splitlines()]
    assert code == 0 and [ln["query"] for ln in lines] == ["laptop processor", "tomato soup"]
    assert "/tech/" in lines[0]["results"][0]["id"] and "/food/" in lines[1]["results"][0]["id"]
    (tmp_path / "q.jsonl").write_text(json.dumps({"id": "q1", "text": "cake recipe"}) + "\n")
    code, out, err = run_cli(["query", "--index", index, "--queries", tmp_path / "q.jsonl", "-k", "1", "--json"],
                             monkeypatch, capsys)
    assert code == 0 and json.loads(out)["query"] == "q1" and "/food/" in json.loads(out)["results"][0]["id"]
    # --queries FILE.csv: text and id columns named by options (quoted commas are one field)
    (tmp_path / "q.csv").write_text('key,body\nc1,"laptop, processor"\nc2,tomato soup\n')
    code, out, err = run_cli(["query", "--index", index, "--queries", tmp_path / "q.csv", "--text-column", "body",
                              "--id-column", "key", "-k", "1", "--json"], monkeypatch, capsys)
    lines = [json.loads(ln) for ln in out.splitlines()]
    assert code == 0 and [ln["query"] for ln in lines] == ["c1", "c2"], err
    assert "/tech/" in lines[0]["results"][0]["id"] and "/food/" in lines[1]["results"][0]["id"]
    code, out, err = run_cli(["query", "--index", index, "--queries", tmp_path / "q.csv", "-k", "1"],
                             monkeypatch, capsys)
    assert code == 2 and err.count("error:") == 1 and "--text-column" in err
    # evaluate reads the folder with the saved featuriser and the recorded split
    code, out, err = run_cli(["evaluate", "-m", model, "-d", folder, "--k", "3", "--json"], monkeypatch, capsys)
    assert code == 0 and json.loads(out)["split"] == "test"


def test_text_query_on_a_vector_model_is_one_error_line(tmp_path, monkeypatch, capsys):
    model = tmp_path / "m.npz"
    code, _, err = run_cli(["train", "-a", "dot", "-d", "news20-sample", "-n", "10", "-o", model], monkeypatch, capsys)
    assert code == 0, err
    code, out, err = run_cli(["query", "-m", model, "-c", "news20-sample", "--text", "hello"], monkeypatch, capsys)
    assert code == 2 and err.startswith("error: ") and "not trained on text" in err and "Traceback" not in err
    code, out, err = run_cli(["query", "-m", model, "-c", "news20-sample", "--text", "  "], monkeypatch, capsys)
    assert code == 2 and err.startswith("error: ")


def test_index_add_text_documents_keeps_snippets(folder, tmp_path, monkeypatch, capsys):
    from sparsesim.indexes import load_index

    model, index = tmp_path / "model.npz", tmp_path / "index"
    assert run_cli(["train", "-a", "oasis", "-d", folder, "-n", "300", "-o", model], monkeypatch, capsys)[0] == 0
    assert run_cli(["index", "build", "-m", model, "-d", folder, "-o", index], monkeypatch, capsys)[0] == 0
    more = tmp_path / "more"
    (more / "space").mkdir(parents=True)
    (more / "space" / "orbit.txt").write_text("the rocket reached orbit around the moon")
    code, _, err = run_cli(["index", "add", "--index", index, "--data", more], monkeypatch, capsys)
    assert code == 0, err
    loaded = load_index(index)
    assert loaded.n_documents == 19 and loaded.snippets_.shape == (19,)
    assert loaded.snippets_[-1] == "the rocket reached orbit around the moon"
    assert loaded.ids_[-1] == str(more / "space" / "orbit.txt")
