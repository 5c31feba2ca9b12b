"""Building an ann index block by block from a corpus on disk, within a memory budget.

:func:`build_ann_blockwise` writes the same index directory as ``AnnIndex(model, **params).fit(X)``
followed by ``save`` (same arrays, byte for byte, for the same parameters and search setting),
but never holds the corpus or the re-ranking table Z: it reads the corpus a block of documents
at a time from a :class:`~sparsesim.data.corpus_files.CorpusFiles` directory (``pread``, so the
pages read do not stay in the process's memory) and appends the prepared corpus and Z to their
files as it goes. What it holds whole is bounded before it starts:

* the model's W and its light rows transposed (12 bytes per entry each);
* the per-feature heaps of the expanded postings, ``8 x n_features x L`` bytes (``L`` is capped
  by ``postings_memory``), and the finished compact postings (at most 6 bytes per entry);
* per-document arrays of 8-16 bytes (row pointers, ids);
* one block of documents (its rows, prepared rows, Z rows, and the fixed 256-row scratch of
  the expansion), sized from what the budget leaves.

If those fixed parts do not fit ``memory``, the build stops before reading the corpus with
:class:`~sparsesim.exceptions.MemoryBudgetError`. Calibration runs on the finished arrays: its
exact top-k and its corpus strata are computed a block at a time as well, and its approximate
queries read the rows of their candidates from the written files (memory-mapped).

Only the sparse candidate stage is built this way (``dim=0``, the default).

With ``resume=True`` the build checkpoints itself after the corpus pass and after every block of
its second pass (:mod:`~sparsesim.indexes.ann_checkpoint`), and a call with the same arguments
after it stopped continues from the last checkpoint to the same index.
"""

from __future__ import annotations

import shutil
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from sparsesim.data.corpus_files import CorpusFiles
from sparsesim.exceptions import FileFormatError, InvalidInputError, MemoryBudgetError
from sparsesim.memory import format_bytes, parse_memory
from sparsesim.persistence import make_temp_dir, read_npy, sweep_stale_temps
from sparsesim.persistence.npy_stream import NpyAppender

from . import ann_build
from .ann import AnnIndex
from .ann_checkpoint import BuildCheckpoint, build_fingerprint, staging_path
from .ann_postings import CompactPostings
from .base import merge_top_k, normalize_ids, prepare_rows
from .calibration import exact_top_k
from .expansion import expanded_postings, light_transpose, postings_from_heaps
from .storage_write import StagedArray, check_index_target

__all__ = ["build_ann_blockwise", "BlockwiseAnnIndex", "memory_plan", "exact_top_k_blocks"]

_ALIGN = 256  # blocks are multiples of the expansion's 256-row blocks: the heaps see the same updates
_ROW_OVERHEAD = 64  # bytes per document of a block beyond its entries and Z row (pointers, scratch)
_ENTRY_BYTES = 48  # bytes per stored entry of a block in flight: read, prepared (and normalised) copies
_EXPANSION_SCRATCH = 2  # dense 256 x d blocks: the expansion's Y block and one block of heavy rows of M


class _Facts:
    """Shape and stored entries of a corpus (what the re-ranking budget is computed from)."""

    def __init__(self, n: int, d: int, nnz: int):
        self.shape, self.nnz = (int(n), int(d)), int(nnz)


