"""benchmarks/bench_manyclass.py: its config syntax, the per-class cut of its test beds and one
validation run on a small synthetic many-class corpus (the report it writes)."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parent.parent


def _bench():
    spec = importlib.util.spec_from_file_location("bench_manyclass", ROOT / "benchmarks" / "bench_manyclass.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_parse_config_explicit_and_scaled():
    bench = _bench()
    assert bench.parse_config("fast=sors-l1:eta*0.5,schedule=invsqrt,lam=0") == (
        "fast", "sors-l1", {"schedule": "invsqrt", "lam": 0}, {"eta": 0.5})
    assert bench.parse_config("oasis=oasis") == ("oasis", "oasis", {}, {})
    assert bench.parse_config("avg=oasis:averaging=true")[2] == {"averaging": True}


def test_cap_keeps_at_most_cap_per_class_and_drops_small_classes():
    bench = _bench()
    y = np.repeat([0, 1, 2, 3], [50, 7, 1, 30])
    X = sp.csr_matrix(np.arange(y.size, dtype=float)[:, None] + 1.0)
    Xc, yc = bench._cap(X, y, 20)
    counts = dict(zip(*np.unique(yc, return_counts=True)))
    assert counts == {0: 20, 1: 7, 3: 20}  # class 2 (one document) left out
    assert np.array_equal(yc, y[(Xc.toarray().ravel() - 1).astype(int)])  # rows and labels stay paired
    Xd, yd = bench._cap(X, y, 20)
    assert (Xd != Xc).nnz == 0 and np.array_equal(yd, yc)  # a fixed choice


def test_validation_run_writes_a_report(tmp_path):
    bench = _bench()
    assert bench.main(["--dataset", "synthetic-12x12", "--triplets", "300", "--split", "validation",
                       "--out", str(tmp_path), "--config", "oasis=oasis",
                       "--config", "half=sors-l1:eta*0.5,initial_capacity=256"]) == 0
    report = json.loads((tmp_path / "bench_manyclass_synthetic-12x12_validation_300_s0.json").read_text())
    assert report["n_classes"] == 12 and report["split"] == "validation"
    oasis, half = report["rows"]
    assert 0 < oasis["map"] <= 1 and 0 < half["map"] <= 1
    assert half["scale"] == {"eta": 0.5} and half["params"] == {"initial_capacity": 256}
    # the multiplier applies to the value "auto" resolves on the fit part of the split
    from sparsesim.registry import make_estimator
    from sparsesim.triplets import stratified_split

    X, y = bench.load("synthetic-12x12")
    train, _ = stratified_split(y, 0.7, seed=0)
    fit, _ = stratified_split(y[train], 0.7, seed=0)
    auto = make_estimator("sors-l1", n_triplets=300).resolve_params(X[train[fit]])
    assert np.isclose(half["resolved_params"]["eta"], 0.5 * auto["eta"])
    assert np.isclose(half["resolved_params"]["lam"], auto["lam"])
