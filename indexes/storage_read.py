"""Reading index directories (:mod:`sparsesim.indexes.storage`): the schema-checked manifest, the
files' sizes and checksums, the arrays with their structural checks, and the arrays a
memory-mapped load checks block by block on first use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from sparsesim.exceptions import FileFormatError, InvalidInputError, ModelMismatchError
from sparsesim.compact import CompactSimilarity
from sparsesim.embedding import EmbeddingSimilarity
from sparsesim.models import BilinearSimilarity
from sparsesim.persistence import csr_from_arrays, file_sha256, loads_strict, read_npy
from sparsesim.validation import bounded, check_csr_arrays, check_meta

from .ann_postings import block_checks as compact_block_checks
from .ann_rerank_w import REST as NARROW_W_REST
from .array_checks import F64, I32, I64, check_csr_structure, check_embedding_arrays, check_index_arrays
from .blocks import BLOCKS_FILE, DIGEST_BYTES, BlockGuard, finite_check, index_check, n_blocks
from .storage_format import (DATA_DIR_RE, FILE_NAME_RE, HEX64_RE, COMPACT_FACTS_SCHEMA, COMPACT_KINDS,
                             EMBEDDING_FACTS_SCHEMA, EMBEDDING_KINDS, FORMAT_NAME,
                             FORMAT_VERSION, MANIFEST, MANIFEST_SCHEMA, MODEL_FACTS_SCHEMA, MODEL_FILE, MODEL_W,
                             OLDEST_READ_VERSION, STATE_SCHEMA, file_identity, file_verified, manifest_checksum,
                             mark_file_verified)


def read_manifest(directory) -> dict:
    """The parsed manifest of an index directory, validated against its schema and checksum."""
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise FileFormatError(f"{directory}: no such index directory")
    path = directory / MANIFEST
    if not path.is_file():
        raise FileFormatError(f"{directory}: not a sparsesim index directory (no {MANIFEST})")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise FileFormatError(f"{path}: not readable ({exc.strerror or exc})") from None
    try:
        manifest = loads_strict(raw, str(path))
    except FileFormatError as exc:
        raise FileFormatError(f"{path}: corrupt manifest ({bounded(exc, 200)})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise FileFormatError(f"{path}: not a sparsesim index manifest")
    version = manifest.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise FileFormatError(f"{path}: missing or invalid format_version")
    if version > FORMAT_VERSION:
        raise FileFormatError(f"{path}: index format version {version} is newer than this sparsesim "
                              f"({FORMAT_VERSION}); upgrade sparsesim")
    if version < OLDEST_READ_VERSION:
        # format 1 had no manifest checksum and no data directory: nothing would bind its files
        raise FileFormatError(f"{path}: index format version {version} is no longer read (it carries no "
                              f"manifest checksum); rebuild the index with `sparsesim index build`")
    check_meta(manifest, MANIFEST_SCHEMA, str(path))
    if manifest.get("manifest_checksum") != manifest_checksum(manifest):
        raise FileFormatError(f"{path}: manifest checksum mismatch (file corrupt or modified)")
    data_dir = manifest.get("data_dir")
    if not isinstance(data_dir, str) or not DATA_DIR_RE.match(data_dir):
        raise FileFormatError(f"{path}: invalid data_dir {bounded(repr(data_dir), 60)}")
    facts_schema = (EMBEDDING_FACTS_SCHEMA if manifest["kind"] in EMBEDDING_KINDS else
                    COMPACT_FACTS_SCHEMA if manifest["kind"] in COMPACT_KINDS else MODEL_FACTS_SCHEMA)
    check_meta(manifest["model"], facts_schema, f"{path} (model)")
    check_meta(manifest["state"], STATE_SCHEMA, f"{path} (state)")
    if manifest["model"]["n_features"] != manifest["n_features"]:
        raise FileFormatError(f"{path}: n_features {manifest['n_features']} differs from the model's "
                              f"{manifest['model']['n_features']}")
    if len(manifest["files"]) > 64:
        raise FileFormatError(f"{path}: lists {len(manifest['files'])} files (an index has at most 64)")
    for fname, facts in manifest["files"].items():
        if not FILE_NAME_RE.match(fname) or fname == MANIFEST:
            raise FileFormatError(f"{path}: invalid file name {bounded(repr(fname), 80)}")
        check_meta(facts, {"bytes": ("int", 0, None), "sha256": ("str",)}, f"{path} ({fname})")
        if not HEX64_RE.match(facts["sha256"]):
            raise FileFormatError(f"{path}: invalid sha256 for {fname}")
    return manifest


def _data_path(directory: Path, manifest: dict) -> Path:
    data_dir = manifest.get("data_dir")
    if not isinstance(data_dir, str) or not DATA_DIR_RE.match(data_dir):  # (read_manifest refused it already)
        raise FileFormatError(f"{directory / MANIFEST}: invalid data_dir {bounded(repr(data_dir), 60)}")
    path = directory / data_dir
    if path.is_symlink() or not path.is_dir():
        raise FileFormatError(f"{path}: missing (the index directory is incomplete)")
    return path


def _verify_files(directory: Path, manifest: dict, verify: bool, deferred=()):
    """Check every file's size, and its sha256 when ``verify`` (except the ``deferred`` ones,
    whose blocks are checked on first use)."""
    for fname, facts in manifest["files"].items():
        path = directory / fname
        if path.is_symlink() or not path.is_file():
            raise FileFormatError(f"{path}: missing (the index directory is incomplete)")
        size = path.stat().st_size
        if size != facts["bytes"]:
            raise FileFormatError(f"{path}: {size} bytes, expected {facts['bytes']} (file truncated or modified)")
        if verify and fname not in deferred and file_sha256(path) != facts["sha256"]:
            raise FileFormatError(f"{path}: sha256 mismatch (file corrupt or modified)")


def _block_digests(directory: Path, manifest: dict, verify: bool) -> dict:
    """{file name: its block digests} from ``blocks.sha256`` (already sha256-checked when ``verify``)."""
    block_bytes = manifest.get("block_bytes")
    files = manifest["files"]
    if block_bytes is None or BLOCKS_FILE not in files:
        return {}
    names = sorted(f for f in files if f != BLOCKS_FILE)
    expected = sum(n_blocks(files[f]["bytes"], block_bytes) for f in names) * DIGEST_BYTES
    if files[BLOCKS_FILE]["bytes"] != expected:
        raise FileFormatError(f"{directory / BLOCKS_FILE}: {files[BLOCKS_FILE]['bytes']} bytes, expected {expected} "
                              "for the files of the manifest")
    raw = (directory / BLOCKS_FILE).read_bytes()
    if len(raw) != expected:
        raise FileFormatError(f"{directory / BLOCKS_FILE}: changed while reading")
    out, at = {}, 0
    for fname in names:
        size = n_blocks(files[fname]["bytes"], block_bytes) * DIGEST_BYTES
        out[fname] = raw[at:at + size]
        at += size
    return out


def _check_model(model: BilinearSimilarity, facts: dict, directory: Path, checksum: bool = True):
    if not isinstance(model, BilinearSimilarity):
        raise InvalidInputError(f"model must be a BilinearSimilarity, got {type(model).__name__}")
    if model.n_features != int(facts["n_features"]):
        raise ModelMismatchError(f"{directory}: the index was built for {facts['n_features']} features, "
                                 f"the model has {model.n_features}")
    if model.identity != bool(facts["identity"]) or model.normalize != bool(facts["normalize"]):
        raise ModelMismatchError(f"{directory}: the model's identity/normalize flags differ from the index's")
    if not checksum:
        return
    checksum = model.checksum()
    if checksum != facts["checksum"]:
        raise ModelMismatchError(f"{directory}: the index was built with model {facts['checksum'][:12]}, "
                                 f"not with this model ({checksum[:12]})")


@dataclass
class StoredIndex:
    """What an index directory holds, read and verified by :func:`read_index`.

    Attributes
    ----------
    manifest : dict
        The schema-checked manifest.
    model : BilinearSimilarity
        The caller's model (checked against the manifest) or the stored copy.
    arrays : dict of str to ndarray
        Every ``NAME.npy`` file by ``NAME`` (memory-mapped read-only when asked), structurally
        checked (:func:`check_index_arrays`).
    extra_files : dict of str to Path
        The other files (e.g. ``faiss.index``), for the index class to read.
    directory : Path
    guards : dict of str to BlockGuard
        For a memory-mapped load, the arrays (by ``NAME``, including ``model.W.indices`` and
        ``model.W.data`` of the stored model) whose blocks are checked on first use; their
        values have not been read yet.
    model_checksum_deferred : bool
        The stored model's W is memory-mapped and checked on use: its checksum against the
        manifest is left to :func:`check_stored_model`.
    """

    manifest: dict
    model: BilinearSimilarity
    arrays: dict
    extra_files: dict
    directory: Path
    guards: dict = field(default_factory=dict)
    model_checksum_deferred: bool = False

    @property
    def kind(self) -> str:
        return self.manifest["kind"]


def read_index(directory, model: BilinearSimilarity | None = None, mmap: bool = False,
               verify: bool = True) -> StoredIndex:
    """Read and verify an index directory written by :func:`save_index`, refusing anything inconsistent.

    Knows no index class: :func:`sparsesim.indexes.load_index` turns the result into the index
    of its kind. Each file is checked once; with ``model`` given, the stored copy of the model is
    neither read nor hashed.

    Parameters
    ----------
    directory : path-like
    model : BilinearSimilarity, optional
        The model the index must belong to (checked against the manifest's checksum); default:
        the copy stored in the index.
    mmap : bool, default False
        Memory-map the arrays read-only. For a format-3 index the large arrays
        (:func:`lazy_checks`) are then checked block by block on first use (``guards``) instead
        of whole at load.
    verify : bool, default True
        Check every file's sha256 (whole at load, or per block on first use; sizes, the
        manifest's schema and checksum, dtypes and the structural checks of all arrays always
        run).

    Raises
    ------
    FileFormatError
        Not an index directory, unknown format, missing, truncated, corrupt or inconsistent file.
    ModelMismatchError
        ``model`` is not the model the index was built with.
    """
    directory = Path(directory).expanduser()
    manifest = read_manifest(directory)
    data = _data_path(directory, manifest)
    n, d = manifest["n_documents"], manifest["n_features"]
    files = dict(manifest["files"])
    split_model = _model_w_layout(manifest, directory)
    # an ann index of format 5 stores W in the narrow form (indexes/ann_rerank_w.py): the index
    # takes its arrays as they are, and rebuilds the model's W only when asked for the model
    narrow_w = split_model and any(f"{name}.npy" in files for name in NARROW_W_REST)
    if narrow_w and (manifest["kind"] != "ann" or not all(f"{name}.npy" in files for name in NARROW_W_REST)):
        raise FileFormatError(f"{directory / MANIFEST}: lists model.W.rest_* arrays, which only a complete ann "
                              "index of format 5 holds")
    if model is not None:  # the caller's model replaces the stored copy
        for fname in (MODEL_FILE, *(f"{MODEL_W}.{part}.npy" for part in ("indptr", "indices", "data")),
                      *(f"{name}.npy" for name in NARROW_W_REST)):
            files.pop(fname, None)
    lazy = {}
    if mmap and manifest.get("block_bytes") is not None and BLOCKS_FILE in files:
        lazy = {name: check for name, check in lazy_checks(n, d).items() if f"{name}.npy" in files}
    deferred = {f"{name}.npy" for name in lazy}
    _verify_files(data, {**manifest, "files": files}, verify, deferred)
    digests = _block_digests(data, manifest, verify) if deferred and verify else {}
    arrays, extra = {}, {}
    for fname in files:
        if fname in (MODEL_FILE, BLOCKS_FILE):
            continue
        path = data / fname
        if fname.endswith(".npy"):
            arrays[fname[:-4]] = read_npy(path, mmap=mmap)
        else:
            extra[fname] = path
    # a file this user verified whole (or wrote) before, unchanged since, needs no guard
    # (:func:`~sparsesim.indexes.storage_format.file_identity`: taken after mapping it)
    identities = {name: file_identity(data / f"{name}.npy", manifest.get("manifest_checksum"))
                  for name in lazy} if verify else {}
    guards = {name: BlockGuard(data / f"{name}.npy", arrays[name], digests[f"{name}.npy"] if verify else None,
                               check, manifest["block_bytes"], on_complete=partial(mark_file_verified, identities.get(name)))
              for name, check in lazy.items() if not file_verified(identities.get(name))}
    stored = manifest["model"]
    if manifest["kind"] in EMBEDDING_KINDS or manifest["kind"] in COMPACT_KINDS:
        return _read_embedding_index(manifest, model, arrays, extra, directory, data, guards, lazy)
    if model is None:
        if MODEL_FILE not in manifest["files"]:
            raise FileFormatError(f"{directory}: no stored model; pass the model")
        model = BilinearSimilarity.load(data / MODEL_FILE)
        if split_model:
            if model.W.nnz:
                raise FileFormatError(f"{data / MODEL_FILE}: holds W although the index stores it beside it")
            if not narrow_w:
                model.W = _stored_w(arrays, d, lazy, directory)
            for key in ("nnz", "sparsity"):
                model.metadata.pop(key, None)
            if isinstance(stored.get("nnz"), int):
                model.metadata["nnz"] = stored["nnz"]
        # a W checked block by block on use is hashed against the manifest's model checksum by
        # load_index, once its blocks are verified (check_stored_model), not here: that reads all of W
        # (a narrow W: once the index rebuilds the model's W from it)
        deferred_checksum = narrow_w or any(k.startswith(MODEL_W) for k in lazy)
        try:
            _check_model(model, stored, directory, checksum=False)
        except ModelMismatchError as exc:
            raise FileFormatError(f"{exc} (stored model file inconsistent with the manifest)") from None
        if not deferred_checksum:
            _check_stored_checksum(model, stored["checksum"], directory)
    else:
        deferred_checksum = False
        _check_model(model, stored, directory)
    try:
        check_index_arrays(manifest["kind"], arrays, n, d, manifest, lazy=set(lazy))
    except InvalidInputError as exc:
        raise FileFormatError(f"{directory}: {bounded(exc, 300)}") from None
    return StoredIndex(manifest, model, arrays, extra, directory, guards, deferred_checksum)


#: what an index over a model stored whole in ``model.npz`` (an embedding or compact model) must
#: match in the manifest's model facts: the model class and the facts compared, by index kind
_WHOLE_MODEL_KINDS = {
    **{kind: (EmbeddingSimilarity, ("n_features", "n_components", "normalize", "identity_weight", "lexical_power"))
       for kind in EMBEDDING_KINDS},
    **{kind: (CompactSimilarity, ("n_features", "n_components", "normalize")) for kind in COMPACT_KINDS},
}


def _read_embedding_index(manifest, model, arrays, extra, directory: Path, data: Path, guards,
                          lazy) -> StoredIndex:
    """The model and arrays of an index over an :class:`~sparsesim.embedding.EmbeddingSimilarity`
    or a :class:`~sparsesim.compact.CompactSimilarity` (its whole model file is hashed at load:
    its dense factors are read whole)."""
    facts = manifest["model"]
    model_class, keys = _WHOLE_MODEL_KINDS[manifest["kind"]]
    if model is None:
        if MODEL_FILE not in manifest["files"]:
            raise FileFormatError(f"{directory}: no stored model; pass the model")
        model = model_class.load(data / MODEL_FILE)
        mismatch = FileFormatError
    else:
        mismatch = ModelMismatchError
    if not isinstance(model, model_class):
        raise InvalidInputError(f"this index serves a {model_class.__name__}; got a {type(model).__name__}")
    for key in keys:
        value = getattr(model, key)
        if facts.get(key, 1.0 if key == "lexical_power" else None) != value:
            raise mismatch(f"{directory}: the index was built for a model with {key}={facts.get(key)!r}, this "
                           f"model has {value!r}")
    checksum = model.checksum()
    if checksum != facts["checksum"]:
        raise mismatch(f"{directory}: the index was built with model {facts['checksum'][:12]}, not with this "
                       f"model ({checksum[:12]})")
    n, d = manifest["n_documents"], manifest["n_features"]
    sparse = model_class is CompactSimilarity or model.identity_weight != 0.0
    try:
        check_embedding_arrays(arrays, n, d, model.n_components, manifest, lazy=set(lazy), sparse=sparse)
    except InvalidInputError as exc:
        raise FileFormatError(f"{directory}: {bounded(exc, 300)}") from None
    return StoredIndex(manifest, model, arrays, extra, directory, guards, False)


def check_stored_model(stored: StoredIndex, model: BilinearSimilarity) -> None:
    """The stored model whose checksum :func:`read_index` deferred (a memory-mapped W), against the
    manifest's model checksum; ``model`` must be the index's model with every W block verified.

    Raises
    ------
    FileFormatError
        The stored W is not the model the manifest names (altered, every checksum recomputed).
    """
    if stored.model_checksum_deferred:
        _check_stored_checksum(model, stored.manifest["model"]["checksum"], stored.directory)


def _check_stored_checksum(model: BilinearSimilarity, want: str, directory: Path):
    got = model.checksum()
    if got != want:
        raise FileFormatError(f"{directory}: the stored model ({got[:12]}) is not the model the manifest "
                              f"names ({want[:12]}); the file was altered")


def _model_w_layout(manifest: dict, directory: Path) -> bool:
    """Whether W is stored beside ``model.npz`` (all three CSR arrays ``model.W.*.npy``) rather than
    inside it or not at all (none of them; a shard's model is stored once above it); a manifest
    listing some of the three is refused."""
    files = manifest["files"]
    present = [part for part in ("indptr", "indices", "data") if f"{MODEL_W}.{part}.npy" in files]
    if len(present) not in (0, 3):
        raise FileFormatError(f"{directory / MANIFEST}: lists {', '.join(f'{MODEL_W}.{p}.npy' for p in present)} "
                              f"but not all of {MODEL_W}.indptr/indices/data (the stored model is incomplete)")
    return bool(present)


def lazy_checks(n: int, d: int) -> dict:
    """The arrays a memory-mapped load checks block by block on first use, with each block's check
    (``postings.indices`` / ``.data``: the exact index's and the embedding index's CSR lists;
    ``postings.ids`` ...: the ann index's compact lists)."""
    return {"corpus.indices": index_check(d), "corpus.data": finite_check,
            "postings.indices": index_check(n), "postings.data": finite_check, **compact_block_checks(n),
            "heavy.Z": finite_check, f"{MODEL_W}.indices": index_check(d), f"{MODEL_W}.data": finite_check}


def _stored_w(arrays: dict, d: int, lazy, directory: Path):
    """W of a format-3 index from its arrays (removed from ``arrays``): checked whole, or (named in
    ``lazy``) its ``indptr`` now and its indices and values block by block on use (or by an earlier
    verification of the same file)."""
    parts = {part: arrays.pop(f"{MODEL_W}.{part}", None) for part in ("indptr", "indices", "data")}
    if any(v is None for v in parts.values()):
        raise FileFormatError(f"{directory}: incomplete model arrays {MODEL_W}.*")
    try:
        if f"{MODEL_W}.data" in lazy:
            check_csr_structure(parts["indptr"], parts["indices"], parts["data"], (d, d), "W", F64)
        else:
            check_csr_arrays(parts["indptr"], parts["indices"], parts["data"], (d, d), name="W",
                             data_dtypes=(F64,), sorted_indices=True)
            if parts["indptr"].dtype != I64 or parts["indices"].dtype != I32:
                raise InvalidInputError("W index arrays must be int64/int32")
    except InvalidInputError as exc:
        raise FileFormatError(f"{directory}: {bounded(exc, 300)}") from None
    W = csr_from_arrays({f"W.{k}": v for k, v in parts.items()}, "W", (d, d))
    if f"{MODEL_W}.data" not in lazy:
        W.has_sorted_indices = True
        W.has_canonical_format = True
    return W
