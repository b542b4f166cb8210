"""TraceTimeline: per-instruction latency over time, one lane for execution and one for the compiler.

Why horizontal ``go.Bar`` (``base`` = start, ``x`` = duration) on a numeric µs axis: instruction
latencies are µs to ns, and ``px.timeline`` rounds to whole milliseconds (JUPYTER.md). Bars are
coloured by mode (interpreted, JIT, compile) and hover shows pc, opcode, op, kernel variant (and why the
scheduler chose it) and shape.
A live timeline follows the core's trace recorder; events arrive on the VM/JIT threads and reach the
figure only through the update pump, in one ``batch_update`` per tick.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go

from msvm.errors import format_address
from msvm.observe.trace import TRACE, TraceEvent, summarize

from . import theme
from .fallback import StaticFallback
from .pump import UpdatePump, default_pump

MODES = (("interp", "interpreted", "#4c78a8"), ("jit", "JIT native", "#54a24b"),
         ("compile", "compile", "#f58518"))
LANES = ("compiler", "execution")
HOVER = ("%{customdata[0]} %{customdata[1]}<br>%{customdata[2]} %{customdata[3]}"
         "<br>variant %{customdata[4]}%{customdata[7]}<br>shape %{customdata[5]}"
         "<br>%{x:.2f} µs, starting at %{customdata[6]:.1f} µs<extra>%{fullData.name}</extra>")


def lane_of(event: TraceEvent) -> str:
    return "compiler" if event.mode == "compile" else "execution"


class TraceTimeline(StaticFallback, widgets.VBox):
    """A Plotly FigureWidget of trace events; ``follow()`` keeps adding events as they are recorded."""

    def __init__(self, events: Iterable[TraceEvent] = (), *, live: bool = False, max_events: int = 5000,
                 title: str = "Trace timeline", pump: UpdatePump | None = None, **kwargs: Any) -> None:
        self.events: list[TraceEvent] = []
        self.max_events = max_events
        self.title = title
        self.pump = pump or default_pump()
        self._origin: int | None = None
        self._buffer: list[TraceEvent] = []
        self._buffer_lock = threading.Lock()
        self._listener: Any = None
        self.header = widgets.HTML()
        self.figure = go.FigureWidget(
            data=[go.Bar(orientation="h", name=label, hovertemplate=HOVER, base=[], x=[], y=[], customdata=[],
                         marker={"color": color, "line": {"color": color, "width": 1}})
                  for _mode, label, color in MODES],
            layout=go.Layout(
                barmode="overlay", height=280, margin={"l": 80, "r": 20, "t": 40, "b": 40},
                paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)", font={"color": "#8a8a8a"},
                xaxis={"title": {"text": "µs since the first event"}, "gridcolor": "rgba(128,128,128,0.25)",
                       "zeroline": False},
                yaxis={"categoryorder": "array", "categoryarray": list(LANES), "range": [-0.6, 1.6]},
                showlegend=True, legend={"orientation": "h", "y": 1.12, "x": 0}, bargap=0.35,
            ),
        )
        super().__init__(children=[self.header, self.figure], **kwargs)
        self.add_class("msvm-timeline")
        self.add_events(events)
        if live:
            self.follow()

    # -- data in ----------------------------------------------------------------------------------------
    def add_events(self, events: Iterable[TraceEvent]) -> None:
        """Append events and redraw (call on the kernel's thread; other threads go through ``follow``)."""
        new = list(events)
        if not new and self.events:
            return
        self.events.extend(new)
        if len(self.events) > self.max_events:
            del self.events[: len(self.events) - self.max_events]
        if self.events and self._origin is None:
            self._origin = min(e.start_ns for e in self.events)
        self._redraw()

    def follow(self) -> None:
        """Subscribe to the core's trace recorder; events reach the figure through the pump (≤ its rate)."""
        if self._listener is not None:
            return
        ref = weakref.ref(self)

        def listener(event: TraceEvent) -> None:  # runs on the recording thread: buffer, then ask the pump
            view = ref()
            if view is None:
                TRACE.unsubscribe(listener)
                return
            with view._buffer_lock:
                view._buffer.append(event)
            view.pump.submit(view.figure, "events", view._drain_buffer)

        self._listener = listener
        TRACE.subscribe(listener)

    def unfollow(self) -> None:
        if self._listener is not None:
            TRACE.unsubscribe(self._listener)
            self._listener = None

    def close(self) -> None:
        self.unfollow()
        super().close()

    def _drain_buffer(self) -> None:
        with self._buffer_lock:
            events, self._buffer = self._buffer, []
        self.add_events(events)

    # -- drawing ----------------------------------------------------------------------------------------
    def _redraw(self) -> None:
        origin = self._origin or 0
        columns: dict[str, dict[str, list[Any]]] = {m: {"base": [], "x": [], "y": [], "c": []}
                                                    for m, _, _ in MODES}
        for e in self.events:
            col = columns.get(e.mode, columns["interp"])
            start = (e.start_ns - origin) / 1000.0
            col["base"].append(start)
            col["x"].append(e.dur_ns / 1000.0)
            col["y"].append(lane_of(e))
            col["c"].append([e.function, format_address(e.address), e.opcode, e.op or "", e.variant or "-",
                             "x".join(map(str, e.shape)) if e.shape is not None else "-", start,
                             f" ({e.reason})" if e.reason else ""])
        with self.figure.batch_update():
            for trace, (mode, _, _) in zip(self.figure.data, MODES):
                col = columns[mode]
                trace.base, trace.x, trace.y, trace.customdata = col["base"], col["x"], col["y"], col["c"]
        head = theme.title(self.title) + theme.note(self._caption())
        self.header.value = theme.page(head, "msvm-timeline-head")

    def _caption(self) -> str:
        if not self.events:
            return ("no trace events yet — enable tracing (%%msvm --trace, %msvm trace on, "
                    "ms.vm.enable_bc_trace())")
        counts = {m: sum(1 for e in self.events if e.mode == m) for m, _, _ in MODES}
        span = (max(e.start_ns + e.dur_ns for e in self.events) - (self._origin or 0)) / 1000.0
        parts = ", ".join(f"{n} {label}" for (m, label, _), n in zip(MODES, counts.values()) if n)
        return f"{len(self.events)} events ({parts}) over {span:.1f} µs"

    def summary_rows(self) -> list[list[object]]:
        """Per op: count, total and median µs (the core's ``summarize``), slowest first."""
        return [[op, s["count"], f"{s['total_us']:.2f}", f"{s['median_us']:.2f}"]
                for op, s in summarize(self.events).items()]

    def static_html(self) -> str:
        body = theme.title(self.title) + theme.note(self._caption())
        if self.events:
            body += theme.html_table(("op", "count", "total µs", "median µs"), self.summary_rows())
        return theme.page(body, "msvm-timeline-static")

    def static_text(self) -> str:
        text = f"{self.title}: {self._caption()}"
        if self.events:
            text += "\n" + theme.text_table(("op", "count", "total µs", "median µs"), self.summary_rows())
        return text
