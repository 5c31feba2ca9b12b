"""The model-size budget of OASIS / SORS / AdaSORS (``max_model_bytes``), its truncation rule, the
``--max-model-bytes`` option and the announcement of large outputs."""

import json

import numpy as np
import pytest
import scipy.sparse as sp

from clitools import run_cli
from sparsesim.data import load_dataset
from sparsesim import memory
from sparsesim.memory import MODEL_SIZE_FACTOR, model_bytes_for, resolve_model_budget
from sparsesim.engine.rowstore import RowStore
from sparsesim.engine.truncation import keep_largest_offdiag, truncate_store
from sparsesim.exceptions import InvalidParameterError, LargeOutputWarning
from sparsesim.learners.bilinear import OASIS, SORS, AdaSORS
from sparsesim.model_files import model_nbytes
from sparsesim.models import BilinearSimilarity
from sparsesim.triplets import sors_triplets as sample_triplets


@pytest.fixture(scope="module")
def sample():
    return load_dataset("news20-sample")


def offdiag_nnz(W):
    W = sp.csr_matrix(W)
    return int(np.count_nonzero(W.data)) - int(np.count_nonzero(W.diagonal()))


def random_square(d, density, seed):
    rng = np.random.default_rng(seed)
    W = sp.random(d, d, density=density, random_state=rng, format="csr")
    W.data = rng.choice([-1.0, 1.0], W.data.size) * np.round(rng.random(W.data.size) * 8) / 8 + 0.0  # many ties
    W.eliminate_zeros()
    return W


@pytest.mark.parametrize("k", [0, 1, 17, 200])
def test_keep_largest_keeps_exactly_k_largest_with_ties(k):
    W = random_square(40, 0.3, seed=k)
    out = keep_largest_offdiag(W, k)
    assert offdiag_nnz(out) == min(k, offdiag_nnz(W))
    np.testing.assert_array_equal(out.diagonal(), W.diagonal())  # the diagonal is never cut
    off = sp.csr_matrix(W - sp.diags(W.diagonal()))
    off.eliminate_zeros()
    kept = sp.csr_matrix(out - sp.diags(out.diagonal()))
    kept.eliminate_zeros()
    if 0 < k < off.nnz:
        # nothing dropped is larger than anything kept, and every kept value is W's
        dropped = sp.csr_matrix(off - kept)
        dropped.eliminate_zeros()
        assert np.abs(dropped.data).max() <= np.abs(kept.data).min()
        assert np.all(kept.multiply(off).data > 0)  # kept entries carry W's values (same sign)


@pytest.mark.parametrize("layout", ["plain", "row_lazy", "lazy_aux"])
def test_store_truncation_matches_the_csr_rule(layout):
    d = 60
    W = random_square(d, 0.25, seed=3)
    W.data = W.data + np.linspace(0, 1e-3, W.data.size)  # distinct magnitudes: one answer
    store = RowStore(d, layout, 1.0, 16, compact=False)
    store.load_csr(W, 1.0)
    k = offdiag_nnz(W) // 3
    removed = truncate_store(store, k, rebuild=layout == "plain")
    assert removed == offdiag_nnz(W) - k
    got = store.to_csr(1.0)
    want = keep_largest_offdiag(W, k)
    np.testing.assert_allclose(got.toarray(), want.toarray())
    assert truncate_store(store, k) == 0  # within the budget: nothing to do


def reference_cut(store, k):
    """The rule written plainly: the k largest nonzero magnitudes of the pool stay, entries equal
    to the k-th largest kept in row (slot) order; returns the slots that stay."""
    cols, vals, _, _ = store.views()
    live = [(i, s) for i in range(store.d) for s in range(store.rows[i, 0], store.rows[i, 0] + store.rows[i, 1])
            if cols[s] >= 0 and vals[s] != 0.0]
    mags = np.array([abs(float(vals[s])) for _, s in live])
    threshold = np.sort(mags)[::-1][k - 1]
    ties = k - int(np.count_nonzero(mags > threshold))
    kept = []
    for (i, s), a in zip(live, mags):
        if a > threshold or (a == threshold and ties > 0):
            ties -= a == threshold
            kept.append(s)
    return kept


