"""conv2d as BLAS GEMMs: ``im2col_gemm`` (any conv) and ``direct_1x1`` (1×1 convs, no copy at stride 1).

Both run one native driver per call: for every image and group it builds the column matrix
[C/g·KH·KW, OH·OW] (native im2col: whole rows copied, zero runs for the padding — or nothing at
all for a stride-1 1×1 conv, whose input already is that matrix), calls the fastest ``?gemm``
found at run time through its address (``blas.best_gemm``), then adds the bias and an optional
fused ReLU. The whole call runs without the GIL; BLAS uses its own threads for the GEMM, the
column copy runs on the calling thread. The driver is compiled once per dtype and BLAS ABI.

The column matrix is built a band of output rows at a time (the driver called once per band) when
one image's would be larger than ``COL_MAX_BYTES`` or ``max_tensor_bytes``: past that size a wider
GEMM gains nothing, and a large kernel over many channels would need gigabytes (11×11 over 256
channels at 512²: 32 GiB for a 4 MB output). ``workspace`` is what a call allocates for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from llvmlite import ir

from ..context import CONTEXT
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
    max_i64,
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
    reference_conv2d,
)
from .native import I64 as C_I64
from .native import PTR, float_name, native_function, ptr

# OH is the band's rows and PT the padding above its first row; OPLANE is the elements of one output
# channel (all its rows), O0 where the band starts in it
_ARG_NAMES = ("N", "C", "H", "W", "OC", "OH", "OW", "KH", "KW", "SH", "SW", "PT", "PL", "DH", "DW", "groups",
              "flags", "OPLANE", "O0")
_ARGTYPES = [PTR] * 5 + [C_I64] + [C_I64] * len(_ARG_NAMES)
FLAG_BIAS, FLAG_RELU, FLAG_DIRECT = 1, 2, 4
COL_MAX_BYTES = 64 << 20  # a larger column matrix is built a band of output rows at a time


def _build_ir(entry: blas.GemmEntry) -> str:
    dtype = entry.dtype
    ft = FLOAT_TYPES[dtype]
    fp = ft.as_pointer()
    module = ir.Module(f"conv_gemm_{abi_key(entry)}")
    args = [("x", fp), ("w", fp), ("bias", fp), ("out", fp), ("col", fp), ("gemm", I64)]
    args += [(n, I64) for n in _ARG_NAMES]
    # x and col are the same array in direct mode, where col is only read: noalias still holds.
    _, b, a = define(module, "conv_gemm", VOID, args, noalias=("x", "w", "bias", "out", "col"),
                     no_builtins=True)
    c_in, h, w, oc, oh_n, ow_n, kh_n, kw_n = (a[n] for n in ("C", "H", "W", "OC", "OH", "OW", "KH", "KW"))
    groups, flags, plane = a["groups"], a["flags"], a["OPLANE"]
    cg = b.sdiv(c_in, groups)
    ocg = b.sdiv(oc, groups)
    k_total = b.mul(b.mul(cg, kh_n), kw_n)
    ohw = b.mul(oh_n, ow_n)
    zero = ir.Constant(ft, 0.0)
    direct = b.icmp_signed("!=", b.and_(flags, i64(FLAG_DIRECT)), i64(0))

    with for_range(b, 0, a["N"], name="n") as n:
        with for_range(b, 0, groups, name="g") as g:
            xg = gep(b, a["x"], b.mul(b.add(b.mul(n, c_in), b.mul(g, cg)), b.mul(h, w)))
            with b.if_then(b.not_(direct)):
                _emit_im2col(b, a, xg, cg, zero)
            src = b.select(direct, xg, a["col"])
            wg = gep(b, a["w"], b.mul(b.mul(g, ocg), k_total))
            og = gep(b, a["out"], b.add(b.mul(b.add(b.mul(n, oc), b.mul(g, ocg)), plane), a["O0"]))
            emit_gemm(b, entry, a["gemm"], trans_a=False, trans_b=False, m=ocg, n=ohw, k=k_total, alpha=1.0,
                      a=wg, lda=k_total, b=src, ldb=ohw, beta=0.0, c=og, ldc=plane)
        with b.if_then(b.icmp_signed("!=", b.and_(flags, i64(FLAG_BIAS | FLAG_RELU)), i64(0))):
            has_bias = b.icmp_signed("!=", b.and_(flags, i64(FLAG_BIAS)), i64(0))
            relu = b.icmp_signed("!=", b.and_(flags, i64(FLAG_RELU)), i64(0))
            with for_range(b, 0, oc, name="ep_c") as c:
                bias_c = bias_or_zero(b, has_bias, gep(b, a["bias"], c))
                row = gep(b, a["out"], b.add(b.mul(b.add(b.mul(n, oc), c), plane), a["O0"]))
                with for_range(b, 0, ohw, name="ep_i") as i:
                    slot = gep(b, row, i)
                    v = b.fadd(b.load(slot), bias_c)
                    b.store(b.select(relu, nan_relu(b, v), v), slot)
    b.ret_void()
    return str(module)


def _emit_im2col(b: ir.IRBuilder, a: dict, xg: ir.Value, cg: ir.Value, zero: ir.Value) -> None:
    """col[(c·KH + kh)·KW + kw][oh·OW + ow] = x[c][oh·SH − PT + kh·DH][ow·SW − PL + kw·DW] (0 outside)."""
    h, w, oh_n, ow_n, kh_n, kw_n = (a[n] for n in ("H", "W", "OH", "OW", "KH", "KW"))
    sh, sw, dh, dw = (a[n] for n in ("SH", "SW", "DH", "DW"))
    ohw = b.mul(oh_n, ow_n)
    with (for_range(b, 0, cg, name="c") as c, for_range(b, 0, kh_n, name="kh") as kh,
          for_range(b, 0, kw_n, name="kw") as kw):
        row = gep(b, a["col"], b.mul(b.add(b.mul(b.add(b.mul(c, kh_n), kh), kw_n), kw), ohw))
        off = b.sub(b.mul(kw, dw), a["PL"])  # iw = ow·SW + off
        # Columns whose iw falls inside [0, W): [lo, hi).
        lo = b.select(b.icmp_signed(">=", off, i64(0)), i64(0), b.sdiv(b.sub(b.sub(sw, i64(1)), off), sw))
        room = b.sub(w, off)
        hi = b.select(b.icmp_signed("<=", room, i64(0)), i64(0),
                      ceil_div(b, room, sw))
        hi = min_i64(b, hi, ow_n)
        lo = min_i64(b, lo, hi)
        with for_range(b, 0, oh_n, name="oh") as oh:
            dst = gep(b, row, b.mul(oh, ow_n))
            ih = b.add(b.sub(b.mul(oh, sh), a["PT"]), b.mul(kh, dh))
            inside = b.and_(b.icmp_signed(">=", ih, i64(0)), b.icmp_signed("<", ih, h))
            with b.if_else(inside) as (then, other):
                with then:
                    src = gep(b, xg, b.mul(b.add(b.mul(c, h), ih), w))
                    with for_range(b, 0, lo, name="z0") as j:
                        b.store(zero, gep(b, dst, j))
                    with for_range(b, lo, hi, name="cp") as j:
                        b.store(b.load(gep(b, src, b.add(b.mul(j, sw), off))), gep(b, dst, j))
                    with for_range(b, max_i64(b, hi, lo), ow_n, name="z1") as j:
                        b.store(zero, gep(b, dst, j))
                with other, for_range(b, 0, ow_n, name="zr") as j:
                    b.store(zero, gep(b, dst, j))


def _driver(entry: blas.GemmEntry) -> Any:
    return native_function(("conv_gemm", abi_key(entry)), lambda: _build_ir(entry), "conv_gemm", _ARGTYPES)


def conv2d_gemm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, geo: ConvGeometry,
                entry: blas.GemmEntry, *, direct: bool = False, relu: bool = False) -> np.ndarray:
    """The convolution as [N, C_out, OH, OW] through ``entry`` (x 4-D C-contiguous, weight's dtype).

    ``direct`` skips the column matrix (only valid for a stride-1, unpadded 1×1 conv); otherwise it is
    built ``band_rows`` output rows at a time.
    """
    w = np.ascontiguousarray(weight)
    out = output_array(geo, x.dtype)
    rows = geo.oh if direct else band_rows(geo, x.itemsize)
    col = x if direct else mempool.kernel_empty((_column_elements(geo, rows),), x.dtype)
    b = bias if bias is None else np.ascontiguousarray(bias)
    flags = (FLAG_BIAS if b is not None else 0) | (FLAG_RELU if relu else 0) | (FLAG_DIRECT if direct else 0)
    driver = _driver(entry)
    for oh0 in range(0, geo.oh, rows):
        driver(ptr(x), ptr(w), ptr(b) if b is not None else None, ptr(out), ptr(col), entry.address,
               geo.n, geo.c_in, geo.h, geo.w, geo.c_out, min(rows, geo.oh - oh0), geo.ow, geo.kh, geo.kw,
               geo.sh, geo.sw, geo.pad_top - oh0 * geo.sh, geo.pad_left, geo.dh, geo.dw, geo.groups, flags,
               geo.oh * geo.ow, oh0 * geo.ow)
    return out


def _column_elements(geo: ConvGeometry, rows: int) -> int:
    """Elements of the column matrix of ``rows`` output rows of one image and group."""
    return geo.c_group * geo.kh * geo.kw * rows * geo.ow


def band_rows(geo: ConvGeometry, itemsize: int) -> int:
    """Output rows per column matrix: all of them while it fits in ``COL_MAX_BYTES`` and the tensor
    limit, else as many as fit (at least one: ``workspace_im2col`` then says it is over the limit)."""
    budget = min(COL_MAX_BYTES, CONTEXT.max_tensor_bytes)
    return max(1, min(geo.oh, budget // max(1, _column_elements(geo, 1) * itemsize)))


def workspace_im2col(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any], itemsize: int) -> int:
    """Bytes of the column matrix ``im2col_gemm`` allocates (a band of it: ``band_rows``)."""
    geo = conv_geometry(shapes, attrs)
    return 0 if geo is None else _column_elements(geo, band_rows(geo, itemsize)) * itemsize


def workspace_1x1(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any], itemsize: int) -> int:
    """``direct_1x1``'s: none at stride 1 (the GEMM reads x itself), else the gathered input's band."""
    geo = conv_geometry(shapes, attrs)
    if geo is None or (geo.sh, geo.sw) == (1, 1):
        return 0
    return _column_elements(geo, band_rows(geo, itemsize)) * itemsize


def is_1x1(geo: ConvGeometry) -> bool:
    return geo.kh == 1 and geo.kw == 1 and not geo.padded


def _make(attrs: Mapping[str, Any], one_by_one: bool) -> Kernel:
    fallback = reference_conv2d(attrs)
    geometry = geometry_for(attrs)

    def kernel(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        geo = geometry(x.shape, weight.shape)
        name = float_name(x.dtype)
        entry = blas.best_gemm(name) if name else None
        if not native_operands(geo, x, weight, bias) or entry is None or (one_by_one and not is_1x1(geo)):
            return fallback(x, weight, bias)
        x4 = np.ascontiguousarray(x if geo.batched else x[None])
        direct = one_by_one and geo.sh == 1 and geo.sw == 1
        return finish(geo, conv2d_gemm(x4, weight, bias, geo, entry, direct=direct))

    return kernel


def make_im2col(attrs: Mapping[str, Any]) -> Kernel:
    """``im2col_gemm``'s kernel: ``kernel(x, weight, bias=None)`` like the reference."""
    return _make(attrs, one_by_one=False)


def make_1x1(attrs: Mapping[str, Any]) -> Kernel:
    """``direct_1x1``'s kernel."""
    return _make(attrs, one_by_one=True)


def applies_im2col(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> bool:
    """Any valid conv2d, when a BLAS library was found."""
    return conv_geometry(shapes, attrs) is not None and bool(blas.discover())


def applies_1x1(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> bool:
    """1×1 kernels without padding (any stride, dilation or groups), when a BLAS library was found."""
    geo = conv_geometry(shapes, attrs)
    return geo is not None and is_1x1(geo) and bool(blas.discover())
