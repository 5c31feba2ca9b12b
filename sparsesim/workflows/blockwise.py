"""``sparsesim index build --kind ann --memory SIZE``: an ann index over a corpus larger than memory.

The corpus is a corpus directory (:mod:`sparsesim.data.corpus_files`) or a plain svmlight file,
which is first written into one beside the index (``<out>.corpus``, removed once the index is
saved, or when the build fails without ``--resume``; kept when a resumable build stops). The index is built by
:func:`sparsesim.indexes.ann_blockwise.build_ann_blockwise` within the memory budget.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np

from ..data.corpus_files import CorpusFiles
from ..data.readers.formats import detect_format
from ..data.svmlight_blocks import corpus_source_stamp, write_corpus_from_svmlight
from ..exceptions import FileFormatError, InvalidInputError
from ..indexes import index_bytes
from ..indexes.storage import check_index_target
from ..model_files import load_similarity_model
from ..models import BilinearSimilarity
from ..persistence import atomic_write, check_output_path
from .corpus import model_data_options
from .queries import read_queries

__all__ = ["build_ann_blockwise_from_files", "STAGED_SUFFIX"]

#: the corpus directory written from an svmlight file, beside the index (``<out>.corpus``)
STAGED_SUFFIX = ".corpus"
_STAMP = "source.json"


def _is_corpus_directory(path: Path) -> bool:
    return path.is_dir() and (path / "corpus.json").is_file()


def _staged_corpus(source: Path, out: Path, model, options: dict, resume: bool, progress) -> CorpusFiles:
    """The corpus directory written from the svmlight file ``source`` (reused with ``resume`` when it
    was written from the same, unchanged file)."""
    staged = out.with_name(out.name + STAGED_SUFFIX)
    partial = staged.with_name(staged.name + ".partial")
    stamp = corpus_source_stamp(source)
    if staged.exists():
        try:
            ours = json.loads((staged / _STAMP).read_text())
        except (OSError, ValueError):
            raise InvalidInputError(f"{staged} exists and was not written by sparsesim from a corpus file; move it "
                                    "away (the corpus of a block-wise build is staged there)") from None
        if resume and ours == stamp and _is_corpus_directory(staged):
            return CorpusFiles(staged)
        shutil.rmtree(staged)
    if partial.exists():
        shutil.rmtree(partial)  # left by an interrupted conversion
    try:
        corpus = write_corpus_from_svmlight(source, partial, model.n_features,
                                            zero_based=options.get("zero_based", "auto"),
                                            expect_zero_based=options.get("expect_zero_based"),
                                            progress=progress)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    text = json.dumps(stamp).encode()
    atomic_write(partial / _STAMP, lambda handle: handle.write(text))
    del corpus
    os.replace(partial, staged)
    return CorpusFiles(staged)


def build_ann_blockwise_from_files(model_path, corpus, out, memory, params: dict | None = None,
                                   data_options: dict | None = None, target_recall=None, calibration_queries=None,
                                   n_jobs: int = -1, overwrite: bool = False, resume: bool = False,
                                   progress=None) -> dict:
    """Build an ann index over ``corpus`` (a corpus directory or a plain svmlight file) within
    ``memory`` and save it to ``out``; returns the build summary (as ``build_index_from_files``,
    plus the memory ``plan`` and what ``resume`` did).

    ``progress(phase, done, total)``: ``"convert"`` in bytes of the svmlight file, then the build's
    own phases (:func:`~sparsesim.indexes.ann_blockwise.build_ann_blockwise`).

    Raises
    ------
    InvalidInputError
        A model that is not bilinear, a corpus of another width, a text corpus or compressed
        file, an output path the policy refuses; MemoryBudgetError when the build's fixed parts
        do not fit ``memory``.
    """
    from ..indexes.ann_blockwise import build_ann_blockwise

    out, source = Path(out), Path(corpus)
    inputs = [model_path, calibration_queries, source]
    check_output_path(out, inputs=inputs, overwrite=overwrite, what="index", directory=True)
    check_index_target(out, overwrite=overwrite)
    model = load_similarity_model(model_path)
    if not isinstance(model, BilinearSimilarity):
        raise InvalidInputError(f"{model_path} is not a bilinear model; a block-wise (--memory) build serves "
                                "bilinear models (drop --memory)")
    options = model_data_options(model, data_options)
    if options.get("normalize"):
        raise InvalidInputError("--memory reads the corpus as stored; normalise its rows beforehand")
    calib = None if calibration_queries is None else read_queries(model, calibration_queries, data_options)[1]
    start = time.perf_counter()
    staged = None
    if _is_corpus_directory(source):
        files = CorpusFiles(source)
    elif source.is_file():
        try:
            fmt = detect_format(source)
        except FileFormatError:
            fmt = None
        if fmt != "svmlight":
            raise InvalidInputError(f"{source}: --memory builds from an svmlight file or a corpus directory "
                                    f"(this is {fmt or 'another format'}; drop --memory to build in memory)")
        convert = None if progress is None else (lambda done, total: progress("convert", done, total))
        files = _staged_corpus(source, out, model, options, resume, convert)
        staged = files.directory
    else:
        raise InvalidInputError(f"{source}: --memory builds from an svmlight file or a corpus directory")
    if files.n_features != model.n_features:
        raise InvalidInputError(f"{source}: {files.n_features} features but the model has {model.n_features} "
                                "(feature-count mismatch)")
    convert_seconds = time.perf_counter() - start
    labels = files.labels()
    strata = labels if labels is not None and calib is None and np.unique(labels).size > 1 else None
    params = dict(params or {})
    if target_recall is not None:
        params["target_recall"] = target_recall
    jobs = (os.cpu_count() or 1) if n_jobs in (-1, None) else int(n_jobs)
    try:
        index = build_ann_blockwise(model, files, out, memory=memory, overwrite=overwrite, calibration_queries=calib,
                                    strata=strata, n_jobs=jobs, progress=progress, resume=resume, **params)
    except BaseException:
        if staged is not None and not resume:  # kept only for a build that can be resumed
            shutil.rmtree(staged, ignore_errors=True)
        raise
    summary = {"index": str(out), "kind": "ann", "n_documents": int(index.n_documents),
               "build_seconds": time.perf_counter() - start, "convert_seconds": convert_seconds,
               "index_bytes": index_bytes(out), "index_kind": index.kind, "memory": memory, "plan": index.plan_,
               "build_phases": index.build_phases_, "resume": index.resume_}
    if index.calibration_ is not None:
        summary["calibration"] = index.calibration_
    del index
    if staged is not None:
        shutil.rmtree(staged, ignore_errors=True)
    return summary
