"""Campaign families for files a user hands over (``tests/fuzz_campaign.py`` runs them).

* ``folder``: text folders drawn with links to files and label folders outside, dangling links,
  link cycles, FIFOs, sockets, hidden files and ``.git`` folders, odd names; read by
  ``load_dataset``. Failures: a hang, a word of an outside or hidden file in the vocabulary, a
  hidden folder or an outside folder as a label, an id outside the folder, a non-project error.
* ``table``: CSV/JSONL tables with integers past Python's digit limit, deep nesting, NaN, long
  labels, missing columns, bytes that are not UTF-8.
* ``meta``: models whose metadata is drawn around the size and depth limits: ``save`` refuses
  (a project error, nothing written) or ``load`` reads back what was saved.
* ``width``: ``.npz`` query files of drawn widths against a model's width: refused unless equal.
* ``corner``: the library corners -- save paths (a directory, ``''``, over-long names), complex W,
  classifiers used before ``fit``, index parameters that are options, corpora of drawn scales at
  index build and add (refused before anything is written, or an index that loads and answers
  finite scores).
* CLI (``ingest_cli_case``): ``train``, ``index build``, ``query`` and ``experiment`` on the same
  hostile folders, tables and query files, and the CLI corners (``-p n_jobs=abc``, ``-p .C=1``,
  ``--protocol ''``); the outcome classes of the campaign, plus ``wrong`` when an outside word is
  printed or ends up in a written model.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp

SECRET = "zzsecretword"   # text of files outside the folder: must never be read
HIDDEN = "zzhiddenword"   # text of hidden files: skipped by default
LIBRARY_FAMILIES = ["folder", "table", "meta", "width", "corner"]


# --------------------------------------------------------------------------- hostile folders
def make_folder(rng, base: Path) -> Path:
    """A text folder ``base/docs`` with drawn hostile entries; ``base/outside`` holds the secret."""
    shutil.rmtree(base, ignore_errors=True)
    docs, outside = base / "docs", base / "outside"
    (outside / "labeldir").mkdir(parents=True)
    (outside / "secret.txt").write_text(f"{SECRET} one")
    (outside / "labeldir" / "s.txt").write_text(f"{SECRET} two")
    labels = [str(rng.choice(["sport", "tech", "news", "a b", "é", "x" * 200, "0", "1"])) for _ in range(rng.integers(0, 4))]
    docs.mkdir(parents=True)
    for label in dict.fromkeys(labels):
        (docs / label).mkdir(exist_ok=True)
        for i in range(int(rng.integers(0, 4))):
            (docs / label / f"d{i}.txt").write_text(str(rng.choice(["goal match", "chip code", "", "a " * 50, "é ü"])))
    where = [docs / d for d in dict.fromkeys(labels)] + [docs]
    for _ in range(int(rng.integers(1, 6))):
        spot = where[int(rng.integers(len(where)))]
        name = f"e{int(rng.integers(10**6))}"
        kind = str(rng.choice(["link-file", "link-dir", "dangling", "loop", "fifo", "socket", "hidden-file",
                               "hidden-dir", "git", "inside-link", "bad-name", "nested", "empty-file"]))
        try:
            if kind == "link-file":
                os.symlink(outside / "secret.txt", spot / f"{name}.txt")
            elif kind == "link-dir":
                os.symlink(outside / "labeldir", spot / name)
            elif kind == "dangling":
                os.symlink(base / "nowhere", spot / name)
            elif kind == "loop":
                os.symlink(docs, spot / name)
            elif kind == "fifo":
                os.mkfifo(spot / name)
            elif kind == "socket":
                path = spot / name
                if len(str(path)) < 100:
                    with socket.socket(socket.AF_UNIX) as sock:
                        sock.bind(str(path))
            elif kind == "hidden-file":
                (spot / f".{name}").write_text(HIDDEN)
            elif kind == "hidden-dir":
                (spot / f".{name}").mkdir()
                (spot / f".{name}" / "h.txt").write_text(HIDDEN)
            elif kind == "git":
                (docs / ".git" / "objects").mkdir(parents=True, exist_ok=True)
                (docs / ".git" / "HEAD").write_text(HIDDEN)
                (docs / ".git" / "objects" / "o").write_text(HIDDEN)
            elif kind == "inside-link":
                targets = [p for p in docs.rglob("*.txt") if p.is_file() and not p.is_symlink()]
                if targets:
                    os.symlink(targets[0], spot / f"{name}.txt")
            elif kind == "bad-name":
                os.makedirs(os.fsencode(spot), exist_ok=True)
                with open(os.path.join(os.fsencode(spot), b"\xff\xfe" + name.encode()), "wb") as handle:
                    handle.write(b"odd name")
            elif kind == "nested":
                (spot / name / "deeper").mkdir(parents=True)
                (spot / name / "deeper" / "n.txt").write_text("nested text")
            else:
                (spot / f"{name}.txt").write_bytes(b"")
        except OSError:
            continue
    return docs


def check_folder_data(data, docs: Path) -> str:
    """'ok' when nothing outside ``docs`` or hidden was read, else 'wrong'."""
    vocab = set(data.featurizer.vocabulary()) if data.featurizer is not None else set()
    if SECRET in vocab or HIDDEN in vocab:
        return "wrong"
    labels = set((data.class_names or {}).values())
    if any(str(label).startswith(".") or str(label) == "labeldir" for label in labels):
        return "wrong"
    root = os.path.realpath(docs)
    for doc_id in data.ids if data.ids is not None else []:
        rel = os.path.relpath(str(doc_id), str(docs))
        if rel.startswith("..") or any(part.startswith(".") for part in Path(rel).parts):
            return "wrong"
        if not os.path.realpath(os.path.join(str(docs), rel)).startswith(root):
            # an inside link keeps its own path; what it points to must be inside as well
            return "wrong"
    return "ok"


# --------------------------------------------------------------------------- hostile tables
def make_table(rng, base: Path) -> Path:
    base.mkdir(parents=True, exist_ok=True)
    fmt = str(rng.choice(["jsonl", "csv"]))
    path = base / f"t.{fmt}"
    rows = []
    for i in range(int(rng.integers(0, 8))):
        text = str(rng.choice(["goal match", "chip code", "", "é"]))
        label = rng.choice(["a", "b", "1", "2", "9" * int(rng.choice([10, 4301, 6000])), "NaN", "",
                            "x" * int(rng.choice([10, 100_000]))])
        rows.append((text, str(label), i))
    if fmt == "jsonl":
        lines = []
        poison = int(rng.integers(len(rows) + 1))  # one hostile row (or none)
        for text, label, i in rows:
            kind = str(rng.choice(["int", "nested", "nan", "array", "missing", "bytes"])) if i == poison else "plain"
            if kind == "int":
                lines.append(f'{{"text": "{text}", "label": {"9" * int(rng.choice([5, 4300, 4301, 9000]))}}}')
            elif kind == "nested":
                lines.append('{"text": "a", "label": ' + "[" * int(rng.choice([50, 5000, 100_000])) + "]" * 3 + "}")
            elif kind == "nan":
                lines.append(f'{{"text": "{text}", "label": NaN}}')
            elif kind == "array":
                lines.append("[1, 2]")
            elif kind == "missing":
                lines.append(f'{{"label": "{label}"}}')
            elif kind == "bytes":
                lines.append("\udcff\udcfe")
            else:
                lines.append(json.dumps({"text": text, "label": label, "id": f"r{i}"}))
        path.write_bytes("\n".join(lines).encode("utf-8", "surrogateescape"))
    else:
        lines = ["text,label"] + [f"{t},{lab}" for t, lab, _ in rows]
        if rng.random() < 0.2:
            lines.append('"unterminated,' + "x" * 200_000)
        path.write_text("\n".join(lines))
    return path


# --------------------------------------------------------------------------- library cases
def library_ingest_case(family: str, rng, root: Path) -> str:
    from sparsesim.data import load_dataset
    from sparsesim.data.readers.folders import SkippedEntryWarning
    from sparsesim.models import BilinearSimilarity

    work = root / f"ingest-{os.getpid()}"
    if family == "folder":
        docs = make_folder(rng, work)
        opts = {}
        if rng.random() < 0.2:
            opts["encoding"] = str(rng.choice(["latin-1", "nosuch", "utf-16"]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SkippedEntryWarning)
            data = load_dataset(str(docs), **opts)
        return check_folder_data(data, docs)
    if family == "table":
        path = make_table(rng, work)
        load_dataset(str(path))
        return "ok"
    if family == "meta":
        work.mkdir(parents=True, exist_ok=True)
        out = work / "m.npz"
        out.unlink(missing_ok=True)
        size = int(rng.choice([10, 1 << 20, (1 << 22) - 2000, (1 << 22) + 10, 6 << 20]))
        depth = int(rng.choice([1, 30, 62, 63, 64, 65, 200]))
        meta = {"class_names": {"0": "x" * size}, "extra": json.loads("[" * depth + "]" * depth)}
        model = BilinearSimilarity(sp.identity(4, format="csr"), metadata=meta)
        try:
            model.save(out)
        except Exception:
            if out.exists():
                return "partial"  # refused, but a file was written
            raise
        back = BilinearSimilarity.load(out)
        return "ok" if back.metadata["class_names"] == meta["class_names"] else "wrong"
    if family == "width":
        work.mkdir(parents=True, exist_ok=True)
        d = int(rng.choice([50, 300]))
        width = int(rng.choice([1, d - 1, d, d + 1, 5 * d]))
        sp.save_npz(work / "q.npz", sp.random(3, width, density=0.2, format="csr", random_state=0))
        load_dataset(str(work / "q.npz"), n_features=d)
        return "ok" if width == d else "wrong"
    if family == "corner":
        return _corner_case(rng, work)
    raise ValueError(family)


def _corner_case(rng, work: Path) -> str:
    from sparsesim.indexes import build_index, load_index
    from sparsesim.models import BilinearSimilarity
    from sparsesim.registry import ALGORITHMS, make_estimator

    work.mkdir(parents=True, exist_ok=True)
    which = str(rng.choice(["save", "complex", "unfitted", "overflow", "overflow-add"]))
    if which == "save":
        model = BilinearSimilarity(sp.identity(3, format="csr"))
        target = [str(work), "", ".", str(work / ("a" * int(rng.choice([250, 300, 5000])))), str(work / "no" / "m.npz")][
            int(rng.integers(5))]
        model.save(target)
        return "ok" if BilinearSimilarity.load(target).n_features == 3 else "wrong"
    if which == "complex":
        BilinearSimilarity(sp.identity(3, format="csr", dtype=np.complex128) * (1 + 1j * float(rng.choice([0, 1]))))
        return "wrong"  # must be refused
    if which == "unfitted":
        names = sorted(n for n, s in ALGORITHMS.items() if s.kind in ("transfer", "multitask-classifier"))
        name = names[int(rng.integers(len(names)))]
        est = make_estimator(name)
        X = np.random.default_rng(0).normal(size=(3, 5))
        args = (X,) if ALGORITHMS[name].kind == "transfer" else (sp.csr_matrix(X), 0)
        from sklearn.exceptions import NotFittedError

        try:
            getattr(est, str(rng.choice(["predict", "decision_function"])))(*args)
        except NotFittedError:
            raise
        return "wrong"
    d = 40
    model = BilinearSimilarity(sp.random(d, d, density=0.05, format="csr", random_state=0) * float(rng.choice([0.1, 1e5])),
                               normalize=bool(rng.random() < 0.3))
    X = sp.random(30, d, density=0.2, format="csr", random_state=1)
    scale = float(rng.choice([1e-300, 1.0, 1e20, 1e100, 1e150, 1e155, 1e200, 1e308]))
    big = X.copy()
    big.data = big.data * scale if rng.random() < 0.5 else np.full_like(big.data, scale)
    kind = str(rng.choice(["exact", "ann"]))
    target = work / "idx"
    shutil.rmtree(target, ignore_errors=True)
    if which == "overflow":
        try:
            build_index(model, big, kind=kind, **({"dim": 4} if kind == "ann" else {})).save(target)
        except Exception:
            if target.exists():
                return "partial"  # refused, but an index was written
            raise
    else:
        build_index(model, X, kind=kind, **({"dim": 4} if kind == "ann" else {})).save(target)
        index = load_index(target)
        try:
            index.add(big, ids=np.arange(100, 130))
            index.save(target, overwrite=True)
        except Exception:
            if load_index(target).n_documents != 30:
                return "partial"
            raise
    loaded = load_index(target)
    # the stored documents' own scores (queries as large as the documents indexed)
    _, scores = loaded.query(big[:3], top_k=5)
    return "ok" if np.all(np.isfinite(scores)) else "wrong"


# --------------------------------------------------------------------------- CLI cases
def make_cli_fixtures(root: Path) -> None:
    """A text model (for index build on folders) beside the campaign's fixtures."""
    from sparsesim.workflows import train_model

    text = root / "text-docs"
    if not (root / "text-m.npz").exists():
        for label, words in (("sport", "goal match win team"), ("tech", "chip code compile run")):
            (text / label).mkdir(parents=True, exist_ok=True)
            for i in range(6):
                (text / label / f"{i}.txt").write_text(" ".join(words.split()[: 2 + i % 3]))
        train_model("dot", str(text), root / "text-m.npz", n_triplets=10, seed=0)


