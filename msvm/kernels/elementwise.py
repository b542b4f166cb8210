"""Native unary math for the interpreter: exp, log, tanh, sigmoid, silu and gelu (both forms).

Why: their reference kernels are numpy expressions — gelu's exact form evaluates Cody's erf with a
dozen numpy passes and boolean masks (≈ 75 ns per element), sigmoid, silu and the tanh-gelu several
passes each — so a transformer block spends its time there when interpreted. Here each op is one
pass: a loop over the flat array whose body is ``msvm.native.mathlib``'s vectorisable function
(LLVM has no vector libm here), explicit vectors of one AVX2 register (8 float32 / 4 float64), two
per iteration so that two polynomial chains overlap, and a scalar tail. Every size is a run-time
argument: one library per (op form, dtype), compiled on first use and kept for the process. The
loop is a job (``void <name>(i64* frame)``, fields ``FRAME``) that takes its elements in chunks
from an atomic counter, so large arrays run on both cores (``threads.POOL``).

Accuracy against the references: within mathlib's bounds, a few ulp, computed in the input's
dtype. Exact gelu is ``x/2 · (1 + erf(x/√2))`` as in PyTorch: in float64 by erf, so it inherits erf's
absolute error where 1 + erf cancels, and in float32 by mathlib's rational GELU (absolute error
≤ 5e-7), the JIT's form, so that the two agree to the bit; below x ≈ −5.5 (float32) / −8.5 (float64)
it returns 0 where the reference (erfc in float64) keeps values under 1e-7 / 1e-16.
Inputs that are not C-contiguous are copied first; other dtypes never reach these kernels (the
variants are registered for float32 and float64 only).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from math import prod
from typing import Any

import numpy as np
from llvmlite import ir

from ..native import mathlib
from ..native.irhelpers import (
    FLOAT_TYPES,
    LANES,
    const,
    fma,
    for_each_chunk,
    for_range,
    gep,
    i64,
    load_vec,
    store_vec,
)
from ..runtime import mempool
from ..scheduler.variants import Variant, register_variant
from .native import Frame, float_name, native_library, ptr
from .threads import POOL

FLOATS = ("float32", "float64")
CHUNK = 4096  # elements per claim from the work counter (a multiple of every vector width)
UNROLL = 2  # vectors per loop iteration
FRAME = Frame(("x", "out", "n", "counter"), pointers=("x", "out"), zeroed=("counter",))

# Below this many elements numpy's one SIMD pass of exp/log/tanh beats the native call's fixed cost
# (~4 µs: frame, pool, ctypes; measured crossover 4–8k elements), so the variant does not apply and
# such calls never reach the cost model. The other ops' references take several passes: no floor.
MIN_ELEMENTS = {"exp": 4096, "log": 4096, "tanh": 4096}

# Work per element, in the pool's flops (``threads.MIN_FLOPS_PER_THREAD`` per extra thread): about
# what a GEMM does in the time one element takes, so a second core joins from 40–80k elements.
FLOPS_PER_ELEMENT = {"exp": 200, "log": 200, "tanh": 300, "sigmoid": 300, "silu": 300, "gelu": 400,
                     "gelu_tanh": 300}

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT2 = 1.0 / math.sqrt(2.0)


def _body(form: str) -> Callable[[ir.IRBuilder, ir.Value], ir.Value]:
    """``form``'s element function as IR on a value (scalar or vector): b, x -> y."""

    def splat(x: ir.Value, value: float) -> ir.Value:
        return const(x.type, value)

    def gelu_erf(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        if (x.type.element if isinstance(x.type, ir.VectorType) else x.type) == FLOAT_TYPES["float32"]:
            return mathlib.emit_gelu_f32(b, x)  # the JIT's GELU: the two agree to the bit
        half = b.fmul(x, splat(x, 0.5))
        return fma(b, half, mathlib.emit_erf(b, b.fmul(x, splat(x, _INV_SQRT2))), half)

    def gelu_tanh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        half = b.fmul(x, splat(x, 0.5))
        inner = b.fmul(fma(b, b.fmul(b.fmul(x, x), splat(x, 0.044715)), x, x), splat(x, _SQRT_2_OVER_PI))
        return fma(b, half, mathlib.emit_tanh(b, inner), half)

    def silu(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return b.fmul(x, mathlib.emit_sigmoid(b, x))

    forms = {"exp": mathlib.emit_exp, "log": mathlib.emit_log, "tanh": mathlib.emit_tanh,
             "sigmoid": mathlib.emit_sigmoid, "silu": silu, "gelu": gelu_erf, "gelu_tanh": gelu_tanh}
    return forms[form]


def _build_ir(form: str, dtype: str) -> str:
    ft, lanes = FLOAT_TYPES[dtype], LANES[dtype]
    fp = ft.as_pointer()
    body = _body(form)
    module = ir.Module(f"unary_{form}_{dtype}")
    b, a = FRAME.define(module, form, fp, no_builtins=True)
    step = lanes * UNROLL
    with for_each_chunk(b, a["counter"], a["n"], i64(CHUNK)) as (start, stop):
        whole = b.add(start, b.mul(b.sdiv(b.sub(stop, start), i64(step)), i64(step)))
        with for_range(b, start, whole, step, name="v") as i:
            for u in range(UNROLL):
                at = b.add(i, i64(u * lanes))
                store_vec(b, body(b, load_vec(b, gep(b, a["x"], at), lanes)), gep(b, a["out"], at))
        with for_range(b, whole, stop, name="t") as i:
            b.store(body(b, b.load(gep(b, a["x"], i))), gep(b, a["out"], i))
    b.ret_void()
    return str(module)


def job_address(form: str, dtype: str) -> int:
    """The compiled job ``void <form>(i64* frame)`` for ``dtype`` (compiled on first use)."""
    return native_library(("unary", form, dtype), lambda: _build_ir(form, dtype)).address(form)


def unary(form: str, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``form`` applied to every element of ``x`` (float32/float64) into ``out`` (new if None)."""
    if not x.flags.c_contiguous:
        x = x.copy()
    if out is None:
        out = mempool.kernel_empty(x.shape, x.dtype)
    n = x.size
    if n:
        frame = FRAME.pack(x=ptr(x), out=ptr(out), n=n)
        POOL.run(job_address(form, float_name(x.dtype)), frame, flops=n * FLOPS_PER_ELEMENT[form])
    return out


def _make(op: str) -> Callable[[Mapping[str, Any]], Callable[..., np.ndarray]]:
    def make(attrs: Mapping[str, Any]) -> Callable[..., np.ndarray]:
        form = "gelu_tanh" if op == "gelu" and attrs.get("approximate") == "tanh" else op

        def kernel(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
            return unary(form, x, out)

        return kernel

    return make


def elements(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> float:
    """The cost model's work of an elementwise call: one "flop" per element."""
    return float(prod(shapes[0]))


def _unary_variant(op: str) -> Variant:
    floor = MIN_ELEMENTS.get(op, 0)
    where = f"at least {floor} elements" if floor else "any size"
    return Variant(op, "simd", _make(op), dtypes=FLOATS, when=lambda shapes, attrs: prod(shapes[0]) >= floor,
                   constraints=f"{where}, any shape (a non-contiguous input is copied first)",
                   kind="native", flops=elements)


VARIANTS = tuple(_unary_variant(op) for op in ("exp", "log", "tanh", "sigmoid", "silu", "gelu"))

for _variant in VARIANTS:
    register_variant(_variant)
