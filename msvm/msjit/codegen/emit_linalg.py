"""GEMMs on the job pool or through the BLAS found at run time, small contractions as loops, and im2col
convolution.

``PoolGemm`` runs ``msvm.kernels.gemm_packed``'s job on the job pool (the threads of the region's
convolutions and row kernels): B is a constant weight packed into panels when the region was lowered
(with its bias, and the ReLU / residual epilogue it takes over), or an operand the job packs a panel
at a time. ``GemmKernel`` calls the measured-fastest ``?gemm`` (``msvm.native.blas``) from generated code by
address, in either ABI (row-major cblas, or column-major Fortran as ``Cᵀ = Bᵀ·Aᵀ``, integers of
either width). Operands are views: a transposed weight is passed with the transpose flag, a
sliced one with its row stride, broadcast batches by looping or — when only ``a`` is batched and
its batch dims fold into its rows — as one call with ``M·batch`` rows. Bias, activation and
residual epilogues are not here: the GEMM writes a buffer and the plan fuses the epilogue chain
into one elementwise pass over it (in place when it is the last use).

``Contraction`` is a GEMM as an expression (a k-loop per element) for small or non-BLAS dtypes; it
fuses into its consumers. ``ConvKernel`` is im2col + GEMM per image: the column matrix is an
elementwise kernel over the (fused) input expression, written into an arena scratch that one
image at a time reuses; a 1×1/stride-1 convolution of a dense input skips im2col.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llvmlite import ir

from ...kernels import gemm_packed
from ...native.blas import GemmEntry
from ...native.blas_ir import emit_gemm
from ...native.irhelpers import for_range
from ...shapes import Dim
from . import dims as dimlib
from . import dtypes
from .buffers import Buffer
from .dtypes import I64, cast
from .emit import FnBuilder, ModuleEmitter, accumulate, loop_nest, run_job
from .emit_elementwise import ElementwiseKernel, apply
from .emit_reduce import combine
from .epilogue import EpilogueKernel
from .kernels import Kernel, expr_buffers, has_checks
from .nodes import Expr, Load, summary
from .views import ZERO, Shape, View, contiguous_strides, numel, same


def _nonnegative(d: Dim) -> bool:
    return dimlib.interval(d, {s: (0, dimlib.INF) for s in d.free_symbols})[0] >= 0


@dataclass(frozen=True)
class Operand:
    """A matrix operand: the buffer, its (batch…, rows, cols) view, and how BLAS reads it."""

    buffer: Buffer
    view: View
    trans: bool
    ld: Dim


def operand(load: Load) -> Operand | None:
    """``load`` as a BLAS operand, or None when its inner strides do not allow one."""
    view = load.view
    rows, cols = view.shape[-2:]
    sr, sc = view.strides[-2:]
    if not all(_nonnegative(s) for s in view.strides):
        return None
    if cols == 1 or sc == 1:
        ld = cols if rows == 1 else sr
        if ld != 0 and (not (ld.is_const and cols.is_const) or ld.value >= cols.value):
            return Operand(load.buffer, view, False, ld if ld != 0 else cols)
    if rows == 1 or sr == 1:
        ld = rows if cols == 1 else sc
        if ld != 0 and (not (ld.is_const and rows.is_const) or ld.value >= rows.value):
            return Operand(load.buffer, view, True, ld)
    return None


def fold_batch(a: Operand, b: Operand, out_shape: Shape) -> tuple[Operand, Operand, Shape] | None:
    """One call for ``[batch…, M, K] @ [K, N]`` when a's batch dims continue its rows."""
    batch = len(a.view.shape) - 2
    if batch == 0 or a.trans or any(s != 0 and d != 1 for s, d in zip(b.view.strides[:batch], b.view.shape)):
        return None
    dims_ = a.view.shape[: batch + 1]
    strides = (*a.view.strides[:batch], a.ld)
    for i in range(batch):
        if dims_[i + 1] != 1 and not same(strides[i], strides[i + 1] * dims_[i + 1]):
            return None
    rows = Dim.const(1)
    for d in dims_:
        rows = rows * d
    k = a.view.shape[-1]
    a2 = Operand(a.buffer, View((rows, k), (a.ld, a.view.strides[-1]), a.view.offset), False, a.ld)
    b2 = Operand(b.buffer, View(b.view.shape[-2:], b.view.strides[-2:], b.view.offset), b.trans, b.ld)
    return a2, b2, (rows, out_shape[-1])


