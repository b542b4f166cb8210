"""matmul and linear variants against their reference kernels: 1-D operands, broadcast batches, views."""

from __future__ import annotations

import numpy as np
import pytest

import msvm.kernels  # noqa: F401  (registers the variants)
from msvm.kernels import matmul, packing
from msvm.ops.registry import get_op
from msvm.scheduler.variants import variants_for

MATMUL, LINEAR = get_op("matmul"), get_op("linear")
MM = {v.name: v for v in variants_for("matmul")}
LIN = {v.name: v for v in variants_for("linear")}
RNG = np.random.default_rng(3)

MATMUL_CASES = [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4, 5)),
                ((2, 1, 3, 4), (5, 4, 6)), ((7, 3, 4), (7, 4, 2)), ((0, 4), (4, 5)), ((3, 0), (0, 5)),
                ((65, 33), (33, 70)), ((16, 8, 32, 32), (16, 8, 32, 32))]
LINEAR_CASES = [((3, 4), (5, 4), (5,)), ((2, 3, 4), (5, 4), None), ((4,), (5, 4), (5,)),
                ((2, 3, 4), (5, 4), ()), ((0, 4), (5, 4), (5,)), ((3, 0), (5, 0), (5,)),
                ((2, 3, 0), (5, 0), None), ((64, 96), (48, 96), (48,))]


def _close(out: np.ndarray, ref: np.ndarray) -> None:
    assert out.shape == ref.shape and out.dtype == ref.dtype
    tol = 1e-4 if out.dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["blas", "small"])
@pytest.mark.parametrize("shapes", MATMUL_CASES, ids=str)
def test_matmul(name: str, shapes, dtype: str) -> None:
    a, b = (RNG.standard_normal(s).astype(dtype) for s in shapes)
    _close(MM[name].make({})(a, b), MATMUL.kernel(a, b))


@pytest.mark.parametrize("name", ["blas", "small"])
def test_matmul_views_and_transposes(name: str) -> None:
    kernel = MM[name].make({})
    a = RNG.standard_normal((5, 6)).astype(np.float32).T  # column-major: a transpose flag, no copy
    b = RNG.standard_normal((7, 5)).astype(np.float32).T
    _close(kernel(a, b), a @ b)
    a = RNG.standard_normal((3, 5, 6)).astype(np.float32).transpose(0, 2, 1)
    b = RNG.standard_normal((8, 5)).astype(np.float32)[::2].T  # strided: copied
    _close(kernel(a, b), a @ b)
    a = np.broadcast_to(RNG.standard_normal((1, 4, 3)).astype(np.float32), (6, 4, 3))  # zero batch stride
    _close(kernel(a, b[:3]), a @ b[:3])


def test_matmul_mixed_dtypes_fall_back() -> None:
    a, b = RNG.standard_normal((3, 4)).astype(np.float32), RNG.standard_normal((4, 2))
    for variant in MM.values():
        _close(variant.make({})(a, b), MATMUL.kernel(a, b))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["blas", "small", "pool"])
@pytest.mark.parametrize("shapes", LINEAR_CASES, ids=str)
def test_linear(name: str, shapes, dtype: str) -> None:
    sx, sw, sb = shapes
    x, w = RNG.standard_normal(sx).astype(dtype), RNG.standard_normal(sw).astype(dtype)
    b = None if sb is None else RNG.standard_normal(sb).astype(dtype)
    ref = LINEAR.kernel(x, w, b) if b is not None else LINEAR.kernel(x, w)
    _close(LIN[name].make({})(x, w, b), ref)


@pytest.mark.parametrize("name", ["blas", "pool"])
def test_linear_with_a_transposed_weight_view(name: str) -> None:
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    w = RNG.standard_normal((4, 5)).astype(np.float32).T  # [out, in] view of a column-major array
    _close(LIN[name].make({})(x, w), x @ w.T)


