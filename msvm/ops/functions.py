"""torch.nn.functional's functions that are a few registry ops: relu6, hardswish, interpolate, dropout, ...

Why not ops: each is a short composition of registered ops (``hardswish(x) = x * relu6(x + 3) / 6``),
and expanding it where it is called keeps the bytecode, the verifier, the JIT's fusion and the kernels
to the ops they know. A ``FunctionDef`` has an op's call — ``params``, an attribute schema, torch's
call-only flags — so binding, checking and the docs are the registry's; only its body is its own:
``expand(build, *inputs, **attrs)``, written once against a ``Build``, which runs each op eagerly on
arrays (``ms.ops``-style calls), emits it (``@ms.jit``), or infers its type (the shape function).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..shapes import ShapeSpec
from .nn_common import INPLACE, NnOpDef, only
from .registry import (
    REGISTRY,
    Attr,
    CallOnly,
    InferContext,
    OpDef,
    OpTypeError,
    TensorType,
    check_call_params,
)


class Build(Protocol):
    """How a function's body makes its ops: eagerly, into bytecode, or as types."""

    def __call__(self, op: str, *inputs: Any, **attrs: Any) -> Any: ...

    def rank(self, value: Any) -> int: ...


class EagerBuild:
    """Runs each op at once on numpy arrays."""

    def __call__(self, op: str, *inputs: Any, **attrs: Any) -> Any:
        return REGISTRY[op].run(list(inputs), attrs)

    def rank(self, value: Any) -> int:
        return np.ndim(value)


class TypeBuild:
    """Runs each op's shape function: the function's own ``infer``."""

    def __init__(self, ctx: InferContext) -> None:
        self.ctx = ctx

    def __call__(self, op: str, *inputs: Any, **attrs: Any) -> Any:
        definition = REGISTRY[op]
        strong = [np.dtype(t.dtype) for t in inputs if isinstance(t, TensorType)]
        # a Python number takes the dtype it meets, as in the eager and the compiled call
        types = [t if isinstance(t, TensorType) else _scalar_type(strong, t)
                 for t in inputs]
        return definition.infer(self.ctx, *types, **definition.check_attrs(attrs))

    def rank(self, value: Any) -> int:
        return value.shape.rank


def _scalar_type(strong: Sequence[np.dtype], value: Any) -> TensorType:
    return TensorType(ShapeSpec(()), np.result_type(*strong, value).name)


Expand = Callable[..., Any]


@dataclass
class FunctionDef(NnOpDef):
    """A torch function expanded into registry ops where it is called; never an OP_CALL itself."""

    expand: Expand | None = None

    def run(self, inputs: Sequence[Any], attrs: Mapping[str, Any]) -> Any:
        self.check_arity(len(inputs))
        return self.expand(EagerBuild(), *inputs, **self.check_attrs(attrs))


FUNCTIONS: dict[str, FunctionDef] = {}


def function(name: str, expand: Expand, doc: str, attrs: Mapping[str, Attr] | None = None,
             call_only: Mapping[str, CallOnly] | None = None, inputs: tuple[str, ...] = ("input",),
             **options: Any) -> FunctionDef:
    """Define one function: its call is ``inputs``, ``attrs`` and ``call_only`` in that order."""
    attrs = dict(attrs or {})

    def kernel(*arrays: np.ndarray, **values: Any) -> Any:
        return expand(EagerBuild(), *arrays, **values)

    def infer(ctx: InferContext, *types: TensorType, **values: Any) -> Any:
        return expand(TypeBuild(ctx), *types, **values)

    fn = FunctionDef(name=name, inputs=inputs, attrs=attrs, infer=infer, kernel=kernel, doc=doc,
                     call_only=dict(call_only or {}), expand=expand, **options)
    check_call_params(fn)
    if name in FUNCTIONS:  # an op's name is fine: F.transpose is torch's, ms.ops.transpose numpy's
        raise ValueError(f"function {name!r} defined twice")
    FUNCTIONS[name] = fn
    return fn


def _float(doc: str, default: float) -> Attr:
    return Attr("float", default, doc=doc)


# -- activations --------------------------------------------------------------------------------------


def _relu6(b: Build, x: Any) -> Any:
    return b("clamp", x, min=0.0, max=6.0)


def _hardsigmoid(b: Build, x: Any) -> Any:
    return b("div", _relu6(b, b("add", x, 3.0)), 6.0)


def _hardswish(b: Build, x: Any) -> Any:
    return b("div", b("mul", x, _relu6(b, b("add", x, 3.0))), 6.0)


def _softplus(b: Build, x: Any, beta: float = 1.0, threshold: float = 20.0) -> Any:
    """log(1 + exp(beta x)) / beta, and x itself above the threshold (torch's linear regime)."""
    z = b("mul", x, beta)
    # exp of the clamped z: above the threshold its value is not used, and it must not overflow
    soft = b("div", b("log", b("add", b("exp", b("minimum", z, threshold)), 1.0)), beta)
    return b("where", b("greater", z, threshold), x, soft)


def _mish(b: Build, x: Any) -> Any:
    return b("mul", x, b("tanh", _softplus(b, x)))


def _leaky_relu(b: Build, x: Any, negative_slope: float = 0.01) -> Any:
    return b("where", b("greater", x, 0.0), x, b("mul", x, negative_slope))


