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
``Index.save(directory, overwrite=False)`` / ``open_index(directory, model=None, mmap=False, scheduler=None)``
    The checksummed index directory (see :mod:`sparsesim.indexes.storage`), single-process or
    sharded (``load_index`` and :func:`~sparsesim.indexes.sharded.load_sharded` read one form).

Every kind implements the one surface of :class:`Index` (:mod:`sparsesim.indexes.contract`)
and passes the checks of :mod:`sparsesim.indexes.checks` (``tests/test_index_checks.py`` runs
them over every entry of :data:`INDEX_KINDS` and its sharded form).
"""

from __future__ import annotations

import inspect

from sparsesim.exceptions import InvalidInputError, InvalidParameterError
from sparsesim.validation import (check_bool, check_dense_request, check_float, check_int, check_n_jobs,
                                  check_random_state, resolve_name)

from sparsesim.compact import CompactSimilarity
from sparsesim.embedding import EmbeddingSimilarity

from .ann import AnnIndex
from .base import CorpusIndex
from .contract import Index, answer_records, plain_value
from .compact_index import CompactAnnIndex, CompactExactIndex
from .embedding_ann import EmbeddingAnnIndex
from .embedding_index import EmbeddingExactIndex
from .exact import ExactIndex
from .kinds import COMPACT_INDEX_KINDS, EMBEDDING_INDEX_KINDS, INDEX_KINDS, STORED_KINDS
from .loading import load_index
from .opening import index_bytes, index_class, open_index
from .storage import read_manifest, save_index

__all__ = ["Index", "CorpusIndex", "ExactIndex", "AnnIndex", "EmbeddingExactIndex", "EmbeddingAnnIndex",
           "CompactExactIndex", "CompactAnnIndex", "INDEX_KINDS", "COMPACT_INDEX_KINDS",
           "STORED_KINDS", "EMBEDDING_INDEX_KINDS", "build_index", "load_index", "open_index", "index_class",
           "index_bytes", "save_index", "read_manifest", "answer_records", "plain_value"]


def build_index(model, X, kind: str = "exact", ids=None, n_jobs: int = -1, calibration_queries=None,
                **params) -> Index:
    """Build an index of corpus ``X`` under the similarity ``model``.

    Parameters
    ----------
    model : BilinearSimilarity, EmbeddingSimilarity or CompactSimilarity
        The learned similarity (M = I + W), or an embedding similarity (then the index is an
        :class:`EmbeddingExactIndex` or :class:`EmbeddingAnnIndex`, see
        :mod:`sparsesim.indexes.embedding_index`), or a compact one (a
        :class:`CompactExactIndex` or :class:`CompactAnnIndex`, see
        :mod:`sparsesim.indexes.compact_index`).
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
            out[name] = check_float(value, name, allow_none=name in ("refit_growth", "target_recall", "corpus_ratio"))
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
