"""Built-in single-task data sets: text corpora (news20, news20-text, reuters21578, rcv1-small),
the embedded news20-sample, and dense UCI/LIBSVM sets (letter, pendigits, satimage, segment,
shuttle, usps, isolet).

Each data set is registered with :func:`~sparsesim.data.catalog.register_dataset` at import.
Files are found in the data directory (``$SPARSESIM_DATA``) under the same relative paths as
the shared mirror; sha256 values were computed from the mirror and agree with its SOURCES.md.

Representation
--------------
Text corpora default to TF-IDF (scikit-learn ``TfidfTransformer`` defaults: raw term
frequency, smooth idf ``ln((1+n)/(1+df)) + 1``) with rows L2-normalised; the IDF is computed
on all loaded documents (unsupervised). rcv1-small is already TF-IDF and is only
L2-normalised. Dense UCI sets are returned as stored. ``representation="raw"`` returns the
stored values (term counts for news20, the raw term counts of the text for news20-text and
reuters21578) for every data set.
"""

from __future__ import annotations

import html
import re
import tarfile
from importlib import resources

import numpy as np
import scipy.sparse as sp

from ..exceptions import FileFormatError, InvalidInputError
from .catalog import DataFile, DatasetSpec, register_dataset, check_options
from .containers import LabelledData
from .paths import locate
from .readers import STREAM_ERRORS, labels_as_int, l2_normalize, read_svmlight, read_text_corpus, tfidf

_GH = "https://raw.githubusercontent.com"
_TEXT_REPR = "TF-IDF (sklearn TfidfTransformer defaults: raw tf, smooth idf), rows L2-normalised"


_options = check_options


def _representation(spec, value, choices=("default", "raw")) -> str:
    value = "default" if value in (None, "default", "tfidf", "as-stored") else value
    if value not in choices:
        raise InvalidInputError(
            f"data set {spec.name!r}: unknown representation {value!r}; choose one of {', '.join(choices)}"
        )
    return value


def _files(spec):
    return [locate(f.relpath, spec.name) for f in spec.files]


def _info(spec, representation: str, **extra) -> dict:
    info = {
        "representation": spec.representation if representation == "default" else "raw (as stored)",
        "files": [f.relpath for f in spec.files],
        "source": spec.source,
    }
    info.update(extra)
    return info


# --------------------------------------------------------------------------- svmlight-based sets


def load_svmlight_set(spec: DatasetSpec, **options) -> LabelledData:
    """Loader for data sets stored as one or more svmlight files (concatenated in ``spec.files`` order).

    ``spec.extra``: ``n_features`` (width), ``text`` ("tfidf" or "l2" for the default
    representation, absent for dense sets), ``splits`` (split name of each file),
    ``class_names``, ``row_groups`` (name of an info array giving the file number, 1-based).
    Options: ``representation`` ("default" or "raw").
    """
    opts = _options(spec, options, {"representation": "default"})
    rep = _representation(spec, opts["representation"])
    extra = spec.extra
    Xs, ys = [], []
    for path in _files(spec):
        X, y = read_svmlight(path, n_features=extra.get("n_features"))
        Xs.append(X)
        ys.append(y)
    X = sp.vstack(Xs, format="csr") if len(Xs) > 1 else Xs[0]
    y = labels_as_int(np.concatenate(ys))
    info_extra = {}
    if "splits" in extra:
        info_extra["split"] = np.concatenate([np.full(len(yy), s) for yy, s in zip(ys, extra["splits"])])
        if "train" in extra["splits"]:
            info_extra["n_train"] = int(np.sum(info_extra["split"] == "train"))
    if extra.get("drop_duplicate_rows"):
        keep = _first_occurrences(X)
        if keep.size < X.shape[0]:
            info_extra["duplicates_dropped"] = int(X.shape[0] - keep.size)
            X, y = X[keep], y[keep]
            if "split" in info_extra:
                info_extra["split"] = info_extra["split"][keep]
    if rep == "default":
        if extra.get("text") == "tfidf":
            X, _ = tfidf(X)
        elif extra.get("text") == "l2":
            X = l2_normalize(X)
    X.sort_indices()
    return LabelledData(
        X=X,
        y=y,
        name=spec.name,
        class_names=dict(extra["class_names"]) if "class_names" in extra else None,
        info=_info(spec, rep, **info_extra),
    )


