"""The few atomic operations training threads need to meet and share out rows, usable inside
``numba.njit`` code.

Threads that each update their own rows of one store meet four times per triplet (see
:func:`sparsesim.engine.bilinear_loop.train_triplets`): each publishes a sequence number after the
data it shares, and waits for the others'. A plain load in a spin loop may be hoisted out of
the loop by the compiler, and plain stores may be reordered past the data they announce, so
the flag is read with an acquire load and written with a release store (LLVM atomics; on x86
these are ordinary moves that the compiler may not reorder or drop). Between meetings the
threads take rows from a shared counter with an atomic fetch-and-add (:func:`claim`).
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic


def _int64_array(arr, index):
    return (isinstance(arr, types.Array) and arr.dtype == types.int64 and arr.ndim == 1
            and isinstance(index, types.Integer))


def _int64_write(arr, index, value):
    """The arguments of an intrinsic that writes an integer ``value`` into an int64 array."""
    return _int64_array(arr, index) and isinstance(value, types.Integer)


def _value(context, builder, signature, args):
    """The third argument of an intrinsic, as the int64 it writes."""
    return context.cast(builder, args[2], signature.args[2], types.int64)


def _item_pointer(context, builder, signature, args):
    """Pointer to ``arr[index]``, the first two arguments of an intrinsic."""
    aryty = signature.args[0]
    ary = context.make_array(aryty)(context, builder, args[0])
    return cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)


def _call(builder, symbol, return_type=ir.VoidType()):
    """Call the function ``symbol`` (no arguments), declaring it in the module if needed."""
    builder.call(cgutils.get_or_insert_function(builder.module, ir.FunctionType(return_type, []), symbol), [])


@intrinsic
def load_acquire(typingctx, arr, index):
    """``arr[index]`` (int64) read with acquire ordering."""
    if not _int64_array(arr, index):
        return None
    sig = types.int64(arr, index)

    def codegen(context, builder, signature, args):
        return builder.load_atomic(_item_pointer(context, builder, signature, args), "acquire", 8)

    return sig, codegen


@intrinsic
def store_release(typingctx, arr, index, value):
    """``arr[index] = value`` (int64) written with release ordering."""
    if not _int64_write(arr, index, value):
        return None
    sig = types.void(arr, index, value)

    def codegen(context, builder, signature, args):
        ptr = _item_pointer(context, builder, signature, args)
        builder.store_atomic(_value(context, builder, signature, args), ptr, "release", 8)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def fetch_add(typingctx, arr, index, value):
    """``arr[index] += value`` (int64) in one atomic step; returns what ``arr[index]`` held."""
    if not _int64_write(arr, index, value):
        return None
    sig = types.int64(arr, index, value)

    def codegen(context, builder, signature, args):
        ptr = _item_pointer(context, builder, signature, args)
        return builder.atomic_rmw("add", ptr, _value(context, builder, signature, args), "acq_rel")

    return sig, codegen


@intrinsic
def spin_pause(typingctx):
    """A hint that this is a spin-wait loop (x86 ``pause``; nothing elsewhere)."""
    sig = types.void()

    def codegen(context, builder, signature, args):
        if "x86" in builder.module.triple:
            _call(builder, "llvm.x86.sse2.pause")
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def yield_cpu(typingctx):
    """Give the core to another thread (``sched_yield``)."""
    sig = types.void()

    def codegen(context, builder, signature, args):
        _call(builder, "sched_yield", ir.IntType(32))
        return context.get_dummy_value()

    return sig, codegen


# A waiting thread spins (cheap when the other thread is running on another core and arrives
# within microseconds) and, past this many spins (~100 us), yields its core at each check: on a
# machine with fewer free cores than threads the thread it waits for may need that core.
SPINS_BEFORE_YIELD = 1 << 12

# Layout of the ``sync`` array the threads share: thread k's sequence number at FLAG * k (one
# cache line each), its "short of room" answer beside it; after the threads' lines, one line
# for the counters of work the threads take in turn (:func:`claim`; counter c at FLAG * n + c).
FLAG = 8
SHORT = 1
COUNTERS = 2


def sync_array(n_threads: int) -> np.ndarray:
    """A zeroed ``sync`` array for ``n_threads`` threads."""
    return np.zeros(FLAG * (n_threads + 1), np.int64)


@numba.njit(cache=True, inline="always")
def reset_claims(sync, n_threads, counter):
    """Start work counter ``counter`` (0 .. COUNTERS - 1) at 0: by one thread, before a
    :func:`meet` that publishes it to the others."""
    sync[FLAG * n_threads + counter] = 0


@numba.njit(cache=True, inline="always")
def claim(sync, n_threads, size, counter):
    """Take the next ``size`` work items of counter ``counter``: the first one's number (counted
    from its last :func:`reset_claims`); the threads get disjoint ranges, in whatever order they
    ask."""
    return fetch_add(sync, FLAG * n_threads + counter, size)


@numba.njit(cache=True, inline="always")
def meet(sync, tid, n_threads, seq, short):
    """Publish this thread's ``seq`` (and ``short``), wait until every other thread has published
    ``seq`` too; returns whether any thread was ``short``. Everything a thread wrote before its
    call is visible to the others after theirs returns."""
    sync[FLAG * tid + SHORT] = 1 if short else 0
    store_release(sync, FLAG * tid, seq)
    anyone = short
    for k in range(n_threads):
        if k != tid:
            spins = 0
            while load_acquire(sync, FLAG * k) < seq:
                if spins < SPINS_BEFORE_YIELD:
                    spin_pause()
                    spins += 1
                else:
                    yield_cpu()
            anyone = anyone or sync[FLAG * k + SHORT] != 0
    return anyone
