"""Layout nodes that are not strided views: padding and gathers (take, embedding).

Both compute their source index in the loop body and read through it, so they fuse with their
producers and consumers like any elementwise node. Out-of-range reads never happen: padded
positions read a clamped index and select the fill value (or reflect/replicate the index, numpy's
``reflect``/``edge``), and a gather index outside the table raises the kernel's error flag (the
launcher reports it and the region runs interpreted, which raises the user-facing IndexError)
while reading a safe row.
"""

from __future__ import annotations

from collections.abc import Sequence

from llvmlite import ir

from . import dtypes
from .dims import floormod
from .dtypes import I1, I64, cast
from .emit import FnBuilder
from .nodes import Expr
from .views import Shape


class Pad(Expr):
    """torch ``F.pad`` on the last dims: ``pads[axis] = (before, after)``; mode constant/reflect/replicate."""

    def __init__(self, x: Expr, pads: Sequence[tuple[int, int]], mode: str, value: float) -> None:
        self.x, self.pads, self.mode, self.fill = x, tuple(pads), mode, value
        self.dtype = x.dtype
        self.shape: Shape = tuple(d + lo + hi for d, (lo, hi) in zip(x.shape, self.pads))

    def children(self) -> tuple[Expr, ...]:
        return (self.x,)

    def rebuild(self, children: Sequence[Expr]) -> Expr:
        return Pad(children[0], self.pads, self.mode, self.fill)

    def emit(self, fb: FnBuilder, idx: Sequence[ir.Value]) -> ir.Value:
        b = fb.b
        zero = ir.Constant(I64, 0)
        src, inside = [], ir.Constant(I1, 1)
        for i, (lo, hi), extent in zip(idx, self.pads, self.x.shape):
            if lo == hi == 0:
                src.append(i)
                continue
            p = b.sub(i, ir.Constant(I64, lo))
            n = fb.dim(extent)
            last = b.sub(n, ir.Constant(I64, 1))
            if self.mode == "constant":
                ok = b.and_(b.icmp_signed(">=", p, zero), b.icmp_signed("<", p, n))
                inside = b.and_(inside, ok)
                src.append(b.select(ok, p, zero))
            elif self.mode == "replicate":
                p = b.select(b.icmp_signed("<", p, zero), zero, p)
                src.append(b.select(b.icmp_signed(">", p, last), last, p))
            else:  # reflect: the periodic extension of the mirrored row (period 2·(n−1))
                period = b.mul(last, ir.Constant(I64, 2))
                q = floormod(b, p, period)
                src.append(b.select(b.icmp_signed("<", q, n), q, b.sub(period, q)))
        value = self.x.value(fb, src)
        if self.mode == "constant":
            value = b.select(inside, value, dtypes.constant(self.dtype, self.fill))
        return value

    def label(self) -> str:
        return f"pad({self.mode})"


class Gather(Expr):
    """``table`` indexed along ``axis`` by the integer tensor ``indices`` (np.take / F.embedding)."""

    checks = True  # raises the error flag on an out-of-range index

    def __init__(self, table: Expr, indices: Expr, axis: int, negative_wraps: bool) -> None:
        self.table, self.indices, self.axis, self.wraps = table, indices, axis, negative_wraps
        self.dtype = table.dtype
        self.shape = (*table.shape[:axis], *indices.shape, *table.shape[axis + 1 :])

    def children(self) -> tuple[Expr, ...]:
        return (self.table, self.indices)

    def rebuild(self, children: Sequence[Expr]) -> Expr:
        return Gather(children[0], children[1], self.axis, self.wraps)

    def emit(self, fb: FnBuilder, idx: Sequence[ir.Value]) -> ir.Value:
        b = fb.b
        rank = len(self.indices.shape)
        a = self.axis
        i = cast(b, self.indices.value(fb, idx[a : a + rank]), self.indices.dtype, "int64")
        n = fb.dim(self.table.shape[a])
        zero = ir.Constant(I64, 0)
        if self.wraps:
            i = b.select(b.icmp_signed("<", i, zero), b.add(i, n), i)
        bad = b.or_(b.icmp_signed("<", i, zero), b.icmp_signed(">=", i, n))
        fb.fail_if(bad)
        i = b.select(bad, zero, i)
        return self.table.value(fb, [*idx[:a], i, *idx[a + rank :]])

    def label(self) -> str:
        return "gather"
