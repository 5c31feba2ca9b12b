"""PA-Global, PA-Unique, OMTL, OMTLLOG, OMTLVON against literal dense implementations."""

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp

from sparsesim.data.mtl_classification import MultiTaskStreams, check_task_streams
from sparsesim.exceptions import DataNotFoundError, InvalidInputError
from sparsesim.learners.mtl_baselines import (
    OMTL,
    OMTLAdaptive,
    PAGlobal,
    PAUnique,
    omtl_interaction_inverse,
)
from sparsesim.learners.mtl_online import iter_rounds
from sparsesim.registry import algorithms_of_kind, make_estimator


def streams(seed=0, m=4, d=25, lengths=(30, 22, 30, 9)):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d)
    X = [sp.random(n, d, density=0.3, random_state=rng, format="csr") for n in lengths[:m]]
    y = []
    for x in X:
        lab = np.sign(x @ (w + 0.5 * rng.normal(size=d)))
        lab[lab == 0] = 1
        lab[:2] = [1, -1]
        y.append(lab)
    return X, y


def sequential_instances(X, y):
    """(task, dense x, label) in the order the learners see them: rounds, tasks ascending."""
    for rnd in iter_rounds(*check_task_streams(X, y)):
        for j, i in enumerate(rnd.tasks):
            x = np.zeros(X[0].shape[1])
            idx, val = rnd.instance(j)
            x[idx] = val
            yield int(i), x, rnd.y[j]


def pa1_step(w, x, y, C=1.0):
    loss = max(0.0, 1 - y * (w @ x))
    nx = x @ x
    tau = min(C, loss / nx) if (loss > 0 and nx > 0) else 0.0
    return w + tau * y * x


def test_pa_global_matches_literal():
    X, y = streams()
    model = PAGlobal(C=1.0).fit(X, y)  # the literal step below uses C = 1
    w = np.zeros(X[0].shape[1])
    margins = []
    for _, x, lab in sequential_instances(X, y):
        margins.append(w @ x)
        w = pa1_step(w, x, lab)
    assert np.max(np.abs(model.coef_ - w[:, None])) < 1e-10
    got = [m for rnd_m in zip(*[list(mm) + [None] * 30 for mm in model.online_margins_]) for m in rnd_m if m is not None]
    assert np.allclose(got, margins, atol=1e-12)


def test_pa_unique_matches_literal():
    X, y = streams(1)
    model = PAUnique(C=0.5).fit(X, y)
    W = np.zeros((X[0].shape[1], len(X)))
    for i, x, lab in sequential_instances(X, y):
        W[:, i] = pa1_step(W[:, i], x, lab, C=0.5)
    assert np.max(np.abs(model.coef_ - W)) < 1e-10


def kron_perceptron(X, y, A_update=None):
    """Literal multitask Perceptron in R^{m d}: w <- w + y (A^{-1} ⊗ I_d) (e_i ⊗ x)."""
    m, d = len(X), X[0].shape[1]
    w = np.zeros(m * d)
    A = np.linalg.inv(omtl_interaction_inverse(m)) if A_update is None else np.eye(m) / m
    for i, x, lab in sequential_instances(X, y):
        phi = np.kron(np.eye(m)[i], x)
        if np.sign(w @ phi) != lab:
            W_prev = w.reshape(m, d).T.copy()  # d x m
            w = w + lab * np.kron(np.linalg.inv(A), np.eye(d)) @ phi
            if A_update is not None:
                A = A_update(A, W_prev)
    return w.reshape(m, d).T, A


def test_omtl_matches_kronecker_perceptron():
    X, y = streams(2)
    model = OMTL().fit(X, y)
    W, _ = kron_perceptron(X, y)
    assert np.max(np.abs(model.coef_ - W)) < 1e-10
    A_inv = omtl_interaction_inverse(5)
    assert np.allclose(A_inv @ ((5 + 1) * np.eye(5) - np.ones((5, 5))), np.eye(5))


