"""Timing and table helpers shared by every benchmark suite."""

from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent  # the children import ``bench`` from here


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


# -- fresh processes: every suite measuring a first run runs each figure in a child of its own -----------
def child_main(spec_json: str, run: Callable[[dict[str, Any]], dict[str, Any]]) -> int:
    """A child's entry point (``python -m bench.<suite> --child SPEC``): run the spec, print its result as
    one JSON line (an error as one too, with the traceback on stderr)."""
    try:
        result = run(json.loads(spec_json))
    except Exception as exc:
        traceback.print_exc()
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}",
                          "traceback": traceback.format_exc()[-2000:]}), flush=True)
        return 1
    print(json.dumps(result), flush=True)
    return 0


def run_child(suite: str, spec: Mapping[str, Any], timeout_s: float,
              env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run ``bench.<suite>``'s child on ``spec`` in a fresh process (this environment plus ``env``) and
    return its JSON result, or ``{"error": ...}`` when it failed, printed nothing or ran past
    ``timeout_s``."""
    full = dict(os.environ, **(env or {}))
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), full.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", f"bench.{suite}", "--child", json.dumps(spec)]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=full, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"error": f"exit {proc.returncode}, no result: {proc.stderr.strip()[-500:]}"}
    result = json.loads(lines[-1])
    if proc.returncode and "error" not in result:
        result["error"] = f"exit {proc.returncode}: {proc.stderr.strip()[-500:]}"
    return result
