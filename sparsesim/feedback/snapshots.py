"""Where a feedback learner may write its snapshots, and which snapshot it may resume from.

A snapshot is the learned model plus a ``feedback`` record in its metadata: the triplets applied,
the version, and the *identity* of what it was learned on -- the checksum of the index's model
(the model the learning started from) and the checksum of the text featuriser (vocabulary, idf
and settings; ``None`` for a model on vectors). A snapshot resumes only on an index with the same
identity: the same width is not enough (another vocabulary of the same size numbers other words).

The snapshot path follows the output-path policy (:func:`~sparsesim.persistence.check_output_path`):
checked when the learner starts, before anything is learned, it must not lie inside the index
directory being served (a snapshot there would replace the index's own files), its directory must
exist, and an existing file is either resumed or replaced with ``overwrite=True``.
"""

from __future__ import annotations

from pathlib import Path

from ..exceptions import FileFormatError, ModelMismatchError
from ..models import BilinearSimilarity
from ..persistence import bundle_checksum, check_output_path
from ..text import featurizer_arrays

__all__ = ["featurizer_checksum", "snapshot_identity", "check_snapshot_target", "check_resumable"]


def featurizer_checksum(model: BilinearSimilarity) -> str | None:
    """sha256 of the model's text featuriser (vocabulary, idf, settings); ``None`` without one."""
    if model.featurizer is None:
        return None
    arrays, meta = featurizer_arrays(model.featurizer)
    return bundle_checksum(arrays, meta)


def snapshot_identity(model: BilinearSimilarity) -> dict:
    """``{"index_model": sha256, "featurizer": sha256 or None}`` of the model an index serves."""
    return {"index_model": model.checksum(), "featurizer": featurizer_checksum(model)}


def check_snapshot_target(path, index_dir, resume: bool, overwrite: bool, inputs=()) -> Path:
    """Refuse a snapshot path the policy does not allow (see the module docstring).

    An existing snapshot is accepted when it will be resumed (``resume``) or replaced
    (``overwrite``); it is never accepted inside ``index_dir`` (nor overlapping ``inputs``, other
    files the caller reads, e.g. a feedback log).
    """
    path = Path(path)
    return check_output_path(path, inputs=[index_dir, *inputs], overwrite=overwrite or resume, what="snapshot",
                             flag="--resume to continue from it or --overwrite to replace it "
                                                                "(learning from the index's model)")


def check_resumable(path, snapshot: BilinearSimilarity, identity: dict) -> None:
    """Refuse a snapshot learned on another index (width, featuriser or starting model differ).

    Raises
    ------
    FileFormatError
        The snapshot has another width, or no identity record.
    ModelMismatchError
        The snapshot's featuriser or starting model is not the index's.
    """
    fb = snapshot.metadata.get("feedback")
    recorded = fb if isinstance(fb, dict) else {}
    hint = ("; give another --snapshot path, or pass --overwrite to start again from the index's model "
            "(the file is replaced)")
    if "index_model" not in recorded or "featurizer" not in recorded:
        raise FileFormatError(f"{path}: not a feedback snapshot of this sparsesim (no record of the index it was "
                              f"learned on){hint}")
    if featurizer_checksum(snapshot) != identity["featurizer"] or recorded["featurizer"] != identity["featurizer"]:
        raise ModelMismatchError(f"{path}: the snapshot was learned with another text featuriser (vocabulary) than "
                                 f"the index's model{hint}")
    if recorded["index_model"] != identity["index_model"]:
        raise ModelMismatchError(f"{path}: the snapshot was learned on another index (starting model "
                                 f"{str(recorded['index_model'])[:12]}, this index's model "
                                 f"{identity['index_model'][:12]}){hint}")