def test_omtllog_matches_literal_divergence_update():
    X, y = streams(3, lengths=(12, 9, 12, 6))
    eta = 1e-4

    def logdet(A, W):  # argmin_A tr(A W^T W) + D_ld(A, A_prev)/eta  <=>  A^{-1} = A_prev^{-1} + eta W^T W
        return np.linalg.inv(np.linalg.inv(A) + eta * W.T @ W)

    model = OMTLAdaptive("logdet", eta=eta).fit(X, y)
    W, A = kron_perceptron(X, y, logdet)
    assert np.max(np.abs(model.coef_ - W)) / max(1, np.abs(W).max()) < 1e-10
    assert np.allclose(model.A_inv_, np.linalg.inv(A), rtol=1e-9)
    assert not np.allclose(model.A_inv_, len(X) * np.eye(len(X)), rtol=1e-3)  # it did adapt


def test_omtlvon_matches_literal_divergence_update():
    X, y = streams(4, lengths=(12, 9, 12, 6))
    eta = 1e-4

    def vonneumann(A, W):  # argmin_A tr(A W^T W) + D_vn(A, A_prev)/eta  <=>  log A = log A_prev - eta W^T W
        return scipy.linalg.expm(scipy.linalg.logm(A).real - eta * W.T @ W)

    model = OMTLAdaptive("vonneumann", eta=eta).fit(X, y)
    W, A = kron_perceptron(X, y, vonneumann)
    assert np.max(np.abs(model.coef_ - W)) / max(1, np.abs(W).max()) < 1e-9
    assert np.allclose(model.A_inv_, np.linalg.inv(A), rtol=1e-8)
    assert not np.allclose(model.A_inv_, len(X) * np.eye(len(X)), rtol=1e-3)  # it did adapt


def test_epoch_warmup_keeps_interaction_fixed():
    X, y = streams(5)
    model = OMTLAdaptive("logdet", eta=0.01, epoch=10**6).fit(X, y)
    assert np.allclose(model.A_inv_, len(X) * np.eye(len(X)))


def test_normalize_keeps_trace():
    X, y = streams(6)
    for div in ("logdet", "vonneumann"):
        model = OMTLAdaptive(div, eta=0.5, normalize=True).fit(X, y)
        assert np.isclose(np.trace(model.A_inv_), len(X))
        assert np.all(np.isfinite(model.coef_))


def test_divergence_is_a_clear_error():
    X, y = streams(7, lengths=(300, 300, 300, 300))
    with pytest.raises(InvalidInputError, match="diverged"):
        OMTLAdaptive("logdet", eta=10.0).fit(X, y)


def test_registered_names_and_bad_input():
    names = algorithms_of_kind("multitask-classifier")
    for n in ("romco-nucl", "romco-logd", "pa-global", "pa-unique", "omtl", "omtllog", "omtlvon"):
        assert n in names
    assert make_estimator("omtlvon").divergence == "vonneumann"
    X, y = streams(8)
    for name in ("pa-global", "pa-unique", "omtl", "omtllog", "omtlvon"):
        with pytest.raises(InvalidInputError, match="only one class"):
            make_estimator(name).fit(X, [y[0], np.ones(y[1].size), y[2], y[3]])
        Xbad = [x.copy() for x in X]
        Xbad[1].data[0] = np.inf
        with pytest.raises(InvalidInputError, match="NaN or infinite"):
            make_estimator(name).fit(Xbad, y)
        with pytest.raises(InvalidInputError, match="feature counts"):
            make_estimator(name).fit([X[0], sp.csr_matrix((5, 3))], [y[0], np.array([1, -1, 1, -1, 1])])
    with pytest.raises(InvalidInputError):
        OMTLAdaptive("burg").fit(X, y)


def test_container_checks_and_shuffle():
    X, y = streams(9)
    s = MultiTaskStreams(X, y, ["a", "b", "c", "d"], name="toy")
    assert s.n_rounds == 30 and s.n_samples == [30, 22, 30, 9]
    a, b = s.shuffled(3), s.shuffled(3)
    assert all((xa != xb).nnz == 0 for xa, xb in zip(a.X, b.X))
    assert sorted(a.y[1].tolist()) == sorted(s.y[1].tolist())
    with pytest.raises(InvalidInputError, match="task names"):
        MultiTaskStreams(X, y, ["a"])


