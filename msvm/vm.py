"""``ms.vm``: the runtime's observability and control surface (tracing, JIT cache, capability DB)."""

from __future__ import annotations

import os
from pathlib import Path

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
