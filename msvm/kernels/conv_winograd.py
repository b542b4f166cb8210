"""conv2d ``winograd_f2x3``: Winograd F(2×2, 3×3) for 3×3 convs at stride 1, dilation 1, groups 1.

Why: it computes each 2×2 output tile with 16 multiplies per (in, out) channel pair instead of
36 (2.25× fewer flops), at the price of input/output transforms that are pure adds. The weights
are transformed once (U = G·g·Gᵀ, cached for constants) into [16][C_out][C_in]; per chunk of
output tiles a native driver transforms the input (V = Bᵀ·d·B into [16][C_in][tiles]), runs the
16 GEMMs M[ξ] = U[ξ]·V[ξ] through the fastest ``?gemm`` (BLAS threads), and transforms back
(Y = Aᵀ·M·A) adding the bias (and an optional fused ReLU) while writing NCHW. Chunks of a few
hundred tiles keep V and M in cache. Compiled once per dtype and BLAS ABI.

Accuracy: the transforms add rounding error of a few ulp relative to the largest terms — float32
results agree with the reference to ~1e-5 relative, well within the variants' tolerance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from llvmlite import ir

from ..native import blas
from ..native.blas_ir import abi_key, emit_gemm
from ..native.irhelpers import (
    FLOAT_TYPES,
    I64,
    VOID,
    ceil_div,
    define,
    for_range,
    gep,
    i64,
    min_i64,
    nan_relu,
)
from ..ops.registry import Kernel
from ..runtime import mempool
from .conv_common import (
    ConvGeometry,
    bias_or_zero,
    conv_geometry,
    finish,
    geometry_for,
    native_operands,
    output_array,
    padded_input,
    reference_conv2d,
)
from .native import I64 as C_I64
from .native import PTR, float_name, native_function, ptr
from .packing import cached_pack

TILES_PER_CHUNK = 256
_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
_ARG_NAMES = ("N", "C", "OC", "IHp", "IWp", "OH", "OW", "rows_per_chunk", "flags")
_ARGTYPES = [PTR] * 6 + [C_I64] + [C_I64] * len(_ARG_NAMES)
FLAG_BIAS, FLAG_RELU = 1, 2


def transform_weights(weight: np.ndarray) -> np.ndarray:
    """U = G·g·Gᵀ for every (out, in) pair, as a C-contiguous [16][C_out][C_in] array."""
    u = np.einsum("ai,ocij,bj->aboc", _G, weight.astype(np.float64), _G)
    return np.ascontiguousarray(u.reshape(16, weight.shape[0], weight.shape[1]).astype(weight.dtype))


def _build_ir(entry: blas.GemmEntry) -> str:
    ft = FLOAT_TYPES[entry.dtype]
    fp = ft.as_pointer()
    module = ir.Module(f"conv_winograd_{abi_key(entry)}")
    args = [("x", fp), ("u", fp), ("bias", fp), ("out", fp), ("v", fp), ("m", fp), ("gemm", I64)]
    args += [(n, I64) for n in _ARG_NAMES]
    _, b, a = define(module, "conv_winograd", VOID, args, noalias=("x", "u", "bias", "out", "v", "m"))
    c_in, oc, ihp, iwp, oh_n, ow_n = (a[n] for n in ("C", "OC", "IHp", "IWp", "OH", "OW"))
    th, tw = ceil_div(b, oh_n, 2), ceil_div(b, ow_n, 2)
    ld = b.mul(a["rows_per_chunk"], tw)  # leading dim of V and M: tiles per full chunk
    all_rows = b.mul(a["N"], th)
    has_bias = b.icmp_signed("!=", b.and_(a["flags"], i64(FLAG_BIAS)), i64(0))
    relu = b.icmp_signed("!=", b.and_(a["flags"], i64(FLAG_RELU)), i64(0))

    with for_range(b, 0, all_rows, a["rows_per_chunk"], name="chunk") as row0:
        rows = min_i64(b, a["rows_per_chunk"], b.sub(all_rows, row0))
        tiles = b.mul(rows, tw)
        # V[ξ][c][j] = (Bᵀ·d·B)[ξ] for the 4×4 input patch d of tile j.
        with for_range(b, 0, c_in, name="vc") as c, for_range(b, 0, rows, name="vr") as rr:
            row = b.add(row0, rr)
            n, ty = b.sdiv(row, th), b.srem(row, th)
            src = gep(b, a["x"], b.mul(b.add(b.mul(b.add(b.mul(n, c_in), c), ihp), b.mul(ty, i64(2))), iwp))
            dst = gep(b, a["v"], b.add(b.mul(c, ld), b.mul(rr, tw)))
            with for_range(b, 0, tw, name="vt") as tx:
                col = b.mul(tx, i64(2))
                d = [[b.load(gep(b, src, b.add(b.mul(i64(r), iwp), b.add(col, i64(q))))) for q in range(4)]
                     for r in range(4)]
                t = _bt_rows(b, d)
                for i in range(4):
                    for j, value in enumerate(_bt_vec(b, t[i])):
                        plane = b.mul(i64(4 * i + j), b.mul(c_in, ld))
                        b.store(value, gep(b, dst, b.add(plane, tx)))
        for xi in range(16):
            emit_gemm(b, entry, a["gemm"], trans_a=False, trans_b=False, m=oc, n=tiles, k=c_in, alpha=1.0,
                      a=gep(b, a["u"], b.mul(i64(xi), b.mul(oc, c_in))), lda=c_in,
                      b=gep(b, a["v"], b.mul(i64(xi), b.mul(c_in, ld))), ldb=ld, beta=0.0,
                      c=gep(b, a["m"], b.mul(i64(xi), b.mul(oc, ld))), ldc=ld)
        # Y = Aᵀ·M·A (+ bias), written to NCHW (the last tile row/column may be half outside).
        with for_range(b, 0, oc, name="yo") as o, for_range(b, 0, rows, name="yr") as rr:
            row = b.add(row0, rr)
            n, ty = b.sdiv(row, th), b.srem(row, th)
            bias_o = bias_or_zero(b, has_bias, gep(b, a["bias"], o))
            src = gep(b, a["m"], b.add(b.mul(o, ld), b.mul(rr, tw)))
            y0 = b.mul(ty, i64(2))
            out0 = gep(b, a["out"], b.mul(b.add(b.mul(b.add(b.mul(n, oc), o), oh_n), y0), ow_n))
            second_row = b.icmp_signed("<", b.add(y0, i64(1)), oh_n)
            with for_range(b, 0, tw, name="yt") as tx:
                m = [[b.load(gep(b, src, b.add(b.mul(i64(4 * r + q), b.mul(oc, ld)), tx))) for q in range(4)]
                     for r in range(4)]
                y = _at_m_a(b, m)
                x0 = b.mul(tx, i64(2))
                second_col = b.icmp_signed("<", b.add(x0, i64(1)), ow_n)
                for dy in range(2):
                    for dx in range(2):
                        value = b.fadd(y[dy][dx], bias_o)
                        value = b.select(relu, nan_relu(b, value), value)
                        keep = ir.Constant(ir.IntType(1), 1)
                        if dy:
                            keep = b.and_(keep, second_row)
                        if dx:
                            keep = b.and_(keep, second_col)
                        dst = gep(b, out0, b.add(b.mul(i64(dy), ow_n), b.add(x0, i64(dx))))
                        with b.if_then(keep):
                            b.store(value, dst)
    b.ret_void()
    return str(module)


def _bt_vec(b: ir.IRBuilder, d: Sequence[ir.Value]) -> list[ir.Value]:
    """Bᵀ·d for a 4-vector d."""
    return [b.fsub(d[0], d[2]), b.fadd(d[1], d[2]), b.fsub(d[2], d[1]), b.fsub(d[1], d[3])]


def _bt_rows(b: ir.IRBuilder, d: Sequence[Sequence[ir.Value]]) -> list[list[ir.Value]]:
    """Bᵀ·d for a 4×4 d (combining rows); then ``_bt_vec`` on each row gives Bᵀ·d·B."""
    cols = [_bt_vec(b, [d[r][q] for r in range(4)]) for q in range(4)]
    return [[cols[q][i] for q in range(4)] for i in range(4)]


def _at_m_a(b: ir.IRBuilder, m: Sequence[Sequence[ir.Value]]) -> list[list[ir.Value]]:
    """Aᵀ·m·A for a 4×4 m: the 2×2 output tile."""

    def at(v: Sequence[ir.Value]) -> list[ir.Value]:
        return [b.fadd(b.fadd(v[0], v[1]), v[2]), b.fsub(b.fsub(v[1], v[2]), v[3])]

    cols = [at([m[r][q] for r in range(4)]) for q in range(4)]
    return [at([cols[q][i] for q in range(4)]) for i in range(2)]


def _driver(entry: blas.GemmEntry) -> Any:
    return native_function(("conv_winograd", abi_key(entry)), lambda: _build_ir(entry), "conv_winograd",
                           _ARGTYPES)


def conv2d_winograd(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, geo: ConvGeometry,
                    entry: blas.GemmEntry, *, relu: bool = False) -> np.ndarray:
    """The convolution as [N, C_out, OH, OW] (3×3, stride 1, dilation 1, groups 1; x 4-D C-contiguous)."""
    u = cached_pack("winograd_f2x3", weight, None, lambda: transform_weights(weight))  # [16][OC][C]
    th, tw = (geo.oh + 1) // 2, (geo.ow + 1) // 2
    xp = padded_input(x, geo, extra_bottom=2 * th + 2 - (geo.h + geo.pad_top + geo.pad_bottom),
                      extra_right=2 * tw + 2 - (geo.w + geo.pad_left + geo.pad_right))
    rows = max(1, min(geo.n * th, TILES_PER_CHUNK // tw))
    ld = rows * tw
    v = mempool.kernel_empty((16 * geo.c_in * ld,), x.dtype)
    m = mempool.kernel_empty((16 * geo.c_out * ld,), x.dtype)
    out = output_array(geo, x.dtype)
    b = None if bias is None else np.ascontiguousarray(bias)
    flags = (FLAG_BIAS if b is not None else 0) | (FLAG_RELU if relu else 0)
    _driver(entry)(ptr(xp), ptr(u), None if b is None else ptr(b), ptr(out), ptr(v), ptr(m), entry.address,
                   geo.n, geo.c_in, geo.c_out, xp.shape[2], xp.shape[3], geo.oh, geo.ow, rows, flags)
    return out


def workspace(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any], itemsize: int) -> int:
    """Bytes a call allocates besides its output: the transformed weights, the padded input and the
    transformed input and output tiles of one chunk (what ``conv2d_winograd`` makes)."""
    geo = conv_geometry(shapes, attrs)
    if geo is None:
        return 0
    th, tw = (geo.oh + 1) // 2, (geo.ow + 1) // 2
    ld = max(1, min(geo.n * th, TILES_PER_CHUNK // tw)) * tw
    padded = geo.n * geo.c_in * (2 * th + 2) * (2 * tw + 2)
    return (16 * geo.c_out * geo.c_in + padded + 16 * (geo.c_in + geo.c_out) * ld) * itemsize


def is_winograd_f2x3(geo: ConvGeometry) -> bool:
    return (geo.kh, geo.kw, geo.sh, geo.sw, geo.dh, geo.dw, geo.groups) == (3, 3, 1, 1, 1, 1, 1)


def applies(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> bool:
    """3×3 kernel, stride 1, dilation 1, groups 1 (any padding), when a BLAS library was found."""
    geo = conv_geometry(shapes, attrs)
    return geo is not None and is_winograd_f2x3(geo) and bool(blas.discover())


def make(attrs: Mapping[str, Any]) -> Kernel:
    """The variant's kernel: ``kernel(x, weight, bias=None)`` like the reference."""
    fallback = reference_conv2d(attrs)
    geometry = geometry_for(attrs)

    def kernel(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        geo = geometry(x.shape, weight.shape)
        name = float_name(x.dtype)
        entry = blas.best_gemm(name) if name else None
        if not native_operands(geo, x, weight, bias) or entry is None or not is_winograd_f2x3(geo):
            return fallback(x, weight, bias)
        x4 = np.ascontiguousarray(x if geo.batched else x[None])
        return finish(geo, conv2d_winograd(x4, weight, bias, geo, entry))

    return kernel
