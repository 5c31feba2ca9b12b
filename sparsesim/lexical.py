"""BM25 document-to-document similarity, computed by the ``bm25s`` package.

:class:`BM25Similarity` ranks the documents of a corpus for a query *document* the way a search
engine ranks them for a keyword query made of that document's terms:

.. math::

    S(q, x) = \\sum_{t \\,:\\, q_t > 0} \\mathrm{idf}_X(t)\\,
              \\frac{\\mathrm{tf}(t, x)}{\\mathrm{tf}(t, x) + k_1 (1 - b + b\\,|x| / \\mathrm{avgdl}_X)}

* each distinct term of the query document counts once (Lucene's query of unique terms), so a
  long query document is not favoured by its repeated words;
* ``idf`` and the average length ``avgdl`` are the statistics of the corpus searched (the corpus
  given to :meth:`~BM25Similarity.scorer` or :meth:`~BM25Similarity.score_matrix`), as in any BM25
  index; nothing is learned from training documents or labels;
* ``tf`` and the document length ``|x|`` are term counts: rows must hold non-negative integer
  counts, not TF-IDF weights (load registered corpora with ``representation="raw"``).

The score is not symmetric (S(q, x) != S(x, q) in general). The corpus weights (the fraction above,
times idf) come from ``bm25s.BM25.build_index_from_ids`` (variant ``method``: ``"lucene"``,
``"robertson"``, ``"atire"``, ``"bm25l"``, ``"bm25+"``); a block of queries is scored as the sparse
product of their term indicators with those weights. The model file (kind ``"bm25-similarity"``)
holds the settings and, optionally, a counting text featuriser; no pickle.
"""

from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp

from .exceptions import FileFormatError, InvalidInputError, MissingDependencyError
from .persistence import load_bundle
from .similarity_base import SimilarityModel
from .text import TextFeaturizer
from .validation import MAX_FEATURES, bounded, check_csr, check_meta

__all__ = ["BM25_MODEL_KIND", "BM25_METHODS", "BM25_META_SCHEMA", "BM25Similarity", "check_counts"]

BM25_MODEL_KIND = "bm25-similarity"
BM25_METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")

#: What a BM25 model file's metadata must hold (other keys are kept as stored, never used).
BM25_META_SCHEMA = {
    "n_features": ("int", 1, MAX_FEATURES),
    "k1": ("float", 0.0, 1e6),
    "b": ("float", 0.0, 1.0),
    "method": ("choice", BM25_METHODS),
    "delta": ("float", 0.0, 1e6),
    "algorithm": ("str?",),
    "dataset": ("str?",),
    "split_seed": ("int?", 0, 2**32 - 1),
    "train_fraction": ("float?", 0.0, 1.0, {"low_open": True, "high_open": True}),
    "n_train": ("int?", 0, None),
    "checksum": ("str",),
}


def check_counts(X, name: str = "X", n_features: int | None = None) -> sp.csr_matrix:
    """``X`` checked as CSR (:func:`~sparsesim.validation.check_csr`) holding non-negative integer counts.

    Raises
    ------
    InvalidInputError
        What :func:`~sparsesim.validation.check_csr` refuses, or negative or fractional values.
    """
    X = check_csr(X, name=name, n_features=n_features)
    if X.nnz and (X.data.min() < 0 or not np.array_equal(X.data, np.round(X.data))):
        raise InvalidInputError(f"BM25 scores term counts, but {name} holds negative or fractional values (TF-IDF "
                                "weights?); give raw term counts (registered corpora: representation='raw')")
    if X.nnz and X.data.max() > 2**31:
        raise InvalidInputError(f"{name} holds a term count above 2^31")
    return X


