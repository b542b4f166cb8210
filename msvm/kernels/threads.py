"""A tiny thread pool that runs one native kernel on several cores at once.

The native kernels split their own work: each call takes items from a shared atomic counter
(``irhelpers.for_each_chunk``) until none are left, so calling the same function with the same
arguments from k threads divides the work dynamically — a thread that starts late or is
descheduled (a loaded 2-core machine) simply takes fewer chunks. ctypes releases the GIL for the
duration of the native call.

Waking a pool thread costs ≈45 µs here (150 µs under load), so ``run`` lends work to a helper
only when it is large enough, and the caller never waits for a helper that has not started yet:
each lent task carries a claim lock; whoever takes it first (the helper when it starts, or the caller once its
own share is done) owns the task, so an unclaimed task is simply dropped.

Why not static halves or spinning workers: on this 2-core machine shared with other processes,
libraries that split work statically and spin at barriers (OpenBLAS, torch's OpenMP) collapse
when one core is taken — measured here: torch's 2-thread conv fell from ~70 to ~1 GFLOP/s and
OpenBLAS sgemm to ~1 GFLOP/s under load — while chunked work degrades to the speed of the cores
actually available (a 32×32×32² 3×3 conv: 37 ms on one thread vs 18 ms on two while the load
average was 4, the two threads together using 12 ms of CPU time against one thread's 10 ms).
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

# Below this much work (flops) per extra thread one thread is as fast: the helper wakes after ~45 µs,
# and on a shared machine it may run slowly and hold the last chunk.
MIN_FLOPS_PER_THREAD = 16e6


class _Task:
    __slots__ = ("args", "claim", "done", "fn")

    def __init__(self, fn: Callable[..., Any], args: Sequence[Any]) -> None:
        self.fn = fn
        self.args = args
        self.claim = threading.Lock()
        self.done = threading.Event()


class NativePool:
    """Helper threads for native kernels (daemon threads, started on first use)."""

    def __init__(self, threads: int) -> None:
        self.threads = max(1, threads)
        self._queue: queue.SimpleQueue[_Task] = queue.SimpleQueue()
        self._started = 0
        self._lock = threading.Lock()

    def _ensure_helpers(self, n: int) -> None:
        with self._lock:
            while self._started < n:
                threading.Thread(target=self._serve, name=f"msvm-native-{self._started}", daemon=True).start()
                self._started += 1

    def _serve(self) -> None:
        while True:
            task = self._queue.get()
            if task.claim.acquire(blocking=False):
                try:
                    task.fn(*task.args)
                finally:
                    task.done.set()

    def run(self, fn: Callable[..., Any], args: Sequence[Any], *, flops: float) -> int:
        """Call ``fn(*args)`` on up to ``self.threads`` threads (the caller included); returns how many.

        ``fn`` must share its work through an atomic counter in ``args`` (see module docstring).
        """
        n = int(min(self.threads, max(1.0, flops / MIN_FLOPS_PER_THREAD)))
        if n <= 1:
            fn(*args)
            return 1
        self._ensure_helpers(n - 1)
        tasks = [_Task(fn, args) for _ in range(n - 1)]
        for task in tasks:
            self._queue.put(task)
        fn(*args)
        used = 1
        for task in tasks:
            if task.claim.acquire(blocking=False):
                continue  # the helper never started: nothing left for it to do
            task.done.wait()
            used += 1
        return used


def default_threads() -> int:
    """``MSVM_NUM_THREADS`` if set, else the CPUs this process may run on."""
    env = os.environ.get("MSVM_NUM_THREADS")
    if env:
        return max(1, int(env))
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


POOL = NativePool(default_threads())