def _gemm_or_zero(
    fb: FnBuilder,
    entry: GemmEntry,
    a: Operand,
    b: Operand,
    m: ir.Value,
    n: ir.Value,
    k: ir.Value,
    pa: ir.Value,
    pb: ir.Value,
    out: Buffer,
    c_off: ir.Value,
    ldc: ir.Value,
) -> None:
    """The BLAS call, skipped for empty outputs; an empty contraction writes zeros (BLAS's rule). Only
    sizes that are not known positive constants get these guards (none for LLVM to fold in exact mode)."""
    bld = fb.b
    zero = ir.Constant(I64, 0)

    def positive(v: ir.Value) -> bool:
        return isinstance(v, ir.Constant) and v.constant > 0

    def gemm() -> None:
        lda, ldb = _at_least_one(fb, a, k, m), _at_least_one(fb, b, n, k)
        emit_gemm(fb.b, entry, fb.extern(("gemm", entry.name)), trans_a=a.trans, trans_b=b.trans,
                  m=m, n=n, k=k, alpha=1.0, a=pa, lda=lda, b=pb, ldb=ldb, beta=0.0,
                  c=fb.at(out, c_off), ldc=ldc)

    def gemm_or_zero() -> None:
        if positive(k):
            gemm()
            return
        with bld.if_else(bld.icmp_signed(">", k, zero)) as (then, otherwise):
            with then:
                gemm()
            with otherwise:
                base = bld.gep(fb.ptr(out), [c_off], inbounds=True)
                with for_range(bld, 0, m, name="zm") as i, for_range(bld, 0, n, name="zn") as j:
                    at = bld.add(bld.mul(i, ldc), j)
                    bld.store(ir.Constant(dtypes.STORAGE[out.dtype], 0.0), bld.gep(base, [at], inbounds=True))

    if positive(m) and positive(n):
        gemm_or_zero()
        return
    with bld.if_then(bld.and_(bld.icmp_signed(">", m, zero), bld.icmp_signed(">", n, zero))):
        gemm_or_zero()


def _at_least_one(fb: FnBuilder, op: Operand, cols: ir.Value, rows: ir.Value) -> ir.Value:
    """The leading dimension, raised to BLAS's minimum (max(1, width)) for degenerate operands."""
    ld = fb.dim(op.ld)
    width = rows if op.trans else cols
    b = fb.b
    floor = b.select(b.icmp_signed(">", width, ir.Constant(I64, 1)), width, ir.Constant(I64, 1))
    return b.select(b.icmp_signed("<", ld, floor), floor, ld)


class GemmKernel(Kernel):
    """``out[view] = a @ b`` over broadcast batch dims; ``view`` ([batch…, M, N]) has unit-stride rows."""

    def __init__(self, a: Operand, b: Operand, out: Buffer, entry: GemmEntry, view: View) -> None:
        folded = fold_batch(a, b, view.shape) if view.is_contiguous() else None
        if folded is not None:
            a, b, shape = folded
            view = View.contiguous(shape, view.offset)
        self.a, self.b, self.out, self.entry = a, b, out, entry
        self.out_view = view

    def reads(self) -> list[Buffer]:
        return list(dict.fromkeys([self.a.buffer, self.b.buffer]))

    def writes(self) -> list[Buffer]:
        return [self.out]

    def describe(self) -> str:
        m, k = self.a.view.shape[-2:]
        n = self.b.view.shape[-1]
        batch = "x".join(map(str, self.out_view.shape[:-2]))
        flags = ("ᵀ" if self.a.trans else "") + ("·Bᵀ" if self.b.trans else "")
        return (
            f"gemm {m}x{n}x{k}{f' batch {batch}' if batch else ''}{' ' + flags if flags else ''} "
            f"{self.out.resolve().name} ({self.entry.name})"
        )

    def emit(self, em: ModuleEmitter) -> FnBuilder:
        fb = em.function("gemm", [self.out, *self.reads()])
        a, b = self.a, self.b
        m, k = (fb.dim(d) for d in a.view.shape[-2:])
        n = fb.dim(b.view.shape[-1])
        batch = self.out_view.shape[:-2]
        ldc = fb.dim(self.out_view.strides[-2])

        def one(idx: list[ir.Value]) -> None:
            full = [*idx, ir.Constant(I64, 0), ir.Constant(I64, 0)]
            pa = fb.at(a.buffer, fb.offset(a.view, full))
            pb = fb.at(b.buffer, fb.offset(b.view, full))
            _gemm_or_zero(
                fb, self.entry, a, b, m, n, k, pa, pb, self.out, fb.offset(self.out_view, full), ldc
            )

        loop_nest(fb, batch, one, split_outer=bool(batch))
        fb.finish()
        return fb


