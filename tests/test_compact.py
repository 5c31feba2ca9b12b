"""The compact similarity M = D + W + U V^T: its update rules against a dense numpy reference of
their equations, the model's scores against a dense M, its file format (round trip, hostile
files), the learner's size budget and the places that load or refuse it."""

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.compact import COMPACT_MODEL_KIND, CompactSimilarity
from sparsesim.engine import compact_rules as rules
from sparsesim.exceptions import FileFormatError, InvalidInputError
from sparsesim.learners.compact import CompactSSI, compact_sizes, cooccurrence_support
from sparsesim.model_files import load_similarity_model
from sparsesim.persistence import save_bundle
from sparsesim.triplets import sors_triplets


def corpus(seed=0, n=14, d=9, density=0.4):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, format="csr", random_state=rng, data_rvs=lambda k: rng.uniform(0.1, 1, k))
    X = X + sp.csr_matrix((np.ones(n), (np.arange(n), np.arange(n) % d)), shape=(n, d))  # no empty row
    X = sp.csr_matrix(X)
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    return sp.csr_matrix(sp.diags(1 / norms) @ X)


def support_pattern(d, seed=1, density=0.3):
    rng = np.random.default_rng(seed)
    mask = rng.random((d, d)) < density
    np.fill_diagonal(mask, False)
    W = sp.csr_matrix(mask.astype(float))
    W.data[:] = 0.0
    W.indptr = W.indptr.astype(np.int64)
    W.indices = W.indices.astype(np.int32)
    return W, mask


def reference_run(X, triplets, signs, D, Wd, mask, U, V, C, eta):
    """The equations of sparsesim.engine.compact_rules on dense arrays (M never needed as a whole,
    but formed here: d is tiny)."""
    Xd = X.toarray()
    D, Wd, U, V = D.copy(), Wd.copy(), U.copy(), V.copy()
    losses = []
    for (a, p, n), s in zip(triplets, signs):
        xa, z = Xd[a], s * (Xd[p] - Xd[n])
        M = np.diag(D) + Wd + U @ V.T
        loss = 1.0 - xa @ M @ z
        if loss <= 0:
            losses.append(0.0)
            continue
        losses.append(loss)
        u, v = xa @ U, z @ V  # both gradients before either factor moves
        U = U + eta * np.outer(xa, v)
        V = V + eta * np.outer(z, u)
        left = 1.0 - xa @ (np.diag(D) + Wd + U @ V.T) @ z
        gD = xa * z
        gW = np.outer(xa, z) * mask
        sq = gD @ gD + (gW * gW).sum()
        if left > 0 and sq > 0:
            tau = min(C, left / sq)
            D = D + tau * gD
            Wd = Wd + tau * gW
    return np.array(losses), D, Wd, U, V


@pytest.mark.parametrize("C,eta,rank", [(1.5, 0.1, 3), (0.05, 0.5, 2), (10.0, 0.0, 3), (0.0, 0.2, 4), (1.0, 0.3, 0)])
def test_run_triplets_matches_the_dense_equations(C, eta, rank):
    X = corpus()
    d = X.shape[1]
    y = np.arange(X.shape[0]) % 3
    T = sors_triplets(y, 60, seed=2)
    signs = np.where(np.arange(60) % 4 == 0, -1.0, 1.0)
    rng = np.random.default_rng(5)
    D = 1.0 + 0.1 * rng.standard_normal(d)
    W, mask = support_pattern(d)
    U = rng.standard_normal((d, rank)) * 0.5
    V = rng.standard_normal((d, rank)) * 0.5
    want = reference_run(X, T, signs, D, W.toarray(), mask, U, V, C, eta)
    losses = np.zeros(60)
    Dg, Ug, Vg, Wg = D.copy(), U.copy(), V.copy(), W.copy()
    rules.run_triplets(X.indptr, X.indices, X.data, T, signs, Dg, Wg.indptr, Wg.indices, Wg.data, Ug, Vg, C, eta,
                       losses)
    assert (want[0] > 0).sum() > 5  # the case updates
    np.testing.assert_allclose(losses, want[0], atol=1e-10)
    np.testing.assert_allclose(Dg, want[1], atol=1e-10)
    np.testing.assert_allclose(Wg.toarray(), want[2], atol=1e-10)
    np.testing.assert_allclose(Ug, want[3], atol=1e-10)
    np.testing.assert_allclose(Vg, want[4], atol=1e-10)
    assert np.all(Wg.toarray()[~mask] == 0)  # W moves only on its support


