"""Retrieval indexes over a learned bilinear similarity S(q, x) = q^T M x.

Public entry points (what the CLI calls)
----------------------------------------
``build_index(model, X, kind="exact" | "ann", ids=None, n_jobs=1, **params) -> Index``
    Index corpus ``X`` under ``model``; ``params`` go to :class:`ExactIndex` or :class:`AnnIndex`
    (an :class:`~sparsesim.embedding.EmbeddingSimilarity` model: :class:`EmbeddingExactIndex`
    or :class:`EmbeddingAnnIndex`).
``Index.query(Q, top_k=10) -> (ids, scores)``
    ``ids`` is a list (one array per query) of user ids, best first; ``scores`` an
    (n_queries, top_k) array of exact bilinear scores.
``Index.search(Q, k=10) -> (scores, ids)``
    faiss's layout: two (n_queries, k) arrays, padded with -inf / -1 past the last document;
    ``len(index)`` and ``index.ntotal`` count the documents.
``Index.add(X_new, ids=None)``
    Append documents without rebuilding.
``Index.save(directory, overwrite=False)`` / ``load_index(directory, model=None, mmap=False)``
    The checksummed index directory (see :mod:`sparsesim.indexes.storage`).
"""

from __future__ import annotations

import inspect

from sparsesim.exceptions import FileFormatError, InvalidInputError, InvalidParameterError
from sparsesim.validation import (bounded, check_bool, check_dense_request, check_float, check_int, check_n_jobs,
                                  check_random_state, resolve_name)

from sparsesim.compact import CompactSimilarity
from sparsesim.embedding import EmbeddingSimilarity

from .ann import AnnIndex
from .base import Index
from .compact_index import CompactAnnIndex, CompactExactIndex
from .embedding_ann import EmbeddingAnnIndex
from .embedding_index import EmbeddingExactIndex
from .exact import ExactIndex
from .array_checks import check_faiss
from .storage import (check_stored_model, derived_arrays_checked, mark_derived_arrays_checked, read_index,
                      read_manifest, save_index)
from .verify import verify_derived

__all__ = ["Index", "ExactIndex", "AnnIndex", "EmbeddingExactIndex", "EmbeddingAnnIndex", "CompactExactIndex", "CompactAnnIndex", "INDEX_KINDS",
           "build_index", "load_index", "save_index", "read_manifest"]

# the one map from an index kind (CLI ``--kind``, manifest ``kind``) to its class
INDEX_KINDS = {"exact": ExactIndex, "ann": AnnIndex}
# the same kinds over an EmbeddingSimilarity (build_index picks them by the model's class)
EMBEDDING_INDEX_KINDS = {"exact": EmbeddingExactIndex, "ann": EmbeddingAnnIndex}
# over a CompactSimilarity (in memory only: not in STORED_KINDS)
COMPACT_INDEX_KINDS = {"exact": CompactExactIndex, "ann": CompactAnnIndex}
# every kind an index directory may declare
STORED_KINDS = {**INDEX_KINDS, **{cls.kind: cls for cls in EMBEDDING_INDEX_KINDS.values()}}


