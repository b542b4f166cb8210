"""conv_transpose2d: PyTorch's ``F.conv_transpose2d`` (NCHW), the gradient of conv2d run forwards.

Why a scatter of one GEMM's columns: every input pixel multiplies the whole kernel and adds it into the
output at ``stride`` times its position (col2im, the reverse of conv2d's im2col). One matmul per group
gives every pixel's contribution ``[C_out/G, KH, KW]`` at once; the scatter is then one strided,
vectorised add per kernel tap (KH*KW of them), never a loop over pixels. ``padding`` crops the full
result on both sides and ``output_padding`` extends it at the end, exactly as torch sizes the output.
"""

from __future__ import annotations

import numpy as np

from ..shapes import ShapeSpec
from .nn_common import (
    NN,
    NnOpDef,
    common_float_dtype,
    require_at_least,
    require_divisible,
    require_positive,
    require_rank,
    require_same,
    require_vector,
    spatial_input,
    unbatched,
)
from .registry import Attr, InferContext, OpTypeError, TensorType, register


def _conv_transpose2d_infer(ctx: InferContext, x: TensorType, weight: TensorType,
                            bias: TensorType | None = None, *, stride: tuple[int, int],
                            padding: tuple[int, int], output_padding: tuple[int, int], groups: int,
                            dilation: tuple[int, int]) -> TensorType:
    op = "conv_transpose2d"
    dtype = common_float_dtype(op, input=x, weight=weight, bias=bias)
    batch, c_in, h, w = spatial_input(op, x)
    require_rank(op, "weight", weight, (4,), "[C_in, C_out/groups, KH, KW]")
    c_w, c_group, kh, kw = weight.shape
    require_at_least(op, "stride", stride, 1)
    require_at_least(op, "dilation", dilation, 1)
    require_at_least(op, "groups", (groups,), 1)
    require_at_least(op, "padding", padding, 0)
    require_at_least(op, "output_padding", output_padding, 0)
    for axis, extra, s, d in zip("HW", output_padding, stride, dilation):
        if extra >= max(s, d):  # torch's rule: a larger one would add rows no input pixel reaches
            raise OpTypeError("ATTR-VALUE", f"{op}: output_padding {extra} along {axis} with stride {s} "
                              f"and dilation {d}", "output_padding must be smaller than the stride or "
                              "the dilation")
    require_same(ctx, c_in, c_w, f"{op}: input channels vs weight.shape[0]",
                 "conv_transpose2d's weight is [in_channels, out_channels / groups, KH, KW]")
    require_divisible(ctx, c_in, groups, f"{op}: input channels", "in_channels must be divisible by groups")
    c_out = c_group * groups
    require_vector(ctx, op, "bias", bias, c_out)
    out = []
    for axis, size, k, s, d, p, extra in zip("HW", (h, w), (kh, kw), stride, dilation, padding,
                                             output_padding):
        n = (size - 1) * s - 2 * p + (k - 1) * d + extra + 1
        require_positive(ctx, n, f"{op} output {axis}",
                         f"the padding ({p} on each side) crops away the whole output")
        out.append(n)
    return TensorType(ShapeSpec([*batch, c_out, *out]), dtype)


@unbatched
def _conv_transpose2d(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None, *,
                      stride: tuple[int, int] = (1, 1), padding: tuple[int, int] = (0, 0),
                      output_padding: tuple[int, int] = (0, 0), groups: int = 1,
                      dilation: tuple[int, int] = (1, 1)) -> np.ndarray:
    """[G, C_out/G*KH*KW, C_in/G] @ [G, C_in/G, N*H*W], each tap's columns added at stride into the output."""
    n, c_in, h, w = x.shape
    _, c_group, kh, kw = weight.shape
    g, in_group = groups, c_in // groups
    (sh, sw), (dh, dw), (ph, pw) = stride, dilation, padding
    cols = np.matmul(
        weight.reshape(g, in_group, c_group * kh * kw).transpose(0, 2, 1),
        x.reshape(n, g, in_group, h * w).transpose(1, 2, 0, 3).reshape(g, in_group, n * h * w),
    ).reshape(g, c_group, kh, kw, n, h, w)
    full_h = (h - 1) * sh + (kh - 1) * dh + 1 + output_padding[0]
    full_w = (w - 1) * sw + (kw - 1) * dw + 1 + output_padding[1]
    full = np.zeros((n, g, c_group, full_h, full_w), dtype=np.result_type(x, weight))
    for i in range(kh):
        for j in range(kw):
            tap = cols[:, :, i, j].transpose(2, 0, 1, 3, 4)  # [N, G, C_out/G, H, W]
            full[:, :, :, i * dh:i * dh + (h - 1) * sh + 1:sh, j * dw:j * dw + (w - 1) * sw + 1:sw] += tap
    y = full.reshape(n, g * c_group, full_h, full_w)[:, :, ph:full_h - ph, pw:full_w - pw]
    y = np.ascontiguousarray(y)
    if bias is not None:
        y += bias.reshape(-1, 1, 1)
    return y


_PAIR_DOC = "an int for both H and W, or a pair (h, w)"

register(NnOpDef(
    name="conv_transpose2d", inputs=("input", "weight", "bias"),
    attrs={
        "stride": Attr("ints", (1, 1), doc=_PAIR_DOC),
        "padding": Attr("ints", (0, 0), doc=f"cropped from both sides of each output dim, {_PAIR_DOC}"),
        "output_padding": Attr(
            "ints", (0, 0), doc=f"added at the end of each output dim (< stride or dilation), {_PAIR_DOC}"
        ),
        "groups": Attr("int", 1, doc="channel groups: in and out channels both split into groups"),
        "dilation": Attr("ints", (1, 1), doc=_PAIR_DOC),
    },
    params=("input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation"),
    infer=_conv_transpose2d_infer, kernel=_conv_transpose2d, traits=NN | {"linalg"}, optional_inputs=1,
    spread={"stride": 2, "padding": 2, "output_padding": 2, "dilation": 2},
    doc="2-D transposed convolution (torch F.conv_transpose2d): x [N, C_in, H, W] (or [C_in, H, W]), "
        "weight [C_in, C_out/groups, KH, KW], optional bias [C_out]; H_out = (H-1)*stride - 2*padding "
        "+ dilation*(KH-1) + output_padding + 1",
))

__all__: list[str] = []
