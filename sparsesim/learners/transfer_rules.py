"""The OHT combination rules (Algorithms 1-2 of ``papers/004``) as pure functions, each beside its step.

The weight updates of OHT1 (``"hedge"``) and OHT2 (``"discount"``), the scores they predict with,
and :func:`combine_stream`, which runs one combination over a whole stream from the source scores
``h`` and the target margins ``f``. :class:`~sparsesim.learners.transfer.OHTClassifier` uses them
round by round; the protocol's fast path (:func:`~sparsesim.learners.transfer.run_stream`) on a
whole stream.
"""

from __future__ import annotations

import math

import numpy as np

from ..exceptions import InvalidInputError

COMBINERS = ("target", "hedge", "discount")


# ----------------------------------------------------------------------------------------------
# Update rules (pure functions), Algorithms 1-2 of the paper
# ----------------------------------------------------------------------------------------------
def omega(z):
    """``Omega(z) = max{0, min{1, (z + 1) / 2}}`` (Algorithm 1, projection of a score onto [0, 1])."""
    return np.clip((np.asarray(z, dtype=np.float64) + 1.0) / 2.0, 0.0, 1.0)


def _omega1(z: float) -> float:
    """Scalar :func:`omega` (same arithmetic, no array overhead in the per-round loop)."""
    return min(1.0, max(0.0, (float(z) + 1.0) / 2.0))


def _sign(z: float) -> float:
    return 1.0 if z > 0 else (-1.0 if z < 0 else 0.0)


def normalized_weights(theta_s: float, theta_t: float) -> tuple[float, float]:
    """Step 3: ``w^s = theta^s / (theta^s + theta)``, ``w = theta / (theta^s + theta)``."""
    total = theta_s + theta_t
    return theta_s / total, theta_t / total


def oht1_score(theta_s: float, theta_t: float, h: float, f: float) -> float:
    """Algorithm 1, step 4 (before the sign): ``w^s Omega(h) + w Omega(f) - 1/2``."""
    ws, wt = normalized_weights(theta_s, theta_t)
    return ws * _omega1(h) + wt * _omega1(f) - 0.5


def oht2_score(theta_s: float, theta_t: float, h: float, f: float) -> float:
    """Algorithm 2, step 4 (before the sign): ``w^s sign(h) + w sign(f)``."""
    ws, wt = normalized_weights(theta_s, theta_t)
    return ws * _sign(h) + wt * _sign(f)


def _rescale(theta_s: float, theta_t: float) -> tuple[float, float]:
    """Multiply both weights by the same power of two once they get small (exact in floating point,
    so ties between the two weights stay exact ties; the prediction only uses their ratio)."""
    exponent = math.frexp(max(theta_s, theta_t))[1]
    if exponent < -100:
        return math.ldexp(theta_s, -exponent), math.ldexp(theta_t, -exponent)
    return theta_s, theta_t


def hedge_update(theta_s: float, theta_t: float, h: float, f: float, y: float, eta: float):
    """Algorithm 1, step 6: ``theta <- theta exp(-eta (Omega(score) - Omega(y))^2)`` for both hypotheses.

    Returns the new (unnormalised) pair; see :func:`normalized_weights` for step 3.
    """
    oy = _omega1(y)
    ts = theta_s * math.exp(-eta * (_omega1(h) - oy) ** 2)
    tt = theta_t * math.exp(-eta * (_omega1(f) - oy) ** 2)
    return _rescale(ts, tt)


def discount_update(theta_s: float, theta_t: float, h: float, f: float, y: float, alpha: float):
    """Algorithm 2, step 6: ``theta <- theta alpha^{I(y score <= 0)}`` for both hypotheses (unnormalised)."""
    ts = theta_s * (alpha if y * h <= 0 else 1.0)
    tt = theta_t * (alpha if y * f <= 0 else 1.0)
    return _rescale(ts, tt)


def default_discount(n_rounds: int) -> float:
    """The paper's OHT2 discount ``beta = sqrt(T) / (sqrt(T) + sqrt(2 ln 4))`` for ``T`` rounds."""
    root = math.sqrt(max(int(n_rounds), 1))
    return root / (root + math.sqrt(2.0 * math.log(4.0)))


def combine_stream(h, f, y, combiner: str, eta: float = 0.5, alpha: float = 0.9,
                   theta0: float = 0.5) -> np.ndarray:
    """Combined scores of a whole stream, given the source scores ``h``, target margins ``f`` and labels.

    ``f[t]`` must be the target learner's margin *before* its update on round ``t`` (which does
    not depend on the combination). Returns ``score[t]``; the prediction is ``sign(score[t])``
    and a zero score counts as a mistake.
    """
    h = np.asarray(h, dtype=np.float64)
    f = np.asarray(f, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if combiner == "target":
        return f.copy()
    if combiner not in COMBINERS:
        raise InvalidInputError(f"unknown combiner {combiner!r}; use one of {COMBINERS}")
    score_fn, update_fn, rate = (
        (oht1_score, hedge_update, eta) if combiner == "hedge" else (oht2_score, discount_update, alpha)
    )
    ts, tt = theta0, 1.0 - theta0
    out = []
    for ht, ft, yt in zip(h.tolist(), f.tolist(), y.tolist()):  # Python floats: no numpy scalar overhead
        out.append(score_fn(ts, tt, ht, ft))
        ts, tt = update_fn(ts, tt, ht, ft, yt, rate)
    return np.array(out)


def mistakes_of(scores, y) -> np.ndarray:
    """1 where ``sign(score) != y`` (zero scores are mistakes), else 0."""
    return (np.sign(np.asarray(scores)) != np.asarray(y)).astype(np.int8)
