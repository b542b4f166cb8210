"""Native row kernels (interpreter and JIT regions): layer_norm over the trailing dims, softmax by rows.

Why: numpy computes each as half a dozen whole-tensor passes, several of them reductions along the
last axis, which numpy runs slowly for rows of a few hundred elements — a transformer layer's two
layer norms at 128 × 256 cost 75–140 µs each interpreted, against 16 µs in PyTorch. Here a row is
finished in three sweeps while it sits in L1 (layer_norm: mean, then the variance of the centred
values — two passes, as the reference, for accuracy — then ``(x − mean) · rstd · w + b``; softmax:
max, then ``e = exp(x − max)`` stored and summed, then ``e / sum``), and rows are taken in chunks
from an atomic counter, so a large tensor runs on both cores (``threads.POOL``). The sweeps are
explicit vectors, the sums and maxima folded in several accumulators (``_fold``); mathlib's exp is
branch-free. The attention kernel uses ``softmax_rows`` for its scores; JIT regions call these jobs,
and the "sum" job for a reduction over trailing dims (``sum_rows``). Every size is a run-time
argument: one library per (kernel, dtype), compiled on first use.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from llvmlite import ir

from ..native import mathlib
from ..native.irhelpers import (
    FLOAT_TYPES,
    I32,
    LANES,
    Slot,
    const,
    fma,
    for_each_chunk,
    for_range,
    gep,
    i64,
    intrinsic,
    load_vec,
    maxnum,
    nan_relu,
    splat,
    store_vec,
    vec,
)
from ..ops.registry import get_op
from ..runtime import mempool
from ..scheduler.variants import Variant
from .native import Frame, float_name, native_library, ptr
from .threads import POOL

FLOATS = ("float32", "float64")
CHUNK_ELEMENTS = 4096  # elements per claim from the row counter (whole rows, at least one)
REASSOC = ("reassoc", "contract", "nsz")
FOLD_WAYS = 4  # independent vector accumulators of a row's sums and maxima (a power of two)
# Work per element in the pool's flops (what a GEMM does on one core meanwhile), for how many threads
# a call is worth. A softmax costs ≈ 1.4 ns an element on one core: from ≈ 36 k elements it takes both
# (attention's 4 × 128² scores: 90 µs on one core, 49 on two; at 60 it never did below 67 k).
FLOPS_PER_ELEMENT = {"layer_norm": 30, "softmax": 110, "sum": 10}
LN_FRAME = Frame(("x", "out", "weight", "bias", "rows", "n", "chunk", "eps", "counter"),
                 pointers=("x", "out", "weight", "bias"), zeroed=("counter",))
# the sum (or with SUM_MEAN the mean) of each row of ``x`` (+ ``y`` with SUM_ADD, ReLU'd with SUM_RELU):
# a global average pool and the residual add and ReLU before it, as a JIT region fuses them
SUM_FRAME = Frame(("x", "y", "out", "rows", "n", "chunk", "flags", "counter"), pointers=("x", "y", "out"),
                  zeroed=("counter",))
SUM_ADD, SUM_RELU, SUM_MEAN = 1, 2, 4
# softmax(x · scale) per row; ``scale`` and ``eps`` are float64 bit patterns (``f64_bits``); ``safe``: a row
# of −inf gives zeros, not NaN (attention's fully masked rows)
SOFTMAX_FRAME = Frame(("x", "out", "rows", "n", "chunk", "scale", "safe", "counter"), pointers=("x", "out"),
                      zeroed=("counter",))


def _sweep(b: ir.IRBuilder, n: ir.Value, lanes: int, body: Callable[[ir.Value, int], None], name: str
           ) -> None:
    """``body(i, width)`` over ``range(n)``: whole vectors of ``lanes`` (width ``lanes``), then the scalar
    tail (width 1). Explicit vectors, because the softmax works in place (``out`` may be ``x``), where
    LLVM's vectoriser would keep the scalar loop."""
    whole = b.mul(b.sdiv(n, i64(lanes)), i64(lanes))
    with for_range(b, 0, whole, lanes, name=f"{name}v") as i:
        body(i, lanes)
    with for_range(b, whole, n, name=f"{name}s") as i:
        body(i, 1)


