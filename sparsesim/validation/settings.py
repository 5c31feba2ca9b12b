"""Checked value objects: a command's settings validated once, then handed on as trusted.

The CLI builds one before the library is imported (a bad value is refused in well under a
second); the library function it calls takes the object as it is and checks raw values itself
for every other caller, so each value is checked once on each walk.
"""

from __future__ import annotations

from dataclasses import dataclass

import scipy.sparse as sp

from .arrays import check_csr
from .budgets import check_n_triplets
from .params import check_float, check_int

__all__ = ["CheckedQueries", "TrainSettings", "check_queries", "check_train_settings"]


@dataclass(frozen=True)
class TrainSettings:
    """The checked settings of one training run (build it with :func:`check_train_settings`).

    Attributes
    ----------
    n_triplets : int
        Training triplets, in [1, ``$SPARSESIM_MAX_TRIPLETS``].
    seed : int
        Seed of the split and the triplet stream, in [0, 2**32 - 1].
    train_fraction : float
        Per-class share of documents used for training, strictly between 0 and 1.
    """

    n_triplets: int
    seed: int
    train_fraction: float


def check_train_settings(n_triplets=100_000, seed=0, train_fraction=0.7) -> TrainSettings:
    """Check the triplet count, seed and training share of a run once; the checked object.

    The messages name the CLI options (``--triplets``, ``--seed``, ``--train-fraction``).

    Examples
    --------
    >>> from sparsesim.validation import check_train_settings
    >>> check_train_settings(200, seed=1, train_fraction=0.5)
    TrainSettings(n_triplets=200, seed=1, train_fraction=0.5)
    >>> check_train_settings(200, train_fraction=1.0)
    Traceback (most recent call last):
    ...
    sparsesim.exceptions.InvalidParameterError: --train-fraction must be a number in (0, 1), got 1.0
    """
    return TrainSettings(n_triplets=check_n_triplets(n_triplets, "--triplets"),
                         seed=check_int(seed, "--seed", 0, 2**32 - 1),
                         train_fraction=check_float(train_fraction, "--train-fraction", 0, 1,
                                                    low_open=True, high_open=True))


@dataclass(frozen=True)
class CheckedQueries:
    """Query rows and a result count checked against one corpus (build it with
    :func:`check_queries`, or a request parser that checks the same things).

    Attributes
    ----------
    rows : scipy.sparse.csr_matrix
        Canonical float64 CSR (sorted indices, no duplicates, finite values) of the corpus's width.
    top_k : int
        Results per query, in [1, number of documents].
    """

    rows: sp.csr_matrix
    top_k: int


def check_queries(Q, top_k, n_features: int, n_documents: int) -> CheckedQueries:
    """Check query rows (``check_csr``, width ``n_features``) and ``top_k`` (1 to ``n_documents``) once.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> from sparsesim.validation import check_queries
    >>> checked = check_queries(sp.csr_matrix([[0.0, 2.0, 1.0]]), 2, n_features=3, n_documents=5)
    >>> checked.top_k, checked.rows.nnz
    (2, 2)
    >>> check_queries(sp.csr_matrix([[0.0, 2.0, 1.0]]), 6, n_features=3, n_documents=5)
    Traceback (most recent call last):
    ...
    sparsesim.exceptions.InvalidParameterError: top_k must be ...
    """
    rows = check_csr(Q, name="queries", n_features=n_features)
    return CheckedQueries(rows=rows, top_k=check_int(top_k, "top_k", 1, n_documents))
