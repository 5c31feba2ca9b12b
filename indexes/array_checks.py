"""The structural checks of a loaded index's arrays, run before any compiled kernel reads them:
one vectorised pass over the CSR arrays, ids, postings, re-ranking table and projection of an
index (:func:`check_index_arrays`), the FAISS structures' ids and links (:func:`check_faiss`),
the structure of a CSR matrix whose values a memory-mapped load checks block by block
(:func:`check_csr_structure`). Reading and writing the files is :mod:`sparsesim.indexes.storage`'s.
"""

from __future__ import annotations

import numpy as np

from sparsesim.exceptions import InvalidInputError
from sparsesim.validation import check_csr_arrays, check_finite_array

from .ann_postings import check_arrays as check_compact_postings
from .storage_format import COMPACT_FORMAT

# the dtypes an index's arrays are written with (little-endian; nothing read is coerced)
I64, I32, F64, F32 = (np.dtype(t) for t in ("<i8", "<i4", "<f8", "<f4"))


def check_csr_structure(indptr, indices, data, shape, name: str, data_dtype) -> None:
    """The checks of a CSR matrix that read only ``indptr``: dtypes (int64 / int32 / ``data_dtype``),
    shapes, ``indptr`` from 0 to nnz and monotone. The values of ``indices`` and ``data`` are left
    to a :class:`~sparsesim.indexes.blocks.BlockGuard`."""
    for label, arr, dtype in (("indptr", indptr, I64), ("indices", indices, I32), ("data", data, data_dtype)):
        if not isinstance(arr, np.ndarray) or arr.ndim != 1 or arr.dtype != np.dtype(dtype):
            raise InvalidInputError(f"{name}.{label} holds {getattr(arr, 'shape', None)} "
                                    f"{getattr(arr, 'dtype', None)}, expected 1-D {np.dtype(dtype)}")
    if indptr.shape[0] != shape[0] + 1 or indices.shape != data.shape:
        raise InvalidInputError(f"{name} arrays do not form a {shape} matrix")
    if int(indptr[0]) != 0 or int(indptr[-1]) != indices.shape[0]:
        raise InvalidInputError(f"{name}.indptr must start at 0 and end at nnz={indices.shape[0]}")
    if shape[0] and np.any(np.diff(indptr) < 0):
        raise InvalidInputError(f"{name}.indptr is not monotone (a row would have a negative length)")




def has_duplicates(values: np.ndarray) -> bool:
    """Whether a 1-D array holds some value twice. A sort and one comparison: at every load, and
    ``np.unique``'s hash table takes ~30 ms for 10^5 int64 ids where the sort takes 0.4 ms."""
    if values.shape[0] < 2:
        return False
    ordered = np.sort(values)
    return bool(np.any(ordered[1:] == ordered[:-1]))


