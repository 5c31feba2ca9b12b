"""End-to-end library functions behind the CLI: train, evaluate, query, demo.

Each is usable from Python directly and returns plain data (dicts/lists) that the CLI prints.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .data import LabelledData, load_dataset
from .evaluation import evaluate_retrieval
from .exceptions import InvalidInputError
from .models import BilinearSimilarity
from .registry import get_algorithm
from .triplets import stratified_split


def _looks_like_path(name: str) -> bool:
    return os.sep in name or "/" in name or Path(name).suffix != "" or Path(name).exists()


def load_corpus(name_or_path: str, n_features: int | None = None) -> LabelledData:
    """A registered data set, or an svmlight file padded to ``n_features`` columns."""
    if n_features is not None and _looks_like_path(str(name_or_path)):
        return load_dataset(name_or_path, n_features=n_features)
    return load_dataset(name_or_path)


def train_model(algorithm: str, dataset: str, out: str | os.PathLike, n_triplets: int = 100_000,
                seed: int = 0, params: dict | None = None, train_fraction: float = 0.7,
                progress=None) -> dict:
    """Train ``algorithm`` on the per-class ``train_fraction`` split of ``dataset``; save to ``out``.

    Returns
    -------
    dict
        Summary: algorithm, dataset, n_train, n_triplets, n_updates, train_seconds,
        updates_per_second, nnz, sparsity, model path.
    """
    spec = get_algorithm(algorithm)
    if spec.kind not in ("similarity", "baseline"):
        raise InvalidInputError(f"`train` learns single-task similarities; {algorithm!r} is a {spec.kind} "
                                "algorithm (use `sparsesim experiment`)")
    if n_triplets <= 0:
        raise InvalidInputError(f"--triplets must be positive, got {n_triplets}")
    out = Path(out)
    if not out.parent.is_dir():
        raise InvalidInputError(f"cannot write {out}: directory {out.parent} does not exist")
    data = load_dataset(dataset)
    train, test = stratified_split(data.y, train_fraction, seed=seed)
    kwargs = dict(params or {})
    if spec.kind == "similarity":
        kwargs.setdefault("n_triplets", n_triplets)
        kwargs.setdefault("random_state", seed)
    est = spec.make(**kwargs)
    est.fit(data.X[train], data.y[train], progress=progress)
    model = est.model_
    model.metadata.update(dataset=str(dataset), split_seed=int(seed), train_fraction=float(train_fraction),
                          n_train=int(train.size))
    model.save(out)
    seen = int(getattr(est, "n_triplets_seen_", 0))
    seconds = float(getattr(est, "train_seconds_", 0.0))
    return {
        "algorithm": algorithm, "dataset": str(dataset), "model": str(out), "n_train": int(train.size),
        "n_triplets": seen, "n_updates": int(getattr(est, "n_updates_", 0)), "train_seconds": seconds,
        "updates_per_second": seen / seconds if seen and seconds > 0 else None,
        "nnz": model.nnz(), "sparsity": model.sparsity(),
    }


def evaluate_model(model_path: str | os.PathLike, dataset: str, k: int = 10, split: str = "auto") -> dict:
    """MAP, AP@k and mAP@k of a saved model: every document of the split queries all others.

    ``split="auto"`` uses the held-out test split when the model was trained on ``dataset``
    (same seed and fraction as in training), else all documents.
    """
    if split not in ("auto", "test", "all"):
        raise InvalidInputError(f"--split must be auto, test or all, got {split!r}")
    model = BilinearSimilarity.load(model_path)
    data = load_corpus(dataset, n_features=model.n_features)
    meta = model.metadata
    trained_here = meta.get("dataset") == str(dataset) and "split_seed" in meta
    if split == "test" and not trained_here:
        raise InvalidInputError(f"the model was not trained on {dataset!r}; its test split is unknown (use --split all)")
    use_test = split == "test" or (split == "auto" and trained_here)
    if use_test:
        _, rows = stratified_split(data.y, float(meta["train_fraction"]), seed=int(meta["split_seed"]))
        data = data.subset(rows)
    if not 1 <= k < data.n_documents:
        raise InvalidInputError(f"k={k} must be between 1 and the number of other documents ({data.n_documents - 1})")
    scores = evaluate_retrieval(model.scorer(data.X), data.y, k=k)
    return {"model": str(model_path), "dataset": str(dataset), "split": "test" if use_test else "all",
            "n_queries": int(scores["n_queries"]), "map": scores["map"], f"ap@{k}": scores[f"ap@{k}"],
            f"map@{k}": scores[f"map@{k}"], "sparsity": model.sparsity(), "nnz": model.nnz(),
            "algorithm": meta.get("algorithm")}


def select_top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise indices and values of the k largest scores, best first (ties: lower index first)."""
    n = scores.shape[1]
    if k >= n:
        part = np.broadcast_to(np.arange(n), scores.shape)
    else:
        part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    vals = np.take_along_axis(scores, part, axis=1)
    order = np.lexsort((part, -vals), axis=1)
    idx = np.take_along_axis(part, order, axis=1)
    return idx, np.take_along_axis(scores, idx, axis=1)


