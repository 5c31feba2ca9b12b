"""Recall calibration of an approximate index: measure, on sample queries, the fastest search setting
whose recall@k against the exact top-k meets a target.

How it works (:func:`calibrate`):

1. **Queries: two disjoint samples.** Either given (``queries``, e.g. a log of real queries:
   split at random, seeded, into a selection half and a certification half), or two disjoint
   *stratified* samples of corpus documents, ``n_queries`` each: the strata are the labels when
   ``strata`` is given, else the clusters of a seeded k-means on a sparse random projection of
   the corpus (:func:`corpus_strata`); half of each sample takes the same number of documents
   from every stratum (a smaller stratum gives all it has, the others share the rest), the other
   half takes them in proportion to the strata's sizes (:func:`stratified_split` with
   ``proportional=0.5``), so that both estimates below have enough queries in every stratum
   that matters to them. Corpus documents are used as *held-out* queries: the document
   itself is removed from both the exact and the approximate answer (a self-match is always
   found and would inflate the measured recall), so the measurement speaks for queries that are
   not in the corpus, and is conservative for self-queries.
2. **Truth.** The exact top-k of every calibration query under the index's model, computed with
   an :class:`~sparsesim.indexes.exact.ExactIndex` over the stored corpus (no copy of it).
3. **Grid.** The index lists its search settings (:meth:`AnnIndex.calibration_grid`) in
   families ordered cheapest first (e.g. growing pool sizes at a fixed number of postings read);
   settings are run on all calibration queries, and a family stops at its first setting that
   meets the target. Recall@k counts a returned document as a hit when its exact score reaches
   the k-th exact score (ties count).
4. **Choice, on the selection sample only.** Among the settings whose recall minus 2 x 1.645
   standard errors of the per-query recall meets the target, on the sample as drawn and on two
   stratified estimates (sum W_h ybar_h, variance sum W_h^2 s_h^2 / n_h:
   :func:`stratified_summary`): *balanced* (every stratum alike, as a balanced sample draws,
   :func:`balanced_shares`) and *corpus-weighted* (W_h = the stratum's share of the corpus,
   :func:`corpus_weighted_summary`, so a dominant stratum with low recall cannot hide behind many
   small ones) (one 1.645 for the selection sample,
   one for the certification sample to come, so that a setting truly at the margin passes
   certification), the one with the highest measured queries per CPU-second is chosen (the qualifying settings are re-timed, best
   of three, so one disturbed run on a shared machine does not decide). If none qualifies, the
   setting with the highest recall is chosen.
5. **Certification, on the certification sample only.** The chosen setting alone is measured on
   the second sample, which played no part in the choice; the recorded recall, its one-sided 95%
   lower bound (mean - 1.645 standard errors), the balanced and the corpus-weighted recall and
   their bounds (``balanced``, ``corpus_weighted``), and ``met`` (every bound >= target) come from
   this measurement. Being one pre-chosen setting on fresh queries, the bound needs no correction for
   the number of settings tried (the best of ~60 settings measured on the same queries would
   overstate its recall: the winner's curse). The recall of each stratum and its share of the corpus are recorded too.

The record (:class:`dict`, stored in the index manifest under ``state.calibration``) names the
setting, the certified recall and its bound, the queries/s (``qps_one_thread`` on the selection
sample, best of three; ``qps_certification``), the fastest setting measured (``fastest``, with
its recall: what the target costs), the number and source of the
certification queries (and, for corpus samples, their rows and per-query hits, so a load-time
check can replay them), the recall per stratum, what the selection sample measured, the target,
k, and the checksum of the model the calibration was measured with.
"""

from __future__ import annotations

import math
import time
import warnings

import numpy as np

from sparsesim.csr_rows import take_rows
from sparsesim.exceptions import FileFormatError, InvalidInputError
from sparsesim.validation import check_meta

from .base import drop_own_rows, prepare_rows
from .calibration_samples import (balanced_shares, corpus_strata, corpus_weighted_summary, recall_by_stratum,
                                  stratified_split, stratified_summary)
from .exact import ExactIndex

__all__ = ["calibrate", "exact_top_k", "recall_counting_ties", "check_target_recall", "check_record",
           "held_out_sample", "hits_of", "measure_recall", "remeasure", "summary", "corpus_strata",
           "stratified_split", "recall_by_stratum", "CALIBRATION_SCHEMA"]

