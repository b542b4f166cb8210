"""TraceTimeline: per-instruction latency of one call, and the whole trace as an overview with the compiler.

Why two figures: a cell's trace spans the compile queue's wait (often a second) while one call's
instructions take microseconds, so on one axis the instructions are invisible. The per-call figure
puts the instructions of the call chosen in the selector on an axis in the unit that fits that call
(ns, µs, ms or s), each slice labelled with its op where it is wide enough; the overview shows every
call as one bar (click one to select it) above a compile lane. Both are horizontal ``go.Bar`` on
numeric axes (``px.timeline`` rounds to milliseconds, JUPYTER.md), and every hover gives the event's
own duration and start to the nanosecond, formatted here (Plotly's ``%{x}`` on a bar with a base is
its end, not its length). With nothing traced the view says so and offers to trace the call again.
A live timeline follows the core's trace recorder through the update pump.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go

from msvm.errors import MsvmError, format_address
from msvm.observe.trace import TRACE, TraceCall, TraceEvent, split_calls, summarize

from . import theme
from .fallback import StaticFallback
from .fit import FIT_CLASS, RESPONSIVE, FitFigures
from .pump import UpdatePump, default_pump

MODES = (("interp", "interpreted", "#4c78a8"), ("jit", "JIT native", "#54a24b"),
         ("compile", "compile", "#f58518"))
COLORS = {mode: color for mode, _label, color in MODES}
CALL_COLOR, SELECTED_COLOR = "#9ecae9", "#4c78a8"
HOVER = ("<b>%{customdata[0]}</b><br>%{customdata[1]}<br>duration %{customdata[2]}"
         "<br>starts at %{customdata[3]}<extra>%{fullData.name}</extra>")
SUMMARY_HEADERS = ("op", "count", "total", "median")
NO_TRACE = ("Nothing was traced in this cell, so there is no timeline: run the cell with "
            "%%msvm --trace (or %msvm trace on before it)")
Retrace = Callable[[], Sequence[TraceEvent]]


def label(event: TraceEvent) -> str:
    """What a slice says: the op of an OP_CALL, ``native`` for a JIT region, else the opcode."""
    if event.opcode == "OP_CALL" and event.op:
        return event.op
    return "native" if event.opcode == "REGION" else event.opcode


def event_hover(event: TraceEvent, origin_ns: int, where: str) -> list[str]:
    """Hover fields of one event: what, how (variant, reason, shape), exact duration, exact start."""
    what = f"{event.function} {format_address(event.address)} {event.opcode} {event.op or ''}".rstrip()
    how = []
    if event.mode == "compile":
        what = f"compile {event.variant} · {event.op}"
    elif event.variant:
        how.append(f"variant {event.variant}" + (f" ({event.reason})" if event.reason else ""))
    if event.shape is not None:
        how.append("shape " + "x".join(map(str, event.shape)))
    start = f"{theme.exact_duration(event.start_ns - origin_ns)} {where}"
    return [what, " · ".join(how) or event.mode, theme.exact_duration(event.dur_ns), start]


def axis(title: str, span_ns: float) -> tuple[float, dict]:
    """The unit that fits ``span_ns`` (ns per unit) and an x axis in it that never reads ``0.5M``."""
    scale, unit = theme.unit_of(span_ns)
    return scale, {"title": {"text": f"{unit} {title}"}, "exponentformat": "none", "separatethousands": True,
                   "gridcolor": "rgba(128,128,128,0.25)", "zeroline": False, "rangemode": "tozero"}


def _figure(height: int, lanes: Sequence[str]) -> go.FigureWidget:
    figure = go.FigureWidget(layout=go.Layout(
        barmode="overlay", height=height, autosize=True, margin={"l": 80, "r": 20, "t": 30, "b": 40},
        paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)", font={"color": "#8a8a8a"},
        yaxis={"categoryorder": "array", "categoryarray": list(lanes), "range": [-0.6, len(lanes) - 0.4]},
        uniformtext={"mode": "hide", "minsize": 9}, bargap=0.3,
        showlegend=True, legend={"orientation": "h", "y": 1.18, "x": 0},
    ))
    figure._config = {**figure._config, **RESPONSIVE}
    return figure


def _bar(name: str, color: str) -> go.Bar:
    return go.Bar(orientation="h", name=name, hovertemplate=HOVER, base=[], x=[], y=[], customdata=[],
                  text=[], textposition="inside", insidetextanchor="middle", textangle=0, cliponaxis=True,
                  marker={"color": color, "line": {"color": color, "width": 1}})


class TraceTimeline(StaticFallback, widgets.VBox):
    """A call selector, the selected call's instructions, and an overview; ``follow()`` keeps adding
    events as they are recorded; ``retrace`` (a function returning events) backs the "trace it" button."""

    def __init__(self, events: Iterable[TraceEvent] = (), *, live: bool = False, max_events: int = 5000,
                 title: str = "Trace timeline", pump: UpdatePump | None = None,
                 retrace: Retrace | None = None, **kwargs: Any) -> None:
        self.events: list[TraceEvent] = []
        self.calls: list[TraceCall] = []
        self.compiles: list[TraceEvent] = []
        self.selected: int | None = None  # index into self.calls
        self.max_events = max_events
        self.title = title
        self.pump = pump or default_pump()
        self.retrace = retrace
        self.problem: str | None = None  # why tracing the call again failed
        self._buffer: list[TraceEvent] = []
        self._buffer_lock = threading.Lock()
        self._listener: Any = None
        self._drawing = False  # the picker's own changes while redrawing are not the user's choice
        self.header = widgets.HTML(layout=widgets.Layout(width="100%"))
        self.picker = widgets.Dropdown(description="call", options=[], layout=widgets.Layout(width="520px"))
        self.picker.observe(lambda change: self.select(change["new"]), names="value")
        self.retrace_button = widgets.Button(description="Trace the last call again", icon="play",
                                             tooltip="run the call once more with tracing on and draw it",
                                             layout=widgets.Layout(width="auto"))
        self.retrace_button.on_click(lambda _b: self.trace_again())
        self.call_figure = _figure(200, ["call"])
        self.call_figure.add_traces([_bar(name, color) for mode, name, color in MODES if mode != "compile"])
        self.overview = _figure(230, ["compiler", "calls"])
        self.overview.add_traces([_bar("calls", CALL_COLOR), _bar("compile", COLORS["compile"])])
        self.overview.data[0].on_click(lambda _trace, points, _state: self._clicked(points))
        full = widgets.Layout(width="100%")
        self.empty = widgets.HBox([self.retrace_button], layout=widgets.Layout(flex_flow="row wrap"))
        self.drawn = widgets.VBox([self.picker, widgets.VBox([self.call_figure], layout=full),
                                   widgets.HTML(theme.page(theme.note("Overview: every call (click one to "
                                                                      "select it) and the compiler"),
                                                           "msvm-timeline-overview")),
                                   widgets.VBox([self.overview], layout=full)], layout=full)
        super().__init__(children=[self.header, self.empty, self.drawn, FitFigures()],
                         layout=widgets.Layout(width="100%"), **kwargs)
        self.add_class("msvm-timeline")
        self.add_class(FIT_CLASS)
        if live:
            self.follow()
        self.add_events(events)

    # -- data in ----------------------------------------------------------------------------------------
    def add_events(self, events: Iterable[TraceEvent]) -> None:
        """Append events and redraw (another thread's events go through ``follow`` and the pump)."""
        new = list(events)
        with self.pump.applying():
            self.events.extend(new)
            if len(self.events) > self.max_events:
                del self.events[: len(self.events) - self.max_events]
            following = self.selected is None or self.selected == len(self.calls) - 1
            self.calls = split_calls(self.events)
            self.compiles = [e for e in self.events if e.mode == "compile"]
            if not self.calls:
                self.selected = None
            elif following or self.selected >= len(self.calls):
                self.selected = len(self.calls) - 1  # keep showing the latest call unless one was picked
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
            view.pump.submit(view, "events", view._drain_buffer)

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

    def trace_again(self) -> None:
        """Run the call again with tracing on (the button) and draw its events."""
        if self.retrace is None:
            return
        try:
            events = self.retrace()
        except MsvmError as exc:
            self.problem = f"tracing the call again failed: {str(exc).splitlines()[0]}"
            events = []
        self.add_events(events)

    # -- choosing a call --------------------------------------------------------------------------------
    def select(self, index: int | None) -> None:
        """Show call ``index`` (of ``self.calls``) in the per-call figure."""
        if self._drawing or index is None or not 0 <= index < len(self.calls) or index == self.selected:
            return
        with self.pump.applying():
            self.selected = index
            self._redraw()

    def _clicked(self, points: Any) -> None:
        if points.point_inds:
            self.select(points.point_inds[0])

    def call_label(self, index: int) -> str:
        call = self.calls[index]
        native = sum(1 for e in call.events if e.mode == "jit")
        parts = [f"call {index + 1} of {len(self.calls)}: {call.function}",
                 f"{len(call.events)} instructions"]
        if native:
            parts.append(f"{native} native")
        if not call.returned:
            parts.append("no RET (raised, or the trace stopped)")
        return ", ".join(parts) + f" · {theme.duration(call.dur_ns)}"

    # -- drawing ----------------------------------------------------------------------------------------
    def _redraw(self) -> None:
        options = [(self.call_label(i), i) for i in range(len(self.calls))]
        self._drawing = True
        try:
            if list(self.picker.options) != options:
                self.picker.options = options
            self.picker.value = self.selected
        finally:
            self._drawing = False
        self._draw_call()
        self._draw_overview()
        head = theme.title(self.title) + theme.note(self._caption())
        if self.problem:
            head += theme.note(self.problem, "msvm-note msvm-bad")
        self.header.value = theme.page(head, "msvm-timeline-head")
        has_events = bool(self.events)
        self.empty.layout.display = "none" if has_events or self.retrace is None else "flex"
        self.drawn.layout.display = "flex" if has_events else "none"

    def _draw_call(self) -> None:
        call = self.calls[self.selected] if self.selected is not None else None
        events = call.events if call is not None else []
        scale, xaxis = axis("since the call started", call.dur_ns if call is not None else 0)
        origin = call.start_ns if call is not None else 0
        with self.call_figure.batch_update():
            for trace, (mode, _label, _color) in zip(self.call_figure.data, MODES):
                mine = [e for e in events if e.mode == mode]
                trace.base = [(e.start_ns - origin) / scale for e in mine]
                trace.x = [e.dur_ns / scale for e in mine]
                trace.y = ["call"] * len(mine)
                trace.text = [label(e) for e in mine]
                trace.customdata = [event_hover(e, origin, "into the call") for e in mine]
            self.call_figure.layout.xaxis = xaxis

    def _draw_overview(self) -> None:
        origin = min((e.start_ns for e in self.events), default=0)
        span = max((e.start_ns + e.dur_ns for e in self.events), default=0) - origin
        scale, xaxis = axis("since the first event", span)
        calls, compiles = self.overview.data
        with self.overview.batch_update():
            calls.base = [(c.start_ns - origin) / scale for c in self.calls]
            calls.x = [c.dur_ns / scale for c in self.calls]
            calls.y = ["calls"] * len(self.calls)
            calls.text = [str(i + 1) for i in range(len(self.calls))]
            calls.customdata = [[self.call_label(i), "click to show its instructions",
                                 theme.exact_duration(c.dur_ns),
                                 f"{theme.exact_duration(c.start_ns - origin)} after the first event"]
                                for i, c in enumerate(self.calls)]
            calls.marker.color = [SELECTED_COLOR if i == self.selected else CALL_COLOR
                                  for i in range(len(self.calls))]
            compiles.base = [(e.start_ns - origin) / scale for e in self.compiles]
            compiles.x = [e.dur_ns / scale for e in self.compiles]
            compiles.y = ["compiler"] * len(self.compiles)
            compiles.text = [e.op or "" for e in self.compiles]
            compiles.customdata = [event_hover(e, origin, "after the first event") for e in self.compiles]
            self.overview.layout.xaxis = xaxis

    def _caption(self) -> str:
        if not self.events:
            if self._listener is not None:
                state = "on" if TRACE.enabled else "off: ms.vm.enable_bc_trace() turns it on"
                return f"no trace events yet (tracing is {state})"
            return NO_TRACE
        counts = {label_: sum(1 for e in self.events if e.mode == mode) for mode, label_, _ in MODES}
        parts = ", ".join(f"{n} {label_}" for label_, n in counts.items() if n)
        origin = min(e.start_ns for e in self.events)
        span = max(e.start_ns + e.dur_ns for e in self.events) - origin
        calls = f"{len(self.calls)} call{'s' * (len(self.calls) != 1)}"
        return f"{len(self.events)} events ({parts}) in {calls}, over {theme.duration(span)}"

    def summary_rows(self) -> list[list[object]]:
        """Per op: count, total and median time (the core's ``summarize``), slowest first."""
        return [[op, s["count"], theme.duration(s["total_us"] * 1e3), theme.duration(s["median_us"] * 1e3)]
                for op, s in summarize(self.events).items()]

    def static_html(self) -> str:
        body = theme.title(self.title) + theme.note(self._caption())
        if self.events:
            body += theme.html_table(SUMMARY_HEADERS, self.summary_rows())
        return theme.page(body, "msvm-timeline-static")

    def static_text(self) -> str:
        text = f"{self.title}: {self._caption()}"
        if self.events:
            text += "\n" + theme.text_table(SUMMARY_HEADERS, self.summary_rows())
        return text
