"""layer_norm whose normalized_shape is read from the input's shape at run time, on every kernel policy."""

# ruff: noqa: F821

import numpy as np
import pytest

import msvm as ms


@ms.jit
def norm_rows(x: ms.Tensor["B", "C"], g: ms.Tensor["C"], b: ms.Tensor["C"]):
    return ms.ops.layer_norm(x, x.shape[1], g, b)


@pytest.mark.parametrize("policy", ["cost", "reference"])
def test_layer_norm_normalized_shape_from_a_register_runs_on_the_fast_kernel(policy: str) -> None:
    rng = np.random.default_rng(3)
    x, g, b = (rng.standard_normal(s).astype(np.float32) for s in ((6, 40), (40,), (40,)))
    previous = ms.get_context().kernel_policy
    ms.set_context(kernel_policy=policy)
    try:
        out = norm_rows(x, g, b)
    finally:
        ms.set_context(kernel_policy=previous)
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    np.testing.assert_allclose(out, (x - mean) / np.sqrt(var + 1e-5) * g + b, rtol=1e-4, atol=1e-5)
