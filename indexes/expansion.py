"""Building the candidate structures of the ann index: expanded-document postings and projections.

Y = X M^T is formed block by block of documents (never the whole corpus, and never I + W: the
light rows of W are scattered and the identity added from X itself; the heavy columns come from
the re-ranking table Z). Per feature, the ``L`` documents with the largest positive Y[x, i] are
kept in min-heaps and written out impact-ordered. The optional dense stage learns a projection
from a truncated SVD of a row sample of Y.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sparsesim.csr_rows import row_range, take_rows
from .base import kernels, threaded

__all__ = ["impact_postings", "expanded_postings", "fit_projection", "light_transpose", "heaps_from_postings",
           "postings_from_heaps", "embed"]


def impact_postings(X: sp.csr_matrix) -> sp.csr_matrix:
    """Posting lists of X (features x documents), each list sorted by decreasing value."""
    P = X.T.tocsr()
    row = np.repeat(np.arange(P.shape[0], dtype=np.int64), np.diff(P.indptr))
    order = np.lexsort((P.indices, -P.data, row))
    P.indices = np.ascontiguousarray(P.indices[order]).astype(np.int32, copy=False)
    P.data = np.ascontiguousarray(P.data[order])
    P.indptr = P.indptr.astype(np.int64, copy=False)
    return P


def light_transpose(W: sp.csr_matrix, heavy_rows: np.ndarray) -> sp.csr_matrix:
    """(W with its heavy rows emptied)^T in CSR: row j lists the light i with W[i, j] != 0.

    Built in one counting pass and one fill pass (the output is the only copy)."""
    d = W.shape[0]
    skip = np.zeros(d, dtype=np.bool_)
    skip[heavy_rows] = True
    counts = np.zeros(W.shape[1], dtype=np.int64)
    kernels().count_columns(W.indptr, W.indices, skip, counts)
    indptr = np.zeros(W.shape[1] + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    del counts
    indices = np.empty(int(indptr[-1]), dtype=np.int32)
    data = np.empty(int(indptr[-1]), dtype=np.float64)
    kernels().fill_transpose(W.indptr, W.indices, W.data, skip, indptr, indices, data)
    out = sp.csr_matrix((W.shape[1], d))
    out.indptr, out.indices, out.data = indptr, indices, data
    out.has_sorted_indices = True
    return out


def heaps_from_postings(P: sp.csr_matrix, L: int):
    """Min-heaps (values, docs) of capacity L from impact-ordered postings (a sorted-descending
    list read backwards is a valid min-heap only after heapify, so rebuild by sorting ascending)."""
    d = P.shape[0]
    vals = np.zeros((d, L), dtype=np.float32)
    docs = np.full((d, L), -1, dtype=np.int32)
    counts = np.diff(P.indptr)
    for i in np.flatnonzero(counts):
        lo, hi = P.indptr[i], P.indptr[i + 1]
        c = min(hi - lo, L)
        # ascending order is a valid min-heap; zeros (empty slots) go first
        vals[i, L - c:] = P.data[lo:lo + c][::-1]
        docs[i, L - c:] = P.indices[lo:lo + c][::-1]
        vals[i, :L - c] = 0.0
    return vals, docs


def postings_from_heaps(vals: np.ndarray, docs: np.ndarray, n_documents: int) -> sp.csr_matrix:
    """Impact-ordered CSR postings (features x documents, float32) from per-feature heaps
    (sorted one feature at a time: no transient copy of the heaps)."""
    indptr = np.zeros(vals.shape[0] + 1, dtype=np.int64)
    np.cumsum((docs >= 0).sum(axis=1), out=indptr[1:])
    indices = np.empty(int(indptr[-1]), dtype=np.int32)
    data = np.empty(int(indptr[-1]), dtype=np.float32)
    kernels().heaps_to_postings(vals, docs, indptr, indices, data)
    P = sp.csr_matrix((vals.shape[0], n_documents), dtype=np.float32)
    P.indptr, P.indices, P.data = indptr, indices, data
    return P


def expanded_postings(Xp, MT_light, heavy_rows, Z, L: int, n_jobs: int = 1, block: int = 256,
                      heaps=None, doc0: int = 0, identity: bool = True):
    """The ``L`` documents with the largest positive Y[x, i] per feature i, Y = X M^T, as heaps.

    Y is formed block by block of documents (dense ``block`` x d rows, never the whole corpus):
    the light part by scattering rows of ``MT_light`` (the light rows of W, transposed) plus X
    itself when M = I + W, the heavy columns copied from ``Z``.
    ``heaps`` continues existing heaps (for documents added later, numbered from ``doc0``).
    Returns ``(values, docs)`` arrays of shape (d, L).
    """
    n, d = Xp.shape
    if heaps is None:
        vals = np.zeros((d, L), dtype=np.float32)
        docs = np.full((d, L), -1, dtype=np.int32)
    else:
        vals, docs = heaps
    n_parts = max(1, n_jobs)
    bounds = [(d * t // n_parts, d * (t + 1) // n_parts) for t in range(n_parts)]
    Yb = np.zeros((min(block, max(n, 1)), d))  # zero again after each block (heaviest_update clears it)
    for lo in range(0, n, block):
        hi = min(lo + block, n)
        Y = Yb[:hi - lo]
        Xb = row_range(Xp, lo, hi)
        rows = [(r * (hi - lo) // n_parts, (r + 1) * (hi - lo) // n_parts) for r in range(n_parts)]

        def scatter(r_lo, r_hi, Xb=Xb, Y=Y):  # documents are independent: threads split the block's rows
            Xr = row_range(Xb, r_lo, r_hi)
            kernels().rows_times_csr(Xr.indptr, Xr.indices, Xr.data, MT_light.indptr, MT_light.indices,
                                     MT_light.data, Y[r_lo:r_hi])

        threaded(scatter, rows, n_jobs)
        if identity:  # the I of M = I + W (entries of one CSR row are distinct)
            Y[np.repeat(np.arange(hi - lo), np.diff(Xb.indptr)), Xb.indices] += Xb.data
        if heavy_rows.size:
            Y[:, heavy_rows] = Z[lo:hi]

        def part(f_lo, f_hi, Y=Y, lo=lo):  # features are independent: threads split the heaps
            kernels().heaviest_update(Y, doc0 + lo, f_lo, f_hi, vals, docs)

        threaded(part, bounds, n_jobs)
    return vals, docs


def transformed_rows_T(Xs, MT, block: int = 256) -> np.ndarray:
    """(Xs M^T)^T as a dense float32 array (features x rows), built block by block."""
    d = MT.shape[1]
    out = np.empty((d, Xs.shape[0]), dtype=np.float32)
    for lo in range(0, Xs.shape[0], block):
        Xb = row_range(Xs, lo, lo + block)
        buf = np.zeros((d, Xb.shape[0]))
        kernels().rows_times_csr_T(Xb.indptr, Xb.indices, Xb.data, MT.indptr, MT.indices, MT.data, buf)
        out[:, lo:lo + Xb.shape[0]] = buf
    return out


def fit_projection(model, Xp, dim: int, sample: int, n_iter: int, random_state, max_bytes: int = 1 << 30):
    """Learn V (d x dim) from a truncated SVD of a row sample of Y = X M^T.

    Returns ``(V, B, s)`` with ``B = M^T V`` (float32, d x dim): documents embed as ``X B``,
    queries as ``Q V``; ``s`` are the singular values.
    """
    from sklearn.utils.extmath import randomized_svd

    n, d = Xp.shape
    rng = np.random.default_rng(random_state)
    cap = max(dim + 1, max_bytes // (4 * d))  # the dense sample is d x n_sample float32
    n_sample = int(min(n, sample, cap))
    rows = np.sort(rng.choice(n, size=n_sample, replace=False))
    M = model.M.tocsr()
    YsT = transformed_rows_T(take_rows(Xp, rows), M.T.tocsr())
    rank = min(dim, min(YsT.shape) - 1) if min(YsT.shape) > 1 else 1
    seed = int(rng.integers(2**31 - 1))
    U, s, _ = randomized_svd(YsT, rank, n_iter=n_iter, random_state=seed)
    del YsT
    V = np.zeros((d, dim), dtype=np.float64)
    V[:, :rank] = U
    B = np.zeros((d, dim), dtype=np.float64)
    kernels().csr_T_times_dense(M.indptr, M.indices, M.data, V, B)
    return np.ascontiguousarray(V, dtype=np.float32), np.ascontiguousarray(B, dtype=np.float32), s


def embed(Xp, dense, n_jobs, chunk: int = 65536, dtype=np.float32) -> np.ndarray:
    """X @ dense (rows x dim), chunked over rows in threads."""
    out = np.empty((Xp.shape[0], dense.shape[1]), dtype=dtype)

    def part(lo, hi):
        kernels().csr_times_dense(Xp.indptr, Xp.indices, Xp.data, lo, hi, dense, out[lo:hi])

    threaded(part, [(lo, min(lo + chunk, Xp.shape[0])) for lo in range(0, Xp.shape[0], chunk)], n_jobs)
    return out
