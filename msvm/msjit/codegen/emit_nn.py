"""nn nodes computed per output element (pooling windows, direct convolution, resizes, roi_align), and
convolutions handed to the native kernels of ``msvm.kernels``.

Each node is an expression whose value at an output index runs a small loop (a window, a sample
grid) over its input expression — so a ReLU before a pool or after a resize fuses into the same
loop nest. Index and weight arithmetic follows the reference kernels operation for operation
(float32 source indices for nearest, the input's precision for bilinear and roi_align taps),
because a source position that rounds differently picks another pixel.

``NativeConv`` is a convolution as a call of the interpreter's own direct kernels (NCHWc-blocked,
or depthwise), by address: the region's code fills the kernel's argument frame and runs it on the
job pool's threads (``msvm.kernels.threads``), weights packed when the region was lowered. It
takes over the elementwise pass that alone reads its output when that pass is its epilogue
(``epilogue.EpilogueKernel``: ReLU, a residual add, ReLU), so a ResNet block's conv, skip and activation
write the output once; ``conv_layouts`` keeps the tensors that only such convolutions touch in
NCHWc with a zero border (no transposes, no copies of the input for its padding).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
from llvmlite import ir

from ...kernels import conv_depthwise, conv_nchwc
from ...native.irhelpers import LANES, Slot, for_range
from ...shapes import Dim, as_dim
from . import dtypes
from .buffers import Buffer
from .dtypes import F32, I64, cast, constant
from .emit import FnBuilder, ModuleEmitter, accumulate, run_job
from .emit_elementwise import extreme, intrinsic_call
from .emit_linalg import ConvGeometry, window_source
from .epilogue import EpilogueKernel
from .kernels import Kernel
from .nodes import Expr, Load
from .views import ZERO, Shape, same


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


class NativeConv(EpilogueKernel):
    """``out = conv2d(x) + bias`` by ``msvm.kernels``' ``nchwc`` or ``depthwise`` job.

    ``x`` is a dense view; ``weight`` (and ``bias``) are constant buffers in the layout the kernel
    wants (packed NCHWc blocks and a padded bias for ``nchwc``). ``scratch`` is the per-thread
    memory of the ``nchwc`` job (offset table and zero-bordered input rows). Tensors are NCHW until
    ``conv_layouts`` makes those that only ``nchwc`` convs touch NCHWc.
    """

    def __init__(
        self,
        kind: str,
        x: Load,
        weight: Buffer,
        bias: Buffer | None,
        out: Buffer,
        geo: ConvGeometry,
        pads: tuple[int, int, int, int],
        scratch: Buffer | None,
    ) -> None:
        self.kind, self.x, self.weight, self.bias, self.out = kind, x, weight, bias, out
        self.geo, self.pads, self.work = geo, pads, scratch
        # None: NCHW; else NCHWc with a zero border of that many pixels around x / out / residual
        self.x_border: int | None = None
        self.out_border: int | None = None
        self.res_border: int | None = None

    def reads(self) -> list[Buffer]:
        extra = [self.bias, self.residual.buffer if self.residual is not None else None]
        return list(dict.fromkeys(b for b in [self.x.buffer, self.weight, *extra] if b is not None))

    def scratch(self) -> list[Buffer]:
        return [self.work] if self.work is not None else []

    def describe(self) -> str:
        g = self.geo
        return (
            f"conv2d {g.kh}x{g.kw}/s{g.stride[0]} groups {g.groups} [{g.n}x{g.c}x{g.h}x{g.w}] -> "
            f"{self.out.resolve().name} {self.kind}{self.epilogue_steps()}"
            f"{_layout(' in', self.x_border)}{_layout(' out', self.out_border)}"
        )

    def whole_output(self) -> bool:
        """Is ``out`` exactly this conv's output, in channel counts that fill whole NCHWc blocks?"""
        g = self.geo
        shape = (g.n, g.c_out, g.oh, g.ow)
        return (
            self.out_offset == ZERO
            and _same_shape(self.out.shape, shape)
            and _whole_blocks(self.out.dtype, g.out_group)
        )

    def emit(self, em: ModuleEmitter) -> FnBuilder:
        fb = em.function("conv", [self.out, *self.scratch(), *self.reads()])
        g = self.geo
        lanes = LANES[self.out.dtype]
        pads = dict(zip(("PT", "PB", "PL", "PR"), self.pads))
        h, w, x_offset = g.h, g.w, self.x.view.offset
        if self.x_border is None:
            x_rows, x_plane = w, h * w
        else:  # the border is this conv's padding: it reads a larger input, unpadded
            border = self.x_border
            x_rows, x_plane, x_offset = conv_nchwc.bordered(h, w, border, lanes, pads["PT"], pads["PL"])
            h, w = h + (pads["PT"] + pads["PB"]), w + (pads["PL"] + pads["PR"])
            pads = dict.fromkeys(pads, 0)
        out_rows, out_plane, out_offset = conv_nchwc.bordered(g.oh, g.ow, self.out_border, lanes)
        res_rows, res_plane, res_offset = conv_nchwc.bordered(g.oh, g.ow, self.res_border, lanes)

        sizes = {"N": g.n, "C": g.c, "H": h, "W": w, "XR": x_rows, "XP": x_plane, "OC": g.c_out, "OH": g.oh}
        sizes |= {"OW": g.ow, "OR": out_rows, "OP": out_plane, "RR": res_rows, "RP": res_plane}
        fixed = {"KH": g.kh, "KW": g.kw, "SH": g.stride[0], "SW": g.stride[1], "DH": g.dilation[0]}
        fixed |= {"DW": g.dilation[1], "groups": g.groups, "OPAD": self.out_border or 0, **pads}
        fixed["flags"] = self.epilogue.flags(self.bias is not None)
        values = {k: fb.dim(as_dim(d)) for k, d in sizes.items()} | {k: _i64(v) for k, v in fixed.items()}
        values |= {"x": fb.at(self.x.buffer, x_offset), "w": fb.ptr(self.weight)}
        values["out"] = fb.at(self.out, self.out_offset + out_offset)
        if self.bias is not None:
            values["bias"] = fb.ptr(self.bias)
        if self.residual is not None:
            values["residual"] = fb.at(self.residual.buffer, self.residual.view.offset + res_offset)
        work = g.n * g.c_out * g.oh * g.ow * (g.c_group * (2 * g.kh * g.kw))
        if self.kind == "nchwc":
            blocked = (self.x_border is not None, self.out_border is not None)
            job = ("conv_nchwc", self.out.dtype, g.stride[1], *blocked)
            frame = conv_nchwc.FRAME
            assert self.work is not None
            values |= {"scratch": fb.ptr(self.work), "slot_bytes": fb.slot_bytes(self.work)}
        else:
            frame, job = conv_depthwise.FRAME, ("conv_depthwise", self.out.dtype, g.stride[1])
            work = work * conv_depthwise.FLOPS_SCALE
        run_job(fb, frame, values, job, fb.dim(work))
        fb.finish()
        return fb


