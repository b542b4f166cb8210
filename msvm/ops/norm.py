"""Normalisation layers with PyTorch's semantics: batch_norm (inference), layer_norm and group_norm.

Why they share one kernel core: each normalises ``x`` with a mean and a biased variance over some
axes and then applies a per-element affine transform; only the axes and where the statistics come
from differ (running statistics for batch_norm, the data itself for the other two). Optional
weight/bias follow torch: absent means 1 and 0. An optional input can only be left out from the
end, so a bias needs a weight (pass ones).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..shapes import Dim, as_dim
from .nn_common import (
    NN,
    NnOpDef,
    common_float_dtype,
    ignored,
    only,
    require_divisible,
    require_rank,
    require_same,
    require_vector,
)
from .registry import Attr, InferContext, OpTypeError, TensorType, register

_EPS = Attr("float", 1e-5, doc="added to the variance before the square root")


def _standardize(x: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) over ``axes`` (biased variance, two passes for accuracy)."""
    mean = x.mean(axis=axes, keepdims=True)
    centered = x - mean
    var = np.mean(np.square(centered), axis=axes, keepdims=True)
    centered *= 1 / np.sqrt(var + x.dtype.type(eps))
    return centered


def _affine(y: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None,
            shape: Sequence[int]) -> np.ndarray:
    """y * weight + bias in place, the parameters reshaped to broadcast against y."""
    if weight is not None:
        y *= weight.reshape(shape)
    if bias is not None:
        y += bias.reshape(shape)
    return y


def _channel_shape(x: np.ndarray) -> tuple[int, ...]:
    """Shape that lines a per-channel [C] vector up with dim 1 of x."""
    return (x.shape[1],) + (1,) * (x.ndim - 2)


def _require_channels(op: str, x: TensorType) -> Dim:
    require_rank(op, "input", x, range(2, 64), "[N, C, ...] (rank >= 2)")
    return x.shape[1]


# -- batch_norm ---------------------------------------------------------------------------------------


def _batch_norm_infer(ctx: InferContext, x: TensorType, running_mean: TensorType, running_var: TensorType,
                      weight: TensorType | None = None, bias: TensorType | None = None, *,
                      eps: float) -> TensorType:
    dtype = common_float_dtype("batch_norm", input=x, running_mean=running_mean, running_var=running_var,
                               weight=weight, bias=bias)
    c = _require_channels("batch_norm", x)
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        require_vector(ctx, "batch_norm", name, t, c)
    return TensorType(x.shape, dtype)


def _batch_norm(x: np.ndarray, running_mean: np.ndarray, running_var: np.ndarray,
                weight: np.ndarray | None = None, bias: np.ndarray | None = None, *,
                eps: float = 1e-5) -> np.ndarray:
    """x * scale + shift with per-channel scale = weight/sqrt(var + eps), shift = bias - mean*scale."""
    scale = 1 / np.sqrt(running_var + x.dtype.type(eps))
    if weight is not None:
        scale = scale * weight
    shift = -running_mean * scale
    if bias is not None:
        shift = shift + bias
    shape = _channel_shape(x)
    return x * scale.reshape(shape) + shift.reshape(shape)


register(NnOpDef(
    name="batch_norm", inputs=("input", "running_mean", "running_var", "weight", "bias"),
    attrs={"eps": _EPS}, infer=_batch_norm_infer, kernel=_batch_norm, traits=NN | {"elementwise"},
    optional_inputs=2,
    params=("input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"),
    call_only={"training": only(False, "msvm runs inference only: pass training=False (the running "
                                       "statistics normalise)"),
               "momentum": ignored(0.1)},
    doc="inference batch norm (torch F.batch_norm, training=False): channels at dim 1, any rank >= 2",
))


# -- layer_norm ---------------------------------------------------------------------------------------


