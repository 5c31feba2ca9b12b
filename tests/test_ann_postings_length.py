"""The default length of the ann index's stored posting lists (indexes/ann_build.postings_length):
the 512 MiB default cap never cuts the lists below 1/700 of the corpus, explicit values win, and a
build whose lists would not fit the memory available stops before building them."""

from __future__ import annotations

import math
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


def test_the_default_cap_keeps_a_fixed_share_of_large_corpora():
    cap = (512 << 20) // (8 * D)
    assert cap == 1420
    assert length(500_000) == cap  # the memory cap binds; n / 700 = 715 is below it
    assert length(10**6) == math.ceil(10**6 / 700)  # 1,429: the share passes the old cap
    assert length(10**7) == math.ceil(10**7 / 700)  # 14,286, not the 1,420 that gave recall 0.03
    for n in (10**6, 3 * 10**6, 10**7, 10**8):
        assert length(n) / n >= 1 / 700 - 1e-12


def test_explicit_parameters_win():
    assert length(10**7, postings_memory=512 << 20) == 1420  # an explicit cap binds
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
