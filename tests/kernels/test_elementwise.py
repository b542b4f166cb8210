"""The native unary math variants agree with the reference kernels (the oracle) within float tolerance."""

from __future__ import annotations

import numpy as np
import pytest

from msvm.kernels import elementwise
from msvm.ops.registry import REGISTRY
from msvm.scheduler.variants import KERNEL_OPS, VARIANTS

# (op, attrs): every form the variants compile
FORMS = [("exp", {}), ("log", {}), ("tanh", {}), ("sigmoid", {}), ("silu", {}),
         ("gelu", {"approximate": "none"}), ("gelu", {"approximate": "tanh"})]
# rtol: a few ulp of mathlib; atol: the absolute error of gelu's 1 + erf(x/√2) (and 1 + tanh) where
# it cancels for negative x, and the tail the reference's float64 erfc keeps and the formula rounds to 0
TOLERANCE = {"float32": (2e-6, 1e-6), "float64": (1e-14, 1e-15)}
IDS = [f"{op}-{a['approximate']}" if a else op for op, a in FORMS]


def kernel(op: str, attrs: dict):
    variant = next(v for v in VARIANTS[op] if v.name == "simd")
    return variant.make(REGISTRY[op].check_attrs(attrs))


def inputs(op: str, dtype: str, n: int) -> np.ndarray:
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n) * 4
    x[: min(n, 8)] = [0.0, -0.0, 1e-30, -1e-30, 20.0, -20.0, 80.0, -80.0][: min(n, 8)]
    return (np.abs(x) + 1e-3 if op == "log" else x).astype(dtype)


def reference(op: str, attrs: dict, x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return REGISTRY[op].kernel(x, **REGISTRY[op].check_attrs(attrs))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op, attrs", FORMS, ids=IDS)
@pytest.mark.parametrize("n", [1, 7, 4096 * 3 + 5, 200_003])  # scalar tails, chunks, several threads
def test_agrees_with_the_reference(op: str, attrs: dict, dtype: str, n: int) -> None:
    x = inputs(op, dtype, n)
    out = kernel(op, attrs)(x)
    expected = reference(op, attrs, x)
    assert out.dtype == expected.dtype and out.shape == expected.shape
    rtol, atol = TOLERANCE[dtype]
    np.testing.assert_allclose(out, expected, rtol=rtol, atol=atol)


@pytest.mark.parametrize("op, attrs", FORMS, ids=IDS)
def test_special_values_match_the_reference(op: str, attrs: dict) -> None:
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):
        expected = reference(op, attrs, x)
    np.testing.assert_array_equal(kernel(op, attrs)(x), expected)


def test_any_shape_layout_and_a_given_output() -> None:
    x = np.random.default_rng(0).standard_normal((6, 50, 70)).astype(np.float32)
    view = x.transpose(2, 0, 1)[::2]  # not contiguous: copied first
    gelu = kernel("gelu", {})
    np.testing.assert_allclose(gelu(view), reference("gelu", {}, view), *TOLERANCE["float32"])
    out = np.empty(view.shape, np.float32)
    assert gelu(view, out=out) is out
    assert kernel("tanh", {})(np.array(0.5)).shape == ()
    assert kernel("exp", {})(np.empty((0, 3), np.float32)).shape == (0, 3)


def test_small_inputs_of_single_pass_ops_stay_with_numpy() -> None:
    tanh = next(v for v in VARIANTS["tanh"] if v.name == "simd")
    gelu = next(v for v in VARIANTS["gelu"] if v.name == "simd")
    assert not tanh.when(((8, 8),), {}) and tanh.when(((64, 64),), {})
    assert gelu.when(((8, 8),), {})


def test_kernel_ops_lists_exactly_the_ops_with_variants() -> None:
    assert {op for op, variants in VARIANTS.items() if variants} == KERNEL_OPS
    assert {v.op for v in elementwise.VARIANTS} <= KERNEL_OPS
