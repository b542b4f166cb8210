"""Elementwise ops as scalar IR, and the fused elementwise kernel (one loop nest per chain).

Why numpy decides the arithmetic type: ``add(int32, float32)`` computes in float64 because numpy's
ufunc loop is ``dd->d``; asking ``ufunc.resolve_dtypes`` for the loop and casting the operands to it
reproduces every promotion rule without a table of our own. Transcendentals come from the
vectorisable ``msvm.native.mathlib`` (LLVM here has no vector libm, so ``tanhf`` would keep a loop
scalar); float16 is computed in float and rounded, as numpy does. Floating-point ops carry only the
``contract`` flag (FMA): NaN and infinities behave as in numpy.

The kernel collapses dims that every access walks contiguously (an 8×8 chain becomes one loop of
64), so the innermost loop is long and unit-stride and LLVM vectorises it; a plain copy whose inner
run is contiguous on both sides becomes ``llvm.memcpy`` per outer index (one call when fully dense).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from llvmlite import ir

from ...kernels import elementwise as native_elementwise
from ...native import host, mathlib
from ...native.irhelpers import fma, intrinsic, nan_extreme
from ...ops.registry import REGISTRY
from ...shapes import Dim
from . import dtypes
from .buffers import Buffer
from .dtypes import F32, I1, I8, I64, cast, constant, is_float
from .emit import FnBuilder, ModuleEmitter, loop_nest, run_job
from .kernels import Kernel, expr_buffers, has_checks
from .nodes import Const, Expr, Load, Map, replace, summary, walk
from .views import ONE, View, numel, same

FLAGS = ("contract",)
# An expression at least this deep is a long chain of dependent ops per element: its loop is
# vectorised up to ``CHAIN_VECTORS`` registers wide, so that many chains run side by side instead of
# each waiting on its own latency (LLVM's choice is one register). Asking for a wider vector rather
# than an interleave count leaves LLVM's optimiser one copy of the chain; only instruction selection
# sees the copies. A chain gets ``CHAIN_BUDGET // depth`` registers at most, and fewer when a short
# constant loop would leave more than a register's worth to the remainder loop. Two registers, not
# four: the last fifth of a microsecond a call is not worth the compile time it costs every such
# region (``docs/performance.md``, "Long chains"; ``python -m bench codegen`` re-measures).
LONG_CHAIN = 16
CHAIN_VECTORS = 2
CHAIN_BUDGET = 640
_SQRT_2_OVER_PI = 0.7978845608028654
_INV_SQRT2 = 0.7071067811865476

Values = list[ir.Value]


# -- dtypes -------------------------------------------------------------------------------------------


@functools.cache
def loop_dtypes(op: str, in_dtypes: tuple[str, ...], out_dtype: str) -> tuple[tuple[str, ...], str]:
    """(operand dtypes, result dtype) of the computation numpy performs for ``op``."""
    ufunc = REGISTRY[op].extra.get("numpy") if op in REGISTRY else None
    if isinstance(ufunc, np.ufunc) and ufunc.nin == len(in_dtypes):
        resolved = ufunc.resolve_dtypes((*(np.dtype(d) for d in in_dtypes), None))
        return tuple(r.name for r in resolved[:-1]), resolved[-1].name
    return (out_dtype,) * len(in_dtypes), out_dtype


# -- scalar helpers -----------------------------------------------------------------------------------


def intrinsic_call(fb: FnBuilder, name: str, *args: ir.Value) -> ir.Value:
    typ = args[0].type
    suffix = {dtypes.F16: "f16", dtypes.F32: "f32", dtypes.F64: "f64"}[typ]
    return fb.b.call(intrinsic(fb.module, f"llvm.{name}.{suffix}", typ, [typ] * len(args)), list(args))


def math_call(fb: FnBuilder, name: str, x: ir.Value) -> ir.Value:
    """mathlib's ``name`` (float/double), through float for half."""
    if x.type == dtypes.F16:
        return fb.b.fptrunc(math_call(fb, name, fb.b.fpext(x, F32)), dtypes.F16)
    return fb.b.call(mathlib.math_function(fb.module, name, x.type), [x])


