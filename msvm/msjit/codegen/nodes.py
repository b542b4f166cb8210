"""Lazy tensor expressions: what a fused kernel computes at one index of its loop nest.

A register's value is an ``Expr`` until something forces it into memory: ``Load`` reads a buffer
through a view, ``Const`` is a literal, ``Map`` applies an elementwise op to children of its own
shape, ``Remap`` reads its child at indices computed by an index map (a layout op that could not be
folded into a view), ``Index`` is the index itself (arange, causal masks). Other node kinds (pad,
gathers, pooling windows, row-kernel results) live with their emitters and follow the same
protocol: ``emit(fb, idx)`` produces one scalar IR value inside the caller's loops, ``relayout``
pushes a layout op down to the leaves where it becomes view arithmetic.

Elementwise nodes are index-preserving, so a layout op applied to ``f(a, b)`` is the same op applied
to ``a`` and ``b``: transposes, slices, broadcasts and reshapes of a fused chain cost nothing but
different strides in the loads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from llvmlite import ir

from ...shapes import Dim
from . import dtypes
from .buffers import Buffer
from .dtypes import I64
from .views import Affine, IndexMap, Reshape, Shape, View, contiguous_strides

if TYPE_CHECKING:
    from .emit import FnBuilder


class Expr:
    """A tensor value defined by how to compute one element of it."""

    shape: Shape
    dtype: str
    compute = True  # does evaluating it cost arithmetic (as opposed to a plain read)?

    def children(self) -> tuple[Expr, ...]:
        return ()

    def rebuild(self, children: Sequence[Expr]) -> Expr:
        return self

    def relayout(self, m: IndexMap) -> Expr:
        return Remap(self, m)

    def value(self, fb: FnBuilder, idx: Sequence[ir.Value]) -> ir.Value:
        """The element at ``idx`` (memoised: a DAG shared inside one kernel is emitted once)."""
        key = (id(self), *map(id, idx))
        hit = fb.recall(key)
        if hit is None:
            hit = self.emit(fb, idx)
            fb.remember(key, hit, (self, idx))
        return hit

    def emit(self, fb: FnBuilder, idx: Sequence[ir.Value]) -> ir.Value:
        raise NotImplementedError

    def label(self) -> str:
        return type(self).__name__.lower()

    @property
    def depth(self) -> int:
        """Longest path to a leaf (cached: expressions are immutable)."""
        cached = self.__dict__.get("_depth")
        if cached is None:
            cached = self.__dict__["_depth"] = 1 + max((c.depth for c in self.children()), default=0)
        return cached


class Load(Expr):
    compute = False

    def __init__(self, buffer: Buffer, view: View) -> None:
        self.buffer, self.view = buffer, view
        self.shape, self.dtype = view.shape, buffer.dtype

    @classmethod
    def of(cls, buffer: Buffer) -> Load:
        return cls(buffer, View.contiguous(buffer.shape))

    def relayout(self, m: IndexMap) -> Expr:
        view = self.view.map(m)
        return Remap(self, m) if view is None else Load(self.buffer, view)

    def emit(self, fb: FnBuilder, idx: Sequence[ir.Value]) -> ir.Value:
        return fb.load(self.buffer, self.view, idx)

    def label(self) -> str:
        return f"load {self.buffer.name}"


class Const(Expr):
    """A literal (or an int64 scalar register's value) broadcast to ``shape``."""

    compute = False

    def __init__(self, value: float | int | bool | Dim, dtype: str, shape: Shape) -> None:
        self.scalar, self.dtype, self.shape = value, dtype, tuple(shape)

    def relayout(self, m: IndexMap) -> Expr:
        return Const(self.scalar, self.dtype, m.new_shape)

    def emit(self, fb: FnBuilder, idx: Sequence[ir.Value]) -> ir.Value:
        if isinstance(self.scalar, Dim) and not self.scalar.is_const:
            return dtypes.cast(fb.b, fb.dim(self.scalar), "int64", self.dtype)
        value = self.scalar.value if isinstance(self.scalar, Dim) else self.scalar
        return dtypes.constant(self.dtype, value)

    def label(self) -> str:
        return f"const {self.scalar}"


class Map(Expr):
    """An elementwise op (``emit_elementwise.apply``) on children that all have this node's shape."""

    def __init__(self, op: str, children: Sequence[Expr], dtype: str, attrs: tuple = ()) -> None:
        self.op, self.args, self.dtype, self.attrs = op, tuple(children), dtype, attrs
        self.shape = self.args[0].shape
        self.compute = op != "cast"

    def children(self) -> tuple[Expr, ...]:
        return self.args

    def rebuild(self, children: Sequence[Expr]) -> Expr:
        return Map(self.op, children, self.dtype, self.attrs)

    def relayout(self, m: IndexMap) -> Expr:
        """The op applied to the relaid-out children; each shared node of the DAG is relaid out once."""
        done: dict[int, Expr] = {}

        def visit(node: Expr) -> Expr:
            if not isinstance(node, Map):
                return node.relayout(m)
            hit = done.get(id(node))
            if hit is None:
                hit = done[id(node)] = Map(node.op, [visit(c) for c in node.args], node.dtype, node.attrs)
            return hit

        return visit(self)

    def emit(self, fb: FnBuilder, idx: Sequence[ir.Value]) -> ir.Value:
        from .emit_elementwise import apply

        values = [c.value(fb, idx) for c in self.args]
        return apply(fb, self.op, dict(self.attrs), values, [c.dtype for c in self.args], self.dtype)

    def label(self) -> str:
        return self.op


class Remap(Expr):
    """``child`` read at ``m(idx)``: a layout op that is not a view of the child."""

    def __init__(self, child: Expr, m: IndexMap) -> None:
        self.child, self.map = child, m
        self.shape, self.dtype, self.compute = m.new_shape, child.dtype, child.compute

    def children(self) -> tuple[Expr, ...]:
        return (self.child,)

    def rebuild(self, children: Sequence[Expr]) -> Expr:
        return children[0].relayout(self.map)

    def relayout(self, m: IndexMap) -> Expr:
        if isinstance(self.map, Affine) and isinstance(m, Affine):
            return Remap(self.child, self.map.compose(m))
        return Remap(self, m)

    def emit(self, fb: FnBuilder, idx: Sequence[ir.Value]) -> ir.Value:
        return self.child.value(fb, map_index(fb, self.map, idx))

    def label(self) -> str:
        return "remap"


class Index(Expr):
    """The index along ``axis`` as an int64 (arange, causal masks)."""

    compute = False
    dtype = "int64"

    def __init__(self, axis: int, shape: Shape) -> None:
        self.axis, self.shape = axis, tuple(shape)

    def emit(self, fb: FnBuilder, idx: Sequence[ir.Value]) -> ir.Value:
        return idx[self.axis]


def map_index(fb: FnBuilder, m: IndexMap, idx: Sequence[ir.Value]) -> list[ir.Value]:
    """The input indices of index map ``m`` at output indices ``idx``."""
    b = fb.b
    if isinstance(m, Affine):
        out = []
        for row, const in zip(m.rows, m.consts):
            total = None if const == 0 else fb.dim(const)
            for j, coeff in row:
                term = idx[j] if coeff == 1 else b.mul(idx[j], fb.dim(coeff), flags=("nsw",))
                total = term if total is None else b.add(total, term, flags=("nsw",))
            out.append(ir.Constant(I64, 0) if total is None else total)
        return out
    assert isinstance(m, Reshape)
    flat = fb.offset(View(m.new_shape, contiguous_strides(m.new_shape)), idx)
    out = []
    for d in reversed(m.old_shape):
        if d == 1:
            out.append(ir.Constant(I64, 0))
            continue
        extent = fb.dim(d)
        out.append(b.urem(flat, extent))
        flat = b.udiv(flat, extent)
    return out[::-1]


# -- walking expressions ------------------------------------------------------------------------------


def walk(expr: Expr) -> Iterator[Expr]:
    """Every node once (the expression may be a DAG)."""
    seen: set[int] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(node.children())


def replace(expr: Expr, fn: Callable[[Expr], Expr | None]) -> Expr:
    """``expr`` rebuilt bottom-up with ``fn(node)`` substituted wherever it returns an expression."""
    done: dict[int, tuple[Expr, Any]] = {}

    def visit(node: Expr) -> Expr:
        hit = done.get(id(node))
        if hit is not None:
            return hit[0]
        sub = fn(node)
        if sub is None:
            kids = node.children()
            new_kids = [visit(c) for c in kids]
            sub = node if all(a is b for a, b in zip(kids, new_kids)) else node.rebuild(new_kids)
        done[id(node)] = (sub, node)
        return sub

    return visit(expr)


def is_compute(expr: Expr) -> bool:
    """Does evaluating ``expr`` cost arithmetic anywhere (cached per node: expressions are immutable, and
    the planner asks for every value of a long chain)?"""
    cached = expr.__dict__.get("_computes")
    if cached is None:
        cached = expr.__dict__["_computes"] = expr.compute or any(map(is_compute, expr.children()))
    return cached


def loads(expr: Expr) -> list[Load]:
    return [node for node in walk(expr) if isinstance(node, Load)]


def summary(expr: Expr) -> str:
    """The ops of an expression in evaluation order, for kernel descriptions."""
    ops: list[str] = []

    def visit(node: Expr, seen: set[int]) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        for c in node.children():
            visit(c, seen)
        if not isinstance(node, (Load, Const, Remap, Index)):
            ops.append(node.label())

    visit(expr, set())
    return ",".join(ops) or "copy"
