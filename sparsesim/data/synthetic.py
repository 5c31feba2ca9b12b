"""Synthetic corpora with RCV1 statistics, for scale tests and benchmarks (always labelled synthetic).

Documents draw ``nnz_per_doc`` distinct features: a share from a class-specific subset of the
vocabulary, the rest from a Zipf law over the whole vocabulary (frequent words shared by all
classes). Values are TF-IDF-like positive weights; rows are L2-normalised.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sparsesim.persistence.npy_stream import NpyAppender, NpyRows

from .containers import LabelledData
from .corpus_files import CorpusWriter


#: version of the synthetic corpora's recipe (2: features weighted by :func:`smooth_idf`); caches of
#: models trained on generated corpora key on it
GENERATOR_VERSION = 2


def smooth_idf(df: np.ndarray, n_documents: int) -> np.ndarray:
    """scikit-learn's smoothed IDF, ``log((1 + n) / (1 + df)) + 1``: at least 1, so every value of a
    generated corpus is positive, as the TF-IDF weights of a real one are.

    >>> smooth_idf(np.array([0, 9, 99]), 99).round(3).tolist()
    [5.605, 3.303, 1.0]
    """
    return np.log((1.0 + n_documents) / (1.0 + np.asarray(df, dtype=np.float64))) + 1.0


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
    idf = smooth_idf(np.bincount(indices, minlength=n_features), n_documents)
    data = rng.gamma(2.0, 1.0, size=indices.size) * idf[indices]
    X = sp.csr_matrix((data, indices, np.asarray(indptr)), shape=(n_documents, n_features))
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    X = sp.diags(1.0 / np.maximum(norms, 1e-12)) @ X
    return LabelledData(X=X.tocsr(), y=y, name=f"synthetic-rcv1-like-{n_documents}x{n_features}",
                        info={"synthetic": True, "seed": seed, "nnz_per_doc": nnz_per_doc,
                              "generator_version": GENERATOR_VERSION})


def _rcv1_block(rng, n: int, perm, cdf, class_sets, n_class: int, n_common: int, nnz_per_doc: int, n_classes: int):
    """Labels and sorted feature sets of ``n`` documents (vectorised :func:`rcv1_like` sampling)."""
    y = rng.integers(0, n_classes, n)
    common = perm[np.minimum(np.searchsorted(cdf, rng.random((n, n_common * 2)), side="right"), perm.size - 1)]
    own = class_sets[y[:, None], rng.integers(0, class_sets.shape[1], (n, n_class * 2))]
    cand = np.sort(np.concatenate([own, common], axis=1), axis=1)
    distinct = np.ones(cand.shape, dtype=bool)
    distinct[:, 1:] = cand[:, 1:] != cand[:, :-1]
    keys = rng.random(cand.shape)
    keys[~distinct] = 2.0  # duplicates last: a document keeps up to nnz_per_doc distinct features
    m = min(nnz_per_doc, keys.shape[1])
    pick = np.argpartition(keys, m - 1, axis=1)[:, :m] if m < keys.shape[1] else np.arange(m)[None, :].repeat(n, 0)
    valid = np.take_along_axis(keys, pick, axis=1) < 2.0
    feats = np.where(valid, np.take_along_axis(cand, pick, axis=1), np.iinfo(np.int64).max)
    feats = np.sort(feats, axis=1)
    counts = valid.sum(axis=1)
    return y, feats[feats != np.iinfo(np.int64).max].astype(np.int32), counts


def write_rcv1_like(directory, n_documents: int, n_features: int = 47_236, nnz_per_doc: int = 75,
                    n_classes: int = 10, class_share: float = 0.3, class_vocab: int = 2_000,
                    zipf_exponent: float = 1.1, seed: int = 0, block_size: int = 100_000):
    """Generate a synthetic RCV1-like corpus into a corpus directory, one block of documents at a time.

    The documents follow the recipe of :func:`rcv1_like` (class vocabulary share, Zipf
    frequencies, TF-IDF-like gamma weights, L2-normalised rows), drawn with vectorised sampling
    and one generator per block (seeded from ``seed`` and the block number), so memory holds one
    block whatever ``n_documents`` is, and the corpus is a function of ``(seed, block_size)`` and
    the shape parameters. Two passes: the first writes the features and counts document
    frequencies, the second draws the values with the corpus's IDF.

    Parameters
    ----------
    directory : path-like
        A new or empty directory (:mod:`sparsesim.data.corpus_files`).
    n_documents, n_features, nnz_per_doc, n_classes, class_share, class_vocab, zipf_exponent, seed
        As in :func:`rcv1_like`.
    block_size : int, default 100,000
        Documents generated at once (about 1 KB of memory each while generated).

    Returns
    -------
    CorpusFiles
        The corpus, opened (labels included).

    Examples
    --------
    >>> import tempfile
    >>> corpus = write_rcv1_like(tempfile.mkdtemp(), 1_000, seed=0, block_size=300)
    >>> corpus.n_documents, corpus.n_features, corpus.nnz > 70_000
    (1000, 47236, True)
    >>> X = corpus.rows(0, 1000)
    >>> bool(np.allclose(np.sqrt(X.multiply(X).sum(axis=1)), 1.0))
    True
    """
    n_documents, block_size = int(n_documents), int(block_size)
    if n_documents < 1 or block_size < 1:
        raise ValueError("n_documents and block_size must be positive")
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, n_features + 1, dtype=np.float64)
    p = ranks ** -zipf_exponent
    p /= p.sum()
    cdf = np.cumsum(p)
    perm = rng.permutation(n_features)
    class_sets = np.stack([rng.choice(n_features, size=min(class_vocab, n_features), replace=False)
                           for _ in range(n_classes)])
    n_class = int(round(nnz_per_doc * class_share))
    n_common = nnz_per_doc - n_class
    writer = CorpusWriter(directory, n_features, labels=True)
    raw = writer.directory / ".features.npy"
    feats_out = NpyAppender(raw, np.int32)
    df = np.zeros(n_features, dtype=np.int64)
    counts_all = []
    for b, lo in enumerate(range(0, n_documents, block_size)):
        block_rng = np.random.default_rng([seed, b])
        y, feats, counts = _rcv1_block(block_rng, min(block_size, n_documents - lo), perm, cdf, class_sets,
                                       n_class, n_common, nnz_per_doc, n_classes)
        feats_out.append(feats)
        df += np.bincount(feats, minlength=n_features)
        counts_all.append((y, counts.astype(np.int32)))
    feats_out.close()
    idf = smooth_idf(df, n_documents)
    features = NpyRows(raw, np.int32)
    pos = 0
    for b, (y, counts) in enumerate(counts_all):
        nnz = int(counts.sum())
        indices = features.read(pos, pos + nnz)
        pos += nnz
        values = np.random.default_rng([seed, b, 1]).gamma(2.0, 1.0, size=nnz) * idf[indices]
        indptr = np.zeros(counts.size + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        X = sp.csr_matrix((values, indices, indptr), shape=(counts.size, n_features))
        norms = np.sqrt(np.add.reduceat(values * values, indptr[:-1])) if nnz else np.ones(counts.size)
        X.data = values / np.repeat(np.maximum(norms, 1e-12), counts)
        writer.append(X, y)
    features.close()
    raw.unlink()
    return writer.close()
