"""Checked value objects: a command's settings validated once, then handed on as trusted.

The CLI builds one before the library is imported (a bad value is refused in well under a
second); the library function it calls takes the object as it is and checks raw values itself
for every other caller, so each value is checked once on each walk.
"""

from __future__ import annotations

from dataclasses import dataclass

from .budgets import check_n_triplets
from .params import check_float, check_int

__all__ = ["TrainSettings", "check_train_settings"]


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
