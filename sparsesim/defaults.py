"""Data-adaptive defaults: the parameters a learner resolves from "auto" when it starts training.

A first-order bilinear learner changes a margin ``x^T M z`` (``z = x+ - x-``) by
``step * ||x||^2 * ||z||^2`` per update and writes entries of size ``step * |x_i| * |z_j|``.
The rule below scales every step size and regulariser by what the learner sees in its first
triplets, so the same defaults work for L2-normalised text (``||x||^2 = 1``) and raw dense
features (``||x||^2`` in the hundreds):

* ``s = mean ||x||^2 * mean ||x - x'||^2`` (the squared Frobenius norm of a typical update
  direction ``x z^T``) and ``g = mean |x_i| * mean |z_j|`` (the size of a typical written entry
  per unit step), over the rows of the corpus the learner first sees and ``SAMPLE_PAIRS``
  random pairs of them (:func:`data_statistics`);
* OASIS: ``C = OASIS_C_FACTOR / s`` (the PA step ``l / s`` is capped at that many "full" steps);
* SORS: ``eta = SORS_ETA_FACTOR * max(1, q) ** SORS_MARGIN_POWER / s`` with ``q`` the mean
  ``|x''^T (x - x')|`` of random rows (the typical margin under M = I): one update moves its own
  margin by ``SORS_ETA_FACTOR`` on features whose margins are below 1 (L2-normalised text), and by
  ``SORS_ETA_FACTOR * sqrt(q)`` where they are larger (raw dense features, whose violated
  triplets have losses of order ``q``);
* L1 weight (SORS and AdaSORS): ``lam = L1_SURVIVAL * g / T`` with ``T`` the triplet budget
  (``n_triplets``): over the whole run the proximal steps remove ``L1_SURVIVAL`` times the size
  of one typical write, so an entry must be written about that many times to survive;
* AdaSORS: ``delta = ADA_DELTA_FACTOR * g`` and ``eta = ADA_ETA_FACTOR * delta / s`` (the first
  AdaGrad step of an entry, ``eta * |G_ij| / (delta + |G_ij|)``, then matches a SORS step of
  ``ADA_ETA_FACTOR / s``).

The selective-sampling and second-order learners of the CIKM 2015 family start from M_1 = 0 and
use the same ``s``, so that every rule is invariant to a rescaling of the features:

* PAAS, PARS: ``C = PA_C_FACTOR / s``;
* CWS, CWAS, CWRS: ``eta = CW_ETA_FACTOR / s`` and ``gamma = CW_GAMMA_FACTOR * s`` with the full
  covariance (an update moves its margin by ``eta * phi^T Sigma phi``, ``s`` at the first update,
  and shrinks Sigma along ``phi`` by ``gamma / (gamma + phi^T Sigma phi)``); with the diagonal
  covariance ``CWD_ETA_FACTOR`` and ``CWD_GAMMA_FACTOR``;
* AROMA: ``r = AROW_R_FACTOR * s``.

The query threshold ``delta`` of PAAS/CWAS is in margin units (margins are learned to about 1
whatever the features' scale) and keeps its fixed default.

The factors were chosen by measurement on news20, Reuters-21578 and USPS at 10^4 triplets
(README, "Choosing parameters"). Explicit parameters always win; the values used are kept in
the estimator's ``resolved_params_``, the model file's metadata and ``--json`` output.
"""

from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp

from .exceptions import InvalidInputError

AUTO = "auto"
SAMPLE_PAIRS = 2000

OASIS_C_FACTOR = 3.0
SORS_ETA_FACTOR = 4.0
SORS_MARGIN_POWER = 0.5
L1_SURVIVAL = 3.0
ADA_DELTA_FACTOR = 10.0
ADA_ETA_FACTOR = 30.0
# selective-sampling and second-order learners (CIKM 2015 family, AROMA); M_1 = 0 there
PA_C_FACTOR = 0.5
CW_ETA_FACTOR = 10.0
CW_GAMMA_FACTOR = 0.3
CWD_ETA_FACTOR = 3.0
CWD_GAMMA_FACTOR = 1.0
AROW_R_FACTOR = 0.03

__all__ = ["AUTO", "data_statistics", "resolve_bilinear", "check_auto_positive", "is_auto"]


def is_auto(value) -> bool:
    """Whether ``value`` asks for the data-adaptive default."""
    return isinstance(value, str) and value == AUTO


def check_auto_positive(name: str, value, allow_zero: bool = False):
    """``value`` if it is ``"auto"`` or a finite positive (or, with ``allow_zero``, non-negative)
    number; else :class:`InvalidInputError` naming the parameter."""
    if is_auto(value):
        return value
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and np.isfinite(value) \
        and (value >= 0 if allow_zero else value > 0)
    if not ok:
        bound = "non-negative" if allow_zero else "positive"
        raise InvalidInputError(f"{name} must be {bound} (a number, or 'auto'), got {value!r}")
    return float(value)


