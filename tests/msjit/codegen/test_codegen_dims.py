"""Symbolic dims in generated code: ``//`` and ``%`` floor like Python for every sign of the operands."""

from __future__ import annotations

import ctypes

import pytest
from llvmlite import ir

from msvm.msjit.codegen import dims
from msvm.native.llvm import compile_ir

I64 = ir.IntType(64)
VALUES = [-9, -7, -4, -3, -2, -1, 0, 1, 2, 3, 4, 7, 9]


def _library(divisors):
    """f_<op>_<i>(x, y): ``x op d`` for each constant d of ``divisors`` (None: y, a run-time value)."""
    module = ir.Module("dims_test")
    for op in ("floordiv", "floormod"):
        for i, d in enumerate(divisors):
            fn = ir.Function(module, ir.FunctionType(I64, [I64, I64]), name=f"{op}_{i}")
            b = ir.IRBuilder(fn.append_basic_block())
            x, y = fn.args
            b.ret(getattr(dims, op)(b, x, y if d is None else ir.Constant(I64, d)))
    return compile_ir(str(module), "dims_test")


@pytest.mark.parametrize("op", ["floordiv", "floormod"])
def test_floor_division_matches_python(op):
    divisors = [None, 1, 2, 3, 8, -2]  # constant positive divisors take a shorter path
    lib = _library(divisors)
    for i, d in enumerate(divisors):
        fn = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)(lib.address(f"{op}_{i}"))
        for x in VALUES:
            for y in VALUES if d is None else [d]:
                expected = 0 if y == 0 else (x // y if op == "floordiv" else x % y)
                assert fn(x, y) == expected, (op, x, y)


def test_interval_of_a_quotient_of_an_unbounded_symbol():
    from msvm.shapes import parse_dim

    assert dims.interval(parse_dim("N // 4"), {"N": (0.0, dims.INF)}) == (0, dims.INF)
    assert dims.interval(parse_dim("N // 4"), {"N": (-dims.INF, dims.INF)}) == (-dims.INF, dims.INF)
    assert dims.interval(parse_dim("N // 4"), {"N": (0.0, 18.0)}) == (0, 4)
