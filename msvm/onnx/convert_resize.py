"""Importers of ONNX's Resize (opsets 10-19) and Upsample (7-9) onto resize_nearest / resize_bilinear.

Why only some coordinate modes: the registry's resize ops compute torch's source positions —
nearest is ``floor(dst / scale)`` (ONNX ``asymmetric`` + ``floor``, what torch exports for
``mode="nearest"``), bilinear is ``(dst + 0.5) / scale - 0.5`` clamped at 0 (ONNX ``half_pixel``, and
``pytorch_half_pixel`` wherever an output size is not 1) or ``align_corners``. Any other pairing
would be a silently different picture, so it is refused; the one exception is half-pixel nearest at
an integer upscale, whose rounding picks ``floor(dst / scale)`` exactly (the fraction stays inside
(-1/2, 1/2)).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .convert_tensor import fold_equal
from .graph import NodeCtx, Value, converter

_HALF_PIXEL = ("half_pixel", "pytorch_half_pixel")
_COORD = ("asymmetric", "align_corners", *_HALF_PIXEL)
_NEAREST = ("floor", "round_prefer_floor", "round_prefer_ceil", "ceil")


def _spatial(ctx: NodeCtx, values: list[Any], what: str, neutral: Any) -> list[Any]:
    """The last two entries of a per-axis list over N, C, H, W (or N, C, L): N and C must not change."""
    rank = ctx.rank(0)
    axes = ctx.attr("axes")
    if axes is not None:  # opset 18: the listed axes only; the others keep their size
        full = [neutral] * rank
        for a, v in zip(axes, values):
            full[a % rank] = v
        values = full
    if len(values) != rank:
        raise ctx.error(f"{what} {values} do not have one entry per input axis ({rank})")
    keep = ctx.dims(0)[:2] if what == "sizes" else [1.0, 1.0]
    if not all(v == k if what == "scales" else fold_equal(v, k) is True for v, k in zip(values[:2], keep)):
        raise ctx.error(
            f"{what} {values} resize the batch or channel axis", "resizing the spatial axes only"
        )
    return list(values[2:]) if rank == 4 else [1.0 if what == "scales" else 1, values[2]]


def _resize(ctx: NodeCtx, x: Value, mode: str, coord: str, nearest: str, scales: Any, sizes: Any) -> Value:
    rank = ctx.rank(0)
    if rank not in (3, 4):
        raise ctx.error(
            f"a {rank}-D {ctx.node.op_type} is not supported", "3-D (N, C, L) and 4-D (N, C, H, W)"
        )
    if rank == 3:
        x = ctx.call("unsqueeze", [x], {"axis": 2})
    attrs: dict[str, Any]
    if sizes is not None:
        attrs = {"size": tuple(_spatial(ctx, sizes, "sizes", None))}
        integral = False
    else:
        factors = [float(s) for s in _spatial(ctx, [float(s) for s in scales], "scales", 1.0)]
        attrs = {"scale_factor": tuple(factors)}
        integral = all(f >= 1 and f.is_integer() for f in factors)
    if mode == "nearest":
        exact = (coord == "asymmetric" and nearest == "floor") or (
            coord in _HALF_PIXEL and nearest.startswith("round") and integral
        )
        if not exact:
            raise ctx.error(
                f"nearest Resize with coordinate_transformation_mode={coord!r} and nearest_mode="
                f"{nearest!r} is not supported here",
                "asymmetric + floor (torch's nearest), or half_pixel + round_* at integer upscales",
            )
        y = ctx.call("resize_nearest", [x], attrs)
    else:
        if coord == "asymmetric":
            raise ctx.error(
                "linear Resize with asymmetric coordinates is not supported",
                "half_pixel, pytorch_half_pixel or align_corners",
            )
        if coord == "pytorch_half_pixel" and not _never_one(attrs):
            raise ctx.error(
                "pytorch_half_pixel where an output size may be 1 is not supported (it samples pixel 0 "
                "there, half_pixel the centre)",
                "half_pixel, or output sizes known to be above 1",
            )
        y = ctx.call("resize_bilinear", [x], {**attrs, "align_corners": coord == "align_corners"})
    return ctx.call("squeeze", [y], {"axis": 2}) if rank == 3 else y


def _never_one(attrs: dict[str, Any]) -> bool:
    """Whether every output size is above 1 for any input (pytorch_half_pixel differs only at 1)."""
    if "scale_factor" in attrs:
        return all(s >= 2 for s in attrs["scale_factor"])
    return all(isinstance(s, int) and s > 1 for s in attrs["size"])


@converter(
    "Resize",
    attrs={
        "mode": ("nearest", "linear"),
        "coordinate_transformation_mode": _COORD,
        "nearest_mode": _NEAREST,
        "cubic_coeff_a": None,  # read by cubic mode only
        "exclude_outside": (0,),
        "extrapolation_value": None,  # read by tf_crop_and_resize only
        "antialias": (0,),
        "axes": None,
        "keep_aspect_ratio_policy": ("stretch",),
    },
)
def _resize_node(ctx: NodeCtx) -> Value:
    mode = ctx.attr("mode", "nearest")
    if ctx.opset < 11:  # opset 10: (X, scales), Upsample's coordinates
        coord, nearest, scales, sizes = "asymmetric", "floor", ctx.const(1, "scales"), None
    else:
        coord = ctx.attr("coordinate_transformation_mode", "half_pixel")
        nearest = ctx.attr("nearest_mode", "round_prefer_floor")
        scales = ctx.optional_const(2, "scales")
        sizes = ctx.elems(3, "sizes") if ctx.has(3) else None
        if sizes is None and (scales is None or scales.size == 0):
            raise ctx.error("neither scales nor sizes is given", "one of scales and sizes")
        if sizes is not None and scales is not None and scales.size:
            raise ctx.error("both scales and sizes are given", "one of scales and sizes")
    return _resize(ctx, ctx.value(0), mode, coord, nearest, scales, sizes)


@converter("Upsample", attrs={"mode": ("nearest",), "scales": None})
def _upsample(ctx: NodeCtx) -> Value:
    # Upsample's linear mode samples at dst / scale (asymmetric), which no registry op computes.
    scales = ctx.attr("scales")
    scales = np.asarray(scales if scales is not None else ctx.const(1, "scales"), dtype=np.float64)
    return _resize(ctx, ctx.value(0), "nearest", "asymmetric", "floor", scales.reshape(-1), None)


__all__: list[str] = []
