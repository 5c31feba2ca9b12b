"""Multi-task binary classification data (ROMCO, Yang, Zhao & Gao): per-task instance streams.

Registers three data sets with :func:`~sparsesim.data.catalog.register_dataset` at import:

``spam-task-a``
    ECML/PKDD Discovery Challenge 2006, task A: the labelled evaluation inboxes ``u00``, ``u01``,
    ``u02`` (2,500 mails each, +1 spam / -1 legitimate, word counts). **Vocabulary check**: the
    three evaluation inboxes use ONE dictionary (inbox ``u00``'s ids are assigned in order of first
    appearance starting at id 1, ``u01``/``u02`` re-use those ids and append new ones; the document
    frequencies of the shared ids correlate at 0.90-0.96 and 290-380 of each inbox's 500 most
    frequent ids coincide). The tuning inbox ``u00_tune`` has its OWN dictionary (ids again start at 1
    in order of first appearance; document-frequency correlation with the evaluation inboxes is only
    0.19-0.24 and 94-129 of the top-500 ids coincide, which is what two order-of-appearance
    dictionaries give by chance). It is therefore NOT aligned with the others: by default the data
    set has the 3 aligned tasks (d = 106,780); ``include_tune=True`` adds the tuning inbox as a 4th
    task in a disjoint block of feature ids (it shares no feature with the other tasks).
    Representation: TF-IDF (raw tf, smooth idf ``ln((1+n)/(1+df)) + 1`` computed on all loaded
    mails, unsupervised), rows L2-normalised (``representation="raw"`` keeps the counts).
    The paper's spam data (Internet Content Filtering Group, 4 users, 7,068 mails, 1,458-d) is a
    different corpus.

``mhc1``
    MHC class I binding (Kim et al. 2014 "BLIND" set): the 12 alleles with the most 9-mer
    peptides are the tasks, a peptide is a binder (+1) if IC50 < 500 nM. Encoding: 20x20 dipeptide
    composition (400-d: the 8 overlapping dipeptides of a 9-mer, counts divided by 8, each row
    then L2-normalised). The paper used the BD2009 set (18,664 peptides); ours has 9,008.

``landmine``
    Landmine detection (Xue et al. 2007): 29 tasks (fields), 9 features, label 1 = mine (+1),
    0 = clutter (-1). Features are used as stored (they are already roughly standardised) plus a
    constant feature 1 (``add_bias=True``, default) because the linear models of the paper have
    no intercept and only ~6% of the instances are mines.

Rounds and unequal stream lengths
---------------------------------
A :class:`MultiTaskStreams` holds one stream per task. The online learners form round ``t``
(``t = 0, 1, ...``) from the ``t``-th instance of every task whose stream is longer than ``t``;
a task that has run out simply sits out the remaining rounds (it contributes no instance and no
loss, but a joint update such as ROMCO's proximal step still acts on its model). The number of
rounds is the length of the longest stream.
"""

from __future__ import annotations

import lzma
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ..exceptions import FileFormatError, InvalidInputError
from ..validation import check_task_streams
from .catalog import DataFile, DatasetSpec, register_dataset, check_options
from .paths import locate

__all__ = [
    "MultiTaskStreams",
    "check_task_streams",
    "dipeptide_composition",
    "load_spam_task_a",
    "load_mhc1",
    "load_landmine",
]


# --------------------------------------------------------------------------- container


