"""JITMonitor: compile queue, compiles in progress with their phase, recent events and the cache, live.

Why it is safe to leave open: the JIT calls back on its compiler thread, where widgets must not be
touched; the callback only asks the update pump for a redraw, so however many events arrive the view
redraws at most at the pump's rate, on the kernel's loop. The callback holds the view weakly and
unsubscribes itself once the view is gone; ``close()`` unsubscribes at once.
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
from .pump import UpdatePump, default_pump

QUEUE_COLUMNS = ("name", "function", "region", "mode", "symbols", "reason")
ACTIVE_COLUMNS = ("name", "function", "region", "phase", "phase_ms")
CACHE_COLUMNS = ("name", "function", "mode", "status", "tier", "source", "hits", "waiting", "compile_ms",
                 "saved_ms", "reason")
EVENT_COLUMNS = ("seq", "time", "kind", "entry", "phase", "tier", "status", "reason")
GOOD_EVENTS = ("installed", "tier-up", "loaded")  # code landed: compiled, optimised, or from disk
RECENT_EVENTS = 12


def _event_row(event: dict) -> dict:
    """An event with its wall-clock time as ``HH:MM:SS.mmm``."""
    row = dict(event)
    if isinstance(row.get("time"), (int, float)):
        stamp = row["time"]
        row["time"] = time.strftime("%H:%M:%S", time.localtime(stamp)) + f".{int(stamp * 1000) % 1000:03d}"
    return row


def _event_class(event: dict) -> str:
    kind = event.get("kind")
    return "msvm-bad" if kind == "fallback" else "msvm-good" if kind in GOOD_EVENTS else ""


class JITMonitor(StaticFallback, widgets.VBox):
    """Live JIT state; ``refresh()`` redraws now, the compiler thread's events redraw through the pump."""

    def __init__(self, *, live: bool = True, pump: UpdatePump | None = None, **kwargs: Any) -> None:
        self.pump = pump or default_pump()
        self.view = widgets.HTML()
        self.unavailable: str | None = None
        self.queue: list[dict] = []
        self.active: list[dict] = []
        self.events: list[dict] = []
        self.cache: list[dict] = []
        self.redraws = 0
        self._monitor: Any = None
        self._callback: Any = None
        super().__init__(children=[self.view], **kwargs)
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

        def callback(_event: Any) -> None:
            view = ref()
            if view is None:
                monitor.unsubscribe(callback)
                return
            view.pump.submit(view.view, "refresh", view.refresh)

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
        self.unavailable = None
        try:
            self._read()
        except Exception as exc:  # the JIT's failure is shown in the view, not raised into the loop
            self.unavailable = f"JIT monitor unavailable: {type(exc).__name__}: {exc}"
        self.redraws += 1
        self.view.value = self.static_html()

    def _read(self) -> None:
        monitor = vm.jit_monitor()
        self.queue = [dict(q) for q in monitor.queue()]
        active = monitor.active()  # the compile in progress, with its phase (None when idle)
        self.active = [] if active is None else [dict(active)]
        self.events = [_event_row(e) for e in monitor.events()][-RECENT_EVENTS:]
        self.cache = [dict(e) for e in vm.jit_info()]

    def _sections(self) -> list[tuple[str, list[dict], tuple[str, ...], list[str]]]:
        return [
            (f"Compile queue ({len(self.queue)})", self.queue, QUEUE_COLUMNS, []),
            (f"Active compiles ({len(self.active)})", self.active, ACTIVE_COLUMNS, []),
            (f"Cache ({len(self.cache)})", self.cache, CACHE_COLUMNS, [status_class(e) for e in self.cache]),
            ("Recent events", self.events, EVENT_COLUMNS,
             [_event_class(e) for e in self.events]),
        ]

    def static_html(self) -> str:
        body = theme.title("JIT monitor")
        if self.unavailable:
            return theme.page(body + theme.note(self.unavailable), "msvm-monitor")
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
        for heading, records, preferred, _classes in self._sections():
            parts.append(heading)
            if records:
                columns = theme.record_columns(records, preferred)
                parts.append(theme.text_table(columns, theme.record_rows(records, columns)))
        return "\n".join(parts)
