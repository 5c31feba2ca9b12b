"""Run the CLI in-process for tests: ``run_cli(args, monkeypatch, capsys) -> (exit code, stdout, stderr)``;
start and stop a real ``sparsesim serve``, and write the small text index the service tests serve."""

import sys

from sparsesim.cli.app import main


def run_cli(args, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["sparsesim", *map(str, args)])
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def start_server(args, env=None, timeout: float = 60):
    """Start ``sparsesim serve ARGS --port FREE`` as a subprocess; wait until /health answers.

    Returns ``(process, base_url)``; fails the test with the server's stderr when it does not start.
    """
    import os
    import socket
    import subprocess
    import time

    import httpx
    import pytest

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "sparsesim.cli", "serve", *map(str, args), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + timeout
    while True:
        try:
            if httpx.get(base + "/health", timeout=1).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            pytest.fail(f"server did not start: {proc.communicate()[1].decode()[-2000:]}")
        time.sleep(0.2)


def stop_server(proc):
    import subprocess

    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def write_text_index(root, topics: dict, n_triplets: int):
    """One text file per document under ``root/docs/<topic>/``, an OASIS model trained on them
    (seed 0) and its exact index; returns the index directory."""
    from sparsesim.workflows import build_index_from_files, train_model

    docs = root / "docs"
    for label, texts in topics.items():
        (docs / label).mkdir(parents=True)
        for i, text in enumerate(texts):
            (docs / label / f"{i}.txt").write_text(text)
    train_model("oasis", str(docs), root / "model.npz", n_triplets=n_triplets, seed=0)
    build_index_from_files(root / "model.npz", str(docs), kind="exact", out=root / "index")
    return root / "index"