def _elu(b: Build, x: Any, alpha: float = 1.0) -> Any:
    return b("where", b("greater", x, 0.0), x, b("mul", b("sub", b("exp", b("minimum", x, 0.0)), 1.0), alpha))


function("relu6", _relu6, "min(max(x, 0), 6)", call_only=INPLACE)
function("hardsigmoid", _hardsigmoid, "relu6(x + 3) / 6", call_only=INPLACE)
function("hardswish", _hardswish, "x * relu6(x + 3) / 6", call_only=INPLACE)
function("mish", _mish, "x * tanh(softplus(x))", call_only=INPLACE)
function("softplus", _softplus, "log(1 + exp(beta*x)) / beta; x where beta*x > threshold",
         attrs={"beta": _float("the sharpness", 1.0), "threshold": _float("beta*x above it gives x", 20.0)})
function("leaky_relu", _leaky_relu, "x where x > 0, else negative_slope * x",
         attrs={"negative_slope": _float("the slope for x < 0", 0.01)}, call_only=INPLACE)
function("elu", _elu, "x where x > 0, else alpha * (exp(x) - 1)",
         attrs={"alpha": _float("large negative x approach -alpha", 1.0)}, call_only=INPLACE)


# -- shapes and inference-only layers -----------------------------------------------------------------


def _normalize(b: Build, x: Any, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Any:
    """x / max(||x||_p over dim, eps), the norm kept as a size-1 dim so it broadcasts back."""
    size = b("abs", x)
    if p == 2:
        norm = b("sqrt", b("sum", b("mul", x, x), axis=dim, keepdims=True))
    elif p == 1:
        norm = b("sum", size, axis=dim, keepdims=True)
    elif math.isinf(p) and p > 0:
        norm = b("max", size, axis=dim, keepdims=True)
    else:
        norm = b("pow", b("sum", b("pow", size, p), axis=dim, keepdims=True), 1 / p)
    return b("div", x, b("clamp", norm, min=eps))


def _dropout(b: Build, x: Any, p: float = 0.5) -> Any:
    """Inference: every element is kept, so the input itself is the result."""
    if not 0 <= p <= 1:
        raise OpTypeError("ATTR-VALUE", f"dropout: p={p} is not a probability", "give p in [0, 1]")
    return x


def _transpose(b: Build, x: Any, dim0: int, dim1: int) -> Any:
    """torch's transpose: dims dim0 and dim1 swapped, the others in place (numpy's swapaxes)."""
    rank = b.rank(x)
    axes = list(range(rank))
    dim0, dim1 = (InferContext.axis(d, rank, "transpose dim") for d in (dim0, dim1))
    axes[dim0], axes[dim1] = axes[dim1], axes[dim0]
    return b("permute", x, dims=tuple(axes))


def _interpolate(b: Build, x: Any, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                 align_corners: bool | None = None) -> Any:
    if mode == "nearest":
        if align_corners is not None:
            raise OpTypeError("ATTR-VALUE", "interpolate: align_corners is only for mode='bilinear'",
                              "leave align_corners=None with mode='nearest' (torch rejects it too)")
        return b("resize_nearest", x, size=size, scale_factor=scale_factor)
    return b("resize_bilinear", x, size=size, scale_factor=scale_factor, align_corners=bool(align_corners))


function("normalize", _normalize, "x / max(||x||_p along dim, eps) (p = 1, 2, inf or any positive p)",
         attrs={"p": _float("the norm's exponent", 2.0), "dim": Attr("int", 1, doc="the normalised dim"),
                "eps": _float("the smallest norm divided by", 1e-12)},
         call_only={"out": only(None, "use the returned tensor")})
function("dropout", _dropout, "inference: the input itself (every element kept, nothing scaled)",
         attrs={"p": _float("the drop probability (unused in inference)", 0.5)},
         call_only={"training": only(False, "msvm runs inference only: pass training=False (dropout is the "
                                            "identity then)"), **INPLACE})
function("transpose", _transpose, "dims dim0 and dim1 swapped (torch's transpose; numpy's swapaxes)",
         attrs={"dim0": Attr("int", doc="one dim"), "dim1": Attr("int", doc="the other dim")})
function("interpolate", _interpolate, "resize_nearest or resize_bilinear of [N, C, H, W] by mode",
         attrs={"size": Attr("dims", None, doc="output (H, W), an int for both"),
                "scale_factor": Attr("floats", None, doc="(sh, sw) or one float"),
                "mode": Attr("str", "nearest", ("nearest", "bilinear"), doc="the resize"),
                "align_corners": Attr("bool", None, doc="bilinear only: corner pixel centres meet")},
         spread={"size": 2, "scale_factor": 2},
         call_only={"recompute_scale_factor": CallOnly(None, lambda v: v is None or v is False,
                                                       "scale factors are used as given (None or False)"),
                    "antialias": only(False, "resize without antialiasing, or blur first")})


def get_function(name: str) -> OpDef:
    """The op or function called ``name`` (functions are never in the bytecode; ops are)."""
    return FUNCTIONS.get(name) or REGISTRY[name]


__all__ = ["FUNCTIONS", "Build", "EagerBuild", "FunctionDef", "TypeBuild", "function", "get_function"]
