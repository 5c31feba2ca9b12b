"""Similarities computed through a dense low-dimensional embedding of sparse documents.

:class:`EmbeddingSimilarity` scores two documents as

.. math::

    S(x, x') = \\alpha \\langle n(x), n(x') \\rangle + \\langle e(x), e(x') \\rangle,\\qquad
    e(x) = \\mathrm{post}(\\mathrm{act}(n(x) P + b))

with ``n(x) = x / |x|`` when ``normalize`` (else ``x``), ``P`` a dense ``(d, r)`` matrix, ``b`` an
optional bias of length ``r``, ``act`` the identity (``"linear"``) or a row softmax
(``"softmax"``) and ``post`` an L2 normalisation of the embedding when ``normalize_embedding``.
With ``lexical_power`` gamma below 1 the identity part compares ``l(x) = phi(n(x)) / |phi(n(x))|``,
``phi(v)_j = sign(v_j) |v_j|^gamma``, instead of ``n(x)``: on TF-IDF rows, gamma = 0.5 weighs a
term by its idf once and its frequency by a square root, closer to BM25 than cosine is.
One class covers

* LSA: ``P`` = the top right singular vectors, ``normalize_embedding=True``;
* classifier embeddings: ``P`` = the classifier's ``coef_.T``, ``bias`` = its intercept, softmax
  (class probabilities) or linear (decision scores), ``normalize_embedding=True``;
* low-rank bilinear models M = alpha I + P P^T: linear, no bias, ``normalize_embedding=False``,
  ``identity_weight`` = alpha.

The model file is the project's checksummed npz bundle (kind ``"embedding-similarity"``, no
pickle); :meth:`EmbeddingSimilarity.load` trusts nothing in it. Corpora are embedded in row blocks:
only ``(rows, r)`` dense arrays are formed, never a dense ``(rows, d)`` one.
"""

from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp

from .exceptions import FileFormatError, InvalidInputError
from .persistence import load_bundle
from .similarity_base import SimilarityModel, dense_array
from .text import TextFeaturizer
from .validation import MAX_FEATURES, bounded, check_csr, check_meta

__all__ = ["lexical_rows", "EMBEDDING_MODEL_KIND", "EMBEDDING_META_SCHEMA", "ACTIVATIONS", "MAX_COMPONENTS",
           "EmbeddingSimilarity"]

EMBEDDING_MODEL_KIND = "embedding-similarity"
ACTIVATIONS = ("linear", "softmax")
#: The largest embedding width a model file may declare.
MAX_COMPONENTS = 1 << 16

#: What an embedding model file's metadata must hold (see :func:`sparsesim.validation.check_meta`);
#: other keys (algorithm, parameters, training facts) are kept as stored and never steer computation.
EMBEDDING_META_SCHEMA = {
    "n_features": ("int", 1, MAX_FEATURES),
    "n_components": ("int", 1, MAX_COMPONENTS),
    "activation": ("choice", ACTIVATIONS),
    "normalize": ("bool",),
    "normalize_embedding": ("bool",),
    "identity_weight": ("float", None, None),
    "lexical_power": ("float?", 0.0, 1.0, {"low_open": True}),
    "has_bias": ("bool",),
    "algorithm": ("str?",),
    "dataset": ("str?",),
    "split_seed": ("int?", 0, 2**32 - 1),
    "train_fraction": ("float?", 0.0, 1.0, {"low_open": True, "high_open": True}),
    "n_train": ("int?", 0, None),
    "checksum": ("str",),
}

_BLOCK = 4096


def _row_normalize(X: sp.csr_matrix) -> sp.csr_matrix:
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    return (sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ X).tocsr()


def lexical_rows(X: sp.csr_matrix, power: float, weights=None) -> sp.csr_matrix:
    """``sign(X) |X|^power`` entry by entry (same sparsity), times ``weights[j]`` in column j when
    given, rows then L2-normalised.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> lexical_rows(sp.csr_matrix([[0.0, 0.36, 0.64]]), 0.5).toarray().round(2).tolist()
    [[0.0, 0.6, 0.8]]
    >>> lexical_rows(sp.csr_matrix([[0.0, 0.36, 0.64]]), 0.5, weights=np.array([1.0, 4.0, 1.0])).toarray().round(2).tolist()
    [[0.0, 0.95, 0.32]]
    """
    X = sp.csr_matrix(X, dtype=np.float64, copy=True)  # entries stay in their order
    data = np.sign(X.data) * np.abs(X.data) ** power
    if weights is not None:
        data *= np.asarray(weights, dtype=np.float64)[X.indices]
    counts = np.diff(X.indptr)
    norms = np.sqrt(np.bincount(np.repeat(np.arange(X.shape[0]), counts), weights=data * data,
                                minlength=X.shape[0]))
    X.data = data / np.repeat(np.where(norms > 0, norms, 1.0), counts)
    return X


