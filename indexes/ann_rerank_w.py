"""The ann index's copy of the model's W, stored at the width its values need.

An ann index stores the model it serves beside its own arrays (the re-ranking scatters rows of
W). The model's CSR file takes 12 bytes per entry (int32 column, float64 value). Two facts make
most of that width redundant, and :class:`NarrowW` drops it without changing one value:

* **columns** fit 16 bits when the model has at most 65,536 features (news20: 62,061; RCV1:
  47,236): ``uint16``, else ``int32``;
* **values** of a model trained with compact storage (the default of the bilinear learners:
  float32 records, float64 arithmetic) are float32 numbers, except the few that the learner keeps
  in float64 (the diagonal of OASIS / SORS models): the main array holds every entry as float32
  and the others (``rest``) hold their exact float64 value (``rest_pos``: position in the main
  arrays, grouped by row by ``rest_ptr``; the main array holds 0 there).

So W takes 6 bytes per entry plus 16 per float64 entry (news20, OASIS 2*10^4: 25.4 M entries of
which 6,520 float64 ones, 305 -> 153 MB). :meth:`NarrowW.split` returns ``None`` when a model's
values are mostly not float32 numbers (a model trained with ``compact=False``): the index then
stores W as the model's own CSR.

The re-ranking kernel scatters a row of the main arrays (adding ``q_i * 0`` at a ``rest``
position), then the row's ``rest`` entries: every accumulator receives one nonzero product per
row, in the same order as a scatter of W itself, so scores are bit-identical to scoring with the
model's W (:func:`sparsesim.indexes.numba_kernels.rerank`). :meth:`NarrowW.widen` rebuilds the
model's W exactly (same entries, same order, float64, ``int32`` columns): what
:attr:`AnnIndex.model <sparsesim.indexes.ann.AnnIndex.model>` returns for a loaded index, and what
its model checksum is computed over.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sparsesim.exceptions import InvalidInputError

#: a model whose values are float32 numbers for fewer than this share of its entries keeps its CSR
MIN_FLOAT32_SHARE = 0.9
#: the stored arrays, beside ``model.npz`` (names under ``model.W.``, so a shard drops them with the model)
MAIN = ("model.W.indptr", "model.W.indices", "model.W.data")
REST = ("model.W.rest_ptr", "model.W.rest_pos", "model.W.rest_val")

_I64, _I32, _U16, _F32, _F64 = (np.dtype(t) for t in ("<i8", "<i4", "<u2", "<f4", "<f8"))


def column_dtype(n_features: int) -> np.dtype:
    """``uint16`` when every column number of a ``n_features``-wide W fits 16 bits, else ``int32``."""
    return _U16 if n_features <= 1 << 16 else _I32


class NarrowW:
    """W as (main CSR: int64 ``indptr``, ``uint16``/``int32`` columns, float32 values) plus its
    float64 entries (``rest_ptr`` d+1 int64, ``rest_pos`` int64 positions into the main arrays,
    ``rest_val`` float64), see the module docstring.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> W = sp.csr_matrix(np.array([[0.1, 0.5], [0.25, 0.0]]))
    >>> narrow = NarrowW.split(W, min_share=0.5)   # (default: 90% of the values float32 numbers)
    >>> narrow.indices.dtype, narrow.data.dtype, narrow.rest_pos.tolist()   # 0.1 is not a float32 number
    (dtype('uint16'), dtype('float32'), [0])
    >>> NarrowW.split(W) is None   # 1 of 3 entries float64: kept as the CSR
    True
    >>> back = narrow.widen()
    >>> bool((back != W).nnz == 0), back.data.dtype, back.indices.dtype
    (True, dtype('float64'), dtype('int32'))
    """

    def __init__(self, indptr, indices, data, rest_ptr, rest_pos, rest_val, n_features: int):
        self.indptr, self.indices, self.data = indptr, indices, data
        self.rest_ptr, self.rest_pos, self.rest_val = rest_ptr, rest_pos, rest_val
        self.n_features = int(n_features)

    @classmethod
    def split(cls, W, min_share: float = MIN_FLOAT32_SHARE):
        """The narrow form of CSR ``W`` (sorted indices, as a model keeps it), or ``None`` when
        fewer than ``min_share`` of its values are float32 numbers."""
        d = W.shape[0]
        data = np.asarray(W.data, dtype=np.float64)
        narrow = data.astype(np.float32)
        wide = np.flatnonzero(narrow.astype(np.float64) != data)
        if data.size and wide.size > (1.0 - min_share) * data.size:
            return None
        narrow[wide] = 0.0
        indptr = np.asarray(W.indptr, dtype=np.int64)
        rows = np.searchsorted(indptr, wide, side="right") - 1  # the row of each float64 entry
        rest_ptr = np.zeros(d + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=d), out=rest_ptr[1:])
        return cls(indptr.copy(), np.asarray(W.indices).astype(column_dtype(d)), narrow, rest_ptr,
                   wide.astype(np.int64), data[wide].copy(), d)

    @classmethod
    def of_model(cls, W):
        """W itself in the form the kernel takes (no float64 entries apart): for a model held in memory."""
        d = W.shape[0]
        empty = np.zeros(0, dtype=np.int64)
        return cls(W.indptr, W.indices, W.data, np.zeros(d + 1, dtype=np.int64), empty, np.zeros(0), d)

    @property
    def nnz(self) -> int:
        return int(self.indices.shape[0])

    def kernel_args(self) -> tuple:
        """(indptr, indices, data, rest_ptr, rest_pos, rest_val) as the re-ranking kernel takes them."""
        return self.indptr, self.indices, self.data, self.rest_ptr, self.rest_pos, self.rest_val

    def arrays(self) -> dict:
        """The stored arrays (:data:`MAIN` and :data:`REST` names)."""
        return dict(zip(MAIN + REST, (self.indptr, self.indices, self.data, self.rest_ptr, self.rest_pos,
                                      self.rest_val)))

    def widen(self) -> sp.csr_matrix:
        """The model's W: float64 values (the float64 entries put back), ``int32`` columns."""
        data = np.asarray(self.data, dtype=np.float64)
        data[np.asarray(self.rest_pos)] = self.rest_val
        d = self.n_features
        W = sp.csr_matrix((d, d))
        W.indptr = np.array(self.indptr, dtype=np.int64)
        W.indices = np.asarray(self.indices).astype(np.int32)
        W.data = data
        W.has_sorted_indices = True
        return W

    @staticmethod
    def stored_bytes(W) -> int:
        """Bytes the narrow form of ``W`` takes on disk (arrays only), or the CSR's when it stays wide."""
        d = W.shape[0]
        data = np.asarray(W.data)
        wide = int(np.count_nonzero(data.astype(np.float32).astype(np.float64) != data)) if data.size else 0
        if data.size and wide > (1.0 - MIN_FLOAT32_SHARE) * data.size:
            return 12 * data.size + 8 * (d + 1)
        return (column_dtype(d).itemsize + 4) * data.size + 16 * wide + 16 * (d + 1)


