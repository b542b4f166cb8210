"""conv2d ``nchwc_direct``: direct convolution on output-channel blocks with an explicit-vector micro-kernel.

Why: with the small K (27–576) and N (16–64) of a ResNet's convolutions, im2col + BLAS spends its
time copying; ONNX Runtime's lead comes from direct NCHWc kernels. Here the weights are repacked
once into [groups][OC/8][C/groups][KH][KW][8] (8 = one AVX2 vector of float32; 4 for float64), and
the input and output are NCHW, or — in the conv chains of the interpreter and of the JIT — NCHWc
with a zero border (``conv2d_nchwc``'s borders, ``to_nchwc``). The micro-kernel keeps a register
tile of ``PIXELS`` output pixels × ``VECTORS`` output-channel vectors (6 × 2 × 8 float32 = 12
accumulators), and for every (input channel, tap) loads ``VECTORS`` weight vectors and broadcasts
one input value per pixel into FMAs. Taps are addressed through a per-call offset table (channel,
row, column → input offset), so one flat loop over C·KH·KW covers any kernel size and dilation. The
tile's epilogue (``conv_common.Epilogue``: bias, ReLU, a residual add, ReLU) runs while the tile is
stored (transposed back to NCHW rows, or vector by vector in NCHWc), so a ResNet block's conv + bias
+ skip + ReLU is one pass over the output.

A work item is (image, group, block of ``ROWS`` output rows), for every channel block of the
group. Padding costs no pass over the input: a padded conv reads an NCHWc input's border in place,
and otherwise first copies the input rows of its item into a zero-bordered scratch (per thread,
``scratch_bytes``), which then stays in cache for all the item's channel blocks. Items are taken in
chunks from an atomic counter, so one call runs on every core the pool lends it (``threads``). The
kernel is a job (``void conv_nchwc(i64* frame)``, fields ``FRAME``), compiled once per dtype,
width-stride class (1, 2 or any) and layout, every size a run-time value: the interpreter's variant
and the JIT's compiled regions call the same code, the JIT by address with the weights packed when
it lowers the region.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
from llvmlite import ir

from ..native.irhelpers import (
    FLOAT_TYPES,
    I8,
    I32,
    I64,
    LANES,
    Slot,
    ceil_div,
    const,
    fma,
    for_each_chunk,
    for_range,
    gep,
    i64,
    load_vec,
    max_i64,
    min_i64,
    nan_relu,
    splat,
    store_first,
    store_vec,
    transpose,
    vec,
)
from ..ops.registry import Kernel
from ..runtime import mempool
from .conv_common import (
    FLAG_BIAS,
    FLAG_RELU,
    FLAG_RELU_OUT,
    FLAG_RESIDUAL,
    NO_EPILOGUE,
    REST_TILES,
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
    residual_relu,
    whole_tiles,
)
from .native import Frame, float_name, native_library, ptr
from .packing import cached_pack
from .threads import POOL

PIXELS = 6  # output pixels per register tile
VECTORS = 2  # output-channel vectors per register tile
ROWS = 4  # output rows per work item
ITEMS = 16  # work items a call is split into at least, when its channels allow (both threads get work)
SLOT_ALIGN = 64
# The kernel's loops are tiled and its vectors written out already: LLVM's unroller and SLP vectoriser
# only made it 4x larger and 4x slower to compile, at equal speed (``docs/performance.md``, "NCHWc
# convolutions"; ``python -m bench ops_variants`` re-measures).
PIPELINE = {"opt_level": 2, "unroll": False, "slp": False}
FRAME = Frame(
    ("x", "w", "bias", "out", "residual", "scratch",
     "N", "C", "H", "W", "XR", "XP",  # input: sizes, then row and channel(-block) strides in pixels
     "OC", "OH", "OW", "OR", "OP", "OPAD",  # output: sizes, strides, width of the border it zeroes
     "RR", "RP",  # residual: strides
     "KH", "KW", "SH", "SW", "DH", "DW", "PT", "PL", "PB", "PR", "groups", "flags", "slot_bytes",
     "counter", "slots"),
    pointers=("x", "w", "bias", "out", "residual", "scratch"),
    zeroed=("counter", "slots"),
)
D = TypeVar("D")  # int, or a symbolic Dim (the JIT sizes scratch for bucket bounds)


def _build_ir(dtype: str, stride_w: int, blocked_in: bool, blocked_out: bool) -> str:
    """The kernel for ``dtype``; ``stride_w`` 1 or 2 is baked in (immediate offsets), 0 = run time.

    ``blocked_in``/``blocked_out``: x / out (and residual) are NCHWc — ``[N][C/lanes][rows][cols][lanes]``
    with the frame's strides, which may leave a border around the tensor (a padded layout: a conv
    reading it needs no padding of its own; a conv writing it zeroes ``OPAD`` pixels around its output).
    """
    ft, lanes = FLOAT_TYPES[dtype], LANES[dtype]
    vt = vec(ft, lanes)
    width = lanes * VECTORS  # output channels per tile
    xl = lanes if blocked_in else 1  # input elements per pixel of one channel (block)
    ol = lanes if blocked_out else 1  # output elements per pixel of one channel (block)
    module = ir.Module(f"conv_nchwc_{dtype}_s{stride_w}_{int(blocked_in)}{int(blocked_out)}")
    fp = ft.as_pointer()
    b, a = FRAME.define(module, "conv_nchwc", fp, noalias=FRAME.pointers)
    c_in, h, w, oc, oh_n, ow_n = (a[n] for n in ("C", "H", "W", "OC", "OH", "OW"))
    kh_n, kw_n, sh, dh, dw, groups = (a[n] for n in ("KH", "KW", "SH", "DH", "DW", "groups"))
    sw = i64(stride_w) if stride_w else a["SW"]
    cg, ocg = b.sdiv(c_in, groups), b.sdiv(oc, groups)

    def scaled(value: ir.Value, by: int) -> ir.Value:
        return b.mul(value, i64(by)) if by != 1 else value

    # Where the micro-kernel reads: the zero-bordered scratch rows of a padded conv, else x itself.
    padded = b.icmp_signed("!=", b.or_(b.or_(a["PT"], a["PB"]), b.or_(a["PL"], a["PR"])), i64(0))
    rows_in = b.add(b.mul(i64(ROWS - 1), sh), b.add(b.mul(b.sub(kh_n, i64(1)), dh), i64(1)))
    iws = b.add(b.add(a["PL"], w), a["PR"])
    row_len = scaled(b.select(padded, iws, a["XR"]), xl)  # elements from one input row to the next
    plane = scaled(b.select(padded, b.mul(rows_in, iws), a["XP"]), xl)  # ... from one channel (block) on

    # This thread's scratch slot: the offset of every (channel, tap) from a tile's first input, then rows.
    k_total = b.mul(b.mul(cg, kh_n), kw_n)
    slot = b.atomic_rmw("add", a["slots"], i64(1), "monotonic")
    mine = gep(b, b.bitcast(a["scratch"], I8.as_pointer()), b.mul(slot, a["slot_bytes"]))
    offsets = b.bitcast(mine, I64.as_pointer())
    rows = b.bitcast(gep(b, offsets, k_total), fp)
    with (for_range(b, 0, cg, name="oc_c") as c, for_range(b, 0, kh_n, name="oc_kh") as kh,
          for_range(b, 0, kw_n, name="oc_kw") as kw):
        k = b.add(b.mul(b.add(b.mul(c, kh_n), kh), kw_n), kw)
        channel = b.add(b.mul(b.sdiv(c, i64(xl)), plane), b.srem(c, i64(xl)))
        off = b.add(b.add(channel, b.mul(b.mul(kh, dh), row_len)), scaled(b.mul(kw, dw), xl))
        b.store(off, gep(b, offsets, k))

    tiles = ceil_div(b, ocg, width)
    block = b.mul(k_total, i64(lanes))  # elements per packed [C][KH][KW][lanes] block
    flags = a["flags"]
    has_bias = flag(b, flags, FLAG_BIAS)
    relu = flag(b, flags, FLAG_RELU)
    tail = _Tail(b, flag(b, flags, FLAG_RESIDUAL), flag(b, flags, FLAG_RELU_OUT), a["OP"], a["RP"], ol)

    # Work items: (image and group, block of ROWS output rows, group of channel tiles); a small conv's
    # tiles are split over items so that ITEMS of them keep every thread busy.
    row_blocks = ceil_div(b, oh_n, ROWS)
    blocks = b.mul(b.mul(a["N"], groups), row_blocks)
    some = max_i64(b, blocks, i64(1))
    splits = min_i64(b, tiles, ceil_div(b, ITEMS, some))
    per_split = ceil_div(b, tiles, splits)
    copied = Slot(b, I64, i64(-1), "copied")  # the row block whose input rows are in the scratch
    row_tiles = whole_tiles(b, ow_n, PIXELS)

    with (for_each_chunk(b, a["counter"], b.mul(blocks, splits), i64(1)) as (start, stop),
          for_range(b, start, stop, name="item") as item):
        part = b.srem(item, splits)
        blk = b.sdiv(item, splits)
        oh0 = b.mul(b.srem(blk, row_blocks), i64(ROWS))
        image = b.sdiv(blk, row_blocks)  # n·groups + g
        g = b.srem(image, groups)
        n = b.sdiv(image, groups)
        x_img = gep(b, a["x"], b.mul(b.add(b.mul(n, c_in), b.mul(g, cg)), a["XP"]))
        top = b.sub(b.mul(oh0, sh), a["PT"])  # input row of the block's first scratch row
        with b.if_then(b.and_(padded, b.icmp_signed("!=", copied.get(), blk))):
            _copy_rows(b, rows, x_img, b.sdiv(cg, i64(xl)), rows_in, top, h, scaled(w, xl),
                       scaled(a["XR"], xl), scaled(a["XP"], xl), scaled(iws, xl), plane, scaled(a["PL"], xl))
            copied.set(blk)
        src = b.select(padded, rows, gep(b, x_img, b.mul(top, scaled(a["XR"], xl))))
        block_rows = min_i64(b, i64(ROWS), b.sub(oh_n, oh0))
        first = b.mul(part, per_split)

        with for_range(b, first, min_i64(b, tiles, b.add(first, per_split)), name="tile") as t:
            gt = b.add(b.mul(g, tiles), t)  # tile index over all groups
            w_tile = gep(b, a["w"], b.mul(b.mul(gt, i64(VECTORS)), block))
            oc0 = b.add(b.mul(g, ocg), b.mul(t, i64(width)))
            valid = min_i64(b, b.sub(ocg, b.mul(t, i64(width))), i64(width))
            full = b.icmp_signed("==", valid, i64(width))
            bias_ptr = gep(b, a["bias"], b.mul(gt, i64(width)))
            init = [bias_or_zero(b, has_bias, gep(b, bias_ptr, v * lanes), lanes) for v in range(VECTORS)]
            first_channel = b.add(b.mul(n, oc), oc0)
            out_c = gep(b, a["out"], b.mul(first_channel, a["OP"]))
            res_c = gep(b, a["residual"], b.mul(first_channel, a["RP"]))
            with for_range(b, 0, block_rows, name="row") as r:
                x_row = gep(b, src, b.mul(b.mul(r, sh), row_len))
                oh = b.add(oh0, r)
                out_row = gep(b, out_c, scaled(b.mul(oh, a["OR"]), ol))
                res_row = gep(b, res_c, scaled(b.mul(oh, a["RR"]), ol))
                ow_slot = Slot(b, I64, i64(0), "ow")

                def tile(pixels: int) -> None:
                    ow = ow_slot.get()
                    x_tile = gep(b, x_row, scaled(b.mul(ow, sw), xl))
                    acc = [[Slot(b, vt, init[v]) for v in range(VECTORS)] for _ in range(pixels)]
                    with for_range(b, 0, k_total, name=f"k{pixels}") as k:
                        xk = gep(b, x_tile, b.load(gep(b, offsets, k)))
                        wk = gep(b, w_tile, b.mul(k, i64(lanes)))
                        wv = [load_vec(b, gep(b, wk, b.mul(block, i64(v))), lanes) for v in range(VECTORS)]
                        for p in range(pixels):
                            xb = splat(b, b.load(gep(b, xk, b.mul(sw, i64(p * xl)))), lanes)
                            for v in range(VECTORS):
                                acc[p][v].set(fma(b, xb, wv[v], acc[p][v].get()))
                    vals = [[acc[p][v].get() for v in range(VECTORS)] for p in range(pixels)]
                    vals = [[b.select(relu, nan_relu(b, x), x) for x in row] for row in vals]
                    at = scaled(ow, ol)
                    store = _store_blocked if blocked_out else _store_tile
                    store(b, vals, gep(b, out_row, at), gep(b, res_row, at), tail, full, valid, lanes)
                    ow_slot.set(b.add(ow, i64(pixels)))

                with for_range(b, 0, row_tiles, name="ptile"):
                    tile(PIXELS)
                for pixels in REST_TILES:  # the rest of the row
                    with b.if_then(b.icmp_signed(">=", b.sub(ow_n, ow_slot.get()), i64(pixels))):
                        tile(pixels)
            if blocked_out:
                _zero_border(b, a, out_c, valid, oh0, block_rows, lanes)
    b.ret_void()
    return str(module)


def _copy_rows(b: ir.IRBuilder, rows: ir.Value, x_img: ir.Value, planes: ir.Value, rows_in: ir.Value,
               top: ir.Value, h: ir.Value, length: ir.Value, src_row: ir.Value, src_plane: ir.Value,
               dst_row: ir.Value, dst_plane: ir.Value, left: ir.Value) -> None:
    """rows[p][r][left + j] = x[p][top + r][j] for j < length (elements), zero elsewhere: the padding.

    Whole vectors, then the rest of the row: the pointers come from the frame, so LLVM cannot prove
    that they do not overlap and would leave the copy scalar."""
    ft = rows.type.pointee
    zero = ir.Constant(ft, 0.0)
    lanes = LANES["float64" if ft == FLOAT_TYPES["float64"] else "float32"]

    def fill(dst: ir.Value, begin: ir.Value, end: ir.Value) -> None:
        with for_range(b, begin, end, name="z") as j:
            b.store(zero, gep(b, dst, j))

    with for_range(b, 0, planes, name="cp_c") as c, for_range(b, 0, rows_in, name="cp_r") as r:
        dst = gep(b, rows, b.add(b.mul(c, dst_plane), b.mul(r, dst_row)))
        ih = b.add(top, r)
        inside = b.and_(b.icmp_signed(">=", ih, i64(0)), b.icmp_signed("<", ih, h))
        with b.if_else(inside) as (then, other):
            with then:
                fill(dst, i64(0), left)
                src, row = gep(b, x_img, b.add(b.mul(c, src_plane), b.mul(ih, src_row))), gep(b, dst, left)
                whole = b.mul(b.sdiv(length, i64(lanes)), i64(lanes))
                with for_range(b, 0, whole, lanes, name="cpv") as j:
                    store_vec(b, load_vec(b, gep(b, src, j), lanes), gep(b, row, j))
                with for_range(b, whole, length, name="cp") as j:
                    b.store(b.load(gep(b, src, j)), gep(b, row, j))
                fill(dst, b.add(left, length), dst_row)
            with other:
                fill(dst, i64(0), dst_row)


def _zero_border(b: ir.IRBuilder, a: dict[str, ir.Value], out_c: ir.Value, valid: ir.Value, oh0: ir.Value,
                 block_rows: ir.Value, lanes: int) -> None:
    """Zero the OPAD-pixel border of an NCHWc output around this item's rows of a tile's channel blocks
    (the rows above the first row and below the last included): the padding its readers rely on."""
    pad, ow_n, oh_n, row = a["OPAD"], a["OW"], a["OH"], b.mul(a["OR"], i64(lanes))
    zero = const(vec(out_c.type.pointee, lanes), 0.0)

    def pixels(at: ir.Value, begin: ir.Value, end: ir.Value) -> None:
        with for_range(b, begin, end, name="zp") as j:
            store_vec(b, zero, gep(b, at, b.mul(j, i64(lanes))))

    def rows(begin: ir.Value, end: ir.Value, at: ir.Value) -> None:
        with for_range(b, begin, end, name="zr") as r:
            pixels(gep(b, at, b.mul(r, row)), b.sub(i64(0), pad), b.add(ow_n, pad))

    vectors = b.select(b.icmp_signed(">", pad, i64(0)), b.sdiv(valid, i64(lanes)), i64(0))
    with for_range(b, 0, vectors, name="zv") as v:
        at = gep(b, out_c, b.mul(b.mul(v, i64(lanes)), a["OP"]))
        with for_range(b, oh0, b.add(oh0, block_rows), name="zo") as oh:
            line = gep(b, at, b.mul(oh, row))
            pixels(line, b.sub(i64(0), pad), i64(0))
            pixels(line, ow_n, b.add(ow_n, pad))
        with b.if_then(b.icmp_signed("==", oh0, i64(0))):
            rows(b.sub(i64(0), pad), i64(0), at)
        with b.if_then(b.icmp_signed("==", b.add(oh0, block_rows), oh_n)):
            rows(oh_n, b.add(oh_n, pad), at)


class _Tail:
    """The epilogue after the (bias, ReLU) of the accumulators: + residual, then ReLU, at store time;
    and where the channels (blocks) of the output and the residual are (``OP``/``RP`` · ``ol``)."""

    def __init__(self, b: ir.IRBuilder, residual: ir.Value, relu_out: ir.Value, out_plane: ir.Value,
                 res_plane: ir.Value, ol: int) -> None:
        self.b, self.residual, self.relu_out = b, residual, relu_out
        self.out_plane, self.res_plane, self.ol = out_plane, res_plane, ol

    def apply(self, value: ir.Value, res: ir.Value | None) -> ir.Value:
        return residual_relu(self.b, value, res, self.relu_out)

    def at(self, channel: ir.Value | int, pixel: int) -> tuple[ir.Value, ir.Value]:
        """Offsets of (channel, pixel) of the tile in the output and in the residual (channel: the first
        of its block when blocked)."""
        b = self.b
        channel = i64(channel) if isinstance(channel, int) else channel
        pixel = i64(pixel * self.ol)
        return b.add(b.mul(channel, self.out_plane), pixel), b.add(b.mul(channel, self.res_plane), pixel)


def _load_first(b: ir.IRBuilder, ptr: ir.Value, count: int, vt: ir.VectorType) -> ir.Value:
    """The first ``count`` lanes of a ``vt`` vector loaded from ``ptr`` (power-of-two pieces; no
    element past ``ptr + count`` is read); the other lanes are undefined."""
    value, offset = ir.Constant(vt, ir.Undefined), 0
    while offset < count:
        size = 1 << ((count - offset).bit_length() - 1)
        if size == 1:
            value = b.insert_element(value, b.load(gep(b, ptr, offset)), i64(offset))
        else:
            part = load_vec(b, gep(b, ptr, offset), size)
            widen = [*range(size), *[size] * (vt.count - size)]
            wide = b.shuffle_vector(part, ir.Constant(part.type, ir.Undefined),
                                    ir.Constant(vec(I32, vt.count), widen))
            keep = [vt.count + i - offset if offset <= i < offset + size else i for i in range(vt.count)]
            value = b.shuffle_vector(value, wide, ir.Constant(vec(I32, vt.count), keep))
        offset += size
    return value


def _store_tile(b: ir.IRBuilder, vals: list[list[ir.Value]], out_tile: ir.Value, res_tile: ir.Value,
                tail: _Tail, full: ir.Value, valid: ir.Value, lanes: int) -> None:
    """Write a [pixels][vectors] tile of channel vectors to NCHW (channel c at out_tile + c·OP)."""
    vt = vals[0][0].type
    with b.if_else(full) as (then, other):
        with then:  # transpose [pixels][channels] into [channels][pixels]: whole-row stores
            for v in range(len(vals[0])):
                for p0 in range(0, len(vals), lanes):
                    group = [row[v] for row in vals[p0:p0 + lanes]]
                    for j, channel in enumerate(transpose(b, group)):
                        at, res_at = tail.at(v * lanes + j, p0)
                        with b.if_else(tail.residual) as (add, plain):
                            with add:
                                res = _load_first(b, gep(b, res_tile, res_at), len(group), vt)
                                store_first(b, tail.apply(channel, res), len(group), gep(b, out_tile, at))
                            with plain:
                                store_first(b, tail.apply(channel, None), len(group), gep(b, out_tile, at))
        # A partial channel block at the end of a group.
        with other, for_range(b, 0, valid, name="ch") as c:
            v_idx = b.sdiv(c, i64(lanes))
            lane = b.srem(c, i64(lanes))
            for p, row in enumerate(vals):
                value = row[0]
                for v in range(1, len(row)):
                    value = b.select(b.icmp_signed("==", v_idx, i64(v)), row[v], value)
                at, res_at = tail.at(c, p)
                scalar = b.extract_element(value, lane)
                with b.if_else(tail.residual) as (add, plain):
                    with add:
                        b.store(tail.apply(scalar, b.load(gep(b, res_tile, res_at))), gep(b, out_tile, at))
                    with plain:
                        b.store(tail.apply(scalar, None), gep(b, out_tile, at))


def _store_blocked(b: ir.IRBuilder, vals: list[list[ir.Value]], out_tile: ir.Value, res_tile: ir.Value,
                   tail: _Tail, full: ir.Value, valid: ir.Value, lanes: int) -> None:
    """Write a [pixels][vectors] tile of channel vectors to NCHWc: every vector is one store (the channel
    blocks of a group are whole, so a tile's vectors are either stored or past the group's end)."""
    for v in range(len(vals[0])):
        with b.if_then(b.icmp_signed(">", valid, i64(v * lanes))), b.if_else(tail.residual) as (add, plain):
            for with_residual, branch in ((True, add), (False, plain)):
                with branch:
                    for p, row in enumerate(vals):
                        at, res_at = tail.at(v * lanes, p)
                        res = load_vec(b, gep(b, res_tile, res_at), lanes) if with_residual else None
                        store_vec(b, tail.apply(row[v], res), gep(b, out_tile, at))


def _stride_class(sw: int) -> int:
    return sw if sw in (1, 2) else 0


def job_address(dtype: str, sw: int, blocked_in: bool = False, blocked_out: bool = False) -> int:
    """The address of the compiled job ``void conv_nchwc(i64* frame)`` for ``dtype``, stride ``sw`` and the
    layouts of x and out (NCHW, or NCHWc when blocked)."""
    s = _stride_class(sw)
    key = ("conv_nchwc", dtype, s, blocked_in, blocked_out)
    build = functools.partial(_build_ir, dtype, s, blocked_in, blocked_out)
    return native_library(key, build, PIPELINE).address("conv_nchwc")


def scratch_bytes(c_group: D, w: D, kh: int, kw: int, sh: int, dh: int, pads: Sequence[int],
                  itemsize: int) -> D:
    """Bytes of one thread's scratch: the offset table, then (padded convs) the input rows of ROWS output
    rows; a multiple of ``SLOT_ALIGN``. ``pads`` is (top, bottom, left, right)."""
    size = c_group * (kh * kw * 8)
    if any(pads):
        rows_in = (ROWS - 1) * sh + (kh - 1) * dh + 1
        size = size + c_group * ((w + (pads[2] + pads[3])) * (rows_in * itemsize))
    return (size + (SLOT_ALIGN - 1)) // SLOT_ALIGN * SLOT_ALIGN


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


def packed(weight: np.ndarray, bias: np.ndarray | None, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Packed weights and padded bias (cached for constants; the caller keeps them alive while in use)."""
    return cached_pack(f"nchwc/g{groups}", weight, bias, lambda: pack_weights(weight, groups, bias))


