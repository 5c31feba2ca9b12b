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


# A magnitude's bin: the top 16 bits of its float32 bit pattern (sign 0, 8 exponent bits, 7 mantissa
# bits), monotone in the magnitude, so the entries of a higher bin are all larger than those of a
# lower one. The cut counts entries per bin in one pass, then needs the exact magnitudes of one bin
# only: two passes over the pool and no partition of every entry.
N_BINS = 1 << 15


@numba.njit(cache=True)
def _bin_counts(cols, vals, rows, d):
    counts = np.zeros(N_BINS, np.int64)
    buf = np.empty(1, np.float32)
    bits = buf.view(np.int32)
    for i in range(d):
        lo = rows[i, OFF]
        for s in range(lo, lo + rows[i, CAP]):
            if cols[s] >= 0 and vals[s] != 0.0:
                buf[0] = abs(np.float64(vals[s]))
                counts[bits[0] >> 16] += 1
    return counts


@numba.njit(cache=True)
def _remove(cols, vals, auxs, rows, i, s, has_aux):
    if rows[i, SHIFT] >= 0:
        cols[s] = TOMBSTONE
        rows[i, LIVE] -= 1
    else:
        vals[s] = 0.0
        if has_aux:
            auxs[s] = 0.0


@numba.njit(cache=True)
def _cut_at_bin(cols, vals, auxs, rows, d, b, n_b, need, has_aux):
    """Remove every entry of a bin below ``b``; of bin ``b`` keep the ``need`` largest (ties at
    the threshold kept in row order). Returns how many were removed."""
    slots = np.empty(n_b, np.int64)
    owners = np.empty(n_b, np.int64)
    mags = np.empty(n_b)
    buf = np.empty(1, np.float32)
    bits = buf.view(np.int32)
    m = 0
    removed = 0
    for i in range(d):
        lo = rows[i, OFF]
        for s in range(lo, lo + rows[i, CAP]):
            if cols[s] < 0 or vals[s] == 0.0:
                continue
            a = abs(np.float64(vals[s]))
            buf[0] = a
            q = bits[0] >> 16
            if q > b:
                continue
            if q == b:
                slots[m] = s
                owners[m] = i
                mags[m] = a
                m += 1
                continue
            _remove(cols, vals, auxs, rows, i, s, has_aux)
            removed += 1
    if need <= 0:
        threshold = np.inf
        ties = 0
    else:
        threshold = np.sort(mags[:m])[m - need]
        ties = need
        for t in range(m):
            if mags[t] > threshold:
                ties -= 1
    for t in range(m):
        a = mags[t]
        if a > threshold:
            continue
        if a == threshold and ties > 0:
            ties -= 1
            continue
        _remove(cols, vals, auxs, rows, owners[t], slots[t], has_aux)
        removed += 1
    return removed


def truncate_store(store, k: int, keep_dense: bool = False, rebuild: bool = False) -> int:
    """Keep the ``k`` largest-magnitude nonzero off-diagonal entries of ``store`` (values current);
    returns how many entries were removed (0: nothing to do).

    A removed entry of a sparse row leaves a tombstone, which the row's next insert reuses (so
    the pool stops growing once the model is at its budget; a row moved to a new segment leaves
    its tombstones behind); a removed entry of a dense row becomes a zero record. Entries equal to
    the k-th largest magnitude are kept in row order until ``k`` are kept. ``rebuild``
    also rebuilds the pool at once without them (``keep_dense``: dense rows stay dense, for
    AdaSORS keeping zero-state)."""
    cols, vals, _, auxs = store.views()
    has_aux = "aux" in store.dtype.names
    counts = _bin_counts(cols, vals, store.rows, store.d)
    if int(counts.sum()) <= k:
        return 0
    if k <= 0:  # every entry lies below a bin past the last one
        removed = _cut_at_bin(cols, vals, auxs, store.rows, store.d, N_BINS, 0, 0, has_aux)
    else:
        above = np.cumsum(counts[::-1])[::-1]  # above[b]: entries in bin b or higher
        b = int(np.flatnonzero(above >= k)[-1])  # the highest bin that, with those above, reaches k
        need = int(k - (above[b + 1] if b + 1 < N_BINS else 0))
        removed = _cut_at_bin(cols, vals, auxs, store.rows, store.d, b, int(counts[b]), need, has_aux)
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
