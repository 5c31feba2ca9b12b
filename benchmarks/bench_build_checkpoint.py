"""Benchmark: seconds and bytes of one checkpoint of the resumable block-wise ann build.

A checkpoint of ``build_ann_blockwise(..., resume=True)`` writes the per-feature heaps of the
expanded postings (``8 x d x L`` bytes, float32 values and int32 documents, atomically and with a
sha256 of their contents) and ``checkpoint.json``; this times :meth:`BuildCheckpoint.block` on
heaps of the given size (default: the 10^7 synthetic build's, d = 47,236 and L = 1,420, the cap
of the default ``postings_memory`` of 512 MiB), then the load a resumed build does.

Usage::

    nice -n 10 python benchmarks/bench_build_checkpoint.py --dir /tmp --repeats 3

Disk speed and the machine's load set the times; the output prints ``os.getloadavg()``.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import tempfile
import time

import numpy as np


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--features", type=int, default=47_236)
    parser.add_argument("--length", type=int, default=1_420, help="documents per feature list (L)")
    parser.add_argument("--documents", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where to write (the index's file system)")
    args = parser.parse_args(argv)

    from sparsesim.indexes.ann_checkpoint import BuildCheckpoint
    from sparsesim.persistence.npy_stream import NpyAppender

    d, L, n = args.features, args.length, args.documents
    rng = np.random.default_rng(0)
    heaps = (rng.random((d, L), dtype=np.float32), rng.integers(-1, n // 2, (d, L), dtype=np.int32))
    fingerprint = {"n_documents": n, "plan": {"block_rows": n // 2}}
    out = {"bytes": heaps[0].nbytes + heaps[1].nbytes, "checkpoint_seconds": []}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp, \
            BuildCheckpoint(pathlib.Path(tmp) / "index.partial", fingerprint) as checkpoint:
        checkpoint.reset()
        NpyAppender(checkpoint.path / "heavy.Z.npy", np.float64, (0,)).close()  # Z of no heavy rows
        checkpoint.prepared(0, np.zeros(d, np.int64), [], {})
        for _ in range(args.repeats):
            t = time.perf_counter()
            checkpoint.block(n // 2, 0, heaps, {})
            out["checkpoint_seconds"].append(round(time.perf_counter() - t, 2))
        t = time.perf_counter()
        state, reason = checkpoint.load(d, L, True)
        out["load_seconds"] = round(time.perf_counter() - t, 2)
        assert reason is None and np.array_equal(state["heaps"][1], heaps[1]), reason
    out["loadavg"] = os.getloadavg()
    print(out)
    return out


if __name__ == "__main__":
    main()
