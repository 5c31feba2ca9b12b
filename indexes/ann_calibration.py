"""The :class:`~sparsesim.indexes.ann.AnnIndex` side of recall calibration: the search settings it
offers to measure, (re)calibration with an optional swap of the served model, and the fallback
setting of an uncalibrated index.

The measurement itself (sample queries, exact truth, choice of the fastest qualifying setting)
is :mod:`sparsesim.indexes.calibration`'s.
"""

from __future__ import annotations

from sparsesim.exceptions import InvalidInputError
from sparsesim.models import BilinearSimilarity

from .ann_build import set_heavy_rows, top_up_heavy_rows
from .calibration import calibrate, check_target_recall

# used when an index is not calibrated and the parameter was not given
FALLBACK = {"n_postings": 256, "sparse_pool": 100, "dense_pool": 100, "nprobe": 32}


def recalibrate(index, queries=None, target_recall=None, model=None, top_k: int = 10, strata=None) -> dict:
    """(Re)calibrate the search setting of ``index``, first serving ``model`` when given (see
    :meth:`AnnIndex.calibrate`); returns the record, also kept in ``index.calibration_``."""
    if model is not None:
        swap_model(index, model)
    target = check_target_recall(target_recall) if target_recall is not None else index.target_recall
    record = calibrate(index, queries, target_recall=0.95 if target is None else target, top_k=top_k,
                       n_queries=index.calibration_size, random_state=index.random_state,
                       n_jobs=max(1, int(index.n_jobs or 1)), strata=strata)
    record["postings_model_checksum"] = index.postings_model_
    index.calibration_ = record
    return record


def swap_model(index, model):
    """Serve ``model`` (same features and flags) from ``index``: its re-ranking values are
    recomputed, its candidate postings stay those of the model they were built with."""
    if not isinstance(model, BilinearSimilarity):
        raise InvalidInputError(f"model must be a BilinearSimilarity, got {type(model).__name__}")
    if (model.n_features != index.n_features or model.normalize != index.model.normalize
            or model.identity != index.model.identity):
        raise InvalidInputError("the new model must have the same features and identity/normalize flags "
                                "as the index's model")
    if index._dense_on:
        raise InvalidInputError("an index with a dense (FAISS) stage learned its projection from the model; "
                                "rebuild it for a new model")
    index.model = model
    set_heavy_rows(index, index.X_, max(1, int(index.n_jobs or 1)))
    top_up_heavy_rows(index, index.X_, max(1, int(index.n_jobs or 1)))


def calibration_grid(index, top_k: int = 10) -> list:
    """Search settings the calibration measures: families ordered cheapest first (a family
    stops at its first setting that meets the target)."""
    L = index.postings_length_ or 1
    if index.n_postings is not None:
        reads = [index.n_postings]
    else:
        # steps of 1.5x (2x gaps left 5% of the speed at the target unclaimed: news20 SORS-I at
        # recall 0.978 took 128 reads where 96 were enough), up to the list length (long lists,
        # a given postings_per_feature, can need thousands of reads)
        reads = sorted({min(L, r) for r in (8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024,
                                             1536, 2048, 3072, 4096, 6144, 8192)})
    if index.sparse_pool is not None:
        pools = [index.sparse_pool]
    else:
        # growing pools up to the whole corpus (needed when a retrained model is served from
        # postings built for an earlier one); a family stops at its first qualifying pool
        n = max(index.n_documents, 1)
        pools = sorted({min(n, p * top_k) for p in (1, 2, 3, 5, 7, 10, 15, 20, 50, 100, 200, 500, 1000)})
    if index._dense_on:
        if index.dense_pool is not None:
            dense = [index.dense_pool]
        elif index.n_postings == 0 or index.sparse_pool == 0:  # the dense stage alone
            dense = [p * top_k for p in (1, 2, 5, 10, 20, 50)]
        else:
            dense = [0, 5 * top_k, 20 * top_k]
        probes = [index.nprobe] if index.nprobe is not None else [FALLBACK["nprobe"]]
    else:
        dense, probes = [None], [None]
    if index.n_postings == 0 or index.sparse_pool == 0:
        reads, pools = [0], [0]
    families = []
    for pr in probes:
        for r in reads:
            family = []
            for p in pools:
                for dp in dense:
                    setting = {"n_postings": r, "sparse_pool": p}
                    if dp is not None:
                        setting.update(dense_pool=dp, nprobe=pr)
                    family.append(setting)
            families.append(family)
    return families
