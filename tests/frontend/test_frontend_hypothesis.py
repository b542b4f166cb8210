"""Property tests: jitted programs agree with the same Python run on numpy, over many random shapes.

Programs are assembled from steps that mix branches on shapes, loops with symbolic bounds and
loop-carried tensors, slicing with symbols and negative bounds, and ``reshape(-1, ...)``; every step
keeps ``x`` a 2-D float32 tensor, so any sequence of steps is a valid program.
"""

# ms.Tensor["N", 3] reads to linters as string forward references: F821 is noise here. No
# `from __future__ import annotations` either: with it, ruff's UP037 "fix" unquotes the symbols.
# ruff: noqa: F821

import linecache
import textwrap

import numpy as np
from frontend_helpers import assert_same, check
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import msvm as ms
import msvm.ops
from msvm.frontend import Tensor, jit, mutable

STEPS = (
    "x = x[:y.shape[0] + 1]",
    "x = x[:, :y.shape[0]]",
    "x = x[-(y.shape[0] + 1):]",
    "x = x[:n]",
    "if x.shape[1] > 0:\n    x = x.reshape(x.shape[1], -1)",
    "if x.shape[1] > 0:\n    x = x.reshape(-1, x.shape[1] * 1)",
    "x = x.reshape(-1, 1)[:x.shape[0]]",
    "if x.shape[0] > 2:\n    x = x[1:] * 2.0\nelif x.shape[0] == 0:\n    x = x - 1.0\nelse:\n    x = x + 1.0",
    "for i in range(min(x.shape[0], 3)):\n    x = x + x[i]",
    "for i in range(n):\n    x = x * 1.5 - i",
    "x = x.T",
    "x = ms.ops.concat([x, x[:1]], axis=0)",
    "x = x - x.sum(axis=0)",
    "x = x[::-1, ::2]",
    "acc = x[:0]\nfor i in range(x.shape[0]):\n    acc = ms.ops.concat([acc, x[i:i + 1] * i], axis=0)\nx = "
    "acc",
    "k = x.shape[0]\nif k > y.shape[0] and not x.shape[1] < 2:\n    x = x[:, 1:]",
    "x = x[..., None][:, :, 0] if x.shape[1] != 1 else x * 3.0",
)

_PROGRAMS: dict[tuple[int, ...], object] = {}


def program(steps: tuple[int, ...]) -> object:
    """The jitted function for a sequence of step indices (compiled once per sequence)."""
    fn = _PROGRAMS.get(steps)
    if fn is None:
        body = "\n".join(STEPS[i] for i in steps) or "pass"
        body = textwrap.indent(body, "    ")
        source = f"@jit\ndef prog(x, y, n):\n{body}\n    return x, x.shape[0], x.shape[1]\n"
        filename = f"<hypothesis-program-{len(_PROGRAMS)}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        namespace = {"jit": jit, "ms": ms}
        exec(compile(source, filename, "exec"), namespace)
        fn = _PROGRAMS[steps] = namespace["prog"]
    return fn


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(st.integers(0, len(STEPS) - 1), max_size=6).map(tuple),
    n=st.integers(0, 6), m=st.integers(0, 5), k=st.integers(0, 4), count=st.integers(0, 3),
    seed=st.integers(0, 2**16),
)
def test_generated_programs_agree_with_numpy(steps, n, m, k, count, seed) -> None:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, m)).astype(np.float32)
    y = rng.standard_normal(k).astype(np.float32)
    fn = program(steps)
    got = fn(x, y, mutable(count))
    want = fn.py_func(x, y, mutable(count))
    assert_same(got, want, rtol=1e-4)


@jit
def crop_pool(x: Tensor["B", "C", "H", "W"], size: Tensor["S"]):
    s = size.shape[0]
    h = min(x.shape[2], s)
    w = min(x.shape[3], s + 1)
    y = x[:, :, :h, :w]
    if y.shape[2] > 1:
        y = y[:, :, ::2]
    flat = y.reshape(y.shape[0], -1)
    total = flat[:, :0].sum(axis=1)
    for c in range(x.shape[1]):
        total = total + x[:, c].sum(axis=(1, 2)) * c
    return flat, total


@settings(max_examples=60, deadline=None)
@given(b=st.integers(1, 3), c=st.integers(0, 3), h=st.integers(0, 6), w=st.integers(1, 6),
       s=st.integers(0, 7))
def test_crop_and_pool_over_shapes(b, c, h, w, s) -> None:
    x = np.random.default_rng(b * 100 + h).standard_normal((b, c, h, w)).astype(np.float32)
    check(crop_pool, x, np.zeros(s, np.float32), rtol=1e-5)
    assert len(crop_pool.versions) == 1  # one version for every shape


@jit
def weak_mix(x, alpha, k):
    y = x * alpha + k
    if x.ndim == 2:
        y = y.sum(axis=-1) / x.shape[-1]
    return y, y * 0.5 - alpha


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(["float16", "float32", "float64", "int32", "int64"]),
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=2).map(tuple),
    alpha=st.floats(-4, 4, allow_nan=False), k=st.integers(-3, 3),
)
def test_weak_scalars_over_dtypes(dtype, shape, alpha, k) -> None:
    x = (np.arange(int(np.prod(shape))).reshape(shape) - 2).astype(dtype)
    check(weak_mix, x, alpha, k, rtol=2e-3)
