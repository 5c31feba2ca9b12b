"""Test helper: what the fuzz tests (hypothesis) and ``tests/fuzz_campaign.py`` (numpy draws)
share: the run length, the CLI commands and options to draw from, and the hostile request
pieces sent to ``sparsesim serve``."""

from __future__ import annotations

import os

LONG = os.environ.get("SPARSESIM_FUZZ_LONG", "") not in ("", "0")
SCALE = 20 if LONG else 1


def hypothesis_settings() -> dict:
    """Keyword arguments of ``hypothesis.settings`` for every fuzz property: no deadline, no
    example database, derandomized unless ``SPARSESIM_FUZZ_LONG`` is set."""
    from hypothesis import HealthCheck  # only the hypothesis tests need it, not the campaign

    return dict(deadline=None, derandomize=not LONG, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.filter_too_much, HealthCheck.data_too_large])


# every CLI command and the options it takes; "frobnicate" is no command
COMMANDS = {
    "train": ["--algorithm", "--dataset", "--out", "--triplets", "--seed", "--param", "--train-fraction", "--json"],
    "evaluate": ["--model", "--dataset", "--k", "--split", "--json"],
    "query": ["--model", "--corpus", "--index", "--queries", "--query-ids", "--top-k", "--json"],
    "index build": ["--model", "--data", "--kind", "--out", "--param", "--memory", "--resume", "--json"],
    "index add": ["--index", "--data", "--refit", "--json"],
    "experiment": ["--dataset", "--algorithms", "--protocol", "--triplets", "--seeds", "--param", "--option",
                   "--query-ratio", "--n-jobs", "--out-dir", "--json"],
    "demo": ["--triplets", "--seed", "--top-k", "--json"],
    "datasets info": [],
    "algorithms": ["--json"],
    "frobnicate": ["--x"],
}
FLAGS = {"--json", "--refit", "--resume"}  # options without a value

# hostile requests to `sparsesim serve`
METHODS = ["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "POST"]
PATHS = ["/query", "/feedback", "/health", "/info", "/", "/nosuch", "/query/1", "//", "/%00", "/ask", "/" + "a" * 3000]
ASK_VALUES = ["x", "", "1e9", str(2**63), "nan", "99999999999"]
RAW_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1" * 5000]
NESTING_DEPTHS = [100, 1000, 5000, 9000]


def number_bodies(literal: str, query_field: str) -> list[str]:
    """Request bodies with the non-standard number ``literal`` where a number goes;
    ``query_field`` is a valid query for the served index (e.g. ``'"texts": ["goal"]'``)."""
    return [f'{{"top_k": {literal}, {query_field}}}',
            f'{{"vectors": [{{"indices": [0], "values": [{literal}]}}]}}',
            f'{{"vectors": [{{"indices": [{literal}], "values": [1.0]}}]}}',
            f'{{"query": "goal", "preferred": {literal}, "other": 1}}']


def nested_bodies(depth: int, field: str) -> list[str]:
    """Bodies nested ``depth`` levels deep: bare, in an object, and as the value of ``field``."""
    return ["[" * depth + "]" * depth, '{"a":' * depth + "1" + "}" * depth,
            f'{{"{field}": ' + "[" * depth + "]" * depth + "}"]