def test_linear_pool_packs_a_constant_weight_once() -> None:
    x = RNG.standard_normal((40, 24)).astype(np.float32)
    w, b = RNG.standard_normal((20, 24)).astype(np.float32), RNG.standard_normal(20).astype(np.float32)
    w.flags.writeable = b.flags.writeable = False
    packing.clear()
    kernel = LIN["pool"].make({})
    for _ in range(2):
        _close(kernel(x, w, b), x @ w.T + b)
    assert packing.stats()["entries"] == 1
    _close(kernel(x.astype(np.float64), w), LINEAR.kernel(x.astype(np.float64), w))  # mixed dtypes: reference


def test_linear_blas_multiplies_by_a_constant_weight_s_cached_transpose(monkeypatch) -> None:
    """NN, not NT: the GEMM reads the weight's row-major transpose, made once per constant weight."""
    from msvm.native import blas

    x = RNG.standard_normal((40, 200)).astype(np.float32)
    w, b = RNG.standard_normal((130, 200)).astype(np.float32), RNG.standard_normal(130).astype(np.float32)
    calls = []
    gemm_raw = blas.GemmEntry.gemm_raw
    monkeypatch.setattr(blas.GemmEntry, "gemm_raw",
                        lambda self, *args: calls.append(args[:2]) or gemm_raw(self, *args))
    kernel = LIN["blas"].make({})
    packing.clear()
    _close(kernel(x, w, b), x @ w.T + b)  # a writeable weight may change: used as it is
    assert calls.pop() == (False, True) and packing.stats()["entries"] == 0
    w.flags.writeable = False
    for _ in range(2):
        _close(kernel(x, w, b), x @ w.T + b)
        assert calls.pop() == (False, False)
    assert packing.stats() == {"entries": 1, "bytes": w.nbytes}
    (wt,) = matmul.transposed(w)
    assert wt.flags.c_contiguous and wt.shape == (200, 130)
    np.testing.assert_array_equal(wt, w.T)
    monkeypatch.setattr(matmul, "TRANSPOSE_MAX_BYTES", w.nbytes - 1)  # too big to keep a second copy of
    packing.clear()
    _close(kernel(x, w, b), x @ w.T + b)
    assert calls.pop() == (False, True) and packing.stats()["entries"] == 0


def test_linear_pool_packs_a_huge_constant_weight_per_panel(monkeypatch) -> None:
    from msvm.kernels import gemm_packed

    monkeypatch.setattr(gemm_packed, "PACK_ONCE_MAX_BYTES", 0)  # every weight counts as huge
    x = RNG.standard_normal((40, 24)).astype(np.float32)
    w = RNG.standard_normal((20, 24)).astype(np.float32)
    w.flags.writeable = False
    packing.clear()
    _close(LIN["pool"].make({})(x, w), x @ w.T)
    assert packing.stats()["entries"] == 0  # nothing kept that a few such weights would keep evicting


def test_predicates() -> None:
    assert MM["blas"].when(((2, 3, 4), (4, 5)), {})
    assert not MM["blas"].when(((2, 3, 4), (5, 5)), {})
    assert not MM["blas"].when(((2, 3, 4), (3, 4, 5)), {})  # batch dims do not broadcast
    assert MM["small"].when(((64, 8, 8), (8, 8)), {})
    assert not MM["small"].when(((64, 64), (64, 8)), {})
    assert LIN["small"].when(((4, 8), (16, 8), (16,)), {}) and not LIN["small"].when(((128, 8), (16, 8)), {})
    assert not LIN["blas"].when(((4, 8), (16, 8), (2, 16)), {})
    assert LIN["pool"].when(((2, 4, 8), (16, 8), (16,)), {})
    assert not LIN["pool"].when(((4, 8), (16, 8), (2, 16)), {})
    assert MM["blas"].flops(((2, 3, 4), (4, 5)), {}) == 2 * 2 * 3 * 4 * 5
    assert LIN["blas"].flops(((2, 3, 4), (5, 4)), {}) == 2 * 6 * 5 * 4
    assert matmul.SMALL_MAX_DIM >= 8