def _const_like(x: ir.Value, value: float) -> ir.Value:
    return ir.Constant(x.type, value)


def _int_minmax(b: ir.IRBuilder, a: ir.Value, c: ir.Value, bigger: bool) -> ir.Value:
    return b.select(b.icmp_signed(">" if bigger else "<", a, c), a, c)


def _arith(float_op: str, int_op: str, bool_op: str | None = None) -> Callable[..., ir.Value]:
    def emit(fb: FnBuilder, args: Values, dtype: str, attrs: dict) -> ir.Value:
        b = fb.b
        a, c = args
        if is_float(dtype):
            return getattr(b, float_op)(a, c, flags=FLAGS)
        if dtype == "bool":
            return getattr(b, bool_op)(a, c)
        return getattr(b, int_op)(a, c)

    return emit


def extreme(b: ir.IRBuilder, a: ir.Value, c: ir.Value, dtype: str, bigger: bool) -> ir.Value:
    """numpy's maximum/minimum: a NaN in either operand wins.

    Against a constant (never NaN) one compare and select, ``c > a ? c : a``; otherwise
    ``llvm.maximum``/``minimum`` (``nan_extreme``), which LLVM vectorises as a reduction too: a
    compare-select pair with a NaN select left max-reductions scalar (a 512×1000 row max took 232 µs
    against 22 µs) and cost a 200-op chain 30 ms of InstCombine. numpy gives the second operand of a
    ±0 tie; here which zero comes out is unspecified.
    """
    if dtype == "bool":
        return b.or_(a, c) if bigger else b.and_(a, c)
    if not is_float(dtype):
        return _int_minmax(b, a, c, bigger)
    if isinstance(c, ir.Constant):
        # a constant is not NaN; a NaN ``a`` is kept by the select
        return b.select(b.fcmp_ordered(">" if bigger else "<", c, a), c, a)
    return nan_extreme(b, a, c, bigger)


def _extreme(bigger: bool) -> Callable[..., ir.Value]:
    def emit(fb: FnBuilder, args: Values, dtype: str, attrs: dict) -> ir.Value:
        return extreme(fb.b, args[0], args[1], dtype, bigger)

    return emit


def _compare(pred: str) -> Callable[..., ir.Value]:
    def emit(fb: FnBuilder, args: Values, dtype: str, attrs: dict) -> ir.Value:
        a, c = args
        if is_float(dtype):
            return fb.b.fcmp_unordered(pred, a, c) if pred == "!=" else fb.b.fcmp_ordered(pred, a, c)
        if dtype == "bool":
            return fb.b.icmp_unsigned(pred, a, c)
        return fb.b.icmp_signed(pred, a, c)

    return emit


def _pow(fb: FnBuilder, args: Values, dtype: str, attrs: dict) -> ir.Value:
    a, c = args
    b = fb.b
    exponent = attrs.get("exponent")
    if exponent == 1:
        return a
    if exponent == 2:
        return b.fmul(a, a)
    return intrinsic_call(fb, "pow", a, c)


def _neg(fb: FnBuilder, args: Values, dtype: str, attrs: dict) -> ir.Value:
    x = args[0]
    return fb.b.fneg(x) if is_float(dtype) else fb.b.neg(x)


def _abs(fb: FnBuilder, args: Values, dtype: str, attrs: dict) -> ir.Value:
    x = args[0]
    if is_float(dtype):
        return intrinsic_call(fb, "fabs", x)
    if dtype == "bool":
        return x
    return fb.b.select(fb.b.icmp_signed("<", x, ir.Constant(x.type, 0)), fb.b.neg(x), x)


def _unary_math(name: str) -> Callable[..., ir.Value]:
    return lambda fb, args, dtype, attrs: math_call(fb, name, args[0])


