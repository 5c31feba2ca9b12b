"""Open a saved similarity model of any kind: the file's declared kind picks the class.

:func:`load_similarity_model` is what commands that score with a model (``evaluate``, ``query
--model``) call, so they accept every single-task similarity model the toolkit writes:

=========================  ==================================================
file kind                  class
=========================  ==================================================
``bilinear-similarity``    :class:`sparsesim.models.BilinearSimilarity`
``embedding-similarity``   :class:`sparsesim.embedding.EmbeddingSimilarity`
``bm25-similarity``        :class:`sparsesim.lexical.BM25Similarity`
``compact-similarity``     :class:`sparsesim.compact.CompactSimilarity`
=========================  ==================================================
"""

from __future__ import annotations

import os

from .compact import COMPACT_MODEL_KIND, CompactSimilarity
from .embedding import EMBEDDING_MODEL_KIND, EmbeddingSimilarity
from .exceptions import FileFormatError
from .lexical import BM25_MODEL_KIND, BM25Similarity
from .models import LINEAR_MODEL_KIND, MODEL_KIND, MULTITASK_MODEL_KIND, BilinearSimilarity
from .persistence import bundle_kind
from .validation import bounded

__all__ = ["SIMILARITY_MODEL_CLASSES", "load_similarity_model", "model_nbytes"]

#: File kind -> the class that loads it (single-task similarity models).
SIMILARITY_MODEL_CLASSES = {MODEL_KIND: BilinearSimilarity, EMBEDDING_MODEL_KIND: EmbeddingSimilarity,
                            BM25_MODEL_KIND: BM25Similarity, COMPACT_MODEL_KIND: CompactSimilarity}


def load_similarity_model(path: str | os.PathLike):
    """The single-task similarity model saved at ``path``, whatever its kind.

    Returns
    -------
    BilinearSimilarity, EmbeddingSimilarity, BM25Similarity or CompactSimilarity

    Raises
    ------
    FileFormatError
        Missing or corrupt file, or a file of another kind (a multi-task model, an index).
    """
    kind = bundle_kind(path)
    cls = SIMILARITY_MODEL_CLASSES.get(kind)
    if cls is None:
        hint = " (multi-task models are used by `sparsesim experiment`)" if kind in (
            MULTITASK_MODEL_KIND, LINEAR_MODEL_KIND) else ""
        raise FileFormatError(f"{path}: holds a {bounded(repr(kind), 60)}, expected one of "
                              f"{', '.join(map(repr, SIMILARITY_MODEL_CLASSES))}{hint}")
    return cls.load(path)


def model_nbytes(model) -> int:
    """Bytes of a similarity model's arrays (a bilinear model: W's CSR arrays; the text featuriser not counted)."""
    return int(model.nbytes)
