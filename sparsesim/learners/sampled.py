"""Triplet sampling, passes and model averaging for the first-order bilinear learners' ``fit``.

:class:`SampledFit` gives OASIS, SORS and AdaSORS four hyper-parameters that decide which
triplets ``fit(X, y)`` shows their (unchanged) update rules, and what model it returns:

* ``sampler`` — how each triplet's negative is chosen (:mod:`sparsesim.sampling`): the SORS
  protocol's uniform negative, or one mined from a seeded pool ranked by the model being trained
  (``"semihard"``, ``"hard"``, ``"distance-weighted"``). The pool is ranked by reading the
  engine's store in place (:meth:`sparsesim.engine.bilinear.BilinearEngine.score_pairs`).
* ``pool_size`` — candidate negatives ranked per anchor.
* ``n_passes`` — passes over the ``n_triplets`` (anchor, positive) pairs drawn; the rule sees
  ``n_passes * n_triplets`` triplets.
* ``averaging`` — return the mean of M at 5 checkpoints over the second half of the updates
  (after 60%, 70%, ..., 100% of them; suffix averaging) instead of the last M.

With the defaults (``"uniform"``, one pass, no averaging) ``fit`` is the SORS protocol as
before, bit for bit.
"""

from __future__ import annotations

import math

import numpy as np

from ..sampling import SAMPLERS, iter_sampled_triplets
from ..validation import check_params

__all__ = ["AVERAGE_CHECKPOINTS", "SAMPLED_FIT_SPEC", "SampledFit"]

#: fractions of the updates after which M is added to the average (``averaging=True``)
AVERAGE_CHECKPOINTS = (0.6, 0.7, 0.8, 0.9, 1.0)

SAMPLED_FIT_SPEC = {"sampler": ("choice", SAMPLERS), "pool_size": ("int", 1, 4096),
                    "n_passes": ("int", 1, 10_000), "averaging": ("bool",)}


class SampledFit:
    """Mixin of a bilinear triplet learner (``engine_``, ``identity``, ``_make_engine``): ``fit``
    with a triplet sampler, several passes and model averaging (see the module docstring)."""

    _param_spec = SAMPLED_FIT_SPEC

    def _sampling_default(self) -> bool:
        return self.sampler == "uniform" and int(self.n_passes) == 1 and not self.averaging

    def _fit_labelled(self, X, y, progress=None):
        check_params(self)  # the sampling options are read below, before the learner's own checks
        if self._sampling_default():
            return super()._fit_labelled(X, y, progress)
        stream = iter_sampled_triplets(y, self.n_triplets, seed=self.random_state, sampler=self.sampler,
                                       score=lambda pairs: self.current_scores(X, pairs), pool_size=self.pool_size,
                                       n_passes=self.n_passes, chunk_size=self._fit_chunk)
        total = int(self.n_triplets) * int(self.n_passes)
        average = _Average() if self.averaging and total > 0 else None
        batches = ({"triplets": chunk} for chunk in stream)
        if average is not None:
            batches = self._checkpointed(batches, total, average)
        self._fit_stream(X, batches, progress)
        if average is not None and average.count:
            engine = self._make_engine(self.n_features_in_)
            engine.store.load_csr(average.mean(), 1.0 if self.identity else 0.0)
            self.engine_ = engine
            self._model_cache = None
        return self

    def _checkpointed(self, batches, total, average):
        """``batches``, cut at the checkpoints; after the update of each batch that ends at one, M
        joins ``average``."""
        marks = [math.ceil(f * total) for f in AVERAGE_CHECKPOINTS]
        done = 0
        for batch in batches:
            triplets = batch["triplets"]
            while triplets.shape[0]:
                cut = triplets.shape[0] if not marks else min(triplets.shape[0], marks[0] - done)
                yield {"triplets": triplets[:cut]}  # resumed once these triplets have been learned
                done += cut
                triplets = triplets[cut:]
                crossed = 0
                while marks and marks[0] <= done:
                    marks.pop(0)
                    crossed += 1
                if crossed and "engine_" in self.__dict__:
                    average.add(self.engine_.export_W(bool(self.identity)), crossed)

    def current_scores(self, X, pairs) -> np.ndarray:
        """Scores ``X[a] M X[b]^T`` of the rows ``(a, b)`` of ``pairs`` under the model as trained so far.

        Parameters
        ----------
        X : scipy.sparse.csr_matrix
            The training corpus (already checked).
        pairs : array of int, shape (k, 2)

        Returns
        -------
        ndarray of shape (k,)
        """
        pairs = np.asarray(pairs, np.int64).reshape(-1, 2)
        engine = self.__dict__.get("engine_")
        if engine is not None:
            return engine.score_pairs(X, pairs)
        if not self.identity:  # M_1 = 0
            return np.zeros(pairs.shape[0])
        return np.asarray(X[pairs[:, 0]].multiply(X[pairs[:, 1]]).sum(axis=1)).ravel()


class _Average:
    """A weighted running sum of sparse matrices."""

    def __init__(self):
        self.total = None
        self.count = 0

    def add(self, W, weight: int) -> None:
        W = W.tocsr().astype(np.float64) * float(weight)
        self.total = W if self.total is None else self.total + W
        self.count += int(weight)

    def mean(self):
        return (self.total / self.count).tocsr()
