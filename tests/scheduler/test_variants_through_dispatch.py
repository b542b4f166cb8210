"""Differential: every registered variant, forced through the dispatcher, agrees with the reference."""

from __future__ import annotations

import numpy as np
import pytest
from scheduler_helpers import INTERPRETED, calibrated, rand

from msvm.bytecode import ModuleBuilder
from msvm.interpreter import Program
from msvm.ops.registry import REGISTRY
from msvm.scheduler import load_capability_patch
from msvm.scheduler.capability import load_variants
from msvm.scheduler.variants import VARIANTS

load_variants()


@pytest.fixture(autouse=True)
def fake_calibration():
    """Decisions that fall back to the cost model use fixed rates instead of measuring (fast tests)."""
    for op in ("conv2d", "matmul", "linear"):
        calibrated(op, {v.name: (50.0, 20.0) for v in VARIANTS.get(op, [])} | {"reference": (20.0, 50.0)})

CONV_CASES = [  # (x, weight, attrs)
    ((2, 8, 12, 12), (16, 8, 3, 3), {"stride": (1, 1), "padding": (1, 1)}),
    ((1, 3, 17, 13), (8, 3, 3, 3), {"stride": (2, 2), "padding": (1, 1)}),
    ((3, 16, 9, 9), (16, 16, 1, 1), {"stride": (1, 1), "padding": (0, 0)}),
    ((2, 16, 10, 10), (32, 16, 1, 1), {"stride": (2, 2), "padding": (0, 0)}),
    ((2, 12, 11, 11), (12, 1, 3, 3), {"stride": (1, 1), "padding": (1, 1), "groups": 12}),
    ((1, 16, 8, 8), (16, 4, 3, 3), {"stride": (1, 1), "padding": (2, 2), "dilation": (2, 2), "groups": 4}),
]
MATMUL_CASES = [
    ((7, 5), (5, 9)), ((64, 48), (48, 40)), ((3, 6, 4), (3, 4, 5)), ((2, 1, 8, 8), (3, 8, 8)), ((9,), (9, 4)),
]
LINEAR_CASES = [((4, 10), (6, 10), True), ((2, 3, 40), (33, 40), True), ((5, 16), (8, 16), False)]


def conv_program(xs, ws, attrs):
    mb = ModuleBuilder("conv")
    f = mb.function("f", ["x", "w", "b"])
    x = f.tensor_input(0, list(xs), "float32")
    w = f.tensor_input(1, list(ws), "float32")
    b = f.tensor_input(2, [ws[0]], "float32")
    f.ret(f.call("conv2d", [x, w, b], attrs))
    return Program(mb.build(), INTERPRETED).function("f")


def binary_program(op, sa, sb, bias=None):
    mb = ModuleBuilder(op)
    f = mb.function("f", ["a", "b", "c"] if bias else ["a", "b"])
    a = f.tensor_input(0, list(sa), "float32")
    b = f.tensor_input(1, list(sb), "float32")
    srcs = [a, b] + ([f.tensor_input(2, list(bias), "float32")] if bias else [])
    f.ret(f.call(op, srcs))
    return Program(mb.build(), INTERPRETED).function("f")


def run_forced(op: str, name: str, fn, args, shapes, attrs):
    load_capability_patch({"devices": {"cpu": {"ops": {op: {"force": name}}}}})
    out = fn(*args)
    step = next(s for s in fn.steps if s.ins.name == "OP_CALL")
    variant = next(v for v in VARIANTS[op] if v.name == name)
    full = REGISTRY[op].check_attrs(attrs)
    if variant.when(shapes, full):
        assert step.choice.variant == name and step.choice.reason == "forced by patch"
    else:
        assert "does not apply" in step.choice.reason
    return out


@pytest.mark.parametrize("name", [v.name for v in VARIANTS.get("conv2d", [])])
@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_conv2d_variant_agrees_with_reference(name, case):
    xs, ws, attrs = CONV_CASES[case]
    x, w, b = rand(*xs, seed=1), rand(*ws, seed=2), rand(ws[0], seed=3)
    fn = conv_program(xs, ws, attrs)
    out = run_forced("conv2d", name, fn, (x, w, b), (xs, ws, (ws[0],)), attrs)
    expected = REGISTRY["conv2d"].kernel(x, w, b, **REGISTRY["conv2d"].check_attrs(attrs))
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", [v.name for v in VARIANTS.get("matmul", [])])
@pytest.mark.parametrize("case", range(len(MATMUL_CASES)))
def test_matmul_variant_agrees_with_reference(name, case):
    sa, sb = MATMUL_CASES[case]
    a, b = rand(*sa, seed=1), rand(*sb, seed=2)
    out = run_forced("matmul", name, binary_program("matmul", sa, sb), (a, b), (sa, sb), {})
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", [v.name for v in VARIANTS.get("linear", [])])
@pytest.mark.parametrize("case", range(len(LINEAR_CASES)))
def test_linear_variant_agrees_with_reference(name, case):
    sx, sw, with_bias = LINEAR_CASES[case]
    x, w = rand(*sx, seed=1), rand(*sw, seed=2)
    bias = (sw[0],) if with_bias else None
    args = (x, w, rand(sw[0], seed=3)) if with_bias else (x, w)
    shapes = (sx, sw, bias) if with_bias else (sx, sw)
    out = run_forced("linear", name, binary_program("linear", sx, sw, bias), args, shapes, {})
    np.testing.assert_allclose(out, REGISTRY["linear"].kernel(*args), rtol=1e-4, atol=1e-4)


UNARY_CASES = [("exp", {}), ("log", {}), ("tanh", {}), ("sigmoid", {}), ("silu", {}),
               ("gelu", {"approximate": "none"}), ("gelu", {"approximate": "tanh"})]
UNARY_IDS = [f"{op}-{a['approximate']}" if a else op for op, a in UNARY_CASES]


def unary_program(op, shape, dtype, attrs):
    mb = ModuleBuilder(op)
    f = mb.function("f", ["x"])
    f.ret(f.call(op, [f.tensor_input(0, list(shape), dtype)], attrs))
    return Program(mb.build(), INTERPRETED).function("f")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op, attrs", UNARY_CASES, ids=UNARY_IDS)
def test_unary_variant_agrees_with_reference(op, attrs, dtype):
    shape = (3, 64, 65)  # above every size floor
    x = np.abs(rand(*shape, dtype=dtype)) + 0.1 if op == "log" else rand(*shape, dtype=dtype) * 3
    out = run_forced(op, "simd", unary_program(op, shape, dtype, attrs), (x,), (shape,), attrs)
    expected = REGISTRY[op].kernel(x, **REGISTRY[op].check_attrs(attrs))
    assert out.dtype == expected.dtype
    np.testing.assert_allclose(out, expected, rtol=2e-6 if dtype == "float32" else 1e-13, atol=1e-6)


@pytest.mark.parametrize("policy", ["cost", "autotune"])
def test_free_choice_agrees_with_reference(policy):
    from msvm.context import set_context

    set_context(kernel_policy=policy)
    for xs, ws, attrs in CONV_CASES[:4]:
        x, w, b = rand(*xs, seed=1), rand(*ws, seed=2), rand(ws[0], seed=3)
        out = conv_program(xs, ws, attrs)(x, w, b)
        expected = REGISTRY["conv2d"].kernel(x, w, b, **REGISTRY["conv2d"].check_attrs(attrs))
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
