"""``sparsesim datasets list | info | fetch``: the registered data sets."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from sparsesim.exceptions import InvalidInputError

from .common import echo_line, emit, progress_bar, datasets_app


@datasets_app.command("list")
def datasets_list(json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")):
    """List registered data sets, whether their files are present, and where `fetch` gets them
    (upstream: downloaded and checksummed; mirror only: needs `--from DIR`)."""
    from sparsesim.data import list_datasets

    rows = list_datasets()
    if json_out:
        emit({"datasets": rows})
        return
    for row in rows:
        mark = "present" if row.get("available") else "missing"
        echo_line(f"{row['name']:<20}{row['kind']:<26}{mark:<9}{row['fetch']:<13}{row['description']}")


@datasets_app.command("info")
def datasets_info(name: str = typer.Argument(..., help="Registered data set name."),
                  json_out: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout.")):
    """Describe one data set: files, checksums, representation, source."""
    from sparsesim.data import dataset_info
    from sparsesim.data.catalog import get_dataset_spec

    info = dataset_info(get_dataset_spec(name).name)
    if json_out:
        emit(info)
        return
    for key in ("name", "kind", "description", "representation", "source", "data_home"):
        echo_line(f"{key:>15}: {info.get(key)}")
    for f in info.get("files", []):
        echo_line(f"{'file':>15}: {f['relpath']} ({'present' if f['present'] else 'missing'}) sha256={f['sha256']}")


@datasets_app.command("fetch")
def datasets_fetch(
    name: str = typer.Argument(..., help="Registered data set name."),
    mirror: Optional[Path] = typer.Option(None, "--from", help="Copy from an offline mirror directory (e.g. ../shared/data)."),
    force: bool = typer.Option(False, "--force", help="Replace files that are present but differ."),
):
    """Put a data set's files in the data directory, verifying sha256: downloaded from its public
    upstream where one exists (news20, news20-tasks, pendigits, satimage), otherwise copied from a
    mirror folder given with --from DIR (`sparsesim datasets list` shows which is which)."""
    from sparsesim.data import dataset_info, fetch_dataset
    from sparsesim.data.catalog import get_dataset_spec

    name = get_dataset_spec(name).name
    info = dataset_info(name)
    if mirror is None and info["fetch"] == "mirror only" and not info["available"]:
        raise InvalidInputError(f"data set {name!r} has no public upstream; copy it from a mirror folder with "
                                f"`sparsesim datasets fetch {name} --from DIR` (e.g. the shared data folder)")
    bar, advance = progress_bar(None, f"fetching {name}", sys.stderr.isatty())
    callback = None
    if advance is not None:  # a live bar (not the stand-in of a non-terminal)
        task = bar.task_ids[0]

        def callback(relpath, done, total):
            bar.update(task, description=f"fetching {relpath}", completed=done, total=total)
    with bar:
        paths = fetch_dataset(name, mirror=mirror, force=force, progress=callback)
    for path in paths:
        echo_line(str(path))


# --- train / evaluate / query ------------------------------------------------------------------
