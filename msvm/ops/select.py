"""Ops that pick elements by index arithmetic: the triangle masks ``triu``/``tril`` and torch's ``gather``.

Why ``gather`` checks its indices: numpy's fancy indexing would clip nothing and raise a bare
IndexError deep in the kernel, or silently wrap a negative index, so the range is checked up front
(``[-size, size)``, negative counting from the end as ONNX's GatherElements allows) and a bad index is
named. Why ``triu``/``tril`` are ops and not an ``arange`` comparison: exporters write a causal mask
with Trilu, and one op keeps the mask's symbolic shape as it is.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..shapes import dmin
from .layout import LAYOUT
from .nn_common import require_index_dtype
from .registry import Attr, InferContext, OpDef, OpTypeError, TensorType, register


def _triangle_infer(name: str) -> Callable[..., TensorType]:
    def infer(ctx: InferContext, x: TensorType, diagonal: int) -> TensorType:
        if x.shape.rank < 2:
            raise OpTypeError("RANK", f"{name}: input has rank {x.shape.rank} {x.shape}",
                              "the input must be at least 2-D (a batch of matrices in the last two dims)")
        return TensorType(x.shape, x.dtype)

    return infer


for _name, _numpy, _kept in (("triu", np.triu, "on and above"), ("tril", np.tril, "on and below")):
    register(OpDef(
        name=_name, inputs=("x",),
        attrs={"diagonal": Attr("int", 0, doc="the diagonal kept: 0 the main one, > 0 above it, < 0 below")},
        infer=_triangle_infer(_name),
        kernel=lambda x, diagonal, fn=_numpy: np.asarray(fn(x, diagonal)),
        params=("input", "diagonal"), aliases={"input": "x"}, traits=LAYOUT,
        doc=f"torch.{_name}: the elements {_kept} a diagonal of the last two dims, zeros elsewhere",
    ))


def _gather_infer(ctx: InferContext, x: TensorType, index: TensorType, axis: int) -> TensorType:
    require_index_dtype("gather", "index", index)
    rank = x.shape.rank
    if index.shape.rank != rank:
        raise OpTypeError("RANK", f"gather: index has rank {index.shape.rank}, the input {rank}",
                          "index must have the input's rank (one index per output element)")
    a = ctx.axis(axis, max(rank, 1), "gather axis")
    for d, (size, n) in enumerate(zip(x.shape, index.shape)):
        if d == a or n.is_unknown or size.is_unknown:
            continue
        if n.is_const and size.is_const:
            if n.value > size.value:
                raise OpTypeError("SHAPE-MISMATCH", f"gather: index.shape[{d}] = {n.value} is larger "
                                  f"than the input's {size.value}", "off the gathered axis, index can be at "
                                  "most as large as the input (it reads the leading positions)")
        else:
            ctx.require_equal(dmin(n, size), n, f"gather: index.shape[{d}] {n} <= input.shape[{d}] {size}")
    return TensorType(index.shape, x.dtype)


def _gather(x: np.ndarray, index: np.ndarray, axis: int) -> np.ndarray:
    size = x.shape[axis]
    if index.size:
        bad = index[(index < -size) | (index >= size)]
        if bad.size:
            raise IndexError(f"gather: index {int(bad.flat[0])} is out of range for size {size} along axis "
                             f"{axis} ({bad.size} out-of-range index(es))")
    axis %= x.ndim
    lead = tuple(slice(None) if d == axis else slice(0, n) for d, n in enumerate(index.shape))
    return np.ascontiguousarray(np.take_along_axis(x[lead], index, axis=axis))


register(OpDef(
    name="gather", inputs=("x", "index"),
    attrs={"axis": Attr("int", doc="the axis the indices select along")},
    infer=_gather_infer, kernel=_gather, params=("input", "dim", "index"),
    aliases={"input": "x", "dim": "axis"}, traits=LAYOUT,
    doc="torch.gather (ONNX GatherElements): out[i][j] = x[index[i][j]][j] along axis; the output has "
        "index's shape, index may be smaller than x off the axis; indices in [-size, size)",
))

__all__: list[str] = []
