"""``scaled_dot_product_attention`` on the job pool: two batched GEMMs around an in-place row softmax.

Why: the reference spends most of its time outside arithmetic — numpy's stacked matmul on a contiguous
copy of k^T, a scaled copy of the scores, and five temporaries for the safe softmax (≈ 1.5 ms for 4
heads × 128² × 64 here, where the two GEMMs are worth ≈ 0.1 ms). This kernel reads q and k where they
lie (the pool GEMM packs k's rows as Bᵀ panels), folds the scale into the softmax (no pass of its own),
and runs the softmax in place on the one scores buffer with the native row kernel of ``rows`` (numpy's
max, exp, sum and divide along the rows cost ≈ 110 µs for 4 × 128²; the row kernel 90 on one core, 49 on
both). The heads land in [L, H, Ev] memory, as the JIT's do, so multi-head attention's ``.transpose(1,
0, 2).reshape(L, H * Ev)`` is a view, not a copy. The GEMMs run on the job pool, not OpenBLAS, whose
threads spin after each call and would take the second core from the pool's kernels around it
(``gemm_packed``). Explicit masks go to the reference; ``is_causal`` adds a cached −inf upper triangle
(one pass; boolean indexing costs 20× more).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..ops.registry import Kernel, get_op
from ..runtime import mempool
from . import gemm_packed
from .native import common_float_name
from .rows import softmax_rows


def _dims(shapes: Sequence[tuple[int, ...]]) -> tuple[int, int, int, int, int] | None:
    """(batch, L, S, E, Ev) when q, k, v share their batch dims (nothing broadcast) and none is empty."""
    if len(shapes) != 3 or any(len(s) < 2 for s in shapes):
        return None
    (q, k, v) = shapes
    if not (q[:-2] == k[:-2] == v[:-2]) or q[-1] != k[-1] or k[-2] != v[-2] or 0 in (*q, *k, *v):
        return None
    return math.prod(q[:-2]), q[-2], k[-2], q[-1], v[-1]


def applies(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> bool:
    """q, k, v with the same batch dims, none empty (an explicit mask passed at run time goes to the
    reference)."""
    return _dims(shapes) is not None


def flops(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> float:
    dims = _dims(shapes)
    if dims is None:
        return 0.0
    batch, length, source, e, ev = dims
    return 2.0 * batch * length * source * (e + ev)


def nbytes(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any]) -> float:
    """q, k, v read once, the output written once, the scores written and read back twice (float32)."""
    dims = _dims(shapes)
    if dims is None:
        return 0.0
    batch, length, source, _, ev = dims
    return 4.0 * (sum(math.prod(s) for s in shapes[:3]) + batch * length * ev + 4 * batch * length * source)


def workspace(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any], itemsize: int) -> int:
    """Bytes a call allocates besides its output: the scores [..., L, S] (and a causal mask as large)."""
    dims = _dims(shapes)
    if dims is None:
        return 0
    batch, length, source, _, _ = dims
    mask = length * source * (itemsize + 1) if attrs.get("is_causal") else 0
    return batch * length * source * itemsize + mask


def reference_workspace(shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, Any], itemsize: int) -> int:
    """The op's reference kernel (``msvm.ops.attention``): the scores, their exponentials and the weights
    are alive together, each [..., L, S] (any mask comes from the caller)."""
    if len(shapes) < 3 or any(len(s) < 2 for s in shapes[:3]):
        return 0
    q, k = shapes[0], shapes[1]
    batch = math.prod(np.broadcast_shapes(q[:-2], k[:-2]))
    return 3 * batch * q[-2] * k[-2] * itemsize


def make(attrs: Mapping[str, Any]) -> Kernel:
    """The ``pool`` kernel: ``kernel(q, k, v, attn_mask=None)`` like the reference."""
    reference = get_op("scaled_dot_product_attention").kernel
    is_causal, scale = bool(attrs.get("is_causal", False)), attrs.get("scale")
    causal_masks: dict[tuple, np.ndarray] = {}  # (L, S, dtype) -> additive mask, a few per call site

    def kernel(q: np.ndarray, k: np.ndarray, v: np.ndarray,
               attn_mask: np.ndarray | None = None) -> np.ndarray:
        dims = _dims((q.shape, k.shape, v.shape))
        if common_float_name(q, k, v) is None or attn_mask is not None or dims is None:
            return reference(q, k, v, attn_mask, is_causal=is_causal, scale=scale)
        factor = q.dtype.type(1 / math.sqrt(q.shape[-1]) if scale is None else scale)
        if not 0 < factor < np.inf:  # a mask's −inf times the factor must stay −inf: scale q instead
            q, factor = q * factor, q.dtype.type(1)
        scores = gemm_packed.matmul(q, k, b_transposed=True)
        if is_causal:
            key = (*scores.shape[-2:], scores.dtype)
            mask = causal_masks.get(key)
            if mask is None:
                if len(causal_masks) >= 16:
                    causal_masks.clear()
                upper = np.triu(np.ones(scores.shape[-2:], dtype=bool), 1)
                mask = causal_masks[key] = np.where(upper, scores.dtype.type(-np.inf), scores.dtype.type(0))
            scores += mask
        softmax_rows(scores, out=scores, scale=factor)  # row 0 keeps key 0 when causal: never all masked
        heads, length, ev = q.shape[:-2], dims[1], dims[4]
        if len(heads) == 0 or math.prod(heads[:-1]) != 1:
            return gemm_packed.matmul(scores, v)
        # heads [..., H, L, Ev] in [..., L, H, Ev] memory: ``.transpose(1, 0, 2).reshape(L, H * Ev)``,
        # how multi-head attention reads them, is then a view and not a copy
        out = np.swapaxes(mempool.kernel_empty((*heads[:-1], length, heads[-1], ev), q.dtype), -2, -3)
        gemm_packed.matmul(scores, v, out=out.reshape(heads[-1], length, ev))
        return out

    return kernel