_Z_ONE_SIDED_95 = 1.645
PROPORTIONAL_SHARE = 0.5  # of a corpus calibration sample drawn in proportion to the strata, the rest balanced

# the record as stored in an index manifest (state.calibration); files are untrusted
CALIBRATION_SCHEMA = {
    "target_recall": ("float", 0.0, 1.0),
    "top_k": ("int", 1, 2**40),
    "met": ("bool",),
    "setting": ("dict",),
    "recall": ("float", 0.0, 1.0),
    "recall_lower_bound": ("float", -1.0, 1.0),
    "qps_one_thread": ("float?", 0.0, None),
    "n_queries": ("int", 1, 2**40),
    "queries": ("str",),
    "model_checksum": ("str",),
    "postings_model_checksum": ("str?",),
    "n_documents": ("int?", 1, 2**40),
    "n_settings": ("int?", 1, 2**20),
    "sample_seed": ("int?", 0, 2**63 - 1),
    "hits": ("list?",),  # per held-out query, how many of its top_k results are exact top-k results
    "rows": ("list?",),  # the corpus rows of the certification sample (held-out queries)
    "strata": ("dict?",),  # {"by": "label" | "cluster", "recall": {name: {"n": int, "recall": float}}}
    "selection": ("dict?",),  # the selection sample: n_queries, recall and bound of the chosen setting
    # the recall of a query drawn in proportion to the corpus, estimated from the stratified sample
    "corpus_weighted": ("dict?",),  # {"recall": float, "recall_lower_bound": float}
    # the recall of a query drawn equally from every stratum (as a balanced sample draws), estimated
    "balanced": ("dict?",),  # {"recall": float, "recall_lower_bound": float}
    "qps_certification": ("float?", 0.0, None),  # the chosen setting, timed on the certification sample
    "fastest": ("dict?",),  # the fastest setting measured on the selection sample, whatever its recall
    "proportional_share": ("float?", 0.0, 1.0),  # of the corpus samples drawn in proportion to the strata
    "read_allocation": ("str?",),  # an ann index's read allocation the setting was chosen under
    # read_allocation="auto": per allocation compared, its choice on the selection sample
    "allocations": ("dict?",),  # {allocation: {"setting", "qps", "recall", "qualified"}}
}
_SETTING_KEYS = ("n_postings", "sparse_pool", "dense_pool", "nprobe")


def check_record(record, what: str) -> dict:
    """A calibration record read from a file, validated (FileFormatError on anything else)."""
    check_meta(record, CALIBRATION_SCHEMA, what)
    rows = record.get("rows")
    if rows is not None and (len(rows) != record["n_queries"] or not all(
            isinstance(r, int) and not isinstance(r, bool) and 0 <= r < 2**40 for r in rows)
            or len(set(rows)) != len(rows)):
        raise FileFormatError(f"{what}: the calibration rows are not {record['n_queries']} distinct row numbers")
    strata = record.get("strata")
    if strata is not None:
        per = strata.get("recall")
        if strata.get("by") not in ("label", "cluster") or not isinstance(per, dict) or not all(
                isinstance(v, dict) and isinstance(v.get("n"), int) and not isinstance(v.get("n"), bool)
                and isinstance(v.get("recall"), (int, float)) and not isinstance(v.get("recall"), bool)
                and 0.0 <= v["recall"] <= 1.0 for v in per.values()):
            raise FileFormatError(f"{what}: the calibration strata are not {{by, recall: {{name: {{n, recall}}}}}}")
    for name in ("corpus_weighted", "balanced"):
        estimate = record.get(name)
        if estimate is not None and not (
                isinstance(estimate.get("recall"), (int, float)) and not isinstance(estimate.get("recall"), bool)
                and isinstance(estimate.get("recall_lower_bound"), (int, float))
                and not isinstance(estimate.get("recall_lower_bound"), bool)
                and 0.0 <= estimate["recall"] <= 1.0
                and estimate["recall_lower_bound"] <= estimate["recall"] + 1e-12):
            raise FileFormatError(f"{what}: the calibration {name} entry is not {{recall, recall_lower_bound}}")
    fastest = record.get("fastest")
    if fastest is not None and not (isinstance(fastest.get("setting"), dict) and all(
            isinstance(fastest.get(key), (int, float)) and not isinstance(fastest.get(key), bool)
            for key in ("qps", "recall"))):
        raise FileFormatError(f"{what}: the calibration fastest entry lacks setting, qps or recall")
    selection = record.get("selection")
    if selection is not None and not all(
            isinstance(selection.get(key), (int, float)) and not isinstance(selection.get(key), bool)
            for key in ("n_queries", "recall", "recall_lower_bound")):
        raise FileFormatError(f"{what}: the calibration selection entry lacks n_queries, recall or its bound")
    setting = record["setting"]
    for key, value in setting.items():
        if key not in _SETTING_KEYS or isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**40:
            raise FileFormatError(f"{what}: calibrated setting {key!r}={value!r} is not a known search option "
                                  f"with a non-negative integer value")
    return record


