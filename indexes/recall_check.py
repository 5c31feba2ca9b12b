"""Checks that an ann index's candidate stage delivers the recall its manifest claims.

The ann index only *chooses* which documents are re-ranked (scores are always exact), so a file
whose candidate postings, projection or FAISS structure were replaced -- and every checksum
recomputed -- cannot change a score, but it can lower recall; and the calibration record in the
manifest (the chosen search setting and the recall measured with it) could claim a recall the
index does not have. Three checks, run with the other derived-array checks
(:func:`sparsesim.indexes.verify.verify_derived`, once per index content):

1. **The record is consistent** (:func:`check_setting`, at every load): the setting names exactly
   the index's search options, each within its range (pools at most the corpus, ``n_postings``
   at most the list length, ``nprobe`` in [1, nlist]), it is the setting queries use, the record
   describes this corpus size, this model and these postings, its lower bound and ``met`` agree
   with its recall.
2. **The recorded recall is replayed**: a calibration on held-out corpus documents records the
   rows (or the seed) of its certification sample and each query's hits (how many of its top k are exact top-k results), so
   ``replay`` (32) of its queries, chosen afresh, are drawn again, answered with the recorded
   setting and compared with the exact top-k; each must find exactly its recorded hits. A record
   whose hits overstate the index on a share g of its queries escapes with probability at most
   (1 - g)^32 (an older record without hits is replayed whole: its recall must be the recorded
   one within one result).
3. **Fresh probes** (new random corpus documents on every check, so a file cannot be crafted
   against them):

   * *posting lists*: for ``list_probes`` (32) of them, every posting list the query reads is
     recomputed from the corpus and the model -- the column Y[:, i] of Y = X M^T -- and the
     stored list must hold exactly its largest positive values (values within float32 rounding,
     no document missing whose value exceeds the last one kept, up to the list length of the
     last full build). A held-out query whose lists are all exact gets exactly the candidates of
     a genuine index, so a crafted list file that lowers recall on held-out queries by X (hence
     changes the candidates of at least a share X of them) is caught with probability at least
     1 - (1 - X)^32: 0.81 for X = 0.05, 0.97 for X = 0.1, 0.999 for X = 0.2.
   * *recall*: ``recall_probes`` (64) of them are answered and compared with the exact top-k.
     The per-query recalls r_i lie in [0, 1], so by the Chernoff-Hoeffding bound a mean of n
     of them falls below mu - t with probability at most exp(-n KL(mu - t || mu)) whatever their
     distribution. From the recorded recall (n_cal queries, chosen among n_settings settings)
     the true recall is at least mu_L = the KL lower bound at level delta / n_settings; the index
     is refused when the probes' mean is below tau = the KL lower bound of mu_L at level delta
     (delta = 1e-6). A genuine index is refused with probability at most 2e-6; an index whose
     true recall is mu' < tau is refused with probability at least 1 - exp(-64 KL(tau || mu')).
     This end-to-end probe is what covers the dense (FAISS) stage and postings built with an
     earlier model; it catches large drops only (recorded 0.97 on 300 queries, the best of 72
     settings: tau = 0.57).

A record calibrated on queries the user passed (not corpus documents) cannot be replayed or
compared with corpus probes; for it the record's consistency and the posting-list probes are
checked.
"""

from __future__ import annotations

import math

import numpy as np

from sparsesim.csr_rows import take_rows
from sparsesim.exceptions import FileFormatError

from .base import kernels as index_kernels
from .calibration import held_out_sample, hits_of, measure_recall, summary

__all__ = ["check_setting", "check_candidate_stage", "kl_lower_bound"]

DELTA = 1e-6  # each of the two terms of the false-refusal probability of the recall probe
RECALL_PROBES = 64  # fresh held-out corpus queries answered and compared with the exact top-k
LIST_PROBES = 32  # of them, queries whose every posting list is recomputed
REPLAY = 32  # of the record's own held-out queries, answered again
_RTOL32 = 1e-5  # posting values are float32 (rounding 2^-24 relative) of float64 sums
_CHECK_MEMORY = 256 << 20  # bytes for the dense columns of Y checked at once
_BYTES_PER_CELL = 64  # per feature and document: Y, its bound, the kept mask and the comparison's temporaries


