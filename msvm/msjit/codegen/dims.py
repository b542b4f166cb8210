"""Symbolic dims in generated code: LLVM IR over the run-time params, upper bounds, Python evaluators.

Why through the dim's text: a ``Dim`` prints in a small grammar (``H*2``, ``(W+1)//2``, ``min(H,N)``)
that is also Python expression syntax, so the standard ``ast`` module parses it into a tree we
walk three ways — emit i64 IR (bucket mode: loop bounds and strides computed from the params),
bound it by interval arithmetic (arena sizes for a bucket's upper bounds) and compile it to a
Python function (the launcher's output shapes). Every node is checked against a whitelist first,
so nothing but integer arithmetic on symbol names is ever compiled. ``//`` and ``%`` floor like
Python (and like ``Dim.evaluate``); a zero divisor yields 0 instead of trapping, since the launcher
rejects such shapes before native code runs.
"""

from __future__ import annotations

import ast
import functools
import math
from collections.abc import Callable, Mapping, Sequence

from llvmlite import ir

from ...shapes import Dim
from .errors import LoweringError

I64 = ir.IntType(64)
_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)
INF = math.inf


@functools.lru_cache(maxsize=8192)
def parse(dim: Dim) -> ast.expr:
    """The checked syntax tree of ``dim``."""
    if dim.is_unknown:
        raise LoweringError(
            "a dim is '?' (unknown until run time): regions must have entry-determined shapes"
        )
    tree = ast.parse(str(dim), mode="eval").body
    for node in ast.walk(tree):
        ok = isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Name, ast.Load, ast.USub, ast.Call, *_BINOPS)) or (
            isinstance(node, ast.Constant) and type(node.value) is int
        )
        if isinstance(node, ast.Call):
            ok = (
                isinstance(node.func, ast.Name)
                and node.func.id in ("min", "max")
                and len(node.args) == 2
                and not node.keywords
            )
        if not ok:
            raise LoweringError(f"dim {dim} has unsupported syntax ({type(node).__name__})")
    return tree


# -- IR -----------------------------------------------------------------------------------------------


def _positive(y: ir.Value) -> int | None:
    return y.constant if isinstance(y, ir.Constant) and y.constant > 0 else None