def query_corpus(model_path, corpus: str, queries_path=None, query_ids: str | None = None,
                 top_k: int = 10, block_size: int = 1024) -> list[dict]:
    """Exact top-k corpus documents for each query (svmlight file rows or corpus row ids).

    A corpus document used as a query is left out of its own results.
    """
    k = top_k
    model = BilinearSimilarity.load(model_path)
    data = load_corpus(corpus, n_features=model.n_features)
    if (queries_path is None) == (query_ids is None):
        raise InvalidInputError("give exactly one of --queries FILE or --query-ids ID,ID,...")
    if queries_path is not None:
        qdata = load_corpus(str(queries_path), n_features=model.n_features)
        Q, qnames, self_rows = qdata.X, [qdata.doc_id(i) for i in range(qdata.n_documents)], None
    else:
        try:
            rows = np.array([int(s) for s in str(query_ids).split(",") if s.strip()], dtype=np.int64)
        except ValueError:
            raise InvalidInputError(f"--query-ids expects comma-separated row numbers, got {query_ids!r}") from None
        if rows.size == 0 or rows.min() < 0 or rows.max() >= data.n_documents:
            raise InvalidInputError(f"query ids must be row numbers in [0, {data.n_documents})")
        Q, qnames, self_rows = data.X[rows], [data.doc_id(r) for r in rows], rows
    available = data.n_documents - (1 if self_rows is not None else 0)
    if not 1 <= k <= available:
        raise InvalidInputError(f"--top-k {k} must be between 1 and the corpus size ({available})")
    answers = []
    for lo in range(0, Q.shape[0], block_size):
        scores = model.score_matrix(Q[lo:lo + block_size], data.X)
        if self_rows is not None:
            scores[np.arange(scores.shape[0]), self_rows[lo:lo + block_size]] = -np.inf
        idx, vals = select_top_k(scores, k)
        for r in range(idx.shape[0]):
            answers.append(_answer(qnames[lo + r], idx[r], vals[r], data))
    return answers


def _answer(query_id, rows, scores, data: LabelledData) -> dict:
    ids = [data.doc_id(int(j)) for j in rows]
    labels = {}
    if data.class_names:
        labels = {doc: data.class_names.get(data.y[int(j)].item(), "") for doc, j in zip(ids, rows)}
    return {"query": query_id, "results": [(doc, float(s)) for doc, s in zip(ids, scores)], "labels": labels}


