"""The index workflows: build (single-process or sharded), calibrate, add to and query a saved index."""

from __future__ import annotations

import functools
import os
import re
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np

from ..data import looks_like_path
from ..distributed import connect, resolve_scheduler
from ..exceptions import InvalidInputError
from ..indexes import OWN_OPTIONS, ExactIndex, build_index, index_bytes, open_index
from ..indexes.document_facts import extend_facts, facts_of, held_facts, set_facts
from ..indexes.sharded import ShardedIndex
from ..indexes.storage import check_index_target
from ..compact import CompactSimilarity
from ..memory import large_output_warning
from ..model_files import load_similarity_model, model_nbytes
from ..models import BilinearSimilarity
from ..persistence import check_output_path, target_lock
from .corpus import load_corpus
from .queries import read_queries, text_queries


#: characters of each document's text kept in an index for display (``sparsesim serve``)
SNIPPET_CHARS = 300


def snippets_of(texts) -> np.ndarray:
    r"""The first :data:`SNIPPET_CHARS` characters of each text, whitespace collapsed; a mail or
    news post (a block of ``Name: value`` header lines, then a blank line) reads
    ``"SUBJECT - BODY"`` (with an em dash) instead of starting with its raw headers.

    Examples
    --------
    >>> mail = "From: ann@example.org\nSubject: Re: tomato soup\nLines: 2\n\nAdd basil.\n"
    >>> snippets_of([mail])[0] == "Re: tomato soup \u2014 Add basil."
    True
    >>> str(snippets_of(["plain   text\nhere"])[0])
    'plain text here'
    """
    return np.array([_snippet(str(t))[:SNIPPET_CHARS] for t in texts], dtype=str)


_HEADER_LINE = re.compile(r"[A-Za-z][A-Za-z0-9-]*:[ \t]")


def _snippet(text: str) -> str:
    head, sep, body = text.lstrip("\r\n").replace("\r\n", "\n").partition("\n\n")
    lines = head.splitlines()
    if sep and lines and _HEADER_LINE.match(lines[0]) and all(
            _HEADER_LINE.match(line) or line[:1] in (" ", "\t") for line in lines):
        from email.parser import HeaderParser

        try:
            subject = " ".join(str(HeaderParser().parsestr(head + "\n\n").get("Subject", "")).split())
        except Exception:  # a header the parser cannot read: show the text as it is
            subject = ""
        if subject:
            return f"{subject} \u2014 {' '.join(body.split())}"
    return " ".join(text.split())


def _load_part(path: str, model_path: str, data_options: dict | None = None):
    """``(X, ids)`` of one corpus file, read the way the model expects (a worker building its shard)."""
    model = BilinearSimilarity.load(model_path)
    data = load_corpus(path, model=model, options=data_options)
    return data.X, data.ids


def build_index_from_files(model_path, corpus, kind: str = "exact", out=None, params: dict | None = None,
                           data_options: dict | None = None, target_recall=None, calibration_queries=None,
                           shards: int | None = None, scheduler: str | None = None, n_jobs: int = -1,
                           overwrite: bool = False) -> dict:
    """Build a retrieval index (see :mod:`sparsesim.indexes`) over ``corpus`` and save it to ``out``.

    A text corpus is featurised with the model's text featuriser; the start of each document's
    text is kept in the index for display.

    ``corpus`` may be a list of files: one shard per file. ``shards`` splits one corpus into
    that many row blocks. Either builds a :class:`~sparsesim.indexes.sharded.ShardedIndex`; with
    a Dask ``scheduler`` (default ``$SPARSESIM_SCHEDULER``) its shards are built on the workers,
    which also write them into ``out`` (a path the workers see).

    ``out`` follows the output-path policy (:func:`~sparsesim.persistence.check_output_path`),
    checked before anything is read: not inside (nor containing) the model file, a corpus file or
    folder or the calibration queries; an existing index is replaced only with ``overwrite=True``.
    """
    parts = [corpus] if isinstance(corpus, (str, os.PathLike)) else [str(c) for c in corpus]
    if not parts:
        raise InvalidInputError("give a corpus to index")
    taken = sorted(set(params or {}) & set(OWN_OPTIONS))
    if taken:
        raise InvalidInputError(f"{', '.join(taken)} cannot be given as an index parameter (--param); use "
                                f"{', '.join(OWN_OPTIONS[k] for k in taken)}")
    if out is None:
        raise InvalidInputError("give the index directory to write (--out)")
    inputs = [model_path, calibration_queries, *[p for p in parts if looks_like_path(str(p))]]
    check_output_path(out, inputs=inputs, overwrite=overwrite, what="index", directory=True)
    check_index_target(out, overwrite=overwrite)
    scheduler = resolve_scheduler(scheduler)
    if shards is not None and (isinstance(shards, bool) or int(shards) < 1):
        raise InvalidInputError(f"--shards must be a positive integer, got {shards!r}")
    if len(parts) > 1 and shards is not None and int(shards) != len(parts):
        raise InvalidInputError(f"{len(parts)} corpus files make {len(parts)} shards; drop --shards or give "
                                f"--shards {len(parts)}")
    if shards is None and len(parts) == 1 and scheduler is None:
        return _build_plain_index(model_path, parts[0], kind, out, params, data_options, target_recall,
                                  calibration_queries, n_jobs=n_jobs, overwrite=overwrite)
    if target_recall is not None or calibration_queries is not None:
        raise InvalidInputError("--target-recall and --calibration-queries apply to single-process ann indexes, "
                                "not to sharded ones")
    n_shards = len(parts) if len(parts) > 1 else int(shards or 1)
    return _build_sharded_index(model_path, parts, kind, out, params, n_shards, scheduler, data_options, overwrite)


