"""The native row kernels (layer_norm, softmax) agree with the reference kernels, in place and out."""

from __future__ import annotations

import numpy as np
import pytest

from msvm.kernels import rows
from msvm.ops.registry import REGISTRY
from msvm.scheduler.variants import VARIANTS

TOLERANCE = {"float32": (2e-5, 2e-6), "float64": (1e-12, 1e-14)}
# tails, chunks of rows, both threads; rows of whole groups of vectors, of groups and single vectors
# and a tail (57), of groups and a vector (40) — the folds' accumulators and their loops
SHAPES = [(1,), (3, 1), (7, 5), (2, 13), (128, 256), (4, 33, 64), (3, 1030), (600, 96), (5, 57), (9, 40)]


def variant(op: str, attrs: dict):
    v = next(v for v in VARIANTS[op] if v.name == "simd")
    return v, v.make(REGISTRY[op].check_attrs(attrs))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_softmax_agrees_with_the_reference(shape, dtype):
    x = (np.random.default_rng(len(shape)).standard_normal(shape) * 6).astype(dtype)
    v, kernel = variant("softmax", {"axis": -1})
    assert v.when((shape,), {"axis": -1})
    expected = REGISTRY["softmax"].kernel(x, axis=-1)
    np.testing.assert_allclose(kernel(x), expected, *TOLERANCE[dtype])
    in_place = x.copy()
    assert rows.softmax_rows(in_place, out=in_place) is in_place  # the attention kernel's use
    np.testing.assert_allclose(in_place, expected, *TOLERANCE[dtype])


def test_softmax_special_values_and_other_axes():
    x = np.array([[1, np.nan, 2], [-np.inf, 0, 1], [np.inf, 0, 1], [-np.inf] * 3, [1e30, -1e30, 0]],
                 np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        np.testing.assert_allclose(rows.softmax_rows(x), REGISTRY["softmax"].kernel(x, axis=-1), 1e-6)
    v, _ = variant("softmax", {"axis": 0})
    assert not v.when(((4, 5),), {"axis": 0}) and v.when(((4, 5),), {"axis": 1})


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax_scale_and_safe_rows(dtype):
    """What JIT regions call the job with: the attention scale, and zeros for a fully masked row."""
    x = np.random.default_rng(3).standard_normal((5, 37)).astype(dtype) * 4
    x[2] = -np.inf
    expected = REGISTRY["softmax"].kernel(x * np.asarray(0.3, dtype), axis=-1)
    got = rows.softmax_rows(x, scale=0.3, safe=True)
    np.testing.assert_allclose(np.delete(got, 2, 0), np.delete(expected, 2, 0), *TOLERANCE[dtype])
    assert np.array_equal(got[2], np.zeros(37, dtype))
    with np.errstate(invalid="ignore"):
        assert np.isnan(rows.softmax_rows(x, scale=0.3)[2]).all()  # unsafe: like the reference


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_agrees_with_the_reference(shape, dtype, affine):
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    k = min(2, len(shape))
    attrs = {"normalized_shape": shape[-k:], "eps": 1e-3}
    args = [x]
    if affine:
        args += [rng.standard_normal(shape[-k:]).astype(dtype), rng.standard_normal(shape[-k:]).astype(dtype)]
    v, kernel = variant("layer_norm", attrs)
    assert v.when(tuple(a.shape for a in args), attrs)
    expected = REGISTRY["layer_norm"].kernel(*args, **REGISTRY["layer_norm"].check_attrs(attrs))
    np.testing.assert_allclose(kernel(*args), expected, *TOLERANCE[dtype])


def test_layer_norm_mixed_dtypes_and_layouts():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 40)).astype(np.float32)
    w64 = rng.standard_normal(40)
    _, kernel = variant("layer_norm", {"normalized_shape": (40,)})
    out = kernel(x, w64)  # mixed dtypes: the reference's rule for the result
    expected = REGISTRY["layer_norm"].kernel(x, w64, normalized_shape=(40,))
    assert out.dtype == expected.dtype
    np.testing.assert_allclose(out, expected, 1e-12)
    view = x.T.copy().T  # Fortran order: copied first
    np.testing.assert_allclose(kernel(view), REGISTRY["layer_norm"].kernel(x, normalized_shape=(40,)),
                               *TOLERANCE["float32"])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_sum_rows_with_an_added_operand_and_relu(shape, dtype):
    """The "sum" job JIT regions call for a reduction over trailing dims: every combination of its flags;
    a NaN stays NaN through the ReLU, as numpy's maximum keeps it."""
    rng = np.random.default_rng(sum(shape) + 1)
    x, y = (rng.standard_normal(shape).astype(dtype) for _ in range(2))
    x.reshape(-1)[len(x.reshape(-1)) // 2] = np.nan
    rtol, atol = TOLERANCE[dtype]
    for add in (False, True):
        for relu in (False, True):
            for mean in (False, True):
                v = x + y if add else x
                v = np.maximum(v, 0) if relu else v
                expected = v.mean(-1) if mean else v.sum(-1)
                got = rows.sum_rows(x, y if add else None, relu=relu, mean=mean)
                np.testing.assert_allclose(got, expected, rtol * 10, atol * 10 * shape[-1])


def test_attention_scores_softmax_is_worth_both_cores(monkeypatch):
    """4 heads × 128² scores cost ≈ 90 µs on one core: enough work for a second thread."""
    from msvm.kernels.threads import MIN_FLOPS_PER_THREAD

    asked: list[float] = []
    monkeypatch.setattr(rows.POOL, "run", lambda job, frame, *, flops: asked.append(flops))
    rows.softmax_rows(np.zeros((4, 128, 128), np.float32))
    assert asked and asked[0] >= 2 * MIN_FLOPS_PER_THREAD
