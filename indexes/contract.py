"""The index contract: :class:`Index`, the surface every index kind offers.

Build (``fit``), ``add``, ``query``, ``query_similar``, ``search``, ``query_records``, ``save`` /
load (:func:`sparsesim.indexes.open_index`), ``search_metadata``, ``release``, and capability
flags (``exact``, ``calibrated``, ``supports_add``, ``supports_refit``, ``supports_similar``,
``supports_learning``, ``sharded``). Workflows, the service and the feedback learner use only this
surface; an operation a kind does not offer raises
:class:`~sparsesim.exceptions.UnsupportedOperationError` naming the capability.
:mod:`sparsesim.indexes.checks` runs the same checks over every kind of
:data:`~sparsesim.indexes.INDEX_KINDS` and their sharded form.
"""

from __future__ import annotations

import abc

import numpy as np
import scipy.sparse as sp

from sparsesim.exceptions import InvalidInputError, UnsupportedOperationError
from sparsesim.models import BilinearSimilarity
from sparsesim.validation import CheckedTopK

from .execution import faiss_layout
from .inputs import check_search_k

__all__ = ["Index", "answer_records", "plain_value"]


def plain_value(value):
    """A numpy scalar as the matching Python scalar (for JSON)."""
    return value.item() if isinstance(value, np.generic) else value


