"""The Seismic peer of ``benchmarks/bench_indexes.py --seismic``: pyseismic-lsr at its best
published configuration family, with its compressed index, against the ann index at equal recall.

Seismic (SIGIR 2024; ``pip install pyseismic-lsr``) publishes, per target recall, the build and
search parameters its grid search found best (``experiments/best_configs/`` of its repository,
MS MARCO with SPLADE-family encoders): ``n_postings`` 2000–3000, ``centroid_fraction`` 0.1–0.2,
``summary_energy`` 0.4–0.5, ``max_fraction`` 4.0, ``min_cluster_size`` 2 or 10, ``doc_cut`` 15,
half-precision values; searched with ``query_cut`` 10 and ``heap_factor`` 0.7–0.9. This module
builds the compressed form of that index (``SeismicIndexDotVByte``: the documents' sparse
vectors in its DotVByte encoding) for both published build settings of :data:`BUILD_GRID` and
searches each with every setting of :data:`SEARCH_GRID` (the published query settings and their neighbours). For each
target recall (0.95, 0.99) the peer's fastest setting meeting it is compared with the ann
index's fastest setting of its calibration grid meeting it, both chosen on the same queries and
timed the same way (best of ``repeats`` after a warm-up, one thread). The peer searches the raw corpus with the expanded query Mᵀq cut to its heaviest
positive components (a learned-sparse query, as Seismic expects), and its candidates are
re-ranked with the exact score; "search only" leaves out forming Mᵀq and the re-ranking.
"""

from __future__ import annotations

import time

import numpy as np

#: build settings: Seismic's best-config family (n_postings, centroid_fraction, summary_energy,
#: min_cluster_size), max_fraction 4.0 and doc_cut 15 throughout
BUILD_GRID = (
    (2000, 0.2, 0.5, 2),   # best_configs msmarco-v1 splade-cocondenser mem_budget_1.5 recall_95
    (3000, 0.1, 0.4, 10),  # ... recall_99
)
#: search settings (query_cut, heap_factor, candidates re-ranked)
SEARCH_GRID = tuple((cut, heap, pool) for cut in (10, 20, 50, 100) for heap in (0.7, 0.8, 0.9, 1.0)
                    for pool in (10, 30, 100))
TARGETS = (0.95, 0.99)
QUERY_TERMS = 300  # the expanded query's heaviest positive components handed to Seismic


def timed(fn, repeats):
    """(last result, best wall time of ``repeats`` calls after one warm-up call)."""
    out = fn()
    best = np.inf
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return out, best


def expanded_queries(model, Q, seismic):
    """Seismic's queries: rows of Q M (= (Mᵀq)ᵀ) cut to their QUERY_TERMS heaviest positive
    components, as (components as strings, float32 values), plus Q M and the seconds it took."""
    start = time.perf_counter()
    QM = (Q @ model.M.tocsr()).tocsr()
    comps, vals = [], []
    for r in range(QM.shape[0]):
        lo, hi = QM.indptr[r], QM.indptr[r + 1]
        v, c = QM.data[lo:hi], QM.indices[lo:hi]
        top = np.argsort(-v, kind="stable")[:QUERY_TERMS]
        top = top[v[top] > 0]
        comps.append(np.array([str(i) for i in c[top]]).astype(seismic.get_seismic_string()))
        vals.append(v[top].astype(np.float32))
    return comps, vals, QM, time.perf_counter() - start


def reranked(res, X, QM, nq, k):
    """Top-k exact scores (q'.x) of each query's Seismic candidates (-inf where fewer than k).

    The candidates' rows are taken with :func:`sparsesim.csr_rows.take_rows`: scipy's ``X[cands]``
    first casts the whole corpus's index arrays to one dtype, ~0.15 s per query at 10^6 documents,
    which would be charged to the peer's end-to-end rate."""
    from sparsesim.csr_rows import take_rows

    found = np.full((nq, k), -np.inf)
    for hits in res:
        if not hits:
            continue
        r = int(hits[0][0])  # results carry their query id
        cands = np.array([int(h[2]) for h in hits], dtype=np.int64)
        scores = take_rows(X, cands) @ QM[r].toarray().ravel()
        best = np.sort(scores)[::-1][:k]
        found[r, :best.size] = best
    return found


