"""The packed-weights GEMM job against numpy: odd shapes (row and panel tails), epilogues, strided rows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from msvm.kernels import gemm_packed

RNG = np.random.default_rng(11)
# (M, K, N): single elements, every row-tile tail (6, 4, 2, 1), a partial panel, a block boundary (48)
SHAPES = [(1, 1, 1), (7, 5, 3), (13, 33, 17), (48, 64, 16), (49, 64, 40), (97, 300, 129), (128, 256, 768)]
ERF = np.vectorize(math.erf)


def _tol(dtype: str) -> float:
    return 2e-4 if dtype == "float32" else 1e-10


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_products_and_epilogues(shape, dtype: str) -> None:
    m, k, n = shape
    a, b = RNG.standard_normal((m, k)).astype(dtype), RNG.standard_normal((k, n)).astype(dtype)
    bias, res = RNG.standard_normal(n).astype(dtype), RNG.standard_normal((m, n)).astype(dtype)
    exact = a.astype(np.float64) @ b
    tol = _tol(dtype) * math.sqrt(k)
    close = lambda got, want: np.testing.assert_allclose(got, want, rtol=tol, atol=tol)  # noqa: E731
    close(gemm_packed.gemm(a, b), exact)
    close(gemm_packed.gemm(a, b, bias), exact + bias)
    close(gemm_packed.gemm(a, b, bias, activation="relu", residual=res), np.maximum(exact + bias, 0) + res)
    y = exact + bias
    close(gemm_packed.gemm(a, b, bias, activation="gelu"), 0.5 * y * (1 + ERF(y / math.sqrt(2))))


def test_strided_rows_and_the_panel_layout() -> None:
    a = RNG.standard_normal((20, 64)).astype(np.float32)[:, 5:37]  # rows 64 apart, 32 used
    b = RNG.standard_normal((32, 20)).astype(np.float32)
    np.testing.assert_allclose(gemm_packed.gemm(a, b), a @ b, rtol=1e-4, atol=1e-4)
    panels = gemm_packed.pack(b)
    width = gemm_packed.panel_width("float32")
    assert panels.shape == (2, 32, width)  # 20 columns -> 2 panels, the last zero-padded
    np.testing.assert_array_equal(panels[1, :, : 20 - width], b[:, width:])
    assert not panels[1, :, 20 - width:].any()