def check_index_arrays(kind: str, arrays: dict, n: int, d: int, manifest: dict, lazy=frozenset()) -> None:
    """One vectorised structural pass over the arrays of an index (raises InvalidInputError).

    Corpus: a canonical (n, d) CSR matrix (int64 indptr, int32 indices in [0, d), sorted, no
    duplicates, finite float64 values). Ids: n unique int64 or unicode values (of the manifest's
    ``id_dtype``). Posting lists: a (d, n) CSR matrix with document numbers in [0, n) and finite
    values. ANN: heavy rows unique in [0, d), Z of shape (n, h) finite float64, projections of
    shape (d, dim) finite float32.
    """
    for name in ("ids", "corpus.indptr", "corpus.indices", "corpus.data"):
        if name not in arrays:
            raise InvalidInputError(f"missing {name}.npy")
    if "corpus.data" in lazy:
        check_csr_structure(arrays["corpus.indptr"], arrays["corpus.indices"], arrays["corpus.data"], (n, d),
                            "corpus", F64)
    else:
        check_csr_arrays(arrays["corpus.indptr"], arrays["corpus.indices"], arrays["corpus.data"], (n, d),
                         name="corpus", index_dtypes=None, data_dtypes=(F64,), sorted_indices=True)
    if arrays["corpus.indptr"].dtype != I64 or arrays["corpus.indices"].dtype != I32:
        raise InvalidInputError(f"corpus index arrays have dtypes {arrays['corpus.indptr'].dtype}/"
                                f"{arrays['corpus.indices'].dtype}; expected int64/int32")
    ids = arrays["ids"]
    if ids.ndim != 1 or ids.shape[0] != n or not (ids.dtype == I64 or ids.dtype.kind == "U"):
        raise InvalidInputError(f"ids.npy holds {ids.shape} {ids.dtype}, expected ({n},) int64 or str")
    id_dtype = manifest.get("id_dtype")
    if id_dtype is not None and (id_dtype == "int") != (ids.dtype.kind == "i"):
        raise InvalidInputError(f"ids.npy holds {ids.dtype} but the manifest says {id_dtype!r} ids")
    if n and has_duplicates(ids):
        raise InvalidInputError("ids.npy holds duplicate ids")
    strategy = manifest["state"].get("strategy_")
    if kind == "ann":
        if manifest.get("format_version", COMPACT_FORMAT) < COMPACT_FORMAT:
            raise InvalidInputError(f"this ann index was written by an earlier sparsesim (float32 posting lists, "
                                    f"index format {manifest.get('format_version')}); rebuild it with "
                                    "`sparsesim index build`")
        check_compact_postings(arrays, (d, n), "postings", lazy)
    elif strategy == "corpus":
        for part in ("indptr", "indices", "data"):
            if f"postings.{part}" not in arrays:
                raise InvalidInputError(f"missing postings.{part}.npy")
        if "postings.data" in lazy:
            check_csr_structure(arrays["postings.indptr"], arrays["postings.indices"], arrays["postings.data"],
                                (d, n), "postings", F64 if kind == "exact" else F32)
        else:
            check_csr_arrays(arrays["postings.indptr"], arrays["postings.indices"], arrays["postings.data"], (d, n),
                             name="postings", data_dtypes=(F64,) if kind == "exact" else (F32,),
                             sorted_indices=(kind == "exact"))
        if arrays["postings.indptr"].dtype != I64 or arrays["postings.indices"].dtype != I32:
            raise InvalidInputError("postings index arrays must be int64/int32")
    if kind == "exact" and strategy is None:
        raise InvalidInputError("state lacks strategy_")
    if kind == "ann":
        for name in ("heavy.rows", "heavy.Z"):
            if name not in arrays:
                raise InvalidInputError(f"missing {name}.npy")
        rows = arrays["heavy.rows"]
        if rows.dtype != I64 or rows.ndim != 1:
            raise InvalidInputError(f"heavy.rows holds {rows.shape} {rows.dtype}, expected 1-D int64")
        h = rows.shape[0]
        if h and (int(rows.min()) < 0 or int(rows.max()) >= d or np.unique(rows).shape[0] != h):
            raise InvalidInputError(f"heavy.rows must be unique feature numbers in [0, {d})")
        if "heavy.Z" in lazy:
            Z = arrays["heavy.Z"]
            if Z.dtype != F64 or Z.shape != (n, h):
                raise InvalidInputError(f"heavy.Z holds {Z.shape} {Z.dtype}, expected ({n}, {h}) float64")
        else:
            check_finite_array(arrays["heavy.Z"], "heavy.Z", dtypes=(F64,), shape=(n, h))
        dim = manifest["params"].get("dim")
        if isinstance(dim, int) and not isinstance(dim, bool) and dim > 0:
            for name in ("projection.V", "projection.B"):
                if name not in arrays:
                    raise InvalidInputError(f"missing {name}.npy")
                check_finite_array(arrays[name], name, dtypes=(F32,), shape=(d, dim))
            sv = arrays.get("projection.singular_values")
            if sv is None or sv.ndim != 1:
                raise InvalidInputError("projection.singular_values must be a 1-D array")
            check_finite_array(sv, "projection.singular_values", dtypes=(F64,))
        n_fit = manifest["state"].get("n_fit_documents")
        if n_fit is not None and n_fit > n:
            raise InvalidInputError(f"state says the index was learned from {n_fit} documents but holds {n}")


def check_embedding_arrays(arrays: dict, n: int, d: int, r: int, manifest: dict, lazy=frozenset(),
                           sparse: bool = False) -> None:
    """The structural pass over the arrays of an index over an embedding model (raises
    InvalidInputError): ids as in :func:`check_index_arrays`; ``embeddings`` a finite (n, r)
    float32 array; with ``sparse`` (the model's identity part) the normalised corpus as a
    canonical (n, d) CSR matrix, and for the ann kind its impact-ordered postings (d, n); without,
    neither is stored."""
    ids = arrays.get("ids")
    if ids is None or ids.ndim != 1 or ids.shape[0] != n or not (ids.dtype == I64 or ids.dtype.kind == "U"):
        raise InvalidInputError(f"ids.npy must hold ({n},) int64 or str ids")
    id_dtype = manifest.get("id_dtype")
    if id_dtype is not None and (id_dtype == "int") != (ids.dtype.kind == "i"):
        raise InvalidInputError(f"ids.npy holds {ids.dtype} but the manifest says {id_dtype!r} ids")
    if n and has_duplicates(ids):
        raise InvalidInputError("ids.npy holds duplicate ids")
    if "embeddings" not in arrays:
        raise InvalidInputError("missing embeddings.npy")
    check_finite_array(arrays["embeddings"], "embeddings", dtypes=(F32,), shape=(n, r))
    wanted = {"corpus": (n, d, F64, True), "postings": (d, n, F32, False)}
    if not sparse or manifest["kind"] not in ("embedding-ann", "compact-ann"):
        wanted.pop("postings")
    if not sparse:
        wanted.pop("corpus")
    for prefix in ("corpus", "postings"):
        present = [part for part in ("indptr", "indices", "data") if f"{prefix}.{part}" in arrays]
        if prefix not in wanted:
            if present:
                raise InvalidInputError(f"{prefix}.*.npy stored although this index has no use for them")
            continue
        if len(present) != 3:
            raise InvalidInputError(f"missing {prefix}.indptr/indices/data.npy")
        rows, cols, dtype, sorted_indices = wanted[prefix]
        parts = [arrays[f"{prefix}.{part}"] for part in ("indptr", "indices", "data")]
        if f"{prefix}.data" in lazy:
            check_csr_structure(*parts, (rows, cols), prefix, dtype)
        else:
            check_csr_arrays(*parts, (rows, cols), name=prefix, data_dtypes=(dtype,), sorted_indices=sorted_indices)
            if parts[0].dtype != I64 or parts[1].dtype != I32:
                raise InvalidInputError(f"{prefix} index arrays must be int64/int32")
    n_fit = manifest["state"].get("n_fit_documents")
    if n_fit is not None and n_fit > n:
        raise InvalidInputError(f"state says the index was learned from {n_fit} documents but holds {n}")

