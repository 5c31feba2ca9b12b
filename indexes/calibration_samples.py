"""The query samples of a recall calibration (:mod:`sparsesim.indexes.calibration`): strata of a
corpus (its labels, or clusters), disjoint samples balanced over the strata, recall per stratum."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sparsesim.csr_rows import row_range, take_rows

__all__ = ["corpus_strata", "stratified_split", "recall_by_stratum", "corpus_weighted_summary",
           "balanced_shares", "stratified_summary"]

_N_STRATA = 20  # clusters when the corpus has no labels
_PROJECTION_DIM = 32
_KMEANS_SAMPLE = 20000  # documents the k-means is fitted on
_BLOCK = 100_000  # rows projected and assigned at once


def corpus_strata(X, n_strata: int = _N_STRATA, seed: int = 0) -> np.ndarray:
    """A cluster number (0 .. ``n_strata`` - 1) for every row of the sparse corpus ``X`` (a CSR
    matrix, or an object with ``shape``, ``take(rows)`` and ``rows(lo, hi)`` returning CSR rows).

    A seeded k-means (scikit-learn ``MiniBatchKMeans``) on the L2-normalised rows of a
    32-dimensional truncated SVD of the corpus (latent semantic analysis), both fitted on at most
    20,000 rows and applied to all rows a block at a time (memory bounded by the block and the
    features x 32 projection, whatever the corpus size).

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> X = sp.random(200, 50, density=0.1, format="csr", random_state=0)
    >>> labels = corpus_strata(X, n_strata=4, seed=0)
    >>> labels.shape, int(labels.max()) <= 3
    ((200,), True)
    """
    from sklearn.cluster import MiniBatchKMeans
    from sklearn.decomposition import TruncatedSVD
    from sklearn.preprocessing import normalize

    n = X.shape[0]
    if sp.issparse(X):
        take, block = (lambda rows: take_rows(X, rows)), (lambda lo, hi: row_range(X, lo, hi))
    else:  # rows read from disk (e.g. :class:`~sparsesim.data.corpus_files.CorpusFiles`)
        take, block = X.take, X.rows
    k = int(max(1, min(n_strata, n // 10)))
    if k == 1:
        return np.zeros(n, dtype=np.int64)
    rng = np.random.default_rng(seed)
    fit_rows = np.sort(rng.choice(n, size=min(n, _KMEANS_SAMPLE), replace=False))
    sample = take(fit_rows)
    sample = sp.csr_matrix((sample.data, sample.indices.astype(np.int32), sample.indptr.astype(np.int64)),
                           shape=sample.shape)  # scikit-learn's sparse statistics take 32-bit indices
    if sample.nnz < 2**31 - 1:
        sample.indptr = sample.indptr.astype(np.int32)
    dim = int(min(_PROJECTION_DIM, sample.shape[1] - 1, sample.shape[0] - 1))
    svd = TruncatedSVD(n_components=dim, n_iter=3, random_state=int(rng.integers(2**31 - 1))).fit(sample)
    B = np.ascontiguousarray(svd.components_.T)  # features x dim

    def project(rows):  # scipy's product takes any index dtype (int64 corpora included)
        return normalize(np.asarray(rows @ B, dtype=np.float64))

    kmeans = MiniBatchKMeans(n_clusters=k, random_state=int(rng.integers(2**31 - 1)), n_init=3,
                             batch_size=1024)
    kmeans.fit(project(sample))
    out = np.empty(n, dtype=np.int64)
    for lo in range(0, n, _BLOCK):
        out[lo:lo + _BLOCK] = kmeans.predict(project(block(lo, lo + _BLOCK)))
    return out


def _balanced_counts(capacity: np.ndarray, m: int, rng) -> np.ndarray:
    """``m`` draws shared equally over strata of the given capacities (a full stratum gives all
    it has; the remainder of an unequal share goes to randomly chosen strata)."""
    counts = np.zeros_like(capacity)
    m = int(min(m, capacity.sum()))
    while m > 0:
        open_ = np.flatnonzero(counts < capacity)
        share = m // open_.size
        if share == 0:
            counts[rng.choice(open_, size=m, replace=False)] += 1
            break
        add = np.minimum(share, capacity[open_] - counts[open_])
        counts[open_] += add
        m -= int(add.sum())
    return counts


def _proportional_counts(capacity: np.ndarray, shares: np.ndarray, m: int) -> np.ndarray:
    """``m`` draws in proportion to ``shares`` (largest remainders), none beyond a stratum's
    ``capacity``: a full stratum's excess goes to the others, again in proportion."""
    counts = np.zeros_like(capacity)
    m = int(min(m, capacity.sum()))
    while m > int(counts.sum()):
        open_ = np.flatnonzero(counts < capacity)
        left = m - int(counts.sum())
        exact = left * shares[open_] / shares[open_].sum()
        add = np.floor(exact).astype(np.int64)
        extra = left - int(add.sum())
        if extra > 0:  # the largest fractional parts get one more (ties to the lower stratum)
            add[np.argsort(-(exact - add), kind="stable")[:extra]] += 1
        counts[open_] += np.minimum(add, capacity[open_] - counts[open_])
    return counts