def floordiv(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """Python's ``x // y`` on i64 (0 when y is 0)."""
    zero, one = ir.Constant(I64, 0), ir.Constant(I64, 1)
    c = _positive(y)
    if c is not None:  # the usual case (strides, halvings): round a negative x down first
        toward = b.select(b.icmp_signed("<", x, zero), ir.Constant(I64, c - 1), zero)
        return b.sdiv(b.sub(x, toward), y)
    safe = b.select(b.icmp_signed("==", y, zero), one, y)
    q = b.sdiv(x, safe)
    r = b.srem(x, safe)
    adjust = b.and_(b.icmp_signed("!=", r, zero), b.icmp_signed("<", b.xor(r, safe), zero))
    q = b.sub(q, b.zext(adjust, I64))
    return b.select(b.icmp_signed("==", y, zero), zero, q)


def floormod(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """Python's ``x % y`` on i64 (0 when y is 0)."""
    zero, one = ir.Constant(I64, 0), ir.Constant(I64, 1)
    if _positive(y) is not None:
        r = b.srem(x, y)
        return b.add(r, b.select(b.icmp_signed("<", r, zero), y, zero))
    safe = b.select(b.icmp_signed("==", y, zero), one, y)
    r = b.srem(x, safe)
    adjust = b.and_(b.icmp_signed("!=", r, zero), b.icmp_signed("<", b.xor(r, safe), zero))
    r = b.add(r, b.select(adjust, safe, zero))
    return b.select(b.icmp_signed("==", y, zero), zero, r)


def emit(b: ir.IRBuilder, dim: Dim, params: Mapping[str, ir.Value]) -> ir.Value:
    """``dim`` as an i64 IR value computed from the run-time ``params`` (by symbol name)."""
    if dim.is_const:
        return ir.Constant(I64, dim.value)

    def walk(node: ast.expr) -> ir.Value:
        if isinstance(node, ast.Constant):
            return ir.Constant(I64, node.value)
        if isinstance(node, ast.Name):
            try:
                return params[node.id]
            except KeyError:
                raise LoweringError(f"symbol {node.id} of {dim} is not a run-time parameter") from None
        if isinstance(node, ast.UnaryOp):
            return b.neg(walk(node.operand))
        if isinstance(node, ast.Call):
            x, y = walk(node.args[0]), walk(node.args[1])
            pred = "<" if node.func.id == "min" else ">"
            return b.select(b.icmp_signed(pred, x, y), x, y)
        x, y = walk(node.left), walk(node.right)
        op = type(node.op)
        if op is ast.Add:
            return b.add(x, y)
        if op is ast.Sub:
            return b.sub(x, y)
        if op is ast.Mult:
            return b.mul(x, y)
        if op is ast.FloorDiv:
            return floordiv(b, x, y)
        return floormod(b, x, y)

    return walk(parse(dim))


# -- bounds -------------------------------------------------------------------------------------------

Interval = tuple[float, float]


def _mul(a: Interval, b: Interval) -> Interval:
    products = [
        x * y if not ((x == 0 and abs(y) == INF) or (y == 0 and abs(x) == INF)) else 0.0 for x in a for y in b
    ]
    return min(products), max(products)


def _div(a: Interval, b: Interval) -> Interval:
    lo, hi = b
    if lo <= 0 <= hi:
        if lo == hi == 0:
            return 0.0, 0.0
        return -INF, INF
    quotients = [
        (x / y if abs(y) != INF else 0.0) for x in a for y in b if not (abs(x) == INF and abs(y) == INF)
    ]
    if not quotients or any(q != q for q in quotients):
        return -INF, INF
    lo, hi = min(quotients), max(quotients)
    return (lo if abs(lo) == INF else math.floor(lo)), (hi if abs(hi) == INF else math.floor(hi))


def interval(dim: Dim, ranges: Mapping[str, Interval]) -> Interval:
    """An interval containing every value of ``dim`` when each symbol lies in its range."""
    if dim.is_const:
        return float(dim.value), float(dim.value)

    def walk(node: ast.expr) -> Interval:
        if isinstance(node, ast.Constant):
            return float(node.value), float(node.value)
        if isinstance(node, ast.Name):
            return ranges.get(node.id, (-INF, INF))
        if isinstance(node, ast.UnaryOp):
            lo, hi = walk(node.operand)
            return -hi, -lo
        if isinstance(node, ast.Call):
            (a, b), (c, d) = walk(node.args[0]), walk(node.args[1])
            return (min(a, c), min(b, d)) if node.func.id == "min" else (max(a, c), max(b, d))
        x, y = walk(node.left), walk(node.right)
        op = type(node.op)
        if op is ast.Add:
            return x[0] + y[0], x[1] + y[1]
        if op is ast.Sub:
            return x[0] - y[1], x[1] - y[0]
        if op is ast.Mult:
            return _mul(x, y)
        if op is ast.FloorDiv:
            return _div(x, y)
        lo, hi = y  # x % y lies in [0, y) for y > 0 and (y, 0] for y < 0
        if lo > 0:
            return 0.0, hi - 1
        if hi < 0:
            return lo + 1, 0.0
        return min(lo + 1, 0.0), max(hi - 1, 0.0)

    return walk(parse(dim))


def upper_bound(dim: Dim, ranges: Mapping[str, Interval]) -> int:
    """The largest value ``dim`` can take; LoweringError naming the symbols when it is unbounded."""
    hi = interval(dim, ranges)[1]
    if hi == INF:
        missing = ", ".join(sorted(s for s in dim.free_symbols if ranges.get(s, (0, INF))[1] == INF))
        raise LoweringError(
            f"size {dim} has no upper bound: give bounds for {missing or 'its symbols'} "
            "(bounds={...} of lower/compile_region)"
        )
    return max(int(hi), 0)


# -- Python evaluators --------------------------------------------------------------------------------


def evaluator(dims: Sequence[Dim], params: Sequence[str]) -> Callable[..., tuple[int, ...]]:
    """A compiled function of the params (positional, in order) returning the dims' values."""
    elts: list[ast.expr] = []
    for d in dims:
        tree = parse(d)
        unknown = d.free_symbols - set(params)
        if unknown:
            raise LoweringError(f"dim {d} uses {', '.join(sorted(unknown))}, which are not parameters")
        elts.append(tree)
    args = ast.arguments(
        posonlyargs=[], args=[ast.arg(arg=p) for p in params], kwonlyargs=[], kw_defaults=[], defaults=[]
    )
    lam = ast.Expression(ast.Lambda(args=args, body=ast.Tuple(elts=elts, ctx=ast.Load())))
    ast.fix_missing_locations(lam)
    code = compile(lam, "<msvm-dims>", "eval")
    return eval(code, {"__builtins__": {}, "min": min, "max": max})
