"""``ms.vm``: the runtime's observability and control surface (tracing, JIT cache, capability DB, memory).

The JIT's modules are imported by the functions that need them, not here: ``import msvm`` must not
pay for the JIT (its compiler, worker and code generator) before anything is compiled.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .observe.trace import TRACE, TraceEvent, load_events, summarize, to_chrome_trace, to_csv
from .runtime import memory_stats as _pool_stats
from .scheduler import dump_capability_db as _dump_capability_db
from .scheduler import load_capability_patch as _load_capability_patch

if TYPE_CHECKING:
    from .msjit.regions import ScdAnalysis
    from .msjit.stats import JitMonitor


def enable_bc_trace(on: bool = True, path: str | os.PathLike | None = "./ms_bc_trace") -> Path | None:
    """Record one event per executed instruction; returns the .bclog file written (None if in memory only)."""
    return TRACE.enable(on, path)


def bc_trace_events(n: int | None = None) -> list[TraceEvent]:
    """The most recent trace events held in memory."""
    return TRACE.recent(n)


def bc_trace_to_csv(out_path: str | os.PathLike, source: str | os.PathLike | None = None) -> Path:
    """Write the in-memory events (or a .bclog file/directory) as CSV."""
    return to_csv(out_path, source)


def bc_trace_to_chrome(out_path: str | os.PathLike, source: str | os.PathLike | None = None) -> Path:
    """Write Chrome trace-event JSON that opens in Perfetto or chrome://tracing."""
    return to_chrome_trace(out_path, source)


def bc_trace_summary(source: str | os.PathLike | None = None) -> dict[str, dict[str, float]]:
    """Count, total and median µs per op — where the time went."""
    return summarize(load_events(source))


def clear_bc_trace() -> None:
    TRACE.clear()


# -- the JIT ----------------------------------------------------------------------------------------------


def jit_info() -> list[dict]:
    """One dict per JIT cache entry, in creation order, with these keys:

    ``name`` (``jit_cache_<digest>_<symbols>``), ``function``, ``region`` (index in the function),
    ``address`` (the region's first bytecode address), ``mode`` (exact, bucket, adaptive),
    ``status`` (queued, compiling, compiled, fallback), ``hits`` (native runs), ``waiting`` (runs
    interpreted while it was queued or compiling), ``compile_ms`` (wall time from leaving the queue
    to installed), ``compile_cpu_ms`` (the CPU time of that: the compile worker runs on cores the
    user's code leaves idle — or one lent by BLAS once it is starved — so the wall time is longer) and
    ``phase_ms`` (per pipeline phase), ``code_bytes`` (machine code), ``code_from`` (the entry —
    another bucket of the same region — whose machine code it shares: its compile was a lowering,
    not an LLVM build; None for its own code), ``planned_bytes`` and
    ``naive_bytes`` (the memory plan's arena against one buffer per tensor), ``reason`` (why the
    entry was created, or why it fell back), ``interp_ms`` and ``native_ms`` (mean interpreted and
    sampled native time of the region), ``saved_ms`` (hits × (interp_ms − native_ms)), ``symbols``
    (the cache key's symbol values; a bucket as [low, high]), ``bounds`` (bucket upper bounds),
    ``tier`` (1: quick code whose optimised tier is on its way, 2: optimised), ``source`` ("compiled"
    in this process, or "disk": loaded from the persistent code cache at its key's first run), and
    ``hot_ns``/``native_ns`` (``time.perf_counter_ns()`` when its key got hot and when its code first
    ran). Times are None until measured.
    """
    from .msjit import stats

    return stats.jit_info()


def get_jit_hit_rate() -> float:
    """Share of compilable-region runs that ran native code."""
    from .msjit import stats

    return stats.hit_rate()


def get_avg_compile_time() -> float:
    """Mean compile time (ms) of the entries that compiled."""
    from .msjit import stats

    return stats.avg_compile_time()


def wait_for_compiles(timeout: float | None = None) -> bool:
    """Block until the compile queue is empty and nothing compiles; False if ``timeout`` (s) ran out first."""
    from .msjit.compiler import COMPILER

    return COMPILER.wait_idle(timeout)


