"""Containers the data layer returns."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp


@dataclass
class LabelledData:
    """A labelled sparse corpus: one CSR row per document.

    Attributes
    ----------
    X : scipy.sparse.csr_matrix, shape (n_documents, n_features)
    y : ndarray, shape (n_documents,)
        Class label of each document.
    name : str
        Data set name (registry name or file path).
    ids : ndarray of str or int, optional
        Document ids; ``None`` means the row number is the id.
    class_names : dict, optional
        Label value -> readable class name (e.g. newsgroup).
    tasks : ndarray of int, optional
        Task id of each document for multi-task data (``None`` for single-task).
    task_names : list of str, optional
    info : dict
        Free-form facts about preprocessing (representation, normalisation, source files; for
        svmlight files ``zero_based``, the feature-index base the file was read with).
    texts : list of str, optional
        The raw documents when the corpus was read from text.
    featurizer : sparsesim.text.TextFeaturizer, optional
        The fitted featuriser that produced ``X`` from ``texts``.
    """

    X: sp.csr_matrix
    y: np.ndarray
    name: str = ""
    ids: np.ndarray | None = None
    class_names: dict | None = None
    tasks: np.ndarray | None = None
    task_names: list | None = None
    info: dict = field(default_factory=dict)
    texts: list | None = None
    featurizer: object | None = None

    @property
    def n_documents(self) -> int:
        return self.X.shape[0]

    @property
    def n_features(self) -> int:
        return self.X.shape[1]

    def doc_id(self, row: int):
        """The id of document ``row`` (its row number when the corpus has no ids)."""
        return int(row) if self.ids is None else self.ids[row].item()

    def subset(self, rows) -> "LabelledData":
        """The documents ``rows`` (keeps ids, so results still name the original documents)."""
        rows = np.asarray(rows)
        ids = np.arange(self.n_documents)[rows] if self.ids is None else self.ids[rows]
        return LabelledData(
            X=self.X[rows],
            y=self.y[rows],
            name=self.name,
            ids=ids,
            class_names=self.class_names,
            tasks=None if self.tasks is None else self.tasks[rows],
            task_names=self.task_names,
            info=dict(self.info),
            texts=None if self.texts is None else [self.texts[int(r)] for r in np.arange(self.n_documents)[rows]],
            featurizer=self.featurizer,
        )
