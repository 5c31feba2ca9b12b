"""Common checks every learner of the registry passes, chosen by the learner's kind.

``tests/test_common.py`` runs :func:`common_checks` for every name of
:data:`sparsesim.registry.ALGORITHMS`, so a new algorithm is tested the moment it is registered.
The kind comes from the estimator's tags (:class:`sparsesim.learners.base.SparsesimTags`):

=======================  ============================================  ==========================
kind                     ``fit`` arguments                             scores compared
=======================  ============================================  ==========================
``triplet``              ``X`` (CSR), ``y`` (classes)                  ``model_.score_matrix``
``triplet-counts``       ``X`` (CSR of term counts), ``y`` (classes)   ``model_.score_matrix``
``multitask-triplet``    ``X``, ``y``, ``tasks``                       ``model_.score_matrix`` per task
``multitask-classifier`` one CSR and one ±1 vector per task            ``model_.decision_function``
``online-classifier``    ``X``, ``y`` ±1, ``source_scores``            ``decision_function``
=======================  ============================================  ==========================

A check that does not apply to an estimator is named, with its reason, in the tags'
``skipped_checks``; :func:`common_checks` then yields it as skipped with that reason.

Example
-------
>>> from sparsesim.checks import common_checks
>>> from sparsesim.registry import make_estimator
>>> names = [name for name, _ in common_checks(make_estimator("oasis"))]
>>> "check_save_load_round_trip" in names
True
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone

from .exceptions import SparsesimError
from .model_files import SIMILARITY_MODEL_CLASSES
from .models import MultiTaskLinearModel, MultiTaskSimilarity
from .triplets import omtrsl_triplets, sors_triplets
from .validation import param_spec

__all__ = ["Problem", "make_problem", "common_checks", "fast_params"]

def fast_params(estimator) -> dict:
    """The parameters :func:`common_checks` lowers to keep the checks fast: the settings the
    estimator's class states in ``_unit_test_params()`` (river's idea), next to the class."""
    return dict(type(estimator)._unit_test_params())


def learner_kind(estimator) -> str:
    return estimator.__sklearn_tags__().learner_kind


def skipped_checks(estimator) -> dict:
    return dict(estimator.__sklearn_tags__().skipped_checks)


@dataclass
class Problem:
    """A small learning problem shaped for one kind of learner.

    Attributes
    ----------
    fit_args : tuple
        Positional arguments of ``fit``.
    fit_kwargs : dict
        Keyword arguments of ``fit`` (views of the data, e.g. source scores).
    n_features : int
    scores : callable
        ``scores(estimator) -> ndarray`` under the fitted estimator.
    """

    fit_args: tuple
    fit_kwargs: dict
    n_features: int
    scores: Callable


def _sparse(rng, n, d, density=0.35) -> sp.csr_matrix:
    X = sp.random(n, d, density=density, format="csr", random_state=rng, data_rvs=rng.standard_normal)
    X = X + sp.csr_matrix((np.ones(n), (np.arange(n), rng.integers(0, d, n))), shape=(n, d))  # no empty row
    return sp.csr_matrix(X)


def make_problem(kind: str, seed: int = 0, n_features: int = 12) -> Problem:
    """A small problem for learners of ``kind`` (see the module table)."""
    rng = np.random.default_rng(seed)
    d = n_features
    if kind == "triplet":
        X = _sparse(rng, 40, d)
        y = np.repeat(np.arange(4), 10)
        Q = X[:5]
        return Problem((X, y), {}, d, lambda est: est.model_.score_matrix(Q, X))
    if kind == "triplet-counts":
        X = sp.csr_matrix(rng.poisson(0.6, size=(40, d)).astype(np.float64))
        X = X + sp.csr_matrix((np.ones(40), (np.arange(40), rng.integers(0, d, 40))), shape=(40, d))
        y = np.repeat(np.arange(4), 10)
        Q = X[:5]
        return Problem((X, y), {}, d, lambda est: est.model_.score_matrix(Q, X))
    if kind == "multitask-triplet":
        X = _sparse(rng, 48, d)
        y = np.tile(np.repeat(np.arange(2), 6), 4)
        tasks = np.repeat(np.arange(2), 24)
        Q = X[:4]
        return Problem((X, y, tasks), {}, d,
                       lambda est: np.stack([est.model_.score_matrix(t, Q, X) for t in est.model_.tasks]))
    if kind == "multitask-classifier":
        Xs = [_sparse(rng, 20, d) for _ in range(3)]
        ys = [np.where(np.arange(20) % 2 == 0, 1.0, -1.0) for _ in range(3)]
        Q = Xs[0][:6]
        return Problem((Xs, ys), {}, d,
                       lambda est: np.stack([est.model_.decision_function(Q, t) for t in range(len(Xs))]))
    if kind == "online-classifier":
        X = rng.standard_normal((40, d))
        y = np.where(X[:, 0] + 0.3 * rng.standard_normal(40) > 0, 1, -1)
        h = np.tanh(X[:, 0] + rng.standard_normal(40))
        return Problem((X, y), {"source_scores": h}, X.shape[1],
                       lambda est: est.decision_function(X, source_scores=h))
    raise ValueError(f"no common checks for learner kind {kind!r}")


def _fresh(estimator):
    est = clone(estimator)
    est.set_params(**fast_params(est))
    if "random_state" in est.get_params():
        est.set_params(random_state=0)
    return est


def _assert_same(a, b, what):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-12, err_msg=what)


# --------------------------------------------------------------------------- the checks


def check_clone_params(estimator):
    """clone keeps every parameter; set_params(get_params()) is a round trip; repr works."""
    est = _fresh(estimator)
    params = est.get_params()
    twin = clone(est)
    assert twin.get_params().keys() == params.keys()
    for k, v in params.items():
        assert twin.get_params()[k] is v or twin.get_params()[k] == v, k
    twin.set_params(**params)
    assert repr(twin)


def check_fit_returns_self_and_defines_state(estimator):
    """fit returns self; n_features_in_, the counters, resolved_params_ and model_ exist afterwards."""
    kind = learner_kind(estimator)
    problem = make_problem(kind)
    est = _fresh(estimator)
    assert est.fit(*problem.fit_args, **problem.fit_kwargs) is est
    assert est.n_features_in_ == problem.n_features
    counters = ("n_triplets_seen_", "n_updates_", "train_seconds_") if "triplet" in kind else ("n_seen_", "n_mistakes_")
    for name in counters:
        assert hasattr(est, name), f"{type(est).__name__} has no {name} after fit"
    # the contract of learners.base: read directly by the workflows (no getattr defaults)
    assert isinstance(est.input_representation, str)
    resolved = est.resolved_params_
    assert isinstance(resolved, dict) or (resolved is None and kind.startswith("multitask")), \
        f"{type(est).__name__}.resolved_params_ after fit is {resolved!r}"
    if "check_save_load_round_trip" not in skipped_checks(est):  # learners with a saved-model format
        assert est.model_ is not None
    problem.scores(est)


def check_fit_resets_state(estimator):
    """A second fit forgets the first: fit(A); fit(B) scores as a fresh fit(B), even with another width."""
    kind = learner_kind(estimator)
    first = make_problem(kind, seed=1, n_features=9)
    second = make_problem(kind, seed=2)
    est = _fresh(estimator).fit(*first.fit_args, **first.fit_kwargs)
    est.fit(*second.fit_args, **second.fit_kwargs)
    fresh = _fresh(estimator).fit(*second.fit_args, **second.fit_kwargs)
    assert est.n_features_in_ == second.n_features
    _assert_same(second.scores(est), second.scores(fresh), "refit differs from a fresh fit")


def check_same_seed_same_model(estimator):
    """Two fits with the same parameters (and seed) give the same scores."""
    problem = make_problem(learner_kind(estimator))
    a = _fresh(estimator).fit(*problem.fit_args, **problem.fit_kwargs)
    b = _fresh(estimator).fit(*problem.fit_args, **problem.fit_kwargs)
    _assert_same(problem.scores(a), problem.scores(b), "same seed, different model")


def _fix_auto(one, two, X) -> None:
    """Give both learners the numbers their "auto" parameters resolve to on all of ``X``: an online
    learner resolves them from the rows of its first call, which differ between one call and two
    chunks; the property checked is that chunks equal one call at the same parameter values."""
    values = one.resolve_params(X)  # every learner declares it ({} without "auto" parameters)
    one.set_params(**values)
    two.set_params(**values)


def check_partial_fit_chunks(estimator):
    """Learning in two chunks gives the model of one call (partial_fit_triplets or partial_fit)."""
    kind = learner_kind(estimator)
    problem = make_problem(kind)
    one, two = _fresh(estimator), _fresh(estimator)
    if kind == "triplet":
        X, y = problem.fit_args
        T = sors_triplets(y, 90, seed=3)
        signs = np.where(np.arange(90) % 3 == 0, -1.0, 1.0)
        one.partial_fit_triplets(X, T, signs)
        two.partial_fit_triplets(X, T[:40], signs[:40]).partial_fit_triplets(X, T[40:], signs[40:])
        assert two.n_triplets_seen_ == one.n_triplets_seen_ == 90
    elif kind == "multitask-triplet":
        X, y, tasks = problem.fit_args
        T, signs, task_ids = omtrsl_triplets(y, 90, seed=3, tasks=tasks)
        labels = np.unique(tasks)
        one.partial_fit_triplets(X, T, signs, task_ids, tasks=labels)
        two.partial_fit_triplets(X, T[:40], signs[:40], task_ids[:40], tasks=labels)
        two.partial_fit_triplets(X, T[40:], signs[40:], task_ids[40:])
    elif kind == "multitask-classifier":
        Xs, ys = problem.fit_args
        _fix_auto(one, two, Xs)  # "auto" values read the first call's streams: compare at the same values
        one.fit(Xs, ys)
        two.partial_fit([x[:8] for x in Xs], [v[:8] for v in ys])
        two.partial_fit([x[8:] for x in Xs], [v[8:] for v in ys])
    else:
        X, y = problem.fit_args
        h = problem.fit_kwargs["source_scores"]
        _fix_auto(one, two, X)
        one.fit(X, y, source_scores=h)
        two.partial_fit(X[:15], y[:15], source_scores=h[:15]).partial_fit(X[15:], y[15:], source_scores=h[15:])
    _assert_same(problem.scores(one), problem.scores(two), "chunked learning differs from one call")


_MODEL_CLASSES = {"triplet": tuple(SIMILARITY_MODEL_CLASSES.values()),
                  "triplet-counts": tuple(SIMILARITY_MODEL_CLASSES.values()),
                  "multitask-triplet": MultiTaskSimilarity, "multitask-classifier": MultiTaskLinearModel}


def check_save_load_round_trip(estimator):
    """model_.save then <model class>.load scores identically (no pickle involved)."""
    kind = learner_kind(estimator)
    problem = make_problem(kind)
    est = _fresh(estimator).fit(*problem.fit_args, **problem.fit_kwargs)
    model = est.model_
    assert isinstance(model, _MODEL_CLASSES[kind])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.npz"
        model.save(path)
        back = type(model).load(path)

    class _Loaded:  # scores() reads ``model_``
        model_ = back

    _assert_same(problem.scores(est), problem.scores(_Loaded), "a loaded model scores differently")
    assert back.metadata.get("algorithm") == model.metadata.get("algorithm")


def _bad_inputs(kind, problem):
    """(what, fit arguments) pairs that must be refused by fit with a sparsesim error."""
    args = problem.fit_args
    if kind == "multitask-classifier":
        Xs, ys = args
        nan = [x.copy() for x in Xs]
        nan[1].data[0] = np.nan
        return [("empty task", ([x[:0] for x in Xs], [v[:0] for v in ys])), ("NaN", (nan, ys))]
    X = args[0]
    empty = (X[:0],) + tuple(a[:0] for a in args[1:])
    Xn = X.copy().astype(np.float64)
    if sp.issparse(Xn):
        Xn.data[0] = np.nan
    else:
        Xn[0, 0] = np.nan
    return [("empty", empty), ("NaN", (Xn,) + tuple(args[1:]))]


def check_bad_input_errors(estimator):
    """Empty input, NaN and a wrong feature count raise a sparsesim error with a message."""
    kind = learner_kind(estimator)
    problem = make_problem(kind)
    kwargs = problem.fit_kwargs
    for what, args in _bad_inputs(kind, problem):
        kw = {k: v[: (args[0][0] if isinstance(args[0], list) else args[0]).shape[0]] for k, v in kwargs.items()}
        try:
            _fresh(estimator).fit(*args, **kw)
        except SparsesimError as exc:
            assert str(exc), f"{what}: empty error message"
        else:
            raise AssertionError(f"{type(estimator).__name__}.fit accepted {what} input")
    est = _fresh(estimator).fit(*problem.fit_args, **kwargs)
    wide = make_problem(kind, seed=4, n_features=problem.n_features + 3)
    try:
        wide.scores(est)
    except SparsesimError as exc:
        assert "feature" in str(exc), f"wrong-width message does not say what is wrong: {exc}"
    else:
        raise AssertionError(f"{type(estimator).__name__} scored input of the wrong width")


def check_fit_checks_changed_params(estimator):
    """scikit-learn's contract: ``fit`` checks the parameters for every caller, and a value
    changed by ``set_params`` after a fit (whose values ``fit`` does not check twice) is checked
    at the next ``fit``: a number parameter set to a string is refused with a sparsesim error;
    set back, the estimator fits again (an estimator without parameters has nothing to change)."""
    problem = make_problem(learner_kind(estimator))
    est = _fresh(estimator).fit(*problem.fit_args, **problem.fit_kwargs)
    params = est.get_params()
    numeric = [name for name, (kind, *_) in param_spec(est).items()
               if name in params and kind.rstrip("?") in ("int", "float", "n_triplets", "random_state")]
    assert numeric or not params, f"{type(est).__name__} declares no number parameter in its spec"
    for name in numeric:
        est.set_params(**{name: "not a number"})
        try:
            est.fit(*problem.fit_args, **problem.fit_kwargs)
        except SparsesimError as exc:
            assert name in str(exc), f"the refusal of {name} does not name it: {exc}"
        else:
            raise AssertionError(f"{type(est).__name__}.fit accepted {name}='not a number' set after a fit")
        est.set_params(**{name: params[name]})
    est.fit(*problem.fit_args, **problem.fit_kwargs)


def check_fit_data_accepts_what_fit_accepts(estimator):
    """``check_fit_data`` (asked by the protocols before a run) does not refuse data that ``fit``
    learns from: the feature count and class sizes of the check problem."""
    problem = make_problem(learner_kind(estimator))
    y = problem.fit_args[1] if len(problem.fit_args) > 1 else None
    counts = None
    if y is not None and not isinstance(y, list) and np.ndim(y) == 1:
        counts = np.unique(np.asarray(y), return_counts=True)[1]
    _fresh(estimator).check_fit_data(problem.n_features, counts)
    _fresh(estimator).fit(*problem.fit_args, **problem.fit_kwargs)


CHECKS = (
    check_clone_params,
    check_fit_returns_self_and_defines_state,
    check_fit_resets_state,
    check_same_seed_same_model,
    check_partial_fit_chunks,
    check_save_load_round_trip,
    check_bad_input_errors,
    check_fit_checks_changed_params,
    check_fit_data_accepts_what_fit_accepts,
)


def common_checks(estimator):
    """Yield ``(check name, callable)`` for ``estimator``; a skipped check's callable raises
    :class:`SkippedCheck` with the reason from the estimator's tags."""
    skipped = skipped_checks(estimator)
    for check in CHECKS:
        name = check.__name__
        if name in skipped:
            yield name, _skipper(skipped[name])
        else:
            yield name, (lambda c=check: c(estimator))


class SkippedCheck(Exception):
    """Raised by a check that does not apply; ``args[0]`` is the reason from the tags."""


def _skipper(reason):
    def skip():
        raise SkippedCheck(reason)

    return skip
