"""Lowering of the nn ops (torch.nn.functional semantics, NCHW) onto expressions and kernels.

A linear layer with a constant weight of at most ``POOL_GEMM_MAX_BYTES`` is a ``PoolGemm`` with the
weight packed into panels at lowering time (all of W2's: OpenBLAS would pack them again on every call)
and a constant bias applied in the kernel; any other is a matmul by the weight's transposed view (the
BLAS GEMM's transpose flag). Convolutions with constant weights call the interpreter's
own native direct kernels (``NativeConv``: NCHWc-blocked, or depthwise), the weights packed at lowering
time and the bias applied in the kernel; the plan later hands them the ReLU / residual epilogue that
reads their output. Others (weights computed in the region, other dtypes) become im2col + BLAS GEMM per
image (``ConvKernel``) when the GEMM is worth it, and a direct per-element loop (``DirectConv2d``,
fusable) for tiny or non-BLAS cases, with the bias a lazy add. batch_norm is elementwise with
per-channel scale and shift (folded to constants when the statistics are constants, as the reference
computes them); layer_norm is a lazy row result (epilogues fuse), group_norm a row kernel over
[N, G, C/G, spatial]. Attention is two GEMMs around a safe-softmax row kernel.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...kernels import conv_nchwc, gemm_packed
from ...ops.conv import conv_padding
from ...ops.registry import OpDef, TensorType
from ...shapes import as_dim
from . import views
from .buffers import Buffer
from .emit_layout import Gather
from .emit_linalg import ConvGeometry, ConvKernel, Operand
from .emit_nn import (
    AdaptiveAvgPool2d,
    DirectConv2d,
    NativeConv,
    Pool2d,
    ResizeBilinear,
    ResizeNearest,
    RoiAlign,
)
from .emit_reduce import RowKernel, RowSpec
from .errors import LoweringError
from .lower_core import BLAS_MIN_FLOPS, broadcast_batch, cast_to, fits_pool, matmul, pool_gemm
from .nodes import Const, Expr, Index, Load, Map
from .plan import Planner, Recipe
from .registry import lowers, refuses
from .views import Shape, View, numel, same

# The weight packings lowering bakes into code, by ``Recipe.kind``: (weight, bias, *args) -> (weight, bias).
PACKS = {"gemm": gemm_packed.packed, "nchwc": conv_nchwc.packed}
DIRECT_MAX_TAPS = 16  # per-output work below which a convolution is evaluated directly
NATIVE_DTYPES = ("float32", "float64")  # what the native conv kernels compute in


def _shape(t: TensorType) -> Shape:
    return tuple(t.shape)


def _batched(x: Expr) -> tuple[Expr, bool]:
    """NCHW view of torch's unbatched CHW input (and whether it was unbatched)."""
    if len(x.shape) == 3:
        return x.relayout(views.unsqueeze(x.shape, 0)), True
    return x, False


def _unbatch(y: Expr, unbatched: bool) -> Expr:
    return y.relayout(views.squeeze(y.shape, [0])) if unbatched else y


# -- linear --------------------------------------------------------------------------------------------


@lowers("linear")
def _linear(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) == 3 else None
    t = out[0]
    y = _native_linear(ctx, x, w, bias, t)
    if y is not None:
        return y
    wt = w.relayout(views.permute(w.shape, [1, 0]))
    shape = (*x.shape[:-1], w.shape[0])
    prod_dtype = t.dtype if bias is None else _matmul_dtype(x.dtype, w.dtype)
    y = matmul(ctx, x, wt, prod_dtype, shape)
    if bias is not None:
        y = ctx.map("add", [y, bias], t.dtype, _shape(t))
    return y


def _matmul_dtype(a: str, b: str) -> str:
    return np.matmul.resolve_dtypes((np.dtype(a), np.dtype(b), None))[-1].name


