"""Element types in generated code: storage and register IR types, constants and numpy's casts.

Why two types per dtype: numpy stores ``bool`` as a byte, while IR computes on ``i1``; every other
dtype is the same in memory and in registers (``half`` arithmetic is legalised by LLVM by promoting
to float and rounding after each op — exactly numpy's float16 semantics). ``cast`` reproduces
``ndarray.astype``, including x86's answer for out-of-range float → int conversions.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()

STORAGE = {"float16": F16, "float32": F32, "float64": F64, "int32": I32, "int64": I64, "bool": I8}
REGISTER = {**STORAGE, "bool": I1}
FLOATS = ("float16", "float32", "float64")


def is_float(dtype: str) -> bool:
    return dtype in FLOATS


def itemsize(dtype: str) -> int:
    return np.dtype(dtype).itemsize


def constant(dtype: str, value: float | int | bool) -> ir.Constant:
    """``value`` converted like ``np.array(value).astype(dtype)``, as a register-typed IR constant."""
    with np.errstate(all="ignore"):
        converted = np.array(value).astype(dtype).item()
    if dtype == "bool":
        return ir.Constant(I1, int(bool(converted)))
    return ir.Constant(REGISTER[dtype], converted)


def to_storage(b: ir.IRBuilder, value: ir.Value, dtype: str) -> ir.Value:
    return b.zext(value, I8) if dtype == "bool" else value


def from_storage(b: ir.IRBuilder, value: ir.Value, dtype: str) -> ir.Value:
    return b.icmp_unsigned("!=", value, ir.Constant(I8, 0)) if dtype == "bool" else value


def _width(dtype: str) -> int:
    return {"float16": 16, "float32": 32, "float64": 64, "int32": 32, "int64": 64, "bool": 1}[dtype]


def cast(b: ir.IRBuilder, value: ir.Value, src: str, dst: str) -> ir.Value:
    """``value`` (a register of dtype ``src``) converted to ``dst`` with ``astype`` semantics."""
    if src == dst:
        return value
    typ = REGISTER[dst]
    if dst == "bool":
        if is_float(src):
            return b.fcmp_unordered("!=", value, ir.Constant(value.type, 0.0))
        return b.icmp_signed("!=", value, ir.Constant(value.type, 0))
    if src == "bool":
        return b.uitofp(value, typ) if is_float(dst) else b.zext(value, typ)
    if is_float(src) and is_float(dst):
        return b.fpext(value, typ) if _width(dst) > _width(src) else b.fptrunc(value, typ)
    if is_float(dst):
        return b.sitofp(value, typ)
    if is_float(src):
        # x86 cvtt: out-of-range and NaN give the most negative integer (what numpy returns here)
        limit = float(2 ** (_width(dst) - 1))
        wide = value if src != "float16" else b.fpext(value, F32)
        lo = b.fcmp_ordered(">=", wide, ir.Constant(wide.type, -limit))
        hi = b.fcmp_ordered("<", wide, ir.Constant(wide.type, limit))
        inside = b.and_(lo, hi)
        safe = b.select(inside, wide, ir.Constant(wide.type, 0.0))
        return b.select(inside, b.fptosi(safe, typ), ir.Constant(typ, -(1 << (_width(dst) - 1))))
    if _width(dst) > _width(src):
        return b.sext(value, typ)
    return b.trunc(value, typ)
