"""Feedback records and queries as rows of the corpus's feature space.

Feedback is a triplet ``{"query": Q, "preferred": ID, "other": ID}`` -- for query Q the document
``preferred`` should score higher than ``other`` -- or a click log
``{"query": Q, "shown": [ID, ...], "clicked": [ID, ...]}``. A query Q is a text (models trained on
text), a sparse vector ``{"indices": [...], "values": [...]}`` (zero-based columns) or the id of
a corpus document; an integer, or a string that is a corpus id, names a document, any other
string is a text.

Click rule (Joachims, "Accurately interpreting clickthrough data", SIGIR 2005): ``shown`` is the
list in the order it was displayed. Every clicked document is preferred over every document
shown above it that was not clicked ("click > skip above"), and over the first unclicked document
shown right below it ("click > no-click next"). At most ``max_click_pairs`` triplets come from
one log, the pairs nearest the click first.
"""

from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp

from ..csr_rows import take_rows
from ..exceptions import InvalidInputError
from ..validation import bounded, is_finite_number

__all__ = ["click_triplets", "FeedbackRecords"]


def click_triplets(shown: list, clicked: list, max_pairs: int = 10) -> list[tuple]:
    """(preferred, other) pairs of one click log by the rule in the module docstring.

    Parameters
    ----------
    shown : list
        Ids in the order they were displayed (unique).
    clicked : list
        Ids clicked; each must be in ``shown``.
    max_pairs : int, default 10

    Returns
    -------
    list of (preferred_id, other_id)

    Examples
    --------
    >>> click_triplets(["a", "b", "c", "d"], ["c"])
    [('c', 'b'), ('c', 'a'), ('c', 'd')]
    """
    position = {v: i for i, v in enumerate(shown)}
    clicked_set = set(clicked)
    pairs = []
    for c in clicked:
        pc = position[c]
        above = [shown[i] for i in range(pc - 1, -1, -1) if shown[i] not in clicked_set]
        below = next((shown[i] for i in range(pc + 1, len(shown)) if shown[i] not in clicked_set), None)
        pairs.extend((c, s) for s in above)
        if below is not None:
            pairs.append((c, below))
    return pairs[:max_pairs]


def _plain(v):
    return v.item() if isinstance(v, np.generic) else v


