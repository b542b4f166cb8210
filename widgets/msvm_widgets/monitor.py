"""JITMonitor: compile queue, compiles in progress with their phase, per-function hit rates, recent events
and the cache, live while a cell runs.

Why it is safe to leave open: the JIT calls back on its compiler thread, where widgets must not be
touched; the callback only asks the update pump for a redraw, so however many events arrive the view
redraws at most at the pump's rate, on the pump's thread (which runs while the kernel is busy with the
user's cell). Periodic samples (the hit rate, once a second) collapse into one row, so they never push
the compile events out of "Recent events". The callback holds the view weakly and unsubscribes itself
once the view is gone; ``close()`` unsubscribes at once. After ``ms.vm.reset()`` the view says so.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

import ipywidgets as widgets

from msvm import vm

from . import theme
from .fallback import StaticFallback
from .jitcache import status_class
from .pump import COSTLY_EVERY, UpdatePump, default_pump

QUEUE_COLUMNS = ("name", "function", "region", "mode", "symbols", "reason")
ACTIVE_COLUMNS = ("name", "function", "region", "phase", "phase_ms")
FUNCTION_COLUMNS = ("function", "entries", "compiled", "hits", "hit_rate", "saved_ms")
CACHE_COLUMNS = ("name", "function", "mode", "status", "tier", "source", "hits", "waiting", "compile_ms",
                 "saved_ms", "reason")
EVENT_COLUMNS = ("seq", "time", "kind", "entry", "phase", "ms", "tier", "status", "rate", "reason")
GOOD_EVENTS = ("installed", "tier-up", "loaded")  # code landed: compiled, optimised, or from disk
SAMPLE_EVENTS = ("hit-rate",)  # published periodically: shown as one row, the latest, with a count
RECENT_EVENTS = 12
SHOWN_ROWS = 10  # of the queue and of the cache: the monitor is an overview, %msvm info lists them all


def clock(stamp: float) -> str:
    """A wall-clock time as ``HH:MM:SS.mmm``."""
    return time.strftime("%H:%M:%S", time.localtime(stamp)) + f".{int(stamp * 1000) % 1000:03d}"


def _event_row(event: dict) -> dict:
    row = dict(event)
    if isinstance(row.get("time"), (int, float)):
        row["time"] = clock(row["time"])
    return row


def recent_events(events: list[dict], n: int = RECENT_EVENTS) -> list[dict]:
    """The last ``n`` events that are not periodic samples, and of each sample kind only its latest
    (its ``kind`` reads ``hit-rate ×57``), in time order."""
    kept = [e for e in events if e["kind"] not in SAMPLE_EVENTS][-n:]
    for kind in SAMPLE_EVENTS:
        samples = [e for e in events if e["kind"] == kind]
        if samples:
            latest = dict(samples[-1])
            latest["kind"] = f"{kind} ×{len(samples)}" if len(samples) > 1 else kind
            kept.append(latest)
    return sorted(kept, key=lambda e: e["seq"])


def function_rows(cache: list[dict], rate: Any) -> list[dict]:
    """Per function of the cache: entries, compiled entries, native hits, its own hit rate, time saved."""
    rows: dict[str, dict] = {}
    for entry in cache:
        row = rows.setdefault(entry["function"], {"function": entry["function"], "entries": 0, "compiled": 0,
                                                  "hits": 0, "saved_ms": 0.0})
        row["entries"] += 1
        row["compiled"] += entry.get("status") == "compiled"
        row["hits"] += entry.get("hits") or 0
        row["saved_ms"] += entry.get("saved_ms") or 0.0
    for row in rows.values():
        row["hit_rate"] = rate(row["function"])
    return list(rows.values())


def _count(rows: list[dict], which: str) -> str:
    """``29`` or, past ``SHOWN_ROWS``, ``29; the next 10 shown, %msvm info lists all``."""
    if len(rows) <= SHOWN_ROWS:
        return str(len(rows))
    return f"{len(rows)}; {which} {SHOWN_ROWS} shown, %msvm info lists all"


def _event_class(event: dict) -> str:
    kind = event.get("kind")
    return "msvm-bad" if kind == "fallback" else "msvm-good" if kind in GOOD_EVENTS else ""


class JITMonitor(StaticFallback, widgets.VBox):
    """Live JIT state; ``refresh()`` redraws now, the compiler thread's events redraw through the pump."""

    def __init__(self, *, live: bool = True, pump: UpdatePump | None = None, **kwargs: Any) -> None:
        self.pump = pump or default_pump()
        self.view = widgets.HTML(layout=widgets.Layout(width="100%"))
        self.unavailable: str | None = None
        self.queue: list[dict] = []
        self.active: list[dict] = []
        self.events: list[dict] = []
        self.cache: list[dict] = []
        self.functions: list[dict] = []
        self.rate: float | None = None
        self.reset_at: float | None = None  # when ms.vm.reset() last emptied the cache under this view
        self.redraws = 0
        self._monitor: Any = None
        self._callback: Any = None
        super().__init__(children=[self.view], layout=widgets.Layout(width="100%"), **kwargs)
        self.add_class("msvm-jit-monitor")
        self.refresh()
        if live and self.unavailable is None:
            self.follow()

    def follow(self) -> None:
        """Subscribe to the JIT's events (callbacks run on the compiler thread)."""
        if self._callback is not None:
            return
        ref = weakref.ref(self)
        monitor = vm.jit_monitor()

        def callback(event: dict) -> None:
            view = ref()
            if view is None:
                monitor.unsubscribe(callback)
                return
            if event["kind"] == "reset":
                view.reset_at = event["time"]
            view.pump.submit(view.view, "refresh", view.refresh, every=COSTLY_EVERY)

        self._monitor, self._callback = monitor, callback
        monitor.subscribe(callback)

    def unfollow(self) -> None:
        if self._callback is not None:
            self._monitor.unsubscribe(self._callback)
            self._monitor = self._callback = None

    def close(self) -> None:
        self.unfollow()
        super().close()

    def refresh(self) -> None:
        """Re-read queue, active compiles, recent events and the cache from ``ms.vm``; redraw."""
        with self.pump.applying():
            self.unavailable = None
            try:
                self._read()
            except Exception as exc:  # the JIT's failure is shown in the view, not raised into the pump
                self.unavailable = f"JIT monitor unavailable: {type(exc).__name__}: {exc}"
            self.redraws += 1
            self.view.value = self.static_html()

    def _read(self) -> None:
        monitor = vm.jit_monitor()
        self.queue = [dict(q) for q in monitor.queue()]
        active = monitor.active()  # the compile in progress, with its phase (None when idle)
        self.active = [] if active is None else [dict(active)]
        self.events = [_event_row(e) for e in recent_events(monitor.events())]
        self.cache = [dict(e) for e in vm.jit_info()]
        self.rate = monitor.hit_rate()
        self.functions = function_rows(self.cache, monitor.hit_rate)

    def _sections(self) -> list[tuple[str, list[dict], tuple[str, ...], list[str]]]:
        queue, cache = self.queue[:SHOWN_ROWS], self.cache[-SHOWN_ROWS:]
        return [
            (f"Compile queue ({_count(self.queue, 'the next')})", queue, QUEUE_COLUMNS, []),
            (f"Active compiles ({len(self.active)})", self.active, ACTIVE_COLUMNS, []),
            (f"Functions ({len(self.functions)}); hit rate of all: {theme.cell_text(self.rate, 'rate')}",
             self.functions, FUNCTION_COLUMNS, []),
            (f"Cache ({_count(self.cache, 'the newest')})", cache, CACHE_COLUMNS,
             [status_class(e) for e in cache]),
            ("Recent events", self.events, EVENT_COLUMNS,
             [_event_class(e) for e in self.events]),
        ]

    def _reset_note(self) -> str | None:
        if self.reset_at is None:
            return None
        return (f"ms.vm.reset() emptied the JIT cache at {clock(self.reset_at)}: entries and events from "
                "before are gone")

    def static_html(self) -> str:
        body = theme.title("JIT monitor")
        if self.unavailable:
            return theme.page(body + theme.note(self.unavailable), "msvm-monitor")
        reset = self._reset_note()
        if reset:
            body += theme.note(reset, "msvm-note msvm-reset")
        for heading, records, preferred, classes in self._sections():
            body += theme.note(heading)
            if records:
                columns = theme.record_columns(records, preferred)
                body += theme.html_table(columns, theme.record_rows(records, columns), classes)
        return theme.page(body, "msvm-monitor")

    def static_text(self) -> str:
        if self.unavailable:
            return f"JIT monitor: {self.unavailable}"
        parts = ["JIT monitor"]
        reset = self._reset_note()
        if reset:
            parts.append(reset)
        for heading, records, preferred, _classes in self._sections():
            parts.append(heading)
            if records:
                columns = theme.record_columns(records, preferred)
                parts.append(theme.text_table(columns, theme.record_rows(records, columns)))
        return "\n".join(parts)
