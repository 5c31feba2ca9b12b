"""A compact bilinear similarity: diagonal + sparse + low rank, M = D + W + U V^T.

:class:`CompactSimilarity` scores two documents as

.. math::

    S(x, x') = n(x)^T (D + W + U V^T)\\, n(x')
             = \\sum_j D_j n(x)_j n(x')_j + n(x)^T W n(x') + \\langle n(x) U, n(x') V \\rangle

with ``n(x) = x / |x|`` when ``normalize`` (else ``x``), ``D`` a vector of length d (the
diagonal), ``W`` a sparse off-diagonal ``(d, d)`` matrix and ``U, V`` dense ``(d, r)``: the
low-rank, diagonal-preserving form of Supervised Semantic Indexing (Bai et al. 2009) with a
sparse part beside it. Its size is ``d + nnz(W) + 2 d r`` numbers whatever the training, so a
learner can keep it within a budget chosen before learning
(:class:`sparsesim.learners.compact.CompactSSI`).

Scoring never forms M: queries go through the sparse part ``D + W`` (a sparse product) and
through ``U`` (a dense ``(rows, r)`` embedding), the corpus through ``V``; only row blocks are
embedded. The model file is the project's checksummed npz bundle (kind ``"compact-similarity"``,
no pickle); :meth:`CompactSimilarity.load` trusts nothing in it.
"""

from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp

from .csr_rows import unit_row_data
from .exceptions import FileFormatError, InvalidInputError
from .persistence import load_bundle
from .similarity_base import SimilarityModel, dense_array
from .text import TextFeaturizer
from .validation import MAX_FEATURES, bounded, check_csr, check_meta

__all__ = ["COMPACT_MODEL_KIND", "COMPACT_META_SCHEMA", "MAX_RANK", "CompactSimilarity"]

COMPACT_MODEL_KIND = "compact-similarity"
#: The largest rank a model file may declare.
MAX_RANK = 1 << 14

#: What a compact model file's metadata must hold; other keys (algorithm, parameters, training
#: facts) are kept as stored and never steer computation.
COMPACT_META_SCHEMA = {
    "n_features": ("int", 1, MAX_FEATURES),
    "rank": ("int", 0, MAX_RANK),
    "normalize": ("bool",),
    "nnz_w": ("int", 0, None),
    "algorithm": ("str?",),
    "dataset": ("str?",),
    "split_seed": ("int?", 0, 2**32 - 1),
    "train_fraction": ("float?", 0.0, 1.0, {"low_open": True, "high_open": True}),
    "n_train": ("int?", 0, None),
    "checksum": ("str",),
}

_BLOCK = 4096


