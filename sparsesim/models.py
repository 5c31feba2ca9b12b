"""Every persisted model class and its no-pickle file format.

* :class:`BilinearSimilarity` — S(x, x') = x^T M x' (single-task similarity learners, baselines).
* :class:`MultiTaskSimilarity` — K bilinear similarities sharing one part (multi-task similarity).
* :class:`MultiTaskLinearModel` — one linear classifier per task (online multi-task classifiers).

Learners build these (``est.model_``); indexes, workflows and the CLI load them. The module
depends only on the core (validation, persistence, exceptions).
"""

from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp

from .exceptions import FileFormatError, InvalidInputError, InvalidInputTypeError
from .csr_rows import unit_row_data
from .persistence import load_bundle, save_bundle
from .similarity_base import SimilarityModel
from .text import TextFeaturizer
from .validation import MAX_FEATURES, bounded, check_csr, check_csr_arrays, check_meta

# A block of expanded queries (q M) denser than this is multiplied with the corpus as a dense
# array: with OASIS / SORS-I models on isolet, satimage, news20 and Reuters-21578 (block density
# 0.27-1.0) that is 2.2-12.6x faster than scipy's sparse x sparse product, which wins for plain
# dot-product blocks (density 0.002-0.015: 2-6x). The dense array is the query block only, at most
# DENSE_BLOCK_ENTRIES values at a time (64 MiB), never M or the corpus.
DENSE_BLOCK_DENSITY = 0.1
DENSE_BLOCK_ENTRIES = 8 * 2**20


