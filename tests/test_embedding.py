"""EmbeddingSimilarity: scores against a dense numpy computation, the model file, bad input, and the
loader that opens a model file of any kind."""

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.embedding import EMBEDDING_MODEL_KIND, EmbeddingSimilarity
from sparsesim.exceptions import FileFormatError, InvalidInputError
from sparsesim.model_files import load_similarity_model
from sparsesim.models import BilinearSimilarity
from sparsesim.persistence import save_bundle
from sparsesim.text import TextFeaturizer


def problem(seed=0, n=30, d=17, r=4):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.3, random_state=seed, format="csr")
    X = (X + sp.csr_matrix((rng.random(n) + 0.1, (np.arange(n), rng.integers(0, d, n))), shape=(n, d))).tocsr()
    return X, rng.standard_normal((d, r)), rng.standard_normal(r)


def dense_scores(Q, X, P, bias, activation, normalize, normalize_embedding, alpha):
    """The definition, on dense arrays."""
    def n(A):
        A = A.toarray()
        return A / np.linalg.norm(A, axis=1, keepdims=True) if normalize else A

    def e(A):
        Z = n(A) @ P + (0 if bias is None else bias)
        if activation == "softmax":
            Z = np.exp(Z) / np.exp(Z).sum(axis=1, keepdims=True)
        if normalize_embedding:
            Z = Z / np.linalg.norm(Z, axis=1, keepdims=True)
        return Z

    return alpha * n(Q) @ n(X).T + e(Q) @ e(X).T


SETTINGS = [  # (activation, bias, normalize, normalize_embedding, identity_weight)
    ("linear", False, False, False, 0.0),     # plain low-rank inner product
    ("linear", False, True, True, 0.0),       # LSA
    ("softmax", True, True, True, 0.0),       # class-probability embedding
    ("linear", True, False, True, 0.0),       # decision-score embedding
    ("linear", False, True, False, 0.7),      # M = alpha I + P P^T
]


@pytest.mark.parametrize("activation,use_bias,normalize,normalize_embedding,alpha", SETTINGS)
def test_scores_agree_with_dense_definition(activation, use_bias, normalize, normalize_embedding, alpha):
    X, P, bias = problem()
    bias = bias if use_bias else None
    model = EmbeddingSimilarity(P, bias=bias, activation=activation, normalize=normalize,
                                normalize_embedding=normalize_embedding, identity_weight=alpha)
    want = dense_scores(X, X, P, bias, activation, normalize, normalize_embedding, alpha)
    np.testing.assert_allclose(model.score_matrix(X[:9], X, block_size=4), want[:9], atol=1e-12)
    np.testing.assert_allclose(model.scorer(X)(np.array([3, 0, 7])), want[[3, 0, 7]], atol=1e-12)
    np.testing.assert_allclose(model.score_pairs(X[:6], X[6:12]), np.diag(want[:6, 6:12]), atol=1e-12)
    assert model.score(X[2].toarray().ravel(), X[5]) == pytest.approx(want[2, 5])
    emb = model.embed(X, block_size=7)
    assert emb.shape == (X.shape[0], P.shape[1])
    if normalize_embedding:
        np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0)


def test_low_rank_model_is_the_bilinear_form_alpha_I_plus_PPt():
    X, P, _ = problem(seed=3)
    model = EmbeddingSimilarity(P, identity_weight=0.25)
    M = 0.25 * np.eye(P.shape[0]) + P @ P.T
    Xd = X.toarray()
    np.testing.assert_allclose(model.score_matrix(X, X), Xd @ M @ Xd.T, atol=1e-10)
    assert model.n_features == 17 and model.n_components == 4
    assert model.nbytes == P.nbytes


def test_softmax_is_stable_for_large_scores():
    X, P, _ = problem(seed=1)
    emb = EmbeddingSimilarity(P * 1e4, activation="softmax").embed(X)
    assert np.isfinite(emb).all()
    np.testing.assert_allclose(emb.sum(axis=1), 1.0)


def test_zero_rows_score_zero_without_nan():
    X, P, _ = problem()
    X = X.tolil()
    X[0] = 0
    model = EmbeddingSimilarity(P, normalize=True, normalize_embedding=True, identity_weight=1.0)
    scores = model.score_matrix(X.tocsr()[:2], X.tocsr())
    assert np.isfinite(scores).all() and np.all(scores[0] == 0)


def full_model(seed=0):
    X, P, bias = problem(seed)
    model = EmbeddingSimilarity(P, bias=bias, activation="softmax", normalize=True, normalize_embedding=True,
                                identity_weight=0.3, metadata={"algorithm": "logreg-proba", "params": {"C": 10.0}})
    return model, X


