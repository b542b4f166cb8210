"""GEMMs on the job pool: ``out = epilogue(x @ B + bias)`` with B in panels, for constant weights packed once.

Why not BLAS: a model's linear layers multiply by the same constant weight on every call, and OpenBLAS
repacks it on every call and zero-fills C for beta = 0, so at a transformer layer's sizes this kernel is
faster. And OpenBLAS's threads spin after each call: a region that runs some GEMMs on our pool and some
on OpenBLAS has the two fighting over the cores (``docs/performance.md``, "Packed GEMMs"; ``python -m
bench ops_variants`` re-measures). So a compiled region runs its GEMMs here, on one pool, whenever their
B is small enough to pack (``msvm.msjit.codegen``).

B (K × N) is read in *panels* of ``width`` = ``VECTORS`` vectors of output columns, laid out
``[K][width]`` (zero-padded past N): a constant weight is packed once into all its panels
(``pack_weights``: ``[N/width][K][width]``); any other B is packed one panel at a time into the
calling thread's scratch, from either layout a region hands over — ``B[k][n]`` rows (``KN``, a
plain matmul operand) or ``B[n][k]`` rows (``NK``: a linear layer's weight, attention's Kᵀ).
A register tile of ``ROWS`` rows × ``VECTORS`` vectors (6 × 2 × 8 float32 = 12 accumulators)
broadcasts one x value per row and k into FMAs with the panel's vectors — the ``nchwc`` conv's
micro-kernel as a GEMM; x is read where it lies (rows ``LDX`` apart), never copied. The
accumulators start at the bias; the epilogue (``conv_common.Epilogue``: ReLU, + residual, ReLU)
runs on the registers before the one store of each tile.

A work item is (matrix of the batch, block of ``BLOCK`` rows, range of panels): the block's rows stay
in cache while the panels stream through it. A B that does not fit in L2, or that is packed a panel
at a time, takes few blocks instead, of up to ``MAX_BLOCK`` rows: it streams from memory, or is
packed, once per block (W2's weights; attention's keys and values).
Items are taken in chunks from an atomic counter, so a call runs on every core the pool lends it.
The job ``void gemm_packed(i64* frame)`` is compiled once per dtype with every size and stride a
run-time value.
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
    I64,
    LANES,
    Slot,
    ceil_div,
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
    store_vec,
    transpose,
    vec,
)
from ..ops.registry import Kernel, get_op
from ..runtime import mempool
from .conv_common import (
    FLAG_BIAS,
    FLAG_RELU,
    FLAG_RELU_OUT,
    FLAG_RESIDUAL,
    NO_EPILOGUE,
    REST_TILES,
    Epilogue,
    bias_or_zero,
    flag,
    residual_relu,
    whole_tiles,
)
from .matmul import linear_mnk
from .native import Frame, float_name, native_library, ptr
from .packing import MAX_BYTES, cached_pack, is_constant
from .threads import POOL

ROWS = 6  # rows of a register tile
VECTORS = 2  # output-column vectors of a register tile (a panel is this many vectors wide)
BLOCK = 8 * ROWS  # rows of a work item
# A B larger than this does not stay in L2, and each block of rows would stream it from memory again:
# such a B is multiplied by M split into equal blocks of at most MAX_BLOCK rows, faster than by blocks of
# BLOCK rows, and more so on a machine whose memory is busy; so is a B packed a panel at a time, which
# each block packs again (``docs/performance.md``, "Packed GEMMs").
BIG_B_BYTES = 1 << 20
MAX_BLOCK = 256
UNROLL_K = 4  # k steps per loop trip: its address arithmetic is paid once for four
ITEMS = 16  # work items a call is split into at least, when its panels allow (both threads get work)
DTYPES = tuple(LANES)  # float32, float64
PACKED, KN, NK = 0, 1, 2  # how B is given (``BMODE``): packed panels, B[k][n] rows, B[n][k] rows
SLOT_ALIGN = 64
# A constant weight larger than this is packed a panel at a time, like any other: a few of them would
# not fit the packing cache together and each call would pack them all again.
PACK_ONCE_MAX_BYTES = MAX_BYTES // 8
# As for the conv kernels: the loops are tiled and the vectors written out, so LLVM's unroller and
# SLP vectoriser would only make the code larger and slower to compile.
PIPELINE = {"opt_level": 2, "unroll": False, "slp": False}
FRAME = Frame(
    ("x", "w", "bias", "out", "residual", "scratch",
     "M", "N", "K", "LDX", "LDO", "LDR",  # sizes; row strides of x, out, residual
     "BMODE", "LDW",  # how B is laid out (PACKED, KN, NK) and its row stride
     "BATCH", "SX", "SW", "SO", "SR",  # matrices, and the strides from one to the next
     "flags", "slot_bytes", "counter", "slots"),
    pointers=("x", "w", "bias", "out", "residual", "scratch"),
    zeroed=("counter", "slots"),
)
D = TypeVar("D")  # int, or a symbolic Dim (the JIT sizes scratch for bucket bounds)


def width_of(dtype: str) -> int:
    """Output columns per panel."""
    return LANES[dtype] * VECTORS


def _build_ir(dtype: str) -> str:
    ft, lanes, itemsize = FLOAT_TYPES[dtype], LANES[dtype], np.dtype(dtype).itemsize
    vt = vec(ft, lanes)
    width = lanes * VECTORS
    module = ir.Module(f"gemm_packed_{dtype}")
    b, a = FRAME.define(module, "gemm_packed", ft.as_pointer(), noalias=FRAME.pointers)
    m_n, n_n, k_n, ldx, ldo, ldr = (a[n] for n in ("M", "N", "K", "LDX", "LDO", "LDR"))
    flags = a["flags"]
    has_bias, relu = flag(b, flags, FLAG_BIAS), flag(b, flags, FLAG_RELU)
    residual, relu_out = flag(b, flags, FLAG_RESIDUAL), flag(b, flags, FLAG_RELU_OUT)

    panels = ceil_div(b, n_n, width)
    panel_elems = b.mul(k_n, i64(width))
    packed = b.icmp_signed("==", a["BMODE"], i64(PACKED))
    big_b = b.icmp_signed(">", b.mul(panel_elems, panels), i64(BIG_B_BYTES // itemsize))
    # Few row blocks (B read or packed once per block): M in equal blocks of at most MAX_BLOCK rows, but
    # enough of them for ITEMS items with the batch's panels, and none under ROWS rows.
    batch_panels = max_i64(b, b.mul(a["BATCH"], panels), i64(1))
    few = max_i64(b, ceil_div(b, m_n, MAX_BLOCK), ceil_div(b, ITEMS, batch_panels))
    few = max_i64(b, min_i64(b, few, ceil_div(b, m_n, ROWS)), i64(1))
    big = max_i64(b, b.mul(ceil_div(b, ceil_div(b, m_n, few), ROWS), i64(ROWS)), i64(ROWS))
    block = b.select(b.or_(big_b, b.not_(packed)), big, i64(BLOCK))
    blocks = ceil_div(b, m_n, block)
    matrices_blocks = max_i64(b, b.mul(a["BATCH"], blocks), i64(1))  # panels are split only for ITEMS
    splits = max_i64(b, min_i64(b, panels, ceil_div(b, ITEMS, matrices_blocks)), i64(1))
    per_split = ceil_div(b, panels, splits)
    per_matrix = b.mul(blocks, splits)
    slot = b.atomic_rmw("add", a["slots"], i64(1), "monotonic")
    mine = gep(b, b.bitcast(a["scratch"], I8.as_pointer()), b.mul(slot, a["slot_bytes"]))
    mine = b.bitcast(mine, ft.as_pointer())  # this thread's panel of B, when B is not packed

    with (for_each_chunk(b, a["counter"], b.mul(a["BATCH"], per_matrix), i64(1)) as (start, stop),
          for_range(b, start, stop, name="item") as item):
        matrix, rest = b.sdiv(item, per_matrix), b.srem(item, per_matrix)
        x_m, w_m = gep(b, a["x"], b.mul(matrix, a["SX"])), gep(b, a["w"], b.mul(matrix, a["SW"]))
        out_m, res_m = gep(b, a["out"], b.mul(matrix, a["SO"])), gep(b, a["residual"], b.mul(matrix, a["SR"]))
        m0 = b.mul(b.sdiv(rest, splits), block)
        m_end = min_i64(b, m_n, b.add(m0, block))
        first = b.mul(b.srem(rest, splits), per_split)
        with for_range(b, first, min_i64(b, panels, b.add(first, per_split)), name="panel") as p:
            n0 = b.mul(p, i64(width))
            valid = min_i64(b, b.sub(n_n, n0), i64(width))
            with b.if_then(b.not_(packed)):
                _pack_panel(b, mine, w_m, a["BMODE"], a["LDW"], n0, valid, k_n, width)
            w_panel = b.select(packed, gep(b, w_m, b.mul(p, panel_elems)), mine)
            bias_at = gep(b, a["bias"], n0)
            init = [bias_or_zero(b, has_bias, gep(b, bias_at, v * lanes), lanes) for v in range(VECTORS)]
            row = Slot(b, I64, m0, "row")

            def tile(rows: int) -> None:
                r0 = row.get()
                x_tile = gep(b, x_m, b.mul(r0, ldx))
                acc = [[Slot(b, vt, init[v]) for v in range(VECTORS)] for _ in range(rows)]

                def step(k: ir.Value) -> None:
                    wk = gep(b, w_panel, b.mul(k, i64(width)))
                    wv = [load_vec(b, gep(b, wk, v * lanes), lanes) for v in range(VECTORS)]
                    for r in range(rows):
                        xb = splat(b, b.load(gep(b, x_tile, b.add(b.mul(ldx, i64(r)), k))), lanes)
                        for v in range(VECTORS):
                            acc[r][v].set(fma(b, xb, wv[v], acc[r][v].get()))

                whole = b.mul(b.sdiv(k_n, i64(UNROLL_K)), i64(UNROLL_K))
                with for_range(b, 0, whole, UNROLL_K, name=f"k{rows}") as k:
                    for u in range(UNROLL_K):
                        step(b.add(k, i64(u)))
                with for_range(b, whole, k_n, name=f"kr{rows}") as k:
                    step(k)
                for r in range(rows):
                    vals = [acc[r][v].get() for v in range(VECTORS)]
                    vals = [b.select(relu, nan_relu(b, value), value) for value in vals]
                    at_row = b.add(r0, i64(r))
                    out_at = gep(b, out_m, b.add(b.mul(at_row, ldo), n0))
                    res_at = gep(b, res_m, b.add(b.mul(at_row, ldr), n0))
                    _store_row(b, vals, out_at, res_at, residual, relu_out, valid)
                row.set(b.add(r0, i64(rows)))

            with for_range(b, 0, whole_tiles(b, b.sub(m_end, m0), ROWS), name="rtile"):
                tile(ROWS)
            for rows in REST_TILES:  # the rest of the block
                with b.if_then(b.icmp_signed(">=", b.sub(m_end, row.get()), i64(rows))):
                    tile(rows)
    b.ret_void()
    return str(module)


def _pack_panel(b: ir.IRBuilder, dst: ir.Value, w: ir.Value, mode: ir.Value, ldw: ir.Value, n0: ir.Value,
                valid: ir.Value, k_n: ir.Value, width: int) -> None:
    """dst[k][j] = B[k][n0 + j] for j < ``valid``, 0 past it: one panel, read along B's rows. B[n][k] rows
    are transposed a lanes × lanes tile at a time where whole (a gather of scalars cost a third of the
    FMAs' time on attention's Kᵀ)."""
    ft = dst.type.pointee
    zero = ir.Constant(ft, 0.0)
    lanes = LANES["float64" if ft == FLOAT_TYPES["float64"] else "float32"]

    def scalars(j0: ir.Value | int, j1: ir.Value, k0: ir.Value | int) -> None:
        with for_range(b, j0, j1, name="pn") as j:
            src = gep(b, w, b.mul(b.add(n0, j), ldw))
            with for_range(b, k0, k_n, name="pnk") as k:
                b.store(b.load(gep(b, src, k)), gep(b, dst, b.add(b.mul(k, i64(width)), j)))

    with b.if_else(b.icmp_signed("==", mode, i64(KN))) as (kn, nk):
        with kn, for_range(b, 0, k_n, name="pk") as k:
            src, row = gep(b, w, b.add(b.mul(k, ldw), n0)), gep(b, dst, b.mul(k, i64(width)))
            with for_range(b, 0, valid, name="pkj") as j:
                b.store(b.load(gep(b, src, j)), gep(b, row, j))
        with nk:
            whole_k = b.mul(b.sdiv(k_n, i64(lanes)), i64(lanes))
            for v in range(VECTORS):
                j0 = v * lanes
                with b.if_else(b.icmp_signed(">=", valid, i64(j0 + lanes))) as (tiles, rest):
                    with tiles:
                        rows = [gep(b, w, b.mul(b.add(n0, i64(j0 + i)), ldw)) for i in range(lanes)]
                        with for_range(b, 0, whole_k, lanes, name="pt") as k:
                            cols = transpose(b, [load_vec(b, gep(b, r, k), lanes) for r in rows])
                            at = gep(b, dst, b.add(b.mul(k, i64(width)), i64(j0)))
                            for i, col in enumerate(cols):
                                store_vec(b, col, gep(b, at, i * width))
                        scalars(j0, i64(j0 + lanes), whole_k)
                    with rest:
                        scalars(j0, min_i64(b, valid, i64(j0 + lanes)), 0)
    with for_range(b, valid, i64(width), name="pz") as j, for_range(b, 0, k_n, name="pzk") as k:
        b.store(zero, gep(b, dst, b.add(b.mul(k, i64(width)), j)))


def _store_row(b: ir.IRBuilder, vals: list[ir.Value], out: ir.Value, res: ir.Value, residual: ir.Value,
               relu_out: ir.Value, valid: ir.Value) -> None:
    """Write one row of a tile (``valid`` of its ``VECTORS`` · lanes columns exist): + residual, ReLU."""
    lanes = vals[0].type.count
    for v, value in enumerate(vals):
        whole = b.icmp_signed(">=", valid, i64((v + 1) * lanes))
        with b.if_else(whole) as (then, other):
            with then, b.if_else(residual) as (add, plain):
                with add:
                    r = load_vec(b, gep(b, res, v * lanes), lanes)
                    store_vec(b, residual_relu(b, value, r, relu_out), gep(b, out, v * lanes))
                with plain:
                    store_vec(b, residual_relu(b, value, None, relu_out), gep(b, out, v * lanes))
            with other, for_range(b, v * lanes, valid, name="tail") as c:  # the last panel's columns
                scalar = b.extract_element(value, b.sub(c, i64(v * lanes)))
                with b.if_else(residual) as (add, plain):
                    with add:
                        b.store(residual_relu(b, scalar, b.load(gep(b, res, c)), relu_out), gep(b, out, c))
                    with plain:
                        b.store(residual_relu(b, scalar, None, relu_out), gep(b, out, c))


def job_address(dtype: str) -> int:
    """The address of the compiled job ``void gemm_packed(i64* frame)`` for ``dtype``."""
    build = functools.partial(_build_ir, dtype)
    return native_library(("gemm_packed", dtype), build, PIPELINE).address("gemm_packed")


def scratch_bytes(k: D, dtype: str) -> D:
    """Bytes of one thread's scratch: one panel of B, rounded up to whole ``SLOT_ALIGN``s (never none)."""
    size = k * (width_of(dtype) * np.dtype(dtype).itemsize)
    return (size + SLOT_ALIGN) // SLOT_ALIGN * SLOT_ALIGN


