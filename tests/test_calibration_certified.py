"""Honest recall calibration of the ann index: the setting is chosen on one stratified sample of
held-out corpus documents and certified on another, disjoint one; the certified lower bound holds
on fresh stratified queries of real text (the embedded news20 sample); a user's query log
certifies through ``sparsesim index calibrate --queries``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sparsesim.data import load_dataset
from sparsesim.indexes import build_index, load_index
from sparsesim.indexes.base import drop_own_rows
from sparsesim.indexes.calibration import (corpus_strata, exact_top_k, recall_counting_ties, stratified_split,
                                           summary)
from sparsesim.csr_rows import take_rows
from sparsesim.learners.bilinear import OASIS
from clitools import run_cli


@pytest.fixture(scope="module")
def news():
    return load_dataset("news20-sample")


@pytest.fixture(scope="module")
def model(news):
    return OASIS(n_triplets=2000, random_state=0).fit(news.X, news.y).model_


@pytest.fixture(scope="module")
def index(model, news):
    index = build_index(model, news.X, kind="ann", heavy_min_nnz=5, calibration_size=100, target_recall=None)
    index.target_recall = 0.9
    index.calibrate(strata=news.y)
    return index


def held_out_recall(index, rows, **options):
    """Per-query recall@10 of corpus rows used as queries, each removed from its own answer."""
    Q = take_rows(index.X_, rows)
    truth_rows, truth = exact_top_k(index, Q, 11)
    _, truth = drop_own_rows(truth_rows, truth, rows, 10)
    found_rows, found = index._query_rows(Q, 11, 1, **options)
    _, found = drop_own_rows(found_rows, found, rows, 10)
    return recall_counting_ties(found, truth)


@pytest.mark.parametrize("seed", range(5))
def test_stratified_samples_are_disjoint_and_balanced(seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 60, size=7)
    strata = rng.permutation(np.repeat(np.arange(7), sizes))
    a, b = stratified_split(strata, [40, 40], seed)
    assert a.size == min(40, strata.size) and not set(a) & set(b)
    assert np.all(np.diff(a) > 0) and np.all(np.diff(b) > 0)
    a_counts, b_counts = (np.bincount(strata[x], minlength=7) for x in (a, b))
    joint, size = a_counts + b_counts, np.bincount(strata, minlength=7)
    # together: every stratum gives the same number (+-1), unless it gave all it has
    partial = joint[joint < size]
    assert partial.size == 0 or (partial.max() - partial.min() <= 1 and joint.max() <= partial.max())
    # each sample gets half of every stratum's share (+-1): a small stratum is in both
    assert np.all(np.abs(a_counts - b_counts) <= 1)
    # same seed, same samples
    a2, b2 = stratified_split(strata, [40, 40], seed)
    assert np.array_equal(a, a2) and np.array_equal(b, b2)


def test_corpus_strata_are_seeded_clusters(news):
    labels = corpus_strata(news.X, n_strata=10, seed=1)
    assert labels.shape == (news.X.shape[0],) and len(np.unique(labels)) > 1
    assert np.array_equal(labels, corpus_strata(news.X, n_strata=10, seed=1))
    # clusters of TF-IDF text follow the newsgroups more than chance would
    purity = sum(np.bincount(news.y[labels == c]).max() for c in np.unique(labels)) / labels.size
    assert purity > 0.45  # 10 groups of 40: chance gives about 0.2


def test_selection_and_certification_samples_are_disjoint(index, news):
    cal = index.calibration_
    select, cert = cal["selection"]["rows"], cal["rows"]
    assert len(select) == len(cert) == cal["n_queries"] == 100 and not set(select) & set(cert)
    # stratified by label: 10 newsgroups, 10 documents of each in each sample
    assert np.bincount(news.y[cert] - news.y.min()).max() == 10
    assert cal["strata"]["by"] == "label" and len(cal["strata"]["recall"]) == 10
    assert sum(v["n"] for v in cal["strata"]["recall"].values()) == 100
    # the recorded certification is that of its rows: replayed, each query finds its recorded hits
    per_query = held_out_recall(index, np.asarray(cert))
    assert np.array_equal(np.rint(per_query * 10).astype(int), cal["hits"])
    recall, lower = summary(per_query)
    assert recall == pytest.approx(cal["recall"]) and lower == pytest.approx(cal["recall_lower_bound"])
    meta = index.search_metadata()
    assert meta["calibrated_recall_by_stratum"] == cal["strata"]["recall"]


def test_certified_bound_holds_on_fresh_stratified_queries(index, news):
    cal = index.calibration_
    assert cal["met"] and cal["recall_lower_bound"] >= 0.9
    used = set(cal["rows"]) | set(cal["selection"]["rows"])
    fresh = np.array([r for r in range(news.X.shape[0]) if r not in used])
    assert fresh.size == 200 and np.bincount(news.y[fresh] - news.y.min()).min() == 20  # balanced: 20 per group
    per_query = held_out_recall(index, fresh)
    assert per_query.mean() >= cal["recall_lower_bound"] - 0.01, (per_query.mean(), cal)
    # the cheapest settings of the grid do not reach it: the bound says something
    assert held_out_recall(index, fresh, n_postings=1, sparse_pool=10).mean() < cal["recall_lower_bound"]


def test_saved_record_is_checked_at_load(index, tmp_path):
    index.save(tmp_path / "ann")
    loaded = load_index(tmp_path / "ann")
    assert loaded.calibration_["rows"] == index.calibration_["rows"]
    assert loaded.calibration_["strata"] == index.calibration_["strata"]


def test_cli_calibrate_certifies_on_a_query_log(model, news, tmp_path, monkeypatch, capsys):
    from sklearn.datasets import dump_svmlight_file

    model.save(tmp_path / "m.npz")
    dump_svmlight_file(news.X[:300], news.y[:300], str(tmp_path / "c.svm"), zero_based=True)
    dump_svmlight_file(news.X[300:], news.y[300:], str(tmp_path / "log.svm"), zero_based=True)
    common = ["--model", tmp_path / "m.npz", "--zero-based", "true"]
    code, out, err = run_cli(["index", "build", *common, "--data", tmp_path / "c.svm", "--kind", "ann",
                              "--out", tmp_path / "idx", "--target-recall", "0.8", "--param", "heavy_min_nnz=5",
                              "--json"], monkeypatch, capsys)
    assert code == 0, err
    built = json.loads(out)["calibration"]
    assert built["strata"]["by"] == "label" and built["queries"].startswith("corpus sample")
    code, out, err = run_cli(["index", "calibrate", "--index", tmp_path / "idx", "--queries", tmp_path / "log.svm",
                              "--zero-based", "true", "--target-recall", "0.8", "--json"], monkeypatch, capsys)
    assert code == 0, err
    cal = json.loads(out)["calibration"]
    assert cal["queries"] == "given queries" and cal["n_queries"] == 50 and cal["selection"]["n_queries"] == 50
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert manifest["state"]["calibration"]["recall"] == pytest.approx(cal["recall"])
    # the certified recall is that of half the log: measured independently, the whole log agrees
    loaded = load_index(tmp_path / "idx")
    Q = news.X[300:]
    from sparsesim.indexes.base import prepare_rows
    _, truth = exact_top_k(loaded, prepare_rows(loaded.model, Q, "q"), 10)
    _, found = loaded.query_rows(Q, 10)
    assert abs(recall_counting_ties(found, truth).mean() - cal["recall"]) <= 0.05
    code, out, err = run_cli(["index", "calibrate", "--index", tmp_path / "idx", "--queries",
                              tmp_path / "missing.svm"], monkeypatch, capsys)
    assert code == 2 and err.startswith("error:") and "Traceback" not in err


@pytest.mark.parametrize("seed", range(5))
def test_half_proportional_samples_hold_a_dominant_stratum(seed):
    from sparsesim.indexes.calibration_samples import balanced_shares

    rng = np.random.default_rng(seed)
    sizes = np.concatenate([[int(rng.integers(400, 800))], rng.integers(1, 60, size=9)])  # stratum 0 dominates
    strata = rng.permutation(np.repeat(np.arange(10), sizes))
    a, b = stratified_split(strata, [100, 100], seed, proportional=0.5)
    assert a.size == b.size == 100 and not set(a) & set(b)
    joint = np.bincount(strata[a], minlength=10) + np.bincount(strata[b], minlength=10)
    balanced = np.bincount(strata[np.concatenate(stratified_split(strata, [100, 100], seed))], minlength=10)
    # half the rows in proportion to the corpus: the dominant stratum holds at least its share of
    # that half, far more than a balanced sample gives it; every stratum at least what a balanced
    # sample of the other half gives it (within a row)
    assert joint[0] >= np.floor(100 * sizes[0] / sizes.sum()) and joint[0] > balanced[0]
    half = balanced_shares(strata, 100)
    assert np.all(joint >= np.floor(np.array([half[s] for s in range(10)]) * 100) - 1)
    assert np.all(np.abs(np.bincount(strata[a], minlength=10) - np.bincount(strata[b], minlength=10)) <= 1)
    a2, b2 = stratified_split(strata, [100, 100], seed, proportional=0.5)
    assert np.array_equal(a, a2) and np.array_equal(b, b2)
    # the balanced population is the one a balanced sample draws (within a row per stratum)
    shares = balanced_shares(strata, 200)
    assert np.all(np.abs(np.array([shares[s] for s in range(10)]) * 200 - balanced) <= 1.0)
    with pytest.raises(ValueError, match="proportional"):
        stratified_split(strata, [10], seed, proportional=1.5)


def test_stratified_estimates_weigh_strata_not_queries():
    from sparsesim.indexes.calibration_samples import corpus_weighted_summary, stratified_summary

    strata = np.repeat([0, 1], [900, 100])  # stratum 0: 90% of the corpus
    in_sample = np.repeat([0, 1], [60, 40])
    per_query = np.concatenate([np.tile([1.0, 0.8], 30), np.ones(40)])  # stratum 0: recall 0.9
    mean, lower = stratified_summary(per_query, in_sample, {0: 0.5, 1: 0.5})  # balanced: class-equal
    assert mean == pytest.approx(0.95) and lower < mean
    assert per_query.mean() == pytest.approx(0.94)  # the sample as drawn is neither
    w_mean, w_lower = corpus_weighted_summary(per_query, in_sample, strata)
    assert w_mean == pytest.approx(0.91)
    # variance sum W_h^2 s_h^2 / n_h: stratum 1 has none
    assert w_mean - w_lower == pytest.approx(1.645 * 0.9 * np.std(per_query[:60], ddof=1) / np.sqrt(60))


def test_calibration_record_on_a_dominant_class():
    from sparsesim.data.synthetic import rcv1_like

    data = rcv1_like(3000, n_features=3000, nnz_per_doc=30, n_classes=6, class_vocab=300, seed=4)
    y = np.where(np.arange(3000) < 1500, 0, data.y + 1)  # class 0: half the corpus
    model = OASIS(n_triplets=1500, random_state=0).fit(data.X[:1000], data.y[:1000]).model_
    index = build_index(model, data.X, kind="ann", heavy_min_nnz=20, calibration_size=150, target_recall=None)
    index.target_recall = 0.9
    cal = index.calibrate(strata=y)
    cert = np.asarray(cal["rows"])
    # 7 classes: class 0 holds 75 / 7 of the balanced half and half of the proportional half (48),
    # where a balanced sample gives it 150 / 7
    assert 46 <= np.sum(y[cert] == 0) <= 50 and cal["proportional_share"] == 0.5
    per_query = np.asarray(cal["hits"]) / 10
    from sparsesim.indexes.calibration_samples import balanced_shares, corpus_weighted_summary, stratified_summary
    assert (cal["balanced"]["recall"], cal["balanced"]["recall_lower_bound"]) == pytest.approx(
        stratified_summary(per_query, y[cert], balanced_shares(y, 150)))
    assert (cal["corpus_weighted"]["recall"], cal["corpus_weighted"]["recall_lower_bound"]) == pytest.approx(
        corpus_weighted_summary(per_query, y[cert], y))
    assert cal["met"] == (min(cal["recall_lower_bound"], cal["balanced"]["recall_lower_bound"],
                              cal["corpus_weighted"]["recall_lower_bound"]) >= 0.9)
    # the speed of the chosen setting and of the fastest one measured (whatever its recall)
    assert cal["qps_certification"] > 0 and cal["fastest"]["qps"] >= cal["qps_one_thread"] > 0


def test_not_met_warning_names_negative_query_values():
    """The posting lists hold the largest positive Y[x, i]: with signed features the documents that
    score through negative values are in no list, and the "not met" warning says so."""
    import warnings

    import scipy.sparse as sp

    from sparsesim.indexes.ann import AnnIndex
    from sparsesim.models import BilinearSimilarity

    X = load_dataset("news20-sample").X
    d = X.shape[1]
    signs = np.where(np.random.default_rng(0).random(d) < 0.5, -1.0, 1.0)
    signed = (X @ sp.diags(signs)).tocsr()  # M = I: the same scores, half the features negated
    model = BilinearSimilarity(sp.csr_matrix((d, d)))
    plain = AnnIndex(model, target_recall=None).fit(X)
    assert plain.calibration_hint(plain.stored_queries(np.arange(20))) is None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        index = AnnIndex(model, random_state=0).fit(signed)
    hint = index.calibration_hint(index.stored_queries(np.arange(20)))
    assert hint is not None and "negative" in hint and "dim > 0" in hint
    said = [str(w.message) for w in caught if "not met" in str(w.message)]
    assert index.calibration_["met"] or (said and hint.split(":")[0].split("%")[1] in said[0])
