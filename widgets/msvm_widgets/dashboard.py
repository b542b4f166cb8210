"""Dashboard: one call's registers, SCD, timeline, debugger, JIT cache and monitor, and bytecode, in tabs.

Why per call: ``%%msvm`` shows what the cell's last msvm call did. Registers come from re-running that
call in the stepping interpreter (only here, when a dashboard is built), so the fast path is never
slowed down to capture them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import ipywidgets as widgets

from msvm.errors import MsvmError, format_address
from msvm.observe.trace import TraceEvent

from . import theme
from .calls import CallRecord, describe_value
from .debugger import Debugger
from .fallback import StaticFallback
from .jitcache import JITCacheView
from .monitor import JITMonitor
from .registers import RegisterView
from .scd import SCDView
from .timeline import TraceTimeline

TABS = ("Registers", "SCD", "Timeline", "Debugger", "JIT cache", "JIT monitor", "Bytecode")


class Dashboard(StaticFallback, widgets.VBox):
    """Tabs for one call; ``debug=True`` opens on the Debugger (of ``debug_call``, default: the same call)."""

    def __init__(self, call: CallRecord, *, events: Iterable[TraceEvent] = (), calls: int = 1,
                 debug: bool = False, debug_call: CallRecord | None = None, **kwargs: Any) -> None:
        self.call = call
        self.calls = calls
        execution = call.execution()
        self.error: str | None = None
        try:
            execution.run()
        except MsvmError as exc:
            self.error = str(exc)
        where = "at RET" if execution.finished else f"stopped at {format_address(execution.pc)} by an error"
        caption = f"Registers of {call.describe()} {where}"
        self.registers = RegisterView.from_execution(execution, caption=caption)
        self.result = execution.result
        self.scd = SCDView.for_call(call.fn, *call.positional())
        self.timeline = TraceTimeline(events, title=f"Trace of the cell ({call.name})", retrace=call.traced)
        debugged = debug_call or call
        self.debugger = Debugger.for_call(debugged.fn, *debugged.positional())
        self.cache = JITCacheView(function=execution.exe.name)
        self.monitor = JITMonitor()
        self.bytecode_text = str(execution.exe.program.module)
        bytecode = widgets.HTML(theme.page(theme.code_block(self.bytecode_text), "msvm-bytecode"))
        head = theme.note(self.caption(), self._caption_css())
        self.header = widgets.HTML(theme.page(head, "msvm-dashboard-head"))
        self.tabs = widgets.Tab(children=[self.registers, self.scd, self.timeline, self.debugger, self.cache,
                                          self.monitor, bytecode], titles=list(TABS),
                                layout=widgets.Layout(width="100%"))
        self.tabs.selected_index = TABS.index("Debugger") if debug else 0
        super().__init__(children=[self.header, self.tabs], layout=widgets.Layout(width="100%"), **kwargs)
        self.add_class("msvm-dashboard")

    @classmethod
    def for_call(cls, fn: Any, *args: Any, events: Iterable[TraceEvent] = (), **kwargs: Any) -> Dashboard:
        """A dashboard of ``fn(*args, **kwargs)`` outside the magic (``fn``: a JitFunction)."""
        return cls(CallRecord(fn, args, kwargs), events=events)

    def caption(self) -> str:
        text = f"msvm: {self.call.describe()}"
        if self.error is not None:
            return f"{text} failed: {self.error.splitlines()[0]}"
        more = f" (last of {self.calls} msvm calls in this cell)" if self.calls > 1 else ""
        return f"{text} → {describe_value(self.result)}{more}"

    def _caption_css(self) -> str:
        return "msvm-bad" if self.error is not None else "msvm-note"

    def static_html(self) -> str:
        return (theme.page(theme.note(self.caption()), "msvm-dashboard-head") + self.registers.static_html()
                + self.scd.static_html() + self.timeline.static_html() + self.cache.static_html())

    def static_text(self) -> str:
        return "\n\n".join([self.caption(), self.registers.static_text(), self.scd.static_text(),
                            self.timeline.static_text(), self.cache.static_text()])
