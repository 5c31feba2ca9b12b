"""What every ``sparsesim`` command shares: the Typer application and its sub-command groups,
the root options (``--version``, ``--debug``), output (``--json``, the loading spinner, progress
bars), the parsing of ``-p name=value`` parameters and seeds, the data-file options, and the
one-line display of errors and warnings. The commands are in the modules beside this one;
:mod:`sparsesim.cli.app` registers them and holds the entry point.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from typing import List, Optional

import typer

from sparsesim.exceptions import InvalidInputError
from sparsesim.persistence import dumps_strict
from sparsesim.validation import bounded, check_int, check_seed_count

# Help is rendered by click's plain formatter (rich_markup_mode=None): paragraphs re-wrapped whole,
# flags without a type label, and square brackets such as sparsesim[dask] printed as written.
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None, help="Online similarity learning on sparse data, served as top-k retrieval.")
datasets_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                           help="List, describe and fetch registered data sets.")
app.add_typer(datasets_app, name="datasets")
index_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Build retrieval indexes from learned models.")
app.add_typer(index_app, name="index")


_LOADING = None  # the "loading" spinner shown on a terminal until a command's own output starts


def _start_loading() -> None:
    """On a terminal, show a spinner on stderr at once, while heavy modules load (first output < 1 s)."""
    global _LOADING
    if _LOADING is not None or not sys.stderr.isatty() or os.environ.get("SPARSESIM_NO_SPINNER"):
        return
    from rich.console import Console
    from rich.live import Live
    from rich.spinner import Spinner

    _LOADING = Live(Spinner("dots", text="sparsesim: loading..."), console=Console(stderr=True), transient=True,
                    redirect_stdout=False, redirect_stderr=False, refresh_per_second=8)
    _LIVE["console"] = _LOADING.console
    _LOADING.start()


def stop_loading() -> None:
    global _LOADING
    if _LOADING is not None:
        live, _LOADING = _LOADING, None
        live.stop()
        _LIVE.pop("console", None)


def echo_line(*args, **kwargs) -> None:
    stop_loading()
    typer.echo(*args, **kwargs)


def _version_callback(value: bool) -> None:
    if value:
        from sparsesim import __version__

        echo_line(f"sparsesim {__version__}")
        raise typer.Exit()


DEBUG = {"on": False}


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True,
                                 help="Print the version and exit."),
    debug: bool = typer.Option(False, "--debug", help="Show the Python traceback of an error "
                               "(same as SPARSESIM_DEBUG=1)."),
) -> None:
    """Online similarity learning on sparse data, served as top-k retrieval."""
    DEBUG["on"] = debug
    _start_loading()
    _announce_first_compile()


# --- helpers ----------------------------------------------------------------------------------
def scheduler_option():
    """``--scheduler ADDRESS`` (default ``$SPARSESIM_SCHEDULER``): run on a Dask cluster."""
    return typer.Option(None, "--scheduler", envvar="SPARSESIM_SCHEDULER", show_envvar=True,
                        help="Dask scheduler address (tcp://HOST:PORT) to run on; needs sparsesim[dask]. "
                             "Default: in this process.")


def emit(obj) -> None:
    """One line of strict JSON (NaN/Infinity written as null) on stdout."""
    stop_loading()
    sys.stdout.write(dumps_strict(obj) + "\n")


def _parse_value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_params(items: Optional[List[str]]) -> dict:
    """``["C=0.1", "oasis.C=1"]`` -> ``{"*": {"C": 0.1}, "oasis": {"C": 1}}``."""
    out: dict = {}
    for item in items or []:
        if "=" not in item:
            raise InvalidInputError(f"--param expects KEY=VALUE (or ALGORITHM.KEY=VALUE), got {item!r}")
        key, value = item.split("=", 1)
        scope, dot, name = key.rpartition(".")
        if not name or (dot and not scope.strip()):
            raise InvalidInputError(f"--param has an empty {'key' if not name else 'algorithm name'} in "
                                    f"{bounded(repr(item), 80)}")
        out.setdefault(scope or "*", {})[name] = _parse_value(value)
    return out


def parse_seeds(text: str, n_algorithms: int = 1) -> list[int]:
    """``"0,1,2"`` or ``"0-9"`` (inclusive ranges) or a mix -> list of ints in [0, 2^32 - 1].

    The number of runs is checked against the experiment limit before any range is expanded.
    """
    spans: list[tuple[int, int]] = []
    try:
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            lo, sep, hi = part.partition("-")
            if sep and lo.strip():
                spans.append((int(lo), int(hi)))
            else:
                spans.append((int(part), int(part)))
    except ValueError:
        raise InvalidInputError(f"--seeds expects integers or ranges like 0-9, got {bounded(repr(text), 80)}") from None
    if not spans:
        raise InvalidInputError("--seeds needs at least one seed")
    for lo, hi in spans:
        for value in (lo, hi):
            check_int(value, "--seeds (each seed)", 0, 2**32 - 1)
        if hi < lo:
            raise InvalidInputError(f"--seeds range {lo}-{hi} is empty (the end is below the start)")
    check_seed_count(sum(hi - lo + 1 for lo, hi in spans), n_algorithms)
    return [seed for lo, hi in spans for seed in range(lo, hi + 1)]


_LIVE: dict = {}  # the rich display on stderr now (progress bar or loading spinner), for the compile notice


def progress_bar(total: int, description: str, enabled: bool, loading: str | None = None):
    """A rich progress bar on stderr; returns (context manager, ``advance(done, total=None, stage=None)``).

    The bar shows elapsed time and an ETA and redraws ten times a second. With ``loading``, it
    starts as that phase (a pulsing bar, e.g. "loading news20") and becomes ``description`` with
    ``total`` at the first ``advance`` call (the work's own start), so the clock and the ETA
    measure the work, not the loading. ``advance(0, total, stage=TEXT)`` starts a further phase described by TEXT
    (``total`` None: a pulsing bar).
    """
    from contextlib import nullcontext

    stop_loading()
    if not enabled:
        return nullcontext(), None
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    progress = Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False), BarColumn(),
                        MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                        console=Console(stderr=True), transient=True, refresh_per_second=10)
    _LIVE["console"] = progress.console
    task = progress.add_task(loading or description, total=None if loading else total)
    phase = {"loading": loading is not None}

    def advance(done, new_total=None, stage=None):
        if stage is not None:  # a further phase of the work: its own description and total
            phase["loading"] = False
            progress.reset(task, total=new_total, description=stage)
        elif phase["loading"]:
            phase["loading"] = False
            progress.reset(task, total=new_total if new_total is not None else total, description=description)
        elif new_total is not None:
            progress.update(task, total=new_total)
        progress.update(task, completed=done)

    return progress, advance


def total_progress(progress, advance):
    """Adapt ``advance(done)`` to callbacks that report ``(done, total)``."""

    def update(done, total=None):
        advance(done, total)

    return update


def _announce_first_compile() -> None:
    """On a terminal, when no compiled kernel of this sparsesim version is cached yet (the first
    run after an install or upgrade), say once, when numba starts compiling, what the wait is."""
    if _LIVE.get("announced") is not None or not sys.stderr.isatty():
        return
    _LIVE["announced"] = False
    cache = os.environ.get("NUMBA_CACHE_DIR")
    if not cache:
        return
    for _, _, files in os.walk(cache):
        if any(name.endswith(".nbi") for name in files):
            return  # kernels were compiled before: they load from the cache in well under a second
    try:
        from numba.core import event
    except ImportError:
        return

    class _FirstCompile(event.Listener):
        def on_start(self, ev):
            if _LIVE.get("announced"):
                return
            _LIVE["announced"] = True
            message = (f"sparsesim: first run: compiling the numeric kernels (about {FIRST_COMPILE_SECONDS}; "
                       f"once per install or upgrade, cached in {cache})")
            console = _LIVE.get("console")
            if console is not None:
                console.print(message, markup=False, highlight=False)
            else:
                sys.stderr.write(message + "\n")

        def on_end(self, ev):
            pass

    _LIVE["listener"] = _FirstCompile()
    event.register("numba:compile", _LIVE["listener"])


#: How long the first run's compilation takes: ``sparsesim demo`` with an empty cache took ~15 s
#: more than with a warm one on an idle 2-core machine (72 s against 14 s at a load average of 11).
FIRST_COMPILE_SECONDS = "15 s on an idle 2-core machine, longer under load"


def show_progress(json_out: bool) -> bool:
    return sys.stderr.isatty()


ZERO_BASED_HELP = ("Feature-index base of svmlight files: auto (index 0 present -> zero-based, as scikit-learn "
                   "decides), true, false. Files read against a model default to the model's base.")


def zero_based_option():
    return typer.Option("auto", "--zero-based", help=ZERO_BASED_HELP)


def data_file_options(zero_based: str = "auto", text_column=None, label_column=None, id_column=None) -> dict:
    """``load_dataset`` options from the shared data-format options."""
    from sparsesim.data.readers import parse_zero_based

    base = parse_zero_based(zero_based)
    out = {"text_column": text_column, "label_column": label_column, "id_column": id_column}
    if base != "auto":
        out["zero_based"] = base
    return {k: v for k, v in out.items() if v is not None}


TEXT_COLUMN_HELP = "CSV/JSONL: column holding the document text (default: text)."
LABEL_COLUMN_HELP = "CSV/JSONL: column holding the label (default: label)."
ID_COLUMN_HELP = "CSV/JSONL: column holding the document id (default: the row number)."


# --- datasets ---------------------------------------------------------------------------------

def debugging() -> bool:
    return DEBUG["on"] or os.environ.get("SPARSESIM_DEBUG", "") not in ("", "0")


def one_line(text) -> str:
    """A message as one bounded line (newlines folded, at most ~400 characters)."""
    return bounded(" ".join(str(text).split()))


def os_error_text(exc: OSError) -> str:
    reason = exc.strerror or str(exc) or type(exc).__name__
    hints = {errno.ENOSPC: " (the disk is full)", errno.EROFS: " (read-only file system)",
             errno.EACCES: " (permission denied)", errno.EPERM: " (operation not permitted)",
             errno.EDQUOT: " (disk quota exceeded)"}
    where = f": {exc.filename}" if exc.filename is not None else ""
    hint = hints.get(exc.errno, "") if reason.lower() not in hints.get(exc.errno, "").lower() else ""
    return f"{reason}{where}{hint}"


def one_line_warning(message, category, filename, lineno, file=None, line=None):
    """The project's own warnings (e.g. classes left out) as one ``warning: ...`` line on stderr."""
    typer.echo(f"warning: {one_line(message)}", err=True)
