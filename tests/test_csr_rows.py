"""Row access of CSR matrices that keeps int64 indptr / int32 indices (sparsesim.csr_rows)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsesim.csr_rows import row_range, take_rows


def _mixed(n, d, density, seed):
    X = sp.random(n, d, density=density, format="csr", random_state=seed)
    X.indptr = X.indptr.astype(np.int64)
    X.indices = X.indices.astype(np.int32)
    return X


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), d=st.integers(1, 30), density=st.floats(0, 1), seed=st.integers(0, 2**16),
       data=st.data())
def test_rows_equal_scipy_indexing_and_keep_dtypes(n, d, density, seed, data):
    X = _mixed(n, d, density, seed)
    rows = data.draw(st.lists(st.integers(-n, n - 1), max_size=50))
    lo = data.draw(st.integers(-3, n + 3))
    hi = data.draw(st.integers(-3, n + 3))
    taken = take_rows(X, rows)
    want = X.astype(np.float64)[np.asarray(rows, dtype=np.int64)] if rows else sp.csr_matrix((0, d))
    assert taken.shape == (len(rows), d)
    np.testing.assert_array_equal(taken.toarray(), want.toarray())
    cut = row_range(X, lo, hi)
    a, b = max(0, min(lo, n)), max(0, min(hi, n))
    np.testing.assert_array_equal(cut.toarray(), X.toarray()[a:max(a, b)])
    for out in (taken, cut):
        assert out.indptr.dtype == np.int64 and out.indices.dtype == np.int32
        out.check_format(full_check=True)


def test_row_range_shares_memory_and_take_rows_refuses_bad_rows():
    X = _mixed(50, 20, 0.3, 0)
    cut = row_range(X, 10, 20)
    assert np.shares_memory(cut.indices, X.indices) and np.shares_memory(cut.data, X.data)
    with pytest.raises(IndexError):
        take_rows(X, [50])
    with pytest.raises(IndexError):
        take_rows(X, [-51])
