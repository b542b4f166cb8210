"""Creation ops (no tensor inputs): zeros, ones, full and arange.

Sizes may come from scalar registers, so output dims are symbolic expressions of them; arange's
length is ``ceildiv(stop - start, step)``, with a run-time guard where its sign cannot be proved.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..shapes import Dim, ShapeSpec, as_dim, ceildiv, dmax
from .registry import Attr, InferContext, OpDef, OpTypeError, TensorType, register

CREATION = frozenset({"creation"})


def _shape_attr(op: str, shape: Sequence[Any]) -> ShapeSpec:
    dims = [as_dim(d) for d in shape]
    for d in dims:
        if d.is_const and d.value < 0:
            raise OpTypeError("ATTR-VALUE", f"{op}: negative size {d.value}", "sizes must be >= 0")
    return ShapeSpec(dims)


def _filled_infer(name: str) -> Callable[..., TensorType]:
    def infer(ctx: InferContext, shape: Sequence[Any], dtype: str, **_: Any) -> TensorType:
        return TensorType(_shape_attr(name, shape), dtype)

    return infer


_SHAPE = Attr("dims", doc="the output shape")
_DTYPE = Attr("dtype", "float32", doc="the element type of the output")

register(OpDef(
    name="zeros", inputs=(), attrs={"shape": _SHAPE, "dtype": _DTYPE}, infer=_filled_infer("zeros"),
    kernel=lambda shape, dtype: np.zeros(shape, dtype=dtype), traits=CREATION, doc="a tensor of 0s",
))
register(OpDef(
    name="ones", inputs=(), attrs={"shape": _SHAPE, "dtype": _DTYPE}, infer=_filled_infer("ones"),
    kernel=lambda shape, dtype: np.ones(shape, dtype=dtype), traits=CREATION, doc="a tensor of 1s",
))
register(OpDef(
    name="full", inputs=(),
    attrs={"shape": _SHAPE, "fill_value": Attr("scalar", doc="the value (converted to dtype)"),
           "dtype": _DTYPE},
    infer=_filled_infer("full"),
    kernel=lambda shape, fill_value, dtype: np.full(shape, fill_value, dtype=dtype), traits=CREATION,
    doc="a tensor of fill_value",
))


def arange_length(start: Dim | int, stop: Dim | int, step: Dim | int) -> Dim:
    """len(range(start, stop, step)); exact for constants, ceildiv(stop - start, step) otherwise."""
    start, stop, step = as_dim(start), as_dim(stop), as_dim(step)
    if start.is_const and stop.is_const and step.is_const:
        return as_dim(len(range(start.value, stop.value, step.value)))
    return ceildiv(stop - start, step)


def _arange_infer(ctx: InferContext, start: Any, stop: Any, step: Any, dtype: str) -> TensorType:
    step_dim = as_dim(step)
    if step_dim == 0:
        raise OpTypeError("ATTR-VALUE", "arange: step 0", "the step must be non-zero")
    if dtype == "bool":
        raise OpTypeError("DTYPE", "arange: bool is not a numeric range dtype", "use an int or float dtype")
    n = arange_length(start, stop, step_dim)
    if not n.is_const and not n.is_unknown:
        # A symbolic length is only right when the range is not reversed; check that at run time.
        ctx.require_equal(dmax(n, 0), n, f"arange({start}, {stop}, {step}): length {n} must be >= 0")
        if not step_dim.is_const and not step_dim.is_unknown:
            ctx.require_equal(dmax(step_dim, 1), step_dim, f"arange step {step_dim} must be > 0")
    return TensorType(ShapeSpec([n]), dtype)


@dataclass
class RangeOpDef(OpDef):
    """arange, called as numpy's and torch's: ``arange(stop)`` or ``arange(start, stop[, step])``."""

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        inputs, attrs = super().bind(args, kwargs)
        if "stop" not in attrs and "start" in attrs:  # a lone bound is where the range stops
            attrs["stop"] = attrs.pop("start")
        return inputs, attrs

    def shown_default(self, key: str, default: Any) -> Any:
        return None if key == "stop" else default


register(RangeOpDef(
    name="arange", inputs=(),
    attrs={"start": Attr("dim", 0, doc="first value (inclusive)"), "stop": Attr("dim", doc="end (exclusive)"),
           "step": Attr("dim", 1, doc="spacing: a non-zero int, or a register that must be > 0 at run time"),
           "dtype": Attr("dtype", "int64", doc="the element type of the output (not bool)")},
    infer=_arange_infer,
    kernel=lambda start, stop, step, dtype: np.arange(start, stop, step, dtype=dtype), traits=CREATION,
    doc="start, start+step, ... up to stop (exclusive), like np.arange on ints",
))
