"""Multi-task similarity data sets of the IJCAI 2017 OMTRSL paper: ``news20-tasks`` and ``isolet-tasks``.

Both return a :class:`~sparsesim.data.LabelledData` with ``tasks`` (task id 0..K-1 of each
document) and ``task_names`` set; ``y`` holds the class labels, compared within a task.

news20-tasks
    The LIBSVM news20 training file (15,935 documents, the paper's news20) restricted to the four
    top-level categories the paper uses: comp (5 newsgroups), rec (4), sci (4), talk (4). A
    task's classes are its newsgroups (misc.forsale, alt.atheism and soc.religion.christian
    are left out). **The LIBSVM labels 1..20 are not in alphabetical newsgroup order.** They are
    matched to the names of the 20news-bydate text (R ``lda`` copy, with vocabulary) two
    independent ways (``tests/test_news20_labels.py``): the 20 x 20 cosine structure of the
    class centroids, and a vocabulary alignment by per-class document-frequency profiles,
    which agree on :data:`NEWS20_LIBSVM_NAMES` (the order of the table on Rennie's 20
    Newsgroups page, groups in columns: comp, sci, forsale, rec, talk.politics, religion).
    Representation (default): the ``n_features`` terms (default 2,000) with the highest document
    frequency over the loaded documents (unsupervised, so no label or fold leaks), TF-IDF
    (sklearn defaults), rows L2-normalised. The full 62,061-term space is
    ``representation="full"`` (use ``storage="hash"`` learners); ``"raw"`` gives the term counts.

isolet-tasks
    UCI ISOLET (isolet1234 + isolet5, 7,797 utterances x 617 features); task k = speaker group
    isolet{k+1} (30 speakers each), 26 letter classes per task. Representation: as stored
    (features in [-1, 1]), ``representation="l2"`` (rows L2-normalised) or ``representation="pca"``:
    centred and projected on the leading principal components that keep ``pca_variance``
    (default 0.95) of the variance, the preprocessing of the mtLMNN experiments (Parameswaran and
    Weinberger 2010) to which the OMTRSL paper refers for its isolet details. The projection is fitted
    on all loaded rows without labels (unsupervised, like news20's document-frequency vocabulary).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..exceptions import InvalidInputError
from .builtin import load_isolet, load_svmlight_set
from .catalog import DATASETS, DatasetSpec, get_dataset_spec, register_dataset
from .containers import LabelledData
from .readers import l2_normalize, tfidf

# LIBSVM news20 label (1..20) -> newsgroup, as established by tests/test_news20_labels.py.
NEWS20_LIBSVM_NAMES = {
    1: "comp.graphics", 2: "comp.os.ms-windows.misc", 3: "comp.sys.ibm.pc.hardware",
    4: "comp.sys.mac.hardware", 5: "comp.windows.x",
    6: "sci.crypt", 7: "sci.electronics", 8: "sci.med", 9: "sci.space",
    10: "misc.forsale",
    11: "rec.autos", 12: "rec.motorcycles", 13: "rec.sport.baseball", 14: "rec.sport.hockey",
    15: "talk.politics.misc", 16: "talk.politics.guns", 17: "talk.politics.mideast",
    18: "talk.religion.misc", 19: "alt.atheism", 20: "soc.religion.christian",
}
NEWS20_TASKS = ("comp", "rec", "sci", "talk")
ISOLET_TASKS = ("isolet1", "isolet2", "isolet3", "isolet4", "isolet5")


def _check_options(name, options, allowed):
    unknown = set(options) - set(allowed)
    if unknown:
        raise InvalidInputError(
            f"data set {name!r}: unknown option(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(allowed))}"
        )
    out = dict(allowed)
    out.update(options)
    return out


def top_df_features(X, n_features: int) -> np.ndarray:
    """Column indices of the ``n_features`` columns with the most nonzero rows (ties: lower index)."""
    df = np.bincount(X.indices, minlength=X.shape[1])
    order = np.lexsort((np.arange(df.size), -df))
    return np.sort(order[: int(n_features)])


def pca_project(X: np.ndarray, variance: float) -> tuple[np.ndarray, int]:
    """Centre ``X`` and project it on the fewest principal components keeping ``variance`` of it.

    Deterministic: each component's sign is fixed so that its largest-magnitude loading is positive.
    Returns (projected rows, number of components).
    """
    Xc = X - X.mean(axis=0)
    _, s, vt = np.linalg.svd(Xc, full_matrices=False)
    ratio = np.cumsum(s * s) / np.sum(s * s)
    n = int(min(np.searchsorted(ratio, variance - 1e-12) + 1, vt.shape[0]))
    vt = vt[:n]
    signs = np.sign(vt[np.arange(n), np.argmax(np.abs(vt), axis=1)])
    vt = vt * signs[:, None]
    return Xc @ vt.T, n


def load_news20_tasks(spec: DatasetSpec, **options) -> LabelledData:
    """news20 split into the comp / rec / sci / talk tasks (see the module docstring).

    Options: ``representation`` ("default" = top-``n_features`` DF terms, TF-IDF, L2 rows;
    "full" = all terms, TF-IDF, L2 rows; "raw" = term counts of all terms), ``n_features``
    (default 2000).
    """
    opts = _check_options(spec.name, options, {"representation": "default", "n_features": 2000})
    rep = opts["representation"]
    if rep not in ("default", "full", "raw"):
        raise InvalidInputError(f"data set {spec.name!r}: unknown representation {rep!r}; use default, full or raw")
    base = load_svmlight_set(get_dataset_spec("news20"), representation="raw")
    names = np.array([NEWS20_LIBSVM_NAMES[int(v)] for v in base.y])
    top = np.array([n.split(".")[0] for n in names])
    keep = np.flatnonzero(np.isin(top, NEWS20_TASKS))
    X = base.X[keep]
    y = base.y[keep]
    tasks = np.searchsorted(np.array(NEWS20_TASKS), top[keep]).astype(np.int64)
    info = {
        "representation": rep,
        "files": base.info["files"],
        "source": spec.source,
        "libsvm_rows": keep,
        "label_order_check": "tests/test_news20_labels.py",
    }
    if rep == "default":
        cols = top_df_features(X, opts["n_features"])
        X = X[:, cols]
        X, _ = tfidf(X)
        info["feature_columns"] = cols
        info["representation"] = (f"top {int(opts['n_features'])} terms by document frequency, TF-IDF "
                                  "(sklearn defaults), rows L2-normalised")
    elif rep == "full":
        X, _ = tfidf(X)
        info["representation"] = "all 62,061 terms, TF-IDF (sklearn defaults), rows L2-normalised"
    X = X.tocsr()
    X.sort_indices()
    return LabelledData(
        X=X, y=y, name=spec.name, ids=keep.astype(np.int64),
        class_names={int(k): v for k, v in NEWS20_LIBSVM_NAMES.items() if int(k) in set(y.tolist())},
        tasks=tasks, task_names=list(NEWS20_TASKS), info=info,
    )


def load_isolet_tasks(spec: DatasetSpec, **options) -> LabelledData:
    """ISOLET with one task per speaker group isolet1..isolet5 (see the module docstring).

    Options: ``representation`` ("default" = as stored, "l2" = rows L2-normalised, "pca" = centred
    projection on the leading principal components), ``pca_variance`` (fraction of the variance
    the "pca" representation keeps, default 0.95).
    """
    opts = _check_options(spec.name, options, {"representation": "default", "pca_variance": 0.95})
    rep = opts["representation"]
    if rep not in ("default", "l2", "pca"):
        raise InvalidInputError(f"data set {spec.name!r}: unknown representation {rep!r}; use default, l2 or pca")
    data = load_isolet(get_dataset_spec("isolet"))
    tasks = data.info["speaker_group"].astype(np.int64) - 1
    info = dict(data.info)
    if rep == "pca":
        frac = float(opts["pca_variance"])
        if not 0.0 < frac <= 1.0:
            raise InvalidInputError(f"data set {spec.name!r}: pca_variance must be in (0, 1], got {frac}")
        Z, n_comp = pca_project(data.X.toarray(), frac)
        X = sp.csr_matrix(Z)
        info["representation"] = (f"centred, projected on the leading {n_comp} principal components "
                                  f"({frac:g} of the variance; fitted without labels on all rows)")
        info["pca_components"] = n_comp
    else:
        X = l2_normalize(data.X) if rep == "l2" else data.X
        info["representation"] = "as stored: features in [-1, 1]" if rep == "default" else "rows L2-normalised"
    X = X.tocsr()
    X.sort_indices()
    return LabelledData(X=X, y=data.y, name=spec.name, class_names=data.class_names, tasks=tasks,
                        task_names=list(ISOLET_TASKS), info=info)


_M = "sparsesim.data.multitask:"

register_dataset(DatasetSpec(
    name="news20-tasks",
    files=DATASETS["news20"].files,
    loader=_M + "load_news20_tasks",
    kind="multitask",
    description="news20 (LIBSVM, 15,935 training documents) as 4 tasks by top-level category: comp (5 groups), "
                "rec (4), sci (4), talk (4); 13,547 documents, classes = newsgroups",
    representation="top 2,000 terms by document frequency, TF-IDF, rows L2-normalised (option n_features; "
                   "representation='full' keeps all 62,061 terms)",
    source=DATASETS["news20"].source,
    extra={"tasks": NEWS20_TASKS, "n_tasks": 4},
))

register_dataset(DatasetSpec(
    name="isolet-tasks",
    files=DATASETS["isolet"].files,
    loader=_M + "load_isolet_tasks",
    kind="multitask",
    description="UCI ISOLET as 5 tasks, one per speaker group isolet1..isolet5, 26 letter classes each; "
                "7,797 utterances x 617 features",
    representation="as stored: features in [-1, 1] (representation='l2' normalises rows)",
    source=DATASETS["isolet"].source,
    extra={"tasks": ISOLET_TASKS, "n_tasks": 5},
))
