"""The index directory format: no pickle, checksummed, replaced in one atomic step, memory-mappable.

An index directory holds::

    manifest.json        format, kind, parameters, the model's checksum, the name of the data
                         directory, for every file below its size and sha256, the block size of
                         the block checksums, and a checksum of the manifest itself
    v-XXXXXXXXXXXX/      the data of the current version:
      blocks.sha256        sha256 of every 64 KiB block of every other file (sorted by name)
      model.npz            the model the index was built with, without W (its own checked format:
                           flags, metadata, text featuriser)
      model.W.*.npy        the model's W (CSR indptr / indices / data)
      ids.npy              user ids (int64 or unicode), one per document
      corpus.*.npy         the stored corpus X (CSR indptr / indices / data)
      postings.*.npy       posting lists (exact "corpus" strategy: Y^T as CSR; ANN: impact-ordered,
                           pruned Y^T in compact form, :mod:`sparsesim.indexes.ann_postings`)
      heavy.*.npy          ANN: precomputed rows of M for re-ranking
      projection.*.npy     ANN: query map V, document map B = M^T V, singular values
      faiss.index          ANN: the FAISS index (``faiss.write_index``)

Arrays are single ``.npy`` files (not one ``.npz``) so that ``load_index(..., mmap=True)`` can
memory-map them read-only; every one is read with ``allow_pickle=False`` after its header was
checked against the file size.

Writes never lose data. A new index is written into a temporary directory beside the target
and renamed into place (a rename onto an existing directory fails, so two builders of one new
path cannot both succeed). Replacing an index (``overwrite=True``, ``index add``) writes the new
version into a new ``v-*`` directory inside it, then replaces ``manifest.json`` with one
``os.replace`` -- the single atomic step; a kill at any moment leaves the old complete version
or the new one. Old versions and temporaries of killed writers are removed by the next write.
Writers of one target are serialised by a lock file (:func:`sparsesim.persistence.target_lock`).
Format 2 directories (W inside ``model.npz``, no block checksums) are still read, checked whole;
format 1 (no manifest checksum, files beside the manifest) is refused: rebuild such an index. An
ann index of format 2 or 3 (float32 posting lists) is refused with a request to rebuild it; the
other kinds of those formats are read as before.

``load_index`` trusts nothing in the directory: the manifest is validated against a schema
(types, ranges, known values) and its own checksum; every file's size (always) and sha256
(``verify=True``) are checked; arrays must have exactly the dtypes written (nothing is
coerced); and one vectorised structural pass refuses out-of-range or negative indices, a
non-monotone ``indptr``, NaN/inf values, duplicate ids, inconsistent shapes and FAISS
structures whose ids or links point outside the index -- before any compiled kernel reads them.

Memory-mapped loads (``mmap=True``) of format 3 defer the large arrays (``LAZY_CHECKS``: corpus,
posting and W indices and values, the re-ranking table Z): their 64 KiB blocks are hashed against
``blocks.sha256`` and range/finiteness-checked on first use, by the
:class:`~sparsesim.indexes.blocks.BlockGuard` of each array, before a kernel reads them. Load
then reads only the manifest, the block checksums and the small arrays, whatever the index size.

The code is in three modules: :mod:`~sparsesim.indexes.storage_format` (file names, manifest
schemas and checksum, the record of checked indexes), :mod:`~sparsesim.indexes.storage_write`
(:func:`save_index`, :func:`check_index_target`) and :mod:`~sparsesim.indexes.storage_read`
(:func:`read_manifest`, :func:`read_index`, :func:`lazy_checks`); this module is their one
import path.
"""

from __future__ import annotations

from .storage_format import (FORMAT_NAME, FORMAT_VERSION, MANIFEST, MANIFEST_SCHEMA, MAX_DOCUMENTS,  # noqa: F401
                             MODEL_FACTS_SCHEMA, MODEL_FILE, MODEL_W, STATE_SCHEMA, derived_arrays_checked,
                             manifest_checksum, mark_derived_arrays_checked)
from .storage_read import StoredIndex, check_stored_model, lazy_checks, read_index, read_manifest  # noqa: F401
from .storage_write import check_index_target, save_index  # noqa: F401

__all__ = ["save_index", "read_index", "StoredIndex", "read_manifest", "FORMAT_NAME", "FORMAT_VERSION"]
