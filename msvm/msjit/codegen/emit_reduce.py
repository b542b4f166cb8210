"""Reductions and row kernels (softmax, log_softmax, layer/group norm) with their producers inlined.

A reduction walks its input in the input's own order, so the innermost loop stays unit-stride:
when the reduced axes are the trailing ones each output is one register accumulation (LLVM
vectorises it — accumulators carry ``reassoc``, the blocked summation numpy's pairwise sum is also
an instance of); otherwise the outputs are initialised and updated in memory while the trailing
kept axis runs contiguously. The producer expression (any fused elementwise chain) is evaluated
in the loop body and never stored.

A row kernel normalises the trailing ``row`` dims of its index space in a few sweeps over each row
(statistics, then the final values). The row is evaluated once: when its producer costs
arithmetic (or softmax needs its exponentials twice) the first sweep parks it in a row-sized
scratch that stays in L1, so ``layer_norm(gelu(x*a+b)+x)`` reads ``x`` once and writes the
result once. ``RowResult`` is the kernel's value as an expression: consumers that use it
elementwise at the same index become the final sweep's epilogue instead of another pass. A large
result the region returns is written with non-temporal stores (``streams``), which do not first
read the lines they overwrite: the final sweep of a one-dim row computes it a vector at a time and
stores each as it goes, so the stores overlap the arithmetic (faster than finishing the row in
scratch and streaming it out after: ``docs/performance.md``, "Streaming stores"); a wider row is
finished in scratch, then streamed.

A row kernel with nothing fused — a layer_norm or (scaled) softmax of a tensor in memory, written
to memory as it is, as in a transformer layer — calls ``msvm.kernels.rows``' job instead: the same
code the interpreter runs, compiled once per process, where generating it again costs a region
20–30 ms of LLVM time per row kernel.
"""

from __future__ import annotations

from collections.abc import Sequence

from llvmlite import ir

from ...kernels import rows as native_rows
from ...kernels.rows import SUM_ADD, SUM_MEAN, SUM_RELU
from ...native.irhelpers import Slot, gather, max_i64, stream_copy, stream_store
from ...shapes import Dim
from . import dtypes
from .buffers import Buffer
from .dtypes import I64, cast, constant, is_float
from .emit import FnBuilder, ModuleEmitter, loop_nest, run_job
from .emit_elementwise import extreme, intrinsic_call, math_call
from .kernels import Kernel, expr_buffers, has_checks
from .nodes import Const, Expr, Load, Map, is_compute, summary
from .views import ZERO, Shape, View, contiguous_strides, numel, same

REDUCE_FLAGS = ("reassoc", "contract", "nsz")


def _identity(op: str, dtype: str) -> ir.Constant:
    if op in ("sum", "mean"):
        return constant(dtype, 0)
    if dtype == "bool":
        return constant(dtype, op == "min")
    if is_float(dtype):
        return constant(dtype, float("-inf") if op in ("max", "argmax") else float("inf"))
    info = 1 << (dtypes.REGISTER[dtype].width - 1)
    return constant(dtype, -info if op in ("max", "argmax") else info - 1)


def combine(fb: FnBuilder, op: str, acc: ir.Value, v: ir.Value, dtype: str) -> ir.Value:
    """acc ⊕ v for sum/max/min on registers of ``dtype``."""
    b = fb.b
    if op in ("sum", "mean"):
        if is_float(dtype):
            return b.fadd(acc, v, flags=REDUCE_FLAGS)
        return b.or_(acc, v) if dtype == "bool" else b.add(acc, v)
    return extreme(fb.b, acc, v, dtype, op == "max")


def _better(fb: FnBuilder, v: ir.Value, best: ir.Value, dtype: str) -> ir.Value:
    """numpy argmax's update rule: strictly greater, and the first NaN beats everything."""
    b = fb.b
    if not is_float(dtype):
        return b.icmp_unsigned(">", v, best) if dtype == "bool" else b.icmp_signed(">", v, best)
    v_nan = b.fcmp_unordered("uno", v, v)
    best_nan = b.fcmp_unordered("uno", best, best)
    return b.or_(b.fcmp_ordered(">", v, best), b.and_(v_nan, b.not_(best_nan)))


def rows_per_claim(b: ir.IRBuilder, n: ir.Value) -> ir.Value:
    """IR: how many rows of ``n`` elements a thread of a ``msvm.kernels.rows`` job claims at a time."""
    one = ir.Constant(I64, 1)
    return max_i64(b, b.sdiv(ir.Constant(I64, native_rows.CHUNK_ELEMENTS), max_i64(b, n, one)), one)


