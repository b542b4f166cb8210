"""scaled_dot_product_attention's pool variant against the reference: heads, causal, scale, masks, views."""

from __future__ import annotations

import numpy as np
import pytest

import msvm.kernels  # noqa: F401  (registers the variants)
from msvm.ops.registry import get_op
from msvm.scheduler.variants import variants_for

SDPA = get_op("scaled_dot_product_attention")
(POOL,) = [v for v in variants_for("scaled_dot_product_attention") if v.name == "pool"]
RNG = np.random.default_rng(5)

# (q, k, v) shapes: one head, heads, batch × heads, L ≠ S, Ev ≠ E, a single query, odd sizes
CASES = [((5, 8), (5, 8), (5, 8)), ((4, 16, 32), (4, 16, 32), (4, 16, 32)),
         ((2, 3, 7, 16), (2, 3, 9, 16), (2, 3, 9, 24)), ((3, 1, 8), (3, 33, 8), (3, 33, 5)),
         ((2, 64, 64), (2, 64, 64), (2, 64, 64))]


def _close(out: np.ndarray, ref: np.ndarray) -> None:
    assert out.shape == ref.shape and out.dtype == ref.dtype
    tol = 1e-4 if out.dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)


def _qkv(shapes, dtype: str) -> list[np.ndarray]:
    return [RNG.standard_normal(s).astype(dtype) for s in shapes]


ATTRS = [{}, {"is_causal": True}, {"scale": 0.3}, {"is_causal": True, "scale": 2.0},
         {"is_causal": True, "scale": -0.5}, {"scale": 0.0}]  # a scale not folded into the softmax


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("attrs", ATTRS, ids=str)
@pytest.mark.parametrize("shapes", CASES, ids=str)
def test_agrees_with_the_reference(shapes, attrs, dtype: str) -> None:
    assert POOL.when(shapes, attrs)
    q, k, v = _qkv(shapes, dtype)
    full = {"is_causal": False, "scale": None, **attrs}
    _close(POOL.make(full)(q, k, v), SDPA.kernel(q, k, v, **full))


def test_views_and_repeated_shapes() -> None:
    q, k, v = _qkv(((3, 16, 8), (3, 16, 8), (3, 16, 8)), "float32")
    kernel = POOL.make({"is_causal": True, "scale": None})
    for _ in range(2):  # the cached causal mask serves the second call
        _close(kernel(q, k, v), SDPA.kernel(q, k, v, is_causal=True))
    qt, kt, vt = (np.swapaxes(a.reshape(16, 3, 8), 0, 1) for a in (q, k, v))  # non-contiguous heads
    _close(kernel(qt, kt, vt), SDPA.kernel(qt, kt, vt, is_causal=True))


def test_what_it_does_not_cover_goes_to_the_reference() -> None:
    q, k, v = _qkv(((2, 4, 8), (2, 6, 8), (2, 6, 8)), "float32")
    kernel = POOL.make({"is_causal": False, "scale": None})
    mask = RNG.random((4, 6)) > 0.3
    _close(kernel(q, k, v, mask), SDPA.kernel(q, k, v, mask))  # an explicit mask
    assert not POOL.when(((1, 4, 8), (2, 6, 8), (2, 6, 8)), {})  # broadcast batch dims
    assert not POOL.when(((2, 0, 8), (2, 6, 8), (2, 6, 8)), {})  # nothing to attend from
    e = np.zeros((2, 0, 8), np.float32)
    _close(kernel(e, k, v), SDPA.kernel(e, k, v))
    qi = q.astype(np.float64)  # mixed dtypes
    np.testing.assert_allclose(kernel(qi, k, v), SDPA.kernel(qi, k, v), rtol=1e-6)


def test_heads_land_in_length_head_feature_memory() -> None:
    """The output [H, L, Ev] lies in [L, H, Ev] memory, so multi-head attention's transpose and reshape
    back to [L, H·Ev] are views; a batch of several head groups stays contiguous."""
    q, k, v = _qkv(((4, 10, 8), (4, 12, 8), (4, 12, 6)), "float32")
    out = POOL.make({"is_causal": False, "scale": None})(q, k, v)
    _close(out, SDPA.kernel(q, k, v))
    merged = out.transpose(1, 0, 2).reshape(10, 24)
    assert merged.flags.c_contiguous and np.shares_memory(merged, out)
    q4, k4, v4 = _qkv(((2, 3, 5, 8), (2, 3, 5, 8), (2, 3, 5, 8)), "float32")
    out4 = POOL.make({"is_causal": False, "scale": None})(q4, k4, v4)
    assert out4.flags.c_contiguous
    _close(out4, SDPA.kernel(q4, k4, v4))