def pack_weights(weight: np.ndarray, bias: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(weight [N, K] as panels [N/width][K][width], bias padded to whole panels; zeros in the padding)."""
    width = width_of(float_name(weight.dtype))
    n, k = weight.shape
    panels = -(-n // width)
    wp = np.zeros((panels * width, k), weight.dtype)
    wp[:n] = weight
    packed = np.ascontiguousarray(wp.reshape(panels, width, k).transpose(0, 2, 1))
    bp = np.zeros(panels * width, weight.dtype)
    if bias is not None:
        bp[:n] = bias
    return packed, bp


def packed(weight: np.ndarray, bias: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Packed weight and padded bias (cached for constants; the caller keeps them alive while in use)."""
    return cached_pack("gemm", weight, bias, lambda: pack_weights(weight, bias))


def linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, *, pack: bool = True,
           epilogue: Epilogue = NO_EPILOGUE, residual: np.ndarray | None = None) -> np.ndarray:
    """``epilogue(x @ weight.T + bias)`` as [..., N] by the job: x C-contiguous, of weight's dtype; the
    weight [N, K] packed once (``pack``) or per panel from its rows (NK); bias 1-D [N] or None; a
    residual C-contiguous, of the output's shape."""
    name = float_name(x.dtype)
    n, k = weight.shape
    m = x.size // k if k else int(np.prod(x.shape[:-1]))
    out = mempool.kernel_empty((*x.shape[:-1], n), x.dtype)
    if out.size == 0:
        return out
    if pack:
        w_p, b_p = packed(weight, bias)  # these references keep the packed arrays alive
        mode, ldw = PACKED, 0
    else:
        w_p = np.ascontiguousarray(weight)
        b_p = None if bias is None else np.concatenate([bias, np.zeros(width_of(name), bias.dtype)])
        mode, ldw = NK, k
    _run(name, k, 2.0 * m * n * k, per_panel=not pack, x=ptr(x) if x.size else None,
         w=ptr(w_p) if w_p.size else None, out=ptr(out), bias=None if b_p is None else ptr(b_p),
         residual=None if residual is None else ptr(residual), M=m, N=n, K=k, LDX=k, LDO=n, LDR=n, BMODE=mode,
         LDW=ldw, BATCH=1, flags=epilogue.flags(bias is not None))
    return out


