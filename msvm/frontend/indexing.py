"""Indexing and slicing tensors with numpy's semantics, lowered to slice/squeeze/take/unsqueeze ops.

Why one canonical item list: ``x[:, :h, -1, None, ...]`` mixes slices, integers, symbols, new axes
and an ellipsis; each item is first reduced to one of five kinds, then the whole index becomes at
most one ``slice`` (every bound at once), one ``take`` or ``masked_select`` (a tensor index), one
``squeeze`` (integer indices) and one ``unsqueeze`` per ``None``.
"""

from __future__ import annotations

import ast
from typing import Any

import numpy as np

from ..ops.layout import SLICE_BEGIN, SLICE_END
from .expressions import ExpressionCompiler
from .values import BoolVal, NegIndex, ScalarVal, TensorVal, describe, is_int, is_static

# canonical items: ("slice", start, stop, step, node) | ("int", i) | ("new",) | ("ellipsis",)
# | ("tensor", index, node) where index is a TensorVal or a static int/bool array or list
Item = tuple


class IndexCompiler(ExpressionCompiler):
    def expr_Subscript(self, node: ast.Subscript) -> Any:
        if isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
            base = self.expr(node.value.value)
            if isinstance(base, TensorVal):
                return self.shape_subscript(base, node)
            container = self.attribute(base, "shape", node.value)
        else:
            container = self.expr(node.value)
        if isinstance(container, TensorVal):
            return self.index(container, self.index_items(node.slice), node)
        if isinstance(container, np.ndarray):
            items = self.index_items(node.slice)
            key = _static_key(items)
            if key is not None:
                return self.fold(node, container.__getitem__, key)
            return self.index(self.captured_array(container), items, node)
        key = self.expr_Slice(node.slice) if isinstance(node.slice, ast.Slice) else self.expr(node.slice)
        if not is_static(key):
            raise self.error("E-COMPILE-UNSUPPORTED", node, f"indexing {describe(container)} with a run-time "
                             "value", "index tuples and lists with constants; to visit every item write "
                             "`for item in items`")
        return self.fold(node, lambda: container[key])

    def expr_Slice(self, node: ast.Slice) -> slice:
        parts = [None if n is None else self.expr(n) for n in (node.lower, node.upper, node.step)]
        return slice(*parts)

    def shape_subscript(self, t: TensorVal, node: ast.Subscript) -> Any:
        """``x.shape[i]`` / ``x.shape[a:b]``: only the dims asked for are read."""
        key = self.expr_Slice(node.slice) if isinstance(node.slice, ast.Slice) else self.expr(node.slice)
        axes = list(range(t.rank))
        if isinstance(key, slice) and is_static(key):
            return tuple(self.dim(t, a) for a in axes[key])
        if not is_int(key):
            raise self.error("E-COMPILE-UNSUPPORTED", node, f"x.shape indexed with {describe(key)}",
                             "index shapes with a constant int or slice")
        if not -t.rank <= key < t.rank:
            raise self.error("E-COMPILE-INDEX", node, f"shape index {key} is out of range for a "
                             f"rank-{t.rank} tensor", f"use an index in [{-t.rank}, {t.rank - 1}]")
        return self.dim(t, axes[key])

    # -- items ------------------------------------------------------------------------------------
    def index_items(self, node: ast.expr) -> list[Item]:
        nodes = node.elts if isinstance(node, ast.Tuple) else [node]
        items: list[Item] = []
        for n in nodes:
            if isinstance(n, ast.Slice):
                step = 1 if n.step is None else self.expr(n.step)
                items.append(("slice", self.bound(n.lower), self.bound(n.upper), step, n))
            else:
                items.extend(self.item(self.bound(n), n))
        return items

    def bound(self, node: ast.expr | None) -> Any:
        """An index or slice bound; ``-s`` of a symbolic ``s`` counts from the end of the axis."""
        if node is None:
            return None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            value = self.expr(node.operand)
            return NegIndex(value) if isinstance(value, ScalarVal) else self.unary(node.op, value, node)
        return self.expr(node)

    def item(self, value: Any, node: ast.AST) -> list[Item]:
        if value is None:
            return [("new",)]
        if value is Ellipsis:
            return [("ellipsis",)]
        if isinstance(value, slice):
            return [("slice", value.start, value.stop, 1 if value.step is None else value.step, node)]
        if is_int(value) or isinstance(value, (ScalarVal, NegIndex)):
            return [("int", value)]
        if isinstance(value, tuple):
            return [it for v in value for it in self.item(v, node)]
        if isinstance(value, (list, np.ndarray, TensorVal)):
            return [("tensor", value, node)]
        if isinstance(value, (BoolVal, bool, np.bool_)):
            raise self.error("E-COMPILE-INDEX", node, "indexing with a bool scalar is not supported",
                             "use an `if` on the condition instead")
        raise self.error("E-COMPILE-INDEX", node, f"cannot index a tensor with {describe(value)}",
                         "use ints, shape values (x.shape[i]), slices, None, ... or an int/bool tensor")

    # -- lowering ---------------------------------------------------------------------------------
    def index(self, t: TensorVal, items: list[Item], node: ast.AST) -> TensorVal:
        """numpy basic indexing plus at most one int or bool tensor index."""
        items = [self.tensor_item(it) if it[0] == "tensor" else it for it in items]
        tensors = [it[1] for it in items if it[0] == "tensor"]
        used = sum(1 for it in items if it[0] in ("slice", "int"))
        used += sum(x.rank if x.dtype == "bool" else 1 for x in tensors)
        if sum(1 for it in items if it[0] == "ellipsis") > 1:
            raise self.error("E-COMPILE-INDEX", node, "an index can only have a single ellipsis ('...')",
                             "keep one `...`")
        if used > t.rank:
            raise self.error("E-COMPILE-INDEX", node, f"too many indices for a rank-{t.rank} tensor ({used} "
                             "indexed axes)", f"index at most {t.rank} axes")
        if len(tensors) > 1 or (tensors and any(it[0] == "int" for it in items)):
            raise self.error("E-COMPILE-INDEX", node, "only one tensor index, without integer indices, is "
                             "supported",
                             "index in several steps, e.g. x[i][idx] or ms.ops.take(x, idx, axis=1)")
        full = [("slice", None, None, 1, node)] * (t.rank - used)
        at = next((i for i, it in enumerate(items) if it[0] == "ellipsis"), len(items))
        items = [*items[:at], *full, *items[at + 1:]]
        axes, starts, stops, steps, squeeze, new = [], [], [], [], [], []
        advanced: tuple[int, TensorVal] | None = None
        axis = out = 0
        for it in items:
            kind = it[0]
            if kind == "new":
                new.append(out)
                out += 1
            elif kind == "slice":
                lo, hi, step = self.slice_bounds(t, axis, it[1], it[2], it[3], it[4])
                if (lo, hi, step) != (0, SLICE_END, 1):
                    axes.append(axis)
                    starts.append(lo)
                    stops.append(hi)
                    steps.append(step)
                axis += 1
                out += 1
            elif kind == "int":
                lo, hi = self.int_bounds(t, axis, it[1], node)
                axes.append(axis)
                starts.append(lo)
                stops.append(hi)
                steps.append(1)
                squeeze.append(axis)
                axis += 1
            else:
                idx = it[1]
                if idx.dtype == "bool" and (axis != 0 or idx.rank != t.rank):
                    raise self.error("E-COMPILE-INDEX", node, "a bool mask must index the whole tensor "
                                     "(x[mask] with mask.shape == x.shape)",
                                     "use ms.ops.where to select elementwise")
                advanced = (axis, idx)
                axis += idx.rank if idx.dtype == "bool" else 1
                out += 1 if idx.dtype == "bool" else idx.rank
        result = t
        if axes:
            attrs = {"axes": tuple(axes), "starts": tuple(starts), "stops": tuple(stops)}
            if any(s != 1 for s in steps):
                attrs["steps"] = tuple(steps)
            result = self.call("slice", [result], attrs)
        if advanced is not None:
            at_axis, idx = advanced
            if idx.dtype == "bool":
                result = self.call("masked_select", [result, idx])
            else:
                result = self.call("take", [result, idx], {"axis": at_axis})
        if squeeze:
            result = self.call("squeeze", [result], {"axis": tuple(squeeze)})
        for position in new:
            result = self.call("unsqueeze", [result], {"axis": position})
        return TensorVal(result.reg, result.type, t.weak)

    def tensor_item(self, item: Item) -> Item:
        value, node = item[1], item[2]
        t = value if isinstance(value, TensorVal) else self.const_array(np.asarray(value))
        if t.dtype not in ("int32", "int64", "bool"):
            raise self.error("E-COMPILE-INDEX", node, f"a tensor index must be int or bool, got {t.dtype}",
                             "cast it with .astype('int64')")
        return ("tensor", t)

    def from_end(self, t: TensorVal, axis: int, value: NegIndex, clamp: bool) -> Any:
        """``-s`` on an axis of size L: ``L - s`` (clamped at 0 for slice bounds, as Python clamps them).

        ``s`` is taken to be >= 1, as in the ``x[:-k]`` idiom (Python reads ``x[:-0]`` as ``x[:0]``).
        """
        position = self.scalar_op("sub", self.dim(t, axis), value.value)
        return self.scalar_op("max", position, 0) if clamp else position

    def slice_bounds(self, t: TensorVal, axis: int, start: Any, stop: Any, step: Any, node: ast.AST) -> tuple:
        if not is_int(step) or step == 0:
            raise self.error("E-COMPILE-INDEX", node, "a slice step must be a non-zero constant int, got "
                             f"{describe(step)}", "use a literal step such as ::2 or ::-1")
        step = int(step)
        default_lo, default_hi = (0, SLICE_END) if step > 0 else (SLICE_END, SLICE_BEGIN)
        out = []
        for value, default in ((start, default_lo), (stop, default_hi)):
            if value is None:
                out.append(default)
            elif is_int(value):
                out.append(int(value))
            elif isinstance(value, ScalarVal):
                out.append(value)
            elif isinstance(value, NegIndex):
                out.append(self.from_end(t, axis, value, clamp=True))
            else:
                raise self.error("E-COMPILE-INDEX", node, "a slice bound must be an int or a shape value, "
                                 f"got {describe(value)}", "use ints, x.shape[i], len(x) or ms.mutable ints")
        return out[0], out[1], step

    def int_bounds(self, t: TensorVal, axis: int, value: Any, node: ast.AST) -> tuple[Any, Any]:
        """An integer index as a one-element slice (squeezed afterwards)."""
        if isinstance(value, NegIndex):
            value = self.from_end(t, axis, value, clamp=False)
        if isinstance(value, ScalarVal):
            return value, self.scalar_op("add", value, 1)
        i = int(value)
        size = t.shape[axis]
        if size.is_const:
            if not -size.value <= i < size.value:
                raise self.error("E-COMPILE-INDEX", node, f"index {i} is out of bounds for axis {axis} with "
                                 f"size {size.value}", f"use an index in [{-size.value}, {size.value - 1}]")
            i %= size.value
        return i, (SLICE_END if i == -1 else i + 1)


def _static_key(items: list[Item]) -> tuple | None:
    """The numpy index the items spell when every part is static (for indexing captured arrays)."""
    key: list[Any] = []
    for it in items:
        kind = it[0]
        if kind == "slice":
            part: Any = slice(it[1], it[2], it[3])
            values = it[1:4]
        elif kind in ("int", "tensor"):
            part = values = it[1]
        else:
            part, values = (None if kind == "new" else Ellipsis), None
        if not is_static(values):
            return None
        key.append(part)
    return tuple(key)


__all__ = ["IndexCompiler"]