def _intrinsic(name: str) -> Callable[..., ir.Value]:
    return lambda fb, args, dtype, attrs: intrinsic_call(fb, name, args[0])


def _rsqrt(fb: FnBuilder, args: Values, dtype: str, attrs: dict) -> ir.Value:
    x = args[0]
    return fb.b.fdiv(_const_like(x, 1.0), intrinsic_call(fb, "sqrt", x))


def _silu(fb: FnBuilder, args: Values, dtype: str, attrs: dict) -> ir.Value:
    x = args[0]
    return fb.b.fmul(x, math_call(fb, "sigmoid", x), flags=FLAGS)


def _relu(fb: FnBuilder, args: Values, dtype: str, attrs: dict) -> ir.Value:
    x = args[0]
    return extreme(fb.b, x, ir.Constant(x.type, 0.0 if is_float(dtype) else 0), dtype, True)


def _gelu(fb: FnBuilder, args: Values, dtype: str, attrs: dict) -> ir.Value:
    x = args[0]
    b = fb.b
    if x.type == F32 and attrs.get("approximate") != "tanh":
        return mathlib.emit_gelu_f32(b, x)
    half_x = b.fmul(x, _const_like(x, 0.5), flags=FLAGS)
    if attrs.get("approximate") == "tanh":
        cube = b.fmul(b.fmul(x, x), x)
        inner = b.fmul(_const_like(x, _SQRT_2_OVER_PI), b.fadd(x, b.fmul(_const_like(x, 0.044715), cube)))
        t = math_call(fb, "tanh", inner)
    else:
        t = math_call(fb, "erf", b.fmul(x, _const_like(x, _INV_SQRT2)))
    if x.type == dtypes.F16:
        return b.fmul(half_x, b.fadd(_const_like(x, 1.0), t))
    return fma(b, half_x, t, half_x)  # x/2·(1 + t) with one rounding less


def _clamp(fb: FnBuilder, args: Values, dtype: str, attrs: dict) -> ir.Value:
    x = args[0]
    lo, hi = attrs.get("min"), attrs.get("max")
    if lo is not None:
        x = _extreme(True)(fb, [x, constant(dtype, lo)], dtype, attrs)
    if hi is not None:
        x = _extreme(False)(fb, [x, constant(dtype, hi)], dtype, attrs)
    return x


OPS: dict[str, Callable[[FnBuilder, Values, str, dict], ir.Value]] = {
    "add": _arith("fadd", "add", "or_"),
    "sub": _arith("fsub", "sub"),
    "mul": _arith("fmul", "mul", "and_"),
    "div": _arith("fdiv", "sdiv"),
    "pow": _pow,
    "maximum": _extreme(True),
    "minimum": _extreme(False),
    "greater": _compare(">"),
    "less": _compare("<"),
    "equal": _compare("=="),
    "greater_equal": _compare(">="),
    "less_equal": _compare("<="),
    "not_equal": _compare("!="),
    "neg": _neg,
    "abs": _abs,
    "exp": _unary_math("exp"),
    "log": _unary_math("log"),
    "tanh": _unary_math("tanh"),
    "sigmoid": _unary_math("sigmoid"),
    "erf": _unary_math("erf"),
    "sqrt": _intrinsic("sqrt"),
    "sin": _intrinsic("sin"),
    "cos": _intrinsic("cos"),
    "rsqrt": _rsqrt,
    "silu": _silu,
    "relu": _relu,
    "gelu": _gelu,
    "clamp": _clamp,
}
ELEMENTWISE_OPS = frozenset(OPS) | {"cast", "where"}
# Ops costing tens of instructions per element: a value computed with them is worth storing once
# rather than recomputing in each kernel that reads it.
COSTLY_OPS = frozenset({"pow", "exp", "log", "tanh", "sigmoid", "erf", "sin", "cos", "silu", "gelu"})


