"""Open a saved similarity model of any kind: the file's declared kind picks the class.

:func:`load_similarity_model` is what commands that score with a model (``evaluate``, ``query
--model``) call, so they accept every single-task similarity model the toolkit writes:

=========================  ==================================================
file kind                  class
=========================  ==================================================
``bilinear-similarity``    :class:`sparsesim.models.BilinearSimilarity`
``embedding-similarity``   :class:`sparsesim.embedding.EmbeddingSimilarity`
=========================  ==================================================
"""

from __future__ import annotations

import os

from .embedding import EMBEDDING_MODEL_KIND, EmbeddingSimilarity
from .exceptions import FileFormatError
from .models import LINEAR_MODEL_KIND, MODEL_KIND, MULTITASK_MODEL_KIND, BilinearSimilarity
from .persistence import bundle_kind
from .validation import bounded

__all__ = ["SIMILARITY_MODEL_CLASSES", "load_similarity_model"]

#: File kind -> the class that loads it (single-task similarity models).
SIMILARITY_MODEL_CLASSES = {MODEL_KIND: BilinearSimilarity, EMBEDDING_MODEL_KIND: EmbeddingSimilarity}


def load_similarity_model(path: str | os.PathLike):
    """The single-task similarity model saved at ``path``, whatever its kind.

    Returns
    -------
    BilinearSimilarity or EmbeddingSimilarity

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