def test_save_load_round_trip_is_bit_identical(tmp_path):
    model, X = full_model()
    path = tmp_path / "model.npz"
    meta = model.save(path)
    assert meta["kind"] == EMBEDDING_MODEL_KIND and meta["n_components"] == 4
    back = EmbeddingSimilarity.load(path)
    assert np.array_equal(back.P, model.P) and np.array_equal(back.bias, model.bias)
    assert (back.activation, back.normalize, back.normalize_embedding, back.identity_weight) == \
        ("softmax", True, True, 0.3)
    assert back.checksum() == model.checksum()
    assert back.metadata["algorithm"] == "logreg-proba" and back.metadata["params"] == {"C": 10.0}
    assert np.array_equal(back.score_matrix(X, X), model.score_matrix(X, X))
    # without a bias too
    plain = EmbeddingSimilarity(model.P)
    plain.save(tmp_path / "plain.npz")
    assert EmbeddingSimilarity.load(tmp_path / "plain.npz").bias is None


def test_text_featurizer_is_saved_with_the_model(tmp_path):
    texts = ["red apples", "green apples", "blue sky", "grey sky"]
    featurizer = TextFeaturizer().fit(texts)
    P = np.random.default_rng(0).standard_normal((featurizer.n_features, 2))
    model = EmbeddingSimilarity(P, normalize=True, featurizer=featurizer)
    model.save(tmp_path / "m.npz")
    back = EmbeddingSimilarity.load(tmp_path / "m.npz")
    assert back.featurizer.vocabulary() == featurizer.vocabulary()
    assert (back.transform(["apples sky"]) != featurizer.transform(["apples sky"])).nnz == 0
    with pytest.raises(InvalidInputError, match="not trained on text"):
        EmbeddingSimilarity(P).transform(["apples"])
    with pytest.raises(InvalidInputError, match="features"):
        EmbeddingSimilarity(P[:3]).set_featurizer(featurizer)


def hostile(tmp_path, name, arrays, meta_changes=(), drop=()):
    """A file with a valid checksum (anyone can compute one) but contents we never write."""
    meta = {"n_features": 17, "n_components": 4, "activation": "linear", "normalize": False,
            "normalize_embedding": False, "identity_weight": 0.0, "has_bias": False}
    meta.update(dict(meta_changes))
    for key in drop:
        meta.pop(key)
    path = tmp_path / f"{name}.npz"
    save_bundle(path, arrays, meta, kind=EMBEDDING_MODEL_KIND)
    return path


def test_hostile_files_refused(tmp_path):
    _, P, bias = problem()
    nan = P.copy()
    nan[1, 2] = np.nan
    bad = {
        "P shape": ({"P": P[:, :3]}, {}, ()),
        "P transposed": ({"P": P.T.copy()}, {}, ()),
        "P float32": ({"P": P.astype(np.float32)}, {}, ()),
        "P int": ({"P": P.astype(np.int64)}, {}, ()),
        "P NaN": ({"P": nan}, {}, ()),
        "P 3-D": ({"P": P[None]}, {}, ()),
        "no P": ({}, {}, ()),
        "bias not declared": ({"P": P, "bias": bias}, {}, ()),
        "bias declared, missing": ({"P": P}, {"has_bias": True}, ()),
        "bias wrong length": ({"P": P, "bias": bias[:2]}, {"has_bias": True}, ()),
        "bias infinite": ({"P": P, "bias": np.array([1.0, np.inf, 0.0, 0.0])}, {"has_bias": True}, ()),
        "extra array": ({"P": P, "evil": np.zeros(3)}, {}, ()),
        "unknown activation": ({"P": P}, {"activation": "relu"}, ()),
        "huge width": ({"P": P}, {"n_components": 10**9}, ()),
        "negative features": ({"P": P}, {"n_features": -17}, ()),
        "width as a string": ({"P": P}, {"n_components": "4"}, ()),
        "identity weight missing": ({"P": P}, {}, ("identity_weight",)),
        "identity weight non-finite": ({"P": P}, {"identity_weight": float("nan")}, ()),
        "normalize not a bool": ({"P": P}, {"normalize": 1}, ()),
        "half a split": ({"P": P}, {"split_seed": 0}, ()),
    }
    for what, (arrays, changes, drop) in bad.items():
        path = hostile(tmp_path, what.replace(" ", "_"), arrays, changes, drop)
        with pytest.raises(FileFormatError):
            EmbeddingSimilarity.load(path)
            pytest.fail(f"accepted a file with {what}")