def build_index_from_files(model_path, corpus: str, kind: str = "exact", out=None, params: dict | None = None) -> dict:
    """Build a retrieval index (see :mod:`sparsesim.indexes`) over ``corpus`` and save it to ``out``."""
    import time

    from .indexes import build_index

    model = BilinearSimilarity.load(model_path)
    data = load_corpus(corpus, n_features=model.n_features)
    ids = None if data.ids is None else data.ids
    start = time.perf_counter()
    index = build_index(model, data.X, kind=kind, ids=ids, **(params or {}))
    seconds = time.perf_counter() - start
    index.save(out)
    return {"index": str(out), "kind": kind, "n_documents": int(data.n_documents), "build_seconds": seconds}


def add_to_index(index_dir, corpus: str, refit: bool = False) -> dict:
    """Append the documents of ``corpus`` (their ids when the file has them) to a saved index.

    The index directory is rewritten atomically; an ANN index re-learns its projection and FAISS
    structure when ``refit`` is set or its ``refit_growth`` is reached (see ``AnnIndex.add``).
    """
    import time

    from .indexes import load_index

    index = load_index(index_dir)
    data = load_corpus(corpus, n_features=index.n_features)
    start = time.perf_counter()
    before = index.n_documents
    index.add(data.X, ids=data.ids)
    if refit and hasattr(index, "refit") and index.n_fit_documents_ < index.n_documents:
        index.refit()
    seconds = time.perf_counter() - start
    index.save(index_dir, overwrite=True)
    out = {"index": str(index_dir), "kind": index.kind, "added": int(index.n_documents - before),
           "n_documents": int(index.n_documents), "seconds": seconds}
    if hasattr(index, "n_fit_documents_"):
        out["n_fit_documents"] = int(index.n_fit_documents_)
    return out


def query_index(index_dir, queries_path, top_k: int = 10, model_path=None) -> list[dict]:
    """Top-k from a saved retrieval index (see :mod:`sparsesim.indexes`)."""
    from .indexes import load_index  # noqa: WPS433 (optional heavy import)

    model = BilinearSimilarity.load(model_path) if model_path is not None else None
    index = load_index(index_dir, model=model)
    qdata = load_corpus(str(queries_path), n_features=index.n_features)
    ids, scores = index.query(qdata.X, top_k)
    return [{"query": qdata.doc_id(r), "results": [(i.item() if hasattr(i, "item") else i, float(s))
                                                   for i, s in zip(ids[r], scores[r])]}
            for r in range(qdata.n_documents)]


def run_demo(n_triplets: int = 3000, seed: int = 0, top_k: int = 5) -> dict:
    """Train OASIS on the embedded 20 Newsgroups sample and compare it with the dot product."""
    from .learners.baselines import DotProduct
    from .learners.bilinear import OASIS

    data = load_dataset("news20-sample")
    train, test = stratified_split(data.y, 0.7, seed=seed)
    oasis = OASIS(n_triplets=n_triplets, random_state=seed).fit(data.X[train], data.y[train])
    models = {"oasis": oasis.model_, "dot": DotProduct().fit(data.X[train]).model_}
    Xt = data.X[test]
    report = {
        "n_documents": data.n_documents, "n_features": data.n_features,
        "n_classes": len(np.unique(data.y)), "n_train": int(train.size), "n_test": int(test.size),
        "n_triplets": int(oasis.n_triplets_seen_), "train_seconds": float(oasis.train_seconds_),
        "scores": {name: {key: float(v) for key, v in evaluate_retrieval(m.scorer(Xt), data.y[test]).items()
                          if key in ("map", "ap@10", "map@10")} for name, m in models.items()},
    }
    q = int(test[0])
    titles = data.info.get("titles")

    def describe(row):
        return {"id": data.doc_id(row), "group": data.class_names[int(data.y[row])],
                "title": str(titles[row]) if titles is not None else ""}

    report["query"] = describe(q)
    report["neighbours"] = {}
    for name, m in models.items():
        scores = m.score_matrix(data.X[[q]], Xt)
        scores[0, 0] = -np.inf  # the query itself (test[0])
        idx, vals = select_top_k(scores, top_k)
        report["neighbours"][name] = [dict(describe(int(test[j])), score=float(v)) for j, v in zip(idx[0], vals[0])]
    return report