def _first_occurrences(X: sp.csr_matrix) -> np.ndarray:
    """Rows of X that are not exact copies of an earlier row."""
    seen, keep = set(), []
    for i in range(X.shape[0]):
        lo, hi = X.indptr[i], X.indptr[i + 1]
        key = (X.indices[lo:hi].tobytes(), X.data[lo:hi].tobytes())
        if key not in seen:
            seen.add(key)
            keep.append(i)
    return np.asarray(keep, dtype=np.int64)


def load_isolet(spec: DatasetSpec, **options) -> LabelledData:
    """ISOLET: isolet1234 + isolet5 concatenated; ``info["speaker_group"]`` = 1..5 per row.

    isolet1234 rows are isolet1 = 0-1559, isolet2 = 1560-3119, isolet3 = 3120-4679,
    isolet4 = 4680-6237 (0-based; shared/README.md); isolet5 is its own file.
    """
    data = load_svmlight_set(spec, **options)
    n1234 = int(np.sum(data.info["split"] == "train"))
    group = np.empty(data.n_documents, dtype=np.int64)
    bounds = [0, 1560, 3120, 4680, n1234]
    for g in range(4):
        group[bounds[g] : bounds[g + 1]] = g + 1
    group[n1234:] = 5
    data.info["speaker_group"] = group
    data.class_names = {i + 1: chr(ord("A") + i) for i in range(26)}
    return data


# --------------------------------------------------------------------------- 20news-bydate text


def load_news20_text(spec: DatasetSpec, **options) -> LabelledData:
    """20news-bydate raw text (train + test), read from the tar.xz without extracting.

    Options: ``representation`` ("default" = TF-IDF L2, "raw" = term counts), ``splits``
    (e.g. ``("train",)``), ``min_df`` / ``max_features`` (vocabulary pruning, default none).
    Labels are 0..19 in alphabetical newsgroup order; ``class_names`` maps them to the
    newsgroup names, ``ids`` are ``"group/doc"``, ``info["split"]`` the original split.
    """
    opts = _options(spec, options, {"representation": "default", "splits": None, "min_df": 1, "max_features": None})
    rep = _representation(spec, opts["representation"])
    (path,) = _files(spec)
    corpus = read_text_corpus(path, splits=opts["splits"])
    names, y = np.unique(corpus["groups"], return_inverse=True)
    X, vocab = _vectorize(corpus["texts"], rep, opts["min_df"], opts["max_features"])
    return LabelledData(
        X=X,
        y=y.astype(np.int64),
        name=spec.name,
        ids=corpus["ids"],
        class_names={i: str(n) for i, n in enumerate(names)},
        info=_info(spec, rep, split=corpus["split"], n_train=int(np.sum(corpus["split"] == "train")),
                   vocabulary=vocab),
    )


def _vectorize(texts, rep, min_df=1, max_features=None):
    if rep == "raw":
        from sklearn.feature_extraction.text import CountVectorizer

        vec = CountVectorizer(min_df=min_df, max_features=max_features, dtype=np.float64)
        X = sp.csr_matrix(vec.fit_transform(texts))
        X.sort_indices()
        return X, np.asarray(vec.get_feature_names_out(), dtype=str)
    return tfidf(texts, min_df=min_df, max_features=max_features)


# --------------------------------------------------------------------------- Reuters-21578


_REUTERS_RE = re.compile(rb"<REUTERS(?P<attrs>[^>]*)>(?P<body>.*?)</REUTERS>", re.S)
_ATTR_RE = re.compile(rb'(\w+)="([^"]*)"')
_TOPICS_RE = re.compile(rb"<TOPICS>(.*?)</TOPICS>", re.S)
_D_RE = re.compile(rb"<D>(.*?)</D>", re.S)
_TITLE_RE = re.compile(rb"<TITLE>(.*?)</TITLE>", re.S)
_BODY_RE = re.compile(rb"<BODY>(.*?)</BODY>", re.S)
_TEXT_RE = re.compile(rb"<TEXT[^>]*>(.*?)</TEXT>", re.S)
_TAG_RE = re.compile(r"<[^>]+>")


