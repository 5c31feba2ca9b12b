"""File readers: svmlight/LIBSVM (plain, .bz2, .xz, .gz), MatrixMarket, raw text corpora.

Every failure a user can cause (missing file, truncated or corrupt compressed stream, a
malformed line, NaN/inf values, a feature-count mismatch) becomes one
:class:`~sparsesim.exceptions.SparsesimError` whose message names the file.

The package's modules: :mod:`.formats` (opening possibly compressed files, bounded reads,
format detection), :mod:`.matrices` (svmlight, MatrixMarket and npz matrices),
:mod:`.texts` (text corpora, folders and tables) and :mod:`.encoding` (TF-IDF, L2
normalisation, label encoding). Every name is importable from ``sparsesim.data.readers``.
"""

from __future__ import annotations

# private names too: other modules import some of them from here
from .encoding import labels_as_int, encode_labels, l2_normalize, tfidf  # noqa: F401
from .formats import (  # noqa: F401
    COMPRESSED_SUFFIXES,
    MAGIC_BYTES,
    STREAM_ERRORS,
    check_exists,
    plain_suffix,
    read_bytes,
    read_lines,
    read_text_file,
    detect_format,
    open_maybe_compressed,
    table_format,
)
from .matrices import (  # noqa: F401
    base_name,
    sibling_path,
    load_svmlight,
    parse_zero_based,
    read_matrix_market,
    read_npz,
    read_svmlight,
)
from .texts import (  # noqa: F401
    doc_key,
    split_name,
    texts_to_data,
    iter_text_corpus,
    read_text_corpus,
    read_text_folder,
    read_table_rows,
    read_text_table,
)

__all__ = [
    "open_maybe_compressed",
    "parse_zero_based",
    "read_svmlight",
    "load_svmlight",
    "read_matrix_market",
    "iter_text_corpus",
    "read_text_corpus",
    "tfidf",
    "l2_normalize",
    "encode_labels",
    "read_npz",
    "read_text_folder",
    "read_table_rows",
    "read_text_table",
]