def memory_plan(model, n_documents: int, nnz: int, budget: int, n_heavy: int, postings_length: int,
                postings_on: bool = True) -> dict:
    """The bytes the block-wise build holds whole, and the rows per block the rest of ``budget`` allows.

    Returns ``{"fixed": bytes, "per_row": bytes, "block_rows": rows}``; raises
    :class:`MemoryBudgetError` when the fixed parts and one 256-row block do not fit.
    """
    d = model.n_features
    w = 12 * model.W.nnz + 8 * (d + 1)
    entries = d * postings_length if postings_on else 0
    fixed = {"the model's W": w, "W's light rows transposed": w, "posting heaps": 8 * entries,
             "compact postings": 6 * entries, "row pointers and ids": 24 * (n_documents + 1),
             "expansion scratch": _EXPANSION_SCRATCH * _ALIGN * d * 8}
    total = sum(fixed.values())
    avg = nnz / max(n_documents, 1)
    per_row = int(_ENTRY_BYTES * avg + 16 * n_heavy + _ROW_OVERHEAD)
    rows = (budget - total) // max(per_row, 1) // _ALIGN * _ALIGN
    if rows < _ALIGN:
        parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in fixed.items())
        raise MemoryBudgetError(
            f"the block-wise ann build needs {format_bytes(total + _ALIGN * per_row)} at least ({parts}, one "
            f"block of {_ALIGN} documents {format_bytes(_ALIGN * per_row)}) but its memory budget is "
            f"{format_bytes(budget)}; give a larger memory budget, or a smaller postings_memory / rerank_memory")
    return {"fixed": int(total), "per_row": per_row, "block_rows": int(min(rows, 1 << 20))}


class BlockwiseAnnIndex(AnnIndex):
    """An :class:`AnnIndex` whose corpus and re-ranking table are files written by
    :func:`build_ann_blockwise`: exact answers (calibration's truth) and corpus strata are
    computed a block of documents at a time, and saving moves those files into the index
    directory instead of writing them again. Load the saved directory with
    :func:`~sparsesim.indexes.load_index` (it is an ordinary ann index)."""

    _source = None
    _block_rows = 1 << 16
    _staged = None

    def corpus_source(self) -> CorpusFiles:
        """The stored corpus, read a block at a time (:func:`~sparsesim.indexes.calibration_samples.corpus_strata`)."""
        return self._source

    def exact_rows(self, Qp, k: int, n_jobs: int = 1):
        """Exact top-``k`` (rows, scores) of prepared queries over the stored corpus, a block at a time
        (ties broken by the lower row, as one exact index over the whole corpus breaks them)."""
        return exact_top_k_blocks(self.model, self._source, Qp, k, self._block_rows, n_jobs)

    def _arrays(self) -> dict:
        arrays = super()._arrays()
        if self._staged:
            arrays.update({name: StagedArray(path) for name, path in self._staged.items()})
        return arrays


def exact_top_k_blocks(model, source: CorpusFiles, Qp, k: int, block_rows: int, n_jobs: int = 1):
    """Exact top-``k`` (rows, scores) of prepared queries ``Qp`` over a stored (prepared) corpus on
    disk, reading ``block_rows`` documents at a time: memory holds one block, the queries and
    their running top-``k``, whatever the corpus size. Ties are broken by the lower row, as one
    exact index over the whole corpus breaks them.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from sparsesim.data import load_dataset
    >>> from sparsesim.data.corpus_files import write_corpus
    >>> from sparsesim.indexes.exact import ExactIndex
    >>> from sparsesim.models import BilinearSimilarity
    >>> X = load_dataset("news20-sample").X[:500]
    >>> model = BilinearSimilarity(sp.csr_matrix((X.shape[1], X.shape[1])))  # M = I
    >>> corpus = write_corpus(pathlib.Path(tempfile.mkdtemp()) / "c", X, block=200)
    >>> rows, _ = exact_top_k_blocks(model, corpus, X[:3], 5, block_rows=128)
    >>> bool(np.array_equal(rows, ExactIndex(model).fit(X).query_rows(X[:3], 5)[0]))
    True
    """
    rows, scores = [], []
    for lo, Xb in source.blocks(int(block_rows)):
        part = _Block(model, Xb)
        r, s = exact_top_k(part, Qp, min(k, Xb.shape[0]), n_jobs)
        rows.append(r + lo)
        scores.append(s)
    return merge_top_k(np.hstack(rows), np.hstack(scores), k)


