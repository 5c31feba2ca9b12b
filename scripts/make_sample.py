"""Build the embedded 20 Newsgroups sample ``sparsesim/data/samples/news20_sample.npz``.

Reproducible (fixed seed): from ``20news-bydate.tar.xz`` (read without extracting) take
``--per-group`` documents (default 40) drawn at random from each of 10 clearly distinct
newsgroups (train and test splits pooled), drop each post's header block except its Subject
line, build TF-IDF with scikit-learn (English stop words, min_df=2, at most 5,000 terms,
smooth idf, rows L2-normalised) and store CSR arrays, labels, group names, Subject lines,
document ids (``group/file``), original split and vocabulary as fixed-width numeric / unicode
arrays with ``np.savez_compressed`` (loadable with ``allow_pickle=False``).

Usage::

    python scripts/make_sample.py [--source ../shared/data/news20/20news-bydate.tar.xz] [--out PATH]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from sparsesim.data.readers import iter_text_corpus, tfidf
from sparsesim.persistence import atomic_write

GROUPS = (
    "comp.graphics",
    "misc.forsale",
    "rec.autos",
    "rec.sport.hockey",
    "sci.crypt",
    "sci.med",
    "sci.space",
    "soc.religion.christian",
    "talk.politics.guns",
    "talk.politics.mideast",
)
SEED = 0


def split_post(text: str) -> tuple[str, str]:
    """(subject, body) of a bydate post: the header block ends at the first blank line."""
    head, _, body = text.partition("\n\n")
    subject = ""
    for line in head.splitlines():
        if line.lower().startswith("subject:"):
            subject = line.split(":", 1)[1].strip()
            break
    return subject, body


def build(source: Path, per_group: int = 40, seed: int = SEED) -> dict:
    docs = {g: [] for g in GROUPS}
    for split, group, name, data in iter_text_corpus(source):
        if group in docs:
            docs[group].append((split, name, data.decode("latin-1")))
    rng = np.random.default_rng(seed)
    rows = []
    for label, group in enumerate(GROUPS):
        items = sorted(docs[group], key=lambda d: int(d[1]))
        if len(items) < per_group:
            raise SystemExit(f"{group}: only {len(items)} documents")
        pick = np.sort(rng.choice(len(items), size=per_group, replace=False))
        for i in pick:
            split, name, text = items[i]
            subject, body = split_post(text)
            rows.append((label, f"{group}/{name}", split, subject, subject + "\n" + body))
    X, vocab = tfidf([r[4] for r in rows], stop_words="english", min_df=2, max_features=5000)
    return {
        "data": X.data.astype(np.float64),
        "indices": X.indices.astype(np.int32),
        "indptr": X.indptr.astype(np.int64),
        "shape": np.array(X.shape, dtype=np.int64),
        "labels": np.array([r[0] for r in rows], dtype=np.int64),
        "group_names": np.array(GROUPS),
        "ids": np.array([r[1] for r in rows]),
        "split": np.array([r[2] for r in rows]),
        "titles": np.array([r[3] for r in rows]),
        "vocabulary": np.asarray(vocab, dtype=str),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data" / "news20" / "20news-bydate.tar.xz")
    parser.add_argument("--out", type=Path, default=ROOT / "sparsesim" / "data" / "samples" / "news20_sample.npz")
    parser.add_argument("--per-group", type=int, default=40)
    args = parser.parse_args(argv)
    arrays = build(args.source, args.per_group)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out, lambda fh: np.savez_compressed(fh, **arrays))
    shape = tuple(arrays["shape"])
    print(f"wrote {args.out}: {shape[0]} documents x {shape[1]} terms, nnz={arrays['data'].size}, "
          f"{len(GROUPS)} groups, {args.out.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
