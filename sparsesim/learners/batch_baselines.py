"""The similarities a practitioner tries first, as registered baselines fitted in one batch.

* :class:`BM25` (``bm25``) — lexical BM25 of the query document's terms (``bm25s``); learns nothing.
* :class:`LSA` (``lsa``) — cosine in a truncated-SVD space of the training documents (scikit-learn
  ``TruncatedSVD``); unsupervised.
* :class:`LogRegEmbedding` (``logreg-proba``, ``logreg-scores``) — documents embedded as the class
  probabilities or decision scores of a logistic regression trained on the training labels,
  L2-normalised, compared by dot product.
* :class:`LinearSVMEmbedding` (``svm-scores``) — the same with a linear SVM's decision scores.

They follow the estimator contract of :mod:`sparsesim.learners.base` (``fit(X, y)`` resets and learns,
``model_`` can be saved, ``score`` is retrieval MAP) but learn from labels (or from nothing), never
from triplets: :meth:`BatchSimilarity.partial_fit_triplets` refuses. Their models are
:class:`~sparsesim.embedding.EmbeddingSimilarity` (LSA, classifier embeddings) and
:class:`~sparsesim.lexical.BM25Similarity` (BM25).
"""

from __future__ import annotations

import time
import warnings

import numpy as np
from scipy.sparse import diags

from ..embedding import EmbeddingSimilarity
from ..evaluation import evaluate_retrieval
from ..exceptions import InvalidInputError
from ..lexical import BM25_METHODS, BM25Similarity, check_counts
from ..validation import check_csr, check_fit_matrix, check_labels
from .base import SparsesimEstimator

__all__ = ["BatchSimilarity", "BM25", "LSA", "LogRegEmbedding", "LinearSVMEmbedding"]

_NO_TRIPLETS = ("is fitted in one batch (fit(X, y)), not from triplets, so learning in chunks of triplets "
                "does not apply")


def _l2_rows(X):
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    return (diags(1.0 / np.where(norms > 0, norms, 1.0)) @ X).tocsr()


class BatchSimilarity(SparsesimEstimator):
    """A similarity fitted in one batch from documents (and labels): the shared life cycle.

    Subclasses implement ``_fit_model(X, y) -> model`` (``X`` checked CSR, ``y`` checked labels or
    ``None`` when ``_supervised`` is false).

    Attributes
    ----------
    n_features_in_ : int
    model_ : EmbeddingSimilarity or BM25Similarity
    n_triplets_seen_, n_updates_ : int
        Always 0 (no triplets are used); kept for the common contract.
    train_seconds_ : float
        Wall time of the fit.
    resolved_params_ : dict
        Values of ``"auto"`` parameters as resolved on the training data.
    """

    _learner_kind = "triplet"
    _supervised = False
    _state_attrs = ("n_features_in_", "n_triplets_seen_", "n_updates_", "train_seconds_", "model_",
                    "resolved_params_")
    _skipped_checks = {"check_partial_fit_chunks": _NO_TRIPLETS}

    def _fit_model(self, X, y):  # pragma: no cover - abstract
        raise NotImplementedError

    def _check_X(self, X):
        return check_fit_matrix(X)

    def fit(self, X, y=None, progress=None):
        """Fit on the documents ``X`` (and their class labels ``y`` for the supervised baselines).

        Parameters
        ----------
        X : sparse matrix or array, shape (n_documents, n_features)
        y : array, shape (n_documents,), optional
            Class labels; required by the supervised baselines, ignored by the others.
        progress : callable, optional
            Accepted for the common interface; called once with 0 at the end (no triplets).

        Returns
        -------
        self
        """
        self._reset()
        X = self._check_X(X)
        if self._supervised:
            if y is None:
                raise InvalidInputError(f"{type(self).__name__} learns from class labels: call fit(X, y)")
            y = check_labels(y, X.shape[0], min_per_class=1)
        start = time.perf_counter()
        self.resolved_params_ = {}
        model = self._fit_model(X, y)
        model.metadata.setdefault("algorithm", self._algorithm)
        model.metadata.setdefault("params", {k: v for k, v in self.get_params().items()
                                             if v is None or isinstance(v, (bool, int, float, str))})
        self.model_ = model
        self.n_features_in_ = int(X.shape[1])
        self.n_triplets_seen_ = 0
        self.n_updates_ = 0
        self.train_seconds_ = time.perf_counter() - start
        if progress is not None:
            progress(0)
        return self

    def partial_fit_triplets(self, X, triplets, signs=None):
        """Refused: these baselines do not learn from triplets.

        Raises
        ------
        InvalidInputError
            Always.
        """
        raise InvalidInputError(f"{type(self).__name__} ({self._algorithm}) {_NO_TRIPLETS.split(', so')[0]}; "
                                "use fit(X, y), or a similarity learner (oasis, sors-l1, ...) for triplets")

    def score(self, X, y) -> float:
        """Mean average precision (MAP) of retrieval among the documents of ``X`` by label ``y``."""
        self._check_fitted()
        X = check_csr(X)
        if X.shape[1] != self.n_features_in_:
            raise InvalidInputError(f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                                    f"{self.n_features_in_} features as input (feature-count mismatch)")
        y = check_labels(y, X.shape[0])
        return float(evaluate_retrieval(self.model_.scorer(X), y, k=min(10, max(1, X.shape[0] - 1)))["map"])


