"""conv2d ``depthwise``: groups == C_in == C_out, any kernel size, stride and dilation, vectorised over width.

Why: a depthwise conv has no channel reduction, so GEMM formulations degenerate into one tiny
matrix product per channel. Here a work item is a block of ``ROWS`` output rows of one channel,
and a register tile of ``ROWS`` × ``VECTORS`` vectors of output pixels (8 accumulators: enough to
hide the FMA latency) accumulates every tap: the tap's weight broadcast, the input loaded as
vectors — contiguous at stride 1, two loads and an even-lane shuffle at stride 2, element by
element otherwise. Taps are addressed through a per-call offset table, so any kernel size and
dilation is one flat loop. Narrower tiles finish a row; its last partial vector is written with
a masked store. Padding costs no extra pass over the input: each item first copies the input
rows it needs into a zero-bordered scratch tile on its thread's stack, wide and tall enough that
whole vectors and whole row blocks can be read past the last output (rows past OH are computed
but not stored). Row blocks are taken in chunks from an atomic counter, so large calls run on both cores.
The tile's epilogue (``conv_common.Epilogue``: bias, ReLU, a residual add, ReLU) runs before the
store. The kernel is a job (``void conv_depthwise(i64* frame)``, fields ``FRAME``) compiled once
per dtype and width-stride class, called by the interpreter's variant and by compiled regions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from llvmlite import ir

from ..native.irhelpers import (
    FLOAT_TYPES,
    I1,
    I32,
    I64,
    LANES,
    VOID,
    Slot,
    ceil_div,
    const,
    fma,
    for_each_chunk,
    for_range,
    gep,
    i64,
    intrinsic,
    load_vec,
    max_i64,
    min_i64,
    nan_relu,
    splat,
    store_vec,
    vec,
)
from ..ops.registry import Kernel
from .conv_common import (
    FLAG_BIAS,
    FLAG_RELU,
    FLAG_RELU_OUT,
    FLAG_RESIDUAL,
    NO_EPILOGUE,
    ConvGeometry,
    Epilogue,
    bias_or_zero,
    conv_geometry,
    finish,
    flag,
    geometry_for,
    native_operands,
    output_array,
    reference_conv2d,
)
from .native import Frame, float_name, native_library, ptr
from .threads import POOL

ROWS = 4  # output rows per register tile
VECTORS = 2  # pixel vectors per row in the main register tile (ROWS × VECTORS accumulators)
FLOPS_SCALE = 4  # ~4× fewer flop/s than the GEMM-like kernels: a call is worth threads sooner
FRAME = Frame(
    ("x", "w", "bias", "out", "residual", "N", "H", "W", "PT", "PL", "PR", "OH", "OW", "KH", "KW", "SH", "SW",
     "DH", "DW", "C", "flags", "counter"),
    pointers=("x", "w", "bias", "out", "residual"),
    zeroed=("counter",),
)


def _build_ir(dtype: str, stride_w: int) -> str:
    ft, lanes = FLOAT_TYPES[dtype], LANES[dtype]
    vt = vec(ft, lanes)
    fp = ft.as_pointer()
    module = ir.Module(f"conv_depthwise_{dtype}_s{stride_w}")
    b, a = FRAME.define(module, "conv_depthwise", fp, noalias=FRAME.pointers, no_builtins=True)
    h, w, oh_n, ow_n, kh_n, kw_n = (a[n] for n in ("H", "W", "OH", "OW", "KH", "KW"))
    sh, dh, dw, channels = a["SH"], a["DH"], a["DW"], a["C"]
    sw = i64(stride_w) if stride_w else a["SW"]
    iwp = _scratch_width(b, a, sw, stride_w, lanes)
    has_bias, has_residual = flag(b, a["flags"], FLAG_BIAS), flag(b, a["flags"], FLAG_RESIDUAL)
    relu, relu_out = flag(b, a["flags"], FLAG_RELU), flag(b, a["flags"], FLAG_RELU_OUT)
    zero = const(vt, 0.0)
    lane_ids = ir.Constant(vec(I64, lanes), list(range(lanes)))
    elem_bytes = 8 if dtype == "float64" else 4
    masked_store = intrinsic(module, f"llvm.masked.store.v{lanes}f{elem_bytes * 8}.p0", VOID,
                             [vt, vt.as_pointer(), I32, vec(I1, lanes)])
    masked_load = intrinsic(module, f"llvm.masked.load.v{lanes}f{elem_bytes * 8}.p0", vt,
                            [vt.as_pointer(), I32, vec(I1, lanes), vt])

    def store(value: ir.Value, dst: ir.Value, mask: ir.Value | None) -> None:
        """The tile's last step: ReLU if asked, then a whole or a masked vector store."""
        value = b.select(relu_out, nan_relu(b, value), value)
        if mask is None:
            store_vec(b, value, dst)
        else:
            b.call(masked_store, [value, b.bitcast(dst, vt.as_pointer()), ir.Constant(I32, elem_bytes), mask])

    # Offset of every tap (kh, kw) from the first input pixel of an output pixel.
    taps = b.mul(kh_n, kw_n)
    offsets = b.alloca(I64, taps, name="offsets")
    with for_range(b, 0, kh_n, name="o_kh") as kh, for_range(b, 0, kw_n, name="o_kw") as kw:
        off = b.add(b.mul(b.mul(kh, dh), iwp), b.mul(kw, dw))
        b.store(off, gep(b, offsets, b.add(b.mul(kh, kw_n), kw)))

    def load_pixels(base: ir.Value) -> ir.Value:
        """Input values for ``lanes`` consecutive output pixels whose first input is at ``base``."""
        if stride_w == 1:
            return load_vec(b, base, lanes)
        if stride_w == 2:
            pair = b.shuffle_vector(load_vec(b, base, lanes), load_vec(b, gep(b, base, lanes), lanes),
                                    ir.Constant(vec(I32, lanes), list(range(0, 2 * lanes, 2))))
            return pair
        value = ir.Constant(vt, ir.Undefined)
        for j in range(lanes):
            value = b.insert_element(value, b.load(gep(b, base, b.mul(sw, i64(j)))), i64(j))
        return value

    # The zero-padded input rows of one row block, built per item (padding costs no extra pass).
    rows_in = b.add(b.mul(i64(ROWS - 1), sh), b.add(b.mul(b.sub(kh_n, i64(1)), dh), i64(1)))
    scratch = b.alloca(ft, b.mul(rows_in, iwp), name="scratch")
    zero_s = ir.Constant(ft, 0.0)

    def fill(ptr: ir.Value, begin: ir.Value, end: ir.Value) -> None:
        with for_range(b, begin, end, name="z") as j:
            b.store(zero_s, gep(b, ptr, j))

    row_blocks = ceil_div(b, oh_n, ROWS)
    items = b.mul(b.mul(a["N"], channels), row_blocks)
    chunk = max_i64(b, i64(1), min_i64(b, i64(16), b.sdiv(items, i64(64))))
    with (for_each_chunk(b, a["counter"], items, chunk) as (start, stop),
          for_range(b, start, stop, name="item") as item):
        oh0 = b.mul(b.srem(item, row_blocks), i64(ROWS))
        plane = b.sdiv(item, row_blocks)  # n·C + c
        c = b.srem(plane, channels)
        w_c = gep(b, a["w"], b.mul(c, taps))
        x_plane = gep(b, a["x"], b.mul(plane, b.mul(h, w)))
        ih0 = b.sub(b.mul(oh0, sh), a["PT"])
        with for_range(b, 0, rows_in, name="sr") as sr:
            dst = gep(b, scratch, b.mul(sr, iwp))
            ih = b.add(ih0, sr)
            inside = b.and_(b.icmp_signed(">=", ih, i64(0)), b.icmp_signed("<", ih, h))
            with b.if_else(inside) as (then, other):
                with then:
                    fill(dst, i64(0), a["PL"])
                    src, row = gep(b, x_plane, b.mul(ih, w)), gep(b, dst, a["PL"])
                    with for_range(b, 0, w, name="cp") as j:
                        b.store(b.load(gep(b, src, j)), gep(b, row, j))
                    fill(dst, b.add(a["PL"], w), iwp)
                with other:
                    fill(dst, i64(0), iwp)
        x_row = scratch
        out_plane = gep(b, a["out"], b.mul(plane, b.mul(oh_n, ow_n)))
        res_plane = gep(b, a["residual"], b.mul(plane, b.mul(oh_n, ow_n)))
        row_step = b.mul(sh, iwp)  # input elements between consecutive output rows
        bias_v = splat(b, bias_or_zero(b, has_bias, gep(b, a["bias"], c)), lanes)
        ow_slot = Slot(b, I64, i64(0), "ow")

        def tile(vectors: int, masked: bool) -> None:
            """ROWS output rows × ``vectors`` vectors of pixels, every tap accumulated in registers."""
            ow = ow_slot.get()
            x_tile = gep(b, x_row, b.mul(ow, sw))
            acc = [[Slot(b, vt, bias_v) for _ in range(vectors)] for _ in range(ROWS)]
            with for_range(b, 0, taps, name="tap") as t:
                wv = splat(b, b.load(gep(b, w_c, t)), lanes)
                base = gep(b, x_tile, b.load(gep(b, offsets, t)))
                for r in range(ROWS):
                    row = gep(b, base, b.mul(row_step, i64(r)))
                    for u in range(vectors):
                        pixels = load_pixels(gep(b, row, b.mul(sw, i64(u * lanes))))
                        acc[r][u].set(fma(b, pixels, wv, acc[r][u].get()))
            for r in range(ROWS):  # rows past OH were computed from zero padding: not stored
                with b.if_then(b.icmp_signed("<", b.add(oh0, i64(r)), oh_n)):
                    for u in range(vectors):
                        value = acc[r][u].get()
                        value = b.select(relu, nan_relu(b, value), value)
                        at = b.add(b.mul(b.add(oh0, i64(r)), ow_n), b.add(ow, i64(u * lanes)))
                        dst, res = gep(b, out_plane, at), gep(b, res_plane, at)
                        mask = None
                        if masked:
                            mask = b.icmp_signed("<", lane_ids, splat(b, b.sub(ow_n, ow), lanes))
                        with b.if_else(has_residual) as (add, plain):
                            with add:
                                if masked:
                                    skip = b.call(masked_load, [b.bitcast(res, vt.as_pointer()),
                                                                ir.Constant(I32, elem_bytes), mask, zero])
                                else:
                                    skip = load_vec(b, res, lanes)
                                store(b.fadd(value, skip), dst, mask)
                            with plain:
                                store(value, dst, mask)
            ow_slot.set(b.add(ow, i64(vectors * lanes)))

        with for_range(b, 0, b.sdiv(ow_n, i64(VECTORS * lanes)), name="tile"):
            tile(VECTORS, masked=False)
        with for_range(b, 0, b.sdiv(b.sub(ow_n, ow_slot.get()), i64(lanes)), name="vtile"):
            tile(1, masked=False)
        with b.if_then(b.icmp_signed("<", ow_slot.get(), ow_n)):
            tile(1, masked=True)
    b.ret_void()
    return str(module)


