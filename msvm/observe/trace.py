"""Bytecode tracing: one event per executed instruction, kept in memory and written as .bclog.

Tracing is off by default and then costs one flag test per call: calls take the plain generated
code. When on, functions run a variant of the generated code instrumented with timestamps.
Events are JSON lines in ``.bclog`` files (one file per process and session) and stay readable in
memory (``recent_events``) for widgets; ``to_csv`` and ``to_chrome_trace`` convert them, and
``split_calls`` groups a stream's instruction events into the calls they belong to.
"""

from __future__ import annotations

import csv
import json
import os
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FIELDS = ("function", "address", "opcode", "op", "variant", "start_ns", "dur_ns", "thread", "mode", "shape",
          "reason")


@dataclass
class TraceEvent:
    """One executed instruction, native region run or compile phase.

    ``variant`` and ``reason`` say which kernel an OP_CALL ran and why the scheduler chose it; fields
    added later (``reason``) default to None, so older ``.bclog`` files still read.
    """

    function: str
    address: int
    opcode: str
    op: str | None
    variant: str | None
    start_ns: int
    dur_ns: int
    thread: int
    mode: str  # "interp" | "jit" | "compile"
    shape: list[int] | None = None
    reason: str | None = None


@dataclass
class TraceCall:
    """The instruction events of one call of a function, on one thread, in time order."""

    function: str
    thread: int
    events: list[TraceEvent] = field(default_factory=list)
    returned: bool = False  # ended at its RET (False: it raised, or the trace stopped first)

    @property
    def start_ns(self) -> int:
        return self.events[0].start_ns

    @property
    def end_ns(self) -> int:
        return max(e.start_ns + e.dur_ns for e in self.events)

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


def split_calls(events: Iterable[TraceEvent]) -> list[TraceCall]:
    """Group execution events (interpreted instructions, native regions) into calls, in time order.

    A call is traced whole (the flag is tested at entry), so it starts at its function's first
    instruction and ends at its RET; the entry block has no predecessors, so its first address comes
    back only with the next call, which splits a call that raised before its RET from the next one.
    Compile events belong to no call.
    """
    open_calls: dict[int, TraceCall] = {}
    calls: list[TraceCall] = []
    for e in sorted(events, key=lambda e: e.start_ns):
        if e.mode == "compile":
            continue
        call = open_calls.get(e.thread)
        if call is None or call.function != e.function or e.address == call.events[0].address:
            call = open_calls[e.thread] = TraceCall(e.function, e.thread)
            calls.append(call)
        call.events.append(e)
        if e.opcode == "RET":
            call.returned = True
            del open_calls[e.thread]
    return calls


