"""Every index kind passes the common index checks (``sparsesim.indexes.checks``): each kind an
index directory may declare, in process, and every kind of ``INDEX_KINDS`` sharded -- in this
process and on a local Dask cluster of worker processes (skipped, with the reason, when the dask
extra is not installed). A kind added to ``INDEX_KINDS`` is checked the moment it is registered.
"""

from __future__ import annotations

import pytest

from sparsesim.indexes import INDEX_KINDS, STORED_KINDS, Index
from sparsesim.indexes.checks import CHECKS, index_checks, index_forms

FORMS = index_forms()
CASES = [(form, name, check) for form in FORMS for name, check in index_checks(form)]


@pytest.mark.parametrize("form,check_name,check", CASES, ids=[f"{f.name}-{n}" for f, n, _ in CASES])
def test_index_check(form, check_name, check):
    check()


def test_every_kind_is_covered():
    """Every stored kind and the sharded form of every ``INDEX_KINDS`` entry is in the checks."""
    names = {form.name for form in FORMS}
    assert set(STORED_KINDS) <= names
    assert {f"sharded-{kind}" for kind in INDEX_KINDS} <= names
    for form in FORMS:
        assert issubclass(form.cls, Index)


try:
    import distributed
except ImportError:  # pragma: no cover - the dask extra is optional
    distributed = None

DASK_CASES = [(kind, check.__name__) for kind in INDEX_KINDS for check in CHECKS]


@pytest.fixture(scope="module")
def dask_client():
    if distributed is None:
        pytest.skip("the dask extra is not installed (pip install 'sparsesim[dask]')")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, memory_limit="1GiB",
                                  dashboard_address=":0", host="127.0.0.1") as cluster:
        with distributed.Client(cluster, set_as_default=False) as client:
            yield client


@pytest.mark.parametrize("kind,check_name", DASK_CASES, ids=[f"dask-sharded-{k}-{c}" for k, c in DASK_CASES])
def test_index_check_on_dask(dask_client, kind, check_name):
    form = next(f for f in index_forms(client=dask_client) if f.name == f"dask-sharded-{kind}")
    dict(index_checks(form))[check_name]()


def test_the_checks_catch_a_broken_kind():
    """The checks fail for a kind that answers worst first, or refuses with the wrong error."""
    from sparsesim.indexes import ExactIndex
    from sparsesim.indexes.checks import IndexForm

    class WorstFirst(ExactIndex):
        def _query_rows(self, Qp, k, n_jobs, /, **options):
            rows, scores = super()._query_rows(Qp, k, n_jobs, **options)
            return rows[:, ::-1].copy(), scores[:, ::-1].copy()

    class PlainErrors(ExactIndex):
        def calibrate(self, *args, **kwargs):
            raise ValueError("no")

    for cls, check in ((WorstFirst, "check_query"), (WorstFirst, "check_answers"), (PlainErrors, "check_surface")):
        form = IndexForm(f"broken-{cls.__name__}", ExactIndex, lambda model, cls=cls: cls(model))
        with pytest.raises(AssertionError):
            dict(index_checks(form))[check]()
