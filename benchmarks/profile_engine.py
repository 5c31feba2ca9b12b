"""Benchmark: where the cycles of one SORS-I / OASIS triplet update go.

The row-store update loop (:func:`sparsesim.engine.bilinear_loop.train_triplets`) is compiled a second
time with lines spliced into its own source (``SPLICES``, so it cannot drift from the product
loop) that read the CPU's cycle counter (``llvm.readcyclecounter``, the TSC on x86) between the
phases of every update:

* ``z merge``: z = x+ - x- (a merge of two sorted rows)
* ``homes``: the home slot of every entry (i, j) of x z^T
* ``pass 1``: probe of every entry and catch-up of its lazy shrinkage (the margin)
* ``pass 2``: the writes and inserts of the update (or, at zero loss, the removal of entries
  that shrank to zero)
* ``room (kernel)``: sweeps and moves of rows that fill up, before a triplet starts
* ``room (pool)``: the pool's growth or compaction outside the kernel (wall time)

and count what the update touched (entries, the share on dense rows, found entries, slots
between an entry's home and its slot) from the slots pass 1 recorded, outside the timed spans.
After pass 1, pass 1 runs again on the same entries, now in cache (it changes nothing: every
entry is current): the gap to pass 1 is what cache misses cost (that rerun is not in the totals).

The model is first trained by the product engine for ``--warm`` triplets (not measured), then
the instrumented loop runs the next ``--triplets`` on the same store. The cycle counter runs on
while the process waits for a core, so on a shared machine the phases carry other jobs' time
in proportion; the counts are exact.

``--feature-order given`` keeps the corpus's feature numbers in the store instead of numbering
them by descending document frequency (the engine's default; the same model either way), to
measure what the order gains (docs/engine.md, "Where the entries live").

Run:  SPARSESIM_DATA=... python benchmarks/profile_engine.py [--corpora synthetic,news20]
      [--algorithms sors-l1+compact,oasis] [--warm 10000] [--triplets 30000] [--feature-order given]
      [--json FILE]
Prints a table per configuration and writes every row to ``benchmarks/out/profile_engine.json``.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import sys
import textwrap
import time
from pathlib import Path

import numba
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))

from bench_sors import DEFAULT_PARAMS, corpus  # noqa: E402

from sparsesim.engine import bilinear_loop  # noqa: E402
from sparsesim.engine.rules import OASIS, SORS  # noqa: E402
from sparsesim.engine.driver import run_growing, triplet_scratch  # noqa: E402
from sparsesim.engine.segments import CAP, LIVE, SHIFT  # noqa: E402


@intrinsic
def cycles(typingctx):
    """The CPU's cycle counter (``llvm.readcyclecounter``)."""
    sig = types.int64()

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(64), [])
        fn = builder.module.declare_intrinsic("llvm.readcyclecounter", fnty=fnty)
        return builder.call(fn, [])

    return sig, codegen


@numba.njit
def read_cycles():
    return cycles()


# counters of the instrumented loop
C_MERGE, C_HOME, C_PASS1, C_PASS2, C_ROOM, C_PASS1_CACHED = range(6)
N_TRIPLETS, N_UPDATES, N_ENTRIES, N_DIAG, N_DENSE, N_FOUND, N_PROBE_STEPS, N_X, N_Z, N_SWEEPS, N_MOVES = range(6, 17)
C_SWEEP, N_SWEPT_SLOTS, N_MOVED_RECORDS = 17, 18, 19
N_COUNTERS = 20


@numba.njit(inline="always")
def census(rows, xr, n_rows, nz, homes, slots, prev, prof):
    """Count what the update of x z^T touched, from the slots pass 1 found (no access to the
    pool, so the timed passes see its cache as the product loop does): entries, diagonal ones,
    ones on dense rows, found ones, and the distance from its home slot of each entry's slot
    (found) or free slot (absent) in a sparse row."""
    e = 0
    for k in range(n_rows):
        i = xr[k]
        dense = rows[i, SHIFT] < 0
        mask = rows[i, CAP] - 1
        for jj in range(nz):
            h = homes[e]
            code = slots[e]
            e += 1
            if h < 0:
                prof[N_DIAG] += 1
                continue
            if dense:  # (every entry of a dense row has its record; pass 1 leaves its prev as is)
                prof[N_DENSE] += 1
                prof[N_FOUND] += 1
                continue
            if code >= 0 and prev[e - 1] >= 0:  # (pass 1 inserted the absent ones: prev < 0)
                prof[N_FOUND] += 1
            if code >= 0:
                prof[N_PROBE_STEPS] += (code - h) & mask


