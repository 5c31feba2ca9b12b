"""Profile: where the ann index's exact re-ranking spends its time at each on-disk size.

For one corpus and model (the cases and model cache of ``benchmarks/bench_indexes.py``) and each
``--ratios`` value R, the re-ranking table Z gets the budget the default rule gives for an index
within R x (corpus + model) (``ann_build.rerank_budget``); reported per R: the budget, the number
h of heavy rows of M precomputed in Z, and per query (``--queries`` corpus documents) the number
of its terms whose row of W is scattered instead (light terms) and the entries of W scattered,
and the re-ranking kernel's time on a pool of ``--pool`` candidates per query (the candidates are
random documents: the kernel's cost depends on the pool's size, not on which documents it holds;
best of ``--repeats`` after a warm-up, one thread, wall and process CPU time). The candidate stage
is not run. Each row is timed with W in the two forms the kernel reads (``--forms``): ``model``,
the model's CSR (int32 columns, float64 values: what a freshly built index holds in memory), and
``narrow``, the form a saved index stores and a loaded one reads (:mod:`sparsesim.indexes.ann_rerank_w`:
uint16 columns, float32 values, the float64 entries apart); the budget is the current rule's
(which counts W in the narrow form), and with ``--budgets narrow,wide`` also the budget of an
index that stores W as the model's CSR (12 bytes per entry).
Results: ``benchmarks/out/bench_indexes_rerank_profile_<corpus>.json``.

Usage::

    SPARSESIM_DATA=/path/to/data python benchmarks/profile_ann_rerank.py --case news20:oasis:20000 --ratios 1.5,2,3
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]


def main(argv=None):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_indexes as B

    parser = B.profile_parser(__doc__, repeats=3)
    parser.add_argument("--ratios", default="1.5,2,3")
    parser.add_argument("--forms", default="model,narrow")
    parser.add_argument("--budgets", default="narrow",
                        help="comma-separated: narrow (the budget counts W as stored, the current rule), wide "
                             "(W counted at 12 bytes per entry, as an index storing the model's CSR)")
    args = parser.parse_args(argv)
    from sparsesim.indexes import ann_build
    from sparsesim.indexes.ann import AnnIndex
    from sparsesim.indexes.ann_rerank_w import NarrowW
    from sparsesim.indexes.base import kernels, query_scratch

    model, X, Q, qrows = B.prepared_case(args.case, args.queries, args.seed, args.model_cache)
    corpus = args.case.split(":")[0]
    n, d = X.shape
    W = model.W
    row_nnz = np.diff(W.indptr)
    cands = np.random.default_rng(args.seed).integers(0, n, size=(Q.shape[0], args.pool)).astype(np.int64)
    k = 10
    forms = {"model": NarrowW.of_model(W), "narrow": NarrowW.split(W)}
    forms = {name: forms[name] for name in args.forms.split(",") if forms.get(name) is not None}
    out = {"case": args.case, "n_documents": n, "n_features": d, "nnz_W": int(W.nnz),
           "query_terms": Q.nnz / Q.shape[0], "pool": args.pool, "loadavg_start": os.getloadavg(), "rows": [],
           "command": "python benchmarks/profile_ann_rerank.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    runs = [(budget, float(r)) for budget in args.budgets.split(",") for r in args.ratios.split(",")]
    for budget_rule, ratio in runs:
        index = AnnIndex(model)
        index.postings_length_ = index._postings_length(n)
        saved = ann_build.DISK_RATIO, NarrowW.stored_bytes
        ann_build.DISK_RATIO = ratio
        if budget_rule == "wide":
            NarrowW.stored_bytes = staticmethod(lambda W: 12 * W.nnz + 8 * (W.shape[0] + 1))
        try:
            index.rerank_memory_ = ann_build.rerank_budget(index, X)
        finally:
            ann_build.DISK_RATIO, NarrowW.stored_bytes = saved[0], staticmethod(saved[1])
        heavy = ann_build.choose_heavy_rows(index, X)
        index.heavy_rows_ = heavy
        pos = ann_build.heavy_positions(index, heavy)
        light = pos[Q.indices] < 0
        light_terms = np.add.reduceat(light.astype(np.int64), Q.indptr[:-1])
        scatter = np.add.reduceat(np.where(light, row_nnz[Q.indices], 0), Q.indptr[:-1])
        Z = ann_build.heavy_values(index, X, 1)

        def run(form):
            docs = np.full((Q.shape[0], k), -1, dtype=np.int64)
            scores = np.full((Q.shape[0], k), -np.inf)
            qm, stamp = query_scratch.rerank(n, d)
            kernels().rerank(Q.indptr, Q.indices, Q.data, *form.kernel_args(), bool(model.identity), pos, Z,
                             X.indptr, X.indices, X.data, cands, k, docs, scores, qm, stamp,
                             query_scratch.generations(Q.shape[0]))
            return scores

        timing = {}
        for name, form in forms.items():
            run(form)
            wall = cpu = np.inf
            for _ in range(args.repeats):
                t, c = time.perf_counter(), time.process_time()
                run(form)
                wall, cpu = min(wall, time.perf_counter() - t), min(cpu, time.process_time() - c)
            timing[name] = {"us_per_query_wall": wall / Q.shape[0] * 1e6, "us_per_query_cpu": cpu / Q.shape[0] * 1e6}
        same = len({run(form).tobytes() for form in forms.values()}) == 1
        row = {"ratio": ratio, "budget": budget_rule, "rerank_memory": int(index.rerank_memory_), "n_heavy_rows": int(heavy.size),
               "postings_length": int(index.postings_length_), "light_terms_mean": float(light_terms.mean()),
               "scatter_entries_mean": float(scatter.mean()), "scatter_entries_median": float(np.median(scatter)),
               "forms": timing, "scores_identical_across_forms": bool(same)}
        out["rows"].append(row)
        print(f"[{args.case}] {ratio}x ({budget_rule} W): Z {row['rerank_memory'] / 2**20:.0f} MiB, h = {heavy.size:,}; per query "
              f"{row['light_terms_mean']:.1f} of {out['query_terms']:.1f} terms light, "
              f"{row['scatter_entries_mean']:,.0f} entries of W scattered; re-rank, us CPU / query: "
              + ", ".join(f"{name} {t['us_per_query_cpu']:.0f}" for name, t in timing.items()), flush=True)
        del Z
    out["loadavg_end"] = os.getloadavg()
    path = pathlib.Path(args.out) / f"bench_indexes_rerank_profile_{corpus}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
