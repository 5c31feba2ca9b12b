"""Checked value objects: a command's settings validated once, then handed on as trusted.

The CLI builds one before the library is imported (a bad value is refused in well under a
second); the library function it calls takes the object as it is and checks raw values itself
for every other caller, so each value is checked once on each walk.
"""

from __future__ import annotations

from dataclasses import dataclass

import scipy.sparse as sp

from ..exceptions import InvalidInputError
from .arrays import check_csr
from .params import MAX_SEED, check_int
from .specs import CheckedParams, check_param

__all__ = ["CheckedQueries", "CheckedRows", "CheckedTopK", "TRAIN_SETTINGS_SPEC", "TrainSettings", "check_queries",
           "check_rows", "check_top_k_value", "check_train_settings", "rows_of"]

#: The spec entries of a training run's settings (see :func:`~sparsesim.validation.check_param`):
#: at least one triplet (up to the limit), a seed numpy takes, a share strictly inside (0, 1).
TRAIN_SETTINGS_SPEC = {
    "n_triplets": ("n_triplets", {"allow_zero": False}),
    "seed": ("int", 0, MAX_SEED),
    "train_fraction": ("float", 0, 1, {"low_open": True, "high_open": True}),
}


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

    def estimator_params(self) -> CheckedParams:
        """``n_triplets`` and ``random_state`` (the seed) as checked values, for
        :func:`~sparsesim.validation.record_checked`: the estimator built with them does not
        check them again at ``fit`` (their ranges lie within the estimators' own)."""
        spec = TRAIN_SETTINGS_SPEC
        return CheckedParams({"n_triplets": self.n_triplets, "random_state": self.seed},
                             {"n_triplets": (spec["n_triplets"], self.n_triplets),
                              "random_state": (spec["seed"], self.seed)})


def check_train_settings(n_triplets=100_000, seed=0, train_fraction=0.7) -> TrainSettings:
    """Check the triplet count, seed and training share of a run once; the checked object.

    The messages name the CLI options (``--triplets``, ``--seed``, ``--train-fraction``); the
    ranges are :data:`TRAIN_SETTINGS_SPEC`'s.

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
    spec = TRAIN_SETTINGS_SPEC
    return TrainSettings(n_triplets=check_param(n_triplets, "--triplets", spec["n_triplets"]),
                         seed=check_param(seed, "--seed", spec["seed"]),
                         train_fraction=check_param(train_fraction, "--train-fraction", spec["train_fraction"]))


class CheckedTopK(int):
    """A result count checked once to be an integer >= 1 (build it with :func:`check_top_k_value`).

    An index given one checks only its own size bound (``top_k`` at most its documents), which
    only the loaded index knows; any other value it checks whole.
    """

    __slots__ = ()


def check_top_k_value(value, name: str = "top_k") -> CheckedTopK:
    """Check a result count once: an integer >= 1 (the message names ``name``, e.g. ``--top-k``).

    Examples
    --------
    >>> from sparsesim.validation import check_top_k_value
    >>> check_top_k_value(5, "--top-k")
    5
    >>> check_top_k_value(0, "--top-k")
    Traceback (most recent call last):
    ...
    sparsesim.exceptions.InvalidParameterError: --top-k must be an integer in [1, inf), got 0
    """
    return CheckedTopK(check_int(value, name, 1))


@dataclass(frozen=True)
class CheckedRows:
    """Rows checked once (build it with :func:`check_rows`, or from rows that were: stored
    corpus rows, rows a request parser checked).

    An entry point given one (:func:`rows_of`: the learners' ``partial_fit_triplets``, an
    index's queries) compares only its width with its own and uses the rows as they are.

    Attributes
    ----------
    rows : scipy.sparse.csr_matrix
        Canonical float64 CSR: sorted indices, no duplicates, finite values.
    """

    rows: sp.csr_matrix


def check_rows(X, name: str = "X", n_features: int | None = None) -> CheckedRows:
    """:func:`~sparsesim.validation.check_csr` once, as a :class:`CheckedRows`."""
    return CheckedRows(check_csr(X, name=name, n_features=n_features))


def rows_of(X, name: str = "X", n_features: int | None = None) -> sp.csr_matrix:
    """The canonical rows of ``X``: a :class:`CheckedRows` as it is (its width compared with
    ``n_features``), anything else checked by :func:`~sparsesim.validation.check_csr`.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> from sparsesim.validation import check_rows, rows_of
    >>> checked = check_rows(sp.csr_matrix([[0.0, 2.0, 1.0]]), n_features=3)
    >>> rows_of(checked, n_features=3) is checked.rows
    True
    >>> rows_of(checked, n_features=4)
    Traceback (most recent call last):
    ...
    sparsesim.exceptions.InvalidInputError: X has 3 features but 4 are expected (feature-count mismatch)
    """
    if not isinstance(X, CheckedRows):
        return check_csr(X, name=name, n_features=n_features)
    if n_features is not None and X.rows.shape[1] != n_features:
        raise InvalidInputError(f"{name} has {X.rows.shape[1]} features but {n_features} are expected "
                                "(feature-count mismatch)")
    return X.rows


@dataclass(frozen=True)
class CheckedQueries(CheckedRows):
    """Query rows and a result count checked against one corpus (build it with
    :func:`check_queries`, or a request parser that checks the same things).

    An index takes it as its rows (``index.query(checked, checked.top_k)``): its ``top_k`` is a
    :class:`CheckedTopK`, of which the index checks only its size bound.

    Attributes
    ----------
    rows : scipy.sparse.csr_matrix
        Canonical float64 CSR (sorted indices, no duplicates, finite values) of the corpus's width.
    top_k : CheckedTopK
        Results per query, in [1, number of documents].
    """

    top_k: int

    def __post_init__(self):
        object.__setattr__(self, "top_k", CheckedTopK(self.top_k))


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