class PoolGemm(EpilogueKernel):
    """``out[view] = a @ B (+ bias)`` over at most one batch dim ([batch?, M, N], unit-stride rows) by the
    ``gemm_packed`` job: B is ``packed`` (a constant in panels, its bias padded alike) or the operand
    ``b``, read as rows of B[k][n] (or of B[n][k] when transposed) into the thread's ``scratch``."""

    def __init__(self, a: Operand, b: Operand | None, packed: Buffer | None, bias: Buffer | None, out: Buffer,
                 view: View, n: Dim, scratch: Buffer | None) -> None:
        self.a, self.b, self.packed, self.bias, self.out, self.view = a, b, packed, bias, out, view
        self.n, self.work = n, scratch

    def reads(self) -> list[Buffer]:
        b = self.packed if self.b is None else self.b.buffer
        extra = [self.bias, self.residual.buffer if self.residual is not None else None]
        return list(dict.fromkeys(x for x in [self.a.buffer, b, *extra] if x is not None))

    def scratch(self) -> list[Buffer]:
        return [self.work] if self.work is not None else []

    def describe(self) -> str:
        m, k = self.a.view.shape[-2:]
        batch = f" batch {self.view.shape[0]}" if len(self.view.shape) == 3 else ""
        how = "packed" if self.b is None else "Bᵀ" if self.b.trans else "B"
        out = self.out.resolve().name
        return f"gemm {m}x{self.n}x{k}{batch} {how} -> {out} (pool){self.epilogue_steps()}"

    def absorb_epilogue(self, consumer: Kernel, buf: Buffer) -> bool:
        view = self.view
        whole = view.is_contiguous() and view.offset == ZERO and same(numel(view.shape), numel(buf.shape))
        return whole and super().absorb_epilogue(consumer, buf)

    def emit(self, em: ModuleEmitter) -> FnBuilder:
        fb = em.function("gemm", [self.out, *self.scratch(), *self.reads()])
        a, b, view = self.a, self.b, self.view
        m, k = a.view.shape[-2:]
        batched = len(view.shape) == 3

        def stride(v: View) -> Dim:
            return v.strides[0] if batched else ZERO

        dims = {"M": m, "N": self.n, "K": k, "LDX": a.ld, "LDO": view.strides[-2], "LDR": self.n,
                "BATCH": view.shape[0] if batched else Dim.const(1), "SX": stride(a.view), "SO": stride(view),
                "SR": m * self.n if batched else ZERO}
        values = {name: fb.dim(d) for name, d in dims.items()}
        values |= {"x": fb.at(a.buffer, a.view.offset), "out": fb.at(self.out, view.offset + self.out_offset)}
        if b is None:
            assert self.packed is not None
            values |= {"w": fb.ptr(self.packed), "BMODE": _i64(gemm_packed.PACKED)}
        else:
            values |= {"w": fb.at(b.buffer, b.view.offset), "LDW": fb.dim(b.ld), "SW": fb.dim(stride(b.view)),
                       "BMODE": _i64(gemm_packed.NK if b.trans else gemm_packed.KN)}
        if self.bias is not None:
            values["bias"] = fb.ptr(self.bias)
        if self.residual is not None:
            values["residual"] = fb.at(self.residual.buffer, self.residual.view.offset)
        if self.work is not None:
            values |= {"scratch": fb.ptr(self.work), "slot_bytes": fb.slot_bytes(self.work)}
        values["flags"] = _i64(self.epilogue.flags(self.bias is not None))
        flops = numel(view.shape) * (k * 2)
        run_job(fb, gemm_packed.FRAME, values, ("gemm_packed", self.out.dtype), fb.dim(flops))
        fb.finish()
        return fb


