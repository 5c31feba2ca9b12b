"""Multi-view data sets and the heterogeneous transfer tasks built from them.

Registers ``wikipedia-xmodal`` and ``mfeat``. A :class:`MultiViewData` holds every view of the same
documents; :func:`make_transfer_tasks` turns it into the 45 one-vs-one binary tasks of the online
heterogeneous transfer (OHT) protocol, each with three *disjoint* sets of documents:

* the **target stream** (target view + label; what the online learner sees, one instance a round),
* the **labelled source** documents (source view + label; trains the source classifier),
* the **co-occurring pairs** (both views, no label; the bridge between the two feature spaces).

Proportions (of each class of the task, drawn per class so both classes keep their share):
``target_frac`` (default 0.4) to the stream, ``source_frac`` (default 0.2) to the labelled source,
the rest (0.4) to the pairs. With ``pair_classes="all"`` the pairs also include every document of
the other eight classes (still unlabelled); with ``"task"`` (default) only the two classes' share.
The paper's NUS-WIDE tasks had 500 / 1,200 / 1,500 documents; Wikipedia's smallest task
(art-vs-royalty) only has 357 documents, so the shares above keep at least 143 rounds in every
stream (see ``docs/transfer.md`` for the sizes of all tasks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

from ..exceptions import FileFormatError, InvalidInputError
from .catalog import DataFile, DatasetSpec, register_dataset
from .paths import locate

WIKIPEDIA_FILE = "wikipedia_xmodal/Wikipedia.mat"
MFEAT_FILE = "mfeat/handwritten.mat"
MFEAT_VIEWS = ("pix", "fou", "fac", "zer", "kar", "mor")
WIKIPEDIA_CLASSES = ("art", "biology", "geography", "history", "literature",
                     "media", "music", "royalty", "sport", "warfare")


@dataclass
class MultiViewData:
    """Several feature views of the same documents (dense; these views are low-dimensional).

    Attributes
    ----------
    views : dict of str -> ndarray of shape (n_documents, n_features_view)
    y : ndarray of shape (n_documents,)
        Class label of each document.
    name : str
    class_names : dict, optional
        Label value -> readable name.
    source_view : str
        The view playing the heterogeneous *source* (the paper's "text").
    target_view : str
        The view playing the *target* (the paper's "image").
    info : dict
        Provenance and preprocessing notes.
    """

    views: dict
    y: np.ndarray
    name: str = ""
    class_names: dict | None = None
    source_view: str = ""
    target_view: str = ""
    info: dict = field(default_factory=dict)

    @property
    def n_documents(self) -> int:
        return int(self.y.shape[0])

    def view(self, name: str) -> np.ndarray:
        """The matrix of view ``name``."""
        try:
            return self.views[name]
        except KeyError:
            raise InvalidInputError(
                f"{self.name}: unknown view {name!r}; views are {', '.join(self.views)}"
            ) from None

    def __post_init__(self):
        self.y = np.asarray(self.y).ravel()
        for vname, X in self.views.items():
            X = np.asarray(X, dtype=np.float64)
            if X.ndim != 2 or X.shape[0] != self.y.shape[0]:
                raise InvalidInputError(
                    f"{self.name}: view {vname!r} has shape {X.shape}, expected ({self.y.shape[0]}, d)"
                )
            if not np.all(np.isfinite(X)):
                raise InvalidInputError(f"{self.name}: view {vname!r} contains NaN or infinite values")
            self.views[vname] = X
        for role, vname in (("source", self.source_view), ("target", self.target_view)):
            if vname and vname not in self.views:
                raise InvalidInputError(f"{self.name}: {role} view {vname!r} is not one of {list(self.views)}")
        if self.source_view and self.source_view == self.target_view:
            raise InvalidInputError(f"{self.name}: source and target view must differ (both {self.source_view!r})")


@dataclass
class TransferTask:
    """One binary heterogeneous transfer task (labels in {-1, +1}).

    Attributes
    ----------
    name : str
        ``"<positive class>-vs-<negative class>"``.
    classes : tuple
        ``(positive label, negative label)`` in the original label space.
    target_X, target_y : ndarray
        The target stream (target view) and its labels.
    source_X, source_y : ndarray
        Labelled source documents (source view).
    pair_target, pair_source : ndarray
        Co-occurring pairs: row ``j`` of both is the same document (no label).
    rows : dict
        Original row numbers of the three parts (``"target"``, ``"source"``, ``"pairs"``).
    """

    name: str
    classes: tuple
    target_X: np.ndarray
    target_y: np.ndarray
    source_X: np.ndarray
    source_y: np.ndarray
    pair_target: np.ndarray
    pair_source: np.ndarray
    rows: dict = field(default_factory=dict)

    def sizes(self) -> dict:
        return {"target": int(self.target_y.shape[0]), "source": int(self.source_y.shape[0]),
                "pairs": int(self.pair_target.shape[0])}


def _loadmat(path, dataset):
    import scipy.io as sio

    try:
        return sio.loadmat(path)
    except Exception as exc:  # scipy raises several types for corrupt files
        raise FileFormatError(f"data set {dataset!r}: cannot read {path}: {exc}") from None


def load_wikipedia_xmodal(spec: DatasetSpec, **options) -> MultiViewData:
    """Load the Wikipedia image-text set (2,866 documents, 10 classes).

    The file's ``view_meaning`` reads {'word', 'SIFT'}, but ``X{1}`` is the 128-d SIFT
    bag-of-visual-words histogram (image, the target view) and ``X{2}`` the 10-d LDA topic
    proportions (text, the source view); we name the views by content: ``"image"``, ``"text"``.
    """
    d = _loadmat(locate(WIKIPEDIA_FILE, spec.name), spec.name)
    try:
        image = np.asarray(d["X"][0, 0], dtype=np.float64)
        text = np.asarray(d["X"][1, 0], dtype=np.float64)
        y = np.asarray(d["y"]).ravel().astype(np.int64)
    except (KeyError, IndexError) as exc:
        raise FileFormatError(f"data set {spec.name!r}: unexpected layout of {WIKIPEDIA_FILE}: {exc}") from None
    if image.shape[1] != 128 or text.shape[1] != 10:
        raise FileFormatError(
            f"data set {spec.name!r}: expected X{{1}} 128-d SIFT and X{{2}} 10-d LDA, got {image.shape}, {text.shape}"
        )
    return MultiViewData(
        views={"image": image, "text": text}, y=y, name=spec.name,
        class_names={i + 1: c for i, c in enumerate(WIKIPEDIA_CLASSES)},
        source_view=options.get("source_view", "text"), target_view=options.get("target_view", "image"),
        info={"file": WIKIPEDIA_FILE, "note": "view_meaning in the file is reversed; X{1}=SIFT image, X{2}=LDA text",
              "train_rows": "0..2172", "test_rows": "2173..2865"},
    )


def load_mfeat(spec: DatasetSpec, **options) -> MultiViewData:
    """Load UCI Multiple Features (2,000 handwritten digits, 200 per class, six views).

    Default roles mirror Wikipedia (a weak target view, a strong source view in another
    feature space): target ``fou`` (76 Fourier coefficients of the contour; 5-fold 10-class
    logistic-regression accuracy 0.81) and source ``pix`` (240 pixel averages; 0.97). Override
    with ``target_view=`` / ``source_view=`` (any of pix, fou, fac, zer, kar, mor).
    """
    d = _loadmat(locate(MFEAT_FILE, spec.name), spec.name)
    try:
        views = {n: np.asarray(d["X"][0, k], dtype=np.float64) for k, n in enumerate(MFEAT_VIEWS)}
        y = np.asarray(d["Y"]).ravel().astype(np.int64)
    except (KeyError, IndexError) as exc:
        raise FileFormatError(f"data set {spec.name!r}: unexpected layout of {MFEAT_FILE}: {exc}") from None
    return MultiViewData(
        views=views, y=y, name=spec.name, class_names={k: f"digit {k - 1}" for k in range(1, 11)},
        source_view=options.get("source_view", "pix"), target_view=options.get("target_view", "fou"),
        info={"file": MFEAT_FILE, "views": list(MFEAT_VIEWS)},
    )


def standardize_columns(X: np.ndarray) -> np.ndarray:
    """Z-score every column (labels unused); constant columns are only centred."""
    mean = X.mean(axis=0)
    std = X.std(axis=0)
    std[std == 0] = 1.0
    return (X - mean) / std


def make_transfer_tasks(
    data: MultiViewData,
    target_frac: float = 0.4,
    source_frac: float = 0.2,
    pair_classes: str = "task",
    standardize: bool = True,
    random_state: int = 0,
    tasks: list | None = None,
) -> list[TransferTask]:
    """The one-vs-one binary transfer tasks of ``data`` (45 for 10 classes).

    Parameters
    ----------
    data : MultiViewData
        With ``source_view`` and ``target_view`` set.
    target_frac, source_frac : float
        Share of each class of a task given to the target stream and to the labelled source;
        the remaining ``1 - target_frac - source_frac`` become co-occurring pairs.
    pair_classes : {"task", "all"}
        ``"all"`` adds every document of the other classes to the pairs (unlabelled).
    standardize : bool
        Z-score the target view over all documents first (unsupervised; the Gaussian kernel's
        ``sigma`` then has the same meaning on every data set). The source view is scaled
        inside the source classifier.
    random_state : int
        Seeds the split of every task (task ``k`` uses ``SeedSequence([random_state, k])``).
    tasks : list of int, optional
        0-based indices of the tasks to build (default: all).

    Returns
    -------
    list of TransferTask
        Task ``k`` is the ``k``-th pair ``(a, b)``, ``a < b``, in lexicographic order; class ``a``
        is labelled +1 and ``b`` -1.
    """
    if not (0 < target_frac < 1 and 0 < source_frac < 1 and target_frac + source_frac < 1):
        raise InvalidInputError(
            f"target_frac ({target_frac}) and source_frac ({source_frac}) must be in (0, 1) with a sum below 1"
        )
    if pair_classes not in ("task", "all"):
        raise InvalidInputError(f"pair_classes must be 'task' or 'all', got {pair_classes!r}")
    if not data.source_view or not data.target_view:
        raise InvalidInputError(f"{data.name}: source_view and target_view must be set")
    T = data.view(data.target_view)
    S = data.view(data.source_view)
    if standardize:
        T = standardize_columns(T)
    labels = np.unique(data.y)
    if labels.size < 2:
        raise InvalidInputError(f"{data.name}: {labels.size} class(es); transfer tasks need at least two")
    pairs = list(combinations(labels.tolist(), 2))
    wanted = range(len(pairs)) if tasks is None else tasks
    out = []
    for k in wanted:
        if not 0 <= k < len(pairs):
            raise InvalidInputError(f"task index {k} out of range 0..{len(pairs) - 1}")
        a, b = pairs[k]
        rng = np.random.default_rng(np.random.SeedSequence([int(random_state), int(k)]))
        parts = {"target": [], "source": [], "pairs": []}
        for c in (a, b):
            rows = rng.permutation(np.flatnonzero(data.y == c))
            n_t = int(round(target_frac * rows.size))
            n_s = int(round(source_frac * rows.size))
            if n_t < 1 or n_s < 1 or rows.size - n_t - n_s < 1:
                raise InvalidInputError(f"{data.name}: class {c} has too few documents ({rows.size}) to split")
            parts["target"].append(rows[:n_t])
            parts["source"].append(rows[n_t:n_t + n_s])
            parts["pairs"].append(rows[n_t + n_s:])
        if pair_classes == "all":
            parts["pairs"].append(np.flatnonzero((data.y != a) & (data.y != b)))
        # the stream order is set by the protocol's permutations; keep rows sorted here
        rows = {key: np.sort(np.concatenate(v)) for key, v in parts.items()}
        sign = lambda r: np.where(data.y[r] == a, 1.0, -1.0)  # noqa: E731
        cname = (lambda c: data.class_names.get(c, str(c))) if data.class_names else str
        out.append(TransferTask(
            name=f"{cname(a)}-vs-{cname(b)}", classes=(a, b),
            target_X=T[rows["target"]], target_y=sign(rows["target"]),
            source_X=S[rows["source"]], source_y=sign(rows["source"]),
            pair_target=T[rows["pairs"]], pair_source=S[rows["pairs"]], rows=rows,
        ))
    return out


register_dataset(DatasetSpec(
    name="wikipedia-xmodal",
    files=(DataFile(WIKIPEDIA_FILE, "6eed8527704611dff921243d86dbec5621312b8c6636086ae3677508b5d3cb03"),),
    loader="sparsesim.data.multiview:load_wikipedia_xmodal",
    kind="multiview",
    description="Wikipedia image-text pairs (Rasiwasia et al. 2010): 2,866 documents, 10 classes -> 45 binary tasks",
    representation="views: image = 128-d SIFT BoVW histogram (target), text = 10-d LDA topics (source)",
    source="Rasiwasia et al., ACM MM 2010 (svcl.ucsd.edu/projects/crossmodal); .mat re-packaging, no licence stated",
    extra={"views": {"image": 128, "text": 10}, "target_view": "image", "source_view": "text",
           "note": "the file's view_meaning {'word','SIFT'} is reversed relative to X"},
))

register_dataset(DatasetSpec(
    name="mfeat",
    files=(DataFile(MFEAT_FILE, "58843f19f3cea95dd3c506b2d44484b4589cc56c45786061db0778366c72bf06"),),
    loader="sparsesim.data.multiview:load_mfeat",
    kind="multiview",
    description="UCI Multiple Features: 2,000 handwritten digits (200 per class), six views -> 45 binary tasks",
    representation="views pix 240, fou 76, fac 216, zer 47, kar 64, mor 6; default target fou, source pix",
    source="R.P.W. Duin, UCI Multiple Features (CC BY 4.0); handwritten.mat re-packaging",
    extra={"views": dict(zip(MFEAT_VIEWS, (240, 76, 216, 47, 64, 6))), "target_view": "fou", "source_view": "pix"},
))