def seismic_peer(model, X, Q, truth_scores, repeats=3, k=10, build_threads=2, log=print) -> dict:
    """Every (build, search) setting of the compressed Seismic index: recall@10 (ties counted)
    against ``truth_scores``, queries/s search only and end to end (one thread)."""
    try:
        import seismic
    except ImportError:
        return {"skipped": "pyseismic-lsr is not installed (pip install pyseismic-lsr)"}
    from sparsesim.indexes.calibration import recall_counting_ties
    from sparsesim.memory import peak_resident_bytes, reset_peak_resident

    n, d = X.shape
    comps, vals, QM, expand_seconds = expanded_queries(model, Q, seismic)
    qids = np.array([str(r) for r in range(Q.shape[0])]).astype(seismic.get_seismic_string())
    out = {"version": getattr(seismic, "__version__", None), "index_class": "SeismicIndexDotVByte",
           "query_terms": QUERY_TERMS, "expand_seconds": expand_seconds, "builds": [], "settings": []}
    for n_postings, centroid_fraction, summary_energy, min_cluster in BUILD_GRID:
        build = {"n_postings": n_postings, "centroid_fraction": centroid_fraction, "summary_energy": summary_energy,
                 "min_cluster_size": min_cluster, "max_fraction": 4.0, "doc_cut": 15}
        reset_peak_resident()
        start = time.perf_counter()
        ds = seismic.SeismicDataset(dim=d)
        ds.add_documents_by_id([str(i) for i in range(n)], X.indices.astype(np.int64), X.data.astype(np.float32),
                               X.indptr.astype(np.int64))
        index = seismic.SeismicIndexDotVByte.build_from_dataset(ds, num_threads=build_threads, **build)
        del ds
        peak = peak_resident_bytes()
        out["builds"].append({**build, "build_seconds": time.perf_counter() - start,
                              "build_peak_gib": None if peak is None else peak / 2**30})
        for query_cut, heap_factor, pool in SEARCH_GRID:
            res, search_seconds = timed(lambda: index.batch_search(qids, comps, vals, pool, query_cut, heap_factor,
                                                                   num_threads=1), repeats)
            start = time.perf_counter()
            found = reranked(res, X, QM, Q.shape[0], k)
            rerank_seconds = time.perf_counter() - start
            recall = float(recall_counting_ties(found, truth_scores).mean())
            out["settings"].append({**build, "query_cut": query_cut, "heap_factor": heap_factor, "pool": pool,
                                    "recall_self": recall, "qps_search_only": Q.shape[0] / search_seconds,
                                    "qps_end_to_end": Q.shape[0] / (expand_seconds + search_seconds + rerank_seconds)})
        best = max(out["settings"][-len(SEARCH_GRID):], key=lambda s: (s["recall_self"], s["qps_search_only"]))
        log(f"    seismic {build}: best recall {best['recall_self']:.3f} "
            f"({best['qps_search_only']:.0f} q/s search only)")
        del index
    return out


def ann_at(ann, Q, truth_scores, target, repeats=3, k=10) -> dict | None:
    """The ann index's fastest setting of its calibration grid whose recall@10 on ``Q`` reaches
    ``target`` (each family stops at its first setting reaching it)."""
    from sparsesim.indexes.calibration import recall_counting_ties

    best = None
    for family in ann.calibration_grid(k):
        for setting in family:
            (_, scores), sec = timed(lambda: ann.query_rows(Q, k, n_jobs=1, **setting), repeats)
            recall = float(recall_counting_ties(scores, truth_scores).mean())
            if recall >= target:
                if best is None or Q.shape[0] / sec > best["qps_1"]:
                    best = {"setting": dict(setting), "recall_self": recall, "qps_1": Q.shape[0] / sec}
                break  # the rest of the family only costs more
    return best


def comparison(ann, peer: dict, Q, truth_scores, repeats=3, k=10, log=print) -> list[dict]:
    """Per target recall: the peer's fastest setting reaching it, the ann index's, and the ratio
    of their search-only rates (ann / peer)."""
    rows = []
    for target in TARGETS:
        ok = [s for s in peer.get("settings", []) if s["recall_self"] >= target]
        p = max(ok, key=lambda s: s["qps_search_only"]) if ok else None
        a = ann_at(ann, Q, truth_scores, target, repeats, k)
        row = {"target": target, "seismic": p, "ann": a,
               "ratio_search_only": a["qps_1"] / p["qps_search_only"] if a and p else None,
               "ratio_end_to_end": a["qps_1"] / p["qps_end_to_end"] if a and p else None}
        rows.append(row)
        if a and p:
            log(f"    recall >= {target}: ann {a['qps_1']:.0f} q/s ({a['setting']}, {a['recall_self']:.3f}) / "
                f"seismic {p['qps_search_only']:.0f} ({p['recall_self']:.3f}) = {row['ratio_search_only']:.2f}x")
        else:
            log(f"    recall >= {target}: ann {'-' if not a else round(a['qps_1'])}, "
                f"seismic {'not reached' if not p else round(p['qps_search_only'])}")
    return rows
