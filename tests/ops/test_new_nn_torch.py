"""conv_transpose2d, conv3d, max_pool3d and avg_pool3d against PyTorch itself, over seeded configurations.

Strides, paddings, output_padding, dilations, groups, ceil_mode, count_include_pad and
divisor_override are drawn together so that they meet in many combinations; the calls use torch's
positional order (``F.conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation)``).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import msvm.ops as ops

torch = pytest.importorskip("torch")
F = torch.nn.functional
CHOICE = random.Random(2727)
RNG = np.random.default_rng(2727)


def _close(got: np.ndarray, expected) -> None:
    expected = expected.numpy()
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)


def _t(x):
    return None if x is None else torch.from_numpy(x)


def _transpose_configs(count: int) -> list[dict]:
    out = []
    while len(out) < count:
        stride, dilation = [CHOICE.randint(1, 3) for _ in range(2)], [CHOICE.randint(1, 2) for _ in range(2)]
        k = [CHOICE.randint(1, 4) for _ in range(2)]
        groups = CHOICE.choice([1, 2])
        cfg = {"stride": tuple(stride), "padding": tuple(CHOICE.randint(0, 2) for _ in range(2)),
               "output_padding": tuple(CHOICE.randrange(max(s, d)) for s, d in zip(stride, dilation)),
               "groups": groups, "dilation": tuple(dilation), "k": k, "bias": CHOICE.random() < 0.7}
        sizes = [CHOICE.randint(1, 6) for _ in range(2)]
        if all((n - 1) * s - 2 * p + d * (kk - 1) + o + 1 > 0 for n, s, p, d, kk, o in
               zip(sizes, cfg["stride"], cfg["padding"], cfg["dilation"], k, cfg["output_padding"])):
            out.append({**cfg, "sizes": sizes})
    return out


@pytest.mark.parametrize("cfg", _transpose_configs(24), ids=lambda c: str(c))
def test_conv_transpose2d_matches_torch_positionally(cfg):
    g = cfg["groups"]
    x = RNG.standard_normal((2, 2 * g, *cfg["sizes"]))
    w = RNG.standard_normal((2 * g, 3, *cfg["k"]))
    b = RNG.standard_normal(3 * g) if cfg["bias"] else None
    args = (cfg["stride"], cfg["padding"], cfg["output_padding"], g, cfg["dilation"])
    _close(ops.conv_transpose2d(x, w, b, *args), F.conv_transpose2d(_t(x), _t(w), _t(b), *args))


def test_conv_transpose2d_refuses_output_padding_at_the_stride():
    with pytest.raises(ops.OpTypeError, match="output_padding 2 along H with stride 2"):
        ops.conv_transpose2d(np.zeros((1, 2, 3, 3)), np.zeros((2, 2, 3, 3)), stride=2, output_padding=2)
    with pytest.raises(ops.OpTypeError, match=r"input channels vs weight.shape\[0\]"):
        ops.conv_transpose2d(np.zeros((1, 2, 3, 3)), np.zeros((3, 2, 3, 3)))


def _volume_configs(count: int, pooling: bool) -> list[dict]:
    out = []
    while len(out) < count:
        k = tuple(CHOICE.randint(1, 3) for _ in range(3))
        cfg = {"k": k, "stride": tuple(CHOICE.randint(1, 3) for _ in range(3)),
               "padding": tuple(CHOICE.randint(0, kk // 2) for kk in k),
               "dilation": tuple(CHOICE.randint(1, 2) for _ in range(3)),
               "sizes": tuple(CHOICE.randint(2, 7) for _ in range(3))}
        if pooling:
            cfg.update(ceil_mode=CHOICE.random() < 0.5, count_include_pad=CHOICE.random() < 0.5,
                       divisor_override=CHOICE.choice([None, None, 3]))
        else:
            cfg.update(groups=CHOICE.choice([1, 2]), bias=CHOICE.random() < 0.7)
        fits = all(n + 2 * p - d * (kk - 1) - 1 >= 0 for n, p, d, kk in
                   zip(cfg["sizes"], cfg["padding"], cfg["dilation"], k))
        smaller = any(n < kk for n, kk in zip(cfg["sizes"], k))  # torch's 3-D pools refuse those
        if fits and not (pooling and smaller):
            out.append(cfg)
    return out


@pytest.mark.parametrize("cfg", _volume_configs(16, pooling=False), ids=lambda c: str(c))
def test_conv3d_matches_torch(cfg):
    g = cfg["groups"]
    x = RNG.standard_normal((2, 2 * g, *cfg["sizes"]))
    w = RNG.standard_normal((3 * g, 2, *cfg["k"]))
    b = RNG.standard_normal(3 * g) if cfg["bias"] else None
    args = (cfg["stride"], cfg["padding"], cfg["dilation"], g)
    _close(ops.conv3d(x, w, b, *args), F.conv3d(_t(x), _t(w), _t(b), *args))


@pytest.mark.parametrize("cfg", _volume_configs(24, pooling=True), ids=lambda c: str(c))
def test_pool3d_matches_torch(cfg):
    x = RNG.standard_normal((2, 3, *cfg["sizes"]))
    window = (cfg["k"], cfg["stride"], cfg["padding"])
    _close(ops.max_pool3d(x, *window, cfg["dilation"], cfg["ceil_mode"]),
           F.max_pool3d(_t(x), *window, cfg["dilation"], cfg["ceil_mode"]))
    extra = (cfg["ceil_mode"], cfg["count_include_pad"], cfg["divisor_override"])
    _close(ops.avg_pool3d(x, *window, *extra), F.avg_pool3d(_t(x), *window, *extra))


def test_volume_ops_take_unbatched_input_and_name_a_wrong_rank():
    x = RNG.standard_normal((3, 4, 5, 6))
    w = RNG.standard_normal((2, 3, 3, 3, 3))
    _close(ops.conv3d(x, w, padding=1), F.conv3d(_t(x), _t(w), padding=1))
    _close(ops.max_pool3d(x, 2), F.max_pool3d(_t(x), 2))
    with pytest.raises(ops.OpTypeError, match=r"avg_pool3d: input has rank 3"):
        ops.avg_pool3d(np.zeros((3, 4, 5)), 2)
