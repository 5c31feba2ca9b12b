"""The length of the ann index's stored posting lists (indexes/ann_build.postings_length): the
default rule under its 512 MiB cap, explicit values win, and a build whose lists would not fit the
memory available stops before building them."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.exceptions import MemoryBudgetError
from sparsesim.indexes import ann_build
from sparsesim.indexes.ann import AnnIndex
from sparsesim.models import BilinearSimilarity

D = 47_236  # the synthetic RCV1-like corpus's features


def length(n, d=D, **params):
    index = SimpleNamespace(postings_per_feature=None, postings_memory=None, n_features=d)
    for key, value in params.items():
        setattr(index, key, value)
    return ann_build.postings_length(index, n)


def test_small_corpora_keep_the_n_over_200_rule():
    assert length(10_000) == 512
    assert length(100_000) == 512
    assert length(200_000) == 1000  # n // 200, below the 512 MiB cap (1,420 at d = 47,236)


def test_the_default_cap_binds_large_corpora():
    cap = (512 << 20) // (8 * D)
    assert cap == 1420
    for n in (500_000, 10**6, 10**7):
        assert length(n) == cap
    assert length(10**6, d=2000) == 5000  # few features: n // 200 below the cap


def test_explicit_parameters_win():
    assert length(10**7, postings_memory=1 << 30) == 2841  # a given cap
    assert length(10**6, postings_per_feature=3000) == 3000  # not cut by the default cap
    assert length(10**6, postings_per_feature=3000, postings_memory=512 << 20) == 1420
    assert length(50, postings_per_feature=3000) == 50  # never more than the corpus


def test_build_refuses_postings_larger_than_memory(monkeypatch):
    rng = np.random.default_rng(0)
    X = sp.random(40, 30, density=0.2, format="csr", random_state=rng)
    model = BilinearSimilarity(sp.identity(30, format="csr"))
    monkeypatch.setattr(ann_build, "available_memory", lambda: 1000)
    with pytest.raises(MemoryBudgetError, match="expanded postings"):
        AnnIndex(model, target_recall=None).fit(X)
    monkeypatch.setattr(ann_build, "available_memory", lambda: 1 << 40)
    index = AnnIndex(model, target_recall=None).fit(X)
    assert index.postings_length_ == 40
