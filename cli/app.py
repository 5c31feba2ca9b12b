"""The ``sparsesim`` command line: a thin layer that parses, calls one library function, prints.

Every error a user can cause (a :class:`~sparsesim.exceptions.SparsesimError`, a missing file,
bad option values) is printed as one ``error: ...`` line on stderr with exit status 2 — never a
traceback, never a partial output file (writes are atomic in the library).

Exit statuses (docs/cli.md): 0 done; 1 an unexpected internal error (a bug: the line says how to
get the traceback); 2 bad input or usage; 3 ``serve`` cannot listen on its port (in use, or no
permission); 130 interrupted (Ctrl-C), after one ``interrupted`` line.
"""

from __future__ import annotations

import os
import sys
import warnings

from sparsesim.exceptions import SparsesimError

__all__ = ["main"]  # `app` (the Typer application) is importable too, built on first access


def _application():
    """The Typer application with every command registered (imported on first use, so that
    Ctrl-C while the modules load is handled by :func:`main` like any other interruption)."""
    # the commands register on import, in the order `sparsesim --help` lists them
    from . import models, indexes, runs, overview, datasets  # noqa: F401, I001
    from .common import app

    return app


def __getattr__(name):
    if name == "app":
        return _application()
    raise AttributeError(name)


def main() -> None:
    """Console entry point: user errors become one ``error:`` line on stderr and exit status 2.

    Usage errors (unknown command or option, missing option, a value of the wrong type) are shown
    by typer's own display, also with exit status 2. ``--debug`` or ``SPARSESIM_DEBUG=1`` shows the
    traceback instead.
    """
    try:
        _run()
    except KeyboardInterrupt:  # while the command modules load
        sys.stderr.write("interrupted\n")
        raise SystemExit(130) from None


def _run() -> None:
    from .checks import PortInUseError
    from .common import DEBUG, debugging, echo_line, one_line, one_line_warning, os_error_text, stop_loading

    app = _application()
    DEBUG["on"] = "--debug" in sys.argv[1:]
    warnings.showwarning = one_line_warning
    try:
        try:
            try:
                app(standalone_mode=True)
            finally:
                stop_loading()
            sys.stdout.flush()
        except SystemExit as exc:
            if exc.code == 130:  # typer turns Ctrl-C into a silent exit 130
                echo_line("interrupted", err=True)
                raise
            # click turns a broken pipe into exit 1 after wrapping stdout; a closed reader is not an error
            if exc.code == 1 and type(sys.stdout).__name__ == "PacifyFlushWrapper":
                raise BrokenPipeError from None
            if exc.code in (0, None):
                sys.stdout.flush()
                return
            raise
    except BrokenPipeError:
        # the reader went away (e.g. `sparsesim query ... | head`): stop quietly, as `cat` would
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(0)
    except KeyboardInterrupt:
        echo_line("interrupted", err=True)
        raise SystemExit(130)
    except PortInUseError as exc:
        echo_line(f"error: {one_line(exc)}", err=True)
        raise SystemExit(3)
    except SparsesimError as exc:
        if debugging():
            raise
        echo_line(f"error: {one_line(exc)}", err=True)
        raise SystemExit(2)
    except OSError as exc:
        if debugging():
            raise
        echo_line(f"error: {one_line(os_error_text(exc))}", err=True)
        raise SystemExit(2)
    except MemoryError:
        if debugging():
            raise
        echo_line("error: out of memory (try fewer triplets or a smaller data set)", err=True)
        raise SystemExit(2)
    except (OverflowError, RecursionError) as exc:
        if debugging():
            raise
        echo_line(f"error: a value in the input is too large or too deeply nested ({one_line(exc)})", err=True)
        raise SystemExit(2)
    except Exception as exc:
        if debugging():
            raise
        echo_line(f"error: unexpected {type(exc).__name__}: {one_line(exc)} (run with --debug or "
                   "SPARSESIM_DEBUG=1 for the traceback, and please report it)", err=True)
        raise SystemExit(1)