def load_index(directory, model=None, mmap: bool = False, verify: bool = True, n_jobs: int | None = 1,
               check_calibration: bool = True, verify_in_background: bool = False) -> Index:
    """Read an index directory written by :meth:`Index.save`.

    Parameters
    ----------
    directory : path-like
    model : BilinearSimilarity, optional
        The model the index must belong to (checked against the manifest's checksum); default:
        the copy stored in the index.
    mmap : bool, default False
        Memory-map the arrays read-only and the FAISS index with ``faiss.IO_FLAG_MMAP``; such
        an index answers queries but refuses :meth:`Index.add`. The large arrays (corpus,
        postings, re-ranking table, the stored model's W) are then not read at load: each 64 KiB
        block is checked against its sha256 and for out-of-range or non-finite values the first
        time a query is about to read it (:mod:`sparsesim.indexes.blocks`), so loading costs
        the same whatever the index size and corruption is still refused before an answer is
        returned. :meth:`Index.verify_all` checks every remaining block at once. A file this
        user's sparsesim wrote, or verified whole before, and that is unchanged since (same
        device, inode, size, modification and status-change times, and the same manifest
        checksum; :func:`~sparsesim.indexes.storage_format.file_identity`) is not checked
        again: a fresh process answers its first queries at the warm speed.
    verify : bool, default True
        Check sha256 checksums (whole files at load, or blocks on first use; sizes and the
        structural checks always run).
    n_jobs : int, default 1
        Threads of the loaded index.
    verify_in_background : bool, default False
        Load the query kernels (:meth:`Index.warm_up`) and, memory-mapped, check the blocks not
        checked yet, in a background thread (queries still check what they read first); once a
        file is checked whole it is recorded as verified,
        so the next process loads it without block checks. A corrupt block it finds is kept in
        ``index.background_error_`` (and refused when a query reads it).
    check_calibration : bool, default True
        Ann: replay the stored calibration record and probe the recall it claims
        (:mod:`sparsesim.indexes.recall_check`). False is for a caller that replaces the record
        (``sparsesim index calibrate``); such a load is not remembered as checked.

    Raises
    ------
    FileFormatError
        Not an index directory, unknown kind, newer format, missing, truncated or corrupt file.
    ModelMismatchError
        ``model`` is not the model the index was built with.

    Notes
    -----
    Besides the file checks of :func:`~sparsesim.indexes.storage.read_index`, the arrays derived
    from the corpus and the model (posting values, re-ranking values, projections) are checked
    against them with randomized probes (:func:`~sparsesim.indexes.verify.verify_derived`) --
    once per index content: an index this user saved or loaded with that check passing is
    recorded by its manifest checksum in the user's cache directory
    (:func:`~sparsesim.indexes.storage.derived_arrays_checked`), and its bytes are bound to that
    checksum by the file and block checksums (``verify=False`` always runs the check). The same
    once-per-content check hashes a memory-mapped stored model against the manifest's model
    checksum (a load that is not memory-mapped hashes it at every load).
    """
    stored = read_index(directory, model=model, mmap=mmap, verify=verify)
    if stored.kind not in STORED_KINDS:
        raise FileFormatError(f"{stored.directory}: unknown index kind {stored.kind!r}")
    index = STORED_KINDS[stored.kind].from_stored(stored, mmap=mmap, n_jobs=n_jobs)
    if getattr(index, "faiss_", None) is not None:
        try:
            check_faiss(index.faiss_, index.n_documents, index.dim)
        except InvalidInputError as exc:
            raise FileFormatError(f"{stored.extra_files.get('faiss.index', stored.directory)}: "
                                  f"{bounded(exc, 300)}") from None
    # what a later save(overwrite=True) to this directory checks: nobody replaced it meanwhile
    index.loaded_from_ = (str(stored.directory.resolve()), stored.manifest.get("manifest_checksum"))
    # arrays derived from corpus + model, against them (indexes/verify.py): once per index content
    # (a checked or self-written index is bound to its bytes by the manifest's checksums)
    if not (verify and derived_arrays_checked(stored.manifest)):
        try:
            verify_derived(index, record_checks=check_calibration)
        except FileFormatError as exc:
            raise FileFormatError(f"{stored.directory}: {bounded(exc, 300)}") from None
        # a memory-mapped stored W: its checksum against the manifest's (``index.model`` verifies every block)
        check_stored_model(stored, index.model)
        if verify and check_calibration:
            mark_derived_arrays_checked(stored.manifest.get("manifest_checksum"))
    index.background_error_ = None
    if verify_in_background:
        _verify_in_background(index)
    return index


def _verify_in_background(index) -> None:
    """Check every remaining block of ``index`` in a daemon thread (see :func:`load_index`)."""
    import threading

    def run():
        try:
            index.warm_up()  # the kernels first: a server's first requests then run at the warm speed
        except FileFormatError as exc:
            index.background_error_ = str(exc)
        for guard in list(index._guards.values()):
            try:
                guard.ensure_all()
            except FileFormatError as exc:
                index.background_error_ = str(exc)

    threading.Thread(target=run, name="sparsesim-verify", daemon=True).start()