def test_the_small_rules_match_their_equations():
    X = corpus(3)
    Xd = X.toarray()
    d = X.shape[1]
    rng = np.random.default_rng(0)
    D = rng.standard_normal(d)
    W, mask = support_pattern(d, seed=4)
    W.data[:] = rng.standard_normal(W.nnz)
    U, V = rng.standard_normal((d, 3)), rng.standard_normal((d, 3))
    z = np.zeros(d)
    seen = np.zeros(d, bool)
    touched = np.zeros(2 * d, np.int64)
    a, p, n = 0, 5, 7
    m = rules.scatter_difference(X.indptr, X.indices, X.data, p, n, -1.0, z, seen, touched)
    np.testing.assert_allclose(z, -(Xd[p] - Xd[n]))
    assert sorted(touched[:m]) == sorted(set(np.flatnonzero(Xd[p] != 0)) | set(np.flatnonzero(Xd[n] != 0)))
    Wd = W.toarray()
    assert rules.linear_margin(X.indptr, X.indices, X.data, a, D, W.indptr, W.indices, W.data, z) == \
        pytest.approx(Xd[a] @ (np.diag(D) + Wd) @ z, abs=1e-12)
    g = np.concatenate([Xd[a] * z, (np.outer(Xd[a], z) * mask).ravel()])
    assert rules.linear_grad_sq(X.indptr, X.indices, X.data, a, W.indptr, W.indices, z) == pytest.approx(g @ g)
    u, v = np.zeros(3), np.zeros(3)
    got = rules.lowrank_factors(X.indptr, X.indices, X.data, a, U, V, z, touched, m, u, v)
    assert got == pytest.approx(Xd[a] @ U @ V.T @ z)
    np.testing.assert_allclose(u, Xd[a] @ U)
    np.testing.assert_allclose(v, z @ V)
    rules.clear_difference(z, seen, touched, m)
    assert not z.any() and not seen.any()


def test_cooccurrence_support_keeps_the_top_pairs_per_feature():
    X = corpus(1, n=30, d=12)
    C = (X.T @ X).toarray()
    np.fill_diagonal(C, 0)
    for k in (0, 2, 5, 11):
        S = cooccurrence_support(X, k)
        assert S.shape == (12, 12) and S.indptr.dtype == np.int64 and S.indices.dtype == np.int32
        for i in range(12):
            got = set(S.indices[S.indptr[i]:S.indptr[i + 1]])
            nonzero = np.flatnonzero(C[i] > 0)
            order = nonzero[np.lexsort((nonzero, -C[i, nonzero]))]
            assert got == set(order[:k].tolist())


def test_auto_sizes_stay_within_the_budget():
    for d, nnz in ((62061, 900_000), (1000, 5000), (50, 400), (20_000, 30_000)):
        r, k = compact_sizes(d, nnz, 20.0)
        assert d + d * k + 2 * d * r <= 20 * nnz or (r == 0 and k == 0)
    X = corpus(2, n=40, d=30)
    y = np.arange(40) % 4
    est = CompactSSI(n_triplets=200, random_state=0).fit(X, y)
    assert est.model_.n_entries <= 20 * X.nnz
    assert est.rank_ == est.resolved_params_["rank"] > 0


def test_learner_is_the_rule_on_the_oasis_stream():
    """fit = the compiled rule over the SORS stream OASIS draws with the same seed, from I + U0 U0^T."""
    X = corpus(4, n=30, d=10)
    y = np.arange(30) % 3
    est = CompactSSI(n_triplets=150, rank=2, support=3, C=0.7, learning_rate=0.2, random_state=3).fit(X, y)
    twin = CompactSSI(n_triplets=150, rank=2, support=3, C=0.7, learning_rate=0.2, random_state=3)
    twin.partial_fit_triplets(X, sors_triplets(y, 150, seed=3))
    np.testing.assert_allclose(est.score_matrix(X, X), twin.score_matrix(X, X), atol=1e-12)
    zero = CompactSSI(n_triplets=0, rank=2, support=3, random_state=3).fit(X, y)
    M0 = np.eye(10) + zero.U_ @ zero.V_.T
    np.testing.assert_allclose(zero.score_matrix(X, X), X.toarray() @ M0 @ X.toarray().T, atol=1e-12)


