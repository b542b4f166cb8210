"""What the JIT reports: ``jit_info`` rows, the hit rate, compile times, and the monitor's event stream.

Why events are dispatched by the compiler thread: widgets subscribe to the monitor, and a callback
must never run on the execution thread (it would add the widget's latency to the user's code). Every
event is appended to a bounded log at once, with a sequence number and a timestamp; subscribers are
called from the compiler thread, which the log wakes. Widgets marshal them to their own loop.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .cache import CACHE, Entry


@dataclass(frozen=True)
class JitEvent:
    seq: int
    time: float  # time.time()
    kind: str  # queued, started, phase, installed, fallback, demoted, skipped, hit-rate, cache-full,
    # buckets, guard, warm (the worker started and the launch overhead measured), core-lent and
    # core-returned (a starved compile borrowed a core of the program's thread pools), deferred (an exact
    # key of a region whose keys churn waits until it is asked for again or the program pauses), tier-up
    # (an entry's optimised tier replaced its quick code), tier-down (the optimised tier ran slower: the
    # quick code is back), loaded (code from the persistent code cache), rewrite (a pattern of
    # msvm/passes replaced instructions with a fused op when a program was prepared), reset (``ms.vm.reset()``
    # emptied the cache: sent to subscribers only, never kept in the log)
    entry: str | None  # the entry's name, when the event is about one
    data: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"seq": self.seq, "time": self.time, "kind": self.kind, "entry": self.entry, **self.data}


class EventLog:
    """A bounded log of JIT events with subscribers called off the execution thread."""

    def __init__(self, capacity: int = 4096) -> None:
        self._lock = threading.Lock()
        self._events: deque[JitEvent] = deque(maxlen=capacity)
        self._pending: deque[JitEvent] = deque()
        self._subscribers: list[Callable[[dict], None]] = []
        self._seq = 0
        self.wake: Callable[[], None] = lambda: None  # the compiler thread installs its wake-up

    def publish(self, kind: str, entry: str | None, **data: Any) -> JitEvent:
        with self._lock:
            self._seq += 1
            event = JitEvent(self._seq, time.time(), kind, entry, data)
            self._events.append(event)
            if self._subscribers:
                self._pending.append(event)
        if self._pending:
            self.wake()
        return event

    @property
    def has_pending(self) -> bool:
        return bool(self._pending)

    def dispatch(self) -> None:
        """Call the subscribers with the events published since the last dispatch (compiler thread)."""
        while True:
            with self._lock:
                if not self._pending:
                    return
                event = self._pending.popleft()
                subscribers = list(self._subscribers)
            for callback in subscribers:
                try:
                    callback(event.as_dict())
                except Exception:  # a widget's bug must not stop the compiler
                    self.unsubscribe(callback)

    def events(self, since: int | None = None) -> list[JitEvent]:
        with self._lock:
            return [e for e in self._events if since is None or e.seq > since]

    def subscribe(self, callback: Callable[[dict], None]) -> None:
        with self._lock:
            self._subscribers.append(callback)

    def unsubscribe(self, callback: Callable[[dict], None]) -> None:
        with self._lock:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

    def clear(self) -> None:
        """Forget every event; subscribers then hear one ``reset``, so views showing entries can say so."""
        with self._lock:
            self._events.clear()
            self._pending.clear()
            if self._subscribers:
                self._seq += 1
                self._pending.append(JitEvent(self._seq, time.time(), "reset", None))
        if self._pending:
            self.wake()


EVENTS = EventLog()


def entry_row(entry: Entry) -> dict:
    return entry.as_dict(entry.owner.interp_ms(entry))


def jit_info() -> list[dict]:
    """One dict per cache entry, in creation order."""
    return [entry_row(e) for e in CACHE.all()]


def hit_rate(function: str | None = None) -> float:
    """Native region runs / all runs of compilable regions, of one function or all (0.0 before any)."""
    hits = sum(e.hit_count for e in CACHE.all() if function is None or e.function == function)
    total = hits + sum(r.misses for r in CACHE.regions() if function is None or r.exe_name == function)
    return hits / total if total else 0.0


def avg_compile_time() -> float:
    """Mean compile time in ms of the entries that compiled (0.0 before any)."""
    times = [e.compile_ms for e in CACHE.all() if e.status == "compiled" and e.compile_ms is not None]
    return sum(times) / len(times) if times else 0.0


def format_ns(ns: float) -> str:
    """A duration for reasons and reports: ``4.4 µs``, ``12.3 ms``, ``1.20 s``."""
    if ns < 1e6:
        return f"{ns / 1e3:.1f} µs"
    if ns < 1e9:
        return f"{ns / 1e6:.1f} ms"
    return f"{ns / 1e9:.2f} s"


class JitMonitor:
    """The live view the widgets subscribe to: queue, active compile, cache and events."""

    def queue(self) -> list[dict]:
        """Entries waiting for the compiler, in the order it will take them (``Entry.compile_order``)."""
        waiting = sorted((e for e in CACHE.all() if e.status == "queued"), key=lambda e: e.compile_order())
        return [entry_row(e) for e in waiting]

    def active(self) -> dict | None:
        """The entry compiling now, with its phase (``phase``), or None."""
        for e in CACHE.all():
            if e.status == "compiling":
                return {**entry_row(e), "phase": e.phase}
        return None

    def cache(self) -> list[dict]:
        return jit_info()

    def hit_rate(self, function: str | None = None) -> float:
        return hit_rate(function)

    def events(self, since: int | None = None) -> list[dict]:
        """Recent events (oldest first); ``since``: the ``seq`` of the last event already seen."""
        return [e.as_dict() for e in EVENTS.events(since)]

    def subscribe(self, callback: Callable[[dict], None]) -> None:
        """Call ``callback(event_dict)`` for every new event, on the compiler thread."""
        EVENTS.subscribe(callback)

    def unsubscribe(self, callback: Callable[[dict], None]) -> None:
        EVENTS.unsubscribe(callback)


MONITOR = JitMonitor()

__all__ = ["EVENTS", "MONITOR", "EventLog", "JitEvent", "JitMonitor", "avg_compile_time",
           "entry_row", "format_ns", "hit_rate", "jit_info"]
