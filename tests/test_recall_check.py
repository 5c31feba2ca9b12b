"""The ann index's candidate stage is checked at load against the recall its manifest claims: crafted
candidate postings or calibration records (every checksum recomputed) are refused, genuine indexes
never are (indexes/recall_check.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from sparsesim.data.synthetic import rcv1_like
from sparsesim.exceptions import FileFormatError
from sparsesim.indexes.ann_postings import CompactPostings
from sparsesim.indexes import build_index, load_index
from sparsesim.indexes.calibration import measure_recall
from sparsesim.indexes.recall_check import check_candidate_stage, recall_threshold
from sparsesim.indexes.verify import verify_derived
from sparsesim.learners.bilinear import OASIS

from clitools import run_cli
from indextools import rehash_index


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    corpus = rcv1_like(1500, n_features=3000, nnz_per_doc=30, n_classes=5, class_vocab=300, seed=3)
    model = OASIS(n_triplets=1500, random_state=0).fit(corpus.X[:1000], corpus.y[:1000]).model_
    root = tmp_path_factory.mktemp("recall")
    build_index(model, corpus.X[:1200], kind="ann", heavy_min_nnz=20, calibration_size=200).save(root / "ann")
    build_index(model, corpus.X[:600], kind="ann", heavy_min_nnz=20, calibration_size=100, dim=8,
                dense_pool=20).save(root / "dense")
    return root, model, corpus


def _copy(root: Path, name: str, dst: Path) -> Path:
    shutil.copytree(root / name, dst)
    return dst


_ENTRY_PARTS = ("ids", "ids_hi", "ids32", "codes")  # one element per list entry (the others: per list)


def _postings(directory: Path):
    """The ann index's compact lists as stored: {part: array}."""
    manifest = json.loads((directory / "manifest.json").read_text())
    data = directory / manifest["data_dir"]
    arrays = {f.name[len("postings."):-len(".npy")]: np.load(f) for f in data.glob("postings.*.npy")}
    return data, arrays


def _write_postings(directory: Path, arrays) -> None:
    folder, _ = _postings(directory)
    for part, arr in arrays.items():
        np.save(folder / f"postings.{part}.npy", arr, allow_pickle=False)
    rehash_index(directory)


def _keep(arrays, keep_entry):
    """Lists with only the entries where ``keep_entry(rank in its list)`` holds (order kept)."""
    indptr = arrays["indptr"]
    lengths = np.diff(indptr)
    rank = np.arange(indptr[-1]) - np.repeat(indptr[:-1], lengths)
    keep = keep_entry(rank)
    new_indptr = np.zeros_like(indptr)
    np.cumsum(np.add.reduceat(keep.astype(np.int64), indptr[:-1]) * (lengths > 0), out=new_indptr[1:])
    out = dict(arrays, indptr=new_indptr)
    for part in _ENTRY_PARTS:
        if part in arrays and arrays[part].shape[0] == keep.shape[0]:
            out[part] = arrays[part][keep]
    return out


POSTINGS_ATTACKS = {
    # values stay exact X M^T and impact-ordered: only which documents are listed changes
    "every list cut to its first 2 entries": lambda rank: rank < 2,
    "every list loses its best entry": lambda rank: rank > 0,
    "every list loses its entries 3 to 10": lambda rank: (rank < 3) | (rank > 10),
}


@pytest.mark.parametrize("attack", sorted(POSTINGS_ATTACKS))
def test_crafted_candidate_postings_refused(built, tmp_path, attack):
    root, _, _ = built
    d = _copy(root, "ann", tmp_path / "idx")
    _, arrays = _postings(d)
    crafted_arrays = _keep(arrays, POSTINGS_ATTACKS[attack])
    # the attack is real: served with these lists the index finds fewer of the exact top 10
    index = load_index(root / "ann")
    rows = np.arange(0, 1200, 6)
    (honest, _), = measure_recall(index, rows, 10, [index.search_setting()])
    index.postings_ = CompactPostings.from_arrays({f"postings.{k}": v for k, v in crafted_arrays.items()},
                                                  index.postings_.shape)
    (lowered, _), = measure_recall(index, rows, 10, [index.search_setting()])
    assert lowered.mean() < honest.mean()
    _write_postings(d, crafted_arrays)
    for _ in range(3):  # verify=False: the check runs on every load
        with pytest.raises(FileFormatError, match="posting lists .* (leave out|values)"):
            load_index(d, verify=False)
    with pytest.raises(FileFormatError, match="altered"):
        load_index(d, mmap=True)


