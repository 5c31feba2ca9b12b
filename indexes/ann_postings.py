"""The ann index's candidate posting lists in compact form: one-byte scores, two- or three-byte ids.

The expanded posting lists (pruned, impact-ordered columns of Y = X M^T, see
:mod:`sparsesim.indexes.ann`) only choose which documents are re-ranked; every returned score is
computed from the corpus and the model. So they are stored at the precision candidate generation
needs:

* **scores**: one byte per entry, linear within each list between its smallest and its largest
  kept value (``floor_[i] + code * step_[i]``, both float32 per list; error at most half a step,
  ``step_[i] = (head - tail) / 255``; ``error_[i]`` bounds it, and grows when documents are
  added, see :class:`CompactPostings`). Codes are non-increasing along a list, so the lists stay
  impact-ordered and a query's weighted read shares (which use the head of each list) are
  computed from the decoded heads.
* **document ids**: the low 16 bits (uint16) and, for corpora of more than 65,536 documents, the
  next 8 bits (uint8): 2 or 3 bytes per entry instead of 4 (corpora above 2^24 documents keep
  int32 ids). The lists are impact-ordered, not sorted by document, and a query reads a prefix of
  each list whose length depends on the query; gap (delta) coding would need the documents of
  a list sorted, so fixed-width ids are what keeps both the prefix reads and random access.

Entry cost: 3 bytes (<= 65,536 documents), 4 bytes (<= 2^24), 5 bytes beyond, instead of 8
(int32 id + float32 score).

Hostile files: ``indptr`` is checked whole at load (monotone, from 0 to the number of entries);
decoded ids are range-checked whole at load (or block by block on first use for a memory-mapped
load, where the high byte is bounded per block and the compiled candidate kernel refuses any id
not below the number of documents before using it); ``floor_``/``step_`` are checked finite and
non-negative at load.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sparsesim.exceptions import FileFormatError, InvalidInputError

__all__ = ["CompactPostings", "ARRAY_NAMES"]

#: the arrays of a stored index's compact postings (``postings.<name>.npy``); ``ids_hi`` only
#: for corpora of more than 65,536 documents, ``ids32`` only beyond 2^24
ARRAY_NAMES = ("indptr", "ids", "ids_hi", "ids32", "codes", "floor", "step", "error")
LEVELS = 255
_SPLIT_LIMIT = 1 << 16
_WIDE_LIMIT = 1 << 24
_I64, _I32, _U16, _U8, _F32 = (np.dtype(t) for t in ("<i8", "<i4", "<u2", "u1", "<f4"))


def _id_layout(n_documents: int) -> str:
    if n_documents <= _SPLIT_LIMIT:
        return "u16"
    return "u24" if n_documents <= _WIDE_LIMIT else "i32"


class CompactPostings:
    """Impact-ordered posting lists (features x documents) with quantised scores and narrow ids.

    Attributes
    ----------
    indptr : ndarray of int64, shape (n_features + 1,)
    ids, ids_hi : ndarray of uint16 / uint8 (``ids_hi`` empty for <= 65,536 documents)
    ids32 : ndarray of int32 (only above 2^24 documents; then ``ids`` and ``ids_hi`` are empty)
    codes : ndarray of uint8
    floor_, step_ : ndarray of float32, shape (n_features,)
    error_ : ndarray of float32, shape (n_features,)
        A bound on |decoded - exact| score of each list's entries: half a step after a build;
        documents added later (:meth:`from_csr` with ``prior_error``) re-encode decoded scores, so
        the bounds of the old and the new encoding add up.
    shape : (n_features, n_documents)
    """

    def __init__(self, indptr, ids, ids_hi, ids32, codes, floor, step, error, shape):
        self.indptr, self.ids, self.ids_hi, self.ids32 = indptr, ids, ids_hi, ids32
        self.codes, self.floor_, self.step_, self.error_ = codes, floor, step, error
        self.shape = (int(shape[0]), int(shape[1]))

    # -- building -------------------------------------------------------------------------
    @classmethod
    def from_csr(cls, P: sp.csr_matrix, n_documents: int | None = None, prior_error=None) -> "CompactPostings":
        """Encode impact-ordered CSR postings (positive values, largest first in each list);
        ``prior_error``: per list, a bound on how far ``P``'s values already are from the exact ones."""
        d, n = P.shape[0], int(P.shape[1] if n_documents is None else n_documents)
        indptr = np.asarray(P.indptr, dtype=np.int64).copy()
        data = np.asarray(P.data, dtype=np.float32)
        lengths = np.diff(indptr)
        nonempty = lengths > 0
        head = np.zeros(d, np.float32)
        tail = np.zeros(d, np.float32)
        head[nonempty] = data[indptr[:-1][nonempty]]
        tail[nonempty] = data[indptr[1:][nonempty] - 1]
        step = ((head.astype(np.float64) - tail) / LEVELS).astype(np.float32)
        owner = np.repeat(np.arange(d), lengths)
        spread = step[owner].astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            raw = np.where(spread > 0, (data - tail[owner].astype(np.float64)) / spread, 0.0)
        codes = np.clip(np.rint(raw), 0, LEVELS).astype(np.uint8)
        docs = np.asarray(P.indices, dtype=np.int64)
        error = step.astype(np.float64) / 2 * (1 + 1e-6) + 1e-7 * head  # float32 arithmetic of the decode
        if prior_error is not None:
            error = error + np.asarray(prior_error, np.float64)
        return cls(indptr, *cls._split_ids(docs, n), codes, tail, step, error.astype(np.float32), (d, n))

    @staticmethod
    def _split_ids(docs: np.ndarray, n: int):
        layout = _id_layout(n)
        empty8, empty16, empty32 = np.zeros(0, np.uint8), np.zeros(0, np.uint16), np.zeros(0, np.int32)
        if layout == "i32":
            return empty16, empty8, docs.astype(np.int32)
        lo = (docs & 0xFFFF).astype(np.uint16)
        hi = (docs >> 16).astype(np.uint8) if layout == "u24" else empty8
        return lo, hi, empty32

    @classmethod
    def empty(cls, n_features: int, n_documents: int) -> "CompactPostings":
        """Postings with no entries (the dense stage alone)."""
        csr = sp.csr_matrix((n_features, n_documents), dtype=np.float32)
        return cls.from_csr(csr, n_documents)

    # -- reading --------------------------------------------------------------------------
    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in (self.indptr, self.ids, self.ids_hi, self.ids32, self.codes,
                                           self.floor_, self.step_, self.error_))

    def docs_at(self, pos: np.ndarray) -> np.ndarray:
        """Document numbers (int64) of entries ``pos``."""
        if self.ids32.size or not self.ids.size:
            return self.ids32[pos].astype(np.int64) if self.ids32.size else np.zeros(len(pos), np.int64)
        out = self.ids[pos].astype(np.int64)
        if self.ids_hi.size:
            out |= self.ids_hi[pos].astype(np.int64) << 16
        return out

    def values_at(self, pos: np.ndarray, lists: np.ndarray) -> np.ndarray:
        """Decoded scores (float64) of entries ``pos`` of lists ``lists``: the kernel's arithmetic,
        ``floor + code * step`` in float64."""
        return (self.floor_[lists].astype(np.float64)
                + self.codes[pos].astype(np.float64) * self.step_[lists].astype(np.float64))

    def heads(self, lists: np.ndarray) -> np.ndarray:
        """Decoded first (largest) score of each of ``lists`` (0 for an empty list)."""
        lists = np.asarray(lists, dtype=np.int64)
        starts = self.indptr[lists]
        nonempty = self.indptr[lists + 1] > starts
        out = np.zeros(lists.size)
        out[nonempty] = self.values_at(starts[nonempty], lists[nonempty])
        return out

    def rows(self, lists: np.ndarray):
        """(indptr, docs int64, values float64, error bound float64 per list) of ``lists``."""
        lists = np.asarray(lists, dtype=np.int64)
        starts = self.indptr[lists]
        lengths = self.indptr[lists + 1] - starts
        indptr = np.zeros(lists.size + 1, np.int64)
        np.cumsum(lengths, out=indptr[1:])
        offsets = np.repeat(starts - indptr[:-1], lengths)
        pos = offsets + np.arange(int(indptr[-1]), dtype=np.int64)
        owner = np.repeat(lists, lengths)
        return indptr, self.docs_at(pos), self.values_at(pos, owner), self.error_[lists].astype(np.float64)

    def to_csr(self) -> sp.csr_matrix:
        """The decoded lists as impact-ordered CSR (float32 scores, int32 documents)."""
        d, n = self.shape
        indptr, docs, vals, _ = self.rows(np.arange(d))
        out = sp.csr_matrix((d, n), dtype=np.float32)
        out.indptr, out.indices, out.data = indptr, docs.astype(np.int32), vals.astype(np.float32)
        return out

    def kernel_args(self):
        """(indptr, ids, ids_hi, ids32, codes, floor, step): the candidate kernel's arguments."""
        return self.indptr, self.ids, self.ids_hi, self.ids32, self.codes, self.floor_, self.step_

    # -- storage --------------------------------------------------------------------------
    def arrays(self, prefix: str = "postings") -> dict:
        """The arrays to store, by file name (``ids_hi`` / ``ids32`` only when used)."""
        out = {f"{prefix}.indptr": self.indptr, f"{prefix}.ids": self.ids, f"{prefix}.codes": self.codes,
               f"{prefix}.floor": self.floor_, f"{prefix}.step": self.step_, f"{prefix}.error": self.error_}
        if self.ids_hi.size or _id_layout(self.shape[1]) == "u24":
            out[f"{prefix}.ids_hi"] = self.ids_hi
        if self.ids32.size or _id_layout(self.shape[1]) == "i32":
            out[f"{prefix}.ids32"] = self.ids32
        return out

    @classmethod
    def from_arrays(cls, arrays: dict, shape, prefix: str = "postings", lazy=frozenset()) -> "CompactPostings":
        """Compact postings from stored arrays, after their structural checks (raises
        :class:`~sparsesim.exceptions.FileFormatError`). Arrays named in ``lazy`` have their
        values checked block by block on use; the others are checked whole here."""
        try:
            parts = check_arrays(arrays, shape, prefix, lazy)
        except InvalidInputError as exc:
            raise FileFormatError(str(exc)) from None
        return cls(*parts, shape)


