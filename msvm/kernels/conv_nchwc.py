"""conv2d ``nchwc_direct``: direct convolution on output-channel blocks with an explicit-vector micro-kernel.

Why: with the small K (27–576) and N (16–64) of a ResNet's convolutions, im2col + BLAS spends its
time copying; ONNX Runtime's lead comes from direct NCHWc kernels. Here the weights are repacked
once into [groups][OC/8][C/groups][KH][KW][8] (8 = one AVX2 vector of float32; 4 for float64), and
the input stays NCHW: the micro-kernel keeps a register tile of ``PIXELS`` output pixels ×
``VECTORS`` output-channel vectors (6 × 2 × 8 float32 = 12 accumulators), and for every (input
channel, tap) loads ``VECTORS`` weight vectors and broadcasts one input value per pixel into
FMAs. Taps are addressed through a per-call offset table (channel, row, column → input offset),
so one flat loop over C·KH·KW covers any kernel size and dilation. The epilogue adds the bias,
applies an optional fused ReLU (for the JIT) and writes the tile back to NCHW.

Row tails use narrower tiles (4, 2, 1 pixels). Padding is a zero-bordered copy of the input
(``conv_common.padded_input``). The kernel is compiled once per dtype and width-stride class
(1, 2 or any), all sizes being run-time arguments. Work items are (image, group, channel block,
output row), taken in chunks from an atomic counter, so the call runs on both cores
(``threads.POOL``) when it is large enough.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from llvmlite import ir

from ..native.irhelpers import (
    FLOAT_TYPES,
    I64,
    LANES,
    VOID,
    Slot,
    const,
    define,
    fma,
    for_each_chunk,
    for_range,
    gep,
    i64,
    load_vec,
    maxnum,
    min_i64,
    splat,
    store_first,
    transpose,
    vec,
)
from ..ops.registry import Kernel
from .conv_common import (
    ConvGeometry,
    conv_geometry,
    finish,
    geometry_for,
    native_operands,
    output_array,
    padded_input,
    reference_conv2d,
)
from .native import COUNTER, PTR, counter, float_name, native_function, ptr
from .native import I64 as C_I64
from .packing import cached_pack
from .threads import POOL

PIXELS = 6  # output pixels per register tile
VECTORS = 2  # output-channel vectors per register tile
_ARG_NAMES = ("Cg", "IHp", "IWp", "OC", "OH", "OW", "KH", "KW", "SH", "SW", "DH", "DW", "groups", "flags")
_ARGTYPES = [PTR, PTR, PTR, PTR] + [C_I64] * len(_ARG_NAMES) + [COUNTER, C_I64, C_I64]
FLAG_BIAS, FLAG_RELU = 1, 2


def _build_ir(dtype: str, stride_w: int) -> str:
    """The kernel for ``dtype``; ``stride_w`` 1 or 2 is baked in (immediate offsets), 0 = run time."""
    ft, lanes = FLOAT_TYPES[dtype], LANES[dtype]
    vt = vec(ft, lanes)
    width = lanes * VECTORS  # output channels per tile
    module = ir.Module(f"conv_nchwc_{dtype}_s{stride_w}")
    fp = ft.as_pointer()
    args = [("x", fp), ("w", fp), ("bias", fp), ("out", fp)] + [(n, I64) for n in _ARG_NAMES]
    args += [("counter", I64.as_pointer()), ("items", I64), ("chunk", I64)]
    _, b, a = define(module, "conv_nchwc", VOID, args, noalias=("x", "w", "bias", "out"))
    cg, ihp, iwp, oc, oh_n, ow_n = (a[n] for n in ("Cg", "IHp", "IWp", "OC", "OH", "OW"))
    kh_n, kw_n, sh, dh, dw, groups = (a[n] for n in ("KH", "KW", "SH", "DH", "DW", "groups"))
    sw = i64(stride_w) if stride_w else a["SW"]

    # Offsets of every (channel, tap) relative to the tile's first input pixel.
    k_total = b.mul(b.mul(cg, kh_n), kw_n)
    offsets = b.alloca(I64, k_total, name="offsets")
    plane = b.mul(ihp, iwp)
    with (for_range(b, 0, cg, name="oc_c") as c, for_range(b, 0, kh_n, name="oc_kh") as kh,
          for_range(b, 0, kw_n, name="oc_kw") as kw):
        k = b.add(b.mul(b.add(b.mul(c, kh_n), kh), kw_n), kw)
        off = b.add(b.add(b.mul(c, plane), b.mul(b.mul(kh, dh), iwp)), b.mul(kw, dw))
        b.store(off, gep(b, offsets, k))

    ocg = b.sdiv(oc, groups)
    tiles = b.sdiv(b.add(ocg, i64(width - 1)), i64(width))
    block = b.mul(k_total, i64(lanes))  # elements per packed [C][KH][KW][lanes] block
    has_bias = b.icmp_signed("!=", b.and_(a["flags"], i64(FLAG_BIAS)), i64(0))
    relu = b.icmp_signed("!=", b.and_(a["flags"], i64(FLAG_RELU)), i64(0))
    ohw = b.mul(oh_n, ow_n)
    zero = const(vt, 0.0)

    with (for_each_chunk(b, a["counter"], a["items"], a["chunk"]) as (start, stop),
          for_range(b, start, stop, name="item") as item):
        oh = b.srem(item, oh_n)
        rest = b.sdiv(item, oh_n)
        t = b.srem(rest, tiles)
        rest = b.sdiv(rest, tiles)
        g = b.srem(rest, groups)
        n = b.sdiv(rest, groups)
        gt = b.add(b.mul(g, tiles), t)  # tile index over all groups
        x_row = gep(b, a["x"], b.add(b.mul(b.add(b.mul(n, b.mul(cg, groups)), b.mul(g, cg)), plane),
                                     b.mul(b.mul(oh, sh), iwp)))
        w_tile = gep(b, a["w"], b.mul(b.mul(gt, i64(VECTORS)), block))
        oc0 = b.add(b.mul(g, ocg), b.mul(t, i64(width)))
        out_row = gep(b, a["out"], b.add(b.mul(b.add(b.mul(n, oc), oc0), ohw), b.mul(oh, ow_n)))
        valid = min_i64(b, b.sub(ocg, b.mul(t, i64(width))), i64(width))
        full = b.icmp_signed("==", valid, i64(width))
        bias_ptr = gep(b, a["bias"], b.mul(gt, i64(width)))
        init = [b.select(has_bias, load_vec(b, gep(b, bias_ptr, v * lanes), lanes), zero)
                for v in range(VECTORS)]
        ow_slot = Slot(b, I64, i64(0), "ow")

        def tile(pixels: int) -> None:
            ow = ow_slot.get()
            x_tile = gep(b, x_row, b.mul(ow, sw))
            acc = [[Slot(b, vt, init[v]) for v in range(VECTORS)] for _ in range(pixels)]
            with for_range(b, 0, k_total, name=f"k{pixels}") as k:
                xk = gep(b, x_tile, b.load(gep(b, offsets, k)))
                wk = gep(b, w_tile, b.mul(k, i64(lanes)))
                wv = [load_vec(b, gep(b, wk, b.mul(block, i64(v))), lanes) for v in range(VECTORS)]
                for p in range(pixels):
                    xb = splat(b, b.load(gep(b, xk, b.mul(sw, i64(p)))), lanes)
                    for v in range(VECTORS):
                        acc[p][v].set(fma(b, xb, wv[v], acc[p][v].get()))
            vals = [[acc[p][v].get() for v in range(VECTORS)] for p in range(pixels)]
            vals = [[b.select(relu, maxnum(b, x, zero), x) for x in row] for row in vals]
            out_tile = gep(b, out_row, ow)
            _store_tile(b, vals, out_tile, ohw, full, valid, lanes)
            ow_slot.set(b.add(ow, i64(pixels)))

        with for_range(b, 0, b.sdiv(ow_n, i64(PIXELS)), name="tile"):
            tile(PIXELS)
        for pixels in (4, 2, 1):  # the rest of the row (< PIXELS): at most one of each
            with b.if_then(b.icmp_signed(">=", b.sub(ow_n, ow_slot.get()), i64(pixels))):
                tile(pixels)
    b.ret_void()
    return str(module)


def _store_tile(b: ir.IRBuilder, vals: list[list[ir.Value]], out_tile: ir.Value, ohw: ir.Value,
                full: ir.Value, valid: ir.Value, lanes: int) -> None:
    """Write a [pixels][vectors] tile of channel vectors to NCHW (channel c at out_tile + c·OH·OW)."""
    with b.if_else(full) as (then, other):
        with then:  # transpose [pixels][channels] into [channels][pixels]: whole-row stores
            for v in range(len(vals[0])):
                for p0 in range(0, len(vals), lanes):
                    group = [row[v] for row in vals[p0:p0 + lanes]]
                    for j, channel in enumerate(transpose(b, group)):
                        dst = gep(b, out_tile, b.add(b.mul(i64(v * lanes + j), ohw), i64(p0)))
                        store_first(b, channel, len(group), dst)
        # A partial channel block at the end of a group.
        with other, for_range(b, 0, valid, name="ch") as c:
            dst = gep(b, out_tile, b.mul(c, ohw))
            v_idx = b.sdiv(c, i64(lanes))
            lane = b.srem(c, i64(lanes))
            for p, row in enumerate(vals):
                value = row[0]
                for v in range(1, len(row)):
                    value = b.select(b.icmp_signed("==", v_idx, i64(v)), row[v], value)
                b.store(b.extract_element(value, lane), gep(b, dst, p))


def _stride_class(sw: int) -> int:
    return sw if sw in (1, 2) else 0


def _kernel(dtype: str, sw: int) -> Any:
    """The compiled kernel for ``dtype`` and the width-stride class of ``sw``."""
    s = _stride_class(sw)
    return native_function(("conv_nchwc", dtype, s), lambda: _build_ir(dtype, s), "conv_nchwc", _ARGTYPES)


def pack_weights(weight: np.ndarray, groups: int, bias: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(weights as [groups][tiles·VECTORS][C/groups][KH][KW][lanes], bias padded to whole tiles)."""
    lanes = LANES[float_name(weight.dtype)]
    width = lanes * VECTORS
    oc, cg, kh, kw = weight.shape
    ocg = oc // groups
    tiles = -(-ocg // width)
    wp = np.zeros((groups, tiles * width, cg, kh, kw), weight.dtype)
    wp[:, :ocg] = weight.reshape(groups, ocg, cg, kh, kw)
    packed = np.ascontiguousarray(
        wp.reshape(groups, tiles * VECTORS, lanes, cg, kh, kw).transpose(0, 1, 3, 4, 5, 2))
    bp = np.zeros((groups, tiles * width), weight.dtype)
    if bias is not None:
        bp[:, :ocg] = bias.reshape(groups, ocg)
    return packed, bp


def _packed(weight: np.ndarray, bias: np.ndarray | None,
            groups: int) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Packed weights and padded bias with their addresses (cached for constants)."""
    def build() -> tuple[np.ndarray, np.ndarray, int, int]:
        packed, bias_p = pack_weights(weight, groups, bias)
        return packed, bias_p, ptr(packed), ptr(bias_p)

    return cached_pack(f"nchwc/g{groups}", weight, bias, build)


def conv2d_nchwc(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, geo: ConvGeometry, *,
                 relu: bool = False) -> np.ndarray:
    """The convolution as [N, C_out, OH, OW] (x 4-D, C-contiguous, of weight's dtype).

    Packed weights are cached for read-only (constant) weight arrays.
    """
    pack = _packed(weight, bias, geo.groups)  # this reference keeps the packed arrays alive
    w_ptr, b_ptr = pack[2], pack[3]
    xp = padded_input(x, geo)
    out = output_array(geo, x.dtype)
    name = float_name(x.dtype)
    width = LANES[name] * VECTORS
    items = geo.n * geo.groups * (-(-geo.oc_group // width)) * geo.oh
    flags = (FLAG_BIAS if bias is not None else 0) | (FLAG_RELU if relu else 0)
    chunk = max(1, min(8, items // 64))  # small chunks: a slow helper delays the end by one chunk
    args = (ptr(xp), w_ptr, b_ptr, ptr(out), geo.c_group, xp.shape[2], xp.shape[3], geo.c_out,
            geo.oh, geo.ow, geo.kh, geo.kw, geo.sh, geo.sw, geo.dh, geo.dw, geo.groups, flags)
    POOL.run(_kernel(name, geo.sw), (*args, counter(), items, chunk), flops=geo.flops)
    return out


def applies(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> bool:
    """Any stride/dilation/padding; groups allowed while each group has ≥ 8 output channels."""
    geo = conv_geometry(shapes, attrs)
    return geo is not None and geo.oc_group >= 8


def make(attrs: Mapping[str, Any]) -> Kernel:
    """The variant's kernel: ``kernel(x, weight, bias=None)`` like the reference."""
    fallback = reference_conv2d(attrs)
    geometry = geometry_for(attrs)

    def kernel(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        geo = geometry(x.shape, weight.shape)
        if not native_operands(geo, x, weight, bias) or geo.oc_group < 8:
            return fallback(x, weight, bias)
        x4 = np.ascontiguousarray(x if geo.batched else x[None])
        return finish(geo, conv2d_nchwc(x4, weight, bias, geo))

    return kernel
