"""A plain-Python svmlight/LIBSVM parser for small files, with scikit-learn's grammar.

Why it exists: importing scikit-learn costs about 0.5 s of CPU (more than a second on a loaded
machine), far more than parsing a few queries, and `sparsesim query --index` should answer its
first query within 1 s of starting. :func:`~sparsesim.data.readers.read_svmlight` therefore reads
inputs of at most :data:`SMALL_BYTES` (decompressed) here and larger ones with scikit-learn's
compiled parser. Both accept and refuse the same lines and give the same matrices
(``tests/test_formats.py`` compares them on generated files); only the wording of a refusal
differs.

The grammar (scikit-learn's ``_load_svmlight_file``): lines end at ``\\n``; ``#`` starts a comment
(searched up to the first NUL byte); a line with no token is skipped; the first token is the
label (a float); an optional ``qid:N`` token follows and is ignored; every other token is
``index:value`` with an integer index that fits a C ``int``, is not negative and is larger than
the previous index of its line.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SMALL_BYTES", "parse_svmlight_bytes"]

#: decompressed inputs up to this size are parsed here (a query file), larger ones by scikit-learn
SMALL_BYTES = 1 << 20

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1  # the C int scikit-learn's parser stores an index in


def parse_svmlight_bytes(raw: bytes):
    """Parse svmlight text into CSR arrays, feature indices as written (no base applied).

    Parameters
    ----------
    raw : bytes
        The (decompressed) file content.

    Returns
    -------
    data : ndarray of float64
    indices : ndarray of int64
    indptr : ndarray of int64
    labels : ndarray of float64

    Raises
    ------
    ValueError
        A malformed token, a negative index, or indices of a line not strictly increasing.
    OverflowError
        An index outside a C ``int``.
    """
    data: list[float] = []
    indices: list[int] = []
    indptr = [0]
    labels: list[float] = []
    for line in raw.split(b"\n"):
        nul = line.find(b"\0")
        comment = line.find(b"#", 0, nul if nul >= 0 else len(line))
        if comment >= 0:
            line = line[:comment]
        tokens = line.split()
        if not tokens:
            continue
        labels.append(float(tokens[0]))
        start = 1
        if len(tokens) > 1 and tokens[1].startswith(b"qid"):
            _, _ = tokens[1].split(b":", 1)  # a qid token without ":" is malformed
            start = 2
        previous = -1
        for token in tokens[start:]:
            index_text, value = token.split(b":", 1)
            index = int(index_text)
            if index < _INT_MIN or index > _INT_MAX:
                raise OverflowError("a feature index does not fit a C int")
            if index < 0:
                raise ValueError(f"Invalid index {index} in SVMlight/LibSVM data file.")
            if index <= previous:
                raise ValueError("Feature indices in SVMlight/LibSVM data file should be sorted and unique.")
            indices.append(index)
            data.append(float(value))
            previous = index
        indptr.append(len(data))
    return (np.array(data, dtype=np.float64), np.array(indices, dtype=np.int64),
            np.array(indptr, dtype=np.int64), np.array(labels, dtype=np.float64))