class Index(abc.ABC):
    """The surface every index kind offers (the contract :mod:`sparsesim.indexes.checks` tests).

    A kind implements :meth:`fit`, :meth:`add`, :meth:`query`, :meth:`save`, ``n_documents``
    and :meth:`prepare_queries`; :meth:`search`, :meth:`query_records` and ``len()`` are built on
    :meth:`query`. An operation a kind does not offer is left to the default here, which raises
    :class:`~sparsesim.exceptions.UnsupportedOperationError` naming the capability; its flag
    below says so before the call (flags are class attributes, so they can be read from the class
    an index directory declares, :func:`sparsesim.indexes.index_class`, before loading it).

    Attributes
    ----------
    kind : str
        The kind's name (manifest ``kind``, CLI ``--kind``).
    exact : bool
        Answers are the exact top-k (ties broken by the lower document position); otherwise only
        the scores are exact and the membership of the top-k is approximate.
    calibrated : bool
        The search setting is calibrated for a target recall (:meth:`calibrate`).
    supports_add : bool
        :meth:`add` appends documents without a rebuild.
    supports_save : bool
        :meth:`save` writes an index directory (an in-memory kind refuses it).
    supports_refit : bool
        :meth:`refit` re-learns the index from its stored corpus.
    supports_similar : bool
        :meth:`query_similar` ("more like this" by stored document id).
    supports_learning : bool
        The feedback learner (``serve --learn``) can learn over this index: its corpus and ids
        are in this process (``X_``, ``ids_``) and its model is bilinear.
    sharded : bool
        The documents are split into shards (in this process or on Dask workers).
    model : similarity model
    calibration_ : dict or None
        The calibration record of a calibrated kind (None otherwise).
    n_fit_documents_ : int or None
        Documents the index was learned from (kinds that refit; None otherwise).
    snippets_ : ndarray of str or None
        The start of each document's text, shown by ``sparsesim serve`` (None when not kept).
    labels_ : ndarray of str or None
        Each document's class name, shown by ``query --index`` and ``serve`` (None when not kept).
    manifest_ : dict or None
        The manifest of the directory the index was loaded from.
    """

    kind = ""
    exact = True
    calibrated = False
    supports_add = True
    supports_save = True
    supports_refit = False
    supports_similar = True
    supports_learning = False
    sharded = False

    calibration_ = None
    n_fit_documents_ = None
    snippets_ = None
    labels_ = None
    manifest_ = None
    loaded_from_ = None

    # -- what a kind implements -------------------------------------------------------------
    @abc.abstractmethod
    def fit(self, X, ids=None):
        """Index corpus ``X`` (rows = documents) with user ``ids`` (default: row numbers); returns self."""

    @abc.abstractmethod
    def add(self, X_new, ids=None):
        """Append documents (with user ids) without rebuilding; returns self."""

    @abc.abstractmethod
    def query(self, Q, top_k: int = 10, n_jobs: int | None = None, **options):
        """``(ids, scores)``: per query row, the ids of its ``top_k`` documents, best first.

        ``Q`` given as :class:`~sparsesim.validation.CheckedRows` (or the service's
        :class:`~sparsesim.validation.CheckedQueries`) is used as checked (its width compared),
        and a ``top_k`` given as :class:`~sparsesim.validation.CheckedTopK` is compared with the
        index's size only: each value is checked once on a caller's walk."""

    @abc.abstractmethod
    def save(self, directory, overwrite: bool = False):
        """Write the index directory atomically."""

    @property
    @abc.abstractmethod
    def n_documents(self) -> int:
        """Documents in the index."""

    @abc.abstractmethod
    def prepare_queries(self, Q, name: str = "queries"):
        """Query rows checked and in the form the kind's search takes."""

    @abc.abstractmethod
    def id_dtype(self):
        """The dtype of the documents' user ids (int64, or a unicode dtype)."""

    # -- facts --------------------------------------------------------------------------------
    @property
    def n_features(self) -> int:
        return self.model.n_features

    @property
    def ntotal(self) -> int:
        """Documents in the index (faiss's name; also ``len(index)``)."""
        return self.n_documents

    def __len__(self) -> int:
        return self.n_documents

    def params(self) -> dict:
        """The index parameters (what the manifest stores as ``params``)."""
        return {}

    def reader_model(self):
        """The model as far as reading queries needs it (width, feature-index base, text
        featuriser, normalisation); a kind may leave out what reading does not need (W)."""
        return self.model

    def model_checksum(self) -> str:
        """The served model's checksum."""
        return self.model.checksum()

    def search_metadata(self, **options) -> dict:
        """What answers are computed with (JSON-ready; the CLI's ``query --json`` prints it);
        ``options`` as passed to :meth:`query`."""
        return {"kind": self.kind}

    def placement(self) -> dict | None:
        """Where the documents live: None for an index wholly in this process, else its shards
        (``{"shards": sizes, "workers": count, "distributed": bool, "loaded": bool}``)."""
        return None

    def check_placement(self) -> None:
        """Raise :class:`~sparsesim.exceptions.ClusterError` when part of the index is lost
        (a worker holding a shard left); nothing for an index in this process."""

    def release(self) -> None:
        """Free what the index holds outside this process (a sharded index's shards and its
        cluster connection); nothing for an index in this process."""

    # -- capabilities -------------------------------------------------------------------------
    @classmethod
    def describe_kind(cls) -> str:
        """The kind as named in messages."""
        return f"{'a' if cls.kind[:1] not in 'aeiou' else 'an'} {cls.kind or cls.__name__} index"

    @classmethod
    def unsupported(cls, capability: str, hint: str = "") -> UnsupportedOperationError:
        """The error an operation this kind does not offer raises (naming ``capability``)."""
        return UnsupportedOperationError(f"{cls.describe_kind()} does not support {capability}"
                                         f"{'; ' + hint if hint else ''}", capability)

    def calibrate(self, queries=None, target_recall=None, model=None, top_k: int = 10, **kwargs):
        """Recalibrate the search setting (calibrated kinds only, see ``calibrated``)."""
        raise self.unsupported("calibrate", "only ann indexes are calibrated")

    def refit(self):
        """Re-learn the index from its stored corpus (see ``supports_refit``)."""
        raise self.unsupported("refit")

    def query_similar(self, doc_ids, top_k: int = 10, n_jobs: int | None = None, **options):
        """"More like this" by stored document ids (see ``supports_similar``)."""
        raise self.unsupported("query_similar", "give the documents' vectors as queries instead")

    # -- built on query -----------------------------------------------------------------------
    def search(self, Q, k: int = 10, n_jobs: int | None = None, **options) -> tuple[np.ndarray, np.ndarray]:
        """faiss-style top-k: ``(scores, ids)``, the layout of faiss's ``index.search(x, k)``.

        Parameters
        ----------
        Q : sparse matrix or array, shape (n_queries, n_features)
            Queries; the width must match the model.
        k : int, default 10
            Answers per query; may exceed the number of documents (the rest is padding).
        n_jobs : int, optional
            Threads for this call (default: the index's ``n_jobs``).
        **options
            Index-specific search options, as in :meth:`query`.

        Returns
        -------
        scores : ndarray of float64, shape (n_queries, k)
            Similarities, best first (the scores of :meth:`query`); ``-inf`` past the last document.
        ids : ndarray, shape (n_queries, k)
            The documents' user ids (int64, or unicode for an index of string ids); ``-1``
            (``""`` for string ids) past the last document.

        Examples
        --------
        >>> import scipy.sparse as sp
        >>> from sparsesim.indexes import build_index
        >>> from sparsesim.models import BilinearSimilarity
        >>> X = sp.random(5, 8, density=0.5, format="csr", random_state=0)
        >>> index = build_index(BilinearSimilarity(sp.csr_matrix((8, 8))), X)
        >>> scores, ids = index.search(X[:2], k=7)
        >>> scores.shape, ids.shape, len(index), index.ntotal
        ((2, 7), (2, 7), 5, 5)
        >>> ids[:, 5:].tolist(), scores[:, 5:].tolist()
        ([[-1, -1], [-1, -1]], [[-inf, -inf], [-inf, -inf]])
        """
        k = check_search_k(k)
        n = self.n_documents
        if n == 0:
            return faiss_layout([], np.empty((0, 0)), k, self.prepare_queries(Q).shape[0], self.id_dtype())
        ids, scores = self.query(Q, top_k=CheckedTopK(min(k, n)), n_jobs=n_jobs, **options)  # k checked above
        id_dtype = np.dtype(self.id_dtype())
        if id_dtype.kind == "U" and len(ids):  # wide enough for the ids of this answer
            id_dtype = np.promote_types(id_dtype, np.asarray(ids).dtype)
        return faiss_layout(ids, scores, k, len(ids), id_dtype)

    def query_records(self, Q, top_k: int = 10, query_ids=None, n_jobs: int | None = None, **options) -> list[dict]:
        """Query results as JSON-ready dicts ``{"query": ID, "results": [{"id": ..., "score": ...}]}``.

        ``query_ids`` names the queries (default: their row numbers); ids and scores are plain
        Python ``int``/``str``/``float``, so ``json.dumps`` writes one line per query.
        """
        ids, scores = self.query(Q, top_k=top_k, n_jobs=n_jobs, **options)
        return answer_records(ids, scores, query_ids)

    def similar_records(self, doc_ids, top_k: int = 10, n_jobs: int | None = None, **options) -> list[dict]:
        """:meth:`query_similar` as :meth:`query_records` (each query named by its document id)."""
        ids, scores = self.query_similar(doc_ids, top_k=top_k, n_jobs=n_jobs, **options)
        return answer_records(ids, scores, list(doc_ids))

    # -- test settings --------------------------------------------------------------------------
    @classmethod
    def _unit_test_params(cls) -> dict:
        """Parameters that keep :mod:`sparsesim.indexes.checks` fast on its small corpora."""
        return {}

    @classmethod
    def _unit_test_model(cls, n_features: int, seed: int = 0):
        """A small model of the class this kind serves, for :mod:`sparsesim.indexes.checks`."""
        rng = np.random.default_rng(seed)
        W = sp.random(n_features, n_features, density=0.15, format="csr", random_state=rng,
                      data_rvs=lambda m: rng.uniform(-0.3, 0.3, m))
        return BilinearSimilarity(W)


def answer_records(ids, scores, query_ids=None) -> list[dict]:
    """``(ids, scores)`` of a query as JSON-ready records (see :meth:`Index.query_records`)."""
    n = len(ids)
    if query_ids is None:
        query_ids = range(n)
    elif len(query_ids) != n:
        raise InvalidInputError(f"query_ids has {len(query_ids)} entries for {n} queries")
    return [{"query": plain_value(qid), "results": [{"id": plain_value(i), "score": float(v)} for i, v in zip(row, vals)]}
            for qid, row, vals in zip(query_ids, ids, scores)]