@dataclass
class MultiTaskStreams:
    """One labelled instance stream per task, all in one shared feature space.

    Attributes
    ----------
    X : list of scipy.sparse.csr_matrix
        ``X[i]`` has one row per instance of task ``i`` (stream order), all with ``n_features``
        columns.
    y : list of ndarray
        ``y[i]`` holds the labels of task ``i`` in {-1.0, +1.0}.
    task_names : list of str
    name : str
        Data set name.
    info : dict
        Representation, files, feature-alignment notes.
    """

    X: list
    y: list
    task_names: list
    name: str = ""
    info: dict = field(default_factory=dict)

    def __post_init__(self):
        self.X, self.y = check_task_streams(self.X, self.y)
        if len(self.task_names) != len(self.X):
            raise InvalidInputError(
                f"{len(self.task_names)} task names for {len(self.X)} tasks"
            )
        self.task_names = [str(t) for t in self.task_names]

    @property
    def n_tasks(self) -> int:
        return len(self.X)

    @property
    def n_features(self) -> int:
        return self.X[0].shape[1]

    @property
    def n_samples(self) -> list:
        """Stream length of every task."""
        return [x.shape[0] for x in self.X]

    @property
    def n_rounds(self) -> int:
        """Rounds of the online protocol: the longest stream."""
        return max(self.n_samples)

    def shuffled(self, seed: int) -> "MultiTaskStreams":
        """A copy with every task's stream independently permuted by ``np.random.default_rng(seed)``."""
        rng = np.random.default_rng(seed)
        perms = [rng.permutation(x.shape[0]) for x in self.X]
        return MultiTaskStreams(
            X=[x[p] for x, p in zip(self.X, perms)],
            y=[y[p] for y, p in zip(self.y, perms)],
            task_names=list(self.task_names),
            name=self.name,
            info=dict(self.info, shuffle_seed=int(seed)),
        )

    def head(self, n_per_task: int, tasks=None) -> "MultiTaskStreams":
        """The first ``n_per_task`` instances of the tasks ``tasks`` (all by default); for small tests."""
        tasks = range(self.n_tasks) if tasks is None else list(tasks)
        return MultiTaskStreams(
            X=[self.X[i][:n_per_task] for i in tasks],
            y=[self.y[i][:n_per_task] for i in tasks],
            task_names=[self.task_names[i] for i in tasks],
            name=self.name,
            info=dict(self.info),
        )

    def summary(self) -> dict:
        """Counts per task (instances, positives) for reports."""
        return {
            "name": self.name,
            "n_tasks": self.n_tasks,
            "n_features": self.n_features,
            "n_rounds": self.n_rounds,
            # error of always predicting each task's majority class, averaged over tasks
            "majority_error": float(np.mean([min(np.mean(y > 0), np.mean(y < 0)) for y in self.y])),
            "tasks": [
                {"task": n, "n": int(x.shape[0]), "positives": int(np.sum(y > 0))}
                for n, x, y in zip(self.task_names, self.X, self.y)
            ],
        }


# --------------------------------------------------------------------------- helpers


_options = check_options


def _l2_rows(X: sp.csr_matrix) -> sp.csr_matrix:
    X = X.tocsr(copy=True)
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    norms[norms == 0] = 1.0
    X.data /= np.repeat(norms, np.diff(X.indptr))
    return X


def _tfidf(blocks: list) -> list:
    """TF-IDF over the union of ``blocks`` (smooth idf, as scikit-learn's default), rows L2-normalised."""
    n = sum(b.shape[0] for b in blocks)
    df = np.zeros(blocks[0].shape[1])
    for b in blocks:
        df += np.bincount(b.indices, minlength=b.shape[1])
    idf = np.log((1.0 + n) / (1.0 + df)) + 1.0
    out = []
    for b in blocks:
        b = b.tocsr(copy=True)
        b.data *= idf[b.indices]
        out.append(_l2_rows(b))
    return out


# --------------------------------------------------------------------------- spam (ECML/PKDD 2006 task A)

_SPAM_DIR = "ecml2006_spam/task_a"
_SPAM_EVAL = ("u00", "u01", "u02")
_SPAM_EVAL_WIDTH = 106_780  # largest 1-based id over the three evaluation inboxes (shared dictionary)
_SPAM_TUNE_WIDTH = 48_938  # the tuning inbox's own dictionary


def _read_svmlight_xz(path, n_features: int, dataset: str):
    from sklearn.datasets import load_svmlight_file

    try:
        with lzma.open(path) as fh:
            X, y = load_svmlight_file(fh, n_features=n_features)
    except (lzma.LZMAError, ValueError, EOFError, OSError) as exc:
        raise FileFormatError(f"data set {dataset!r}: cannot read {path}: {exc}") from None
    return sp.csr_matrix(X, dtype=np.float64), y


def load_spam_task_a(spec: DatasetSpec, **options) -> MultiTaskStreams:
    """Load ``spam-task-a`` (see the module docstring).

    Options
    -------
    include_tune : bool, default False
        Add the tuning inbox as a 4th task in its own block of feature ids (not aligned).
    representation : {"tfidf", "raw"}, default "tfidf"
    """
    opts = _options(spec, options, {"include_tune": False, "representation": "tfidf"})
    if opts["representation"] not in ("tfidf", "raw"):
        raise InvalidInputError(f"data set {spec.name!r}: representation must be 'tfidf' or 'raw'")
    width = _SPAM_EVAL_WIDTH + (_SPAM_TUNE_WIDTH if opts["include_tune"] else 0)
    Xs, ys, names = [], [], []
    for user in _SPAM_EVAL:
        path = locate(f"{_SPAM_DIR}/task_a_{user}_eval_lab.tf.xz", spec.name)
        X, y = _read_svmlight_xz(path, _SPAM_EVAL_WIDTH, spec.name)
        if opts["include_tune"]:
            X = sp.hstack([X, sp.csr_matrix((X.shape[0], _SPAM_TUNE_WIDTH))], format="csr")
        Xs.append(X)
        ys.append(y)
        names.append(f"{user}-eval")
    if opts["include_tune"]:
        path = locate(f"{_SPAM_DIR}/task_a_u00_tune.tf.xz", spec.name)
        X, y = _read_svmlight_xz(path, _SPAM_TUNE_WIDTH, spec.name)
        X = sp.hstack([sp.csr_matrix((X.shape[0], _SPAM_EVAL_WIDTH)), X], format="csr")
        Xs.append(X)
        ys.append(y)
        names.append("u00-tune")
    if opts["representation"] == "tfidf":
        Xs = _tfidf(Xs)
    alignment = (
        "u00/u01/u02 evaluation inboxes share one dictionary (aligned ids)"
        + ("; the tuning inbox has its own dictionary and is placed in a disjoint block of "
           f"ids {_SPAM_EVAL_WIDTH}..{width - 1}" if opts["include_tune"] else "")
    )
    return MultiTaskStreams(
        X=Xs,
        y=ys,
        task_names=names,
        name=spec.name,
        info={
            "representation": spec.representation if opts["representation"] == "tfidf" else "raw word counts",
            "feature_alignment": alignment,
            "labels": "+1 spam, -1 legitimate",
            "files": [f.relpath for f in spec.files],
        },
    )


