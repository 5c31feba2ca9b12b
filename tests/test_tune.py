"""Model selection: successive halving where survivors continue training; the CLI `tune`."""

import json

import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.evaluation import evaluate_retrieval
from sparsesim.exceptions import InvalidInputError, SparsesimError
from sparsesim.learners.bilinear import SORS
from sparsesim.triplets import sors_triplets, stratified_split
from sparsesim.tuning import default_grid, parse_grid, successive_halving_rungs, tune_similarity
from clitools import run_cli


def labelled_problem(n=150, d=40, seed=0):
    rng = np.random.default_rng(seed)
    y = np.repeat([0, 1, 2], n // 3)
    centers = rng.normal(size=(3, d)) * (rng.random((3, d)) < 0.3)
    dense = np.maximum(centers[y] + 1.5 * rng.normal(size=(n, d)) * (rng.random((n, d)) < 0.3), 0)
    return sp.csr_matrix(dense), y


def test_rungs_grow_the_budget_and_shrink_the_field():
    assert successive_halving_rungs(9, 9000, 3, min_budget=100) == [(1000, 9), (3000, 3), (9000, 1)]
    assert successive_halving_rungs(9, 900, 3, min_budget=500) == [(900, 9)]
    assert successive_halving_rungs(1, 5000) == [(5000, 1)]
    assert successive_halving_rungs(6, 6000, 2, min_budget=100)[-1] == (6000, 1)


def test_parse_grid():
    assert parse_grid(["eta=0.5,1,2", "schedule=constant,invsqrt"]) == {
        "eta": [0.5, 1, 2], "schedule": ["constant", "invsqrt"]}
    with pytest.raises(InvalidInputError, match="KEY=V1"):
        parse_grid(["eta"])


def test_survivors_continue_rather_than_restart():
    X, y = labelled_problem()
    grid = {"eta": [0.05, 0.5, 5.0], "lam": [1e-4]}
    res = tune_similarity("sors-l1", X, y, 1500, grid=grid, seed=4, min_budget=100, final=False)
    assert [r["budget"] for r in res.rungs] == [500, 1500]
    assert len(res.trials) == 3 and sum(t["eliminated_at"] is None for t in res.trials) == 1
    winner = next(t for t in res.trials if t["eliminated_at"] is None)
    assert [r["budget"] for r in winner["rungs"]] == [500, 1500]
    # the same learner trained in one go on the first 1500 triplets of the same stream scores the same
    fit_rows, val_rows = stratified_split(y, 0.8, seed=4)
    triplets = sors_triplets(y[fit_rows], 1500, seed=4)
    one_go = SORS(n_triplets=1500, random_state=4, **winner["params"]).partial_fit_triplets(X[fit_rows], triplets)
    score = evaluate_retrieval(one_go.model_.scorer(X[val_rows]), y[val_rows])["map"]
    assert winner["rungs"][-1]["map"] == pytest.approx(score, abs=1e-12)
    assert res.best_params == pytest.approx(winner["params"])


def test_survivors_set_aside_over_the_memory_threshold_are_rebuilt_exactly():
    """Above ``park_bytes`` survivors keep only their budget and are retrained from their triplets
    at the next rung (nothing is serialised); the search sees the same scores as when held."""
    X, y = labelled_problem()
    grid = {"eta": [0.05, 0.5, 5.0], "lam": [1e-5, 1e-4, 1e-3]}  # rungs of 100, 300, 900 triplets
    held = tune_similarity("sors-l1", X, y, 900, grid=grid, seed=4, min_budget=100, final=False)
    rebuilt = tune_similarity("sors-l1", X, y, 900, grid=grid, seed=4, min_budget=100, final=False,
                              park_bytes=0)
    assert [r["budget"] for r in rebuilt.rungs] == [100, 300, 900]  # the last rung rebuilds survivors
    assert [[r["map"] for r in t["rungs"]] for t in rebuilt.trials] == \
        [[r["map"] for r in t["rungs"]] for t in held.trials]
    assert rebuilt.best_params == held.best_params


def test_states_held_between_rungs_stay_within_park_bytes(monkeypatch):
    """Every rung's trials bring back learners holding at most park_bytes in all (each within
    an equal share), however many candidates there are; the others are rebuilt when they survive."""
    import sparsesim.tuning.halving as halving
    from sparsesim.tuning.trials import Replay, run_trial, state_nbytes

    X, y = labelled_problem()
    grid = {"eta": [0.05, 0.5, 5.0], "lam": [1e-5, 1e-4, 1e-3]}
    held = tune_similarity("sors-l1", X, y, 900, grid=grid, seed=4, min_budget=100, final=False)
    sizes = sorted(state_nbytes(SORS(n_triplets=100, random_state=4, **t["params"]).partial_fit_triplets(
        X, sors_triplets(y, 100, seed=4))) for t in held.trials)
    park = 3 * sizes[len(sizes) // 2]  # room for some of the nine first-rung learners, not all
    returned = []
    real = run_trial

    def spy(*args):
        state, row = real(*args)
        returned.append((args[5], 0 if isinstance(state, Replay) else state_nbytes(state)))
        return state, row

    monkeypatch.setattr(halving, "run_trial", spy)  # where the search looks it up
    bounded = tune_similarity("sors-l1", X, y, 900, grid=grid, seed=4, min_budget=100, final=False,
                              park_bytes=park)
    for budget in {b for b, _ in returned}:
        kept = [n for b, n in returned if b == budget]
        assert sum(kept) <= park
    assert any(n == 0 for _, n in returned) and any(n > 0 for _, n in returned)
    assert [[r["map"] for r in t["rungs"]] for t in bounded.trials] == \
        [[r["map"] for r in t["rungs"]] for t in held.trials]


def test_a_trial_over_its_memory_budget_is_a_failed_trial_not_a_failed_search(monkeypatch):
    from sparsesim.exceptions import MemoryBudgetError

    X, y = labelled_problem()
    grid = {"eta": [0.05, 0.5, 5.0]}
    real = SORS.partial_fit_triplets

    def tight(self, X, triplets, *args, **kwargs):
        if self.eta == 5.0 and getattr(self, "n_triplets_seen_", 0) + len(triplets) > 100:
            raise MemoryBudgetError("sors-l1: the model would need more than its budget")
        return real(self, X, triplets, *args, **kwargs)

    monkeypatch.setattr(SORS, "partial_fit_triplets", tight)
    res = tune_similarity("sors-l1", X, y, 900, grid=grid, seed=4, min_budget=100, final=False)
    failed = [t for t in res.trials if t["params"]["eta"] == 5.0][0]
    assert "over_budget" in failed["rungs"][-1] and np.isnan(failed["rungs"][-1]["map"])
    assert res.best_params["eta"] != 5.0 and np.isfinite(res.best_score)


def test_when_the_last_rung_fails_the_best_finished_trial_wins_and_the_final_model_trains(monkeypatch):
    from sparsesim.exceptions import MemoryBudgetError

    X, y = labelled_problem()
    grid = {"eta": [0.05, 0.5, 5.0]}  # rungs of 100 and 300 triplets, then 900
    plain = tune_similarity("sors-l1", X, y, 900, grid=grid, seed=4, min_budget=100, final=False)
    last = plain.best_params["eta"]
    real = SORS.partial_fit_triplets

    def tight(self, X, triplets, *args, **kwargs):
        if self.eta == last and self.max_memory != "auto" and getattr(self, "n_triplets_seen_", 0) + len(triplets) > 300:
            raise MemoryBudgetError("sors-l1: the model would need more than its share")
        return real(self, X, triplets, *args, **kwargs)

    monkeypatch.setattr(SORS, "partial_fit_triplets", tight)
    res = tune_similarity("sors-l1", X, y, 900, grid=grid, seed=4, min_budget=100)
    assert res.best_params["eta"] != last
    winner = [t for t in res.trials if t["params"]["eta"] == res.best_params["eta"]][0]
    assert winner["rungs"][-1]["budget"] == 300 and res.best_score == winner["rungs"][-1]["map"]
    assert res.estimator.n_triplets_seen_ == 900 and res.estimator.max_memory == "auto"


def test_default_grid_brackets_the_auto_values_and_final_model_uses_the_winner():
    X, y = labelled_problem()
    res = tune_similarity("sors-l1", X, y, 900, seed=0, min_budget=100)
    auto = res.info["auto_values"]
    assert res.info["grid"] == default_grid("sors-l1", auto)
    assert len(res.trials) == 18 and auto["eta"] in res.info["grid"]["eta"]
    assert res.info["grid"]["sampler"] == ["uniform", "semihard"]
    est = res.estimator
    steps = {k: v for k, v in est.resolved_params_.items() if k != "max_model_bytes"}  # (a bound of its own corpus)
    chosen = dict(res.best_params)
    assert est.sampler == chosen.pop("sampler")
    assert est.n_triplets_seen_ == 900 and steps == pytest.approx(chosen)
    assert all(len(t["rungs"]) >= 1 for t in res.trials)


def test_parallel_trials_match_sequential():
    X, y = labelled_problem(n=90)
    grid = {"C": [0.01, 0.1, 1.0]}
    one = tune_similarity("oasis", X, y, 600, grid=grid, seed=1, min_budget=100, final=False)
    two = tune_similarity("oasis", X, y, 600, grid=grid, seed=1, min_budget=100, final=False, n_jobs=2)
    assert [t["rungs"][-1]["map"] for t in one.trials] == [t["rungs"][-1]["map"] for t in two.trials]


def test_bad_grid_and_kind_refused():
    X, y = labelled_problem(n=60)
    with pytest.raises(SparsesimError, match="gamma"):
        tune_similarity("sors-l1", X, y, 300, grid={"gamma": [1.0]})
    with pytest.raises(InvalidInputError, match=r"eta must be positive \(a finite number in \(0, inf\)\)"):
        tune_similarity("sors-l1", X, y, 300, grid={"eta": [-1.0]})
    with pytest.raises(InvalidInputError, match="multitask"):
        tune_similarity("omtrsl", X, y, 300)


def test_cli_tune_saves_a_model_and_reports_every_trial(tmp_path, monkeypatch, capsys):
    out = tmp_path / "m.npz"
    code, stdout, err = run_cli(["tune", "--algorithm", "sors-l1", "--dataset", "news20-sample", "--triplets", "600",
                                 "--grid", "eta=0.5,2", "--grid", "lam=1e-6", "--out", out, "--json"],
                                monkeypatch, capsys)
    assert code == 0, err
    summary = json.loads(stdout)
    assert len(summary["tuning"]["trials"]) == 2 and summary["n_triplets"] == 600
    assert summary["best_params"]["eta"] in (0.5, 2)
    code, stdout, err = run_cli(["evaluate", "-m", out, "-d", "news20-sample", "--json"], monkeypatch, capsys)
    assert code == 0 and json.loads(stdout)["split"] == "test"
    code, stdout, err = run_cli(["tune", "-a", "sors-l1", "-d", "news20-sample", "-n", "300", "--grid", "bogus=1",
                                 "-o", tmp_path / "x.npz"], monkeypatch, capsys)
    assert code == 2 and err.startswith("error: ") and "Traceback" not in err
    assert not (tmp_path / "x.npz").exists()


def test_experiment_tune_uses_the_same_search(monkeypatch, capsys):
    code, stdout, err = run_cli(["experiment", "--dataset", "news20-sample", "--algorithms", "cosine,sors-l1",
                                 "--triplets", "600", "--tune", "--option", 'grid={"eta":[0.5,2.0],"lam":[1e-6]}',
                                 "--json"], monkeypatch, capsys)
    assert code == 0, err
    rows = {r["algorithm"]: r for r in json.loads(stdout)["results"]}
    tuned = rows["sors-l1"]
    assert len(tuned["tuning"]["trials"]) == 2 and tuned["tuned_params"]["eta"] in (0.5, 2.0)
    assert tuned["resolved_params"]["eta"] == tuned["tuned_params"]["eta"] and "tuning" not in rows["cosine"]
    code, stdout, err = run_cli(["experiment", "--dataset", "landmine", "--algorithms", "romco-nucl", "--protocol",
                                 "romco", "--tune"], monkeypatch, capsys)
    assert code == 2 and "--tune is available for the sors protocol" in err and "ijcai17" in err


def test_parallel_trials_with_training_threads_beyond_the_cores_are_refused(monkeypatch):
    """Two trials of two threads each on a machine of two cores: the threads of one learner
    wait for each other, so one without a core would stall its partner; the search is refused
    before it starts, with the two ways out."""
    from sparsesim import tuning
    from sparsesim.exceptions import InvalidParameterError

    monkeypatch.delenv("SPARSESIM_SCHEDULER", raising=False)
    monkeypatch.setattr(tuning.halving, "available_cores", lambda: 2)
    monkeypatch.setattr(tuning.halving, "check_n_jobs", lambda value, name="n_jobs": int(value))
    X, y = labelled_problem()
    with pytest.raises(InvalidParameterError, match=r"n_threads=2 with n_jobs=2 .* use n_threads=1"):
        tune_similarity("sors-l1", X, y, 300, params={"n_threads": 2}, n_jobs=2, min_budget=100, final=False)
    from sparsesim.validation import available_cores

    if available_cores() >= 2:  # one trial at a time: its two threads fit
        res = tune_similarity("sors-l1", X, y, 300, grid={"eta": [0.5, 5.0], "lam": [1e-4]}, params={"n_threads": 2},
                              n_jobs=1, min_budget=100, final=False)
        assert res.best_params


@pytest.mark.parametrize("algorithm,grid", [("sors-l1", {"eta": [0.05, 2.0], "lam": [1e-6, 1e-3]}),
                                            ("lego", {"eta": [1e-3, 0.3]}),
                                            ("oasis", {"sampler": ["uniform", "semihard"]})])
def test_sors_protocol_tune_never_sees_the_test_split(monkeypatch, algorithm, grid):
    """Poison the test split (labels moved to other classes, rows replaced by noise): the search's
    trials and choice do not change, the test MAP does, so the reported number never comes from
    parameters chosen on its own test data."""
    from sparsesim.data import LabelledData
    from sparsesim.experiments import sors

    X, y = labelled_problem(n=150, d=20, seed=4)
    train, test = stratified_split(y, 0.7, seed=0)
    monkeypatch.setattr(sors, "stratified_split", lambda *a, **k: (train, test))  # split by the clean labels
    rng = np.random.default_rng(1)
    Xp = X.tolil()
    Xp[test] = sp.random(test.size, X.shape[1], density=0.5, random_state=rng)
    yp = y.copy()
    yp[test] = (yp[test] + 1 + rng.integers(0, 2, test.size)) % 3
    rows = [sors.run_one(LabelledData(X=A.tocsr(), y=b, name="p", info={}), algorithm, 0, 400, {},
                         tune={"grid": grid}) for A, b in ((X, y), (Xp, yp))]
    clean, poisoned = rows
    assert clean["tuned_params"] == poisoned["tuned_params"]
    assert [[r["map"] for r in t["rungs"]] for t in clean["tuning"]["trials"]] == \
        [[r["map"] for r in t["rungs"]] for t in poisoned["tuning"]["trials"]]
    assert len({t["rungs"][0]["map"] for t in clean["tuning"]["trials"]}) > 1  # the candidates do differ
    assert clean["map"] != poisoned["map"]


def test_sors_grid_without_tune_is_reported_as_a_sweep_not_a_selection():
    from sparsesim.experiments import ExperimentConfig, run_experiment, sors

    report = run_experiment("sors", ExperimentConfig(dataset="news20-sample", algorithms=["oasis"], triplets=200,
                                                     options={"grid": {"C": [0.1, 1.0]}}))
    assert report["selection"] == sors.SWEEP_NOTE
    assert "a sweep, not a selection" in sors.format_table(report)
    single = run_experiment("sors", ExperimentConfig(dataset="news20-sample", algorithms=["oasis"], triplets=200))
    assert "selection" not in single and "sweep" not in sors.format_table(single)


@pytest.mark.parametrize("algorithm", ["oasis", "sors-l1", "sors-offdiag", "adasors-l1", "adasors-offdiag"])
def test_the_default_tune_space_of_the_sampled_learners_holds_the_sampler(algorithm):
    grid = default_grid(algorithm, {"C": 1.0, "eta": 1.0, "lam": 1e-6, "delta": 0.01})
    assert grid["sampler"] == ["uniform", "semihard"] and len(grid) >= 2


def test_a_mining_sampler_is_a_dimension_the_trials_train_with(monkeypatch):
    """A trial with ``sampler="semihard"`` sees the stream's anchors and positives with negatives
    mined from other classes (not the stream's own triplets), so the search compares samplers on
    what they learn; the same search twice gives the same scores."""
    from sparsesim.learners.bilinear import OASIS

    X, y = labelled_problem()
    grid = {"sampler": ["uniform", "semihard"]}
    seen = []
    real = OASIS.partial_fit_triplets

    def spy(self, X_, triplets, signs=None):
        seen.append((self.sampler, np.array(triplets)))
        return real(self, X_, triplets, signs)

    monkeypatch.setattr(OASIS, "partial_fit_triplets", spy)
    res = tune_similarity("oasis", X, y, 900, grid=grid, seed=4, min_budget=100, final=False)
    monkeypatch.setattr(OASIS, "partial_fit_triplets", real)
    fit_rows, _ = stratified_split(y, 0.8, seed=4)
    stream = sors_triplets(y[fit_rows], 900, seed=4)
    mined = np.concatenate([t for s, t in seen if s == "semihard" and len(t) > 1])  # (the probe feeds one)
    plain = np.concatenate([t for s, t in seen if s == "uniform" and len(t) > 1])
    np.testing.assert_array_equal(plain, stream[:len(plain)])
    np.testing.assert_array_equal(mined[:, :2], stream[:len(mined), :2])
    assert len(mined) >= 300
    y_fit = y[fit_rows]
    assert np.all(y_fit[mined[:, 2]] != y_fit[mined[:, 0]])
    assert np.mean(mined[:, 2] != stream[:len(mined), 2]) > 0.5  # the pool's pick, not the stream's negative
    uniform, semihard = res.trials
    assert uniform["rungs"][-1]["map"] != semihard["rungs"][-1]["map"]
    again = tune_similarity("oasis", X, y, 900, grid=grid, seed=4, min_budget=100, final=False)
    assert [[r["map"] for r in t["rungs"]] for t in again.trials] == \
        [[r["map"] for r in t["rungs"]] for t in res.trials]


def test_mined_survivors_set_aside_are_rebuilt_exactly():
    """A mining survivor rebuilt from its triplets (``park_bytes=0``) is fed rung by rung as it was
    first fed, so its pools are ranked by the same models and the search sees the same scores."""
    X, y = labelled_problem()
    grid = {"C": [0.05, 5.0], "sampler": ["semihard"], "pool_size": [4, 16]}
    kw = dict(grid=grid, seed=4, min_budget=100, final=False, factor=2)
    held = tune_similarity("oasis", X, y, 900, **kw)
    rebuilt = tune_similarity("oasis", X, y, 900, park_bytes=0, **kw)
    assert [r["budget"] for r in rebuilt.rungs] == [225, 450, 900]  # (not multiples of the mining chunk)
    assert [[r["map"] for r in t["rungs"]] for t in rebuilt.trials] == \
        [[r["map"] for r in t["rungs"]] for t in held.trials]


def test_a_parameter_the_caller_sets_is_not_searched_by_the_default_grid():
    """Explicit parameters win: a paper run's ``sampler="uniform"`` keeps the uniform stream in tune."""
    resolved = {"C": 1.0}
    assert "sampler" in default_grid("oasis", resolved)
    assert "sampler" not in default_grid("oasis", resolved, fixed={"sampler": "uniform"})
    assert default_grid("oasis", resolved, fixed={"sampler": "uniform"})["C"] == default_grid("oasis", resolved)["C"]
