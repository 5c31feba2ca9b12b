"""The registry of named data sets.

A plain dict ``DATASETS``: name -> :class:`DatasetSpec`. Family modules (single-task corpora,
multi-task classification, multi-view, multi-task similarity) each call :func:`register_dataset`
at import; :func:`get_dataset_spec` imports them on first use, so ``sparsesim datasets list``
sees every family and adding a family never edits this file beyond ``FAMILY_MODULES``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from ..validation import resolve_name

# Modules that register data sets; a missing module is skipped (families land independently).
FAMILY_MODULES = (
    "sparsesim.data.builtin",             # news20, news20-text, reuters21578, rcv1-small, UCI/LIBSVM sets
    "sparsesim.data.multitask",           # news20-tasks, isolet-tasks (multi-task similarity)
    "sparsesim.data.mtl_classification",  # spam-task-a, mhc1, landmine (multi-task classification)
    "sparsesim.data.multiview",           # wikipedia-xmodal, mfeat (heterogeneous transfer)
)


@dataclass(frozen=True)
class DataFile:
    """One file of a data set.

    Attributes
    ----------
    relpath : str
        Path relative to the data directory (the same layout as the shared mirror).
    sha256 : str
        sha256 of the file as stored (verified when copied from a mirror).
    url : str, optional
        Public upstream download; ``None`` when no upstream serves this exact content.
    content_sha256 : str, optional
        sha256 of the decompressed content, for upstreams that serve the file uncompressed
        (the fetched bytes are verified against it and stored compressed under ``relpath``).
    """

    relpath: str
    sha256: str
    url: str | None = None
    content_sha256: str | None = None


@dataclass(frozen=True)
class DatasetSpec:
    """What the registry knows of one named data set.

    Attributes
    ----------
    name : str
    files : tuple of DataFile
    loader : str
        ``"module:function"`` called as ``function(spec, **options)``.
    kind : str
        ``"labelled"`` (returns :class:`~sparsesim.data.LabelledData`), ``"multitask"``,
        ``"multitask-classification"``, ``"multiview"``.
    description : str
    representation : str
        How documents are represented (e.g. "TF-IDF, rows L2-normalised").
    source : str
        Provenance and licence in one line.
    extra : dict
        Family-specific facts (task layout, splits).
    """

    name: str
    files: tuple
    loader: str
    kind: str
    description: str
    representation: str = ""
    source: str = ""
    extra: dict = field(default_factory=dict)


DATASETS: dict[str, DatasetSpec] = {}
_families_loaded = False


def register_dataset(spec: DatasetSpec) -> DatasetSpec:
    """Add ``spec`` to :data:`DATASETS`."""
    if spec.name in DATASETS and DATASETS[spec.name] != spec:
        raise ValueError(f"data set {spec.name!r} is registered twice")
    DATASETS[spec.name] = spec
    return spec


def _load_families() -> None:
    global _families_loaded
    if _families_loaded:
        return
    for module in FAMILY_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
    _families_loaded = True


def all_datasets() -> dict[str, DatasetSpec]:
    """Every registered data set, by name."""
    _load_families()
    return dict(sorted(DATASETS.items()))


def get_dataset_spec(name: str) -> DatasetSpec:
    """The spec of ``name`` (case-insensitive); an unknown name raises an error suggesting the
    closest names and listing the known ones."""
    _load_families()
    return DATASETS[resolve_name(name, DATASETS, "data set", hint=" (or pass a path to your own data: a "
                                 "labelled svmlight file, a text folder, CSV or JSONL)")]


def check_options(spec: DatasetSpec, options: dict, allowed: dict) -> dict:
    """A loader's options merged over its defaults ``allowed``; unknown names are refused."""
    from ..exceptions import InvalidInputError

    unknown = set(options) - set(allowed)
    if unknown:
        raise InvalidInputError(
            f"data set {spec.name!r}: unknown option(s) {', '.join(sorted(unknown))}; "
            f"known: {', '.join(sorted(allowed)) or 'none'}"
        )
    out = dict(allowed)
    out.update(options)
    return out


def load_registered(name: str, **options):
    """Load the registered data set ``name`` through its loader."""
    spec = get_dataset_spec(name)
    module_name, attr = spec.loader.split(":")
    return getattr(importlib.import_module(module_name), attr)(spec, **options)