# --------------------------------------------------------------------------- MHC-I

AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"
_AA_INDEX = {a: i for i, a in enumerate(AMINO_ACIDS)}


def dipeptide_composition(peptides) -> sp.csr_matrix:
    """20x20 dipeptide composition of peptides: feature ``20*a + b`` = share of the peptide's
    overlapping dipeptides equal to ``(a, b)`` (amino acids in ``AMINO_ACIDS`` order).

    Raises
    ------
    InvalidInputError
        A residue outside the 20 standard amino acids, or a peptide shorter than 2.
    """
    rows, cols, vals = [], [], []
    for r, pep in enumerate(peptides):
        pep = pep.strip().upper()
        if len(pep) < 2:
            raise InvalidInputError(f"peptide {pep!r} is shorter than 2 residues")
        try:
            codes = [_AA_INDEX[a] for a in pep]
        except KeyError as exc:
            raise InvalidInputError(f"peptide {pep!r} has a non-standard residue {exc.args[0]!r}") from None
        pairs = np.array([20 * a + b for a, b in zip(codes[:-1], codes[1:])])
        uniq, counts = np.unique(pairs, return_counts=True)
        rows.extend([r] * uniq.size)
        cols.extend(uniq.tolist())
        vals.extend((counts / pairs.size).tolist())
    n = r + 1 if rows else 0
    return sp.csr_matrix((vals, (rows, cols)), shape=(n, 400))


def load_mhc1(spec: DatasetSpec, **options) -> MultiTaskStreams:
    """Load ``mhc1`` (see the module docstring).

    Options
    -------
    n_alleles : int, default 12
        The alleles with the most 9-mers become the tasks (ties broken by allele name).
    threshold_nm : float, default 500
        Binder (+1) if IC50 < threshold.
    normalize : bool, default True
        L2-normalise the dipeptide-composition rows.
    """
    opts = _options(spec, options, {"n_alleles": 12, "threshold_nm": 500.0, "normalize": True})
    path = locate(spec.files[0].relpath, spec.name)
    try:
        with lzma.open(path, "rt") as fh:
            header = fh.readline().rstrip("\n").split("\t")
            lines = [line.rstrip("\n").split("\t") for line in fh if line.strip()]
    except (lzma.LZMAError, EOFError, OSError) as exc:
        raise FileFormatError(f"data set {spec.name!r}: cannot read {path}: {exc}") from None
    expected = ["species", "mhc", "peptide_length", "cv", "sequence", "inequality", "meas"]
    if header != expected:
        raise FileFormatError(f"data set {spec.name!r}: unexpected header {header} in {path}")
    by_allele: dict = {}
    for row in lines:
        if len(row) != 7 or row[2] != "9":
            continue
        by_allele.setdefault(row[1], []).append((row[4], float(row[6])))
    ranked = sorted(by_allele, key=lambda a: (-len(by_allele[a]), a))[: int(opts["n_alleles"])]
    Xs, ys = [], []
    for allele in ranked:
        seqs = [s for s, _ in by_allele[allele]]
        ic50 = np.array([v for _, v in by_allele[allele]])
        X = dipeptide_composition(seqs)
        if opts["normalize"]:
            X = _l2_rows(X)
        Xs.append(X)
        ys.append(np.where(ic50 < float(opts["threshold_nm"]), 1.0, -1.0))
    return MultiTaskStreams(
        X=Xs,
        y=ys,
        task_names=ranked,
        name=spec.name,
        info={
            "representation": spec.representation,
            "labels": f"+1 binder (IC50 < {opts['threshold_nm']} nM), -1 non-binder",
            "feature_alignment": "one 400-d dipeptide space shared by all alleles",
            "files": [f.relpath for f in spec.files],
        },
    )