# Timing and counting lines spliced into the product loop's source, each after (or before) a line
# that must occur exactly once in it: (anchor, lines, "before" | "after" | "replace").
SPLICES = [
    ("    tid, n_threads, sync,\n):", "    tid, n_threads, sync, prof, spare,\n):", "replace"),
    ("        a = triplets[t, 0]\n", "        c0 = cycles()\n", "before"),
    ("        lo, hi = indptr[a], indptr[a + 1]\n", "        c1 = cycles()\n        prof[C_MERGE] += c1 - c0\n", "after"),
    ("                    sweep_row(table, rows, i, step, cum_eta, lam, mode, delta)\n",
     "                    cs = cycles()\n", "before"),
    ("                    sweep_row(table, rows, i, step, cum_eta, lam, mode, delta)\n",
     "                    prof[C_SWEEP] += cycles() - cs\n                    prof[N_SWEEPS] += 1\n"
     "                    prof[N_SWEPT_SLOTS] += rows[i, CAP]\n", "after"),
    ("            return t, step, need\n", "            prof[C_ROOM] += cycles() - c1\n", "before"),
    ("        step += 1\n        target = step - 1\n", "        c2 = cycles()\n        prof[C_ROOM] += c2 - c1\n",
     "before"),
    ("        step += 1\n        target = step - 1\n",
     "        for k in range(hi - lo):\n            if plan[k, 0] >= 0:\n                prof[N_MOVES] += 1\n"
     "                prof[N_MOVED_RECORDS] += rows[xr[k], LIVE]\n", "after"),
    ("        # pass 1: margin", "        c3 = cycles()\n        prof[C_HOME] += c3 - c2\n        prof[N_TRIPLETS] += 1\n"
     "        prof[N_ENTRIES] += n_rows * nz\n        prof[N_X] += hi - lo\n        prof[N_Z] += nz\n", "before"),
    # a chunk of rows: their moves (room), home slots, pass 1
    ("            h = 0\n            for p in range(k0, k1):\n                k = order[p] if shared else p\n",
     "            ch = cycles()\n            cmv = 0\n", "before"),
    ("                move_planned(cols, vals, lasts, auxs, rows, i, d, plan, k, has_last, has_aux)\n",
     "                cm = cycles()\n", "before"),
    ("                move_planned(cols, vals, lasts, auxs, rows, i, d, plan, k, has_last, has_aux)\n",
     "                cmv += cycles() - cm\n", "after"),
    ("            m = h\n", "            ch2 = cycles()\n            prof[C_ROOM] += cmv\n            prof[C_HOME] += ch2 - ch - cmv\n",
     "after"),
    # pass 1 runs a second time ({pass1}: the same call), on records now in cache; it changes
    # nothing, since every entry it touches is already current, but what the slots of the entries
    # it inserted held (``prev``), which is kept in ``spare`` meanwhile
    ("            n_own += k1 - k0\n",
     "            ch3 = cycles()\n            prof[C_PASS1] += ch3 - ch2\n"
     "            for q in range(n_own, n_own + k1 - k0):\n"
     "                for e in range(own[q] * nz, own[q] * nz + nz):\n"
     "                    spare[e] = prev[e]\n"
     "            ch3 = cycles()\n{pass1}"
     "            prof[C_PASS1_CACHED] += cycles() - ch3\n"
     "            for q in range(n_own, n_own + k1 - k0):\n"
     "                for e in range(own[q] * nz, own[q] * nz + nz):\n"
     "                    prev[e] = spare[e]\n", "before"),
    ("        loss = 1.0 - y * margin\n", "        c4 = cycles()\n", "after"),
    ("            continue\n        if tid == 0:\n            losses[t] = loss\n",
     "            prof[C_PASS2] += cycles() - c4\n            census(rows, xr, n_rows, nz, homes, slots, prev, prof)\n",
     "before"),
    ("        if tid == 0:\n            losses[t] = loss\n", "        prof[N_UPDATES] += 1\n", "after"),
    ("    return stop, step, 0\n",
     "        prof[C_PASS2] += cycles() - c4\n        census(rows, xr, n_rows, nz, homes, slots, prev, prof)\n", "before"),
]