def _fold(b: ir.IRBuilder, ft: ir.Type, n: ir.Value, lanes: int, init: float,
          combine: Callable[[ir.Value, ir.Value], ir.Value], element: Callable[[ir.Value, int], ir.Value],
          name: str) -> ir.Value:
    """``combine`` of ``element(i, width)`` over the row, from ``init``, ``element`` called in order of
    ``i``: ``FOLD_WAYS`` vector accumulators over whole groups of vectors, one for the vectors left,
    combined in a tree, halved lane-wise to one, then the scalar tail. Why: one accumulator made
    every row a chain of dependent adds (4 cycles a vector), and folding its lanes one by one another
    (a layer_norm of 128 × 256 took 20 µs, 1.1 cycles an element)."""
    vt = vec(ft, lanes)
    accs = [Slot(b, vt, const(vt, init)) for _ in range(FOLD_WAYS)]
    scalar = Slot(b, ft, const(ft, init))
    group = lanes * FOLD_WAYS
    grouped = b.mul(b.sdiv(n, i64(group)), i64(group))
    with for_range(b, 0, grouped, group, name=f"{name}g") as i:
        for k, acc in enumerate(accs):
            acc.set(combine(acc.get(), element(b.add(i, i64(k * lanes)), lanes)))
    whole = b.mul(b.sdiv(n, i64(lanes)), i64(lanes))
    with for_range(b, grouped, whole, lanes, name=f"{name}v") as i:
        accs[0].set(combine(accs[0].get(), element(i, lanes)))
    with for_range(b, whole, n, name=f"{name}s") as i:
        scalar.set(combine(scalar.get(), element(i, 1)))
    values = [acc.get() for acc in accs]
    while len(values) > 1:
        values = [combine(values[i], values[i + 1]) for i in range(0, len(values), 2)]
    folded, width = values[0], lanes
    while width > 1:  # the upper half of the lanes onto the lower
        width //= 2
        mask = ir.Constant(vec(I32, lanes), [width + j % width for j in range(lanes)])
        folded = combine(folded, b.shuffle_vector(folded, ir.Constant(vt, ir.Undefined), mask))
    return combine(scalar.get(), b.extract_element(folded, i64(0)))


def _access(b: ir.IRBuilder) -> tuple[Callable[..., ir.Value], Callable[..., None], Callable[..., ir.Value]]:
    """(load(row, i, width), store(value, row, i), broadcast(scalar, width)) for ``_sweep`` bodies."""

    def load(row: ir.Value, i: ir.Value, width: int) -> ir.Value:
        return load_vec(b, gep(b, row, i), width) if width > 1 else b.load(gep(b, row, i))

    def store(value: ir.Value, row: ir.Value, i: ir.Value) -> None:
        if isinstance(value.type, ir.VectorType):
            store_vec(b, value, gep(b, row, i))
        else:
            b.store(value, gep(b, row, i))

    def broadcast(value: ir.Value, width: int) -> ir.Value:
        return value if width == 1 else splat(b, value, width)

    return load, store, broadcast


def _build_layer_norm(dtype: str) -> str:
    ft, lanes = FLOAT_TYPES[dtype], LANES[dtype]
    module = ir.Module(f"layer_norm_{dtype}")
    b, a = LN_FRAME.define(module, "layer_norm", ft.as_pointer(), noalias=("x", "out"), no_builtins=True)
    sqrt = intrinsic(module, f"llvm.sqrt.{'f32' if dtype == 'float32' else 'f64'}", ft, [ft])
    load, store, broadcast = _access(b)
    add = lambda acc, v: b.fadd(acc, v, flags=REASSOC)  # noqa: E731
    n = a["n"]
    inv_n = b.fdiv(const(ft, 1.0), b.sitofp(n, ft))
    eps = b.bitcast(a["eps"], ir.DoubleType())
    eps = eps if dtype == "float64" else b.fptrunc(eps, ft)
    with for_each_chunk(b, a["counter"], a["rows"], a["chunk"]) as (start, stop), for_range(b, start, stop,
                                                                                          name="r") as r:
        base = b.mul(r, n)
        x, out = gep(b, a["x"], base), gep(b, a["out"], base)
        mean = b.fmul(_fold(b, ft, n, lanes, 0.0, add, lambda i, w: load(x, i, w), "s"), inv_n)

        def square(i: ir.Value, width: int) -> ir.Value:
            d = b.fsub(load(x, i, width), broadcast(mean, width))
            return b.fmul(d, d)

        var = b.fmul(_fold(b, ft, n, lanes, 0.0, add, square, "q"), inv_n)
        rstd = b.fdiv(const(ft, 1.0), b.call(sqrt, [b.fadd(var, eps)]))

        def normalise(i: ir.Value, width: int) -> None:
            v = b.fmul(b.fsub(load(x, i, width), broadcast(mean, width)), broadcast(rstd, width))
            store(fma(b, v, load(a["weight"], i, width), load(a["bias"], i, width)), out, i)

        _sweep(b, n, lanes, normalise, "o")
    b.ret_void()
    return str(module)


