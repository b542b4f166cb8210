"""2-D pooling with PyTorch's semantics: max_pool2d, avg_pool2d and adaptive_avg_pool2d (NCHW).

Why the details matter: pooled sizes decide every shape downstream, and torch's rules have corners
(ceil_mode's last window must start inside the input or the left padding; avg_pool2d's divisor
counts padding but not ceil_mode's overhang unless told otherwise). The shape function and the
kernels take the sizes from the same ``window_count`` formula, and the kernels are window views
reduced by numpy (no Python loops over positions).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..shapes import Dim, ShapeSpec, as_dim
from .nn_common import (
    NN,
    NnOpDef,
    common_float_dtype,
    only,
    require_at_least,
    require_nonnegative_attr,
    require_positive,
    sliding_windows,
    spatial_input,
    unbatched,
    window_count,
)
from .registry import Attr, InferContext, OpTypeError, TensorType, register

POOLING = NN | {"reduction"}
Pair = tuple[int, int]


def pool_geometry(op: str, kernel_size: Pair, stride: Pair | None, padding: Pair,
                  dilation: Pair = (1, 1)) -> Pair:
    """Check the window attributes (torch's rules) and return the stride (None = kernel_size)."""
    stride = kernel_size if stride is None else stride
    require_at_least(op, "kernel_size", kernel_size, 1)
    require_at_least(op, "stride", stride, 1)
    require_at_least(op, "padding", padding, 0)
    require_at_least(op, "dilation", dilation, 1)
    if any(p > k // 2 for p, k in zip(padding, kernel_size)):
        raise OpTypeError("ATTR-VALUE", f"{op}: padding {padding} exceeds half the kernel size {kernel_size}",
                          "torch requires padding <= kernel_size // 2 in each dim")
    return stride


def pooled_sizes(h: Dim | int, w: Dim | int, kernel_size: Pair, stride: Pair, padding: Pair,
                 dilation: Pair, ceil_mode: bool) -> list[Dim]:
    """Pooled (H, W): symbolic for the shape function, constants (``.value``) for the kernels."""
    return [window_count(size, k, s, p, p, d, ceil_mode)
            for size, k, s, p, d in zip((h, w), kernel_size, stride, padding, dilation)]


def _pool_infer(op: str) -> Callable[..., TensorType]:
    def infer(ctx: InferContext, x: TensorType, *, kernel_size: Pair, stride: Pair | None, padding: Pair,
              ceil_mode: bool, dilation: Pair = (1, 1), divisor_override: int | None = None,
              **_: Any) -> TensorType:
        dtype = common_float_dtype(op, input=x)
        batch, c, h, w = spatial_input(op, x)
        stride = pool_geometry(op, kernel_size, stride, padding, dilation)
        if divisor_override == 0:
            raise OpTypeError("ATTR-VALUE", f"{op}: divisor_override 0", "give None or a non-zero divisor")
        out = pooled_sizes(h, w, kernel_size, stride, padding, dilation, ceil_mode)
        for axis, size, n in zip("HW", (h, w), out):
            require_positive(ctx, n, f"{op} output {axis}",
                             f"the window is larger than the padded input ({size} + 2*padding)")
        return TensorType(ShapeSpec([*batch, c, *out]), dtype)

    return infer


def _windows(x: np.ndarray, kernel_size: Pair, stride: Pair | None, padding: Pair, dilation: Pair,
             ceil_mode: bool, fill: float) -> tuple[np.ndarray, list[int], Pair]:
    """The window view of ``x``, the output sizes and the effective stride."""
    stride = kernel_size if stride is None else stride
    out = [n.value for n in pooled_sizes(*x.shape[2:], kernel_size, stride, padding, dilation, ceil_mode)]
    return sliding_windows(x, out, kernel_size, stride, dilation, padding, fill), out, stride


@unbatched
def _max_pool2d(x: np.ndarray, *, kernel_size: Pair, stride: Pair | None = None, padding: Pair = (0, 0),
                dilation: Pair = (1, 1), ceil_mode: bool = False) -> np.ndarray:
    """Max over each window; padding is -inf so it never wins, and NaN propagates like torch."""
    view, _, _ = _windows(x, kernel_size, stride, padding, dilation, ceil_mode, -np.inf)
    return view.max(axis=(-2, -1))


def _avg_counts(size: int, out: int, kernel: int, stride: int, pad: int,
                count_include_pad: bool) -> np.ndarray:
    """Divisor of each window along one axis (torch's avg_pool2d: padding counts, overhang does not)."""
    start = np.arange(out) * stride - pad
    end = np.minimum(start + kernel, size + pad)
    if count_include_pad:
        return end - start
    return np.minimum(end, size) - np.maximum(start, 0)


@unbatched
def _avg_pool2d(x: np.ndarray, *, kernel_size: Pair, stride: Pair | None = None, padding: Pair = (0, 0),
                ceil_mode: bool = False, count_include_pad: bool = True,
                divisor_override: int | None = None) -> np.ndarray:
    view, out, stride = _windows(x, kernel_size, stride, padding, (1, 1), ceil_mode, 0)
    sums = view.sum(axis=(-2, -1))
    if divisor_override is not None:
        return sums / x.dtype.type(divisor_override)
    ch, cw = (_avg_counts(size, n, k, s, p, count_include_pad)
              for size, n, k, s, p in zip(x.shape[2:], out, kernel_size, stride, padding))
    return sums / (ch[:, None] * cw[None, :]).astype(x.dtype)


_PAIR = "an int for both H and W, or a pair (h, w)"
_WINDOW_ATTRS = {
    "kernel_size": Attr("ints", doc=f"window size, {_PAIR}"),
    "stride": Attr("ints", None, doc=f"window step, {_PAIR}; None = kernel_size"),
    "padding": Attr("ints", (0, 0),
                    doc=f"implicit padding on both sides (at most kernel_size // 2), {_PAIR}"),
}
_CEIL = {"ceil_mode": Attr("bool", False,
                           doc="round output sizes up (the last window starts inside the input)")}
_PAIRS = {"kernel_size": 2, "stride": 2, "padding": 2}

register(NnOpDef(
    name="max_pool2d", inputs=("input",),
    attrs={**_WINDOW_ATTRS, "dilation": Attr("ints", (1, 1), doc=f"window dilation, {_PAIR}"), **_CEIL},
    infer=_pool_infer("max_pool2d"), kernel=_max_pool2d, traits=POOLING, spread={**_PAIRS, "dilation": 2},
    call_only={"return_indices": only(False, "msvm's max_pool2d returns the values only")},
    doc="max over sliding windows (torch F.max_pool2d, without return_indices): [N, C, H, W] or [C, H, W]",
))
register(NnOpDef(
    name="avg_pool2d", inputs=("input",),
    attrs={**_WINDOW_ATTRS, **_CEIL,
           "count_include_pad": Attr("bool", True, doc="padding counts in the divisor"),
           "divisor_override": Attr("int", None, doc="divide every window sum by this instead")},
    infer=_pool_infer("avg_pool2d"), kernel=_avg_pool2d, traits=POOLING, spread=_PAIRS,
    doc="mean over sliding windows (torch F.avg_pool2d): [N, C, H, W] or [C, H, W]",
))


# -- adaptive average pooling ------------------------------------------------------------------------


def adaptive_matrix(size: int, out: int, dtype: np.dtype) -> np.ndarray:
    """[out, size] averaging matrix: row i averages [floor(i*size/out), ceil((i+1)*size/out))."""
    i = np.arange(out)
    start = (i * size) // out
    end = -((-(i + 1) * size) // out)
    j = np.arange(size)
    inside = (j >= start[:, None]) & (j < end[:, None])
    return (inside / (end - start)[:, None]).astype(dtype)


def _adaptive_infer(ctx: InferContext, x: TensorType, *, output_size: Sequence[Any]) -> TensorType:
    dtype = common_float_dtype("adaptive_avg_pool2d", input=x)
    batch, c, h, w = spatial_input("adaptive_avg_pool2d", x)
    out = [as_dim(d) for d in output_size]
    for d in out:
        require_nonnegative_attr(ctx, "adaptive_avg_pool2d", "output_size", d)
    for axis, size in zip("HW", (h, w)):
        require_positive(ctx, size, f"adaptive_avg_pool2d input {axis}", "the input must not be empty")
    return TensorType(ShapeSpec([*batch, c, *out]), dtype)


@unbatched
def _adaptive_avg_pool2d(x: np.ndarray, *, output_size: Pair) -> np.ndarray:
    """Separable: each axis is averaged by one matrix product (bins overlap when out > size)."""
    mh, mw = (adaptive_matrix(size, out, x.dtype) for size, out in zip(x.shape[2:], output_size))
    return np.matmul(np.matmul(mh, x), np.ascontiguousarray(mw.T))


register(NnOpDef(
    name="adaptive_avg_pool2d", inputs=("input",),
    attrs={"output_size": Attr("dims", doc=f"output (H, W): {_PAIR}; may name scalar registers")},
    infer=_adaptive_infer, kernel=_adaptive_avg_pool2d, traits=POOLING, spread={"output_size": 2},
    doc="average over adaptive bins [floor(i*H/oh), ceil((i+1)*H/oh)) (torch F.adaptive_avg_pool2d)",
))

__all__ = ["adaptive_matrix", "pool_geometry", "pooled_sizes"]
