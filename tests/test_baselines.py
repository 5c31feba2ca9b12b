"""The registered baselines fitted in one batch (bm25, lsa, logreg-proba, logreg-scores, svm-scores):
their models against the libraries they wrap, their refusals, and the commands that run them."""

import json

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.decomposition import TruncatedSVD
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import normalize
from sklearn.svm import LinearSVC

from clitools import run_cli
from sparsesim.embedding import EmbeddingSimilarity
from sparsesim.exceptions import FileFormatError, InvalidInputError
from sparsesim.lexical import BM25_MODEL_KIND, BM25Similarity
from sparsesim.model_files import load_similarity_model
from sparsesim.persistence import save_bundle
from sparsesim.registry import make_estimator

BATCH = ("bm25", "lsa", "logreg-proba", "logreg-scores", "svm-scores")


def counts(seed=0, n=60, d=25, classes=3):
    """Term counts whose classes use different parts of the vocabulary."""
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(classes), n // classes)
    rates = np.full((classes, d), 0.15)
    for c in range(classes):
        rates[c, c * (d // classes):(c + 1) * (d // classes)] = 1.2
    X = sp.csr_matrix(rng.poisson(rates[y]).astype(np.float64))
    return X, y


def l2(X):
    return normalize(X, norm="l2")


def test_bm25_scores_are_bm25s_scores():
    bm25s = pytest.importorskip("bm25s")
    X, _ = counts()
    S = make_estimator("bm25").fit(X).model_.score_matrix(X[:6], X)
    words = [[f"w{j}" for j in np.repeat(X[i].indices, X[i].data.astype(int))] for i in range(X.shape[0])]
    reference = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    reference.index(words, show_progress=False)
    for q in range(6):
        np.testing.assert_allclose(S[q], reference.get_scores([f"w{j}" for j in X[q].indices]), rtol=1e-5, atol=1e-6)
    scorer = BM25Similarity(X.shape[1]).scorer(X)
    np.testing.assert_allclose(scorer(np.arange(6)), S, atol=1e-12)


def test_bm25_statistics_are_the_searched_corpus_and_k1_b_matter():
    X, _ = counts(seed=1)
    model = BM25Similarity(X.shape[1])
    full = model.score_matrix(X[:3], X)
    half = model.score_matrix(X[:3], X[:30])  # another corpus, other idf and average length
    assert not np.allclose(full[:, :30], half)
    flat = BM25Similarity(X.shape[1], b=0.0).score_matrix(X[:3], X)
    assert not np.allclose(flat, full)
    np.testing.assert_allclose(model.score_pairs(X[:3], X[:3]), np.diag(model.score_matrix(X[:3], X[:3])), atol=1e-12)


def test_bm25_refuses_weights_and_keeps_its_settings_in_the_file(tmp_path):
    X, y = counts()
    with pytest.raises(InvalidInputError, match="term counts"):
        make_estimator("bm25").fit(l2(X), y)
    model = make_estimator("bm25", k1=1.2, b=0.5, method="robertson").fit(X).model_
    with pytest.raises(InvalidInputError, match="term counts"):
        model.score_matrix(l2(X), X)
    model.save(tmp_path / "bm25.npz")
    back = load_similarity_model(tmp_path / "bm25.npz")
    assert isinstance(back, BM25Similarity) and (back.k1, back.b, back.method) == (1.2, 0.5, "robertson")
    np.testing.assert_array_equal(back.score_matrix(X, X), model.score_matrix(X, X))
    base = {"n_features": 25, "k1": 1.5, "b": 0.75, "method": "lucene", "delta": 0.5}
    for change in ({"b": 2.0}, {"method": "tfidf"}, {"k1": -1}, {"n_features": 0}, {"k1": None}):
        save_bundle(tmp_path / "bad.npz", {}, dict(base, **change), kind=BM25_MODEL_KIND)
        with pytest.raises(FileFormatError):
            BM25Similarity.load(tmp_path / "bad.npz")
    save_bundle(tmp_path / "bad.npz", {"W": np.zeros(3)}, base, kind=BM25_MODEL_KIND)
    with pytest.raises(FileFormatError, match="unexpected"):
        BM25Similarity.load(tmp_path / "bad.npz")


def test_lsa_is_truncated_svd_cosine():
    X, y = counts(seed=2)
    est = make_estimator("lsa", n_components=5, random_state=3).fit(X, y)
    svd = TruncatedSVD(5, random_state=3).fit(l2(X))
    Z = normalize(svd.transform(l2(X)))
    np.testing.assert_allclose(est.model_.score_matrix(X, X), Z @ Z.T, atol=1e-10)
    assert est.resolved_params_ == {"n_components": 5}
    assert make_estimator("lsa").fit(X).model_.n_components == min(X.shape) - 1  # "auto" on a small corpus
    with pytest.raises(InvalidInputError, match="n_components"):
        make_estimator("lsa", n_components=40).fit(X)


@pytest.mark.parametrize("name", ["logreg-proba", "logreg-scores", "svm-scores"])
def test_classifier_embeddings_are_the_classifiers_outputs(name):
    X, y = counts(seed=3, classes=4)
    y = np.array(["a", "b", "c", "d"])[y]  # string labels work
    est = make_estimator(name, C=2.0).fit(X, y)
    Xn = l2(X)
    if name == "svm-scores":
        out = LinearSVC(C=2.0, random_state=0).fit(Xn, y).decision_function(Xn)
    else:
        clf = LogisticRegression(C=2.0, max_iter=1000).fit(Xn, y)
        out = clf.predict_proba(Xn) if name == "logreg-proba" else clf.decision_function(Xn)
    Z = normalize(out)
    # liblinear's dual solver stops at tol 1e-4: two fits of the same LinearSVC agree to ~1e-5 on
    # some CPUs (AMD EPYC: 4.6e-6), not to rounding; the probabilistic models agree to 1e-6
    atol = 1e-4 if name == "svm-scores" else 1e-6
    np.testing.assert_allclose(est.model_.embed(X), Z, atol=atol)
    np.testing.assert_allclose(est.model_.score_matrix(X[:7], X), Z[:7] @ Z.T, atol=atol)
    assert est.model_.metadata["algorithm"] == name and est.model_.metadata["classes"] == ["a", "b", "c", "d"]
    # the classes separate: retrieval is far above chance (1/4)
    assert est.score(X, y) > 0.6


def test_two_class_probability_embedding():
    X, y = counts(seed=4, classes=2)
    est = make_estimator("logreg-proba").fit(X, y)
    clf = LogisticRegression(C=100.0, max_iter=1000).fit(l2(X), y)
    np.testing.assert_allclose(est.model_.embed(X), normalize(clf.predict_proba(l2(X))), atol=1e-6)


@pytest.mark.parametrize("name", BATCH)
def test_no_triplets_and_labels_where_needed(name):
    X, y = counts()
    est = make_estimator(name).fit(X, y)
    with pytest.raises(InvalidInputError, match="not from triplets"):
        est.partial_fit_triplets(X, np.array([[0, 1, 2]]))
    if name in ("logreg-proba", "logreg-scores", "svm-scores"):
        with pytest.raises(InvalidInputError, match="labels"):
            make_estimator(name).fit(X)
        with pytest.raises(InvalidInputError, match="class"):
            make_estimator(name).fit(X, np.zeros(X.shape[0]))
    assert est.n_triplets_seen_ == 0 and est.train_seconds_ >= 0


def test_bad_parameters_refused():
    X, y = counts()
    for name, params in (("logreg-proba", {"C": 0}), ("logreg-proba", {"output": "logits"}), ("svm-scores", {"C": -1}),
                         ("lsa", {"n_components": 0}), ("bm25", {"b": 1.5}), ("bm25", {"method": "tfidf"})):
        with pytest.raises(InvalidInputError):
            make_estimator(name, **params).fit(X, y)


@pytest.fixture()
def count_file(tmp_path):
    from sklearn.datasets import dump_svmlight_file

    X, y = counts(n=90)
    path = tmp_path / "counts.svm"
    dump_svmlight_file(X, y, str(path), zero_based=False)
    return path


def test_cli_train_evaluate_query_bm25_and_lsa(count_file, tmp_path, monkeypatch, capsys):
    for name in ("bm25", "lsa", "logreg-proba"):
        model = tmp_path / f"{name}.npz"
        code, out, err = run_cli(["train", "-a", name, "--dataset", count_file, "--out", model, "--json"],
                                 monkeypatch, capsys)
        assert code == 0, err
        summary = json.loads(out)
        assert summary["n_triplets"] == 0 and summary["model_bytes"] >= 0
        code, out, err = run_cli(["evaluate", "--model", model, "--dataset", count_file, "--json"], monkeypatch, capsys)
        assert code == 0, err
        res = json.loads(out)
        assert res["split"] == "test" and res["map"] > 0.5, res
        code, out, err = run_cli(["query", "--model", model, "--corpus", count_file, "--query-ids", "0",
                                  "--top-k", "3", "--json"], monkeypatch, capsys)
        assert code == 0, err
        assert len(json.loads(out)["results"]) == 3
    code, out, err = run_cli(["train", "-a", "bm25", "--dataset", "news20-sample", "--out", tmp_path / "x.npz"],
                             monkeypatch, capsys)
    assert code == 2 and err.startswith("error: ") and "term counts" in err


def test_bm25_on_a_text_table_counts_terms(tmp_path, monkeypatch, capsys):
    rows = ["text,label"] + [f"apples and pears {i},fruit" for i in range(6)] + \
        [f"rockets and moons {i},space" for i in range(6)]
    table = tmp_path / "docs.csv"
    table.write_text("\n".join(rows) + "\n")
    model = tmp_path / "bm25.npz"
    code, out, err = run_cli(["train", "-a", "bm25", "--dataset", table, "--out", model], monkeypatch, capsys)
    assert code == 0, err
    back = BM25Similarity.load(model)
    assert back.featurizer is not None and back.transform(["apples apples"]).max() == 2
    code, out, err = run_cli(["query", "--model", model, "--corpus", table, "--text", "rockets", "--top-k", "2",
                              "--json"], monkeypatch, capsys)
    assert code == 0, err
    assert all(int(doc["id"]) >= 6 for doc in json.loads(out)["results"])  # rows 6.. are the space documents


def test_experiment_table_includes_the_baselines(monkeypatch, capsys):
    code, out, err = run_cli(["experiment", "--dataset", "news20-sample", "--algorithms",
                              "cosine,lsa,logreg-proba,logreg-scores,svm-scores", "--seeds", "0", "--json"],
                             monkeypatch, capsys)
    assert code == 0, err
    rows = {r["algorithm"]: r for r in json.loads(out)["results"]}
    assert set(rows) == {"cosine", "lsa", "logreg-proba", "logreg-scores", "svm-scores"}
    for name, row in rows.items():
        assert 0 < row["map"] <= 1 and row["model_bytes"] >= 0
    assert rows["logreg-proba"]["sparsity"] is None and rows["cosine"]["sparsity"] is not None
    assert rows["logreg-proba"]["map"] > rows["cosine"]["map"]  # supervision helps on seen classes
    code, out, err = run_cli(["experiment", "--dataset", "news20-sample", "--algorithms", "cosine,lsa",
                              "--seeds", "0"], monkeypatch, capsys)
    assert code == 0 and "lsa" in out, err