class TraceRecorder:
    """Collects events from any thread; flushes them to a .bclog file in batches."""

    def __init__(self, capacity: int = 200_000) -> None:
        self.enabled = False
        self.path: Path | None = None
        self.events: deque[TraceEvent] = deque(maxlen=capacity)
        self._pending: list[TraceEvent] = []
        self._lock = threading.Lock()
        self._file: Path | None = None
        self._listeners: list = []

    def enable(self, on: bool = True, path: str | os.PathLike | None = "./ms_bc_trace") -> Path | None:
        with self._lock:
            self._flush_locked()
            self.enabled = on
            if on and path is not None:
                self.path = Path(path)
                self.path.mkdir(parents=True, exist_ok=True)
                stamp = time.strftime("%Y%m%d-%H%M%S")
                self._file = self.path / f"trace-{stamp}-{os.getpid()}.bclog"
            elif on:
                self._file = None
        return self._file

    @property
    def file(self) -> Path | None:
        return self._file

    def record(self, event: TraceEvent) -> None:
        with self._lock:
            self.events.append(event)
            if self._file is not None:
                self._pending.append(event)
                if len(self._pending) >= 4096:
                    self._flush_locked()
        for listener in list(self._listeners):
            listener(event)

    def subscribe(self, listener) -> None:
        """Call ``listener(event)`` for every new event (from the recording thread)."""
        self._listeners.append(listener)

    def unsubscribe(self, listener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if self._file is None or not self._pending:
            self._pending.clear()
            return
        with open(self._file, "a", encoding="utf-8") as out:
            for event in self._pending:
                out.write(json.dumps(asdict(event), separators=(",", ":")) + "\n")
        self._pending.clear()

    def recent(self, n: int | None = None) -> list[TraceEvent]:
        with self._lock:
            events = list(self.events)
        return events if n is None else events[-n:]

    def clear(self) -> None:
        with self._lock:
            self.events.clear()
            self._pending.clear()


TRACE = TraceRecorder()


def read_bclog(path: str | os.PathLike) -> list[TraceEvent]:
    """Events of a .bclog file, or of every .bclog file in a directory, in time order."""
    path = Path(path)
    files = sorted(path.glob("*.bclog")) if path.is_dir() else [path]
    events = []
    for file in files:
        with open(file, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                    events.append(TraceEvent(**{k: data.get(k) for k in FIELDS}))
                except (ValueError, TypeError) as exc:
                    raise ValueError(f"{file}:{n}: not a trace event ({exc})") from None
    events.sort(key=lambda e: e.start_ns)
    return events


def load_events(source: Any = None) -> list[TraceEvent]:
    if source is None:
        TRACE.flush()
        return TRACE.recent()
    if isinstance(source, (str, os.PathLike)):
        return read_bclog(source)
    return list(source)


def to_csv(out_path: str | os.PathLike, source: Any = None) -> Path:
    """Write events (in memory by default, or from a .bclog file/directory) as CSV."""
    out = Path(out_path)
    with open(out, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(FIELDS)
        for e in load_events(source):
            row = asdict(e)
            row["shape"] = "x".join(map(str, e.shape)) if e.shape is not None else ""
            writer.writerow([row[k] for k in FIELDS])
    return out


def to_chrome_trace(out_path: str | os.PathLike, source: Any = None) -> Path:
    """Write Chrome trace-event JSON (opens in Perfetto / chrome://tracing); ts and dur in µs."""
    events = load_events(source)
    pid = os.getpid()
    lanes: dict[tuple[int, str], int] = {}
    trace: list[dict] = [{"ph": "M", "name": "process_name", "pid": pid, "args": {"name": "msvm"}}]
    for e in events:
        lane = (e.thread, e.mode)
        if lane not in lanes:
            lanes[lane] = len(lanes) + 1
            label = "compiler" if e.mode == "compile" else f"execution ({e.mode}) thread {e.thread}"
            trace.append(
                {"ph": "M", "name": "thread_name", "pid": pid, "tid": lanes[lane], "args": {"name": label}}
            )
        name = e.op or e.opcode
        trace.append(
            {
                "ph": "X",
                "name": name,
                "cat": e.mode,
                "pid": pid,
                "tid": lanes[lane],
                "ts": e.start_ns / 1000.0,
                "dur": e.dur_ns / 1000.0,
                "args": {
                    "function": e.function,
                    "pc": f"0x{e.address:04x}",
                    "opcode": e.opcode,
                    "variant": e.variant,
                    "reason": e.reason,
                    "shape": e.shape,
                },
            }
        )
    out = Path(out_path)
    out.write_text(json.dumps({"traceEvents": trace, "displayTimeUnit": "ns"}), encoding="utf-8")
    return out


def summarize(events: Iterable[TraceEvent]) -> dict[str, dict[str, float]]:
    """Per op (or opcode): count, total and median duration in µs — a quick 'where did time go'."""
    groups: dict[str, list[int]] = {}
    for e in events:
        groups.setdefault(e.op or e.opcode, []).append(e.dur_ns)
    out = {}
    for key, durs in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
        durs.sort()
        out[key] = {
            "count": len(durs),
            "total_us": sum(durs) / 1000,
            "median_us": durs[len(durs) // 2] / 1000,
        }
    return out
