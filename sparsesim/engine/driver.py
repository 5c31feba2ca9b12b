"""Running a compiled triplet kernel over a chunk: work arrays and the grow-and-retry loop.

A hash-table kernel never grows its table itself: before a triplet whose inserts could pass
the table's load limit it returns the triplet it could not start and how many inserts that
triplet may need. The caller makes room (a sweep, a rebuild, a larger table) and calls again
from that triplet. :func:`run_growing` is that loop, written once for every kernel;
:func:`triplet_scratch` allocates the work arrays every kernel needs, sized once per chunk from
the longest row of the data.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

YIELD = -1
"""What a kernel call returns as ``need`` when it stopped for its caller, not for room (a label
to ask, a step to run outside the kernel): :func:`run_growing` returns at once."""


def triplet_scratch(X, n_entry_buffers: int = 1) -> tuple[np.ndarray, ...]:
    """Work arrays of a triplet kernel over the rows of the CSR matrix ``X``.

    Parameters
    ----------
    X : scipy.sparse.csr_matrix
        The rows the triplets index.
    n_entry_buffers : int
        How many int64 arrays of one slot per touched entry to allocate.

    Returns
    -------
    tuple of ndarray
        ``(zi, zv, buf_1, ..., buf_n)``: ``zi`` (int64) and ``zv`` (float64) hold a difference
        z = x+ - x- (at most 2 r nonzeros, r the longest row); each ``buf`` holds one int64 per
        entry of an outer product x z^T (at most r (2 r + 1)).
    """
    row_nnz = np.diff(X.indptr)
    max_row = int(row_nnz.max()) if row_nnz.size else 0
    zi = np.empty(2 * max_row + 1, np.int64)
    zv = np.empty(2 * max_row + 1)
    entries = max(1, max_row * (2 * max_row + 1))
    return (zi, zv) + tuple(np.empty(entries, np.int64) for _ in range(n_entry_buffers))


def run_growing(kernel: Callable[[int], tuple[int, int]], start: int, stop: int,
                make_room: Callable[[int], None]) -> int:
    """Call ``kernel`` from ``start`` until it reaches ``stop``, making room whenever it asks.

    Parameters
    ----------
    kernel : callable
        ``kernel(pos) -> (next, need)`` processes triplets from ``pos``. ``next == stop``: done.
        Otherwise it stopped before triplet ``next``: for room when ``need >= 0`` (``need``
        inserts may follow), for the caller when ``need == YIELD``.
    start, stop : int
        The chunk of triplets.
    make_room : callable
        ``make_room(need)`` makes the storage ready for ``need`` (at least 1) more inserts.

    Returns
    -------
    int
        ``stop``, or the triplet at which the kernel yielded to the caller.
    """
    pos = start
    while pos < stop:
        pos, need = kernel(pos)
        if pos >= stop or need == YIELD:
            break
        make_room(max(int(need), 1))
    return pos
