"""The interpreter's memory pool: tensor buffers reused by size class, returned only when unreferenced.

Why a lease instead of an explicit ``free``: a tensor the interpreter is done with may still be
referenced — by a view in another register, by a result already returned to the user, by a
``torch.from_numpy`` wrapper. So the pool never trusts a free instruction. Every array it hands
out is built on a ``_Lease`` (an ndarray subclass viewing one pool block); numpy keeps the lease
alive through every view's ``base`` chain (its base-collapsing stops at the subclass), so the
lease's ``__del__`` runs exactly when the last array derived from it dies, and only then does the
block go back to the free list. ``TENSOR_FREE`` and the interpreter's last-use releases are plain
``del`` statements that drop a reference; the buffer comes back if that was the last one.

Size classes are four per octave (1, 1.25, 1.5, 1.75 × 2^k), so rounding wastes at most 20 %.
Idle blocks are kept up to ``max_idle_bytes``; beyond that a returned block is dropped (freed).
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from math import prod
from typing import Any

import numpy as np

ALIGN = 64  # bytes: a cache line, and what generated vector code assumes at best
MIN_CLASS = 256
# Kernel outputs at least this large come from the pool. Below it numpy's own allocator is as fast as
# the pool's bookkeeping (measured: a 256 KiB add gains ~15 % from a reused buffer, an 8 KiB one loses).
POOLED_OUTPUT_MIN_BYTES = 128 << 10


class _Block(np.ndarray):
    """A pool block's raw bytes (its own type, so numpy's base-collapsing stops at the lease above it)."""


class _Lease(np.ndarray):
    """One loan of a block; dies with the last array viewing it and then gives the block back."""

    __slots__ = ("pool", "requested")

    def __del__(self) -> None:
        pool = getattr(self, "pool", None)
        if pool is not None:  # None: not a pool loan (numpy made it from one, e.g. ``arr.base.copy()``)
            pool._give_back(self.base, self.requested)


def size_class(nbytes: int) -> int:
    """The block size serving a request of ``nbytes``: the next of 1, 1.25, 1.5, 1.75 × 2^k."""
    if nbytes <= MIN_CLASS:
        return MIN_CLASS
    octave = (nbytes - 1).bit_length() - 1  # 2^octave < nbytes <= 2^(octave+1)
    step = 1 << (octave - 2)
    return -(-nbytes // step) * step


@dataclass(frozen=True)
class MemoryStats:
    """A snapshot of the pool. ``fragmentation`` = 1 − in_use_bytes / held_bytes: the share of the
    memory the pool holds that no live tensor asked for (size-class rounding plus idle blocks)."""

    in_use_bytes: int  # bytes requested by tensors alive now
    peak_in_use_bytes: int
    held_bytes: int  # all blocks the pool holds: lent out + idle
    peak_held_bytes: int
    idle_bytes: int
    allocations: int  # requests served
    reuses: int  # requests served by an idle block
    releases: int  # blocks given back by their last reference
    dropped: int  # given-back blocks freed because the idle cache was full
    fragmentation: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class MemoryPool:
    """Hands out numpy arrays on reusable blocks; thread-safe (one re-entrant lock)."""

    def __init__(self, max_idle_bytes: int = 512 << 20) -> None:
        self.max_idle_bytes = max_idle_bytes
        self._lock = threading.RLock()  # re-entrant: a lease may die (and give back) inside a pool call
        self._free: dict[int, list[np.ndarray]] = {}
        self._reset_counters()

    def _reset_counters(self) -> None:
        self._in_use = self._peak_in_use = 0
        self._lent = self._idle = self._peak_held = 0
        self._allocations = self._reuses = self._releases = self._dropped = 0

    # -- lending ---------------------------------------------------------------------------------
    def empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """An uninitialised array from the pool (a plain ``np.empty`` for empty or object arrays)."""
        dtype = np.dtype(dtype)
        nbytes = prod(shape) * dtype.itemsize
        if nbytes == 0 or dtype.hasobject:
            return np.empty(shape, dtype)
        cls = size_class(nbytes)
        with self._lock:
            free = self._free.get(cls)
            if free:
                block = free.pop()
                self._idle -= cls
                self._reuses += 1
            else:
                block = _new_block(cls)
            self._allocations += 1
            self._lent += cls
            self._in_use += nbytes
            if self._in_use > self._peak_in_use:
                self._peak_in_use = self._in_use
            held = self._lent + self._idle
            if held > self._peak_held:
                self._peak_held = held
        lease = block.view(_Lease)
        lease.requested = nbytes
        lease.pool = self
        return np.ndarray(shape, dtype, lease)

    def zeros(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A zero-filled array from the pool (TENSOR_ALLOC and TENSOR_CREATE semantics)."""
        out = self.empty(shape, dtype)
        out.fill(0)
        return out

    def owns(self, arr: np.ndarray) -> bool:
        """Whether ``arr`` (or the array it views) lives in a block of this pool."""
        base = arr
        while isinstance(base, np.ndarray):
            if isinstance(base, _Lease):
                return base.pool is self
            base = base.base
        return False

    def _give_back(self, block: np.ndarray, requested: int) -> None:
        cls = block.nbytes
        with self._lock:
            self._in_use -= requested
            self._lent -= cls
            self._releases += 1
            if self._idle + cls <= self.max_idle_bytes:
                self._free.setdefault(cls, []).append(block)
                self._idle += cls
            else:
                self._dropped += 1

    # -- inspection and housekeeping -------------------------------------------------------------
    def stats(self) -> MemoryStats:
        with self._lock:
            held = self._lent + self._idle
            return MemoryStats(
                in_use_bytes=self._in_use,
                peak_in_use_bytes=self._peak_in_use,
                held_bytes=held,
                peak_held_bytes=self._peak_held,
                idle_bytes=self._idle,
                allocations=self._allocations,
                reuses=self._reuses,
                releases=self._releases,
                dropped=self._dropped,
                fragmentation=1.0 - self._in_use / held if held else 0.0,
            )

    def trim(self) -> int:
        """Free every idle block; returns the bytes released."""
        with self._lock:
            freed = self._idle
            self._free.clear()
            self._idle = 0
            return freed

    def reset_stats(self) -> None:
        """Zero the counters; peaks restart from what is held now (blocks, lent or idle, stay)."""
        with self._lock:
            lent, idle, in_use = self._lent, self._idle, self._in_use
            self._reset_counters()
            self._lent, self._idle, self._in_use = lent, idle, in_use
            self._peak_in_use, self._peak_held = in_use, lent + idle


def _new_block(nbytes: int) -> np.ndarray:
    raw = np.empty(nbytes + ALIGN, np.uint8)
    offset = -raw.ctypes.data % ALIGN
    return raw[offset : offset + nbytes].view(_Block)


POOL = MemoryPool()


def kernel_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised output (or large temporary) of a native kernel: from the pool from
    ``POOLED_OUTPUT_MIN_BYTES`` up. Why: malloc hands large freed blocks back to the kernel, and the next
    call faults them in again, page by page, at a cost of a large share of an interpreted call's time
    (``docs/performance.md``, "Pooled outputs")."""
    dtype = np.dtype(dtype)
    if prod(shape) * dtype.itemsize >= POOLED_OUTPUT_MIN_BYTES:
        return POOL.empty(shape, dtype)
    return np.empty(shape, dtype)


def memory_stats() -> dict[str, Any]:
    """The interpreter pool's statistics (see ``MemoryStats`` for what each number means)."""
    return POOL.stats().as_dict()
