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


EXPRS = [
    "N",
    "N*2-3",
    "(W+1)//2",
    "H*W-N",
    "min(H,N)*3",
    "max(N-7,W)",
    "-N",
    "(N-W)%3",
    "H*H",
    "7",
    "(H*2)//(W+1)",
]


def test_ir_evaluator_and_interval_agree_with_dim_evaluate():
    """The three walks of a dim's normal form compute what ``Dim.evaluate`` does, for every sign."""
    from msvm.shapes import parse_dim

    params = ["N", "H", "W"]
    parsed = [parse_dim(e) for e in EXPRS]
    module = ir.Module("dims_walk")
    for i, d in enumerate(parsed):
        fn = ir.Function(module, ir.FunctionType(I64, [I64] * 3), name=f"d{i}")
        b = ir.IRBuilder(fn.append_basic_block())
        b.ret(dims.emit(b, d, dict(zip(params, fn.args))))
    lib = compile_ir(str(module), "dims_walk")
    native = [ctypes.CFUNCTYPE(*[ctypes.c_int64] * 4)(lib.address(f"d{i}")) for i in range(len(parsed))]
    evaluate = dims.evaluator(parsed, params)
    ranges = {"N": (-4.0, 9.0), "H": (0.0, 5.0), "W": (1.0, 6.0)}
    for n in range(-4, 10):
        for h in range(0, 6):
            for w in range(1, 7):
                want = [d.evaluate({"N": n, "H": h, "W": w}) for d in parsed]
                assert list(evaluate(n, h, w)) == want
                assert [f(n, h, w) for f in native] == want
                for d, v in zip(parsed, want):
                    lo, hi = dims.interval(d, ranges)
                    assert lo <= v <= hi, (str(d), v, lo, hi)


def test_a_symbol_spelled_like_a_python_keyword_evaluates():
    from msvm.shapes import parse_dim

    assert dims.evaluator([parse_dim("lambda*2+1"), parse_dim("min(if,3)")], ["lambda", "if"])(4, 5) == (9, 3)
    with pytest.raises(dims.LoweringError, match="not a parameter"):
        dims.evaluator([parse_dim("N+M")], ["N"])
    with pytest.raises(dims.LoweringError, match="unknown until run time"):
        dims.upper_bound(parse_dim("?"), {})