@pytest.mark.parametrize("layout", ["plain", "row_lazy", "lazy_aux"])
@pytest.mark.parametrize("k_share", [0.05, 0.5, 0.93])
def test_store_truncation_with_ties_matches_the_plain_rule(layout, k_share):
    # many equal magnitudes (values from a few levels, both signs), several levels inside one
    # float32 bin: the bin-wise cut must keep exactly what the plain rule keeps
    d = 50
    W = random_square(d, 0.4, seed=11)
    rng = np.random.default_rng(5)
    levels = np.array([1e-9, 0.25, 0.5, 0.5 + 1e-12, 0.5 + 2e-12, 1.0, 3.0])
    W.data = levels[rng.integers(0, levels.size, W.data.size)] * rng.choice([-1.0, 1.0], W.data.size)
    store = RowStore(d, layout, 1.0, 16, compact=False)
    store.load_csr(W, 1.0)
    n = offdiag_nnz(W)
    k = max(1, int(n * k_share))
    want = sorted(reference_cut(store, k))
    removed = truncate_store(store, k)
    cols, vals, _, _ = store.views()
    got = sorted(s for i in range(d) for s in range(store.rows[i, 0], store.rows[i, 0] + store.rows[i, 1])
                 if cols[s] >= 0 and vals[s] != 0.0)
    assert removed == n - k
    assert got == want


@pytest.mark.parametrize("cls", [OASIS, SORS, AdaSORS])
def test_an_explicit_budget_holds_and_is_recorded(cls, sample, tmp_path):
    limit = 600_000
    est = cls(n_triplets=2500, random_state=0, max_model_bytes=limit).fit(sample.X, sample.y)
    model = est.model_
    assert model_nbytes(model) <= limit
    entries = est.model_entries_
    assert entries == (limit - model_bytes_for(0, sample.n_features)) // 12
    assert offdiag_nnz(model.W) <= entries
    # the bound bit: without it the same fit keeps more entries
    free = cls(n_triplets=2500, random_state=0, max_model_bytes=None).fit(sample.X, sample.y)
    assert offdiag_nnz(free.model_.W) > entries
    assert free.resolved_params_["max_model_bytes"] is None
    # the explicit value wins and is recorded in the estimator, the model and its file
    assert est.resolved_params_["max_model_bytes"] == limit
    path = tmp_path / "m.npz"
    model.save(path)
    assert BilinearSimilarity.load(path).metadata["resolved_params"]["max_model_bytes"] == limit


def test_the_default_keeps_w_within_the_factor_of_the_corpus(sample, monkeypatch):
    monkeypatch.setattr(memory, "MODEL_SIZE_FLOOR_BYTES", 0)  # the sample's 20x is below the floor
    est = OASIS(n_triplets=3000, random_state=0).fit(sample.X, sample.y)
    budget = int(MODEL_SIZE_FACTOR * sample.X.nnz) - sample.n_features
    assert est.model_entries_ == budget
    assert offdiag_nnz(est.model_.W) <= budget
    assert est.model_.W.nnz <= MODEL_SIZE_FACTOR * sample.X.nnz  # the diagonal included
    assert est.resolved_params_["max_model_bytes"] == model_bytes_for(budget, sample.n_features)
    free = OASIS(n_triplets=3000, random_state=0, max_model_bytes=None).fit(sample.X, sample.y)
    assert offdiag_nnz(free.model_.W) > budget  # the default did cut this run


def test_the_model_does_not_depend_on_how_the_triplets_are_cut(sample):
    T = sample_triplets(sample.y, 3000, seed=1)
    kwargs = dict(max_model_bytes=model_bytes_for(40_000, sample.n_features))
    whole = SORS(**kwargs).partial_fit_triplets(sample.X, T).model_.W
    pieces = SORS(**kwargs)
    for lo, hi in [(0, 700), (700, 2100), (2100, 2101), (2101, 3000)]:
        pieces.partial_fit_triplets(sample.X, T[lo:hi])
    assert offdiag_nnz(whole) <= 40_000
    np.testing.assert_allclose(pieces.model_.W.toarray(), whole.toarray(), rtol=1e-6, atol=1e-9)


def test_a_continued_model_is_not_cut_by_the_default(sample):
    first = OASIS(n_triplets=3000, random_state=0, max_model_bytes=None).fit(sample.X, sample.y).model_
    T = sample_triplets(sample.y, 50, seed=2)
    rest = OASIS().start_from(first, sample.X).partial_fit_triplets(sample.X[:40], T % 40)
    assert rest.model_entries_ >= offdiag_nnz(first.W)


