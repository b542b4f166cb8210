"""scaled_dot_product_attention ``fused``: scores, softmax and the weighted sum of v in one native job.

Why: through BLAS (``attention``) a layer's attention is 2·batch small GEMM calls around a softmax
pass over the whole [batch, L, S] scores tensor — for W3's 4 heads × 128² × 64, 297 µs (57 GFLOP/s)
against 110 µs of arithmetic at the sgemm peak: every call pays OpenBLAS's packing and the wake-up
of its threads, and the scores go through memory and back. Here one work item is (batch, block of
``ROW_VECTORS`` vectors of query rows — 16 float32); its q rows are copied transposed and pre-scaled
into the thread's scratch (qᵀ [E][rows]), then:

- a register tile of ``KEYS`` keys × the block's rows accumulates k·qᵀ over E: the scores
  *transposed*, sᵀ [S][rows], so that the softmax down each query's column is vertical vector
  arithmetic (max, exp, sum — no horizontal reductions);
- a tile of ``ROWS`` query rows × ``COL_VECTORS`` vectors of output columns accumulates
  pᵀ[j][r] · v[j] over the keys and is scaled by 1/sum as it is stored. v is read from panels of
  its columns that a thread packs once per batch it works on: heads are strided views of one QKV
  buffer, whose rows 3 KB apart fall into a few L1 sets and missed on every row tile (the output
  phase ran 128 µs of the 305 at W3's shape before, 103 after).

q and k are read in place with any row stride; items are independent and taken from an atomic
counter by every thread the pool lends (``threads``). At W3's shape the job took 177 µs on two
threads against 297 µs for the BLAS route (measured apart; after an OpenBLAS call, whose worker
keeps spinning on the second core, it runs at one core's speed, ≈ 280 µs). ``is_causal`` (top-left,
as torch) masks j > i and ends the key loops after the block's last row. A row whose scores are all
masked gives zeros, as the reference's safe softmax. The job (``void attention(i64* frame)``, fields
``FRAME``) is compiled once per dtype with every size a run-time value: the interpreter's variant
and the JIT's regions call the same code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
from llvmlite import ir

from ..native import mathlib
from ..native.irhelpers import (
    FLOAT_TYPES,
    I8,
    I32,
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
    min_i64,
    splat,
    store_vec,
    transpose,
    vec,
)
from ..ops.registry import Kernel, get_op
from .attention import attention_dims
from .native import Frame, common_float_name, native_library, ptr
from .rows import f64_bits
from .threads import POOL

ROW_VECTORS = 2  # query rows per work item, in vectors
KEYS = 6  # keys per score tile
ROWS = 6  # query rows per output tile
COL_VECTORS = 2  # output-column vectors per output tile
SLOT_ALIGN = 64
FRAME = Frame(
    ("q", "k", "v", "out", "scratch", "B", "L", "S", "E", "EV",
     "QB", "QR", "KB", "KR", "VB", "VR", "OB", "OR",  # batch and row strides (elements; rows are dense)
     "scale", "causal", "slot_bytes", "counter", "slots"),
    pointers=("q", "k", "v", "out", "scratch"),
    zeroed=("counter", "slots"),
)
D = TypeVar("D")  # int, or a symbolic Dim (the JIT sizes scratch for bucket bounds)


def block_rows(dtype: str) -> int:
    """Query rows per work item for ``dtype``."""
    return ROW_VECTORS * LANES[dtype]


def scratch_bytes(e: D, s: D, ev: D, dtype: str) -> D:
    """Bytes of one thread's scratch: v packed in column panels [EV/width][S][width] (zero-padded to
    whole panels), qᵀ [E][rows], sᵀ [S][rows], 1/sum per row and one output row; a multiple of
    ``SLOT_ALIGN``."""
    width = COL_VECTORS * LANES[dtype]
    rows = block_rows(dtype)
    panels = (ev + (width - 1)) // width
    size = (panels * s * width + (e + s + 1) * rows + width) * np.dtype(dtype).itemsize
    return (size + (SLOT_ALIGN - 1)) // SLOT_ALIGN * SLOT_ALIGN


def _row_tiles(rows: int) -> list[tuple[int, int]]:
    """(first row, row count) of the output tiles covering a block: 16 = 6 + 6 + 4."""
    return [(r, min(ROWS, rows - r)) for r in range(0, rows, ROWS)]


def _build_ir(dtype: str) -> str:
    ft, lanes = FLOAT_TYPES[dtype], LANES[dtype]
    vt = vec(ft, lanes)
    rows, width = block_rows(dtype), COL_VECTORS * lanes
    module = ir.Module(f"attention_{dtype}")
    fp = ft.as_pointer()
    b, a = FRAME.define(module, "attention", fp, noalias=FRAME.pointers)
    e_n, s_n, ev_n = a["E"], a["S"], a["EV"]
    scale = b.bitcast(a["scale"], ir.DoubleType())
    scale = scale if dtype == "float64" else b.fptrunc(scale, ft)
    causal = b.icmp_signed("!=", a["causal"], i64(0))
    zero = const(vt, 0.0)

    # This thread's scratch (``scratch_bytes``): packed v, qᵀ, sᵀ (becoming pᵀ), 1/sum, an output row.
    slot = b.atomic_rmw("add", a["slots"], i64(1), "monotonic")
    vp = b.bitcast(gep(b, b.bitcast(a["scratch"], I8.as_pointer()), b.mul(slot, a["slot_bytes"])), fp)
    panels = b.sdiv(b.add(ev_n, i64(width - 1)), i64(width))
    panel = b.mul(s_n, i64(width))  # elements per panel
    qt = gep(b, vp, b.mul(panels, panel))
    pt = gep(b, qt, b.mul(e_n, i64(rows)))
    inv = gep(b, pt, b.mul(s_n, i64(rows)))
    spill = gep(b, inv, rows)
    whole = b.sdiv(ev_n, i64(width))  # panels without padding

    packed = Slot(b, I64, i64(-1), "packed")  # the batch whose v is in vp
    blocks = b.sdiv(b.add(a["L"], i64(rows - 1)), i64(rows))
    with (for_each_chunk(b, a["counter"], b.mul(a["B"], blocks), i64(1)) as (start, stop),
          for_range(b, start, stop, name="item") as item):
        batch = b.sdiv(item, blocks)
        i0 = b.mul(b.srem(item, blocks), i64(rows))
        valid = min_i64(b, i64(rows), b.sub(a["L"], i0))
        qb = gep(b, a["q"], b.add(b.mul(batch, a["QB"]), b.mul(i0, a["QR"])))
        kb = gep(b, a["k"], b.mul(batch, a["KB"]))
        vb = gep(b, a["v"], b.mul(batch, a["VB"]))
        ob = gep(b, a["out"], b.add(b.mul(batch, a["OB"]), b.mul(i0, a["OR"])))
        keys = b.select(causal, min_i64(b, s_n, b.add(i0, valid)), s_n)

        # v -> column panels (dense: v's rows may be far apart, and one panel then stays in L1 while
        # every row tile of the block reads it); once per batch a thread works on
        with b.if_then(b.icmp_signed("!=", packed.get(), batch)), for_range(b, 0, s_n, name="vj") as j:
            v_row = gep(b, vb, b.mul(j, a["VR"]))
            with for_range(b, 0, whole, name="vp") as t:
                to = gep(b, vp, b.add(b.mul(t, panel), b.mul(j, i64(width))))
                src = gep(b, v_row, b.mul(t, i64(width)))
                for c in range(COL_VECTORS):
                    store_vec(b, load_vec(b, gep(b, src, c * lanes), lanes), gep(b, to, c * lanes))
            last = gep(b, vp, b.add(b.mul(whole, panel), b.mul(j, i64(width))))
            first = b.mul(whole, i64(width))
            with b.if_then(b.icmp_signed("<", first, ev_n)), for_range(b, 0, width, name="vt") as c:
                column = b.add(first, c)
                inside = b.icmp_signed("<", column, ev_n)
                with b.if_else(inside) as (then, other):
                    with then:
                        b.store(b.load(gep(b, v_row, column)), gep(b, last, c))
                    with other:
                        b.store(const(ft, 0.0), gep(b, last, c))
        packed.set(batch)

        # q block -> qᵀ, scaled: lanes × lanes tiles transposed in registers; rows past L are zeros
        whole_e = b.mul(b.sdiv(e_n, i64(lanes)), i64(lanes))
        for g in range(ROW_VECTORS):
            with for_range(b, 0, whole_e, lanes, name=f"qt{g}") as e:
                tile = []
                for r in range(g * lanes, (g + 1) * lanes):
                    row = Slot(b, vt, zero)
                    with b.if_then(b.icmp_signed("<", i64(r), valid)):
                        row.set(load_vec(b, gep(b, qb, b.add(b.mul(i64(r), a["QR"]), e)), lanes))
                    tile.append(row.get())
                for c, column in enumerate(transpose(b, tile)):
                    at = gep(b, qt, b.add(b.mul(b.add(e, i64(c)), i64(rows)), i64(g * lanes)))
                    store_vec(b, b.fmul(column, splat(b, scale, lanes)), at)
        with for_range(b, 0, i64(rows), name="qr") as r, for_range(b, whole_e, e_n, name="qe") as e:
            value = Slot(b, ft, const(ft, 0.0))
            with b.if_then(b.icmp_signed("<", r, valid)):
                value.set(b.fmul(b.load(gep(b, qb, b.add(b.mul(r, a["QR"]), e))), scale))
            b.store(value.get(), gep(b, qt, b.add(b.mul(e, i64(rows)), r)))

        # sᵀ[j] = k[j] · qᵀ: tiles of KEYS keys, then at most one of 4, 2 and 1
        key = Slot(b, I64, i64(0), "key")

        def score_tile(n: int) -> None:
            j0 = key.get()
            acc = [[Slot(b, vt, zero) for _ in range(ROW_VECTORS)] for _ in range(n)]
            k_rows = [gep(b, kb, b.mul(b.add(j0, i64(t)), a["KR"])) for t in range(n)]
            with for_range(b, 0, e_n, name=f"se{n}") as e:
                q_vecs = [load_vec(b, gep(b, qt, b.add(b.mul(e, i64(rows)), i64(v * lanes))), lanes)
                          for v in range(ROW_VECTORS)]
                for t in range(n):
                    kv = splat(b, b.load(gep(b, k_rows[t], e)), lanes)
                    for v in range(ROW_VECTORS):
                        acc[t][v].set(fma(b, kv, q_vecs[v], acc[t][v].get()))
            for t in range(n):
                row = gep(b, pt, b.mul(b.add(j0, i64(t)), i64(rows)))
                for v in range(ROW_VECTORS):
                    store_vec(b, acc[t][v].get(), gep(b, row, v * lanes))
            key.set(b.add(j0, i64(n)))

        with for_range(b, 0, b.sdiv(keys, i64(KEYS)), name="stile"):
            score_tile(KEYS)
        for n in (4, 2, 1):
            with b.if_then(b.icmp_signed(">=", b.sub(keys, key.get()), i64(n))):
                score_tile(n)

        # softmax down each query's column of sᵀ: max, exp, sum -> pᵀ and 1/sum; a causal block masks
        # the keys after each query (a loop of its own: the select would make LLVM's stores masked)
        lane_ids = ir.Constant(vec(I32, lanes), list(range(lanes)))
        for v in range(ROW_VECTORS):
            query = b.add(splat(b, b.trunc(b.add(i0, i64(v * lanes)), I32), lanes), lane_ids)
            _softmax_column(b, gep(b, pt, v * lanes), rows, query, keys, causal, gep(b, inv, v * lanes), v)

        # out[r] = (Σ_j pᵀ[j][r] · v[j]) / sum[r]: per panel of v's columns, tiles of ROWS rows; the
        # last panel's padding columns are computed and not stored
        with for_range(b, 0, panels, name="panel") as t:
            v_panel = gep(b, vp, b.mul(t, panel))
            c0 = b.mul(t, i64(width))
            full = b.icmp_signed("<=", b.add(c0, i64(width)), ev_n)
            for r0, n in _row_tiles(rows):
                with b.if_then(b.icmp_signed("<", i64(r0), valid)):
                    acc = [[Slot(b, vt, zero) for _ in range(COL_VECTORS)] for _ in range(n)]
                    with for_range(b, 0, keys, name=f"o{r0}") as j:
                        v_row = gep(b, v_panel, b.mul(j, i64(width)))
                        vv = [load_vec(b, gep(b, v_row, c * lanes), lanes) for c in range(COL_VECTORS)]
                        p_row = gep(b, pt, b.add(b.mul(j, i64(rows)), i64(r0)))
                        for r in range(n):
                            pb = splat(b, b.load(gep(b, p_row, r)), lanes)
                            for c in range(COL_VECTORS):
                                acc[r][c].set(fma(b, pb, vv[c], acc[r][c].get()))
                    for r in range(n):
                        with b.if_then(b.icmp_signed("<", i64(r0 + r), valid)):
                            factor = splat(b, b.load(gep(b, inv, r0 + r)), lanes)
                            o_row = gep(b, ob, b.add(b.mul(i64(r0 + r), a["OR"]), c0))
                            values = [b.fmul(acc[r][c].get(), factor) for c in range(COL_VECTORS)]
                            with b.if_else(full) as (then, other):
                                with then:
                                    for c, value in enumerate(values):
                                        store_vec(b, value, gep(b, o_row, c * lanes))
                                with other:
                                    for c, value in enumerate(values):
                                        store_vec(b, value, gep(b, spill, c * lanes))
                                    with for_range(b, 0, b.sub(ev_n, c0), name="ocol") as c:
                                        b.store(b.load(gep(b, spill, c)), gep(b, o_row, c))
    b.ret_void()
    return str(module)


def _softmax_column(b: ir.IRBuilder, column: ir.Value, stride: int, query: ir.Value, keys: ir.Value,
                    causal: ir.Value, inv_at: ir.Value, tag: int) -> None:
    """Softmax down one vector of queries' columns of sᵀ (``keys`` rows, ``stride`` elements apart),
    in place, and 1/sum at ``inv_at``; ``query`` holds the queries' row numbers for the causal mask."""
    lanes = query.type.count
    vt = vec(column.type.pointee, lanes)
    zero, ninf = const(vt, 0.0), const(vt, -math.inf)

    def sweep(name: str, body: Any) -> None:
        with b.if_else(causal) as (masked, plain):
            for mask, branch in ((True, masked), (False, plain)):
                with branch, for_range(b, 0, keys, name=f"{name}{tag}{int(mask)}") as j:
                    at = gep(b, column, b.mul(j, i64(stride)))
                    x = load_vec(b, at, lanes)
                    if mask:
                        later = b.icmp_signed(">", splat(b, b.trunc(j, I32), lanes), query)
                        x = b.select(later, ninf, x)
                    body(at, x)

    top = Slot(b, vt, ninf)
    sweep("sm", lambda at, x: top.set(b.select(b.fcmp_ordered(">", x, top.get()), x, top.get())))
    shift = b.select(b.fcmp_ordered("==", top.get(), ninf), zero, top.get())
    total = Slot(b, vt, zero)

    def exp(at: ir.Value, x: ir.Value) -> None:
        p = mathlib.emit_exp(b, b.fsub(x, shift))
        store_vec(b, p, at)
        total.set(b.fadd(total.get(), p))

    sweep("se", exp)
    t = total.get()
    store_vec(b, b.select(b.fcmp_unordered("<=", t, zero), zero, b.fdiv(const(vt, 1.0), t)), inv_at)