def check_target_recall(target) -> float | None:
    """``target`` as a float in (0, 1], or None (calibration off)."""
    if target is None:
        return None
    try:
        value = float(target)
    except (TypeError, ValueError):
        raise InvalidInputError(f"target_recall must be a number in (0, 1] or None, got {target!r}") from None
    if not 0.0 < value <= 1.0:
        raise InvalidInputError(f"target_recall must lie in (0, 1], got {value}")
    return value


def exact_top_k(index, Qp, k: int, n_jobs: int = 1):
    """Exact top-``k`` (rows, scores) of prepared queries ``Qp`` over ``index``'s stored corpus."""
    if hasattr(index, "exact_rows"):  # an index kind that computes its own exact answers
        return index.exact_rows(Qp, k, n_jobs)
    exact = ExactIndex(index.model, strategy="query", n_jobs=n_jobs)
    exact.X_ = index.X_
    exact.ids_ = index.ids_
    exact.strategy_ = "query"
    return exact._query_rows(Qp, k, n_jobs)


def recall_counting_ties(found_scores, truth_scores) -> np.ndarray:
    """Per-query recall@k: the share of the k returned scores that reach the exact k-th score.

    Approximate indexes return exact scores, so a returned document belongs to the exact top-k
    (up to ties at the k-th place) exactly when its score reaches the k-th exact score.
    """
    found_scores = np.asarray(found_scores, dtype=np.float64)
    kth = np.asarray(truth_scores, dtype=np.float64)[:, -1:]
    tol = 1e-9 * np.maximum(1.0, np.abs(kth))
    return np.mean(found_scores >= kth - tol, axis=1)


def _sample_seed(random_state) -> int:
    """An integer seed for the held-out sample: ``random_state`` itself when it is one."""
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool) \
            and 0 <= random_state < 2**63:
        return int(random_state)
    return int(np.random.default_rng(random_state).integers(2**63 - 1))


def hits_of(per_query_recall, top_k: int) -> list:
    """Per-query recalls as hit counts (what a record stores, so a check can replay any query)."""
    return [int(v) for v in np.rint(np.asarray(per_query_recall) * top_k)]


def held_out_sample(n: int, m: int, seed) -> np.ndarray:
    """The ``m`` corpus rows (sorted) a calibration with sample seed ``seed`` uses as held-out queries."""
    return np.sort(np.random.default_rng(seed).choice(n, size=m, replace=False)).astype(np.int64)


def measure_recall(index, rows, top_k: int, settings, n_jobs: int = 1):
    """Per-query recall@``top_k`` of every search setting in ``settings`` on the corpus rows
    ``rows`` used as held-out queries (each row removed from its own answers).

    Returns a list of (per-query recall array, CPU seconds) in the order of ``settings``.
    """
    Qp = index.stored_queries(rows)
    truth_rows, truth_scores = exact_top_k(index, Qp, top_k + 1, n_jobs=n_jobs)
    _, truth_scores = drop_own_rows(truth_rows, truth_scores, rows, top_k)
    out = []
    for options in settings:
        (found, scores), cpu = _time_setting(index, Qp, top_k + 1, options, 1)
        _, scores = drop_own_rows(found, scores, rows, top_k)
        out.append((recall_counting_ties(scores, truth_scores), cpu))
    return out


def summary(per_query) -> tuple[float, float]:
    mean = float(np.mean(per_query))
    se = float(np.std(per_query, ddof=1) / math.sqrt(per_query.size)) if per_query.size > 1 else 0.0
    return mean, mean - _Z_ONE_SIDED_95 * se


