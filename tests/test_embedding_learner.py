"""ProxySSI: its update rules against dense numpy implementations of their equations, and the learner."""

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.embedding import EmbeddingSimilarity
from sparsesim.engine.embedding_rules import ADAGRAD_EPS, proxy_rule, run_batch, triplet_rule
from sparsesim.exceptions import SparsesimError
from sparsesim.learners.embedding import ALPHA_GRID, IDF_GRID, LEXICAL_GRID, ProxySSI
from sparsesim.triplets import sors_triplets, stratified_split


def _corpus(seed=0, n=6, d=9, density=0.5):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, format="csr", random_state=rng) + sp.eye(n, d, format="csr")
    X = sp.csr_matrix(X)
    return sp.csr_matrix(X.multiply(1.0 / np.sqrt(X.multiply(X).sum(axis=1)))), rng


def _adagrad_rows(x, P, GP, gu, lr):
    """Dense reference of the row step: G_j += x_j^2 mean(gu^2); P[j] -= lr x_j gu / sqrt(G_j + eps)."""
    P, GP = P.copy(), GP.copy()
    for j in np.flatnonzero(x):
        GP[j] += x[j] ** 2 * np.mean(gu ** 2)
        P[j] -= lr * x[j] * gu / np.sqrt(GP[j] + ADAGRAD_EPS)
    return P, GP


def _d_normalise(u, ge):
    e = u / np.linalg.norm(u)
    return (ge - e * (e @ ge)) / np.linalg.norm(u)


def test_proxy_rule_matches_dense_equations():
    X, rng = _corpus()
    d, r, K = X.shape[1], 4, 3
    P, C = rng.standard_normal((d, r)), rng.standard_normal((K, r))
    GP, GC = rng.random(d), rng.random(K)
    scale, lr, i, y = 2.5, 0.3, 2, 1
    # dense reference
    x = X[i].toarray().ravel()
    u = x @ P
    e = u / np.linalg.norm(u)
    chat = C / np.linalg.norm(C, axis=1, keepdims=True)
    z = scale * chat @ e
    p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    loss = -np.log(p[y])
    w = scale * (p - np.eye(K)[y])
    ge = w @ chat
    C_ref, GC_ref = C.copy(), GC.copy()
    for k in range(K):
        g = w[k] * (e - chat[k] * (chat[k] @ e)) / np.linalg.norm(C[k])
        GC_ref[k] += np.mean(g ** 2)
        C_ref[k] -= lr * g / np.sqrt(GC_ref[k] + ADAGRAD_EPS)
    P_ref, GP_ref = _adagrad_rows(x, P, GP, _d_normalise(u, ge), lr)
    # gradient check of the reference's dL/de against a finite difference of the loss
    def f(ev):
        zz = scale * chat @ ev
        return -(zz[y] - np.log(np.exp(zz).sum()))
    h = 1e-6
    fd = np.array([(f(e + h * np.eye(r)[a]) - f(e - h * np.eye(r)[a])) / (2 * h) for a in range(r)])
    np.testing.assert_allclose(fd, ge, atol=1e-6)
    # compiled rule
    got = proxy_rule(X.indptr, X.indices, X.data, i, y, P, C, GP, GC, scale, lr, np.empty((4, max(r, K))))
    assert got == pytest.approx(loss, rel=1e-12)
    np.testing.assert_allclose(P, P_ref, atol=1e-12)
    np.testing.assert_allclose(C, C_ref, atol=1e-12)
    np.testing.assert_allclose(GP, GP_ref, atol=1e-12)
    np.testing.assert_allclose(GC, GC_ref, atol=1e-12)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_triplet_rule_matches_dense_equations(sign):
    X, rng = _corpus(seed=1)
    d, r = X.shape[1], 5
    P, GP = rng.standard_normal((d, r)), rng.random(d)
    a, b, n, margin, lr = 0, 3, 4, 5.0, 0.2  # a large margin: the hinge is active
    xa, xb, xn = (X[k].toarray().ravel() for k in (a, b, n))
    ua, ub, un = xa @ P, xb @ P, xn @ P
    ea, eb, en = (u / np.linalg.norm(u) for u in (ua, ub, un))
    loss = margin - sign * (ea @ eb - ea @ en)
    grads = [_d_normalise(ua, -sign * (eb - en)), _d_normalise(ub, -sign * ea), _d_normalise(un, sign * ea)]
    P_ref, GP_ref = P.copy(), GP.copy()
    for x, g in zip((xa, xb, xn), grads):  # gradients formed first, then the three row steps in order
        P_ref, GP_ref = _adagrad_rows(x, P_ref, GP_ref, g, lr)
    got = triplet_rule(X.indptr, X.indices, X.data, a, b, n, sign, P, GP, margin, lr, np.empty((6, r)))
    assert got == pytest.approx(loss, rel=1e-12)
    np.testing.assert_allclose(P, P_ref, atol=1e-12)
    np.testing.assert_allclose(GP, GP_ref, atol=1e-12)