def _native_linear(ctx: Planner, x: Expr, w: Expr, bias: Expr | None, t: TensorType) -> Expr | None:
    """``x @ wᵀ (+ bias)`` by the job pool's GEMM with the constant weight packed now (and a constant [N]
    bias with it; any other bias is a lazy add). None when the weight is not a constant small enough
    (``fits_pool``) or the dtypes differ or are not native. However small the product: as a fused
    contraction it cost the region a loop module (a CNN's 64 → 10 classifier: milliseconds of LLVM's O2
    pipeline per compile), where calling the job costs a microsecond or two."""
    dtype = t.dtype
    if dtype not in gemm_packed.DTYPES or x.dtype != dtype or w.dtype != dtype or len(x.shape) < 1:
        return None
    weight = ctx.constant_value(w)
    if weight is None or weight.ndim != 2 or 0 in weight.shape or not fits_pool(as_dim(weight.size), dtype):
        return None
    n, k = weight.shape
    rows = numel(x.shape[:-1])
    bias_value = None if bias is None else ctx.constant_value(bias)
    in_kernel = bias_value is not None and bias_value.shape == (n,) and bias.dtype == dtype
    w_buf, b_buf = _packed(ctx, "gemm", weight, bias_value if in_kernel else None)
    x = ctx.ready(x)
    if not (isinstance(x, Load) and x.view.is_contiguous()):
        x = ctx.materialize(x)
    a = Operand(x.buffer, View((rows, as_dim(k)), (as_dim(k), as_dim(1)), x.view.offset), False, as_dim(k))
    full = (*x.shape[:-1], as_dim(n))
    dest = ctx.result_buffer(full, dtype)
    pool_gemm(ctx, a, None, w_buf, b_buf, dest, View.contiguous((rows, as_dim(n))),
              as_dim(n))
    y: Expr = Load(dest, View.contiguous(full))
    if bias is not None and not in_kernel:
        y = ctx.map("add", [y, bias], dtype, _shape(t))
    return y


# -- convolution ---------------------------------------------------------------------------------------


@refuses("conv2d")
def _conv_refusal(attrs: dict, input_types: Any) -> str | None:
    weight = input_types[1]
    if not (weight.shape[2].is_const and weight.shape[3].is_const):
        return "conv2d kernel sizes must be constants to generate code"
    return None