def apply(
    fb: FnBuilder, op: str, attrs: dict[str, Any], values: Values, in_dtypes: Sequence[str], out_dtype: str
) -> ir.Value:
    """``op`` on register values of ``in_dtypes``, giving a register of ``out_dtype``."""
    b = fb.b
    if op == "cast":
        return cast(b, values[0], in_dtypes[0], out_dtype)
    if op == "where":
        cond = cast(b, values[0], in_dtypes[0], "bool")
        return b.select(
            cond, cast(b, values[1], in_dtypes[1], out_dtype), cast(b, values[2], in_dtypes[2], out_dtype)
        )
    loop_in, loop_out = loop_dtypes(op, tuple(in_dtypes), out_dtype)
    args = [cast(b, v, d, t) for v, d, t in zip(values, in_dtypes, loop_in)]
    return cast(b, OPS[op](fb, args, loop_in[0], attrs), loop_out, out_dtype)


# -- the fused elementwise kernel ---------------------------------------------------------------------


def _collapsible(expr: Expr) -> bool:
    return all(isinstance(n, (Load, Const, Map)) for n in walk(expr))


def collapse(expr: Expr, view: View) -> tuple[Expr, View]:
    """Merge adjacent dims that every view walks contiguously, and drop extent-1 dims."""
    if not _collapsible(expr) or view.rank == 0:
        return expr, view
    views = [view] + [n.view for n in walk(expr) if isinstance(n, Load)]
    keep = [i for i, d in enumerate(view.shape) if d != 1]
    groups: list[list[int]] = []
    for i in keep:
        if groups:
            j = groups[-1][-1]
            if all(same(v.strides[j], v.strides[i] * v.shape[i]) for v in views):
                groups[-1].append(i)
                continue
        groups.append([i])
    if len(groups) == view.rank:
        return expr, view

    def merged(v: View) -> View:
        shape, strides = [], []
        for g in groups:
            extent = ONE
            for i in g:
                extent = extent * v.shape[i]
            shape.append(extent)
            strides.append(v.strides[g[-1]])
        return View(tuple(shape), tuple(strides), v.offset)

    new_shape = merged(view).shape

    def sub(node: Expr) -> Expr | None:
        if isinstance(node, Load):
            return Load(node.buffer, merged(node.view))
        if isinstance(node, Const):
            return Const(node.scalar, node.dtype, new_shape)
        return None

    return replace(expr, sub), merged(view)


def _memcpy(fb: FnBuilder) -> ir.Function:
    return intrinsic(
        fb.module, "llvm.memcpy.p0i8.p0i8.i64", ir.VoidType(), [I8.as_pointer(), I8.as_pointer(), I64, I1]
    )