def stratified_split(strata, sizes, seed, proportional: float = 0.0) -> list:
    """Disjoint stratified samples of rows, ``sizes[j]`` rows for sample j (sorted row arrays).

    Together the samples take a share 1 - ``proportional`` of their rows equally from every
    stratum as far as the strata allow (a small stratum gives all it has, the others share the
    rest) and a share ``proportional`` in proportion to each stratum's size in the corpus; each
    sample gets its proportional share of every stratum's rows (within one row), so a small
    stratum is present in every sample.

    Examples
    --------
    >>> import numpy as np
    >>> strata = np.repeat([0, 1, 2], [50, 50, 5])
    >>> selection, certification = stratified_split(strata, [30, 30], seed=0)
    >>> len(set(selection) & set(certification))
    0
    >>> np.bincount(strata[selection]).tolist(), np.bincount(strata[certification]).tolist()
    ([13, 14, 3], [14, 14, 2])
    >>> strata = np.repeat([0, 1, 2, 3], [700, 100, 100, 100])  # stratum 0: 70% of the corpus
    >>> half, = stratified_split(strata, [40], seed=0, proportional=0.5)
    >>> np.bincount(strata[half]).tolist()                      # 5 + 14 of stratum 0
    [19, 7, 7, 7]
    """
    if not 0.0 <= float(proportional) <= 1.0:
        raise ValueError(f"proportional must lie in [0, 1], got {proportional}")
    strata = np.asarray(strata)
    _, codes = np.unique(strata, return_inverse=True)
    codes = codes.ravel()
    rng = np.random.default_rng(seed)
    members = [rng.permutation(np.flatnonzero(codes == c)) for c in range(int(codes.max()) + 1)]
    capacity = np.array([m.size for m in members], dtype=np.int64)
    total = int(min(sum(int(v) for v in sizes), capacity.sum()))
    n_prop = int(round(float(proportional) * total))
    left = _balanced_counts(capacity, total - n_prop, rng)
    left += _proportional_counts(capacity - left, capacity.astype(np.float64), n_prop)
    used = np.zeros_like(capacity)
    samples = []
    for size in sizes:
        size = int(min(int(size), left.sum()))
        exact = left * (size / left.sum()) if left.sum() else np.zeros(left.size)
        counts = np.floor(exact).astype(np.int64)
        extra = size - int(counts.sum())
        if extra > 0:  # the largest fractional parts get one more (ties in random order)
            order = rng.permutation(left.size)
            order = order[np.argsort(-(exact - counts)[order], kind="stable")]
            counts[order[:extra]] += 1
        rows = [members[c][used[c]:used[c] + counts[c]] for c in range(len(members))]
        used += counts
        left -= counts
        samples.append(np.sort(np.concatenate(rows)).astype(np.int64))
    return samples


def balanced_shares(strata, m: int) -> dict:
    """{stratum: weight} of the population a balanced sample of ``m`` corpus rows represents:
    every stratum weighs the same, except that a stratum smaller than its equal share weighs its
    size (it gives all it has; the others share the rest), as :func:`stratified_split` draws.

    Examples
    --------
    >>> import numpy as np
    >>> shares = balanced_shares(np.repeat([0, 1, 2], [50, 50, 5]), 65)
    >>> {k: round(v, 3) for k, v in shares.items()}
    {0: 0.462, 1: 0.462, 2: 0.077}
    """
    values, capacity = np.unique(np.asarray(strata), return_counts=True)
    m = float(min(max(int(m), 1), capacity.sum()))
    lo, hi = 0.0, float(capacity.max())
    for _ in range(100):  # the level c with sum(min(capacity, c)) = m, by bisection
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if np.minimum(capacity, mid).sum() < m else (lo, mid)
    weights = np.minimum(capacity, hi)
    return dict(zip(values.tolist(), (weights / weights.sum()).tolist()))