def _stride_class(sw: int) -> int:
    return sw if sw in (1, 2) else 0


def job_address(dtype: str, sw: int) -> int:
    """The address of the compiled job ``void conv_depthwise(i64* frame)`` for ``dtype`` and stride ``sw``."""
    s = _stride_class(sw)
    return native_library(("conv_depthwise", dtype, s), lambda: _build_ir(dtype, s)).address("conv_depthwise")


def _scratch_width(b: ir.IRBuilder, a: dict[str, ir.Value], sw: ir.Value, stride_w: int,
                   lanes: int) -> ir.Value:
    """Columns of the padded scratch rows: everything whole-vector loads may touch."""
    vectors = ceil_div(b, a["OW"], lanes)
    last = b.sub(b.mul(vectors, i64(lanes)), i64(1))  # last output pixel a (masked) vector covers
    if stride_w == 2:  # two loads from the tile's first input column, then an even-lane shuffle
        reach = b.add(b.mul(i64(2), b.sub(last, i64(lanes - 1))), i64(2 * lanes))
    else:
        reach = b.add(b.mul(last, sw), i64(1))
    reach = b.add(reach, b.mul(b.sub(a["KW"], i64(1)), a["DW"]))
    return max_i64(b, reach, b.add(b.add(a["PL"], a["W"]), a["PR"]))