def block_scores(block: sp.csr_matrix, X: sp.csr_matrix, XT) -> np.ndarray:
    """Dense scores ``block @ X.T`` of a block of expanded queries against the corpus ``X``
    (``XT``: ``X.T`` in CSC), by whichever product is faster for the block's density."""
    rows, d = block.shape
    if rows == 0 or d == 0 or block.nnz < DENSE_BLOCK_DENSITY * rows * d:
        return (block @ XT).toarray()
    out = np.empty((rows, X.shape[0]))
    step = max(1, DENSE_BLOCK_ENTRIES // d)
    for lo in range(0, rows, step):
        part = block[lo:lo + step].toarray()
        out[lo:lo + part.shape[0]] = (X @ part.T).T
    return out


MODEL_KIND = "bilinear-similarity"
MULTITASK_MODEL_KIND = "multitask-bilinear-similarity"
LINEAR_MODEL_KIND = "multitask-linear-classifier"

#: What a model file's metadata must hold (see :func:`sparsesim.schema.check_meta`); other keys
#: (algorithm parameters, training facts) are kept as stored but never steer computation.
MODEL_META_SCHEMA = {
    "n_features": ("int", 1, MAX_FEATURES),
    "identity": ("bool",),
    "normalize": ("bool",),
    "nnz": ("int", 0, None),
    "sparsity": ("float?", None, None),
    "algorithm": ("str?",),
    "dataset": ("str?",),
    "split_seed": ("int?", 0, 2**32 - 1),
    "train_fraction": ("float?", 0.0, 1.0, {"low_open": True, "high_open": True}),
    "n_train": ("int?", 0, None),
    "checksum": ("str",),
}


class BilinearSimilarity(SimilarityModel):
    """A bilinear similarity S(x, x') = x^T M x' with M = I + W (or M = W).

    Parameters
    ----------
    W : scipy.sparse matrix, shape (d, d)
        The learned part, kept sparse at rest (CSR).
    identity : bool, default True
        Whether M includes the identity (M = I + W).
    normalize : bool, default False
        L2-normalise documents before scoring, S(x, x') = (x/|x|)^T M (x'/|x'|); with W = 0
        this is the cosine similarity.
    metadata : dict, optional
        Algorithm, parameters and training facts (saved with the model).
    featurizer : TextFeaturizer, optional
        The fitted text featuriser (TF-IDF) the model's features come from; saved in the model
        file (JSON + arrays, no pickle) so :meth:`transform` turns new texts into queries.

    Notes
    -----
    Scoring never forms M densely: queries are multiplied with the sparse M, and the result
    with the corpus, in blocks.
    """

    model_kind = MODEL_KIND

    def __init__(self, W, identity: bool = True, normalize: bool = False, metadata: dict | None = None,
                 featurizer: TextFeaturizer | None = None):
        if not sp.issparse(W) or W.ndim != 2 or W.shape[0] != W.shape[1]:
            raise InvalidInputError(f"W must be a square sparse matrix, got {getattr(W, 'shape', None)}")
        if W.dtype.kind not in "biuf":
            raise InvalidInputTypeError(f"W must hold real numbers, got dtype {W.dtype}")
        self.W = sp.csr_matrix(W, dtype=np.float64)
        self.W.sum_duplicates()
        self.W.sort_indices()
        if not np.all(np.isfinite(self.W.data)):
            raise InvalidInputError("W contains NaN or infinite values")
        self.identity = bool(identity)
        self.normalize = bool(normalize)
        self._keep(metadata, featurizer)

    # -- text -----------------------------------------------------------------------------

    @classmethod
    def from_pipeline(cls, pipeline) -> "BilinearSimilarity":
        """The model of a fitted ``Pipeline([TfidfVectorizer(), <sparsesim learner>])``, featuriser attached.

        Examples
        --------
        >>> from sklearn.pipeline import make_pipeline
        >>> from sklearn.feature_extraction.text import TfidfVectorizer
        >>> from sparsesim.learners.baselines import Cosine
        >>> pipe = make_pipeline(TfidfVectorizer(), Cosine()).fit(["a cat", "a dog", "the cat"], [0, 1, 0])
        >>> BilinearSimilarity.from_pipeline(pipe).transform(["cat"]).shape
        (1, 3)
        """
        steps = getattr(pipeline, "steps", None)
        if not steps or len(steps) != 2:
            raise InvalidInputError("expected a fitted Pipeline of two steps: TfidfVectorizer, then a sparsesim learner")
        vectorizer, learner = steps[0][1], steps[1][1]
        model = getattr(learner, "model_", None)
        if not isinstance(model, cls):
            raise InvalidInputError(f"the pipeline's last step ({type(learner).__name__}) has no fitted similarity model_")
        out = cls(model.W, identity=model.identity, normalize=model.normalize, metadata=model.metadata)
        return out.set_featurizer(TextFeaturizer(vectorizer))

    # -- structure ------------------------------------------------------------------------
    @property
    def n_features(self) -> int:
        return self.W.shape[0]

    @property
    def M(self) -> sp.csr_matrix:
        """M as a sparse matrix (I + W when ``identity``)."""
        if self.identity:
            return (self.W + sp.identity(self.n_features, format="csr")).tocsr()
        return self.W

    def nnz(self) -> int:
        """Nonzero entries of M (the diagonal counted where I + W is nonzero)."""
        if not self.identity:
            return int(np.count_nonzero(self.W.data))
        diag_w = self.W.diagonal()
        off = int(np.count_nonzero(self.W.data)) - int(np.count_nonzero(diag_w))
        return off + int(np.count_nonzero(1.0 + diag_w))

    @property
    def nbytes(self) -> int:
        """Bytes of W's CSR arrays (the text featuriser not counted)."""
        W = self.W
        return int(W.data.nbytes + W.indices.nbytes + W.indptr.nbytes)

    def sparsity(self) -> float:
        """1 - nnz(M) / d^2, counted over all d^2 entries of M."""
        d = self.n_features
        return 1.0 - self.nnz() / float(d) / float(d)

    def log_norm_bound(self) -> float:
        """``log`` of an upper bound on the spectral norm of M, ``sqrt(|M|_1 |M|_inf)`` (the largest
        absolute column and row sums): ``|x^T M x'| <= exp(bound) |x| |x'|`` for any documents.
        ``-inf`` for M = 0; computed once per W (``O(nnz(W))``)."""
        key = (id(self.W.data), self.W.nnz)
        cached = getattr(self, "_log_norm_bound", None)
        if cached is not None and cached[0] == key:
            return cached[1]
        d, W = self.n_features, self.W
        rows, cols = np.zeros(d), np.zeros(d)
        step = max(1, (1 << 22) * d // max(W.nnz, 1))  # row blocks of ~4M entries: bounded scratch memory
        with np.errstate(over="ignore"):
            for lo in range(0, d, step):
                hi = min(d, lo + step)
                a, b = int(W.indptr[lo]), int(W.indptr[hi])
                absw = np.abs(W.data[a:b])
                rows[lo:hi] = np.bincount(np.repeat(np.arange(hi - lo), np.diff(W.indptr[lo:hi + 1])), weights=absw,
                                          minlength=hi - lo)
                cols += np.bincount(W.indices[a:b], weights=absw, minlength=d)
            if self.identity:
                rows, cols = rows + 1.0, cols + 1.0
            with np.errstate(divide="ignore"):
                value = 0.5 * (np.log(rows.max(initial=0.0)) + np.log(cols.max(initial=0.0)))
        self._log_norm_bound = (key, float(value))
        return float(value)

    # -- scoring --------------------------------------------------------------------------
    def _check(self, X, name):
        X = check_csr(X, name=name, n_features=self.n_features)
        if self.normalize:
            X = sp.csr_matrix((unit_row_data(X), X.indices.copy(), X.indptr.copy()), shape=X.shape)
        return X

    def transform_queries(self, Q) -> sp.csr_matrix:
        """Q M (so that S(q, x) = (q M) . x)."""
        return self._times_M(self._check(Q, "queries"))

    def _times_M(self, Q: sp.csr_matrix) -> sp.csr_matrix:
        # Q already checked (and normalised when ``normalize``)
        out = Q @ self.W
        return (out + Q).tocsr() if self.identity else out.tocsr()

    def transform_corpus(self, X) -> sp.csr_matrix:
        """X M^T (so that S(q, x) = q . (M x)); what an index precomputes once."""
        X = self._check(X, "corpus")
        out = X @ self.W.T
        return (out + X).tocsr() if self.identity else out.tocsr()

    def _pair_scores(self, A: sp.csr_matrix, B: sp.csr_matrix) -> np.ndarray:
        return np.asarray(self._times_M(A).multiply(B).sum(axis=1)).ravel()

    def score_matrix(self, Q, X, block_size: int = 2048) -> np.ndarray:
        """Dense (n_queries, n_corpus) scores S(Q[i], X[j]), computed in query blocks."""
        Q = self._check(Q, "queries")
        X = self._check(X, "corpus")
        XT = X.T.tocsc()
        out = np.empty((Q.shape[0], XT.shape[1]))
        for lo in range(0, Q.shape[0], block_size):
            block = self._times_M(Q[lo:lo + block_size])
            out[lo:lo + block.shape[0]] = block_scores(block, X, XT)
        return out

    def scorer(self, X):
        """``score_fn(rows)`` for :func:`sparsesim.evaluation.evaluate_retrieval` over corpus ``X``.

        Each call multiplies only the requested rows with M, so memory stays bounded by the
        block of queries (``X M`` is never formed for the whole corpus: with a large W it can
        be nearly dense).
        """
        X = self._check(X, "corpus")
        XT = X.T.tocsc()

        def score_fn(rows):
            return block_scores(self._times_M(X[rows]), X, XT)

        return score_fn

    # -- persistence ----------------------------------------------------------------------
    def _arrays(self) -> dict:
        W = self.W
        return {"indptr": W.indptr.astype(np.int64), "indices": W.indices.astype(np.int32), "data": W.data}

    def save(self, path: str | os.PathLike, metadata: dict | None = None) -> dict:
        """Write the model atomically as npz + JSON metadata (no pickle). Returns the metadata.

        ``metadata`` is written instead of the model's own (the model is not changed): e.g. a
        feedback snapshot's counters on a shared, published model version.
        """
        meta = dict(self.metadata if metadata is None else metadata)
        meta.update(n_features=self.n_features, identity=self.identity, normalize=self.normalize, nnz=self.nnz(),
                    sparsity=self.sparsity())
        return self._write(path, self._arrays(), meta)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "BilinearSimilarity":
        """Read a model written by :meth:`save`, verifying format, checksum, metadata schema and arrays.

        Nothing in the file is trusted: the metadata must match :data:`MODEL_META_SCHEMA`, the arrays
        must have exactly the stored dtypes (int64 ``indptr``, int32 ``indices``, float64 ``data``;
        nothing is coerced) and form a canonical CSR matrix of shape (d, d) with finite values.

        Raises
        ------
        FileFormatError
            Missing, truncated, corrupt or inconsistent file.
        """
        arrays, meta = load_bundle(path, kind=MODEL_KIND)
        check_meta(meta, MODEL_META_SCHEMA, str(path))
        cls._check_split_facts(meta, path)
        if not {"indptr", "indices", "data"} <= set(arrays):
            raise FileFormatError(f"{path}: model arrays {bounded(sorted(arrays), 120)}, expected data, indices, indptr")
        d = meta["n_features"]
        W = cls._stored_csr(arrays.pop("indptr"), arrays.pop("indices"), arrays.pop("data"), d, path)
        featurizer = cls._stored_featurizer(arrays, meta, path, d)
        model = cls(W, identity=meta["identity"], normalize=meta["normalize"], metadata=meta, featurizer=featurizer)
        # facts derived from W must be W's (the metadata is shown to users)
        sparsity = meta.get("sparsity")
        if meta["nnz"] != model.nnz() or (sparsity is not None and abs(sparsity - model.sparsity()) > 1e-12):
            raise FileFormatError(f"{path}: the metadata says nnz(M) = {meta['nnz']}, sparsity {sparsity}; the stored "
                                  f"matrix has {model.nnz()}, {model.sparsity()} (the file was altered)")
        return model

    def __repr__(self):
        return (f"BilinearSimilarity(d={self.n_features}, nnz(M)={self.nnz()}, "
                f"identity={self.identity}, algorithm={self.metadata.get('algorithm')!r})")


def _json_label(v):
    return v.item() if isinstance(v, np.generic) else v


#: What a multi-task model file's metadata must hold (other keys are kept as stored).
MULTITASK_META_SCHEMA = {
    "n_features": ("int", 1, MAX_FEATURES),
    "n_tasks": ("int", 1, 1 << 20),
    "has_shared": ("bool",),
    "checksum": ("str",),
}


class MultiTaskSimilarity:
    """K bilinear similarities S^k(x, x') = x^T (I + S + O_k) x' sharing one matrix S.

    Parameters
    ----------
    own : list of sparse matrices (d, d)
        The per-task parts O_k (zero matrices for a purely global model).
    shared : sparse matrix (d, d) or None
        The shared part S (``None`` = 0).
    tasks : sequence
        Task labels, one per own matrix (JSON-serialisable: str or int).
    metadata : dict, optional
    """

    def __init__(self, own, shared=None, tasks=None, metadata=None):
        if not own:
            raise InvalidInputError("a multi-task model needs at least one task")
        self.own = [sp.csr_matrix(m, dtype=np.float64) for m in own]
        d = self.own[0].shape[0]
        for m in self.own:
            if m.shape != (d, d):
                raise InvalidInputError(f"every task matrix must be {d} x {d}, got {m.shape}")
        self.shared = None if shared is None else sp.csr_matrix(shared, dtype=np.float64)
        if self.shared is not None and self.shared.shape != (d, d):
            raise InvalidInputError(f"the shared matrix must be {d} x {d}, got {self.shared.shape}")
        self.tasks = [_json_label(t) for t in (tasks if tasks is not None else range(len(self.own)))]
        if len(self.tasks) != len(self.own):
            raise InvalidInputError(f"{len(self.tasks)} task labels for {len(self.own)} task matrices")
        self.metadata = dict(metadata or {})
        self._cache = {}

    @property
    def n_tasks(self) -> int:
        return len(self.own)

    @property
    def n_features(self) -> int:
        return self.own[0].shape[0]

    def task_index(self, task) -> int:
        """Position of ``task``: looked up among the task labels first, else taken as an index."""
        for k, t in enumerate(self.tasks):
            if t == _json_label(task):
                return k
        if isinstance(task, (int, np.integer)) and 0 <= int(task) < self.n_tasks:
            return int(task)
        raise InvalidInputError(f"unknown task {task!r}; tasks: {self.tasks}")

    def model_for(self, task) -> BilinearSimilarity:
        """The :class:`BilinearSimilarity` of ``task`` (M = I + S + O_k)."""
        k = self.task_index(task)
        if k not in self._cache:
            W = self.own[k] if self.shared is None else (self.own[k] + self.shared)
            W = sp.csr_matrix(W)
            W.eliminate_zeros()
            meta = dict(self.metadata)
            meta["task"] = self.tasks[k]
            self._cache[k] = BilinearSimilarity(W, identity=True, metadata=meta)
        return self._cache[k]

    def nnz(self) -> None:
        """``None``: one M per task, no single sparse matrix (see :meth:`model_for`)."""
        return None

    def score_pairs(self, task, A, B) -> np.ndarray:
        """Row-wise S^task(A[i], B[i])."""
        return self.model_for(task).score_pairs(A, B)

    def score_matrix(self, task, Q, X) -> np.ndarray:
        """Dense similarities of queries ``Q`` against corpus ``X`` under task ``task``'s model."""
        return self.model_for(task).score_matrix(Q, X)

    # -- persistence ----------------------------------------------------------------------
    def _arrays(self) -> dict:
        out = {}
        mats = [(f"own{k}", m) for k, m in enumerate(self.own)]
        if self.shared is not None:
            mats.append(("shared", self.shared))
        for name, m in mats:
            m = sp.csr_matrix(m)
            m.sort_indices()
            out[f"{name}_indptr"] = m.indptr.astype(np.int64)
            out[f"{name}_indices"] = m.indices.astype(np.int32)
            out[f"{name}_data"] = m.data.astype(np.float64)
        return out

    def save(self, path: str | os.PathLike) -> dict:
        """Write the model atomically (npz + JSON metadata, no pickle). Returns the metadata."""
        meta = dict(self.metadata)
        meta.update(n_features=self.n_features, n_tasks=self.n_tasks, tasks=list(self.tasks),
                    has_shared=self.shared is not None)
        return save_bundle(path, self._arrays(), meta, kind=MULTITASK_MODEL_KIND)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "MultiTaskSimilarity":
        """Read a model written by :meth:`save` (format, kind and checksum verified)."""
        arrays, meta = load_bundle(path, kind=MULTITASK_MODEL_KIND)
        check_meta(meta, MULTITASK_META_SCHEMA, str(path))
        d = meta["n_features"]

        def mat(name):
            try:
                parts = [arrays.pop(f"{name}_{part}") for part in ("indptr", "indices", "data")]
            except KeyError:
                raise FileFormatError(f"{path}: multi-task model arrays lack {name}") from None
            try:  # exactly the dtypes written, canonical, finite: nothing is coerced
                check_csr_arrays(*parts, (d, d), name=name, data_dtypes=(np.float64,), sorted_indices=True)
                if parts[0].dtype != np.int64 or parts[1].dtype != np.int32:
                    raise InvalidInputError(f"{name} index arrays of dtypes {parts[0].dtype}/{parts[1].dtype}; "
                                            "expected int64/int32")
            except InvalidInputError as exc:
                raise FileFormatError(f"{path}: inconsistent multi-task model arrays ({bounded(exc, 200)})") from None
            m = sp.csr_matrix((parts[2], parts[1], parts[0]), shape=(d, d))  # one index dtype (scipy's choice)
            m.has_sorted_indices = True
            return m

        own = [mat(f"own{k}") for k in range(meta["n_tasks"])]
        shared = mat("shared") if meta["has_shared"] else None
        if arrays:
            raise FileFormatError(f"{path}: unexpected model arrays {bounded(sorted(arrays), 120)}")
        tasks = meta.get("tasks")
        if tasks is not None and (not isinstance(tasks, list) or len(tasks) != meta["n_tasks"]
                                  or not all(isinstance(t, (str, int, float)) and not isinstance(t, bool) for t in tasks)
                                  or len(set(map(repr, tasks))) != len(tasks)):
            raise FileFormatError(f"{path}: tasks must be {meta['n_tasks']} distinct task names")
        return cls(own, shared, tasks=meta.get("tasks"), metadata=meta)

    def __repr__(self):
        return (f"MultiTaskSimilarity(d={self.n_features}, tasks={self.tasks}, "
                f"shared={'yes' if self.shared is not None else 'no'}, "
                f"algorithm={self.metadata.get('algorithm')!r})")


def json_value(v):
    """A JSON-safe copy of a parameter value (numpy scalars unwrapped, other objects by repr)."""
    if isinstance(v, np.generic):
        return v.item()
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [json_value(x) for x in v]
    return repr(v)


class MultiTaskLinearModel:
    """The learned weights of an online multi-task classifier: one linear model per task.

    Parameters
    ----------
    coef : array, shape (n_features, n_tasks)
        Column ``i`` is task ``i``'s weight vector (the estimators' ``coef_``).
    parts : dict of str to array of shape (n_features, n_tasks), optional
        Named components whose sum is ``coef`` (ROMCO: ``"U"``, the low-rank part, and ``"V"``, the
        group-sparse part), kept so a learner can resume from them (``ROMCO.set_state(U, V)``).
    metadata : dict, optional
        Algorithm, parameters and training facts (JSON-serialisable), saved with the model.
    """

    def __init__(self, coef, parts: dict | None = None, metadata: dict | None = None):
        coef = np.array(coef, dtype=np.float64)
        if coef.ndim != 2 or coef.shape[1] < 1:
            raise InvalidInputError(f"coef must be an (n_features, n_tasks) matrix, got shape {coef.shape}")
        if not np.all(np.isfinite(coef)):
            raise InvalidInputError("coef contains NaN or infinite values")
        self.coef = coef
        self.parts = {}
        for name, part in (parts or {}).items():
            part = np.array(part, dtype=np.float64)
            if part.shape != coef.shape or not np.all(np.isfinite(part)):
                raise InvalidInputError(f"part {name!r} must be a finite {coef.shape} matrix")
            self.parts[str(name)] = part
        if self.parts and not np.allclose(sum(self.parts.values()), coef, rtol=1e-9, atol=1e-12):
            raise InvalidInputError(f"the parts {sorted(self.parts)} do not add up to coef")
        self.metadata = dict(metadata or {})

    @property
    def n_features(self) -> int:
        return self.coef.shape[0]

    @property
    def n_tasks(self) -> int:
        return self.coef.shape[1]

    def nnz(self) -> None:
        """``None``: a linear classifier, no similarity matrix M."""
        return None

    def decision_function(self, X, task: int) -> np.ndarray:
        """Margins of the rows of ``X`` (CSR or dense, ``n_features`` columns) for ``task``."""
        if not 0 <= int(task) < self.n_tasks:
            raise InvalidInputError(f"task {task} out of range 0..{self.n_tasks - 1}")
        X = check_csr(X, n_features=self.n_features)
        return np.asarray(X @ self.coef[:, int(task)]).ravel()

    def predict(self, X, task: int) -> np.ndarray:
        """Labels in {-1, +1} for ``task`` (margin 0 -> +1)."""
        return np.where(self.decision_function(X, task) >= 0, 1, -1)

    def save(self, path: str | os.PathLike) -> dict:
        """Write the model atomically (npz + JSON metadata, no pickle). Returns the metadata."""
        meta = dict(self.metadata)
        meta.update(n_features=self.n_features, n_tasks=self.n_tasks, parts=sorted(self.parts))
        arrays = {"coef": self.coef, **{f"part_{name}": part for name, part in self.parts.items()}}
        return save_bundle(path, arrays, meta, kind=LINEAR_MODEL_KIND)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "MultiTaskLinearModel":
        """Read a model written by :meth:`save` (format, kind and checksum verified)."""
        arrays, meta = load_bundle(path, kind=LINEAR_MODEL_KIND)
        try:
            coef = arrays["coef"]
            if coef.shape != (int(meta["n_features"]), int(meta["n_tasks"])):
                raise ValueError(f"coef has shape {coef.shape}")
            parts = {name: arrays[f"part_{name}"] for name in meta.get("parts", [])}
            return cls(coef, parts=parts, metadata=meta)
        except (KeyError, ValueError, TypeError, InvalidInputError) as exc:
            raise FileFormatError(f"{path}: inconsistent multi-task linear model ({exc})") from None

    def __repr__(self):
        return (f"MultiTaskLinearModel(n_features={self.n_features}, n_tasks={self.n_tasks}, "
                f"parts={sorted(self.parts)}, algorithm={self.metadata.get('algorithm')!r})")