def model_and_dense(seed=0, d=9, r=3):
    rng = np.random.default_rng(seed)
    W, mask = support_pattern(d, seed)
    W.data[:] = rng.standard_normal(W.nnz)
    D, U, V = rng.standard_normal(d), rng.standard_normal((d, r)), rng.standard_normal((d, r))
    model = CompactSimilarity(D, W, U, V, normalize=True, metadata={"algorithm": "ssi-dwuv"})
    return model, np.diag(D) + W.toarray() + U @ V.T


def test_scores_are_the_dense_bilinear_form():
    model, M = model_and_dense()
    X = corpus(7)
    Xn = X.toarray()
    Q = sp.csr_matrix(2.5 * Xn[:4])  # normalising: a scaled row scores like the row
    np.testing.assert_allclose(model.score_matrix(Q, X), Xn[:4] @ M @ Xn.T, atol=1e-12)
    np.testing.assert_allclose(model.score_pairs(X[:5], X[5:10]), np.einsum("ij,jk,ik->i", Xn[:5], M, Xn[5:10]),
                               atol=1e-12)
    np.testing.assert_allclose(model.scorer(X)(np.array([2, 3])), Xn[2:4] @ M @ Xn.T, atol=1e-12)
    assert model.n_entries == 9 + model.W.nnz + 2 * 9 * 3
    assert model.nbytes > 0


def test_constructor_refuses_what_would_misscore():
    model, _ = model_and_dense()
    D, W, U, V = model.diagonal, model.W, model.U, model.V
    for args in ((D, W + sp.eye(9, format="csr"), U, V), (D, W, U[:, :2], V), (D[:5], W, U, V),
                 (D, W, U * np.nan, V), (D, W.toarray(), U, V), (D, W, sp.csr_matrix(U), V)):
        with pytest.raises(InvalidInputError):
            CompactSimilarity(*args)


def test_save_load_round_trip_and_loader(tmp_path):
    model, _ = model_and_dense()
    path = tmp_path / "m.npz"
    model.save(path)
    back = load_similarity_model(path)
    assert isinstance(back, CompactSimilarity)
    X = corpus(8)
    assert np.array_equal(back.score_matrix(X, X), model.score_matrix(X, X))
    assert back.metadata["algorithm"] == "ssi-dwuv" and back.checksum() == model.checksum()


def hostile(tmp_path, name, arrays, meta_changes=(), drop=()):
    """A file with a valid checksum (anyone can compute one) but contents we never write."""
    meta = {"n_features": 9, "rank": 3, "normalize": True, "nnz_w": 0}
    meta.update(dict(meta_changes))
    for key in drop:
        meta.pop(key)
    path = tmp_path / f"{name}.npz"
    save_bundle(path, arrays, meta, kind=COMPACT_MODEL_KIND)
    return path


def test_hostile_files_refused(tmp_path):
    model, _ = model_and_dense()
    good = model._arrays()
    ok = hostile(tmp_path, "ok", good, {"nnz_w": model.W.nnz})
    assert CompactSimilarity.load(ok).W.nnz == model.W.nnz  # the helper writes loadable files
    nnz = {"nnz_w": model.W.nnz}

    def changed(**arrays):
        out = dict(good)
        out.update(arrays)
        return {k: v for k, v in out.items() if v is not None}

    nan = good["U"].copy()
    nan[1, 1] = np.nan
    diag_indices = good["W_indices"].copy()
    diag_indices[0] = 0  # row 0 pointing at column 0, sorted still if it was first
    bad = {
        "U float32": (changed(U=good["U"].astype(np.float32)), nnz, ()),
        "V wrong shape": (changed(V=good["V"][:, :2]), nnz, ()),
        "U NaN": (changed(U=nan), nnz, ()),
        "diagonal int": (changed(diagonal=good["diagonal"].astype(np.int64)), nnz, ()),
        "no diagonal": (changed(diagonal=None), nnz, ()),
        "no W": (changed(W_data=None), nnz, ()),
        "W indices int64": (changed(W_indices=good["W_indices"].astype(np.int64)), nnz, ()),
        "W index past d": (changed(W_indices=np.where(np.arange(good["W_indices"].size) == 0, 99,
                                                      good["W_indices"]).astype(np.int32)), nnz, ()),
        "W on the diagonal": (changed(W_indices=diag_indices), nnz, ()),
        "W data infinite": (changed(W_data=np.full_like(good["W_data"], np.inf)), nnz, ()),
        "nnz_w mismatch": (good, {"nnz_w": model.W.nnz + 1}, ()),
        "extra array": (changed(evil=np.zeros(3)), nnz, ()),
        "rank mismatch": (good, {**nnz, "rank": 4}, ()),
        "huge rank": (good, {**nnz, "rank": 10**9}, ()),
        "rank as a string": (good, {**nnz, "rank": "3"}, ()),
        "normalize missing": (good, nnz, ("normalize",)),
        "half a split": (good, {**nnz, "split_seed": 0}, ()),
    }
    for what, (arrays, changes, drop) in bad.items():
        path = hostile(tmp_path, what.replace(" ", "_"), arrays, changes, drop)
        with pytest.raises(FileFormatError):
            CompactSimilarity.load(path)
            pytest.fail(f"accepted a file with {what}")
    save_bundle(tmp_path / "other.npz", good, {}, kind="embedding-similarity")
    with pytest.raises(FileFormatError):
        CompactSimilarity.load(tmp_path / "other.npz")


