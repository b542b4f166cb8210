"""mathlib: accuracy against numpy/math over dense grids and extremes, and code that stays in SIMD."""

from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest
from llvmlite import ir

from msvm.native import llvm, mathlib
from msvm.native.irhelpers import FLOAT_TYPES, I64, LANES, VOID, define, for_range, gep, load_vec, store_vec

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


@pytest.fixture(scope="module")
def vector_erf() -> llvm.NativeLibrary:
    """erf over whole vectors of LANES[dtype] elements (the way the kernels call it), n a multiple."""
    module = ir.Module("mathlib_vector_test")
    for dtype, typ in FLOAT_TYPES.items():
        width = LANES[dtype]
        _, b, a = define(module, f"erf_{dtype}", VOID, [("x", typ.as_pointer()), ("y", typ.as_pointer()),
                                                         ("n", I64)], noalias=("x", "y"))
        with for_range(b, 0, a["n"], width) as i:
            value = load_vec(b, gep(b, a["x"], i), width)
            store_vec(b, b.call(mathlib.math_function(module, "erf", value.type), [value]), gep(b, a["y"], i))
        b.ret_void()
    return llvm.compile_ir(str(module), "mathlib_vector_test")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_erf_vectors_whose_lanes_take_different_branches(vector_erf: llvm.NativeLibrary, dtype: str) -> None:
    """erf skips its erfc branch when every lane is below 2: vectors all below, all above, mixed, and
    with NaN or ±inf in an otherwise small vector must all be exact."""
    width, rng = LANES[dtype], np.random.default_rng(11)
    small = rng.uniform(-1.99, 1.99, (400, width))
    large = rng.uniform(2.0, 7.0, (400, width)) * rng.choice([-1, 1], (400, width))
    mixed = np.where(rng.random((400, width)) < 0.2, large, small)
    special = small[:3].copy()
    special[0, 1], special[1, width - 1], special[2, 0] = np.nan, np.inf, -np.inf
    edges = [[2.0] * width, [-1.9999] * width]
    x = np.concatenate([small, large, mixed, special, edges]).astype(dtype).ravel()
    y = _apply(vector_erf, "erf", x)
    ref = _reference("erf", x)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    tol = 3e-7 if dtype == "float32" else 1e-15
    np.testing.assert_allclose(y[~np.isnan(ref)], ref[~np.isnan(ref)], rtol=tol, atol=tol)


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
    assert "vfmadd" in asm and ("ymm" in asm or "zmm" in asm)  # AVX2, or AVX-512 where the host has it


def test_unknown_function_is_a_clear_error() -> None:
    module = ir.Module()
    _, b, a = define(module, "f", VOID, [("x", FLOAT_TYPES["float32"])])
    with pytest.raises(KeyError, match="no 'cosh'"):
        mathlib.emit(b, "cosh", a["x"])
