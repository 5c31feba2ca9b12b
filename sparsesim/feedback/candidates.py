"""The candidate stage of a learning index: recall re-checked under the newest model, rebuilt on drift.

On corpora above ``exact_limit`` documents, a query's candidates come from an index built with an
older model version and are re-ranked exactly with the newest one. As the model changes, the
old index's candidates miss more of the new neighbours. A refresher thread re-checks, every
``drift_check_every`` applied triplets, the recall@10 of the candidates (re-ranked under the
newest version) against exhaustive scoring under it, on ``drift_sample`` corpus documents each
held out from its own answer; below ``min_recall`` it rebuilds the candidate index with the
newest model (same kind and parameters, :func:`~sparsesim.indexes.build_index`) and swaps it in
by reference. Queries use the old candidates until the swap, so they answer throughout.
"""

from __future__ import annotations

import numpy as np

from ..csr_rows import take_rows
from ..indexes import build_index
from ..indexes.calibration import recall_counting_ties
from .versions import ModelVersion

__all__ = ["CandidateStage"]


class CandidateStage:
    """Drift checks and rebuilds of the candidate index (mixed into
    :class:`~sparsesim.feedback.FeedbackLearner`, which sets ``_candidates``, ``candidate_info``,
    ``_published``, ``_lock``, ``_drift_wake`` and the drift parameters)."""

    def _refresh_loop(self):
        while True:
            self._drift_wake.wait()
            self._drift_wake.clear()
            if self._closed:
                return
            try:
                self.check_candidates()
            except Exception as exc:  # kept and raised to callers, like the learner thread's
                self._error = exc
                return

    def _candidate_recall(self, version: ModelVersion, candidates) -> float:
        """Recall@10 (ties counted) of ``candidates`` re-ranked under ``version`` against exhaustive
        scoring, on ``drift_sample`` corpus documents each held out from its own answer."""
        n = self.X.shape[0]
        k = min(10, n - 2)
        sample = np.sort(np.random.default_rng(0).choice(n, min(self.drift_sample, n - 1), replace=False))
        Q = take_rows(self.X, sample)

        def without_self(rows, vals):
            keep = rows != sample[:, None]
            return np.array([v[kp][:k] for v, kp in zip(vals, keep)])

        truth = without_self(*self._top_rows(version, Q, k + 1, exact=True))
        found = without_self(*self._top_rows(version, Q, k + 1, exact=False, candidates=candidates))
        return float(np.mean(recall_counting_ties(found, truth)))

    def check_candidates(self, rebuild: bool = True) -> dict:
        """Re-check the candidate index's recall under the newest version; rebuild it with the
        newest model (:meth:`refresh_candidates`) when the recall is below ``min_recall``.

        Returns
        -------
        dict
            The candidate-stage facts (also in :meth:`info` under ``"candidates"``).
        """
        current = self._published
        recall = self._candidate_recall(current, self._candidates)
        with self._lock:
            self._checked_applied = self.n_applied
            self.candidate_info.update(recall=recall, checked_at_version=current.number)
        if rebuild and recall < self.min_recall:
            return self.refresh_candidates(recall_before=recall)
        with self._lock:
            return dict(self.candidate_info)

    def refresh_candidates(self, recall_before: float | None = None) -> dict:
        """Rebuild the candidate index with the newest model version (same kind and parameters)
        and swap it in by reference; queries keep using the old one until then.

        Returns
        -------
        dict
            The candidate-stage facts, with the recall of the new index on the drift sample.
        """
        current = self._published
        with self._lock:
            self.candidate_info["refreshing"] = True
        try:
            fresh = build_index(current.model(), self.X, kind="exact" if self.index.exact else "ann",
                                **self.index.params())
            after = self._candidate_recall(current, fresh)
            with self._lock:
                self._candidates = fresh
                info = self.candidate_info
                info.update(built_from_version=current.number, recall=after, checked_at_version=current.number,
                            recall_before_refresh=recall_before, refreshes=info["refreshes"] + 1)
        finally:
            with self._lock:
                self.candidate_info["refreshing"] = False
        with self._lock:
            return dict(self.candidate_info)
