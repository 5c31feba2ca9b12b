"""Checkpoints of the block-wise ann build (:func:`~sparsesim.indexes.ann_blockwise.build_ann_blockwise`
with ``resume=True``): a build that stopped continues after its last finished block.

The build stages its files in ``<index>.partial/`` beside the index directory (instead of a
temporary directory removed when the process ends) and records, after the corpus pass and after
each block of the second pass, a checkpoint (``checkpoint.json``, written atomically) naming:

* the fingerprint of everything the index depends on: the model's checksum, the corpus (its
  files' paths, sizes and modification times, its shape, stored entries and a sha256 of the row
  pointers indexed), the number of documents, the build plan (block rows, posting list length,
  bound on heavy rows), the index parameters and the format versions;
* the documents done and the row width of the re-ranking table Z (``heavy.Z.npy``, appended and
  fsynced before the checkpoint names its length);
* the document frequencies of the corpus pass (``df.npy``) and the per-feature heaps after the
  last block (``heaps.<done>.vals.npy`` / ``.docs.npy``), with a sha256 of their contents;
* the sizes and modification times of the prepared corpus files, and the seconds spent so far.

A new checkpoint is complete on disk before ``checkpoint.json`` names it; the previous heaps
are removed after. Loading checks all of it (strict JSON, ``.npy`` headers against file sizes,
shapes, dtypes, checksums, file sizes) and answers either a usable state or the reason it is
not usable (another model, corpus or plan; damaged or missing files), never a mix.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

import numpy as np

from sparsesim import __version__
from sparsesim.exceptions import FileFormatError, UnsafeTargetError
from sparsesim.persistence.npy_stream import NpyAppender
from sparsesim.persistence import (arrays_checksum, atomic_write, dumps_strict, fsync_dir, json_ready, loads_strict,
                                   read_npy, target_lock)

from .storage_format import FORMAT_VERSION

__all__ = ["BuildCheckpoint", "build_fingerprint", "staging_path", "CHECKPOINT_VERSION"]

CHECKPOINT_FORMAT = "sparsesim-blockwise-build"
CHECKPOINT_VERSION = 1
_MARKER = "staging.json"  # written when the directory is created: it is ours to clear
_STATE = "checkpoint.json"
_SAVE = "save"  # hard links handed to the index writer (it moves them; the staged names stay)


def staging_path(directory) -> Path:
    """The staging directory of a resumable build of index ``directory``: ``<directory>.partial``."""
    directory = Path(directory)
    return directory.with_name(directory.name + ".partial")


def _plain(value):
    value = json_ready(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return repr(value)  # e.g. a random Generator: never equal across processes, so never resumed


def build_fingerprint(model_checksum: str, corpus, n_documents: int, plan: dict, params: dict) -> dict:
    """What a block-wise build's result depends on (JSON-ready), compared whole on resume.

    ``corpus`` is a :class:`~sparsesim.data.corpus_files.CorpusFiles`; its files are identified
    by path, size and modification time, and the row pointers of the ``n_documents`` indexed by
    their sha256. ``plan`` holds the block rows, posting list length and heavy-row bound.
    """
    files = {}
    for name, path in sorted(corpus.files.items()):
        st = os.stat(path)
        files[name] = {"path": str(Path(path).resolve()), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}
    return {"format": CHECKPOINT_FORMAT, "checkpoint_version": CHECKPOINT_VERSION, "index_format": FORMAT_VERSION,
            "sparsesim_version": __version__, "model": str(model_checksum),
            "corpus": {"files": files, "shape": list(corpus.shape), "nnz": int(corpus.nnz),
                       "indptr_sha256": arrays_checksum({"indptr": corpus.indptr[:n_documents + 1]})},
            "n_documents": int(n_documents), "plan": _plain(plan), "params": _plain(params)}


_PARTS = {"model": "the model", "corpus": "the corpus", "n_documents": "the number of documents",
          "plan": "the build plan (memory budget, list length or heavy rows)", "params": "the index parameters"}


def _differences(old: dict, new: dict) -> str:
    changed = [_PARTS.get(key, key) for key in new if old.get(key) != new[key]]
    return ", ".join(changed) or "its format"


def _file_facts(path: Path) -> dict:
    st = os.stat(path)
    return {"bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


def _save_array(path: Path, arr: np.ndarray) -> None:
    atomic_write(path, lambda handle: np.save(handle, arr, allow_pickle=False))


def _load_array(path: Path, dtype, shape: tuple, checksum: str, name: str) -> np.ndarray:
    arr = read_npy(path)  # header checked against the file size; no pickle
    if arr.dtype != np.dtype(dtype) or arr.shape != tuple(shape):
        raise FileFormatError(f"{path.name} holds {arr.dtype} {arr.shape}, expected {np.dtype(dtype)} {tuple(shape)}")
    if arrays_checksum({name: arr}) != checksum:
        raise FileFormatError(f"{path.name}: its contents do not match the checkpoint's checksum")
    return arr


class BuildCheckpoint:
    """The staging directory of one resumable block-wise build and its checkpoints.

    Use it as a context manager: it holds the directory's writer lock (a second build of the
    same index fails at once with :class:`~sparsesim.exceptions.ConcurrentWriteError`).

    Parameters
    ----------
    path : path-like
        The staging directory (:func:`staging_path`).
    fingerprint : dict
        :func:`build_fingerprint` of this build.
    """

    def __init__(self, path, fingerprint: dict):
        self.path = Path(path)
        self.fingerprint = fingerprint
        self.written = 0  # checkpoints written by this process
        self.seconds = 0.0  # and the seconds they took
        self.nbytes = 0  # bytes of the last one (heaps and df; Z is appended anyway)
        self._stack = None
        self._heaps = []  # files of the checkpoint in force

    def __enter__(self):
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(target_lock(self.path, timeout=0))
        return self

    def __exit__(self, *exc):
        self._stack.close()
        return False

    # -- the directory ---------------------------------------------------------------------
    def _check_ours(self) -> bool:
        """Whether the staging directory exists (refusing a path that is not ours to clear)."""
        if self.path.is_symlink() or (self.path.exists() and not self.path.is_dir()):
            raise UnsafeTargetError(f"{self.path} exists and is not a staging directory; remove it or build elsewhere")
        if not self.path.exists():
            return False
        if not (self.path / _MARKER).is_file() and any(self.path.iterdir()):
            raise UnsafeTargetError(f"{self.path} is a directory this library did not create; refusing to use it "
                                    "as the build's staging directory (remove it or build elsewhere)")
        return True

    def reset(self) -> None:
        """Remove whatever the staging directory holds and start it empty."""
        if self._check_ours():
            shutil.rmtree(self.path)
        self.path.mkdir(parents=True)
        atomic_write(self.path / _MARKER, lambda h: h.write(dumps_strict({"format": CHECKPOINT_FORMAT})), mode="w")
        self._heaps = []

    def remove(self) -> None:
        """Remove the staging directory (after the index is saved)."""
        if self._check_ours():
            shutil.rmtree(self.path, ignore_errors=True)

    def has_checkpoint(self) -> bool:
        return (self.path / _STATE).is_file()

    # -- reading ---------------------------------------------------------------------------
    def load(self, d: int, L: int, postings_on: bool):
        """The state to resume from, or ``(None, reason)``.

        Returns ``(state, None)`` with ``state`` a dict of ``done`` (documents of the second pass
        finished), ``nnz``, ``df``, ``heaps`` (``(vals, docs)`` or None), ``z_width`` and
        ``phases`` (seconds so far); ``(None, None)`` when there is no staging directory; ``(None,
        reason)`` when there is one but it cannot be resumed from (the caller starts over).
        """
        if not self._check_ours():
            return None, None
        if not self.has_checkpoint():
            return None, "it holds no checkpoint (the build stopped before its corpus pass finished)"
        try:
            state = loads_strict((self.path / _STATE).read_bytes(), str(self.path / _STATE))
            if not isinstance(state, dict) or not isinstance(state.get("fingerprint"), dict):
                raise FileFormatError(f"{_STATE} is not a checkpoint")
            if state["fingerprint"] != self.fingerprint:
                return None, f"its checkpoint was made for another build (changed: " \
                             f"{_differences(state['fingerprint'], self.fingerprint)})"
            return self._read(state, d, L, postings_on), None
        except (FileFormatError, OSError, KeyError, TypeError, ValueError) as exc:
            return None, f"its checkpoint is damaged ({exc})"

    def _read(self, state: dict, d: int, L: int, postings_on: bool) -> dict:
        n, done, width = self.fingerprint["n_documents"], state["done"], state["z_width"]
        block = self.fingerprint["plan"]["block_rows"]
        if not (isinstance(done, int) and isinstance(width, int) and 0 <= done <= n and width >= 0
                and (done == n or done % block == 0)):
            raise FileFormatError("documents done / Z width out of range")
        for name, facts in state["corpus_files"].items():
            if _file_facts(self.path / name) != facts:
                raise FileFormatError(f"{name} changed since the checkpoint")
        df = _load_array(self.path / "df.npy", np.int64, (d,), state["df_sha256"], "df")
        heaps = None
        if done and postings_on:
            names = state["heaps"]
            vals = _load_array(self.path / names["vals"], np.float32, (d, L), names["vals_sha256"], "vals")
            docs = _load_array(self.path / names["docs"], np.int32, (d, L), names["docs_sha256"], "docs")
            if docs.size and (docs.min() < -1 or docs.max() >= done):
                raise FileFormatError("the heaps name documents beyond those done")
            heaps = (vals, docs)
            self._heaps = [names["vals"], names["docs"]]
        head = NpyAppender.header_bytes(np.float64, (width,))
        if done and os.stat(self.path / "heavy.Z.npy").st_size < head + 8 * done * width:
            raise FileFormatError(f"heavy.Z.npy is shorter than its {done} checkpointed rows")
        self._state = {k: state[k] for k in ("fingerprint", "nnz", "df_sha256", "corpus_files")}
        return {"done": done, "nnz": int(state["nnz"]), "df": df, "heaps": heaps, "z_width": width,
                "phases": {str(k): float(v) for k, v in state["phases"].items()}}

    # -- writing ---------------------------------------------------------------------------
    def prepared(self, nnz: int, df: np.ndarray, corpus_files, phases: dict) -> None:
        """Checkpoint the end of the corpus pass (its files are complete and fsynced)."""
        t = time.perf_counter()
        _save_array(self.path / "df.npy", df)
        self._state = {"fingerprint": self.fingerprint, "nnz": int(nnz), "df_sha256": arrays_checksum({"df": df}),
                       "corpus_files": {Path(p).name: _file_facts(Path(p)) for p in corpus_files}}
        self._write(0, 0, None, phases)
        self._account(t, df.nbytes)

    def block(self, done: int, z_width: int, heaps, phases: dict) -> None:
        """Checkpoint the second pass after ``done`` documents (Z holds their rows, fsynced)."""
        t = time.perf_counter()
        nbytes = 0
        names = None
        if heaps is not None:
            vals, docs = heaps
            names = {"vals": f"heaps.{done}.vals.npy", "docs": f"heaps.{done}.docs.npy"}
            _save_array(self.path / names["vals"], vals)
            _save_array(self.path / names["docs"], docs)
            names.update(vals_sha256=arrays_checksum({"vals": vals}), docs_sha256=arrays_checksum({"docs": docs}))
            nbytes = vals.nbytes + docs.nbytes
        old = self._heaps
        self._write(done, z_width, names, phases)
        self._heaps = [names["vals"], names["docs"]] if names else []
        for name in old:
            if name not in self._heaps:
                (self.path / name).unlink(missing_ok=True)
        self._account(t, nbytes)

    def _write(self, done: int, z_width: int, heaps, phases: dict) -> None:
        state = dict(self._state, done=int(done), z_width=int(z_width), heaps=heaps,
                     phases={k: float(v) for k, v in phases.items()})
        atomic_write(self.path / _STATE, lambda h: h.write(dumps_strict(state, indent=1)), mode="w")
        fsync_dir(self.path)

    def _account(self, t: float, nbytes: int) -> None:
        self.written += 1
        self.seconds += time.perf_counter() - t
        self.nbytes = nbytes

    def links_for_save(self, paths: dict) -> dict:
        """Hard links of the staged arrays for the index writer (which moves what it is given): if
        the process stops while saving, the staged files are still there to resume from."""
        links = self.path / _SAVE
        shutil.rmtree(links, ignore_errors=True)
        links.mkdir()
        out = {}
        for name, path in paths.items():
            target = links / Path(path).name
            try:
                os.link(path, target)
            except OSError:  # a file system without hard links: hand over the staged file itself
                target = Path(path)
            out[name] = target
        return out
