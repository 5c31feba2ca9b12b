"""Put a registered data set's files into the data directory, verified by sha256.

Two sources:

* a **mirror** folder with the data directory's layout (e.g. the shared ``data/`` folder):
  each file is copied from ``mirror/relpath`` and its sha256 must equal the registered one;
* the file's public **upstream URL**, downloaded with pooch (``http(s)://``; ``file://`` for a
  local upstream), which verifies the sha256 before the file is kept. When the upstream serves
  the file uncompressed (``content_sha256`` registered), the download is verified against
  ``content_sha256`` and stored compressed under ``relpath``.

Data sets without a registered upstream URL (``sparsesim datasets list`` marks them "mirror
only") come only from a mirror. Every file is written to a temporary file next to its
destination and renamed only after its checksum matched, so a failed or refused fetch leaves
nothing behind.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import lzma
import os
import shutil
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable

from ..exceptions import DataNotFoundError, FileFormatError
from ..persistence import file_sha256
from .catalog import DataFile, get_dataset_spec
from .paths import ENV_VAR, data_home

__all__ = ["fetch_dataset", "verify_file"]

_CHUNK = 1 << 20
Progress = Callable[[str, int, "int | None"], None]


def _compressor(relpath: str):
    if relpath.endswith(".xz"):
        return lambda f: lzma.open(f, "wb", preset=9 | lzma.PRESET_EXTREME)
    if relpath.endswith(".bz2"):
        return lambda f: bz2.open(f, "wb", compresslevel=9)
    if relpath.endswith(".gz"):
        return lambda f: gzip.GzipFile(fileobj=f, mode="wb", mtime=0)
    return None


def _decompressed_sha256(path: Path, relpath: str) -> str | None:
    opener = {".xz": lzma.open, ".bz2": bz2.open, ".gz": gzip.open}.get(Path(relpath).suffix)
    if opener is None:
        return None
    digest = hashlib.sha256()
    try:
        with opener(path, "rb") as handle:
            for block in iter(lambda: handle.read(_CHUNK), b""):
                digest.update(block)
    except (OSError, EOFError, lzma.LZMAError):
        return None
    return digest.hexdigest()


def verify_file(path: str | os.PathLike, datafile: DataFile) -> bool:
    """True when ``path`` is the registered file: its sha256 matches, or (for files fetched from
    an uncompressed upstream and recompressed here) its decompressed content matches
    ``content_sha256``."""
    path = Path(path)
    if not path.is_file():
        return False
    if file_sha256(path) == datafile.sha256:
        return True
    if datafile.content_sha256:
        return _decompressed_sha256(path, datafile.relpath) == datafile.content_sha256
    return False


def _temp_in(directory: Path, name: str) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=directory)
    os.close(fd)
    return Path(tmp)


def _copy_hashing(src, dst_handle, relpath: str, total: int | None, progress: Progress | None) -> str:
    digest = hashlib.sha256()
    done = 0
    for block in iter(lambda: src.read(_CHUNK), b""):
        digest.update(block)
        dst_handle.write(block)
        done += len(block)
        if progress is not None:
            progress(relpath, done, total)
    return digest.hexdigest()


def _from_mirror(mirror: Path, f: DataFile, dest: Path, dataset: str, progress) -> None:
    src = mirror / f.relpath
    if not src.is_file():
        raise DataNotFoundError(f"data set {dataset!r}: file {f.relpath} not found in mirror {mirror}")
    tmp = _temp_in(dest.parent, dest.name)
    try:
        with open(src, "rb") as s, open(tmp, "wb") as d:
            got = _copy_hashing(s, d, f.relpath, src.stat().st_size, progress)
            d.flush()
            os.fsync(d.fileno())
        if got != f.sha256:
            raise FileFormatError(
                f"data set {dataset!r}: {src} has sha256 {got}, expected {f.sha256} (file refused, nothing written)"
            )
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()


class _PoochProgress:
    """The progress-bar object pooch's downloaders drive (``total``, ``update``, ``reset``,
    ``close``), reporting to ``progress(relpath, bytes_done, bytes_total_or_None)``."""

    def __init__(self, relpath: str, progress: Progress):
        self.relpath, self.progress = relpath, progress
        self.total, self.done = None, 0

    def update(self, n: int) -> None:
        self.done += int(n)
        total = self.total or None
        self.progress(self.relpath, min(self.done, total) if total else self.done, total)

    def reset(self) -> None:
        self.done = 0

    def close(self) -> None:
        pass


def _file_downloader(progressbar):
    """A pooch downloader for ``file://`` URLs (a local upstream), copying in chunks with progress."""

    def download(url, output_file, pooch_obj, check_only=False):
        src = Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path))
        if check_only:
            return src.is_file()
        if progressbar is not None:
            progressbar.total = src.stat().st_size
        with open(src, "rb") as s, open(output_file, "wb") as d:
            for block in iter(lambda: s.read(_CHUNK), b""):
                d.write(block)
                if progressbar is not None:
                    progressbar.update(len(block))
        return None

    return download


