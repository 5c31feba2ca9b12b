"""Loading a single-process index directory: :func:`load_index`."""

from __future__ import annotations

from sparsesim.exceptions import FileFormatError, InvalidInputError
from sparsesim.validation import bounded

from .array_checks import check_faiss
from .contract import Index
from .kinds import STORED_KINDS
from .storage import check_stored_model, derived_arrays_checked, mark_derived_arrays_checked, read_index
from .verify import verify_derived

__all__ = ["load_index"]


def load_index(directory, model=None, mmap: bool = False, verify: bool = True, n_jobs: int | None = 1,
               check_calibration: bool = True, verify_in_background: bool = False, warm_up: bool = True) -> Index:
    """Read an index directory written by :meth:`Index.save`.

    Parameters
    ----------
    directory : path-like
    model : BilinearSimilarity, optional
        The model the index must belong to (checked against the manifest's checksum); default:
        the copy stored in the index.
    mmap : bool, default False
        Memory-map the arrays read-only and the FAISS index with ``faiss.IO_FLAG_MMAP``; such
        an index answers queries but refuses :meth:`Index.add`. The large arrays (corpus,
        postings, re-ranking table, the stored model's W) are then not read at load (but for
        the few rows ``warm_up`` answers): each 64 KiB
        block is checked against its sha256 and for out-of-range or non-finite values the first
        time a query is about to read it (:mod:`sparsesim.indexes.blocks`), so loading costs
        the same whatever the index size and corruption is still refused before an answer is
        returned. :meth:`Index.verify_all` checks every remaining block at once. A file this
        user's sparsesim wrote, or verified whole before, and that is unchanged since (same
        device, inode, size, modification and status-change times, and the same manifest
        checksum; :func:`~sparsesim.indexes.storage_format.file_identity`) is not checked
        again: a fresh process answers its first queries at the warm speed.
    verify : bool, default True
        Check sha256 checksums (whole files at load, or blocks on first use; sizes and the
        structural checks always run).
    n_jobs : int, default 1
        Threads of the loaded index.
    verify_in_background : bool, default False
        Load the query kernels (:meth:`Index.warm_up`) and, memory-mapped, check the blocks not
        checked yet, in a background thread (queries still check what they read first); once a
        file is checked whole it is recorded as verified,
        so the next process loads it without block checks. A corrupt block it finds is kept in
        ``index.background_error_`` (and refused when a query reads it).
    warm_up : bool, default True
        Load the compiled query kernels before returning (:meth:`Index.warm_up`: one small batch
        of the index's own documents), so that the first batch of queries runs at the warm speed.
        A process's first kernel call imports numba and sets up its compiler registries even
        when the kernels come from numba's disk cache (about 0.5 s of CPU); this moves it into
        the load. ``False`` leaves it to the first batch of more than a few queries: for a
        process that answers one small batch and exits (``sparsesim query --index`` passes
        ``False``), whose few queries are answered by numpy code that needs no kernels
        (:mod:`sparsesim.indexes.small_batch`). With ``verify_in_background`` the background
        thread warms the kernels up instead. A corrupt block among the rows the warm-up reads
        is not reported by the load: the query that reads it refuses it.
    check_calibration : bool, default True
        Ann: replay the stored calibration record and probe the recall it claims
        (:mod:`sparsesim.indexes.recall_check`). False is for a caller that replaces the record
        (``sparsesim index calibrate``); such a load is not remembered as checked.

    Raises
    ------
    FileFormatError
        Not an index directory, unknown kind, newer format, missing, truncated or corrupt file.
    ModelMismatchError
        ``model`` is not the model the index was built with.

    Notes
    -----
    Besides the file checks of :func:`~sparsesim.indexes.storage.read_index`, the arrays derived
    from the corpus and the model (posting values, re-ranking values, projections) are checked
    against them with randomized probes (:func:`~sparsesim.indexes.verify.verify_derived`) --
    once per index content: an index this user saved or loaded with that check passing is
    recorded by its manifest checksum in the user's cache directory
    (:func:`~sparsesim.indexes.storage.derived_arrays_checked`), and its bytes are bound to that
    checksum by the file and block checksums (``verify=False`` always runs the check). The same
    once-per-content check hashes a memory-mapped stored model against the manifest's model
    checksum (a load that is not memory-mapped hashes it at every load).
    """
    stored = read_index(directory, model=model, mmap=mmap, verify=verify)
    if stored.kind not in STORED_KINDS:
        raise FileFormatError(f"{stored.directory}: unknown index kind {stored.kind!r}")
    index = STORED_KINDS[stored.kind].from_stored(stored, mmap=mmap, n_jobs=n_jobs)
    if getattr(index, "faiss_", None) is not None:
        try:
            check_faiss(index.faiss_, index.n_documents, index.dim)
        except InvalidInputError as exc:
            raise FileFormatError(f"{stored.extra_files.get('faiss.index', stored.directory)}: "
                                  f"{bounded(exc, 300)}") from None
    # what a later save(overwrite=True) to this directory checks: nobody replaced it meanwhile
    index.loaded_from_ = (str(stored.directory.resolve()), stored.manifest.get("manifest_checksum"))
    index.manifest_ = stored.manifest
    # arrays derived from corpus + model, against them (indexes/verify.py): once per index content
    # (a checked or self-written index is bound to its bytes by the manifest's checksums)
    if not (verify and derived_arrays_checked(stored.manifest)):
        try:
            verify_derived(index, record_checks=check_calibration)
        except FileFormatError as exc:
            raise FileFormatError(f"{stored.directory}: {bounded(exc, 300)}") from None
        # a memory-mapped stored W: its checksum against the manifest's (``index.model`` verifies every block)
        check_stored_model(stored, index.model)
        if verify and check_calibration:
            mark_derived_arrays_checked(stored.manifest.get("manifest_checksum"))
    index.background_error_ = None
    if verify_in_background:
        check_in_background(index)
    elif warm_up:
        warm_kernels(index)
    return index


def warm_kernels(index) -> None:
    """:meth:`Index.warm_up` for a freshly loaded ``index``: a corrupt block among the rows it reads
    stays unchecked (not recorded as checked), so the query that reads it refuses it, as without
    the warm-up."""
    try:
        index.warm_up()
    except FileFormatError:
        pass


def check_in_background(index) -> None:
    """Check every remaining block of ``index`` in a daemon thread (see :func:`load_index`)."""
    import threading

    def run():
        try:
            index.warm_up()  # the kernels first: a server's first requests then run at the warm speed
        except FileFormatError as exc:
            index.background_error_ = str(exc)
        for guard in list(index._guards.values()):
            try:
                guard.ensure_all()
            except FileFormatError as exc:
                index.background_error_ = str(exc)

    threading.Thread(target=run, name="sparsesim-verify", daemon=True).start()