class _Block:
    """One block of the corpus as :func:`~sparsesim.indexes.calibration.exact_top_k` reads an index."""

    def __init__(self, model, X):
        self.model, self.X_, self.ids_ = model, X, None


def _mapped_csr(paths: dict, n: int, d: int) -> sp.csr_matrix:
    out = sp.csr_matrix((n, d))
    out.indptr = read_npy(paths["corpus.indptr"], mmap=True)
    out.indices = read_npy(paths["corpus.indices"], mmap=True)
    out.data = read_npy(paths["corpus.data"], mmap=True)
    return out


def build_ann_blockwise(model, corpus, directory, memory="4GiB", ids=None, n_documents: int | None = None,
                        overwrite: bool = False, calibration_queries=None, strata=None, n_jobs: int = 1,
                        progress=None, resume: bool = False, **params) -> BlockwiseAnnIndex:
    """Build an ann index over a corpus on disk a block of documents at a time and save it to ``directory``.

    Parameters
    ----------
    model : BilinearSimilarity
    corpus : CorpusFiles or path-like
        A corpus directory (:mod:`sparsesim.data.corpus_files`).
    directory : path-like
        The index directory to write (as :meth:`AnnIndex.save` writes it).
    memory : int or str, default "4GiB"
        The memory budget of the build (bytes, ``"6GiB"``, ``"50%"`` of the available memory);
        the block size follows from it (see the module docstring).
    ids : sequence, optional
        One id per document (default: row numbers).
    n_documents : int, optional
        Index only the first ``n_documents`` rows of the corpus.
    overwrite : bool, default False
    calibration_queries, strata :
        As in :meth:`AnnIndex.fit` / :meth:`AnnIndex.calibrate`.
    n_jobs : int, default 1
        Threads of the build.
    progress : callable, optional
        Called as ``progress(stage, done, total)`` after each block of each pass (``stage`` is
        ``"prepare_corpus"`` or ``"heavy_values_and_postings"``, ``done`` and ``total`` count
        documents) and at the start and end of ``"encode_postings"``, ``"calibration"`` and
        ``"save"`` (``done`` 0 then 1 of ``total`` 1): a long build can report where it is.
        With ``resume``, ``("resume", done, total)`` first when the build continues from a
        checkpoint (``done`` documents of the second pass were finished before), or
        ``("restart", 0, total)`` when a checkpoint was found but cannot be used.
    resume : bool, default False
        Stage the build's files in ``<directory>.partial/`` and checkpoint it after the corpus
        pass and after every block of the second pass; a later call with the same model, corpus,
        documents, memory plan and parameters continues after the last checkpoint (``n_jobs``
        may differ) and writes the same index as an uninterrupted build. A checkpoint of another
        build, or a damaged one, is reported (a warning and a ``"restart"`` progress call) and
        the build starts over. The staging directory is removed once the index is saved (and
        when the build fails before its first checkpoint). Without ``resume``, files are staged
        in a temporary directory removed when the call ends.
    **params
        :class:`AnnIndex` parameters (``dim`` must stay 0).

    Returns
    -------
    BlockwiseAnnIndex
        The built index (its corpus and Z memory-mapped from the saved files); ``plan_`` holds
        the memory plan, ``build_phases_`` the seconds of each phase (summed over the calls of a
        resumed build), ``resume_`` what resuming did (``resumed_at``: documents of the second
        pass done before this call, or None; ``restarted_because``; ``seconds_before``, the
        seconds of the passes done before this call; ``checkpoints``,
        ``checkpoint_seconds`` and ``checkpoint_bytes`` of this call).

    Raises
    ------
    MemoryBudgetError
        The fixed parts of the build do not fit ``memory`` (nothing is read or written).
    ConcurrentWriteError
        With ``resume``: another process is building the same index.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from sparsesim.data import load_dataset
    >>> from sparsesim.data.corpus_files import write_corpus
    >>> from sparsesim.learners.bilinear import OASIS
    >>> data = load_dataset("news20-sample")
    >>> model = OASIS(n_triplets=300, random_state=0).fit(data.X[:300], data.y[:300]).model_
    >>> tmp = pathlib.Path(tempfile.mkdtemp())
    >>> corpus = write_corpus(tmp / "corpus", data.X[:600], block=250)
    >>> index = build_ann_blockwise(model, corpus, tmp / "index", memory="1GiB", target_recall=None,
    ...                             resume=True)
    >>> fresh = AnnIndex(model, target_recall=None).fit(data.X[:600])
    >>> bool(np.array_equal(index.query_rows(data.X[:5], 10)[0], fresh.query_rows(data.X[:5], 10)[0]))
    True
    >>> (tmp / "index.partial").exists()  # removed once the index is saved
    False
    """
    start = time.perf_counter()
    report = progress if progress is not None else (lambda stage, done, total: None)
    corpus = corpus if isinstance(corpus, CorpusFiles) else CorpusFiles(corpus)
    if corpus.n_features != model.n_features:
        raise InvalidInputError(f"the corpus has {corpus.n_features} features, the model {model.n_features}")
    index = BlockwiseAnnIndex(model, n_jobs=n_jobs, **params)
    if index.dim:
        raise InvalidInputError("the block-wise build makes the sparse candidate stage only; leave dim=0")
    limit = parse_memory(memory, "memory")
    n = corpus.n_documents if n_documents is None else int(min(max(int(n_documents), 0), corpus.n_documents))
    if n == 0:
        raise InvalidInputError("cannot build an index over an empty corpus")
    directory = check_index_target(directory, overwrite)
    d = model.n_features
    postings_on = not (index.n_postings == 0 or index.sparse_pool == 0)
    L = ann_build.postings_length(index, n) if postings_on else 1
    # the plan before reading anything: Z's row width is bounded by the re-ranking budget
    h_bound = int(min(d, ann_build.rerank_budget(_shell(index, L), _Facts(n, d, corpus.indptr[n])) // (8 * n)))
    plan = memory_plan(model, n, int(corpus.indptr[n]), limit, h_bound, L, postings_on)
    parent = directory.parent if str(directory.parent) else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    job = _Build(index, corpus, n, L, postings_on, plan, limit, report, start)
    if not resume:
        stage = make_temp_dir(parent, directory.name + ".blocks")
        try:
            return job.run(stage, None, ids, directory, overwrite, calibration_queries, strata)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    sweep_stale_temps(parent, directory.name + ".blocks")  # staging of an unresumable build whose process died
    fingerprint = build_fingerprint(index.model_checksum(), corpus, n,
                                    {"block_rows": plan["block_rows"], "postings_length": L,
                                     "heavy_rows_bound": h_bound, "postings": postings_on}, index.params())
    with BuildCheckpoint(staging_path(directory), fingerprint) as checkpoint:
        done = False
        try:
            out = job.run(checkpoint.path, checkpoint, ids, directory, overwrite, calibration_queries, strata)
            done = True
        finally:
            if done or not checkpoint.has_checkpoint():
                checkpoint.remove()
    return out


class _Build:
    """The two passes, encoding, calibration and save of one block-wise build."""

    def __init__(self, index, corpus, n, L, postings_on, plan, limit, report, start):
        self.index, self.corpus, self.n, self.L, self.postings_on = index, corpus, n, L, postings_on
        self.plan, self.limit, self.report, self.start = plan, limit, report, start

    def _resume_state(self, checkpoint):
        """The checkpointed state to continue from (None: start from the corpus pass), reporting it."""
        if checkpoint is None:
            return None
        state, reason = checkpoint.load(self.index.model.n_features, self.L, self.postings_on)
        self.resume = {"resumed_at": None if state is None else state["done"], "restarted_because": reason,
                       "seconds_before": 0.0 if state is None else sum(state["phases"].values())}
        if reason is not None:
            warnings.warn(f"build_ann_blockwise: not resuming from {checkpoint.path}: {reason}; starting over",
                          stacklevel=4)
            self.report("restart", 0, self.n)
        if state is None:
            checkpoint.reset()
        else:
            self.report("resume", state["done"], self.n)
        return state

    def run(self, stage, checkpoint, ids, directory, overwrite, calibration_queries, strata):
        index, corpus, n, L, report = self.index, self.corpus, self.n, self.L, self.report
        model, d, B, start = index.model, index.model.n_features, self.plan["block_rows"], self.start
        jobs = max(1, int(index.n_jobs or 1))
        self.resume = {"resumed_at": None, "restarted_because": None, "seconds_before": 0.0}
        state = self._resume_state(checkpoint)
        paths = {name: stage / f"{name}.npy" for name in ("corpus.indptr", "corpus.indices", "corpus.data", "heavy.Z")}
        if state is None:
            nnz, df = _prepare_corpus(model, corpus, n, B, index.score_limit, paths, report)
            phases = {"prepare_corpus": time.perf_counter() - start}
            if checkpoint is not None:
                checkpoint.prepared(nnz, df, [paths[k] for k in ("corpus.indptr", "corpus.indices", "corpus.data")],
                                    phases)
        else:
            nnz, df, phases = state["nnz"], state["df"], dict(state["phases"])
        stored = CorpusFiles.from_files(d, paths["corpus.indptr"], paths["corpus.indices"], paths["corpus.data"])

        # the same choices fit() makes, from the counts
        index.X_ = _mapped_csr(paths, n, d)
        index.ids_ = normalize_ids(ids, n)
        index.postings_length_ = L
        facts = _Facts(n, d, nnz)
        index.rerank_memory_ = ann_build.rerank_budget(index, facts)
        index.heavy_rows_ = ann_build.choose_heavy_rows(index, facts, df=df)
        index._heavy_pos = ann_build.heavy_positions(index, index.heavy_rows_)
        H = index.heavy_rows_

        # pass 2: Z and the expanded postings, a block at a time
        first = 0 if state is None else state["done"]
        if first:
            if state["z_width"] != H.size:
                raise FileFormatError(f"{stage}: the checkpoint's Z rows hold {state['z_width']} values, the heavy "
                                      f"rows chosen from its counts {H.size}; remove {stage} and build again")
            z_out = NpyAppender.reopen(paths["heavy.Z"], np.float64, (H.size,), first)
        else:
            paths["heavy.Z"].unlink(missing_ok=True)
            z_out = NpyAppender(paths["heavy.Z"], np.float64, (H.size,))
        heaps = None
        if self.postings_on:
            MT_light = light_transpose(model.W, H)
            heaps = state["heaps"] if first else (np.zeros((d, L), dtype=np.float32), np.full((d, L), -1, np.int32))
        pass2_before, pass2_start = phases.get("heavy_values_and_postings", 0.0), time.perf_counter()
        try:
            for lo in range(first, n, B):
                hi = min(lo + B, n)
                Xb = stored.rows(lo, hi)
                Zb = ann_build.heavy_values(index, Xb, jobs)
                z_out.append(Zb)
                if heaps is not None:
                    expanded_postings(Xb, MT_light, H, Zb, L, jobs, heaps=heaps, doc0=lo, identity=model.identity)
                del Xb, Zb
                if checkpoint is not None:
                    z_out.sync()
                    phases["heavy_values_and_postings"] = pass2_before + time.perf_counter() - pass2_start
                    checkpoint.block(hi, H.size, heaps, phases)
                report("heavy_values_and_postings", hi, n)
        except BaseException:
            z_out.release()  # its rows up to the last checkpoint stay for a resumed build
            raise
        z_out.close()
        phases["heavy_values_and_postings"] = pass2_before + time.perf_counter() - pass2_start
        mark = time.perf_counter()
        report("encode_postings", 0, 1)
        if heaps is not None:
            del MT_light
            index.postings_ = _encode(heaps[0], heaps[1], n, self.limit - self.plan["fixed"])
            del heaps
        else:
            index.postings_length_ = 1
            index.postings_ = CompactPostings.empty(d, n)
        index.postings_model_ = index.model_checksum()
        index.Z_ = read_npy(paths["heavy.Z"], mmap=True)
        index.n_fit_documents_ = n
        index.calibration_ = None
        index._source, index._block_rows = stored, B
        index._staged = checkpoint.links_for_save(paths) if checkpoint is not None else dict(paths)
        phases["encode_postings"] = time.perf_counter() - mark
        report("encode_postings", 1, 1)
        report("calibration", 0, 1)
        mark = time.perf_counter()
        if index.target_recall is not None and n > 11:
            index.calibrate(calibration_queries, strata=strata)
        report("calibration", 1, 1)
        phases["calibration"] = time.perf_counter() - mark
        index.build_seconds_ = sum(phases.values())
        index.build_phases_ = phases
        index.plan_ = dict(self.plan, memory=self.limit)
        index.resume_ = dict(self.resume, checkpoints=checkpoint.written if checkpoint else 0,
                             checkpoint_seconds=checkpoint.seconds if checkpoint else 0.0,
                             checkpoint_bytes=checkpoint.nbytes if checkpoint else 0)
        report("save", 0, 1)
        index.save(directory, overwrite=overwrite)
        report("save", 1, 1)
        index._staged = None
        # the arrays now live in the index directory (the same inodes, moved): keep reading them there
        return index


def _prepare_corpus(model, corpus, n, B, score_limit, paths, report):
    """Pass 1: check and prepare every block once, write the stored corpus, count document frequencies."""
    d = model.n_features
    indices_out = NpyAppender(paths["corpus.indices"], np.int32)
    data_out = NpyAppender(paths["corpus.data"], np.float64)
    indptr = [np.zeros(1, dtype=np.int64)]
    df = np.zeros(d, dtype=np.int64)
    nnz = 0
    try:
        for lo in range(0, n, B):
            Xb = prepare_rows(model, corpus.rows(lo, min(lo + B, n)), "corpus", score_limit=score_limit)
            indices_out.append(Xb.indices)
            data_out.append(Xb.data)
            indptr.append(Xb.indptr[1:] + nnz)
            nnz += int(Xb.indptr[-1])
            df += np.bincount(Xb.indices, minlength=d)
            report("prepare_corpus", min(lo + B, n), n)
            del Xb
    except BaseException:
        indices_out.abort()
        data_out.abort()
        raise
    indices_out.close()
    data_out.close()
    ptr = NpyAppender(paths["corpus.indptr"], np.int64)
    ptr.append(np.concatenate(indptr))
    ptr.close()
    return nnz, df


def _shell(index, L):
    index.postings_length_ = L
    return index


def _encode(vals: np.ndarray, docs: np.ndarray, n: int, budget: int) -> CompactPostings:
    """Compact postings from the heaps, a chunk of features at a time (each list is encoded on its
    own, so the result is the one of encoding all lists at once)."""
    d, L = vals.shape
    chunk = int(max(1, min(d, max(budget, 1) // max(1, 48 * L))))
    parts = []
    for f0 in range(0, d, chunk):
        f1 = min(d, f0 + chunk)
        parts.append(CompactPostings.from_csr(postings_from_heaps(vals[f0:f1], docs[f0:f1], n), n))
    offsets = np.cumsum([0] + [int(p.indptr[-1]) for p in parts])
    indptr = np.concatenate([np.zeros(1, np.int64)] + [p.indptr[1:] + off for p, off in zip(parts, offsets)])
    cat = {name: np.concatenate([getattr(p, name) for p in parts])
           for name in ("ids", "ids_hi", "ids32", "codes", "floor_", "step_", "error_")}
    return CompactPostings(indptr, cat["ids"], cat["ids_hi"], cat["ids32"], cat["codes"], cat["floor_"],
                           cat["step_"], cat["error_"], (d, n))
