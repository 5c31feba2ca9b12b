import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.metrics import average_precision_score

from sparsesim.evaluation import cosine_scorer, dot_scorer, evaluate_retrieval
from sparsesim.exceptions import InvalidInputError
from sparsesim.metrics import (
    average_precision,
    average_precision_at_k,
    paper_map_at_k,
    mean_average_precision,
    precision_at_k,
    rank_by_score,
    sparsity,
)


def _ref_ap_at_k(rel, k):
    hits, total = 0, 0.0
    for i in range(k):
        if rel[i]:
            hits += 1
            total += hits / (i + 1)
    return total / hits if hits else 0.0


def test_average_precision_matches_sklearn_on_random_cases():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = rng.integers(5, 200)
        scores = rng.normal(size=n)  # continuous: no ties
        rel = rng.random(n) < rng.uniform(0.05, 0.6)
        rel[rng.integers(n)] = True
        order = rank_by_score(scores)
        ours = average_precision(rel[order])
        assert ours == pytest.approx(average_precision_score(rel, scores), abs=1e-12)


def test_precision_and_cutoff_ap_against_literal_definitions():
    rng = np.random.default_rng(1)
    rel = rng.random((40, 30)) < 0.3
    for k in (1, 3, 10, 30):
        p = precision_at_k(rel, k)
        assert np.allclose(p, rel[:, :k].sum(axis=1) / k)
        apk = average_precision_at_k(rel, k)
        assert np.allclose(apk, [_ref_ap_at_k(r, k) for r in rel])
    # perfect ranking: every measure is 1
    perfect = np.array([True] * 5 + [False] * 5)
    assert average_precision(perfect) == 1.0
    assert precision_at_k(perfect, 5) == 1.0 and average_precision_at_k(perfect, 10) == 1.0
    # a single relevant document at rank 4
    one = np.array([False, False, False, True, False])
    assert average_precision(one) == pytest.approx(0.25)
    assert precision_at_k(one, 4) == pytest.approx(0.25)
    assert average_precision_at_k(one, 3) == 0.0
    assert mean_average_precision(np.vstack([perfect, perfect])) == 1.0


def test_rank_ties_broken_by_index_and_self_excluded():
    s = np.array([[0.5, 1.0, 0.5, 1.0, 0.0]])
    assert rank_by_score(s)[0].tolist() == [1, 3, 0, 2, 4]
    assert rank_by_score(s, exclude=[1])[0].tolist() == [3, 0, 2, 4]
    with pytest.raises(InvalidInputError):
        rank_by_score(np.array([1.0, np.nan]))


def test_sparsity():
    assert sparsity(0, 10) == 1.0
    assert sparsity(100, 10) == 0.0
    assert sparsity(10, 10) == pytest.approx(0.9)
    for bad in [(-1, 5), (26, 5), (1, 0)]:
        with pytest.raises(InvalidInputError):
            sparsity(*bad)


def _brute_force(S, y, k):
    """Literal per-query evaluation with sklearn's AP (scores continuous, no ties)."""
    n = len(y)
    aps, pks, apks, papers = [], [], [], []
    for q in range(n):
        others = np.array([j for j in range(n) if j != q])
        rel = y[others] == y[q]
        aps.append(average_precision_score(rel, S[q, others]))
        ranked = rel[np.argsort(-S[q, others])]
        pks.append(ranked[:k].mean())
        apks.append(_ref_ap_at_k(ranked, k))
        hits_prec = [ranked[:i + 1].mean() for i in range(k) if ranked[i]]
        papers.append(sum(hits_prec) / min(k, rel.sum()))
    return np.mean(aps), np.mean(pks), np.mean(apks), np.mean(papers)


