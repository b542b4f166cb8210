"""matmul and linear variants: ``blas`` (the fastest ?gemm, batched) and ``small`` (native loops).

``blas``: the operands are passed to BLAS as they are whenever their last two dims form a
row-major or a column-major matrix (a transposed view costs no copy: it becomes a transpose
flag); batch dims broadcast like numpy's, through per-matrix offset tables, and one native
driver calls ``?gemm`` for every matrix without returning to Python. ``linear`` folds its leading
dims into one GEMM against the [out, in] weight (a transpose flag) with the bias preloaded into
the output (beta = 1); a constant weight is transposed once (``transposed``, cached), as OpenBLAS
multiplies by a row-major [in, out] matrix (NN) faster than by the transposed [out, in] one (NT).

````small``: for tiny products the cost of a BLAS call (argument checks, dispatch, thread
bookkeeping) dominates; one native loop nest over the whole batch does the work instead, a row
of the result held in vector registers (compiled once per dtype and row shape, N ≤ 32 being at
most 4 + 1 vector shapes for float32).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from llvmlite import ir

from ..native import blas
from ..native.blas_ir import abi_key, emit_gemm
from ..native.irhelpers import (
    FLOAT_TYPES,
    I1,
    I32,
    I64,
    LANES,
    VOID,
    Slot,
    const,
    define,
    fma,
    for_range,
    gep,
    i64,
    intrinsic,
    load_vec,
    splat,
    store_vec,
    vec,
)
from ..ops.registry import Kernel, get_op
from ..runtime import mempool
from .native import I64 as C_I64
from .native import PTR, common_float_name, float_name, native_function, ptr
from .packing import MAX_BYTES, cached_pack, is_constant

SMALL_MAX_DIM = 32  # ``small`` applies when M, N and K are all at most this
TRANSPOSE_MAX_BYTES = MAX_BYTES // 8  # larger constant weights stay [out, in] (the cache would churn)
TRANSPOSE_ROWS = 16  # weight rows copied per step: a cache line of each output row (6 ms for 16 MB, not 16)
_BATCHED_ARGS = [C_I64, C_I64, PTR, PTR, PTR, PTR, PTR] + [C_I64] * 7
_SMALL_ARGS = [C_I64, PTR, PTR, PTR, PTR, PTR] + [C_I64] * 3


# -- plans: everything that depends only on shapes and strides, computed once per signature ----

def _matrix(shape: tuple[int, int], strides: tuple[int, int], item: int) -> tuple[bool, int] | None:
    """(transposed, leading dim) when a matrix with these strides is a BLAS operand as it is."""
    rows, cols = shape
    if strides[0] % item or strides[1] % item:
        return None
    s_row, s_col = strides[0] // item, strides[1] // item
    if cols == 1 or s_col == 1:
        ld = s_row if rows > 1 else cols
        if ld >= max(1, cols):
            return False, ld
    if rows == 1 or s_row == 1:
        ld = s_col if cols > 1 else rows
        if ld >= max(1, rows):
            return True, ld
    return None


def _contiguous_strides(shape: tuple[int, ...], item: int) -> tuple[int, ...]:
    strides, step = [], item
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """numpy's broadcast of two shapes, or None."""
    out = []
    for x, y in zip((1,) * (len(b) - len(a)) + a, (1,) * (len(a) - len(b)) + b):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y) if 0 not in (x, y) else 0)
    return tuple(out)