def _build_sharded_index(model_path, parts, kind, out, params, n_shards, scheduler, data_options,
                         overwrite: bool = False) -> dict:
    model = load_similarity_model(model_path)
    if not isinstance(model, BilinearSimilarity):
        what = "a compact (ssi-dwuv)" if isinstance(model, CompactSimilarity) else "an embedding"
        raise InvalidInputError(f"{model_path} is {what} model; sharded indexes serve bilinear models (build "
                                f"a single index: drop --shards and --scheduler)")
    with (connect(scheduler) if scheduler else nullcontext()) as client:
        start = time.perf_counter()
        index = ShardedIndex(model, kind=kind, n_shards=n_shards, client=client, model_file=model_path,
                             **(params or {}))
        try:
            if len(parts) == 1:
                data = load_corpus(parts[0], model=model, options=data_options)
                index.fit(data.X, ids=data.ids)
            else:
                loader = functools.partial(_load_part, model_path=str(Path(model_path).absolute()),
                                           data_options=data_options)
                index.fit_files([str(Path(p).absolute()) for p in parts], loader)
            seconds = time.perf_counter() - start
            index.save(out, overwrite=overwrite)
            sizes = list(index.shard_sizes_)
            workers = index.shard_workers_
        finally:
            index.release()
    return {"index": str(out), "kind": kind, "n_documents": int(sum(sizes)), "build_seconds": seconds,
            "shards": sizes, "workers": workers, "scheduler": scheduler}


def _build_plain_index(model_path, corpus, kind, out, params, data_options, target_recall,
                       calibration_queries, n_jobs: int = -1, overwrite: bool = False) -> dict:
    model = load_similarity_model(model_path)
    data = load_corpus(corpus, model=model, options=data_options)
    ids = None if data.ids is None else data.ids
    params = dict(params or {})
    if target_recall is not None:
        params["target_recall"] = target_recall
    if kind != "ann" and (target_recall is not None or calibration_queries is not None):
        raise InvalidInputError("--target-recall and --calibration-queries apply to --kind ann")
    calib = None if calibration_queries is None else read_queries(model, calibration_queries, data_options)[1]
    note = _index_size_warning(model, data.X, kind, params)
    start = time.perf_counter()
    labels = _calibration_labels(data) if kind == "ann" and calib is None else None
    if labels is None:
        index = build_index(model, data.X, kind=kind, ids=ids, calibration_queries=calib, n_jobs=n_jobs, **params)
    else:  # calibrate on samples stratified by the corpus labels
        target = params.pop("target_recall", 0.95)
        index = build_index(model, data.X, kind=kind, ids=ids, n_jobs=n_jobs, target_recall=None, **params)
        index.target_recall = target
        if target is not None and index.n_documents > 11:
            index.calibrate(strata=labels)
    set_facts(index, document_facts(data))
    seconds = time.perf_counter() - start
    index.save(out, overwrite=overwrite)
    out_summary = {"index": str(out), "kind": kind, "n_documents": int(data.n_documents), "build_seconds": seconds,
                   "index_bytes": index_bytes(out), "index_kind": index.kind}
    if isinstance(index, ExactIndex):  # its choice under "auto"
        out_summary["strategy"] = index.strategy_
    if index.calibration_ is not None:
        out_summary["calibration"] = index.calibration_
    if note:
        out_summary["warnings"] = [note]
    return out_summary


