"""CellProgress: one live line while a ``%%msvm`` cell runs: calls so far, native share, compiles in flight.

Why a poll on the update pump: the cell's calls must not pay for the view (the call log only counts),
and the kernel's event loop gets no turn while the cell runs; the pump's thread reads the count and the
JIT's state a few times a second and the line reaches the browser while the kernel is busy. When the
cell ends, ``finish()`` stops the poll and leaves the final figures on the line.
"""

from __future__ import annotations

import time
from typing import Any

import ipywidgets as widgets

from msvm import vm

from . import theme
from .calls import CallLog
from .fallback import StaticFallback
from .pump import UpdatePump, default_pump


class CellProgress(StaticFallback, widgets.HTML):
    """``msvm ▸ running 4.2 s · 1,234 calls of pipeline · native 87 % · compiling 1, 3 queued``."""

    def __init__(self, log: CallLog, *, pump: UpdatePump | None = None, **kwargs: Any) -> None:
        super().__init__(layout=widgets.Layout(width="100%"), **kwargs)
        self.add_class("msvm-cell-progress")
        self.calls = log
        self.pump = pump or default_pump()
        self.started = time.monotonic()
        self.ended: float | None = None
        self.error: str | None = None
        self.update()
        self.pump.poll(self, "progress", self.update)

    def finish(self, error: str | None = None) -> None:
        """The cell ended (``error``: how it failed): stop polling and show the final figures."""
        self.pump.unpoll(self, "progress")
        self.ended, self.error = time.monotonic(), error
        self.update()

    def update(self) -> None:
        with self.pump.applying():
            self.value = self.static_html()

    def figures(self) -> dict[str, Any]:
        """calls, the function last called, its native share, compiling and queued entries, seconds."""
        last = self.calls.last
        name = last.name if last is not None else None
        monitor = vm.jit_monitor()
        active = monitor.active()
        return {"calls": self.calls.count, "function": name,
                "native": monitor.hit_rate(name) if name is not None else None,
                "compiling": active["name"] if active else None,
                "phase": active.get("phase") if active else None,
                "queued": len(monitor.queue()), "seconds": (self.ended or time.monotonic()) - self.started}

    def line(self) -> str:
        f = self.figures()
        state = "ran" if self.ended is not None else "running"
        calls = f"{f['calls']:,} call{'' if f['calls'] == 1 else 's'}"
        parts = [f"msvm ▸ {state} {theme.number(f['seconds'])} s",
                 calls + (f" of {f['function']}" if f["function"] else "")]
        if f["native"] is not None:
            parts.append(f"native {theme.cell_text(f['native'], 'rate')}")
        if f["compiling"]:
            parts.append(f"compiling {f['compiling']}" + (f" ({f['phase']})" if f["phase"] else ""))
        if f["queued"]:
            parts.append(f"{f['queued']} queued")
        if self.error:
            parts.append(f"failed: {self.error}")
        return " · ".join(parts)

    def static_html(self) -> str:
        return theme.page(theme.note(self.line(), "msvm-note msvm-bad" if self.error else "msvm-note"),
                          "msvm-progress")

    def static_text(self) -> str:
        return self.line()
