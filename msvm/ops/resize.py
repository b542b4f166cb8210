"""Spatial resizing of NCHW tensors: resize_nearest (the article's ResizeNearestNeighbor) and
resize_bilinear, with the semantics of ``F.interpolate(mode="nearest" | "bilinear")``.

Why the output size is symbolic: a resize whose ``size`` comes from scalar registers has exactly
those dims as its output (``H*2`` computed with SCALAR_OP mul stays anchored); a ``scale_factor``
gives ``floor(in * scale)``, an exact integer expression when the scale is a short binary fraction
(0.5, 1.5, 2.0, ...) and ``?`` for symbolic inputs otherwise, because torch's double rounding is
not an integer expression. Why source indices are computed in float32: torch does (nearest always,
bilinear in the input's precision), and an index that rounds differently picks another pixel.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..shapes import UNKNOWN, Dim, ShapeSpec, as_dim
from .nn_common import NN, NnOpDef, common_float_dtype, require_positive, require_rank
from .registry import Attr, InferContext, OpTypeError, TensorType, register

# A scale num/2**k gives an exact floor((in*num)//2**k) for every in below 2**53 / num.
_MAX_EXACT_NUMERATOR = 2**20


def scaled_size(size: Dim | int, scale: float) -> Dim:
    """``floor(size * scale)`` as torch computes it (a double product), symbolic where exact."""
    size = as_dim(size)
    if size.is_const:
        return as_dim(math.floor(size.value * scale))
    num, den = float(scale).as_integer_ratio()
    if size.is_unknown or num > _MAX_EXACT_NUMERATOR:
        return UNKNOWN
    return (size * num) // den


def resize_sizes(h: Dim | int, w: Dim | int, size: Sequence[Any] | None,
                 scale_factor: Sequence[float] | None) -> list[Dim]:
    """The output (H, W): the size dims themselves, or the scaled input dims."""
    if size is not None:
        return [as_dim(d) for d in size]
    return [scaled_size(d, s) for d, s in zip((h, w), scale_factor)]


def _resize_infer(op: str, float_only: bool) -> Callable[..., TensorType]:
    def infer(ctx: InferContext, x: TensorType, *, size: Sequence[Any] | None,
              scale_factor: Sequence[float] | None, **_: Any) -> TensorType:
        require_rank(op, "input", x, (4,), "[N, C, H, W]")
        dtype = common_float_dtype(op, input=x) if float_only else x.dtype
        if (size is None) == (scale_factor is None):
            raise OpTypeError("ATTR-VALUE", f"{op}: give exactly one of size and scale_factor",
                              "size=(h, w) for a fixed output, scale_factor=(sh, sw) to scale the input")
        if scale_factor is not None and not all(s > 0 for s in scale_factor):
            raise OpTypeError("ATTR-VALUE", f"{op}: scale_factor {tuple(scale_factor)} must be > 0",
                              "a scale multiplies the input size; use a positive factor")
        n, c, h, w = x.shape
        out = resize_sizes(h, w, size, scale_factor)
        for axis, d in zip("HW", out):
            require_positive(ctx, d, f"{op} output {axis}", "output sizes must be >= 1 (torch rejects 0)",
                             code="ATTR-VALUE")
        return TensorType(ShapeSpec([n, c, *out]), dtype)

    return infer


def _concrete_sizes(x: np.ndarray, size: Sequence[int] | None,
                    scale_factor: Sequence[float] | None) -> list[int]:
    return [d.value for d in resize_sizes(*x.shape[2:], size, scale_factor)]


def _per_axis(scale_factor: Sequence[float] | None) -> Sequence[float | None]:
    return (None, None) if scale_factor is None else scale_factor


def _inverse_scale(t: type, size: int, out: int, scale: float | None) -> np.floating:
    """Input pixels per output pixel in the type ``t``: 1/scale_factor when given, else size/out.

    As in torch's kernels, an axis whose size does not change is copied: its scale_factor (say 1.3
    on a size that floors back to itself) is ignored.
    """
    if scale is not None and scale > 0 and out != size:
        return t(1.0 / scale)
    return t(size) / t(out)


# -- nearest ------------------------------------------------------------------------------------------


def nearest_index(size: int, out: int, scale: float | None) -> np.ndarray:
    """Source index of each output position (torch's nearest_idx, float32 arithmetic)."""
    if out == size:
        return np.arange(out)
    if out == 2 * size:
        return np.arange(out) >> 1
    step = _inverse_scale(np.float32, size, out, scale)
    src = np.floor(np.arange(out, dtype=np.float32) * step).astype(np.int64)
    return np.minimum(src, size - 1)


def _resize_nearest(x: np.ndarray, *, size: Sequence[int] | None = None,
                    scale_factor: Sequence[float] | None = None) -> np.ndarray:
    oh, ow = _concrete_sizes(x, size, scale_factor)
    sh, sw = _per_axis(scale_factor)
    rows = np.take(x, nearest_index(x.shape[2], oh, sh), axis=2)
    return np.take(rows, nearest_index(x.shape[3], ow, sw), axis=3)


_SIZE = Attr("dims", None, doc="output (H, W), an int for both; may name scalar registers")
_SCALE = Attr("floats", None, doc="(sh, sw) or one float: output = floor(input * scale)")
_RESIZE_SPREAD = {"size": 2, "scale_factor": 2}

register(NnOpDef(
    name="resize_nearest", inputs=("input",), attrs={"size": _SIZE, "scale_factor": _SCALE},
    infer=_resize_infer("resize_nearest", float_only=False), kernel=_resize_nearest,
    traits=NN | {"layout"}, spread=_RESIZE_SPREAD,
    doc="nearest-neighbour resize of [N, C, H, W] (F.interpolate mode='nearest'); any dtype",
))


# -- bilinear -----------------------------------------------------------------------------------------


def linear_taps(size: int, out: int, scale: float | None, align_corners: bool,
                dtype: np.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(index0, index1, weight0, weight1) per output position, torch's upsample_bilinear2d rules."""
    t = np.dtype(dtype).type
    dst = np.arange(out).astype(dtype)
    if align_corners:
        step = t(size - 1) / t(out - 1) if out > 1 else t(0)
        src = step * dst
    else:
        src = _inverse_scale(t, size, out, scale) * (dst + t(0.5)) - t(0.5)
        src = np.maximum(src, t(0))  # positions left of the first pixel centre clamp to it
    i0 = np.minimum(np.floor(src).astype(np.int64), size - 1)
    lam = np.clip(src - i0.astype(dtype), t(0), t(1))
    i1 = i0 + (i0 < size - 1)
    return i0, i1, (t(1) - lam), lam


def _resize_bilinear(x: np.ndarray, *, size: Sequence[int] | None = None,
                     scale_factor: Sequence[float] | None = None, align_corners: bool = False) -> np.ndarray:
    """Separable: interpolate along W, then along H (torch's order of operations)."""
    oh, ow = _concrete_sizes(x, size, scale_factor)
    sh, sw = _per_axis(scale_factor)
    i0, i1, w0, w1 = linear_taps(x.shape[3], ow, sw, align_corners, x.dtype)
    rows = np.take(x, i0, axis=3) * w0 + np.take(x, i1, axis=3) * w1
    i0, i1, w0, w1 = linear_taps(x.shape[2], oh, sh, align_corners, x.dtype)
    return np.take(rows, i0, axis=2) * w0[:, None] + np.take(rows, i1, axis=2) * w1[:, None]


register(NnOpDef(
    name="resize_bilinear", inputs=("input",),
    attrs={"size": _SIZE, "scale_factor": _SCALE,
           "align_corners": Attr("bool", False, doc="map corner pixel centres onto each other")},
    infer=_resize_infer("resize_bilinear", float_only=True), kernel=_resize_bilinear, traits=NN,
    spread=_RESIZE_SPREAD,
    doc="bilinear resize of [N, C, H, W] (F.interpolate mode='bilinear'); float32/float64",
))

__all__ = ["linear_taps", "nearest_index", "resize_sizes", "scaled_size"]
