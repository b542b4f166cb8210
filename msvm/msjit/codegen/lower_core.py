"""Lowering of the core ops: elementwise, reductions, softmax, layout, creation and linalg.

Each function turns one OP_CALL into expressions over its inputs' expressions (``nodes``), adding
kernels through the planner only where the op needs memory: reductions, GEMMs, concat, and softmax
over an axis that is not the last. Everything else stays lazy and fuses into whatever consumes it.
A GEMM runs on the job pool (``PoolGemm``) when its B is small enough, else through BLAS; a small one
is a fused contraction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...kernels import gemm_packed
from ...ops.registry import OpDef, TensorType
from ...shapes import Dim, as_dim, dmax, dmin
from . import views
from .buffers import Buffer
from .emit_elementwise import ELEMENTWISE_OPS
from .emit_layout import Gather, Pad
from .emit_linalg import Contraction, GemmKernel, Operand, PoolGemm, fold_batch, operand
from .emit_reduce import ReduceKernel, RowKernel, RowSpec, reduction_layout
from .nodes import Const, Expr, Index, Load, Map
from .plan import Planner
from .registry import lowers, refuses
from .views import Shape, View, numel

_HUGE = 2**62
BLAS_MIN_FLOPS = 1 << 15  # exact-mode contractions smaller than this run as fused loops
# GEMMs whose B is at most this large run on the job pool (``PoolGemm``), larger ones through BLAS: the
# bound up to which the pool packs a constant weight once (W2's 16 MiB weights: the pool's GEMM beats
# OpenBLAS's, which packs them again on every call). The compile worker describes the packed weights
# by their recipe and this process packs them from its own constants (``region``), once.
POOL_GEMM_MAX_BYTES = gemm_packed.PACK_ONCE_MAX_BYTES


def _shape(t: TensorType) -> Shape:
    return tuple(t.shape)


def cast_to(expr: Expr, dtype: str) -> Expr:
    return expr if expr.dtype == dtype else Map("cast", [expr], dtype)


def _axes(axis: Any, rank: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(rank))
    items = (axis,) if isinstance(axis, int) else tuple(axis)
    return tuple(sorted(a % rank for a in items))


# -- elementwise ---------------------------------------------------------------------------------------


@refuses("pow")
def _pow_refusal(attrs: dict, input_types: Sequence[TensorType]) -> str | None:
    if all(t.dtype in ("int32", "int64", "bool") for t in input_types):
        return "integer pow raises on negative exponents in numpy (native code cannot raise); interpreted"
    return None


@lowers(*ELEMENTWISE_OPS)
def _elementwise(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    t = out[0]
    extra: dict[str, Any] = {k: v for k, v in attrs.items() if k != "dtype"}
    if op.name == "pow" and isinstance(inputs[1], Const) and inputs[1].scalar in (1, 2):
        extra["exponent"] = inputs[1].scalar
    return ctx.map(op.name, inputs, t.dtype, _shape(t), tuple(sorted(extra.items())))


# -- reductions ----------------------------------------------------------------------------------------


@lowers("sum", "mean", "max", "min", "argmax")
def _reduce(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    x, t = ctx.ready(inputs[0]), out[0]
    rank = len(x.shape)
    axes = _axes(attrs["axis"], rank)
    if not axes:  # numpy reduces over nothing: the values themselves, in the result dtype
        return cast_to(x, t.dtype)
    kept = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    if op.name == "argmax":
        acc_dtype = x.dtype
    elif op.name == "mean" and t.dtype == "float16":
        acc_dtype = "float32"
    else:
        acc_dtype = t.dtype
    _, in_memory = reduction_layout(rank, axes)
    dest = ctx.result_buffer(kept, t.dtype)
    acc = (
        ctx.new_buffer(kept, acc_dtype, "acc")
        if in_memory and (acc_dtype != t.dtype or op.name == "argmax")
        else None
    )
    ctx.add(ReduceKernel(op.name, x, axes, dest, acc_dtype, acc))
    return Load(dest, View.contiguous(_shape(t)))


@lowers("softmax", "log_softmax")
def _softmax(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    t = out[0]
    x = cast_to(ctx.ready(inputs[0]), t.dtype)
    rank = len(x.shape)
    axis = attrs["axis"] % rank
    if axis == rank - 1:
        return RowSpec(op.name, x, 1).result
    perm = [i for i in range(rank) if i != axis] + [axis]
    spec = RowSpec(op.name, x.relayout(views.permute(x.shape, perm)), 1)
    dest = ctx.result_buffer(_shape(t), t.dtype)
    view = View.contiguous(_shape(t)).map(views.permute(_shape(t), perm))
    scratch = ctx.new_buffer(spec.row_shape, t.dtype, "row")
    ctx.add(RowKernel(spec, spec.result, dest, view, scratch))
    return Load(dest, View.contiguous(_shape(t)))


# -- layout --------------------------------------------------------------------------------------------


@lowers("reshape", "flatten")
def _reshape(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    return ctx.reshape(inputs[0], _shape(out[0]))


@lowers("squeeze")
def _squeeze(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    x = inputs[0]
    axis = attrs["axis"]
    if axis is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    else:
        axes = list(_axes(axis, len(x.shape)))
    return x.relayout(views.squeeze(x.shape, axes))


@lowers("unsqueeze")
def _unsqueeze(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    x = inputs[0]
    return x.relayout(views.unsqueeze(x.shape, attrs["axis"] % (len(x.shape) + 1)))


@lowers("transpose", "permute")
def _transpose(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    x = inputs[0]
    return x.relayout(views.permute(x.shape, views.axis_order(op.name, attrs, len(x.shape))))


@lowers("broadcast_to")
def _broadcast_to(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    return ctx.broadcast(inputs[0], _shape(out[0]))


def slice_start(size: Dim, start: Dim, step: int) -> Dim:
    """Where Python's ``range(size)[start::step]`` begins, for every size (the slice may be empty)."""
    if size.is_const and start.is_const:
        return as_dim(slice(start.value, None, step).indices(size.value)[0])
    forward = step > 0
    if not start.is_const:  # a scalar register: counted from the front (guarded >= 0)
        return dmin(start, size) if forward else dmin(start, size - 1)
    v = start.value
    if v >= _HUGE:
        return size if forward else size - 1
    if v <= -_HUGE:
        return as_dim(0) if forward else as_dim(-1)
    if v >= 0:
        return dmin(start, size) if forward else dmin(start, size - 1)
    return dmax(size + v, 0) if forward else dmax(size + v, -1)