def index_size_estimate(model, X, kind: str = "exact", params: dict | None = None) -> tuple[int, str]:
    """``(bytes, how)``: what an index of corpus ``X`` under ``model`` will take on disk, before it
    is built, and whether that is an upper bound (``"may take up to"``) or a lower one
    (``"will take at least"``).

    Every index stores the model and the corpus (CSR: 12 bytes per entry, 8 per row). An exact
    index of a bilinear model may also store Y = X M^T, up to its ``corpus_memory`` (1 GiB by
    default) and (``corpus_ratio`` - 1) x (corpus + W) (1.5 x by default); a row of Y has at most as many entries as the columns of M that the row's features
    touch (at most d): that bound is counted, so the figure is an upper bound. An ann index
    stores more (projections, FAISS structures), so its figure is a lower bound.
    """
    corpus = 12 * int(X.nnz) + 8 * (int(X.shape[0]) + 1)
    total = model_nbytes(model) + corpus
    if kind != "exact" or not isinstance(model, BilinearSimilarity):
        return int(total), "will take at least"
    W = model.W
    column_nnz = np.bincount(W.indices, minlength=W.shape[1]).astype(np.float64)
    if model.identity:
        column_nnz += 1.0  # the identity's diagonal (counted twice where W has one too: a bound)
    touched = (X != 0).astype(np.float64) @ column_nnz
    y_entries = float(np.minimum(touched, W.shape[1]).sum())
    corpus_memory = float((params or {}).get("corpus_memory", 1 << 30))
    ratio = (params or {}).get("corpus_ratio", 2.5)
    if ratio is not None:
        corpus_memory = min(corpus_memory, (float(ratio) - 1.0) * (corpus + 12 * W.nnz + 8 * (W.shape[0] + 1)))
    strategy = (params or {}).get("strategy", "auto")
    y_bytes = 0.0 if strategy == "query" else 12.0 * y_entries if strategy == "corpus" else min(12.0 * y_entries,
                                                                                                corpus_memory)
    return int(total + y_bytes), "may take up to"


def _index_size_warning(model, X, kind, params) -> str | None:
    nbytes, how = index_size_estimate(model, X, kind, params)
    return large_output_warning("the index", nbytes, how,
                                "a smaller model (train --max-model-bytes) or a smaller corpus makes it smaller")


def _calibration_labels(data):
    """The corpus labels to stratify an ann calibration by, when the corpus has two or more."""
    y = data.y
    if y is None or len(y) != data.X.shape[0] or len(np.unique(y)) < 2:
        return None
    return np.asarray(y)


def calibrate_index(index_dir, queries_path=None, target_recall=None, model_path=None,
                    data_options: dict | None = None) -> dict:
    """Re-run the recall calibration of a saved ann index (optionally for a retrained model) and
    rewrite it atomically; the candidate postings are kept (see ``AnnIndex.calibrate``)."""
    check_index_target(index_dir, overwrite=True)
    with target_lock(index_dir):  # from the read to the write: a concurrent `index add` is not lost
        index = open_index(index_dir, check_calibration=False)  # the record is replaced below
        try:
            if not index.calibrated:
                raise index.unsupported("calibrate", "only ann indexes are calibrated")
            model = load_similarity_model(model_path) if model_path is not None else None
            queries = None if queries_path is None else read_queries(model or index.model, queries_path,
                                                                       data_options)[1]
            record = index.calibrate(queries, target_recall=target_recall, model=model)
            index.save(index_dir, overwrite=True)
        finally:
            index.release()
    return {"index": str(index_dir), "calibration": record}


def add_to_index(index_dir, corpus: str, refit: bool = False, data_options: dict | None = None,
                 scheduler: str | None = None) -> dict:
    """Append the documents of ``corpus`` (their ids when the file has them) to a saved index.

    The index directory is rewritten atomically; an ANN index re-learns its projection and FAISS
    structure when ``refit`` is set or its ``refit_growth`` is reached (see ``AnnIndex.add``);
    ``refit`` changes nothing for an exact kind (an add already gives the index a rebuild would)
    and is refused by an approximate kind that cannot refit.
    A sharded index adds them to its smallest shard (on the cluster at ``scheduler`` if given).
    """
    scheduler = resolve_scheduler(scheduler)
    check_index_target(index_dir, overwrite=True)
    # the lock spans read, add and write: concurrent adds are serialised, none is lost
    with target_lock(index_dir):
        index = open_index(index_dir, scheduler=scheduler, warm_up=False)  # answers no query
        try:
            if refit and not index.supports_refit and not index.exact:  # exact: an add already equals a rebuild
                raise index.unsupported("--refit", "it re-learns a single ann index")
            data = load_corpus(corpus, model=index.model, options=data_options)
            start = time.perf_counter()
            before = index.n_documents
            held = held_facts(index)
            index.add(data.X, ids=data.ids)
            extend_facts(index, held, data.n_documents, document_facts(data))
            if refit and index.supports_refit and index.n_fit_documents_ < index.n_documents:
                index.refit()
            seconds = time.perf_counter() - start
            index.save(index_dir, overwrite=True)
            out = {"index": str(index_dir), "kind": index.kind, "added": int(index.n_documents - before),
                   "n_documents": int(index.n_documents), "seconds": seconds, "index_bytes": index_bytes(index_dir)}
            placement = index.placement()
            if placement is not None:
                out["shards"] = placement["shards"]
            if index.supports_refit:
                out["n_fit_documents"] = int(index.n_fit_documents_)
        finally:
            index.release()
    return out


