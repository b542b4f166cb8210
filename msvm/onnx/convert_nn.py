"""Importers of ONNX's neural-network ops: (transposed) convolution, pooling, normalisation, GEMMs, softmax.

Why 1-D ops become 2-D ones: the registry's convolution and pooling ops are NCHW (NCDHW for 3-D);
a 1-D one is the same computation over a height of 1, so an unsqueeze before and a squeeze after (both
views) import it exactly. Asymmetric ONNX pads become an explicit ``pad`` (``-inf`` for max pooling)
before a window op with none, since the registry's windows pad both sides alike.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .graph import NodeCtx, Value, converter, frozen

_AUTO_PAD = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")
_WINDOW = {"auto_pad": _AUTO_PAD, "kernel_shape": None, "pads": None, "strides": None}


def _window_pads(
    ctx: NodeCtx, spatial: list[Any], kernel: list[int], strides: list[int], dilations: list[int]
) -> list[int]:
    """ONNX pads (begins then ends) for this node, auto_pad resolved."""
    n = len(kernel)
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto == "VALID":
        return [0] * (2 * n)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        begins, ends = [], []
        for size, k, s, d in zip(spatial, kernel, strides, dilations):
            if not isinstance(size, int) and s != 1:
                raise ctx.error(
                    f"auto_pad={auto} with stride {s} over a symbolic size is not supported",
                    "explicit pads, or stride 1",
                )
            out = size if s == 1 else -(-size // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - size, 0) if isinstance(size, int) else (k - 1) * d
            small = total // 2
            begins.append(small if auto == "SAME_UPPER" else total - small)
            ends.append(total - begins[-1])
        return begins + ends
    pads = list(ctx.attr("pads", [0] * (2 * n)))
    if len(pads) != 2 * n:
        raise ctx.error(f"pads {pads} do not have two entries per spatial axis ({n})")
    return pads


def _spatial(ctx: NodeCtx, n: int, most: int = 3) -> None:
    if not 1 <= n <= most:
        shown = "1-D, 2-D and 3-D (NCL, NCHW, NCDHW)" if most == 3 else "1-D and 2-D (NCL, NCHW)"
        raise ctx.error(f"{n}-D {ctx.node.op_type} is not supported", shown)


def _op(name: str, n: int) -> str:
    """The registry op of a window op over ``n`` spatial dims (1-D runs as 2-D): conv2d or conv3d, ..."""
    return name.replace("2d", "3d") if n == 3 else name


def _lift(ctx: NodeCtx, v: Value, n: int) -> Value:
    return ctx.call("unsqueeze", [v], {"axis": 2}) if n == 1 else v


def _lower(ctx: NodeCtx, v: Value, n: int) -> Value:
    return ctx.call("squeeze", [v], {"axis": 2}) if n == 1 else v


def _pair(values: list[int], n: int, fill: int) -> tuple[int, ...]:
    """Per-axis values for the registry op: a 1-D op's gain a leading height entry ``fill``."""
    return (fill, values[0]) if n == 1 else tuple(values[:n])


def _split_pads(
    ctx: NodeCtx, x: Value, pads: list[int], n: int, value: float
) -> tuple[Value, tuple[int, ...]]:
    """(input, symmetric padding): an explicit pad op takes whatever the window op cannot."""
    begins, ends = pads[:n], pads[n:]
    if begins == ends:
        return x, _pair(begins, n, 0)
    flat: list[int] = []
    for b, e in zip(reversed(begins), reversed(ends)):
        flat += [b, e]
    padded = ctx.call("pad", [x], {"pads": tuple(flat), "mode": "constant", "value": value})
    return padded, (0,) * max(n, 2)


def _kernel(ctx: NodeCtx) -> list[int]:
    """The spatial kernel size of a (transposed) convolution: its attribute, or the weight's dims."""
    kernel = list(ctx.attr("kernel_shape", ctx.dims(1)[2:]))
    if not all(isinstance(k, int) for k in kernel):
        raise ctx.error(
            "a kernel whose size is computed at run time is not supported", "constant kernel sizes"
        )
    return kernel


@converter("Conv", attrs={**_WINDOW, "dilations": None, "group": None})
def _conv(ctx: NodeCtx) -> Value:
    n = ctx.rank(0) - 2
    _spatial(ctx, n)
    kernel = _kernel(ctx)
    strides = list(ctx.attr("strides", [1] * n))
    dilations = list(ctx.attr("dilations", [1] * n))
    pads = _window_pads(ctx, ctx.dims(0)[2:], kernel, strides, dilations)
    x = _lift(ctx, ctx.value(0), n)
    w = _lift(ctx, ctx.value(1), n)
    x, padding = _split_pads(ctx, x, pads, n, 0.0)
    inputs = [x, w] + ([ctx.value(2)] if ctx.has(2) else [])
    y = ctx.call(
        _op("conv2d", n),
        inputs,
        {
            "stride": _pair(strides, n, 1),
            "padding": padding,
            "dilation": _pair(dilations, n, 1),
            "groups": ctx.attr("group", 1),
        },
    )
    return _lower(ctx, y, n)


