"""What an index keeps about each document for display: the start of its text (``snippets``)
and its class name (``labels``), both optional string arrays with one entry per document.

They are stored beside the corpus as ordinary index arrays (checked like every other file) and
never take part in scoring; ``sparsesim query --index`` and ``sparsesim serve`` show them.
"""

from __future__ import annotations

import numpy as np

#: the optional per-document string arrays an index may store, by attribute ``<name>_``
FACT_NAMES = ("snippets", "labels")


def fact_arrays(index) -> dict:
    """The facts ``index`` holds for every one of its documents, as arrays to store."""
    arrays = {}
    for name in FACT_NAMES:
        values = getattr(index, name + "_", None)
        if values is not None and len(values) == index.n_documents:
            arrays[name] = np.asarray(values, dtype=str)
    return arrays


def held_facts(index) -> dict:
    """``{name: array or None}``: the facts ``index`` holds now (its ``snippets_``, ``labels_``)."""
    return {name: getattr(index, name + "_") for name in FACT_NAMES}


def set_facts(index, facts: dict) -> None:
    """Give ``index`` the facts of ``facts`` (name -> one value per document; see
    ``sparsesim.workflows.document_facts``); the others are left as they are."""
    for name in FACT_NAMES:
        if name in facts:
            setattr(index, name + "_", facts[name])


def restore_facts(index, arrays: dict, n_documents: int) -> None:
    """Set ``index.<name>_`` from stored arrays; a fact whose array is not one string per
    document is left out (display only: nothing else depends on it)."""
    for name in FACT_NAMES:
        values = arrays.get(name)
        ok = values is not None and values.shape == (n_documents,) and values.dtype.kind == "U"
        setattr(index, name + "_", values if ok else None)


def extend_facts(index, before: dict, n_added: int, new: dict) -> None:
    """After ``n_added`` documents were added: each fact the index held (``before``: name ->
    array) gets the new documents' values (``new``: name -> array of length ``n_added``, or
    empty strings when the added corpus has none)."""
    for name, old in before.items():
        if old is None:
            continue
        extra = new.get(name)
        if extra is None:
            extra = np.array([""] * n_added)
        setattr(index, name + "_", np.concatenate([np.asarray(old, dtype=str), np.asarray(extra, dtype=str)]))


def facts_of(index, rows) -> dict:
    """``{name: [value per row]}`` for the facts the index holds (rows: positions in the index)."""
    rows = np.asarray(rows, dtype=np.int64)
    out = {}
    for name in FACT_NAMES:
        values = getattr(index, name + "_", None)
        if values is not None:
            out[name] = [str(values[r]) for r in rows]
    return out