def _fail(message: str):
    raise FileFormatError(f"{message}; the file was altered")


# --------------------------------------------------------------------------- the record
def check_setting(index, record: dict) -> None:
    """Refuse a calibration record that is out of range or does not describe ``index``."""
    n = index.n_documents
    dense = index._dense_on
    setting = record["setting"]
    names = {"n_postings", "sparse_pool"} | ({"dense_pool", "nprobe"} if dense else set())
    if set(setting) != names:
        _fail(f"the calibration record's setting names {sorted(setting)}, the index searches with {sorted(names)}")
    n_rec = record.get("n_documents", n)
    if n_rec > n:
        _fail(f"the calibration record describes {n_rec} documents, the index holds {n}")
    grid = [options for family in index.calibration_grid(record["top_k"]) for options in family]
    L = index.postings_length_ or 1
    limits = {"n_postings": (0, L), "sparse_pool": (0, n_rec), "dense_pool": (0, n_rec),
              "nprobe": (1, index.nlist_ or 1)}
    for name in names:
        lo, hi = limits[name]
        value = setting[name]
        # beyond the range only a value the calibration itself tries (an explicit parameter, a fallback)
        if not lo <= value <= hi and value not in {options[name] for options in grid}:
            _fail(f"the calibration record's {name}={value} is outside [{lo}, {hi}]")
    if not (setting["n_postings"] and setting["sparse_pool"]) and not (dense and setting["dense_pool"]):
        _fail("the calibration record's setting disables both candidate stages")
    used = index.search_setting()
    for name in names:
        recorded = min(setting[name], L) if name == "n_postings" and setting[name] else setting[name]
        if used[name] != recorded:
            _fail(f"the calibration record's {name}={setting[name]} is not the value queries use ({used[name]})")
    corpus_sample = record["queries"].startswith("corpus sample")
    if corpus_sample and (record["n_queries"] > n_rec - 1 or record["top_k"] > n_rec - 1):
        _fail(f"the calibration record's {record['n_queries']} held-out queries / top_k={record['top_k']} do not "
              f"fit {n_rec} documents")
    # met: the bound of the sample as drawn and of each stratified estimate the record holds
    strata_met = all((record.get(name) or {}).get("recall_lower_bound", 1.0) >= record["target_recall"]
                     for name in ("corpus_weighted", "balanced"))
    if record["recall_lower_bound"] > record["recall"] + 1e-12 or \
            record["met"] != (record["recall_lower_bound"] >= record["target_recall"] and strata_met):
        _fail("the calibration record's recall, lower bound and 'met' disagree")
    hits = record.get("hits")
    if hits is not None:
        k = record["top_k"]
        if len(hits) != record["n_queries"] or not all(
                isinstance(h, int) and not isinstance(h, bool) and 0 <= h <= k for h in hits):
            _fail(f"the calibration record's hits are not {record['n_queries']} counts in [0, {k}]")
        recall, lower = summary(np.asarray(hits, dtype=np.float64) / k)
        if abs(recall - record["recall"]) > 1e-9 or abs(lower - record["recall_lower_bound"]) > 1e-9:
            _fail(f"the calibration record's recall {record['recall']:.4f} (lower bound "
                  f"{record['recall_lower_bound']:.4f}) is not that of its hits ({recall:.4f}, {lower:.4f})")
    if record["model_checksum"] != index.model_checksum():
        _fail("the calibration record was measured with another model than the index serves")
    postings_model = record.get("postings_model_checksum")
    if postings_model is not None and postings_model != index.postings_model_:
        _fail("the calibration record was measured with other postings than the index holds")
    n_settings = record.get("n_settings")
    if n_settings is not None and n_settings > len(grid):
        _fail(f"the calibration record claims {n_settings} settings measured, the index has {len(grid)}")


# --------------------------------------------------------------------------- statistics
def _kl(p: float, q: float) -> float:
    """KL divergence of Bernoulli(p) from Bernoulli(q)."""
    out = 0.0
    if p > 0:
        out += p * math.log(p / q)
    if p < 1:
        out += (1 - p) * math.log((1 - p) / (1 - q))
    return out