def parse_reuters_sgm(raw: bytes) -> list[dict]:
    """Parse one Reuters-21578 ``.sgm`` file (stdlib regexes; the files are SGML, not XML).

    Returns one dict per ``<REUTERS>`` element: ``newid`` (int), ``topics_attr`` (the TOPICS
    attribute), ``lewissplit``, ``topics`` (list of str), ``title``, ``text`` (title + body,
    entities unescaped).
    """
    docs = []
    for m in _REUTERS_RE.finditer(raw):
        attrs = {k.decode(): v.decode() for k, v in _ATTR_RE.findall(m.group("attrs"))}
        body = m.group("body")
        tm = _TOPICS_RE.search(body)
        topics = [t.decode("latin-1") for t in _D_RE.findall(tm.group(1))] if tm else []
        title = _TITLE_RE.search(body)
        text_body = _BODY_RE.search(body)
        if text_body is None:  # TYPE="UNPROC" / "BRIEF": use the whole TEXT element
            text_el = _TEXT_RE.search(body)
            text_body_s = text_el.group(1) if text_el else b""
        else:
            text_body_s = text_body.group(1)
        title_s = html.unescape(title.group(1).decode("latin-1")) if title else ""
        text = html.unescape(_TAG_RE.sub(" ", text_body_s.decode("latin-1")))
        docs.append(
            {
                "newid": int(attrs.get("NEWID", -1)),
                "topics_attr": attrs.get("TOPICS", ""),
                "lewissplit": attrs.get("LEWISSPLIT", ""),
                "topics": topics,
                "title": title_s.strip(),
                "text": (title_s + "\n" + text).strip(),
            }
        )
    return docs


def read_reuters_modapte(path) -> dict:
    """ModApte single-topic documents from the Reuters-21578 tar archive.

    ModApte = ``TOPICS="YES"`` and ``LEWISSPLIT`` in {TRAIN, TEST}; kept are the documents with
    exactly one TOPICS label whose topic has at least 2 such documents.
    """
    docs = []
    try:
        with tarfile.open(path, mode="r:*") as tar:
            members = sorted((m for m in tar if m.isfile() and m.name.endswith(".sgm")), key=lambda m: m.name)
            for member in members:
                docs.extend(parse_reuters_sgm(tar.extractfile(member).read()))
    except tarfile.TarError as exc:
        raise FileFormatError(f"{path}: not a readable tar archive ({exc})") from None
    except STREAM_ERRORS as exc:
        raise FileFormatError(f"{path}: truncated or corrupt archive ({exc.__class__.__name__}: {exc})") from None
    if not docs:
        raise FileFormatError(f"{path}: no Reuters-21578 .sgm documents found")
    modapte = [d for d in docs if d["topics_attr"] == "YES" and d["lewissplit"] in ("TRAIN", "TEST")]
    single = [d for d in modapte if len(d["topics"]) == 1]
    topics, counts = np.unique([d["topics"][0] for d in single], return_counts=True)
    ok = set(topics[counts >= 2])
    kept = sorted((d for d in single if d["topics"][0] in ok), key=lambda d: d["newid"])
    return {"n_parsed": len(docs), "n_modapte": len(modapte), "n_single_topic": len(single), "docs": kept}


def load_reuters(spec: DatasetSpec, **options) -> LabelledData:
    """Reuters-21578 ModApte, single-topic documents (see :func:`read_reuters_modapte`).

    Options: ``representation`` ("default" = TF-IDF L2 of title + body, "raw" = term counts),
    ``min_df``, ``max_features``. Labels are 0..K-1 in alphabetical topic order
    (``class_names``); ``ids`` are the NEWID values; ``info["split"]`` is train/test.
    """
    opts = _options(spec, options, {"representation": "default", "min_df": 1, "max_features": None})
    rep = _representation(spec, opts["representation"])
    (path,) = _files(spec)
    parsed = read_reuters_modapte(path)
    docs = parsed["docs"]
    names, y = np.unique([d["topics"][0] for d in docs], return_inverse=True)
    X, vocab = _vectorize([d["text"] for d in docs], rep, opts["min_df"], opts["max_features"])
    split = np.array([d["lewissplit"].lower() for d in docs])
    return LabelledData(
        X=X,
        y=y.astype(np.int64),
        name=spec.name,
        ids=np.array([d["newid"] for d in docs], dtype=np.int64),
        class_names={i: str(n) for i, n in enumerate(names)},
        info=_info(
            spec, rep, split=split, n_train=int(np.sum(split == "train")), vocabulary=vocab,
            titles=np.array([d["title"] for d in docs]),
            n_modapte=parsed["n_modapte"], n_single_topic=parsed["n_single_topic"],
        ),
    )


# --------------------------------------------------------------------------- embedded sample

SAMPLE_FILE = "news20_sample.npz"


