"""Scans along an axis: ``cumsum``, with ONNX CumSum's ``exclusive`` and ``reverse`` switches.

Why the dtype follows numpy (and torch): a running sum of int32 or bool is int64 there, and the shape
function asks numpy once per dtype, as the reductions do, so the two agree by construction.
"""

from __future__ import annotations

import numpy as np

from .nn_common import only
from .reduction import REDUCTION, _probe_dtype
from .registry import Attr, InferContext, OpDef, TensorType, register


def _cumsum_infer(ctx: InferContext, x: TensorType, axis: int, exclusive: bool, reverse: bool) -> TensorType:
    ctx.axis(axis, max(x.shape.rank, 1), "cumsum axis")
    return TensorType(x.shape, _probe_dtype(np.cumsum, x.dtype))


def _cumsum(x: np.ndarray, axis: int, exclusive: bool = False, reverse: bool = False) -> np.ndarray:
    """A reverse scan is the forward one of the flipped axis; an exclusive one scans x shifted by one."""
    if x.ndim == 0:
        x = x.reshape(1)
        return _cumsum(x, 0, exclusive, reverse).reshape(())
    if reverse:
        x = np.flip(x, axis)
    if exclusive and x.shape[axis]:  # a shift, not cumsum - x: that would cancel a large sum's small terms
        head = np.zeros_like(np.take(x, [0], axis=axis))
        x = np.concatenate([head, np.take(x, np.arange(x.shape[axis] - 1), axis=axis)], axis=axis)
    out = np.cumsum(x, axis=axis)
    if reverse:
        out = np.flip(out, axis)
    return np.ascontiguousarray(out)


register(OpDef(
    name="cumsum", inputs=("x",),
    attrs={"axis": Attr("int", doc="the scanned axis; negative counts from the end"),
           "exclusive": Attr("bool", False, doc="each element's sum leaves out the element itself"),
           "reverse": Attr("bool", False, doc="sum from the end of the axis towards its start")},
    infer=_cumsum_infer, kernel=_cumsum, traits=REDUCTION,
    params=("input", "dim", "*", "exclusive", "reverse", "dtype"), aliases={"input": "x", "dim": "axis"},
    call_only={"dtype": only(None, "cast first: torch.cumsum(x.astype('float64'), dim)")},
    doc="running sum along an axis (torch.cumsum; ONNX CumSum's exclusive and reverse); small ints and "
        "bool sum as int64 like numpy",
))

__all__: list[str] = []
