"""Readers of raw text: ``<split>/<group>/<doc>`` corpora (folders or tar archives), a folder
with one subfolder per label, and CSV/TSV/JSONL tables, featurised with TF-IDF."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from typing import Iterator

import numpy as np

from ...exceptions import DataNotFoundError, FileFormatError, InvalidInputError
from ...validation import bounded
from ..containers import LabelledData
from .encoding import encode_labels
from .folders import read_document, walk_documents
from .formats import STREAM_ERRORS, read_text_file, table_format


def split_name(dirname: str) -> str:
    """``20news-bydate-train`` -> ``train``; other names unchanged."""
    for key in ("train", "test"):
        if dirname == key or dirname.endswith("-" + key) or dirname.endswith("_" + key):
            return key
    return dirname


def iter_text_corpus(path: str | os.PathLike, follow_symlinks: bool = False,
                     include_hidden: bool = False) -> Iterator[tuple[str, str, str, bytes]]:
    """Yield ``(split, group, doc_name, raw_bytes)`` for every document of a text corpus.

    ``path`` is either a directory laid out as ``<root>/<split>/<group>/<doc>`` (the
    20news-bydate layout; ``root`` may also be the parent of one extra top folder), or a tar
    archive (any compression) holding that layout, read without extracting to disk.
    Split folder names such as ``20news-bydate-train`` are reported as ``train``.
    Documents are yielded sorted by (split, group, doc name).

    Only regular files are read: hidden entries (names starting with ``.``, at any level),
    FIFOs, devices, sockets and archive members that are not files are skipped, and symbolic
    links leading outside the folder are not followed unless ``follow_symlinks`` (see
    :func:`~sparsesim.data.readers.folders.walk_documents`); ``include_hidden`` reads hidden
    entries too.
    """
    path = Path(path)
    if not path.exists():
        raise DataNotFoundError(f"{path}: no such file or directory")
    if path.is_dir():
        docs = []
        for doc in walk_documents(path, _MAX_CORPUS_DEPTH, follow_symlinks=follow_symlinks,
                                  include_hidden=include_hidden):
            if len(doc.parts) >= 3:
                docs.append((doc.parts[-3], doc.parts[-2], doc.parts[-1], doc))
        docs.sort(key=lambda d: (split_name(d[0]), d[1], doc_key(d[2])))
        for split, group, name, doc in docs:
            yield split_name(split), group, name, read_document(doc, os.path.join(str(path), *doc.parts))
        return
    if not path.is_file():
        raise FileFormatError(f"{path}: not a folder or a regular file (a FIFO, device or socket is not read)")
    try:
        with tarfile.open(path, mode="r:*") as tar:
            items = []
            for member in tar:
                if not member.isfile():
                    continue
                parts = [p for p in member.name.strip("/").split("/") if p not in ("", ".")]
                if len(parts) < 3 or (not include_hidden and any(p.startswith(".") for p in parts)):
                    continue
                data = tar.extractfile(member).read()
                items.append((split_name(parts[-3]), parts[-2], parts[-1], data))
    except tarfile.TarError as exc:
        raise FileFormatError(f"{path}: not a readable tar archive ({exc})") from None
    except STREAM_ERRORS as exc:
        raise FileFormatError(f"{path}: truncated or corrupt archive ({exc.__class__.__name__}: {exc})") from None
    if not items:
        raise FileFormatError(f"{path}: no documents in <split>/<group>/<doc> layout")
    items.sort(key=lambda d: (d[0], d[1], doc_key(d[2])))
    yield from items


#: folder levels below a corpus root searched for ``<split>/<group>/<doc>`` files
_MAX_CORPUS_DEPTH = 16


def doc_key(name: str):
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


def read_text_corpus(path: str | os.PathLike, encoding: str = "latin-1", splits=None, follow_symlinks: bool = False,
                     include_hidden: bool = False):
    """Read a ``<split>/<group>/<doc>`` corpus into lists (what is read: :func:`iter_text_corpus`).

    Returns
    -------
    dict with keys ``texts`` (list of str), ``groups`` (ndarray of str), ``ids`` (ndarray of
    ``"group/doc"`` str), ``split`` (ndarray of str).
    """
    texts, groups, ids, split = [], [], [], []
    for s, g, name, data in iter_text_corpus(path, follow_symlinks, include_hidden):
        if splits is not None and s not in splits:
            continue
        texts.append(data.decode(encoding, errors="replace"))
        groups.append(g)
        ids.append(f"{g}/{name}")
        split.append(s)
    if not texts:
        raise FileFormatError(f"{path}: no documents found (splits={splits})")
    return {"texts": texts, "groups": np.array(groups), "ids": np.array(ids), "split": np.array(split)}


def texts_to_data(texts, labels, ids, name, info, featurizer=None, tfidf_options=None) -> LabelledData:
    """Featurise ``texts`` (fit a new TF-IDF featuriser unless ``featurizer`` is given)."""
    from ...text import TextFeaturizer

    if not texts:
        raise FileFormatError(f"{name}: no documents found")
    if featurizer is None:
        featurizer = TextFeaturizer(**(tfidf_options or {}))
        X = featurizer.fit_transform(texts)
    else:
        X = featurizer.transform(texts)
    y, class_names = encode_labels(labels)
    id_array = None if ids is None else np.asarray([str(i) for i in ids])
    if id_array is not None and np.unique(id_array).shape[0] != id_array.shape[0]:
        raise InvalidInputError(f"{name}: document ids must be unique")
    info = dict(info, representation="TF-IDF (scikit-learn TfidfVectorizer, rows L2-normalised)")
    return LabelledData(X=X, y=y, name=name, ids=id_array, class_names=class_names, info=info,
                        texts=list(texts), featurizer=featurizer)


def read_text_folder(path: str | os.PathLike, encoding: str = "utf-8", featurizer=None,
                     tfidf_options: dict | None = None, follow_symlinks: bool = False,
                     include_hidden: bool = False) -> LabelledData:
    """A folder of text files with one subfolder per label (scikit-learn ``load_files`` layout).

    ::

        docs/
            sport/  a.txt  b.txt ...
            tech/   c.txt ...

    Every regular file directly in a label subfolder is one document (decoded with ``encoding``,
    undecodable bytes replaced); its subfolder name is its label and its path (as given, e.g.
    ``docs/sport/a.txt``) its id. ``X`` is TF-IDF from a fitted
    :class:`~sparsesim.text.TextFeaturizer` (``data.featurizer``), or from ``featurizer`` when
    given (a model's, for its queries).

    Nothing outside the folder is read and nothing blocks: hidden entries (names starting with
    ``.``: files, and folders such as ``.git``, which never become labels), FIFOs, devices and
    sockets are skipped, and symbolic links (to files or to label folders) are followed only when
    they lead to a place inside ``path``. ``follow_symlinks=True`` follows links leading outside
    too; ``include_hidden=True`` reads hidden entries. Skipped links and special files are named
    in one :class:`~sparsesim.data.readers.folders.SkippedEntryWarning`.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> for label, text in [("sport", "goal match"), ("tech", "chip code"), (".git", "not a label")]:
    ...     (root / label).mkdir()
    ...     _ = (root / label / "a.txt").write_text(text)
    >>> data = read_text_folder(root)
    >>> sorted(data.class_names.values())
    ['sport', 'tech']
    """
    import codecs

    path = Path(path)
    if not path.is_dir():
        raise DataNotFoundError(f"{path}: no such directory")
    try:
        codecs.lookup(encoding)
    except (LookupError, TypeError):
        raise InvalidInputError(f"unknown text encoding {bounded(repr(encoding), 60)} (e.g. utf-8, latin-1)") from None
    docs = walk_documents(path, 2, follow_symlinks=follow_symlinks, include_hidden=include_hidden, exact_depth=True)
    labels_seen = {p.name for p in path.iterdir() if p.is_dir() and (include_hidden or not p.name.startswith("."))}
    if not labels_seen and not docs:
        raise FileFormatError(f"{path}: expected one subfolder per label holding the text files "
                              "(e.g. docs/sport/a.txt, docs/tech/b.txt)")
    if not docs:
        raise FileFormatError(f"{path}: the label subfolders hold no files")
    ids = [os.path.join(str(path), *doc.parts) for doc in docs]
    texts = [read_document(doc, shown).decode(encoding, errors="replace") for doc, shown in zip(docs, ids)]
    labels = np.asarray([doc.parts[0] for doc in docs])
    order = np.argsort(ids, kind="stable")
    texts = [texts[i] for i in order]
    return texts_to_data(texts, labels[order], [ids[i] for i in order], str(path),
                          {"files": [str(path)], "format": "folder"}, featurizer, tfidf_options)


def read_table_rows(path: str | os.PathLike, fmt: str | None = None) -> tuple[list[dict], list[str]]:
    """The rows of a CSV / TSV (header row) or JSONL (one object per line) file, and its column
    names (CSV: the header; JSONL: every key seen, sorted). The one parser of these formats: the
    corpus reader (:func:`read_text_table`) and the query-file reader
    (:func:`sparsesim.workflows.queries.read_query_texts`) both read through it.

    Raises
    ------
    FileFormatError
        Not valid CSV, or a JSONL line that is not a JSON object.
    """
    import csv
    import json

    path = Path(path)
    fmt = fmt or table_format(path)
    raw = read_text_file(path)
    rows: list[dict] = []
    if fmt in ("csv", "tsv"):
        reader = csv.DictReader(io.StringIO(raw), delimiter="\t" if fmt == "tsv" else ",")
        try:
            rows = list(reader)
        except csv.Error as exc:
            raise FileFormatError(f"{path}: not a valid {fmt.upper()} file ({exc})") from None
        return rows, [c for c in (reader.fieldnames or []) if c is not None]
    columns: set = set()
    for lineno, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as exc:  # also integers past Python's digit limit, deep nesting
            raise FileFormatError(f"{path}:{lineno}: not a JSON object ({bounded(exc, 160)})") from None
        if not isinstance(obj, dict):
            raise FileFormatError(f"{path}:{lineno}: expected a JSON object per line, got {type(obj).__name__}")
        rows.append(obj)
        columns.update(obj)
    return rows, sorted(map(str, columns))


def read_text_table(path: str | os.PathLike, text_column: str = "text", label_column: str | None = None,
                    id_column: str | None = None, featurizer=None, tfidf_options: dict | None = None,
                    fmt: str | None = None) -> LabelledData:
    """A CSV (header row) or JSONL (one object per line) file with a text and a label column.

    Parameters
    ----------
    path : path-like
        ``.csv``, ``.tsv``, ``.jsonl`` / ``.ndjson`` (optionally compressed: ``.gz`` etc.).
    text_column, label_column, id_column : str
        Column (CSV header) or key (JSONL) names. A named column must exist. Without
        ``label_column`` the ``label`` column is used when present, else every document gets
        label 0 (a corpus to search, not to train on); without ``id_column`` the row number is
        the id.
    featurizer : TextFeaturizer, optional
        Use this fitted featuriser (a model's) instead of fitting a new one.
    fmt : {"csv", "tsv", "jsonl"}, optional
        Default: from the file name.
    """
    path = Path(path)
    rows, columns = read_table_rows(path, fmt)
    if not rows:
        raise FileFormatError(f"{path}: contains no documents")
    fmt = fmt or table_format(path)
    if text_column not in columns:
        raise InvalidInputError(f"{path}: no column {text_column!r} (columns: {', '.join(sorted(map(str, columns)))}); "
                                "name the text column with --text-column")
    for name, opt in ((label_column, "--label-column"), (id_column, "--id-column")):
        if name is not None and name not in columns:
            raise InvalidInputError(f"{path}: no column {name!r} (columns: {', '.join(sorted(map(str, columns)))}); "
                                    f"name it with {opt}")
    texts, labels, ids = [], [], []
    label_column = label_column or "label"
    use_labels = label_column in columns
    for i, row in enumerate(rows, start=1):
        text = row.get(text_column)
        if not isinstance(text, str):
            raise InvalidInputError(f"{path}: row {i} has no text in column {text_column!r}")
        texts.append(text)
        if use_labels:
            label = row.get(label_column)
            if label is None or label == "":
                raise InvalidInputError(f"{path}: row {i} has no label in column {label_column!r}")
            labels.append(str(label) if not isinstance(label, (int, float)) or isinstance(label, bool) else label)
        if id_column is not None:
            if row.get(id_column) in (None, ""):
                raise InvalidInputError(f"{path}: row {i} has no id in column {id_column!r}")
            ids.append(str(row[id_column]))
    if not use_labels:
        labels = [0] * len(texts)
    elif any(isinstance(v, str) for v in labels):
        labels = [str(v) for v in labels]
    info = {"files": [str(path)], "format": fmt, "text_column": text_column, "label_column": label_column,
            "id_column": id_column}
    return texts_to_data(texts, labels, ids if id_column is not None else None, str(path), info, featurizer,
                          tfidf_options)