def test_triplet_rule_no_step_when_margin_met():
    """(a, a, n) with margin 0: <e_a, e_a> = 1 >= <e_a, e_n>, no loss and no step; the swapped sign
    asks the opposite order, a positive loss and a step."""
    X, rng = _corpus(seed=2)
    P = rng.standard_normal((X.shape[1], 3))
    before = P.copy()
    assert triplet_rule(X.indptr, X.indices, X.data, 0, 0, 1, 1.0, P, np.zeros(X.shape[1]), 0.0, 0.5,
                        np.empty((6, 3))) == 0.0
    np.testing.assert_array_equal(P, before)
    loss = triplet_rule(X.indptr, X.indices, X.data, 0, 0, 1, -1.0, P, np.zeros(X.shape[1]), 0.0, 0.5,
                        np.empty((6, 3)))
    assert loss > 0 and not np.array_equal(P, before)


def test_run_batch_applies_rules_in_order():
    X, rng = _corpus(seed=3, n=8)
    d, r, K = X.shape[1], 4, 2
    P0, C0 = rng.standard_normal((d, r)), rng.standard_normal((K, r))
    T = np.array([[0, 1, 2], [3, 4, 5], [6, 7, 0]])
    signs, classes = np.array([1.0, -1.0, 1.0]), np.array([0, -1, 1])
    P, C, GP, GC = P0.copy(), C0.copy(), np.zeros(d), np.zeros(K)
    losses = np.zeros(3)
    run_batch(X.indptr, X.indices, X.data, T, signs, classes, P, C, GP, GC, 2.0, 0.3, 0.5, 0.1, losses)
    P2, C2, GP2, GC2 = P0.copy(), C0.copy(), np.zeros(d), np.zeros(K)
    expect = []
    for t in range(3):
        loss = 0.0
        if classes[t] >= 0:
            loss += proxy_rule(X.indptr, X.indices, X.data, T[t, 0], classes[t], P2, C2, GP2, GC2, 2.0, 0.1,
                               np.empty((4, r)))
        loss += triplet_rule(X.indptr, X.indices, X.data, *T[t], signs[t], P2, GP2, 0.3, 0.05, np.empty((6, r)))
        expect.append(loss)
    np.testing.assert_allclose(losses, expect, atol=1e-12)
    np.testing.assert_allclose(P, P2, atol=1e-12)
    np.testing.assert_allclose(C, C2, atol=1e-12)


@pytest.fixture(scope="module")
def sample():
    from sparsesim.data import load_dataset

    data = load_dataset("news20-sample")
    tr, te = stratified_split(data.y, 0.7, seed=0)
    return data.X[tr], data.y[tr], data.X[te], data.y[te]


def test_fit_beats_cosine_on_held_out_documents(sample):
    Xtr, ytr, Xte, yte = sample
    est = ProxySSI(n_epochs=3, random_state=0).fit(Xtr, ytr)
    model = est.model_
    assert isinstance(model, EmbeddingSimilarity)
    assert model.identity_weight == est.identity_weight_ in ALPHA_GRID
    cosine = EmbeddingSimilarity(np.zeros((Xte.shape[1], 1)), normalize=True, identity_weight=1.0)
    from sparsesim.evaluation import evaluate_retrieval
    learned = evaluate_retrieval(model.scorer(Xte), yte)["map"]
    base = evaluate_retrieval(cosine.scorer(Xte), yte)["map"]
    assert learned > base + 0.1, (learned, base)
    # the pass, alpha and gamma kept are the best of the held-out table (MAP + AP@10)
    epoch, best = max(((h["epoch"], t) for h in est.validation_ for t in h["scores"]),
                      key=lambda et: et[1]["map"] + et[1]["ap@10"])
    assert (est.n_epochs_, est.identity_weight_, est.lexical_power_, est.lexical_idf_) == \
        (epoch, best["alpha"], best["lexical_power"], best["lexical_idf"])
    assert model.lexical_power == est.lexical_power_ in LEXICAL_GRID
    assert est.lexical_idf_ in IDF_GRID
    assert (model.lexical_weights is None) == (est.lexical_idf_ == 0.0)
    assert model.P.size <= 20 * Xtr.nnz


def test_fit_falls_back_toward_cosine_without_signal(sample):
    """Labels unrelated to the documents: what is learned does not transfer, and the held-out choice
    keeps no training (pass 0) or a large weight on cosine."""
    Xtr, ytr, _, _ = sample
    y = np.random.default_rng(0).permutation(ytr)
    est = ProxySSI(n_epochs=2, random_state=0, validation="classes", validation_fraction=0.5).fit(Xtr, y)
    assert est.n_epochs_ == 0 or est.identity_weight_ >= 4.0