def conv2d_depthwise(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, geo: ConvGeometry, *,
                     epilogue: Epilogue = NO_EPILOGUE, residual: np.ndarray | None = None) -> np.ndarray:
    """The depthwise convolution as [N, C, OH, OW] (x 4-D C-contiguous, weight's dtype)."""
    name = float_name(x.dtype)
    w = np.ascontiguousarray(weight)
    b = None if bias is None else np.ascontiguousarray(bias)
    out = output_array(geo, x.dtype)
    frame = FRAME.pack(
        x=ptr(x), w=ptr(w), bias=None if b is None else ptr(b), out=ptr(out),
        residual=None if residual is None else ptr(residual), N=geo.n, H=geo.h, W=geo.w, PT=geo.pad_top,
        PL=geo.pad_left, PR=geo.pad_right, OH=geo.oh, OW=geo.ow, KH=geo.kh, KW=geo.kw,
        SH=geo.sh, SW=geo.sw, DH=geo.dh, DW=geo.dw, C=geo.c_out, flags=epilogue.flags(b is not None))
    POOL.run(job_address(name, geo.sw), frame, flops=geo.flops * FLOPS_SCALE)
    return out


def is_depthwise(geo: ConvGeometry) -> bool:
    return geo.groups == geo.c_in == geo.c_out


def applies(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> bool:
    """groups == C_in == C_out (channel multiplier 1); any kernel size, stride, dilation and padding."""
    geo = conv_geometry(shapes, attrs)
    return geo is not None and is_depthwise(geo)


def make(attrs: Mapping[str, Any]) -> Kernel:
    """The variant's kernel: ``kernel(x, weight, bias=None)`` like the reference."""
    fallback = reference_conv2d(attrs)
    geometry = geometry_for(attrs)

    def kernel(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        geo = geometry(x.shape, weight.shape)
        if not native_operands(geo, x, weight, bias) or not is_depthwise(geo):
            return fallback(x, weight, bias)
        x4 = np.ascontiguousarray(x if geo.batched else x[None])
        return finish(geo, conv2d_depthwise(x4, weight, bias, geo))

    return kernel
