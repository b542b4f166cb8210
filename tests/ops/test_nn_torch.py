"""nn ops against PyTorch itself (``torch.nn.functional``; roi_align against torchvision).

Skipped where torch is not installed. Configurations are drawn from a seeded generator so that
strides, paddings, dilations, groups, ceil_mode and the other switches meet in many combinations,
plus a small CNN at 3x64x64, batch 16, run end to end through the reference kernels.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import msvm.ops as ops

torch = pytest.importorskip("torch")
F = torch.nn.functional

FLOATS = ("float32", "float64")
RNG = np.random.default_rng(77)
CHOICE = random.Random(77)


def t(x: np.ndarray | None) -> Any:
    return None if x is None else torch.from_numpy(np.ascontiguousarray(x))


def randn(*shape: int, dtype: str = "float64") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def assert_matches(out: np.ndarray, expected: Any) -> None:
    expected = expected.numpy()
    assert out.shape == expected.shape, (out.shape, expected.shape)
    assert out.dtype == expected.dtype, (out.dtype, expected.dtype)
    tol = {"float32": 1e-4, "float64": 1e-10}[out.dtype.name]
    scale = max(1.0, float(np.abs(expected).max(initial=0)))
    np.testing.assert_allclose(out, expected, rtol=tol, atol=tol * scale)


def configs(make: Callable[[], dict | None], count: int) -> list[dict]:
    """``count`` valid configurations from ``make`` (which returns None for an invalid draw)."""
    out: list[dict] = []
    while len(out) < count:
        cfg = make()
        if cfg is not None:
            out.append(cfg)
    return out


def as_pair(v: int | tuple[int, int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else v


def window_fits(size: int, k: int, s: int, p: int, d: int) -> bool:
    return size + 2 * p - d * (k - 1) - 1 >= 0


# -- conv2d -------------------------------------------------------------------------------------------


def conv_config() -> dict | None:
    groups = CHOICE.choice([1, 1, 2, 3, "depthwise"])
    per_group = CHOICE.choice([1, 2, 3])
    c_in = (4 if groups == "depthwise" else groups * per_group)
    groups = c_in if groups == "depthwise" else groups
    c_out = groups * CHOICE.choice([1, 2])
    k = (CHOICE.randint(1, 4), CHOICE.randint(1, 4))
    stride = CHOICE.choice([1, 2, 3, (1, 2), (3, 1)])
    dilation = CHOICE.choice([1, 1, 2, (2, 1)])
    padding = CHOICE.choice([0, 1, 2, (1, 0), (0, 3)] + (["same", "valid"] if stride == 1 else []))
    n = CHOICE.choice([1, 2])
    h, w = CHOICE.randint(3, 9), CHOICE.randint(3, 9)
    cfg = {"x": (n, c_in, h, w), "w": (c_out, c_in // groups, *k), "bias": CHOICE.random() < 0.7,
           "attrs": {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}}
    if padding == "same":
        return cfg
    p, d = as_pair(0 if padding == "valid" else padding), as_pair(dilation)
    return cfg if all(window_fits(size, kk, 1, pp, dd) for size, kk, pp, dd in zip((h, w), k, p, d)) else None


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("cfg", configs(conv_config, 40), ids=str)
def test_conv2d(cfg: dict, dtype: str) -> None:
    x, w = randn(*cfg["x"], dtype=dtype), randn(*cfg["w"], dtype=dtype)
    b = randn(cfg["w"][0], dtype=dtype) if cfg["bias"] else None
    assert_matches(ops.conv2d(x, w, b, **cfg["attrs"]), F.conv2d(t(x), t(w), t(b), **cfg["attrs"]))


def test_conv2d_unbatched() -> None:
    x, w = randn(3, 6, 5), randn(4, 3, 3, 3)
    assert_matches(ops.conv2d(x, w, padding=1), F.conv2d(t(x), t(w), padding=1))


# -- pooling ------------------------------------------------------------------------------------------


def pool_config() -> dict | None:
    k = (CHOICE.randint(1, 4), CHOICE.randint(1, 4))
    stride = CHOICE.choice([None, 1, 2, 3, (2, 1)])
    padding = tuple(CHOICE.randint(0, kk // 2) for kk in k)
    dilation = CHOICE.choice([1, 1, 2, (1, 2)])
    h, w = CHOICE.randint(1, 9), CHOICE.randint(1, 9)
    d = as_pair(dilation)
    if not all(window_fits(size, kk, 1, pp, dd) for size, kk, pp, dd in zip((h, w), k, padding, d)):
        return None
    return {"x": (CHOICE.choice([1, 2]), 3, h, w), "kernel_size": k, "stride": stride, "padding": padding,
            "dilation": dilation, "ceil_mode": CHOICE.random() < 0.5,
            "count_include_pad": CHOICE.random() < 0.5}


POOL_CONFIGS = configs(pool_config, 50)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("cfg", POOL_CONFIGS, ids=str)
def test_max_pool2d(cfg: dict, dtype: str) -> None:
    x = randn(*cfg["x"], dtype=dtype)
    attrs = {k: cfg[k] for k in ("kernel_size", "stride", "padding", "dilation", "ceil_mode")}
    assert_matches(ops.max_pool2d(x, **attrs), F.max_pool2d(t(x), **attrs))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("cfg", POOL_CONFIGS, ids=str)
def test_avg_pool2d(cfg: dict, dtype: str) -> None:
    x = randn(*cfg["x"], dtype=dtype)
    attrs = {k: cfg[k] for k in ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad")}
    assert_matches(ops.avg_pool2d(x, **attrs), F.avg_pool2d(t(x), **attrs))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("divisor", [1, 3, -2])
def test_avg_pool2d_divisor_override(dtype: str, divisor: int) -> None:
    x = randn(2, 2, 7, 6, dtype=dtype)
    attrs = {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "divisor_override": divisor}
    assert_matches(ops.avg_pool2d(x, **attrs), F.avg_pool2d(t(x), **attrs))


ADAPTIVE = [((2, 3, 7, 9), (3, 4)), ((1, 2, 5, 5), 1), ((1, 2, 4, 6), (9, 13)), ((2, 1, 8, 8), (8, 8)),
            ((3, 10, 7), (4, 3)), ((1, 1, 13, 1), (5, 1))]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("shape", "out"), ADAPTIVE)
def test_adaptive_avg_pool2d(shape: tuple, out: Any, dtype: str) -> None:
    x = randn(*shape, dtype=dtype)
    assert_matches(ops.adaptive_avg_pool2d(x, output_size=out), F.adaptive_avg_pool2d(t(x), out))


# -- normalisation --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("shape", "affine", "eps"), [((2, 3, 4, 5), True, 1e-5), ((5, 4), False, 1e-3),
                                                      ((2, 3, 6), True, 0.5), ((1, 2, 2, 3, 2), True, 1e-5)])
def test_batch_norm(shape: tuple, affine: bool, eps: float, dtype: str) -> None:
    c = shape[1]
    x, mean, var = randn(*shape, dtype=dtype), randn(c, dtype=dtype), np.abs(randn(c, dtype=dtype)) + 0.1
    wt, b = (randn(c, dtype=dtype), randn(c, dtype=dtype)) if affine else (None, None)
    expected = F.batch_norm(t(x), t(mean), t(var), t(wt), t(b), training=False, eps=eps)
    assert_matches(ops.batch_norm(x, mean, var, wt, b, eps=eps), expected)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("shape", "normalized", "affine"), [((2, 5, 16), (16,), True),
                                                             ((3, 4, 5), (4, 5), True), ((7,), (7,), False),
                                                             ((2, 2, 3, 4), (2, 3, 4), True)])
def test_layer_norm(shape: tuple, normalized: tuple, affine: bool, dtype: str) -> None:
    x = randn(*shape, dtype=dtype) * 3 + 1
    wt, b = (randn(*normalized, dtype=dtype), randn(*normalized, dtype=dtype)) if affine else (None, None)
    expected = F.layer_norm(t(x), normalized, t(wt), t(b))
    assert_matches(ops.layer_norm(x, normalized, wt, b), expected)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("shape", "groups", "affine"), [((2, 6, 4, 4), 3, True), ((2, 6, 5), 6, True),
                                                         ((3, 4, 2, 2), 1, False),
                                                         ((1, 8, 3, 3, 2), 4, True)])
def test_group_norm(shape: tuple, groups: int, affine: bool, dtype: str) -> None:
    x = randn(*shape, dtype=dtype)
    wt, b = (randn(shape[1], dtype=dtype), randn(shape[1], dtype=dtype)) if affine else (None, None)
    assert_matches(ops.group_norm(x, groups, wt, b), F.group_norm(t(x), groups, t(wt), t(b)))


# -- resize ---------------------------------------------------------------------------------------------


def resize_config() -> dict:
    if CHOICE.random() < 0.5:
        return {"size": (CHOICE.randint(1, 17), CHOICE.randint(1, 17))}
    return {"scale_factor": (CHOICE.choice([0.5, 0.75, 1.0, 1.1, 1.5, 1.7, 2.0, 2.1, 2.5, 3.0, 0.3]),
                             CHOICE.choice([0.5, 1.0, 1.3, 2.0, 2.5, 3.3]))}


RESIZE_CONFIGS = [(resize_config(), (CHOICE.randint(2, 9), CHOICE.randint(2, 9))) for _ in range(40)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("attrs", "hw"), RESIZE_CONFIGS, ids=str)
def test_resize_nearest(attrs: dict, hw: tuple, dtype: str) -> None:
    x = randn(2, 3, *hw, dtype=dtype)
    expected = F.interpolate(t(x), mode="nearest", **attrs).numpy()
    np.testing.assert_array_equal(ops.resize_nearest(x, **attrs), expected)  # a gather: exact


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("attrs", "hw"), RESIZE_CONFIGS, ids=str)
def test_resize_bilinear(attrs: dict, hw: tuple, dtype: str, align_corners: bool) -> None:
    x = randn(2, 3, *hw, dtype=dtype)
    expected = F.interpolate(t(x), mode="bilinear", align_corners=align_corners, **attrs)
    assert_matches(ops.resize_bilinear(x, align_corners=align_corners, **attrs), expected)


# -- roi_align ------------------------------------------------------------------------------------------


def torchvision_roi_align() -> Callable[..., Any]:
    try:
        from torchvision.ops import roi_align
    except Exception as exc:  # not installed, or built for another torch
        pytest.skip(f"torchvision unavailable: {exc}")
    return roi_align


ROI = [((7, 7), 0.25, -1), ((2, 3), 1.0, 2), (3, 0.5, -1), ((1, 1), 0.5, 1), ((4, 2), 0.125, 0)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize(("output_size", "scale", "ratio"), ROI)
def test_roi_align(output_size: Any, scale: float, ratio: int, aligned: bool, dtype: str) -> None:
    roi_align = torchvision_roi_align()
    x = randn(2, 4, 12, 10, dtype=dtype)
    k = 8
    x1, y1 = RNG.uniform(-8, 40, k) / scale / 4, RNG.uniform(-8, 48, k) / scale / 4
    boxes = np.stack([RNG.integers(0, 2, k), x1, y1, x1 + RNG.uniform(0, 30, k) / scale / 4,
                      y1 + RNG.uniform(0, 30, k) / scale / 4], axis=1).astype(dtype)
    attrs = {"output_size": output_size, "spatial_scale": scale, "sampling_ratio": ratio, "aligned": aligned}
    assert_matches(ops.roi_align(x, boxes, **attrs), roi_align(t(x), t(boxes), **attrs))


# -- embedding and attention ----------------------------------------------------------------------------


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_embedding(index_dtype: str) -> None:
    weight, indices = randn(11, 6, dtype="float32"), RNG.integers(0, 11, (3, 4)).astype(index_dtype)
    expected = F.embedding(t(indices).long(), t(weight)).numpy()
    np.testing.assert_array_equal(ops.embedding(indices, weight), expected)


SDPA = [  # q, k, v shapes, mask kind, attrs
    ((2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 5), None, {}),
    ((2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 5), None, {"is_causal": True}),
    ((2, 6, 8), (2, 4, 8), (2, 4, 8), None, {"is_causal": True, "scale": 0.2}),
    ((2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 5), "bool", {}),
    ((2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 5), "float", {"scale": 0.5}),
    ((1, 5, 4), (1, 5, 4), (1, 5, 4), "bool-rows", {}),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("q", "k", "v", "mask", "attrs"), SDPA, ids=str)
def test_scaled_dot_product_attention(q: tuple, k: tuple, v: tuple, mask: str | None, attrs: dict,
                                      dtype: str) -> None:
    qa, ka, va = randn(*q, dtype=dtype), randn(*k, dtype=dtype), randn(*v, dtype=dtype)
    length, source = q[-2], k[-2]
    if mask == "bool":
        m = RNG.random((length, source)) < 0.7
    elif mask == "bool-rows":
        m = RNG.random((q[0], length, source)) < 0.5
        m[..., 0, :] = False  # a fully masked row
    elif mask == "float":
        m = randn(q[0], 1, length, source, dtype=dtype)
    else:
        m = None
    out = ops.scaled_dot_product_attention(qa, ka, va, m, **attrs)
    assert_matches(out, F.scaled_dot_product_attention(t(qa), t(ka), t(va), attn_mask=t(m), **attrs))


# -- a small CNN end to end ---------------------------------------------------------------------------


def test_small_cnn_batch16_64x64() -> None:
    """The reference kernels must carry a real (small) network: 16 x 3 x 64 x 64, float32."""
    dt = "float32"
    x = randn(16, 3, 64, 64, dtype=dt)
    w1, b1 = randn(16, 3, 3, 3, dtype=dt) * 0.3, randn(16, dtype=dt)
    mean, var, gamma, beta = randn(16, dtype=dt), np.abs(randn(16, dtype=dt)) + 0.5, randn(16, dtype=dt), \
        randn(16, dtype=dt)
    w2 = randn(32, 8, 3, 3, dtype=dt) * 0.2
    w3 = randn(32, 1, 3, 3, dtype=dt) * 0.3
    gn_w, gn_b = randn(32, dtype=dt), randn(32, dtype=dt)

    y = ops.conv2d(x, w1, b1, padding=1)
    y = np.maximum(ops.batch_norm(y, mean, var, gamma, beta), 0)
    y = ops.max_pool2d(y, kernel_size=2)
    y = ops.conv2d(y, w2, stride=2, padding=1, groups=2)
    y = ops.group_norm(y, 8, gn_w, gn_b)
    y = ops.conv2d(y, w3, padding="same", groups=32)
    y = ops.avg_pool2d(y, kernel_size=3, stride=2, padding=1, ceil_mode=True)
    y = ops.resize_bilinear(y, scale_factor=2.0)
    y = ops.adaptive_avg_pool2d(y, output_size=1)

    e = F.conv2d(t(x), t(w1), t(b1), padding=1)
    e = F.relu(F.batch_norm(e, t(mean), t(var), t(gamma), t(beta), training=False))
    e = F.max_pool2d(e, 2)
    e = F.conv2d(e, t(w2), stride=2, padding=1, groups=2)
    e = F.group_norm(e, 8, t(gn_w), t(gn_b))
    e = F.conv2d(e, t(w3), padding="same", groups=32)
    e = F.avg_pool2d(e, 3, stride=2, padding=1, ceil_mode=True)
    e = F.interpolate(e, scale_factor=2.0, mode="bilinear")
    e = F.adaptive_avg_pool2d(e, 1)
    assert y.shape == (16, 32, 1, 1)
    assert_matches(y, e)