def kl_lower_bound(mean: float, n: int, log_term: float) -> float:
    """The smallest mu <= ``mean`` with n KL(mean || mu) <= ``log_term``: a mean of n variables in
    [0, 1] falls this far below their expectation with probability at most exp(-log_term)."""
    if mean <= 0.0:
        return 0.0
    lo, hi = 0.0, float(mean)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if mid <= 0.0 or n * _kl(mean, mid) > log_term:
            lo = mid
        else:
            hi = mid
    return hi


def recall_threshold(recorded: float, n_calibration: int, n_settings: int, n_probes: int,
                     delta: float = DELTA) -> float:
    """The probe mean below which an index with this recorded recall is refused (see the module)."""
    mu_low = kl_lower_bound(recorded, n_calibration, math.log(max(n_settings, 1) / delta))
    return kl_lower_bound(mu_low, n_probes, math.log(1 / delta))


# --------------------------------------------------------------------------- the checks
def check_candidate_stage(index, rng, recall_probes: int = RECALL_PROBES, list_probes: int = LIST_PROBES,
                          replay: int = REPLAY, record_checks: bool = True) -> None:
    """Replay the calibration record and probe the candidate stage (see the module docstring).

    ``record_checks=False`` probes the posting lists only (for a caller about to replace the
    record, such as ``sparsesim index calibrate``).

    Raises
    ------
    FileFormatError
        The record does not hold on replay, a probed posting list differs from the corpus and
        model, or the probes' recall is below what the record allows.
    """
    record = index.calibration_
    n = index.n_documents
    if n < 3:
        return
    setting = index.search_setting()
    probes = rng.choice(n, size=min(max(recall_probes, list_probes), n - 1), replace=False).astype(np.int64)
    if setting["n_postings"] > 0 and setting["sparse_pool"] > 0 and index.postings_model_ == index.model_checksum():
        _check_lists(index, np.sort(probes[:list_probes]))
    if not record_checks or record is None or not record["queries"].startswith("corpus sample"):
        return
    k = int(record["top_k"])
    if record.get("n_documents", n) != n:
        raise FileFormatError(f"the calibration record describes {record['n_documents']} documents, the index holds "
                              f"{n} (documents added by an earlier sparsesim); recalibrate it with "
                              f"`sparsesim index calibrate`")
    _replay(index, record, setting, rng, replay)
    probes = np.sort(probes[:recall_probes])
    (per_query, _), = measure_recall(index, probes, k, [setting])
    threshold = recall_threshold(record["recall"], int(record["n_queries"]), int(record.get("n_settings") or 1),
                                 per_query.size)
    if float(per_query.mean()) < threshold:
        _fail(f"the candidate stage reaches recall@{k} {per_query.mean():.3f} on {per_query.size} fresh held-out "
              f"queries; its calibration record ({record['recall']:.3f}) allows no less than {threshold:.3f}")


def _replay(index, record, setting, rng, replay: int) -> None:
    """Answer the record's own held-out queries again (a fresh random subset of them when the
    record stores per-query hits, all of them otherwise) and compare."""
    seed = record.get("sample_seed", record.get("random_state"))
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        return  # an older record with an unrecorded sample: the fresh probes below still run
    k, n_cal, n = int(record["top_k"]), int(record["n_queries"]), index.n_documents
    rows = held_out_sample(n, n_cal, seed) if record.get("rows") is None else np.asarray(record["rows"], np.int64)
    if rows.size and rows.max() >= n:
        _fail(f"the calibration record's rows reach {int(rows.max())}, the index holds {n} documents")
    hits = record.get("hits")
    if hits is None:
        (per_query, _), = measure_recall(index, rows, k, [setting])
        if abs(float(per_query.mean()) - record["recall"]) > 1.0 / (k * n_cal) + 1e-9:
            _fail(f"the calibration record claims recall@{k} {record['recall']:.4f}; replayed on its own "
                  f"{n_cal} queries the index reaches {per_query.mean():.4f}")
        return
    chosen = np.sort(rng.choice(n_cal, size=min(replay, n_cal), replace=False))
    (per_query, _), = measure_recall(index, rows[chosen], k, [setting])
    got = np.asarray(hits_of(per_query, k))
    want = np.asarray(hits, dtype=np.int64)[chosen]
    if np.any(got != want):
        bad = int(np.flatnonzero(got != want)[0])
        _fail(f"the calibration record says its held-out query {int(rows[chosen[bad]])} finds {want[bad]} of its "
              f"top {k}; the index finds {got[bad]}")


