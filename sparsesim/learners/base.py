"""The one estimator contract of sparsesim's learners.

Two families share one root (the split metric-learn makes between tuple learners and their
``*_Supervised`` front ends):

* :class:`TripletLearner` learns a similarity S(x, x') from triplets of rows of a CSR corpus.
  :meth:`TripletLearner.partial_fit_triplets` is the one triplet-level method: it continues
  from the current model. ``fit(X, y)`` (``fit(X, y, tasks)`` for the multi-task family)
  resets the state, draws the family's paper protocol triplets from the labels and feeds them,
  in chunks, to the same triplet-level update.
* :class:`OnlineClassifier` learns a classifier from a labelled stream. ``partial_fit(X, y)`` keeps
  scikit-learn's meaning (one online pass over the rows, in order, continuing from the current
  model); ``fit(X, y)`` resets and makes one pass.

Every learner, after ``fit``:

* has ``n_features_in_``, its counters (``n_triplets_seen_``, ``n_updates_``, ``train_seconds_``
  for triplet learners; ``n_seen_``, ``n_mistakes_`` for classifiers), ``resolved_params_`` (the
  numbers its ``"auto"`` parameters took; ``{}`` for a learner without any) and, when the family
  has a saved-model format, ``model_`` (an object of :mod:`sparsesim.models` with ``save``/``load``);
* forgets everything a previous ``fit`` learned (the attributes in ``_state_attrs``);
* declares sparse input in ``__sklearn_tags__``, together with the checks of
  :mod:`sparsesim.checks` and of scikit-learn that do not apply to it and why
  (:class:`SparsesimTags`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import Tags

from ..evaluation import evaluate_retrieval
from ..exceptions import InvalidInputError, NotFittedError
from ..triplets import usable_rows
from ..validation import check_csr, check_fit_matrix, check_labels, check_params, check_triplets, rows_of

__all__ = ["SparsesimTags", "SparsesimEstimator", "TripletLearner", "OnlineClassifier"]


@dataclass
class SparsesimTags(Tags):
    """scikit-learn's tags plus what sparsesim's common checks need to know.

    Attributes
    ----------
    learner_kind : str
        ``"triplet"``, ``"triplet-counts"`` (rows of term counts), ``"multitask-triplet"``, ``"online-classifier"`` or
        ``"multitask-classifier"``: selects the checks of :mod:`sparsesim.checks`.
    skipped_checks : dict of str to str
        Common-check name -> the reason it does not apply to this estimator. Names of
        scikit-learn checks are passed to ``parametrize_with_checks`` as expected failures.
    """

    learner_kind: str = ""
    skipped_checks: dict = field(default_factory=dict)


def check_fitted(estimator, attribute: str = "n_features_in_") -> None:
    """Raise :class:`~sparsesim.exceptions.NotFittedError` (scikit-learn's ``NotFittedError``) when
    ``estimator`` lacks the fitted ``attribute``."""
    if attribute not in estimator.__dict__:
        raise NotFittedError(f"{type(estimator).__name__} is not fitted yet; call fit first")


class SparsesimEstimator(BaseEstimator):
    """Root of every learner: fitted-state life cycle, fitted check, tags.

    Subclasses list their fitted attributes in ``_state_attrs`` (``fit`` deletes them) and the
    checks that do not apply to them, with the reason, in ``_skipped_checks``.

    Attributes
    ----------
    input_representation : str
        The rows ``fit`` expects: ``"default"`` (the data set's own representation, e.g. TF-IDF)
        or ``"raw"`` (term counts, e.g. BM25); what a workflow reads the data set as.
    tune_by_fit : bool
        ``sparsesim tune`` searches this learner by whole ``fit`` calls (learners that make their
        own passes over the labels) instead of by continuing on triplets.
    """

    _algorithm = ""
    input_representation = "default"
    tune_by_fit = False
    _learner_kind = ""
    _state_attrs: tuple = ("n_features_in_",)
    _skipped_checks: dict = {}
    #: counters a learner keeps besides the common ones, reported by :meth:`training_counters`
    _counters: tuple = ()

    def _reset(self) -> None:
        """Forget everything learned: the attributes of ``_state_attrs`` and the cached model.

        First checks every hyper-parameter (type and range, :func:`sparsesim.validation.check_params`;
        a value checked before for this estimator and unchanged since is taken as it is).
        """
        check_params(self)
        for attr in self._state_attrs:
            self.__dict__.pop(attr, None)
        self._model_cache = None

    def resolve_params(self, X) -> dict:
        """The numbers this learner's ``"auto"`` parameters take on the documents ``X`` (no
        training); ``{}`` for a learner without any (the default)."""
        return {}

    def training_counters(self) -> dict:
        """The learner's own counters after fitting (``{}`` for a learner without any), by name
        without the trailing underscore (e.g. ROMCO's ``n_materialized``)."""
        return {name.rstrip("_"): int(self.__dict__[name]) for name in self._counters}

    @property
    def store_nbytes_(self) -> int:
        """Bytes the learner's working store holds now (0 for a learner without one)."""
        return 0

    def check_fit_data(self, n_features: int, class_counts=None, n_tasks=None) -> None:
        """Raise the error ``fit`` would raise, before any work, when this learner refuses data of
        ``n_features`` features whose classes hold ``class_counts`` documents, in ``n_tasks``
        tasks for a multitask learner (e.g. a dense d x d metric above ``max_features``, or
        classes smaller than LMNN's neighbours); a protocol asks every learner before it runs
        anything. Accepts everything by default.

        Raises
        ------
        ResourceLimitError, InvalidInputError
            The learner's reason, as ``fit`` would give it.
        """

    def model_bytes_bound(self, X) -> tuple[int, bool] | None:
        """What the model this learner would save from corpus ``X`` may take, known before training:
        ``(bytes, bounded)``, or ``None`` when the learner cannot tell ahead (the default)."""
        return None

    @classmethod
    def _unit_test_params(cls) -> dict:
        """Small settings under which the common checks (:mod:`sparsesim.checks`) run this
        estimator in well under a second: each class states its own (default: none)."""
        return {}

    def __sklearn_is_fitted__(self) -> bool:
        return "n_features_in_" in self.__dict__

    def _check_fitted(self) -> None:
        check_fitted(self)

    def __sklearn_tags__(self) -> SparsesimTags:
        base = super().__sklearn_tags__()
        fields = {f: getattr(base, f) for f in base.__dataclass_fields__}
        tags = SparsesimTags(**fields, learner_kind=self._learner_kind, skipped_checks=dict(self._skipped_checks))
        tags.input_tags.sparse = True
        return tags


class TripletLearner(SparsesimEstimator):
    """A similarity learned from triplets (anchor, first, second) of rows of a corpus.

    Subclasses implement

    * ``_init_state(d)`` — create the engine for ``d`` features (called once per ``fit`` and on
      the first :meth:`partial_fit_triplets`; the counters are set here);
    * ``_update(X, triplets, signs, **extra) -> (losses, queried)`` — run the update rule over
      already checked inputs; ``queried`` is ``None`` for learners that see every label;
    * ``_triplet_stream(y, **views)`` — the paper protocol: yields keyword batches
      ``{"triplets": ..., "signs": ..., ...}`` for the update;
    * ``model_`` — the learned model.

    Attributes
    ----------
    n_features_in_ : int
    n_triplets_seen_ : int
        Triplets received.
    n_updates_ : int
        Triplets that changed the model (positive loss, and queried where labels are asked).
    train_seconds_ : float
        Wall time spent in the update rule.
    resolved_params_ : dict
        The numbers the ``"auto"`` parameters took (``{}`` without any; multi-task learners:
        ``None`` until their first update).
    """

    _learner_kind = "triplet"
    _state_attrs = ("n_features_in_", "n_triplets_seen_", "n_updates_", "train_seconds_")
    _fit_chunk = 4096
    # triplets learned between two progress reports (the same triplets, in the same order, as in
    # the _fit_chunk batches: the model is the same, tests/test_cli_progress.py checks it)
    _progress_chunk = 1024

    # -- hooks --------------------------------------------------------------------------------
    def _init_state(self, d: int) -> None:
        self.n_features_in_ = int(d)
        self.n_triplets_seen_ = 0
        self.n_updates_ = 0
        self.train_seconds_ = 0.0
        self.__dict__.setdefault("resolved_params_", {})  # a learner with "auto" parameters sets its own

    def _update(self, X, triplets, signs, **extra):  # pragma: no cover - abstract
        raise NotImplementedError

    def _triplet_stream(self, y, **views):  # pragma: no cover - abstract
        raise NotImplementedError

    # -- the triplet-level method ---------------------------------------------------------------
    def partial_fit_triplets(self, X, triplets, signs=None):
        """Update the model with ``triplets`` over the rows of ``X``, in order.

        Parameters
        ----------
        X : sparse matrix or array, shape (n_rows, n_features), or CheckedRows
            Documents the triplets index: checked here, or rows checked already
            (:class:`~sparsesim.validation.CheckedRows`, e.g. the feedback learner's batch) used
            as they are.
        triplets : array of int, shape (n, 3)
            (anchor, first, second) row indices: with sign +1 the anchor should be more similar
            to the first document than to the second.
        signs : array of {-1, +1}, shape (n,), optional
            Per-triplet label (default all +1); -1 swaps the roles of the two documents.

        Returns
        -------
        self
        """
        X = rows_of(X, n_features=self.__dict__.get("n_features_in_"))  # CheckedRows: as they are
        if not self.__sklearn_is_fitted__():
            check_params(self)
            self._init_state(X.shape[1])
        return self._learn(X, triplets, signs)

    def queried_labels(self) -> int:
        """How many triplet labels the learner asked for: every triplet it saw, unless it chooses
        which to ask (the active learners count their queries)."""
        return int(self.n_triplets_seen_)

    def _learn(self, X, triplets, signs=None, **extra):
        """Check the triplets, run the update rule on an already checked ``X``, count."""
        triplets, signs = check_triplets(triplets, X.shape[0], signs)
        start = time.perf_counter()
        try:
            losses, queried = self._update(X, triplets, signs, **extra)
        finally:
            self.train_seconds_ += time.perf_counter() - start
            self._model_cache = None
        self.last_losses_ = losses  # hinge loss of each triplet of this call before its update (0: no update)
        self._count(triplets.shape[0], losses, queried)
        return self

    def _count(self, n, losses, queried) -> None:
        self.n_triplets_seen_ += int(n)
        self.n_updates_ += int(np.count_nonzero(losses))

    # -- learning from labels -------------------------------------------------------------------
    def fit(self, X, y, progress=None):
        """Learn from the triplets the paper protocol draws from labels ``y``.

        Parameters
        ----------
        X : sparse matrix or array, shape (n_documents, n_features)
        y : array, shape (n_documents,)
            Class labels. Documents of classes with a single document cannot form a positive
            pair: they are left out, with one :class:`~sparsesim.exceptions.SmallClassWarning`.
        progress : callable, optional
            Called with the number of triplets processed so far: 0 when learning starts, then
            after each chunk.

        Returns
        -------
        self
        """
        X = check_fit_matrix(X)
        y = check_labels(y, X.shape[0], min_per_class=1)
        rows = usable_rows(y, warn=True)  # a class of one document cannot give a positive
        if rows is not None:
            X, y = X[rows], y[rows]
        return self._fit_labelled(X, y, progress)

    def _fit_labelled(self, X, y, progress=None):
        """Learn from the protocol's triplets over checked ``X`` and usable labels ``y`` (a hook for
        learners whose triplets depend on ``X``, e.g. negatives mined with the model)."""
        return self._fit_stream(X, self._triplet_stream(y), progress)

    def _start(self, d: int) -> None:
        """Set the fitted state up for ``d`` features (``fit`` passes its views, e.g. tasks)."""
        self._init_state(d)

    def _fit_stream(self, X, stream, progress=None, **views):
        """Reset, set the state up for ``X`` and learn from every batch of ``stream`` (X checked once)."""
        self._reset()
        self._start(X.shape[1], **views)
        done = 0
        if progress is not None:
            progress(0)  # learning starts (the data are checked and the state is set up)
            if self._progress_chunk:
                stream = _sub_batches(stream, self._progress_chunk)
        for batch in stream:
            self._learn(X, **batch)
            done += batch["triplets"].shape[0]
            if progress is not None:
                progress(done)
        self.__dict__.setdefault("resolved_params_", {})  # a learner without "auto" parameters
        return self

    # -- scoring ------------------------------------------------------------------------------
    @property
    def model_(self):  # pragma: no cover - abstract
        raise NotImplementedError

    def score(self, X, y) -> float:
        """Mean average precision (MAP) of retrieval among the documents of ``X`` by label ``y``.

        Every document queries all the others with the learned similarity; documents with the
        same label are the relevant ones. Higher is better, so scikit-learn's search tools
        (``GridSearchCV``, ``cross_val_score``) can use it without a custom scorer.
        """
        self._check_fitted()
        X = check_csr(X)
        if X.shape[1] != self.n_features_in_:
            raise InvalidInputError(f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                                    f"{self.n_features_in_} features as input (feature-count mismatch)")
        y = check_labels(y, X.shape[0])
        return float(evaluate_retrieval(self.model_.scorer(X), y, k=min(10, max(1, X.shape[0] - 1)))["map"])


class OnlineClassifier(SparsesimEstimator):
    """A classifier learned online from a labelled stream (scikit-learn's ``partial_fit`` meaning).

    Subclasses implement ``partial_fit(X, y, ...)``: one online pass over the rows, in order,
    continuing from the current model. ``fit`` resets the state listed in ``_state_attrs`` and
    makes one pass; extra keyword arguments (views of the data, e.g. precomputed source scores)
    go to ``partial_fit``.
    """

    _learner_kind = "online-classifier"

    def fit(self, X, y, **views):
        """Reset the online state and make one pass over ``X``, ``y`` (see :meth:`partial_fit`).
        Afterwards ``resolved_params_`` holds the numbers the ``"auto"`` parameters took (``{}``
        without any; ``None`` while a learner waits for streams to resolve them)."""
        self._reset()
        self.partial_fit(X, y, **views)
        self.__dict__.setdefault("resolved_params_", {})
        return self

    def partial_fit(self, X, y, **views):  # pragma: no cover - abstract
        raise NotImplementedError


def _sub_batches(stream, size: int):
    """The batches of ``stream`` cut into consecutive pieces of at most ``size`` triplets (the
    arrays that run along the triplets are cut; other entries are passed on whole)."""
    for batch in stream:
        n = batch["triplets"].shape[0]
        if n <= size:
            yield batch
            continue
        for lo in range(0, n, size):
            yield {key: value[lo:lo + size] if getattr(value, "shape", ())[:1] == (n,) else value
                   for key, value in batch.items()}
