"""The output-path policy (:func:`sparsesim.persistence.check_output_path`) and the commands that
follow it: ``train -o``, ``tune --out``, ``index build --out``, ``learn --out`` and
``serve --learn --snapshot`` refuse an output inside (or containing) what they read or serve, a
missing parent directory, and an existing target without ``--overwrite`` -- before any work, with
one ``error:`` line, leaving every file as it was."""

from __future__ import annotations

import json
import os

import pytest

from clitools import run_cli
from sparsesim.exceptions import UnsafeTargetError
from sparsesim.persistence import check_output_path


def test_policy(tmp_path):
    corpus = tmp_path / "corpus"
    (corpus / "a").mkdir(parents=True)
    (tmp_path / "data.svm").write_text("1 1:1\n")
    os.symlink(corpus, tmp_path / "alias")
    assert check_output_path(tmp_path / "m.npz", inputs=[corpus, None]) == tmp_path / "m.npz"
    refused = [(corpus / "m.npz", [corpus], "inside the input"),
               (tmp_path / "alias" / "a" / "m.npz", [corpus], "inside the input"),  # another spelling
               (corpus / "a" / ".." / "m.npz", [corpus], "inside the input"),
               (tmp_path / "data.svm", [tmp_path / "data.svm"], "is the input"),
               (tmp_path, [corpus], "contains the input"),
               (tmp_path / "no" / "m.npz", [], "does not exist"),
               (tmp_path / "data.svm", [], "already exists.*--overwrite"),
               (tmp_path / "alias", [], "symbolic link"),
               ("", [], "empty")]
    for path, inputs, match in refused:
        with pytest.raises(UnsafeTargetError, match=match):
            check_output_path(path, inputs=inputs)
    assert check_output_path(tmp_path / "data.svm", overwrite=True) == tmp_path / "data.svm"
    with pytest.raises(UnsafeTargetError, match="not a directory"):
        check_output_path(tmp_path / "data.svm", directory=True, overwrite=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from sparsesim.workflows import build_index_from_files, train_model

    root = tmp_path_factory.mktemp("policy")
    train_model("oasis", "news20-sample", root / "model.npz", n_triplets=100, seed=0)
    build_index_from_files(root / "model.npz", "news20-sample", out=root / "idx")
    return root


def _one_error(code, err, match):
    assert code == 2 and err.startswith("error:") and len(err.strip().splitlines()) == 1, err
    assert match in err, err


def test_train_refuses_an_existing_model_without_overwrite(built, tmp_path, monkeypatch, capsys):
    out = tmp_path / "m.npz"
    out.write_bytes(b"keep me")
    args = ["train", "-a", "oasis", "-d", "news20-sample", "-n", "50", "-o", out]
    _one_error(*run_cli(args, monkeypatch, capsys)[::2], "--overwrite")
    assert out.read_bytes() == b"keep me"
    code, _, err = run_cli([*args, "--overwrite"], monkeypatch, capsys)
    assert code == 0, err
    code, _, err = run_cli(["train", "-a", "oasis", "-d", "news20-sample", "-n", "50", "-o",
                            tmp_path / "missing" / "m.npz"], monkeypatch, capsys)
    _one_error(code, err, "does not exist")


def test_index_build_names_the_cli_flag_and_never_swallows_its_inputs(built, monkeypatch, capsys):
    idx = built / "idx"
    before = sorted(p.name for p in idx.iterdir())
    code, _, err = run_cli(["index", "build", "-m", built / "model.npz", "-d", "news20-sample", "-o", idx],
                           monkeypatch, capsys)
    _one_error(code, err, "--overwrite")
    assert "overwrite=True" not in err.replace("(overwrite=True)", "")
    version = next(p for p in idx.iterdir() if p.is_dir())
    from sparsesim.indexes import load_index

    load_index(idx).model.save(built / "copy.npz")
    code, _, err = run_cli(["index", "build", "-m", built / "model.npz", "-d", built / "copy.npz", "-o",
                            version / "sub", "--overwrite"], monkeypatch, capsys)
    assert code == 2 and "error:" in err
    code, _, err = run_cli(["index", "build", "-m", version / "model.npz", "-d", "news20-sample", "-o", idx,
                            "--overwrite"], monkeypatch, capsys)
    _one_error(code, err, "contains the input")
    assert sorted(p.name for p in idx.iterdir()) == before
    code, out, err = run_cli(["index", "build", "-m", built / "model.npz", "-d", "news20-sample", "-o", idx,
                              "--overwrite", "--json"], monkeypatch, capsys)
    assert code == 0 and json.loads(out)["n_documents"] > 0, err


def test_serve_and_learn_refuse_a_snapshot_inside_the_index_or_nowhere(built, tmp_path, monkeypatch, capsys):
    idx = built / "idx"
    version = next(p for p in idx.iterdir() if p.is_dir())
    model_bytes = (version / "model.npz").read_bytes()
    for snapshot, match in [(version / "model.npz", "inside the input"), (idx / "snap.npz", "inside the input"),
                            (tmp_path / "missing" / "snap.npz", "does not exist")]:
        code, _, err = run_cli(["serve", "-i", idx, "--learn", "--snapshot", snapshot, "--port", "0"],
                               monkeypatch, capsys)
        _one_error(code, err, match)
    assert (version / "model.npz").read_bytes() == model_bytes
    log = tmp_path / "fb.jsonl"
    from sparsesim.indexes import load_index

    ids = [v.item() for v in load_index(idx).ids_[:3]]
    log.write_text(json.dumps({"query": ids[0], "preferred": ids[1], "other": ids[2]}) + "\n")
    code, _, err = run_cli(["learn", "-i", idx, "-f", log, "-o", version / "model.npz"], monkeypatch, capsys)
    _one_error(code, err, "inside the input")
    code, _, err = run_cli(["learn", "-i", idx, "-f", log, "-o", log], monkeypatch, capsys)
    _one_error(code, err, "is the input")
    out = tmp_path / "snap.npz"
    assert run_cli(["learn", "-i", idx, "-f", log, "-o", out], monkeypatch, capsys)[0] == 0
    _one_error(*run_cli(["learn", "-i", idx, "-f", log, "-o", out], monkeypatch, capsys)[::2], "--resume")
    assert run_cli(["learn", "-i", idx, "-f", log, "-o", out, "--resume"], monkeypatch, capsys)[0] == 0
    assert run_cli(["learn", "-i", idx, "-f", log, "-o", out, "--overwrite"], monkeypatch, capsys)[0] == 0
