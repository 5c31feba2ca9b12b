"""Data layer: readers, the registry of named data sets, containers.

Public entry points
-------------------
``load_dataset(name_or_path, **options)``
    A registered data set (see ``list_datasets()``) or a path to a labelled svmlight file.
``list_datasets()`` / ``dataset_info(name)``
    What is registered, and which files are present in the data directory.
``fetch_dataset(name, mirror=None, force=False, progress=None)``
    Put a data set's files into the data directory (from a mirror folder or its upstream URL).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..exceptions import DataNotFoundError, InvalidInputError
from .catalog import all_datasets, get_dataset_spec, load_registered
from .containers import LabelledData
from .paths import data_home, locate
from .readers import load_svmlight, read_matrix_market, read_svmlight, read_text_corpus, tfidf

__all__ = [
    "LabelledData",
    "data_home",
    "locate",
    "load_dataset",
    "list_datasets",
    "dataset_info",
    "fetch_dataset",
    "load_svmlight",
    "read_svmlight",
    "read_matrix_market",
    "read_text_corpus",
    "tfidf",
]


def _looks_like_path(name: str) -> bool:
    return os.sep in name or "/" in name or Path(name).suffix != "" or Path(name).exists()


def load_dataset(name_or_path, **options) -> LabelledData:
    """Load a registered data set, or a labelled svmlight file given by path.

    Parameters
    ----------
    name_or_path : str or path-like
        A registered name (``news20``, ``news20-sample``, ... see :func:`list_datasets`) or the
        path of a labelled svmlight/LIBSVM file (plain, .bz2, .xz or .gz), loaded as stored.
    **options
        For registered sets: loader options, e.g. ``representation="raw"`` (see each loader).
        For files: ``n_features`` (int) and ``normalize`` (bool, L2-normalise rows; default False).

    Raises
    ------
    UnknownNameError
        Neither a registered name nor an existing file.
    DataNotFoundError
        A registered data set whose files are not in the data directory.
    FileFormatError, InvalidInputError
        Unreadable or invalid files, unknown options.
    """
    if isinstance(name_or_path, os.PathLike):
        name_or_path = os.fspath(name_or_path)
    name = str(name_or_path)
    specs = all_datasets()
    if name in specs:
        return load_registered(name, **options)
    if _looks_like_path(name):
        path = Path(name).expanduser()
        if not path.exists():
            raise DataNotFoundError(
                f"{name}: no such file (and not a registered data set; known: {', '.join(specs)})"
            )
        unknown = set(options) - {"n_features", "normalize"}
        if unknown:
            raise InvalidInputError(
                f"unknown option(s) {', '.join(sorted(unknown))} for an svmlight file; known: n_features, normalize"
            )
        return load_svmlight(path, n_features=options.get("n_features"), normalize=bool(options.get("normalize", False)))
    return load_registered(name, **options)  # raises UnknownNameError listing the known names


def _file_status(spec) -> list[dict]:
    home = data_home()
    out = []
    for f in spec.files:
        path = home / f.relpath
        out.append(
            {
                "relpath": f.relpath,
                "path": str(path),
                "present": path.is_file(),
                "sha256": f.sha256,
                "url": f.url,
                "content_sha256": f.content_sha256,
            }
        )
    return out


def dataset_info(name: str) -> dict:
    """Facts about registered data set ``name`` and the state of its files in the data directory.

    Returns
    -------
    dict
        ``name``, ``kind``, ``description``, ``representation``, ``source``, ``data_home``,
        ``files`` (list of dicts: relpath, path, present, sha256, url, content_sha256),
        ``available`` (all files present, or embedded), ``extra`` (JSON-friendly family facts).
    """
    spec = get_dataset_spec(name)
    files = _file_status(spec)
    embedded = bool(spec.extra.get("embedded"))
    return {
        "name": spec.name,
        "kind": spec.kind,
        "description": spec.description,
        "representation": spec.representation,
        "source": spec.source,
        "data_home": str(data_home()),
        "files": files,
        "embedded": embedded,
        "available": embedded or all(f["present"] for f in files),
        "extra": {k: v for k, v in spec.extra.items() if isinstance(v, (str, int, float, bool, tuple, list))},
    }


def list_datasets() -> list[dict]:
    """One dict per registered data set: name, kind, description, representation, source, available."""
    out = []
    for name in all_datasets():
        info = dataset_info(name)
        out.append({k: info[k] for k in ("name", "kind", "description", "representation", "source", "available")})
    return out


def fetch_dataset(name, mirror=None, force=False, progress=None):
    """See :func:`sparsesim.data.fetch.fetch_dataset`."""
    from .fetch import fetch_dataset as _fetch

    return _fetch(name, mirror=mirror, force=force, progress=progress)