def recall_by_stratum(per_query, strata_of_rows, names=None, strata=None) -> dict:
    """{stratum name: {"n": queries, "recall": mean recall}} of per-query recalls; with ``strata``
    (the stratum of every corpus document) each entry also gives ``"share"``, the stratum's share
    of the corpus."""
    per_query = np.asarray(per_query, dtype=np.float64)
    strata_of_rows = np.asarray(strata_of_rows)
    if strata is not None:
        values, counts = np.unique(np.asarray(strata), return_counts=True)
        shares = dict(zip(values.tolist(), (counts / counts.sum()).tolist()))
    out = {}
    for value in np.unique(strata_of_rows):
        mask = strata_of_rows == value
        name = str(value.item() if hasattr(value, "item") else value) if names is None else names(value)
        out[name] = {"n": int(mask.sum()), "recall": float(per_query[mask].mean())}
        if strata is not None:
            out[name]["share"] = float(shares[value.item() if hasattr(value, "item") else value])
    return out


def corpus_weighted_summary(per_query, strata_of_rows, strata, z: float = 1.645) -> tuple[float, float]:
    """The recall of a query drawn uniformly from the corpus, estimated from a stratified sample,
    and its one-sided lower bound (mean - ``z`` standard errors).

    :func:`stratified_summary` with the weights W_h = each stratum's share of the corpus
    ``strata`` (one label per corpus document). A sample holding few queries of a dominant
    stratum has a wide bound, and a stratum with low recall and a large share lowers both the
    estimate and the bound.

    Examples
    --------
    >>> import numpy as np
    >>> strata = np.array([0] * 80 + [1] * 10 + [2] * 10)   # stratum 0: 80% of the corpus
    >>> rows = np.array([0, 1, 2, 80, 81, 82, 90, 91, 92])  # a balanced sample, 3 per stratum
    >>> per_query = np.array([0.5, 0.6, 0.7, 1, 1, 1, 1, 1, 1])
    >>> round(float(per_query.mean()), 3)                    # the balanced (class-equal) recall
    0.867
    >>> mean, lower = corpus_weighted_summary(per_query, strata[rows], strata)
    >>> round(mean, 3), lower < mean
    (0.68, True)
    """
    values, counts = np.unique(np.asarray(strata), return_counts=True)
    return stratified_summary(per_query, strata_of_rows, dict(zip(values.tolist(), counts.tolist())), z)


def stratified_summary(per_query, strata_of_rows, weights: dict, z: float = 1.645) -> tuple[float, float]:
    """The stratified-sampling estimate sum W_h ybar_h of a mean over a population whose strata
    weigh ``weights`` ({stratum: W_h}), and its one-sided lower bound (mean - ``z`` standard
    errors, variance sum W_h^2 s_h^2 / n_h), from the per-query values ``per_query`` of a sample
    whose rows fall in the strata ``strata_of_rows``.

    Strata absent from the sample are left out and the weights of the present ones renormalised;
    a stratum with a single query takes the whole sample's variance. The mean is clipped to [0, 1]
    (recalls; weights summing to 1 only up to rounding).

    Examples
    --------
    >>> import numpy as np
    >>> per_query = np.array([0.5, 0.7, 1.0, 1.0, 1.0, 1.0])
    >>> in_stratum = np.array([0, 0, 1, 1, 1, 1])
    >>> mean, lower = stratified_summary(per_query, in_stratum, {0: 1, 1: 1})   # equal weights
    >>> round(mean, 3), round(lower, 3)
    (0.8, 0.718)
    """
    per_query = np.asarray(per_query, dtype=np.float64)
    strata_of_rows = np.asarray(strata_of_rows)
    pooled = float(np.var(per_query, ddof=1)) if per_query.size > 1 else 0.0
    present = np.unique(strata_of_rows)
    w = np.array([weights[v] for v in present.tolist()], dtype=np.float64)
    w /= w.sum()
    mean = var = 0.0
    for weight, value in zip(w, present):
        group = per_query[strata_of_rows == value]
        s2 = float(np.var(group, ddof=1)) if group.size > 1 else pooled
        mean += weight * float(group.mean())
        var += weight * weight * s2 / group.size
    # the weights sum to 1 only up to rounding: an all-hits sample must not come out above 1
    mean = min(max(mean, 0.0), 1.0)
    return float(mean), float(min(mean, mean - z * np.sqrt(var)))