def job_address(dtype: str) -> int:
    """The address of the compiled job ``void attention(i64* frame)`` for ``dtype``; JIT regions call it."""
    return native_library(("attention", dtype), lambda: _build_ir(dtype)).address("attention")


def job_flops(b: Any, length: Any, source: Any, e: Any, ev: Any) -> Any:
    """Multiply-adds ×2 of the two products: the pool's measure of how many threads a call is worth."""
    return 2 * b * length * source * (e + ev)


def attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, out: np.ndarray, scale: float, causal: bool) -> None:
    """``out = softmax(q·kᵀ·scale [causal]) · v`` for 3-D arrays [B, L, E], [B, S, E], [B, S, Ev] and
    [B, L, Ev] of one float dtype, each with unit stride in its last dim."""
    name = common_float_name(q, k, v, out)
    assert name is not None
    (batch, length, e), source, ev = q.shape, k.shape[1], v.shape[2]
    slot = scratch_bytes(e, source, ev, name)
    scratch = np.empty(slot * POOL.threads, np.uint8)
    qs, ks, vs, os_ = ([s // q.itemsize for s in x.strides[:2]] for x in (q, k, v, out))
    frame = FRAME.pack(
        q=ptr(q), k=ptr(k), v=ptr(v), out=ptr(out), scratch=ptr(scratch), B=batch, L=length, S=source, E=e,
        EV=ev, QB=qs[0], QR=qs[1], KB=ks[0], KR=ks[1], VB=vs[0], VR=vs[1], OB=os_[0], OR=os_[1],
        scale=f64_bits(scale), causal=int(causal), slot_bytes=slot)
    POOL.run(job_address(name), frame, flops=job_flops(batch, length, source, e, ev))


def _rows(x: np.ndarray) -> np.ndarray:
    """``x`` as [batch, rows, features] with dense rows (a view when numpy can, else a copy)."""
    x3 = x.reshape(-1, *x.shape[-2:])
    if x3.strides[-1] != x3.itemsize or any(s % x3.itemsize for s in x3.strides):
        x3 = np.ascontiguousarray(x3)
    return x3


def applies(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> bool:
    """q, k, v with the same batch dims and none empty (an explicit mask passed at run time goes to
    the reference)."""
    return attention_dims(shapes) is not None


def nbytes(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> float:
    """q, k, v read once and the output written once (float32): the scores never leave the cache."""
    dims = attention_dims(shapes)
    if dims is None:
        return 0.0
    batch, length, _, _, ev = dims
    return 4.0 * (sum(math.prod(s) for s in shapes[:3]) + batch * length * ev)


def make(attrs: Mapping[str, Any]) -> Kernel:
    """The ``fused`` kernel: ``kernel(q, k, v, attn_mask=None)`` like the reference."""
    reference = get_op("scaled_dot_product_attention").kernel
    is_causal, scale = bool(attrs.get("is_causal", False)), attrs.get("scale")

    def kernel(q: np.ndarray, k: np.ndarray, v: np.ndarray,
               attn_mask: np.ndarray | None = None) -> np.ndarray:
        dims = attention_dims((q.shape, k.shape, v.shape))
        if attn_mask is not None or dims is None or common_float_name(q, k, v) is None:
            return reference(q, k, v, attn_mask, is_causal=is_causal, scale=scale)
        batch, length, _, e, ev = dims
        out = np.empty((*q.shape[:-2], length, ev), q.dtype)
        factor = 1 / math.sqrt(e) if scale is None else scale
        attend(_rows(q), _rows(k), _rows(v), out.reshape(batch, length, ev), factor, is_causal)
        return out

    return kernel
