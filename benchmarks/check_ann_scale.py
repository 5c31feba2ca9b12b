"""Checks that the block-wise ann build stays correct at scale, on corpora built to stress one thing each.

``ids``: 10^7 documents of 3 features (d = 2,000): the block-wise build in 2^20-document blocks,
stopped after ``--stop-after`` documents of its second pass and resumed, with ``--heavy`` heavy rows
(Z) and 24-bit ids; its answers against the in-memory exact index (64 reads / pool 100, and whole
lists). Compare with ``--mode memory`` (the in-memory ann index, same answers expected).

``bytes``: 2*10^6 documents of 300 features: the stored corpus arrays pass 2^32 bytes (4.8 GB of
values, 2.4 GB of feature ids); the memory-mapped index's returned scores against exact scores
recomputed row by row from the original files, and against the block-wise exact top-10.

Memory by design: ``ids`` holds the corpus (0.4 GB) and the index in memory; ``bytes`` never holds the
corpus (one block of 262,144 rows, ~1 GB). Usage::

    python benchmarks/check_ann_scale.py ids --dir /tmp/scale --stop-after 6000000
    python benchmarks/check_ann_scale.py ids --dir /tmp/scale --mode memory
    python benchmarks/check_ann_scale.py bytes --dir /tmp/bytes

Measured (AMD EPYC, 2 cores): ``ids`` recall 0.403 at 64 reads / pool 100 and 1.000 reading whole
lists, in memory and block-wise with resume alike; ``bytes``: returned and block-wise exact scores
equal recomputed ones within 8.9e-16, found rows spread over the corpus like the exact ones (49.8% /
48.3% in its second half); recall 0.046 / 0.510 there (dense rows of 300 of 2,000 features put true
neighbours far down every list: a property of such data, not of the file sizes).
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import time

import numpy as np
import scipy.sparse as sp

from sparsesim.data.corpus_files import CorpusFiles, CorpusWriter, write_corpus
from sparsesim.indexes import load_index
from sparsesim.indexes.ann import AnnIndex
from sparsesim.indexes.ann_blockwise import build_ann_blockwise, exact_top_k_blocks
from sparsesim.indexes.calibration import recall_counting_ties
from sparsesim.indexes.exact import ExactIndex
from sparsesim.models import BilinearSimilarity


def check_ids(args) -> None:
    n, d, per = 10_000_000, 2000, 3
    rng = np.random.default_rng(0)
    feats = np.sort(rng.integers(0, d, size=(n, per)), axis=1)
    X = sp.csr_matrix((rng.gamma(2.0, 1.0, size=n * per), feats.ravel().astype(np.int32),
                       np.arange(0, n * per + 1, per, dtype=np.int64)), shape=(n, d))
    X.sum_duplicates()
    X = sp.csr_matrix(sp.diags(1 / np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())) @ X)
    W = (sp.identity(d, format="csr") + sp.random(d, d, density=0.01, random_state=1, format="csr") * 0.1).tocsr()
    model = BilinearSimilarity(W)
    Q = X[rng.choice(n, 200, replace=False)]
    truth = ExactIndex(model).fit(X).query_rows(Q, 10)
    params = dict(target_recall=None, heavy_min_nnz=1, rerank_memory=8 * n * args.heavy)
    t = time.perf_counter()
    if args.mode == "memory":
        index = AnnIndex(model, n_jobs=2, **params).fit(X)
    else:
        base = pathlib.Path(args.dir)
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
        corpus = write_corpus(base / "c", X, block=1_000_000)

        class Stop(Exception):
            pass

        def stop(stage, done, total):
            if args.stop_after and stage == "heavy_values_and_postings" and done >= args.stop_after:
                raise Stop

        try:
            index = build_ann_blockwise(model, corpus, base / "i", memory="4GiB", n_jobs=2, resume=True,
                                        progress=stop, **params)
        except Stop:
            index = build_ann_blockwise(model, corpus, base / "i", memory="4GiB", n_jobs=2, resume=True, **params)
            print("resumed", index.resume_)
    print(f"built in {time.perf_counter() - t:.0f}s, L {index.postings_length_}, heavy rows {index.heavy_rows_.size}")
    for reads, pool in ((64, 100), (index.postings_length_, 1000)):
        found = index.query_rows(Q, 10, n_postings=reads, sparse_pool=pool)
        print(f"reads {reads} pool {pool}: recall {recall_counting_ties(found[1], truth[1]).mean():.3f}")


def check_bytes(args) -> None:
    n, d, per = 2_000_000, 2000, 300
    rng = np.random.default_rng(0)
    base = pathlib.Path(args.dir)
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    writer = CorpusWriter(base / "c", d)
    for lo in range(0, n, 20_000):
        m = min(20_000, n - lo)
        feats = np.sort(np.argsort(rng.random((m, d)), axis=1)[:, :per], axis=1).astype(np.int32)
        vals = rng.gamma(2.0, 1.0, size=(m, per))
        vals /= np.sqrt((vals ** 2).sum(axis=1, keepdims=True))
        writer.append(sp.csr_matrix((vals.ravel(), feats.ravel(), np.arange(0, m * per + 1, per, dtype=np.int64)),
                                    shape=(m, d)))
    corpus = writer.close()
    W = sp.identity(d, format="csr") + sp.random(d, d, density=0.0002, random_state=1, format="csr") * 0.1
    model = BilinearSimilarity(W)
    build_ann_blockwise(model, corpus, base / "i", memory="6GiB", n_jobs=2, target_recall=None)
    corpus = CorpusFiles(base / "c")
    index = load_index(base / "i", mmap=True)
    rows = np.sort(np.concatenate([rng.choice(n // 2, 50, replace=False), n // 2 + rng.choice(n // 2, 50, replace=False)]))
    Qp = index.stored_queries(rows)
    truth = exact_top_k_blocks(index.model, corpus, Qp, 10, 262_144, 2)

    def direct(q, r):
        return float(np.asarray(index.model.score_matrix(Qp[q], corpus.rows(int(r), int(r) + 1))).ravel()[0])

    for reads, pool in ((64, 100), (index.postings_length_, 2000)):
        found = index.query_rows(Qp, 10, n_postings=reads, sparse_pool=pool)
        diff = max(abs(found[1][q, j] - direct(q, found[0][q, j])) for q in range(0, 100, 7) for j in (0, 9))
        print(f"reads {reads} pool {pool}: recall {recall_counting_ties(found[1], truth[1]).mean():.3f}; "
              f"max |returned - recomputed score| {diff:.1e}; found / exact rows in the second half "
              f"{np.mean(found[0] >= n // 2):.3f} / {np.mean(truth[0] >= n // 2):.3f}")
    diff = max(abs(truth[1][q, j] - direct(q, truth[0][q, j])) for q in range(0, 100, 7) for j in (0, 9))
    print(f"block-wise exact scores vs recomputed: {diff:.1e}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("check", choices=("ids", "bytes"))
    parser.add_argument("--dir", required=True, help="work directory (replaced)")
    parser.add_argument("--mode", choices=("blockwise", "memory"), default="blockwise")
    parser.add_argument("--stop-after", type=int, default=0, help="ids: documents of the second pass before a stop")
    parser.add_argument("--heavy", type=int, default=20, help="ids: heavy rows of Z")
    args = parser.parse_args(argv)
    (check_ids if args.check == "ids" else check_bytes)(args)


if __name__ == "__main__":
    main()
