"""Data-adaptive defaults: "auto" parameters resolved from the first triplets; explicit values win."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim import defaults
from sparsesim.exceptions import InvalidInputError, SmallClassWarning
from sparsesim.learners.bilinear import OASIS, SORS, AdaSORS
from sparsesim.models import BilinearSimilarity


def labelled_problem(n=90, d=40, scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    y = np.repeat([0, 1, 2], n // 3)
    centers = rng.normal(size=(3, d)) * (rng.random((3, d)) < 0.3)
    dense = np.maximum(centers[y] + 0.5 * rng.normal(size=(n, d)) * (rng.random((n, d)) < 0.3), 0)
    return sp.csr_matrix(scale * dense), y


@pytest.mark.parametrize("cls,kind", [(OASIS, "oasis"), (SORS, "sors"), (AdaSORS, "adasors")])
def test_auto_values_follow_the_stated_rule(cls, kind):
    X, y = labelled_problem()
    est = cls(n_triplets=600, random_state=3).fit(X, y)
    stats = defaults.data_statistics(X)
    s, g = stats["sq_x"] * stats["sq_z"], stats["abs_x"] * stats["abs_z"]
    got = est.resolved_params_
    if kind == "oasis":
        assert got["C"] == pytest.approx(defaults.OASIS_C_FACTOR / s)
    else:
        assert got["lam"] == pytest.approx(defaults.L1_SURVIVAL * g / 600)
    if kind == "sors":
        q = max(1.0, stats["margin"]) ** defaults.SORS_MARGIN_POWER
        assert got["eta"] == pytest.approx(defaults.SORS_ETA_FACTOR * q / s)
    if kind == "adasors":
        assert got["delta"] == pytest.approx(defaults.ADA_DELTA_FACTOR * g)
        assert got["eta"] == pytest.approx(defaults.ADA_ETA_FACTOR * got["delta"] / s)
    assert est.data_statistics_ == stats


def test_auto_values_scale_with_the_data():
    X, y = labelled_problem()
    X = X / np.sqrt(defaults.data_statistics(X)["margin"]) / 2  # typical margin 1/4 under M = I
    small = SORS(n_triplets=300, random_state=0).fit(X, y).resolved_params_
    big = SORS(n_triplets=300, random_state=0).fit(10.0 * X, y).resolved_params_
    # lam ~ |x_i||z_j| scales by 10^2; eta ~ 1 / (|x|^2 |z|^2) by 10^-4 while the typical margin
    # |x''^T (x - x')| stays below 1, and by 10^-4 * sqrt(100 / 4) once it is 25
    assert big["lam"] == pytest.approx(small["lam"] * 1e2)
    assert small["eta"] == pytest.approx(defaults.SORS_ETA_FACTOR / defaults.data_statistics(X)["s"])
    assert big["eta"] == pytest.approx(small["eta"] * 1e-4 * 5.0)
    mid = SORS(n_triplets=300, random_state=0).fit(3.0 * X, y).resolved_params_
    assert mid["eta"] == pytest.approx(small["eta"] * 3.0 ** -4 * 1.5)  # margin 9/4 > 1: sqrt(2.25) = 1.5


def test_explicit_values_win_and_are_recorded(tmp_path):
    X, y = labelled_problem()
    est = AdaSORS(eta=0.3, lam=1e-5, delta="auto", n_triplets=300, random_state=0).fit(X, y)
    assert est.resolved_params_["eta"] == 0.3 and est.resolved_params_["lam"] == 1e-5
    assert est.resolved_params_["delta"] > 0 and est.get_params()["delta"] == "auto"
    explicit = SORS(eta=0.3, lam=1e-5, n_triplets=300, random_state=0).fit(X, y)
    assert explicit.resolved_params_ == {"eta": 0.3, "lam": 1e-5, "max_model_bytes": explicit.resolved_params_[
        "max_model_bytes"]} and explicit.data_statistics_ == {}
    path = tmp_path / "m.npz"
    est.model_.save(path)
    meta = BilinearSimilarity.load(path).metadata
    assert meta["resolved_params"] == pytest.approx(est.resolved_params_)
    assert meta["params"]["delta"] == "auto"


def test_chunked_learning_resolves_the_same_values():
    X, y = labelled_problem()
    from sparsesim.triplets import sors_triplets

    T = sors_triplets(y, 300, seed=0)
    one = SORS(n_triplets=300).partial_fit_triplets(X, T)
    two = SORS(n_triplets=300).partial_fit_triplets(X, T[:7]).partial_fit_triplets(X, T[7:])
    assert one.resolved_params_ == two.resolved_params_
    np.testing.assert_array_equal(one.model_.W.toarray(), two.model_.W.toarray())


def test_auto_equals_the_same_numbers_given_explicitly():
    X, y = labelled_problem()
    auto = SORS(n_triplets=400, random_state=1).fit(X, y)
    fixed = SORS(n_triplets=400, random_state=1, **auto.resolved_params_).fit(X, y)
    np.testing.assert_array_equal(auto.model_.W.toarray(), fixed.model_.W.toarray())


@pytest.mark.parametrize("value", ["fast", -1.0, float("nan"), True])
def test_bad_values_refused(value):
    X, y = labelled_problem()
    with pytest.raises(InvalidInputError, match=r"eta must be (positive|a (finite )?number in \(0, inf\))"):
        SORS(eta=value, n_triplets=10).fit(X, y)


def test_zero_triplets_still_gives_a_model():
    X, y = labelled_problem()
    est = SORS(n_triplets=0).fit(X, y)
    assert est.model_.W.nnz == 0
    assert set(est.resolved_params_) == {"eta", "lam"}


def test_singleton_classes_are_left_out_with_one_warning():
    X, y = labelled_problem()
    y = y.copy()
    y[0], y[1] = 7, 8  # two classes of one document each
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = OASIS(n_triplets=200, random_state=0).fit(X, y)
    small = [w for w in caught if issubclass(w.category, SmallClassWarning)]
    assert len(small) == 1 and "left out 2 of 90 documents" in str(small[0].message)
    assert est.n_triplets_seen_ == 200


def test_too_few_usable_classes_is_an_error():
    X, y = labelled_problem(n=6)
    y = np.array([0, 0, 1, 2, 3, 4])
    with pytest.raises(InvalidInputError, match="at least two are needed"):
        OASIS(n_triplets=10).fit(X, y)


# --- the CIKM 2015 family (PAAS/PARS, CWS/CWAS/CWRS full and diagonal, AROMA) --------------

from sparsesim.learners.active import PAAS, PARS  # noqa: E402
from sparsesim.learners.second_order import AROMA, CWAS, CWRS, CWS  # noqa: E402

SELECTIVE = [
    (PAAS, {}, {"C": lambda s: defaults.PA_C_FACTOR / s}),
    (PARS, {}, {"C": lambda s: defaults.PA_C_FACTOR / s}),
    (CWS, {"covariance": "full"}, {"eta": lambda s: defaults.CW_ETA_FACTOR / s,
                                   "gamma": lambda s: defaults.CW_GAMMA_FACTOR * s}),
    (CWAS, {"covariance": "diag"}, {"eta": lambda s: defaults.CWD_ETA_FACTOR / s,
                                    "gamma": lambda s: defaults.CWD_GAMMA_FACTOR * s}),
    (CWRS, {"covariance": "diag"}, {"eta": lambda s: defaults.CWD_ETA_FACTOR / s,
                                    "gamma": lambda s: defaults.CWD_GAMMA_FACTOR * s}),
    (AROMA, {"covariance": "diag"}, {"r": lambda s: defaults.AROW_R_FACTOR * s}),
]


def small_dense_problem(scale=1.0):
    X, y = labelled_problem(n=60, d=8)
    return sp.csr_matrix(scale * X.toarray()), y


@pytest.mark.parametrize("cls,kwargs,rule", SELECTIVE)
def test_selective_learners_follow_the_stated_rule(cls, kwargs, rule):
    X, y = small_dense_problem()
    est = cls(n_triplets=300, random_state=0, **kwargs).fit(X, y)
    s = defaults.data_statistics(X)["s"]
    assert set(est.resolved_params_) == set(rule)
    for name, value in rule.items():
        assert est.resolved_params_[name] == pytest.approx(value(s))
    assert est.model_.metadata["resolved_params"] == pytest.approx(est.resolved_params_)
    assert est.get_params()[next(iter(rule))] == "auto"


@pytest.mark.parametrize("cls,kwargs,rule", SELECTIVE)
def test_selective_auto_is_scale_invariant(cls, kwargs, rule):
    # margins x^T M z are unchanged when the features are scaled by 3: the same queries, the
    # same updates, and M scaled by 1/9
    X, y = small_dense_problem()
    a = cls(n_triplets=300, random_state=2, **kwargs).fit(X, y)
    b = cls(n_triplets=300, random_state=2, **kwargs).fit(3.0 * X, y)
    assert b.n_updates_ == a.n_updates_ and b.n_queries_ == a.n_queries_
    np.testing.assert_allclose(b.model_.W.toarray(), a.model_.W.toarray() / 9.0, rtol=1e-6, atol=1e-12)


def test_selective_explicit_values_win():
    X, y = small_dense_problem()
    est = CWAS(covariance="diag", eta=0.25, n_triplets=200, random_state=0).fit(X, y)
    assert est.resolved_params_["eta"] == 0.25
    assert est.resolved_params_["gamma"] == pytest.approx(defaults.CWD_GAMMA_FACTOR * defaults.data_statistics(X)["s"])
    fixed = CWAS(covariance="diag", n_triplets=200, random_state=0, **est.resolved_params_).fit(X, y)
    np.testing.assert_array_equal(fixed.model_.W.toarray(), est.model_.W.toarray())
    assert PAAS(C=0.7, n_triplets=50, random_state=0).fit(X, y).resolved_params_ == {"C": 0.7}
    with pytest.raises(InvalidInputError, match="C must be"):
        PAAS(C="big", n_triplets=50).fit(X, y)


def many_class_problem(n_classes, per_class=3, d=60, seed=2):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(n_classes), per_class)
    centers = rng.normal(size=(n_classes, d)) * (rng.random((n_classes, d)) < 0.2)
    dense = np.abs(centers[y] + 0.3 * rng.normal(size=(y.size, d)) * (rng.random((y.size, d)) < 0.2))
    return sp.csr_matrix(dense), y


@pytest.mark.parametrize("n_classes,expected", [(defaults.SORS_PA_MIN_CLASSES, "pa"),
                                                (defaults.SORS_PA_MIN_CLASSES - 1, "constant")])
def test_sors_auto_schedule_follows_the_classes_fit_sees(n_classes, expected):
    """schedule="auto" resolves from fit's labels, and learns the model of that schedule given
    explicitly (the same eta: with "pa" it is the per-triplet step's cap)."""
    X, y = many_class_problem(n_classes)
    auto = SORS(n_triplets=400, random_state=1, compact=False).fit(X, y)
    explicit = SORS(n_triplets=400, random_state=1, compact=False, schedule=expected).fit(X, y)
    assert auto.schedule_ == expected and auto.model_.metadata["schedule"] == expected
    assert auto.resolved_params_ == explicit.resolved_params_
    np.testing.assert_array_equal(auto.model_.M.toarray(), explicit.model_.M.toarray())
    other = SORS(n_triplets=400, random_state=1, compact=False,
                 schedule="constant" if expected == "pa" else "pa").fit(X, y)
    assert np.abs(other.model_.M - auto.model_.M).max() > 1e-6  # the schedule changes the model
    pa, constant = (auto, other) if expected == "pa" else (other, auto)
    assert pa.resolved_params_["eta"] == constant.resolved_params_["eta"]  # (the cap under "pa")
    ratio = defaults.L1_SURVIVAL_PA / defaults.L1_SURVIVAL
    assert pa.resolved_params_["lam"] == pytest.approx(ratio * constant.resolved_params_["lam"], rel=1e-12)
    resolved = {k: v for k, v in pa.resolved_params_.items() if k != "max_model_bytes"}
    assert SORS(schedule="pa", n_triplets=400).resolve_params(X) == resolved


def test_sors_auto_schedule_without_labels_is_constant():
    X, y = many_class_problem(defaults.SORS_PA_MIN_CLASSES)
    triplets = np.array([[0, 1, 5], [3, 4, 9], [6, 7, 0]])
    est = SORS(random_state=0).partial_fit_triplets(X, triplets)
    assert est.schedule_ == "constant"
    warm = SORS(random_state=0).start_from(est.model_, X).partial_fit_triplets(X, triplets)
    assert warm.schedule_ == "constant" and warm.n_triplets_seen_ == 3
    assert SORS(schedule="invsqrt").fit(X, y).schedule_ == "invsqrt"
    with pytest.raises(InvalidInputError, match="schedule"):
        SORS(schedule="adaptive").fit(X, y)
