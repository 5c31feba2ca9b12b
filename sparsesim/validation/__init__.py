"""The one validation layer: every input is checked here before compiled code sees it.

* :func:`check_csr` -- sparse (or small dense) input from a caller: full CSR format check in
  vectorised numpy (indices in ``[0, n_features)``, no negatives, ``indptr`` starting at 0,
  monotone and ending at nnz, numeric finite data), then canonical form (sorted indices,
  duplicates summed). No scipy routine runs on the caller's arrays before the check, because
  scipy's own C routines trust ``indptr``/``indices`` too.
* :func:`check_csr_arrays` -- the same structural check for three arrays read from a file,
  with the exact dtypes the file format prescribes (wrong dtypes are refused, never coerced).
* :func:`check_labels`, :func:`check_int`, :func:`check_float`, :func:`check_bool`,
  :func:`check_choice`, :func:`check_random_state` -- labels and hyper-parameters: type and
  range, with the parameter's name and the accepted range in the message.
* :func:`check_params` -- a declarative per-class parameter spec (``_param_spec``) checked in
  one place, called from ``fit``; each value once (:func:`check_param` checks one value; values
  checked before the estimator exists are handed on as :class:`CheckedParams` and recorded on it
  with :func:`record_checked`).
* :func:`bounded` -- error messages cut to a bounded length (a hostile file cannot make a
  one-line error hundreds of megabytes long).

The checks live in submodules by what they check: :mod:`.arrays` (matrices and arrays),
:mod:`.labels` (labels, triplets, task streams), :mod:`.params` (single parameter values),
:mod:`.specs` (declarative parameter specs and file metadata), :mod:`.budgets` (requests against
the machine: memory, triplets, workers, runs) and :mod:`.messages` (bounded error messages). Import
them from here.
"""

from __future__ import annotations

from .arrays import MAX_FEATURES, check_csr, check_csr_arrays, check_finite_array
from .budgets import check_dense_request, check_n_jobs, check_n_triplets, check_seed_count, memory_budget
from .labels import check_labels, check_task_streams, check_triplets
from .messages import MAX_MESSAGE, bounded, resolve_name
from .params import MAX_SEED, check_bool, check_choice, check_float, check_int, check_random_state, is_finite_number
from .specs import (CheckedParams, check_meta, check_param, check_param_values, check_params, param_spec,
                    record_checked)
from .settings import (TRAIN_SETTINGS_SPEC, CheckedQueries, CheckedRows, CheckedTopK, TrainSettings, check_queries,
                       check_rows, check_top_k_value, check_train_settings, rows_of)

# Importable from here as before, but (as before) outside ``__all__``: the ``as`` form marks them as
# re-exports without changing what ``import *`` gives.
from .arrays import check_fit_matrix as check_fit_matrix
from .budgets import DEFAULT_MAX_RUNS as DEFAULT_MAX_RUNS
from .budgets import DEFAULT_MAX_TRIPLETS as DEFAULT_MAX_TRIPLETS
from .budgets import available_cores as available_cores
from .specs import COMMON_PARAM_SPEC as COMMON_PARAM_SPEC

__all__ = [
    "MAX_FEATURES", "MAX_MESSAGE", "bounded", "check_csr", "check_csr_arrays", "check_labels", "check_int",
    "check_float", "check_bool", "check_choice", "check_random_state", "check_params", "check_finite_array",
    "check_meta", "check_triplets", "check_task_streams", "memory_budget", "check_n_triplets", "check_n_jobs",
    "check_seed_count", "check_dense_request", "is_finite_number", "resolve_name",
    "CheckedQueries", "CheckedRows", "CheckedTopK", "TrainSettings", "check_queries", "check_rows",
    "check_top_k_value", "check_train_settings", "rows_of", "MAX_SEED", "CheckedParams", "check_param",
    "check_param_values", "param_spec", "record_checked", "TRAIN_SETTINGS_SPEC",
]
