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
* SORS: step schedule ``"pa"`` (per triplet, ``eta_t = min(eta, l_t / ||x z^T||_F^2)``) when
  ``fit`` learns from labels of at least ``SORS_PA_MIN_CLASSES`` (40) classes, else
  ``"constant"`` (:func:`resolve_schedule`);
  ``eta = SORS_ETA_FACTOR * max(1, q) ** SORS_MARGIN_POWER / s`` (the step, or the per-triplet
  step's cap) with ``q`` the mean
  ``|x''^T (x - x')|`` of random rows (the typical margin under M = I): one update moves its own
  margin by ``SORS_ETA_FACTOR`` on features whose margins are below 1 (L2-normalised text), and by
  ``SORS_ETA_FACTOR * sqrt(q)`` where they are larger (raw dense features, whose violated
  triplets have losses of order ``q``);
* L1 weight (SORS and AdaSORS): ``lam = L1_SURVIVAL * g / T`` with ``T`` the triplet budget
  (``n_triplets``): over the whole run the proximal steps remove ``L1_SURVIVAL`` times the size
  of one typical write, so an entry must be written about that many times to survive; with
  SORS's per-triplet step ``L1_SURVIVAL_PA`` (9) times (validation MAP on the many-class beds
  and Reuters-21578 the same as with 3 on average, models of 6.2-9.4M entries instead of 11.2M;
  docs/quality.md, "Many classes");
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

The multi-task, online multi-task classification and transfer learners (README, "Choosing
parameters", chosen on isolet-tasks / news20-tasks, mhc1 / spam-task-a / landmine and mfeat /
Wikipedia):

* OMTRSL, OSTRSL, OGRSL: ``C = MULTITASK_C_FACTOR * max(1, q) / s``; OMTRSL's ``b =
  MULTITASK_B_SHARED * J`` with ``J`` the mean Jaccard overlap of the tasks' class sets
  (:func:`class_overlap`; ``MULTITASK_B_UNLABELLED`` without labels);
* ROMCO: ``eta1 = eta2 = ROMCO_ETA_FACTOR / q`` and ``lam1 = lam2 = ROMCO_LAM_FACTOR * sqrt(q) / T``
  with ``q`` the mean ``||x||^2`` of the instances and ``T`` the longest task stream
  (:func:`stream_statistics`, :func:`resolve_online`); PA-Global / PA-Unique ``C = MTL_PA_C_FACTOR / q``;
* OHT and its kernel PA baselines: ``sigma = OHT_SIGMA_FACTOR * sqrt(mean ||x - x'||^2 / 2)``
  (:func:`kernel_width`, :func:`resolve_sigma`).

Model size (OASIS, SORS, AdaSORS; ``max_model_bytes="auto"``): W, its diagonal included, keeps
at most ``MODEL_SIZE_FACTOR`` (20) times the stored entries of the corpus the learner first sees,
but never less than ``MODEL_SIZE_FLOOR_BYTES`` (128 MiB, so small corpora are not cut); after every ``TRUNCATE_EVERY`` (1,024) triplets the learner keeps the entries of largest magnitude
(the rule and its constants are in :mod:`sparsesim.memory`, :func:`~sparsesim.memory.resolve_model_budget`;
the measurement in docs/quality.md, "Model size").

The bilinear factors were chosen by measurement on news20, Reuters-21578 and USPS at 10^4 triplets
(README, "Choosing parameters"); SORS's schedule rule on many-class test beds cut from
Reuters-21578 and on news20 (docs/quality.md, "Many classes"; ``benchmarks/bench_manyclass.py``).
Explicit parameters always win; the values used are kept in
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
L1_SURVIVAL_PA = 9.0  # SORS with the per-triplet step (schedule "pa")
# SORS's step schedule "auto": the per-triplet step ("pa") when fit learns from labels of at least
# this many classes, else the constant step (docs/quality.md, "Many classes")
SORS_PA_MIN_CLASSES = 40
ADA_DELTA_FACTOR = 10.0
ADA_ETA_FACTOR = 30.0
# selective-sampling and second-order learners (CIKM 2015 family, AROMA); M_1 = 0 there
PA_C_FACTOR = 0.5
CW_ETA_FACTOR = 10.0
CW_GAMMA_FACTOR = 0.3
CWD_ETA_FACTOR = 3.0
CWD_GAMMA_FACTOR = 1.0
AROW_R_FACTOR = 0.03
# online multi-task classification (ROMCO; the PA-Global / PA-Unique baselines), w_1 = 0
ROMCO_ETA_FACTOR = 0.5
ROMCO_LAM_FACTOR = 0.3
MTL_PA_C_FACTOR = 1.0
# online heterogeneous transfer (OHT): Gaussian kernel width in units of the rows' spread
OHT_SIGMA_FACTOR = 0.5
# online multi-task relative similarity (OMTRSL, OSTRSL, OGRSL); M^k_1 = I as in OASIS
MULTITASK_C_FACTOR = 3.0
MULTITASK_B_SHARED = 100.0  # OMTRSL's b for tasks over the same classes
MULTITASK_B_UNLABELLED = 1.0  # and without class labels to compare

__all__ = ["AUTO", "data_statistics", "stream_statistics", "kernel_width", "resolve_sigma", "class_overlap",
           "resolve_task_coupling", "resolve_bilinear", "resolve_online", "resolve_schedule",
           "check_auto_positive", "is_auto"]


def is_auto(value) -> bool:
    """Whether ``value`` asks for the data-adaptive default."""
    return isinstance(value, str) and value == AUTO


def check_auto_positive(name: str, value, allow_zero: bool = False):
    """``value`` if it is ``"auto"`` or a finite positive (or, with ``allow_zero``, non-negative)
    number; else :class:`InvalidInputError` naming the parameter."""
    if is_auto(value):
        return value
    try:  # float(): a Python int past float64 is refused here, not by numpy
        number = float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else float("nan")
    except OverflowError:
        number = float("nan")
    ok = bool(np.isfinite(number)) and (number >= 0 if allow_zero else number > 0)
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


def _margin(stats: dict) -> float:
    q = stats.get("margin", 0.0)
    return float(q) if np.isfinite(q) else 0.0


def resolve_bilinear(kind: str, params: dict, stats: dict, n_triplets: int) -> dict:
    """Resolve the ``"auto"`` entries of ``params`` for a first-order bilinear learner.

    Parameters
    ----------
    kind : {"oasis", "sors", "sors-pa", "adasors", "pa", "cw", "cw-d", "arow", "multitask"}
        ``"sors-pa"``: SORS with the per-triplet step (``schedule="pa"``): the same ``eta``
        (there the cap of ``eta_t = min(eta, l_t / ||x z^T||_F^2)``), ``lam`` with
        ``L1_SURVIVAL_PA`` in place of ``L1_SURVIVAL``.
        ``"pa"``: PAAS/PARS (``C``); ``"multitask"``: OMTRSL, OSTRSL, OGRSL (``C =
        MULTITASK_C_FACTOR * max(1, q) / s``: the PA step ``l / s`` may take losses of the typical
        margin ``q`` in full); ``"cw"``/``"cw-d"``: CWS/CWAS/CWRS with the full or the
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
    if kind == "multitask":
        if is_auto(out.get("C")):
            out["C"] = MULTITASK_C_FACTOR * max(1.0, _margin(stats)) / s
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
    if kind not in ("sors", "sors-pa", "adasors"):
        raise ValueError(f"unknown learner kind {kind!r}")
    if is_auto(out.get("lam")):
        out["lam"] = (L1_SURVIVAL_PA if kind == "sors-pa" else L1_SURVIVAL) * g / T
    if kind in ("sors", "sors-pa"):
        if is_auto(out.get("eta")):
            out["eta"] = SORS_ETA_FACTOR * max(1.0, _margin(stats)) ** SORS_MARGIN_POWER / s
        return out
    if is_auto(out.get("delta")):
        out["delta"] = ADA_DELTA_FACTOR * g
    if is_auto(out.get("eta")):
        out["eta"] = ADA_ETA_FACTOR * out["delta"] / s
    return out


def resolve_schedule(schedule: str, n_classes: int | None) -> str:
    """SORS's step schedule: an explicit one as given; ``"auto"``: ``"pa"`` (the per-triplet step
    ``eta_t = min(eta, l_t / ||x z^T||_F^2)``) when ``fit`` learns from labels of at least
    ``SORS_PA_MIN_CLASSES`` classes, else ``"constant"`` (also without labels, ``n_classes=None``:
    :meth:`partial_fit_triplets`, the feedback loop).

    With many classes most uniform triplets are barely violated, and a fixed step moves every
    violated margin by the same amount; the per-triplet step moves it by its loss. Measured on the
    validation part of the training split (10^4 triplets, SORS-I with lam = 3 g/T, MAP %): 56-130 classes of 6-80
    training documents each, per-triplet against constant 62.67 / 59.02, 52.29 / 43.98, 61.02 /
    59.05 and 82.74 / 82.68 (Reuters-21578); 20 classes (news20, whole or cut to 100 or 30
    documents per class) 36.47 / 37.70, 37.64 / 38.54, 37.48 / 37.74
    (``benchmarks/bench_manyclass.py``, docs/quality.md "Many classes").

    Examples
    --------
    >>> resolve_schedule("auto", 65), resolve_schedule("auto", 20), resolve_schedule("auto", None)
    ('pa', 'constant', 'constant')
    >>> resolve_schedule("invsqrt", 65)
    'invsqrt'
    """
    if not is_auto(schedule):
        return schedule
    return "pa" if n_classes is not None and n_classes >= SORS_PA_MIN_CLASSES else "constant"


def stream_statistics(X_tasks) -> dict:
    """Norm statistics of per-task instance streams that the online classifiers' rule reads.

    Parameters
    ----------
    X_tasks : list of sparse matrices
        One (n_instances, n_features) matrix per task.

    Returns
    -------
    dict
        ``sq_x`` (mean ||x||^2 over every instance of every task), ``n_rounds`` (the length of
        the longest stream: rounds of one online pass) and ``n_tasks``.
    """
    n = sum(int(x.shape[0]) for x in X_tasks)
    if n == 0:
        raise InvalidInputError("cannot resolve 'auto' parameters from empty task streams")
    total = sum(float(x.multiply(x).sum()) if sp.issparse(x) else float(np.sum(np.square(x))) for x in X_tasks)
    return {"sq_x": total / n, "n_rounds": max(int(x.shape[0]) for x in X_tasks), "n_tasks": len(X_tasks)}


def resolve_online(kind: str, params: dict, stats: dict) -> dict:
    """Resolve the ``"auto"`` entries of ``params`` for an online multi-task classifier (w_1 = 0).

    A hinge-loss step ``eta`` on instance ``x`` moves its own margin by ``eta * ||x||^2``, so
    with ``q`` the mean ``||x||^2`` (:func:`stream_statistics`):

    * ``"romco"``: ``eta1 = eta2 = ROMCO_ETA_FACTOR / q``; ``lam1 = lam2 = ROMCO_LAM_FACTOR *
      sqrt(q) / T`` (``T`` rounds): over a whole pass the proximal steps shrink a singular value
      of U (a column norm of V) by ``ROMCO_LAM_FACTOR`` times the size of one step's write,
      ``eta * ||x||``;
    * ``"pa"``: PA-Global / PA-Unique ``C = MTL_PA_C_FACTOR / q`` (the PA-I cap on the step).

    Returns
    -------
    dict
        The same keys, all numbers.
    """
    q = _safe(stats.get("sq_x", 1.0), 1.0)
    T = max(int(stats.get("n_rounds", 1)), 1)
    out = dict(params)
    if kind == "pa":
        if is_auto(out.get("C")):
            out["C"] = MTL_PA_C_FACTOR / q
        return out
    if kind != "romco":
        raise ValueError(f"unknown learner kind {kind!r}")
    for name in ("eta1", "eta2"):
        if is_auto(out.get(name)):
            out[name] = ROMCO_ETA_FACTOR / q
    for name in ("lam1", "lam2"):
        if is_auto(out.get(name)):
            out[name] = ROMCO_LAM_FACTOR * float(np.sqrt(q)) / T
    return out


def kernel_width(X, n_pairs: int = SAMPLE_PAIRS, seed: int = 0) -> float:
    """``sqrt(mean ||x - x'||^2 / 2)`` over ``n_pairs`` fixed-seed pairs of distinct rows of dense ``X``:
    the Gaussian-kernel width at which a typical pair of rows has ``k(x, x') = exp(-1)``."""
    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    if n < 2:
        raise InvalidInputError("cannot resolve sigma='auto' from fewer than two rows")
    rng = np.random.default_rng(seed)
    a = rng.integers(0, n, size=n_pairs)
    b = (a + rng.integers(1, n, size=n_pairs)) % n
    d2 = float(np.mean(np.sum((X[a] - X[b]) ** 2, axis=1)))
    return float(np.sqrt(d2 / 2.0)) if d2 > 0 else 1.0


def resolve_sigma(sigma, X) -> float:
    """An explicit ``sigma`` as given; ``"auto"``: ``OHT_SIGMA_FACTOR * kernel_width(X)``."""
    return OHT_SIGMA_FACTOR * kernel_width(X) if is_auto(sigma) else float(sigma)


def class_overlap(y, tasks) -> float:
    """Mean Jaccard overlap of the class sets of every pair of tasks (1: every task labels the
    same classes; 0: disjoint classes; 0 for a single task)."""
    y = np.asarray(y)
    tasks = np.asarray(tasks)
    sets = [set(np.unique(y[tasks == t]).tolist()) for t in np.unique(tasks)]
    pairs = [(a, b) for i, a in enumerate(sets) for b in sets[i + 1:]]
    if not pairs:
        return 0.0
    return float(np.mean([len(a & b) / len(a | b) if a | b else 0.0 for a, b in pairs]))


def resolve_task_coupling(b, overlap) -> float:
    """OMTRSL's ``b``: an explicit value as given; ``"auto"``: ``MULTITASK_B_SHARED * overlap``
    (:func:`class_overlap`), or ``MULTITASK_B_UNLABELLED`` when no labels were seen (``None``)."""
    if not is_auto(b):
        return float(b)
    return MULTITASK_B_UNLABELLED if overlap is None else MULTITASK_B_SHARED * float(overlap)

