"""Keeping a bilinear model within an entry budget: magnitude truncation of the row store.

:func:`truncate_store` keeps the ``k`` off-diagonal entries of largest magnitude of a
:class:`~sparsesim.engine.rowstore.RowStore` (the diagonal is dense and never counted); the
others leave tombstones that later inserts reuse, so the pool stops growing once the model is at
its budget. Ties at the threshold
are kept in row order until ``k`` entries are kept, so the budget holds exactly.
:func:`keep_largest_offdiag` applies the same rule to an exported CSR matrix.

Values must be current when the store is truncated (the engine applies pending lazy shrinkage
first); a removed entry loses its per-entry statistic (AdaSORS's H_ij restarts at zero when
the entry is written again, as after a ``drop_zero_state`` sweep).
"""

from __future__ import annotations

import numba
import numpy as np
import scipy.sparse as sp

from .segments import CAP, LIVE, OFF, SHIFT, TOMBSTONE

__all__ = ["truncate_store", "keep_largest_offdiag", "nonzero_offdiag"]


@numba.njit(cache=True)
def _magnitudes(cols, vals, rows, d):
    n = 0
    for i in range(d):
        lo = rows[i, OFF]
        for s in range(lo, lo + rows[i, CAP]):
            if cols[s] >= 0 and vals[s] != 0.0:
                n += 1
    out = np.empty(n)
    f = 0
    for i in range(d):
        lo = rows[i, OFF]
        for s in range(lo, lo + rows[i, CAP]):
            if cols[s] >= 0 and vals[s] != 0.0:
                out[f] = abs(np.float64(vals[s]))
                f += 1
    return out


@numba.njit(cache=True)
def _drop_below(cols, vals, auxs, rows, d, threshold, ties_kept, has_aux):
    """Remove the nonzero entries below ``threshold`` and all but ``ties_kept`` of those equal to
    it (in row order): a tombstone in a sparse row, a zero record (statistic zeroed) in a dense
    row. Returns how many were removed."""
    removed = 0
    for i in range(d):
        lo = rows[i, OFF]
        sparse = rows[i, SHIFT] >= 0
        for s in range(lo, lo + rows[i, CAP]):
            if cols[s] < 0 or vals[s] == 0.0:
                continue
            a = abs(np.float64(vals[s]))
            if a > threshold:
                continue
            if a == threshold and ties_kept > 0:
                ties_kept -= 1
                continue
            if sparse:
                cols[s] = TOMBSTONE
                rows[i, LIVE] -= 1
            else:
                vals[s] = 0.0
                if has_aux:
                    auxs[s] = 0.0
            removed += 1
    return removed


def _cut(magnitudes: np.ndarray, k: int) -> tuple[float, int]:
    """(threshold, ties kept): the k-th largest magnitude and how many entries equal to it are
    kept so that exactly k entries stay."""
    n = magnitudes.shape[0]
    threshold = float(np.partition(magnitudes, n - k)[n - k])
    return threshold, k - int(np.count_nonzero(magnitudes > threshold))


def nonzero_offdiag(store) -> int:
    """Nonzero off-diagonal entries held by a row store (what its exported W would hold)."""
    cols, vals, _, _ = store.views()
    return int(_magnitudes(cols, vals, store.rows, store.d).shape[0])


def truncate_store(store, k: int, keep_dense: bool = False, rebuild: bool = False) -> int:
    """Keep the ``k`` largest-magnitude nonzero off-diagonal entries of ``store`` (values current);
    returns how many entries were removed (0: nothing to do).

    A removed entry of a sparse row leaves a tombstone, which the row's next insert reuses (so
    the pool stops growing once the model is at its budget; a row moved to a new segment leaves
    its tombstones behind); a removed entry of a dense row becomes a zero record. ``rebuild``
    also rebuilds the pool at once without them (``keep_dense``: dense rows stay dense, for
    AdaSORS keeping zero-state)."""
    cols, vals, _, auxs = store.views()
    mags = _magnitudes(cols, vals, store.rows, store.d)
    if mags.shape[0] <= k:
        return 0
    if k <= 0:
        threshold, ties = np.inf, 0
    else:
        threshold, ties = _cut(mags, int(k))
    del mags
    removed = _drop_below(cols, vals, auxs, store.rows, store.d, threshold, ties, "aux" in store.dtype.names)
    if rebuild:
        caps, _, size = store.compacted_size(0, keep_dense)
        store.compact_pool(caps, size)
    return int(removed)


def keep_largest_offdiag(W: sp.csr_matrix, k: int) -> sp.csr_matrix:
    """``W`` with only its ``k`` largest-magnitude nonzero off-diagonal entries (and its whole
    diagonal); ``W`` itself when it holds no more than ``k``. Same tie rule as :func:`truncate_store`
    (entries equal to the threshold kept in row-major order)."""
    W = sp.csr_matrix(W)
    rows = np.repeat(np.arange(W.shape[0]), np.diff(W.indptr))
    off = (rows != W.indices) & (W.data != 0.0)
    if int(np.count_nonzero(off)) <= k:
        return W
    mags = np.abs(W.data)
    keep = ~off
    if k > 0:
        threshold, ties = _cut(mags[off], int(k))
        keep |= off & (mags > threshold)
        tied = np.flatnonzero(off & (mags == threshold))[:ties]
        keep[tied] = True
    out = sp.csr_matrix((W.data[keep], W.indices[keep], np.concatenate([[0], np.cumsum(
        np.bincount(rows[keep], minlength=W.shape[0]))])), shape=W.shape)
    out.has_sorted_indices = W.has_sorted_indices
    return out
