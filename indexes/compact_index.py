"""Exact top-k under a :class:`~sparsesim.compact.CompactSimilarity` (M = D + W + U V^T).

S(q, x) = n(q) (D + W) . n(x) + <n(q) U, n(x) V>: the index stores, per document, its corpus
embedding n(x) V (float32, as the embedding indexes do) and its normalised sparse row n(x); a
query is prepared as its query embedding n(q) U and its sparse row through the sparse part,
n(q) (D + W). Every document is scored with the embedding indexes' exact routine (dense inner
products of the embeddings plus the sparse dot products, in chunks, top-k merged), so the scores
are the model's up to the float32 rounding of the stored embeddings (relative ~1e-7).

The index lives in memory (:func:`sparsesim.indexes.build_index`); it is not written to disk
and has no ann kind: saving it raises :class:`~sparsesim.exceptions.InvalidInputError`.
"""

from __future__ import annotations

import numpy as np

from sparsesim.compact import CompactSimilarity
from sparsesim.csr_rows import take_rows
from sparsesim.exceptions import InvalidInputError

from .embedding_index import EmbeddedRows, EmbeddingExactIndex
from .inputs import prepare_rows

__all__ = ["CompactExactIndex"]


class CompactExactIndex(EmbeddingExactIndex):
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
    model_class = CompactSimilarity

    @property
    def sparse_weight(self) -> float:
        return 1.0

    def _query_form(self, Xp) -> EmbeddedRows:
        """Normalised rows as queries: (n(q) U, n(q) (D + W))."""
        model = self._model
        E = Xp @ model.U if Xp.shape[0] else np.zeros((0, model.rank))
        return EmbeddedRows(np.asarray(E, dtype=np.float64), (Xp @ model.sparse_matrix()).tocsr())

    def prepare_queries(self, Q, name: str = "queries") -> EmbeddedRows:
        return self._query_form(prepare_rows(self._model, Q, name))

    def stored_queries(self, rows) -> EmbeddedRows:
        rows = np.asarray(rows, dtype=np.int64)
        self._ensure_rows("corpus", self._X.indptr, rows)
        return self._query_form(take_rows(self._X, rows))

    def save(self, directory, overwrite: bool = False):
        raise InvalidInputError("an index over a compact (ssi-dwuv) model lives in memory and is not saved; "
                                "score with the model file instead (`sparsesim query --model`, `evaluate`)")
