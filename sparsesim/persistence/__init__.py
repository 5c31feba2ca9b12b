"""The no-pickle file format for models, safe writes, and the integrity checks of files read back.

A model file is one ``.npz`` archive holding named numeric arrays plus one array named
``__meta__`` with a JSON document (format version, kind, algorithm, parameters, shape,
checksum). Nothing is unpickled on load (``allow_pickle=False``), so loading a file never runs
code.

Integrity on load (files a user did not write are untrusted):

* the archive's members are inspected before anything is read: every member must be a ``.npy``
  array whose header declares a plain numeric (or unicode) dtype and a shape whose byte size
  matches the member's size, so a small file can never make the reader allocate or decompress
  gigabytes (:func:`read_npz`);
* the metadata is parsed as strict JSON of bounded size and depth;
* the checksum (format 2) covers the metadata *and* the arrays (names, dtypes, shapes, bytes);
  format 1 files (checksum over the arrays only) are still read.

Writes (:func:`atomic_write`) go to a temporary file in the target's directory whose name
carries the writer's process id, are flushed, fsynced and renamed over the target, so a crash
or an error never leaves a partial file under the final name; the file gets the permissions the
umask allows (like any file a program creates), not the 0600 of ``mkstemp``. Temporary files
of writers that died are removed by the next write to the same directory
(:func:`sweep_stale_temps`). :func:`target_lock` serialises writers of one target with a lock
file (``fcntl.flock``).

The package's modules: :mod:`.jsonio` (strict JSON), :mod:`.files` (permissions, atomic
writes, temporary files, fsync, output-file checks), :mod:`.outputs` (the output-path policy of
every command that writes: :func:`check_output_path`), :mod:`.locks` (writer locks),
:mod:`.checksums`, :mod:`.arrays` (bounded ``.npy`` / ``.npz`` reads, CSR matrices as arrays),
:mod:`.streams` (bounded decompression) and :mod:`.bundles` (the model file format). Every name
is importable from ``sparsesim.persistence``.
"""

from __future__ import annotations

from .arrays import csr_arrays, csr_from_arrays, read_npy, read_npz  # noqa: F401
from .bundles import FORMAT_VERSION, bundle_kind, load_bundle, save_bundle  # noqa: F401
from .checksums import arrays_checksum, bundle_checksum, file_sha256  # noqa: F401
from .files import (  # noqa: F401
    atomic_write,
    check_output_file,
    current_umask,
    dir_mode,
    file_mode,
    fsync_dir,
    fsync_path,
    make_temp_dir,
    save_figure,
    sweep_stale_temps,
)
from .jsonio import (  # noqa: F401
    MAX_JSON_DEPTH,
    MAX_META_BYTES,
    check_meta_limits,
    dumps_strict,
    json_ready,
    loads_strict,
)
from .locks import file_state, replacing_unchanged, target_lock  # noqa: F401
from .outputs import check_output_path, overlapping_input  # noqa: F401
from .streams import bounded_stream, decompression_limit, read_bounded  # noqa: F401
