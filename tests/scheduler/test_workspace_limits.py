"""Kernel workspaces under ``max_tensor_bytes``: a variant whose scratch would be over the limit is not
chosen, and a call no kernel can run within it raises ``E-LIMIT-TENSOR`` before anything is allocated."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from scheduler_helpers import Counting, calibrated, matmul_program, matmul_step, rand

from msvm.context import set_context
from msvm.errors import ResourceLimitError
from msvm.ops.registry import REGISTRY, TensorType
from msvm.scheduler import bind_site
from msvm.shapes import ShapeSpec

MATMUL = REGISTRY["matmul"].kernel


@pytest.fixture(autouse=True)
def default_limit():
    yield
    set_context(max_tensor_bytes=4 << 30)


def _with_workspace(fake: Counting, nbytes: int) -> Counting:
    fake.variant = replace(fake.variant, workspace=lambda shapes, attrs, itemsize: nbytes)
    return fake


def test_a_variant_whose_workspace_is_over_the_limit_is_not_chosen(fake_variants):
    roomy = _with_workspace(Counting("matmul", "roomy", MATMUL), 1 << 20)
    lean = _with_workspace(Counting("matmul", "lean", MATMUL), 1 << 10)
    fake_variants("matmul", [roomy, lean])
    calibrated("matmul", {"roomy": (1000.0, 0.0), "lean": (10.0, 50.0), "reference": (0.001, 1e6)})
    fn = matmul_program()
    a, b = rand(4, 8), rand(8, 8)
    fn(a, b)
    assert matmul_step(fn).choice.variant == "roomy"
    set_context(max_tensor_bytes=1 << 16)  # the decisions made under the old limit are forgotten
    np.testing.assert_allclose(fn(a, b), a @ b, rtol=1e-6)
    assert matmul_step(fn).choice.variant == "lean" and (roomy.calls, lean.calls) == (1, 1)
    set_context(max_tensor_bytes=1 << 8)  # the reference needs no workspace: the last resort fits
    np.testing.assert_allclose(fn(a, b), a @ b, rtol=1e-6)
    assert matmul_step(fn).choice.variant == "reference"


CONV_ATTRS = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1}


def _conv_site(x_shape: tuple[int, ...], w_shape: tuple[int, ...], out_shape: tuple[int, ...]):
    typed = lambda s: TensorType(ShapeSpec.of(list(s)), "float32")  # noqa: E731
    binding = bind_site(REGISTRY["conv2d"], CONV_ATTRS, [typed(x_shape), typed(w_shape)], [typed(out_shape)],
                        address=7)
    # zero-stride stand-ins: deciding reads shapes and dtypes only, so nothing is allocated
    stand_ins = [np.broadcast_to(np.float32(0), s) for s in (x_shape, w_shape)]
    return binding.dispatcher, stand_ins


# An 11x11 kernel over 256 channels of 512x512 for a 4 MB output: a 31 GB column matrix, whole
X, W, OUT = (1, 256, 512, 512), (4, 256, 11, 11), (1, 4, 502, 502)


def test_a_huge_column_matrix_is_built_in_bands_that_fit():
    site, arrays = _conv_site(X, W, OUT)
    choice = site.choose(*arrays)
    im2col = next(v for v in site.variants if v.name == "im2col_gemm")
    assert choice.variant == "im2col_gemm"
    assert im2col.workspace((X, W), CONV_ATTRS, 4) <= 64 << 20


def test_when_no_kernel_fits_the_call_raises_before_any_runs():
    set_context(max_tensor_bytes=32 << 20)  # the output fits, one output row of columns (62 MB) does not
    site, arrays = _conv_site(X, W, OUT)
    with pytest.raises(ResourceLimitError) as err:
        site.choose(*arrays)
    assert err.value.code == "E-LIMIT-TENSOR" and err.value.address == 7
    assert "im2col_gemm 62,199,808" in str(err.value) and "reference 31,224,303,616" in str(err.value)
    assert "max_tensor_bytes" in err.value.hint


def test_the_reference_policy_checks_the_reference_kernels_workspace():
    set_context(kernel_policy="reference")
    site, arrays = _conv_site(X, W, OUT)
    with pytest.raises(ResourceLimitError) as err:
        site.choose(*arrays)
    assert err.value.code == "E-LIMIT-TENSOR" and "reference 31,224,303,616" in str(err.value)
    small, small_w = (1, 8, 16, 16), (4, 8, 3, 3)
    site, arrays = _conv_site(small, small_w, (1, 4, 14, 14))
    assert site.choose(*arrays).variant == "reference"


def test_attention_whose_scores_are_over_the_limit_raises_before_any_kernel_runs():
    """100,000 queries and keys of 64 features: a 26 MB output, 40 GB of scores in every kernel."""
    shapes = ((1, 100_000, 64),) * 3
    typed = [TensorType(ShapeSpec.of(list(s)), "float32") for s in shapes]
    binding = bind_site(REGISTRY["scaled_dot_product_attention"], {"is_causal": False, "scale": None}, typed,
                        typed[:1], address=3)
    stand_ins = [np.broadcast_to(np.float32(0), s) for s in shapes]
    with pytest.raises(ResourceLimitError) as err:
        binding.dispatcher.choose(*stand_ins)
    assert err.value.code == "E-LIMIT-TENSOR" and "pool 40,000,000,000" in str(err.value)
    small = [np.broadcast_to(np.float32(0), (1, 64, 64))] * 3
    assert binding.dispatcher.choose(*small).variant in ("pool", "reference")
