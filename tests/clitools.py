"""Run the CLI in-process for tests: ``run_cli(args, monkeypatch, capsys) -> (exit code, stdout, stderr)``."""

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