def _i64(value: int) -> ir.Constant:
    return ir.Constant(I64, value)


class Contraction(Expr):
    """``a @ b`` evaluated per element (a k-loop): small matmuls and non-BLAS dtypes, fusable."""

    def __init__(self, a: Expr, b: Expr, dtype: str) -> None:
        self.a, self.b, self.dtype = a, b, dtype
        self.shape = (*a.shape[:-1], b.shape[-1])

    def children(self) -> tuple[Expr, ...]:
        return (self.a, self.b)

    def rebuild(self, children: Sequence[Expr]) -> Expr:
        return Contraction(children[0], children[1], self.dtype)

    def emit(self, fb: FnBuilder, idx: Sequence[ir.Value]) -> ir.Value:
        batch, i, j = list(idx[:-2]), idx[-2], idx[-1]

        def step(kk: list[ir.Value], acc: list[ir.Value]) -> list[ir.Value]:
            x = cast(fb.b, self.a.value(fb, [*batch, i, kk[0]]), self.a.dtype, self.dtype)
            y = cast(fb.b, self.b.value(fb, [*batch, kk[0], j]), self.b.dtype, self.dtype)
            return [
                combine(
                    fb, "sum", acc[0], apply(fb, "mul", {}, [x, y], [self.dtype] * 2, self.dtype), self.dtype
                )
            ]

        return accumulate(fb, [self.a.shape[-1]], [dtypes.constant(self.dtype, 0)], step)[0]

    def label(self) -> str:
        return "matmul"


# -- convolution ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConvGeometry:
    """Sizes of one grouped 2-D convolution (dims are symbolic in bucket mode)."""

    n: Dim
    c: Dim
    h: Dim
    w: Dim
    c_out: Dim
    kh: int
    kw: int
    oh: Dim
    ow: Dim
    stride: tuple[int, int]
    pad: tuple[int, int]
    dilation: tuple[int, int]
    groups: int

    @property
    def c_group(self) -> Dim:
        return self.c // self.groups

    @property
    def out_group(self) -> Dim:
        return self.c_out // self.groups

    @property
    def pointwise(self) -> bool:
        return (self.kh, self.kw, self.stride, self.pad) == (1, 1, (1, 1), (0, 0))


class Im2col(Expr):
    """cols[n, c, kh, kw, oh, ow] = x[n, c, oh·s − p + kh·d, ow·s − p + kw·d] (0 in the padding)."""

    def __init__(self, x: Expr, geo: ConvGeometry) -> None:
        self.x, self.geo, self.dtype = x, geo, x.dtype
        self.shape = (geo.n, geo.c, Dim.const(geo.kh), Dim.const(geo.kw), geo.oh, geo.ow)

    def children(self) -> tuple[Expr, ...]:
        return (self.x,)

    def rebuild(self, children: Sequence[Expr]) -> Expr:
        return Im2col(children[0], self.geo)

    def emit(self, fb: FnBuilder, idx: Sequence[ir.Value]) -> ir.Value:
        n, c, kh, kw, oh, ow = idx
        g = self.geo
        src, inside = window_source(fb, [oh, ow], [kh, kw], g.stride, g.pad, g.dilation, [g.h, g.w])
        value = self.x.value(fb, [n, c, *src])
        return fb.b.select(inside, value, dtypes.constant(self.dtype, 0))

    def label(self) -> str:
        return "im2col"