def load_news20_sample(spec: DatasetSpec, **options) -> LabelledData:
    """The embedded 20 Newsgroups sample shipped in ``sparsesim/data/samples/`` (no data dir needed).

    Already TF-IDF with L2-normalised rows (built by ``scripts/make_sample.py``); ``ids`` are the
    bydate file names (``"sci.space/61234"``), ``info["titles"]`` the Subject lines and
    ``info["vocabulary"]`` the feature names.
    """
    _options(spec, options, {"representation": "default"})
    ref = resources.files("sparsesim.data").joinpath("samples", SAMPLE_FILE)
    try:
        with resources.as_file(ref) as p, np.load(p, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, KeyError) as exc:
        raise FileFormatError(f"embedded sample {SAMPLE_FILE} is missing or corrupt ({exc})") from None
    X = sp.csr_matrix((arrays["data"], arrays["indices"], arrays["indptr"]), shape=tuple(arrays["shape"]))
    names = arrays["group_names"]
    return LabelledData(
        X=X,
        y=arrays["labels"].astype(np.int64),
        name=spec.name,
        ids=arrays["ids"],
        class_names={i: str(n) for i, n in enumerate(names)},
        info={
            "representation": spec.representation,
            "files": [f"sparsesim/data/samples/{SAMPLE_FILE}"],
            "source": spec.source,
            "titles": arrays["titles"],
            "vocabulary": arrays["vocabulary"],
            "split": arrays["split"],
        },
    )


# --------------------------------------------------------------------------- registrations

_LIBSVM = "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/multiclass/"
_M = "sparsesim.data.builtin:"

register_dataset(DatasetSpec(
    name="news20",
    files=(DataFile(
        "news20/news20.bz2",
        "8c79851f6f5fdc5540a0d04a5ab728353c42d26b84e73f93bda301c06c15ffe9",
        url=f"{_GH}/konstmish/opt_methods/8a3ae3ab666d916abaa5a61132fb60bb2a059088/optmethods/datasets/news20.bz2",
    ),),
    loader=_M + "load_svmlight_set",
    kind="labelled",
    description="20 Newsgroups, LIBSVM news20 (training split): 15,935 documents, 62,061 term features, 20 classes",
    representation=_TEXT_REPR + " (from the stored term counts)",
    source=f"LIBSVM datasets ({_LIBSVM}news20.bz2; Lang/Rennie 20NG), byte-identical copy from "
           "github konstmish/opt_methods@8a3ae3a; free for research use",
    extra={"n_features": 62061, "text": "tfidf"},
))

register_dataset(DatasetSpec(
    name="news20-text",
    files=(DataFile(
        "news20/20news-bydate.tar.xz",
        "cfb5e227e17da9e8a21a28f81248772a615b694d31cae8b031bd6842c284b6a8",
    ),),
    loader=_M + "load_news20_text",
    kind="labelled",
    description="20 Newsgroups 'bydate' raw text, train 11,314 + test 7,532 documents, 20 newsgroups",
    representation=_TEXT_REPR + " (sklearn TfidfVectorizer default tokenizer, lowercase, full posts incl. remaining headers)",
    source="http://qwone.com/~jason/20Newsgroups/20news-bydate.tar.gz (J. Rennie), re-packed as tar.xz "
           "from github julenminer/mlnn_P65@7393be6 (file bytes untouched; no upstream serves this archive)",
))

register_dataset(DatasetSpec(
    name="reuters21578",
    files=(DataFile(
        "reuters21578/reuters21578.tar.xz",
        "3e4584d71a85999611680a396abcd6fa7828b8af75de0cd5cba4b4a5e0f252da",
    ),),
    loader=_M + "load_reuters",
    kind="labelled",
    description="Reuters-21578 ModApte split, single-topic documents (topics with >= 2 documents)",
    representation=_TEXT_REPR + " (title + body)",
    source="Reuters-21578 Distribution 1.0 (D. Lewis, UCI KDD archive; research use only), re-packed as tar.xz "
           "from github colibri17/TextCategorization@b6c2ca3 (no upstream serves this archive)",
))

register_dataset(DatasetSpec(
    name="rcv1-small",
    files=(
        DataFile("rcv1/rcv1_vw_small.svm.xz",
                 "3850a09b1e376168e2fe55aafb0d86f98fe3254cc1f081fdcb6798f6d7842a75"),
        DataFile("rcv1/rcv1_vw_smaller.svm.xz",
                 "4b7af83a6541b68f38eb01e735d3e8617483cae8b97a3d82f26c23586c41c214"),
    ),
    loader=_M + "load_svmlight_set",
    kind="labelled",
    description="RCV1-v2 subset (Vowpal Wabbit test files rcv1_small + rcv1_smaller, exact duplicate rows "
                "dropped), LYRL2004 tf-idf vectors in the 47,236-dim id space, binary labels +1/-1",
    representation="stored LYRL2004 TF-IDF values, rows L2-normalised",
    source="Lewis et al. 2004 RCV1-v2; converted from VW format (github VowpalWabbit/vowpal_wabbit@872fd8d "
           "test/train-sets/rcv1_small.dat, rcv1_smaller.dat); no upstream serves the converted files",
    extra={"n_features": 47236, "text": "l2", "drop_duplicate_rows": True, "splits": ("small", "smaller")},
))

