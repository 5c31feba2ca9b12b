"""Compiled primitives shared by the engine's kernels: query policies, squared norms, prefetch.

Selective sampling (Hao et al., CIKM 2015 eq. 3; IJCAI 2017 eq. 5) asks for the label y_t of a
triplet with margin p_t only when Z_t = 1:

* all (passive):   Z_t = 1
* active:          Z_t = 1 iff u_t < delta / (delta + |p_t|)
* random:          Z_t = 1 iff u_t < rate

``u_t`` is the caller's uniform draw in [0, 1), so a run is reproducible from its seed.
"""

from __future__ import annotations

import numba
import numpy as np

from sparsesim.prefetch import prefetch

@numba.njit(cache=True, inline="always")
def U(i):
    """Index ``i`` (never negative) as np.uint64: numba wraps a negative signed index around,
    three instructions on every access of the update loops, which run ~10^4 accesses per update."""
    return np.uint64(i)


QUERY_ALL = 0
QUERY_ACTIVE = 1
QUERY_RANDOM = 2
QUERY_POLICIES = {"all": QUERY_ALL, "active": QUERY_ACTIVE, "random": QUERY_RANDOM}


@numba.njit(cache=True, inline="always")
def query_probability(delta, p):
    """Pr(Z_t = 1) = delta / (delta + |p_t|) (CIKM 2015 eq. 3, IJCAI 2017 eq. 5)."""
    return delta / (delta + abs(p))


@numba.njit(cache=True, inline="always")
def decide_query(policy, u, p, delta, rate):
    """Z_t under ``policy`` for the uniform draw ``u`` and the margin ``p``."""
    if policy == QUERY_ALL:
        return True
    if policy == QUERY_ACTIVE:
        return u < query_probability(delta, p)
    return u < rate


@numba.njit(cache=True, inline="always")
def sq_norms(data, lo, hi, zv, nz):
    """(||x||^2, ||z||^2) for x = data[lo:hi] and z = zv[:nz]: ||x z^T||_F^2 is their product."""
    sq_x = 0.0
    for ii in range(lo, hi):
        sq_x += data[ii] * data[ii]
    sq_z = 0.0
    for jj in range(nz):
        sq_z += zv[jj] * zv[jj]
    return sq_x, sq_z


@numba.njit(cache=True, inline="always")
def prefetch_cached_slot(keys, code):
    """Prefetch the slot a read pass cached for an entry: ``code >= 0`` is the entry's slot,
    ``code <= -2`` the free slot ``-2 - code`` where its insert goes; -1 (no slot) does nothing."""
    if code >= 0:
        prefetch(keys, code)
    elif code <= -2:
        prefetch(keys, -2 - code)
