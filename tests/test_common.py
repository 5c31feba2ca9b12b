"""Every registered algorithm passes the common checks of its kind (``sparsesim.checks``) and,
where its ``fit`` is scikit-learn's ``fit(X, y)``, scikit-learn's own estimator checks.

A new algorithm is tested the moment it joins :data:`sparsesim.registry.ALGORITHMS`; a check
that does not apply is skipped with the reason its estimator's tags give
(``__sklearn_tags__().skipped_checks``).
"""

import warnings

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from sparsesim.checks import SkippedCheck, common_checks, fast_params, skipped_checks
from sparsesim.registry import ALGORITHMS, make_estimator

NAMES = sorted(ALGORITHMS)
CASES = [(name, check_name, check) for name in NAMES for check_name, check in common_checks(make_estimator(name))]


@pytest.mark.parametrize("name,check_name,check", CASES, ids=[f"{n}-{c}" for n, c, _ in CASES])
def test_common_check(name, check_name, check):
    try:
        check()
    except SkippedCheck as skip:
        pytest.skip(f"{name}: {skip.args[0]}")


def _fast(name):
    est = make_estimator(name)
    return est.set_params(**fast_params(est))


SKLEARN_NAMES = [n for n in NAMES if "sklearn_check_estimator" not in skipped_checks(make_estimator(n))]
OUTSIDE_SKLEARN = [n for n in NAMES if n not in SKLEARN_NAMES]


@parametrize_with_checks([_fast(n) for n in SKLEARN_NAMES], expected_failed_checks=skipped_checks)
def test_sklearn_contract(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        check(estimator)


@pytest.mark.parametrize("name", OUTSIDE_SKLEARN)
def test_sklearn_contract_not_applicable(name):
    pytest.skip(f"{name}: {skipped_checks(make_estimator(name))['sklearn_check_estimator']}")


def test_registry_is_covered():
    """Every registry entry is in the common checks, and the single-task similarity learners in scikit-learn's."""
    assert {n for n, _, _ in CASES} == set(ALGORITHMS)
    assert {"oasis", "sors-l1", "paas", "cws-d", "aroma", "dot"} <= set(SKLEARN_NAMES)
