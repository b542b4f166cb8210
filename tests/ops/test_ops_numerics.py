"""Numerical quality of the reference kernels: erf/gelu accuracy and the stability of sigmoid,
silu, softmax and log_softmax at extreme inputs (no overflow warnings, correct limits)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from msvm.ops import REGISTRY
from msvm.ops.elementwise import erf, erfc


def grid() -> np.ndarray:
    pos = np.concatenate(
        [np.linspace(0, 30, 60001), np.geomspace(1e-300, 30, 5000), [0.46875, 4.0, 26.5, 27.0]]
    )
    return np.concatenate([pos, -pos])


def max_rel_err(got: np.ndarray, ref: np.ndarray, tiny: float = 1e-300) -> float:
    scale = np.maximum(np.abs(ref), tiny)
    return float(np.max(np.abs(got - ref) / scale))


def test_erf_float64_accuracy() -> None:
    x = grid()
    ref = np.array([math.erf(v) for v in x])
    assert max_rel_err(erf(x), ref) < 1e-14


def test_erfc_float64_accuracy_including_the_tail() -> None:
    x = grid()
    ref = np.array([math.erfc(v) for v in x])
    keep = ref > 1e-290  # below that erfc is subnormal in float64
    assert max_rel_err(erfc(x)[keep], ref[keep]) < 1e-13


def test_erf_special_values() -> None:
    out = erf(np.array([np.inf, -np.inf, np.nan, 0.0, -0.0]))
    assert out[0] == 1.0 and out[1] == -1.0 and np.isnan(out[2])
    assert out[3] == 0.0 and math.copysign(1, out[4]) == -1
    out = erfc(np.array([np.inf, -np.inf, np.nan, 40.0]))
    assert out[0] == 0.0 and out[1] == 2.0 and np.isnan(out[2]) and out[3] == 0.0
    assert erf(0.5).shape == ()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gelu_exact_against_math_erf(dtype: str) -> None:
    x = np.linspace(-12, 12, 20001).astype(dtype)
    ref = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x.astype(np.float64)])
    out = REGISTRY["gelu"](x)
    assert out.dtype == dtype
    tol = 1e-6 if dtype == "float32" else 1e-13
    keep = np.abs(ref) > (1e-30 if dtype == "float32" else 1e-300)
    assert max_rel_err(out[keep].astype(np.float64), ref[keep]) < tol


def test_gelu_tanh_form() -> None:
    x = np.linspace(-8, 8, 1001)
    c = math.sqrt(2 / math.pi)
    ref = np.array([0.5 * v * (1 + math.tanh(c * (v + 0.044715 * v**3))) for v in x])
    np.testing.assert_allclose(REGISTRY["gelu"](x, approximate="tanh"), ref, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sigmoid_and_silu_are_stable(dtype: str) -> None:
    x = np.array([-1e4, -100.0, -20.0, 0.0, 20.0, 100.0, 1e4], dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = REGISTRY["sigmoid"](x)
        silu = REGISTRY["silu"](x)
    assert s.dtype == dtype and silu.dtype == dtype
    assert s[0] == 0.0 and s[-1] == 1.0 and s[3] == 0.5
    if dtype == "float64":
        assert s[4] < 1.0
    np.testing.assert_allclose(s[2], math.exp(-20) / (1 + math.exp(-20)), rtol=1e-6)
    assert silu[-1] == 1e4 and silu[0] == 0.0


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax_is_stable(dtype: str) -> None:
    x = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1001.0, -5000.0], [0.0, 0.0, 0.0]], dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = REGISTRY["softmax"](x)
        logp = REGISTRY["log_softmax"](x)
    assert p.dtype == dtype and logp.dtype == dtype
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(p[2], 1 / 3, rtol=1e-6)
    ref = np.array([-1.40760596, -0.40760596, -2.40760596])
    np.testing.assert_allclose(logp[0], ref, rtol=1e-6)
    # softmax underflows to 0 there, log_softmax does not
    assert logp[1, 2] == pytest.approx(-4000.0 - math.log1p(math.exp(-1)), rel=1e-6)
    assert p[1, 2] == 0.0


def test_softmax_of_empty_axis_is_empty() -> None:
    out = REGISTRY["softmax"](np.zeros((3, 0), np.float32))
    assert out.shape == (3, 0) and out.dtype == np.float32