def _build_softmax(dtype: str) -> str:
    ft, lanes = FLOAT_TYPES[dtype], LANES[dtype]
    module = ir.Module(f"softmax_{dtype}")
    b, a = SOFTMAX_FRAME.define(module, "softmax", ft.as_pointer(), no_builtins=True)
    load, store, broadcast = _access(b)
    n = a["n"]
    scale = b.bitcast(a["scale"], ir.DoubleType())
    scale = scale if dtype == "float64" else b.fptrunc(scale, ft)
    safe = b.icmp_signed("!=", a["safe"], i64(0))
    with for_each_chunk(b, a["counter"], a["rows"], a["chunk"]) as (start, stop), for_range(b, start, stop,
                                                                                          name="r") as r:
        base = b.mul(r, n)
        x, out = gep(b, a["x"], base), gep(b, a["out"], base)

        def scaled(i: ir.Value, width: int) -> ir.Value:
            return b.fmul(load(x, i, width), broadcast(scale, width))

        # maxnum skips a NaN, but a NaN still reaches every output through exp and the sum
        top = _fold(b, ft, n, lanes, -math.inf, lambda acc, v: maxnum(b, acc, v), scaled, "m")
        top = b.select(b.and_(safe, b.fcmp_ordered("==", top, const(ft, -math.inf))), const(ft, 0.0), top)

        def exp(i: ir.Value, width: int) -> ir.Value:
            e = mathlib.emit_exp(b, b.fsub(scaled(i, width), broadcast(top, width)))
            store(e, out, i)
            return e

        total = _fold(b, ft, n, lanes, 0.0, lambda acc, v: b.fadd(acc, v, flags=REASSOC), exp, "e")
        inv = b.fdiv(const(ft, 1.0), total)
        inv = b.select(b.and_(safe, b.fcmp_unordered("<=", total, const(ft, 0.0))), const(ft, 0.0), inv)
        _sweep(b, n, lanes, lambda i, w: store(b.fmul(load(out, i, w), broadcast(inv, w)), out, i), "o")
    b.ret_void()
    return str(module)


def _build_sum(dtype: str) -> str:
    ft, lanes = FLOAT_TYPES[dtype], LANES[dtype]
    module = ir.Module(f"sum_{dtype}")
    b, a = SUM_FRAME.define(module, "sum", ft.as_pointer(), no_builtins=True)
    load = _access(b)[0]
    add, relu, mean = (b.icmp_signed("!=", b.and_(a["flags"], i64(bit)), i64(0))
                       for bit in (SUM_ADD, SUM_RELU, SUM_MEAN))
    n = a["n"]
    with for_each_chunk(b, a["counter"], a["rows"], a["chunk"]) as (start, stop), for_range(b, start, stop,
                                                                                          name="r") as r:
        base = b.mul(r, n)
        x, y = gep(b, a["x"], base), gep(b, a["y"], base)

        def element(i: ir.Value, width: int) -> ir.Value:
            v = load(x, i, width)
            v = b.select(add, b.fadd(v, load(y, i, width)), v)  # without SUM_ADD, y is x: a valid read
            return b.select(relu, nan_relu(b, v), v)

        total = _fold(b, ft, n, lanes, 0.0, lambda acc, v: b.fadd(acc, v, flags=REASSOC), element, "s")
        total = b.select(mean, b.fdiv(total, b.sitofp(n, ft)), total)
        b.store(total, gep(b, a["out"], r))
    b.ret_void()
    return str(module)


def sum_rows(x: np.ndarray, y: np.ndarray | None = None, *, relu: bool = False, mean: bool = False
             ) -> np.ndarray:
    """The sum (or mean) over the last axis of ``x`` (+ ``y``, of its shape and dtype), ReLU'd first when
    ``relu``: what a JIT region's fused reduction calls, as a function of its own for tests."""
    x = np.ascontiguousarray(x)
    y = x if y is None else np.ascontiguousarray(y)
    out = np.empty(x.shape[:-1], x.dtype)
    flags = (SUM_ADD if y is not x else 0) | (SUM_RELU if relu else 0) | (SUM_MEAN if mean else 0)
    _run("sum", SUM_FRAME, x, out, x.shape[-1], y=ptr(y), flags=flags)
    return out


_BUILDERS = {"layer_norm": _build_layer_norm, "softmax": _build_softmax, "sum": _build_sum}


def job_address(kind: str, dtype: str) -> int:
    """The address of the ``kind`` job ("layer_norm" or "softmax") for ``dtype``; JIT regions call it too."""
    return native_library(("rows", kind, dtype), lambda: _BUILDERS[kind](dtype)).address(kind)


