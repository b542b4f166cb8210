"""Data-dependent ops: nonzero and masked_select, whose output sizes depend on tensor values.

Their output dims are ``?``: nothing downstream can be anchored to them (SCD), and a JIT region ends
at them.
"""

from __future__ import annotations

import numpy as np

from ..shapes import UNKNOWN, ShapeSpec
from .registry import InferContext, OpDef, OpTypeError, TensorType, register

DATA_DEPENDENT = frozenset({"data_dependent"})


def _nonzero_infer(ctx: InferContext, x: TensorType) -> TensorType:
    return TensorType(ShapeSpec([UNKNOWN, x.shape.rank]), "int64")


register(OpDef(
    name="nonzero", inputs=("x",), attrs={}, infer=_nonzero_infer,
    kernel=lambda x: np.argwhere(x).astype(np.int64, copy=False), traits=DATA_DEPENDENT,
    doc="indices of the non-zero elements, one row each: [?, rank] int64 (torch.nonzero)",
))


def _masked_select_infer(ctx: InferContext, x: TensorType, mask: TensorType) -> TensorType:
    if mask.dtype != "bool":
        raise OpTypeError("DTYPE", f"masked_select: mask must be bool, got {mask.dtype}",
                          "compare first, e.g. ms.ops.not_equal(m, 0)")
    ctx.broadcast(x.shape, mask.shape, what="masked_select broadcast")
    return TensorType(ShapeSpec([UNKNOWN]), x.dtype)


def _masked_select(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    if x.shape != mask.shape:
        x, mask = np.broadcast_arrays(x, mask)
    return x[mask]


register(OpDef(
    name="masked_select", inputs=("x", "mask"), attrs={}, infer=_masked_select_infer, kernel=_masked_select,
    traits=DATA_DEPENDENT, doc="the elements of x where mask (broadcast with x) is true, as a 1-D tensor",
))