def test_exact_index_scores_are_the_models(tmp_path):
    from sparsesim.indexes import build_index

    model, _ = model_and_dense(seed=3, d=9, r=3)
    X = corpus(9, n=40)
    index = build_index(model, X, kind="exact", ids=[f"d{i}" for i in range(40)], block_size=3, chunk_size=7)
    rows, scores = index.query_rows(X[:6], top_k=5)
    full = model.score_matrix(X[:6], X)
    np.testing.assert_allclose(scores, -np.sort(-full, axis=1)[:, :5], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.take_along_axis(full, rows, axis=1), scores, rtol=1e-6, atol=1e-6)
    ids, sims = index.query_similar(["d2"], top_k=4)  # a stored document as the query, itself left out
    row = full[2].copy()
    row[2] = -np.inf
    np.testing.assert_allclose(sims[0], -np.sort(-row)[:4], rtol=1e-6, atol=1e-6)
    index.add(corpus(10, n=3), ids=["n0", "n1", "n2"])
    assert index.n_documents == 43
    index.save(tmp_path / "idx")
    from sparsesim.indexes import open_index

    loaded = open_index(tmp_path / "idx")
    assert loaded.kind == "compact-exact" and loaded.model.checksum() == model.checksum()
    rows2, scores2 = loaded.query_rows(X[:6], top_k=5)
    np.testing.assert_array_equal(rows2, rows)
    np.testing.assert_allclose(scores2, scores, rtol=0, atol=0)


def test_ann_index_reranks_with_the_exact_score():
    from sparsesim.data.synthetic import rcv1_like
    from sparsesim.indexes import CompactAnnIndex, build_index

    data = rcv1_like(460, n_features=300, nnz_per_doc=25, n_classes=6, class_vocab=120, seed=4)
    X, Q = data.X[:400], data.X[400:]
    est = CompactSSI(n_triplets=3000, random_state=0).fit(X, data.y[:400])
    model = est.model_
    assert model.rank > 0 and model.W.nnz > 0
    exact = build_index(model, X, kind="exact")
    rows, scores = exact.query_rows(Q, top_k=10)
    ann = build_index(model, X, kind="ann", target_recall=None, random_state=1)
    assert isinstance(ann, CompactAnnIndex)
    full = {"nprobe": ann.nlist_, "dense_pool": ann.n_documents, "n_postings": ann.n_documents,
            "sparse_pool": ann.n_documents}
    arows, ascores = ann.query_rows(Q, top_k=10, **full)  # every document a candidate: the exact answer
    np.testing.assert_array_equal(arows, rows)
    np.testing.assert_allclose(ascores, scores, rtol=0, atol=1e-12)
    calibrated = build_index(model, X, kind="ann", random_state=1)
    assert calibrated.calibration_["met"]
    _, cscores = calibrated.query_rows(Q, top_k=10)
    assert np.mean(cscores >= scores[:, -1:] - 1e-9) >= 0.9  # fresh queries, recall counting ties