def _transpose_pads(
    ctx: NodeCtx, spatial: list[Any], kernel: list[int], strides: list[int], dilations: list[int],
    extra: list[int],
) -> list[int]:
    """ConvTranspose's crops (begins then ends): from ``output_shape`` or auto_pad SAME when given."""
    n = len(kernel)
    auto = ctx.attr("auto_pad", "NOTSET")
    shape = ctx.attr("output_shape")
    if shape is None and auto in ("SAME_UPPER", "SAME_LOWER"):
        shape = [size * s if isinstance(size, int) else None for size, s in zip(spatial, strides)]
    if shape is None:
        return [0] * (2 * n) if auto == "VALID" else list(ctx.attr("pads", [0] * (2 * n)))
    shape = list(shape)[-n:]
    if not all(isinstance(size, int) for size in spatial) or None in shape:
        raise ctx.error("output_shape or auto_pad SAME over a symbolic spatial size is not supported",
                        "explicit pads, or static spatial sizes")
    begins, ends = [], []
    for size, k, s, d, e, out in zip(spatial, kernel, strides, dilations, extra, shape):
        total = s * (size - 1) + e + (k - 1) * d + 1 - out
        head = total // 2 if auto == "SAME_UPPER" else total - total // 2  # the spec's split of an odd total
        begins.append(head)
        ends.append(total - head)
    return begins + ends


@converter("ConvTranspose", attrs={**_WINDOW, "dilations": None, "group": None, "output_padding": None,
                                   "output_shape": None})
def _conv_transpose(ctx: NodeCtx) -> Value:
    n = ctx.rank(0) - 2
    _spatial(ctx, n, most=2)
    kernel = _kernel(ctx)
    strides = list(ctx.attr("strides", [1] * n))
    dilations = list(ctx.attr("dilations", [1] * n))
    extra = list(ctx.attr("output_padding", [0] * n))
    pads = _transpose_pads(ctx, ctx.dims(0)[2:], kernel, strides, dilations, extra)
    if len(pads) != 2 * n or len(extra) != n:
        raise ctx.error(f"pads {pads} / output_padding {extra} do not fit {n} spatial axes")
    x, w = _lift(ctx, ctx.value(0), n), _lift(ctx, ctx.value(1), n)
    attrs = {
        "stride": _pair(strides, n, 1),
        "dilation": _pair(dilations, n, 1),
        "groups": ctx.attr("group", 1),
    }
    if any(e >= max(s, d) for e, s, d in zip(extra, strides, dilations)):  # onnxruntime and torch refuse it
        raise ctx.error(f"output_padding {extra} with strides {strides} and dilations {dilations} is not "
                        "supported", "output_padding below max(stride, dilation) on every axis")
    if min(pads) < 0:
        raise ctx.error(f"ConvTranspose pads {pads} (from output_shape or pads) are negative", "pads >= 0")
    begins, ends = pads[:n], pads[n:]
    if begins == ends:  # torch's form: the op crops both sides alike and extends at the end itself
        inputs = [x, w] + ([ctx.value(2)] if ctx.has(2) else [])
        attrs.update(padding=_pair(begins, n, 0), output_padding=_pair(extra, n, 0))
        return _lower(ctx, ctx.call("conv_transpose2d", inputs, attrs), n)
    # Otherwise (asymmetric pads) the uncropped result, extended at the end by what output_padding adds
    # beyond the end's crop, cropped per side, and the bias after: rows no input pixel reaches hold it alone.
    y = ctx.call("conv_transpose2d", [x, w], attrs)
    grow: list[int] = []
    for e, o in zip(reversed(ends), reversed(extra)):
        grow += [0, max(o - e, 0)]
    if any(grow):
        y = ctx.call("pad", [y], {"pads": tuple(grow), "mode": "constant", "value": 0.0})
    axes = [a for a in range(n) if begins[a] > 0 or ends[a] > extra[a]]
    if axes:
        dims = ctx.imp.dims(y)
        stops = [ctx.imp.scalar_op("sub", dims[a + 4 - n], max(ends[a] - extra[a], 0)) for a in axes]
        y = ctx.call(
            "slice",
            [y],
            {
                "axes": tuple(a + 4 - n for a in axes),
                "starts": tuple(begins[a] for a in axes),
                "stops": tuple(stops),
                "steps": (1,) * len(axes),
            },
        )
    if ctx.has(2):
        y = ctx.call("add", [y, ctx.call("reshape", [ctx.value(2)], {"shape": (-1, 1, 1)})])
    return _lower(ctx, y, n)