def chain_width(extent: Dim, registers: int, itemsize: int) -> int | None:
    """Elements per vector iteration for a long chain's loop over ``extent``: up to ``registers``
    vector registers (a power of two), fewer while a constant loop is shorter than two iterations
    and not a multiple of one; None for LLVM's own choice."""
    lanes = max(1, host.cpu()["vector_bits"] // 8 // itemsize)
    registers = 1 << (max(registers, 1).bit_length() - 1)
    while registers > 1:
        width = lanes * registers
        if not extent.is_const or extent.value % width == 0 or extent.value >= 2 * width:
            return width
        registers //= 2
    return None


def native_unary(expr: Expr, out: Buffer, view: View) -> tuple[str, Load] | None:
    """(the native job's form, its source) when ``out[view] = expr`` is one op of
    ``kernels.elementwise`` on a dense array of the output's float dtype, else None. Such a kernel
    fuses nothing, and its transcendental is most of a region's LLVM time (a GELU's, about two thirds), so
    it calls the interpreter's job for the op — a library compiled once per process — instead."""
    if not (isinstance(expr, Map) and len(expr.args) == 1 and isinstance(expr.args[0], Load)):
        return None
    src, attrs = expr.args[0], dict(expr.attrs)
    form = "gelu_tanh" if expr.op == "gelu" and attrs.get("approximate") == "tanh" else expr.op
    dtype = expr.dtype
    if form not in native_elementwise.FLOPS_PER_ELEMENT or dtype not in native_elementwise.FLOATS:
        return None
    if src.dtype != dtype or out.dtype != dtype or not (view.is_contiguous() and src.view.is_contiguous()):
        return None
    if src.buffer.resolve() is out.resolve() and not same(src.view.offset, view.offset):
        return None  # a shifted view of the output: one thread's chunk would read what another wrote
    return form, src


class ElementwiseKernel(Kernel):
    """``out[view] = expr``: one loop nest over the output, every fused op inlined in its body (or one
    native job's call, ``native_unary``)."""

    def __init__(self, out: Buffer, view: View, expr: Expr) -> None:
        self.out, self.view, self.expr = out, view, expr
        self.can_fail = has_checks(expr)

    def reads(self) -> list[Buffer]:
        return expr_buffers(self.expr)

    def writes(self) -> list[Buffer]:
        return [self.out]

    def inplace_source(self) -> Expr | None:
        return self.expr

    def parallel_work(self) -> Dim | None:
        return None if native_unary(self.expr, self.out, self.view) else numel(self.view.shape)

    def describe(self) -> str:
        shape = "x".join(map(str, self.view.shape)) or "scalar"
        native = native_unary(self.expr, self.out, self.view)
        tail = f" (native {native[0]})" if native else ""
        return f"elementwise[{shape}] {self.out.resolve().name} = {summary(self.expr)}{tail}"

    def is_noop(self) -> bool:
        """A copy of the output onto itself (what a copy becomes when its source is folded into it)."""
        expr = self.expr
        return (
            isinstance(expr, Load) and expr.buffer.resolve() is self.out.resolve() and expr.view == self.view
        )

    def is_copy(self) -> bool:
        expr, view = collapse(self.expr, self.view)
        return (
            isinstance(expr, Load)
            and expr.dtype == self.out.dtype
            and view.rank > 0
            and view.strides[-1] == 1
            and expr.view.strides[-1] == 1
        )

    def emit(self, em: ModuleEmitter) -> FnBuilder:
        fb = em.function("ew", [self.out, *self.reads()])
        native = native_unary(self.expr, self.out, self.view)
        if native is not None:
            form, src = native
            n = fb.dim(numel(self.view.shape))
            values = {"x": fb.at(src.buffer, src.view.offset), "out": fb.at(self.out, self.view.offset),
                      "n": n}
            work = fb.b.mul(n, ir.Constant(I64, native_elementwise.FLOPS_PER_ELEMENT[form]))
            run_job(fb, native_elementwise.FRAME, values, ("unary", form, self.out.dtype), work)
            fb.finish()
            return fb
        expr, view = collapse(self.expr, self.view)
        if self.is_copy():
            row = dtypes.itemsize(self.out.dtype)

            def body(idx: list[ir.Value]) -> None:
                b = fb.b
                full = [*idx, ir.Constant(I64, 0)]
                dst = b.bitcast(fb.address(self.out, view, full), I8.as_pointer())
                src = b.bitcast(fb.address(expr.buffer, expr.view, full), I8.as_pointer())
                nbytes = b.mul(fb.dim(view.shape[-1]), ir.Constant(I64, row))
                b.call(_memcpy(fb), [dst, src, nbytes, ir.Constant(I1, 0)])

            loop_nest(fb, view.shape[:-1], body, split_outer=view.rank > 1)
        else:

            def body(idx: list[ir.Value]) -> None:
                value = cast(fb.b, expr.value(fb, idx), expr.dtype, self.out.dtype)
                fb.store(self.out, view, idx, value)

            width = None
            if expr.depth >= LONG_CHAIN and view.rank:
                width = chain_width(view.shape[-1], min(CHAIN_VECTORS, CHAIN_BUDGET // expr.depth),
                                    dtypes.itemsize(expr.dtype))
            loop_nest(fb, view.shape, body, split_outer=True, width=width)
        fb.finish()
        return fb