register_dataset(DatasetSpec(
    name="letter",
    files=(DataFile("letter/letter.scale.svm.xz",
                    "8a9b25d2d5268d07c773bbff589f844f422ab5c267e332458a374d4fd400c04d"),),
    loader=_M + "load_svmlight_set",
    kind="labelled",
    description="UCI Letter Recognition, LIBSVM letter.scale: 20,000 x 16, 26 classes",
    representation="as stored (LIBSVM scaling to [-1, 1])",
    source="UCI Letter Recognition (Slate) via LIBSVM letter.scale; converted from dense text "
           "(github quark0/AnchorClouds@02b83eb data/letter.scale)",
    extra={"n_features": 16, "class_names": {i + 1: chr(ord("A") + i) for i in range(26)}},
))

register_dataset(DatasetSpec(
    name="pendigits",
    files=(
        DataFile("pendigits/pendigits.scale.xz",
                 "7cd694581d85918d6ffb90a3a98f302d2730f56547e99f8582b05f8b40e60726",
                 url=f"{_GH}/zpli0320/dataset/9d76c73bdf96dd61c1a47ebbcde19131fc1b574c/pendigits.scale",
                 content_sha256="9aa3badf6e0a9c173ff8969e1f61303b3ea343979e5a1f1bc27b251ee6d485dd"),
        DataFile("pendigits/pendigits.scale.t.xz",
                 "f33b3a242e0846935c8f8ff9eb2f71a55af4039a094e8af675ff973a969d001e",
                 url=f"{_GH}/zpli0320/dataset/9d76c73bdf96dd61c1a47ebbcde19131fc1b574c/pendigits.scale.t",
                 content_sha256="7a8aab9f5858f42ea320e7baf4884ac3b7ab91afe77bf9509fefa2f04f9b0318"),
    ),
    loader=_M + "load_svmlight_set",
    kind="labelled",
    description="UCI Pen-Based Digits, LIBSVM pendigits.scale + pendigits.scale.t: 7,494 + 3,498 x 16, 10 classes",
    representation="as stored (LIBSVM scaling to [0, 1])",
    source=f"UCI Pen-Based Recognition of Handwritten Digits via LIBSVM ({_LIBSVM}); copy from "
           "github zpli0320/dataset@9d76c73",
    extra={"n_features": 16, "splits": ("train", "test")},
))

register_dataset(DatasetSpec(
    name="satimage",
    files=(
        DataFile("satimage/satimage.scale.xz",
                 "7c6411d10b833a62fd7a01f5c1fcc1a9049b39e2bb7636f031336aff02ae62a3",
                 url=f"{_GH}/peterwu19881230/CSCE633_ML_data/4350d3340b6cc82af8c8cb03827bbcf251b9acf5/satimage.scale.training",
                 content_sha256="df08755887b968a272b84247fa0b1543b8cd623442fbc1c7943144e459ef2eb6"),
        DataFile("satimage/satimage.scale.t.xz",
                 "7d1b796d86d7f47458e047b5eadbff11ec92a4b04aed00e6d1a31558d4425276",
                 url=f"{_GH}/peterwu19881230/CSCE633_ML_data/4350d3340b6cc82af8c8cb03827bbcf251b9acf5/satimage.scale.t",
                 content_sha256="b04c60323488f5a7f571d40be5d750b279e8f3bd43729b4c109b8c013fcd8196"),
    ),
    loader=_M + "load_svmlight_set",
    kind="labelled",
    description="UCI Statlog Landsat Satellite, LIBSVM satimage.scale + satimage.scale.t: 4,435 + 2,000 x 36, 6 classes",
    representation="as stored (LIBSVM scaling to [-1, 1])",
    source=f"UCI Statlog (Landsat Satellite) via LIBSVM ({_LIBSVM}); copy from github "
           "peterwu19881230/CSCE633_ML_data@4350d33",
    extra={"n_features": 36, "splits": ("train", "test")},
))

