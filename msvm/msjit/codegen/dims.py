"""Symbolic dims in generated code: LLVM IR over the run-time params, upper bounds, Python evaluators.

Each walks a ``Dim``'s normal form (``Dim.terms``: a sum of coefficient × factors, a factor being a
symbol or ``a//b``, ``a%b``, ``min``, ``max`` of two dims) three ways — emit i64 IR (bucket mode:
loop bounds and strides computed from the params), bound it by interval arithmetic (arena sizes for
a bucket's upper bounds) and print it as Python (the launcher's output shapes). Not through ``ast``:
these run on the compiler thread, and CPython 3.11's AST constructor keeps one recursion counter for
all threads, so a parse here fails a parse on the user's thread ("AST constructor recursion depth
mismatch"). ``//`` and ``%`` floor like Python (and like ``Dim.evaluate``); in IR a zero divisor
yields 0 instead of trapping, since the launcher rejects such shapes before native code runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from llvmlite import ir

from ...shapes import Dim
from .errors import LoweringError

I64 = ir.IntType(64)
INF = math.inf
T = TypeVar("T")


def fold(
    dim: Dim,
    const: Callable[[int], T],
    symbol: Callable[[str], T],
    apply: Callable[[str, T, T], T],
) -> T:
    """``dim`` rebuilt bottom-up: ``apply(op, x, y)`` for op in ``+ * // % min max``."""
    if dim.is_unknown:
        raise LoweringError(
            "a dim is '?' (unknown until run time): regions must have entry-determined shapes"
        )

    def factor(f: str | tuple[str, Dim, Dim]) -> T:
        if isinstance(f, str):
            return symbol(f)
        op, a, b = f
        return apply(op, fold(a, const, symbol, apply), fold(b, const, symbol, apply))

    total = None
    for k, factors in dim.terms:
        term = None
        for f in factors:
            x = factor(f)
            term = x if term is None else apply("*", term, x)
        if term is None:
            term = const(k)
        elif k != 1:
            term = apply("*", term, const(k))
        total = term if total is None else apply("+", total, term)
    return const(0) if total is None else total


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

    def symbol(name: str) -> ir.Value:
        try:
            return params[name]
        except KeyError:
            raise LoweringError(f"symbol {name} of {dim} is not a run-time parameter") from None

    def apply(op: str, x: ir.Value, y: ir.Value) -> ir.Value:
        if op == "+":
            return b.add(x, y)
        if op == "*":
            return b.mul(x, y)
        if op == "//":
            return floordiv(b, x, y)
        if op == "%":
            return floormod(b, x, y)
        return b.select(b.icmp_signed("<" if op == "min" else ">", x, y), x, y)

    return fold(dim, lambda k: ir.Constant(I64, k), symbol, apply)


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

    def apply(op: str, x: Interval, y: Interval) -> Interval:
        if op == "+":
            return x[0] + y[0], x[1] + y[1]
        if op == "*":
            return _mul(x, y)
        if op == "//":
            return _div(x, y)
        if op == "min":
            return min(x[0], y[0]), min(x[1], y[1])
        if op == "max":
            return max(x[0], y[0]), max(x[1], y[1])
        lo, hi = y  # x % y lies in [0, y) for y > 0 and (y, 0] for y < 0
        if lo > 0:
            return 0.0, hi - 1
        if hi < 0:
            return lo + 1, 0.0
        return min(lo + 1, 0.0), max(hi - 1, 0.0)

    return fold(dim, lambda k: (float(k), float(k)), lambda name: ranges.get(name, (-INF, INF)), apply)


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
    local = {p: f"p{i}" for i, p in enumerate(params)}  # a symbol may be spelled like a keyword

    def symbol(name: str) -> str:
        try:
            return local[name]
        except KeyError:
            raise LoweringError(f"a dim uses {name}, which is not a parameter") from None

    def apply(op: str, x: str, y: str) -> str:
        return f"{op}({x}, {y})" if op in ("min", "max") else f"({x} {op} {y})"

    body = "".join(f"{fold(d, str, symbol, apply)}, " for d in dims)
    source = f"lambda {', '.join(local.values())}: ({body})"
    return eval(compile(source, "<msvm-dims>", "eval"), {"__builtins__": {}, "min": min, "max": max})
