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
        ``"similarity"`` (learns S from triplets), ``"baseline"`` (a similarity fitted without
        triplets: fixed ones, BM25, LSA, classifier embeddings),
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

    def estimator_class(self):
        """The estimator class (imports its module)."""
        module_name, attr = self.factory.split(":")
        return getattr(importlib.import_module(module_name), attr)

    def param_names(self) -> list[str]:
        """The constructor parameters of the estimator, in signature order."""
        import inspect

        signature = inspect.signature(self.estimator_class().__init__).parameters.values()
        return [p.name for p in signature if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

    def resolve_params(self, params: dict) -> dict:
        """``params`` with each name in the estimator's spelling (case-insensitive match); an
        unknown name raises :class:`~sparsesim.exceptions.UnknownNameError` suggesting the closest
        parameter names and listing them all."""
        from .validation import resolve_name

        known = self.param_names()
        return {resolve_name(key, known, f"parameter of {self.name}"): value for key, value in params.items()}

    def make(self, **params):
        """Build the estimator with the name's defaults overridden by ``params`` (names matched
        as in :meth:`resolve_params`)."""
        cls = self.estimator_class()
        merged = dict(self.defaults)
        merged.update(self.resolve_params(params))
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
    """The spec of ``name`` (case-insensitive); unknown names raise an error that suggests the
    closest names and lists the known ones."""
    from .validation import resolve_name  # imported here: `import sparsesim.registry` stays cheap

    return ALGORITHMS[resolve_name(name, ALGORITHMS, "algorithm")]


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
register(AlgorithmSpec("bm25", "sparsesim.learners.batch_baselines:BM25", "baseline",
                       "BM25 (bm25s) of the query document's terms over the corpus searched; needs term counts"))
register(AlgorithmSpec("lsa", "sparsesim.learners.batch_baselines:LSA", "baseline",
                       "LSA: cosine in a 300-dimensional truncated SVD of the training documents"))
register(AlgorithmSpec("logreg-proba", "sparsesim.learners.batch_baselines:LogRegEmbedding", "baseline",
                       "logistic-regression class probabilities as embedding (L2-normalised, dot product); "
                       "supervised", {"output": "proba"}))
register(AlgorithmSpec("logreg-scores", "sparsesim.learners.batch_baselines:LogRegEmbedding", "baseline",
                       "logistic-regression decision scores as embedding (L2-normalised, dot product); supervised",
                       {"output": "scores"}))
register(AlgorithmSpec("svm-scores", "sparsesim.learners.batch_baselines:LinearSVMEmbedding", "baseline",
                       "linear-SVM decision scores as embedding (L2-normalised, dot product); supervised"))
register(AlgorithmSpec("oasis", "sparsesim.learners.bilinear:OASIS", "similarity",
                       "OASIS: passive-aggressive bilinear similarity (Chechik et al. 2010)"))
register(AlgorithmSpec("sors-l1", "sparsesim.learners.bilinear:SORS", "similarity",
                       "SORS-I: proximal L1 on all entries of M (Yao et al. 2015)", {"regularizer": "l1"}))
register(AlgorithmSpec("sors-offdiag", "sparsesim.learners.bilinear:SORS", "similarity",
                       "SORS-II: proximal L1 on the off-diagonal entries of M", {"regularizer": "offdiag"}))
register(AlgorithmSpec("adasors-l1", "sparsesim.learners.bilinear:AdaSORS", "similarity",
                       "AdaSORS-I: AdaGrad proximal L1 on all entries", {"regularizer": "l1"}))
register(AlgorithmSpec("adasors-offdiag", "sparsesim.learners.bilinear:AdaSORS", "similarity",
                       "AdaSORS-II: AdaGrad proximal L1 on the off-diagonal entries", {"regularizer": "offdiag"}))

register(AlgorithmSpec("proxy-ssi", "sparsesim.learners.embedding:ProxySSI", "similarity",
                       "low-rank S = alpha cos + <e(x),e(x')> from class-proxy and mined triplets (SSI, proxies), "
                       "alpha and passes chosen on held-out data"))

register(AlgorithmSpec("ssi-dwuv", "sparsesim.learners.compact:CompactSSI", "similarity",
                       "compact M = D + W + UV^T: SSI low-rank step, PA step on the diagonal and a sparse "
                       "co-occurrence support; within 20x the corpus's stored entries (Bai et al. 2009)"))

# --- online Mahalanobis metric learners on pairs (the SORS paper's baselines; dense A, d <= max_features) ---
register(AlgorithmSpec("lego", "sparsesim.learners.mahalanobis:LEGO", "similarity",
                       "LEGO: online LogDet metric learning on pairs from triplets (Jain et al. 2008); dense A"))
register(AlgorithmSpec("rdml", "sparsesim.learners.mahalanobis:RDML", "similarity",
                       "RDML: online regularized distance metric learning, PSD projection (Jin et al. 2009); dense A"))
# batch metric learners fitted by metric-learn (optional extra "peers"); dense M, d <= max_features
register(AlgorithmSpec("lmnn", "sparsesim.learners.metric_learn_peers:LMNN", "baseline",
                       "LMNN: large-margin nearest-neighbour metric (Weinberger & Saul 2009) by metric-learn; dense M"))
register(AlgorithmSpec("itml", "sparsesim.learners.metric_learn_peers:ITML", "baseline",
                       "ITML: information-theoretic metric learning (Davis et al. 2007) by metric-learn; dense M"))

# --- online heterogeneous transfer (OHT) ---------------------------------------------------
# Target-only PA baselines and OHT1 / OHT2 on a Gaussian-kernel (default; kernel="linear" as a
# parameter) PA / PA-I / PA-II target learner; paper settings sigma = 8, C = 5, K = 100.
for _v, _label in (("pa", "PA"), ("pa1", "PA-I"), ("pa2", "PA-II")):
    register(AlgorithmSpec(_v, "sparsesim.learners.transfer:OHTClassifier", "transfer",
                           f"{_label} on the target view alone (Gaussian kernel by default), OHT baseline",
                           {"combiner": "target", "variant": _v}))
    register(AlgorithmSpec(f"oht1-{_v}", "sparsesim.learners.transfer:OHTClassifier", "transfer",
                           f"OHT1: Hedge (eta) of a kNN text-source hypothesis and a {_label} target learner",
                           {"combiner": "hedge", "variant": _v}))
    register(AlgorithmSpec(f"oht2-{_v}", "sparsesim.learners.transfer:OHTClassifier", "transfer",
                           f"OHT2: mistake-discounted (alpha) source hypothesis and {_label} target learner",
                           {"combiner": "discount", "variant": _v}))
del _v, _label
# --- active and second-order similarity learners (CIKM 2015; AROMA) -----------------------
register(AlgorithmSpec("paas", "sparsesim.learners.active:PAAS", "similarity",
                       "PAAS: passive-aggressive active similarity, queries w.p. delta/(delta+|p|) (Hao et al. 2015)"))
register(AlgorithmSpec("pars", "sparsesim.learners.active:PARS", "similarity",
                       "PARS: passive-aggressive similarity with uniform random queries at query_rate"))
register(AlgorithmSpec("cws", "sparsesim.learners.second_order:CWS", "similarity",
                       "CWS: confidence-weighted similarity, full d^2 x d^2 covariance, all labels (d <= 64)",
                       {"covariance": "full"}))
register(AlgorithmSpec("cwas", "sparsesim.learners.second_order:CWAS", "similarity",
                       "CWAS: confidence-weighted active similarity, full covariance (d <= 64)", {"covariance": "full"}))
register(AlgorithmSpec("cwrs", "sparsesim.learners.second_order:CWRS", "similarity",
                       "CWRS: confidence-weighted similarity, random queries, full covariance (d <= 64)",
                       {"covariance": "full"}))
register(AlgorithmSpec("cws-d", "sparsesim.learners.second_order:CWS", "similarity",
                       "CWS-d: confidence-weighted similarity, diagonal covariance (any d, sparse engine)",
                       {"covariance": "diag"}))
register(AlgorithmSpec("cwas-d", "sparsesim.learners.second_order:CWAS", "similarity",
                       "CWAS-d: confidence-weighted active similarity, diagonal covariance", {"covariance": "diag"}))
register(AlgorithmSpec("cwrs-d", "sparsesim.learners.second_order:CWRS", "similarity",
                       "CWRS-d: confidence-weighted similarity, random queries, diagonal covariance",
                       {"covariance": "diag"}))
register(AlgorithmSpec("aroma", "sparsesim.learners.second_order:AROMA", "similarity",
                       "AROMA: AROW for bilinear similarity, full covariance (Crammer & Chechik 2012; d <= 64)",
                       {"covariance": "full"}))
register(AlgorithmSpec("aroma-d", "sparsesim.learners.second_order:AROMA", "similarity",
                       "AROMA-d: AROW for bilinear similarity, diagonal covariance (any d)", {"covariance": "diag"}))
# --- multi-task relative similarity (IJCAI 2017 OMTRSL) ----------------------------------
register(AlgorithmSpec("omtrsl", "sparsesim.learners.multitask:OMTRSL", "multitask-similarity",
                       "OMTRSL: online multi-task relative similarity, tasks coupled by A^-1(b) (Hao et al. 2017)"))
register(AlgorithmSpec("omtrsl-active", "sparsesim.learners.multitask:OMTRSLActive", "multitask-similarity",
                       "OMTRSL-Active: query y_t with probability delta/(delta+|p_t|)"))
register(AlgorithmSpec("omtrsl-random", "sparsesim.learners.multitask:OMTRSLRandom", "multitask-similarity",
                       "OMTRSL-Random: query y_t uniformly at a fixed ratio"))
register(AlgorithmSpec("ostrsl", "sparsesim.learners.multitask:OSTRSL", "multitask-similarity",
                       "OSTRSL: one independent OASIS-style learner per task, trained in parallel"))
register(AlgorithmSpec("ogrsl", "sparsesim.learners.multitask:OGRSL", "multitask-similarity",
                       "OGRSL: one global OASIS-style similarity for all tasks"))
register(AlgorithmSpec("mtlmnn", "sparsesim.learners.mtlmnn:MTLMNN", "multitask-similarity",
                       "mtLMNN: shared + per-task PSD metrics by large-margin nearest neighbours (Parameswaran & "
                       "Weinberger 2010); batch, dense, low d"))

# --- online multi-task classification (ROMCO and its online baselines) --------------------
register(AlgorithmSpec("romco-nucl", "sparsesim.learners.romco:ROMCO", "multitask-classifier",
                       "ROMCO-NuCl: W = U + V, nuclear-norm prox on U, group lasso on V (Yang et al., Alg. 1)",
                       {"regularizer": "nuclear"}))
register(AlgorithmSpec("romco-logd", "sparsesim.learners.romco:ROMCO", "multitask-classifier",
                       "ROMCO-LogD: W = U + V, log-determinant prox on U (cubic (21)), group lasso on V (Alg. 2)",
                       {"regularizer": "logdet"}))
register(AlgorithmSpec("pa-global", "sparsesim.learners.mtl_baselines:PAGlobal", "multitask-classifier",
                       "PA-Global: one PA-I model (C = 1 / mean squared norm) for the instances of all tasks"))
register(AlgorithmSpec("pa-unique", "sparsesim.learners.mtl_baselines:PAUnique", "multitask-classifier",
                       "PA-Unique: one PA-I model (C = 1 / mean squared norm) per task"))
register(AlgorithmSpec("omtl", "sparsesim.learners.mtl_baselines:OMTL", "multitask-classifier",
                       "OMTL: multitask Perceptron with the fixed clique interaction matrix (Cavallanti et al. 2010)"))
register(AlgorithmSpec("omtllog", "sparsesim.learners.mtl_baselines:OMTLAdaptive", "multitask-classifier",
                       "OMTLLOG: multitask Perceptron, interaction matrix learned by LogDet divergence (Saha et al. 2011)",
                       {"divergence": "logdet"}))
register(AlgorithmSpec("omtlvon", "sparsesim.learners.mtl_baselines:OMTLAdaptive", "multitask-classifier",
                       "OMTLVON: multitask Perceptron, interaction matrix learned by von Neumann divergence (Saha et al. 2011)",
                       {"divergence": "vonneumann"}))
register(AlgorithmSpec("mtfl", "sparsesim.learners.mtl_batch:MTFL", "multitask-classifier",
                       "MTFL: batch multi-task feature learning (logistic loss + ||W||_2,1, Argyriou et al. 2008), "
                       "retrained every 100 instances"))
register(AlgorithmSpec("trml", "sparsesim.learners.mtl_batch:TRML", "multitask-classifier",
                       "TRML: batch trace-norm regularised multi-task learning (logistic loss + ||W||_*, Pong et al. "
                       "2010), retrained every 100 instances"))
register(AlgorithmSpec("cw-col", "sparsesim.learners.mtl_collab:CWCOL", "multitask-classifier",
                       "CW-COL: a global and a personal confidence-weighted (AROW) model per task, predicted by their "
                       "eta-mix (Li et al. 2011)"))
register(AlgorithmSpec("osmtl-e", "sparsesim.learners.mtl_collab:OSMTLE", "multitask-classifier",
                       "OSMTL-e: Perceptron on a smoothed combination of all tasks' weights, shares by exponential "
                       "weights of the tasks' hinge losses (Murugesan et al. 2016)"))
