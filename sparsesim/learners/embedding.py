"""A low-rank similarity learned from class-proxy and document triplets, mixed toward a lexical one.

:class:`ProxySSI` learns ``S(x, x') = alpha <l(x), l(x')> + <e(x), e(x')>`` with ``e(x) = xP / |xP|``
and ``l(x)`` the rows raised entry-wise to a power gamma and L2-normalised (gamma = 1: cosine)
(rows L2-normalised first, ``P`` dense ``(d, r)``): Supervised Semantic Indexing's low-rank
bilinear form (Bai et al. 2009) with normalised embeddings, trained online with AdaGrad from

* class-proxy triplets: each anchor against every learned class proxy, a softmax with a
  temperature over the cosines to the proxies (Movshovitz-Attias et al. 2017; NormSoftmax);
* document triplets (anchor, same-class document, other-class document), the negative mined
  from the current model's own ranking of a random pool (semi-hard, Schroff et al. 2015) —
  the only rule :meth:`ProxySSI.partial_fit_triplets` applies, since a bare triplet has no class.

``fit`` holds part of the training data out, keeps the pass (epoch), the mixing weight
``alpha`` and the power ``gamma`` that rank it best, then trains again on all of it for that many passes.
Epoch 0 (no training: ``P`` is a random projection, whose cosines approximate the documents'
own) and large ``alpha`` are candidates, so a model that does not transfer falls back toward
cosine. ``validation="classes"`` holds out whole classes, for models that will serve documents of
classes not seen in training. The update rules are in :mod:`sparsesim.engine.embedding_rules`.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from ..embedding import EmbeddingSimilarity, lexical_rows
from ..engine.embedding_rules import run_batch
from ..evaluation import evaluate_retrieval
from ..triplets import stratified_split, usable_rows
from ..validation import check_fit_matrix, check_labels, check_params
from .base import TripletLearner

__all__ = ["ProxySSI", "ALPHA_GRID", "LEXICAL_GRID", "IDF_GRID"]

#: Mixing weights toward cosine that ``identity_weight="auto"`` chooses from on held-out data.
ALPHA_GRID = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 16.0, 256.0)
#: Powers of the identity part's lexical rows that ``lexical_power="auto"`` chooses from.
LEXICAL_GRID = (1.0, 0.75, 0.5)
#: Powers of the idf weights of the identity part that ``lexical_idf="auto"`` chooses from.
IDF_GRID = (0.0, 1.0)
_VALIDATION = ("documents", "classes", "none")
_CRITERIA = ("map", "map+ap@10")
_NEGATIVES = ("semihard", "random")
_MAX_VALIDATION_DOCS = 3000
_POOL = 256


def _row_normalised(X: sp.csr_matrix) -> sp.csr_matrix:
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    return sp.csr_matrix(sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ X)


def _embed(Xn: sp.csr_matrix, P: np.ndarray) -> np.ndarray:
    E = np.asarray(Xn @ P)
    norms = np.sqrt(np.einsum("ij,ij->i", E, E))
    return E / np.where(norms > 0, norms, 1.0)[:, None]


class ProxySSI(TripletLearner):
    """Low-rank normalised-embedding similarity learned from class-proxy and mined triplets.

    ``S(x, x') = alpha <l(x), l(x')> + <e(x), e(x')>``, ``e(x) = n(x) P / |n(x) P|``, ``n(x) = x / |x|``,
    ``l(x)`` = ``n(x)`` raised entry-wise to ``gamma`` (sign kept) and L2-normalised.

    Parameters
    ----------
    n_components : int or "auto", default "auto"
        Width r of the embedding. ``"auto"``: ``min(128, 20 * nnz(X) // n_features)``, so ``P`` holds
        at most 20 times the training corpus's stored entries.
    scale : float or "auto", default "auto"
        Temperature s of the proxy softmax. ``"auto"``: ``log(3 (K - 1))`` for K classes, the scale
        at which an anchor on its own proxy, orthogonal to the others, has probability 3/4.
    learning_rate : float, default 0.1
        AdaGrad step.
    n_epochs : int, default 4
        Largest number of passes over the training documents (the number kept is chosen on
        held-out data, see ``validation``).
    triplet_weight : float, default 0.0
        Step of the document-triplet rule relative to the proxy rule in ``fit`` (0: proxies only;
        0.5 with mined negatives ranked the same as proxies alone on news20, closed and open set,
        at 1.6-1.8 times the fit time: docs/quality.md).
    negatives : {"semihard", "random"}, default "semihard"
        Negatives of ``fit``'s document triplets: mined from the current model's ranking of a
        random pool of 256 training documents (the most similar other-class document that is
        less similar than the positive, else the most similar), or drawn at random.
    margin : float, default 0.2
        Margin of the document-triplet hinge (in cosine units).
    identity_weight : float or "auto", default "auto"
        Mixing weight alpha toward cosine. ``"auto"``: the value of :data:`ALPHA_GRID` that ranks the
        held-out documents best (1.0 when nothing is held out).
    lexical_power : float in (0, 1] or "auto", default "auto"
        gamma of the identity part, which compares the rows raised entry-wise to gamma and
        L2-normalised (1: cosine; 0.5 on TF-IDF rows: idf once, square-root term frequency, close
        to BM25). ``"auto"``: the value of :data:`LEXICAL_GRID` that ranks the held-out documents
        best, chosen with alpha (1.0 when nothing is held out).
    lexical_idf : float >= 0 or "auto", default "auto"
        beta: the identity part's rows are weighted by ``idf ** beta`` per feature before their
        normalisation, idf computed from the documents given to ``fit``
        (``log((1 + n) / (1 + df)) + 1``); 0: no weights. On TF-IDF rows beta = 1 counts a term's
        idf twice, so rare shared terms weigh more. ``"auto"``: the value of :data:`IDF_GRID` that
        ranks the held-out documents best, chosen with alpha and gamma (0 when nothing is held out).
    criterion : {"map+ap@10", "map"}, default "map+ap@10"
        What the held-out choice of pass, alpha and gamma maximises: the sum of MAP and AP@10
        (the whole ranking and its top), or MAP alone.
    validation : {"documents", "classes", "none"}, default "documents"
        What ``fit`` holds out to choose the pass and alpha: ``validation_fraction`` of each class's
        documents (documents of the training classes will be queried), or that fraction of the
        classes (at least two; the model will serve unseen classes), or nothing (``n_epochs``
        passes, alpha = 1 when ``"auto"``).
    validation_fraction : float, default 0.15
    validation_folds : int, default 1
        With ``validation="classes"``: that many disjoint sets of held-out classes (fewer when the
        classes run out), one model trained per set (each costs one more fit and its held-out
        scoring); the pass, alpha, gamma and beta kept are those of the best criterion summed over
        the sets. Ignored with ``validation="documents"``.
    refit : bool, default True
        After the choice, train again on all documents for the chosen number of passes.
    n_triplets : int, optional
        Budget of anchors (each one a proxy triplet against every class, plus its document
        triplet when ``triplet_weight > 0``): training stops after this many or after ``n_epochs``
        passes, whichever comes first. Default: ``n_epochs`` full passes.
    random_state : int, optional
        Seed of the initial projection, the hold-out, the orders and the triplets.

    Attributes
    ----------
    P_ : ndarray, shape (n_features, n_components)
    proxies_ : ndarray, shape (n_classes, n_components)
    identity_weight_ : float
    n_epochs_ : int
        Passes of the returned model.
    lexical_power_ : float
    lexical_idf_ : float
    idf_ : ndarray of shape (n_features,) or None
        The idf of the documents given to ``fit``.
    resolved_params_ : dict
        The values used: ``n_components``, ``scale`` and, after ``fit``, ``identity_weight``,
        ``lexical_power``, ``lexical_idf`` and ``n_epochs`` (also in the model file's metadata and ``--json`` rows).
    validation_ : list of dict
        Per pass: its number, the held-out MAP at every alpha of :data:`ALPHA_GRID` (best gamma),
        and ``"scores"``: MAP and AP@10 at every (alpha, gamma).
    model_ : EmbeddingSimilarity

    Examples
    --------
    >>> from sparsesim.data import load_dataset
    >>> from sparsesim.learners.embedding import ProxySSI
    >>> data = load_dataset("news20-sample")
    >>> model = ProxySSI(n_epochs=2, random_state=0).fit(data.X, data.y).model_
    >>> model.n_features == data.n_features
    True
    """

    _algorithm = "proxy-ssi"
    #: ``sparsesim tune`` fits each candidate on labels (a grid search), not from a triplet stream
    tune_by_fit = True
    _state_attrs = TripletLearner._state_attrs + ("P_", "proxies_", "GP_", "GC_", "identity_weight_", "n_epochs_",
                                                  "validation_", "classes_", "scale_", "lexical_power_",
                                                  "resolved_params_", "lexical_idf_", "idf_")
    _fit_chunk = 1024

    @classmethod
    def _unit_test_params(cls) -> dict:
        return {"n_triplets": 120}

    def __init__(self, n_components="auto", scale="auto", learning_rate=0.1, n_epochs=4, triplet_weight=0.0,
                 negatives="semihard", margin=0.2, identity_weight="auto", validation="documents",
                 validation_fraction=0.15, refit=True, n_triplets=None, random_state=None, lexical_power="auto",
                 criterion="map+ap@10", validation_folds=1, lexical_idf="auto"):
        self.n_components = n_components
        self.scale = scale
        self.learning_rate = learning_rate
        self.n_epochs = n_epochs
        self.triplet_weight = triplet_weight
        self.negatives = negatives
        self.margin = margin
        self.identity_weight = identity_weight
        self.validation = validation
        self.validation_fraction = validation_fraction
        self.refit = refit
        self.n_triplets = n_triplets
        self.random_state = random_state
        self.lexical_power = lexical_power
        self.criterion = criterion
        self.validation_folds = validation_folds
        self.lexical_idf = lexical_idf

    _OPEN = {"low_open": True}
    _param_spec = {
        "n_components": ("int", 1, 1 << 16), "scale": ("float", 0, None, _OPEN),
        "learning_rate": ("float", 0, None, _OPEN), "n_epochs": ("int", 1, 10_000),
        "triplet_weight": ("float", 0, None), "negatives": ("choice", _NEGATIVES), "margin": ("float", 0, None),
        "identity_weight": ("float", 0, None), "validation": ("choice", _VALIDATION),
        "validation_fraction": ("float", 0, 1, {"low_open": True, "high_open": True}), "refit": ("bool",),
        "n_triplets": ("int?", 1, None), "lexical_power": ("float", 0, 1, {"low_open": True}),
        "criterion": ("choice", _CRITERIA), "validation_folds": ("int", 1, 100),
        "lexical_idf": ("float", 0, 16),
    }

    def _width(self, X) -> int:
        if isinstance(self.n_components, str):
            return int(max(1, min(128, 20 * X.nnz // X.shape[1])))
        return int(self.n_components)

    def _scale(self, n_classes: int) -> float:
        if isinstance(self.scale, str):
            return float(max(1.0, math.log(3.0 * max(n_classes - 1, 1))))
        return float(self.scale)

    # -- state ----------------------------------------------------------------------------
    def _init_state(self, d: int, width: int | None = None, n_classes: int = 0) -> None:
        check_params(self)
        super()._init_state(d)
        r = int(width if width is not None else (self.n_components if not isinstance(self.n_components, str) else 128))
        rng = np.random.default_rng(self.random_state)
        self.P_ = rng.standard_normal((d, r)) / math.sqrt(r)  # a random projection: cosines about kept
        self.proxies_ = rng.standard_normal((n_classes, r))
        self.GP_ = np.zeros(d)
        self.GC_ = np.zeros(n_classes)
        self.scale_ = self._scale(n_classes)
        self.identity_weight_ = 1.0 if isinstance(self.identity_weight, str) else float(self.identity_weight)
        self.lexical_power_ = 1.0 if isinstance(self.lexical_power, str) else float(self.lexical_power)
        self.lexical_idf_ = 0.0 if isinstance(self.lexical_idf, str) else float(self.lexical_idf)
        self.idf_ = getattr(self, "idf_", None)  # set by fit from its documents, kept across its fits
        self.n_epochs_ = 0
        self.validation_ = []
        self.resolved_params_ = {"n_components": int(r), "scale": float(self.scale_)}

    def _weights(self, beta: float):
        """The identity part's per-feature weights ``idf ** beta`` (None: beta = 0 or no idf yet)."""
        idf = getattr(self, "idf_", None)
        return None if beta == 0.0 or idf is None else idf ** float(beta)

    def _update(self, X, triplets, signs, classes=None, normalized=False):
        Xn = X if normalized else _row_normalised(X)
        if classes is None:  # bare triplets: the document rule alone, at full step
            classes = np.full(triplets.shape[0], -1, np.int64)
            weight = 1.0
        else:
            weight = float(self.triplet_weight)
        losses = np.zeros(triplets.shape[0])
        signs = np.ones(triplets.shape[0]) if signs is None else signs
        run_batch(Xn.indptr, Xn.indices, Xn.data, np.ascontiguousarray(triplets, np.int64),
                  np.ascontiguousarray(signs, np.float64), np.ascontiguousarray(classes, np.int64), self.P_,
                  self.proxies_, self.GP_, self.GC_, self.scale_, float(self.margin), weight,
                  float(self.learning_rate), losses)
        return losses, None

    # -- learning from labels -------------------------------------------------------------
    def _triplet_stream(self, y, Xn, rng):
        """One pass: every document once as an anchor (random order), a random same-class
        document, and an other-class negative (mined or random); batches of ``_fit_chunk``."""
        n = y.size
        order = rng.permutation(n)
        by_class = [np.flatnonzero(y == c) for c in range(int(y.max()) + 1)]
        for lo in range(0, n, self._fit_chunk):
            anchors = order[lo:lo + self._fit_chunk]
            ya = y[anchors]
            pos = np.array([m[rng.integers(m.size)] for m in (by_class[c] for c in ya)], np.int64)
            pool = rng.integers(0, n, size=(anchors.size, 1)) if self.negatives == "random" else \
                rng.integers(0, n, size=_POOL)
            if self.negatives == "random":
                neg = pool[:, 0]
                bad = y[neg] == ya
                while bad.any():
                    neg[bad] = rng.integers(0, n, int(bad.sum()))
                    bad = y[neg] == ya
            else:
                neg = self._mine(Xn, y, anchors, pos, pool)
            keep = y[neg] != ya  # a pool with no other-class document leaves the triplet out
            yield {"triplets": np.stack([anchors, pos, neg], axis=1)[keep], "classes": ya[keep], "normalized": True}

    def _mine(self, Xn, y, anchors, pos, pool):
        """Semi-hard negatives from the current model's ranking of ``pool``: per anchor the most similar
        other-class pool document less similar than its positive, else the most similar one."""
        Ea, Ep, Eq = _embed(Xn[anchors], self.P_), _embed(Xn[pos], self.P_), _embed(Xn[pool], self.P_)
        sims = Ea @ Eq.T
        sims[y[anchors][:, None] == y[pool][None, :]] = -np.inf
        s_pos = np.einsum("ij,ij->i", Ea, Ep)[:, None]
        semi = np.where(sims < s_pos, sims, -np.inf)
        pick = np.where(np.isfinite(semi.max(axis=1)), semi.argmax(axis=1), sims.argmax(axis=1))
        return pool[pick]

    def _train(self, Xn, y, n_classes, width, epochs, rng, on_epoch=None):
        self._init_state(Xn.shape[1], width, n_classes)
        if on_epoch is not None:
            on_epoch(0)
        budget = np.inf if self.n_triplets is None else int(self.n_triplets)
        for epoch in range(1, epochs + 1):
            for batch in self._triplet_stream(y, Xn, rng):
                room = int(min(budget - self.n_triplets_seen_, batch["triplets"].shape[0]))
                if room <= 0:
                    break
                self._learn(Xn, **{k: (v[:room] if isinstance(v, np.ndarray) else v) for k, v in batch.items()})
            self.n_epochs_ = epoch
            if on_epoch is not None:
                on_epoch(epoch)

    def _passes(self, n_documents: int) -> int:
        """Passes over ``n_documents``: ``n_epochs``, fewer when the ``n_triplets`` budget ends sooner."""
        if self.n_triplets is None:
            return int(self.n_epochs)
        return int(min(self.n_epochs, max(1, -(-int(self.n_triplets) // max(1, n_documents)))))

    def _holdout(self, y, rng):
        """The (train rows, held-out rows) pairs of ``fit``'s choice (one per fold), or None when
        nothing can be held out."""
        if self.validation == "none":
            return None
        n_classes = int(y.max()) + 1
        if self.validation == "classes":
            n_out = int(round(self.validation_fraction * n_classes))
            if n_out < 2 or n_classes - n_out < 2:
                return None
            order = rng.permutation(n_classes)
            folds = []
            for f in range(int(self.validation_folds)):
                out = order[f * n_out:(f + 1) * n_out]
                if out.size < 2:
                    break
                held = np.isin(y, out)
                folds.append((np.flatnonzero(~held), np.flatnonzero(held)))
            return folds
        if np.bincount(y).min() < 2 or y.size < 20:
            return None
        train, held = stratified_split(y, 1.0 - float(self.validation_fraction), seed=rng)
        held = held[np.bincount(y[held], minlength=n_classes)[y[held]] >= 2]  # a query needs a relevant one
        if np.unique(y[held]).size < 2:
            return None
        return [(train, held)]

    def fit(self, X, y, progress=None):
        """Learn ``P`` and the proxies from labels ``y``, choosing the pass and alpha on held-out data.

        Parameters
        ----------
        X : sparse matrix or array, shape (n_documents, n_features)
        y : array, shape (n_documents,)
            Class labels (classes with a single document are left out, with a warning).
        progress : callable, optional
            Called with the number of triplets processed so far after each pass.

        Returns
        -------
        self
        """
        X = check_fit_matrix(X)
        y = check_labels(y, X.shape[0], min_per_class=1)
        rows = usable_rows(y, warn=True)
        if rows is not None:
            X, y = X[rows], y[rows]
        self._reset()
        classes, codes = np.unique(y, return_inverse=True)
        codes = codes.reshape(-1).astype(np.int64)
        Xn = _row_normalised(X)
        width = self._width(Xn)
        df = np.bincount(Xn.indices, minlength=Xn.shape[1])
        self.idf_ = np.log((1.0 + Xn.shape[0]) / (1.0 + df)) + 1.0
        rng = np.random.default_rng(self.random_state)
        split = self._holdout(codes, rng)
        history: list = []
        spent = 0.0  # the held-out runs' time counts too
        auto_alpha = isinstance(self.identity_weight, str)
        alphas = ALPHA_GRID if auto_alpha else (float(self.identity_weight),)
        auto_gamma = isinstance(self.lexical_power, str)
        gammas = LEXICAL_GRID if auto_gamma else (float(self.lexical_power),)
        auto_beta = isinstance(self.lexical_idf, str)
        betas = IDF_GRID if auto_beta else (float(self.lexical_idf),)
        epochs = self._passes(X.shape[0])
        alpha = 1.0 if auto_alpha else float(self.identity_weight)
        gamma = 1.0 if auto_gamma else float(self.lexical_power)
        beta = 0.0 if auto_beta else float(self.lexical_idf)
        if split is not None:
            both = self.criterion == "map+ap@10"
            for fold, (tr, va) in enumerate(split):
                if va.size > _MAX_VALIDATION_DOCS:
                    va = np.sort(rng.choice(va, _MAX_VALIDATION_DOCS, replace=False))
                Xva, yva = Xn[va], codes[va]
                k = min(10, va.size - 1)
                lexical = {(g, b): lexical_rows(Xva, g, self._weights(b)) for g in gammas for b in betas}
                ytr = np.unique(codes[tr], return_inverse=True)[1].reshape(-1).astype(np.int64)

                def on_epoch(epoch, Xva=Xva, yva=yva, k=k, lexical=lexical, fold=fold):
                    Eva = _embed(Xva, self.P_)
                    emb = Eva @ Eva.T
                    scores = []
                    for (g, b), Lva in lexical.items():
                        lex = (Lva @ Lva.T).toarray()  # one dense (held-out)^2 block at a time
                        for a in alphas:
                            r = evaluate_retrieval(lambda q, a=a: a * lex[q] + emb[q], yva, k=k)
                            scores.append({"alpha": a, "lexical_power": g, "lexical_idf": b, "map": float(r["map"]),
                                           "ap@10": float(r[f"ap@{k}"]),  # ap@k: a small held-out part has k < 10
                                           "criterion": float(r["map"]) + (float(r[f"ap@{k}"]) if both else 0.0)})
                        del lex
                    maps = {a: max(t["map"] for t in scores if t["alpha"] == a) for a in alphas}
                    history.append({"fold": fold, "epoch": epoch, "map": maps, "scores": scores})
                    if progress is not None:
                        progress(self.n_triplets_seen_)

                self._train(Xn[tr], ytr, int(ytr.max()) + 1, width, self._passes(tr.size), rng, on_epoch)
                spent += float(getattr(self, "train_seconds_", 0.0))
            total: dict = {}  # (epoch, alpha, gamma, beta) -> criterion summed over the folds
            for h in history:
                for t in h["scores"]:
                    key = (h["epoch"], t["alpha"], t["lexical_power"], t["lexical_idf"])
                    total[key] = total.get(key, 0.0) + t["criterion"]
            epochs, alpha, gamma, beta = max(total, key=total.get)
        if split is None or self.refit or epochs == 0:
            self._train(Xn, codes, classes.size, width, epochs, rng)
        else:  # the fit part alone, for the chosen passes
            tr, _ = split[0]
            ytr = np.unique(codes[tr], return_inverse=True)[1].reshape(-1).astype(np.int64)
            self._train(Xn[tr], ytr, int(ytr.max()) + 1, width, epochs, np.random.default_rng(self.random_state))
        self.train_seconds_ += spent
        self.identity_weight_ = float(alpha)
        self.lexical_power_ = float(gamma)
        self.lexical_idf_ = float(beta)
        self.validation_ = history
        self.classes_ = classes
        self.resolved_params_ = {"n_components": int(width), "scale": float(self.scale_),
                                 "identity_weight": float(alpha), "lexical_power": float(gamma),
                                 "lexical_idf": float(beta), "n_epochs": int(self.n_epochs_)}
        self._model_cache = None
        if progress is not None:
            progress(self.n_triplets_seen_)
        return self

    def partial_fit_triplets(self, X, triplets, signs=None):
        """Update ``P`` with the document-triplet rule on ``triplets`` over the rows of ``X``.

        The proxies and alpha are left as they are (a fresh learner starts from a random
        projection, ``n_components`` wide, 128 when ``"auto"``, with alpha = 1 when ``"auto"``).

        Parameters
        ----------
        X : sparse matrix or array, shape (n_rows, n_features)
        triplets : array of int, shape (n, 3)
        signs : array of {-1, +1}, shape (n,), optional

        Returns
        -------
        self
        """
        return super().partial_fit_triplets(X, triplets, signs)

    # -- the model ------------------------------------------------------------------------
    @property
    def model_(self) -> EmbeddingSimilarity:
        """The learned :class:`~sparsesim.embedding.EmbeddingSimilarity` (normalising, linear,
        normalised embedding, ``identity_weight = identity_weight_``)."""
        self._check_fitted()
        if getattr(self, "_model_cache", None) is None:
            meta = {"algorithm": self._algorithm,
                    "params": {k: v for k, v in self.get_params().items()},
                    "n_triplets_seen": int(self.n_triplets_seen_), "n_epochs": int(self.n_epochs_),
                    "scale": float(self.scale_), "train_seconds": float(self.train_seconds_),
                    "resolved_params": dict(getattr(self, "resolved_params_", {}))}
            self._model_cache = EmbeddingSimilarity(self.P_, activation="linear", normalize=True,
                                                    normalize_embedding=True, identity_weight=self.identity_weight_,
                                                    lexical_power=self.lexical_power_, metadata=meta,
                                                    lexical_weights=self._weights(self.lexical_idf_))
        return self._model_cache

    def score_matrix(self, Q, X):
        """Dense similarities of queries ``Q`` against corpus ``X``."""
        return self.model_.score_matrix(Q, X)

    def score_pairs(self, A, B):
        """Row-wise similarity S(A[i], B[i]) under the learned model."""
        return self.model_.score_pairs(A, B)

