"""OMTRSL update throughput vs single-task OASIS on the same sparse engine (same run, same triplets).

Workload: a synthetic RCV1-like corpus (``sparsesim.data.synthetic.rcv1_like``: d = 47,236, ~75
nonzeros per document, Zipf feature frequencies, L2-normalised rows; labelled synthetic) whose
documents are dealt at random to K synthetic tasks. One OMTRSL triplet stream (task drawn
uniformly, coin-flip y_t) is fed to

* ``oasis``       — :class:`sparsesim.engine.bilinear.BilinearEngine` (the shared single-task hash engine),
* ``ogrsl``       — :class:`sparsesim.engine.multitask.MultiTaskEngine` with one task (b = 0),
* ``omtrsl K=4``  / ``omtrsl K=50`` — the multi-task engine with b = 1 (shared + own matrices in
  the paired hash storage: S_ij and the first writer's O_k,ij in one 32-byte record, an overflow
  table for the other tasks),

* ``oasis compact`` / ``omtrsl K=... compact`` — the same with ``compact=True`` on both sides
  (float32 values; OMTRSL's pair record shrinks to 16 bytes with the first writer's task id and an
  overflow flag packed into the key), compared with each other,

and, on dense isolet-shaped data (d = 617, every feature nonzero), the dense storage with one task
and with K = 5. Updates/s = triplets with positive hinge loss (which write the model) per second;
"presized" starts the hash table at
the capacity an end-to-end run ends with (the update loop alone); "end to end" includes table growth
from 2^16 slots. Best of ``--repeats`` runs (the machine is shared).

Usage: ``python benchmarks/bench_multitask.py [--triplets 4000] [--repeats 3]``; writes
``benchmarks/out/bench_multitask.png``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from sparsesim.data.synthetic import rcv1_like
from sparsesim.engine.bilinear import OASIS, BilinearEngine
from sparsesim.engine.multitask import MultiTaskEngine
from sparsesim.triplets import omtrsl_triplets


def _run(make, X, trip, signs, tids):
    """(end-to-end updates/s, presized updates/s, presized updates per CPU second, entries stored).

    End to end: the hash table starts at 2^16 slots and grows (x4, then x2) as the model fills.
    Presized: a second engine starts at the capacity the first one ended with, so the timing is
    the update loop alone (a threshold crossing would otherwise charge one engine a rehash of
    tens of millions of entries that another engine of nearly the same size escapes).
    """
    eng = make(1 << 16)
    t0 = time.perf_counter()
    n_upd = np.count_nonzero(_feed(eng, X, trip, signs, tids))
    e2e = n_upd / (time.perf_counter() - t0)
    store = eng.store
    entries = int(store.n_entries) if store is not None else int(np.count_nonzero(eng.W))
    cap = store.capacity if store is not None else 16
    del eng, store
    eng = make(cap)
    t0, c0 = time.perf_counter(), time.process_time()
    n_upd = np.count_nonzero(_feed(eng, X, trip, signs, tids))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return e2e, n_upd / wall, n_upd / cpu, entries


def _feed(eng, X, trip, signs, tids):
    if isinstance(eng, BilinearEngine):
        return eng.partial_fit(X, trip, signs)
    if eng.n_tasks == 1:  # one global model: every triplet is task 0
        tids = np.zeros_like(tids)
    return eng.partial_fit(X, trip, signs, tids)[0]


def bench(rows, name, makers, X, trip, signs, tids, repeats):
    best = {}
    for _ in range(repeats):  # interleave the engines so load changes hit all of them
        for label, make in makers:
            r = _run(make, X, trip, signs, tids)
            if label not in best:
                best[label] = list(r)
            else:  # best of each measure over the repeats
                best[label] = [max(a, b) for a, b in zip(best[label][:3], r[:3])] + [r[3]]
    for label, _ in makers:
        e2e, steady, cpu, entries = best[label]
        rows.append((name, label, e2e, steady, cpu, entries))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--triplets", type=int, default=2000)
    ap.add_argument("--dense-triplets", type=int, default=1500)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "out"))
    args = ap.parse_args(argv)

    corpus = rcv1_like(n_documents=6000, seed=0)
    X, y = corpus.X.tocsr(), corpus.y
    X.sort_indices()
    d = X.shape[1]
    rng = np.random.default_rng(1)
    rows = []
    warm = (np.zeros((2, 3), np.int64) + [[0, 1, 2]], np.ones(2), np.zeros(2, np.int64))
    for make in (lambda: BilinearEngine(d, OASIS, C=1.0, initial_capacity=16),
                 lambda: BilinearEngine(d, OASIS, C=1.0, initial_capacity=16, compact=True),
                 lambda: MultiTaskEngine(d, 2, b=1.0, storage="hash", initial_capacity=16),
                 lambda: MultiTaskEngine(d, 2, b=1.0, storage="hash", initial_capacity=16, compact=True)):
        # growth compiles too
        _feed(make(), X, *warm)  # compile outside the timings
    for K in (4, 50):
        tasks = rng.integers(0, K, X.shape[0])
        trip, signs, tids = omtrsl_triplets(y, args.triplets, seed=2, tasks=tasks)
        signs = signs.astype(np.float64)
        makers = [
            ("oasis (BilinearEngine)", lambda cap: BilinearEngine(d, OASIS, C=1.0, initial_capacity=cap)),
            ("ogrsl (1 task, b=0)", lambda cap: MultiTaskEngine(d, 1, b=0.0, C=1.0, storage="hash",
                                                                initial_capacity=cap)),
            (f"omtrsl K={K} (b=1)", lambda cap, K=K: MultiTaskEngine(d, K, b=1.0, C=1.0, storage="hash",
                                                                     initial_capacity=cap)),
            ("oasis compact", lambda cap: BilinearEngine(d, OASIS, C=1.0, initial_capacity=cap, compact=True)),
            (f"omtrsl K={K} compact", lambda cap, K=K: MultiTaskEngine(d, K, b=1.0, C=1.0, storage="hash",
                                                                       initial_capacity=cap, compact=True)),
        ]
        bench(rows, f"sparse d={d}, K={K}", makers, X, trip, signs, tids, args.repeats)

    # dense isolet-shaped data: d = 617, every feature nonzero
    rng = np.random.default_rng(3)
    n, dd, K = 1500, 617, 5
    Xd = sp.csr_matrix(np.clip(rng.normal(scale=0.5, size=(n, dd)), -1, 1))
    yd = rng.integers(0, 26, n)
    td = rng.integers(0, K, n)
    trip, signs, tids = omtrsl_triplets(yd, args.dense_triplets, seed=4, tasks=td)
    signs = signs.astype(np.float64)
    for make in (lambda: MultiTaskEngine(dd, 1, b=0.0, storage="dense"), lambda: MultiTaskEngine(dd, 2, storage="dense")):
        _feed(make(), Xd, *warm)
    makers = [
        ("ogrsl (1 task, dense)", lambda cap: MultiTaskEngine(dd, 1, b=0.0, C=1.0, storage="dense")),
        (f"omtrsl K={K} (b=1, dense)", lambda cap, K=K: MultiTaskEngine(dd, K, b=1.0, C=1.0, storage="dense")),
    ]
    bench(rows, f"dense d={dd}, K={K}", makers, Xd, trip, signs, tids, args.repeats)

    print(f"{'workload':<24} {'engine':<26} {'updates/s e2e':>14} {'updates/s presized':>18} "
          f"{'per CPU s':>10} {'entries':>11} {'oasis/x presized':>17}")
    base = {}
    for name, label, e2e, steady, cpu, entries in rows:
        layout = "compact" if label.endswith("compact") else "default"
        if label.startswith("oasis") or label.startswith("ogrsl (1 task, dense)"):
            base[name, layout] = (steady, cpu, e2e)
        ratio = base.get((name, layout), (steady,))[0] / steady
        print(f"{name:<24} {label:<26} {e2e:>14.0f} {steady:>18.0f} {cpu:>10.0f} {entries:>11d} {ratio:>17.2f}")
    print("\nOMTRSL against single-task OASIS on the same engine, same run (OASIS / OMTRSL updates/s; "
          "target <= 1.5):")
    print(f"{'K':>4} {'layout':>8} {'OASIS presized':>15} {'OMTRSL presized':>16} {'ratio':>6} {'ratio CPU':>10} "
          f"{'OASIS e2e':>10} {'OMTRSL e2e':>11} {'ratio e2e':>10}")
    for name, label, e2e, steady, cpu, entries in rows:
        if label.startswith("omtrsl") and name.startswith("sparse"):
            layout = "compact" if label.endswith("compact") else "default"  # compact: both store float32
            bs, bc, be = base[name, layout]
            K = label.split("K=")[1].split()[0]
            print(f"{K:>4} {layout:>8} {bs:>15.0f} {steady:>16.0f} {bs / steady:>6.2f} {bc / cpu:>10.2f} "
                  f"{be:>10.0f} {e2e:>11.0f} {be / e2e:>10.2f}")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    labels = [f"{n}\n{l}" for n, l, *_ in rows]
    ax.barh(range(len(rows)), [r[3] for r in rows], color="tab:blue", label="presized")
    ax.barh(range(len(rows)), [r[2] for r in rows], color="tab:orange", alpha=0.6, label="end to end")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_xlabel("updates per second")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "bench_multitask.png", dpi=90)
    print(f"plot: {out / 'bench_multitask.png'}")
    return rows


if __name__ == "__main__":
    main()
