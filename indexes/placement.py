"""Where the shards of a sharded index live: in this process, or resident on Dask workers.

Both placements answer the same calls (``place``, ``run``, ``release``): :class:`InProcess`
holds the :class:`~sparsesim.indexes.shard.Shard` objects itself; :class:`OnCluster` holds one
future per shard, pinned to the worker that built it, and turns a lost worker or a failed task
into one :class:`~sparsesim.exceptions.ClusterError` (never a partial answer).
"""

from __future__ import annotations

from concurrent.futures import CancelledError


import numpy as np
import scipy.sparse as sp

from sparsesim.distributed import require_distributed, worker_addresses
from sparsesim.exceptions import ClusterError, FileFormatError, InvalidInputError, ModelMismatchError

from .shard import call_shard, read_model, stack_parts

__all__ = ["InProcess", "OnCluster"]


# --- where the shards live ---------------------------------------------------------------------------
class InProcess:
    """Shards held in this process; the same calls as on a cluster."""

    def __init__(self):
        self.shards = []
        self.workers = []

    def describe(self) -> str:
        return "in-process"

    def place(self, builders):
        self.shards = [func(*args) for func, args in builders]
        self.workers = ["local"] * len(self.shards)

    def run(self, method, args_per_shard, shared=None):
        out = []
        for shard, args in zip(self.shards, args_per_shard):
            extra = () if shared is None else (shared,)
            out.append(getattr(shard, method)(*extra, *args))
        return out

    def search_shared(self, Qp, k, n_jobs, expanding, blocks, block_bytes):
        """Every shard's (positions, scores, ids) for the prepared queries ``Qp``.

        The shards listed in ``expanding`` score each query block of ``blocks`` (``(lo, hi)``
        pairs) from one transformed block, formed once by the first of them; the others search
        ``Qp`` as usual. ``block_bytes`` (the size of one transformed block) only matters on a
        cluster.
        """
        per = {i: [] for i in expanding}
        for lo, hi in blocks:
            qmt = self.shards[expanding[0]].expand(Qp, lo, hi)
            for i in expanding:
                per[i].append(self.shards[i].search_expanded(qmt, k, n_jobs))
            del qmt
        return [stack_parts(per[i]) if i in per else shard.search(Qp, k, n_jobs)
                for i, shard in enumerate(self.shards)]

    def release(self):
        self.shards = []