@converter(
    "MaxPool",
    "AveragePool",
    attrs={**_WINDOW, "dilations": None, "ceil_mode": None, "count_include_pad": None, "storage_order": (0,)},
)
def _pool(ctx: NodeCtx) -> Value:
    n = ctx.rank(0) - 2
    _spatial(ctx, n)
    kernel = list(ctx.attr("kernel_shape"))
    strides = list(ctx.attr("strides", [1] * n))
    dilations = list(ctx.attr("dilations", [1] * n))
    pads = _window_pads(ctx, ctx.dims(0)[2:], kernel, strides, dilations)
    is_max = ctx.node.op_type == "MaxPool"
    include = bool(ctx.attr("count_include_pad", 0))
    x = _lift(ctx, ctx.value(0), n)
    asymmetric = pads[:n] != pads[n:]
    x, padding = _split_pads(ctx, x, pads, n, -np.inf if is_max else 0.0)
    attrs: dict[str, Any] = {
        "kernel_size": _pair(kernel, n, 1),
        "stride": _pair(strides, n, 1),
        "padding": padding,
        "ceil_mode": bool(ctx.attr("ceil_mode", 0)),
    }
    if is_max:
        y = ctx.call(_op("max_pool2d", n), [x], {**attrs, "dilation": _pair(dilations, n, 1)})
    else:
        if any(d != 1 for d in dilations):
            raise ctx.error(f"dilations {dilations} of AveragePool are not supported", "dilation 1")
        y = ctx.call(_op("avg_pool2d", n), [x], {**attrs, "count_include_pad": include or asymmetric})
        if asymmetric and not include:
            # The explicit pad's zeros were counted: divide by the share of each window that is input,
            # the same pooling over ones (a constant when the spatial dims are static).
            spatial = ctx.dims(0)[2:]
            ones = ctx.call(
                "full",
                [],
                {
                    "shape": (1, 1, *([1] if n == 1 else []), *spatial),
                    "fill_value": 1.0,
                    "dtype": ctx.dtype(0),
                },
            )
            share = ctx.call(
                _op("avg_pool2d", n),
                [_split_pads(ctx, ones, pads, n, 0.0)[0]],
                {**attrs, "count_include_pad": True},
            )
            y = ctx.call("div", [y, share])
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        raise ctx.error("the Indices output of MaxPool is not supported", "the pooled values only")
    return _lower(ctx, y, n)