def build_index(model, X, kind: str = "exact", ids=None, n_jobs: int = -1, calibration_queries=None,
                **params) -> Index:
    """Build an index of corpus ``X`` under the similarity ``model``.

    Parameters
    ----------
    model : BilinearSimilarity, EmbeddingSimilarity or CompactSimilarity
        The learned similarity (M = I + W), or an embedding similarity (then the index is an
        :class:`EmbeddingExactIndex` or :class:`EmbeddingAnnIndex`, see
        :mod:`sparsesim.indexes.embedding_index`), or a compact one (an in-memory
        :class:`CompactExactIndex` or :class:`CompactAnnIndex`, not saved).
    X : sparse matrix, shape (n_documents, n_features)
        The corpus; its width must match the model.
    kind : {"exact", "ann"}
        Exact top-k, or candidates (sparse postings, FAISS) re-ranked with the exact score.
    ids : sequence of int or str, optional
        One unique user id per document (default: row numbers).
    n_jobs : int, default -1
        Threads for building and (by default) for queries; -1: every core this process may use.
        The index is the same whatever the count (products are split by document, heaps by
        feature); the ann build of 10^6 documents took 738 s on one thread and 395 s on two.
    calibration_queries : sparse matrix, optional
        ANN only: queries the search setting is calibrated on for ``target_recall`` (default:
        held-out corpus documents; see :mod:`sparsesim.indexes.calibration`).
    **params
        Index parameters (see :class:`ExactIndex`, :class:`AnnIndex`).

    Returns
    -------
    Index

    Examples
    --------
    >>> from sparsesim.data import load_dataset
    >>> from sparsesim.learners.bilinear import OASIS
    >>> from sparsesim.indexes import build_index
    >>> data = load_dataset("news20-sample")
    >>> model = OASIS(n_triplets=500, random_state=0).fit(data.X, data.y).model_
    >>> index = build_index(model, data.X, kind="exact")
    >>> ids, scores = index.query(data.X[:2], top_k=3)
    >>> scores.shape
    (2, 3)
    """
    kind = resolve_name(kind, INDEX_KINDS, "index kind")
    embedding = isinstance(model, (EmbeddingSimilarity, CompactSimilarity))
    cls = (COMPACT_INDEX_KINDS if isinstance(model, CompactSimilarity) else
           EMBEDDING_INDEX_KINDS if embedding else INDEX_KINDS)[kind]
    params = check_index_params(cls, params)
    n_jobs = check_n_jobs(n_jobs, "n_jobs")
    if kind == "ann" and not embedding and hasattr(X, "shape") and len(X.shape) == 2:
        dim = params.get("dim", inspect.signature(cls.__init__).parameters["dim"].default)
        check_ann_dim(dim, int(X.shape[0]), int(X.shape[1]))
    index = cls(model, n_jobs=n_jobs, **params)
    if calibration_queries is not None:
        if kind != "ann":
            raise InvalidInputError("calibration_queries apply to ann indexes only")
        return index.fit(X, ids=ids, calibration_queries=calibration_queries)
    return index.fit(X, ids=ids)


#: build settings with their own argument (CLI option), never taken from an index's parameters
OWN_OPTIONS = {"n_jobs": "--n-jobs", "kind": "--kind", "ids": "--id-column", "model": "--model",
               "calibration_queries": "--calibration-queries", "n_shards": "--shards", "shards": "--shards",
               "client": "--scheduler", "scheduler": "--scheduler", "model_file": "--model"}


def check_index_params(cls, params: dict) -> dict:
    """Refuse unknown index parameters (names are matched case-insensitively; an unknown one gets
    "did you mean"), settings that have their own option (:data:`OWN_OPTIONS`, e.g. ``n_jobs``)
    and values whose type differs from the default's
    (an int parameter given 2.5, a bool given ``"yes"``), naming the parameter; returns the
    checked values as plain Python values."""
    taken = sorted(set(params or {}) & set(OWN_OPTIONS))
    if taken:
        raise InvalidParameterError(f"{', '.join(taken)} cannot be given as an index parameter (--param); use "
                                    f"{', '.join(OWN_OPTIONS[k] for k in taken)}")
    signature = inspect.signature(cls.__init__).parameters
    known = [p for p in signature if p not in ("self", "model", "n_jobs")]
    # names matched case-insensitively; an unknown one names the closest known ones
    params = {resolve_name(key, known, f"parameter for a {cls.kind} index", error=InvalidParameterError): value
              for key, value in params.items()}
    out = dict(params)
    for name, value in params.items():
        default = signature[name].default
        if value is None and default is None:
            continue
        if name == "random_state":
            out[name] = check_random_state(value)
        elif isinstance(default, bool):
            out[name] = check_bool(value, name)
        elif isinstance(default, int):
            out[name] = check_int(value, name, None, 2**53)  # beyond: no machine holds it, numpy overflows
        elif isinstance(default, float):
            out[name] = check_float(value, name, allow_none=name in ("refit_growth", "target_recall"))
        elif isinstance(default, str) and not isinstance(value, str):
            raise InvalidParameterError(f"{name} must be a string, got {value!r}")
        elif default is None:  # optional counts (pool sizes, postings, lists): chosen by the index when None
            out[name] = check_int(value, name, 1 if name in ("nlist", "nprobe") else 0, 2**53)
    return out


def check_ann_dim(dim, n_documents: int, n_features: int) -> None:
    """An ANN projection dimension in [0, n_features] whose dense arrays fit the memory budget."""
    dim = check_int(dim, "dim", 0, max(1, n_features))
    # V and B (d x dim, float64 while learned), the document vectors (n x dim float32)
    check_dense_request(2 * n_features * dim * 8 + n_documents * dim * 4,
                        f"an ann index of dim={dim} over {n_documents} documents x {n_features} features")
