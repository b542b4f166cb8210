"""matmul (numpy semantics, batch broadcasting) and linear (PyTorch's F.linear: x @ w.T + b).

The contracted dims must agree: a provable mismatch is a verification error, an undecidable one a
run-time guard. Batch dims broadcast like numpy's ``matmul``. linear is an nn op too (an
``NnOpDef``: ``bias=None`` and keyword inputs, like torch), but keeps numpy's dtype promotion.
"""

from __future__ import annotations

import numpy as np

from ..shapes import ShapeSpec
from .elementwise import array_kernel, ufunc_dtype
from .nn_common import NN, NnOpDef
from .registry import InferContext, OpDef, OpTypeError, TensorType, register

LINALG = frozenset({"linalg"})


def matmul_shape(ctx: InferContext, a: ShapeSpec, b: ShapeSpec, op: str = "matmul") -> ShapeSpec:
    """numpy's matmul shape rule: 1-D operands get a dim added for the product and removed after."""
    if a.rank == 0 or b.rank == 0:
        raise OpTypeError("RANK", f"{op}: operands must have rank >= 1, got {a} and {b}",
                          "use mul for scalar products")
    a2 = ShapeSpec([1, *a]) if a.rank == 1 else a
    b2 = ShapeSpec([*b, 1]) if b.rank == 1 else b
    ctx.require_equal(a2[-1], b2[-2], f"{op} contracted dim ({a} @ {b})")
    batch = ctx.broadcast(ShapeSpec(a2[:-2]), ShapeSpec(b2[:-2]), what=f"{op} batch broadcast")
    out = list(batch)
    if a.rank > 1:
        out.append(a2[-2])
    if b.rank > 1:
        out.append(b2[-1])
    return ShapeSpec(out)


def _matmul_infer(ctx: InferContext, a: TensorType, b: TensorType) -> TensorType:
    return TensorType(matmul_shape(ctx, a.shape, b.shape), ufunc_dtype("matmul", np.matmul, a.dtype, b.dtype))


register(OpDef(
    name="matmul", inputs=("a", "b"), attrs={}, infer=_matmul_infer, kernel=array_kernel(np.matmul),
    traits=LINALG, doc="a @ b with numpy semantics (1-D operands, broadcast batch dims)",
    extra={"numpy": np.matmul},
))


def _linear_infer(ctx: InferContext, x: TensorType, w: TensorType, b: TensorType | None = None) -> TensorType:
    if w.shape.rank != 2:
        raise OpTypeError("RANK", f"linear: weight must be 2-D [out, in], got {w.shape}")
    if x.shape.rank == 0:
        raise OpTypeError("RANK", "linear: input must have rank >= 1, got a scalar")
    ctx.require_equal(x.shape[-1], w.shape[1], f"linear in_features (x {x.shape}, weight {w.shape})")
    out = ShapeSpec([*x.shape[:-1], w.shape[0]])
    dtype = ufunc_dtype("linear", np.matmul, x.dtype, w.dtype)
    if b is not None:
        if b.shape.rank > 1:
            raise OpTypeError("RANK", f"linear: bias must be 0-D or 1-D [out], got {b.shape}")
        out = ctx.broadcast(out, b.shape, what="linear bias broadcast")
        dtype = ufunc_dtype("linear", np.add, dtype, b.dtype)
    return TensorType(out, dtype)


def _linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    y = np.asarray(np.matmul(x, w.T))
    if b is None:
        return y
    if y.ndim and np.result_type(y, b) == y.dtype and np.broadcast_shapes(y.shape, np.shape(b)) == y.shape:
        return np.add(y, b, out=y)  # y is ours: no second output
    return np.asarray(np.add(y, b))


register(NnOpDef(
    name="linear", inputs=("input", "weight", "bias"), attrs={}, infer=_linear_infer, kernel=_linear,
    traits=NN | LINALG, optional_inputs=1,
    doc="x @ w.T + b (PyTorch F.linear): w is [out, in], the bias b is optional",
))
