"""The one map from an index kind to its class (CLI ``--kind``, manifest ``kind``).

Adding a kind here registers it everywhere: ``build_index``, ``load_index`` / ``open_index``,
the sharded form, and the checks of :mod:`sparsesim.indexes.checks`.
"""

from __future__ import annotations

from .ann import AnnIndex
from .compact_index import CompactAnnIndex, CompactExactIndex
from .embedding_ann import EmbeddingAnnIndex
from .embedding_index import EmbeddingExactIndex
from .exact import ExactIndex

__all__ = ["INDEX_KINDS", "EMBEDDING_INDEX_KINDS", "COMPACT_INDEX_KINDS", "STORED_KINDS"]

# the one map from an index kind (CLI ``--kind``, manifest ``kind``) to its class
INDEX_KINDS = {"exact": ExactIndex, "ann": AnnIndex}
# the same kinds over an EmbeddingSimilarity (build_index picks them by the model's class)
EMBEDDING_INDEX_KINDS = {"exact": EmbeddingExactIndex, "ann": EmbeddingAnnIndex}
# over a CompactSimilarity (M = D + W + U V^T)
COMPACT_INDEX_KINDS = {"exact": CompactExactIndex, "ann": CompactAnnIndex}
# every kind an index directory may declare
STORED_KINDS = {**INDEX_KINDS, **{cls.kind: cls for cls in EMBEDDING_INDEX_KINDS.values()},
                **{cls.kind: cls for cls in COMPACT_INDEX_KINDS.values()}}
