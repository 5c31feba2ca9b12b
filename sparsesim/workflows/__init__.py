"""End-to-end library functions behind the CLI: train, evaluate, query, demo.

Each is usable from Python directly and returns plain data (dicts/lists) that the CLI prints.

The functions live in submodules by what they work on: :mod:`.corpus` (reading data the way a
model expects), :mod:`.models` (train, tune, evaluate, demo), :mod:`.queries` (query texts and
exact corpus search) and :mod:`.indexes` (build, calibrate, add to and query a saved index).
"""

from .corpus import load_corpus, model_data_options
from .indexes import SNIPPET_CHARS, add_to_index, build_index_from_files, calibrate_index, query_index, snippets_of
from .models import evaluate_model, run_demo, train_model, tune_model
from .queries import query_corpus, read_query_texts

__all__ = ["SNIPPET_CHARS", "add_to_index", "build_index_from_files", "calibrate_index", "evaluate_model",
           "load_corpus", "model_data_options", "query_corpus", "query_index", "read_query_texts", "run_demo",
           "snippets_of", "train_model", "tune_model"]