class BM25(BatchSimilarity):
    """BM25 document-to-document retrieval (Okapi BM25 as computed by ``bm25s``).

    A query document's distinct terms form a keyword query; corpus documents are ranked by their
    BM25 score for it, with the idf and average length of the corpus searched (see
    :mod:`sparsesim.lexical`). Nothing is learned: ``fit`` records the vocabulary size. Rows must be
    raw term counts (``sparsesim experiment`` and ``train`` load registered corpora that way for
    ``bm25``).

    Parameters
    ----------
    k1 : float, default 1.5
    b : float, default 0.75
    method : {"lucene", "robertson", "atire", "bm25l", "bm25+"}, default "lucene"
    delta : float, default 0.5
        BM25L / BM25+ only.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[2, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 3], [1, 0, 0, 2]])
    >>> est = BM25().fit(X)
    >>> est.model_.score_matrix(X[:1], X).argmax()
    np.int64(0)
    """

    _algorithm = "bm25"
    _learner_kind = "triplet-counts"
    #: what rows this learner reads: raw term counts (a protocol loads registered corpora so)
    input_representation = "raw"
    _param_spec = {"k1": ("float", 0.0, 1e6), "b": ("float", 0.0, 1.0), "method": ("choice", BM25_METHODS),
                   "delta": ("float", 0.0, 1e6)}
    _skipped_checks = {
        "check_partial_fit_chunks": "learns nothing and from no triplets",
        "sklearn_check_estimator": "scores term counts; scikit-learn's checks feed real-valued data with negative "
                                   "entries, which BM25 refuses",
    }

    def __init__(self, k1: float = 1.5, b: float = 0.75, method: str = "lucene", delta: float = 0.5):
        self.k1 = k1
        self.b = b
        self.method = method
        self.delta = delta

    def _check_X(self, X):
        return check_counts(check_fit_matrix(X))

    def _fit_model(self, X, y):
        return BM25Similarity(X.shape[1], k1=self.k1, b=self.b, method=self.method, delta=self.delta,
                              metadata={"algorithm": self._algorithm})


class LSA(BatchSimilarity):
    """Latent semantic analysis: cosine of documents projected on the top singular directions.

    ``fit`` runs scikit-learn's ``TruncatedSVD`` (randomized, seeded) on the L2-normalised training
    rows; the model embeds a document as ``x / |x|`` times the ``n_components`` right singular
    vectors, L2-normalised, and compares embeddings by dot product (an
    :class:`~sparsesim.embedding.EmbeddingSimilarity` of ``(n_features, n_components)`` floats).

    Parameters
    ----------
    n_components : int or "auto", default "auto"
        Dimensions kept; ``"auto"`` is 300, or fewer when the training data has fewer than 301
        documents or features (``min(n, d) - 1``).
    n_iter : int, default 5
        Power iterations of the randomized SVD.
    random_state : int, default 0

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> est = LSA(n_components=3).fit(rng.random((20, 8)))
    >>> est.model_.n_components
    3
    """

    _algorithm = "lsa"
    _param_spec = {"n_components": ("int", 1, 1 << 16), "n_iter": ("int", 0, 1000)}

    def __init__(self, n_components="auto", n_iter: int = 5, random_state=0):
        self.n_components = n_components
        self.n_iter = n_iter
        self.random_state = random_state

    def _fit_model(self, X, y):
        from sklearn.decomposition import TruncatedSVD

        n, d = X.shape
        limit = min(n, d) - 1
        if limit < 1:
            raise InvalidInputError(f"LSA needs at least 2 documents and 2 features, got n_samples={n}, "
                                    f"n_features={d}")
        k = min(300, limit) if self.n_components == "auto" else int(self.n_components)
        if k > limit:
            raise InvalidInputError(f"n_components={k} must be below min(documents, features) = {limit + 1}")
        self.resolved_params_ = {"n_components": k}
        svd = TruncatedSVD(n_components=k, n_iter=self.n_iter, random_state=self.random_state)
        svd.fit(_l2_rows(X))
        return EmbeddingSimilarity(svd.components_.T, normalize=True, normalize_embedding=True,
                                   metadata={"algorithm": self._algorithm, "n_components": k})


