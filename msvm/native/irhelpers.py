"""Small llvmlite.ir building blocks shared by the kernel generators, the math library and the JIT.

Loops are counted ``for`` loops over i64 with phi induction variables; loop-carried values live in
``alloca`` slots (``Slot``) that LLVM's SROA turns back into registers, which keeps generators
readable. ``fma`` works on scalars and vectors alike (llvmlite's ``IRBuilder.fma`` refuses
vectors), ``splat`` broadcasts a scalar, ``load_vec``/``store_vec`` move ``width`` elements at an
element pointer without assuming vector alignment.

Importing this module imports ``llvmlite.ir`` (not the binding): only code generators import it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from llvmlite import ir

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()
F64 = ir.DoubleType()
VOID = ir.VoidType()

FLOAT_TYPES = {"float32": F32, "float64": F64}
# Elements per 256-bit AVX2 register.
LANES = {"float32": 8, "float64": 4}


def vec(elem: ir.Type, width: int) -> ir.VectorType:
    return ir.VectorType(elem, width)


def i64(value: int) -> ir.Constant:
    return ir.Constant(I64, value)


def const(typ: ir.Type, value: float | int) -> ir.Constant:
    """A scalar constant, or a splat when ``typ`` is a vector type."""
    if isinstance(typ, ir.VectorType):
        return ir.Constant(typ, [ir.Constant(typ.element, value)] * typ.count)
    return ir.Constant(typ, value)


def define(module: ir.Module, name: str, ret: ir.Type, args: Sequence[tuple[str, ir.Type]],
           *, noalias: Sequence[str] = (), no_builtins: bool = False
           ) -> tuple[ir.Function, ir.IRBuilder, dict[str, ir.Argument]]:
    """A new external function with named arguments, its builder positioned in the entry block.

    Pointer arguments listed in ``noalias`` promise not to overlap — what lets LLVM vectorise.
    ``no_builtins`` stops LLVM from turning copy/fill loops into ``memcpy``/``memset`` calls
    (clang's -fno-builtin): for the short rows of a tensor a libc call per row costs more than
    the vectorised loop.
    """
    fn = ir.Function(module, ir.FunctionType(ret, [t for _, t in args]), name=name)
    named = {}
    for arg, (arg_name, _) in zip(fn.args, args):
        arg.name = arg_name
        if arg_name in noalias:
            arg.add_attribute("noalias")
        named[arg_name] = arg
    fn.attributes.add("nounwind")
    if no_builtins:
        set.add(fn.attributes, '"no-builtins"')  # a string attribute: llvmlite's checked add() refuses it
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    return fn, builder, named


def internal_function(module: ir.Module, name: str, ret: ir.Type, arg_types: Sequence[ir.Type]
                      ) -> tuple[ir.Function, ir.IRBuilder]:
    """A module-private helper function (always inlined into its callers)."""
    fn = ir.Function(module, ir.FunctionType(ret, list(arg_types)), name=name)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    fn.attributes.add("nounwind")
    return fn, ir.IRBuilder(fn.append_basic_block("entry"))


def intrinsic(module: ir.Module, name: str, ret: ir.Type, arg_types: Sequence[ir.Type]) -> ir.Function:
    """The declaration of an LLVM intrinsic such as ``llvm.fma.v8f32`` (declared once per module)."""
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return ir.Function(module, ir.FunctionType(ret, list(arg_types)), name=name)


def _suffix(typ: ir.Type) -> str:
    if isinstance(typ, ir.VectorType):
        return f"v{typ.count}{_suffix(typ.element)}"
    return {ir.HalfType(): "f16", F32: "f32", F64: "f64"}[typ]


def fma(builder: ir.IRBuilder, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
    """a·b + c with one rounding (``llvm.fma``), scalar or vector."""
    fn = intrinsic(builder.module, f"llvm.fma.{_suffix(a.type)}", a.type, [a.type] * 3)
    return builder.call(fn, [a, b, c])


def maxnum(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    """IEEE maxNum (a NaN operand yields the other operand), scalar or vector."""
    fn = intrinsic(builder.module, f"llvm.maxnum.{_suffix(a.type)}", a.type, [a.type] * 2)
    return builder.call(fn, [a, b])


def nan_relu(builder: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """max(x, 0) keeping a NaN, as numpy's maximum and torch's relu do (``maxnum`` makes it 0):
    ``x < 0 ? 0 : x``, which x86 does in one vmaxps."""
    zero = ir.Constant(x.type, 0.0)
    return builder.select(builder.fcmp_ordered("<", x, zero), zero, x)


def nan_extreme(builder: ir.IRBuilder, a: ir.Value, b: ir.Value, bigger: bool) -> ir.Value:
    """max/min where a NaN operand wins (``llvm.maximum``/``minimum``), scalar or vector. ``nsz``: the
    zero a ±0 tie gives is left to the target — one vmaxps plus a NaN blend on x86, and a nested-select
    form of the same made LLVM's InstCombine ~3x slower on long chains."""
    fn = intrinsic(builder.module, f"llvm.{'maximum' if bigger else 'minimum'}.{_suffix(a.type)}", a.type,
                   [a.type] * 2)
    return builder.call(fn, [a, b], fastmath=("nsz",))


def splat(builder: ir.IRBuilder, scalar: ir.Value, width: int) -> ir.Value:
    """``scalar`` broadcast to a ``width``-lane vector."""
    vt = vec(scalar.type, width)
    one = builder.insert_element(ir.Constant(vt, ir.Undefined), scalar, i64(0))
    mask = ir.Constant(vec(I32, width), [0] * width)
    return builder.shuffle_vector(one, ir.Constant(vt, ir.Undefined), mask)


def gather(builder: ir.IRBuilder, scalars: Sequence[ir.Value]) -> ir.Value:
    """A vector of ``scalars`` in lane order (the SLP vectoriser turns isomorphic scalar chains feeding
    it into vector code)."""
    value = ir.Constant(vec(scalars[0].type, len(scalars)), ir.Undefined)
    for lane, scalar in enumerate(scalars):
        value = builder.insert_element(value, scalar, i64(lane))
    return value


def gep(builder: ir.IRBuilder, ptr: ir.Value, index: ir.Value | int) -> ir.Value:
    """``ptr + index`` elements (in bounds)."""
    if isinstance(index, int):
        index = i64(index)
    return builder.gep(ptr, [index], inbounds=True)


def load_vec(builder: ir.IRBuilder, ptr: ir.Value, width: int) -> ir.Value:
    """``width`` consecutive elements starting at the element pointer ``ptr`` (unaligned)."""
    vptr = builder.bitcast(ptr, vec(ptr.type.pointee, width).as_pointer())
    return builder.load(vptr, align=_size(ptr.type.pointee))


def store_vec(builder: ir.IRBuilder, value: ir.Value, ptr: ir.Value) -> None:
    """Store a vector at the element pointer ``ptr`` (unaligned)."""
    vptr = builder.bitcast(ptr, value.type.as_pointer())
    builder.store(value, vptr, align=_size(value.type.element))


class Slot:
    """A mutable local (an ``alloca`` in the entry block); SROA promotes it to a register."""

    def __init__(self, builder: ir.IRBuilder, typ: ir.Type, init: ir.Value | None = None,
                 name: str = "") -> None:
        with builder.goto_entry_block():
            builder.position_at_start(builder.function.entry_basic_block)
            self.ptr = builder.alloca(typ, name=name)
        self.builder = builder
        if init is not None:
            builder.store(init, self.ptr)

    def get(self) -> ir.Value:
        return self.builder.load(self.ptr)

    def set(self, value: ir.Value) -> None:
        self.builder.store(value, self.ptr)


@contextmanager
def for_range(builder: ir.IRBuilder, start: ir.Value | int, stop: ir.Value | int, step: ir.Value | int = 1,
              name: str = "i", loop_md: Any = None) -> Iterator[ir.Value]:
    """``for i in range(start, stop, step)`` (step > 0); the body is the ``with`` block. ``loop_md``:
    an ``llvm.loop`` metadata node for the back edge (hints to the unroller and vectoriser)."""
    start = i64(start) if isinstance(start, int) else start
    stop = i64(stop) if isinstance(stop, int) else stop
    step = i64(step) if isinstance(step, int) else step
    pre = builder.block
    head = builder.append_basic_block(f"{name}.head")
    body = builder.append_basic_block(f"{name}.body")
    done = builder.append_basic_block(f"{name}.done")
    builder.branch(head)
    builder.position_at_end(head)
    index = builder.phi(I64, name=name)
    index.add_incoming(start, pre)
    builder.cbranch(builder.icmp_signed("<", index, stop), body, done)
    builder.position_at_end(body)
    yield index
    index.add_incoming(builder.add(index, step, name=f"{name}.next", flags=("nsw",)), builder.block)
    back = builder.branch(head)
    if loop_md is not None:
        back.set_metadata("llvm.loop", loop_md)
    builder.position_at_end(done)


def min_i64(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    return builder.select(builder.icmp_signed("<", a, b), a, b)


def max_i64(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    return builder.select(builder.icmp_signed(">", a, b), a, b)


def ceil_div(builder: ir.IRBuilder, a: ir.Value | int, d: ir.Value | int) -> ir.Value:
    """⌈a / d⌉ of i64s, for a ≥ 0 and d > 0."""
    a, d = (i64(v) if isinstance(v, int) else v for v in (a, d))
    return builder.sdiv(builder.add(a, builder.sub(d, i64(1))), d)


def _size(typ: ir.Type) -> int:
    """Bytes of a scalar element type (its natural alignment)."""
    return typ.width // 8 if isinstance(typ, ir.IntType) else {F32: 4, F64: 8}[typ]


@contextmanager
def for_each_chunk(builder: ir.IRBuilder, counter: ir.Value, total: ir.Value, chunk: ir.Value,
                   name: str = "chunk") -> Iterator[tuple[ir.Value, ir.Value]]:
    """Claim [start, stop) chunks of ``total`` items from the shared i64 ``counter`` until none are left.

    The counter is advanced with an atomic add, so several threads running the same function on
    the same arguments split the items between them (each item runs exactly once).
    """
    head = builder.append_basic_block(f"{name}.head")
    body = builder.append_basic_block(f"{name}.body")
    done = builder.append_basic_block(f"{name}.done")
    builder.branch(head)
    builder.position_at_end(head)
    start = builder.atomic_rmw("add", counter, chunk, "monotonic", name=f"{name}.start")
    builder.cbranch(builder.icmp_signed("<", start, total), body, done)
    builder.position_at_end(body)
    yield start, min_i64(builder, builder.add(start, chunk), total)
    builder.branch(head)
    builder.position_at_end(done)


def stream_store(builder: ir.IRBuilder, dst: ir.Value, count: ir.Value,
                 value_at: Callable[[ir.Value, int], ir.Value]) -> None:
    """``dst[i] = value_at(i, 1)`` for ``i < count`` (``dst`` an element pointer, float or double), the
    32-byte aligned middle as ``value_at(i, lanes)`` vectors with non-temporal stores.

    Why: a store to a line that is not cached first reads it from memory; non-temporal stores skip
    that read (a third of the traffic of a large elementwise result) and do not evict useful lines.
    They need 32-byte alignment, so the first elements up to that boundary and the last ones are
    stored plainly. They are weakly ordered: the caller issues a fence before the data is published.
    """
    elem = dst.type.pointee
    size = _size(elem)
    width = 32 // size
    misaligned = builder.and_(builder.sub(i64(0), builder.ptrtoint(dst, I64)), i64(31))
    head = min_i64(builder, builder.udiv(misaligned, i64(size)), count)
    end = builder.add(head, builder.mul(builder.udiv(builder.sub(count, head), i64(width)), i64(width)))
    with for_range(builder, 0, head, name="sh") as i:
        builder.store(value_at(i, 1), gep(builder, dst, i))
    nontemporal = builder.module.add_metadata([ir.Constant(I32, 1)])
    with for_range(builder, head, end, width, name="sv") as i:
        value = value_at(i, width)
        store = builder.store(value, builder.bitcast(gep(builder, dst, i), value.type.as_pointer()), align=32)
        store.set_metadata("nontemporal", nontemporal)
    with for_range(builder, end, count, name="st") as i:
        builder.store(value_at(i, 1), gep(builder, dst, i))


def stream_copy(builder: ir.IRBuilder, dst: ir.Value, src: ir.Value, count: ir.Value) -> None:
    """``dst[:count] = src[:count]`` through ``stream_store``."""
    stream_store(builder, dst, count, lambda i, lanes: builder.load(gep(builder, src, i)) if lanes == 1
                 else load_vec(builder, gep(builder, src, i), lanes))


def transpose(builder: ir.IRBuilder, rows: Sequence[ir.Value]) -> list[ir.Value]:
    """Transpose up to n vectors of n lanes (n a power of two; missing rows are undefined).

    log2(n) stages of two-input shuffles, each swapping one bit of the row and lane indices —
    24 shuffles for 8×8, what hand-written AVX transposes do.
    """
    vt = rows[0].type
    n = vt.count
    cur = list(rows) + [ir.Constant(vt, ir.Undefined)] * (n - len(rows))
    step = 1
    while step < n:
        nxt = list(cur)
        for i in range(n):
            if i & step:
                continue
            a, b = cur[i], cur[i + step]
            lo = [j if not j & step else n + j - step for j in range(n)]
            hi = [j + step if not j & step else n + j for j in range(n)]
            nxt[i] = builder.shuffle_vector(a, b, ir.Constant(vec(I32, n), lo))
            nxt[i + step] = builder.shuffle_vector(a, b, ir.Constant(vec(I32, n), hi))
        cur = nxt
        step *= 2
    return cur


def store_first(builder: ir.IRBuilder, value: ir.Value, count: int, ptr: ir.Value) -> None:
    """Store the first ``count`` lanes of ``value`` at the element pointer ``ptr``.

    Split into power-of-two pieces (6 = 4 + 2): plain vector stores, no masked stores (slow on AMD).
    """
    offset = 0
    while offset < count:
        size = 1 << ((count - offset).bit_length() - 1)
        if size == 1:
            builder.store(builder.extract_element(value, i64(offset)), gep(builder, ptr, offset))
        else:
            part = builder.shuffle_vector(value, ir.Constant(value.type, ir.Undefined),
                                          ir.Constant(vec(I32, size), list(range(offset, offset + size))))
            store_vec(builder, part, gep(builder, ptr, offset))
        offset += size
