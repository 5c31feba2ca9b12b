"""The one top-k selection, used by the indexes, the index-free query path and the service."""

from __future__ import annotations

import numpy as np

__all__ = ["top_k_rows"]


def top_k_rows(scores: np.ndarray, k: int, offset: int = 0):
    """Per row of ``scores`` (queries x documents), the k best (document + offset, score), best first.

    Partial selection (``np.argpartition``) then a sort of the k selected by (-score, document).
    Ties are broken by the lower document number, also at the k-th place (documents tied with
    the k-th score are kept lowest-number first), so the answer does not depend on how the
    corpus was chunked or sharded.
    """
    n = scores.shape[1]
    if k < n:
        part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        kth = np.take_along_axis(scores, part, axis=1).min(axis=1)
        tied = np.count_nonzero(scores == kth[:, None], axis=1)
        kept = np.count_nonzero(np.take_along_axis(scores, part, axis=1) == kth[:, None], axis=1)
        for row in np.flatnonzero(tied > kept):  # rare: more documents tie at the k-th score than fit
            above = np.flatnonzero(scores[row] > kth[row])
            equal = np.flatnonzero(scores[row] == kth[row])[: k - above.size]
            part[row] = np.concatenate([above, equal])
    else:
        part = np.broadcast_to(np.arange(n), scores.shape)
    vals = np.take_along_axis(scores, part, axis=1)
    order = np.lexsort((part, -vals), axis=1)
    docs = np.take_along_axis(part, order, axis=1) + offset
    return docs, np.take_along_axis(vals, order, axis=1)