def reduction_layout(rank: int, axes: Sequence[int]) -> tuple[int, bool]:
    """(where the trailing run of reduced axes starts, whether outputs accumulate in memory): the latter
    when a reduced axis precedes a kept one, so one output is updated from several outer iterations."""
    trailing = rank
    while trailing > 0 and trailing - 1 in axes:
        trailing -= 1
    return trailing, trailing > rank - len(axes)


class ReduceKernel(Kernel):
    """``out = op(src)`` over ``axes`` (sum, mean, max, min, argmax); ``out`` has the kept dims."""

    def __init__(
        self, op: str, src: Expr, axes: Sequence[int], out: Buffer, acc_dtype: str, acc: Buffer | None = None
    ) -> None:
        self.op, self.src, self.axes, self.out = op, src, tuple(axes), out
        self.acc_dtype = acc_dtype
        self.acc = acc  # arena accumulators when they cannot live in ``out`` (argmax values, float16 means)
        self.can_fail = has_checks(src) or op in ("max", "min", "argmax")
        self.trailing, self.in_memory = reduction_layout(len(src.shape), self.axes)
        self.native = NativeSum.of(self)

    def reads(self) -> list[Buffer]:
        return expr_buffers(self.src)

    def writes(self) -> list[Buffer]:
        return [self.out]

    def scratch(self) -> list[Buffer]:
        return [self.acc] if self.acc is not None else []

    def parallel_work(self) -> Dim | None:
        return None if self.in_memory or self.native else numel(self.src.shape)  # a native job splits itself

    def describe(self) -> str:
        shape = "x".join(map(str, self.src.shape)) or "scalar"
        native = " (native sum)" if self.native else ""
        out = self.out.resolve().name
        return f"reduce {self.op}{list(self.axes)}[{shape}] {out} <- {summary(self.src)}{native}"

    def _emit_native(self, em: ModuleEmitter, native: NativeSum) -> FnBuilder:
        fb = em.function("red", [self.out, *self.reads()])
        b = fb.b
        shape = self.src.shape
        n, rows = fb.dim(numel(shape[self.trailing:])), fb.dim(numel(shape[: self.trailing]))
        x = fb.at(native.x.buffer, native.x.view.offset)
        y = x if native.y is None else fb.at(native.y.buffer, native.y.view.offset)
        flags = (SUM_ADD if native.y is not None else 0) | (SUM_RELU if native.relu else 0)
        flags |= SUM_MEAN if self.op == "mean" else 0
        values = {"x": x, "y": y, "out": fb.at(self.out, ZERO), "rows": rows, "n": n,
                  "chunk": rows_per_claim(b, n), "flags": ir.Constant(I64, flags)}
        work = b.mul(b.mul(rows, n), ir.Constant(I64, native_rows.FLOPS_PER_ELEMENT["sum"]))
        run_job(fb, native_rows.SUM_FRAME, values, ("rows", "sum", self.out.dtype), work)
        fb.finish()
        return fb

    def emit(self, em: ModuleEmitter) -> FnBuilder:
        if self.native is not None:
            return self._emit_native(em, self.native)
        fb = em.function("red", [self.out, *self.scratch(), *self.reads()])
        shape = self.src.shape
        rank = len(shape)
        kept = [i for i in range(rank) if i not in self.axes]
        trailing, in_memory = self.trailing, self.in_memory
        count = numel(tuple(shape[a] for a in self.axes))
        if self.op in ("max", "min", "argmax"):
            fb.fail_if(fb.b.icmp_signed("==", fb.dim(count), ir.Constant(I64, 0)))
        out_shape = tuple(shape[i] for i in kept)
        out_view = View.contiguous(out_shape)
        acc_buf = self.acc or self.out
        space_strides = contiguous_strides(shape)
        is_arg = self.op == "argmax"
        vdtype = self.src.dtype if is_arg else self.acc_dtype

        def out_index(idx: Sequence[ir.Value]) -> list[ir.Value]:
            return [idx[i] for i in kept]

        def reduced_index(idx: Sequence[ir.Value]) -> ir.Value:
            if len(self.axes) == 1:
                return idx[self.axes[0]]
            return fb.offset(View(shape, space_strides), idx)

        def load_acc(o: list[ir.Value]) -> tuple[ir.Value, ir.Value | None]:
            value = fb.load(acc_buf, out_view, o)
            index = fb.load(self.out, out_view, o) if is_arg else None
            return value, index

        def store_acc(o: list[ir.Value], value: ir.Value, index: ir.Value | None) -> None:
            fb.store(acc_buf, out_view, o, value)
            if is_arg:
                fb.store(self.out, out_view, o, index)

        def element(idx: Sequence[ir.Value]) -> ir.Value:
            return cast(fb.b, self.src.value(fb, idx), self.src.dtype, vdtype)

        def update(
            value: ir.Value, index: ir.Value | None, v: ir.Value, i: ir.Value | None
        ) -> tuple[ir.Value, ir.Value | None]:
            if is_arg:
                better = _better(fb, v, value, vdtype)
                return fb.b.select(better, v, value), fb.b.select(better, i, index)
            return combine(fb, self.op, value, v, vdtype), None

        def finish(o: list[ir.Value], value: ir.Value, index: ir.Value | None) -> None:
            if is_arg:
                fb.store(self.out, out_view, o, index)
                return
            if self.op == "mean":
                value = fb.b.fdiv(value, cast(fb.b, fb.dim(count), "int64", vdtype))
            fb.store(self.out, out_view, o, cast(fb.b, value, vdtype, self.out.dtype))

        def block(idx: list[ir.Value]) -> tuple[ir.Value, ir.Value | None]:
            """Accumulate the trailing reduced dims in registers from ``idx`` (the leading indices)."""
            value = Slot(fb.b, dtypes.REGISTER[vdtype], _identity(self.op, vdtype))
            index = Slot(fb.b, I64, ir.Constant(I64, 0)) if is_arg else None

            def body(inner: list[ir.Value]) -> None:
                full = [*idx, *inner]
                v, i = update(
                    value.get(),
                    index.get() if index else None,
                    element(full),
                    reduced_index(full) if is_arg else None,
                )
                value.set(v)
                if index:
                    index.set(i)

            loop_nest(fb, shape[len(idx) :], body, name="r")
            return value.get(), index.get() if index else None

        if not in_memory:

            def per_output(idx: list[ir.Value]) -> None:
                finish(idx, *block(idx))

            loop_nest(fb, shape[:trailing], per_output, split_outer=True)
        else:

            def init(o: list[ir.Value]) -> None:
                store_acc(o, _identity(self.op, vdtype), ir.Constant(I64, 0) if is_arg else None)

            loop_nest(fb, out_shape, init)

            def sweep(idx: list[ir.Value]) -> None:
                o = out_index(idx)
                old_v, old_i = load_acc(o)
                if trailing < rank:
                    v, i = block(idx)
                else:
                    v, i = element(idx), reduced_index(idx) if is_arg else None
                store_acc(o, *update(old_v, old_i, v, i))

            loop_nest(fb, shape[:trailing], sweep)
            if self.op == "mean" or acc_buf is not self.out:

                def final(o: list[ir.Value]) -> None:
                    finish(o, *load_acc(o))

                loop_nest(fb, out_shape, final)
        fb.finish()
        return fb


