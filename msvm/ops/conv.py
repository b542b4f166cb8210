"""conv2d: PyTorch's ``F.conv2d`` (NCHW, cross-correlation), with groups, dilation and "same" padding.

Why im2col: the reference kernel is the oracle and the interpreter's fallback, so it must be right
first and usable on a real CNN second. Gathering the windows with ``sliding_window_view`` (a view,
no Python loops) and contracting them with one BLAS matmul per group gives both; groups, depthwise
included, are a reshape of the channel axis. The JIT owns the fast direct/blocked kernels.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..shapes import ShapeSpec
from .nn_common import (
    NN,
    DimLike,
    NnOpDef,
    common_float_dtype,
    require_at_least,
    require_divisible,
    require_positive,
    require_rank,
    require_same,
    require_vector,
    sliding_windows,
    spatial_input,
    unbatched,
    window_count,
)
from .registry import Attr, InferContext, OpTypeError, TensorType, register

PaddingSpec = tuple[int, int] | str


def conv_padding(padding: PaddingSpec, kernel: Sequence[DimLike],
                 dilation: Sequence[int]) -> list[tuple[DimLike, DimLike]]:
    """(before, after) padding per spatial dim; "same" puts the odd extra element after, like torch."""
    if padding == "valid":
        return [(0, 0), (0, 0)]
    if padding == "same":
        pads = []
        for k, d in zip(kernel, dilation):
            total = (k - 1) * d
            pads.append((total // 2, total - total // 2))
        return pads
    return [(p, p) for p in padding]


def _conv2d_infer(ctx: InferContext, x: TensorType, weight: TensorType, bias: TensorType | None = None, *,
                  stride: tuple[int, int], padding: PaddingSpec, dilation: tuple[int, int],
                  groups: int) -> TensorType:
    dtype = common_float_dtype("conv2d", input=x, weight=weight, bias=bias)
    batch, c_in, h, w = spatial_input("conv2d", x)
    require_rank("conv2d", "weight", weight, (4,), "[C_out, C_in/groups, KH, KW]")
    c_out, c_group, kh, kw = weight.shape
    require_at_least("conv2d", "stride", stride, 1)
    require_at_least("conv2d", "dilation", dilation, 1)
    require_at_least("conv2d", "groups", (groups,), 1)
    if isinstance(padding, tuple):
        require_at_least("conv2d", "padding", padding, 0)
    elif padding == "same" and stride != (1, 1):
        raise OpTypeError("ATTR-VALUE", f"conv2d: padding='same' with stride {stride}",
                          "torch supports 'same' only for stride 1; give explicit padding for strided convs")
    require_same(ctx, c_in, c_group * groups,
                 f"conv2d: input channels vs weight.shape[1] * groups ({groups})",
                 "the input's channels must equal weight.shape[1] * groups (in_channels / groups per group)")
    require_divisible(ctx, c_out, groups, "conv2d: output channels (weight.shape[0])",
                      "out_channels must be divisible by groups")
    require_vector(ctx, "conv2d", "bias", bias, c_out)
    out = []
    for axis, size, k, s, d, (lo, hi) in zip("HW", (h, w), (kh, kw), stride, dilation,
                                              conv_padding(padding, (kh, kw), dilation)):
        n = window_count(size, k, s, lo, hi, d)
        require_positive(ctx, n, f"conv2d output {axis}",
                         f"the dilated kernel (dilation*(k-1)+1 with k = {k}) is larger than the padded "
                         f"input ({size} + {lo} + {hi})")
        out.append(n)
    return TensorType(ShapeSpec([*batch, c_out, *out]), dtype)


@unbatched
def _conv2d(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None, *,
            stride: tuple[int, int] = (1, 1), padding: PaddingSpec = (0, 0),
            dilation: tuple[int, int] = (1, 1), groups: int = 1) -> np.ndarray:
    """im2col + one matmul per group: [G, C_out/G, C/G*KH*KW] @ [G, C/G*KH*KW, N*OH*OW].

    The column matrix keeps the output positions innermost, so gathering it copies whole rows.
    """
    n = x.shape[0]
    c_out, c_group, kh, kw = weight.shape
    pads = conv_padding(padding, (kh, kw), dilation)
    oh, ow = (window_count(size, k, s, lo, hi, d).value
              for size, k, s, d, (lo, hi) in zip(x.shape[2:], (kh, kw), stride, dilation, pads))
    cols = sliding_windows(x, (oh, ow), (kh, kw), stride, dilation, [lo for lo, _ in pads], 0)
    g, per_group = groups, c_out // groups
    cols = cols.reshape(n, g, c_group, oh, ow, kh, kw).transpose(1, 2, 5, 6, 0, 3, 4)
    cols = cols.reshape(g, c_group * kh * kw, n * oh * ow)
    y = np.matmul(weight.reshape(g, per_group, c_group * kh * kw), cols)
    y = y.reshape(g, per_group, n, oh, ow).transpose(2, 0, 1, 3, 4)
    y = np.ascontiguousarray(y.reshape(n, c_out, oh, ow))
    if bias is not None:
        y += bias.reshape(c_out, 1, 1)
    return y


_PAIR_DOC = "an int for both H and W, or a pair (h, w)"

register(NnOpDef(
    name="conv2d", inputs=("input", "weight", "bias"),
    attrs={
        "stride": Attr("ints", (1, 1), doc=_PAIR_DOC),
        "padding": Attr("ints_or_str", (0, 0), choices=("same", "valid"),
                        doc=f"zero padding on both sides, {_PAIR_DOC}; or 'same' (stride 1) / 'valid'"),
        "dilation": Attr("ints", (1, 1), doc=_PAIR_DOC),
        "groups": Attr("int", 1, doc="channel groups; groups == channels is a depthwise conv"),
    },
    infer=_conv2d_infer, kernel=_conv2d, traits=NN | {"linalg"}, optional_inputs=1,
    spread={"stride": 2, "padding": 2, "dilation": 2},
    doc="2-D convolution (torch F.conv2d): x [N, C_in, H, W] (or [C_in, H, W]), weight "
        "[C_out, C_in/groups, KH, KW], optional bias [C_out]",
))

__all__ = ["conv_padding"]