class _ClassifierEmbedding(BatchSimilarity):
    """Documents embedded as a linear classifier's outputs (one per class), L2-normalised."""

    _supervised = True

    def _classifier(self):  # pragma: no cover - abstract
        raise NotImplementedError

    def _fit_model(self, X, y):
        Xn = _l2_rows(X)
        clf = self._classifier()
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*did not converge.*|.*failed to converge.*")
            clf.fit(Xn, y)
        coef = np.asarray(clf.coef_, dtype=np.float64)
        bias = np.asarray(clf.intercept_, dtype=np.float64)
        if coef.shape[0] == 1:  # two classes: one score z, written as (-z/2, z/2) (same softmax, two outputs)
            coef = np.vstack([-coef / 2, coef / 2])
            bias = np.concatenate([-bias / 2, bias / 2])
        activation = "softmax" if getattr(self, "output", "scores") == "proba" else "linear"
        meta = {"algorithm": self._algorithm, "classes": [c.item() if isinstance(c, np.generic) else c
                                                          for c in clf.classes_]}
        return EmbeddingSimilarity(coef.T, bias=bias, activation=activation, normalize=True, normalize_embedding=True,
                                   metadata=meta)


class LogRegEmbedding(_ClassifierEmbedding):
    """Logistic-regression class probabilities (or decision scores) as the embedding, dot product.

    ``fit`` trains scikit-learn's ``LogisticRegression`` (multinomial, L-BFGS) on the L2-normalised
    training rows and labels; a document is embedded as ``softmax(W x / |x| + b)`` (``output="proba"``)
    or ``W x / |x| + b`` (``output="scores"``), L2-normalised, and documents are compared by the dot
    product of their embeddings. Retrieval then ranks by agreement of predicted classes, so it works
    for documents of the classes seen in training.

    Parameters
    ----------
    output : {"proba", "scores"}, default "proba"
    C : float, default 100.0
        Inverse regularisation strength; 100 scored best of {1, 10, 100} on validation parts of the
        training splits of news20 and Reuters-21578 (docs/quality.md, "Baselines").
    max_iter : int, default 1000
    random_state : int, default 0

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.random((30, 6)), np.repeat([0, 1, 2], 10)
    >>> LogRegEmbedding().fit(X, y).model_.embed(X[:2]).shape
    (2, 3)
    """

    _param_spec = {"output": ("choice", ("proba", "scores")), "max_iter": ("int", 1, 10**6)}

    def __init__(self, output: str = "proba", C: float = 100.0, max_iter: int = 1000, random_state=0):
        self.output = output
        self.C = C
        self.max_iter = max_iter
        self.random_state = random_state

    @property
    def _algorithm(self):  # the registry name depends on the output
        return f"logreg-{self.output}"

    def _classifier(self):
        from sklearn.linear_model import LogisticRegression

        return LogisticRegression(C=self.C, max_iter=self.max_iter, random_state=self.random_state)


class LinearSVMEmbedding(_ClassifierEmbedding):
    """Linear-SVM decision scores (one-vs-rest) as the embedding, L2-normalised, dot product.

    ``fit`` trains scikit-learn's ``LinearSVC`` on the L2-normalised training rows and labels.

    Parameters
    ----------
    C : float, default 1.0
        1 scored best of {0.1, 1, 10} on validation parts of the training splits of news20 and
        Reuters-21578 (docs/quality.md, "Baselines").
    max_iter : int, default 1000
    random_state : int, default 0

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.random((30, 6)), np.repeat([0, 1, 2], 10)
    >>> LinearSVMEmbedding().fit(X, y).model_.n_components
    3
    """

    _algorithm = "svm-scores"
    _param_spec = {"max_iter": ("int", 1, 10**6)}

    def __init__(self, C: float = 1.0, max_iter: int = 1000, random_state=0):
        self.C = C
        self.max_iter = max_iter
        self.random_state = random_state

    def _classifier(self):
        from sklearn.svm import LinearSVC

        return LinearSVC(C=self.C, max_iter=self.max_iter, random_state=self.random_state)
