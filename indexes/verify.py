"""Load-time verification of the index arrays that are *derived* from the stored corpus and model.

An index directory stores, beside the corpus X and the model M = I + W, arrays computed from them:

* the exact index's posting lists P = Y^T with Y = X M^T (``strategy="corpus"``);
* the ann index's re-ranking values Z = X M_H^T (the heavy rows H of M), its impact-ordered
  candidate postings (pruned Y^T, float32) and, with ``dim > 0``, its document map B = M^T V;
* under a normalising model, the corpus rows themselves (each of unit L2 norm).

Checksums and the manifest only say that a file was not changed by accident; a file whose arrays
were replaced by other finite values and re-hashed passes them. :func:`verify_derived` checks the
derived arrays against X and M instead, so such a file is refused rather than answered with its
own numbers.

How: a *randomized probe*. For a fresh Gaussian matrix R (d x 2, new seed every load, so a file
cannot be crafted against it) the exact postings must satisfy P^T R = X (M^T R) row by row, up to
the floating-point error bound ``rtol * |X| (|M|^T |R|)``; the re-ranking values must satisfy
Z R_H = X (M_H^T R_H) the same way. A change delta to a document's row escapes one probe only when
|delta . r| falls below the tolerance, which for a Gaussian r has probability about
tolerance / |delta|; two probes square that. The cost is one pass over each array (O(nnz(P) +
nnz(X) + nnz(W)) and O(n h) for Z); measured figures are in the README ("Bad input and safety").

The ann candidate postings only choose which documents are re-ranked (scores always come from X,
W and Z), so they are checked by sampling: impact order within each list, and the exact value of
up to ``sample`` random entries (when the postings were built with the index's current model).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sparsesim.csr_rows import take_rows
from sparsesim.exceptions import FileFormatError

from .recall_check import check_candidate_stage

__all__ = ["verify_derived"]

_N_PROBES = 2
_RTOL64 = 1e-9  # float64 arrays: far above rounding (~1e-16 x terms), far below any meaningful change
_RTOL32 = 1e-5  # float32 arrays: rounding is 2^-24 ~ 6e-8 relative
_CHUNK = 1 << 22  # nonzeros per chunk of the |.| products (bounded temporaries)


def _abs_rows_times(A: sp.csr_matrix, v: np.ndarray) -> np.ndarray:
    """|A| v for CSR ``A`` and a 1-D ``v``, in row chunks (no copy of the whole of A)."""
    n = A.shape[0]
    out = np.zeros(n)
    indptr = A.indptr
    lo = 0
    while lo < n:
        hi = int(np.searchsorted(indptr, indptr[lo] + _CHUNK, side="right")) - 1
        hi = min(n, max(hi, lo + 1))
        a, b = int(indptr[lo]), int(indptr[hi])
        prod = np.abs(A.data[a:b]) * v[A.indices[a:b]]
        counts = np.diff(indptr[lo:hi + 1])
        rows = np.repeat(np.arange(hi - lo), counts)
        out[lo:hi] = np.bincount(rows, weights=prod, minlength=hi - lo)
        lo = hi
    return out


def _abs_transpose_times(A: sp.csr_matrix, v: np.ndarray) -> np.ndarray:
    """|A|^T v for CSR ``A`` (shape m x d) and a 1-D ``v`` of length m, in row chunks."""
    m, d = A.shape
    out = np.zeros(d)
    indptr = A.indptr
    lo = 0
    while lo < m:
        hi = int(np.searchsorted(indptr, indptr[lo] + _CHUNK, side="right")) - 1
        hi = min(m, max(hi, lo + 1))
        a, b = int(indptr[lo]), int(indptr[hi])
        weights = np.abs(A.data[a:b]) * np.repeat(v[lo:hi], np.diff(indptr[lo:hi + 1]))
        out += np.bincount(A.indices[a:b], weights=weights, minlength=d)
        lo = hi
    return out


def _mt_times(model, R: np.ndarray) -> np.ndarray:
    """M^T R with M = I + W (or W), without forming M."""
    out = np.asarray(model.W.T @ R)
    if model.identity:
        out = out + R
    return out


def _mt_abs_times(model, s: np.ndarray) -> np.ndarray:
    """An upper bound of |M|^T s (|I| + |W| when M = I + W)."""
    out = _abs_transpose_times(model.W.tocsr(), s)
    if model.identity:
        out = out + s
    return out


def _probe(rng, d: int, n_probes: int = _N_PROBES) -> tuple[np.ndarray, np.ndarray]:
    R = rng.standard_normal((d, n_probes))
    return R, np.abs(R).max(axis=1)


def _check_close(got: np.ndarray, want: np.ndarray, bound: np.ndarray, rtol: float, what: str):
    err = np.abs(got - want).max(axis=1) if got.ndim == 2 else np.abs(got - want)
    tol = rtol * bound + 1e-300
    # an altered value large enough to overflow makes its own bound infinite: refuse it too
    bad = np.flatnonzero(~(err <= tol) | ~np.isfinite(tol))
    if bad.size:
        raise FileFormatError(f"{what} do not match the stored corpus and model "
                              f"({bad.size} document(s), e.g. row {int(bad[0])}); the file was altered")


def _check_normalized(index):
    X = index.X_
    norms = np.sqrt(np.bincount(np.repeat(np.arange(X.shape[0]), np.diff(X.indptr)),
                                weights=np.square(X.data), minlength=X.shape[0]))
    nonzero = np.diff(X.indptr) > 0
    bad = np.flatnonzero(nonzero & ~(np.abs(norms - 1.0) <= 1e-9))
    if bad.size:
        raise FileFormatError(f"the model normalises rows, but {bad.size} stored corpus row(s) do not have unit "
                              f"norm (e.g. row {int(bad[0])}); the file was altered")


def _check_exact_postings(index, rng):
    P, X, model = index.postings_, index.X_, index.model
    R, s = _probe(rng, index.n_features)
    got = np.asarray(P.T @ R)  # Y R, one pass over the postings
    want = np.asarray(X @ _mt_times(model, R))
    bound = _abs_rows_times(X, _mt_abs_times(model, s))
    _check_close(got, want, bound, _RTOL64, "the exact index's posting values (X M^T)")


def _check_heavy_values(index, rng):
    H, Z, X, model = index.heavy_rows_, index.Z_, index.X_, index.model
    if H.size == 0 or X.shape[0] == 0:
        return
    Rh, sh = _probe(rng, H.size)
    R = np.zeros((index.n_features, Rh.shape[1]))
    R[H] = Rh
    s = np.zeros(index.n_features)
    s[H] = sh
    got = np.asarray(Z @ Rh)
    want = np.asarray(X @ _mt_times(model, R))
    bound = _abs_rows_times(X, _mt_abs_times(model, s))
    _check_close(got, want, bound, _RTOL64, "the ann index's re-ranking values (heavy rows of X M^T)")


def _check_projection(index, rng):
    V, B, model = index.V_, index.B_, index.model
    r = rng.standard_normal((V.shape[1], _N_PROBES))
    got = np.asarray(B, dtype=np.float64) @ r
    want = _mt_times(model, np.asarray(V, dtype=np.float64) @ r)
    bound = _mt_abs_times(model, np.abs(np.asarray(V, dtype=np.float64)) @ np.abs(r).max(axis=1))
    bound = bound + np.abs(np.asarray(B, dtype=np.float64)) @ np.abs(r).max(axis=1)
    _check_close(got, want, bound, _RTOL32, "the ann index's document map (B = M^T V)")


def _check_ann_postings(index, rng, sample: int):
    P = index.postings_
    if P.nnz == 0:
        return
    # impact order: codes non-increasing within each feature's list
    step = np.diff(P.codes.astype(np.int16))
    boundary = np.zeros(step.shape, dtype=bool)
    ends = P.indptr[1:-1] - 1
    ends = ends[(ends >= 0) & (ends < step.size)]
    boundary[ends] = True
    if np.any((step > 0) & ~boundary):
        raise FileFormatError("the ann index's posting lists are not impact-ordered; the file was altered")
    if index.postings_model_ != index.model.checksum():
        return  # built with an earlier model (index calibrate --model): values are of that model
    m = min(sample, P.nnz)
    entries = np.sort(rng.choice(P.nnz, size=m, replace=False))
    features = (np.searchsorted(P.indptr, entries, side="right") - 1).astype(np.int64)
    docs = P.docs_at(entries)
    X, W = index.X_, index.model.W.tocsr()
    want = np.empty(m)
    bound = np.empty(m)
    for lo in range(0, m, 1024):
        f, c = features[lo:lo + 1024], docs[lo:lo + 1024]
        Xs, Ws = take_rows(X, c), take_rows(W, f)
        want[lo:lo + f.size] = np.asarray(Xs.multiply(Ws).sum(axis=1)).ravel()
        bound[lo:lo + f.size] = np.asarray(abs(Xs).multiply(abs(Ws)).sum(axis=1)).ravel()
        if index.model.identity:
            own = np.asarray(Xs[np.arange(f.size), f]).ravel()
            want[lo:lo + f.size] += own
            bound[lo:lo + f.size] += np.abs(own)
    got = P.values_at(entries, features)
    # one-byte scores: within each list's error bound (half a step after a build) of the exact value
    err = P.error_[features].astype(np.float64)
    bad = np.flatnonzero(~(np.abs(got - want) <= err * (1 + _RTOL32) + _RTOL32 * (bound + np.abs(want)) + 1e-30))
    if bad.size:
        raise FileFormatError(f"the ann index's candidate posting values do not match the stored corpus and model "
                              f"({bad.size} of {m} sampled entries); the file was altered")


def verify_derived(index, seed=None, sample: int = 4096, record_checks: bool = True) -> None:
    """Check the arrays of a loaded index that are derived from its corpus and model.

    Parameters
    ----------
    index : Index
        A loaded :class:`~sparsesim.indexes.ExactIndex` or :class:`~sparsesim.indexes.AnnIndex`
        whose arrays passed the structural checks of :func:`sparsesim.indexes.storage.read_index`.
    seed : int, optional
        Seed of the random probes; default: fresh entropy on every call (a file cannot be crafted
        against a probe it cannot know).
    sample : int, default 4096
        Ann candidate-posting entries whose values are recomputed exactly.
    record_checks : bool, default True
        Ann: replay the calibration record and probe the recall it claims
        (:mod:`sparsesim.indexes.recall_check`); the posting lists are probed either way.

    Raises
    ------
    FileFormatError
        A derived array does not match the stored corpus and model.
    """
    rng = np.random.default_rng(seed)
    own = getattr(index, "verify_derived_arrays", None)
    if own is not None:  # an index kind with its own derived arrays (embedding indexes)
        own(rng, sample)
        return
    with np.errstate(all="ignore"):  # an overflow (values near 1e308) makes a non-finite error: refused
        _verify(index, rng, sample)
        if index.kind == "ann":
            check_candidate_stage(index, rng, record_checks=record_checks)


def _verify(index, rng, sample: int) -> None:
    if index.model.normalize and index.n_documents:
        _check_normalized(index)
    if getattr(index, "postings_", None) is not None and index.kind == "exact":
        _check_exact_postings(index, rng)
    if index.kind == "ann":
        _check_heavy_values(index, rng)
        if getattr(index, "V_", None) is not None and getattr(index, "B_", None) is not None:
            _check_projection(index, rng)
        _check_ann_postings(index, rng, sample)
