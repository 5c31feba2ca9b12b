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
