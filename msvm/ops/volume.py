"""3-D convolution and pooling (torch's F.conv3d, F.max_pool3d, F.avg_pool3d; NCDHW) on the 2-D kernels.

Why depth taps over the 2-D ops: a 3-D window is a stack of 2-D windows, one per kernel depth tap. For
tap ``t`` the input planes each output depth reads (``t*dilation + o*stride`` of the depth-padded
input) are gathered by one strided slice, folded into the batch, and handed to the 2-D reference
kernel (conv2d, max_pool2d, avg_pool2d); the taps are then summed (convolution), maxed (max pooling) or
summed and divided by the depth part of the divisor (average pooling: torch's divisor is the product of
each axis's window count). So the 2-D kernels' im2col and padding rules are the only ones, and a 3-D op
costs KD calls of them, never a loop over positions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..shapes import Dim, ShapeSpec
from .nn_common import (
    NN,
    NnOpDef,
    common_float_dtype,
    only,
    require_at_least,
    require_divisible,
    require_positive,
    require_rank,
    require_same,
    require_vector,
    window_count,
)
from .pooling import _CEIL, POOLING, _avg_counts, pool_geometry
from .registry import REGISTRY, Attr, InferContext, OpTypeError, TensorType, register

Triple = tuple[int, int, int]


def volume_input(op: str, x: TensorType) -> tuple[list[Dim], Dim, list[Dim]]:
    """(batch dims, C, [D, H, W]) of an NCDHW input; torch's unbatched CDHW form has no batch dims."""
    require_rank(op, "input", x, (4, 5), "[N, C, D, H, W] or unbatched [C, D, H, W]")
    dims = list(x.shape)
    return dims[:-4], dims[-4], dims[-3:]


