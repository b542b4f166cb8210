"""mathlib: accuracy against numpy/math over dense grids and extremes, and code that stays in SIMD."""

from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest
from llvmlite import ir

from msvm.native import llvm, mathlib
from msvm.native.irhelpers import FLOAT_TYPES, I64, VOID, define, for_range, gep

# Documented bounds: ulp for float32 (vs the float64 reference rounded to float32), relative
# error for float64 (normal results; subnormal ones are checked absolutely).
ULP32 = {"exp": 2, "expm1": 2, "log": 2, "tanh": 3, "sigmoid": 3, "erf": 3}
REL64 = {"exp": 3e-16, "expm1": 4e-16, "log": 3e-16, "tanh": 5e-16, "sigmoid": 5e-16, "erf": 1e-15}


@pytest.fixture(scope="module")
def lib() -> llvm.NativeLibrary:
    module = ir.Module("mathlib_test")
    for dtype, typ in FLOAT_TYPES.items():
        for name in mathlib.EMITTERS:
            _, b, a = define(module, f"{name}_{dtype}", VOID,
                             [("x", typ.as_pointer()), ("y", typ.as_pointer()), ("n", I64)],
                             noalias=("x", "y"))
            with for_range(b, 0, a["n"]) as i:
                value = b.load(gep(b, a["x"], i))
                b.store(b.call(mathlib.math_function(module, name, typ), [value]), gep(b, a["y"], i))
            b.ret_void()
    return llvm.compile_ir(str(module), "mathlib_test")


def _apply(lib: llvm.NativeLibrary, name: str, x: np.ndarray) -> np.ndarray:
    args = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    fn = lib.ctypes_function(f"{name}_{x.dtype.name}", None, args)
    y = np.empty_like(x)
    fn(x.ctypes.data, y.ctypes.data, x.size)
    return y


def _reference(name: str, x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    with np.errstate(all="ignore"):
        if name == "sigmoid":
            e = np.exp(-np.abs(x))
            return np.where(x >= 0, 1 / (1 + e), e / (1 + e))
        if name == "erf":
            return np.array([math.erf(v) for v in x])
        return getattr(np, name)(x)


def _grid(name: str, dtype: str) -> np.ndarray:
    rng = np.random.default_rng(7)
    f32 = dtype == "float32"
    if name == "log":
        lo, hi = (1e-45, 3e38) if f32 else (5e-324, 1e308)
        near_one = 1 + np.linspace(-1e-3, 1e-3, 20_001)
        parts = [np.geomspace(lo, hi, 200_000), rng.uniform(0.5, 2.0, 50_000), near_one]
    else:
        lim = {"exp": 110 if f32 else 750, "expm1": 110 if f32 else 750, "sigmoid": 110 if f32 else 760,
               "tanh": 30, "erf": 8}[name]
        tiny = np.geomspace(1e-30, 1, 20_000)
        parts = [np.linspace(-lim, lim, 300_001), rng.uniform(-4, 4, 50_000), tiny, -tiny]
    return np.concatenate(parts).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(mathlib.EMITTERS))
def test_accuracy(lib: llvm.NativeLibrary, name: str, dtype: str) -> None:
    x = _grid(name, dtype)
    y = _apply(lib, name, x).astype(np.float64)
    ref = _reference(name, x)
    info = np.finfo(dtype)
    normal = np.isfinite(ref) & (np.abs(ref) >= info.tiny) & (np.abs(ref) <= info.max)
    if dtype == "float32":
        ulp = np.spacing(np.abs(ref[normal]).astype(np.float32)).astype(np.float64)
        err = np.abs(y[normal] - ref[normal]) / ulp
        assert err.max() <= ULP32[name], f"{name}: {err.max():.2f} ulp at x={x[normal][err.argmax()]!r}"
    else:
        err = np.abs(y[normal] - ref[normal]) / np.abs(ref[normal])
        assert err.max() <= REL64[name], f"{name}: rel {err.max():.2e} at x={x[normal][err.argmax()]!r}"
    sub = np.isfinite(ref) & (np.abs(ref) < info.tiny)
    assert np.all(np.abs(y[sub] - ref[sub]) <= 4 * float(info.smallest_subnormal))
    over = np.isfinite(ref) & (np.abs(ref) > info.max)
    assert np.all(np.isinf(y[over]) | (np.abs(y[over] - ref[over]) <= float(info.max) * float(info.eps)))


SPECIAL = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-45, -1e-45, 1e30, -1e30]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(mathlib.EMITTERS))
def test_special_values(lib: llvm.NativeLibrary, name: str, dtype: str) -> None:
    x = np.array(SPECIAL, dtype)
    y = _apply(lib, name, x)
    with np.errstate(all="ignore"):
        ref = _reference(name, x).astype(dtype)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    finite = ~np.isnan(ref)
    np.testing.assert_allclose(y[finite], ref[finite], rtol=3e-7 if dtype == "float32" else 1e-15, atol=0)
    if name in ("tanh", "erf", "expm1"):
        assert np.signbit(y[4]), "the sign of -0 is kept"


def test_code_is_vectorised_without_calls(lib: llvm.NativeLibrary) -> None:
    asm = lib.asm
    assert "call" not in asm.replace("calls", "")  # no libm, no helpers left
    assert "vfmadd" in asm and "ymm" in asm


def test_unknown_function_is_a_clear_error() -> None:
    module = ir.Module()
    _, b, a = define(module, "f", VOID, [("x", FLOAT_TYPES["float32"])])
    with pytest.raises(KeyError, match="no 'cosh'"):
        mathlib.emit(b, "cosh", a["x"])