def _layer_norm_infer(ctx: InferContext, x: TensorType, weight: TensorType | None = None,
                      bias: TensorType | None = None, *, normalized_shape: Sequence[Any],
                      eps: float) -> TensorType:
    dtype = common_float_dtype("layer_norm", input=x, weight=weight, bias=bias)
    norm = [as_dim(d) for d in normalized_shape]
    if not norm:
        raise OpTypeError("ATTR-VALUE", "layer_norm: normalized_shape is empty",
                          "name the trailing dims to normalise over, e.g. (C,)")
    k = len(norm)
    if x.shape.rank < k:
        raise OpTypeError("RANK", f"layer_norm: input {x.shape} has fewer dims than normalized_shape "
                          f"[{', '.join(map(str, norm))}]",
                          "normalized_shape names trailing dims of the input")
    hint = "normalized_shape must equal the input's trailing dims"
    for i, d in enumerate(norm):
        require_same(ctx, x.shape[x.shape.rank - k + i], d, f"layer_norm: input dim {x.shape.rank - k + i} "
                     f"vs normalized_shape[{i}]", hint)
    for name, t in (("weight", weight), ("bias", bias)):
        if t is None:
            continue
        if t.shape.rank != k:
            raise OpTypeError("RANK", f"layer_norm: {name} {t.shape} must have normalized_shape's "
                              f"{k} dim(s)", f"{name} has the shape normalized_shape")
        for i, d in enumerate(norm):
            require_same(ctx, t.shape[i], d, f"layer_norm: {name} dim {i} vs normalized_shape[{i}]",
                         f"{name} must have shape normalized_shape")
    return TensorType(x.shape, dtype)


def _layer_norm(x: np.ndarray, weight: np.ndarray | None = None, bias: np.ndarray | None = None, *,
                normalized_shape: Sequence[int], eps: float = 1e-5) -> np.ndarray:
    k = len(normalized_shape)
    y = _standardize(x, tuple(range(x.ndim - k, x.ndim)), eps)
    return _affine(y, weight, bias, tuple(normalized_shape))


register(NnOpDef(
    name="layer_norm", inputs=("input", "weight", "bias"),
    params=("input", "normalized_shape", "weight", "bias", "eps"),
    attrs={"normalized_shape": Attr("dims", doc="the trailing dims to normalise over (an int for one dim)"),
           "eps": _EPS},
    infer=_layer_norm_infer, kernel=_layer_norm, traits=NN | {"reduction"}, optional_inputs=2,
    spread={"normalized_shape": None},
    doc="normalise over the trailing normalized_shape dims, then weight/bias of that shape "
        "(torch F.layer_norm)",
))


# -- group_norm ---------------------------------------------------------------------------------------


def _group_norm_infer(ctx: InferContext, x: TensorType, weight: TensorType | None = None,
                      bias: TensorType | None = None, *, num_groups: int, eps: float) -> TensorType:
    dtype = common_float_dtype("group_norm", input=x, weight=weight, bias=bias)
    c = _require_channels("group_norm", x)
    if num_groups < 1:
        raise OpTypeError("ATTR-VALUE", f"group_norm: num_groups {num_groups}", "num_groups must be >= 1")
    require_divisible(ctx, c, num_groups, "group_norm: channels", "the channels must divide into num_groups")
    for name, t in (("weight", weight), ("bias", bias)):
        require_vector(ctx, "group_norm", name, t, c)
    return TensorType(x.shape, dtype)


def _group_norm(x: np.ndarray, weight: np.ndarray | None = None, bias: np.ndarray | None = None, *,
                num_groups: int, eps: float = 1e-5) -> np.ndarray:
    """Statistics per (sample, group) over the group's channels and all spatial positions."""
    grouped = x.reshape(x.shape[0], num_groups, math.prod(x.shape[1:]) // num_groups)
    y = _standardize(grouped, (2,), eps).reshape(x.shape)
    return _affine(y, weight, bias, _channel_shape(x))


register(NnOpDef(
    name="group_norm", inputs=("input", "weight", "bias"),
    params=("input", "num_groups", "weight", "bias", "eps"),
    attrs={"num_groups": Attr("int", doc="number of channel groups (must divide the channels)"), "eps": _EPS},
    infer=_group_norm_infer, kernel=_group_norm, traits=NN | {"reduction"}, optional_inputs=2,
    doc="normalise each group of channels per sample, then per-channel weight/bias (torch F.group_norm)",
))