class BM25Similarity(SimilarityModel):
    """BM25 scores of corpus documents for query documents (see the module docstring).

    Parameters
    ----------
    n_features : int
        Vocabulary size (columns of the count rows).
    k1 : float, default 1.5
        Term-frequency saturation.
    b : float, default 0.75
        Length normalisation (0: none, 1: full).
    method : str, default "lucene"
        BM25 variant of ``bm25s``.
    delta : float, default 0.5
        The ``delta`` of the BM25L and BM25+ variants (ignored by the others).
    metadata : dict, optional
    featurizer : TextFeaturizer, optional
        A fitted featuriser giving raw counts (``use_idf=False, norm=None``), so texts become queries.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[2, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 3]])
    >>> S = BM25Similarity(4).score_matrix(X[:1], X)
    >>> [int(i) for i in np.argsort(-S[0])]
    [0, 1, 2]
    """

    model_kind = BM25_MODEL_KIND

    def __init__(self, n_features: int, k1: float = 1.5, b: float = 0.75, method: str = "lucene",
                 delta: float = 0.5, metadata: dict | None = None, featurizer: TextFeaturizer | None = None):
        if isinstance(n_features, bool) or not isinstance(n_features, (int, np.integer)) or n_features < 1:
            raise InvalidInputError(f"n_features must be a positive integer, got {bounded(repr(n_features), 40)}")
        if method not in BM25_METHODS:
            raise InvalidInputError(f"method must be one of {', '.join(BM25_METHODS)}; got {bounded(repr(method), 40)}")
        for name, value, high in (("k1", k1, 1e6), ("b", b, 1.0), ("delta", delta, 1e6)):
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not 0 <= value <= high:
                raise InvalidInputError(f"{name} must be a number in [0, {high:g}], got {bounded(repr(value), 40)}")
        self._d = int(n_features)
        self.k1, self.b, self.delta, self.method = float(k1), float(b), float(delta), method
        self._keep(metadata, featurizer)

    @property
    def n_features(self) -> int:
        return self._d

    @property
    def nbytes(self) -> int:
        """Bytes of the model's arrays: none (the weights are the searched corpus's)."""
        return 0

    _vector_kind = "term-count vectors"

    def check_featurizer(self, featurizer) -> None:
        """Refuse a featuriser of another width or one that does not count terms
        (BM25 needs ``TextFeaturizer(use_idf=False, norm=None)``)."""
        super().check_featurizer(featurizer)
        settings = featurizer.settings()
        if settings.get("use_idf", True) or settings.get("norm", "l2") is not None:
            raise InvalidInputError("BM25 needs a featuriser that counts terms (use_idf=False, norm=None)")

    # -- scoring --------------------------------------------------------------------------
    def corpus_weights(self, X) -> sp.csr_matrix:
        """The BM25 weight of every (document, term) of corpus ``X`` under ``X``'s own statistics (CSR)."""
        return self._weights(check_counts(X, "corpus", self.n_features))

    def _weights(self, X: sp.csr_matrix) -> sp.csr_matrix:
        n, d = X.shape
        if X.nnz == 0:
            return sp.csr_matrix((n, d))
        try:
            import bm25s
        except ImportError:
            raise MissingDependencyError("BM25 needs the bm25s package: pip install bm25s") from None
        tokens = np.repeat(X.indices.astype(np.int64), X.data.astype(np.int64))
        lengths = np.asarray(X.sum(axis=1)).ravel().astype(np.int64)
        docs = [part.tolist() for part in np.split(tokens, np.cumsum(lengths)[:-1])]
        index = bm25s.BM25(k1=self.k1, b=self.b, delta=self.delta, method=self.method, dtype="float64",
                           int_dtype="int64", csc_backend="scipy", backend="numpy")
        built = index.build_index_from_ids(unique_token_ids=list(range(d)), corpus_token_ids=docs,
                                           show_progress=False)
        W = sp.csc_matrix((built["data"], built["indices"], built["indptr"]), shape=(n, d))
        return W.tocsr()

    @staticmethod
    def _terms(Q: sp.csr_matrix) -> sp.csr_matrix:
        out = Q.copy()
        out.data = np.ones_like(out.data)
        out.eliminate_zeros()
        return out

    def score_matrix(self, Q, X, block_size: int = 2048) -> np.ndarray:
        """Dense (n_queries, n_corpus) BM25 scores of the documents of ``X`` for the query documents ``Q``."""
        Q = check_counts(Q, "queries", self.n_features)
        WT = self.corpus_weights(X).T.tocsc()
        out = np.empty((Q.shape[0], WT.shape[1]))
        for lo in range(0, Q.shape[0], block_size):
            out[lo:lo + block_size] = (self._terms(Q[lo:lo + block_size]) @ WT).toarray()
        return out

    def score_pairs(self, A, B) -> np.ndarray:
        """Row-wise S(A[i], B[i]), the statistics taken from the documents of ``B``."""
        A = check_counts(A, "A", self.n_features)
        W = self.corpus_weights(B)
        if A.shape[0] != W.shape[0]:
            raise InvalidInputError(f"A has {A.shape[0]} rows but B has {W.shape[0]}")
        return np.asarray(self._terms(A).multiply(W).sum(axis=1)).ravel()

    def scorer(self, X):
        """``score_fn(rows)`` for :func:`sparsesim.evaluation.evaluate_retrieval`: corpus ``X``'s own
        documents as queries against ``X`` (weights computed once)."""
        X = check_counts(X, "corpus", self.n_features)
        WT = self._weights(X).T.tocsc()
        terms = self._terms(X)
        return lambda rows: (terms[rows] @ WT).toarray()

    # -- persistence ----------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> dict:
        """Write the model atomically (npz + JSON metadata, no pickle). Returns the metadata."""
        meta = dict(self.metadata)
        meta.update(n_features=self.n_features, k1=self.k1, b=self.b, method=self.method, delta=self.delta)
        return self._write(path, self._arrays(), meta)

    def _arrays(self) -> dict:
        return {}  # BM25 stores no arrays of its own: its weights are the searched corpus's

    @classmethod
    def load(cls, path: str | os.PathLike) -> "BM25Similarity":
        """Read a model written by :meth:`save` (format, kind, checksum and metadata schema verified).

        Raises
        ------
        FileFormatError
            Missing, corrupt or inconsistent file.
        """
        arrays, meta = load_bundle(path, kind=BM25_MODEL_KIND)
        check_meta(meta, BM25_META_SCHEMA, str(path))
        featurizer = cls._stored_featurizer(arrays, meta, path, None)
        try:
            return cls(meta["n_features"], k1=meta["k1"], b=meta["b"], method=meta["method"], delta=meta["delta"],
                       metadata=meta, featurizer=featurizer)
        except InvalidInputError as exc:
            raise FileFormatError(f"{path}: inconsistent BM25 model ({bounded(exc, 200)})") from None

    def __repr__(self):
        return (f"BM25Similarity(d={self.n_features}, k1={self.k1:g}, b={self.b:g}, method={self.method!r}, "
                f"algorithm={self.metadata.get('algorithm')!r})")
