"""``ms.vm``: the runtime's observability and control surface (tracing, JIT cache, capability DB)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .msjit import cache as _jit_cache
from .msjit import compiler as _jit_compiler
from .msjit import regions as _jit_regions
from .msjit import runtime as _jit_runtime
from .msjit import stats as _jit_stats
from .observe.trace import TRACE, TraceEvent, load_events, summarize, to_chrome_trace, to_csv


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
    """One dict per JIT cache entry: name, function, region, mode, status, hits, compile_ms, phase_ms,
    code_bytes, planned_bytes, naive_bytes, reason and saved_ms (hits × (interpreted − native) time)."""
    return _jit_stats.jit_info()


def get_jit_hit_rate() -> float:
    """Share of compilable-region runs that ran native code."""
    return _jit_stats.hit_rate()


def get_avg_compile_time() -> float:
    """Mean compile time (ms) of the entries that compiled."""
    return _jit_stats.avg_compile_time()


def wait_for_compiles(timeout: float | None = None) -> bool:
    """Block until the compile queue is empty and nothing compiles; False if ``timeout`` (s) ran out first."""
    return _jit_compiler.COMPILER.wait_idle(timeout)


def reset() -> None:
    """Drop every JIT entry, counter, event and queued compile (the compiler thread keeps running)."""
    _jit_runtime.reset()


def jit_monitor() -> _jit_stats.JitMonitor:
    """The live JIT view for widgets: ``queue()``, ``active()``, ``events(since)``, ``subscribe(fn)``."""
    return _jit_stats.MONITOR


def disassemble(entry: str | dict, kind: str = "bytecode") -> str:
    """A cache entry's region function ("bytecode") or native code ("llvm", "llvm-opt", "asm").

    ``entry`` is an entry name or a dict from ``jit_info()``.
    """
    name = entry["name"] if isinstance(entry, dict) else entry
    found = _jit_cache.CACHE.get(name)
    if found is None:
        raise KeyError(f"no JIT cache entry named {name!r}; see ms.vm.jit_info()")
    return found.disassemble(kind)


def scd_analysis(fn: Any, *example_args: Any) -> _jit_regions.ScdAnalysis:
    """Every tensor's shape convergence degree and every region's verdict, as data (``.as_dict()``).

    ``fn`` is an ``@ms.jit`` function (the example arguments pick its version) or an Executable.
    """
    return _jit_regions.analyze(fn, *example_args)


def print_scd_analysis(fn: Any, *example_args: Any) -> None:
    """Print why each tensor is (not) anchored and whether each region will compile."""
    print(scd_analysis(fn, *example_args).text())


def _inject_compile_fault(kind: str | None) -> None:
    """Test hook: the next compile's worker request fails with "crash", "hang" or "error"."""
    _jit_compiler.COMPILER._inject_fault(kind)