def query_index(index_dir, queries_path=None, top_k: int = 10, model_path=None, texts=None,
                data_options: dict | None = None, options: dict | None = None,
                scheduler: str | None = None, query_ids: str | None = None) -> list[dict]:
    """Top-k from a saved retrieval index (see :mod:`sparsesim.indexes`) for a query file, texts,
    or stored documents named by their ids (``query_ids``: "ID,ID,..."; each document is left
    out of its own answer).

    A query file is read as text (one query per line; ``.jsonl``: objects with ``"text"`` and an
    optional ``"id"``) when the model was trained on text, else as vectors read the way the
    model's training file was (same feature-index base).

    A sharded index is loaded onto the Dask cluster at ``scheduler`` (default
    ``$SPARSESIM_SCHEDULER``; its workers read their shards from ``index_dir``) and queried
    there, or without a scheduler loaded into this process.

    Returns
    -------
    list of dict
        One record per query in the form of :meth:`~sparsesim.indexes.Index.query_records`
        (``{"query": ID, "results": [{"id": ..., "score": ...}]}``), plus ``"search"``: the
        index's :meth:`~sparsesim.indexes.Index.search_metadata`.
    """
    if sum(x is not None for x in (queries_path, texts, query_ids)) != 1:
        raise InvalidInputError("give exactly one of --queries FILE, --text TEXT or --query-ids ID,ID,...")
    scheduler = resolve_scheduler(scheduler)
    model = load_similarity_model(model_path) if model_path is not None else None
    options = dict(options or {})
    # memory-mapped: the large arrays are checked block by block as the queries read them; one
    # batch and exit: no kernel warm-up (a few queries take the numpy path, numba is not imported)
    index = open_index(index_dir, model=model, mmap=True, scheduler=scheduler, warm_up=False)
    try:
        search = index.search_metadata(**options)
        if query_ids is not None:
            names = [s.strip() for s in str(query_ids).split(",") if s.strip()]
            records = index.similar_records(names, top_k, **options)
        else:
            reader = index.reader_model()  # reading queries needs no W
            if texts is not None:
                qnames, Q = list(texts), text_queries(reader, texts)
            else:
                qnames, Q = read_queries(reader, queries_path, data_options)
            records = index.query_records(Q, top_k, query_ids=qnames, **options)
        _with_facts(index, records)
    finally:
        index.release()
    for record in records:
        record["search"] = search
    return records


def _with_facts(index, answers: list[dict]) -> list[dict]:
    """Add ``labels`` and ``titles`` (id -> text) to each answer from what the index stores
    about its documents (class names; the start of each text)."""
    found = sorted({hit["id"] for answer in answers for hit in answer["results"]}, key=str)
    if not found or (index.labels_ is None and index.snippets_ is None):
        return answers
    facts = facts_of(index, index.rows_of(found))
    labels = dict(zip(found, facts.get("labels", [])))
    titles = dict(zip(found, facts.get("snippets", [])))
    for answer in answers:
        docs = [hit["id"] for hit in answer["results"]]
        answer["labels"] = {doc: labels[doc] for doc in docs if labels.get(doc)}
        answer["titles"] = {doc: titles[doc] for doc in docs if titles.get(doc)}
    return answers


def document_facts(data) -> dict:
    """What an index built from ``data`` keeps about each document for display: ``snippets``
    (the start of each text, or the data set's stored titles) and ``labels`` (class names, when
    the corpus has two or more classes)."""
    facts = {}
    titles = (data.info or {}).get("titles")
    if data.texts is not None:
        facts["snippets"] = snippets_of(data.texts)
    elif titles is not None and len(titles) == data.n_documents:
        facts["snippets"] = snippets_of(titles)
    y = data.y
    if y is not None and np.ndim(y) == 1 and len(y) == data.n_documents and len(np.unique(y)) >= 2:
        names = data.class_names or {}
        facts["labels"] = np.array([str(names.get(v.item(), v.item())) for v in np.asarray(y)], dtype=str)
    return facts
