"""The ops ONNX's Trilu, CumSum, GatherElements and ReduceProd import onto, against numpy and torch.

``triu``/``tril``, ``cumsum`` (with exclusive and reverse), ``gather`` and ``prod``: eager results,
dtypes, the shape functions on symbolic shapes, and the errors for bad calls (a rank-1 triangle, an
out-of-range index, a too-large index tensor).
"""

from __future__ import annotations

import numpy as np
import pytest

import msvm.ops as ops
from msvm.ops import InferContext, OpTypeError, TensorType
from msvm.shapes import parse_shape

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(27)


def infer(name: str, *specs: tuple[str, str], **attrs) -> tuple[TensorType, InferContext]:
    op = ops.get_op(name)
    ctx = InferContext()
    types = [TensorType(parse_shape(s), dt) for s, dt in specs]
    return op.infer(ctx, *types, **op.check_attrs(attrs)), ctx


@pytest.mark.parametrize("name", ["triu", "tril"])
@pytest.mark.parametrize("diagonal", [-2, -1, 0, 1, 3])
def test_triangle_matches_torch_on_a_batch_of_matrices(name, diagonal):
    x = RNG.standard_normal((2, 4, 5))
    got = getattr(ops, name)(x, diagonal)
    expected = getattr(torch, name)(torch.from_numpy(x), diagonal=diagonal).numpy()
    np.testing.assert_array_equal(got, expected)
    assert getattr(ops, name)(input=x.astype(np.int64), diagonal=diagonal).dtype == np.int64


def test_triangle_keeps_a_symbolic_shape_and_refuses_a_vector():
    t, _ = infer("tril", ("[B, L, L]", "bool"), diagonal=0)
    assert t.shape == parse_shape("[B, L, L]") and t.dtype == "bool"
    with pytest.raises(OpTypeError, match=r"triu: input has rank 1 \[L\]"):
        infer("triu", ("[L]", "float32"))


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumsum_matches_a_loop_with_exclusive_and_reverse(exclusive, reverse, axis):
    x = RNG.standard_normal((3, 4, 5))
    got = ops.cumsum(x, axis, exclusive=exclusive, reverse=reverse)
    moved = np.moveaxis(x, axis, 0)
    expected = np.zeros_like(moved)
    n = moved.shape[0]
    for i in range(n):
        span = range(i, n) if reverse else range(i + 1)
        expected[i] = sum((moved[j] for j in span if not (exclusive and j == i)), np.zeros_like(moved[0]))
    np.testing.assert_allclose(got, np.moveaxis(expected, 0, axis), rtol=1e-12, atol=1e-12)


def test_cumsum_follows_torch_and_numpy_dtypes_and_exclusive_is_exact():
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    got = ops.cumsum(x, dim=1)
    assert got.dtype == torch.cumsum(torch.from_numpy(x), 1).numpy().dtype == np.int64
    np.testing.assert_array_equal(got, np.cumsum(x, axis=1))
    big = np.array([1e17, 1.0, 1.0], np.float64)  # cumsum - x would give 0 for the last element
    np.testing.assert_array_equal(ops.cumsum(big[::-1].copy(), 0, exclusive=True), [0.0, 1.0, 2.0])
    assert ops.cumsum(np.zeros((0, 3)), 0, exclusive=True).shape == (0, 3)
    t, _ = infer("cumsum", ("[N, L]", "bool"), axis=-1)
    assert t.dtype == "int64"
    with pytest.raises(OpTypeError, match="axis 2 is out of range"):
        infer("cumsum", ("[N, L]", "float32"), axis=2)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_gather_matches_torch_with_smaller_index_tensors(axis):
    x = RNG.standard_normal((4, 5, 6))
    shape = [3, 4, 5]
    shape[axis] = 7
    index = RNG.integers(0, x.shape[axis], size=shape)
    got = ops.gather(x, axis, index)
    expected = torch.gather(torch.from_numpy(x), axis, torch.from_numpy(index)).numpy()
    np.testing.assert_array_equal(got, expected)


def test_gather_counts_negative_indices_from_the_end_and_names_out_of_range_ones():
    x = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(ops.gather(x, 1, np.array([[-1, 0], [-4, 3]])), [[3, 0], [4, 7]])
    with pytest.raises(IndexError, match="index 4 is out of range for size 4 along axis 1"):
        ops.gather(x, 1, np.array([[4]]))
    with pytest.raises(IndexError, match="index -5"):
        ops.gather(x, -1, np.array([[-5]]))


def test_gather_shape_function_checks_rank_dtype_and_extent():
    t, ctx = infer("gather", ("[N, C]", "float32"), ("[K, 2]", "int64"), axis=0)
    assert t.shape == parse_shape("[K, 2]") and t.dtype == "float32"
    assert ctx.guards  # 2 <= C can only be checked at run time
    with pytest.raises(OpTypeError, match="rank"):
        infer("gather", ("[N, C]", "float32"), ("[N]", "int64"), axis=0)
    with pytest.raises(OpTypeError, match="int32 or int64"):
        infer("gather", ("[N, C]", "float32"), ("[N, C]", "float32"), axis=0)
    with pytest.raises(OpTypeError, match="larger than the input"):
        infer("gather", ("[4, 3]", "float32"), ("[2, 5]", "int64"), axis=0)


@pytest.mark.parametrize("axis", [None, 0, (0, 2), -1])
@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
def test_prod_matches_numpy_values_and_dtypes(axis, dtype):
    x = (RNG.integers(1, 4, size=(2, 3, 4))).astype(dtype)
    for keepdims in (False, True):
        got = ops.prod(x, axis=axis, keepdims=keepdims)
        expected = np.prod(x, axis=axis, keepdims=keepdims)
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)
    t, _ = infer("prod", ("[N, C, L]", dtype), axis=axis)
    assert t.dtype == np.prod(x, axis=axis).dtype.name
