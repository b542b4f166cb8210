"""Property tests: reshape with -1, Python slicing and numpy broadcasting, symbolic vs numpy."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from msvm.ops import REGISTRY, InferContext, OpTypeError, TensorType
from msvm.ops.layout import SLICE_BEGIN, SLICE_END, slice_length
from msvm.shapes import Dim, ShapeSpec, dmax, dmin

SETTINGS = settings(max_examples=300, deadline=None)


def symbolic(
    shape: tuple[int, ...], keep_ones: bool = True, prefix: str = "N"
) -> tuple[ShapeSpec, dict[str, int]]:
    """A spec with one symbol per dim (size-1 dims stay the constant 1 when keep_ones)."""
    dims: list[Any] = []
    bindings: dict[str, int] = {}
    for i, size in enumerate(shape):
        if keep_ones and size == 1:
            dims.append(1)
        else:
            bindings[f"{prefix}{i}"] = size
            dims.append(Dim.sym(f"{prefix}{i}"))
    return ShapeSpec(dims), bindings


def guards_hold(ctx: InferContext, bindings: dict[str, int]) -> bool:
    return all(g.holds(bindings) for g in ctx.guards)


@st.composite
def reshapes(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=0, max_size=4)))
    # the target groups consecutive dims into products, then one size may become -1
    cuts = sorted(draw(st.sets(st.integers(1, max(len(shape) - 1, 1)), max_size=3))) if len(shape) > 1 else []
    bounds = [0, *[c for c in cuts if c < len(shape)], len(shape)]
    target = [math.prod(shape[a:b]) for a, b in itertools.pairwise(bounds)] if shape else [1]
    target = draw(st.permutations(target))
    extra_ones = draw(st.integers(0, 2))
    target = list(target) + [1] * extra_ones
    hole = draw(st.integers(-1, len(target) - 1))
    if hole >= 0 and math.prod(t for i, t in enumerate(target) if i != hole) != 0:
        target[hole] = -1
    return shape, tuple(target)


@SETTINGS
@given(reshapes(), st.booleans())
def test_reshape_matches_numpy(case: tuple, keep_ones: bool) -> None:
    shape, target = case
    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    expected = x.reshape(target)
    op = REGISTRY["reshape"]
    np.testing.assert_array_equal(op(x, target), expected)
    spec, bindings = symbolic(shape, keep_ones)
    ctx = InferContext()
    out = op.infer(ctx, TensorType(spec, "float32"), shape=target)
    assert guards_hold(ctx, bindings), ctx.guards
    assert out.shape.evaluate(bindings) == expected.shape
    const = op.infer(InferContext(), TensorType(ShapeSpec(shape), "float32"), shape=target)
    assert const.shape == ShapeSpec(expected.shape)


@SETTINGS
@given(st.lists(st.integers(1, 6), min_size=1, max_size=3), st.integers(2, 4))
def test_reshape_symbolic_minus_one_stays_exact(shape: list[int], k: int) -> None:
    """[N, a, b] reshaped to (-1, a*b) is [N, a*b]; [N, k*m] to (-1, m) is [N*k, m]: no opaque division."""
    spec = ShapeSpec([Dim.sym("N"), *shape])
    out = REGISTRY["reshape"].infer(InferContext(), TensorType(spec, "float32"), shape=(-1, math.prod(shape)))
    assert str(out.shape) == f"[N, {math.prod(shape)}]"
    spec = ShapeSpec([Dim.sym("N"), k * shape[0]])
    ctx = InferContext()
    out = REGISTRY["reshape"].infer(ctx, TensorType(spec, "float32"), shape=(-1, shape[0]))
    assert str(out.shape) == f"[N*{k}, {shape[0]}]" and not ctx.guards


bounds = st.one_of(st.none(), st.integers(-15, 15), st.sampled_from([SLICE_END, SLICE_BEGIN]))


def python_bounds(start: int | None, stop: int | None, step: int) -> tuple[int, int]:
    if start is None:
        start = 0 if step > 0 else SLICE_END
    if stop is None:
        stop = SLICE_END if step > 0 else SLICE_BEGIN
    return start, stop


@SETTINGS
@given(st.integers(0, 12), bounds, bounds, st.integers(-4, 4).filter(bool), st.booleans())
def test_slice_matches_python(
    n: int, start: int | None, stop: int | None, step: int, sym_bounds: bool
) -> None:
    x = np.arange(n * 2, dtype=np.int64).reshape(2, n)
    expected = x[:, start:stop:step]
    s, e = python_bounds(start, stop, step)
    op = REGISTRY["slice"]
    attrs = {"axes": (-1,), "starts": (s,), "stops": (e,), "steps": (step,)}
    np.testing.assert_array_equal(op(x, **attrs), expected)
    # constant dims give the constant answer, with no guards
    ctx = InferContext()
    out = op.infer(ctx, TensorType(ShapeSpec(x.shape), "int64"), **attrs)
    assert out.shape == ShapeSpec(expected.shape) and not ctx.guards
    # a symbolic dim gives an expression that evaluates to it
    bindings = {"L": n}
    spec = ShapeSpec([2, Dim.sym("L")])
    if sym_bounds:  # register-provided bounds: only non-negative ones are accepted (guarded)
        if 0 <= s < 2**62:
            attrs["starts"], bindings["S"] = (Dim.sym("S"),), s
        if 0 <= e < 2**62:
            attrs["stops"], bindings["E"] = (Dim.sym("E"),), e
    ctx = InferContext()
    out = op.infer(ctx, TensorType(spec, "int64"), **attrs)
    assert guards_hold(ctx, bindings)
    assert out.shape.evaluate(bindings) == expected.shape


@SETTINGS
@given(
    st.integers(0, 6),
    st.integers(0, 6),
    st.integers(-8, 8),
    st.integers(-8, 8),
    st.integers(-8, 8),
    st.integers(-8, 8),
    st.integers(-3, 3).filter(bool),
    st.integers(-3, 3).filter(bool),
)
def test_slice_two_axes(n: int, m: int, s0: int, e0: int, s1: int, e1: int, k0: int, k1: int) -> None:
    x = np.arange(n * m, dtype=np.float64).reshape(n, m)
    expected = x[s0:e0:k0, s1:e1:k1]
    op = REGISTRY["slice"]
    attrs = {"axes": (0, 1), "starts": (s0, s1), "stops": (e0, e1), "steps": (k0, k1)}
    np.testing.assert_array_equal(op(x, **attrs), expected)
    spec, bindings = symbolic((n, m), keep_ones=False)
    out = op.infer(InferContext(), TensorType(spec, "float64"), **attrs)
    assert out.shape.evaluate(bindings) == expected.shape


def test_slice_length_exhaustive() -> None:
    """Every class of start/stop (front, back, clamped ends) for every small size, both directions."""
    values = [*range(-9, 10), SLICE_END, SLICE_BEGIN]
    L = Dim.sym("L")
    for start in values:
        for stop in values:
            for step in (1, 2, 3, -1, -2, -3):
                length = slice_length(L, start, stop, step)
                for n in range(9):
                    assert length.evaluate({"L": n}) == len(range(n)[start:stop:step]), (start, stop, step, n)


def test_slice_length_of_symbolic_bounds_of_either_sign_is_pythons() -> None:
    """A bound computed from sizes (``W - H - 3``, ``-H - 3``) may be negative: the length still clamps it."""
    L, A, B = Dim.sym("L"), Dim.sym("A"), Dim.sym("B")
    bounds = [A, -A - 3, A - B - 2, -A, B + 1, L - 1, L - 2, L - 3, L + 1, -2, 3, SLICE_END, SLICE_BEGIN]
    for start in bounds:
        for stop in bounds:
            for step in (1, 2, -1, -3):
                length = slice_length(L, start, stop, step)
                for n in range(5):
                    for a in range(5):
                        for b in range(4):
                            env = {"L": n, "A": a, "B": b}
                            s, e = (v if isinstance(v, int) else v.evaluate(env) for v in (start, stop))
                            assert length.evaluate(env) == len(range(n)[s:e:step]), (start, stop, step, env)
    assert slice_length(L, -A - 3, SLICE_END, 1) == dmin(A + 3, L)  # known negative: counts from the back
    assert slice_length(L, 0, L - 1, 1) == dmax(L - 1, 0)  # x[:len(x) - 1] keeps a short form


def test_slice_full_and_constant_cases_are_simple() -> None:
    L = Dim.sym("L")
    assert slice_length(L, 0, SLICE_END, 1) == L
    assert slice_length(L, SLICE_END, SLICE_BEGIN, -1) == L
    assert slice_length(L, SLICE_BEGIN, SLICE_END, 1) == L
    assert slice_length(7, 1, -1, 2).is_const and slice_length(7, 1, -1, 2).value == 3


@SETTINGS
@given(
    hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, min_side=0, max_side=4),
    st.booleans(),
)
def test_binary_broadcasting_matches_numpy(shapes: Any, keep_ones: bool) -> None:
    (sa, sb), result = shapes.input_shapes, shapes.result_shape
    a, b = np.ones(sa, np.float32), np.ones(sb, np.int32)
    out = REGISTRY["add"](a, b)
    assert out.shape == result and out.dtype == np.float64
    ta, ba = symbolic(sa, keep_ones, "A")
    tb, bb = symbolic(sb, keep_ones, "B")
    ctx = InferContext()
    t = REGISTRY["add"].infer(ctx, TensorType(ta, "float32"), TensorType(tb, "int32"))
    bindings = {**ba, **bb}
    if keep_ones:  # with size-1 dims declared as 1 the guards hold and the shape is exact
        assert guards_hold(ctx, bindings)
    if guards_hold(ctx, bindings):
        assert t.shape.evaluate(bindings) == result
    const = REGISTRY["add"].infer(
        InferContext(), TensorType(ShapeSpec(sa), "float32"), TensorType(ShapeSpec(sb), "int32")
    )
    assert const.shape == ShapeSpec(result) and const.dtype == "float64"


@SETTINGS
@given(hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, min_side=0, max_side=3))
def test_where_broadcasting_matches_numpy(shapes: Any) -> None:
    sc, sa, sb = shapes.input_shapes
    out = REGISTRY["where"](np.ones(sc, bool), np.zeros(sa, np.float32), np.ones(sb, np.float32))
    assert out.shape == shapes.result_shape
    types = [
        TensorType(symbolic(s, True, p)[0], d)
        for s, p, d in zip((sc, sa, sb), "CAB", ("bool", "float32", "float32"))
    ]
    bindings = {k: v for s, p in zip((sc, sa, sb), "CAB") for k, v in symbolic(s, True, p)[1].items()}
    ctx = InferContext()
    t = REGISTRY["where"].infer(ctx, *types)
    assert guards_hold(ctx, bindings)
    assert t.shape.evaluate(bindings) == shapes.result_shape


@SETTINGS
@given(st.lists(st.integers(0, 4), max_size=3), st.lists(st.integers(0, 4), max_size=3))
def test_incompatible_constant_shapes_are_rejected(sa: list[int], sb: list[int]) -> None:
    try:
        expected = np.broadcast_shapes(tuple(sa), tuple(sb))
    except ValueError:
        expected = None
    ctx = InferContext()
    types = (TensorType(ShapeSpec(sa), "float32"), TensorType(ShapeSpec(sb), "float32"))
    if expected is None:
        with pytest.raises(OpTypeError) as info:
            REGISTRY["mul"].infer(ctx, *types)
        assert info.value.code == "SHAPE-MISMATCH"
    else:
        assert REGISTRY["mul"].infer(ctx, *types).shape == ShapeSpec(expected)
