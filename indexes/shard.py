"""One shard of a sharded index: an ordinary index plus the global position of each document.

A :class:`Shard` lives in the client process or on a Dask worker; the module-level functions
here are what a worker runs to build, load or call one (they must be importable there, so they
are plain functions, never closures). :func:`merge_parts` merges the per-shard top-k lists into
the answer of one index over the whole corpus.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from sparsesim.csr_rows import row_range
from sparsesim.exceptions import FileFormatError, InvalidInputError, ModelMismatchError
from sparsesim.models import BilinearSimilarity
from sparsesim.persistence import atomic_write, file_sha256

from .kinds import INDEX_KINDS
from .loading import load_index
from .blocks import BLOCKS_FILE, DIGEST_BYTES, n_blocks
from .storage import MODEL_W, manifest_checksum, save_index

__all__ = ["Shard", "merge_parts", "stack_parts"]

MANIFEST = "manifest.json"
MODEL_FILE = "model.npz"
_KINDS = INDEX_KINDS


class Shard:
    """An index over some documents plus the global position of each of its rows.

    Parameters
    ----------
    index : Index
        The shard's own index (ids are the user ids of its documents).
    positions : ndarray of int64
        Position of every row in the whole sharded corpus (increasing).
    """

    def __init__(self, index, positions):
        self.index = index
        self.positions = np.asarray(positions, dtype=np.int64)
        if self.positions.shape != (index.n_documents,):
            raise InvalidInputError(f"a shard of {index.n_documents} documents needs as many positions, "
                                    f"got {self.positions.shape}")

    @property
    def n_documents(self) -> int:
        return self.index.n_documents

    def search(self, Qp, k: int, n_jobs: int = 1, options: dict | None = None):
        """Per query the ``min(k, n)`` best (positions, scores, ids); ``Qp`` already prepared.

        ``options`` are the index kind's search options (e.g. ``{"nprobe": 64}`` for ann).
        """
        k = min(k, self.n_documents)
        rows, scores = self.index._query_rows(Qp, k, n_jobs, **(options or {}))
        return self.positions[rows], scores, self.index.ids_[rows]

    @property
    def expands_queries(self) -> bool:
        """Whether a search transforms the query block with the model first (exact ``"query"``
        strategy); such shards can share one transformed block (:meth:`expand`)."""
        return self.index.expands_queries

    def expand(self, Qp, lo: int, hi: int) -> np.ndarray:
        """The transformed block of queries ``lo:hi`` of ``Qp``, for :meth:`search_expanded` of
        any shard under the same model (features x queries, dense)."""
        return self.index._expand(row_range(Qp, lo, hi))

    def search_expanded(self, qmt, k: int, n_jobs: int = 1):
        """:meth:`search` for one query block already transformed by :meth:`expand`."""
        k = min(k, self.n_documents)
        rows, scores = self.index._score_expanded(qmt, k, n_jobs)
        return self.positions[rows], scores, self.index.ids_[rows]

    def clashes(self, ids) -> np.ndarray:
        """The ``ids`` that are already ids of this shard."""
        ids = np.asarray(ids)
        if ids.size == 0 or (ids.dtype.kind == "i") != (self.index.ids_.dtype.kind == "i"):
            return ids[:0]
        return np.intersect1d(self.index.ids_, ids)

    def add(self, Xp, ids, positions):
        self.index.add(Xp, ids=ids)
        self.positions = np.concatenate([self.positions, np.asarray(positions, dtype=np.int64)])
        return self.n_documents

    def shift(self, offset: int):
        self.positions = self.positions + int(offset)
        return self.n_documents

    def facts(self) -> dict:
        return {"n_documents": self.n_documents, "id_kind": "int" if self.index.ids_.dtype.kind == "i" else "str",
                "expands_queries": self.expands_queries}

    def ids(self) -> np.ndarray:
        return self.index.ids_

    def save(self, directory, name: str) -> dict:
        """Write ``directory/name/`` (the index) and ``directory/name.positions.npy``; their facts."""
        directory = Path(directory)
        save_index(self.index, directory / name)
        _drop_model_copy(directory / name)  # the model is stored once, beside the shards
        pos_file = directory / f"{name}.positions.npy"
        with open(pos_file, "wb") as handle:
            np.save(handle, self.positions, allow_pickle=False)
            handle.flush()
            os.fsync(handle.fileno())
        out = {}
        for fname in (f"{name}/{MANIFEST}", f"{name}.positions.npy"):
            path = directory / fname
            out[fname] = {"bytes": path.stat().st_size, "sha256": file_sha256(path)}
        return out


def _drop_model_copy(shard_dir: Path):
    """Remove the model (``model.npz`` and the ``model.W.*.npy`` arrays) from a freshly written
    shard directory, from its manifest and from its block digests.

    A shard is loaded with the model stored once at the top of the sharded index (whose
    manifest records the shard manifest's sha256 and the model's checksum).
    """
    manifest_path = shard_dir / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    files = manifest.get("files", {})
    dropped = [f for f in files if f == MODEL_FILE or f.startswith(f"{MODEL_W}.")]
    if not dropped:
        return
    data = shard_dir / str(manifest.get("data_dir") or "")
    if BLOCKS_FILE in files and manifest.get("block_bytes") is not None:
        # blocks.sha256 holds the block digests of every file in name order: keep the others'
        raw, kept, at = (data / BLOCKS_FILE).read_bytes(), [], 0
        for fname in sorted(f for f in files if f != BLOCKS_FILE):
            size = n_blocks(files[fname]["bytes"], manifest["block_bytes"]) * DIGEST_BYTES
            if fname not in dropped:
                kept.append(raw[at:at + size])
            at += size
        atomic_write(data / BLOCKS_FILE, lambda handle: handle.write(b"".join(kept)))
        files[BLOCKS_FILE] = {"bytes": (data / BLOCKS_FILE).stat().st_size, "sha256": file_sha256(data / BLOCKS_FILE)}
    for fname in dropped:
        files.pop(fname)
        (data / fname).unlink()
    if "manifest_checksum" in manifest:
        manifest["manifest_checksum"] = manifest_checksum(manifest)
    with open(manifest_path, "w") as handle:
        json.dump(manifest, handle, indent=2, sort_keys=True, allow_nan=False)
        handle.flush()
        os.fsync(handle.fileno())


def build_shard(model, X, ids, start, kind, params, n_jobs):
    index = _KINDS[kind](model, n_jobs=n_jobs, **params).fit(X, ids=ids)
    return Shard(index, np.arange(start, start + index.n_documents, dtype=np.int64))


def build_shard_from_file(model, path, loader, kind, params, n_jobs):
    X, ids = loader(path)
    return build_shard(model, X, ids, 0, kind, params, n_jobs)


def load_shard(shard_dir, positions_file, model, mmap, verify, n_jobs, warm_up=True):
    index = load_index(shard_dir, model=model, mmap=mmap, verify=verify, n_jobs=n_jobs, warm_up=warm_up)
    try:
        positions = np.load(positions_file, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise FileFormatError(f"{positions_file}: not a readable array ({exc})") from None
    if positions.dtype.kind != "i" or positions.shape != (index.n_documents,):
        raise FileFormatError(f"{positions_file}: {positions.shape} {positions.dtype}, expected "
                              f"({index.n_documents},) integers")
    return Shard(index, positions)


def read_model(path, checksum):
    model = BilinearSimilarity.load(path)
    if model.checksum() != checksum:
        raise ModelMismatchError(f"{path}: the model file a worker read is not the model of this index "
                                 f"(the workers must see the same file as the client)")
    return model


def call_shard(shard, method, *args, **kwargs):
    return getattr(shard, method)(*args, **kwargs)


def stack_parts(parts):
    """Per-block (positions, scores, ids) of one shard, stacked over the query blocks."""
    return tuple(np.vstack([p[i] for p in parts]) for i in range(3))


def merge_parts(parts, k: int):
    """Merge per-shard (positions, scores, ids) lists into the k best per query: (ids, scores)."""
    pos = np.hstack([p for p, _, _ in parts])
    val = np.hstack([v for _, v, _ in parts])
    ids = np.hstack([i for _, _, i in parts])
    order = np.lexsort((pos, -val), axis=1)[:, :k]
    return np.take_along_axis(ids, order, axis=1), np.take_along_axis(val, order, axis=1)