class CompactSimilarity(SimilarityModel):
    """S(x, x') = n(x)^T (diag(D) + W + U V^T) n(x'): diagonal, sparse off-diagonal and low-rank parts.

    Parameters
    ----------
    diagonal : array, shape (n_features,)
        The diagonal D.
    W : sparse matrix, shape (n_features, n_features)
        The sparse part; no diagonal entries (the diagonal is ``diagonal``).
    U, V : array, shape (n_features, rank)
        The low-rank factors (``rank`` may be 0: no low-rank part).
    normalize : bool, default True
        L2-normalise documents first (``n(x) = x / |x|``).
    metadata : dict, optional
    featurizer : TextFeaturizer, optional

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> W = sp.csr_matrix(np.array([[0.0, 0.5], [0.0, 0.0]]))
    >>> m = CompactSimilarity(np.ones(2), W, np.array([[1.0], [0.0]]), np.array([[0.0], [2.0]]), normalize=False)
    >>> X = sp.csr_matrix(np.array([[1.0, 0.0], [0.0, 1.0]]))
    >>> m.score_matrix(X, X).tolist()  # M = I + W + U V^T = [[1, 2.5], [0, 1]]
    [[1.0, 2.5], [0.0, 1.0]]
    """

    model_kind = COMPACT_MODEL_KIND

    def __init__(self, diagonal, W, U, V, normalize: bool = True, metadata: dict | None = None,
                 featurizer: TextFeaturizer | None = None):
        diagonal = np.asarray(diagonal) if not sp.issparse(diagonal) else diagonal
        if getattr(diagonal, "ndim", 0) != 1 or diagonal.shape[0] < 1:
            raise InvalidInputError(f"diagonal must be a non-empty vector, got shape {getattr(diagonal, 'shape', None)}")
        d = diagonal.shape[0]
        self.diagonal = dense_array("diagonal", diagonal, (d,))
        U = np.asarray(U) if not sp.issparse(U) else U
        r = U.shape[1] if getattr(U, "ndim", 0) == 2 else -1
        if r < 0:
            raise InvalidInputError(f"U must be a (n_features, rank) matrix, got shape {getattr(U, 'shape', None)}")
        self.U = dense_array("U", U, (d, r))
        self.V = dense_array("V", V, (d, r))
        if not sp.issparse(W) or W.shape != (d, d):
            raise InvalidInputError(f"W must be a sparse ({d}, {d}) matrix, got {getattr(W, 'shape', None)}")
        if W.dtype.kind not in "biuf":
            raise InvalidInputError(f"W must hold real numbers, got dtype {W.dtype}")
        W = sp.csr_matrix(W, dtype=np.float64)
        W.sum_duplicates()
        W.sort_indices()
        if not np.all(np.isfinite(W.data)):
            raise InvalidInputError("W contains NaN or infinite values")
        rows = np.repeat(np.arange(d), np.diff(W.indptr))
        if np.any(rows == W.indices):
            raise InvalidInputError("W has diagonal entries; the diagonal is given as `diagonal`")
        W.indptr = W.indptr.astype(np.int64)
        W.indices = W.indices.astype(np.int32)
        self.W = W
        self.normalize = bool(normalize)
        self._keep(metadata, featurizer)

    # -- structure ------------------------------------------------------------------------
    @property
    def n_features(self) -> int:
        return self.diagonal.shape[0]

    @property
    def rank(self) -> int:
        return self.U.shape[1]

    @property
    def n_components(self) -> int:
        """The rank (the width of the embeddings an index stores)."""
        return self.U.shape[1]

    @property
    def n_entries(self) -> int:
        """Numbers the model stores: ``d + nnz(W) + 2 d r``."""
        return int(self.n_features + self.W.nnz + 2 * self.n_features * self.rank)

    @property
    def nbytes(self) -> int:
        """Bytes of the model's arrays (D, W's CSR arrays, U and V; the text featuriser not counted)."""
        W = self.W
        return int(self.diagonal.nbytes + W.data.nbytes + W.indices.nbytes + W.indptr.nbytes + self.U.nbytes
                   + self.V.nbytes)

    def sparse_matrix(self) -> sp.csr_matrix:
        """The sparse part ``diag(D) + W`` as one CSR matrix."""
        return (self.W + sp.diags(self.diagonal, format="csr")).tocsr()

    # -- scoring --------------------------------------------------------------------------
    def _check(self, X, name) -> sp.csr_matrix:
        X = check_csr(X, name=name, n_features=self.n_features)
        if self.normalize:
            X = sp.csr_matrix((unit_row_data(X), X.indices.copy(), X.indptr.copy()), shape=X.shape)
        return X

    def _embed(self, X: sp.csr_matrix, F: np.ndarray) -> np.ndarray:
        out = np.empty((X.shape[0], self.rank))
        for lo in range(0, X.shape[0], _BLOCK):
            out[lo:lo + _BLOCK] = np.asarray(X[lo:lo + _BLOCK] @ F)
        return out

    def embed_queries(self, Q) -> np.ndarray:
        """``n(q) U`` for the rows of ``Q``: dense ``(n_rows, rank)``."""
        return self._embed(self._check(Q, "queries"), self.U)

    def embed_corpus(self, X) -> np.ndarray:
        """``n(x) V`` for the rows of ``X``: dense ``(n_rows, rank)``."""
        return self._embed(self._check(X, "corpus"), self.V)

    def lexical_rows(self, X):
        """The sparse rows the score compares, from rows in the model's form: the rows ``n(x)``
        themselves (the shared indexes of :mod:`sparsesim.indexes.embedding_index` ask every
        model for them)."""
        return X

    def rows_from_lexical(self, L):
        """The rows ``n(x)`` back from :meth:`lexical_rows` (the same rows)."""
        return L

    def embed(self, X) -> np.ndarray:
        """The corpus-side embedding ``n(x) V`` (what an index stores per document)."""
        return self.embed_corpus(X)

    def transform_queries(self, Q) -> sp.csr_matrix:
        """``n(q) (D + W)``: the queries through the sparse part (``S = that . n(x) + <n(q) U, n(x) V>``)."""
        return (self._check(Q, "queries") @ self.sparse_matrix()).tocsr()

    def dense_query(self, q) -> np.ndarray:
        """``n(q) M`` of one query row as a dense vector of ``n_features``: a corpus of rows in the
        model's form ``n(x)`` is scored by one sparse product, ``X_n @ dense_query(q)`` (what a
        learning index does with each query; never a queries x d block).

        Examples
        --------
        >>> import numpy as np, scipy.sparse as sp
        >>> m = CompactSimilarity(np.ones(2), sp.csr_matrix((2, 2)), np.array([[1.0], [0.0]]),
        ...                       np.array([[0.0], [2.0]]), normalize=False)
        >>> m.dense_query(sp.csr_matrix(np.array([[1.0, 0.0]]))).tolist()  # row 0 of I + U V^T
        [1.0, 2.0]
        """
        q = self._check(q, "query")
        if q.shape[0] != 1:
            raise InvalidInputError(f"dense_query takes one query row, got {q.shape[0]}")
        out = np.asarray((q @ self.W).toarray()).ravel()
        out[q.indices] += self.diagonal[q.indices] * q.data
        if self.rank:
            out += self.V @ (q.data @ self.U[q.indices])
        return out

    def _pair_scores(self, A: sp.csr_matrix, B: sp.csr_matrix) -> np.ndarray:
        out = np.asarray((A @ self.sparse_matrix()).multiply(B).sum(axis=1)).ravel()
        if self.rank:
            out += np.einsum("ij,ij->i", self._embed(A, self.U), self._embed(B, self.V))
        return out

    def score_matrix(self, Q, X, block_size: int = 2048) -> np.ndarray:
        """Dense (n_queries, n_corpus) scores S(Q[i], X[j]), computed in query blocks."""
        Q = self._check(Q, "queries")
        score_fn = self._scorer_checked(self._check(X, "corpus"))
        out = np.empty((Q.shape[0], X.shape[0]))
        for lo in range(0, Q.shape[0], block_size):
            out[lo:lo + block_size] = score_fn(Q[lo:lo + block_size])
        return out

    def _scorer_checked(self, X: sp.csr_matrix):
        XT = X.T.tocsc()
        S = self.sparse_matrix()
        EX = self._embed(X, self.V) if self.rank else None

        def score_fn(Qrows):
            scores = ((Qrows @ S) @ XT).toarray()
            if EX is not None:
                scores += self._embed(Qrows, self.U) @ EX.T
            return scores

        return score_fn

    def scorer(self, X):
        """``score_fn(rows)`` for :func:`sparsesim.evaluation.evaluate_retrieval` over corpus ``X``
        (the corpus is embedded through V once; each call scores the requested rows against all)."""
        X = self._check(X, "corpus")
        score_fn = self._scorer_checked(X)
        return lambda rows: score_fn(X[rows])

    # -- persistence ----------------------------------------------------------------------
    def _arrays(self) -> dict:
        W = self.W
        return {"diagonal": self.diagonal, "W_indptr": W.indptr.astype(np.int64),
                "W_indices": W.indices.astype(np.int32), "W_data": W.data, "U": self.U, "V": self.V}

    def save(self, path: str | os.PathLike, metadata: dict | None = None) -> dict:
        """Write the model atomically as npz + JSON metadata (no pickle). Returns the metadata.

        ``metadata``: stored instead of the model's own (e.g. a feedback snapshot's record); the
        structural keys (``n_features``, ``rank``, ...) are always the model's."""
        meta = dict(self.metadata if metadata is None else metadata)
        meta.update(n_features=self.n_features, rank=self.rank, normalize=self.normalize, nnz_w=int(self.W.nnz),
                    n_entries=self.n_entries, nbytes=self.nbytes)
        return self._write(path, self._arrays(), meta)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "CompactSimilarity":
        """Read a model written by :meth:`save`, verifying format, checksum, metadata schema and arrays.

        Nothing in the file is trusted: the metadata must match :data:`COMPACT_META_SCHEMA`;
        ``diagonal`` must be a finite float64 ``(d,)`` array, ``U`` and ``V`` finite float64
        ``(d, rank)`` arrays, W's arrays exactly int64/int32/float64 forming a canonical CSR
        ``(d, d)`` matrix with finite values, no diagonal entries and ``nnz_w`` entries; nothing
        is coerced.

        Raises
        ------
        FileFormatError
            Missing, truncated, corrupt or inconsistent file.
        """
        arrays, meta = load_bundle(path, kind=COMPACT_MODEL_KIND)
        check_meta(meta, COMPACT_META_SCHEMA, str(path))
        cls._check_split_facts(meta, path)
        d, r = meta["n_features"], meta["rank"]
        dense = {name: cls._stored_dense(arrays, name, shape, path, "compact")
                 for name, shape in {"diagonal": (d,), "U": (d, r), "V": (d, r)}.items()}
        try:
            parts = [arrays.pop(f"W_{part}") for part in ("indptr", "indices", "data")]
        except KeyError:
            raise FileFormatError(f"{path}: the compact model lacks W's CSR arrays") from None
        W = cls._stored_csr(*parts, d, path, allow_duplicates=False)
        if W.nnz != meta["nnz_w"]:
            raise FileFormatError(f"{path}: the metadata says W has {meta['nnz_w']} entries; the file holds "
                                  f"{W.nnz} (the file was altered)")
        featurizer = cls._stored_featurizer(arrays, meta, path, d)
        try:
            return cls(dense["diagonal"], W, dense["U"], dense["V"], normalize=meta["normalize"], metadata=meta,
                       featurizer=featurizer)
        except InvalidInputError as exc:
            raise FileFormatError(f"{path}: inconsistent compact model ({bounded(exc, 200)})") from None

    def __repr__(self):
        return (f"CompactSimilarity(d={self.n_features}, nnz(W)={self.W.nnz}, rank={self.rank}, "
                f"algorithm={self.metadata.get('algorithm')!r})")