def test_cli_trains_evaluates_queries_and_builds_an_index(tmp_path, monkeypatch, capsys):
    import json

    from clitools import run_cli

    out = tmp_path / "compact.npz"
    code, _, err = run_cli(["train", "--algorithm", "ssi-dwuv", "--dataset", "news20-sample", "--triplets", "400",
                            "--seed", "0", "--out", out], monkeypatch, capsys)
    assert code == 0, err
    assert isinstance(load_similarity_model(out), CompactSimilarity)
    code, text, _ = run_cli(["evaluate", "--model", out, "--dataset", "news20-sample", "--json"], monkeypatch, capsys)
    assert code == 0
    res = json.loads(text)
    assert res["split"] == "test" and 0 < res["map"] <= 1 and res["model_bytes"] == load_similarity_model(out).nbytes
    code, text, _ = run_cli(["query", "--model", out, "--corpus", "news20-sample", "--query-ids", "3", "--top-k", "4",
                             "--json"], monkeypatch, capsys)
    assert code == 0
    scores = [r["score"] for r in json.loads(text.strip().splitlines()[0])["results"]]
    assert len(scores) == 4 and scores == sorted(scores, reverse=True)
    code, text, err = run_cli(["index", "build", "--model", out, "--data", "news20-sample", "--out", tmp_path / "idx",
                               "--json"], monkeypatch, capsys)
    assert code == 0, err
    assert json.loads(text)["index_kind"] == "compact-exact"
    code, text, err = run_cli(["query", "--index", tmp_path / "idx", "--query-ids", "comp.graphics/37914", "--top-k",
                               "4", "--json"], monkeypatch, capsys)
    assert code == 0, err
    hits = json.loads(text.strip().splitlines()[0])["results"]
    assert len(hits) == 4 and "comp.graphics/37914" not in [h["id"] for h in hits]
    code, text, err = run_cli(["index", "build", "--model", out, "--data", "news20-sample", "--out", tmp_path / "sh",
                               "--shards", "2"], monkeypatch, capsys)  # sharded indexes serve bilinear models
    assert code == 2 and err.startswith("error:") and "compact" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "sh").exists()


def test_tune_searches_the_default_space_on_the_training_part():
    from sparsesim.data import load_dataset
    from sparsesim.triplets import stratified_split
    from sparsesim.tuning import default_grid, tune_similarity

    assert default_grid("ssi-dwuv", {}) == {"learning_rate": [0.1, 0.3, 1.0]}
    data = load_dataset("news20-sample")
    train, _ = stratified_split(data.y, 0.7, seed=0)
    result = tune_similarity("ssi-dwuv", data.X[train], data.y[train], n_triplets=1500, seed=0)
    rates = {t["params"]["learning_rate"] for t in result.trials}
    assert rates == {0.1, 0.3, 1.0}
    assert result.estimator.learning_rate == result.best_params["learning_rate"]
    assert isinstance(result.estimator.model_, CompactSimilarity)


def test_start_from_continues_like_the_learner_and_keeps_the_support():
    from sparsesim.data.synthetic import rcv1_like

    data = rcv1_like(120, n_features=60, nnz_per_doc=10, n_classes=3, class_vocab=30, seed=2)
    X, y = data.X, data.y
    a = CompactSSI(n_triplets=400, random_state=0).fit(X, y)
    b = CompactSSI(random_state=0).start_from(a.model_, X)
    assert b.resolved_params_ == a.resolved_params_
    # the support: the stored entries and the corpus co-occurrences (as fit chose it on X)
    np.testing.assert_array_equal(b.W_.indptr, a.W_.indptr)
    np.testing.assert_array_equal(b.W_.indices, a.W_.indices)
    np.testing.assert_array_equal(b.W_.toarray(), a.W_.toarray())
    more = sors_triplets(y, 200, seed=5)
    a.partial_fit_triplets(X, more)
    b.partial_fit_triplets(X, more)
    for part in ("diagonal", "U", "V"):
        np.testing.assert_allclose(getattr(b.model_, part), getattr(a.model_, part), rtol=0, atol=1e-12)
    assert abs(b.model_.W - a.model_.W).max() < 1e-12 and a.n_updates_ > 0
    with pytest.raises(InvalidInputError):
        CompactSSI().start_from(CompactSimilarity(np.ones(60), sp.csr_matrix((60, 60)), np.zeros((60, 1)),
                                                  np.zeros((60, 1)), normalize=False))


