"""Memory budgets: parsing, the one clear error before the store outgrows its budget, and
AdaSORS memory that follows nnz(M)."""

import sys

import mmap

import numpy as np
import pytest
import scipy.sparse as sp

from clitools import run_cli
from sparsesim.exceptions import InvalidInputError, MemoryBudgetError
from sparsesim.learners.bilinear import OASIS, SORS, AdaSORS
from sparsesim.memory import available_memory, parse_memory, peak_resident_bytes, reset_peak_resident, resident_bytes
from sparsesim.triplets import sors_triplets

from reference_bilinear import dense_adasors  # noqa: E402


def test_parse_memory_forms():
    assert parse_memory(1234) == 1234
    assert parse_memory("2GiB") == 2 * 2**30 and parse_memory("512MB") == 512_000_000
    avail = available_memory()
    assert 0 < parse_memory("50%") <= avail and abs(parse_memory("auto") - 0.7 * avail) < 0.05 * avail
    for bad in ("lots", "0%", "150%", -5, 0, True, "3 parsecs"):
        with pytest.raises(InvalidInputError, match="max_memory"):
            parse_memory(bad)



@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmRSS / VmHWM / clear_refs are Linux /proc files")
def test_peak_resident_follows_an_allocation_and_resets():
    reset_peak_resident()
    before = resident_bytes()
    # 64 MiB of new pages, touched (a numpy allocation can reuse memory that is already resident)
    area = mmap.mmap(-1, 64 * 2**20)
    block = np.frombuffer(area, dtype=np.uint8)
    block[:] = 1
    assert peak_resident_bytes() >= before + block.nbytes * 0.9
    del block
    area.close()
    if reset_peak_resident():  # the new peak starts from what is resident now
        assert peak_resident_bytes() < before + 32 * 2**20

def problem(n=200, d=300, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.1, random_state=seed, format="csr")
    X.data = rng.random(X.data.size)
    y = np.arange(n) % 4
    return X, y


@pytest.mark.parametrize("cls", [OASIS, SORS, AdaSORS])
def test_budget_stops_growth_with_one_clear_error(cls):
    X, y = problem()
    T = sors_triplets(y, 400, seed=0)
    est = cls(initial_capacity=1024, max_memory=200_000, **({"lam": 1e-9} if cls is not OASIS else {}))
    with pytest.raises(MemoryBudgetError, match=r"memory budget is 195\.3 KiB.*fewer triplets.*max_memory") as info:
        est.partial_fit_triplets(X, T)
    assert isinstance(info.value, MemoryError)
    assert est.engine_.store.nbytes <= 200_000  # never grew past the budget


def test_budget_too_small_for_the_first_table():
    X, y = problem()
    with pytest.raises(MemoryBudgetError, match="initial_capacity"):
        SORS(initial_capacity=1 << 20, max_memory="1MB").partial_fit_triplets(X, sors_triplets(y, 10, seed=0))


def test_adasors_default_equals_exact_algorithm_while_nothing_is_evicted():
    rng = np.random.default_rng(3)
    X = sp.random(40, 30, density=0.2, random_state=3, format="csr")
    X.data = rng.normal(size=X.data.size)
    T = rng.integers(0, 40, size=(300, 3))
    est = AdaSORS(lam=0.05, eta=0.1, delta=0.1, compact=False).partial_fit_triplets(X, T)  # table never fills
    etas = est.engine_.schedule.etas[1:301]
    ref = dense_adasors(X.toarray(), T, 0.05, etas, 0.1, offdiag=False)
    np.testing.assert_allclose(est.model_.M.toarray(), ref, rtol=0, atol=1e-10)


def test_adasors_memory_follows_nnz():
    X, y = problem(n=300, d=400)
    T = sors_triplets(y, 3000, seed=1)
    params = dict(lam=3e-2, eta=0.5, delta=0.1, initial_capacity=256)
    exact = AdaSORS(keep_zero_state=True, **params).partial_fit_triplets(X, T)
    bounded = AdaSORS(**params).partial_fit_triplets(X, T)
    nnz_bounded = bounded.model_.W.nnz
    # the exact learner keeps every entry ever touched; the default keeps about the nonzeros
    assert exact.engine_.store.n_entries > 5 * exact.model_.W.nnz
    assert bounded.engine_.store.n_entries <= 3 * nnz_bounded
    assert bounded.engine_.store.nbytes < exact.engine_.store.nbytes / 2