def _offsets(batch: tuple[int, ...], shape: tuple[int, ...], strides: tuple[int, ...],
             item: int) -> np.ndarray:
    """Element offset of every matrix of an operand with batch dims ``shape``/``strides``, broadcast."""
    shape = (1,) * (len(batch) - len(shape)) + shape
    strides = (0,) * (len(batch) - len(strides)) + strides
    off = np.zeros(batch, np.int64)
    for d, (size, stride) in enumerate(zip(shape, strides)):
        if size != 1:
            view = [1] * len(batch)
            view[d] = size
            off += (np.arange(size, dtype=np.int64) * (stride // item)).reshape(view)
    off = off.reshape(-1)
    off.setflags(write=False)
    return off


@dataclass(frozen=True)
class MatmulPlan:
    """How to run one matmul signature: numpy's path (a vector product), zeros, or BLAS."""

    kind: str  # "numpy" (gemv shapes: numpy's BLAS call is already right), "zeros" or "gemm"
    out_shape: tuple[int, ...]  # the result (1-D operands' dims removed)
    batch: tuple[int, ...] = ()
    m: int = 0
    n: int = 0
    k: int = 0
    copy_a: bool = False  # not a BLAS matrix as it is: made contiguous first
    copy_b: bool = False
    ta: bool = False
    lda: int = 0
    tb: bool = False
    ldb: int = 0
    a_off: np.ndarray | None = field(default=None, compare=False)
    b_off: np.ndarray | None = field(default=None, compare=False)


@functools.lru_cache(maxsize=512)
def matmul_plan(a_shape: tuple[int, ...], a_strides: tuple[int, ...], b_shape: tuple[int, ...],
                b_strides: tuple[int, ...], item: int, contiguous: bool = False) -> MatmulPlan | None:
    """The plan for ``a @ b`` (numpy semantics) with these layouts; None when the shapes do not agree.

    ``contiguous`` plans for C-contiguous copies of both operands (the ``small`` kernel).
    """
    if not a_shape or not b_shape:
        return None
    a2 = (1, *a_shape) if len(a_shape) == 1 else a_shape
    b2 = (*b_shape, 1) if len(b_shape) == 1 else b_shape
    a_st = (0, *a_strides) if len(a_shape) == 1 else a_strides
    b_st = (*b_strides, 0) if len(b_shape) == 1 else b_strides
    (m, k), (k2, n) = a2[-2:], b2[-2:]
    batch = _broadcast(a2[:-2], b2[:-2])
    if k != k2 or batch is None:
        return None
    out_shape = (*batch, *a_shape[-2:-1], *b_shape[-1:]) if len(b_shape) > 1 else (*batch, *a_shape[-2:-1])
    if len(b_shape) > 1 and len(a_shape) == 1:
        out_shape = (*batch, n)
    if 0 in (*batch, m, n) or k == 0:
        return MatmulPlan("zeros", out_shape, batch, m, n, k)
    if not contiguous and (m == 1 or n == 1):
        return MatmulPlan("numpy", out_shape)
    layouts = []
    for shape, strides in ((a2, a_st), (b2, b_st)):
        layout = None if contiguous else _matrix(shape[-2:], strides[-2:], item)
        copy = layout is None
        if copy:
            strides = _contiguous_strides(shape, item)
            layout = _matrix(shape[-2:], strides[-2:], item)
        layouts.append((copy, layout, strides))
    (copy_a, (ta, lda), a_st), (copy_b, (tb, ldb), b_st) = layouts
    a_off = _offsets(batch, a2[:-2], a_st[:-2], item) if batch else None
    b_off = _offsets(batch, b2[:-2], b_st[:-2], item) if batch else None
    return MatmulPlan("gemm", out_shape, batch, m, n, k, copy_a, copy_b, ta, lda, tb, ldb, a_off, b_off)


def _operands(a: np.ndarray, b: np.ndarray, plan: MatmulPlan) -> tuple[np.ndarray, np.ndarray]:
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    if plan.copy_a:
        a2 = np.ascontiguousarray(a2)
    if plan.copy_b:
        b2 = np.ascontiguousarray(b2)
    return a2, b2


# -- blas -------------------------------------------------------------------------------------

def _batched_ir(entry: blas.GemmEntry) -> str:
    """batched_gemm(gemm, count, a, b, c, a_off, b_off, ta, tb, m, n, k, lda, ldb): c[i] = op(a_i)·op(b_i)."""
    ft = FLOAT_TYPES[entry.dtype]
    fp, ip = ft.as_pointer(), I64.as_pointer()
    module = ir.Module(f"batched_gemm_{abi_key(entry)}")
    names = ("ta", "tb", "m", "n", "k", "lda", "ldb")
    args = [("gemm", I64), ("count", I64), ("a", fp), ("b", fp), ("c", fp), ("a_off", ip), ("b_off", ip)]
    _, bld, a = define(module, "batched_gemm", VOID, args + [(n, I64) for n in names], noalias=("c",))
    mn = bld.mul(a["m"], a["n"])
    with for_range(bld, 0, a["count"], name="i") as i:
        emit_gemm(bld, entry, a["gemm"], trans_a=bld.trunc(a["ta"], ir.IntType(1)),
                  trans_b=bld.trunc(a["tb"], ir.IntType(1)), m=a["m"], n=a["n"], k=a["k"], alpha=1.0,
                  a=gep(bld, a["a"], bld.load(gep(bld, a["a_off"], i))), lda=a["lda"],
                  b=gep(bld, a["b"], bld.load(gep(bld, a["b_off"], i))), ldb=a["ldb"], beta=0.0,
                  c=gep(bld, a["c"], bld.mul(i, mn)), ldc=a["n"])
    bld.ret_void()
    return str(module)


def matmul_blas(a: np.ndarray, b: np.ndarray, entry: blas.GemmEntry,
                plan: MatmulPlan | None = None) -> np.ndarray:
    """numpy's ``a @ b`` (same float dtype) through ``entry`` (``plan``: ``matmul_plan`` of a, b).

    Matrix-vector shapes (M or N = 1) go through ``np.matmul``, which calls the same BLAS's gemv:
    a GEMM with one row packs the whole other operand for nothing.
    """
    plan = plan or matmul_plan(a.shape, a.strides, b.shape, b.strides, a.itemsize)
    if plan.kind == "numpy":
        return np.matmul(a, b)
    if plan.kind == "zeros":
        return np.zeros(plan.out_shape, a.dtype)
    a2, b2 = _operands(a, b, plan)
    out = mempool.kernel_empty((*plan.batch, plan.m, plan.n), a.dtype)
    if not plan.batch:
        entry.gemm_raw(plan.ta, plan.tb, plan.m, plan.n, plan.k, 1.0, ptr(a2), plan.lda, ptr(b2), plan.ldb,
                       0.0, ptr(out), plan.n)
    else:
        fn = native_function(("batched_gemm", abi_key(entry)), lambda: _batched_ir(entry), "batched_gemm",
                             _BATCHED_ARGS)
        fn(entry.address, plan.a_off.size, ptr(a2), ptr(b2), ptr(out), ptr(plan.a_off), ptr(plan.b_off),
           int(plan.ta), int(plan.tb), plan.m, plan.n, plan.k, plan.lda, plan.ldb)
    return out.reshape(plan.out_shape)


def transposed(weight: np.ndarray, bias: None = None) -> tuple[np.ndarray]:
    """(``weight``ᵀ as a C-contiguous array,), cached while ``weight`` is a live constant (``bias``: the
    packings' signature, unused). Why: OpenBLAS runs ``x @ wᵀ`` 3–5 % faster at 256 rows and 15–27 % at
    1–16 with wᵀ stored row-major (NN) than with the [out, in] weight as a transposed operand (NT)
    (``x`` 256×1024, w 4096×1024 on this machine); numpy's own transposing copy is 3–6× slower than
    this blocked one."""

    def build() -> tuple[np.ndarray]:
        out = np.empty(weight.shape[::-1], weight.dtype)
        for i in range(0, weight.shape[0], TRANSPOSE_ROWS):
            out[:, i : i + TRANSPOSE_ROWS] = weight[i : i + TRANSPOSE_ROWS].T
        return (out,)

    return cached_pack("transposed", weight, None, build)


def linear_blas(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, entry: blas.GemmEntry) -> np.ndarray:
    """``x @ w.T + bias`` (PyTorch's F.linear) as one GEMM over all leading dims of x.

    A single row (M = 1) goes through numpy (gemv), like ``matmul_blas``'s vector shapes; to the GEMM,
    a constant weight of at most ``TRANSPOSE_MAX_BYTES`` is passed as its cached transpose.
    """
    n, k = w.shape
    lead = x.shape[:-1]
    m = math.prod(lead)
    if m == 1:
        y = np.matmul(x, w.T)
        return y if bias is None else np.add(y, bias)
    out = mempool.kernel_empty((m, n), x.dtype)
    np.copyto(out, 0 if bias is None else bias)
    if m and n and k:
        x2 = x.reshape(m, k)
        x_layout = _matrix((m, k), x2.strides, x.itemsize)
        if x_layout is None:
            x2 = np.ascontiguousarray(x2)
            x_layout = (False, k)
        if w.nbytes <= TRANSPOSE_MAX_BYTES and is_constant(w):
            w = transposed(w)[0].T
        w_layout = _matrix((n, k), w.strides, w.itemsize)
        if w_layout is None:
            w = np.ascontiguousarray(w)
            w_layout = (False, k)
        beta = 0.0 if bias is None else 1.0
        entry.gemm_raw(x_layout[0], not w_layout[0], m, n, k, 1.0, ptr(x2), x_layout[1], ptr(w), w_layout[1],
                       beta, ptr(out), n)
    return out.reshape(*lead, n)


# -- small ------------------------------------------------------------------------------------

def _small_ir(dtype: str, full: int, partial: bool) -> str:
    """small_matmul(count, a, b, c, a_off, b_off, m, n, k): c[i] = a_i · b_i, row-major, ld = k and n.

    Specialised on the shape of a row of C — ``full`` whole vectors plus a ``partial`` one (n =
    full·lanes + 1…lanes−1) — which lives in registers while k runs; the partial vector is read
    and written with masked loads/stores. m, k, n's remainder and the batch stay run-time values.
    """
    ft, lanes = FLOAT_TYPES[dtype], LANES[dtype]
    vt = vec(ft, lanes)
    fp, ip = ft.as_pointer(), I64.as_pointer()
    module = ir.Module(f"small_matmul_{dtype}_{full}_{int(partial)}")
    args = [("count", I64), ("a", fp), ("b", fp), ("c", fp), ("a_off", ip), ("b_off", ip)]
    args += [("m", I64), ("n", I64), ("k", I64)]
    # a and b are only read: noalias holds even when they are the same array (a @ a).
    _, bld, a = define(module, "small_matmul", VOID, args, noalias=("a", "b", "c"), no_builtins=True)
    m, n, k = a["m"], a["n"], a["k"]
    bits = 64 if dtype == "float64" else 32
    masked_load = intrinsic(module, f"llvm.masked.load.v{lanes}f{bits}.p0", vt,
                            [vt.as_pointer(), I32, vec(I1, lanes), vt])
    masked_store = intrinsic(module, f"llvm.masked.store.v{lanes}f{bits}.p0", VOID,
                             [vt, vt.as_pointer(), I32, vec(I1, lanes)])
    align = ir.Constant(I32, bits // 8)
    zero = const(vt, 0.0)
    lane_ids = ir.Constant(vec(I64, lanes), list(range(lanes)))
    mask = bld.icmp_signed("<", lane_ids, splat(bld, bld.srem(n, i64(lanes)), lanes))
    with for_range(bld, 0, a["count"], name="bt") as bt:
        pa = gep(bld, a["a"], bld.load(gep(bld, a["a_off"], bt)))
        pb = gep(bld, a["b"], bld.load(gep(bld, a["b_off"], bt)))
        pc = gep(bld, a["c"], bld.mul(bt, bld.mul(m, n)))
        with for_range(bld, 0, m, name="i") as i:
            a_row, c_row = gep(bld, pa, bld.mul(i, k)), gep(bld, pc, bld.mul(i, n))
            acc = [Slot(bld, vt, zero) for _ in range(full + partial)]
            with for_range(bld, 0, k, name="kk") as kk:
                aik = splat(bld, bld.load(gep(bld, a_row, kk)), lanes)
                b_row = gep(bld, pb, bld.mul(kk, n))
                for v in range(full):
                    values = load_vec(bld, gep(bld, b_row, v * lanes), lanes)
                    acc[v].set(fma(bld, aik, values, acc[v].get()))
                if partial:
                    tail = bld.bitcast(gep(bld, b_row, full * lanes), vt.as_pointer())
                    values = bld.call(masked_load, [tail, align, mask, zero])
                    acc[full].set(fma(bld, aik, values, acc[full].get()))
            for v in range(full):
                store_vec(bld, acc[v].get(), gep(bld, c_row, v * lanes))
            if partial:
                tail = bld.bitcast(gep(bld, c_row, full * lanes), vt.as_pointer())
                bld.call(masked_store, [acc[full].get(), tail, align, mask])
    bld.ret_void()
    return str(module)


_NO_BATCH = np.zeros(1, np.int64)


def matmul_small(a: np.ndarray, b: np.ndarray, plan: MatmulPlan | None = None) -> np.ndarray:
    """numpy's ``a @ b`` (same float dtype) with the native loop nest (numpy's for N > SMALL_MAX_DIM).

    ``plan``: ``matmul_plan(..., contiguous=True)`` of a, b.
    """
    plan = plan or matmul_plan(a.shape, a.strides, b.shape, b.strides, a.itemsize, contiguous=True)
    if plan.kind == "zeros":
        return np.zeros(plan.out_shape, a.dtype)
    if plan.n > SMALL_MAX_DIM:
        return np.matmul(a, b)
    a2, b2 = _operands(a, b, plan)
    out = mempool.kernel_empty((*plan.batch, plan.m, plan.n), a.dtype)
    a_off = _NO_BATCH if plan.a_off is None else plan.a_off
    b_off = _NO_BATCH if plan.b_off is None else plan.b_off
    name = float_name(a.dtype)
    full, partial = divmod(plan.n, LANES[name])
    fn = native_function(("small_matmul", name, full, partial > 0),
                         lambda: _small_ir(name, full, partial > 0), "small_matmul", _SMALL_ARGS)
    fn(a_off.size, ptr(a2), ptr(b2), ptr(out), ptr(a_off), ptr(b_off), plan.m, plan.n, plan.k)
    return out.reshape(plan.out_shape)


# -- variants ---------------------------------------------------------------------------------

def _mnk(shapes: Sequence[tuple[int, ...]]) -> tuple[int, int, int, int] | None:
    """(batch count, M, N, K) of matmul on ``shapes``, None when they do not agree."""
    a, b = tuple(shapes[0]), tuple(shapes[1])
    if not a or not b:
        return None
    m = a[-2] if len(a) > 1 else 1
    n = b[-1] if len(b) > 1 else 1
    k, k2 = a[-1], (b[-2] if len(b) > 1 else b[0])
    batch = _broadcast(a[:-2], b[:-2])
    if k != k2 or batch is None:
        return None
    return math.prod(batch), m, n, k


def linear_mnk(shapes: Sequence[tuple[int, ...]]) -> tuple[int, int, int] | None:
    """(rows, out, in features) of linear on ``shapes``, None when they do not agree (a bias of <= 1 dim)."""
    x, w = shapes[0], shapes[1]
    if not x or len(w) != 2 or x[-1] != w[1] or (len(shapes) > 2 and len(shapes[2]) > 1):
        return None
    return math.prod(x[:-1]), w[0], w[1]


def matmul_flops(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> float:
    dims = _mnk(shapes)
    return 2.0 * math.prod(dims) if dims else 0.0


def matmul_bytes(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> float:
    """Bytes read and written once (float32): both operands and the result."""
    dims = _mnk(shapes)
    if not dims:
        return 0.0
    count, m, n, _ = dims
    return 4.0 * (math.prod(shapes[0]) + math.prod(shapes[1]) + count * m * n)


def linear_flops(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> float:
    dims = linear_mnk(shapes)
    return 2.0 * math.prod(dims) if dims else 0.0


def linear_bytes(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> float:
    dims = linear_mnk(shapes)
    if not dims:
        return 0.0
    m, n, k = dims
    return 4.0 * (m * k + n * k + m * n)


def applies_matmul_blas(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> bool:
    """Any matmul whose shapes agree (1-D operands, broadcast batch dims), when a BLAS was found."""
    return _mnk(shapes) is not None and bool(blas.discover())


def applies_matmul_small(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> bool:
    """M, N and K all ≤ SMALL_MAX_DIM (any batch)."""
    dims = _mnk(shapes)
    return dims is not None and max(dims[1:]) <= SMALL_MAX_DIM


def applies_linear_blas(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> bool:
    """Any linear with a 2-D weight and a bias of ≤ 1 dim, when a BLAS was found."""
    return linear_mnk(shapes) is not None and bool(blas.discover())


def applies_linear_small(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> bool:
    """Rows (all leading dims of x), out and in features all ≤ SMALL_MAX_DIM."""
    dims = linear_mnk(shapes)
    return dims is not None and max(dims) <= SMALL_MAX_DIM


def make_matmul_blas(attrs: Mapping[str, Any]) -> Kernel:
    """``matmul``'s ``blas`` kernel: ``kernel(a, b)`` like the reference."""
    fallback = get_op("matmul").kernel

    def kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        name = common_float_name(a, b)
        entry = blas.best_gemm(name) if name else None
        plan = matmul_plan(a.shape, a.strides, b.shape, b.strides, a.itemsize)
        if entry is None or plan is None:
            return fallback(a, b)
        return matmul_blas(a, b, entry, plan)

    return kernel


def make_matmul_small(attrs: Mapping[str, Any]) -> Kernel:
    """``matmul``'s ``small`` kernel."""
    fallback = get_op("matmul").kernel

    def kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        plan = matmul_plan(a.shape, a.strides, b.shape, b.strides, a.itemsize, contiguous=True)
        if common_float_name(a, b) is None or plan is None:
            return fallback(a, b)
        return matmul_small(a, b, plan)

    return kernel


def make_linear_blas(attrs: Mapping[str, Any]) -> Kernel:
    """``linear``'s ``blas`` kernel: ``kernel(x, w, b=None)`` like the reference."""
    fallback = get_op("linear").kernel

    def kernel(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        name = common_float_name(x, w, b)
        entry = blas.best_gemm(name) if name else None
        shapes = (x.shape, w.shape) if b is None else (x.shape, w.shape, b.shape)
        if entry is None or linear_mnk(shapes) is None:
            return fallback(x, w) if b is None else fallback(x, w, b)
        return linear_blas(x, w, b, entry)

    return kernel


def make_linear_small(attrs: Mapping[str, Any]) -> Kernel:
    """``linear``'s ``small`` kernel: x @ w.T with the native loop nest, then the bias."""
    fallback = get_op("linear").kernel

    def kernel(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        shapes = (x.shape, w.shape) if b is None else (x.shape, w.shape, b.shape)
        if common_float_name(x, w, b) is None or linear_mnk(shapes) is None:
            return fallback(x, w) if b is None else fallback(x, w, b)
        rows = math.prod(x.shape[:-1])  # not -1: a reshape cannot infer it when K is 0
        y = matmul_small(x.reshape(rows, w.shape[1]), w.T).reshape(*x.shape[:-1], w.shape[0])
        if b is not None:
            y += b
        return y

    return kernel