def _from_url(f: DataFile, dest: Path, dataset: str, progress, timeout: float) -> None:
    """Download ``f.url`` with pooch (checksum verified before the file is moved into place).

    The expected hash is the file's sha256, or its ``content_sha256`` when the upstream serves
    it uncompressed; then the verified download is compressed into ``dest`` here."""
    import pooch  # a core dependency, imported when a download happens (keeps CLI start-up fast)
    import requests

    if not f.url:
        raise DataNotFoundError(
            f"data set {dataset!r}: no public upstream serves {f.relpath}; place the file at {dest} "
            f"(sha256 {f.sha256}) or run `sparsesim datasets fetch {dataset} --from MIRROR_DIR`"
        )
    bar = None if progress is None else _PoochProgress(f.relpath, progress)
    if f.url.startswith("file:"):
        downloader = _file_downloader(bar)
    else:
        downloader = pooch.HTTPDownloader(progressbar=bar if bar is not None else False, timeout=timeout)
    expected = f.content_sha256 if f.content_sha256 and _compressor(f.relpath) is not None else f.sha256
    with tempfile.TemporaryDirectory(prefix=f".{dest.name}.", dir=dest.parent) as work:
        try:
            got = Path(pooch.retrieve(f.url, known_hash=f"sha256:{expected}", fname=dest.name, path=work,
                                      downloader=downloader, progressbar=False))
        except ValueError as exc:  # pooch: the downloaded file's hash differs (it is deleted)
            if "hash" not in str(exc).lower():
                raise
            raise FileFormatError(
                f"data set {dataset!r}: download of {f.url} does not match sha256 {expected} "
                "(file refused, nothing written)"
            ) from None
        except (requests.exceptions.RequestException, OSError) as exc:
            raise DataNotFoundError(
                f"data set {dataset!r}: could not download {f.url} ({type(exc).__name__}: {exc}); place "
                f"{f.relpath} at {dest} (sha256 {f.sha256}) or run `sparsesim datasets fetch {dataset} "
                "--from MIRROR_DIR`"
            ) from None
        if expected == f.sha256:
            with open(got, "rb+") as h:
                os.fsync(h.fileno())
            os.replace(got, dest)
            return
        packed = Path(work) / (dest.name + ".packed")
        with open(got, "rb") as s, open(packed, "wb") as raw, _compressor(f.relpath)(raw) as d:
            shutil.copyfileobj(s, d, _CHUNK)
        with open(packed, "rb+") as h:
            os.fsync(h.fileno())
        os.replace(packed, dest)


def fetch_dataset(
    name: str,
    mirror: str | os.PathLike | None = None,
    force: bool = False,
    progress: Progress | None = None,
    timeout: float = 60.0,
) -> list[Path]:
    """Fetch the files of registered data set ``name`` into the data directory.

    Parameters
    ----------
    name : str
        Registered data set name.
    mirror : path-like, optional
        Folder with the data directory's layout (e.g. ``/work/shared/data``); files are copied
        from ``mirror/relpath``. Without it, each file's upstream URL is downloaded.
    force : bool, default False
        Re-fetch files that are already present and valid.
    progress : callable, optional
        ``progress(relpath, bytes_done, bytes_total_or_None)`` while copying/downloading.
    timeout : float
        Network timeout in seconds.

    Returns
    -------
    list of Path
        The destination path of every file of the data set (fetched or already present).

    Raises
    ------
    UnknownNameError
        Unknown data set.
    DataNotFoundError
        File missing from the mirror, no upstream URL, or download failed (offline): the
        message names the file to place and where.
    FileFormatError
        Checksum mismatch (the file is refused, nothing is written), or a present file whose
        checksum differs and ``force`` is False.
    """
    spec = get_dataset_spec(name)
    home = data_home()
    mirror_path = Path(mirror).expanduser() if mirror is not None else None
    if mirror_path is not None and not mirror_path.is_dir():
        raise DataNotFoundError(f"mirror directory {mirror_path} does not exist")
    out = []
    for f in spec.files:
        dest = home / f.relpath
        if dest.exists() and not force:
            if verify_file(dest, f):
                out.append(dest)
                continue
            raise FileFormatError(
                f"data set {name!r}: {dest} exists but its sha256 differs from {f.sha256}; "
                "remove it or fetch again with force"
            )
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DataNotFoundError(
                f"cannot create data directory {dest.parent} ({exc}); set {ENV_VAR} to a writable folder"
            ) from None
        if mirror_path is not None:
            _from_mirror(mirror_path, f, dest, name, progress)
        else:
            _from_url(f, dest, name, progress, timeout)
        out.append(dest)
    return out