def test_same_seed_same_model_and_partial_fit(sample):
    Xtr, ytr, _, _ = sample
    a = ProxySSI(n_epochs=1, random_state=3, validation="none").fit(Xtr, ytr)
    b = ProxySSI(n_epochs=1, random_state=3, validation="none").fit(Xtr, ytr)
    np.testing.assert_array_equal(a.P_, b.P_)
    T = sors_triplets(ytr, 600, seed=1)
    est = ProxySSI(n_components=16, random_state=0)
    first = est.partial_fit_triplets(Xtr, T).last_losses_.mean()
    for _ in range(3):
        est.partial_fit_triplets(Xtr, T)
    assert est.last_losses_.mean() < first
    assert est.n_triplets_seen_ == 2400


def test_class_folds_choose_on_the_summed_criterion(sample):
    """validation="classes": one model per disjoint set of held-out classes; the pass, alpha and
    gamma kept are those of the best criterion summed over the sets; a fixed gamma is kept."""
    Xtr, ytr, _, _ = sample
    est = ProxySSI(n_epochs=1, random_state=0, validation="classes", validation_fraction=0.25,
                   validation_folds=2, criterion="map").fit(Xtr, ytr)
    assert sorted({h["fold"] for h in est.validation_}) == [0, 1]
    total = {}
    for h in est.validation_:
        for t in h["scores"]:
            key = (h["epoch"], t["alpha"], t["lexical_power"], t["lexical_idf"])
            total[key] = total.get(key, 0.0) + t["map"]
    assert (est.n_epochs_, est.identity_weight_, est.lexical_power_, est.lexical_idf_) == max(total, key=total.get)
    fixed = ProxySSI(n_epochs=1, random_state=0, validation="classes", lexical_power=0.5).fit(Xtr, ytr)
    assert fixed.model_.lexical_power == 0.5
    assert {t["lexical_power"] for h in fixed.validation_ for t in h["scores"]} == {0.5}


@pytest.mark.parametrize("params", [{"n_components": 0}, {"scale": -1.0}, {"negatives": "hardest"},
                                    {"validation": "folds"}, {"validation_fraction": 1.0}, {"n_epochs": 0},
                                    {"identity_weight": -0.5}, {"lexical_power": 0.0},
                                    {"lexical_power": 2.0}, {"criterion": "ndcg"}, {"validation_folds": 0},
                                    {"lexical_idf": -1.0}, {"lexical_idf": float("nan")}])
def test_bad_parameters_raise(sample, params):
    Xtr, ytr, _, _ = sample
    with pytest.raises(SparsesimError):
        ProxySSI(**params).fit(Xtr, ytr)


def test_tune_fits_each_candidate_and_keeps_the_best(sample):
    from sparsesim.tuning import tune_similarity

    Xtr, ytr, _, _ = sample
    result = tune_similarity("proxy-ssi", Xtr, ytr, n_triplets=1000, grid={"scale": [1.0, 4.0]},
                             params={"n_epochs": 1}, seed=0)
    scores = [t["score"] for t in result.trials]
    assert len(scores) == 2 and result.best_score == max(scores)
    assert result.best_params == result.trials[int(np.argmax(scores))]["params"]
    assert result.estimator.scale_ == result.best_params["scale"]
    assert result.estimator.n_features_in_ == Xtr.shape[1]


def test_resolved_params_record_the_choice(sample, tmp_path):
    """The values fit used (width, temperature, alpha, gamma, passes) are in resolved_params_ and
    in the saved model's metadata."""
    Xtr, ytr, _, _ = sample
    est = ProxySSI(n_epochs=2, random_state=0, validation="classes").fit(Xtr, ytr)
    r = est.resolved_params_
    assert r == {"n_components": est.P_.shape[1], "scale": est.scale_, "identity_weight": est.identity_weight_,
                 "lexical_power": est.lexical_power_, "lexical_idf": est.lexical_idf_, "n_epochs": est.n_epochs_}
    est.model_.save(tmp_path / "m.npz")
    assert EmbeddingSimilarity.load(tmp_path / "m.npz").metadata["resolved_params"] == r


def test_idf_weights_of_the_identity_part(sample):
    """lexical_idf=beta weights the identity part's rows by the fit documents' idf ** beta."""
    Xtr, ytr, Xte, _ = sample
    est = ProxySSI(n_epochs=1, random_state=0, lexical_idf=1.0, lexical_power=0.5, identity_weight=2.0).fit(Xtr, ytr)
    df = np.asarray((Xtr != 0).sum(axis=0)).ravel()
    idf = np.log((1.0 + Xtr.shape[0]) / (1.0 + df)) + 1.0
    np.testing.assert_allclose(est.model_.lexical_weights, idf)
    A = Xte[:5].toarray()
    A = A / np.linalg.norm(A, axis=1, keepdims=True)
    L = np.sign(A) * np.sqrt(np.abs(A)) * idf
    L /= np.linalg.norm(L, axis=1, keepdims=True)
    E = est.model_.embed(Xte[:5])
    np.testing.assert_allclose(est.model_.score_matrix(Xte[:5], Xte[:5]), 2.0 * L @ L.T + E @ E.T, atol=1e-10)
    none = ProxySSI(n_epochs=1, random_state=0, lexical_idf=0.0).fit(Xtr, ytr)
    assert none.model_.lexical_weights is None