def test_corrupt_truncated_and_foreign_files_refused(tmp_path):
    model, _ = full_model()
    path = tmp_path / "m.npz"
    model.save(path)
    raw = path.read_bytes()
    (tmp_path / "trunc.npz").write_bytes(raw[: len(raw) // 2])
    flipped = bytearray(raw)
    flipped[len(raw) // 3] ^= 0xFF
    (tmp_path / "flip.npz").write_bytes(bytes(flipped))
    (tmp_path / "text.npz").write_text("not a model")
    for name in ("trunc", "flip", "text", "missing"):
        with pytest.raises(FileFormatError):
            EmbeddingSimilarity.load(tmp_path / f"{name}.npz")
    BilinearSimilarity(sp.csr_matrix((5, 5))).save(tmp_path / "bilinear.npz")
    with pytest.raises(FileFormatError, match="bilinear-similarity"):
        EmbeddingSimilarity.load(tmp_path / "bilinear.npz")


def test_bad_input_refused():
    X, P, bias = problem()
    model = EmbeddingSimilarity(P, bias=bias, normalize=True, identity_weight=0.5)
    narrow, wide = X[:, :-1], sp.hstack([X, X[:, :2]]).tocsr()
    for Xbad in (narrow, wide):
        for call in (lambda: model.score_matrix(Xbad, X), lambda: model.score_matrix(X, Xbad),
                     lambda: model.scorer(Xbad), lambda: model.embed(Xbad),
                     lambda: model.score_pairs(Xbad[:3], X[:3])):
            with pytest.raises(InvalidInputError, match="feature"):
                call()
    Xn = X.copy()
    Xn.data[4] = np.nan
    for call in (lambda: model.score_matrix(Xn, X), lambda: model.scorer(Xn), lambda: model.embed(Xn)):
        with pytest.raises(InvalidInputError, match="NaN"):
            call()
    with pytest.raises(InvalidInputError, match="rows"):
        model.score_pairs(X[:3], X[:4])


def test_bad_construction_refused():
    _, P, bias = problem()
    nan = P.copy()
    nan[0, 0] = np.nan
    for kwargs in ({"P": nan}, {"P": P[0]}, {"P": np.zeros((0, 3))}, {"P": sp.csr_matrix(P)},
                   {"P": P, "bias": bias[:2]}, {"P": P, "bias": np.full(4, np.inf)},
                   {"P": P, "activation": "tanh"}, {"P": P, "identity_weight": float("inf")},
                   {"P": P, "identity_weight": "x"}, {"P": [["a"]]}):
        with pytest.raises(InvalidInputError):
            EmbeddingSimilarity(**kwargs)


def test_loader_dispatches_on_the_file_kind(tmp_path):
    model, X = full_model()
    model.save(tmp_path / "e.npz")
    W = sp.random(17, 17, density=0.1, random_state=0, format="csr")
    BilinearSimilarity(W).save(tmp_path / "b.npz")
    e = load_similarity_model(tmp_path / "e.npz")
    b = load_similarity_model(tmp_path / "b.npz")
    assert isinstance(e, EmbeddingSimilarity) and isinstance(b, BilinearSimilarity)
    assert np.array_equal(e.score_matrix(X, X), model.score_matrix(X, X))
    save_bundle(tmp_path / "other.npz", {"x": np.zeros(2)}, {}, kind="multitask-bilinear-similarity")
    with pytest.raises(FileFormatError, match="multi-task"):
        load_similarity_model(tmp_path / "other.npz")
    (tmp_path / "junk.npz").write_bytes(b"PK junk")
    for name in ("junk", "missing"):
        with pytest.raises(FileFormatError):
            load_similarity_model(tmp_path / f"{name}.npz")


def test_cli_evaluate_and_query_accept_an_embedding_model(tmp_path, monkeypatch, capsys):
    import json

    from clitools import run_cli
    from sklearn.decomposition import TruncatedSVD

    from sparsesim.data import load_dataset
    from sparsesim.evaluation import evaluate_retrieval

    data = load_dataset("news20-sample")
    svd = TruncatedSVD(8, random_state=0).fit(data.X)
    model = EmbeddingSimilarity(svd.components_.T, normalize=True, normalize_embedding=True,
                                metadata={"algorithm": "lsa"})
    path = tmp_path / "lsa.npz"
    model.save(path)
    code, out, err = run_cli(["evaluate", "--model", path, "--dataset", "news20-sample", "--json"], monkeypatch, capsys)
    assert code == 0, err
    res = json.loads(out)
    assert res["split"] == "all" and res["n_components"] == 8 and res["model_bytes"] == model.nbytes
    assert res["map"] == pytest.approx(evaluate_retrieval(model.scorer(data.X), data.y)["map"])
    code, out, err = run_cli(["evaluate", "--model", path, "--dataset", "news20-sample"], monkeypatch, capsys)
    assert code == 0 and "embedding of 8 dimensions" in out, err
    code, out, err = run_cli(["query", "--model", path, "--corpus", "news20-sample", "--query-ids", "5",
                              "--top-k", "3", "--json"], monkeypatch, capsys)
    assert code == 0, err
    results = json.loads(out)["results"]
    want = np.sort(np.delete(model.score_matrix(data.X[[5]], data.X)[0], 5))[::-1][:3]
    np.testing.assert_allclose([r["score"] for r in results], want, rtol=1e-12)
    broken = tmp_path / "broken.npz"
    broken.write_bytes(path.read_bytes()[:200])
    code, out, err = run_cli(["evaluate", "--model", broken, "--dataset", "news20-sample"], monkeypatch, capsys)
    assert code == 2 and err.startswith("error: ") and "Traceback" not in err


@pytest.mark.parametrize("gamma,weighted", [(1.0, False), (0.5, False), (0.25, False), (1.0, True), (0.5, True)])
def test_lexical_power_scores_agree_with_dense_definition(gamma, weighted):
    X, P, _ = problem(seed=5)
    w = np.random.default_rng(1).uniform(0.5, 3.0, X.shape[1]) if weighted else None
    X = X.tolil()
    X[3, 2] = -0.4  # a negative value keeps its sign
    X = X.tocsr()
    model = EmbeddingSimilarity(P, normalize=True, normalize_embedding=True, identity_weight=0.7,
                                lexical_power=gamma, lexical_weights=w)
    Xd = X.toarray()
    N = Xd / np.linalg.norm(Xd, axis=1, keepdims=True)
    L = np.sign(N) * np.abs(N) ** gamma * (1.0 if w is None else w)
    L /= np.linalg.norm(L, axis=1, keepdims=True)
    E = N @ P
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    want = 0.7 * L @ L.T + E @ E.T
    np.testing.assert_allclose(model.score_matrix(X, X, block_size=4), want, atol=1e-12)
    np.testing.assert_allclose(model.scorer(X)(np.array([3, 0])), want[[3, 0]], atol=1e-12)
    np.testing.assert_allclose(model.score_pairs(X[:6], X[6:12]), np.diag(want[:6, 6:12]), atol=1e-12)
    Xn = sp.csr_matrix(N)
    np.testing.assert_allclose(model.lexical_rows(Xn).toarray(), L, atol=1e-12)
    np.testing.assert_allclose(model.rows_from_lexical(model.lexical_rows(Xn)).toarray(), N, atol=1e-12)


def test_lexical_power_saved_checked_and_absent_means_one(tmp_path):
    _, P, _ = problem()
    model = EmbeddingSimilarity(P, normalize=True, identity_weight=1.0, lexical_power=0.5)
    model.save(tmp_path / "m.npz")
    assert EmbeddingSimilarity.load(tmp_path / "m.npz").lexical_power == 0.5
    assert EmbeddingSimilarity.load(hostile(tmp_path, "old", {"P": P})).lexical_power == 1.0  # files without it
    for bad in (0.0, -0.5, 1.5, "0.5", True):
        path = hostile(tmp_path, f"bad{bad!s}", {"P": P}, {"lexical_power": bad})
        with pytest.raises(FileFormatError, match="lexical_power"):
            EmbeddingSimilarity.load(path)
    for bad in (0.0, -0.5, 1.5, float("nan"), "half"):
        with pytest.raises(InvalidInputError, match="lexical_power"):
            EmbeddingSimilarity(P, lexical_power=bad)


def test_lexical_weights_saved_checked_and_counted(tmp_path):
    _, P, _ = problem()
    w = np.linspace(1.0, 3.0, P.shape[0])
    model = EmbeddingSimilarity(P, normalize=True, identity_weight=1.0, lexical_power=0.5, lexical_weights=w)
    assert model.nbytes == P.nbytes + w.nbytes
    model.save(tmp_path / "m.npz")
    back = EmbeddingSimilarity.load(tmp_path / "m.npz")
    np.testing.assert_array_equal(back.lexical_weights, w)
    assert back.checksum() == model.checksum() != EmbeddingSimilarity(P, identity_weight=1.0).checksum()
    assert EmbeddingSimilarity.load(hostile(tmp_path, "none", {"P": P})).lexical_weights is None
    for name, bad in (("short", w[:-1]), ("zero", np.where(w > 2, 0.0, w)), ("nan", np.where(w > 2, np.nan, w)),
                      ("negative", -w), ("int", np.ones(P.shape[0], dtype=np.int64))):
        with pytest.raises(FileFormatError, match="lexical_weights"):
            EmbeddingSimilarity.load(hostile(tmp_path, name, {"P": P, "lexical_weights": bad}))
        if name != "int":
            with pytest.raises(InvalidInputError, match="lexical_weights"):
                EmbeddingSimilarity(P, lexical_weights=bad)