def _time_setting(index, Qp, kk, options, repeats):
    best = math.inf
    result = None
    for _ in range(repeats):
        start = time.process_time()
        result = index._query_rows(Qp, kk, 1, **options)
        best = min(best, time.process_time() - start)
    return result, max(best, 1e-9)


def _estimates(per_query, weighting) -> dict:
    """{"sample": (recall, bound) of the sample as drawn} and, when ``weighting`` = (strata of the
    sample rows, strata of the corpus, balanced weights) is given, the stratified estimates
    "balanced" (every stratum alike, as a balanced sample draws) and "corpus_weighted" (each
    stratum by its share of the corpus)."""
    out = {"sample": summary(per_query)}
    if weighting is not None:
        rows_strata, strata, balanced = weighting
        out["balanced"] = stratified_summary(per_query, rows_strata, balanced, _Z_ONE_SIDED_95)
        out["corpus_weighted"] = corpus_weighted_summary(per_query, rows_strata, strata, _Z_ONE_SIDED_95)
    return out


def _as_entry(estimate) -> dict:
    return {"recall": estimate[0], "recall_lower_bound": estimate[1]}


def _measure_grid(index, Qp, kk, exclude, truth_scores, top_k, target, weighting=None):
    """Every setting of the grid on the prepared queries ``Qp`` (a family stops at its first
    setting whose lower bounds meet ``target``, as drawn and corpus-weighted)."""
    measured = []
    for family in index.calibration_grid(top_k):
        for options in family:
            (rows, scores), cpu = _time_setting(index, Qp, kk, options, 1)
            _, scores = drop_own_rows(rows, scores, exclude, top_k)
            estimates = _estimates(recall_counting_ties(scores, truth_scores), weighting)
            (recall, lower) = estimates["sample"]
            # the margin for certification: lower bound minus another 1.645 standard errors, on
            # the sample as drawn and on each stratified estimate alike
            measured.append({"setting": dict(options), "recall": recall, "recall_lower_bound": lower,
                             "estimates": estimates,
                             "select_bound": min(2 * lo - mean for mean, lo in estimates.values()),
                             "qps": Qp.shape[0] / cpu})
            if measured[-1]["select_bound"] >= target:  # the rest of the family only costs more
                break
    return measured


def _truth(index, Qp, exclude, top_k, n_jobs):
    kk = top_k + (exclude is not None)
    truth_rows, truth_scores = exact_top_k(index, Qp, kk, n_jobs=n_jobs)
    return drop_own_rows(truth_rows, truth_scores, exclude, top_k)[1], kk