def ingest_cli_case(rng, root: Path) -> tuple[list, Path | None]:
    """(arguments, folder whose secret must not leak) of one drawn CLI case on hostile files."""
    work = root / "cli-ingest"
    shutil.rmtree(work, ignore_errors=True)
    what = str(rng.choice(["train-folder", "build-folder", "query-folder", "train-table", "query-width",
                           "build-param", "build-scale", "experiment-protocol", "param-scope"]))
    docs = None
    if what.endswith("folder"):
        docs = make_folder(rng, work)
    if what == "train-folder":
        return ["train", "-a", str(rng.choice(["dot", "oasis"])), "-d", str(docs), "-n", "50", "-o",
                str(root / "out.npz"), "--json"], docs
    if what == "build-folder":
        return ["index", "build", "-m", str(root / "text-m.npz"), "-d", str(docs), "-o", str(root / "idx"), "--json"], docs
    if what == "query-folder":
        return ["query", "-m", str(root / "text-m.npz"), "--corpus", str(docs), "--queries", str(docs),
                "-k", "1", "--json"], docs
    if what == "train-table":
        path = make_table(rng, work)
        return ["train", "-a", "dot", "-d", str(path), "-n", "10", "-o", str(root / "out.npz")], None
    if what == "query-width":
        work.mkdir(parents=True)
        width = int(rng.choice([256, 4999, 5000, 5001, 62061]))
        sp.save_npz(work / "q.npz", sp.random(5, width, density=0.01, format="csr", random_state=0))
        return ["query", "-m", str(root / "m.npz"), "--corpus", str(root / "q.svm"), "--queries", str(work / "q.npz"),
                "-k", "2", "--json"], None
    if what == "build-param":
        param = str(rng.choice(["n_jobs=abc", "n_jobs=2", "kind=ann", "ids=1", "strategy=query", ".C=1",
                                "frobnicate=1", "target_recall=0.5"]))
        return ["index", "build", "-m", str(root / "m.npz"), "-d", str(root / "q.svm"), "-o", str(root / "idx"),
                "-p", param, "--kind", str(rng.choice(["exact", "ann"]))], None
    if what == "build-scale":
        from sklearn.datasets import dump_svmlight_file

        from sparsesim.data import load_dataset

        work.mkdir(parents=True)
        data = load_dataset(str(root / "q.svm"), n_features=5000)
        X = data.X.copy()
        scale = float(rng.choice([1e10, 1e100, 1e150, 1e160, 1e300, 1e308]))
        X.data = np.full_like(X.data, scale) if rng.random() < 0.5 else X.data * scale
        dump_svmlight_file(X, data.y, str(work / "big.svm"), zero_based=False)
        if rng.random() < 0.5:
            return ["index", "build", "-m", str(root / "m.npz"), "-d", str(work / "big.svm"), "-o", str(root / "idx"),
                    "--kind", str(rng.choice(["exact", "ann"]))], None
        shutil.rmtree(root / "idx", ignore_errors=True)
        shutil.copytree(root / "base-exact", root / "idx")
        return ["index", "add", "--index", str(root / "idx"), "-d", str(work / "big.svm")], None
    if what == "experiment-protocol":
        return ["experiment", "-d", "news20-sample", "-a", "dot", "--protocol", str(rng.choice(["", " ", "nosuch"]))], None
    return ["experiment", "-d", "news20-sample", "-a", "dot", "-p", str(rng.choice([".C=1", "..C=1", "dot.=1", "=1"]))], None


def leaked(out: str, root: Path) -> bool:
    """Whether a secret word was printed or stored in a model written by the case."""
    if SECRET in out or HIDDEN in out:
        return True
    path = root / "out.npz"
    if path.exists():
        try:
            from sparsesim.models import BilinearSimilarity

            model = BilinearSimilarity.load(path)
        except Exception:  # noqa: BLE001 - a model that does not load is the campaign's 'partial'
            return False
        if model.featurizer is not None and {SECRET, HIDDEN} & set(model.featurizer.vocabulary()):
            return True
    return False
