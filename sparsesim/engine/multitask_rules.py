"""The OMTRSL update rules shared by both storages of :mod:`sparsesim.engine.multitask`.

Hao, Zhao, Liu, Hoi, Miao, "Online Multitask Relative Similarity Learning", IJCAI 2017: the
task-relationship matrix A^{-1}(b) = alpha I + beta 1 1^T (section 3.2), the step
tau_t = min(C, l_t / ||phi_t||^2_{A_dd^{-1}}) (eq. 3), the query decisions of OMTRSL-Active and
-Random (Algorithm 2, eq. 5) and the coefficients of the two rank-one writes of eq. (4)
(``O_{t_k} += alpha y tau X_t``, ``S += beta y tau X_t``).
"""

from __future__ import annotations

import numba
import numpy as np

from .primitives import QUERY_ACTIVE, QUERY_RANDOM, decide_query, sq_norms
from .rules import merge_difference


def task_coefficients(b: float, n_tasks: int) -> tuple[float, float]:
    """(alpha, beta) with A^{-1} = alpha I + beta 1 1^T for the paper's A^{-1}(b) (section 3.2).

    A^{-1} = ((b + K) on the diagonal, b off it) / ((1 + b) K), so alpha = 1 / (1 + b) and
    beta = b / ((1 + b) K). b = 0 gives A^{-1} = I (K independent learners); b -> inf gives
    11^T / K (one model for all tasks).
    """
    b = float(b)
    K = int(n_tasks)
    return 1.0 / (1.0 + b), b / ((1.0 + b) * K)


def relationship_inverse(b: float, n_tasks: int) -> np.ndarray:
    """The K x K matrix A^{-1} written literally as in the paper (for tests and docs)."""
    K = int(n_tasks)
    return (np.full((K, K), float(b)) + K * np.eye(K)) / ((1.0 + b) * K)


@numba.njit(cache=True, inline="always")
def omtrsl_tau(loss, sq_x, sq_z, alpha, beta, C):
    """tau_t = min(C, l_t / ||phi_t||^2_{A_dd^{-1}}) (eq. 3), ||phi_t||^2 = (alpha + beta) ||x||^2 ||z||^2."""
    denom = (alpha + beta) * sq_x * sq_z
    if denom <= 0.0:
        return 0.0
    return min(C, loss / denom)


@numba.njit(cache=True)
def skipped_by_random_query(mode, uniforms, t, rate, losses, margins, queried):
    """OMTRSL-Random: decide before the margin whether y_t is asked; record a skipped triplet.

    Returns True when triplet t is skipped (then ``queried[t] = 0``, ``losses[t] = 0``,
    ``margins[t] = NaN``: the margin is never computed).
    """
    if mode != QUERY_RANDOM or decide_query(mode, uniforms[t], 0.0, rate, rate):
        return False
    queried[t] = 0
    losses[t] = 0.0
    margins[t] = np.nan
    return True


@numba.njit(cache=True, inline="always")
def anchor_and_difference(t, triplets, indptr, indices, data, zi, zv):
    """Triplet t's difference z = x^1 - x^2 into zi/zv and its anchor's row x = data[lo:hi]:
    returns (nnz(z), lo, hi)."""
    a = triplets[t, 0]
    nz = merge_difference(indptr, indices, data, triplets[t, 1], triplets[t, 2], zi, zv)
    return nz, indptr[a], indptr[a + 1]


@numba.njit(cache=True)
def step_coefficients(t, p, mode, uniforms, rate, signs, data, lo, hi, zv, nz, alpha, beta, C,
                      losses, margins, queried):
    """Everything between the margin p_t and the write, shared by both storages.

    Records p_t, asks for y_t (always, or with probability delta / (delta + |p_t|) under
    OMTRSL-Active), computes the hinge loss and tau_t (eq. 3), and returns
    ``(update, ga, gb)``: whether to write, and the coefficients of ``O_{t_k} += ga X_t`` and
    ``S += gb X_t`` (ga = alpha y tau, gb = beta y tau: eq. 4 for every k through
    M^k = I + S + O_k).
    """
    margins[t] = p
    if mode == QUERY_ACTIVE and not decide_query(mode, uniforms[t], p, rate, rate):
        queried[t] = 0
        losses[t] = 0.0
        return False, 0.0, 0.0
    queried[t] = 1
    y = signs[t]
    loss = 1.0 - y * p
    if loss <= 0.0:
        losses[t] = 0.0
        return False, 0.0, 0.0
    losses[t] = loss
    sq_x, sq_z = sq_norms(data, lo, hi, zv, nz)
    g = y * omtrsl_tau(loss, sq_x, sq_z, alpha, beta, C)
    return True, g * alpha, g * beta