@converter("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(ctx: NodeCtx) -> Value:
    axes = tuple(range(2, ctx.rank(0)))
    op = "mean" if ctx.node.op_type == "GlobalAveragePool" else "max"
    return ctx.call(op, [ctx.value(0)], {"axis": axes, "keepdims": True})


@converter(
    "BatchNormalization",
    attrs={
        "epsilon": None,
        "momentum": None,
        "spatial": (1,),
        "is_test": None,
        "consumed_inputs": None,
        "training_mode": (0,),
    },
)
def _batch_norm(ctx: NodeCtx) -> Value:
    x = ctx.value(0)
    if any(o for o in ctx.node.output[1:]):
        raise ctx.error("the running statistics outputs (training mode) are not supported", "inference")
    return ctx.call(
        "batch_norm",
        [x, ctx.value(3), ctx.value(4), ctx.value(1), ctx.value(2)],
        {"eps": ctx.attr("epsilon", 1e-5)},
    )


@converter("InstanceNormalization", attrs={"epsilon": None})
def _instance_norm(ctx: NodeCtx) -> Value:
    c = ctx.dims(0)[1]
    if not isinstance(c, int):
        raise ctx.error("a symbolic channel count is not supported", "a static channel dim")
    return ctx.call(
        "group_norm",
        [ctx.value(0), ctx.value(1), ctx.value(2)],
        {"num_groups": c, "eps": ctx.attr("epsilon", 1e-5)},
    )


@converter("GroupNormalization", attrs={"epsilon": None, "num_groups": None, "stash_type": (1,)})
def _group_norm(ctx: NodeCtx) -> Value:
    c = ctx.dims(0)[1]
    groups = ctx.attr("num_groups")
    scale, bias = ctx.value(1), ctx.value(2)
    if ctx.dims(1)[0] != c:  # opset 18's per-group scale and bias: repeat them per channel
        if not isinstance(c, int):
            raise ctx.error("per-group scale with a symbolic channel count is not supported")
        reps = frozen(np.array([c // groups], dtype=np.int64))
        scale = _repeat(ctx, scale, groups, reps)
        bias = _repeat(ctx, bias, groups, reps)
    return ctx.call(
        "group_norm", [ctx.value(0), scale, bias], {"num_groups": groups, "eps": ctx.attr("epsilon", 1e-5)}
    )


def _repeat(ctx: NodeCtx, v: Value, groups: int, reps: np.ndarray) -> Value:
    k = int(reps[0])
    v = ctx.call("reshape", [v], {"shape": (groups, 1)})
    v = ctx.call("broadcast_to", [v], {"shape": (groups, k)})
    return ctx.call("reshape", [v], {"shape": (groups * k,)})


@converter("LayerNormalization", attrs={"axis": None, "epsilon": None, "stash_type": (1,)})
def _layer_norm(ctx: NodeCtx) -> Value:
    dims = ctx.dims(0)
    axis = ctx.attr("axis", -1) % len(dims)
    if any(o for o in ctx.node.output[1:]):
        raise ctx.error("the Mean and InvStdDev outputs are not supported", "the normalised output only")
    inputs = [ctx.value(0), ctx.value(1)] + ([ctx.value(2)] if ctx.has(2) else [])
    return ctx.call(
        "layer_norm", inputs, {"normalized_shape": tuple(dims[axis:]), "eps": ctx.attr("epsilon", 1e-5)}
    )


@converter("LRN", attrs={"alpha": None, "beta": None, "bias": None, "size": None})
def _lrn(ctx: NodeCtx) -> Value:
    return ctx.call(
        "lrn",
        [ctx.value(0)],
        {
            "size": ctx.attr("size"),
            "alpha": ctx.attr("alpha", 1e-4),
            "beta": ctx.attr("beta", 0.75),
            "k": ctx.attr("bias", 1.0),
        },
    )


@converter("Gemm", attrs={"alpha": None, "beta": None, "transA": None, "transB": None, "broadcast": None})
def _gemm(ctx: NodeCtx) -> Value:
    a, b = ctx.value(0), ctx.value(1)
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    dt = ctx.dtype(0)
    if ctx.attr("transA", 0):
        a = ctx.call("transpose", [a])
    if not ctx.attr("transB", 0):
        b = ctx.call("transpose", [b])  # folded for a constant weight: linear takes [out, in]
    if alpha != 1.0:
        b = ctx.call("mul", [b, frozen(np.array(alpha, dtype=dt))])
    c = ctx.value(2) if ctx.has(2) else None
    if c is not None and beta != 1.0:
        c = ctx.call("mul", [c, frozen(np.array(beta, dtype=dt))])
    if c is not None and ctx.imp.rank(c) <= 1:
        return ctx.call("linear", [a, b, c])
    y = ctx.call("linear", [a, b])
    return y if c is None else ctx.call("add", [y, c])


@converter("MatMul")
def _matmul(ctx: NodeCtx) -> Value:
    a, b = ctx.value(0), ctx.value(1)
    if isinstance(b, np.ndarray) and b.ndim == 2 and ctx.rank(0) >= 2:
        return ctx.call("linear", [a, frozen(b.T)])  # a constant weight: packed once by linear's kernels
    return ctx.call("matmul", [a, b])


def _coerced(ctx: NodeCtx, op: str) -> Value:
    """Softmax/LogSoftmax: opset < 13 normalises over every dim from ``axis`` on (the input as 2-D)."""
    rank = ctx.rank(0)
    if ctx.opset >= 13:
        return ctx.call(op, [ctx.value(0)], {"axis": ctx.attr("axis", -1) % rank})
    axis = ctx.attr("axis", 1) % rank
    dims = ctx.dims(0)
    if axis == rank - 1 or all(d == 1 for d in dims[axis + 1 :]):
        return ctx.call(op, [ctx.value(0)], {"axis": axis})
    from .convert_tensor import _flatten_to

    flat = _flatten_to(ctx, ctx.value(0), dims, axis)
    return ctx.call("reshape", [ctx.call(op, [flat], {"axis": 1})], {"shape": tuple(dims)})


@converter("Softmax", attrs={"axis": None})
def _softmax(ctx: NodeCtx) -> Value:
    return _coerced(ctx, "softmax")


@converter("LogSoftmax", attrs={"axis": None})
def _log_softmax(ctx: NodeCtx) -> Value:
    return _coerced(ctx, "log_softmax")


@converter("Gelu", attrs={"approximate": ("none", "tanh")})
def _gelu(ctx: NodeCtx) -> Value:
    return ctx.call("gelu", [ctx.value(0)], {"approximate": ctx.attr("approximate", "none")})


__all__: list[str] = []
