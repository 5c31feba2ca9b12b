"""Text folders and tables a user hands over (issue 40: families 3, 8, 9): links leading outside
the folder (to files and to label folders), FIFOs, sockets, hidden files and ``.git`` folders,
and JSONL lines past the JSON parser's limits. Nothing outside the folder is read, nothing
blocks, and every refusal is a project error."""

from __future__ import annotations

import os
import tarfile
import threading
import warnings

import numpy as np
import pytest

from sparsesim.data import load_dataset
from sparsesim.data.readers import iter_text_corpus, read_text_folder
from sparsesim.data.readers.folders import Document, SkippedEntryWarning, read_document
from sparsesim.exceptions import FileFormatError, InvalidInputError


def _finishes(fn, seconds: float = 60.0):
    """``fn()``'s result, failing the test (not hanging it) when it blocks."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the call blocked"
    if "error" in box:
        raise box["error"]
    return box["value"]


@pytest.fixture()
def hostile_folder(tmp_path):
    """docs/{sport,tech} plus a link to an outside file, a link to an outside label folder, a FIFO,
    hidden files, a .git folder, a link inside the folder and a link cycle."""
    docs, outside = tmp_path / "docs", tmp_path / "outside"
    for d in (docs / "sport", docs / "tech", docs / ".git" / "objects", outside / "labeldir"):
        d.mkdir(parents=True)
    (docs / "sport" / "a.txt").write_text("goal match win")
    (docs / "tech" / "b.txt").write_text("chip code compile")
    (docs / "sport" / ".hidden.txt").write_text("hiddenword")
    (docs / ".git" / "HEAD").write_text("gitword")
    (docs / ".git" / "objects" / "x").write_text("gitword")
    (outside / "secret.txt").write_text("secretword")
    (outside / "labeldir" / "c.txt").write_text("outsideword")
    os.symlink(outside / "secret.txt", docs / "sport" / "link.txt")
    os.symlink(outside / "labeldir", docs / "stolen")
    os.symlink(docs / "sport" / "a.txt", docs / "tech" / "inside.txt")
    os.symlink(docs, docs / "tech" / "loop")
    os.mkfifo(docs / "tech" / "fifo")
    return docs


def test_text_folder_reads_nothing_outside_and_never_blocks(hostile_folder):
    with pytest.warns(SkippedEntryWarning, match=r"2 symbolic link\(s\) leading outside.*1 FIFO"):
        data = _finishes(lambda: load_dataset(str(hostile_folder)))
    vocab = set(data.featurizer.vocabulary())
    assert not vocab & {"secretword", "outsideword", "hiddenword", "gitword"}
    assert sorted(data.class_names.values()) == ["sport", "tech"]  # no ".git", no "stolen" label
    assert sorted(os.path.relpath(i, hostile_folder) for i in data.ids) == ["sport/a.txt", "tech/b.txt",
                                                                           "tech/inside.txt"]


def test_text_folder_opt_ins_read_links_and_hidden_entries(hostile_folder):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedEntryWarning)  # the FIFO is still skipped
        data = _finishes(lambda: read_text_folder(hostile_folder, follow_symlinks=True, include_hidden=True))
    vocab = set(data.featurizer.vocabulary())
    assert {"secretword", "outsideword", "hiddenword", "gitword"} <= vocab
    assert {"stolen", ".git"} <= set(data.class_names.values())


def test_text_corpus_layout_skips_hidden_links_and_fifos(tmp_path):
    root, outside = tmp_path / "corpus", tmp_path / "outside"
    for d in (root / "train" / "a", root / "test" / "a", root / ".git" / "x" / "y", outside):
        d.mkdir(parents=True)
    (root / "train" / "a" / "1").write_text("alpha beta")
    (root / "test" / "a" / "2").write_text("gamma")
    (root / ".git" / "x" / "y" / "3").write_text("gitword")
    (outside / "4").write_text("secretword")
    os.symlink(outside / "4", root / "train" / "a" / "4")
    os.mkfifo(root / "train" / "a" / "5")
    with pytest.warns(SkippedEntryWarning):
        docs = _finishes(lambda: list(iter_text_corpus(root)))
    assert [(s, g, n) for s, g, n, _ in docs] == [("test", "a", "2"), ("train", "a", "1")]
    # a tar archive: members under a hidden folder are skipped too
    with tarfile.open(tmp_path / "c.tar", "w") as tar:
        tar.add(root / "train", arcname="c/train")
        tar.add(root / ".git", arcname="c/.git")
    assert [n for _, _, n, _ in iter_text_corpus(tmp_path / "c.tar")] == ["1"]
    with pytest.raises(FileFormatError, match="not a folder or a regular file"):
        _finishes(lambda: list(iter_text_corpus(root / "train" / "a" / "5")))


def test_a_fifo_swapped_in_after_the_listing_is_refused_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "f")
    with pytest.raises(FileFormatError, match="no longer a regular file"):
        _finishes(lambda: read_document(Document(("f",), str(tmp_path / "f")), "f"))


def test_unknown_encoding_is_a_clean_error(hostile_folder):
    with pytest.raises(InvalidInputError, match="unknown text encoding"):
        read_text_folder(hostile_folder, encoding="no-such-codec")


@pytest.mark.parametrize("line", ['{"text": "a", "label": ' + "9" * 5000 + "}", "[" * 100_000], ids=["digits", "nesting"])
def test_jsonl_lines_past_the_parser_limits_are_file_errors(tmp_path, line):
    path = tmp_path / "t.jsonl"
    path.write_text('{"text": "goal", "label": 1}\n' + line + "\n")
    with pytest.raises(FileFormatError, match=r"t.jsonl:2: not a JSON object"):
        load_dataset(str(path))


def test_integer_labels_past_int64_are_names_written_in_full(tmp_path):
    from sparsesim.data.readers import encode_labels

    path = tmp_path / "t.jsonl"
    big = 10**30
    path.write_text("\n".join([f'{{"text": "goal", "label": {big}}}', '{"text": "chip", "label": 1}',
                               f'{{"text": "code", "label": {2**63}}}']) + "\n")
    data = load_dataset(str(path))
    assert sorted(data.class_names.values()) == sorted(["1", str(big), str(2**63)])
    codes, names = encode_labels(np.array([2**63, 1], dtype=np.uint64))  # no wrap to a negative code
    assert names is not None and sorted(names.values()) == ["1", str(2**63)]


def test_a_link_inside_the_folder_to_a_hidden_entry_is_skipped_like_the_entry(tmp_path):
    """Campaign case folder/1545095011: docs/0/x.txt -> docs/.hidden/h.txt was read."""
    docs = tmp_path / "docs"
    (docs / ".hidden").mkdir(parents=True)
    (docs / ".hidden" / "h.txt").write_text("zzhiddenword")
    for label in ("sport", "tech"):
        (docs / label).mkdir()
        (docs / label / "a.txt").write_text(f"{label} words here")
    os.symlink(docs / ".hidden" / "h.txt", docs / "sport" / "link.txt")
    os.symlink(docs / ".hidden", docs / "tech" / "linkdir")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedEntryWarning)
        data = load_dataset(str(docs))
    assert "zzhiddenword" not in set(data.featurizer.vocabulary())
    assert sorted(os.path.basename(str(i)) for i in data.ids) == ["a.txt", "a.txt"]
    with_hidden = read_text_folder(docs, include_hidden=True)
    assert "zzhiddenword" in set(with_hidden.featurizer.vocabulary())
