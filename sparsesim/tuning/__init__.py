"""Model selection: successive halving over the triplet budget, survivors continue training.

:func:`tune_similarity` is the one search behind ``sparsesim tune`` and ``sparsesim experiment
--tune``. Given the *training* part of a split (the test part is never passed in), it

1. holds out a stratified validation part (``validation_fraction`` of every class) and draws one
   stream of ``n_triplets`` SORS-protocol triplets from the rest (every trial sees the same
   triplets, in the same order);
2. builds the candidate grid: the algorithm's default grid (multiples of its data-adaptive
   ``"auto"`` values, :data:`DEFAULT_FACTORS`, or absolute values in :data:`DEFAULT_GRIDS`), or
   the caller's ``grid``;
3. runs successive halving: rung ``r`` trains every surviving candidate up to
   ``n_triplets / factor**(R - 1 - r)`` triplets — a survivor *continues* from its current model
   with :meth:`partial_fit_triplets` on the next triplets of the stream, it never restarts — and
   scores it on the validation part (MAP, the SORS protocol's metric); the best
   ``1 / factor`` go on. With ``n`` candidates the search costs about ``ceil(log_factor n)`` full
   runs (9 candidates, factor 3: 3 full runs);
4. trains the final model on the whole training part with the chosen parameters (one more full
   run).

Trials of one rung run in parallel through :func:`sparsesim.parallel.run_parallel` (joblib; a
Dask scheduler through :func:`sparsesim.distributed.dask_jobs`). Between rungs the survivors'
states are held by the caller: each trial of a rung brings its learner back only while its store
holds at most an equal share of ``park_bytes``; a larger one keeps only its budget and, if it
survives, is rebuilt at the next rung by training a fresh learner on the triplets it has seen
(chunks equal one call, so the rebuilt state is the same). The states held between rungs thus
stay within ``park_bytes`` by construction, whatever the number of candidates.

The search is built from pieces the paper protocols' own searches use too (``experiment --tune``
with ``--protocol cikm15`` or ``ijcai17`` runs the paper's search: cross validation on a tuning
subset, or a validation split, over the paper's grid): :func:`grid_points` enumerates a grid,
:func:`evaluate_candidates` runs every candidate's jobs in one parallel batch, and
:func:`rank_candidates` orders candidates by score (ties: a given key, then the first).

The pieces live in submodules: :mod:`.candidates` (grids, rungs, ranking, batch evaluation),
:mod:`.trials` (the protocols' problems and the trial runner), :mod:`.halving` (the successive-
halving search and :class:`TuneResult`) and :mod:`.searches` (the public searches).
"""

from .candidates import (DEFAULT_FACTORS, DEFAULT_GRIDS, default_grid, evaluate_candidates, grid_points,
                         parse_grid, rank_candidates, resolved_auto, successive_halving_rungs)
from .candidates import TUNABLE_KINDS as TUNABLE_KINDS
from .halving import TuneResult
from .searches import tune_multitask, tune_online, tune_similarity
from .trials import task_mean_ap

__all__ = ["DEFAULT_FACTORS", "DEFAULT_GRIDS", "TuneResult", "default_grid", "evaluate_candidates", "grid_points",
           "parse_grid", "rank_candidates", "resolved_auto", "tune_similarity", "tune_multitask", "tune_online",
           "successive_halving_rungs", "task_mean_ap"]