class NativeSum:
    """A sum or mean over the trailing dims as a call of ``msvm.kernels.rows``' "sum" job, of ``x`` or of
    ``x + y``, ReLU'd when ``relu``: the global average pool that ends a CNN, with the residual add and
    ReLU of its last block. Generated, such a reduction cost the region a loop module of its own, and
    LLVM's O2 pipeline costs milliseconds for even the smallest loop."""

    def __init__(self, x: Load, y: Load | None, relu: bool) -> None:
        self.x, self.y, self.relu = x, y, relu

    @classmethod
    def of(cls, kernel: ReduceKernel) -> NativeSum | None:
        """The job for a float sum or mean over trailing axes of one or two dense loads (added, then
        ReLU'd or not), into an output of the same dtype; else None (generated as a loop)."""
        src, dt = kernel.src, kernel.src.dtype
        if kernel.op not in ("sum", "mean") or kernel.in_memory or kernel.acc is not None:
            return None
        if dt not in native_rows.FLOATS or kernel.acc_dtype != dt or kernel.out.dtype != dt or not src.shape:
            return None
        relu = isinstance(src, Map) and src.op == "relu" and src.dtype == dt
        if relu:
            src = src.args[0]
        loads = list(src.args) if isinstance(src, Map) and src.op == "add" and src.dtype == dt else [src]
        if len(loads) > 2 or not all(_dense(ld, kernel.src.shape, dt) and ld.shape == kernel.src.shape
                                     for ld in loads):
            return None
        return cls(loads[0], loads[1] if len(loads) == 2 else None, relu)