def test_evaluate_retrieval_matches_brute_force_and_sklearn():
    rng = np.random.default_rng(2)
    n = 120
    y = rng.integers(0, 4, size=n)
    y[:8] = [0, 0, 1, 1, 2, 2, 3, 3]
    X = sp.random(n, 50, density=0.2, random_state=3, format="csr")
    X.data = rng.normal(size=X.nnz)
    S = (X @ X.T).toarray() + 1e-9 * rng.normal(size=(n, n))  # break exact ties
    fn = lambda rows: S[rows]
    ref = _brute_force(S, y, 10)
    for block in (1, 7, 1000):
        res = evaluate_retrieval(fn, y, k=10, block_size=block)
        assert res["map"] == pytest.approx(ref[0], abs=1e-12)
        assert res["ap@10"] == pytest.approx(ref[1], abs=1e-12)
        assert res["map@10_hits"] == pytest.approx(ref[2], abs=1e-12)
        assert res["map@10"] == pytest.approx(ref[3], abs=1e-12)
        assert res["n_queries"] == n
    curves = evaluate_retrieval(fn, y, k=10, ks=range(1, 11))["curves"]
    assert curves["k"] == list(range(1, 11))
    assert curves["ap"][-1] == pytest.approx(ref[1])
    assert curves["ap"][0] == pytest.approx(_brute_force(S, y, 1)[1])


def test_evaluate_retrieval_perfect_and_query_subset():
    y = np.repeat(np.arange(3), 5)
    onehot = np.eye(3)[y]
    res = evaluate_retrieval(dot_scorer(sp.csr_matrix(onehot)), y, k=4)
    assert res["map"] == 1.0 and res["ap@4"] == 1.0 and res["map@4"] == 1.0
    res = evaluate_retrieval(cosine_scorer(onehot * 3.0), y, k=4, query_rows=[0, 5])
    assert res["n_queries"] == 2 and res["map"] == 1.0
    # tied scores: ties ranked by index, so a constant score ranks documents in index order
    const = lambda rows: np.zeros((len(rows), y.size))
    r = evaluate_retrieval(const, y, k=4, query_rows=[0])
    assert r["ap@4"] == 1.0  # documents 1..4 are class 0


def test_evaluate_retrieval_bad_input():
    y = np.repeat(np.arange(3), 4)
    fn = lambda rows: np.ones((len(rows), y.size))
    with pytest.raises(InvalidInputError, match="larger"):
        evaluate_retrieval(fn, y, k=12)
    with pytest.raises(InvalidInputError):
        evaluate_retrieval(fn, np.zeros(12), k=2)
    with pytest.raises(InvalidInputError, match="single document"):
        evaluate_retrieval(fn, np.array([0, 0, 1]), k=1, no_relevant="error")
    with pytest.raises(InvalidInputError):
        evaluate_retrieval(fn, np.array([0, 1]), k=1)  # no query has a relevant document
    with pytest.raises(InvalidInputError, match="shape"):
        evaluate_retrieval(lambda rows: np.ones((len(rows), 3)), y, k=2)
    with pytest.raises(InvalidInputError, match="NaN"):
        evaluate_retrieval(lambda rows: np.full((len(rows), y.size), np.nan), y, k=2)
    with pytest.raises(InvalidInputError):
        evaluate_retrieval(fn, y, k=2, query_rows=[100])
    with pytest.raises(InvalidInputError):
        evaluate_retrieval(fn, y, k=0)


def test_queries_without_relevant_documents_are_skipped():
    rng = np.random.default_rng(5)
    y = np.array([0, 0, 0, 1, 1, 2, 1, 0, 3])  # classes 2 and 3 have one document
    S = rng.normal(size=(9, 9))
    res = evaluate_retrieval(lambda rows: S[rows], y, k=3)
    assert res["n_skipped"] == 2 and res["n_queries"] == 7
    keep = np.flatnonzero(~np.isin(y, [2, 3]))
    aps = [average_precision_score(np.delete(y == y[q], q), np.delete(S[q], q)) for q in keep]
    assert res["map"] == pytest.approx(np.mean(aps), abs=1e-12)


@pytest.mark.parametrize("levels", [2, 5, 40])  # few tied values, and many (stable-sort fallback)
def test_tied_scores_match_literal_index_tie_break(levels):
    rng = np.random.default_rng(levels)
    n = 90
    y = rng.integers(0, 3, size=n)
    S = rng.integers(0, levels, size=(n, n)).astype(float)  # heavy ties
    res = evaluate_retrieval(lambda rows: S[rows], y, k=7, ks=[1, 3, 7], block_size=16)
    order = rank_by_score(S, exclude=np.arange(n))
    rel = y[order] == y[:, None]
    assert res["map"] == pytest.approx(np.mean(average_precision(rel)), abs=1e-12)
    assert res["ap@7"] == pytest.approx(np.mean(precision_at_k(rel, 7)), abs=1e-12)
    assert res["map@7_hits"] == pytest.approx(np.mean(average_precision_at_k(rel, 7)), abs=1e-12)
    assert res["map@7"] == pytest.approx(np.mean(paper_map_at_k(rel, 7)), abs=1e-12)
    assert res["curves"]["ap"][0] == pytest.approx(np.mean(precision_at_k(rel, 1)), abs=1e-12)
    assert res["curves"]["map_hits"][1] == pytest.approx(np.mean(average_precision_at_k(rel, 3)), abs=1e-12)
    assert res["curves"]["map"][1] == pytest.approx(np.mean(paper_map_at_k(rel, 3)), abs=1e-12)


