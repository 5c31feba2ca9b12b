"""The one registry of algorithms by name, read by the library, the experiments and the CLI.

A plain dict (as pynndescent does for metrics): name -> :class:`AlgorithmSpec`. The factory is a
``"module:attribute"`` string so that importing the registry stays cheap and a family's module
is imported only when one of its algorithms is used.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from .exceptions import UnknownNameError


@dataclass(frozen=True)
class AlgorithmSpec:
    """What the registry knows of one algorithm.

    Attributes
    ----------
    name : str
        Registry name (CLI ``--algorithm``/``--algorithms``).
    factory : str
        ``"module:Class"``; the class follows the scikit-learn estimator contract.
    kind : str
        ``"similarity"`` (learns S from triplets), ``"baseline"`` (fixed similarity),
        ``"multitask-similarity"``, ``"multitask-classifier"``, ``"transfer"``.
    summary : str
        One line for ``--help`` and the README.
    defaults : dict
        Constructor parameters this name fixes (e.g. the regulariser of a variant).
    """

    name: str
    factory: str
    kind: str
    summary: str
    defaults: dict = field(default_factory=dict)

    def make(self, **params):
        """Build the estimator with the name's defaults overridden by ``params``."""
        module_name, attr = self.factory.split(":")
        cls = getattr(importlib.import_module(module_name), attr)
        merged = dict(self.defaults)
        merged.update(params)
        try:
            return cls(**merged)
        except TypeError as exc:
            raise UnknownNameError(f"algorithm {self.name!r}: {exc}") from None


ALGORITHMS: dict[str, AlgorithmSpec] = {}


def register(spec: AlgorithmSpec) -> AlgorithmSpec:
    """Add ``spec`` to :data:`ALGORITHMS` (names are unique)."""
    if spec.name in ALGORITHMS:
        raise ValueError(f"algorithm {spec.name!r} is registered twice")
    ALGORITHMS[spec.name] = spec
    return spec


def get_algorithm(name: str) -> AlgorithmSpec:
    """The spec of ``name``; unknown names raise an error that lists the known ones."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise UnknownNameError(
            f"unknown algorithm {name!r}; known: {', '.join(sorted(ALGORITHMS))}"
        ) from None


def make_estimator(name: str, **params):
    """Build the registered estimator ``name`` with ``params``."""
    return get_algorithm(name).make(**params)


def algorithms_of_kind(*kinds: str) -> list[str]:
    """Names of registered algorithms whose kind is one of ``kinds``."""
    return sorted(n for n, s in ALGORITHMS.items() if s.kind in kinds)


# --- bilinear similarity from triplets (single task) -------------------------------------
register(AlgorithmSpec("dot", "sparsesim.learners.baselines:DotProduct", "baseline",
                       "plain dot product x.x' (M = I), no training"))
register(AlgorithmSpec("cosine", "sparsesim.learners.baselines:Cosine", "baseline",
                       "cosine similarity, no training"))
register(AlgorithmSpec("oasis", "sparsesim.learners.bilinear:OASIS", "similarity",
                       "OASIS: passive-aggressive bilinear similarity (Chechik et al. 2010)"))

# --- BEGIN romco: online multi-task classification (ROMCO paper and its online baselines) ---
register(AlgorithmSpec("romco-nucl", "sparsesim.learners.romco:ROMCO", "multitask-classifier",
                       "ROMCO-NuCl: W = U + V, nuclear-norm prox on U, group lasso on V (Yang et al., Alg. 1)",
                       {"regularizer": "nuclear"}))
register(AlgorithmSpec("romco-logd", "sparsesim.learners.romco:ROMCO", "multitask-classifier",
                       "ROMCO-LogD: W = U + V, log-determinant prox on U (cubic (21)), group lasso on V (Alg. 2)",
                       {"regularizer": "logdet"}))
register(AlgorithmSpec("pa-global", "sparsesim.learners.mtl_baselines:PAGlobal", "multitask-classifier",
                       "PA-Global: one PA-I model (C=1) for the instances of all tasks"))
register(AlgorithmSpec("pa-unique", "sparsesim.learners.mtl_baselines:PAUnique", "multitask-classifier",
                       "PA-Unique: one PA-I model (C=1) per task"))
register(AlgorithmSpec("omtl", "sparsesim.learners.mtl_baselines:OMTL", "multitask-classifier",
                       "OMTL: multitask Perceptron with the fixed clique interaction matrix (Cavallanti et al. 2010)"))
register(AlgorithmSpec("omtllog", "sparsesim.learners.mtl_baselines:OMTLAdaptive", "multitask-classifier",
                       "OMTLLOG: multitask Perceptron, interaction matrix learned by LogDet divergence (Saha et al. 2011)",
                       {"divergence": "logdet"}))
register(AlgorithmSpec("omtlvon", "sparsesim.learners.mtl_baselines:OMTLAdaptive", "multitask-classifier",
                       "OMTLVON: multitask Perceptron, interaction matrix learned by von Neumann divergence (Saha et al. 2011)",
                       {"divergence": "vonneumann"}))
# --- END romco ---