def _layout(what: str, border: int | None) -> str:
    return "" if border is None else f" NCHWc{what}" + (f"+{border}" if border else "")


def conv_layouts(kernels: Sequence[Kernel]) -> None:
    """NCHWc, with a zero border as wide as its readers' padding, for the tensors that only ``nchwc``
    convolutions write and read (as input or residual).

    Why: the NCHWc kernel's register tile is a vector of channels per pixel, so an NCHWc output is
    stored vector by vector (NCHW needs a transpose per tile), and a padded conv reading a bordered
    input reads it in place, where it would otherwise copy its input rows into a zero-bordered
    scratch (the writer zeroes the border: a few vectors per row). A residual must be in the layout
    of the output it is added to, so the choice is a fixed point: start from every conv output that
    can be blocked, drop those with another kind of reader, or whose writer adds a residual that is not.
    """
    readers: dict[Buffer, list[Kernel]] = {}
    written = Counter(buf for kernel in kernels for buf in kernel.writes())
    for kernel in kernels:
        for buf in kernel.reads():
            readers.setdefault(buf, []).append(kernel)
    convs = [k for k in kernels if isinstance(k, NativeConv) and k.kind == "nchwc"]
    writers = {k.out: k for k in convs if k.out.kind == "arena" and written[k.out] == 1 and k.whole_output()}
    blocked = set(writers)
    changed = True
    while changed:
        keep = {
            buf
            for buf in blocked
            if all(_reads_blocked(k, buf, blocked) for k in readers.get(buf, []))
            and (writers[buf].residual is None or writers[buf].residual.buffer in blocked)
        }
        changed, blocked = keep != blocked, keep
    border = {}
    for buf in blocked:  # the buffer grows by its border (the memory plan sizes it afterwards)
        border[buf] = max((max(k.pads) for k in readers.get(buf, []) if k.x.buffer is buf), default=0)
        n, c, h, w = buf.shape
        buf.shape = (n, c, h + 2 * border[buf], w + 2 * border[buf])
    for conv in convs:
        conv.x_border, conv.out_border = border.get(conv.x.buffer), border.get(conv.out)
        conv.res_border = border.get(conv.residual.buffer) if conv.residual is not None else None


def _whole_blocks(dtype: str, channels: Dim) -> bool:
    """Do ``channels`` (per group) fill whole NCHWc blocks of ``dtype``?"""
    return channels.is_const and channels.value % LANES[dtype] == 0


def _reads_blocked(kernel: Kernel, buf: Buffer, blocked: set[Buffer]) -> bool:
    """Can ``kernel`` read ``buf`` in NCHWc (given the buffers ``blocked`` so far): as its input, or as
    the residual of an NCHWc output, the buffer being exactly the tensor the kernel reads?"""
    if not isinstance(kernel, NativeConv) or kernel.kind != "nchwc":
        return False
    g = kernel.geo
    uses = [(kernel.x, (g.n, g.c, g.h, g.w), _whole_blocks(buf.dtype, g.c_group))]
    if kernel.residual is not None:
        uses.append((kernel.residual, (g.n, g.c_out, g.oh, g.ow), kernel.out in blocked))
    return all(
        ok and load.view.offset == 0 and _same_shape(buf.shape, shape)
        for load, shape, ok in uses
        if load.buffer is buf
    )


def _same_shape(a: Shape, b: Shape) -> bool:
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