def _run(dtype: str, k: int, flops: float, *, per_panel: bool, **fields: int | None) -> None:
    """Run the job on a frame of ``fields``, with a panel of scratch per thread when B is not packed."""
    slot = scratch_bytes(k, dtype) if per_panel else 0
    scratch = np.empty(slot * POOL.threads, np.uint8)
    frame = FRAME.pack(scratch=ptr(scratch) if slot else None, slot_bytes=slot, **fields)
    POOL.run(job_address(dtype), frame, flops=flops)


def _matrices(arr: np.ndarray) -> tuple[np.ndarray, int, int]:
    """(arr as [matrices, rows, cols] with unit-stride rows — a view when its strides allow, else a
    copy —, element stride between matrices, row stride)."""
    rows, cols = arr.shape[-2:]
    three = arr.reshape(-1, rows, cols)
    item = arr.itemsize
    if not (three.strides[2] == item or cols == 1) or any(st % item for st in three.strides):
        three = np.ascontiguousarray(three)
    return three, three.strides[0] // item, (three.strides[1] // item if rows > 1 else cols)


def matmul(a: np.ndarray, b: np.ndarray, *, b_transposed: bool = False, out: np.ndarray | None = None
           ) -> np.ndarray:
    """``a @ B`` by the job: B is ``b`` ([..., K, N]) or, when ``b_transposed``, ``b``'s transpose (``b``
    [..., N, K]: attention's keys, read as they lie). Both of one float dtype, at least 2-D, with the
    same batch dims (or ``b`` one matrix). ``out``: where to write, [M, N] or [batch, M, N] with rows of
    unit stride in any order (attention writes its heads into [M, batch, N] memory)."""
    a3, sa, lda = _matrices(a)
    b3, sb, ldb = _matrices(b)
    batch, m, k = a3.shape
    n = b3.shape[1] if b_transposed else b3.shape[2]
    if out is None:
        out = mempool.kernel_empty((*a.shape[:-2], m, n), a.dtype)
    if out.size == 0 or k == 0:
        out[...] = 0
        return out
    item = out.itemsize
    ldo = out.strides[-2] // item if m > 1 else n
    so = out.strides[0] // item if out.ndim == 3 and batch > 1 else m * n
    _run(float_name(a.dtype), k, 2.0 * batch * m * n * k, per_panel=True, x=ptr(a3), w=ptr(b3), out=ptr(out),
         M=m, N=n, K=k, LDX=lda, LDO=ldo, BMODE=NK if b_transposed else KN, LDW=ldb, BATCH=batch, SX=sa,
         SW=sb if b3.shape[0] > 1 else 0, SO=so)
    return out


