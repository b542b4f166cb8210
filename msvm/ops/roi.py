"""roi_align: torchvision.ops.roi_align, bilinear pooling of boxes out of an NCHW feature map.

Why it is written as matrices: every sample of torchvision's algorithm is a bilinear read whose
weight is a product of a y-part and an x-part, and its boundary rules (samples outside
[-1, size] contribute nothing, the rest clamp to the border) apply to each axis separately. So the
bins of a box are ``Ay @ image @ Ax.T``, with ``Ay [oh, H]`` and ``Ax [ow, W]`` summing each axis's
sample weights. That makes the kernel a few matmuls per image instead of Python loops over
samples, and it stays exact when the adaptive sampling grid differs from box to box. Coordinates
are computed in the input's dtype, in torchvision's order, so float32 samples land where
torchvision's land.
"""

from __future__ import annotations

import numpy as np

from ..shapes import ShapeSpec
from .nn_common import NN, NnOpDef, common_float_dtype, require_at_least, require_rank, require_same
from .registry import Attr, InferContext, TensorType, register


def _roi_align_infer(ctx: InferContext, x: TensorType, boxes: TensorType, *, output_size: tuple[int, int],
                     spatial_scale: float, sampling_ratio: int, aligned: bool) -> TensorType:
    dtype = common_float_dtype("roi_align", input=x, boxes=boxes)
    require_rank("roi_align", "input", x, (4,), "[N, C, H, W]")
    require_rank("roi_align", "boxes", boxes, (2,), "[K, 5] (batch index, x1, y1, x2, y2)")
    require_same(ctx, boxes.shape[1], 5, "roi_align: boxes.shape[1]",
                 "each box row is (batch index, x1, y1, x2, y2)")
    require_at_least("roi_align", "output_size", output_size, 1)
    return TensorType(ShapeSpec([boxes.shape[0], x.shape[1], *output_size]), dtype)


def axis_weights(start: np.ndarray, bin_size: np.ndarray, grid: np.ndarray, bins: int,
                 size: int) -> np.ndarray:
    """[K, bins, size]: the summed bilinear weights of each bin's samples along one axis.

    Sample ``i`` of bin ``p`` sits at ``start + p*bin + (i + .5)*bin/grid``; outside [-1, size] it
    counts for nothing, below 0 it clamps to 0, at or past the last pixel it reads the last pixel.
    """
    dtype = start.dtype
    t = dtype.type
    k = start.shape[0]
    samples = np.arange(max(int(grid.max(initial=0)), 1))
    col = (slice(None), None, None)
    p = np.arange(bins).astype(dtype)[None, :, None]
    offsets = (samples.astype(dtype) + t(0.5))[None, None, :]
    pos = (start[col] + p * bin_size[col]) + offsets * bin_size[col] / np.maximum(grid, 1).astype(dtype)[col]
    with np.errstate(invalid="ignore"):
        valid = (samples[None, None, :] < grid[col]) & (pos >= -1) & (pos <= size)
    pos = np.where(valid, np.maximum(pos, t(0)), t(0))
    low = pos.astype(np.int64)
    at_end = low >= size - 1
    low = np.where(at_end, size - 1, low)
    high = np.where(at_end, low, low + 1)
    frac = np.where(at_end, t(0), pos - low.astype(dtype))
    rows = (np.arange(k)[:, None, None] * bins + np.arange(bins)[None, :, None]) * size
    index = np.concatenate([(rows + low).ravel(), (rows + high).ravel()])
    weight = np.concatenate([np.where(valid, t(1) - frac, t(0)).ravel(), np.where(valid, frac, t(0)).ravel()])
    return np.bincount(index, weight, minlength=k * bins * size).reshape(k, bins, size).astype(dtype)


def _roi_align(x: np.ndarray, boxes: np.ndarray, *, output_size: tuple[int, int], spatial_scale: float = 1.0,
               sampling_ratio: int = -1, aligned: bool = False) -> np.ndarray:
    t = x.dtype.type
    n, c, h, w = x.shape
    oh, ow = output_size
    batch = boxes[:, 0].astype(np.int64)  # truncated like torchvision's int conversion
    if batch.size and (batch.min() < 0 or batch.max() >= n):
        raise IndexError(f"roi_align: box batch index out of range for a batch of {n}: "
                         f"{sorted(set(batch[(batch < 0) | (batch >= n)].tolist()))[:5]}")
    offset = t(0.5) if aligned else t(0)
    scale = t(spatial_scale)
    x1, y1, x2, y2 = (boxes[:, i] * scale - offset for i in range(1, 5))
    roi_w, roi_h = x2 - x1, y2 - y1
    if not aligned:
        roi_w, roi_h = np.maximum(roi_w, t(1)), np.maximum(roi_h, t(1))
    bin_h, bin_w = roi_h / t(oh), roi_w / t(ow)
    if sampling_ratio > 0:
        grid_h = grid_w = np.full(len(boxes), sampling_ratio, dtype=np.int64)
    else:
        with np.errstate(invalid="ignore"):
            grid_h, grid_w = (np.nan_to_num(np.ceil(b)).astype(np.int64) for b in (bin_h, bin_w))
    count = np.maximum(grid_h * grid_w, 1).astype(x.dtype)
    ay = axis_weights(y1, bin_h, grid_h, oh, h)
    ax = axis_weights(x1, bin_w, grid_w, ow, w)
    out = np.zeros((len(boxes), c, oh, ow), dtype=x.dtype)
    for b in np.unique(batch):  # one pass per image: [k, 1, oh, H] @ [C, H, W] @ [k, 1, W, ow]
        sel = np.flatnonzero(batch == b)
        ax_t = np.ascontiguousarray(ax[sel].transpose(0, 2, 1))
        out[sel] = np.matmul(np.matmul(ay[sel][:, None], x[b]), ax_t[:, None])
    out /= count[:, None, None, None]
    return out


register(NnOpDef(
    name="roi_align", inputs=("input", "boxes"),
    attrs={
        "output_size": Attr("ints", doc="(oh, ow) bins per box, or an int for both"),
        "spatial_scale": Attr("float", 1.0, doc="box coordinates are multiplied by this (feature stride)"),
        "sampling_ratio": Attr("int", -1,
                               doc="samples per bin and axis; <= 0: ceil(box size / bins), per box"),
        "aligned": Attr("bool", False, doc="shift boxes by -0.5 pixel (pixel-centre aligned)"),
    },
    infer=_roi_align_infer, kernel=_roi_align, traits=NN, spread={"output_size": 2},
    doc="torchvision.ops.roi_align: x [N, C, H, W], boxes [K, 5] (batch index, x1, y1, x2, y2) -> "
        "[K, C, oh, ow]",
))

__all__ = ["axis_weights"]
