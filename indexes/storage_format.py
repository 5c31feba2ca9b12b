"""Definitions shared by the writer and the reader of index directories
(:mod:`sparsesim.indexes.storage`): file names, the manifest schemas, the manifest checksum, and
this user's record of indexes whose derived arrays were checked.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from sparsesim.validation import MAX_FEATURES

FORMAT_NAME = "sparsesim-index"
FORMAT_VERSION = 5
#: the first format whose ann indexes may store the model's W in the narrow form
#: (:mod:`.ann_rerank_w`: uint16 columns, float32 values and the float64 entries apart)
NARROW_W_FORMAT = 5
#: the first format whose ann indexes store compact posting lists (:mod:`.ann_postings`); an ann
#: index of an earlier format is refused with a request to rebuild it (other kinds read as before)
COMPACT_FORMAT = 4
OLDEST_READ_VERSION = 2  # format 1 (no manifest checksum, files beside it) is refused
MANIFEST = "manifest.json"
MODEL_FILE = "model.npz"
MODEL_W = "model.W"  # format 3: the model's W as memory-mappable arrays beside a model.npz without W
#: the name of a version's data directory inside an index directory (``v-`` and 8 to 32 hex digits)
DATA_DIR_RE = re.compile(r"^v-[0-9a-f]{8,32}$")
#: a file name a manifest may list (no path separators, no leading dot, at most 64 characters)
FILE_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.]{0,63}$")
#: a sha256 digest written as 64 lower-case hex digits
HEX64_RE = re.compile(r"^[0-9a-f]{64}$")
MAX_DOCUMENTS = 2**40

MANIFEST_SCHEMA = {
    "kind": ("choice", ("exact", "ann", "embedding-exact", "embedding-ann", "compact-exact", "compact-ann")),
    "n_documents": ("int", 0, MAX_DOCUMENTS),
    "n_features": ("int", 1, MAX_FEATURES),
    "id_dtype": ("choice?", ("int", "str")),
    "model": ("dict",),
    "params": ("dict",),
    "state": ("dict",),
    "files": ("dict",),
    "data_dir": ("str?",),
    "manifest_checksum": ("str?",),
    "block_bytes": ("int?", 4096, 1 << 30),
}
MODEL_FACTS_SCHEMA = {
    "checksum": ("str",),
    "n_features": ("int", 1, MAX_FEATURES),
    "identity": ("bool",),
    "normalize": ("bool",),
}
#: index kinds over an :class:`~sparsesim.embedding.EmbeddingSimilarity` (their model facts differ)
EMBEDDING_KINDS = ("embedding-exact", "embedding-ann")
EMBEDDING_FACTS_SCHEMA = {
    "checksum": ("str",),
    "model_kind": ("choice", ("embedding-similarity",)),
    "n_features": ("int", 1, MAX_FEATURES),
    "n_components": ("int", 1, 1 << 16),
    "normalize": ("bool",),
    "identity_weight": ("float", None, None),
}
#: index kinds over a :class:`~sparsesim.compact.CompactSimilarity` (M = D + W + U V^T)
COMPACT_KINDS = ("compact-exact", "compact-ann")
COMPACT_FACTS_SCHEMA = {
    "checksum": ("str",),
    "model_kind": ("choice", ("compact-similarity",)),
    "n_features": ("int", 1, MAX_FEATURES),
    "n_components": ("int", 0, 1 << 14),
    "normalize": ("bool",),
    "nnz_w": ("int", 0, None),
}
STATE_SCHEMA = {
    "strategy_": ("choice?", ("corpus", "query")),
    "nlist_": ("int?", 1, MAX_DOCUMENTS),
    "build_seconds": ("float?", 0.0, None),
    "n_heavy_rows": ("int?", 0, MAX_FEATURES),
    "n_fit_documents": ("int?", 0, MAX_DOCUMENTS),
    "postings": ("choice?", ("expanded",)),
    "postings_length": ("int?", 1, MAX_DOCUMENTS),
    "postings_model": ("str?",),
    "read_allocation": ("choice?", ("threshold", "weighted", "uniform")),
    "rerank_memory_": ("int?", 0, 2**50),
    "calibration": ("dict?",),  # checked by AnnIndex against calibration.CALIBRATION_SCHEMA
}


def manifest_checksum(manifest: dict) -> str:
    """sha256 of the manifest's canonical JSON without its ``manifest_checksum`` key."""
    body = {k: v for k, v in manifest.items() if k != "manifest_checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, allow_nan=False).encode()).hexdigest()


def _checked_dir() -> Path:
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("sparsesim")) / "checked-indexes"


def derived_arrays_checked(manifest: dict) -> bool:
    """Whether the derived arrays of exactly this index content were checked before by this user.

    A marker named by the manifest checksum in the user's cache directory (written by this
    user's sparsesim only: after :func:`save_index`, or after a load whose derived-array check
    passed). The manifest checksum covers the sha256 of every file and of every block, so bytes
    that pass those checksums are the bytes that were checked.
    """
    checksum = manifest.get("manifest_checksum")
    return isinstance(checksum, str) and bool(HEX64_RE.match(checksum)) and (_checked_dir() / checksum).is_file()


def mark_derived_arrays_checked(checksum: str | None) -> None:
    """Record that the index of manifest checksum ``checksum`` passed (best effort: an unwritable
    cache directory only means the check runs again at the next load)."""
    if not isinstance(checksum, str) or not HEX64_RE.match(checksum):
        return
    try:
        directory = _checked_dir()
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / checksum, os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)
    except OSError:
        pass


def _verified_files_dir() -> Path:
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("sparsesim")) / "verified-files"


def file_identity(path, checksum: str | None) -> str | None:
    """A key naming one file's bytes as this index content holds them: the manifest checksum (which
    binds the file's sha256 and block digests), the file's name, and its identity on disk (device,
    inode, size, modification and status-change times in ns; any write or replacement changes the
    status-change time, which no caller can set). ``None`` when the file cannot be stat'ed."""
    if not isinstance(checksum, str) or not HEX64_RE.match(checksum):
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    facts = f"{checksum}:{Path(path).name}:{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
    return hashlib.sha256(facts.encode()).hexdigest()


def file_verified(identity: str | None) -> bool:
    """Whether every block of the file named by ``identity`` (:func:`file_identity`) was hashed
    and checked before by this user's sparsesim (or written by it), unchanged since."""
    return identity is not None and (_verified_files_dir() / identity).is_file()


def mark_file_verified(identity: str | None) -> None:
    """Record that the file named by ``identity`` was verified whole (best effort, like
    :func:`mark_derived_arrays_checked`)."""
    if identity is None:
        return
    try:
        directory = _verified_files_dir()
        directory.mkdir(parents=True, exist_ok=True)
        os.close(os.open(directory / identity, os.O_WRONLY | os.O_CREAT, 0o600))
    except OSError:
        pass