def reset() -> None:
    """Drop every JIT entry, counter, event and queued compile (the compiler thread keeps running)."""
    from .msjit import runtime

    runtime.reset()


def clear_disk_cache() -> int:
    """Delete the persistent JIT code cache's files (``$MSVM_JIT_CACHE_DIR``, by default
    ``$XDG_CACHE_HOME/msvm/jit``); returns how many. Code loaded from them keeps running."""
    from .msjit import diskcache

    return diskcache.clear()


def disk_cache_info() -> dict[str, Any]:
    """The persistent JIT code cache: ``enabled`` (``MSVM_JIT_CACHE=0`` turns it off), ``dir``, ``files``,
    ``bytes`` and ``max_bytes`` (``ms.set_context(jit_disk_cache_max_mb=…)``)."""
    from .msjit import diskcache

    return diskcache.stats()


def jit_monitor() -> JitMonitor:
    """The live JIT view for widgets: ``queue()``, ``active()``, ``events(since)``, ``subscribe(fn)``."""
    from .msjit.stats import MONITOR

    return MONITOR


def disassemble(entry: str | dict, kind: str = "bytecode") -> str:
    """A cache entry's region function ("bytecode") or native code ("llvm", "llvm-opt", "asm").

    ``entry`` is an entry name or a dict from ``jit_info()``.
    """
    from .msjit.cache import CACHE

    name = entry["name"] if isinstance(entry, dict) else entry
    found = CACHE.get(name)
    if found is None:
        raise KeyError(f"no JIT cache entry named {name!r}; see ms.vm.jit_info()")
    return found.disassemble(kind)


def scd_analysis(fn: Any, *example_args: Any) -> ScdAnalysis:
    """Every tensor's shape convergence degree and every region's verdict, as data (``.as_dict()``).

    ``fn`` is an ``@ms.jit`` function (the example arguments pick its version) or an Executable.
    """
    from .msjit import regions

    return regions.analyze(fn, *example_args)


def print_scd_analysis(fn: Any, *example_args: Any) -> None:
    """Print why each tensor is (not) anchored and whether each region will compile."""
    print(scd_analysis(fn, *example_args).text())


def _inject_compile_fault(kind: str | None) -> None:
    """Test hook: the next compile's worker request fails with "crash", "hang" or "error"."""
    from .msjit.compiler import COMPILER

    COMPILER._inject_fault(kind)


# -- kernel choice and memory -------------------------------------------------------------------------------


def dump_capability_db(path: str | os.PathLike, *, calibrate: bool = True) -> Path:
    """Write what the scheduler knows about this machine as JSON: host facts, the BLAS chosen and why,
    every kernel variant with its constraints, the cost model's rates and the patches applied.

    ``calibrate`` first finishes the cost model's calibration of every op with variants (seconds
    the first time on a machine; later processes load it from the on-disk cache), so the file shows
    the rates the scheduler uses. Edit a copy and load it back with ``load_capability_patch``.
    """
    return _dump_capability_db(path, calibrate=calibrate)


def load_capability_patch(patch: str | os.PathLike | Mapping[str, Any]) -> dict[str, Any]:
    """Change kernel choices for this process: force or forbid variants per op (optionally per dtype
    and shape pattern), override rates, bandwidth or GEMM efficiency.

    ``patch`` is a JSON file or a dict in the capability DB's layout. It is validated as a whole
    first — an error (``CapabilityPatchError``) names the JSON path at fault and changes nothing —
    then merged, and every call site re-decides its kernels. Returns the patch as normalised.
    """
    return _load_capability_patch(patch)


def memory_stats() -> dict[str, Any]:
    """The interpreter's memory pool: bytes in use and held (with peaks), idle bytes, allocations,
    reuses, releases, dropped blocks and fragmentation — what ``ms.set_context(enable_mem_reuse=...)``
    changes. Counters are process-wide; ``msvm.runtime.POOL.reset_stats()`` restarts them.
    """
    return _pool_stats()