# -- row kernels --------------------------------------------------------------------------------------

ROW_KINDS = ("softmax", "safe_softmax", "log_softmax", "norm")


class RowResult(Expr):
    """The value of a row kernel at an index of its space (only emitted inside that kernel)."""

    def __init__(self, kernel: RowSpec) -> None:
        self.spec = kernel
        self.shape, self.dtype = kernel.space, kernel.dtype

    def emit(self, fb: FnBuilder, idx: Sequence[ir.Value]) -> ir.Value:
        raise AssertionError("a row result is only available inside its row kernel")

    def label(self) -> str:
        return self.spec.kind


class RowSpec:
    """What a row kernel computes: ``kind`` over the last ``row_rank`` dims of ``src``'s space."""

    def __init__(
        self,
        kind: str,
        src: Expr,
        row_rank: int,
        *,
        eps: float = 0.0,
        weight: Expr | None = None,
        bias: Expr | None = None,
    ) -> None:
        assert kind in ROW_KINDS
        self.kind, self.src, self.row_rank, self.eps = kind, src, row_rank, eps
        self.weight, self.bias = weight, bias
        self.space: Shape = src.shape
        self.dtype = src.dtype
        self.result = RowResult(self)

    @property
    def row_shape(self) -> Shape:
        return self.space[len(self.space) - self.row_rank :]

    def needs_scratch(self) -> bool:
        return self.kind != "norm" or is_compute(self.src)


# Results at least this large are streamed out (well past the 1 MiB L2 per core, and a fair share of
# the 32 MiB L3: the caller will not find them cached anyway).
STREAM_MIN_BYTES = 4 << 20


def streams(spec: RowSpec, out: Buffer, view: View) -> bool:
    """Does the row kernel writing ``out`` through ``view`` stream its rows out (non-temporal stores)?
    Yes for a float result the region returns, of a constant size of at least ``STREAM_MIN_BYTES``,
    whose rows are contiguous."""
    size = out.nbytes
    rows = view.strides[len(view.strides) - spec.row_rank :]
    return (
        out.kind == "output"
        and out.dtype == spec.dtype in ("float32", "float64")
        and size.is_const
        and size.value >= STREAM_MIN_BYTES
        and all(same(a, b) for a, b in zip(rows, contiguous_strides(spec.row_shape)))
    )


def _dense(ld: Expr | None, shape: Shape, dtype: str) -> bool:
    return isinstance(ld, Load) and ld.dtype == dtype and ld.view.is_contiguous() and same(numel(ld.shape),
                                                                                           numel(shape))


def _per_row(ld: Expr | None, spec: RowSpec) -> bool:
    """A load of one row's worth of elements, the same for every row (a layer_norm weight or bias)."""
    if not isinstance(ld, Load) or ld.dtype != spec.dtype:
        return False
    outer = len(spec.space) - spec.row_rank
    rows = spec.row_shape
    shape, strides = ld.view.shape, ld.view.strides
    shared = all(d == 1 or same(s, ZERO) for d, s in zip(shape[:outer], strides[:outer]))
    dense = all(d == 1 or same(s, c) for d, s, c in zip(rows, strides[outer:], contiguous_strides(rows)))
    return shared and dense


class NativeRows:
    """A row kernel as a call of ``msvm.kernels.rows``' job: ``job`` "layer_norm" or "softmax" of
    ``src`` (times ``scale``)."""

    def __init__(self, job: str, src: Load, scale: float = 1.0) -> None:
        self.job, self.src, self.scale = job, src, scale

    @classmethod
    def of(cls, spec: RowSpec, final: Expr, out: Buffer, view: View) -> NativeRows | None:
        """The job when the kernel fuses nothing (plain loads in, its result stored as it is), else None."""
        dt = spec.dtype
        if final is not spec.result or dt not in native_rows.FLOATS or out.dtype != dt:
            return None
        if not view.is_contiguous() or streams(spec, out, view):
            return None
        if spec.kind == "norm":
            affine = _per_row(spec.weight, spec) and _per_row(spec.bias, spec)
            return cls("layer_norm", spec.src) if affine and _dense(spec.src, spec.space, dt) else None
        if spec.kind not in ("softmax", "safe_softmax") or spec.row_rank != 1:
            return None
        src, scale = spec.src, 1.0
        if isinstance(src, Map) and src.op == "mul" and src.dtype == dt:
            consts = [a for a in src.args if isinstance(a, Const) and isinstance(a.scalar, float)]
            loads = [a for a in src.args if isinstance(a, Load)]
            if len(consts) == 1 and len(loads) == 1:
                src, scale = loads[0], consts[0].scalar
        return cls("softmax", src, scale) if _dense(src, spec.space, dt) else None


