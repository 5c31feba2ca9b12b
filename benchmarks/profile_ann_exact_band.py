"""Profile: would a float32 re-ranking table pay, with the top candidates re-scored exactly?

A float32 Z holds twice the heavy rows of a float64 Z in the same bytes (fewer rows of W
scattered per query), but its scores are float32-rounded: an index that returns exact scores
would have to recompute, for every candidate that can still enter the top k (at least k per
query), the heavy part sum_i q_i (M c)_i exactly. This measures both sides on one corpus and
model (the cases and model cache of ``benchmarks/bench_indexes.py``), process CPU time, one
thread, best of ``--repeats``:

* the re-ranking kernel on a pool of ``--pool`` random candidates per query (``--queries`` corpus
  documents) with Z float64 at the default 1.5x budget (h rows), and with Z float32 in the same
  bytes (2h rows);
* the exact heavy part of ``--band`` candidates per query at 2h heavy rows, each (M c)_i found by
  binary search of the candidate's terms in row i of W (a compiled kernel; the cheapest exact
  route that needs no more stored bytes).

Results: ``benchmarks/out/bench_indexes_rerank_band_<corpus>.json``.

Usage::

    SPARSESIM_DATA=/path/to/data python benchmarks/profile_ann_exact_band.py --case news20:oasis:20000
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import time

import numba
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]


@numba.njit(nogil=True)
def exact_heavy_part(q_ptr, q_idx, q_val, heavy_pos, w_ptr, w_idx, w_val, identity, x_ptr, x_idx, x_val, cands):
    """sum over the heavy terms i of each query of q_i (M c)_i, for every candidate c, exactly."""
    out = np.zeros(cands.shape)
    for r in range(q_ptr.size - 1):
        for t in range(cands.shape[1]):
            c = cands[r, t]
            s = 0.0
            for p in range(q_ptr[r], q_ptr[r + 1]):
                i = q_idx[p]
                if heavy_pos[i] < 0:
                    continue
                start, end = w_ptr[i], w_ptr[i + 1]
                v = 0.0
                for u in range(x_ptr[c], x_ptr[c + 1]):  # the candidate's terms, ascending
                    j = x_idx[u]
                    lo, hi = start, end
                    while lo < hi:
                        mid = (lo + hi) // 2
                        if w_idx[mid] < j:
                            lo = mid + 1
                        else:
                            hi = mid
                    if lo < end and w_idx[lo] == j:
                        v += w_val[lo] * x_val[u]
                    start = lo
                    if identity and j == i:
                        v += x_val[u]
                s += q_val[p] * v
            out[r, t] = s
    return out


def best_cpu(fn, repeats):
    fn()
    best = np.inf
    for _ in range(repeats):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def main(argv=None):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_indexes as B

    parser = B.profile_parser(__doc__, repeats=5)
    parser.add_argument("--band", type=int, default=10)
    args = parser.parse_args(argv)
    from sparsesim.indexes import ann_build
    from sparsesim.indexes.ann import AnnIndex
    from sparsesim.indexes.ann_rerank_w import NarrowW
    from sparsesim.indexes.base import kernels, query_scratch

    model, X, Q, qrows = B.prepared_case(args.case, args.queries, args.seed, args.model_cache)
    corpus = args.case.split(":")[0]
    n, d = X.shape
    W = model.W
    narrow = NarrowW.split(W) or NarrowW.of_model(W)
    rng = np.random.default_rng(args.seed)
    pool = rng.integers(0, n, size=(Q.shape[0], args.pool)).astype(np.int64)
    index = AnnIndex(model)
    index.postings_length_ = index._postings_length(n)
    budget = ann_build.rerank_budget(index, X)
    k, out = 10, {"case": args.case, "queries": int(Q.shape[0]), "pool": args.pool, "band": args.band,
                  "loadavg_start": os.getloadavg(), "rerank_memory": int(budget),
                  "command": "python benchmarks/profile_ann_exact_band.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    for label, itemsize, dtype in (("z_float64", 8, np.float64), ("z_float32", 4, np.float32)):
        index.rerank_memory_ = budget * 8 // itemsize  # choose_heavy_rows counts 8 bytes per value
        heavy = ann_build.choose_heavy_rows(index, X)
        index.heavy_rows_ = heavy
        pos = ann_build.heavy_positions(index, heavy)
        Z = ann_build.heavy_values(index, X, 1).astype(dtype)

        def rerank(pos=pos, Z=Z):
            docs, scores = np.full((Q.shape[0], k), -1, np.int64), np.full((Q.shape[0], k), -np.inf)
            qm, stamp = query_scratch.rerank(n, d)
            kernels().rerank(Q.indptr, Q.indices, Q.data, *narrow.kernel_args(), bool(model.identity), pos, Z,
                             X.indptr, X.indices, X.data, pool, k, docs, scores, qm, stamp,
                             query_scratch.generations(Q.shape[0]))

        row = {"n_heavy_rows": int(heavy.size), "rerank_us_cpu": best_cpu(rerank, args.repeats) / Q.shape[0] * 1e6,
               "heavy_terms_per_query": float(np.add.reduceat((pos[Q.indices] >= 0).astype(np.int64),
                                                              Q.indptr[:-1]).mean())}
        if dtype == np.float32:
            band = pool[:, :args.band]
            call = (Q.indptr, Q.indices, Q.data, pos, W.indptr, W.indices, W.data, bool(model.identity), X.indptr,
                    X.indices, X.data, band)
            row["exact_band_us_cpu"] = best_cpu(lambda: exact_heavy_part(*call), args.repeats) / Q.shape[0] * 1e6
        out[label] = row
        print(f"[{args.case}] {label}: h = {heavy.size:,}, {row['heavy_terms_per_query']:.1f} heavy terms per query, "
              f"re-rank {row['rerank_us_cpu']:.0f} us CPU / query"
              + (f", exact heavy part of {args.band} candidates {row['exact_band_us_cpu']:.0f} us CPU / query"
                 if "exact_band_us_cpu" in row else ""), flush=True)
        del Z
    out["loadavg_end"] = os.getloadavg()
    path = pathlib.Path(args.out) / f"bench_indexes_rerank_band_{corpus}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