register_dataset(DatasetSpec(
    name="segment",
    files=(DataFile("segment/segment.scale.svm.xz",
                    "56c494141a382b3e27637216e11c305a4ff0712bd05e014fda08b624c9f0a1d7"),),
    loader=_M + "load_svmlight_set",
    kind="labelled",
    description="UCI Image Segmentation, LIBSVM segment.scale: 2,310 x 19, 7 classes",
    representation="as stored (LIBSVM scaling to [-1, 1])",
    source="UCI Image Segmentation via LIBSVM segment.scale; converted from github LIBOL/LIBOL@d7e11b5 data/segment.mat",
    extra={"n_features": 19},
))

register_dataset(DatasetSpec(
    name="shuttle",
    files=(
        DataFile("shuttle/shuttle_uci.trn.svm.xz",
                 "cee1abd8f71a8d3eea2398726125c688614cc6e32dca231d5f26098b3403580f"),
        DataFile("shuttle/shuttle_uci.tst.svm.xz",
                 "f723bbd65582c8116c169a0fe5f699b67e3fcb21b6ca8e1204e7d3fe1fdc93fa"),
    ),
    loader=_M + "load_svmlight_set",
    kind="labelled",
    description="UCI Statlog Shuttle, shuttle.trn + shuttle.tst: 43,500 + 14,500 x 9, 7 classes (very unbalanced)",
    representation="as stored: raw UCI integer features (NOT scaled, unlike LIBSVM shuttle.scale)",
    source="UCI Statlog (Shuttle); converted from R package mlbench 2.1-8 (github cran/mlbench@a6ad5ce data/Shuttle.rda)",
    extra={"n_features": 9, "splits": ("train", "test"),
           "class_names": {1: "Rad.Flow", 2: "Fpv.Close", 3: "Fpv.Open", 4: "High", 5: "Bypass",
                           6: "Bpv.Close", 7: "Bpv.Open"}},
))

register_dataset(DatasetSpec(
    name="usps",
    files=(
        DataFile("usps/usps_esl.train.svm.xz",
                 "f90f3a7434af2544f7befd87caa8f14a6d39fa632be2548e7271adbb778fa1bf"),
        DataFile("usps/usps_esl.test.svm.xz",
                 "8ffdb3f85279b49bda96d7edf522443aa77e4b7e6cb49697f3fa5b575e5cd4c2"),
    ),
    loader=_M + "load_svmlight_set",
    kind="labelled",
    description="USPS handwritten digits (ESL zip.train + zip.test): 7,291 + 2,007 x 256, labels 0..9",
    representation="as stored: grey values in [-1, 1]",
    source="Hastie/Tibshirani/Friedman ESL data (Le Cun et al.); converted from R package ElemStatLearn "
           "(github cran/ElemStatLearn@253e540)",
    extra={"n_features": 256, "splits": ("train", "test")},
))

register_dataset(DatasetSpec(
    name="isolet",
    files=(
        DataFile("isolet/isolet1234.svm.xz",
                 "7aef8b90ed12f6414f7f7a77dae67f057692d0c767fb2f5f2388d43d04a4cbd5"),
        DataFile("isolet/isolet5.svm.xz",
                 "0e0e3b9b0e8f897101e392b0d58ef029e8ae025e8377e4a2a1aea9f03fca4d35"),
    ),
    loader=_M + "load_isolet",
    kind="labelled",
    description="UCI ISOLET spoken letters, isolet1234 + isolet5: 6,238 + 1,559 x 617, 26 classes; "
                "info['speaker_group'] gives the isolet group 1..5 of each row",
    representation="as stored: features in [-1, 1]",
    source="UCI ISOLET (Fanty & Cole; CC BY 4.0); converted from .mat files (github ma-xu/L21FS@b9d4e8e)",
    extra={"n_features": 617, "splits": ("train", "test")},
))

register_dataset(DatasetSpec(
    name="news20-sample",
    files=(),
    loader=_M + "load_news20_sample",
    kind="labelled",
    description="Embedded sample of 20news-bydate (shipped in the package; no data directory needed): "
                "400 documents x 5,000 terms: 40 from each of 10 distinct newsgroups",
    representation="TF-IDF (sklearn defaults + English stop words, min_df=2, 5,000 terms; post headers except Subject removed), rows L2-normalised",
    source="derived from 20news-bydate (qwone.com/~jason/20Newsgroups) by scripts/make_sample.py (seed 0)",
    extra={"embedded": True},
))
