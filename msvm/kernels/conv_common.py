"""What every conv2d variant shares: geometry, the direct kernels' epilogue, the padded copy, the fallback.

Attributes follow the op's schema (``msvm.ops.conv``): ``stride``/``dilation`` pairs, ``padding``
a pair or ``"same"``/``"valid"``, ``groups``; x is [N, C, H, W] or unbatched [C, H, W]. The
geometry is computed once per distinct (shapes, attrs) and cached, because Python arithmetic is
a visible part of a 10 µs kernel call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from ..native.irhelpers import (
    FLOAT_TYPES,
    I64,
    Slot,
    const,
    for_each_chunk,
    for_range,
    gep,
    load_vec,
    nan_relu,
    vec,
)
from ..ops.conv import conv_padding
from ..ops.registry import Kernel, get_op
from ..runtime import mempool
from .native import Frame, float_name, native_library, ptr
from .threads import POOL


@dataclass(frozen=True)
class ConvGeometry:
    """Every size of one conv2d call (NCHW; padding split into before/after per axis)."""

    n: int
    c_in: int
    h: int
    w: int
    c_out: int
    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    pad_top: int
    pad_bottom: int
    pad_left: int
    pad_right: int
    groups: int
    oh: int
    ow: int
    batched: bool  # x had a batch dim

    @property
    def c_group(self) -> int:
        return self.c_in // self.groups

    @property
    def oc_group(self) -> int:
        return self.c_out // self.groups

    @property
    def flops(self) -> float:
        return 2.0 * self.n * self.c_out * self.oh * self.ow * self.c_group * self.kh * self.kw

    @property
    def elements(self) -> int:
        """Elements of x, weight and output together (what any variant must at least move)."""
        weight = self.c_out * self.c_group * self.kh * self.kw
        return self.n * self.c_in * self.h * self.w + weight + self.n * self.c_out * self.oh * self.ow

    @property
    def padded(self) -> bool:
        return bool(self.pad_top or self.pad_bottom or self.pad_left or self.pad_right)


def _pair(value: Any) -> tuple[int, int]:
    if isinstance(value, (tuple, list)):
        return int(value[0]), int(value[1])
    return int(value), int(value)


@functools.lru_cache(maxsize=1024)
def _geometry(x_shape: tuple[int, ...], w_shape: tuple[int, ...], stride: Any, padding: Any, dilation: Any,
              groups: int) -> ConvGeometry | None:
    if len(x_shape) not in (3, 4) or len(w_shape) != 4:
        return None
    batched = len(x_shape) == 4
    n, c, h, w = x_shape if batched else (1, *x_shape)
    oc, cg, kh, kw = w_shape
    (sh, sw), (dh, dw) = _pair(stride), _pair(dilation)
    pads = conv_padding(padding if isinstance(padding, str) else _pair(padding), (kh, kw), (dh, dw))
    (pt, pb), (pl, pr) = pads
    if groups < 1 or c != cg * groups or oc % groups or min(sh, sw, dh, dw) < 1 or min(pt, pb, pl, pr) < 0:
        return None
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (w + pl + pr - dw * (kw - 1) - 1) // sw + 1
    if oh <= 0 or ow <= 0 or min(n, c, oc, kh, kw) <= 0:
        return None
    return ConvGeometry(n, c, h, w, oc, kh, kw, sh, sw, dh, dw, pt, pb, pl, pr, groups, oh, ow, batched)


def conv_geometry(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> ConvGeometry | None:
    """The geometry of conv2d on input ``shapes`` (x, weight[, bias]); None when they are invalid."""
    return geometry_for(attrs)(tuple(shapes[0]), tuple(shapes[1]))


Shape = tuple[int, ...]


def geometry_for(attrs: Mapping[str, Any]) -> Callable[[Shape, Shape], ConvGeometry | None]:
    """``geometry(x_shape, w_shape)`` with ``attrs`` bound once (what a kernel closure calls per call)."""
    stride, dilation = attrs.get("stride", (1, 1)), attrs.get("dilation", (1, 1))
    padding = attrs.get("padding", (0, 0))
    return functools.partial(_geometry, stride=_hashable(stride), padding=_hashable(padding),
                             dilation=_hashable(dilation), groups=int(attrs.get("groups", 1)))


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def conv_flops(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> float:
    geo = conv_geometry(shapes, attrs)
    return geo.flops if geo else 0.0


def reference_workspace(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any], itemsize: int) -> int:
    """Bytes the op's reference kernel (``msvm.ops.conv``) allocates besides its output: the whole column
    matrix [C·KH·KW, N·OH·OW] and the zero-padded copy of x."""
    geo = conv_geometry(shapes, attrs)
    if geo is None:
        return 0
    columns = geo.c_in * geo.kh * geo.kw * geo.n * geo.oh * geo.ow
    rows, cols = geo.h + geo.pad_top + geo.pad_bottom, geo.w + geo.pad_left + geo.pad_right
    padded = geo.n * geo.c_in * rows * cols if geo.padded else 0
    return (columns + padded) * itemsize


def conv_bytes(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> float:
    """Bytes every variant must move at least (x, weight and output once, float32)."""
    geo = conv_geometry(shapes, attrs)
    return 4.0 * geo.elements if geo else 0.0


FLAG_BIAS, FLAG_RELU, FLAG_RESIDUAL, FLAG_RELU_OUT = 1, 2, 4, 8


@dataclass(frozen=True)
class Epilogue:
    """What a direct conv kernel does to a tile before storing it, in this order:
    ``y = acc + bias``, ``relu`` → ``y = max(y, 0)``, ``residual`` → ``y += r`` (r: a tensor of the
    output's shape and layout), ``relu_out`` → ``y = max(y, 0)`` — a ResNet block's conv, bias, skip
    connection and activation in the pass that writes the output (the JIT fuses them there)."""

    relu: bool = False
    residual: bool = False
    relu_out: bool = False

    def flags(self, bias: bool) -> int:
        return ((FLAG_BIAS if bias else 0) | (FLAG_RELU if self.relu else 0)
                | (FLAG_RESIDUAL if self.residual else 0) | (FLAG_RELU_OUT if self.relu_out else 0))


NO_EPILOGUE = Epilogue()


def flag(b: ir.IRBuilder, flags: ir.Value, bit: int) -> ir.Value:
    """IR: is ``bit`` set in the run-time ``flags``?"""
    return b.icmp_signed("!=", b.and_(flags, ir.Constant(I64, bit)), ir.Constant(I64, 0))


def residual_relu(b: ir.IRBuilder, value: ir.Value, residual: ir.Value | None,
                  relu_out: ir.Value) -> ir.Value:
    """IR: the end of ``Epilogue`` on one stored value: + ``residual`` (when given), then ReLU when the
    run-time ``relu_out`` says so (a NaN stays NaN)."""
    if residual is not None:
        value = b.fadd(value, residual)
    return b.select(relu_out, nan_relu(b, value), value)


# The register tiles that finish a row of ``size``-wide tiles (6 on the micro-kernels), at most one each
# while the rest is under 8: a rest of 2 runs with the last whole tile as 4 + 4 (``whole_tiles``).
REST_TILES = (4, 4, 2, 1)


def whole_tiles(b: ir.IRBuilder, count: ir.Value, size: int) -> ir.Value:
    """IR: how many ``size``-wide register tiles (``size`` 6) to run along ``count``; ``REST_TILES`` do the
    rest. A rest of 2 gives back one whole tile, to run as 4 + 4: a 2-wide tile's 4 accumulators leave
    half the FMA units idle."""
    whole = b.sdiv(count, ir.Constant(I64, size))
    two_left = b.and_(b.icmp_signed("==", b.srem(count, ir.Constant(I64, size)), ir.Constant(I64, 2)),
                      b.icmp_signed(">", whole, ir.Constant(I64, 0)))
    return b.sub(whole, b.zext(two_left, I64))


def bias_or_zero(b: ir.IRBuilder, has_bias: ir.Value, at: ir.Value, lanes: int = 0) -> ir.Value:
    """IR: the bias at ``at`` (``lanes`` elements as a vector, or one when 0), or 0 without a bias. The
    load is guarded, not selected after the fact: without a bias the frame's pointer is null."""
    typ = vec(at.type.pointee, lanes) if lanes else at.type.pointee
    value = Slot(b, typ, const(typ, 0.0))
    with b.if_then(has_bias):
        value.set(load_vec(b, at, lanes) if lanes else b.load(at))
    return value.get()


def native_operands(geo: ConvGeometry | None, x: np.ndarray, weight: np.ndarray,
                    bias: np.ndarray | None) -> bool:
    """Whether native code can take these operands: valid geometry, one float dtype, a [C_out] bias."""
    if geo is None or float_name(x.dtype) is None or weight.dtype != x.dtype:
        return False
    return bias is None or (bias.dtype == x.dtype and bias.shape == (geo.c_out,))


def reference_conv2d(attrs: Mapping[str, Any]) -> Kernel:
    """The op's reference kernel bound to ``attrs``: what a variant delegates to outside its ``when``."""
    kernel = get_op("conv2d").kernel
    return functools.partial(kernel, **attrs)


def output_array(geo: ConvGeometry, dtype: np.dtype) -> np.ndarray:
    return mempool.kernel_empty((geo.n, geo.c_out, geo.oh, geo.ow), dtype)


def finish(geo: ConvGeometry, out: np.ndarray) -> np.ndarray:
    """Drop the batch dim again for unbatched input."""
    return out if geo.batched else out[0]


# -- the padded copy of the input ----------------------------------------------------------------

_PAD_FRAME = Frame(("x", "xp", "planes", "H", "W", "Hp", "Wp", "top", "left", "chunk", "counter"),
                   pointers=("x", "xp"), zeroed=("counter",))


def _pad_ir(dtype: str) -> str:
    """The job pad(frame): xp[p] = zero-padded x[p] for every plane p."""
    ft = FLOAT_TYPES[dtype]
    module = ir.Module(f"pad_{dtype}")
    b, a = _PAD_FRAME.define(module, "pad", ft.as_pointer(), noalias=("x", "xp"), no_builtins=True)
    zero = ir.Constant(ft, 0.0)

    def fill(ptr: ir.Value, count: ir.Value) -> None:
        with for_range(b, 0, count, name="z") as j:
            b.store(zero, gep(b, ptr, j))

    with (for_each_chunk(b, a["counter"], a["planes"], a["chunk"]) as (start, stop),
          for_range(b, start, stop, name="p") as p):
        dst = gep(b, a["xp"], b.mul(p, b.mul(a["Hp"], a["Wp"])))
        src = gep(b, a["x"], b.mul(p, b.mul(a["H"], a["W"])))
        fill(dst, b.mul(a["top"], a["Wp"]))
        with for_range(b, 0, a["H"], name="r") as r:
            row = gep(b, dst, b.mul(b.add(r, a["top"]), a["Wp"]))
            fill(row, a["left"])
            src_row, dst_row = gep(b, src, b.mul(r, a["W"])), gep(b, row, a["left"])
            with for_range(b, 0, a["W"], name="c") as j:
                b.store(b.load(gep(b, src_row, j)), gep(b, dst_row, j))
            right = b.add(a["left"], a["W"])
            fill(gep(b, row, right), b.sub(a["Wp"], right))
        below = b.add(a["top"], a["H"])
        fill(gep(b, dst, b.mul(below, a["Wp"])), b.mul(b.sub(a["Hp"], below), a["Wp"]))
    b.ret_void()
    return str(module)


def padded_input(x: np.ndarray, geo: ConvGeometry, *, extra_bottom: int = 0,
                 extra_right: int = 0) -> np.ndarray:
    """x (C-contiguous, [N, C, H, W]) copied into a zero border; x itself when there is no padding.

    ``extra_bottom``/``extra_right`` add zero rows/columns beyond the conv's own padding (for
    kernels that read whole tiles past the last output).
    """
    bottom, right = geo.pad_bottom + extra_bottom, geo.pad_right + extra_right
    if not (geo.pad_top or geo.pad_left or bottom or right):
        return x
    hp, wp = geo.h + geo.pad_top + bottom, geo.w + geo.pad_left + right
    xp = mempool.kernel_empty((geo.n, geo.c_in, hp, wp), x.dtype)
    planes = geo.n * geo.c_in
    name = float_name(x.dtype)
    job = native_library(("pad", name), lambda: _pad_ir(name)).address("pad")
    frame = _PAD_FRAME.pack(x=ptr(x), xp=ptr(xp), planes=planes, H=geo.h, W=geo.w, Hp=hp, Wp=wp,
                            top=geo.pad_top, left=geo.pad_left, chunk=max(1, min(16, planes // 64)))
    POOL.run(job, frame, flops=xp.size * 2.0)
    return xp