def bordered(h: D, w: D, border: int | None, lanes: int, top: int = 0, left: int = 0
             ) -> tuple[D, D, D | int]:
    """(row stride and channel(-block) stride, in pixels, and the element offset of pixel (−top, −left))
    of an h × w image: dense NCHW (``border`` None), or NCHWc with a zero border of ``border`` pixels."""
    if border is None:
        return w, h * w, 0
    rows = w + 2 * border
    return rows, (h + 2 * border) * rows, ((border - top) * rows + (border - left)) * lanes


def to_nchwc(x: np.ndarray, border: int) -> np.ndarray:
    """NCHW [N, C, H, W] (C a multiple of the lanes) as NCHWc [N, C/lanes, H+2b, W+2b, lanes], zero border."""
    lanes = LANES[float_name(x.dtype)]
    n, c, h, w = x.shape
    out = np.zeros((n, c // lanes, h + 2 * border, w + 2 * border, lanes), x.dtype)
    blocks = x.reshape(n, c // lanes, lanes, h, w).transpose(0, 1, 3, 4, 2)
    out[:, :, border:border + h, border:border + w] = blocks
    return out


def from_nchwc(x: np.ndarray, border: int) -> np.ndarray:
    """The NCHW tensor inside an NCHWc one with a border of ``border`` pixels (``to_nchwc``'s inverse)."""
    n, blocks, rows, cols, lanes = x.shape
    inner = x[:, :, border:rows - border, border:cols - border]
    return np.ascontiguousarray(inner.transpose(0, 1, 4, 2, 3)).reshape(n, blocks * lanes, rows - 2 * border,
                                                                        cols - 2 * border)


def conv2d_nchwc(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, geo: ConvGeometry, *,
                 epilogue: Epilogue = NO_EPILOGUE, residual: np.ndarray | None = None,
                 x_border: int | None = None, res_border: int | None = None,
                 out_border: int | None = None) -> np.ndarray:
    """The convolution (``geo``: its NCHW geometry) as [N, C_out, OH, OW], or as NCHWc with a zero border
    of ``out_border`` pixels. x (4-D) and the residual are C-contiguous NCHW, or NCHWc with a border of
    ``x_border`` / ``res_border`` pixels (at least the conv's padding, for x); a residual is in the
    output's layout. The NCHWc layouts are those of the interpreter's and the JIT's conv chains.

    Packed weights are cached for read-only (constant) weight arrays.
    """
    w_p, b_p = packed(weight, bias, geo.groups)  # these references keep the packed arrays alive
    name = float_name(x.dtype)
    lanes, size = LANES[name], x.itemsize
    h, w = geo.h, geo.w
    pads = (geo.pad_top, geo.pad_bottom, geo.pad_left, geo.pad_right)
    x_rows, x_plane, x_at = bordered(h, w, x_border, lanes, geo.pad_top, geo.pad_left)
    if x_border is not None:  # the border is the padding: it reads a larger input, unpadded
        h, w, pads = h + pads[0] + pads[1], w + pads[2] + pads[3], (0, 0, 0, 0)
    if out_border is None:
        out = output_array(geo, x.dtype)
    else:
        rim = 2 * out_border
        out = mempool.kernel_empty((geo.n, geo.c_out // lanes, geo.oh + rim, geo.ow + rim, lanes), x.dtype)
    out_rows, out_plane, out_at = bordered(geo.oh, geo.ow, out_border, lanes)
    res_rows, res_plane, res_at = bordered(geo.oh, geo.ow, res_border, lanes)
    slot = scratch_bytes(geo.c_group, w, geo.kh, geo.kw, geo.sh, geo.dh, pads, size)
    scratch = np.empty(slot * POOL.threads, np.uint8)
    frame = FRAME.pack(
        x=ptr(x) + x_at * size, w=ptr(w_p), bias=ptr(b_p), out=ptr(out) + out_at * size, scratch=ptr(scratch),
        residual=None if residual is None else ptr(residual) + res_at * size, N=geo.n, C=geo.c_in, H=h, W=w,
        XR=x_rows, XP=x_plane, OC=geo.c_out, OH=geo.oh, OW=geo.ow, OR=out_rows, OP=out_plane,
        OPAD=out_border or 0, RR=res_rows, RP=res_plane, KH=geo.kh, KW=geo.kw, SH=geo.sh, SW=geo.sw,
        DH=geo.dh, DW=geo.dw, PT=pads[0], PL=pads[2], PB=pads[1], PR=pads[3], groups=geo.groups,
        flags=epilogue.flags(bias is not None), slot_bytes=slot)
    POOL.run(job_address(name, geo.sw, x_border is not None, out_border is not None), frame, flops=geo.flops)
    return out


def workspace(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any], itemsize: int) -> int:
    """Bytes a call allocates besides its output: the packed weights and bias (whole tiles of output
    channels) and every thread's scratch."""
    geo = conv_geometry(shapes, attrs)
    if geo is None:
        return 0
    lanes = LANES["float32" if itemsize == 4 else "float64"]
    channels = geo.groups * -(-geo.oc_group // (lanes * VECTORS)) * lanes * VECTORS
    packed = channels * (geo.c_group * geo.kh * geo.kw + 1) * itemsize
    pads = (geo.pad_top, geo.pad_bottom, geo.pad_left, geo.pad_right)
    slot = scratch_bytes(geo.c_group, geo.w, geo.kh, geo.kw, geo.sh, geo.dh, pads, itemsize)
    return packed + slot * POOL.threads


def applies(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> bool:
    """Any stride/dilation/padding; groups allowed while each group has ≥ 8 output channels."""
    geo = conv_geometry(shapes, attrs)
    return geo is not None and geo.oc_group >= 8


def nchw_shape(x: np.ndarray, border: int | None) -> tuple[int, ...]:
    """The NCHW shape of ``x``: its own, or that of the tensor inside an NCHWc one with that border."""
    if border is None:
        return x.shape
    n, blocks, rows, cols, lanes = x.shape
    return n, blocks * lanes, rows - 2 * border, cols - 2 * border


def make(attrs: Mapping[str, Any]) -> Kernel:
    """The variant's kernel: ``kernel(x, weight, bias=None)`` like the reference, and as its attributes
    ``with_epilogue`` the same with a residual add and a ReLU after it (the interpreter's fusion), and
    ``with_layouts`` (the same function) taking NCHWc operands too (the interpreter's conv chains)."""
    fallback = reference_conv2d(attrs)
    geometry = geometry_for(attrs)

    def with_epilogue(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None, *,
                      residual: np.ndarray | None = None, relu: bool = False, x_border: int | None = None,
                      res_border: int | None = None, out_border: int | None = None) -> np.ndarray | None:
        """``relu(conv + residual)`` (each optional) computed natively, or None where the native kernel
        does not take these operands (a residual must have the output's shape, dtype and layout). x and
        the residual are NCHWc with a border of ``x_border``/``res_border`` pixels when given, the output
        when ``out_border`` is: then x is batched, groups 1 and the NCHWc channels whole blocks."""
        geo = geometry(nchw_shape(x, x_border), weight.shape)
        if not native_operands(geo, x, weight, bias) or geo.oc_group < 8:
            return None
        if (x_border, res_border, out_border) != (None, None, None):
            lanes = LANES[float_name(x.dtype)]
            pads = max(geo.pad_top, geo.pad_bottom, geo.pad_left, geo.pad_right)
            unfit_x = x_border is not None and (geo.c_in % lanes or pads > x_border)
            unfit_out = out_border is not None and geo.c_out % lanes
            if not geo.batched or geo.groups != 1 or unfit_x or unfit_out:
                return None
        if residual is not None:
            shape = (geo.n, geo.c_out, geo.oh, geo.ow)
            if residual.dtype != x.dtype or (res_border is None) != (out_border is None) \
                    or nchw_shape(residual, res_border) != (shape if geo.batched else shape[1:]):
                return None
            residual = np.ascontiguousarray(residual)
            residual = residual if res_border is not None else residual.reshape(shape)
        x4 = np.ascontiguousarray(x if geo.batched else x[None])
        epilogue = Epilogue(residual=residual is not None, relu_out=relu)
        return finish(geo, conv2d_nchwc(x4, weight, bias, geo, epilogue=epilogue, residual=residual,
                                        x_border=x_border, res_border=res_border, out_border=out_border))

    def kernel(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        out = with_epilogue(x, weight, bias)
        return fallback(x, weight, bias) if out is None else out

    kernel.with_epilogue = with_epilogue  # type: ignore[attr-defined]
    kernel.with_layouts = with_epilogue  # type: ignore[attr-defined]
    return kernel