def applies_linear(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> bool:
    """x with its features last, a 2-D weight, a bias absent or 1-D [out]."""
    del attrs
    return linear_mnk(shapes) is not None and (len(shapes) < 3 or tuple(shapes[2]) == (shapes[1][0],))


def make_linear(attrs: Mapping[str, Any]) -> Kernel:
    """``linear``'s ``pool`` kernel: ``kernel(x, w, b=None)`` like the reference; a constant weight is
    packed once (up to ``PACK_ONCE_MAX_BYTES``), any other a panel at a time. Its attribute
    ``with_epilogue`` adds a residual and a ReLU after it (the interpreter's fusion)."""
    fallback = get_op("linear").kernel

    def with_epilogue(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
                      residual: np.ndarray | None = None, relu: bool = False) -> np.ndarray | None:
        """``relu(linear + residual)`` (each optional) by the job, or None where it does not take these
        operands (a residual must have the output's shape and dtype)."""
        shapes = (x.shape, w.shape) if b is None else (x.shape, w.shape, b.shape)
        name = float_name(x.dtype)
        if name is None or w.dtype != x.dtype or (b is not None and b.dtype != x.dtype) \
                or not applies_linear(shapes, {}):
            return None
        if residual is not None:
            if residual.dtype != x.dtype or residual.shape != (*x.shape[:-1], w.shape[0]):
                return None
            residual = np.ascontiguousarray(residual)
        once = is_constant(w) and is_constant(b) and w.nbytes <= PACK_ONCE_MAX_BYTES
        return linear(np.ascontiguousarray(x), w, b, pack=once, residual=residual,
                      epilogue=Epilogue(residual=residual is not None, relu_out=relu))

    def kernel(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        out = with_epilogue(x, w, b)
        if out is None:
            return fallback(x, w) if b is None else fallback(x, w, b)
        return out

    kernel.with_epilogue = with_epilogue  # type: ignore[attr-defined]
    return kernel