def calibrate(index, queries=None, target_recall: float = 0.95, top_k: int = 10, n_queries: int = 300,
              random_state=0, n_jobs: int = 1, strata=None) -> dict:
    """Choose the fastest search setting of ``index`` whose recall@``top_k`` meets ``target_recall``
    on one sample of queries, and certify its recall on a second, disjoint one.

    Parameters
    ----------
    index : AnnIndex
        A built index (its ``calibration_grid()`` lists the settings).
    queries : sparse matrix, optional
        Calibration queries (e.g. a query log), split at random into a selection half and a
        certification half; default: two disjoint stratified samples of ``n_queries`` corpus
        documents, each excluded from its own answer (held-out queries).
    target_recall : float, default 0.95
    top_k : int, default 10
    n_queries : int, default 300
        Size of each corpus sample when ``queries`` is None (at most half the corpus).
    random_state : int, default 0
        Seed of the samples and of the clustering.
    n_jobs : int, default 1
        Threads for the exact top-k (the timing runs on one thread).
    strata : array-like of length ``index.n_documents``, optional
        A label per corpus document to stratify the corpus samples by; default: clusters
        (:func:`corpus_strata`).

    Returns
    -------
    dict
        The calibration record (see the module docstring).
    """
    target = check_target_recall(target_recall)
    if target is None:
        raise InvalidInputError("calibrate needs a target_recall in (0, 1]")
    n = index.n_documents
    start = time.perf_counter()
    sample_seed = _sample_seed(random_state)
    by = names = None
    if queries is None:
        m = int(min(n_queries, (n - 1) // 2))
        if m < 2 or n - 1 < top_k:
            raise InvalidInputError(f"calibration needs at least {max(top_k + 1, 5)} documents, the index has {n}")
        if strata is not None:
            strata = np.asarray(strata)
            if strata.ndim != 1 or strata.shape[0] != n:
                raise InvalidInputError(f"strata must give one label per corpus document ({n}), got shape "
                                        f"{strata.shape}")
            by = "label"
        elif index.X_ is not None:  # an index may read its corpus block by block (corpus_source)
            source = index.corpus_source() if hasattr(index, "corpus_source") else index.X_
            strata = corpus_strata(source, seed=sample_seed)
            by = "cluster"
            names = "cluster {}".format
        else:  # an embedding index without a sparse corpus: one stratum (uniform samples)
            strata = np.zeros(n, dtype=np.int64)
        select_rows, cert_rows = stratified_split(strata, [m, m], sample_seed, proportional=PROPORTIONAL_SHARE)
        Q_select, Q_cert = index.stored_queries(select_rows), index.stored_queries(cert_rows)
        source = "corpus sample (held out from its own answer)"
    else:
        Qc = prepare_rows(index.model, queries, "calibration queries")  # checked once, in the model's form
        if Qc.shape[0] < 4:
            raise InvalidInputError(f"calibration needs at least 4 queries (2 to choose, 2 to certify), "
                                    f"got {Qc.shape[0]}")
        order = np.random.default_rng(sample_seed).permutation(Qc.shape[0])
        half = Qc.shape[0] // 2
        Q_select = index.prepare_queries(take_rows(Qc, np.sort(order[:half])), "calibration queries")
        Q_cert = index.prepare_queries(take_rows(Qc, np.sort(order[half:])), "calibration queries")
        select_rows = cert_rows = None
        source = "given queries"
    if top_k > n - (select_rows is not None):
        raise InvalidInputError(f"top_k={top_k} is larger than the documents a calibration query can find")
    truth_select, kk = _truth(index, Q_select, select_rows, top_k, n_jobs)
    truth_cert, _ = _truth(index, Q_cert, cert_rows, top_k, n_jobs)
    exact_seconds = time.perf_counter() - start

    # 1. choose, on the selection sample only
    corpus = cert_rows is not None
    if corpus:
        balanced = balanced_shares(strata, m)
    weighting = (lambda rows: (strata[rows], strata, balanced)) if corpus else (lambda rows: None)
    # (an ann index under read_allocation="auto" offers two allocations: the grid is measured under
    # each, and the allocation of the better choice is kept -- still on the selection sample only)
    allocations = index.calibration_allocations() if hasattr(index, "calibration_allocations") else (None,)
    per_allocation = {}
    for allocation in allocations:
        if allocation is not None:
            index.read_allocation_ = allocation
        measured = _measure_grid(index, Q_select, kk, select_rows, truth_select, top_k, target, weighting(select_rows))
        qualifying = [e for e in measured if e["select_bound"] >= target]
        # re-time the five fastest candidates (best of three) before choosing, and the fastest setting
        # measured (what the target costs: recorded as "fastest")
        for entry in sorted(qualifying, key=lambda e: -e["qps"])[:5] + [max(measured, key=lambda e: e["qps"])]:
            if not entry.get("retimed"):
                _, cpu = _time_setting(index, Q_select, kk, entry["setting"], 3)
                entry["qps"], entry["retimed"] = Q_select.shape[0] / cpu, True
        if qualifying:
            chosen = max(qualifying, key=lambda e: e["qps"])
        else:
            chosen = max(measured, key=lambda e: (e["recall"], e["qps"]))
        rank = (1, chosen["qps"], 0.0) if qualifying else (0, chosen["recall"], chosen["qps"])
        per_allocation[allocation] = (rank, measured, chosen, bool(qualifying))
    allocation = max(per_allocation, key=lambda a: per_allocation[a][0])
    _, measured, chosen, _ = per_allocation[allocation]
    if allocation is not None:
        index.read_allocation_ = allocation
    fastest = max(measured, key=lambda e: e["qps"])

    # 2. certify, on the certification sample only
    (found, scores), cpu = _time_setting(index, Q_cert, kk, chosen["setting"], 1)
    _, scores = drop_own_rows(found, scores, cert_rows, top_k)
    per_query = recall_counting_ties(scores, truth_cert)
    estimates = _estimates(per_query, weighting(cert_rows))
    recall, lower = estimates["sample"]
    met = bool(all(lo >= target for _, lo in estimates.values()))
    if not met:
        label = {"sample": "as drawn", "balanced": "balanced", "corpus_weighted": "corpus-weighted"}
        found = "; ".join(f"{label[name]} {mean:.3f} (lower bound {lo:.3f})" for name, (mean, lo) in estimates.items())
        hint = index.calibration_hint(Q_cert) if hasattr(index, "calibration_hint") else None
        warnings.warn(f"the search setting chosen for recall@{top_k} {target} reaches {found} on the certification "
                      f"queries; the target is not met (raise the target or give explicit search parameters)"
                      + (f"; {hint}" if hint else ""), stacklevel=2)
    selected = chosen["estimates"]
    return {"target_recall": target, "top_k": int(top_k), "met": met, "setting": chosen["setting"],
            "recall": recall, "recall_lower_bound": lower,
            "qps_one_thread": chosen["qps"], "qps_certification": Q_cert.shape[0] / cpu,
            "fastest": {"setting": fastest["setting"], "qps": fastest["qps"], "recall": fastest["recall"],
                        "recall_lower_bound": fastest["recall_lower_bound"]},
            "n_queries": int(Q_cert.shape[0]), "queries": source,
            "random_state": random_state if corpus else None, "sample_seed": sample_seed if corpus else None,
            "hits": hits_of(per_query, top_k) if corpus else None,
            "rows": [int(r) for r in cert_rows] if corpus else None,
            "corpus_weighted": _as_entry(estimates["corpus_weighted"]) if corpus else None,
            "balanced": _as_entry(estimates["balanced"]) if corpus else None,
            "proportional_share": PROPORTIONAL_SHARE if corpus else None,
            "strata": {"by": by, "recall": recall_by_stratum(per_query, strata[cert_rows], names, strata)}
            if corpus else None,
            "selection": {"n_queries": int(Q_select.shape[0]), "recall": chosen["recall"],
                          "recall_lower_bound": chosen["recall_lower_bound"],
                          "corpus_weighted": _as_entry(selected["corpus_weighted"]) if corpus else None,
                          "balanced": _as_entry(selected["balanced"]) if corpus else None,
                          "rows": [int(r) for r in select_rows] if corpus else None},
            "model_checksum": index.model.checksum(), "n_documents": int(n),
            "n_settings": sum(len(entry[1]) for entry in per_allocation.values()),
            "seconds": time.perf_counter() - start, "exact_seconds": exact_seconds,
            "read_allocation": allocation,
            "allocations": {a: {"setting": c["setting"], "qps": c["qps"], "recall": c["recall"], "qualified": q}
                            for a, (_, _, c, q) in per_allocation.items()} if len(per_allocation) > 1 else None}


def remeasure(index, record: dict, n_queries: int, random_state=0, n_jobs: int = 1) -> dict:
    """``record`` with the recall of its setting measured again on the index as it is now (after
    documents were added), on a fresh held-out corpus sample; the setting is kept.

    So a stored record always describes the content it is stored with (the load-time check
    replays it, :mod:`sparsesim.indexes.recall_check`).
    """
    n = index.n_documents
    top_k = int(record["top_k"])
    m = int(min(n_queries, n - 1))
    if m < 2 or n - 1 < top_k:
        return record
    start = time.perf_counter()
    sample_seed = _sample_seed(random_state)
    rows = held_out_sample(n, m, sample_seed)
    (per_query, cpu), = measure_recall(index, rows, top_k, [record["setting"]], n_jobs)
    recall, lower = summary(per_query)
    out = dict(record)
    out.update({"met": bool(lower >= record["target_recall"]), "recall": recall, "recall_lower_bound": lower,
                "qps_one_thread": m / max(cpu, 1e-9), "n_queries": m,
                "queries": "corpus sample (held out from its own answer)", "random_state": random_state,
                "sample_seed": sample_seed, "hits": hits_of(per_query, top_k), "n_documents": int(n),
                "rows": [int(r) for r in rows], "strata": None, "corpus_weighted": None, "balanced": None,
                "fastest": None, "qps_certification": None, "proportional_share": None, "remeasured": True,
                "seconds": time.perf_counter() - start})
    return out
