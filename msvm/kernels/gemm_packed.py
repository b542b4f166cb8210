"""``c = epilogue(a · b)`` for a constant ``b`` packed once into column panels: the JIT's GEMM with weights.

Why: a compiled region's linear layers multiply activations by constant weights. OpenBLAS repacks
those weights at every call, and — worse on this 2-core machine — its worker thread spins for a
long while after each call, so the job pool's helper (attention, layer norms, elementwise passes
split over both cores) finds its core taken: measured here, a pool job right after an OpenBLAS
GEMM ran at one core's speed. With ``b`` packed when the region is lowered into panels of
``PANEL_VECTORS`` vectors of columns (``[N/width][K][width]``, zero-padded), the micro-kernel keeps
a register tile of ``ROWS`` rows × one panel (6 × 2 × 8 float32 = 12 accumulators), broadcasts one
element of ``a`` per row (any row stride, unit column stride) and FMAs it with the panel's vectors.
At the W3 transformer's shapes (128 rows, K 256–1024) it ran at 150–165 GFLOP/s on both cores
against numpy's OpenBLAS 135–153 measured apart in the same process.

A work item is (block of ``BLOCK_ROWS`` rows, panel), row-block-major so the block of ``a`` stays
in cache while the panels stream past it; items are claimed from an atomic counter by every thread
the pool lends (``threads``). The epilogue runs on the accumulators before the one store of ``c``:
``+ bias`` (the accumulators start from it), then ReLU or GELU (erf, as the reference), then
``+ residual``. The job (``void gemm_packed(i64* frame)``, fields ``FRAME``) is compiled once per
dtype with every size a run-time value.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from ..native import mathlib
from ..native.irhelpers import (
    FLOAT_TYPES,
    I64,
    LANES,
    Slot,
    const,
    fma,
    for_each_chunk,
    for_range,
    gep,
    i64,
    load_vec,
    maxnum,
    min_i64,
    splat,
    store_vec,
    vec,
)
from .native import Frame, float_name, native_library, ptr
from .packing import cached_pack
from .threads import POOL

ROWS = 6  # rows of a per register tile
PANEL_VECTORS = 2  # vectors of columns per panel
BLOCK_ROWS = 48  # rows per work item
FLAG_BIAS, FLAG_RESIDUAL, FLAG_RELU, FLAG_GELU = 1, 2, 4, 8
FRAME = Frame(
    ("a", "b", "bias", "residual", "c", "M", "N", "K", "AR", "RR", "CR", "flags", "counter"),
    pointers=("a", "b", "bias", "residual", "c"),
    zeroed=("counter",),
)


def panel_width(dtype: str) -> int:
    """Columns per packed panel for ``dtype``."""
    return PANEL_VECTORS * LANES[dtype]


def pack(b: np.ndarray) -> np.ndarray:
    """``b`` [K, N] as panels [ceil(N/width)][K][width], the last one zero-padded."""
    k, n = b.shape
    width = panel_width(float_name(b.dtype) or "float64")
    panels = -(-n // width)
    padded = np.zeros((k, panels * width), b.dtype)
    padded[:, :n] = b
    return np.ascontiguousarray(padded.reshape(k, panels, width).transpose(1, 0, 2))


def packed(b: np.ndarray, bias: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Packed ``b`` and ``bias`` padded to whole panels (cached for constants; the caller keeps them
    alive while in use)."""
    def build() -> tuple[np.ndarray, np.ndarray | None]:
        bp = pack(b)
        if bias is None:
            return bp, None
        padded = np.zeros(bp.shape[0] * bp.shape[2], b.dtype)
        padded[: b.shape[1]] = bias
        return bp, padded

    return cached_pack("gemm_panels", b, bias, build)