def test_map_at_k_definitions_on_a_hand_checked_ranking():
    """One query, 10 ranked documents, R = 4 relevant in all: hits at ranks 2, 3 and 7.
    AP@5 = 2/5 = 0.4. The papers' mAP@5 = (P@2 + P@3) / min(5, 4) = (1/2 + 2/3) / 4 = 0.2917 (below
    AP@5, as in every row of the papers' tables); mAP@5 (hits) = (1/2 + 2/3) / 2 = 0.5833 (above it).
    At k = 10 min(k, R) = R = 4: (1/2 + 2/3 + 3/7) / 4."""
    rel = np.array([0, 1, 1, 0, 0, 0, 1, 0, 0, 1], dtype=bool)  # the 4th relevant document at rank 10
    assert precision_at_k(rel, 5) == pytest.approx(0.4)
    assert paper_map_at_k(rel, 5) == pytest.approx((1 / 2 + 2 / 3) / 4)
    assert average_precision_at_k(rel, 5) == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert paper_map_at_k(rel, 5) < precision_at_k(rel, 5) < average_precision_at_k(rel, 5)
    assert paper_map_at_k(rel, 10) == pytest.approx((1 / 2 + 2 / 3 + 3 / 7 + 4 / 10) / 4)
    assert paper_map_at_k(rel, 10) == pytest.approx(average_precision(rel))  # k = n: the full AP
    assert paper_map_at_k(np.ones(10, bool), 5) == 1.0 and paper_map_at_k(np.zeros(10, bool), 5) == 0.0
    # the same ranking through evaluate_retrieval: query 0 against 10 documents scored 10, 9, ..., 1
    y = np.array([1] + [1 if r else 0 for r in rel])
    scores = np.vstack([np.concatenate([[0.0], np.arange(10, 0, -1.0)])] + [np.zeros(11)] * 10)
    res = evaluate_retrieval(lambda rows: scores[rows], y, k=5, query_rows=[0])
    assert res["ap@5"] == pytest.approx(0.4)
    assert res["map@5"] == pytest.approx((1 / 2 + 2 / 3) / 4)
    assert res["map@5_hits"] == pytest.approx((1 / 2 + 2 / 3) / 2)


def test_papers_map_at_k_stays_below_ap_at_k_when_a_class_has_k_documents():
    rng = np.random.default_rng(9)
    rel = rng.random((200, 30)) < 0.4
    rel[:, -12:] = True  # every query has R >= k relevant documents
    for k in (1, 5, 10):
        assert np.all(paper_map_at_k(rel, k) <= precision_at_k(rel, k) + 1e-15)


def test_evaluate_retrieval_asks_for_score_blocks_within_the_byte_budget(monkeypatch):
    """Each call of the score function returns a dense queries x documents block: its rows are
    capped so the block stays within SCORE_BLOCK_BYTES, whatever block_size asks for."""
    import sparsesim.evaluation as ev

    rng = np.random.default_rng(4)
    n = 60
    y = rng.integers(0, 3, size=n)
    y[:6] = [0, 0, 1, 1, 2, 2]
    S = rng.normal(size=(n, n))
    sizes = []

    def fn(rows):
        sizes.append(rows.size)
        return S[rows]

    full = evaluate_retrieval(fn, y, k=5, block_size=1000)
    assert max(sizes) == n
    sizes.clear()
    monkeypatch.setattr(ev, "SCORE_BLOCK_BYTES", 8 * n * 7)  # room for 7 rows of n float64 scores
    capped = evaluate_retrieval(fn, y, k=5, block_size=1000)
    assert max(sizes) == 7 and sum(sizes) == n
    assert capped["map"] == pytest.approx(full["map"], abs=1e-12)
