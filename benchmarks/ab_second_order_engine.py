"""A/B of the sparse second-order kernel: an older ``engine/second_order.py`` against the current one.

Both versions run interleaved in one process (min CPU time over repeats, so a loaded machine
hurts both alike) on the same news20 SORS triplets and the same query draws; the script also
prints each run's update count and sum of margins, which must agree between the versions.

Usage::

    git show df9f647~1:sparsesim/engine/second_order.py > /tmp/second_order_old.py
    SPARSESIM_DATA=/path/to/data python benchmarks/ab_second_order_engine.py /tmp/second_order_old.py 800
"""

import importlib.util
import sys
import time
from pathlib import Path

import numpy as np


import sparsesim.engine.second_order as new
from sparsesim.data import load_dataset
from sparsesim.triplets import sors_triplets, stratified_split

REPS = 6


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    spec = importlib.util.spec_from_file_location("sparsesim.engine.second_order_old", argv[0])
    old = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = old
    spec.loader.exec_module(old)
    data = load_dataset("news20")
    tr, _ = stratified_split(data.y, 0.7, seed=0)
    X, y = data.X[tr], data.y[tr]
    T = sors_triplets(y, int(argv[1]) if len(argv) > 1 else 800, seed=0)
    u = np.random.default_rng(0).random(T.shape[0])
    cfgs = [("pa", "active", dict(C=1.0, delta=1.0)), ("cw", "all", dict(eta=1.0, gamma=1.0)),
            ("cw", "active", dict(eta=1.0, gamma=1.0, delta=1.0)), ("arow", "all", dict(r=1.0))]
    for mod in (old, new):  # compile / load the kernels
        for rule, pol, kw in cfgs:
            mod.SparseSecondOrderEngine(X.shape[1], rule=rule, policy=pol, **kw).partial_fit(X, T[:5], None, u[:5])
    res = {}
    for rep in range(REPS):
        for rule, pol, kw in cfgs:
            order = (("old", old), ("new", new)) if rep % 2 == 0 else (("new", new), ("old", old))
            for name, mod in order:
                e = mod.SparseSecondOrderEngine(X.shape[1], rule=rule, policy=pol, **kw)
                t0 = time.process_time()
                m, _, _, _ = e.partial_fit(X, T, None, u)
                res.setdefault((rule, pol, name), []).append((time.process_time() - t0, e.n_updates, float(np.sum(m))))
                del e
    for (rule, pol, name), v in sorted(res.items()):
        ts = [x[0] for x in v]
        print(f"{rule:5} {pol:7} {name}: cpu s {min(ts):.2f} (min of {len(ts)}; all {', '.join(f'{t:.2f}' for t in ts)}), "
              f"updates {v[0][1]}, sum margins {v[0][2]:.6g}")


if __name__ == "__main__":
    main()