@pytest.mark.parametrize("budget", [1, 2 << 20])
def test_list_check_memory_is_bounded_by_blocks_of_features(built, tmp_path, monkeypatch, budget):
    """The dense columns of Y are formed a block of features at a time within the check's memory
    budget (one feature per block at the smallest); the verdicts do not depend on the block."""
    from sparsesim.indexes import recall_check

    monkeypatch.setattr(recall_check, "_CHECK_MEMORY", budget)
    blocks = []
    real = recall_check._check_chunk
    monkeypatch.setattr(recall_check, "_check_chunk", lambda lists, f, Y, B, e: (blocks.append(Y.nbytes),
                                                                                   real(lists, f, Y, B, e)))
    root, _, _ = built
    load_index(root / "ann", verify=False)  # genuine: passes
    assert blocks and max(blocks) <= max(budget, 8 * 1200)
    d = _copy(root, "ann", tmp_path / "idx")
    _, arrays = _postings(d)
    _write_postings(d, _keep(arrays, POSTINGS_ATTACKS["every list loses its best entry"]))
    with pytest.raises(FileFormatError, match="posting lists .* leave out"):
        load_index(d, verify=False)


def test_crafted_postings_refused_by_the_cli(built, tmp_path, monkeypatch, capsys):
    root, _, corpus = built
    from sklearn.datasets import dump_svmlight_file

    d = _copy(root, "ann", tmp_path / "idx")
    _, arrays = _postings(d)
    _write_postings(d, _keep(arrays, lambda rank: rank < 2))
    dump_svmlight_file(corpus.X[1300:1303], corpus.y[1300:1303], str(tmp_path / "q.svm"), zero_based=True)
    code, out, err = run_cli(["query", "--index", d, "--queries", tmp_path / "q.svm"], monkeypatch, capsys)
    assert code == 2 and out == "" and err.startswith("error:") and "altered" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def _edit_record(directory: Path, edit) -> None:
    def manifest_edit(manifest):
        edit(manifest["state"]["calibration"], manifest)

    rehash_index(directory, manifest_edit)


RECORD_ATTACKS = {
    "absurd sparse pool": ("ann", lambda r, m: r["setting"].update(sparse_pool=10**9), "sparse_pool"),
    "huge n_postings": ("ann", lambda r, m: r["setting"].update(n_postings=2**39), "n_postings"),
    "both stages off": ("ann", lambda r, m: r["setting"].update(n_postings=0, sparse_pool=0), "both candidate"),
    "nprobe 0": ("dense", lambda r, m: r["setting"].update(nprobe=0), "nprobe"),
    "nprobe huge": ("dense", lambda r, m: r["setting"].update(nprobe=2**39), "nprobe"),
    "dense pool beyond the corpus": ("dense", lambda r, m: r["setting"].update(dense_pool=10**6), "dense_pool"),
    "a dense option on a sparse index": ("ann", lambda r, m: r["setting"].update(nprobe=4), "names"),
    "recall above its hits": ("ann", lambda r, m: r.update(recall=1.0, recall_lower_bound=1.0), "hits"),
    "hits and recall raised together": ("ann", lambda r, m: r.update(hits=[10] * len(r["hits"]), recall=1.0,
                                                                     recall_lower_bound=1.0), "finds"),
    "met without its lower bound": ("ann", lambda r, m: r.update(met=not r["met"]), "disagree"),
    "met with a corpus-weighted bound below target": ("ann", lambda r, m: r.update(
        met=True, corpus_weighted={"recall": 0.5, "recall_lower_bound": 0.4}), "disagree"),
    "corpus-weighted bound above its recall": ("ann", lambda r, m: r.update(
        corpus_weighted={"recall": 0.5, "recall_lower_bound": 0.9}), "corpus_weighted"),
    "met with a balanced bound below target": ("ann", lambda r, m: r.update(
        met=True, balanced={"recall": 0.5, "recall_lower_bound": 0.4}), "disagree"),
    "balanced bound above its recall": ("ann", lambda r, m: r.update(
        balanced={"recall": 0.5, "recall_lower_bound": 0.9}), "balanced"),
    "more settings than the grid": ("ann", lambda r, m: r.update(n_settings=10**6), "settings"),
    "another corpus size": ("ann", lambda r, m: r.update(n_documents=5000), "documents"),
    "another model": ("ann", lambda r, m: r.update(model_checksum="0" * 64), "model"),
    "explicit pool of 1 in the parameters": ("ann", lambda r, m: m["params"].update(sparse_pool=1),
                                             "queries use"),
}


