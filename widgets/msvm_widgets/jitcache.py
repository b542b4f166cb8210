"""JITCacheView: the JIT's cache entries; selecting one shows its bytecode region, LLVM IR or assembly.

Why only ``ms.vm`` calls: entries come from ``jit_info()`` and listings from ``disassemble(entry,
kind)``; the view lays them out, marks fallbacks in red with their reason, and says so plainly when
reading the cache fails. It follows the JIT's events through the update pump, so it never lists
entries that ``ms.vm.reset()`` dropped: it says they are gone instead.
"""

from __future__ import annotations

import weakref
from typing import Any

import ipywidgets as widgets

from msvm import vm

from . import theme
from .fallback import StaticFallback
from .pump import COSTLY_EVERY, UpdatePump, default_pump

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

    def __init__(self, function: str | None = None, *, live: bool = True, pump: UpdatePump | None = None,
                 **kwargs: Any) -> None:
        self.function = function
        self.pump = pump or default_pump()
        self.entries: list[dict] = []
        self.others = 0  # entries of other functions, for a view of one function
        self.gone: list[str] = []  # entries this view listed that a reset dropped
        self.unavailable: str | None = None
        self.rate: float | None = None
        self.function_rate: float | None = None
        self.avg_ms: float | None = None
        self._shown: tuple | None = None  # what the code pane shows: (name, kind, status)
        self._callback: Any = None
        self.table = widgets.HTML(layout=widgets.Layout(width="100%"))
        self.picker = widgets.Dropdown(description="entry", options=[], layout=widgets.Layout(width="460px"))
        self.kind = widgets.ToggleButtons(options=KINDS, value="bytecode", style={"button_width": "90px"})
        self.code = widgets.HTML(layout=widgets.Layout(width="100%"))
        refresh = widgets.Button(description="Refresh", layout=widgets.Layout(width="auto"))
        refresh.on_click(lambda _b: self.refresh())
        self.picker.observe(lambda _c: self.show_code(), names="value")
        self.kind.observe(lambda _c: self.show_code(), names="value")
        controls = widgets.HBox([self.picker, self.kind, refresh],
                                layout=widgets.Layout(flex_flow="row wrap"))
        super().__init__(children=[self.table, controls, self.code], layout=widgets.Layout(width="100%"),
                         **kwargs)
        self.add_class("msvm-jit-cache")
        self.refresh()
        if live:
            self.follow()

    def follow(self) -> None:
        """Redraw (through the pump) whenever the JIT reports an event, a reset included."""
        if self._callback is not None:
            return
        ref = weakref.ref(self)
        monitor = vm.jit_monitor()

        def callback(event: dict) -> None:
            view = ref()
            if view is None:
                monitor.unsubscribe(callback)
                return
            if view.concerns(event):
                view.pump.submit(view.table, "refresh", view.refresh, every=COSTLY_EVERY)

        self._callback = callback
        monitor.subscribe(callback)

    def concerns(self, event: dict) -> bool:
        """Whether a JIT event can change what this view lists (another function's compiles cannot)."""
        if self.function is None or event["kind"] == "reset":
            return True
        return event.get("function") == self.function or any(e.get("name") == event.get("entry")
                                                              for e in self.entries)

    def close(self) -> None:
        if self._callback is not None:
            vm.jit_monitor().unsubscribe(self._callback)
            self._callback = None
        super().close()

    def refresh(self) -> None:
        """Re-read ``ms.vm.jit_info()`` and redraw; entries listed before and dropped since are named gone."""
        with self.pump.applying():
            self.unavailable = None
            entries: list[dict] = []
            try:
                entries = list(vm.jit_info())
                monitor = vm.jit_monitor()
                self.rate, self.avg_ms = monitor.hit_rate(), vm.get_avg_compile_time()
                self.function_rate = monitor.hit_rate(self.function) if self.function else None
            except Exception as exc:  # the JIT's failure is shown in the view, not raised into the cell
                self.unavailable = f"JIT cache unavailable: {type(exc).__name__}: {exc}"
            listed = [str(e.get("name")) for e in self.entries]
            self.entries = [e for e in entries if self.function is None or e.get("function") == self.function]
            self.others = len(entries) - len(self.entries)
            names = [str(e.get("name")) for e in self.entries]
            if not self.unavailable:
                self.gone = [n for n in dict.fromkeys(self.gone + listed) if n not in names]
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
        with self.pump.applying():
            name = self.picker.value
            entry = self.entry(name) if name is not None else None
            if self.unavailable or entry is None:
                self._shown = None
                self.code.value = ""
                return
            shown = (name, self.kind.value, entry.get("status"), entry.get("tier"))
            if shown == self._shown:
                return  # a listing costs milliseconds: redraw it only when it would change
            self._shown = shown
            try:
                text = self.listing(name, self.kind.value)
            except Exception as exc:  # an entry evicted meanwhile, or a listing the JIT did not keep
                text = f"({self.kind.value} not available for {name}: {exc})"
            detail = f"{name}: {entry.get('status', '?')}"
            for key, label in (("symbols", "symbols"), ("bounds", "arena bounds"), ("phase_ms", "phases")):
                if entry.get(key):
                    detail += f"; {label}: {theme.cell_text(entry[key], key)}"
            if entry.get("code_from"):
                detail += f"; shares the machine code of {entry['code_from']} (another bucket: compiled once)"
            if entry.get("reason"):
                detail += f"; reason: {entry['reason']}"
            self.code.value = theme.page(theme.note(detail) + theme.code_block(text), "msvm-jit-code")

    def summary(self) -> str:
        if self.unavailable:
            return self.unavailable
        scope = f" of {self.function}" if self.function else ""
        rate = (f"hit rate of {self.function} {theme.cell_text(self.function_rate, 'rate')}, all functions "
                if self.function else "hit rate ")
        average = theme.cell_text(self.avg_ms, "compile_ms") if self.avg_ms else "none compiled yet"
        others = ""
        if self.function and not self.entries and self.others:  # say where the entries one expects are
            others = f" ({self.others} of other functions: %msvm info lists them)"
        return (f"{len(self.entries)} cache entr{'y' if len(self.entries) == 1 else 'ies'}{scope}{others}; "
                f"{rate}{theme.cell_text(self.rate, 'rate')}; average compile time {average}")

    def gone_note(self) -> str | None:
        """What the view listed before ``ms.vm.reset()`` (or an eviction) and no longer exists."""
        if not self.gone:
            return None
        shown = ", ".join(self.gone[:3]) + (f" and {len(self.gone) - 3} more" if len(self.gone) > 3 else "")
        return (f"{len(self.gone)} entr{'y' if len(self.gone) == 1 else 'ies'} shown here before "
                f"{'is' if len(self.gone) == 1 else 'are'} gone (ms.vm.reset() or an eviction): {shown}")

    def _table_html(self) -> str:
        body = theme.title("JIT cache") + theme.note(self.summary())
        gone = self.gone_note()
        if gone:
            body += theme.note(gone, "msvm-note msvm-reset")
        if self.entries:
            columns = theme.record_columns(self.entries, COLUMNS)
            body += theme.html_table(columns, theme.record_rows(self.entries, columns),
                                     [status_class(e) for e in self.entries])
        return theme.page(body, "msvm-jit-cache-table")

    def static_html(self) -> str:
        return self._table_html()

    def static_text(self) -> str:
        text = f"JIT cache: {self.summary()}"
        gone = self.gone_note()
        if gone:
            text += f"\n{gone}"
        if self.entries:
            columns = theme.record_columns(self.entries, COLUMNS)
            marks = ["!" if e.get("status") == "fallback" else "" for e in self.entries]
            text += "\n" + theme.text_table(columns, theme.record_rows(self.entries, columns), marks)
        return text
