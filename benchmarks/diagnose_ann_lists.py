"""Where the ann index's candidate stage loses the true neighbours, as the corpus grows.

For a sample of held-out queries over nested prefixes of one stored corpus (10^5, 10^6, 10^7
documents of the same synthetic recipe), this computes -- without building the index -- exactly
the posting lists those queries read (the top-L documents by Y[x, i], Y = X M^T, for every
feature i of the queries), the exact top-10, and then runs the index's own candidate stage
(:func:`sparsesim.indexes.small_batch.sparse_candidates`, the numpy twin of the compiled kernel)
over those lists, with float32 scores and with the one-byte codes of
:class:`~sparsesim.indexes.ann_postings.CompactPostings`. A query reads only the lists of its own
features, so its candidates are those of the full index with the same lists.

It reports, per prefix and list length L: the share of the exact top-10 that is in any list the
query reads, the share in the read prefixes (weighted read allocation), and the share in the
pool (what the exact re-ranking can return), for each setting given. Memory: one block of the
corpus, its Y on the queries' features (sparse), the heaps (features x max L).

    python benchmarks/diagnose_ann_lists.py --corpus DIR --model MODEL.npz --n-total 10000000 \
        --prefixes 100000,1000000,10000000 --lengths 14,142,1420,14286 --queries 50 \
        --out benchmarks/out/diagnose_ann_lists_1e7.json
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import numpy as np
import scipy.sparse as sp

from sparsesim.memory import peak_resident_bytes


def log(msg: str) -> None:
    print(f"[diagnose] {time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


class TopLists:
    """Per-feature top-``L`` (value, document) of positive values, fed column blocks."""

    def __init__(self, n_feat: int, L: int):
        self.L = L
        self.vals = [np.zeros(0, np.float32) for _ in range(n_feat)]
        self.docs = [np.zeros(0, np.int64) for _ in range(n_feat)]
        self.threshold = np.zeros(n_feat)  # the L-th value once a list is full (0 before)

    def feed(self, Yc: sp.csc_matrix, doc0: int) -> None:
        for j in range(Yc.shape[1]):
            lo, hi = Yc.indptr[j], Yc.indptr[j + 1]
            v = Yc.data[lo:hi]
            keep = v > self.threshold[j]
            if not keep.any():
                continue
            v = np.concatenate([self.vals[j], v[keep].astype(np.float32)])
            d = np.concatenate([self.docs[j], Yc.indices[lo:hi][keep].astype(np.int64) + doc0])
            if v.size > self.L:
                # largest first, ties by the lower document (as a stable heap keeps the earlier one)
                order = np.lexsort((d, -v))[:self.L]
                v, d = v[order], d[order]
                self.threshold[j] = float(v[-1])
            self.vals[j], self.docs[j] = v, d

    def snapshot(self, L: int, features: np.ndarray, n_features: int, n_docs: int) -> sp.csr_matrix:
        """Impact-ordered CSR postings (n_features x n_docs): the first ``L`` of each list."""
        indptr = np.zeros(n_features + 1, np.int64)
        vals, docs = [], []
        counts = np.zeros(n_features, np.int64)
        for j, f in enumerate(features):
            order = np.lexsort((self.docs[j], -self.vals[j]))[:L]
            vals.append(self.vals[j][order])
            docs.append(self.docs[j][order])
            counts[f] = order.size
        np.cumsum(counts, out=indptr[1:])
        order_f = np.argsort(features)
        data = np.concatenate([vals[j] for j in order_f]) if vals else np.zeros(0, np.float32)
        indices = np.concatenate([docs[j] for j in order_f]) if docs else np.zeros(0, np.int64)
        P = sp.csr_matrix((n_features, n_docs), dtype=np.float32)
        P.indptr, P.indices, P.data = indptr, indices.astype(np.int32), data.astype(np.float32)
        return P


def main(argv=None) -> dict:
    from sparsesim.data.corpus_files import CorpusFiles
    from sparsesim.indexes import small_batch
    from sparsesim.indexes.ann_postings import CompactPostings
    from sparsesim.indexes.inputs import prepare_rows
    from sparsesim.models import BilinearSimilarity

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--n-total", type=int, required=True, help="documents indexed; queries follow them")
    ap.add_argument("--prefixes", default="100000,1000000,10000000")
    ap.add_argument("--lengths", default="14,142,1420,14286")
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--reads", default="48,64,384,1024")
    ap.add_argument("--pools", default="150,1000,10000")
    ap.add_argument("--block", type=int, default=20_000)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    prefixes = sorted(int(p) for p in args.prefixes.split(","))
    lengths = sorted(int(x) for x in args.lengths.split(","))
    reads = [int(x) for x in args.reads.split(",")]
    pools = [int(x) for x in args.pools.split(",")]
    corpus = CorpusFiles(args.corpus)
    model = BilinearSimilarity.load(args.model)
    d, N, k = corpus.n_features, args.n_total, 10
    if prefixes[-1] > N or N + args.queries > corpus.n_documents:
        raise SystemExit("prefixes must end at --n-total and the queries must follow it in the corpus")
    if any(p % args.block for p in prefixes):
        raise SystemExit("every prefix must be a multiple of --block")
    Q = prepare_rows(model, corpus.rows(N, N + args.queries), "queries")
    feats = np.unique(Q.indices)
    # Y[:, feats] = X M^T[:, feats] = X (M[feats, :])^T
    MS = model.W[feats].T.tocsr()
    if model.identity:
        MS = (MS + sp.csr_matrix((np.ones(feats.size), (feats, np.arange(feats.size))), shape=(d, feats.size))).tocsr()
    QM = np.asarray((Q @ model.W).todense()) + (Q.toarray() if model.identity else 0)  # q x d, dense (q small)
    lists = TopLists(feats.size, lengths[-1])
    best = np.full((Q.shape[0], 0), -np.inf), np.zeros((Q.shape[0], 0), np.int64)
    top_s, top_r = best
    out = {"argv": sys.argv[1:] if argv is None else list(argv), "queries": int(Q.shape[0]),
           "query_features": int(feats.size), "prefixes": {}}
    t0 = time.perf_counter()
    done = 0
    for p in prefixes:
        while done < p:
            hi = min(done + args.block, p)
            Xb = prepare_rows(model, corpus.rows(done, hi), "corpus")
            lists.feed((Xb @ MS).tocsc(), done)
            s = Xb @ QM.T  # block x q exact scores
            s_all = np.hstack([top_s, s.T])
            r_all = np.hstack([top_r, np.broadcast_to(np.arange(done, hi), (Q.shape[0], hi - done))])
            idx = np.argsort(-s_all, axis=1, kind="stable")[:, :k]
            top_s = np.take_along_axis(s_all, idx, 1)
            top_r = np.take_along_axis(r_all, idx, 1)
            done = hi
            if done % (50 * args.block) == 0:
                log(f"{done:,} documents, {time.perf_counter() - t0:.0f}s, peak {peak_resident_bytes() / 2**30:.2f} GiB")
        log(f"prefix {p:,}: evaluating")
        rec = {"truth_10th_score_mean": float(top_s[:, -1].mean()), "lengths": {}}
        truth = top_r
        for L in lengths:
            P = lists.snapshot(L, feats, d, p)
            C = CompactPostings.from_csr(P, p)
            # is each true neighbour in any list the query reads (whole lists)?
            in_lists = []
            for r in range(Q.shape[0]):
                terms = Q.indices[Q.indptr[r]:Q.indptr[r + 1]]
                docs = np.concatenate([P.indices[P.indptr[t]:P.indptr[t + 1]] for t in terms])
                in_lists.append(np.isin(truth[r], docs).mean())
            row = {"share_of_corpus": L / p, "truth_in_lists": float(np.mean(in_lists)), "settings": []}
            for n_read in reads:
                for pool in pools:
                    entry = {"n_postings": n_read, "sparse_pool": pool}
                    for name, postings in (("float32", P), ("one_byte", C)):
                        cands = small_batch.sparse_candidates(Q, postings, p, n_read, pool, weighted=True)
                        entry[f"pool_recall_{name}"] = float(np.mean([np.isin(truth[r], cands[r]).mean()
                                                                      for r in range(Q.shape[0])]))
                    row["settings"].append(entry)
            rec["lengths"][str(L)] = row
            log(f"prefix {p:,} L={L}: in lists {row['truth_in_lists']:.3f}; "
                + ", ".join(f"{e['n_postings']}/{e['sparse_pool']}: {e['pool_recall_float32']:.3f}"
                            f" ({e['pool_recall_one_byte']:.3f})" for e in row["settings"]))
        out["prefixes"][str(p)] = rec
        out["seconds"] = time.perf_counter() - t0
        out["peak_gib"] = peak_resident_bytes() / 2**30
        pathlib.Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