def test_feedback_learning_on_a_saved_compact_index(tmp_path):
    """`serve --learn` on a compact index: the feedback learner applies ssi-dwuv's rule from the
    served model, answers exactly under the newest version, snapshots and resumes."""
    from sparsesim.data.synthetic import rcv1_like
    from sparsesim.feedback.learner import FeedbackLearner
    from sparsesim.indexes import build_index, open_index

    data = rcv1_like(150, n_features=60, nnz_per_doc=10, n_classes=3, class_vocab=30, seed=3)
    X, y = data.X, data.y
    model = CompactSSI(n_triplets=300, random_state=0).fit(X, y).model_
    build_index(model, X, kind="exact").save(tmp_path / "idx")
    index = open_index(tmp_path / "idx", mmap=True)
    assert index.supports_learning
    snap = tmp_path / "snap.npz"
    records = [{"query": i, "preferred": int(np.flatnonzero(y == y[i])[1]), "other": int(np.flatnonzero(y != y[i])[0])}
               for i in range(12)]
    fl = FeedbackLearner(index, snapshot=snap, snapshot_every=5, snapshot_seconds=3600)
    assert fl.info()["learner"] == "CompactSSI"
    assert fl.submit(records) == 12
    fl.flush(timeout=600)
    # offline: the same rule from the same model over the same triplets (stored rows are n(x))
    rows = sp.vstack([index.X_[[r["query"], r["preferred"], r["other"]]] for r in records], format="csr")
    off = CompactSSI(**{k: v for k, v in model.metadata["params"].items()}).start_from(model, index.X_)
    off.partial_fit_triplets(rows, np.arange(36).reshape(12, 3))
    assert off.n_updates_ > 0
    np.testing.assert_allclose(fl.model.U, off.model_.U, rtol=0, atol=1e-12)
    ids, scores, version = fl.query(X[:3], 5)
    assert version >= 1
    want = off.model_.score_matrix(X[:3], X)
    np.testing.assert_allclose(scores, -np.sort(-want, axis=1)[:, :5], rtol=1e-9, atol=1e-9)
    fl.close()  # final snapshot
    saved = CompactSimilarity.load(snap)
    assert saved.metadata["feedback"]["n_applied"] == 12 and saved.checksum() == fl.model.checksum()
    again = FeedbackLearner(index, snapshot=snap)
    try:
        assert again.info()["applied"] == 12 and again.resumed_from == str(snap)
        np.testing.assert_allclose(again.score(X[:2], [1, 2]), fl.score(X[:2], [1, 2]), atol=1e-12)
    finally:
        again.close()
    with pytest.raises(InvalidInputError):
        FeedbackLearner(index, snapshot=snap, resume=False)  # an existing snapshot is not replaced silently


def test_support_of_a_large_corpus_comes_from_a_seeded_sample(monkeypatch):
    import sparsesim.learners.compact as compact

    X = corpus(12, n=60, d=15)
    y = np.arange(60) % 3
    monkeypatch.setattr(compact, "SUPPORT_DOCUMENTS", 25)
    est = CompactSSI(n_triplets=0, rank=2, support=4, random_state=7).fit(X, y)
    rng = np.random.default_rng(7)
    U0 = rng.standard_normal((15, 2)) * (1.0 / np.sqrt(2))
    rows = np.sort(rng.choice(60, 25, replace=False))
    np.testing.assert_array_equal(est.U_, U0)  # the projection does not depend on the sample
    want = cooccurrence_support(X[rows], 4)
    assert np.array_equal(est.W_.indptr, want.indptr) and np.array_equal(est.W_.indices, want.indices)
    assert not np.array_equal(want.indices, cooccurrence_support(X, 4).indices)  # the sample mattered


def test_feedback_candidate_stage_rebuilds_a_compact_ann_index():
    """Corpora above exact_limit: candidates from the compact ann index, re-ranked exactly under the
    newest version; a refresh rebuilds that index with the newest model (same kind and settings)."""
    from sparsesim.data.synthetic import rcv1_like
    from sparsesim.feedback.learner import FeedbackLearner
    from sparsesim.indexes import CompactAnnIndex, build_index

    data = rcv1_like(300, n_features=80, nnz_per_doc=10, n_classes=3, class_vocab=30, seed=3)
    model = CompactSSI(n_triplets=300, random_state=0).fit(data.X, data.y).model_
    index = build_index(model, data.X, kind="ann", calibration_size=30)
    with FeedbackLearner(index, exact_limit=0, drift_sample=20) as fl:
        fl.submit([{"query": i, "preferred": (i + 3) % 300, "other": (i + 1) % 300} for i in range(30)])
        fl.flush(timeout=600)
        info = fl.refresh_candidates()
        assert info["refreshes"] == 1 and info["built_from_version"] == fl.version >= 1
        assert isinstance(fl._candidates, CompactAnnIndex) and fl._candidates.params() == index.params()
        _, scores, _ = fl.query(data.X[:2], 5)
        want = -np.sort(-fl.model.score_matrix(data.X[:2], data.X), axis=1)[:, :5]
        assert np.mean(np.isclose(scores, want, rtol=1e-9, atol=1e-12)) >= 0.9  # candidates re-ranked exactly
        np.testing.assert_allclose(scores[:, 0], want[:, 0], rtol=1e-9)
