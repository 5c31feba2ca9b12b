"""Learned similarity models and their no-pickle file format."""

from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp

from .exceptions import FileFormatError, InvalidInputError
from .persistence import load_bundle, save_bundle
from .validation import check_csr

MODEL_KIND = "bilinear-similarity"


class BilinearSimilarity:
    """A bilinear similarity S(x, x') = x^T M x' with M = I + W (or M = W).

    Parameters
    ----------
    W : scipy.sparse matrix, shape (d, d)
        The learned part, kept sparse at rest (CSR).
    identity : bool, default True
        Whether M includes the identity (M = I + W).
    normalize : bool, default False
        L2-normalise documents before scoring, S(x, x') = (x/|x|)^T M (x'/|x'|); with W = 0
        this is the cosine similarity.
    metadata : dict, optional
        Algorithm, parameters and training facts (saved with the model).

    Notes
    -----
    Scoring never forms M densely: queries are multiplied with the sparse M, and the result
    with the corpus, in blocks.
    """

    def __init__(self, W, identity: bool = True, normalize: bool = False, metadata: dict | None = None):
        if not sp.issparse(W) or W.ndim != 2 or W.shape[0] != W.shape[1]:
            raise InvalidInputError(f"W must be a square sparse matrix, got {getattr(W, 'shape', None)}")
        self.W = sp.csr_matrix(W, dtype=np.float64)
        self.W.sum_duplicates()
        self.W.sort_indices()
        if not np.all(np.isfinite(self.W.data)):
            raise InvalidInputError("W contains NaN or infinite values")
        self.identity = bool(identity)
        self.normalize = bool(normalize)
        self.metadata = dict(metadata or {})

    # -- structure ------------------------------------------------------------------------
    @property
    def n_features(self) -> int:
        return self.W.shape[0]

    @property
    def M(self) -> sp.csr_matrix:
        """M as a sparse matrix (I + W when ``identity``)."""
        if self.identity:
            return (self.W + sp.identity(self.n_features, format="csr")).tocsr()
        return self.W

    def nnz(self) -> int:
        """Nonzero entries of M (the diagonal counted where I + W is nonzero)."""
        if not self.identity:
            return int(np.count_nonzero(self.W.data))
        diag_w = self.W.diagonal()
        off = int(np.count_nonzero(self.W.data)) - int(np.count_nonzero(diag_w))
        return off + int(np.count_nonzero(1.0 + diag_w))

    def sparsity(self) -> float:
        """1 - nnz(M) / d^2, counted over all d^2 entries of M."""
        d = self.n_features
        return 1.0 - self.nnz() / float(d) / float(d)

    # -- scoring --------------------------------------------------------------------------
    def _check(self, X, name):
        X = check_csr(X, name=name, n_features=self.n_features)
        if self.normalize:
            norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
            X = (sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ X).tocsr()
        return X

    def transform_queries(self, Q) -> sp.csr_matrix:
        """Q M (so that S(q, x) = (q M) . x)."""
        return self._times_M(self._check(Q, "queries"))

    def _times_M(self, Q: sp.csr_matrix) -> sp.csr_matrix:
        # Q already checked (and normalised when ``normalize``)
        out = Q @ self.W
        return (out + Q).tocsr() if self.identity else out.tocsr()

    def transform_corpus(self, X) -> sp.csr_matrix:
        """X M^T (so that S(q, x) = q . (M x)); what an index precomputes once."""
        X = self._check(X, "corpus")
        out = X @ self.W.T
        return (out + X).tocsr() if self.identity else out.tocsr()

    def score(self, x, x2) -> float:
        """S(x, x2) for two single documents (1-D arrays or 1-row matrices)."""
        return float(self.score_pairs(x, x2)[0])

    def score_pairs(self, A, B) -> np.ndarray:
        """Row-wise S(A[i], B[i])."""
        A = self._check(A, "A")
        B = self._check(B, "B")
        if A.shape[0] != B.shape[0]:
            raise InvalidInputError(f"A has {A.shape[0]} rows but B has {B.shape[0]}")
        AM = self.transform_queries(A)
        return np.asarray(AM.multiply(B).sum(axis=1)).ravel()

    def score_matrix(self, Q, X, block_size: int = 2048) -> np.ndarray:
        """Dense (n_queries, n_corpus) scores S(Q[i], X[j]), computed in query blocks."""
        Q = self._check(Q, "queries")
        XT = self._check(X, "corpus").T.tocsc()
        out = np.empty((Q.shape[0], XT.shape[1]))
        for lo in range(0, Q.shape[0], block_size):
            block = self._times_M(Q[lo:lo + block_size])
            out[lo:lo + block.shape[0]] = (block @ XT).toarray()
        return out

    def scorer(self, X):
        """``score_fn(rows)`` for :func:`sparsesim.evaluation.evaluate_retrieval` over corpus ``X``.

        Each call multiplies only the requested rows with M, so memory stays bounded by the
        block of queries (``X M`` is never formed for the whole corpus: with a large W it can
        be nearly dense).
        """
        X = self._check(X, "corpus")
        XT = X.T.tocsc()

        def score_fn(rows):
            block = self._times_M(X[rows])
            return (block @ XT).toarray()

        return score_fn

    # -- persistence ----------------------------------------------------------------------
    def checksum(self) -> str:
        from .persistence import arrays_checksum

        return arrays_checksum(self._arrays())

    def _arrays(self) -> dict:
        W = self.W
        return {"indptr": W.indptr.astype(np.int64), "indices": W.indices.astype(np.int32), "data": W.data}

    def save(self, path: str | os.PathLike) -> dict:
        """Write the model atomically as npz + JSON metadata (no pickle). Returns the metadata."""
        meta = dict(self.metadata)
        meta.update(n_features=self.n_features, identity=self.identity, normalize=self.normalize, nnz=self.nnz(),
                    sparsity=self.sparsity())
        return save_bundle(path, self._arrays(), meta, kind=MODEL_KIND)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "BilinearSimilarity":
        """Read a model written by :meth:`save`, verifying format and checksum."""
        arrays, meta = load_bundle(path, kind=MODEL_KIND)
        try:
            d = int(meta["n_features"])
            W = sp.csr_matrix((arrays["data"], arrays["indices"], arrays["indptr"]), shape=(d, d))
            W.check_format(full_check=True)
        except (KeyError, ValueError, TypeError) as exc:
            raise FileFormatError(f"{path}: inconsistent model arrays ({exc})") from None
        return cls(W, identity=bool(meta.get("identity", True)), normalize=bool(meta.get("normalize", False)),
                   metadata=meta)

    def __repr__(self):
        return (f"BilinearSimilarity(d={self.n_features}, nnz(M)={self.nnz()}, "
                f"identity={self.identity}, algorithm={self.metadata.get('algorithm')!r})")
