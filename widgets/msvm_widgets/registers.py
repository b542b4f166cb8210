"""RegisterView: the register file R0…Rn of a call, with the metadata of DESIGN §8.

Why a view of ``RegisterState`` and nothing else: the interpreter's stepping ``Execution`` already
knows each register's concrete and symbolic shape, dtype, device, strides, data address, size and
producer; this widget only lays them out (and updates while the Debugger steps). The ``variable``
column names the Python variable a register holds (``R0  x``, ``R7  q``): the parameter a TENSOR_CREATE
or SCALAR_ARG binds, else the name the frontend recorded in the function's register-names table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as widgets

from msvm.errors import format_address
from msvm.interpreter import Execution, RegisterState

from . import theme
from .fallback import StaticFallback

HEADERS = ("reg", "variable", "kind", "shape / value", "symbolic", "dtype", "device", "strides", "address",
           "nbytes", "producer", "by")


def register_names(execution: Execution) -> dict[int, str]:
    """Register → the Python variable it holds: the parameter it binds, else the frontend's name for it."""
    return execution.exe.info.function.variable_names()


def register_row(reg: RegisterState, names: Mapping[int, str] | None = None) -> list[str]:
    """One table row: the variable held, shapes and strides as lists, the data address in hex, the
    producer as an address."""
    if reg.kind == "tensor":
        shown = str(list(reg.shape or ()))
    elif reg.kind == "empty":
        shown = "-"
    else:
        shown = repr(reg.value)
    return [
        reg.name,
        (names or {}).get(reg.index, ""),
        reg.kind,
        shown,
        reg.symbolic or "",
        reg.dtype or "",
        reg.device or "",
        str(list(reg.strides)) if reg.strides is not None else "",
        f"0x{reg.data_address:x}" if reg.data_address is not None else "",
        str(reg.nbytes) if reg.nbytes is not None else "",
        format_address(reg.producer) if reg.producer is not None and reg.kind != "empty" else "",
        {"interpreter": "interp"}.get(reg.produced_by or "", reg.produced_by or ""),
    ]


class RegisterView(StaticFallback, widgets.HTML):
    """A table of registers; ``update()`` replaces them (the register just written is highlighted)."""

    def __init__(self, registers: Sequence[RegisterState] = (), *, caption: str = "Registers",
                 written: int | None = None, names: Mapping[int, str] | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("layout", widgets.Layout(width="100%"))
        super().__init__(**kwargs)
        self.add_class("msvm-register-view")
        self.registers: list[RegisterState] = []
        self.names = dict(names or {})
        self.caption = caption
        self.written: int | None = None
        self.update(registers, written=written)

    @classmethod
    def from_execution(cls, execution: Execution, **kwargs: Any) -> RegisterView:
        """The registers of a (paused or finished) Execution, with the parameters' names."""
        return cls(execution.registers, names=register_names(execution), **kwargs)

    def update(self, registers: Sequence[RegisterState], *, written: int | None = None,
               caption: str | None = None) -> None:
        """Show ``registers``; ``written`` is the index of the register the last step wrote."""
        self.registers = list(registers)
        self.written = written
        if caption is not None:
            self.caption = caption
        self.value = self.static_html()

    def rows(self) -> list[list[str]]:
        return [register_row(r, self.names) for r in self.registers]

    def static_html(self) -> str:
        if not self.registers:
            return theme.page(theme.title(self.caption) + theme.note("no registers"), "msvm-registers")
        classes = ["msvm-written" if r.index == self.written else "msvm-muted" if r.kind == "empty" else ""
                   for r in self.registers]
        body = theme.title(self.caption) + theme.html_table(HEADERS, self.rows(), classes)
        return theme.page(body, "msvm-registers")

    def static_text(self) -> str:
        markers = ["*" if r.index == self.written else "" for r in self.registers]
        return f"{self.caption}\n" + theme.text_table(HEADERS, self.rows(), markers)