@functools.lru_cache(maxsize=None)
def profiled_kernel():
    """The product loop :func:`sparsesim.engine.bilinear_loop.train_triplets` with :data:`SPLICES`
    applied, compiled with the product's options; it takes ``prof`` and ``spare`` (a buffer as
    long as ``prev``) last."""
    src = textwrap.dedent(inspect.getsource(bilinear_loop.train_triplets.py_func))
    src = src[src.index("def train_triplets("):]
    pass1 = src[src.index("            pass1_rows("):src.index("            n_own += k1 - k0\n")]
    for anchor, lines, where in SPLICES:
        lines = lines.replace("{pass1}", pass1)
        if src.count(anchor) != 1:
            raise SystemExit(f"profile_engine: the update loop changed; {anchor.strip()!r} is not found once")
        if where == "replace":
            src = src.replace(anchor, lines)
        elif where == "before":
            src = src.replace(anchor, lines + anchor)
        else:
            src = src.replace(anchor, anchor + lines)
    namespace = dict(vars(bilinear_loop))
    namespace.update(cycles=cycles, census=census, CAP=CAP, LIVE=LIVE,
                     **{k: v for k, v in globals().items() if k.startswith(("C_", "N_"))})
    exec(compile(src, "<profiled train_triplets>", "exec"), namespace)
    options = {k: v for k, v in bilinear_loop.train_triplets.targetoptions.items() if k != "cache"}
    return numba.jit(**options)(namespace["train_triplets"])


def tsc_hz() -> float:
    """Cycle-counter ticks per second, measured against the wall clock."""
    read_cycles()
    w0, c0 = time.perf_counter(), read_cycles()
    time.sleep(0.5)
    return (read_cycles() - c0) / (time.perf_counter() - w0)


def profiled_fit(engine, X, triplets, prof) -> float:
    """Run ``triplets`` through the instrumented loop on ``engine``'s store (as
    :meth:`~sparsesim.engine.bilinear.BilinearEngine.partial_fit` does); returns the wall seconds
    spent making room in the pool outside the kernel."""
    if engine.mode not in (OASIS, SORS):
        raise SystemExit("profile_engine: only OASIS and SORS are instrumented")
    n = triplets.shape[0]
    triplets = np.ascontiguousarray(triplets, dtype=np.int64)
    signs = np.ones(n)
    losses = np.zeros(n)
    engine.schedule.ensure(engine.store.step + n)
    room = [0.0]
    spare = triplet_scratch(X)[2]  # (one slot per entry of x z^T, as the engine's ``prev``)
    kernel = engine.kernel(X, triplets, signs, losses, profiled_kernel(), (prof, spare))

    def make_room(extra):
        w0 = time.perf_counter()
        engine._compact(extra)
        room[0] += time.perf_counter() - w0

    run_growing(kernel, 0, n, make_room)
    engine.n_seen += n
    return room[0]


