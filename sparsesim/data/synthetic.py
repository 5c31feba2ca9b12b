"""Synthetic corpora with RCV1 statistics, for scale tests and benchmarks (always labelled synthetic).

Documents draw ``nnz_per_doc`` distinct features: a share from a class-specific subset of the
vocabulary, the rest from a Zipf law over the whole vocabulary (frequent words shared by all
classes). Values are TF-IDF-like positive weights; rows are L2-normalised.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .containers import LabelledData


def rcv1_like(n_documents: int = 10_000, n_features: int = 47_236, nnz_per_doc: int = 75,
              n_classes: int = 10, class_share: float = 0.3, class_vocab: int = 2_000,
              zipf_exponent: float = 1.1, seed: int = 0) -> LabelledData:
    """A synthetic labelled corpus shaped like RCV1 (d = 47,236, ~75 nonzeros per document).

    Parameters
    ----------
    n_documents, n_features, nnz_per_doc, n_classes : int
    class_share : float
        Fraction of a document's features drawn from its class's own vocabulary subset.
    class_vocab : int
        Size of each class's vocabulary subset.
    zipf_exponent : float
        Exponent s of the feature-frequency law p(rank r) ~ r^-s.
    seed : int

    Returns
    -------
    LabelledData
        ``info["synthetic"] = True``.
    """
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, n_documents)
    ranks = np.arange(1, n_features + 1, dtype=np.float64)
    p = ranks ** -zipf_exponent
    p /= p.sum()
    perm = rng.permutation(n_features)  # feature id of each frequency rank
    class_sets = [rng.choice(n_features, size=min(class_vocab, n_features), replace=False) for _ in range(n_classes)]
    n_class = int(round(nnz_per_doc * class_share))
    n_common = nnz_per_doc - n_class
    common = perm[rng.choice(n_features, size=(n_documents, n_common * 2), p=p)]
    own = np.stack([rng.choice(class_sets[c], size=n_class * 2) for c in y]) if n_class else np.zeros((n_documents, 0), int)
    indptr = [0]
    cols = []
    for r in range(n_documents):
        feats = np.unique(np.concatenate([own[r, :n_class * 2], common[r]]))
        if feats.size > nnz_per_doc:
            feats = rng.choice(feats, size=nnz_per_doc, replace=False)
        cols.append(np.sort(feats))
        indptr.append(indptr[-1] + feats.size)
    indices = np.concatenate(cols)
    idf = np.log(n_features / (1.0 + np.bincount(indices, minlength=n_features))) + 1.0
    data = rng.gamma(2.0, 1.0, size=indices.size) * idf[indices]
    X = sp.csr_matrix((data, indices, np.asarray(indptr)), shape=(n_documents, n_features))
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    X = sp.diags(1.0 / np.maximum(norms, 1e-12)) @ X
    return LabelledData(X=X.tocsr(), y=y, name=f"synthetic-rcv1-like-{n_documents}x{n_features}",
                        info={"synthetic": True, "seed": seed, "nnz_per_doc": nnz_per_doc})
