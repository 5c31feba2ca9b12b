"""What an :class:`~sparsesim.indexes.ann.AnnIndex` stores in its index directory (arrays, the
FAISS file, the manifest's ``state``) and its restoration from a verified directory.

The directory format itself (manifest, checksums, atomic replacement) is
:mod:`sparsesim.indexes.storage`'s.
"""

from __future__ import annotations

import numpy as np

from sparsesim.exceptions import FileFormatError, InvalidInputError
from sparsesim.validation import bounded

from .ann_build import faiss_module, heavy_positions
from .ann_postings import CompactPostings
from .ann_rerank_w import from_arrays as narrow_w_from_arrays, is_narrow
from .calibration import check_record
from .recall_check import check_setting
from .storage_format import COMPACT_FORMAT


def stored_arrays(index) -> dict:
    """The arrays of the index kind (beside the corpus and ids every index stores)."""
    out = dict(index.postings_.arrays("postings"))
    out.update({"heavy.rows": np.asarray(index.heavy_rows_, np.int64), "heavy.Z": index.Z_})
    if index._dense_on:
        out.update({"projection.V": index.V_, "projection.B": index.B_,
                    "projection.singular_values": np.asarray(index.singular_values_, np.float64)})
    return out


def stored_files(index) -> dict:
    """The FAISS index file of the dense stage (name -> writer(path)), if there is one."""
    if not index._dense_on:
        return {}
    faiss = faiss_module()
    return {"faiss.index": lambda path: faiss.write_index(index.faiss_, str(path))}


def manifest_state(index) -> dict:
    """The manifest's ``state`` of the index."""
    return {"nlist_": index.nlist_, "build_seconds": index.build_seconds_, "n_heavy_rows": int(index.heavy_rows_.size),
            "n_fit_documents": int(index.n_fit_documents_), "postings": "expanded",
            "postings_length": int(index.postings_length_), "postings_model": index.postings_model_,
            "read_allocation": index.allocation_in_use(),
            "rerank_memory_": int(index.rerank_memory_),
            "calibration": index.calibration_}


def restore(index, arrays: dict, extra_files: dict, meta: dict, mmap: bool):
    """Set the fitted attributes of ``index`` from a verified directory's arrays, files and manifest."""
    state = meta["state"]
    if state.get("postings") != "expanded":
        raise FileFormatError("this ann index was written by an earlier sparsesim (raw-corpus postings); "
                              "rebuild it with `sparsesim index build`")
    if meta.get("format_version", 0) < COMPACT_FORMAT or "postings.codes" not in arrays:
        raise FileFormatError("this ann index was written by an earlier sparsesim (float32 posting lists, index "
                              f"format {meta.get('format_version')}); rebuild it with `sparsesim index build`")
    index._postings = CompactPostings.from_arrays(arrays, (index.n_features, index._X.shape[0]),
                                                  lazy=set(index._guards))
    if is_narrow(arrays):  # the stored W, narrow: queries read it as it is, ``model`` rebuilds W from it
        try:
            index._narrow_w = narrow_w_from_arrays(arrays, index.n_features, lazy=set(index._guards))
        except InvalidInputError as exc:
            raise FileFormatError(f"the stored model: {bounded(exc, 300)}") from None
        index._w_pending = True
    if state.get("postings_length") is None:
        raise FileFormatError("the index manifest's state lacks postings_length; rebuild the index")
    index.postings_length_ = int(state["postings_length"])
    # files written before reads were shared out by weight searched every list uniformly
    index.read_allocation_ = state.get("read_allocation") or "uniform"
    index.rerank_memory_ = state.get("rerank_memory_")
    index.postings_model_ = state.get("postings_model")
    cal = state.get("calibration")
    index.calibration_ = None if cal is None else check_record(cal, "index manifest (state.calibration)")
    index.heavy_rows_ = arrays["heavy.rows"]
    index._Z = arrays["heavy.Z"]
    n, h = index._X.shape[0], index.heavy_rows_.shape[0]
    if (index.heavy_rows_.ndim != 1 or index._Z.shape != (n, h) or np.unique(index.heavy_rows_).size != h
            or (h and (index.heavy_rows_.min() < 0 or index.heavy_rows_.max() >= index.n_features))):
        raise FileFormatError(f"heavy-row arrays have shapes {index.heavy_rows_.shape}, {index._Z.shape}; "
                              f"expected (h,) and ({n}, h)")
    index._heavy_pos = heavy_positions(index, index.heavy_rows_)
    index.nlist_ = state.get("nlist_")
    # optional state keys may be absent or null (the schema allows both): null reads as absent
    index.n_fit_documents_ = int(n if state.get("n_fit_documents") is None else state["n_fit_documents"])
    index.build_seconds_ = float(state.get("build_seconds") or 0.0)
    if index._dense_on:
        index.V_ = arrays["projection.V"]
        index.B_ = arrays["projection.B"]
        index.singular_values_ = arrays["projection.singular_values"]
        if index.V_.shape != (index.n_features, index.dim) or index.B_.shape != (index.n_features, index.dim):
            raise FileFormatError(f"projection arrays have shape {index.V_.shape}, expected "
                                  f"({index.n_features}, {index.dim})")
        faiss = faiss_module()
        path = str(extra_files["faiss.index"])
        try:
            faiss_index = faiss.read_index(path, faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY) if mmap \
                else faiss.read_index(path)
        except RuntimeError as exc:
            raise FileFormatError(f"{path}: not a readable FAISS index ({str(exc).splitlines()[0]})") from None
        if faiss_index.ntotal != n or faiss_index.d != index.dim:
            raise FileFormatError(f"{path}: FAISS index holds {faiss_index.ntotal} vectors of dimension "
                                  f"{faiss_index.d}, expected {n} of dimension {index.dim}")
        index.faiss_ = faiss_index
    if index.calibration_ is not None:
        check_setting(index, index.calibration_)