def _check_lists(index, queries: np.ndarray) -> None:
    """Every posting list read by the corpus rows ``queries`` against the column of Y it prunes.

    The columns are formed densely, a block of features at a time sized so that the block takes
    at most ``_CHECK_MEMORY`` bytes whatever the corpus size (the work is one pass over the
    inverted lists of the features' model rows; memory does not grow with it)."""
    X = index.X_
    features = np.unique(take_rows(X, queries).indices)
    if features.size == 0:
        return
    # lists are exact top lists up to the length of the last full build: documents added later
    # are merged into them, and a longer list after growth holds the old top plus the new ones
    exact_length = index._postings_length(max(1, int(index.n_fit_documents_ or X.shape[0])))
    n = X.shape[0]
    XT = X.T.tocsr()  # the corpus's own inverted lists: row i of M X^T is column i of Y
    W = index.model.W.tocsr()
    kernels = index_kernels()
    block = int(max(1, min(features.size, _CHECK_MEMORY // (_BYTES_PER_CELL * max(n, 1)))))
    Y = np.empty((block, n))
    B = np.empty((block, n))
    for lo in range(0, features.size, block):
        chunk = features[lo:lo + block]
        kernels.columns_of_y(chunk.astype(np.int64), W.indptr, W.indices, W.data, bool(index.model.identity),
                             XT.indptr, XT.indices, XT.data, Y, B)
        _check_chunk(index.postings_.rows(chunk), chunk, Y[:chunk.size], B[:chunk.size], exact_length)


def _check_chunk(lists, features, Y, B, exact_length: int) -> None:
    """The posting ``lists`` (indptr, docs, decoded values, error bound per list) of
    ``features`` against the dense columns ``Y`` of Y = X M^T of these features (one row each)
    and their rounding bound ``B``."""
    indptr, docs, vals, err = lists
    f, n = Y.shape
    lengths = np.diff(indptr)
    rows = np.repeat(np.arange(f), lengths)
    quant = np.repeat(err, lengths) * (1 + _RTOL32)
    if docs.size and (docs.min() < 0 or docs.max() >= n):
        _fail("the ann index's posting lists name documents outside the corpus")
    pkeys = rows * n + docs
    if np.any(np.diff(np.sort(pkeys)) == 0):
        _fail("the ann index's posting lists name a document twice in one list")
    want = Y[rows, docs]
    slack = quant + _RTOL32 * (B[rows, docs] + np.abs(want) + np.abs(vals)) + 1e-30
    bad = ~(np.abs(vals - want) <= slack) | ~(want > 0)
    if bad.any():
        _fail(f"the ann index's posting lists of features {_some(features, rows, bad)} hold values that are not X M^T")
    # per list: its first p = min(length, exact_length) entries must be the p largest positive values
    p = np.minimum(lengths, exact_length)
    rank = np.arange(pkeys.size) - np.repeat(indptr[:-1], lengths)
    prefix = rank < np.repeat(p, lengths)
    last = indptr[:-1] + p - 1
    floor = np.where((p == exact_length) & (p > 0), vals[np.maximum(last, 0)] if vals.size else 0.0, 0.0)
    kept = np.zeros((f, n), dtype=bool)
    kept[rows[prefix], docs[prefix]] = True
    floor = floor + err * (1 + _RTOL32)  # the decoded last value is within the error bound of the kept one
    missing = (Y > (floor * (1 + _RTOL32))[:, None] + _RTOL32 * (B + np.abs(Y)) + 1e-30) & ~kept
    if missing.any():
        frows = np.flatnonzero(missing.any(axis=1))
        _fail(f"the ann index's posting lists of features {_some(features, frows, np.ones(frows.size, bool))} "
              f"leave out documents of larger value than they keep")


def _some(features, rows, mask) -> str:
    return ", ".join(str(int(f)) for f in np.unique(features[rows[mask]])[:3])