class RowKernel(Kernel):
    """``out[view] = final`` where ``final`` is an elementwise expression of the spec's ``RowResult``."""

    def __init__(self, spec: RowSpec, final: Expr, out: Buffer, view: View, scratch: Buffer | None) -> None:
        self.spec, self.final, self.out, self.view = spec, final, out, view
        self.native = NativeRows.of(spec, final, out, view)
        self.row = scratch if self.native is None else None
        self.can_fail = has_checks(spec.src, final)
        if self.row is not None:
            self.row.per_thread = True

    def streams(self) -> bool:
        """Stream rows out (not when the result is also read here: in place)."""
        out = self.out.resolve()
        return (
            self.row is not None
            and streams(self.spec, out, self.view)
            and all(b.resolve() is not out for b in self.reads())
        )

    def packs_lanes(self) -> bool:
        """A one-dim row streamed out is computed a vector at a time (the aligned stores need whole
        vectors; the final sweep stores them as it computes them, no copy pass after it)."""
        return self.streams() and self.spec.row_rank == 1

    def reads(self) -> list[Buffer]:
        return expr_buffers(self.spec.src, self.spec.weight, self.spec.bias, self.final)

    def writes(self) -> list[Buffer]:
        return [self.out]

    def scratch(self) -> list[Buffer]:
        return [self.row] if self.row is not None else []

    def inplace_source(self) -> Expr | None:
        return self.final

    def parallel_work(self) -> Dim | None:
        return numel(self.spec.space) if self.native is None else None  # a native job splits itself

    def describe(self) -> str:
        shape = "x".join(map(str, self.spec.space))
        epilogue = summary(self.final)
        tail = "" if epilogue == self.spec.kind else f", epilogue {epilogue}"
        tail += f" (native {self.native.job})" if self.native is not None else ""
        return f"row {self.spec.kind}[{shape}] {self.out.resolve().name} <- {summary(self.spec.src)}{tail}"

    def _emit_native(self, em: ModuleEmitter, native: NativeRows) -> FnBuilder:
        spec = self.spec
        fb = em.function("row", [self.out, *self.reads()])
        b = fb.b

        def operand(ld: Expr | None) -> ir.Value:
            assert isinstance(ld, Load)
            return fb.at(ld.buffer, ld.view.offset)

        n, total = fb.dim(numel(spec.row_shape)), fb.dim(numel(spec.space))
        values = {"x": operand(native.src), "out": fb.at(self.out, self.view.offset),
                  "rows": b.sdiv(total, max_i64(b, n, ir.Constant(I64, 1))), "n": n,
                  "chunk": rows_per_claim(b, n)}
        if native.job == "layer_norm":
            values |= {"weight": operand(spec.weight), "bias": operand(spec.bias),
                       "eps": ir.Constant(I64, native_rows.f64_bits(spec.eps))}
            frame = native_rows.LN_FRAME
        else:
            values |= {"scale": ir.Constant(I64, native_rows.f64_bits(native.scale)),
                       "safe": ir.Constant(I64, int(spec.kind == "safe_softmax"))}
            frame = native_rows.SOFTMAX_FRAME
        work = b.mul(total, ir.Constant(I64, native_rows.FLOPS_PER_ELEMENT[native.job]))
        run_job(fb, frame, values, ("rows", native.job, spec.dtype), work)
        fb.finish()
        return fb

    def emit(self, em: ModuleEmitter) -> FnBuilder:
        if self.native is not None:
            return self._emit_native(em, self.native)
        spec = self.spec
        fb = em.function("row", [self.out, *self.scratch(), *self.reads()])
        b = fb.b
        space = spec.space
        outer = space[: len(space) - spec.row_rank]
        rows = spec.row_shape
        dt = spec.dtype
        typ = dtypes.REGISTER[dt]
        scratch_view = View(space, (ZERO,) * len(outer) + contiguous_strides(rows))
        n = numel(rows)

        def one_row(o: list[ir.Value]) -> None:
            def sweep(fn) -> None:
                loop_nest(fb, rows, lambda r: fn([*o, *r]), name="j")

            def src(idx: list[ir.Value]) -> ir.Value:
                return cast(b, spec.src.value(fb, idx), spec.src.dtype, dt)

            def stash(idx: list[ir.Value], value: ir.Value) -> None:
                fb.store(self.row, scratch_view, idx, value)

            def parked(idx: list[ir.Value]) -> ir.Value:
                return fb.load(self.row, scratch_view, idx) if self.row is not None else src(idx)

            total = Slot(b, typ, constant(dt, 0.0))
            if spec.kind == "norm":

                def first(idx: list[ir.Value]) -> None:
                    v = src(idx)
                    if self.row is not None:
                        stash(idx, v)
                    total.set(b.fadd(total.get(), v, flags=REDUCE_FLAGS))

                sweep(first)
                count = cast(b, fb.dim(n), "int64", dt)
                mean = b.fdiv(total.get(), count)
                squares = Slot(b, typ, constant(dt, 0.0))

                def second(idx: list[ir.Value]) -> None:
                    d = b.fsub(parked(idx), mean)
                    squares.set(b.fadd(squares.get(), b.fmul(d, d), flags=REDUCE_FLAGS))

                sweep(second)
                var = b.fdiv(squares.get(), count)
                rstd = b.fdiv(
                    constant(dt, 1.0), intrinsic_call(fb, "sqrt", b.fadd(var, constant(dt, spec.eps)))
                )

                def value(idx: list[ir.Value]) -> ir.Value:
                    y = b.fmul(b.fsub(parked(idx), mean), rstd)
                    if spec.weight is not None:
                        y = b.fmul(y, cast(b, spec.weight.value(fb, idx), spec.weight.dtype, dt))
                    if spec.bias is not None:
                        y = b.fadd(y, cast(b, spec.bias.value(fb, idx), spec.bias.dtype, dt))
                    return y
            else:
                top = Slot(b, typ, constant(dt, float("-inf")))
                sweep(lambda idx: top.set(extreme(b, top.get(), src(idx), dt, True)))
                m = top.get()
                if spec.kind == "safe_softmax":
                    m = b.select(b.fcmp_ordered("==", m, constant(dt, float("-inf"))), constant(dt, 0.0), m)

                def second(idx: list[ir.Value]) -> None:
                    shifted = b.fsub(src(idx), m)
                    e = math_call(fb, "exp", shifted)
                    stash(idx, shifted if spec.kind == "log_softmax" else e)
                    total.set(b.fadd(total.get(), e, flags=REDUCE_FLAGS))

                sweep(second)
                s = total.get()
                if spec.kind == "log_softmax":
                    log_s = math_call(fb, "log", s)

                    def value(idx: list[ir.Value]) -> ir.Value:
                        return b.fsub(parked(idx), log_s)
                else:
                    positive = b.fcmp_ordered(">", s, constant(dt, 0.0))

                    def value(idx: list[ir.Value]) -> ir.Value:
                        y = b.fdiv(parked(idx), s)
                        return b.select(positive, y, constant(dt, 0.0)) if spec.kind == "safe_softmax" else y

            def result(idx: list[ir.Value]) -> ir.Value:
                fb.remember((id(spec.result), *map(id, idx)), value(idx), (spec.result, idx))
                return cast(b, self.final.value(fb, idx), self.final.dtype, self.out.dtype)

            def lanes(i: ir.Value, count: int) -> ir.Value:
                """``count`` consecutive results of a one-dim row from ``i``, as a vector if more than one."""
                values = [result([*o, b.add(i, ir.Constant(I64, k)) if k else i]) for k in range(count)]
                return values[0] if count == 1 else gather(b, values)

            def last(idx: list[ir.Value]) -> None:
                if stream:
                    stash(idx, result(idx))  # over the parked value just read
                else:
                    fb.store(self.out, self.view, idx, result(idx))

            start = [*o, *(ir.Constant(I64, 0) for _ in rows)]
            if self.packs_lanes():
                stream_store(b, fb.address(self.out, self.view, start), fb.dim(n), lanes)
                return
            sweep(last)
            if stream:
                dst = fb.address(self.out, self.view, start)
                stream_copy(b, dst, fb.address(self.row, scratch_view, start), fb.dim(n))

        stream = self.streams()
        loop_nest(fb, outer, one_row, split_outer=True)
        if stream:
            b.fence("seq_cst")  # the non-temporal stores are visible before the caller reads
        fb.finish()
        return fb