def from_arrays(arrays: dict, n_features: int, lazy=frozenset()) -> NarrowW:
    """The :class:`NarrowW` of a loaded index's arrays (removed from ``arrays``), checked.

    Always (whole): dtypes and shapes, ``indptr`` and ``rest_ptr`` monotone from 0 to their
    array's length, every ``rest_pos`` inside its own row of the main arrays and unique, the
    float64 values finite. The main ``indices`` (column numbers below ``n_features``) and ``data``
    (finite) are checked whole unless named in ``lazy`` (then block by block on first use, by the
    caller's guards).

    Raises
    ------
    InvalidInputError
        Any of these fails (the loader reports it as the file's format error).
    """
    d = int(n_features)
    parts = {name: arrays.pop(name, None) for name in MAIN + REST}
    missing = [name for name, value in parts.items() if value is None]
    if missing:
        raise InvalidInputError(f"incomplete model arrays: missing {', '.join(missing)}")
    expected = dict(zip(MAIN + REST, (_I64, column_dtype(d), _F32, _I64, _I64, _F64)))
    for name, arr in parts.items():
        if arr.ndim != 1 or arr.dtype != expected[name]:
            raise InvalidInputError(f"{name} holds {arr.shape} {arr.dtype}, expected 1-D {expected[name]}")
    indptr, indices, data, rest_ptr, rest_pos, rest_val = (parts[name] for name in MAIN + REST)
    for name, ptr, size in ((MAIN[0], indptr, indices.shape[0]), (REST[0], rest_ptr, rest_pos.shape[0])):
        if ptr.shape[0] != d + 1 or int(ptr[0]) != 0 or int(ptr[-1]) != size or np.any(np.diff(ptr) < 0):
            raise InvalidInputError(f"{name} must run monotonically from 0 to {size} over {d + 1} entries")
    if data.shape != indices.shape or rest_val.shape != rest_pos.shape:
        raise InvalidInputError("model.W arrays of different lengths")
    if rest_pos.size:
        rows = np.repeat(np.arange(d, dtype=np.int64), np.diff(rest_ptr))
        if np.any(rest_pos < indptr[rows]) or np.any(rest_pos >= indptr[rows + 1]):
            raise InvalidInputError("model.W.rest_pos names a position outside its row")
        if np.any(np.diff(rest_pos) <= 0):
            raise InvalidInputError("model.W.rest_pos is not strictly increasing")
        if not np.isfinite(rest_val).all():
            raise InvalidInputError("model.W.rest_val holds NaN or infinite values")
    if MAIN[1] not in lazy and indices.size and int(indices.max()) >= d:
        raise InvalidInputError(f"model.W.indices holds column numbers outside [0, {d})")
    if MAIN[2] not in lazy and not np.isfinite(data).all():
        raise InvalidInputError("model.W.data holds NaN or infinite values")
    return NarrowW(indptr, indices, data, rest_ptr, rest_pos, rest_val, d)


def is_narrow(arrays: dict) -> bool:
    """Whether an index's arrays hold W in the narrow form (its ``rest`` arrays are present)."""
    return any(name in arrays for name in REST)