@pytest.mark.parametrize("value", [-1, 0, "10%", "lots", 100])
def test_bad_budgets_are_refused(value, sample):
    with pytest.raises(InvalidParameterError, match="max_model_bytes"):
        OASIS(n_triplets=10, max_model_bytes=value).fit(sample.X, sample.y)


def test_resolve_model_budget_rules(monkeypatch):
    # a small corpus keeps the floor: as many entries as fit in MODEL_SIZE_FLOOR_BYTES
    entries, nbytes = resolve_model_budget("auto", 100, 10)
    assert nbytes <= memory.MODEL_SIZE_FLOOR_BYTES < model_bytes_for(entries + 1, 10)
    assert resolve_model_budget("auto", 10**8, 10)[0] == MODEL_SIZE_FACTOR * 10**8 - 10  # past the floor: 20x
    monkeypatch.setattr(memory, "MODEL_SIZE_FLOOR_BYTES", 0)
    assert resolve_model_budget(None, 100, 10) == (None, None)
    entries, nbytes = resolve_model_budget("auto", 100, 10, floor_entries=5000)
    assert entries == 5000 and nbytes == model_bytes_for(5000, 10)
    assert resolve_model_budget("auto", 100, 10)[0] == MODEL_SIZE_FACTOR * 100 - 10
    assert resolve_model_budget("auto", 100, 10**6)[0] == 0  # the diagonal alone passes 20x: nothing more
    assert resolve_model_budget("1MB", 100, 10)[1] == 10**6


def test_cli_train_records_the_bound(sample, tmp_path, monkeypatch, capsys):
    out = tmp_path / "m.npz"
    code, stdout, err = run_cli(["train", "-a", "sors-l1", "-d", "news20-sample", "-o", out, "-n", "2000",
                                 "--max-model-bytes", "700kB", "--json"], monkeypatch, capsys)
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["resolved_params"]["max_model_bytes"] == 700_000
    assert summary["model_bytes"] <= 700_000
    assert "warnings" not in summary and "warning:" not in err
    assert BilinearSimilarity.load(out).metadata["resolved_params"]["max_model_bytes"] == 700_000
    code, _, err = run_cli(["train", "-a", "cosine", "-d", "news20-sample", "-o", tmp_path / "c.npz",
                            "--max-model-bytes", "1MB"], monkeypatch, capsys)
    assert code == 2 and err.startswith("error:") and len(err.strip().splitlines()) == 1


def test_large_outputs_are_announced_before_they_are_written(sample, tmp_path, monkeypatch, capsys):
    import warnings

    import sparsesim.memory
    import sparsesim.workflows.indexes

    monkeypatch.setattr(sparsesim.memory, "LARGE_OUTPUT_BYTES", 100_000)
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # (the CLI replaces it)
    with pytest.warns(LargeOutputWarning, match="the model may take up to"):  # the library warns ...
        sparsesim.memory.large_output_warning("the model", 200_000, "may take up to", "hint")
    out = tmp_path / "m.npz"
    code, stdout, err = run_cli(["train", "-a", "oasis", "-d", "news20-sample", "-o", out, "-n", "200", "--json"],
                                monkeypatch, capsys)
    assert code == 0, err
    note = json.loads(stdout)["warnings"][0]  # ... and the CLI says it on stderr and in --json
    assert note.startswith("the model may take up to") and f"warning: {note}" in err.splitlines()
    code, stdout, err = run_cli(["index", "build", "-m", out, "-d", "news20-sample", "-o", tmp_path / "idx",
                                 "--json"], monkeypatch, capsys)
    assert code == 0, err
    note = json.loads(stdout)["warnings"][0]
    assert note.startswith("the index may take up to") and f"warning: {note}" in err.splitlines()
    summary = json.loads(stdout)
    assert summary["index_bytes"] <= sparsesim.workflows.indexes.index_size_estimate(
        BilinearSimilarity.load(out), sample.X)[0]  # the estimate is an upper bound of what was written


@pytest.mark.parametrize("layout", ["plain", "row_lazy", "lazy_aux"])
def test_store_truncation_to_zero_entries_keeps_only_the_diagonal(layout):
    d = 40
    W = random_square(d, 0.3, seed=7)
    store = RowStore(d, layout, 1.0, 16, compact=False)
    store.load_csr(W, 1.0)
    assert truncate_store(store, 0) == offdiag_nnz(W)
    got = store.to_csr(1.0)
    np.testing.assert_allclose(got.toarray(), np.diag(W.diagonal()))