@pytest.mark.parametrize("attack", sorted(RECORD_ATTACKS))
def test_crafted_calibration_records_refused(built, tmp_path, attack):
    root, _, _ = built
    name, edit, match = RECORD_ATTACKS[attack]
    d = _copy(root, name, tmp_path / "idx")
    _edit_record(d, edit)
    with pytest.raises(FileFormatError, match=match):
        load_index(d, verify=False)


def test_fresh_recall_probe_refuses_a_stage_below_its_record(built):
    """With no replayable sample (an older record) only the fresh probes stand between a record
    and its index: a setting far below the recorded recall is refused by them."""
    root, _, _ = built
    index = load_index(root / "ann")
    record = index.calibration_
    for key in ("sample_seed", "random_state", "hits"):
        record.pop(key, None)
    check_candidate_stage(index, np.random.default_rng(0))  # the genuine setting passes
    record["setting"] = {"n_postings": 1, "sparse_pool": 2}
    rows = np.arange(1, 1200, 7)
    (low, _), = measure_recall(index, rows, 10, [index.search_setting()])
    assert low.mean() < recall_threshold(record["recall"], record["n_queries"], record["n_settings"], 64) - 0.1
    for seed in range(5):
        with pytest.raises(FileFormatError, match="fresh held-out"):
            check_candidate_stage(index, np.random.default_rng(seed))


def test_recall_threshold_bounds():
    # stricter with more calibration queries and probes, never above the recorded recall
    assert recall_threshold(0.97, 300, 72, 64) < recall_threshold(0.97, 300, 72, 1000) < 0.97
    assert recall_threshold(0.97, 30, 72, 64) < recall_threshold(0.97, 3000, 72, 64)
    assert recall_threshold(1.0, 300, 1, 64) > recall_threshold(0.9, 300, 1, 64)
    # the probe mean of a genuine index at the lower confidence level falls below it rarely
    rng = np.random.default_rng(0)
    tau = recall_threshold(0.9, 300, 1, 64)
    means = rng.binomial(64, 0.9, size=100_000) / 64
    assert (means < tau).mean() == 0.0


@pytest.mark.parametrize("seed", range(2))
def test_genuine_indexes_never_refused(built, tmp_path, seed):
    """Fresh builds (other corpora, models and calibration samples), checked with many probe draws."""
    _, _, corpus = built
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(1500, size=900, replace=False))
    model = OASIS(n_triplets=800, random_state=seed).fit(corpus.X[rows[:600]], corpus.y[rows[:600]]).model_
    index = build_index(model, corpus.X[rows], kind="ann", heavy_min_nnz=20, calibration_size=150,
                        random_state=seed)
    index.save(tmp_path / "idx")
    loaded = load_index(tmp_path / "idx", verify=False)
    for probe_seed in range(15):
        verify_derived(loaded, seed=1000 * seed + probe_seed)
    # grown by `add` (the record is measured again) and by an older sparsesim's record (no sample kept)
    loaded.add(corpus.X[np.setdiff1d(np.arange(1500), rows)[:200]], ids=list(range(10_000, 10_200)))
    assert loaded.calibration_["n_documents"] == 1100 and loaded.calibration_.get("remeasured")
    loaded.save(tmp_path / "grown")
    for probe_seed in range(5):
        verify_derived(load_index(tmp_path / "grown", verify=False), seed=probe_seed)
    old = _copy(tmp_path, "idx", tmp_path / "old")
    _edit_record(old, lambda r, m: [r.pop(k) for k in ("hits", "sample_seed")])
    load_index(old, verify=False)


def test_stale_record_of_a_grown_index_is_recalibrated(built, tmp_path, monkeypatch, capsys):
    root, _, _ = built
    d = _copy(root, "ann", tmp_path / "idx")
    _edit_record(d, lambda r, m: r.update(n_documents=r["n_documents"] - 100))
    with pytest.raises(FileFormatError, match="index calibrate"):
        load_index(d, verify=False)
    code, _, err = run_cli(["index", "calibrate", "--index", d], monkeypatch, capsys)
    assert code == 0, err
    assert load_index(d, verify=False).calibration_["n_documents"] == 1200
