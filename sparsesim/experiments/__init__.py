"""Paper protocols run by ``sparsesim experiment``.

``PROTOCOLS`` maps a protocol name to the module that implements it. Each module provides

* ``run(config: ExperimentConfig) -> dict`` returning ``{"protocol", "dataset", "results": [...], ...}``
  where every result is a flat JSON-serialisable dict (one algorithm x seed/fold), and
* ``format_table(report: dict) -> str`` for the human-readable table.

The settings behind the published tables are experiment files (TOML or JSON) in
``sparsesim/experiments/configs/``: ``sparsesim experiment --config NAME`` runs one (see
:func:`load_experiment_file`). The ``paper-*`` files are the papers' tables and figures, run beside
the papers' numbers (:mod:`sparsesim.experiments.paper`); ``paper-all`` runs them all into the
reproduction report.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..exceptions import FileFormatError, InvalidInputError, UnknownNameError
from ..validation import resolve_name

try:
    import tomllib as _toml
except ImportError:  # Python 3.10
    _toml = None

CONFIG_DIR = Path(__file__).parent / "configs"
EXPERIMENT_FILE_KEYS = ("protocol", "dataset", "algorithms", "seeds", "triplets", "params", "options", "n_jobs",
                        "out_dir", "description", "paper", "include")

PROTOCOLS: dict[str, str] = {
    "sors": "sparsesim.experiments.sors",      # ICDM 2015 SORS: 70/30 split, triplets, MAP
    "cikm15": "sparsesim.experiments.cikm15",  # CIKM 2015 active learners: 5-fold, AP@10
    "ijcai17": "sparsesim.experiments.ijcai17",  # IJCAI 2017 OMTRSL: multi-task, AP@k
    "romco": "sparsesim.experiments.romco",    # ROMCO: online multi-task classification
    "oht": "sparsesim.experiments.oht",        # online heterogeneous transfer
}


@dataclass
class ExperimentConfig:
    """Everything ``sparsesim experiment`` passes to a protocol.

    Attributes
    ----------
    dataset : str
        Registered data set name or a path to a labelled svmlight file.
    algorithms : list of str
        Registered algorithm names, run in this order.
    seeds : list of int
        One repeat per seed (protocols with folds use the seed for the fold split).
    triplets : int, optional
        Training triplets (rounds) per run; ``None`` = the protocol's default.
    params : dict
        ``{algorithm_name or "*": {param: value}}`` constructor overrides.
    n_jobs : int
        Parallel workers for independent runs (through :func:`sparsesim.parallel.run_parallel`).
    out_dir : Path, optional
        Where plots (PNG) and raw results are written.
    options : dict
        Protocol-specific options (e.g. ``query_ratio``, ``folds``, ``sweep``).
    progress : bool
        Show progress bars on stderr.
    scheduler : str, optional
        Dask scheduler address: protocols that support it run their trials as Dask tasks with
        the data set scattered to the workers once (see :func:`sparsesim.distributed.dask_jobs`).
    """

    dataset: str
    algorithms: list[str]
    seeds: list[int] = field(default_factory=lambda: [0])
    triplets: int | None = None
    params: dict = field(default_factory=dict)
    n_jobs: int = 1
    out_dir: Path | None = None
    options: dict = field(default_factory=dict)
    progress: bool = False
    scheduler: str | None = None

    def params_for(self, algorithm: str) -> dict:
        """Constructor overrides for ``algorithm`` (``"*"`` entries first, then its own)."""
        merged = dict(self.params.get("*", {}))
        merged.update(self.params.get(algorithm, {}))
        return merged


def get_protocol(name: str):
    """The module implementing protocol ``name``."""
    name = resolve_name(name, PROTOCOLS, "protocol")
    module = PROTOCOLS[name]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module:
            raise UnknownNameError(f"protocol {name!r} is not implemented yet") from None
        raise


def run_experiment(name: str, config: ExperimentConfig) -> dict:
    """Run protocol ``name`` with ``config`` and return its report."""
    return get_protocol(name).run(config)


def shipped_experiments() -> list[str]:
    """Names of the experiment files shipped in ``sparsesim/experiments/configs/``."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.toml"))


def load_experiment_file(name_or_path) -> dict:
    """Read an experiment file: a TOML or JSON path, or the name of a shipped one.

    Keys (all optional; command-line flags given explicitly win): ``protocol``, ``dataset``,
    ``algorithms`` (list), ``seeds`` (list), ``triplets``, ``params`` (``{algorithm or "*":
    {param: value}}``), ``options`` (protocol options), ``n_jobs``, ``out_dir``, ``description``;
    ``paper`` (a paper's table or figure, :mod:`sparsesim.experiments.paper`) and ``include``
    (the items of the reproduction report).

    Raises
    ------
    UnknownNameError
        Neither a file nor a shipped experiment name.
    FileFormatError
        Not valid TOML/JSON, or unknown keys.
    """
    path = Path(name_or_path)
    if not path.is_file():
        shipped = CONFIG_DIR / f"{name_or_path}.toml"
        if not shipped.is_file():
            raise UnknownNameError(f"no experiment file {name_or_path!r}; shipped experiments: "
                                   f"{', '.join(shipped_experiments())}")
        path = shipped
    text = path.read_text()
    try:
        if path.suffix == ".json":
            data = json.loads(text)
        elif _toml is not None:
            data = _toml.loads(text)
        else:
            raise InvalidInputError("reading TOML experiment files needs Python 3.11+; use JSON")
    except (ValueError, TypeError) as exc:
        raise FileFormatError(f"{path}: not a valid experiment file ({exc})") from None
    if not isinstance(data, dict):
        raise FileFormatError(f"{path}: an experiment file holds a table of settings")
    unknown = sorted(set(data) - set(EXPERIMENT_FILE_KEYS))
    if unknown:
        raise FileFormatError(f"{path}: unknown key(s) {unknown}; known: {', '.join(EXPERIMENT_FILE_KEYS)}")
    return data
