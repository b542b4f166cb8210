"""nn nodes computed per output element: pooling windows, direct convolution, resizes, roi_align.

Each is an expression node whose value at an output index runs a small loop (a window, a sample
grid) over its input expression — so a ReLU before a pool or after a resize fuses into the same
loop nest. Index and weight arithmetic follows the reference kernels operation for operation
(float32 source indices for nearest, the input's precision for bilinear and roi_align taps),
because a source position that rounds differently picks another pixel.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from llvmlite import ir

from ...native.irhelpers import Slot, for_range
from ...shapes import Dim
from . import dtypes
from .dtypes import F32, I64, cast, constant
from .emit import FnBuilder, accumulate
from .emit_elementwise import extreme, intrinsic_call
from .emit_linalg import ConvGeometry, window_source
from .nodes import Expr
from .views import Shape


def _i64(value: int) -> ir.Constant:
    return ir.Constant(I64, value)


def _min(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)


def _max(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed(">", x, y), x, y)


class _Unary(Expr):
    """A node over one input expression ``x`` whose other fields are plain data."""

    x: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.x,)

    def rebuild(self, children: Sequence[Expr]) -> Expr:
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__, x=children[0])
        return clone


class Pool2d(_Unary):
    """max_pool2d / avg_pool2d over NCHW ``x`` (torch's padding, dilation, ceil_mode and divisors)."""

    def __init__(
        self,
        x: Expr,
        kind: str,
        out_hw: Sequence[Dim],
        kernel: Sequence[int],
        stride: Sequence[int],
        padding: Sequence[int],
        dilation: Sequence[int],
        count_include_pad: bool = True,
        divisor: int | None = None,
    ) -> None:
        self.x, self.kind, self.dtype = x, kind, x.dtype
        self.shape = (*x.shape[:2], *out_hw)
        self.kernel, self.stride, self.padding, self.dilation = kernel, stride, padding, dilation
        self.count_include_pad, self.divisor = count_include_pad, divisor

    def emit(self, fb: FnBuilder, idx: Sequence[ir.Value]) -> ir.Value:
        b = fb.b
        n, c, oh, ow = idx
        size = self.x.shape[2:]
        fill = constant(self.dtype, float("-inf") if self.kind == "max" else 0.0)

        def step(tap: list[ir.Value], acc: list[ir.Value]) -> list[ir.Value]:
            src, inside = window_source(fb, [oh, ow], tap, self.stride, self.padding, self.dilation, size)
            v = b.select(inside, self.x.value(fb, [n, c, *src]), fill)
            if self.kind == "max":
                return [extreme(b, acc[0], v, self.dtype, True)]
            return [b.fadd(acc[0], v)]

        total = accumulate(fb, [Dim.const(k) for k in self.kernel], [fill], step)[0]
        if self.kind == "max":
            return total
        if self.divisor is not None:
            return b.fdiv(total, constant(self.dtype, self.divisor))
        count = _i64(1)
        for o, s, p, k, extent in zip((oh, ow), self.stride, self.padding, self.kernel, size):
            start = b.sub(b.mul(o, _i64(s)), _i64(p))
            end = _min(b, b.add(start, _i64(k)), b.add(fb.dim(extent), _i64(p)))
            if not self.count_include_pad:
                start, end = _max(b, start, _i64(0)), _min(b, end, fb.dim(extent))
            count = b.mul(count, b.sub(end, start))
        return b.fdiv(total, cast(b, count, "int64", self.dtype))

    def label(self) -> str:
        return f"{self.kind}_pool"


class AdaptiveAvgPool2d(_Unary):
    """Average over bins [floor(i·H/oh), ceil((i+1)·H/oh)) per axis."""

    def __init__(self, x: Expr, out_hw: Sequence[Dim]) -> None:
        self.x, self.dtype = x, x.dtype
        self.shape = (*x.shape[:2], *out_hw)

    def emit(self, fb: FnBuilder, idx: Sequence[ir.Value]) -> ir.Value:
        b = fb.b
        n, c, oh, ow = idx
        bounds = []
        for o, size, out in zip((oh, ow), self.x.shape[2:], self.shape[2:]):
            extent, bins = fb.dim(size), fb.dim(out)
            start = b.sdiv(b.mul(o, extent), bins)
            end = b.sdiv(b.sub(b.add(b.mul(b.add(o, _i64(1)), extent), bins), _i64(1)), bins)
            bounds.append((start, end))
        total = Slot(b, dtypes.REGISTER[self.dtype], constant(self.dtype, 0.0))
        (h0, h1), (w0, w1) = bounds
        with (
            for_range(b, h0, h1, name="ah") as i,
            fb.scope(),
            for_range(b, w0, w1, name="aw") as j,
            fb.scope(),
        ):
            total.set(b.fadd(total.get(), self.x.value(fb, [n, c, i, j])))
        count = b.mul(b.sub(h1, h0), b.sub(w1, w0))
        return b.fdiv(total.get(), cast(b, count, "int64", self.dtype))

    def label(self) -> str:
        return "adaptive_avg_pool"


class DirectConv2d(Expr):
    """A convolution evaluated per output element (depthwise and small convolutions)."""

    def __init__(self, x: Expr, w: Expr, geo: ConvGeometry) -> None:
        self.x, self.w, self.geo, self.dtype = x, w, geo, x.dtype
        self.shape = (geo.n, geo.c_out, geo.oh, geo.ow)

    def children(self) -> tuple[Expr, ...]:
        return (self.x, self.w)

    def rebuild(self, children: Sequence[Expr]) -> Expr:
        return DirectConv2d(children[0], children[1], self.geo)

    def emit(self, fb: FnBuilder, idx: Sequence[ir.Value]) -> ir.Value:
        b = fb.b
        g = self.geo
        n, co, oh, ow = idx
        first = b.mul(b.sdiv(co, fb.dim(g.out_group)), fb.dim(g.c_group))
        zero = constant(self.dtype, 0.0)

        def step(tap: list[ir.Value], acc: list[ir.Value]) -> list[ir.Value]:
            ci, kh, kw = tap
            src, inside = window_source(fb, [oh, ow], [kh, kw], g.stride, g.pad, g.dilation, [g.h, g.w])
            v = b.select(inside, self.x.value(fb, [n, b.add(first, ci), *src]), zero)
            product = b.fmul(v, self.w.value(fb, [co, ci, kh, kw]))
            return [b.fadd(acc[0], product, flags=("contract",))]

        return accumulate(fb, [g.c_group, Dim.const(g.kh), Dim.const(g.kw)], [zero], step)[0]

    def label(self) -> str:
        return "conv2d"


class ResizeNearest(_Unary):
    """F.interpolate(mode="nearest"): source index floor(dst · step) in float32, torch's fast paths."""

    def __init__(self, x: Expr, out_hw: Sequence[Dim], scales: Sequence[float | None]) -> None:
        self.x, self.dtype, self.scales = x, x.dtype, tuple(scales)
        self.shape = (*x.shape[:2], *out_hw)

    def emit(self, fb: FnBuilder, idx: Sequence[ir.Value]) -> ir.Value:
        b = fb.b
        src = []
        for o, size, out, scale in zip(idx[2:], self.x.shape[2:], self.shape[2:], self.scales):
            n, m = fb.dim(size), fb.dim(out)
            if scale is not None and scale > 0:
                step: ir.Value = ir.Constant(F32, float(np.float32(1.0 / scale)))
            else:
                step = b.fdiv(b.sitofp(n, F32), b.sitofp(m, F32))
            scaled = intrinsic_call(fb, "floor", b.fmul(b.sitofp(o, F32), step))
            general = _min(b, b.fptosi(scaled, I64), b.sub(n, _i64(1)))
            doubled = b.icmp_signed("==", m, b.mul(n, _i64(2)))
            index = b.select(doubled, b.ashr(o, _i64(1)), general)
            src.append(b.select(b.icmp_signed("==", m, n), o, index))
        return self.x.value(fb, [*idx[:2], *src])

    def label(self) -> str:
        return "resize_nearest"


class ResizeBilinear(_Unary):
    """F.interpolate(mode="bilinear"): two taps per axis, along W first then H (torch's order)."""

    def __init__(
        self, x: Expr, out_hw: Sequence[Dim], scales: Sequence[float | None], align_corners: bool
    ) -> None:
        self.x, self.dtype, self.scales, self.align = x, x.dtype, tuple(scales), align_corners
        self.shape = (*x.shape[:2], *out_hw)

    def _taps(
        self, fb: FnBuilder, o: ir.Value, size: Dim, out: Dim, scale: float | None
    ) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
        b = fb.b
        t = self.dtype
        typ = dtypes.REGISTER[t]
        n, m = fb.dim(size), fb.dim(out)
        dst = b.sitofp(o, typ)
        if self.align:
            wide = b.icmp_signed(">", m, _i64(1))
            denom = b.sitofp(b.sub(_max(b, m, _i64(2)), _i64(1)), typ)
            step = b.select(wide, b.fdiv(b.sitofp(b.sub(n, _i64(1)), typ), denom), constant(t, 0.0))
            src = b.fmul(step, dst)
        else:
            if scale is not None and scale > 0:
                inv: ir.Value = constant(t, 1.0 / scale)
            else:
                inv = b.fdiv(b.sitofp(n, typ), b.sitofp(m, typ))
            src = b.fsub(b.fmul(inv, b.fadd(dst, constant(t, 0.5))), constant(t, 0.5))
            src = intrinsic_call(fb, "maxnum", src, constant(t, 0.0))
        last = b.sub(n, _i64(1))
        i0 = _min(b, b.fptosi(intrinsic_call(fb, "floor", src), I64), last)
        lam = b.fsub(src, b.sitofp(i0, typ))
        lam = intrinsic_call(
            fb, "minnum", intrinsic_call(fb, "maxnum", lam, constant(t, 0.0)), constant(t, 1.0)
        )
        i1 = b.add(i0, b.zext(b.icmp_signed("<", i0, last), I64))
        return i0, i1, b.fsub(constant(t, 1.0), lam), lam

    def emit(self, fb: FnBuilder, idx: Sequence[ir.Value]) -> ir.Value:
        b = fb.b
        nc = list(idx[:2])
        h0, h1, a0, a1 = self._taps(fb, idx[2], self.x.shape[2], self.shape[2], self.scales[0])
        w0, w1, c0, c1 = self._taps(fb, idx[3], self.x.shape[3], self.shape[3], self.scales[1])

        def row(h: ir.Value) -> ir.Value:
            left = b.fmul(self.x.value(fb, [*nc, h, w0]), c0)
            return b.fadd(left, b.fmul(self.x.value(fb, [*nc, h, w1]), c1))

        return b.fadd(b.fmul(row(h0), a0), b.fmul(row(h1), a1))

    def label(self) -> str:
        return "resize_bilinear"


class RoiAlign(Expr):
    """torchvision.ops.roi_align: the average of bilinear samples on a per-box grid of each bin."""

    checks = True  # a box's batch index outside the batch raises the error flag

    def __init__(
        self,
        x: Expr,
        boxes: Expr,
        output_size: Sequence[int],
        spatial_scale: float,
        sampling_ratio: int,
        aligned: bool,
    ) -> None:
        self.x, self.boxes, self.dtype = x, boxes, x.dtype
        self.out_size, self.spatial_scale = tuple(output_size), spatial_scale
        self.sampling_ratio, self.aligned = sampling_ratio, aligned
        self.shape: Shape = (boxes.shape[0], x.shape[1], Dim.const(output_size[0]), Dim.const(output_size[1]))

    def children(self) -> tuple[Expr, ...]:
        return (self.x, self.boxes)

    def rebuild(self, children: Sequence[Expr]) -> Expr:
        return RoiAlign(
            children[0], children[1], self.out_size, self.spatial_scale, self.sampling_ratio, self.aligned
        )

    def emit(self, fb: FnBuilder, idx: Sequence[ir.Value]) -> ir.Value:
        b = fb.b
        t = self.dtype
        typ = dtypes.REGISTER[t]
        k, c, ph, pw = idx
        coord = [cast(b, self.boxes.value(fb, [k, _i64(j)]), self.boxes.dtype, t) for j in range(5)]
        batch = cast(b, coord[0], t, "int64")
        n = fb.dim(self.x.shape[0])
        bad = b.or_(b.icmp_signed("<", batch, _i64(0)), b.icmp_signed(">=", batch, n))
        fb.fail_if(bad)
        batch = b.select(bad, _i64(0), batch)
        offset, scale = constant(t, 0.5 if self.aligned else 0.0), constant(t, self.spatial_scale)
        x1, y1, x2, y2 = (b.fsub(b.fmul(v, scale), offset) for v in coord[1:])
        axes = []
        for lo, hi, bins, p, size in (
            (y1, y2, self.out_size[0], ph, self.x.shape[2]),
            (x1, x2, self.out_size[1], pw, self.x.shape[3]),
        ):
            extent = b.fsub(hi, lo)
            if not self.aligned:
                extent = intrinsic_call(fb, "maxnum", extent, constant(t, 1.0))
            bin_size = b.fdiv(extent, constant(t, float(bins)))
            if self.sampling_ratio > 0:
                grid: ir.Value = _i64(self.sampling_ratio)
            else:
                up = intrinsic_call(fb, "ceil", bin_size)
                up = b.select(b.fcmp_unordered("uno", up, up), constant(t, 0.0), up)
                grid = cast(b, up, t, "int64")
            start = b.fadd(lo, b.fmul(b.sitofp(p, typ), bin_size))
            axes.append((start, bin_size, grid, size))
        (sy, by, gy, height), (sx, bx, gx, width) = axes
        total = Slot(b, typ, constant(t, 0.0))
        nb = [batch, c]
        with for_range(b, 0, gy, name="sy") as iy, fb.scope():
            wy = self._tap(fb, sy, by, gy, iy, height)
            with for_range(b, 0, gx, name="sx") as ix, fb.scope():
                wx = self._tap(fb, sx, bx, gx, ix, width)
                acc = total.get()
                for yi, ywt in ((wy[0], wy[2]), (wy[1], wy[3])):
                    for xi, xwt in ((wx[0], wx[2]), (wx[1], wx[3])):
                        value = self.x.value(fb, [*nb, yi, xi])
                        acc = b.fadd(acc, b.fmul(b.fmul(ywt, xwt), value))
                total.set(acc)
        count = b.mul(gy, gx)
        count = _max(b, count, _i64(1))
        return b.fdiv(total.get(), cast(b, count, "int64", t))

    def _tap(
        self, fb: FnBuilder, start: ir.Value, bin_size: ir.Value, grid: ir.Value, i: ir.Value, size: Dim
    ) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
        """(low, high, weight low, weight high) of sample ``i`` along one axis (torchvision's rules)."""
        b = fb.b
        t = self.dtype
        typ = dtypes.REGISTER[t]
        offset = b.fadd(b.sitofp(i, typ), constant(t, 0.5))
        denom = b.sitofp(_max(b, grid, _i64(1)), typ)
        pos = b.fadd(start, b.fdiv(b.fmul(offset, bin_size), denom))
        extent = fb.dim(size)
        valid = b.and_(
            b.fcmp_ordered(">=", pos, constant(t, -1.0)), b.fcmp_ordered("<=", pos, b.sitofp(extent, typ))
        )
        pos = b.select(valid, intrinsic_call(fb, "maxnum", pos, constant(t, 0.0)), constant(t, 0.0))
        low = cast(b, pos, t, "int64")
        last = b.sub(extent, _i64(1))
        at_end = b.icmp_signed(">=", low, last)
        low = b.select(at_end, last, low)
        high = b.select(at_end, low, b.add(low, _i64(1)))
        frac = b.select(at_end, constant(t, 0.0), b.fsub(pos, b.sitofp(low, typ)))
        zero = constant(t, 0.0)
        w_low = b.select(valid, b.fsub(constant(t, 1.0), frac), zero)
        w_high = b.select(valid, frac, zero)
        return _max(b, low, _i64(0)), _max(b, high, _i64(0)), w_low, w_high

    def label(self) -> str:
        return "roi_align"