# --------------------------------------------------------------------------- landmine


def load_landmine(spec: DatasetSpec, **options) -> MultiTaskStreams:
    """Load ``landmine`` (29 tasks; see the module docstring).

    Options
    -------
    add_bias : bool, default True
        Append a constant feature 1.
    """
    import scipy.io

    opts = _options(spec, options, {"add_bias": True})
    path = locate(spec.files[0].relpath, spec.name)
    try:
        mat = scipy.io.loadmat(path)
        feats, labels = mat["feature"], mat["label"]
    except (ValueError, KeyError, OSError, NotImplementedError) as exc:
        raise FileFormatError(f"data set {spec.name!r}: cannot read {path}: {exc}") from None
    Xs, ys = [], []
    for t in range(feats.shape[1]):
        X = np.asarray(feats[0, t], dtype=np.float64)
        if opts["add_bias"]:
            X = np.hstack([X, np.ones((X.shape[0], 1))])
        Xs.append(sp.csr_matrix(X))
        ys.append(np.where(np.asarray(labels[0, t]).ravel() == 1, 1.0, -1.0))
    return MultiTaskStreams(
        X=Xs,
        y=ys,
        task_names=[f"field{t + 1:02d}" for t in range(len(Xs))],
        name=spec.name,
        info={
            "representation": spec.representation + (" + constant feature" if opts["add_bias"] else ""),
            "labels": "+1 mine, -1 clutter",
            "feature_alignment": "the same 9 radar features for every field",
            "files": [f.relpath for f in spec.files],
        },
    )


# --------------------------------------------------------------------------- registry

_MOD = "sparsesim.data.mtl_classification"

register_dataset(DatasetSpec(
    name="spam-task-a",
    files=(
        DataFile(f"{_SPAM_DIR}/task_a_u00_eval_lab.tf.xz",
                 "6810b3ede0de0c6e77dd4a1dbcd11c2b9cb0cb1031385e947539ab8e35f30b55"),
        DataFile(f"{_SPAM_DIR}/task_a_u01_eval_lab.tf.xz",
                 "ee218e7161c796833f3e91534d28a2ba1f427fa31c768df0cf1d4f34fc81de77"),
        DataFile(f"{_SPAM_DIR}/task_a_u02_eval_lab.tf.xz",
                 "1184b94f5587c3e2369e6c41167949cfed19ccc8ccfee4171641f7a267b8c94d"),
        DataFile(f"{_SPAM_DIR}/task_a_u00_tune.tf.xz",
                 "1753d6cf819fe997e5d4d9b49422c08174afb44ebbe5afc636c1de4c42a793ae"),
    ),
    loader=f"{_MOD}:load_spam_task_a",
    kind="multitask-classification",
    description="ECML/PKDD 2006 spam task A: 3 evaluation inboxes x 2,500 mails sharing one "
                "dictionary (option include_tune adds the tuning inbox, unaligned, as a 4th task)",
    representation="TF-IDF (raw tf, smooth idf over all loaded mails), rows L2-normalised",
    source="ECML/PKDD Discovery Challenge 2006 (Bickel), via shohoku11wrj/Spam-Filter (MIT)",
    extra={"tasks": 3, "n_features": _SPAM_EVAL_WIDTH},
))

register_dataset(DatasetSpec(
    name="mhc1",
    files=(
        DataFile("mhc1_binding/kim2014_blind_data.txt.xz",
                 "d7ed50e10adcc8e8ad040ab155e3073b17094f37ef234abc4cf217869bb81125"),
    ),
    loader=f"{_MOD}:load_mhc1",
    kind="multitask-classification",
    description="MHC-I peptide binding (Kim et al. 2014 BLIND set): 12 alleles with the most "
                "9-mers, binder if IC50 < 500 nM",
    representation="20x20 dipeptide composition (400-d), rows L2-normalised",
    source="Kim et al., BMC Bioinformatics 15:241 (2014); IEDB data, via NanditaDamaraju/pan_allele",
    extra={"tasks": 12, "n_features": 400},
))

register_dataset(DatasetSpec(
    name="landmine",
    files=(
        DataFile("mtl_landmine/LandmineData.mat",
                 "2163ab20a80e33a8b65593c48cf283c540599dcb291105e63fa4af2ce24c2bea"),
    ),
    loader=f"{_MOD}:load_landmine",
    kind="multitask-classification",
    description="Landmine detection, 29 fields as tasks, 9 radar features (+ constant), ~6% mines",
    representation="features as stored (roughly standardised) + constant feature 1",
    source="Xue, Liao, Carin & Krishnapuram, JMLR 2007 (Duke), via daizhongxiang/Federated_Bayesian_Optimization",
    extra={"tasks": 29, "n_features": 10},
))
