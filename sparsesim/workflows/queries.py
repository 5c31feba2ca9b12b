"""Queries: reading query texts and query files, and exact top-k search of a corpus."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..data import LabelledData
from ..data.readers import read_text_file, detect_format, open_maybe_compressed, read_table_rows, table_format
from ..exceptions import InvalidInputError
from ..model_files import load_similarity_model
from ..models import BilinearSimilarity
from ..topk import top_k_rows
from ..validation import bounded
from .corpus import load_corpus


def read_query_texts(path, text_column: str | None = None, id_column: str | None = None) -> tuple[list, list[str]]:
    """Query texts from ``path``: ``.jsonl`` (one object per line), ``.csv`` / ``.tsv`` (a header
    row; read with the standard ``csv`` module) -- text in ``text_column`` (default ``"text"``),
    id in ``id_column`` (default: an ``"id"`` column/key when present, else the text) -- or any
    other text file (one query per non-empty line).

    Returns
    -------
    names : list
        The query ids (the JSONL id, else the text itself).
    texts : list of str
    """
    path = Path(path)
    if not path.is_file():
        raise InvalidInputError(f"{path}: no such file")
    explicit_id = id_column is not None
    text_column, id_column = text_column or "text", id_column or "id"
    fmt = table_format(path)
    if fmt in ("csv", "tsv", "jsonl"):
        rows, columns = read_table_rows(path, fmt)
        for name, option, needed in ((text_column, "--text-column", fmt != "jsonl"),
                                     (id_column, "--id-column", explicit_id and fmt != "jsonl")):
            if needed and name not in columns:
                raise InvalidInputError(f"{path}: no column {bounded(repr(name), 60)} (columns: "
                                        f"{bounded(', '.join(columns), 200)}); name it with {option}")
        names, texts = [], []
        first = 2 if fmt != "jsonl" else 1
        for number, row in enumerate(rows, start=first):
            text = row.get(text_column)
            if not isinstance(text, str) or not text.strip():
                raise InvalidInputError(f"{path}:{number}: expected a non-empty string in {text_column!r}")
            texts.append(text)
            name = row.get(id_column)
            names.append(name if name not in (None, "") else text)
    else:
        texts = [ln.strip() for ln in read_text_file(path).splitlines() if ln.strip()]
        names = list(texts)
    if not texts:
        raise InvalidInputError(f"{path}: no query texts")
    return names, texts


def _text_file_columns(data_options) -> dict:
    """``text_column`` / ``id_column`` of the CLI's data options, for a query text file."""
    opts = data_options or {}
    return {"text_column": opts.get("text_column"), "id_column": opts.get("id_column")}


def text_queries(model: BilinearSimilarity, texts) -> sp.csr_matrix:
    """Query texts as the rows ``model`` reads (its text featuriser); an empty text is refused."""
    texts = [t for t in texts]
    if any(not t.strip() for t in texts):
        raise InvalidInputError("a query text is empty")
    Q = model.transform(texts)
    return Q


def _queries_are_text(model: BilinearSimilarity, queries_path) -> bool:
    """A query file holds text when the model has a text featuriser and the file is not a vector format."""
    return model.featurizer is not None and detect_format(queries_path) in ("svmlight", "jsonl", "csv", "tsv") \
        and not _is_svmlight(queries_path)


def _is_svmlight(path) -> bool:
    """Whether the first non-empty line of ``path`` looks like ``label idx:value ...``."""
    if detect_format(path) != "svmlight":
        return False
    try:
        with open_maybe_compressed(path) as handle:
            head = handle.read(4096).decode("utf-8", errors="replace")
    except Exception:  # noqa: BLE001 - unreadable files are reported by the reader
        return True
    for line in head.splitlines():
        tokens = line.split("#", 1)[0].split()
        if not tokens:
            continue
        try:
            [float(v) for v in tokens[0].split(",") if v]
        except ValueError:
            return False
        return all(":" in t for t in tokens[1:])
    return True


def query_corpus(model_path, corpus: str, queries_path=None, query_ids: str | None = None,
                 top_k: int = 10, block_size: int = 1024, texts=None, data_options: dict | None = None) -> list[dict]:
    """Exact top-k corpus documents for each query (a vector or text file, texts, or corpus row ids).

    A corpus document used as a query is left out of its own results.
    """
    k = top_k
    model = load_similarity_model(model_path)
    data = load_corpus(corpus, model=model, options=data_options)
    if sum(x is not None for x in (queries_path, query_ids, texts)) != 1:
        raise InvalidInputError("give exactly one of --queries FILE, --text TEXT or --query-ids ID,ID,...")
    self_rows = None
    if texts is not None:
        Q, qnames = text_queries(model, texts), list(texts)
    elif queries_path is not None:
        qnames, Q = read_queries(model, queries_path, data_options)
    else:
        try:
            parsed = [int(s) for s in str(query_ids).split(",") if s.strip()]
        except ValueError:
            raise InvalidInputError(f"--query-ids expects comma-separated row numbers, got "
                                    f"{bounded(repr(query_ids), 80)}") from None
        if not parsed or min(parsed) < 0 or max(parsed) >= data.n_documents:
            raise InvalidInputError(f"query ids must be row numbers in [0, {data.n_documents})")
        rows = np.array(parsed, dtype=np.int64)
        Q, qnames, self_rows = data.X[rows], [data.doc_id(r) for r in rows], rows
    available = data.n_documents - (1 if self_rows is not None else 0)
    if not 1 <= k <= available:
        raise InvalidInputError(f"--top-k {k} must be between 1 and the corpus size ({available})")
    answers = []
    for lo in range(0, Q.shape[0], block_size):
        scores = model.score_matrix(Q[lo:lo + block_size], data.X)
        if self_rows is not None:
            scores[np.arange(scores.shape[0]), self_rows[lo:lo + block_size]] = -np.inf
        idx, vals = top_k_rows(scores, k)
        for r in range(idx.shape[0]):
            answers.append(_answer(qnames[lo + r], idx[r], vals[r], data))
    return answers


def _answer(query_id, rows, scores, data: LabelledData) -> dict:
    """One query's answer: ``results`` in the form of :meth:`~sparsesim.indexes.Index.query_records`
    (``{"id": ..., "score": ...}`` per document), and per id its ``labels`` (the class
    name, or the label value when the data set names no classes) and ``titles`` (when the data
    set has them, e.g. the Subject lines of the 20 Newsgroups sample)."""
    ids = [data.doc_id(int(j)) for j in rows]
    names = data.class_names or {}
    labels = {}
    if data.y is not None and len(data.y) == data.n_documents:
        labels = {doc: str(names.get(data.y[int(j)].item(), data.y[int(j)].item())) for doc, j in zip(ids, rows)}
    titles = {}
    stored = (data.info or {}).get("titles")
    if stored is not None and len(stored) == data.n_documents:
        titles = {doc: " ".join(str(stored[int(j)]).split()) for doc, j in zip(ids, rows)}
    return {"query": query_id, "results": [{"id": doc, "score": float(s)} for doc, s in zip(ids, scores)],
            "labels": labels, "titles": titles}


def read_queries(model, queries_path, data_options=None):
    """(names, matrix) of a query file: text (model trained on text) or vectors."""
    if _queries_are_text(model, queries_path):
        qnames, qtexts = read_query_texts(queries_path, **_text_file_columns(data_options))
        return qnames, text_queries(model, qtexts)
    qdata = load_corpus(str(queries_path), model=model, options=data_options)
    return [qdata.doc_id(r) for r in range(qdata.n_documents)], qdata.X