def profile(corpus_name: str, algorithm: str, warm: int, count: int, seed: int, feature_order: str = "frequency") -> dict:
    from sparsesim.registry import make_estimator
    from sparsesim.triplets import sors_triplets
    from sparsesim.validation import check_csr

    data = corpus(corpus_name)
    triplets = sors_triplets(data.y, warm + count, seed=seed)
    params = DEFAULT_PARAMS.get(algorithm, {})
    est = make_estimator(algorithm.split("+")[0], **params, initial_capacity=1 << 20)
    X = data.X
    make_engine = est._make_engine

    def engine_in_order(d):
        engine = make_engine(d)
        engine.feature_order = feature_order
        return engine

    est._make_engine = engine_in_order
    for chunk in np.array_split(triplets[:warm], max(1, warm // 5000)):
        est.partial_fit_triplets(X, chunk)
    engine = est.engine_
    Xc = check_csr(X)
    hz = tsc_hz()
    prof = np.zeros(N_COUNTERS, np.int64)
    profiled_fit(engine, Xc, triplets[warm:warm + 50], prof)  # compile outside the timing
    prof[:] = 0
    w0 = time.perf_counter()
    room = 0.0
    for chunk in np.array_split(triplets[warm + 50:], max(1, (count - 50) // 5000)):
        room += profiled_fit(engine, Xc, chunk, prof)
    wall = time.perf_counter() - w0
    n = int(prof[N_TRIPLETS])
    ns = 1e9 / hz
    phases = {"z merge": prof[C_MERGE], "homes": prof[C_HOME], "pass 1": prof[C_PASS1], "pass 2": prof[C_PASS2],
              "room (kernel)": prof[C_ROOM], "room (pool)": room * hz}
    total = sum(phases.values())
    cached = prof[C_PASS1_CACHED]
    entries = int(prof[N_ENTRIES])
    sparse = entries - int(prof[N_DIAG]) - int(prof[N_DENSE])
    return {
        "corpus": corpus_name, "algorithm": algorithm, "warm": warm, "triplets": n, "tsc_ghz": hz / 1e9,
        "wall_seconds": wall, "updates_per_second": n / wall,
        "phases_us_per_triplet": {k: v * ns / 1e3 / n for k, v in phases.items()},
        "phases_share": {k: v / total for k, v in phases.items()},
        "ns_per_entry": {k: v * ns / max(1, entries) for k, v in phases.items()},
        "pass1_cached_rerun_us_per_triplet": cached * ns / 1e3 / n,
        "pass1_cached_rerun_ns_per_entry": cached * ns / max(1, entries),
        "updated_fraction": int(prof[N_UPDATES]) / n,
        "nnz_x": int(prof[N_X]) / n, "nnz_z": int(prof[N_Z]) / n, "entries_per_triplet": entries / n,
        "share_dense": int(prof[N_DENSE]) / entries, "share_diag": int(prof[N_DIAG]) / entries,
        "slots_past_home_per_sparse_visit": int(prof[N_PROBE_STEPS]) / max(1, sparse),
        "found_share_sparse": (int(prof[N_FOUND]) - int(prof[N_DENSE])) / max(1, sparse),
        "absent_per_triplet": (entries - int(prof[N_DIAG]) - int(prof[N_FOUND])) / n,
        "room_kernel_sweep_share": int(prof[C_SWEEP]) / max(1, int(prof[C_ROOM])),
        "swept_slots_per_triplet": int(prof[N_SWEPT_SLOTS]) / n,
        "moved_records_per_triplet": int(prof[N_MOVED_RECORDS]) / n,
        "sweeps_per_triplet": int(prof[N_SWEEPS]) / n, "moves_per_triplet": int(prof[N_MOVES]) / n,
        "dense_rows": int(np.count_nonzero(engine.store.rows[:, SHIFT] < 0)),
        "pool_used_mb": engine.store.used_slots * engine.store.dtype.itemsize / 2**20,
    }


def print_row(r: dict) -> None:
    print(f"\n{r['corpus']} / {r['algorithm']}: {r['triplets']:,} triplets after {r['warm']:,} warm-up, "
          f"{r['updates_per_second']:.0f} triplets/s (wall), TSC {r['tsc_ghz']:.2f} GHz")
    print(f"  {'phase':<15}{'us/triplet':>12}{'share':>8}{'ns/entry':>10}")
    for k, v in r["phases_us_per_triplet"].items():
        print(f"  {k:<15}{v:>12.1f}{100 * r['phases_share'][k]:>7.1f}%{r['ns_per_entry'][k]:>10.2f}")
    print(f"  (pass 1 again, records in cache: {r['pass1_cached_rerun_us_per_triplet']:.1f} us, "
          f"{r['pass1_cached_rerun_ns_per_entry']:.2f} ns/entry; not in the total)")
    print(f"  entries/triplet {r['entries_per_triplet']:.0f} (nnz x {r['nnz_x']:.1f}, nnz z {r['nnz_z']:.1f}); "
          f"updated {100 * r['updated_fraction']:.1f}% of triplets")
    print(f"  on dense rows {100 * r['share_dense']:.1f}% of entries ({r['dense_rows']} dense rows), "
          f"diagonal {100 * r['share_diag']:.1f}%")
    print(f"  sparse-row visits: slot {r['slots_past_home_per_sparse_visit']:.2f} slots past home on average "
          f"(the free slot, for an absent entry), {100 * r['found_share_sparse']:.1f}% found")
    print(f"  per triplet: {r['absent_per_triplet']:.0f} absent entries (inserts when updated), "
          f"{r['sweeps_per_triplet']:.3f} row sweeps, {r['moves_per_triplet']:.3f} row moves; "
          f"pool used {r['pool_used_mb']:.0f} MB")
    print(f"  room (kernel): {r['swept_slots_per_triplet']:.0f} slots swept and {r['moved_records_per_triplet']:.0f} "
          f"records moved per triplet; sweeps take {100 * r['room_kernel_sweep_share']:.0f}% of it")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", default="synthetic,news20")
    parser.add_argument("--algorithms", default="sors-l1+compact,oasis")
    parser.add_argument("--warm", type=int, default=10_000, help="triplets trained before the measurement")
    parser.add_argument("--triplets", type=int, default=30_000, help="triplets measured")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--feature-order", choices=("frequency", "given"), default="frequency",
                        help="how the store numbers the features (the engine's default: frequency)")
    parser.add_argument("--json", default=str(HERE.parent / "out" / "profile_engine.json"))
    args = parser.parse_args(argv)
    rows = []
    for name in args.corpora.split(","):
        for algorithm in args.algorithms.split(","):
            row = profile(name, algorithm, args.warm, args.triplets, args.seed, args.feature_order)
            row["feature_order"] = args.feature_order
            print_row(row)
            rows.append(row)
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"command": " ".join(sys.argv), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
