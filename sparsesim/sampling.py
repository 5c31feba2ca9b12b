"""Triplet samplers beyond uniform: which negative the update rule sees.

A learner trained from labels sees triplets (anchor, positive, negative). The SORS protocol
(:func:`sparsesim.triplets.iter_sors_triplets`) draws all three uniformly; most of its negatives
are already far below the positive, so most updates of a trained model have zero loss. The
samplers here keep the SORS protocol's anchor and positive and choose the negative from a
seeded *pool* of ``pool_size`` documents of other classes (the SORS protocol's own negative and
``pool_size - 1`` more, each uniform over the other classes), ranked by the model being trained:

``"uniform"``
    The SORS protocol's negative (the pool is not drawn): the triplets of
    :func:`~sparsesim.triplets.iter_sors_triplets`, unchanged.
``"semihard"``
    FaceNet's semi-hard negative (Schroff, Kalenichenko & Philbin, CVPR 2015, section 3.2): a
    negative less similar to the anchor than the positive, ``s(a, n) < s(a, p)``, the most similar
    such one (so it violates the margin, ``s(a, n) > s(a, p) - margin``, whenever a pool document
    does). When every pool document ranks above the positive, the least similar one.
``"hard"``
    The pool document most similar to the anchor.
``"distance-weighted"``
    Distance-weighted sampling (Wu, Manmatha, Smola & Krähenbühl, ICCV 2017, section 4): a pool
    document drawn with probability proportional to ``1 / q(d)``, the inverse density of the
    distance d between points spread uniformly on a unit sphere of dimension n,
    ``q(d) ∝ d^(n-2) (1 - d^2/4)^((n-3)/2)``, with d clipped below at 0.5 (the paper's cutoff).
    Here d is the distance of the model-normalised pair, ``d^2 = 2 - 2 s(a,n)/sqrt(s(a,a) s(n,n))``,
    and n is the dimension at which uniform points would be as concentrated as the chunk's pool
    distances are (``n = 1 / (2 var d)``, the variance of d on such a sphere being ``1/(2n)``).
    Documents the hinge would not update on (``s(a, n) <= s(a, p) - margin``, the paper's
    "nonzero loss cutoff") get weight 0 unless all do.

The model ranks the pool through a callback ``score(pairs) -> scores`` (x_a^T M x_b for each
row ``(a, b)`` of ``pairs``), called once per chunk of anchors: memory is O(chunk * pool_size),
never a corpus x corpus matrix. Every draw comes from generators seeded by ``seed``, so a seed
and a model trajectory give the same triplets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from .exceptions import InvalidInputError
from .triplets import iter_sors_triplets

__all__ = ["SAMPLERS", "draw_other_class", "iter_sampled_triplets", "mine_negatives", "select_negatives"]

SAMPLERS = ("uniform", "semihard", "hard", "distance-weighted")
DW_CUTOFF = 0.5  # Wu et al.'s lower clip of the distance


def _child_rngs(seed, n: int) -> list[np.random.Generator]:
    """``n`` independent generators derived from ``seed`` (an int, None or a Generator)."""
    if isinstance(seed, np.random.Generator):
        return seed.spawn(n)
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(n)]


def draw_other_class(y, anchors, n_per_anchor: int, rng: np.random.Generator) -> np.ndarray:
    """``n_per_anchor`` documents per anchor, each uniform over the documents of the other classes.

    Parameters
    ----------
    y : array-like of shape (n,)
        Class labels.
    anchors : array of int, shape (m,)
    n_per_anchor : int
    rng : numpy.random.Generator

    Returns
    -------
    ndarray of int64, shape (m, n_per_anchor)

    Examples
    --------
    >>> y = np.array([0, 0, 1, 1, 2])
    >>> neg = draw_other_class(y, np.array([0, 2, 4]), 5, np.random.default_rng(0))
    >>> bool(np.all(y[neg] != y[[0, 2, 4]][:, None]))
    True
    """
    y = np.asarray(y)
    _, codes = np.unique(y, return_inverse=True)
    codes = codes.reshape(-1)
    order = np.argsort(codes, kind="stable").astype(np.int64)
    counts = np.bincount(codes)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    c = codes[np.asarray(anchors, np.int64)]
    n_other = y.size - counts[c]
    if np.any(n_other <= 0):
        raise InvalidInputError("a negative needs a document of another class; y has a single class")
    r = rng.integers(0, n_other[:, None], size=(c.size, int(n_per_anchor)))
    r += np.where(r >= starts[c][:, None], counts[c][:, None], 0)
    return order[r]


def select_negatives(sampler: str, s_ap, s_an, rng: np.random.Generator | None = None, margin: float = 1.0,
                     s_aa=None, s_nn=None) -> np.ndarray:
    """The position in each anchor's pool of the negative ``sampler`` picks.

    Parameters
    ----------
    sampler : {"semihard", "hard", "distance-weighted"}
    s_ap : array of shape (m,)
        Score of each anchor with its positive.
    s_an : array of shape (m, P)
        Scores of each anchor with the P documents of its pool.
    rng : numpy.random.Generator, optional
        Needed by ``"distance-weighted"`` (it samples).
    margin : float, default 1.0
        The hinge's margin: the rule updates on (a, p, n) when ``s(a, p) - s(a, n) < margin``.
    s_aa, s_nn : arrays of shape (m,) and (m, P), optional
        Self-scores s(a, a) and s(n, n), needed by ``"distance-weighted"``.

    Returns
    -------
    ndarray of int64, shape (m,)

    Examples
    --------
    >>> s_an = np.array([[0.9, 0.2, 0.6], [2.0, 1.5, 3.0]])
    >>> select_negatives("semihard", np.array([0.7, 1.0]), s_an).tolist()   # 0.6 < 0.7; none below 1.0
    [2, 1]
    >>> select_negatives("hard", np.array([0.7, 1.0]), s_an).tolist()
    [0, 2]
    """
    s_ap = np.asarray(s_ap, np.float64)
    s_an = np.asarray(s_an, np.float64)
    if sampler == "hard":
        return np.argmax(s_an, axis=1).astype(np.int64)
    if sampler == "semihard":
        below = s_an < s_ap[:, None]
        best_below = np.argmax(np.where(below, s_an, -np.inf), axis=1)
        least = np.argmin(s_an, axis=1)
        return np.where(below.any(axis=1), best_below, least).astype(np.int64)
    if sampler == "distance-weighted":
        if rng is None or s_aa is None or s_nn is None:
            raise InvalidInputError("distance-weighted sampling needs rng, s_aa and s_nn")
        s_aa = np.asarray(s_aa, np.float64)[:, None]
        s_nn = np.asarray(s_nn, np.float64)
        ok = (s_aa > 0) & (s_nn > 0)
        cos = np.where(ok, s_an / np.sqrt(np.where(ok, s_aa * s_nn, 1.0)), 0.0)
        dist = np.sqrt(np.clip(2.0 - 2.0 * np.clip(cos, -1.0, 1.0), 0.0, 4.0))
        dist = np.clip(dist, DW_CUTOFF, 2.0 - 1e-6)
        var = float(np.var(dist))
        n = float(np.clip(1.0 / (2.0 * var), 4.0, 1e6)) if var > 0 else 4.0
        log_q = (n - 2.0) * np.log(dist) + 0.5 * (n - 3.0) * np.log(1.0 - 0.25 * dist**2)
        log_w = -log_q
        log_w -= log_w.max(axis=1, keepdims=True)
        w = np.exp(log_w)
        active = s_an > s_ap[:, None] - margin
        w = np.where(active.any(axis=1, keepdims=True), np.where(active, w, 0.0), w)
        cum = np.cumsum(w, axis=1)
        u = rng.random(s_an.shape[0]) * cum[:, -1]
        return np.minimum((cum < u[:, None]).sum(axis=1), s_an.shape[1] - 1).astype(np.int64)
    raise InvalidInputError(f"sampler must be one of {', '.join(map(repr, SAMPLERS))}; got {sampler!r}")


def iter_sampled_triplets(y, n_triplets: int, seed=None, sampler: str = "uniform", score: Callable | None = None,
                          pool_size: int = 16, n_passes: int = 1, chunk_size: int = 4096,
                          mining_chunk: int = 1024, margin: float = 1.0) -> Iterator[np.ndarray]:
    """Stream (anchor, positive, negative) triplets chosen by ``sampler``, chunk by chunk.

    The first pass draws ``n_triplets`` SORS-protocol triplets (:func:`~sparsesim.triplets.iter_sors_triplets`
    with ``seed``); each further pass revisits the same (anchor, positive) pairs in a new seeded
    order. ``"uniform"`` keeps each pair's SORS negative (its first pass is exactly
    :func:`~sparsesim.triplets.iter_sors_triplets`' stream in chunks of ``chunk_size``); the other
    samplers replace it, in every pass, by the pick from a fresh pool ranked by ``score``, which is
    called while the stream is consumed, so each chunk of ``mining_chunk`` anchors is ranked by
    the model as trained up to that chunk.

    Parameters
    ----------
    y : array-like of shape (n,)
        Class labels of the training documents (every class with at least two documents).
    n_triplets : int
        Triplets per pass.
    seed : int, Generator or None
    sampler : {"uniform", "semihard", "hard", "distance-weighted"}
    score : callable, optional
        ``score(pairs)``: the current model's score of each row ``(a, b)`` of an int64 array of
        shape (k, 2); required by every sampler but ``"uniform"``.
    pool_size : int, default 16
        Candidate negatives ranked per anchor (the SORS negative and ``pool_size - 1`` more).
    n_passes : int, default 1
    chunk_size : int
        Rows per drawn chunk (the chunks ``"uniform"`` yields).
    mining_chunk : int
        Anchors ranked at a time by the mined samplers (the chunks they yield).
    margin : float, default 1.0

    Yields
    ------
    ndarray of int64, shape (k, 3)
    """
    if sampler not in SAMPLERS:
        raise InvalidInputError(f"sampler must be one of {', '.join(map(repr, SAMPLERS))}; got {sampler!r}")
    if sampler != "uniform" and score is None:
        raise InvalidInputError(f"sampler {sampler!r} needs a score callback")
    n_passes, pool_size = int(n_passes), int(pool_size)
    if n_passes < 1 or pool_size < 1:
        raise InvalidInputError(f"n_passes and pool_size must be at least 1, got {n_passes} and {pool_size}")
    order_rng, pool_rng, pick_rng = _child_rngs(seed, 3)
    y = np.asarray(y)
    keep = n_passes > 1
    drawn = []
    for chunk in iter_sors_triplets(y, n_triplets, seed=seed, chunk_size=chunk_size):
        if keep:
            drawn.append(chunk)
        yield from _chunks(y, chunk, sampler, score, pool_size, pool_rng, pick_rng, margin, mining_chunk)
    if not keep or not drawn:
        return
    base = np.concatenate(drawn)
    for _ in range(n_passes - 1):
        perm = order_rng.permutation(base.shape[0])
        for lo in range(0, base.shape[0], chunk_size):
            yield from _chunks(y, base[perm[lo:lo + chunk_size]], sampler, score, pool_size, pool_rng, pick_rng,
                               margin, mining_chunk)


def _chunks(y, chunk, sampler, score, pool_size, pool_rng, pick_rng, margin, mining_chunk):
    """``chunk`` as it is (``"uniform"``) or mined in sub-chunks of ``mining_chunk`` anchors."""
    if sampler == "uniform":
        yield chunk
        return
    for lo in range(0, chunk.shape[0], mining_chunk):
        yield mine_negatives(y, chunk[lo:lo + mining_chunk], sampler, score, pool_size, pool_rng, pick_rng, margin)


def mine_negatives(y, chunk, sampler: str, score: Callable, pool_size: int, pool_rng: np.random.Generator,
                   pick_rng: np.random.Generator | None = None, margin: float = 1.0) -> np.ndarray:
    """Replace the negatives of ``chunk`` by the picks of ``sampler`` from a fresh pool.

    The pool of each anchor is its triplet's own negative and ``pool_size - 1`` documents drawn
    uniformly from the other classes with ``pool_rng``, all ranked by one call of ``score``.

    Parameters
    ----------
    y : array of shape (n,)
        Class labels of the documents the triplets index.
    chunk : array of int, shape (m, 3)
        (anchor, positive, negative) rows.
    sampler : {"semihard", "hard", "distance-weighted"}
    score : callable
        ``score(pairs)``: the model's score of each row ``(a, b)`` of an int64 array of shape (k, 2).
    pool_size : int
    pool_rng : numpy.random.Generator
        Draws the pool.
    pick_rng : numpy.random.Generator, optional
        Needed by ``"distance-weighted"`` (it samples from the pool).
    margin : float, default 1.0

    Returns
    -------
    ndarray of int64, shape (m, 3)
        The anchors and positives of ``chunk`` with the negatives picked.

    Examples
    --------
    >>> y = np.array([0, 0, 1, 1, 2, 2])
    >>> emb = np.array([0.0, 0.1, 1.0, 0.2, 5.0, 0.3])  # score(a, b) = -|emb[a] - emb[b]|
    >>> score = lambda pairs: -np.abs(emb[pairs[:, 0]] - emb[pairs[:, 1]])
    >>> out = mine_negatives(y, np.array([[0, 1, 4]]), "hard", score, 8, np.random.default_rng(0))
    >>> out.tolist()   # the pool document closest to the anchor: document 3 (0.2 from it)
    [[0, 1, 3]]
    """
    chunk = np.asarray(chunk, np.int64).reshape(-1, 3)
    a, p = chunk[:, 0], chunk[:, 1]
    m = a.size
    pool = chunk[:, 2:3]
    if pool_size > 1:
        pool = np.concatenate([pool, draw_other_class(y, a, pool_size - 1, pool_rng)], axis=1)
    # each anchor's pairs one after another: the scorer reads the anchor's rows of M once for all
    pairs = np.concatenate([a[:, None], p[:, None], pool], axis=1)
    pairs = np.stack([np.repeat(a, pool_size + 1), pairs[:, 1:].reshape(-1)], axis=1)
    if sampler == "distance-weighted":  # self-scores s(a, a) and s(n, n), once per document of the chunk
        docs, where = np.unique(np.concatenate([a, pool.reshape(-1)]), return_inverse=True)
        pairs = np.concatenate([pairs, np.stack([docs, docs], axis=1)])
    scores = np.asarray(score(pairs), np.float64)
    both = scores[:m * (pool_size + 1)].reshape(m, pool_size + 1)
    s_ap, s_an = both[:, 0], both[:, 1:]
    kw = {}
    if sampler == "distance-weighted":
        self_scores = scores[m * (pool_size + 1):][where]
        kw = {"s_aa": self_scores[:m], "s_nn": self_scores[m:].reshape(m, pool_size), "rng": pick_rng}
    pick = select_negatives(sampler, s_ap, s_an, margin=margin, **kw)
    return np.stack([a, p, pool[np.arange(m), pick]], axis=1).astype(np.int64)
