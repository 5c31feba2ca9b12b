"""Top-k under a :class:`~sparsesim.compact.CompactSimilarity` (M = D + W + U V^T), exact or ann.

S(q, x) = n(q) (D + W) . n(x) + <n(q) U, n(x) V>: the index stores, per document, its corpus
embedding n(x) V (float32, as the embedding indexes do) and its normalised sparse row n(x); a
query is prepared as its query embedding n(q) U and its sparse row through the sparse part,
n(q) (D + W). Every document is scored with the embedding indexes' exact routine (dense inner
products of the embeddings plus the sparse dot products, in chunks, top-k merged), so the scores
are the model's up to the float32 rounding of the stored embeddings (relative ~1e-7).

:class:`CompactAnnIndex` takes candidates as the embedding ann index does — FAISS (inner product)
of the query embedding n(q) U over the stored n(x) V, and impact-ordered posting lists of the
sparse corpus read with n(q) (D + W) — and re-ranks them with the same exact score; its search
setting is calibrated for a target recall at build time.

Both are saved in the embedding indexes' directory format (:mod:`sparsesim.indexes.storage`,
kinds ``compact-exact`` and ``compact-ann``): the corpus embeddings (``embeddings.npy``, float32),
the normalised sparse corpus (``corpus.*.npy``), the ann kind's pruned posting lists and FAISS
index, and the model as its own checked file (``model.npz``, kind ``compact-similarity``: D, W,
U and V, no pickle), every file and 64 KiB block checksummed; :func:`~sparsesim.indexes.open_index`
refuses a truncated, altered or inconsistent file with one
:class:`~sparsesim.exceptions.FileFormatError`, and recomputes the stored embeddings from the
stored corpus and model once per index content.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sparsesim.compact import CompactSimilarity
from sparsesim.csr_rows import take_rows
from sparsesim.exceptions import FileFormatError, InvalidInputError

from .embedding_ann import EmbeddingAnnIndex
from .embedding_index import EmbeddedRows, EmbeddingExactIndex
from .inputs import prepare_rows

__all__ = ["CompactRows", "CompactExactIndex", "CompactAnnIndex"]


class CompactRows:
    """What the compact indexes change in the embedding indexes: the sparse part always scored
    (weight 1), queries prepared as (n(q) U, n(q) (D + W))."""

    model_class = CompactSimilarity
    supports_learning = True  # `serve --learn`: the feedback learner continues the model (ssi-dwuv's rule)

    @classmethod
    def _unit_test_model(cls, n_features: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        W = sp.random(n_features, n_features, density=0.1, format="csr", random_state=rng)
        W.setdiag(0.0)  # the diagonal is the model's own array
        W.eliminate_zeros()
        return CompactSimilarity(np.ones(n_features), W, rng.standard_normal((n_features, 4)),
                                 rng.standard_normal((n_features, 4)))

    @property
    def sparse_weight(self) -> float:
        return 1.0

    @property
    def sparse_candidates_on(self) -> bool:
        return True

    def _query_form(self, Xp) -> EmbeddedRows:
        """Normalised rows as queries: (n(q) U, n(q) (D + W))."""
        model = self._model
        E = Xp @ model.U if Xp.shape[0] else np.zeros((0, model.rank))
        Xq = (Xp @ model.sparse_matrix()).tocsr()
        Xq.sum_duplicates()
        Xq.sort_indices()  # the re-ranking matches candidates' entries against sorted query terms
        Xq.indices = Xq.indices.astype(np.int32, copy=False)
        Xq.indptr = Xq.indptr.astype(np.int64, copy=False)
        return EmbeddedRows(np.asarray(E, dtype=np.float64), Xq)

    def prepare_queries(self, Q, name: str = "queries") -> EmbeddedRows:
        return self._query_form(prepare_rows(self._model, Q, name))

    def stored_queries(self, rows) -> EmbeddedRows:
        rows = np.asarray(rows, dtype=np.int64)
        self._ensure_rows("corpus", self._X.indptr, rows)
        return self._query_form(take_rows(self._X, rows))


class CompactExactIndex(CompactRows, EmbeddingExactIndex):
    """Exact top-k under a compact similarity (see the module docstring).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from sparsesim.compact import CompactSimilarity
    >>> from sparsesim.indexes import build_index
    >>> rng = np.random.default_rng(0)
    >>> X = sp.random(50, 30, density=0.2, format="csr", random_state=0)
    >>> model = CompactSimilarity(np.ones(30), sp.csr_matrix((30, 30)), rng.standard_normal((30, 4)),
    ...                           rng.standard_normal((30, 4)))
    >>> index = build_index(model, X, kind="exact")
    >>> ids, scores = index.query(X[:2], top_k=3)
    >>> bool(np.allclose(scores[:, 0], model.score_matrix(X[:2], X).max(axis=1), rtol=1e-5))
    True
    """

    kind = "compact-exact"


class CompactAnnIndex(CompactRows, EmbeddingAnnIndex):
    """Candidates (FAISS over the embeddings, sparse postings) re-ranked with the exact compact score
    (see the module docstring; parameters as :class:`~sparsesim.indexes.EmbeddingAnnIndex`)."""

    kind = "compact-ann"

    def _check_rank(self):
        if self._model.rank == 0:  # FAISS cannot hold 0-wide vectors
            raise InvalidInputError("an ann index searches the model's low-rank embeddings, and this compact model "
                                    "has rank 0; build an exact index (kind='exact')")

    def _fit_more(self, Xp, calibration_queries=None):
        self._check_rank()
        super()._fit_more(Xp, calibration_queries)

    def _restore(self, arrays: dict, extra_files: dict, meta: dict, mmap: bool):
        try:
            self._check_rank()
        except InvalidInputError as exc:
            raise FileFormatError(f"a compact-ann index over a rank-0 model ({exc})") from None
        super()._restore(arrays, extra_files, meta, mmap)