class OnCluster:
    """Shards resident on Dask workers: one future per shard, pinned to its worker."""

    poll_seconds = 0.2

    def __init__(self, client):
        require_distributed()
        self.client = client
        self.futures = []
        self.workers = []

    def describe(self) -> str:
        return f"on {len(set(self.workers))} Dask worker(s)"

    def _submit(self, func, *args, worker):
        return self.client.submit(func, *args, workers=[worker], allow_other_workers=False, pure=False)

    def place(self, builders, model=None, model_file=None):
        workers = worker_addresses(self.client)
        if not workers:
            raise ClusterError("the Dask scheduler has no workers; start some with `dask worker ADDRESS`")
        self.workers = [workers[i % len(workers)] for i in range(len(builders))]
        on_worker = {}
        if model is not None and model_file is not None:
            # every worker reads the model file itself: the model never passes through this process
            on_worker = {w: self._submit(read_model, str(model_file), model.checksum(), worker=w)
                         for w in sorted(set(self.workers))}
            self._wait(list(on_worker.values()), "reading the model on the workers", shards=False, gather=False)
        elif model is not None:
            [ref] = self.client.scatter([model], workers=sorted(set(self.workers)), broadcast=True, hash=False)
            on_worker = {w: ref for w in set(self.workers)}
        futures = []
        for (func, args), worker in zip(builders, self.workers):
            args = tuple(on_worker[worker] if a is model and model is not None else a for a in args)
            big = [i for i, a in enumerate(args) if _is_big(a)]
            args = list(args)
            for i in big:  # send a block straight to its worker, not through the task graph
                [args[i]] = self.client.scatter([args[i]], workers=[worker], hash=False)
            futures.append(self._submit(func, *args, worker=worker))
        self.futures = futures
        self._wait(futures, "building the shards", gather=False)

    def run(self, method, args_per_shard, shared=None):
        what = f"running {method!r} on the shards"
        self._raise_if_lost([], what)
        extra = ()
        tasks = []
        try:
            if shared is not None:  # one copy per worker holding shards, not one per task
                [ref] = self.client.scatter([shared], workers=sorted(set(self.workers)), broadcast=True,
                                            hash=False)
                extra = (ref,)
            tasks = [self._submit(call_shard, fut, method, *extra, *args, worker=worker)
                     for fut, worker, args in zip(self.futures, self.workers, args_per_shard)]
        except Exception as exc:  # a worker vanished between the check and the scatter
            self._raise_if_lost(tasks, what)
            raise ClusterError(f"the cluster failed while {what}: {type(exc).__name__}: {exc}") from None
        return self._wait(tasks, what)

    wave_bytes = 128 << 20  # transformed query blocks in flight per expanding worker

    def search_shared(self, Qp, k, n_jobs, expanding, blocks, block_bytes):
        """:meth:`InProcess.search_shared` on the cluster: every query block is transformed once,
        by a task on one of the workers that hold expanding shards (in turn), and every expanding
        shard scores it where it lives (Dask moves the block to the other workers). Blocks go in
        waves of at most ``wave_bytes`` of transformed queries per expanding worker."""
        what = "running 'search' on the shards"
        self._raise_if_lost([], what)
        expanders = list({self.workers[i]: i for i in reversed(expanding)}.values())
        wave = max(len(expanders), min(8 * len(expanders), self.wave_bytes * len(expanders) // max(block_bytes, 1)))
        plain, pending = [], []
        per = {i: [] for i in expanding}
        try:
            try:
                [ref] = self.client.scatter([Qp], workers=sorted(set(self.workers)), broadcast=True, hash=False)
                plain = [(i, self._submit(call_shard, fut, "search", ref, k, n_jobs, worker=worker))
                         for i, (fut, worker) in enumerate(zip(self.futures, self.workers)) if i not in per]
                for start in range(0, len(blocks), wave):
                    tasks = []
                    for b, (lo, hi) in enumerate(blocks[start:start + wave], start):
                        s = expanders[b % len(expanders)]
                        block = self._submit(call_shard, self.futures[s], "expand", ref, lo, hi, worker=self.workers[s])
                        tasks += [(i, self._submit(call_shard, self.futures[i], "search_expanded", block, k, n_jobs,
                                                   worker=self.workers[i])) for i in expanding]
                        del block  # the scheduler keeps it until its searches are done, no longer
                    pending.append(tasks)
                    if len(pending) > 1:  # the next wave is queued behind this one: no idle gap
                        self._collect(pending.pop(0), per, what)
            except ClusterError:
                raise
            except Exception as exc:  # a worker vanished between the check and the scatter
                self._raise_if_lost([t for _, t in plain], what)
                raise ClusterError(f"the cluster failed while {what}: {type(exc).__name__}: {exc}") from None
            for tasks in pending:
                self._collect(tasks, per, what)
            found = dict(zip([i for i, _ in plain], self._wait([t for _, t in plain], what))) if plain else {}
        except BaseException:
            self.client.cancel([t for _, t in plain] + [t for tasks in pending for _, t in tasks])
            raise
        return [stack_parts(per[i]) if i in per else found[i] for i in range(len(self.futures))]

    def _collect(self, tasks, per, what):
        for (i, _), part in zip(tasks, self._wait([t for _, t in tasks], what)):
            per[i].append(part)

    def _raise_if_lost(self, tasks, what: str):
        lost = self._lost_shards()
        if lost:
            if tasks:
                self.client.cancel(tasks)
            shard, worker, reason = lost[0]
            raise ClusterError(f"shard {shard} was lost while {what}: its worker {worker} {reason}; no partial "
                               f"answer is returned. Load the index again to place the shards on the "
                               f"workers that remain")

    def _wait(self, tasks, what: str, shards: bool = True, gather: bool = True):
        """Wait for ``tasks``; raise ClusterError on a lost shard or a failed task; their results
        if ``gather`` (never for tasks whose results are shards or models: they stay on the workers)."""
        # sleep until the tasks are done (woken by the scheduler, not by polling), and every
        # poll_seconds check whether a shard was lost
        distributed = require_distributed()
        while tasks:
            try:
                with self.client.as_current():
                    distributed.wait(tasks, timeout=self.poll_seconds)
                break
            except TimeoutError:
                if shards:
                    self._raise_if_lost(tasks, what)
            except CancelledError:  # e.g. a worker holding an input left; reported below
                break
        if shards:
            self._raise_if_lost(tasks, what)
        errors = [t for t in tasks if t.status == "error"]
        if errors:
            exc = errors[0].exception()
            self.client.cancel(tasks)
            if isinstance(exc, (InvalidInputError, FileFormatError, ModelMismatchError, ClusterError)):
                raise exc
            raise ClusterError(f"a worker failed while {what}: {type(exc).__name__}: {exc}")
        cancelled = [t for t in tasks if t.status != "finished"]
        if cancelled:
            raise ClusterError(f"{len(cancelled)} task(s) did not finish while {what} (status "
                               f"{cancelled[0].status}); no partial answer is returned")
        if not gather:
            return None
        try:
            return self.client.gather(tasks)
        except Exception as exc:  # e.g. the data of a finished task lost before it arrived here
            self._raise_if_lost(tasks, what)
            raise ClusterError(f"the cluster failed while {what}: {type(exc).__name__}: "
                               f"{str(exc).splitlines()[0] if str(exc) else ''}") from None

    def check_alive(self) -> None:
        """Raise :class:`ClusterError` when the scheduler does not answer or a shard's worker left."""
        try:
            alive = set(worker_addresses(self.client))
        except Exception as exc:  # noqa: BLE001 - the scheduler itself does not answer
            raise ClusterError(f"the Dask scheduler does not answer ({type(exc).__name__})") from None
        gone = [(i, worker) for i, worker in enumerate(self.workers) if worker not in alive]
        if gone:
            raise ClusterError(f"shard {gone[0][0]}'s worker {gone[0][1]} left the cluster")

    def _lost_shards(self):
        alive = set(worker_addresses(self.client))
        gone = [(i, worker, "left the cluster" if worker not in alive else f"shard {fut.status}")
                for i, (fut, worker) in enumerate(zip(self.futures, self.workers))
                if worker not in alive or fut.status in ("lost", "cancelled")]
        if not gone:
            finished = [(i, fut) for i, fut in enumerate(self.futures) if fut.status == "finished"]
            try:
                holders = self.client.who_has([fut for _, fut in finished])
            except Exception:  # the scheduler already forgot a shard  # noqa: BLE001
                holders = None
            gone = [(i, self.workers[i], "dropped the shard's data") for i, fut in finished
                    if holders is None or not holders.get(fut.key)]
        return gone

    def release(self):
        if self.futures:
            self.client.cancel(self.futures)
        self.futures = []


def _is_big(value) -> bool:
    return sp.issparse(value) or (isinstance(value, np.ndarray) and value.nbytes > 1 << 16)