def f64_bits(value: float) -> int:
    """A float as the int64 of its float64 bits: how frames carry ``eps`` and ``scale``."""
    return struct.unpack("<q", struct.pack("<d", float(value)))[0]


def _run(kind: str, frame_type: Frame, x: np.ndarray, out: np.ndarray, n: int, **fields: int | None) -> None:
    rows = x.size // n if n else 0
    if rows:
        frame = frame_type.pack(x=ptr(x), out=ptr(out), rows=rows, n=n, chunk=max(1, CHUNK_ELEMENTS // n),
                                **fields)
        POOL.run(job_address(kind, float_name(x.dtype)), frame, flops=x.size * FLOPS_PER_ELEMENT[kind])


def softmax_rows(x: np.ndarray, out: np.ndarray | None = None, *, scale: float = 1.0, safe: bool = False
                 ) -> np.ndarray:
    """Softmax of ``x · scale`` over the last axis (float32/float64) into ``out`` (new if None; may be
    ``x``); ``safe``: rows that are all −inf give zeros (what generated attention code asks for)."""
    if not x.flags.c_contiguous:
        x = x.copy()
    if out is None:
        out = mempool.kernel_empty(x.shape, x.dtype)
    n = x.shape[-1] if x.ndim else 1
    _run("softmax", SOFTMAX_FRAME, x, out, n, scale=f64_bits(scale), safe=int(safe))
    return out


# the weight and bias of "absent", by (n, dtype): a dtype is its own key (``dtype.name`` costs µs a call)
_AFFINE: dict[tuple[int, np.dtype], tuple[np.ndarray, np.ndarray]] = {}


def layer_norm_rows(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, n: int, eps: float
                    ) -> np.ndarray:
    """layer_norm of ``x`` over its trailing ``n`` elements (weight/bias: ``n`` elements each, or None)."""
    x = np.ascontiguousarray(x)
    ones, zeros = _AFFINE.get((n, x.dtype)) or _AFFINE.setdefault(
        (n, x.dtype), (np.ones(n, x.dtype), np.zeros(n, x.dtype)))
    weight = ones if weight is None else np.ascontiguousarray(weight, x.dtype).reshape(n)
    bias = zeros if bias is None else np.ascontiguousarray(bias, x.dtype).reshape(n)
    out = mempool.kernel_empty(x.shape, x.dtype)
    _run("layer_norm", LN_FRAME, x, out, n, weight=ptr(weight), bias=ptr(bias), eps=f64_bits(eps))
    return out


# -- the variants ----------------------------------------------------------------------------------


def _ln_applies(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> bool:
    k = len(attrs["normalized_shape"])
    trailing = tuple(shapes[0][len(shapes[0]) - k:])
    return 0 < k <= len(shapes[0]) and all(math.prod(s) == math.prod(trailing) for s in shapes[1:])


def _make_layer_norm(attrs: Mapping[str, Any]) -> Callable[..., np.ndarray]:
    # A normalized_shape read from registers (``x.shape[-1]``) is not among the site's static attributes:
    # it arrives with every call, as the reference kernel gets it.
    static, eps = attrs.get("normalized_shape"), attrs.get("eps", 1e-5)
    reference = get_op("layer_norm").kernel

    def kernel(x: np.ndarray, weight: np.ndarray | None = None, bias: np.ndarray | None = None,
               normalized_shape: Sequence[int] | None = static) -> np.ndarray:
        normalized = tuple(normalized_shape)
        if any(a is not None and a.dtype != x.dtype for a in (weight, bias)):  # the result's dtype is theirs
            return reference(x, weight, bias, normalized_shape=normalized, eps=eps)
        return layer_norm_rows(x, weight, bias, math.prod(normalized), eps)

    return kernel


def _softmax_applies(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> bool:
    rank = len(shapes[0])
    return rank > 0 and attrs.get("axis", -1) in (-1, rank - 1)


def _make_softmax(attrs: Mapping[str, Any]) -> Callable[..., np.ndarray]:
    def kernel(x: np.ndarray) -> np.ndarray:
        return softmax_rows(x)

    return kernel


def elements(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> float:
    """The cost model's work of a row kernel: one "flop" per element, as for elementwise ops."""
    return float(math.prod(shapes[0]))


VARIANTS = (
    Variant("layer_norm", "simd", _make_layer_norm, dtypes=FLOATS, when=_ln_applies,
            constraints="weight and bias of normalized_shape's size (or absent); a non-contiguous input is "
                        "copied first", kind="native", flops=elements),
    Variant("softmax", "simd", _make_softmax, dtypes=FLOATS, when=_softmax_applies,
            constraints="the last axis; a non-contiguous input is copied first", kind="native",
            flops=elements),
)
