"""Reductions (sum, mean, max, min, prod, argmax) and the row-normalising softmax/log_softmax.

Why dtypes are probed: numpy's reduction dtypes have special cases (sum of int32 or bool is int64,
mean of ints is float64, mean of float16 stays float16); asking numpy once per dtype keeps the shape
function and the kernel in agreement by construction. Sizes are unknown statically, so an empty
max/min is left to the kernel, which raises like numpy.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..shapes import ShapeSpec
from .elementwise import as_float, float_dtype
from .nn_common import ignored, only
from .registry import Attr, InferContext, OpDef, OpTypeError, TensorType, register

REDUCTION = frozenset({"reduction"})


def reduce_axes(ctx: InferContext, axis: int | Sequence[int] | None, rank: int, op: str) -> tuple[int, ...]:
    """``axis`` (None = all, an int, or a tuple; negatives count from the end) as sorted, distinct axes."""
    if axis is None:
        return tuple(range(rank))
    items = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = [ctx.axis(a, rank, f"{op} axis") for a in items]
    if len(set(axes)) != len(axes):
        raise OpTypeError("BAD-AXIS", f"{op}: duplicate axis in {axis!r}", "list every axis at most once")
    return tuple(sorted(axes))


def reduced_shape(shape: ShapeSpec, axes: tuple[int, ...], keepdims: bool) -> ShapeSpec:
    if keepdims:
        return ShapeSpec(1 if i in axes else d for i, d in enumerate(shape))
    return ShapeSpec(d for i, d in enumerate(shape) if i not in axes)


@functools.cache
def _probe_dtype(fn: Callable[[np.ndarray], Any], dtype: str) -> str:
    return np.asarray(fn(np.ones(1, dtype=dtype))).dtype.name


# torch's spellings of the axis parameters (``x.sum(dim=1, keepdim=True)``), kept beside numpy's
TORCH_AXIS_NAMES = {"dim": "axis", "keepdim": "keepdims"}

_AXIS_ATTRS = {
    "axis": Attr("axes", None, doc="None (all), an axis or a tuple of axes; negative counts from the end"),
    "keepdims": Attr("bool", False, doc="keep reduced axes as size 1"),
}


def _reduce_infer(name: str, probe: Callable[[np.ndarray], Any]) -> Callable[..., TensorType]:
    def infer(ctx: InferContext, x: TensorType, axis: Any, keepdims: bool) -> TensorType:
        axes = reduce_axes(ctx, axis, x.shape.rank, name)
        return TensorType(reduced_shape(x.shape, axes, keepdims), _probe_dtype(probe, x.dtype))

    return infer


def _ufunc_reduce(ufunc: np.ufunc) -> Callable[..., np.ndarray]:
    """A kernel reducing with ``ufunc`` that always returns an ndarray."""
    reduce = ufunc.reduce

    def kernel(x: np.ndarray, axis: Any = None, keepdims: bool = False) -> np.ndarray:
        return np.asarray(reduce(x, axis=axis, keepdims=keepdims))

    return kernel


def _mean(x: np.ndarray, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    """np.mean (same accumulation dtypes, same result) without its Python-level overhead."""
    shape = x.shape
    if axis is None:
        count = x.size
    elif isinstance(axis, int):
        count = shape[axis]
    else:
        count = math.prod(shape[a] for a in axis)
    kind = x.dtype.kind
    if kind == "f" and x.dtype.itemsize >= 4:
        total = np.add.reduce(x, axis=axis, keepdims=keepdims)
        return np.asarray(np.true_divide(total, count, dtype=x.dtype))
    acc = np.float32 if x.dtype == np.float16 else np.float64  # numpy: ints and bool average in float64
    total = np.add.reduce(x, axis=axis, keepdims=keepdims, dtype=acc)
    return np.asarray(np.true_divide(total, count), dtype=x.dtype if kind == "f" else acc)


# name, kernel, dtype probe, doc
_REDUCTION_TABLE: Sequence[tuple[str, Callable[..., np.ndarray], Callable[[np.ndarray], Any], str]] = (
    ("sum", _ufunc_reduce(np.add), np.sum, "sum over axes (numpy dtypes: small ints and bool sum as int64)"),
    ("mean", _mean, np.mean, "arithmetic mean over axes (ints give float64)"),
    ("max", _ufunc_reduce(np.maximum), np.max, "maximum over axes (an empty reduction raises)"),
    ("min", _ufunc_reduce(np.minimum), np.min, "minimum over axes (an empty reduction raises)"),
    ("prod", _ufunc_reduce(np.multiply), np.prod,
     "product over axes (numpy dtypes: small ints and bool multiply as int64)"),
)

for _name, _kernel, _probe, _doc in _REDUCTION_TABLE:
    register(OpDef(name=_name, inputs=("x",), attrs=dict(_AXIS_ATTRS), infer=_reduce_infer(_name, _probe),
                   kernel=_kernel, traits=REDUCTION, doc=_doc, extra={"numpy": _probe},
                   aliases=TORCH_AXIS_NAMES))


def _argmax_infer(ctx: InferContext, x: TensorType, axis: int | None, keepdims: bool) -> TensorType:
    if axis is None:
        shape = ShapeSpec([1] * x.shape.rank) if keepdims else ShapeSpec()
    else:
        shape = reduced_shape(x.shape, (ctx.axis(axis, x.shape.rank, "argmax axis"),), keepdims)
    return TensorType(shape, "int64")


def _argmax(x: np.ndarray, axis: int | None = None, keepdims: bool = False) -> np.ndarray:
    return np.asarray(np.argmax(x, axis=axis, keepdims=keepdims), dtype=np.int64)


register(OpDef(
    name="argmax", inputs=("x",),
    attrs={"axis": Attr("int", None, doc="axis, or None for the flattened tensor"),
           "keepdims": Attr("bool", False, doc="keep the reduced axis (all if axis is None) as size 1")},
    infer=_argmax_infer, kernel=_argmax, traits=REDUCTION, aliases=TORCH_AXIS_NAMES,
    doc="index of the first maximum (int64); an empty reduction raises",
))


def _softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """exp(x - max) / sum: subtracting the row max keeps exp from overflowing."""
    x = as_float(x)
    e = np.exp(x - np.max(x, axis=axis, keepdims=True, initial=-np.inf))
    e /= np.sum(e, axis=axis, keepdims=True)
    return e


def _log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """(x - max) - log(sum(exp(x - max))), which never takes the log of an underflowed softmax."""
    x = as_float(x)
    shifted = x - np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    shifted -= np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
    return shifted


def _normalize_infer(name: str) -> Callable[..., TensorType]:
    def infer(ctx: InferContext, x: TensorType, axis: int) -> TensorType:
        ctx.axis(axis, x.shape.rank, f"{name} axis")
        return TensorType(x.shape, float_dtype(name, x.dtype))

    return infer


for _name, _kernel, _doc in (
    ("softmax", _softmax, "exp(x)/sum(exp(x)) along axis, numerically stable (ints give float64)"),
    ("log_softmax", _log_softmax, "log(softmax(x)) along axis, numerically stable"),
):
    register(OpDef(name=_name, inputs=("x",), attrs={"axis": Attr("int", -1, doc="the normalised axis")},
                   infer=_normalize_infer(_name), kernel=_kernel, traits=REDUCTION, doc=_doc,
                   params=("input", "dim", "_stacklevel", "dtype"), aliases={"input": "x", "dim": "axis"},
                   call_only={"_stacklevel": ignored(3),
                              "dtype": only(None, f"cast first: F.{_name}(x.astype('float64'), dim)")}))

__all__ = ["REDUCTION", "reduce_axes", "reduced_shape"]