def test_cli_budget_error_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    out = tmp_path / "m.npz"
    code, stdout, err = run_cli(["train", "-a", "oasis", "-d", "news20-sample", "-n", "2000", "-o", out,
                                 "-p", "max_memory=3000000", "-p", "initial_capacity=1024"], monkeypatch, capsys)
    assert code == 2 and err.startswith("error: ") and "memory budget" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()


# --- the second-order and multi-task engines share the mechanism -----------------------------

from sparsesim.learners.active import PAAS  # noqa: E402
from sparsesim.learners.multitask import OGRSL, OMTRSL, OSTRSL  # noqa: E402
from sparsesim.learners.second_order import CWS  # noqa: E402


@pytest.mark.parametrize("make", [lambda b: PAAS(C=1.0, delta=100.0, initial_capacity=1024, max_memory=b),
                                  lambda b: CWS(covariance="diag", eta=0.1, gamma=1.0, initial_capacity=1024,
                                                max_memory=b)])
def test_second_order_budget_stops_growth(make):
    X, y = problem()
    T = sors_triplets(y, 400, seed=0)
    free = make("auto").partial_fit_triplets(X, T)  # the same run without a tight budget grows past it
    assert free.engine_.store.nbytes > 200_000
    est = make(200_000)
    with pytest.raises(MemoryBudgetError, match=r"memory budget is 195\.3 KiB.*max_memory"):
        est.partial_fit_triplets(X, T)
    assert est.engine_.store.nbytes <= 200_000


def test_full_covariance_is_checked_before_allocation():
    X = sp.random(30, 40, density=0.5, random_state=0, format="csr")  # Sigma: 8 * 1600^2 bytes = 20.5 MB
    with pytest.raises(MemoryBudgetError, match=r"full covariance at d = 40.*covariance='diag'"):
        CWS(covariance="full", max_memory="10MB").partial_fit_triplets(X, np.array([[0, 1, 2]]))
    CWS(covariance="full", max_memory="40MB").partial_fit_triplets(X, np.array([[0, 1, 2]]))


def tasks_problem():
    X, y = problem(n=240, d=300)
    return X, y, np.arange(240) % 2


@pytest.mark.parametrize("cls", [OMTRSL, OGRSL, OSTRSL])
def test_multitask_hash_budget_stops_growth(cls):
    X, y, tasks = tasks_problem()
    kwargs = dict(n_triplets=600, random_state=0, storage="hash", initial_capacity=1024)
    free = cls(**kwargs).fit(X, y, tasks)
    stores = [e.store for e in getattr(free, "engines_", None) or [free.engine_]]
    assert sum(s.nbytes for s in stores) > 400_000
    with pytest.raises(MemoryBudgetError, match="max_memory"):
        cls(max_memory=400_000, **kwargs).fit(X, y, tasks)


def test_multitask_auto_storage_follows_the_budget():
    X, y, tasks = tasks_problem()  # dense storage: 3 matrices of 300 x 300 float64 = 2.16 MB
    # b > 0: a shared matrix besides the two task matrices (b = 0, which "auto" resolves to on
    # tasks over disjoint classes, needs no shared part)
    roomy = OMTRSL(b=1.0, n_triplets=5, random_state=0).fit(X, y, tasks)
    tight = OMTRSL(b=1.0, n_triplets=5, random_state=0, initial_capacity=1024, max_memory="1.5MB").fit(X, y, tasks)
    assert roomy.engine_.storage == "dense" and tight.engine_.storage == "hash"
    np.testing.assert_allclose(tight.model_for(0).W.toarray(), roomy.model_for(0).W.toarray(), atol=1e-12)
    with pytest.raises(MemoryBudgetError, match="storage='hash'"):
        OMTRSL(b=1.0, n_triplets=5, storage="dense", max_memory="1.5MB").fit(X, y, tasks)