def test_real_data_loaders_small():
    from sparsesim.data.catalog import load_registered

    try:
        mhc = load_registered("mhc1")
        mine = load_registered("landmine")
    except DataNotFoundError as exc:
        pytest.skip(f"data not available: {exc}")
    assert mhc.n_tasks == 12 and mhc.n_features == 400
    assert mhc.task_names[0] == "A0201"
    assert np.allclose(np.asarray(mhc.X[0].multiply(mhc.X[0]).sum(1)).ravel(), 1.0)
    assert mine.n_tasks == 29 and mine.n_features == 10
    assert all(np.unique(yy).size == 2 for yy in mine.y)
    assert np.all(mine.X[3][:, -1].toarray() == 1.0)  # the constant feature
    for name in ("pa-unique", "omtl"):
        model = make_estimator(name).fit(mhc.head(200).X, mhc.head(200).y)
        assert model.error_rates_.mean() < 0.5


# --------------------------------------------------------------------------- saved models


@pytest.mark.parametrize("name", algorithms_of_kind("multitask-classifier"))
def test_every_classifier_saves_a_model_that_predicts_like_it(name, tmp_path):
    from sparsesim.models import MultiTaskLinearModel

    X, y = streams(seed=3)
    est = make_estimator(name).fit(X, y)
    model = est.model_
    meta = model.save(tmp_path / "m.npz")
    assert meta["algorithm"] == type(est).__name__ and meta["n_tasks"] == 4
    back = MultiTaskLinearModel.load(tmp_path / "m.npz")
    assert np.array_equal(back.coef, est.coef_) and back.metadata["params"] == meta["params"]
    assert back.metadata["n_mistakes"] == est.n_mistakes_.tolist()
    for task in range(4):
        np.testing.assert_array_equal(back.decision_function(X[task], task), est.decision_function(X[task], task))
        np.testing.assert_array_equal(back.predict(X[task], task), est.predict(X[task], task))
    if name.startswith("romco"):  # U and V are saved, and a learner resumes from them
        assert sorted(back.parts) == ["U", "V"]
        more = streams(seed=4)
        # the saved values of the "auto" parameters: the resumed learner takes the same steps
        resumed = make_estimator(name, **back.metadata["resolved_params"]).set_state(
            back.parts["U"], back.parts["V"]).partial_fit(*more)
        est.partial_fit(*more)
        np.testing.assert_allclose(resumed.coef_, est.coef_, rtol=1e-9, atol=1e-12)


def test_saved_linear_model_bad_input(tmp_path):
    from sparsesim.exceptions import FileFormatError
    from sparsesim.models import MultiTaskLinearModel
    from sparsesim.models import BilinearSimilarity

    coef = np.arange(6.0).reshape(3, 2)
    with pytest.raises(InvalidInputError, match="NaN"):
        MultiTaskLinearModel(np.full((3, 2), np.nan))
    with pytest.raises(InvalidInputError, match="add up"):
        MultiTaskLinearModel(coef, parts={"U": coef, "V": coef})
    model = MultiTaskLinearModel(coef, parts={"U": coef - 1.0, "V": np.ones((3, 2))})
    with pytest.raises(InvalidInputError, match="out of range"):
        model.decision_function(np.eye(3), 2)
    with pytest.raises(InvalidInputError):
        model.decision_function(np.eye(4), 0)  # 4 features, the model has 3
    with pytest.raises(InvalidInputError, match="not fitted"):
        PAGlobal().model_
    path = tmp_path / "m.npz"
    model.save(path)
    path.write_bytes(path.read_bytes()[:-20])  # truncated
    with pytest.raises(FileFormatError):
        MultiTaskLinearModel.load(path)
    BilinearSimilarity(sp.csr_matrix((3, 3))).save(path)  # another kind of model file
    with pytest.raises(FileFormatError, match="expected"):
        MultiTaskLinearModel.load(path)
    with pytest.raises(FileFormatError, match="no such file"):
        MultiTaskLinearModel.load(tmp_path / "absent.npz")