@lowers("conv2d")
def _conv2d(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    x, unbatched = _batched(ctx.ready(inputs[0]))
    w = ctx.ready(inputs[1])
    bias = inputs[2] if len(inputs) == 3 else None
    t = out[0]
    full = _shape(t) if not unbatched else (as_dim(1), *_shape(t))
    n, c, h, wd = x.shape
    c_out, _, kh, kw = w.shape
    pads = conv_padding(attrs["padding"], (kh.value, kw.value), attrs["dilation"])
    geo = ConvGeometry(
        n,
        c,
        h,
        wd,
        c_out,
        kh.value,
        kw.value,
        full[2],
        full[3],
        tuple(attrs["stride"]),
        tuple(int(lo) for lo, _ in pads),
        tuple(attrs["dilation"]),
        attrs["groups"],
    )
    bias_value = None if bias is None else ctx.constant_value(bias)
    in_kernel = bias is None or (bias_value is not None and bias.dtype == t.dtype)  # constants only
    y = _native_conv(ctx, x, w, bias_value if in_kernel else None, geo, pads, full, t.dtype)
    if y is None:
        y, in_kernel = _lowered_conv(ctx, x, w, geo, full, t.dtype), False
    if bias is not None and not in_kernel:
        bias = bias.relayout(views.reshape(bias.shape, (c_out, as_dim(1), as_dim(1))))
        y = ctx.map("add", [y, bias], t.dtype, full)
    return _unbatch(y, unbatched)


def _native_conv(
    ctx: Planner,
    x: Expr,
    w: Expr,
    bias: np.ndarray | None,
    geo: ConvGeometry,
    pads: list[tuple[int, int]],
    full: Shape,
    dtype: str,
) -> Expr | None:
    """The conv (+ ``bias``) as a call of a native direct kernel, as fast as the interpreter's variants:
    depthwise convs by ``depthwise``, every other one by ``nchwc`` with its weights packed now (they
    must be constants). None when neither applies (another dtype, weights computed in the region)."""
    if dtype not in NATIVE_DTYPES or x.dtype != dtype or w.dtype != dtype:
        return None
    weight = ctx.constant_value(w)
    depthwise = geo.groups > 1 and same(geo.c, as_dim(geo.groups)) and same(geo.c_out, as_dim(geo.groups))
    if depthwise and _dense(w):
        kind, w_buf = "depthwise", w.buffer
        b_buf = None if bias is None else _constant_buffer(ctx, bias)
    elif weight is not None and not depthwise:
        kind = "nchwc"
        w_buf, b_buf = _packed(ctx, kind, weight, bias, geo.groups)
    else:
        return None
    if not (isinstance(x, Load) and x.view.is_contiguous()):
        x = ctx.materialize(x)
    pad4 = (int(pads[0][0]), int(pads[0][1]), int(pads[1][0]), int(pads[1][1]))
    scratch = None
    if kind == "nchwc":
        size = conv_nchwc.scratch_bytes(
            geo.c_group, geo.w, geo.kh, geo.kw, geo.stride[0], geo.dilation[0], pad4, np.dtype(dtype).itemsize
        )
        scratch = ctx.new_buffer((size // 8,), "int64", "conv")
        scratch.per_thread = True
    dest = ctx.result_buffer(full, dtype)
    ctx.add(NativeConv(kind, x, w_buf, b_buf, dest, geo, pad4, scratch))
    return Load(dest, View.contiguous(full))


def _packed(ctx: Planner, kind: str, weight: np.ndarray, bias: np.ndarray | None, *args: int
            ) -> tuple[Buffer, Buffer | None]:
    """``PACKS[kind]``'s packed weight and bias (None without a bias) as constant buffers, each with its
    ``Recipe``."""
    packs = PACKS[kind](weight, bias, *args)
    w_buf = _constant_buffer(ctx, packs[0], Recipe(kind, (weight, bias), args, 0))
    b_buf = None if bias is None else _constant_buffer(ctx, packs[1], Recipe(kind, (weight, bias), args, 1))
    return w_buf, b_buf


def _constant_buffer(ctx: Planner, array: np.ndarray, recipe: Recipe | None = None) -> Buffer:
    """A read-only buffer of ``array`` kept alive by the compiled region (``array`` has > 1 element)."""
    expr = ctx.constant_expr(array, recipe)
    assert isinstance(expr, Load)
    return expr.buffer


def _lowered_conv(ctx: Planner, x: Expr, w: Expr, geo: ConvGeometry, full: Shape, dtype: str) -> Expr:
    """The conv as generated code: im2col + BLAS GEMM per image when the GEMM is worth it, else a
    direct per-element loop (fusable)."""
    entry = ctx.gemm_entry(dtype)
    taps = geo.c_group * (geo.kh * geo.kw)
    work = full[0] * geo.c_out * full[2] * full[3] * taps
    direct = (
        entry is None
        or (taps.is_const and taps.value <= DIRECT_MAX_TAPS)
        or geo.out_group == 1
        or (work.is_const and work.value < BLAS_MIN_FLOPS)
    )
    if direct:
        return DirectConv2d(x, w, geo)
    weight = w if _dense(w) else ctx.materialize(w)
    pointwise = geo.pointwise and _dense(x)
    cols = (
        None if pointwise else ctx.new_buffer((geo.c * (geo.kh * geo.kw), full[2] * full[3]), dtype, "cols")
    )
    dest = ctx.result_buffer(full, dtype)
    ctx.add(ConvKernel(x, weight, dest, geo, entry, cols))
    return Load(dest, View.contiguous(full))


def _dense(x: Expr) -> bool:
    return isinstance(x, Load) and x.view == View.contiguous(x.buffer.shape)


# -- normalisation -------------------------------------------------------------------------------------


def _channel(ctx: Planner, v: Expr, shape: Shape) -> Expr:
    """A per-channel [C] vector lined up with dim 1 of ``shape`` and broadcast to it."""
    lined = v.relayout(views.reshape(v.shape, (v.shape[0],) + (as_dim(1),) * (len(shape) - 2)))
    return ctx.broadcast(lined, shape)


@lowers("batch_norm")
def _batch_norm(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    x, t = inputs[0], out[0]
    shape = x.shape
    params = [ctx.constant_value(e) for e in inputs[1:]]
    typ = np.dtype(t.dtype).type
    if all(p is not None for p in params):  # the reference's own per-channel arithmetic, done now
        mean, var = params[0], params[1]
        scale = 1 / np.sqrt(var + typ(attrs["eps"]))
        if len(params) > 2:
            scale = scale * params[2]
        shift = -mean * scale
        if len(params) > 3:
            shift = shift + params[3]
        scale_e, shift_e = ctx.constant_expr(np.asarray(scale)), ctx.constant_expr(np.asarray(shift))
    else:
        c = (x.shape[1],)
        mean, var = inputs[1], inputs[2]
        std = Map("sqrt", [Map("add", [var, Const(attrs["eps"], t.dtype, c)], t.dtype)], t.dtype)
        scale_e = Map("div", [Const(1.0, t.dtype, c), std], t.dtype)
        if len(inputs) > 3:
            scale_e = Map("mul", [scale_e, inputs[3]], t.dtype)
        shift_e = Map("mul", [Map("neg", [mean], t.dtype), scale_e], t.dtype)
        if len(inputs) > 4:
            shift_e = Map("add", [shift_e, inputs[4]], t.dtype)
    y = Map("mul", [x, _channel(ctx, scale_e, shape)], t.dtype)
    return Map("add", [y, _channel(ctx, shift_e, shape)], t.dtype)


@lowers("layer_norm")
def _layer_norm(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    x, *params = (ctx.ready(e) for e in inputs)
    k = len(attrs["normalized_shape"])
    weight = ctx.broadcast(params[0], x.shape) if params else None
    bias = ctx.broadcast(params[1], x.shape) if len(params) > 1 else None
    return RowSpec("norm", x, k, eps=attrs["eps"], weight=weight, bias=bias).result


@lowers("group_norm")
def _group_norm(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    inputs = [ctx.ready(e) for e in inputs]
    x, t = inputs[0], out[0]
    groups = attrs["num_groups"]
    n, c = x.shape[:2]
    spatial = as_dim(1)
    for d in x.shape[2:]:
        spatial = spatial * d
    space = (n, as_dim(groups), c // groups, spatial)
    src = ctx.reshape(x, space)

    def per_channel(v: Expr) -> Expr:
        return ctx.broadcast(ctx.reshape(v, (as_dim(1), as_dim(groups), c // groups, as_dim(1))), space)

    weight = per_channel(inputs[1]) if len(inputs) > 1 else None
    bias = per_channel(inputs[2]) if len(inputs) > 2 else None
    spec = RowSpec("norm", src, 2, eps=attrs["eps"], weight=weight, bias=bias)
    dest = ctx.result_buffer(space, t.dtype)
    scratch = ctx.new_buffer(spec.row_shape, t.dtype, "row") if spec.needs_scratch() else None
    ctx.add(RowKernel(spec, spec.result, dest, View.contiguous(space), scratch))
    return Load(dest, View.contiguous(_shape(t)))


# -- pooling and resizing ------------------------------------------------------------------------------


@lowers("max_pool2d", "avg_pool2d")
def _pool(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    x, unbatched = _batched(inputs[0])
    out_hw = _shape(out[0])[-2:]
    kernel = tuple(attrs["kernel_size"])
    stride = tuple(attrs["stride"] or kernel)
    if op.name == "max_pool2d":
        y = Pool2d(x, "max", out_hw, kernel, stride, tuple(attrs["padding"]), tuple(attrs["dilation"]))
    else:
        y = Pool2d(
            x,
            "avg",
            out_hw,
            kernel,
            stride,
            tuple(attrs["padding"]),
            (1, 1),
            attrs["count_include_pad"],
            attrs["divisor_override"],
        )
    return _unbatch(y, unbatched)


@lowers("adaptive_avg_pool2d")
def _adaptive(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    x, unbatched = _batched(inputs[0])
    return _unbatch(AdaptiveAvgPool2d(x, _shape(out[0])[-2:]), unbatched)


def _scales(attrs: dict) -> tuple[float | None, float | None]:
    scale = attrs.get("scale_factor")
    return (None, None) if scale is None else (scale[0], scale[1])


@lowers("resize_nearest")
def _resize_nearest(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    return ResizeNearest(inputs[0], _shape(out[0])[2:], _scales(attrs))


@lowers("resize_bilinear")
def _resize_bilinear(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    return ResizeBilinear(inputs[0], _shape(out[0])[2:], _scales(attrs), attrs["align_corners"])


@lowers("roi_align")
def _roi_align(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    return RoiAlign(
        inputs[0],
        inputs[1],
        attrs["output_size"],
        attrs["spatial_scale"],
        attrs["sampling_ratio"],
        attrs["aligned"],
    )


@lowers("embedding")
def _embedding(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    indices, weight = inputs
    return Gather(weight, indices, 0, negative_wraps=False)


# -- attention -----------------------------------------------------------------------------------------


@lowers("scaled_dot_product_attention")
def _sdpa(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    q, k, v = inputs[:3]
    t = out[0]
    dtype = t.dtype
    length, embed = q.shape[-2:]
    source = k.shape[-2]
    kt = k.relayout(views.permute(k.shape, [*range(len(k.shape) - 2), len(k.shape) - 1, len(k.shape) - 2]))
    batch = broadcast_batch(q.shape[:-2], k.shape[:-2])
    scores = matmul(ctx, q, kt, dtype, (*batch, length, source))
    if attrs["scale"] is None:
        if not embed.is_const:
            raise LoweringError("the feature dim E must be a constant when scale is None")
        factor = float(np.dtype(dtype).type(1 / math.sqrt(embed.value)))
    else:
        factor = float(np.dtype(dtype).type(attrs["scale"]))
    full = (*batch, length, source)
    if len(inputs) == 4:
        mask = inputs[3]
        full = (*broadcast_batch(batch, mask.shape[:-2]), length, source)
    p: Expr = ctx.map("mul", [scores, Const(factor, dtype, scores.shape)], dtype, full)
    neg_inf = Const(float("-inf"), dtype, full)
    if attrs["is_causal"]:
        rank = len(full)
        keep = Map("less_equal", [Index(rank - 1, full), Index(rank - 2, full)], "bool")
        p = Map("where", [keep, p, neg_inf], dtype)
    elif len(inputs) == 4:
        if mask.dtype == "bool":
            p = ctx.map("where", [mask, p, neg_inf], dtype, full)
        else:
            p = ctx.map("add", [p, cast_to(mask, dtype)], dtype, full)
    weights = RowSpec("safe_softmax", ctx.ready(p), 1).result
    return matmul(ctx, weights, v, dtype, _shape(t))
