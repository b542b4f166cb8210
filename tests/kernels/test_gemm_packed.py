"""The job pool's GEMM (``gemm_packed``): every way B is given, batches, tails and the fused epilogue."""

from __future__ import annotations

import numpy as np
import pytest

from msvm.kernels import gemm_packed as gp
from msvm.kernels import packing
from msvm.kernels.conv_common import Epilogue
from msvm.kernels.native import ptr
from msvm.kernels.threads import POOL

TOL = {"float32": dict(rtol=2e-5, atol=2e-4), "float64": dict(rtol=1e-12, atol=1e-12)}

# (batch, M, K, N): tails of every size in rows (< 6, < 48) and columns (< one panel), K below a
# vector's lanes, single rows and columns, attention's shapes; a B past BIG_B_BYTES (blocks of
# MAX_BLOCK rows, and the rest of one).
SHAPES = [(1, 1, 1, 1), (1, 5, 3, 7), (3, 50, 17, 33), (4, 128, 64, 128), (2, 9, 24, 16), (1, 1, 100, 130),
          (2, 60, 8, 9), (1, 97, 31, 40), (2, gp.MAX_BLOCK + 9, 517, 530)]


def _gemm(x: np.ndarray, b: np.ndarray, mode: int, *, bias: np.ndarray | None = None, flags: int = 0,
          residual: np.ndarray | None = None) -> np.ndarray:
    """x [batch, M, K] @ b [batch, K, N] by the job, B handed over as rows of B (KN) or of Bᵀ (NK)."""
    batch, m, k = x.shape
    n = b.shape[-1]
    dtype = x.dtype.name
    out = np.full((batch, m, n), np.nan, x.dtype)  # every element must be written
    w = np.ascontiguousarray(b if mode == gp.KN else b.transpose(0, 2, 1))
    slot = gp.scratch_bytes(k, dtype)
    scratch = np.empty(slot * POOL.threads, np.uint8)
    frame = gp.FRAME.pack(
        x=ptr(x), w=ptr(w), out=ptr(out), scratch=ptr(scratch), bias=None if bias is None else ptr(bias),
        residual=None if residual is None else ptr(residual), M=m, N=n, K=k, LDX=k, LDO=n, LDR=n, BMODE=mode,
        LDW=n if mode == gp.KN else k, BATCH=batch, SX=m * k, SW=k * n, SO=m * n, SR=m * n, flags=flags,
        slot_bytes=slot)
    POOL.run(gp.job_address(dtype), frame, flops=2.0 * x.size * n)
    return out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", [gp.KN, gp.NK])
@pytest.mark.parametrize("shape", SHAPES)
def test_b_packed_per_panel_matches_numpy(shape, mode, dtype):
    batch, m, k, n = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal((batch, m, k)).astype(dtype)
    b = rng.standard_normal((batch, k, n)).astype(dtype)
    np.testing.assert_allclose(_gemm(x, b, mode), x @ b, **TOL[dtype])


def test_a_batch_of_one_b_broadcasts_through_a_zero_stride():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 20, 16)).astype(np.float32)
    b = rng.standard_normal((16, 24)).astype(np.float32)
    out = np.empty((3, 20, 24), np.float32)
    slot = gp.scratch_bytes(16, "float32")
    scratch = np.empty(slot * POOL.threads, np.uint8)
    frame = gp.FRAME.pack(x=ptr(x), w=ptr(b), out=ptr(out), scratch=ptr(scratch), M=20, N=24, K=16, LDX=16,
                          LDO=24, BMODE=gp.KN, LDW=24, BATCH=3, SX=320, SW=0, SO=480, slot_bytes=slot)
    POOL.run(gp.job_address("float32"), frame, flops=1e9)
    np.testing.assert_allclose(out, x @ b, **TOL["float32"])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(1, 3, 2), (7, 13, 17), (48, 64, 33), (100, 256, 10), (2, 5, 4, 40)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_with_its_weight_packed_once_or_per_panel(shape, bias, dtype):
    *lead, k, n = shape
    rng = np.random.default_rng(len(shape) + k + n)
    x = rng.standard_normal((*lead, k)).astype(dtype)
    w = rng.standard_normal((n, k)).astype(dtype)
    b = rng.standard_normal(n).astype(dtype) if bias else None
    expect = x @ w.T + (0 if b is None else b)
    for pack in (True, False):
        np.testing.assert_allclose(gp.linear(x, w, b, pack=pack), expect, **TOL[dtype])


@pytest.mark.parametrize("epilogue", [Epilogue(relu=True), Epilogue(residual=True),
                                      Epilogue(relu=True, residual=True, relu_out=True),
                                      Epilogue(residual=True, relu_out=True)])
def test_epilogue_applies_relu_residual_relu_in_order_and_keeps_nan(epilogue):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((50, 24)).astype(np.float32)
    x[3, 0] = np.nan  # a NaN row: ReLU must keep it (max(NaN, 0) is NaN for numpy and torch)
    w = rng.standard_normal((37, 24)).astype(np.float32)
    b = rng.standard_normal(37).astype(np.float32)
    r = rng.standard_normal((50, 37)).astype(np.float32)
    r[7, 36] = np.nan  # and a NaN in the residual's last, partial panel
    y = x @ w.T + b
    if epilogue.relu:
        y = np.maximum(y, 0)
    if epilogue.residual:
        y = y + r
    if epilogue.relu_out:
        y = np.maximum(y, 0)
    got = gp.linear(x, w, b, epilogue=epilogue, residual=r if epilogue.residual else None)
    np.testing.assert_allclose(got, y, **TOL["float32"])
    assert np.isnan(got[3]).all() and (np.isnan(got[7, 36]) == epilogue.residual)


def test_empty_products():
    x = np.ones((0, 8), np.float32)
    w = np.ones((5, 8), np.float32)
    assert gp.linear(x, w, None).shape == (0, 5)
    b = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(gp.linear(np.ones((3, 0), np.float32), np.ones((5, 0), np.float32), b),
                                  np.broadcast_to(b, (3, 5)))


def test_pack_weights_layout_and_constant_cache():
    w = np.arange(20 * 3, dtype=np.float32).reshape(20, 3).copy()
    packed, bias = gp.pack_weights(w, None)
    width = gp.width_of("float32")
    assert packed.shape == (2, 3, width) and bias.shape == (2 * width,) and not bias.any()
    np.testing.assert_array_equal(packed[0], w[:width].T)  # panel 0: [K][width]
    np.testing.assert_array_equal(packed[1, :, :4], w[width:].T)
    assert not packed[1, :, 4:].any()  # zero past N
    w.flags.writeable = False
    packing.clear()
    assert gp.packed(w, None)[0] is gp.packed(w, None)[0]  # a constant is packed once


def test_scratch_holds_one_panel():
    assert gp.scratch_bytes(0, "float32") == gp.SLOT_ALIGN
    assert gp.scratch_bytes(64, "float32") >= 64 * gp.width_of("float32") * 4
    assert gp.scratch_bytes(64, "float32") % gp.SLOT_ALIGN == 0


def test_matmul_writes_into_rows_of_any_stride():
    """``out=``: a [batch, M, N] view of [M, batch, N] memory (how attention's heads land)."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 7, 5)).astype(np.float32)
    b = rng.standard_normal((3, 5, 9)).astype(np.float32)
    memory = np.full((7, 3, 9), np.nan, np.float32)
    out = gp.matmul(a, b, out=memory.transpose(1, 0, 2))
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(memory, (a @ b).transpose(1, 0, 2), rtol=1e-5, atol=1e-5)