class FeedbackRecords:
    """Parsing of queries and feedback records against a corpus (mixed into
    :class:`~sparsesim.feedback.FeedbackLearner`, which sets ``index``, ``X``, ``featurizer``,
    ``max_click_pairs``, ``_rows`` and ``_int_ids``)."""

    def query_vectors(self, items) -> sp.csr_matrix:
        """Feature rows (CSR, one per item) of queries given as texts, sparse vectors or corpus ids."""
        if not isinstance(items, (list, tuple)) or not items:
            raise InvalidInputError("queries must be a non-empty list")
        return sp.vstack([self._query_row(q, f"query[{i}]") for i, q in enumerate(items)], format="csr")

    def _query_row(self, q, name: str) -> sp.csr_matrix:
        d = self.index.n_features
        if isinstance(q, bool):
            raise InvalidInputError(f"{name} must be a text, a vector or a corpus id, got a boolean")
        if self._is_corpus_id(q):
            return take_rows(self.X, [self._row_of(q, name)])
        if isinstance(q, str):
            if self.featurizer is None:
                raise InvalidInputError(f"{name}: this model was not trained on text; give a vector or a corpus id")
            if not q.strip():
                raise InvalidInputError(f"{name} is an empty text")
            return sp.csr_matrix(self.featurizer.transform([q]))
        if isinstance(q, dict):
            if set(q) != {"indices", "values"}:
                raise InvalidInputError(f'{name} must be an object with exactly "indices" and "values"')
            idx, val = q["indices"], q["values"]
            if not isinstance(idx, list) or not isinstance(val, list) or len(idx) != len(val) or len(idx) > d:
                raise InvalidInputError(f"{name}: indices and values must be lists of equal length (at most {d})")
            if any(isinstance(j, bool) or not isinstance(j, numbers.Integral) or not 0 <= j < d for j in idx):
                raise InvalidInputError(f"{name}: indices must be integers in [0, {d})")
            if not all(is_finite_number(v) for v in val):
                raise InvalidInputError(f"{name}: values must be finite numbers")
            with np.errstate(over="ignore"):
                squared = np.square(np.asarray(val, np.float64)).sum()
            if not np.isfinite(squared):  # the learner's update divides by ||q||^2
                raise InvalidInputError(f"{name}: values too large (their squared norm overflows float64)")
            # checked above, entry by entry: built in canonical form (duplicates summed, sorted), not checked again
            row = sp.csr_matrix((np.asarray(val, np.float64), (np.zeros(len(idx), np.int64),
                                                               np.asarray(idx, np.int64))), shape=(1, d))
            row.sum_duplicates()
            return row
        raise InvalidInputError(f"{name} must be a text, a vector or a corpus id, got {type(q).__name__}")

    def _is_corpus_id(self, q) -> bool:
        return not isinstance(q, bool) and (isinstance(q, numbers.Integral) or (
            isinstance(q, str) and not self._int_ids and q in self._rows))

    def _row_of(self, doc_id, name: str) -> int:
        key = doc_id
        if isinstance(doc_id, bool) or not isinstance(doc_id, (numbers.Integral, str)):
            raise InvalidInputError(f"{name} must be a document id, got {bounded(repr(doc_id), 60)}")
        if isinstance(doc_id, numbers.Integral):
            key = int(doc_id)
        row = self._rows.get(key)
        if row is None:
            raise InvalidInputError(f"{name}: unknown document id {bounded(repr(doc_id), 80)}")
        return row

    def parse_feedback(self, records) -> list[tuple]:
        """Check feedback records; return ``(query_row, preferred_row, other_row)`` triplets.

        Raises
        ------
        InvalidInputError
            A record that is not a triplet or click log, an unknown id, a bad query.
        """
        if isinstance(records, dict):
            records = [records]
        if not isinstance(records, list) or not records:
            raise InvalidInputError("feedback must be a record or a non-empty list of records")
        out = []
        for i, rec in enumerate(records):
            name = f"feedback[{i}]"
            if not isinstance(rec, dict) or "query" not in rec:
                raise InvalidInputError(f'{name} must be an object with "query"')
            keys = set(rec)
            if keys == {"query", "preferred", "other"}:
                pairs = [(rec["preferred"], rec["other"])]
            elif keys == {"query", "clicked", "shown"}:
                shown, clicked = rec["shown"], rec["clicked"]
                if not isinstance(shown, list) or not isinstance(clicked, list) or not shown:
                    raise InvalidInputError(f"{name}: shown and clicked must be lists (shown non-empty)")
                if len(shown) > 1000:
                    raise InvalidInputError(f"{name}: at most 1000 shown documents")
                for j, doc in enumerate(shown + clicked):
                    self._row_of(doc, f"{name}.shown/clicked[{j}]")
                if len(set(shown)) != len(shown) or len(set(clicked)) != len(clicked):
                    raise InvalidInputError(f"{name}: shown and clicked must not repeat ids")
                missing = [c for c in clicked if c not in set(shown)]
                if missing:
                    raise InvalidInputError(f"{name}: clicked id {bounded(repr(missing[0]), 60)} was not shown")
                pairs = click_triplets(shown, clicked, self.max_click_pairs)
            else:
                raise InvalidInputError(f'{name} must have "query", "preferred", "other" or "query", "clicked", '
                                        f'"shown"; got {bounded(sorted(map(str, keys)), 120)}')
            q = rec["query"]
            # a corpus document stays a row number (gathered with the batch), other queries a CSR row
            qrow = self._row_of(q, f"{name}.query") if self._is_corpus_id(q) else self._query_row(q, f"{name}.query")
            for a, b in pairs:
                ra, rb = self._row_of(a, f"{name}.preferred"), self._row_of(b, f"{name}.other")
                if ra == rb:
                    raise InvalidInputError(f"{name}: preferred and other are the same document")
                out.append((qrow, ra, rb))
        return out
