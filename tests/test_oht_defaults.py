"""OHT's data-adaptive K (``n_neighbors="auto"``): chosen from the co-occurring pairs alone."""

import numpy as np
import pytest

from sparsesim.exceptions import InvalidInputError
from sparsesim.learners.transfer import OHTClassifier
from sparsesim.learners.transfer_source import K_CANDIDATES, KNNSourceHypothesis, choose_neighbors


def _pairs(n_clusters, per_cluster, noise, seed):
    """Pair images in ``n_clusters`` tight clusters whose texts share a class (cluster parity), a
    share ``noise`` of the texts flipped; labelled source documents of the same text view."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=10.0, size=(n_clusters, 4))
    cluster = np.repeat(np.arange(n_clusters), per_cluster)
    images = centers[cluster] + rng.normal(scale=0.5, size=(cluster.size, 4))
    label = np.where(cluster % 2 == 0, 1.0, -1.0)
    label = np.where(rng.random(label.size) < noise, -label, label)
    texts = label[:, None] * np.array([[2.0, 0.0]]) + rng.normal(scale=0.3, size=(label.size, 2))
    src_y = np.where(rng.random(200) < 0.5, 1.0, -1.0)
    src_X = src_y[:, None] * np.array([[2.0, 0.0]]) + rng.normal(scale=0.3, size=(200, 2))
    return src_X, src_y, images, texts


def test_small_clusters_choose_a_small_k():
    src_X, src_y, images, texts = _pairs(n_clusters=60, per_cluster=6, noise=0.0, seed=0)
    h = KNNSourceHypothesis(n_neighbors="auto", bandwidth=50.0).fit(src_X, src_y, images, texts)
    assert h.n_neighbors_ == 5  # a larger K reaches into other clusters of the other class
    assert h.neighbor_agreement_[5] > h.neighbor_agreement_[200]


def test_noisy_texts_in_large_clusters_choose_a_large_k():
    src_X, src_y, images, texts = _pairs(n_clusters=2, per_cluster=150, noise=0.3, seed=1)
    h = KNNSourceHypothesis(n_neighbors="auto", bandwidth=50.0).fit(src_X, src_y, images, texts)
    assert h.n_neighbors_ >= 50  # averaging more pairs of the cluster cancels the flipped texts
    assert h.neighbor_agreement_[h.n_neighbors_] > h.neighbor_agreement_[5]
    assert set(h.neighbor_agreement_) <= set(K_CANDIDATES)


def test_the_choice_reads_the_pairs_only():
    src_X, src_y, images, texts = _pairs(n_clusters=10, per_cluster=20, noise=0.2, seed=2)
    h = KNNSourceHypothesis(n_neighbors="auto", bandwidth=5.0).fit(src_X, src_y, images, texts)
    k, agreement = choose_neighbors(h)
    assert (k, agreement) == (h.n_neighbors_, h.neighbor_agreement_)
    fixed = KNNSourceHypothesis(n_neighbors=k, bandwidth=5.0).fit(src_X, src_y, images, texts)
    queries = images[:7] + 0.1
    np.testing.assert_allclose(h.decision_function(queries), fixed.decision_function(queries))


def test_auto_is_the_classifier_default_and_explicit_k_wins():
    assert OHTClassifier().n_neighbors == "auto"
    src_X, src_y, images, texts = _pairs(n_clusters=2, per_cluster=40, noise=0.0, seed=3)
    clf = OHTClassifier(combiner="discount", sigma=3.0, n_neighbors=7).fit_source(src_X, src_y, images, texts)
    assert clf.source_.k_ == 7 and clf.source_.neighbor_agreement_ == {}


@pytest.mark.parametrize("bad", [0, -3, "many", True])
def test_bad_k_is_refused(bad):
    src_X, src_y, images, texts = _pairs(n_clusters=2, per_cluster=10, noise=0.0, seed=4)
    with pytest.raises(InvalidInputError, match="n_neighbors"):
        KNNSourceHypothesis(n_neighbors=bad).fit(src_X, src_y, images, texts)
