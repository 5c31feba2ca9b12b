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
import signal
import sys
import threading
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


#: seconds a Ctrl-C may take to unwind (the command's own clean-up, e.g. releasing Dask shards)
#: before the process stops anyway (see _on_interrupt)
INTERRUPT_GRACE_SECONDS = 10.0
_EXIT_LOCK = threading.Lock()
_INTERRUPTED = []
_PREVIOUS_UNRAISABLEHOOK = []  # the hook main() replaced, restored when it returns


def _exit_interrupted() -> None:
    """Print the one ``interrupted`` line and end the process with status 130, once.

    ``os._exit``: by now the interruption has unwound every ``with``/``finally`` of the command
    (or the grace period is over), and Python's own exit after a KeyboardInterrupt that passed
    through a C extension's import reports "killed by SIGINT" (-2) instead of 130. Writes are
    atomic, so ending here is as safe as a kill at any point."""
    if not _EXIT_LOCK.acquire(blocking=False):
        threading.Event().wait()  # the other caller is ending the process
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    try:
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
    finally:
        os._exit(130)


def _on_interrupt(signum, frame) -> None:
    """SIGINT: raise KeyboardInterrupt (which unwinds the command), and the first time start a
    timer that ends the process after :data:`INTERRUPT_GRACE_SECONDS` in case the exception was
    lost (a KeyboardInterrupt raised inside code that a C function calls and whose errors it
    clears, e.g. during a module's import, is dropped silently and the command would go on)."""
    if not _INTERRUPTED:
        _INTERRUPTED.append(True)
        timer = threading.Timer(INTERRUPT_GRACE_SECONDS, _exit_interrupted)
        timer.daemon = True
        timer.start()
    raise KeyboardInterrupt


def _on_unraisable(unraisable) -> None:
    """``sys.unraisablehook`` while the CLI runs: the interruption raised inside a C callback (numba's
    compiler calls Python through ctypes) is dropped there and printed as "Exception ignored"; after a
    Ctrl-C that is the interruption itself, so the command ends now with its one line."""
    if _INTERRUPTED and isinstance(unraisable.exc_value, KeyboardInterrupt):
        _exit_interrupted()
    _PREVIOUS_UNRAISABLEHOOK[-1](unraisable)


def main() -> None:
    """Console entry point: user errors become one ``error:`` line on stderr and exit status 2.

    Usage errors (unknown command or option, missing option, a value of the wrong type) are one
    such line too, naming the command's ``--help``. ``--debug`` or ``SPARSESIM_DEBUG=1`` shows the
    traceback instead. Ctrl-C prints one ``interrupted`` line and exits with status 130.
    """
    previous = signal.getsignal(signal.SIGINT)
    # only Python's own handler is replaced (a caller that ignores SIGINT keeps it ignored)
    ours = previous is signal.default_int_handler and threading.current_thread() is threading.main_thread()
    if ours:
        signal.signal(signal.SIGINT, _on_interrupt)
        _PREVIOUS_UNRAISABLEHOOK.append(sys.unraisablehook)
        sys.unraisablehook = _on_unraisable
    try:
        _run()
    except KeyboardInterrupt:  # while the command modules load, or a command's own
        _exit_interrupted()
    except Exception:
        if _INTERRUPTED:  # a failure after Ctrl-C is the interruption's doing (e.g. a compiler left half-done)
            _exit_interrupted()
        raise
    finally:
        if ours:
            signal.signal(signal.SIGINT, previous)
            sys.unraisablehook = _PREVIOUS_UNRAISABLEHOOK.pop()


def _click_errors():
    """click's ``(UsageError, ClickException, Abort)`` as the installed typer raises them (typer
    0.2x vendors click; before, they are click's own): found from ``typer.BadParameter``, public in
    both, whose bases are the usage error and the click exception."""
    import typer

    bases = {cls.__name__: cls for cls in typer.BadParameter.__mro__}
    return bases["UsageError"], bases["ClickException"], typer.Abort


def _command_path(app, args) -> str:
    """``sparsesim`` and the (sub)command names that lead ``args`` (for a usage error raised
    without its command's context, e.g. an option missing its value)."""
    import typer.core
    import typer.main

    command, path = typer.main.get_command(app), ["sparsesim"]
    for arg in args:
        sub = command.commands.get(arg) if isinstance(command, typer.core.TyperGroup) else None
        if sub is None:
            break
        command = sub
        path.append(arg)
    return " ".join(path)


def _run() -> None:
    from .checks import PortInUseError
    from .common import DEBUG, debugging, echo_line, one_line, one_line_warning, os_error_text, stop_loading

    app = _application()
    usage_error, click_exception, abort = _click_errors()
    DEBUG["on"] = "--debug" in sys.argv[1:]
    warnings.showwarning = one_line_warning
    try:
        try:
            try:
                # not standalone: click's usage errors reach us (standalone, typer prints a
                # four-line panel); a typer.Exit (--help, --version) comes back as its status
                status = app(standalone_mode=False, prog_name="sparsesim")
            except Exception:
                if _INTERRUPTED:  # after Ctrl-C, whatever failed failed because of it: one "interrupted" line
                    raise KeyboardInterrupt from None
                raise
            finally:
                stop_loading()
            sys.stdout.flush()
        except SystemExit as exc:
            # click turns a broken pipe into exit 1 after wrapping stdout; a closed reader is not an error
            if exc.code == 1 and type(sys.stdout).__name__ == "PacifyFlushWrapper":
                raise BrokenPipeError from None
            raise
        if status == 130:  # typer turns Ctrl-C into typer.Exit(130)
            raise KeyboardInterrupt
        if type(status) is int and status != 0:  # a typer.Exit(code); commands return None
            raise SystemExit(status)
        return
    except usage_error as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # `sparsesim` or `sparsesim index` alone: the help
            echo_line(exc.format_message(), err=True)
            raise SystemExit(2)
        where = exc.ctx.command_path if exc.ctx is not None else _command_path(app, sys.argv[1:])
        echo_line(f"error: {one_line(exc.format_message()).rstrip('.')} (see '{where} --help')", err=True)
        raise SystemExit(2)
    except click_exception as exc:
        echo_line(f"error: {one_line(exc.format_message())}", err=True)
        raise SystemExit(2)
    except abort:  # end of input at a prompt
        echo_line("error: the input ended", err=True)
        raise SystemExit(2)
    except BrokenPipeError:
        # the reader went away (e.g. `sparsesim query ... | head`): stop quietly, as `cat` would
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(0)
    except KeyboardInterrupt:
        raise  # main() prints the one line and exits with 130
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