def _build_ir(dtype: str) -> str:
    ft, lanes = FLOAT_TYPES[dtype], LANES[dtype]
    vt = vec(ft, lanes)
    width = panel_width(dtype)
    module = ir.Module(f"gemm_packed_{dtype}")
    b, a = FRAME.define(module, "gemm_packed", ft.as_pointer(), noalias=FRAME.pointers)
    m_n, n_n, k_n, flags = a["M"], a["N"], a["K"], a["flags"]

    def flag(bit: int) -> ir.Value:
        return b.icmp_signed("!=", b.and_(flags, i64(bit)), i64(0))

    has_bias, residual, relu, gelu = (flag(f) for f in (FLAG_BIAS, FLAG_RESIDUAL, FLAG_RELU, FLAG_GELU))
    zero = const(vt, 0.0)
    with b.goto_entry_block():
        spill = b.alloca(ir.ArrayType(ft, width), name="spill")  # a partial panel's row, then stored
    spill = b.bitcast(spill, ft.as_pointer())

    panels = b.sdiv(b.add(n_n, i64(width - 1)), i64(width))
    blocks = b.sdiv(b.add(m_n, i64(BLOCK_ROWS - 1)), i64(BLOCK_ROWS))
    with (for_each_chunk(b, a["counter"], b.mul(blocks, panels), i64(1)) as (start, stop),
          for_range(b, start, stop, name="item") as item):
        p = b.srem(item, panels)
        r0 = b.mul(b.sdiv(item, panels), i64(BLOCK_ROWS))
        r1 = min_i64(b, m_n, b.add(r0, i64(BLOCK_ROWS)))
        panel = gep(b, a["b"], b.mul(p, b.mul(k_n, i64(width))))
        c0 = b.mul(p, i64(width))
        full = b.icmp_signed("<=", b.add(c0, i64(width)), n_n)
        bias_at = gep(b, a["bias"], c0)
        init = [b.select(has_bias, load_vec(b, gep(b, bias_at, v * lanes), lanes), zero)
                for v in range(PANEL_VECTORS)]
        row = Slot(b, I64, r0, "row")

        def tile(n: int) -> None:
            i = row.get()
            acc = [[Slot(b, vt, init[v]) for v in range(PANEL_VECTORS)] for _ in range(n)]
            a_rows = [gep(b, a["a"], b.mul(b.add(i, i64(t)), a["AR"])) for t in range(n)]
            with for_range(b, 0, k_n, name=f"k{n}") as k:
                bv = [load_vec(b, gep(b, panel, b.add(b.mul(k, i64(width)), i64(v * lanes))), lanes)
                      for v in range(PANEL_VECTORS)]
                for t in range(n):
                    av = splat(b, b.load(gep(b, a_rows[t], k)), lanes)
                    for v in range(PANEL_VECTORS):
                        acc[t][v].set(fma(b, av, bv[v], acc[t][v].get()))
            for t in range(n):
                r = b.add(i, i64(t))
                out = gep(b, a["c"], b.add(b.mul(r, a["CR"]), c0))
                res = gep(b, a["residual"], b.add(b.mul(r, a["RR"]), c0))
                with b.if_else(full) as (then, other):
                    with then:
                        for v in range(PANEL_VECTORS):
                            y = _epilogue(b, acc[t][v].get(), relu, gelu)
                            with b.if_else(residual) as (add, plain):
                                with add:
                                    y2 = b.fadd(y, load_vec(b, gep(b, res, v * lanes), lanes))
                                    store_vec(b, y2, gep(b, out, v * lanes))
                                with plain:
                                    store_vec(b, y, gep(b, out, v * lanes))
                    with other:  # the last, partial panel: through the spill row, column by column
                        for v in range(PANEL_VECTORS):
                            store_vec(b, _epilogue(b, acc[t][v].get(), relu, gelu), gep(b, spill, v * lanes))
                        with for_range(b, 0, b.sub(n_n, c0), name=f"tail{n}") as j:
                            y = b.load(gep(b, spill, j))
                            y = b.select(residual, b.fadd(y, b.load(gep(b, res, j))), y)
                            b.store(y, gep(b, out, j))
            row.set(b.add(i, i64(n)))

        with for_range(b, 0, b.sdiv(b.sub(r1, r0), i64(ROWS)), name="rows"):
            tile(ROWS)
        for n in (4, 2, 1):  # the rest of the block (< ROWS): at most one of each
            with b.if_then(b.icmp_signed(">=", b.sub(r1, row.get()), i64(n))):
                tile(n)
    b.ret_void()
    return str(module)


def _epilogue(b: ir.IRBuilder, y: ir.Value, relu: ir.Value, gelu: ir.Value) -> ir.Value:
    """ReLU or GELU (erf form, as the reference) of the accumulators, as the flags say."""
    zero = const(y.type, 0.0)
    y = b.select(relu, maxnum(b, y, zero), y)
    slot = Slot(b, y.type, y)
    with b.if_then(gelu):
        erf = mathlib.emit_erf(b, b.fmul(y, const(y.type, 1 / math.sqrt(2))))
        slot.set(b.fmul(b.fmul(y, const(y.type, 0.5)), b.fadd(erf, const(y.type, 1.0))))
    return slot.get()


def job_address(dtype: str) -> int:
    """The address of the compiled job ``void gemm_packed(i64* frame)`` for ``dtype``; JIT regions call it."""
    return native_library(("gemm_packed", dtype), lambda: _build_ir(dtype)).address("gemm_packed")


def gemm(a: np.ndarray, b: np.ndarray, bias: np.ndarray | None = None, *, activation: str | None = None,
         residual: np.ndarray | None = None) -> np.ndarray:
    """``activation(a @ b + bias) + residual`` through the packed job (a [M, K] and b [K, N] of one
    float dtype; ``activation`` None, "relu" or "gelu"): what a region's kernel computes, callable
    from Python (tests, benchmarks)."""
    name = float_name(a.dtype)
    assert name is not None and b.dtype == a.dtype
    a = a if a.strides[-1] == a.itemsize else np.ascontiguousarray(a)
    bp, bias_p = packed(b, None if bias is None else np.asarray(bias, a.dtype))
    (m, k), n = a.shape, b.shape[1]
    c = np.empty((m, n), a.dtype)
    res = None if residual is None else np.ascontiguousarray(residual, a.dtype)
    flags = (FLAG_BIAS if bias is not None else 0) | (FLAG_RESIDUAL if res is not None else 0)
    flags |= {None: 0, "relu": FLAG_RELU, "gelu": FLAG_GELU}[activation]
    frame = FRAME.pack(a=ptr(a), b=ptr(bp), bias=None if bias_p is None else ptr(bias_p),
                       residual=None if res is None else ptr(res), c=ptr(c), M=m, N=n, K=k,
                       AR=a.strides[0] // a.itemsize, RR=n, CR=n, flags=flags)
    POOL.run(job_address(name), frame, flops=2 * m * n * k)
    return c