def data_statistics(X: sp.csr_matrix, n_pairs: int = SAMPLE_PAIRS, seed: int = 0) -> dict:
    """Norm statistics of the rows of CSR ``X`` that the default rule reads.

    Depends on ``X`` only (a fixed-seed sample of row pairs), so learning in chunks resolves the
    same values as one call over the same rows.

    Returns
    -------
    dict
        ``sq_x`` (mean ||x||^2 over the rows), ``sq_z`` (mean ||x - x'||^2 over ``n_pairs``
        random pairs of distinct rows), ``abs_x`` and ``abs_z`` (mean absolute nonzero value of
        the rows and of the differences), ``s = sq_x * sq_z``, ``g = abs_x * abs_z`` and
        ``margin`` (mean |x''^T (x - x')| over the pairs, each with a third random row ``x''`` as
        anchor: the size of a typical margin under M = I) and ``n_pairs``.
    """
    n = X.shape[0]
    if n < 2:
        raise InvalidInputError("cannot resolve 'auto' parameters from fewer than two documents")
    rng = np.random.default_rng(seed)
    a = rng.integers(0, n, size=n_pairs)
    b = (a + rng.integers(1, n, size=n_pairs)) % n  # a different row
    Z = (X[a] - X[b]).tocsr()
    Z.eliminate_zeros()
    c = rng.integers(0, n, size=n_pairs)  # anchors of the margin statistic (drawn after a, b)
    margin = float(np.abs(np.asarray(X[c].multiply(Z).sum(axis=1)).ravel()).mean())
    sq_x = float(X.multiply(X).sum() / n)
    sq_z = float(Z.multiply(Z).sum() / n_pairs)
    abs_x = float(np.abs(X.data).mean()) if X.nnz else 0.0
    abs_z = float(np.abs(Z.data).mean()) if Z.nnz else 0.0
    return {"sq_x": sq_x, "sq_z": sq_z, "abs_x": abs_x, "abs_z": abs_z, "s": sq_x * sq_z,
            "g": abs_x * abs_z, "margin": margin, "n_pairs": int(n_pairs)}


def _safe(value: float, fallback: float) -> float:
    return float(value) if np.isfinite(value) and value > 0 else float(fallback)


def resolve_bilinear(kind: str, params: dict, stats: dict, n_triplets: int) -> dict:
    """Resolve the ``"auto"`` entries of ``params`` for a first-order bilinear learner.

    Parameters
    ----------
    kind : {"oasis", "sors", "adasors", "pa", "cw", "cw-d", "arow"}
        ``"pa"``: PAAS/PARS (``C``); ``"cw"``/``"cw-d"``: CWS/CWAS/CWRS with the full or the
        diagonal covariance (``eta``, ``gamma``); ``"arow"``: AROMA (``r``).
    params : dict
        The learner's step/regulariser parameters (``C``; ``eta``, ``lam``; ``delta``; ``gamma``;
        ``r``), each a number (kept) or ``"auto"`` (resolved).
    stats : dict
        :func:`data_statistics` of the corpus.
    n_triplets : int
        The triplet budget ``T`` the L1 rule spreads its shrinkage over.

    Returns
    -------
    dict
        The same keys, all numbers.
    """
    s = _safe(stats["s"], 1.0)
    g = _safe(stats["g"], 1e-3)
    T = max(int(n_triplets), 1)
    out = dict(params)
    if kind in ("oasis", "pa"):
        if is_auto(out.get("C")):
            out["C"] = (OASIS_C_FACTOR if kind == "oasis" else PA_C_FACTOR) / s
        return out
    if kind in ("cw", "cw-d"):
        eta_factor, gamma_factor = (CW_ETA_FACTOR, CW_GAMMA_FACTOR) if kind == "cw" else \
            (CWD_ETA_FACTOR, CWD_GAMMA_FACTOR)
        if is_auto(out.get("eta")):
            out["eta"] = eta_factor / s
        if is_auto(out.get("gamma")):
            out["gamma"] = gamma_factor * s
        return out
    if kind == "arow":
        if is_auto(out.get("r")):
            out["r"] = AROW_R_FACTOR * s
        return out
    if kind not in ("sors", "adasors"):
        raise ValueError(f"unknown learner kind {kind!r}")
    if is_auto(out.get("lam")):
        out["lam"] = L1_SURVIVAL * g / T
    if kind == "sors":
        if is_auto(out.get("eta")):
            q = stats.get("margin", 0.0)
            q = float(q) if np.isfinite(q) else 0.0
            out["eta"] = SORS_ETA_FACTOR * max(1.0, q) ** SORS_MARGIN_POWER / s
        return out
    if is_auto(out.get("delta")):
        out["delta"] = ADA_DELTA_FACTOR * g
    if is_auto(out.get("eta")):
        out["eta"] = ADA_ETA_FACTOR * out["delta"] / s
    return out
