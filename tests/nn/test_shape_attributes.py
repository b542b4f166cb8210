"""A shape attribute takes every form a torch port writes: an int, a tuple or list, ``x.shape[i]``,
``x.shape[-k:]`` or an ``ms.mutable`` — in ops and in the functions expanded into ops alike."""

# ruff: noqa: F821

import numpy as np

import msvm as ms
import msvm.nn.functional as F

RNG = np.random.default_rng(7)


@ms.jit
def norms(x: ms.Tensor["B", "C"], n):
    return (F.layer_norm(x, 8), F.layer_norm(x, (8,)), F.layer_norm(x, [8]), F.layer_norm(x, x.shape[1]),
            F.layer_norm(x, x.shape[-1:]), F.layer_norm(x, n))


@ms.jit
def resized(x: ms.Tensor["N", "C", "H", "W"], n):
    return (F.interpolate(x, size=x.shape[2] * 2), F.interpolate(x, (n, x.shape[3]), mode="bilinear"),
            F.adaptive_avg_pool2d(x, n), F.adaptive_avg_pool2d(x, x.shape[-2:]))


def test_normalized_shape_in_every_form() -> None:
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    expected = F.layer_norm(x, (8,))
    for out in norms(x, ms.mutable(8)):
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_sizes_from_shapes_and_mutables_in_expanded_functions() -> None:
    x = RNG.standard_normal((1, 2, 4, 6)).astype(np.float32)
    doubled, bilinear, pooled, whole = resized(x, ms.mutable(3))
    np.testing.assert_array_equal(doubled, F.interpolate(x, size=(8, 8)))  # one size for both, as torch
    np.testing.assert_allclose(bilinear, F.interpolate(x, (3, 6), mode="bilinear"), rtol=1e-6)
    np.testing.assert_allclose(pooled, F.adaptive_avg_pool2d(x, 3), rtol=1e-6)
    np.testing.assert_allclose(whole, x, rtol=1e-6)