def window_source(
    fb: FnBuilder,
    out: Sequence[ir.Value],
    tap: Sequence[ir.Value],
    stride: Sequence[int],
    pad: Sequence[int],
    dilation: Sequence[int],
    size: Sequence[Dim],
) -> tuple[list[ir.Value], ir.Value]:
    """Input position of a window tap (clamped into range) and whether it lies inside the input."""
    b = fb.b
    positions, inside = [], ir.Constant(dtypes.I1, 1)
    for o, t, s, p, d, extent in zip(out, tap, stride, pad, dilation, size):
        pos = b.add(b.sub(b.mul(o, ir.Constant(I64, s)), ir.Constant(I64, p)), b.mul(t, ir.Constant(I64, d)))
        ok = b.and_(b.icmp_signed(">=", pos, ir.Constant(I64, 0)), b.icmp_signed("<", pos, fb.dim(extent)))
        inside = b.and_(inside, ok)
        positions.append(b.select(ok, pos, ir.Constant(I64, 0)))
    return positions, inside


class ConvKernel(Kernel):
    """``out[n, g] = W[g] @ im2col(x)[n, g]`` per image and group (``out`` dense NCHW)."""

    def __init__(
        self, x: Expr, weight: Load, out: Buffer, geo: ConvGeometry, entry: GemmEntry, cols: Buffer | None
    ) -> None:
        self.x, self.weight, self.out, self.geo, self.entry, self.cols = x, weight, out, geo, entry, cols
        self.can_fail = has_checks(x)

    def reads(self) -> list[Buffer]:
        return expr_buffers(self.x, self.weight)

    def writes(self) -> list[Buffer]:
        return [self.out]

    def scratch(self) -> list[Buffer]:
        return [self.cols] if self.cols is not None else []

    def describe(self) -> str:
        g = self.geo
        how = "1x1 gemm" if self.cols is None else f"im2col({summary(self.x)})+gemm"
        return (
            f"conv2d {g.kh}x{g.kw}/s{g.stride[0]} groups {g.groups} [{g.n}x{g.c}x{g.h}x{g.w}] -> "
            f"{self.out.resolve().name} {how} ({self.entry.name})"
        )

    def emit(self, em: ModuleEmitter) -> FnBuilder:
        g = self.geo
        im2col = None
        if self.cols is not None:
            space = (g.n, g.c, Dim.const(g.kh), Dim.const(g.kw), g.oh, g.ow)
            view = View(space, (ZERO, *contiguous_strides(space[1:])))
            im2col = ElementwiseKernel(self.cols, view, Im2col(self.x, g)).emit(em)
        fb = em.function("conv", [self.out, *self.scratch(), *self.reads()])
        b = fb.b
        kk = g.c_group * (g.kh * g.kw)
        ohw = g.oh * g.ow
        m, n, k = fb.dim(g.out_group), fb.dim(ohw), fb.dim(kk)
        a_op = Operand(self.weight.buffer, View((g.out_group, kk), (kk, Dim.const(1))), False, kk)
        if self.cols is None:
            b_op = Operand(self.x.buffer, View((kk, ohw), (ohw, Dim.const(1))), False, ohw)
        else:
            b_op = Operand(self.cols, View((kk, ohw), (ohw, Dim.const(1))), False, ohw)

        def image(idx: list[ir.Value]) -> None:
            (i,) = idx
            if im2col is not None:
                fb.call(im2col.fn, im2col.buffers, i, b.add(i, ir.Constant(I64, 1)))

            def group(gi: list[ir.Value]) -> None:
                (j,) = gi
                pa = fb.at(a_op.buffer, b.mul(j, fb.dim(g.out_group * kk)))
                if self.cols is None:
                    start = b.mul(b.add(b.mul(i, fb.dim(g.c)), b.mul(j, fb.dim(g.c_group))), fb.dim(ohw))
                else:
                    start = b.mul(j, fb.dim(kk * ohw))
                pb = fb.at(b_op.buffer, start)
                c_off = b.mul(b.add(b.mul(i, fb.dim(g.c_out)), b.mul(j, fb.dim(g.out_group))), n)
                _gemm_or_zero(fb, self.entry, a_op, b_op, m, n, k, pa, pb, self.out, c_off, n)

            loop_nest(fb, [Dim.const(g.groups)], group, name="g")

        loop_nest(fb, [g.n], image, split_outer=True, name="n")
        fb.finish()
        return fb
