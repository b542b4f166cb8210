"""Debugger: step through a call's bytecode with the current instruction highlighted, registers beside it.

Why a thin shell over the interpreter's ``Execution``: stepping, stepping over a region, continuing and
breakpoints by address are the core's; the widget lays out the listing and the RegisterView and turns
button clicks (which arrive on the kernel's thread) into those calls.
"""

from __future__ import annotations

import dataclasses
import linecache
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets

from msvm.bytecode.text import format_instruction
from msvm.errors import MsvmError, format_address
from msvm.interpreter import Execution

from . import theme
from .calls import describe_value
from .fallback import StaticFallback
from .registers import RegisterView, register_names

LISTING_HEADERS = ("", "address", "instruction", "source")


class Debugger(StaticFallback, widgets.VBox):
    """Step, step over region, continue, breakpoints on an Execution; ``restart()`` starts the call over."""

    def __init__(self, execution: Execution | Callable[[], Execution], **kwargs: Any) -> None:
        given = isinstance(execution, Execution)
        self._factory: Callable[[], Execution] | None = None if given else execution
        self.execution: Execution = execution if given else execution()
        self.breakpoints: set[int] = set()
        self.error: str | None = None
        self.written: int | None = None
        self.listing = widgets.HTML(layout=widgets.Layout(margin="0 16px 0 0"))
        self.listing.add_class("msvm-listing")
        self.registers = RegisterView(caption="Registers", names=register_names(self.execution))
        self.status = widgets.HTML()
        buttons = [("Step", self.step, "step one instruction"),
                   ("Step over region", self.step_over_region, "run to the next block boundary"),
                   ("Continue", self.continue_, "run to the next breakpoint or the end"),
                   ("Restart", self.restart, "start the call over (keeps breakpoints)")]
        self.buttons: dict[str, widgets.Button] = {}
        for label, action, tip in buttons:
            button = widgets.Button(description=label, tooltip=tip, layout=widgets.Layout(width="auto"))
            button.on_click(lambda _b, act=action: act())
            self.buttons[label] = button
        self.buttons["Restart"].disabled = self._factory is None
        self.address_picker = widgets.Dropdown(options=self._address_options(), description="breakpoint",
                                               layout=widgets.Layout(width="340px"))
        toggle = widgets.Button(description="Toggle", tooltip="set or clear a breakpoint at this address",
                                layout=widgets.Layout(width="auto"))
        toggle.on_click(lambda _b: self.toggle_breakpoint(self.address_picker.value))
        controls = widgets.HBox([*self.buttons.values(), self.address_picker, toggle],
                                layout=widgets.Layout(flex_flow="row wrap"))
        body = widgets.HBox([self.listing, self.registers],
                            layout=widgets.Layout(flex_flow="row wrap", align_items="flex-start"))
        super().__init__(children=[controls, self.status, body], **kwargs)
        self.add_class("msvm-debugger")
        self.refresh()

    @classmethod
    def for_call(cls, fn: Any, *args: Any) -> Debugger:
        """A debugger on ``fn(*args)`` for any object with ``debug(*args)`` (a JitFunction, an Executable)."""
        return cls(lambda: fn.debug(*args))

    # -- the listing ------------------------------------------------------------------------------------
    def instructions(self) -> list[tuple[int, str, str]]:
        """(address, instruction text, source line) for the function being debugged."""
        exe = self.execution.exe
        out = []
        for address, fn, _bi, _ii, ins in exe.program.module.addresses():
            if fn.name != exe.name:
                continue
            source = linecache.getline(ins.loc.file, ins.loc.line).strip() if ins.loc is not None else ""
            text = format_instruction(dataclasses.replace(ins, loc=None))
            out.append((address, text, source))
        return out

    def _address_options(self) -> list[tuple[str, int]]:
        return [(f"{format_address(a)}  {text[:40]}", a) for a, text, _ in self.instructions()]

    # -- actions ----------------------------------------------------------------------------------------
    def step(self) -> None:
        self._do(lambda ex: ex.step())

    def step_over_region(self) -> None:
        self._do(lambda ex: ex.step_over_region())

    def continue_(self) -> None:
        self._do(lambda ex: ex.continue_())

    def restart(self) -> None:
        """A fresh Execution of the same call (needs a factory: ``Debugger.for_call``)."""
        if self._factory is None:
            return
        self.execution = self._factory()
        for address in self.breakpoints:
            self.execution.add_breakpoint(address)
        self.error, self.written = None, None
        self.refresh()

    def toggle_breakpoint(self, address: int) -> None:
        if address in self.breakpoints:
            self.breakpoints.discard(address)
            self.execution.breakpoints.discard(address)
        else:
            self.execution.add_breakpoint(address)
            self.breakpoints.add(address)
        self.refresh()

    def _do(self, action: Callable[[Execution], Any]) -> None:
        if self.execution.finished or self.error is not None:
            return
        try:
            action(self.execution)
        except MsvmError as exc:
            self.error = str(exc)
        history = self.execution.history
        writes = self.execution.exe.by_address[history[-1]].ins.writes() if history else []
        self.written = writes[0] if writes else None  # what the last instruction executed wrote
        self.refresh()

    # -- drawing ----------------------------------------------------------------------------------------
    def refresh(self) -> None:
        self.listing.value = self._listing_html()
        self.registers.update(self.execution.registers, written=self.written)
        self.status.value = theme.page(theme.note(self.state(), self._state_css()), "msvm-debugger-status")
        for label in ("Step", "Step over region", "Continue"):
            self.buttons[label].disabled = self.execution.finished or self.error is not None

    def state(self) -> str:
        ex = self.execution
        if self.error is not None:
            return f"stopped by an error: {self.error}"
        if ex.finished:
            return f"finished after {len(ex.history)} instructions; result {describe_value(ex.result)}"
        ins = ex.current_instruction
        name = ins.name + (f" {ins['op']}" if ins is not None and ins.name == "OP_CALL" else "")
        where = " (breakpoint)" if ex.pc in self.breakpoints and ex.history else ""
        return f"paused at {format_address(ex.pc)} {name}{where}; {len(ex.history)} instructions executed"

    def _state_css(self) -> str:
        return "msvm-bad" if self.error is not None else "msvm-note"

    def _rows(self) -> tuple[list[list[str]], list[str]]:
        rows, classes = [], []
        pc = self.execution.pc
        for address, text, source in self.instructions():
            mark = ("▶" if address == pc else "") + ("●" if address in self.breakpoints else "")
            rows.append([mark, format_address(address), text, source])
            classes.append("msvm-current" if address == pc else "")
        return rows, classes

    def _listing_html(self) -> str:
        rows, classes = self._rows()
        title = f"{self.execution.exe.name}: bytecode"
        body = theme.title(title) + theme.html_table(LISTING_HEADERS, rows, classes)
        return theme.page(body, "msvm-listing-html")

    def static_html(self) -> str:
        return theme.page(theme.note(self.state()), "msvm-debugger-status") + self._listing_html() + \
            self.registers.static_html()

    def static_text(self) -> str:
        rows, _classes = self._rows()
        listing = theme.text_table(LISTING_HEADERS[1:], [r[1:] for r in rows], [r[0] for r in rows])
        return f"{self.state()}\n{listing}\n{self.registers.static_text()}"

