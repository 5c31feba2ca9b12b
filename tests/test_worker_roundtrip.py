"""A learner returned by a joblib worker keeps learning where it stopped.

``tune`` sends each surviving trial back to a worker to continue with more triplets; joblib
hands every large array to a worker as a read-only memory map, and the compiled kernels write
into the learner's store in place. Forced here with ``max_nbytes=1`` (every array mapped).
"""

from __future__ import annotations

import numpy as np
import pytest
from joblib import Parallel, delayed

from sparsesim.data.synthetic import rcv1_like
from sparsesim.registry import make_estimator
from sparsesim.triplets import sors_triplets

DATA = rcv1_like(300, n_features=400, nnz_per_doc=15, n_classes=4, class_vocab=60, seed=0)


def _continue(est, triplets):
    return est.partial_fit_triplets(DATA.X, triplets)


@pytest.mark.parametrize("name", ["oasis", "sors-l1", "sors-offdiag", "adasors-l1", "paas", "cws-d"])
def test_learner_continues_in_a_worker_like_in_process(name):
    first, second = sors_triplets(DATA.y, 300, seed=1), sors_triplets(DATA.y, 300, seed=2)
    here = make_estimator(name, random_state=0).partial_fit_triplets(DATA.X, first)
    there = make_estimator(name, random_state=0).partial_fit_triplets(DATA.X, first)
    here.partial_fit_triplets(DATA.X, second)
    there = Parallel(n_jobs=2, max_nbytes=1, mmap_mode="r")(delayed(_continue)(there, second) for _ in range(1))[0]
    assert there.n_triplets_seen_ == here.n_triplets_seen_ == 600
    a, b = here.model_.score_matrix(DATA.X[:20], DATA.X), there.model_.score_matrix(DATA.X[:20], DATA.X)
    np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)
