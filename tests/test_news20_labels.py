"""The newsgroup of each LIBSVM news20 label (``NEWS20_LIBSVM_NAMES``), checked against the data.

The LIBSVM file has no vocabulary and no class names, and its labels 1..20 are not in
alphabetical newsgroup order. The 20news-bydate copy of the R ``lda`` package
(``news20/news20_lda.*``: counts, vocabulary, label names) gives two independent checks:

1. structure: the 20 x 20 cosine matrix of TF-IDF class centroids does not depend on the
   vocabulary; under the table's order it correlates with the named copy's matrix far better than
   under alphabetical order, and no swap of two labels improves it;
2. vocabulary: features of both files are aligned by their per-class document-frequency profiles
   over the classes whose structure is unambiguous, and every LIBSVM class is then assigned to
   the named class whose log document-frequency profile correlates best: the table's name.

Skips when ``SPARSESIM_DATA`` lacks the files.
"""

import lzma

import numpy as np
import pytest
from sklearn.datasets import load_svmlight_file
from sklearn.feature_extraction.text import TfidfTransformer
from sklearn.preprocessing import normalize

from sparsesim.data import load_dataset, locate
from sparsesim.data.multitask import NEWS20_LIBSVM_NAMES
from sparsesim.exceptions import DataNotFoundError

AMBIGUOUS = ("alt.atheism", "soc.religion.christian", "talk.religion.misc")  # weakly separated by structure


@pytest.fixture(scope="module")
def both():
    try:
        lib = load_dataset("news20", representation="raw")
        with lzma.open(locate("news20/news20_lda.train.svm.xz", "news20")) as fh:
            Xl, yl = load_svmlight_file(fh)
        with lzma.open(locate("news20/news20_lda.labels.txt.xz", "news20"), "rt") as fh:
            names = [line.split("\t")[-1].split()[-1] for line in fh if line.strip()]
    except (DataNotFoundError, FileNotFoundError) as exc:
        pytest.skip(f"news20 and its named lda copy are not available: {exc}")
    return lib, Xl.tocsr(), yl.astype(int), names


def _centroid_cosines(X, y):
    X = TfidfTransformer().fit_transform(X)
    C = normalize(np.vstack([np.asarray(X[y == c].mean(axis=0)).ravel() for c in np.unique(y)]))
    return C @ C.T


def _doc_rates(X, y, labels):
    B = (X > 0).astype(np.float64).tocsc()
    return np.vstack([np.asarray(B[y == c].mean(axis=0)).ravel() for c in labels])


def test_centroid_structure_supports_the_label_table(both):
    lib, Xl, yl, names = both
    Ca, Cl = _centroid_cosines(lib.X, lib.y), _centroid_cosines(Xl, yl)
    iu = np.triu_indices(20, 1)

    def score(p):  # p[named class index] = LIBSVM label index
        return np.corrcoef(Ca[np.ix_(p, p)][iu], Cl[iu])[0, 1]

    lib_of = {v: k for k, v in NEWS20_LIBSVM_NAMES.items()}
    table = np.array([lib_of[n] - 1 for n in names])
    best = score(table)
    assert best > 0.7 and score(np.arange(20)) < 0.1
    for i in range(20):
        for j in range(i + 1, 20):
            q = table.copy()
            q[i], q[j] = q[j], q[i]
            if not {names[i], names[j]} <= set(AMBIGUOUS):
                assert score(q) < best, (names[i], names[j])


def test_vocabulary_profiles_assign_every_label_its_table_name(both):
    lib, Xl, yl, names = both
    lib_of = {v: k for k, v in NEWS20_LIBSVM_NAMES.items()}
    confident = [n for n in names if n not in AMBIGUOUS]
    Ra = _doc_rates(lib.X, lib.y, [lib_of[n] for n in confident])
    Rl = _doc_rates(Xl, yl, [names.index(n) + 1 for n in confident])
    fa, fl = np.flatnonzero(Ra.mean(0) > 0.005), np.flatnonzero(Rl.mean(0) > 0.005)

    def profile(R):
        P = np.sqrt(R)
        return P / np.linalg.norm(P, axis=0, keepdims=True)

    S = profile(Ra[:, fa]).T @ profile(Rl[:, fl])
    match, sim = S.argmax(1), S.max(1)
    ok = (sim > 0.97) & (np.abs(np.log(Ra[:, fa].mean(0) / Rl[:, fl][:, match].mean(0))) < 0.5)
    assert ok.sum() > 1000  # aligned terms
    A = _doc_rates(lib.X, lib.y, range(1, 21))[:, fa[ok]]
    L = _doc_rates(Xl, yl, range(1, 21))[:, fl[match[ok]]]
    corr = np.corrcoef(np.log(A + 1e-3), np.log(L + 1e-3))[:20, 20:]
    assigned = {c + 1: names[int(corr[c].argmax())] for c in range(20)}
    assert assigned == NEWS20_LIBSVM_NAMES