def slice_map(
    shape: Shape, axes: Sequence[int], starts: Sequence[Any], steps: Sequence[int], lengths: Sequence[Dim]
) -> views.Affine:
    rank = len(shape)
    axes = [a % rank for a in axes]
    begin = [slice_start(shape[a], as_dim(s), st) for a, s, st in zip(axes, starts, steps)]
    return views.slice_axes(shape, axes, begin, steps, lengths)


@lowers("slice")
def _slice(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    x, t = inputs[0], out[0]
    axes = [a % len(x.shape) for a in attrs["axes"]]
    steps = tuple(attrs["steps"]) or (1,) * len(axes)
    lengths = [t.shape[a] for a in axes]
    return x.relayout(slice_map(x.shape, axes, attrs["starts"], steps, lengths))


@lowers("split")
def _split(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> list[Expr]:
    x = inputs[0]
    axis = attrs["axis"] % len(x.shape)
    parts, start = [], as_dim(0)
    for t in out:
        length = t.shape[axis]
        parts.append(x.relayout(views.slice_axes(x.shape, [axis], [start], [1], [length])))
        start = start + length
    return parts


@lowers("concat")
def _concat(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    t = out[0]
    shape = _shape(t)
    axis = attrs["axis"] % len(shape)
    dest = ctx.result_buffer(shape, t.dtype)
    full = View.contiguous(shape)
    start = as_dim(0)
    for x in inputs:
        length = x.shape[axis]
        part = full.map(views.slice_axes(shape, [axis], [start], [1], [length]))
        ctx.materialize(cast_to(x, t.dtype), dest, part)
        start = start + length
    return Load(dest, full)


@lowers("pad")
def _pad(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    x = inputs[0]
    rank = len(x.shape)
    pads = [(0, 0)] * rank
    given = attrs["pads"]
    for i in range(len(given) // 2):
        pads[rank - 1 - i] = (given[2 * i], given[2 * i + 1])
    return Pad(x, pads, attrs["mode"], attrs["value"])


@lowers("take")
def _take(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    x, indices = inputs
    axis = attrs["axis"]
    if axis is None:
        x, axis = ctx.reshape(x, (numel(x.shape),)), 0
    return Gather(x, indices, axis % len(x.shape), negative_wraps=True)


# -- creation ------------------------------------------------------------------------------------------


@lowers("zeros", "ones", "full")
def _fill(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    t = out[0]
    value = {"zeros": 0, "ones": 1}.get(op.name, attrs.get("fill_value"))
    return Const(value, t.dtype, _shape(t))


@lowers("arange")
def _arange(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    t = out[0]
    shape = _shape(t)
    start, step = as_dim(attrs["start"]), as_dim(attrs["step"])
    value = Map(
        "add",
        [Const(start, "int64", shape), Map("mul", [Index(0, shape), Const(step, "int64", shape)], "int64")],
        "int64",
    )
    return cast_to(value, t.dtype)


# -- linalg --------------------------------------------------------------------------------------------


def _flops(*dims: Dim) -> Dim:
    total = as_dim(1)
    for d in dims:
        total = total * d
    return total


def matmul(ctx: Planner, a: Expr, b: Expr, dtype: str, out_shape: Shape) -> Expr:
    """numpy matmul of two expressions: a GEMM kernel, or a fused contraction when small."""
    a2 = a if len(a.shape) > 1 else ctx.reshape(a, (as_dim(1), a.shape[0]))
    b2 = b if len(b.shape) > 1 else ctx.reshape(b, (b.shape[0], as_dim(1)))
    m, k = a2.shape[-2:]
    n = b2.shape[-1]
    batch = broadcast_batch(a2.shape[:-2], b2.shape[:-2])
    a3 = ctx.broadcast(cast_to(a2, dtype), (*batch, m, k))
    b3 = ctx.broadcast(cast_to(b2, dtype), (*batch, k, n))
    full = (*batch, m, n)
    entry = ctx.gemm_entry(dtype)
    flops = _flops(*full, k)
    pool = dtype in gemm_packed.DTYPES and len(batch) <= 1 and fits_pool(k * n, dtype)
    if (entry is None and not pool) or (flops.is_const and flops.value < BLAS_MIN_FLOPS):
        return _as(ctx, Contraction(a3, b3, dtype), out_shape)
    a_op, b_op = (_operand(ctx, x) for x in (a3, b3))
    if pool and a_op.trans and entry is not None:
        pool = False  # the job reads x by rows: a column-major x goes to BLAS as it is
    elif pool and a_op.trans:
        a_op = _operand(ctx, ctx.materialize(a3))
    dest, view = ctx.result_layout(full, dtype)
    if pool:
        pool_gemm(ctx, a_op, b_op, None, None, dest, view, n)
    else:
        ctx.add(GemmKernel(a_op, b_op, dest, entry, view))
    return _as(ctx, Load(dest, view), out_shape)


def _as(ctx: Planner, result: Expr, out_shape: Shape) -> Expr:
    return result if len(result.shape) == len(out_shape) else ctx.reshape(result, out_shape)


def fits_pool(b_elements: Dim, dtype: str) -> bool:
    """Is B small enough for the job pool's GEMM (a symbolic size is bounded by its bucket: yes)?"""
    return not b_elements.is_const or b_elements.value * np.dtype(dtype).itemsize <= POOL_GEMM_MAX_BYTES


def pool_gemm(ctx: Planner, a: Operand, b: Operand | None, packed: Buffer | None, bias: Buffer | None,
              dest: Buffer, view: View, n: Dim) -> None:
    """Add the ``PoolGemm`` of ``a @ B`` into ``dest`` through ``view`` (B the operand ``b``, or the constant
    ``packed`` panels with their padded ``bias``); a batch that continues a's rows becomes more rows."""
    if b is not None and view.is_contiguous():
        folded = fold_batch(a, b, view.shape)
        if folded is not None:
            a, b, shape = folded
            view = View.contiguous(shape, view.offset)
    scratch = None
    if b is not None:
        size = gemm_packed.scratch_bytes(a.view.shape[-1], dest.dtype)
        scratch = ctx.new_buffer((size // 8,), "int64", "gemm")
        scratch.per_thread = True
    ctx.add(PoolGemm(a, b, packed, bias, dest, view, n, scratch))


def broadcast_batch(a: Shape, b: Shape) -> Shape:
    """numpy's broadcast of two batch shapes (the verifier has already checked them)."""
    rank = max(len(a), len(b))
    a = (as_dim(1),) * (rank - len(a)) + tuple(a)
    b = (as_dim(1),) * (rank - len(b)) + tuple(b)
    return tuple(y if x == 1 else x for x, y in zip(a, b))


def _operand(ctx: Planner, x: Expr):
    if isinstance(x, Load):
        op = operand(x)
        if op is not None:
            return op
    return operand(ctx.materialize(x))


@lowers("matmul")
def _matmul(ctx: Planner, op: OpDef, inputs: list[Expr], attrs: dict, out: list[TensorType]) -> Expr:
    return matmul(ctx, inputs[0], inputs[1], out[0].dtype, _shape(out[0]))