def check_faiss(index, n: int, dim: int) -> None:
    """Refuse a FAISS index whose structure could make a search read or return out of range.

    Checks the type (IVF-flat or HNSW-flat, inner product), dimension and size; for IVF every
    stored id is unique and in [0, n), list sizes add up and the vectors are finite; for HNSW
    every link is in [-1, n), the per-node offsets are monotone and the vectors are finite.
    """
    import faiss

    if index.d != dim or index.ntotal != n:
        raise InvalidInputError(f"FAISS index holds {index.ntotal} vectors of dimension {index.d}, "
                                f"expected {n} of dimension {dim}")
    if index.metric_type != faiss.METRIC_INNER_PRODUCT:
        raise InvalidInputError("FAISS index does not use the inner-product metric")
    if isinstance(index, faiss.IndexIVF):
        ivf = faiss.downcast_index(index)
        if not isinstance(ivf, faiss.IndexIVFFlat) or ivf.code_size != 4 * dim:
            raise InvalidInputError(f"unexpected FAISS index type {type(ivf).__name__}")
        invlists = ivf.invlists
        if ivf.quantizer.ntotal != ivf.nlist or ivf.quantizer.d != dim:
            raise InvalidInputError("FAISS quantizer does not match the number of lists")
        ids, total = [], 0
        for lst in range(ivf.nlist):
            size = invlists.list_size(lst)
            if size == 0:
                continue
            total += size
            ids.append(faiss.rev_swig_ptr(invlists.get_ids(lst), size).copy())
            vecs = faiss.rev_swig_ptr(invlists.get_codes(lst), size * ivf.code_size).view(np.float32)
            if not np.isfinite(vecs).all():
                raise InvalidInputError("FAISS index holds NaN or infinite vectors")
        ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
        if total != n or ids.size != n or (n and (ids.min() < 0 or ids.max() >= n or has_duplicates(ids))):
            raise InvalidInputError("FAISS inverted lists hold ids outside [0, n) or duplicates")
        quant = faiss.rev_swig_ptr(faiss.downcast_index(ivf.quantizer).get_xb(), ivf.nlist * dim) if ivf.nlist else None
        if quant is not None and not np.isfinite(quant).all():
            raise InvalidInputError("FAISS quantizer holds NaN or infinite centroids")
        return
    if isinstance(index, faiss.IndexHNSWFlat):
        hnsw = index.hnsw
        neighbors = faiss.vector_to_array(hnsw.neighbors)
        offsets = faiss.vector_to_array(hnsw.offsets)
        levels = faiss.vector_to_array(hnsw.levels)
        if offsets.shape[0] != n + 1 or levels.shape[0] != n or (n and offsets[0] != 0):
            raise InvalidInputError("FAISS HNSW structure does not match the number of vectors")
        if n and (np.any(np.diff(offsets.astype(np.int64)) < 0) or int(offsets[-1]) != neighbors.shape[0]):
            raise InvalidInputError("FAISS HNSW offsets are not monotone")
        if neighbors.size and (int(neighbors.min()) < -1 or int(neighbors.max()) >= n):
            raise InvalidInputError("FAISS HNSW links point outside the index")
        if n and not (-1 <= hnsw.entry_point < n):
            raise InvalidInputError("FAISS HNSW entry point outside the index")
        if levels.size and (levels.min() < 1 or levels.max() > hnsw.max_level + 1):
            raise InvalidInputError("FAISS HNSW levels are inconsistent")
        cum = faiss.vector_to_array(hnsw.cum_nneighbor_per_level)
        if levels.size and cum.shape[0] < int(levels.max()) + 1:
            raise InvalidInputError("FAISS HNSW level table is too short")
        if n and np.any(np.diff(offsets.astype(np.int64)) != cum[levels.astype(np.int64)]):
            raise InvalidInputError("FAISS HNSW offsets do not match the node levels")
        storage = faiss.downcast_index(hnsw_storage(index))
        xb = faiss.rev_swig_ptr(storage.get_xb(), n * dim) if n else np.zeros(0, np.float32)
        if not np.isfinite(xb).all():
            raise InvalidInputError("FAISS index holds NaN or infinite vectors")
        return
    raise InvalidInputError(f"unexpected FAISS index type {type(index).__name__}")


def hnsw_storage(index):
    return index.storage
