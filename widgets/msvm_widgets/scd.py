"""SCDView: Shape Convergence Degree per tensor and per region, against the threshold, with reasons.

Why a view of ``ms.vm.scd_analysis`` only: the JIT decides what is anchored and why; this widget shows
each tensor's SCD with the reason for every dimension that is not anchored, and each region's SCD and
verdict against the compile threshold, so "why didn't my function JIT" has an answer on screen.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from msvm import vm
from msvm.errors import format_address

from . import theme
from .fallback import StaticFallback

TENSOR_HEADERS = ("tensor", "defined at", "by", "shape", "anchored", "SCD", "why not anchored")
REGION_HEADERS = ("region", "block", "addresses", "op calls", "SCD", "verdict", "reason")


def _short(address: int) -> str:
    return format_address(address).removeprefix("msvm://bc/")


def tensor_row(t: dict) -> list[str]:
    """A tensor's dims (with concrete sizes where known), anchored count, SCD, unanchored dims' reasons."""
    values = t.get("values") or [None] * len(t["dims"])
    dims = [f"{d}={v}" if v is not None and not str(d).lstrip("-").isdigit() else str(d)
            for d, v in zip(t["dims"], values)]
    why = [f"dim {axis} ({t['dims'][axis]}): {reason}"
           for axis, (ok, reason) in enumerate(zip(t["anchored"], t["reasons"])) if not ok]
    return [t["name"], format_address(t["address"]), t["opcode"], f"{t['dtype']}[{', '.join(dims)}]",
            f"{sum(t['anchored'])}/{len(t['dims'])}", f"{t['scd']:.2f}", "; ".join(why)]


def region_row(r: dict) -> list[str]:
    return [str(r["id"]), f"bb{r['block']}", f"{_short(r['start'])}..{_short(r['end'])}", str(r["n_calls"]),
            f"{r['scd']:.2f}", "compiles" if r["compilable"] else "interpreted", r["reason"]]


class SCDView(StaticFallback, widgets.HTML):
    """The SCD analysis of one call: tensors (SCD, non-anchored dims and why) and regions vs the threshold."""

    def __init__(self, analysis: Any = None, *, unavailable: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_class("msvm-scd-view")
        self.analysis = analysis
        self.data: dict | None = analysis.as_dict() if hasattr(analysis, "as_dict") else analysis
        self.unavailable = unavailable
        self.value = self.static_html()

    @classmethod
    def for_call(cls, fn: Any, *args: Any) -> SCDView:
        """Ask the JIT for ``fn``'s SCD on these arguments (the view says why when it cannot)."""
        try:
            return cls(vm.scd_analysis(fn, *args))
        except Exception as exc:  # the analysis is the JIT's; the view reports its failure instead of dying
            return cls(unavailable=f"SCD analysis failed: {type(exc).__name__}: {exc}")

    @property
    def threshold(self) -> float | None:
        return None if self.data is None else self.data["threshold"]

    def tensor_rows(self) -> list[list[str]]:
        return [tensor_row(t) for t in (self.data or {}).get("tensors", [])]

    def region_rows(self) -> list[list[str]]:
        return [region_row(r) for r in (self.data or {}).get("regions", [])]

    def _below(self, scd: float) -> bool:
        return self.threshold is not None and scd < self.threshold

    def _caption(self) -> str:
        if self.unavailable:
            return self.unavailable
        if self.data is None:
            return "no analysis"
        return (f"{self.data['function']}: a region compiles when its SCD ≥ {self.data['threshold']:.2f} "
                f"and a cache key has run {self.data['hot_threshold']} times")

    def _warnings(self) -> list[str]:
        data = self.data or {}
        splits = [f"split at {_short(s['address'])} ({s['opcode']}): {s['reason']}"
                  for s in data.get("splits", [])]
        notes = [n["message"] for n in (*data.get("specialised", []), *data.get("annotations", []))]
        return notes + splits

    def static_html(self) -> str:
        body = theme.title("Shape convergence (SCD)") + theme.note(self._caption())
        if self.data is not None:
            tensors = self.data["tensors"]
            body += theme.html_table(TENSOR_HEADERS, self.tensor_rows(),
                                     ["msvm-bad" if self._below(t["scd"]) else "" for t in tensors])
            regions = self.data["regions"]
            body += theme.html_table(REGION_HEADERS, self.region_rows(),
                                     ["" if r["compilable"] else "msvm-bad" for r in regions])
            body += "".join(theme.note(w, "msvm-note msvm-bad") for w in self._warnings())
        return theme.page(body, "msvm-scd")

    def static_text(self) -> str:
        parts = [f"Shape convergence (SCD): {self._caption()}"]
        if self.data is not None:
            marks = ["<" if self._below(t["scd"]) else "" for t in self.data["tensors"]]
            parts.append(theme.text_table(TENSOR_HEADERS, self.tensor_rows(), marks))
            parts.append(theme.text_table(REGION_HEADERS, self.region_rows()))
            parts += [f"! {w}" for w in self._warnings()]
        return "\n".join(parts)