def check_arrays(arrays: dict, shape, prefix: str = "postings", lazy=frozenset()):
    """The structural checks of stored compact postings (raises InvalidInputError); returns the
    arrays in :class:`CompactPostings` order."""
    d, n = int(shape[0]), int(shape[1])
    layout = _id_layout(n)
    want = {"indptr": _I64, "ids": _U16, "codes": _U8, "floor": _F32, "step": _F32, "error": _F32}
    if layout == "u24":
        want["ids_hi"] = _U8
    if layout == "i32":
        want = {"indptr": _I64, "ids32": _I32, "codes": _U8, "floor": _F32, "step": _F32, "error": _F32,
                "ids": _U16}
    for name in ARRAY_NAMES:
        key = f"{prefix}.{name}"
        if name not in want:
            if key in arrays:
                raise InvalidInputError(f"{key}.npy is stored although a corpus of {n} documents has no use for it")
            continue
        arr = arrays.get(key)
        if not isinstance(arr, np.ndarray) or arr.ndim != 1 or arr.dtype != want[name]:
            raise InvalidInputError(f"{key} holds {getattr(arr, 'shape', None)} {getattr(arr, 'dtype', None)}, "
                                    f"expected 1-D {want[name]}")
    indptr = arrays[f"{prefix}.indptr"]
    nnz = arrays[f"{prefix}.codes"].shape[0]
    if indptr.shape[0] != d + 1 or int(indptr[0]) != 0 or int(indptr[-1]) != nnz:
        raise InvalidInputError(f"{prefix}.indptr must hold {d + 1} offsets from 0 to {nnz}")
    if d and np.any(np.diff(indptr) < 0):
        raise InvalidInputError(f"{prefix}.indptr is not monotone (a list would have a negative length)")
    ids_name = "ids32" if layout == "i32" else "ids"
    for name in (ids_name, "ids_hi") if layout == "u24" else (ids_name,):
        if arrays[f"{prefix}.{name}"].shape[0] != nnz:
            raise InvalidInputError(f"{prefix}.{name} holds {arrays[f'{prefix}.{name}'].shape[0]} entries, "
                                    f"{prefix}.codes {nnz}")
    if layout == "i32" and arrays[f"{prefix}.ids"].shape[0] != 0:
        raise InvalidInputError(f"{prefix}.ids must be empty for a corpus of {n} documents")
    for name in ("floor", "step", "error"):
        arr = arrays[f"{prefix}.{name}"]
        if arr.shape[0] != d or not np.all(np.isfinite(arr)) or np.any(arr < 0):
            raise InvalidInputError(f"{prefix}.{name} must hold {d} finite non-negative values")
    empty8, empty16, empty32 = np.zeros(0, np.uint8), np.zeros(0, np.uint16), np.zeros(0, np.int32)
    ids = arrays[f"{prefix}.ids"]
    ids_hi = arrays.get(f"{prefix}.ids_hi", empty8)
    ids32 = arrays.get(f"{prefix}.ids32", empty32)
    if not {f"{prefix}.ids", f"{prefix}.ids_hi", f"{prefix}.ids32"} & set(lazy) and nnz:
        top = _max_id(ids, ids_hi, ids32, layout)
        low = int(ids32.min()) if layout == "i32" else 0
        if low < 0 or top >= n:
            raise InvalidInputError(f"{prefix} lists name documents outside [0, {n})")
    return indptr, (ids if layout != "i32" else empty16), ids_hi, ids32, arrays[f"{prefix}.codes"], \
        arrays[f"{prefix}.floor"], arrays[f"{prefix}.step"], arrays[f"{prefix}.error"]


def _max_id(ids, ids_hi, ids32, layout: str) -> int:
    """The largest decoded document number (one vectorised pass, in chunks)."""
    if layout == "i32":
        return int(ids32.max())
    if layout == "u16":
        return int(ids.max())
    top_hi = int(ids_hi.max())
    return (top_hi << 16) | int(ids[ids_hi == top_hi].max())


def block_checks(n_documents: int, prefix: str = "postings") -> dict:
    """Per-block checks for a memory-mapped load (see :func:`sparsesim.indexes.storage.lazy_checks`):
    ids below the number of documents where one array holds them whole, the high byte bounded
    otherwise (the candidate kernel refuses a combined id that is still out of range)."""
    from .blocks import index_check

    layout = _id_layout(n_documents)
    if layout == "u16":
        return {f"{prefix}.ids": index_check(max(1, n_documents)), f"{prefix}.codes": None}
    if layout == "u24":
        return {f"{prefix}.ids": None, f"{prefix}.ids_hi": index_check(((n_documents - 1) >> 16) + 1),
                f"{prefix}.codes": None}
    return {f"{prefix}.ids32": index_check(n_documents), f"{prefix}.codes": None}
