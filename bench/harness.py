"""Timing and table helpers shared by every benchmark suite."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any


def calibrate_first() -> str:
    """Calibrate msvm's kernel cost model now, before any timing (a no-op when this host's on-disk
    cache has it): calibrating in the background during the timings would slow them and change the
    scheduler's picks mid-run. Returns what the on-disk cache did, for the report."""
    from msvm.scheduler.capability import DB
    from msvm.scheduler.cost import calibrate_all

    calibrate_all()
    return DB.cache_state


def measure(fn: Callable[[], Any], *, repeat: int = 7, min_time: float = 0.05, warmup: int = 1) -> float:
    """Median seconds per call of ``fn`` over ``repeat`` samples of at least ``min_time`` each."""
    for _ in range(warmup):
        fn()
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        elapsed = time.perf_counter() - t0
        if elapsed >= min_time / 4 or number >= 1 << 20:
            break
        number *= 4
    number = max(1, int(number * (min_time / max(elapsed, 1e-9))))
    samples = []
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            samples.append((time.perf_counter() - t0) / number)
    finally:
        if gc_was:
            gc.enable()
    return statistics.median(samples)


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-6:
        return f"{seconds * 1e9:.0f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}×"


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table (also valid Markdown) — what the suites print."""
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    out = [f"\n### {title}\n", line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in cells[1:]]
    return "\n".join(out)


def optional_import(name: str):
    """The module if installed (torch, jax…), else None: baselines appear only where available."""
    try:
        return __import__(name)
    except Exception:
        return None