class EmbeddingSimilarity(SimilarityModel):
    """S(x, x') = identity_weight * <n(x), n(x')> + <e(x), e(x')> with e(x) = post(act(n(x) P + bias)).

    Parameters
    ----------
    P : array, shape (n_features, n_components)
        The dense projection (finite values).
    bias : array, shape (n_components,), optional
        Added to ``n(x) P`` before the activation.
    activation : {"linear", "softmax"}, default "linear"
        ``"softmax"`` turns each embedded row into a probability vector (numerically stable).
    normalize : bool, default False
        L2-normalise documents before anything else (``n(x) = x / |x|``).
    normalize_embedding : bool, default False
        L2-normalise each embedding after the activation (a zero embedding stays zero).
    identity_weight : float, default 0.0
        Weight alpha of the (normalised) dot product added to the embedding's inner product.
    metadata : dict, optional
        Algorithm, parameters and training facts (saved with the model).
    featurizer : TextFeaturizer, optional
        The fitted text featuriser the model's features come from (saved in the model file).
    lexical_power : float in (0, 1], default 1.0
        gamma of the identity part: it compares ``l(x)``, the rows ``n(x)`` raised entry-wise to
        gamma (sign kept) and L2-normalised; 1 compares ``n(x)`` itself.
    lexical_weights : array, shape (n_features,), optional
        Positive per-feature weights of the identity part: ``l(x)`` is ``n(x)`` raised to gamma,
        times ``lexical_weights[j]`` in feature j, then L2-normalised (e.g. an idf power, so
        rare terms weigh more than TF-IDF alone makes them).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> m = EmbeddingSimilarity(np.array([[1.0], [1.0], [0.0]]), identity_weight=0.5)
    >>> X = sp.csr_matrix(np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 2.0]]))
    >>> m.score_matrix(X, X).round(2).tolist()
    [[1.5, 1.0], [1.0, 3.5]]
    >>> m.lexical_rows(X).toarray().round(2).tolist()  # gamma = 1: the rows as given
    [[1.0, 0.0, 0.0], [0.0, 1.0, 2.0]]
    """

    model_kind = EMBEDDING_MODEL_KIND

    def __init__(self, P, bias=None, activation: str = "linear", normalize: bool = False,
                 normalize_embedding: bool = False, identity_weight: float = 0.0, metadata: dict | None = None,
                 featurizer: TextFeaturizer | None = None, lexical_power: float = 1.0, lexical_weights=None):
        if sp.issparse(P):
            raise InvalidInputError("P must be a dense (n_features, n_components) array, got a sparse matrix")
        try:
            P = np.array(P, dtype=np.float64, order="C")
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"P must hold real numbers ({bounded(exc, 120)})") from None
        if P.ndim != 2 or P.shape[0] < 1 or P.shape[1] < 1:
            raise InvalidInputError(f"P must be a non-empty (n_features, n_components) matrix, got shape {P.shape}")
        if not np.all(np.isfinite(P)):
            raise InvalidInputError("P contains NaN or infinite values")
        if bias is not None:
            bias = dense_array("bias", bias, (P.shape[1],))
        if activation not in ACTIVATIONS:
            raise InvalidInputError(f"activation must be one of {', '.join(ACTIVATIONS)}; got {bounded(repr(activation), 40)}")
        try:
            identity_weight = float(identity_weight)
        except (TypeError, ValueError):
            raise InvalidInputError(f"identity_weight must be a real number, got {bounded(repr(identity_weight), 40)}") from None
        if not np.isfinite(identity_weight):
            raise InvalidInputError(f"identity_weight must be finite, got {identity_weight}")
        try:
            lexical_power = float(lexical_power)
        except (TypeError, ValueError):
            raise InvalidInputError(f"lexical_power must be a real number, got {bounded(repr(lexical_power), 40)}") from None
        if not 0.0 < lexical_power <= 1.0:
            raise InvalidInputError(f"lexical_power must be in (0, 1], got {lexical_power}")
        if lexical_weights is not None:
            lexical_weights = dense_array("lexical_weights", lexical_weights, (P.shape[0],))
            if not np.all(lexical_weights > 0):
                raise InvalidInputError("lexical_weights must be finite and positive")
        self.P = P
        self.bias = bias
        self.lexical_weights = lexical_weights
        self.activation = activation
        self.normalize = bool(normalize)
        self.normalize_embedding = bool(normalize_embedding)
        self.identity_weight = identity_weight
        self.lexical_power = lexical_power
        self._keep(metadata, featurizer)

    # -- text -----------------------------------------------------------------------------

    # -- structure ------------------------------------------------------------------------
    @property
    def n_features(self) -> int:
        return self.P.shape[0]

    @property
    def n_components(self) -> int:
        return self.P.shape[1]

    @property
    def nbytes(self) -> int:
        """Bytes of the model's arrays (P, bias, lexical weights; the text featuriser not counted)."""
        return int(sum(a.nbytes for a in self._arrays().values()))

    # -- scoring --------------------------------------------------------------------------
    def _check(self, X, name) -> sp.csr_matrix:
        X = check_csr(X, name=name, n_features=self.n_features)
        return _row_normalize(X) if self.normalize else X

    def _embed_checked(self, X: sp.csr_matrix, block_size: int = _BLOCK) -> np.ndarray:
        out = np.empty((X.shape[0], self.n_components))
        for lo in range(0, X.shape[0], block_size):
            Z = np.asarray(X[lo:lo + block_size] @ self.P)
            if self.bias is not None:
                Z += self.bias
            if self.activation == "softmax":
                Z -= Z.max(axis=1, keepdims=True)
                np.exp(Z, out=Z)
                Z /= Z.sum(axis=1, keepdims=True)
            if self.normalize_embedding:
                norms = np.sqrt(np.einsum("ij,ij->i", Z, Z))
                Z /= np.where(norms > 0, norms, 1.0)[:, None]
            out[lo:lo + Z.shape[0]] = Z
        return out

    def lexical_rows(self, X: sp.csr_matrix) -> sp.csr_matrix:
        """The rows ``l(x)`` the identity part compares, from rows already in the model's form
        ``n(x)`` (checked, normalised when ``normalize``): ``X`` itself when ``lexical_power`` is 1
        and there are no ``lexical_weights``."""
        if self.lexical_power == 1.0 and self.lexical_weights is None:
            return X
        return lexical_rows(X, self.lexical_power, self.lexical_weights)

    def rows_from_lexical(self, L: sp.csr_matrix) -> sp.csr_matrix:
        """The rows ``n(x)`` back from their lexical rows ``l(x)`` (up to rounding; exact inverse of
        :meth:`lexical_rows` on normalising models, whose rows ``n(x)`` have unit norm)."""
        if self.lexical_power == 1.0 and self.lexical_weights is None:
            return L
        inverse = None if self.lexical_weights is None else 1.0 / self.lexical_weights
        return lexical_rows(lexical_rows(L, 1.0, inverse), 1.0 / self.lexical_power)

    def embed(self, X, block_size: int = _BLOCK) -> np.ndarray:
        """The embeddings e(x) of the rows of ``X``: a dense ``(n_rows, n_components)`` array.

        Rows are embedded ``block_size`` at a time (sparse rows times the dense ``P``).
        """
        return self._embed_checked(self._check(X, "X"), block_size)

    def _pair_scores(self, A: sp.csr_matrix, B: sp.csr_matrix) -> np.ndarray:
        out = np.einsum("ij,ij->i", self._embed_checked(A), self._embed_checked(B))
        if self.identity_weight != 0.0:
            lexical = self.lexical_rows(A).multiply(self.lexical_rows(B))
            out += self.identity_weight * np.asarray(lexical.sum(axis=1)).ravel()
        return out

    def score_matrix(self, Q, X, block_size: int = 2048) -> np.ndarray:
        """Dense (n_queries, n_corpus) scores S(Q[i], X[j]), computed in query blocks."""
        Q = self._check(Q, "queries")
        X = self._check(X, "corpus")
        score_fn = self._scorer_checked(X)
        out = np.empty((Q.shape[0], X.shape[0]))
        for lo in range(0, Q.shape[0], block_size):
            out[lo:lo + block_size] = score_fn(None, Q[lo:lo + block_size])
        return out

    def _scorer_checked(self, X: sp.csr_matrix):
        EX = self._embed_checked(X)
        L = self.lexical_rows(X) if self.identity_weight != 0.0 else None
        XT = L.T.tocsc() if L is not None else None

        def score_fn(rows, Qrows=None):
            if Qrows is None:
                EQ = EX[rows]
                Qlex = L[rows] if L is not None else None
            else:
                EQ = self._embed_checked(Qrows)
                Qlex = self.lexical_rows(Qrows) if L is not None else None
            scores = EQ @ EX.T
            if XT is not None:
                scores += self.identity_weight * (Qlex @ XT).toarray()
            return scores

        return score_fn

    def scorer(self, X):
        """``score_fn(rows)`` for :func:`sparsesim.evaluation.evaluate_retrieval` over corpus ``X``.

        The corpus is embedded once (a dense ``(n, n_components)`` array); each call scores the
        requested rows against every document.
        """
        score_fn = self._scorer_checked(self._check(X, "corpus"))
        return lambda rows: score_fn(rows)

    # -- persistence ----------------------------------------------------------------------
    def _arrays(self) -> dict:
        arrays = {"P": self.P}
        if self.bias is not None:
            arrays["bias"] = self.bias
        if self.lexical_weights is not None:
            arrays["lexical_weights"] = self.lexical_weights
        return arrays

    def save(self, path: str | os.PathLike) -> dict:
        """Write the model atomically as npz + JSON metadata (no pickle). Returns the metadata."""
        meta = dict(self.metadata)
        meta.update(n_features=self.n_features, n_components=self.n_components, activation=self.activation,
                    normalize=self.normalize, normalize_embedding=self.normalize_embedding,
                    identity_weight=self.identity_weight, has_bias=self.bias is not None, nbytes=self.nbytes,
                    lexical_power=self.lexical_power)
        return self._write(path, self._arrays(), meta)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "EmbeddingSimilarity":
        """Read a model written by :meth:`save`, verifying format, checksum, metadata schema and arrays.

        Nothing in the file is trusted: the metadata must match :data:`EMBEDDING_META_SCHEMA`; ``P``
        must be a finite float64 array of exactly ``(n_features, n_components)``, ``bias`` (present
        exactly when ``has_bias``) a finite float64 array of ``(n_components,)`` and
        ``lexical_weights`` (optional) a finite positive float64 array of ``(n_features,)``; nothing is coerced.

        Raises
        ------
        FileFormatError
            Missing, truncated, corrupt or inconsistent file.
        """
        arrays, meta = load_bundle(path, kind=EMBEDDING_MODEL_KIND)
        check_meta(meta, EMBEDDING_META_SCHEMA, str(path))
        cls._check_split_facts(meta, path)
        d, r = meta["n_features"], meta["n_components"]
        P = cls._stored_dense(arrays, "P", (d, r), path, "embedding")
        bias = arrays.pop("bias", None)
        if (bias is not None) != meta["has_bias"]:
            raise FileFormatError(f"{path}: has_bias is {meta['has_bias']} but the file "
                                  f"{'holds' if bias is not None else 'lacks'} a bias array")
        if bias is not None and (bias.dtype != np.float64 or bias.shape != (r,) or not np.all(np.isfinite(bias))):
            raise FileFormatError(f"{path}: bias must be a finite float64 array of shape ({r},), got a {bias.dtype} "
                                  f"array of shape {bounded(bias.shape, 60)}")
        weights = arrays.pop("lexical_weights", None)
        if weights is not None and (weights.dtype != np.float64 or weights.shape != (d,)
                                    or not np.all(np.isfinite(weights)) or not np.all(weights > 0)):
            raise FileFormatError(f"{path}: lexical_weights must be a finite positive float64 array of shape ({d},), "
                                  f"got a {weights.dtype} array of shape {bounded(weights.shape, 60)}")
        featurizer = cls._stored_featurizer(arrays, meta, path, d)
        try:
            return cls(P, bias=bias, lexical_weights=weights, activation=meta["activation"], normalize=meta["normalize"],
                       normalize_embedding=meta["normalize_embedding"], identity_weight=meta["identity_weight"],
                       metadata=meta, featurizer=featurizer, lexical_power=meta.get("lexical_power") or 1.0)
        except InvalidInputError as exc:
            raise FileFormatError(f"{path}: inconsistent embedding model ({bounded(exc, 200)})") from None

    def __repr__(self):
        return (f"EmbeddingSimilarity(d={self.n_features}, r={self.n_components}, activation={self.activation!r}, "
                f"identity_weight={self.identity_weight:g}, lexical_power={self.lexical_power:g}, algorithm={self.metadata.get('algorithm')!r})")
