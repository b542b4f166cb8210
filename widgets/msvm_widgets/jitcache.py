"""JITCacheView: the JIT's cache entries; selecting one shows its bytecode region, LLVM IR or assembly.

Why only ``ms.vm`` calls: entries come from ``jit_info()`` and listings from ``disassemble(entry,
kind)``; the view lays them out, marks fallbacks in red with their reason, and says so plainly when
reading the cache fails.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from msvm import vm

from . import theme
from .fallback import StaticFallback

COLUMNS = ("name", "function", "region", "mode", "status", "tier", "source", "hits", "waiting", "compile_ms",
           "compile_cpu_ms",
           "interp_ms", "native_ms", "saved_ms", "code_bytes", "code_from", "planned_bytes", "naive_bytes",
           "reason")
KINDS = ("bytecode", "llvm", "llvm-opt", "asm")


def status_class(entry: dict) -> str:
    """Row style: fallbacks red, entries still queued or compiling muted."""
    status = entry.get("status")
    return "msvm-bad" if status == "fallback" else "msvm-muted" if status in ("queued", "compiling") else ""


class JITCacheView(StaticFallback, widgets.VBox):
    """The cache table (optionally one function's entries) and a code pane for the selected entry."""

    def __init__(self, function: str | None = None, **kwargs: Any) -> None:
        self.function = function
        self.entries: list[dict] = []
        self.unavailable: str | None = None
        self.rate: float | None = None
        self.avg_ms: float | None = None
        self.table = widgets.HTML()
        self.picker = widgets.Dropdown(description="entry", options=[], layout=widgets.Layout(width="460px"))
        self.kind = widgets.ToggleButtons(options=KINDS, value="bytecode", style={"button_width": "90px"})
        self.code = widgets.HTML()
        refresh = widgets.Button(description="Refresh", layout=widgets.Layout(width="auto"))
        refresh.on_click(lambda _b: self.refresh())
        self.picker.observe(lambda _c: self.show_code(), names="value")
        self.kind.observe(lambda _c: self.show_code(), names="value")
        controls = widgets.HBox([self.picker, self.kind, refresh],
                                layout=widgets.Layout(flex_flow="row wrap"))
        super().__init__(children=[self.table, controls, self.code], **kwargs)
        self.add_class("msvm-jit-cache")
        self.refresh()

    def refresh(self) -> None:
        """Re-read ``ms.vm.jit_info()`` and redraw."""
        self.unavailable = None
        entries: list[dict] = []
        try:
            entries = list(vm.jit_info())
            self.rate, self.avg_ms = vm.get_jit_hit_rate(), vm.get_avg_compile_time()
        except Exception as exc:  # the JIT's failure is shown in the view, not raised into the cell
            self.unavailable = f"JIT cache unavailable: {type(exc).__name__}: {exc}"
        self.entries = [e for e in entries if self.function is None or e.get("function") == self.function]
        names = [str(e.get("name")) for e in self.entries]
        selected = self.picker.value if self.picker.value in names else (names[0] if names else None)
        if tuple(self.picker.options) != tuple(names):
            self.picker.options = names  # selects the first entry
        self.picker.value = selected
        self.table.value = self._table_html()
        self.show_code()

    def entry(self, name: str) -> dict | None:
        return next((e for e in self.entries if str(e.get("name")) == name), None)

    def listing(self, name: str, kind: str) -> str:
        """The core's listing of an entry: its bytecode region, LLVM IR (before/after optimising) or asm."""
        return str(vm.disassemble(self.entry(name) or name, kind=kind))

    def show_code(self) -> None:
        name = self.picker.value
        if self.unavailable or name is None:
            self.code.value = ""
            return
        entry = self.entry(name) or {}
        try:
            text = self.listing(name, self.kind.value)
        except Exception as exc:  # an entry evicted meanwhile, or a listing the JIT did not keep
            text = f"({self.kind.value} not available for {name}: {exc})"
        detail = f"{name}: {entry.get('status', '?')}"
        for key, label in (("symbols", "symbols"), ("bounds", "arena bounds"), ("phase_ms", "phases (ms)")):
            if entry.get(key):
                detail += f"; {label}: {theme.cell_text(entry[key])}"
        if entry.get("code_from"):
            detail += f"; shares the machine code of {entry['code_from']} (another bucket: compiled once)"
        if entry.get("reason"):
            detail += f"; reason: {entry['reason']}"
        self.code.value = theme.page(theme.note(detail) + theme.code_block(text), "msvm-jit-code")

    def summary(self) -> str:
        if self.unavailable:
            return self.unavailable
        scope = f" of {self.function}" if self.function else ""
        return (f"{len(self.entries)} cache entr{'y' if len(self.entries) == 1 else 'ies'}{scope}; "
                f"hit rate (all functions) {theme.cell_text(self.rate)}; "
                f"average compile time {theme.cell_text(self.avg_ms)} ms")

    def _table_html(self) -> str:
        body = theme.title("JIT cache") + theme.note(self.summary())
        if self.entries:
            columns = theme.record_columns(self.entries, COLUMNS)
            body += theme.html_table(columns, theme.record_rows(self.entries, columns),
                                     [status_class(e) for e in self.entries])
        return theme.page(body, "msvm-jit-cache-table")

    def static_html(self) -> str:
        return self._table_html()

    def static_text(self) -> str:
        text = f"JIT cache: {self.summary()}"
        if self.entries:
            columns = theme.record_columns(self.entries, COLUMNS)
            marks = ["!" if e.get("status") == "fallback" else "" for e in self.entries]
            text += "\n" + theme.text_table(columns, theme.record_rows(self.entries, columns), marks)
        return text