def _batched(kernel: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """Let an NCDHW kernel take the unbatched CDHW input too (a batch of one, removed after)."""

    def wrapper(x: np.ndarray, *args: Any, **kwargs: Any) -> np.ndarray:
        return kernel(x[None], *args, **kwargs)[0] if x.ndim == 4 else kernel(x, *args, **kwargs)

    wrapper.__name__, wrapper.__doc__ = kernel.__name__, kernel.__doc__
    return wrapper


def _depth_taps(x: np.ndarray, out: int, kernel: int, stride: int, dilation: int, pad: int,
                fill: float) -> list[np.ndarray]:
    """Per depth tap, the planes the ``out`` output depths read, folded into the batch: [N*OD, C, H, W]."""
    n, c, d, h, w = x.shape
    need = (out - 1) * stride + (kernel - 1) * dilation + 1  # the padded depth the windows span
    hi = max(need - d - pad, 0)
    if pad or hi:
        x = np.pad(x, ((0, 0), (0, 0), (pad, hi), (0, 0), (0, 0)), constant_values=np.array(fill, x.dtype))
    taps = []
    for t in range(kernel):
        planes = x[:, :, t * dilation:t * dilation + (out - 1) * stride + 1:stride]
        taps.append(planes.transpose(0, 2, 1, 3, 4).reshape(n * out, c, h, w))
    return taps


def _unfold(y: np.ndarray, n: int, out: int) -> np.ndarray:
    """[N*OD, C, OH, OW] back to [N, C, OD, OH, OW]."""
    return np.ascontiguousarray(y.reshape(n, out, *y.shape[1:]).transpose(0, 2, 1, 3, 4))


# -- conv3d ---------------------------------------------------------------------------------------


def _conv3d_infer(ctx: InferContext, x: TensorType, weight: TensorType, bias: TensorType | None = None, *,
                  stride: Triple, padding: Triple, dilation: Triple, groups: int) -> TensorType:
    op = "conv3d"
    dtype = common_float_dtype(op, input=x, weight=weight, bias=bias)
    batch, c_in, spatial = volume_input(op, x)
    require_rank(op, "weight", weight, (5,), "[C_out, C_in/groups, KD, KH, KW]")
    c_out, c_group, *kernel = weight.shape
    require_at_least(op, "stride", stride, 1)
    require_at_least(op, "dilation", dilation, 1)
    require_at_least(op, "groups", (groups,), 1)
    require_at_least(op, "padding", padding, 0)
    require_same(ctx, c_in, c_group * groups, f"{op}: input channels vs weight.shape[1] * groups ({groups})",
                 "the input's channels must equal weight.shape[1] * groups (in_channels / groups per group)")
    require_divisible(ctx, c_out, groups, f"{op}: output channels (weight.shape[0])",
                      "out_channels must be divisible by groups")
    require_vector(ctx, op, "bias", bias, c_out)
    out = []
    for axis, size, k, s, d, p in zip("DHW", spatial, kernel, stride, dilation, padding):
        n = window_count(size, k, s, p, p, d)
        require_positive(ctx, n, f"{op} output {axis}",
                         f"the dilated kernel (dilation*(k-1)+1 with k = {k}) is larger than the padded "
                         f"input ({size} + 2*{p})")
        out.append(n)
    return TensorType(ShapeSpec([*batch, c_out, *out]), dtype)


@_batched
def _conv3d(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None, *,
            stride: Triple = (1, 1, 1), padding: Triple = (0, 0, 0), dilation: Triple = (1, 1, 1),
            groups: int = 1) -> np.ndarray:
    """The sum over depth taps of conv2d(planes of tap t, weight[:, :, t])."""
    kd = weight.shape[2]
    out = window_count(x.shape[2], kd, stride[0], padding[0], padding[0], dilation[0]).value
    conv2d = REGISTRY["conv2d"].kernel
    y = None
    for t, planes in enumerate(_depth_taps(x, out, kd, stride[0], dilation[0], padding[0], 0.0)):
        part = conv2d(planes, np.ascontiguousarray(weight[:, :, t]), None, stride=stride[1:],
                      padding=padding[1:], dilation=dilation[1:], groups=groups)
        y = part if y is None else y + part
    y = _unfold(y, x.shape[0], out)
    if bias is not None:
        y += bias.reshape(-1, 1, 1, 1)
    return y


_TRIPLE = "an int for D, H and W, or a triple (d, h, w)"

register(NnOpDef(
    name="conv3d", inputs=("input", "weight", "bias"),
    attrs={
        "stride": Attr("ints", (1, 1, 1), doc=_TRIPLE),
        "padding": Attr("ints", (0, 0, 0), doc=f"zero padding on both sides, {_TRIPLE}"),
        "dilation": Attr("ints", (1, 1, 1), doc=_TRIPLE),
        "groups": Attr("int", 1, doc="channel groups; groups == channels is a depthwise conv"),
    },
    infer=_conv3d_infer, kernel=_conv3d, traits=NN | {"linalg"}, optional_inputs=1,
    spread={"stride": 3, "padding": 3, "dilation": 3},
    doc="3-D convolution (torch F.conv3d): x [N, C_in, D, H, W] (or [C_in, D, H, W]), weight "
        "[C_out, C_in/groups, KD, KH, KW], optional bias [C_out]",
))


# -- pooling --------------------------------------------------------------------------------------


def _pool3d_infer(op: str) -> Callable[..., TensorType]:
    def infer(ctx: InferContext, x: TensorType, *, kernel_size: Triple, stride: Triple | None,
              padding: Triple, ceil_mode: bool, dilation: Triple = (1, 1, 1),
              divisor_override: int | None = None, **_: Any) -> TensorType:
        dtype = common_float_dtype(op, input=x)
        batch, c, spatial = volume_input(op, x)
        stride = pool_geometry(op, kernel_size, stride, padding, dilation)
        if divisor_override == 0:
            raise OpTypeError("ATTR-VALUE", f"{op}: divisor_override 0", "give None or a non-zero divisor")
        out = []
        for axis, size, k, s, p, d in zip("DHW", spatial, kernel_size, stride, padding, dilation):
            n = window_count(size, k, s, p, p, d, ceil_mode)
            require_positive(ctx, n, f"{op} output {axis}",
                             f"the window is larger than the padded input ({size} + 2*padding)")
            out.append(n)
        return TensorType(ShapeSpec([*batch, c, *out]), dtype)

    return infer


@_batched
def _max_pool3d(x: np.ndarray, *, kernel_size: Triple, stride: Triple | None = None,
                padding: Triple = (0, 0, 0), dilation: Triple = (1, 1, 1),
                ceil_mode: bool = False) -> np.ndarray:
    """The max over depth taps of max_pool2d(planes of tap t); depth padding is -inf, like the 2-D op's."""
    stride = kernel_size if stride is None else stride
    out = window_count(x.shape[2], kernel_size[0], stride[0], padding[0], padding[0], dilation[0],
                       ceil_mode).value
    pool2d = REGISTRY["max_pool2d"].kernel
    taps = _depth_taps(x, out, kernel_size[0], stride[0], dilation[0], padding[0], -np.inf)
    y = None
    for planes in taps:
        part = pool2d(planes, kernel_size=kernel_size[1:], stride=stride[1:], padding=padding[1:],
                      dilation=dilation[1:], ceil_mode=ceil_mode)
        y = part if y is None else np.maximum(y, part)  # NaN propagates, as in torch
    return _unfold(y, x.shape[0], out)


@_batched
def _avg_pool3d(x: np.ndarray, *, kernel_size: Triple, stride: Triple | None = None,
                padding: Triple = (0, 0, 0), ceil_mode: bool = False, count_include_pad: bool = True,
                divisor_override: int | None = None) -> np.ndarray:
    """The depth taps' 2-D averages summed, over the depth part of torch's divisor (or the override)."""
    stride = kernel_size if stride is None else stride
    k, s, p = kernel_size[0], stride[0], padding[0]
    n, d = x.shape[0], x.shape[2]
    out = window_count(d, k, s, p, p, 1, ceil_mode).value
    pool2d = REGISTRY["avg_pool2d"].kernel
    hw: dict[str, Any] = {"kernel_size": kernel_size[1:], "stride": stride[1:], "padding": padding[1:],
                          "ceil_mode": ceil_mode}
    if divisor_override is None:  # each 2-D average divides by its H*W count; the depth count is below
        hw["count_include_pad"] = count_include_pad
    else:  # the 2-D sums, then the override alone
        hw["divisor_override"] = 1
    total = None
    for planes in _depth_taps(x, out, k, s, 1, p, 0.0):
        part = pool2d(planes, **hw)
        total = part if total is None else total + part
    y = _unfold(total, n, out)
    if divisor_override is not None:
        return y / x.dtype.type(divisor_override)
    depth = _avg_counts(d, out, k, s, p, count_include_pad).astype(x.dtype)
    return y / depth.reshape(-1, 1, 1)


_POOL_ATTRS = {
    "kernel_size": Attr("ints", doc=f"window size, {_TRIPLE}"),
    "stride": Attr("ints", None, doc=f"window step, {_TRIPLE}; None = kernel_size"),
    "padding": Attr("ints", (0, 0, 0),
                    doc=f"implicit padding on both sides (at most kernel_size // 2), {_TRIPLE}"),
}
_TRIPLES = {"kernel_size": 3, "stride": 3, "padding": 3}

register(NnOpDef(
    name="max_pool3d", inputs=("input",),
    attrs={**_POOL_ATTRS, "dilation": Attr("ints", (1, 1, 1), doc=f"window dilation, {_TRIPLE}"), **_CEIL},
    infer=_pool3d_infer("max_pool3d"), kernel=_max_pool3d, traits=POOLING, spread={**_TRIPLES, "dilation": 3},
    call_only={"return_indices": only(False, "msvm's max_pool3d returns the values only")},
    doc="max over sliding 3-D windows (torch F.max_pool3d, without return_indices): [N, C, D, H, W] or "
        "[C, D, H, W]",
))
register(NnOpDef(
    name="avg_pool3d", inputs=("input",),
    attrs={**_POOL_ATTRS, **_CEIL,
           "count_include_pad": Attr("bool", True, doc="padding counts in the divisor"),
           "divisor_override": Attr("int", None, doc="divide every window sum by this instead")},
    infer=_pool3d_infer("avg_pool3d"), kernel=_avg_pool3d, traits=POOLING, spread=_TRIPLES,
    doc="mean over sliding 3-D windows (torch F.avg_pool3d): [N, C, D, H, W] or [C, D, H, W]",
))

__all__ = ["volume_input"]
