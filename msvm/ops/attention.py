"""scaled_dot_product_attention: PyTorch's ``F.scaled_dot_product_attention`` (inference, no dropout).

``softmax(q @ k^T * scale + mask) @ v`` over ``[..., L, E] x [..., S, E] x [..., S, Ev]``, batch
dims broadcast. A bool mask keeps the positions where it is True, a float mask is added, and
``is_causal`` keeps the lower triangle of the (L, S) matrix aligned top-left, as in torch. A row
whose scores are all masked gives zeros, as torch's safe softmax does (since 2.5), not NaN.
"""

from __future__ import annotations

import math

import numpy as np

from ..shapes import ShapeSpec
from .nn_common import NN, NnOpDef, common_float_dtype, only, require_rank, require_same
from .registry import Attr, InferContext, OpTypeError, TensorType, register

_OP = "scaled_dot_product_attention"


def _sdpa_infer(ctx: InferContext, q: TensorType, k: TensorType, v: TensorType,
                attn_mask: TensorType | None = None, *, is_causal: bool, scale: float | None) -> TensorType:
    dtype = common_float_dtype(_OP, query=q, key=k, value=v)
    for name, t in (("query", q), ("key", k), ("value", v)):
        require_rank(_OP, name, t, range(2, 64), "[..., seq, features] (rank >= 2)")
    length, embed = q.shape[-2:]
    source, key_embed = k.shape[-2:]
    require_same(ctx, key_embed, embed, f"{_OP}: key vs query feature dim",
                 "q and k must share their last dim E")
    require_same(ctx, v.shape[-2], source, f"{_OP}: value vs key sequence length",
                 "k and v must have the same sequence length S")
    batch = ctx.broadcast(q.shape[:-2], k.shape[:-2], v.shape[:-2], what=f"{_OP} batch broadcast")
    if attn_mask is not None:
        if is_causal:
            raise OpTypeError("ATTR-VALUE", f"{_OP}: attn_mask given together with is_causal=True",
                              "pass one of them (torch rejects both)")
        if attn_mask.dtype not in ("bool", dtype):
            raise OpTypeError("DTYPE", f"{_OP}: attn_mask must be bool or {dtype}, got {attn_mask.dtype}",
                              "a bool mask keeps True positions, a float mask is added to the scores")
        _require_broadcasts_to(ctx, attn_mask.shape, ShapeSpec([*batch, length, source]))
    return TensorType(ShapeSpec([*batch, length, v.shape[-1]]), dtype)


def _require_broadcasts_to(ctx: InferContext, mask: ShapeSpec, scores: ShapeSpec) -> None:
    """The mask is added to the [..., L, S] scores in place (torch): it may broadcast, not grow them."""
    hint = "the mask must broadcast to the attention scores [..., L, S]"
    offset = scores.rank - mask.rank
    if offset < 0:
        raise OpTypeError("RANK", f"{_OP}: attn_mask {mask} has more dims than the scores {scores}", hint)
    for i, d in enumerate(mask):
        if d != 1:
            require_same(ctx, d, scores[offset + i], f"{_OP}: attn_mask dim {i} vs scores dim {offset + i}",
                         hint)


def _sdpa(q: np.ndarray, k: np.ndarray, v: np.ndarray, attn_mask: np.ndarray | None = None, *,
          is_causal: bool = False, scale: float | None = None) -> np.ndarray:
    t = q.dtype.type
    factor = t(1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    # a contiguous k^T keeps numpy's stacked matmul on BLAS (a transposed view falls off it)
    scores = np.matmul(q, np.ascontiguousarray(np.swapaxes(k, -1, -2))) * factor
    if is_causal:
        attn_mask = np.tril(np.ones(scores.shape[-2:], dtype=bool))
    if attn_mask is not None:
        scores = np.where(attn_mask, scores, t(-np.inf)) if attn_mask.dtype == bool else scores + attn_mask
    top = scores.max(axis=-1, keepdims=True, initial=-np.inf)
    e = np.exp(scores - np.where(np.isneginf(top), t(0), top))
    total = e.sum(axis=-1, keepdims=True)
    weights = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    return np.matmul(weights, v)


register(NnOpDef(
    name=_OP, inputs=("query", "key", "value", "attn_mask"),
    attrs={"is_causal": Attr("bool", False, doc="mask out keys after each query (lower triangle, top-left)"),
           "scale": Attr("float", None, doc="score scale; None = 1/sqrt(E)")},
    infer=_sdpa_infer, kernel=_sdpa, traits=NN | {"linalg"}, optional_inputs=1,
    params=("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "*", "scale", "enable_gqa"),
    call_only={"dropout_p": only(0.0, "msvm runs inference only: no dropout (dropout_p=0.0)"),
               "enable_gqa": only(False, "repeat the key and value heads to the query's head count first")},
    doc="softmax(q @ k^T * scale + mask) @ v (torch F.scaled_dot_product_attention, no dropout)",
))
