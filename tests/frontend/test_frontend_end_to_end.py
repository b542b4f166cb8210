"""Jitted functions run on the VM and agree with the same Python function run on numpy."""

# ms.Tensor["N", 3] reads to linters as string forward references: F821 is noise here. No
# `from __future__ import annotations` either: with it, ruff's UP037 "fix" unquotes the symbols.
# ruff: noqa: F821

import numpy as np
import pytest
from frontend_helpers import assert_same, check, ops

import msvm as ms
import msvm.ops
from msvm.errors import CompileError, ShapeError
from msvm.frontend import Tensor, jit, mutable, symbolic_mul

RNG = np.random.default_rng(0)


def rand(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


# -- arithmetic and broadcasting ------------------------------------------------------------------------


@jit
def arith(x: Tensor["N", 3], y: Tensor[3], w: Tensor[3, "K"]):
    a = x + y
    b = 2 - x * y
    c = x / (y * y + 1.0)
    d = -x ** 2
    e = a @ w
    return a, b, c, d, e, x > y, x <= 0.5


def test_arithmetic_and_broadcasting() -> None:
    check(arith, rand(5, 3), rand(3), rand(3, 4))


@jit
def weak(x, alpha):
    return x * 2.5, x + 1, alpha * x, alpha + 1, x - alpha * 2


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int64", "float64"])
def test_weak_python_scalars_follow_numpy2(dtype: str) -> None:
    x = (rand(4, 2) * 10).astype(dtype)
    got = check(weak, x, 0.5, rtol=1e-3)
    assert got[0].dtype == np.result_type(x.dtype, 2.5)
    assert got[1].dtype == x.dtype


@jit
def scaled(x, alpha):
    return x * alpha


def test_float_parameter_is_one_version_for_all_values() -> None:
    x = rand(3, 2)
    check(scaled, x, 0.5)
    check(scaled, x, -3.25)
    assert len(scaled.versions) == 1
    assert "TENSOR_CREATE 1, [], float64" in str(scaled.bytecode)


@jit
def bool_logic(x, y):
    m = (x > 0) & (y > 0)
    n = (x > 0) | ~(y > 0)
    return m, n, (x > 0) ^ (y > 0)


def test_bool_tensor_operators() -> None:
    check(bool_logic, rand(4, 3), rand(4, 3))


# -- methods and attributes ---------------------------------------------------------------------------


@jit
def methods(x):
    n = x.shape[0]
    a = x.reshape(-1, 8)
    b = x.reshape((n, -1))
    c = x.transpose(2, 0, 1)
    d = x.transpose()
    e = x.permute(1, 0, 2) if False else x.transpose((1, 0, 2))
    f = x.sum(1) + x.mean(axis=1)
    g = x.max(axis=(0, 2), keepdims=True) - x.min()
    h = x.argmax(axis=1)
    i = x.astype("int64").astype(np.float64)
    j = x.flatten()
    k = x[:, :1].squeeze(1)
    return a, b, c, d, e, f, g, h, i, j, k, x.sum(), x.ndim, len(x), x.size


def test_tensor_methods() -> None:
    check(methods, rand(2, 4, 4))
    check(methods, rand(6, 3, 8))


@jit
def torch_style(x):
    return x.permute(1, 0).unsqueeze(0), x.T, x.unsqueeze(dim=-1)


def test_torch_style_methods() -> None:
    x = rand(3, 5)
    p, t, u = torch_style(x)
    assert_same(p, x.transpose(1, 0)[None])
    assert_same(t, x.T)
    assert_same(u, x[..., None])


@jit
def op_calls(x: Tensor["B", "C"], w: Tensor["D", "C"], b: Tensor["D"]):
    y = ms.ops.linear(x, w, b)
    z = ms.ops.softmax(y, axis=-1)
    parts = ms.ops.split(z, sections=1, axis=0)
    c = ms.ops.concat([x, x], axis=1)
    return ms.ops.relu(y), z, parts[0], c


@jit
def op_calls_with_python_scalars(x):
    return ms.ops.where(x > 0, x, 0.0), ms.ops.maximum(x, 1), ms.ops.clamp(x, min=0.5)


def test_ms_ops_calls() -> None:
    check(op_calls, rand(4, 3), rand(5, 3), rand(5))


@jit
def conv_same(x: Tensor["N", 3, "H", "W"], w: Tensor[4, 3, 3, 3], b: Tensor[4]):
    return ms.ops.linear(ms.ops.conv2d(x, w, padding="same").mean(axis=(2, 3)), ms.ops.ones((2, 4)), None) \
        + ms.ops.conv2d(x, w, b, padding="valid").sum()


def test_conv2d_padding_words_and_linear_keywords_survive_every_format() -> None:
    """padding="same" (an ints_or_str attribute) and linear's b=None: verified, saved, printed, run."""
    from msvm.bytecode.binary import decode_module, encode_module

    x, w, b = rand(2, 3, 5, 6), rand(4, 3, 3, 3), rand(4)
    check(conv_same, x, w, b, rtol=1e-4)
    module = conv_same.bytecode
    assert decode_module(encode_module(module)) == module
    assert ms.assemble(ms.disassemble(module)) == module
    assert '{padding="same"' in str(module) and '{padding="valid"' in str(module)


def test_ms_ops_python_scalar_inputs_are_weak() -> None:
    x = rand(4, 3)
    w, m, c = op_calls_with_python_scalars(x)
    assert_same(w, np.where(x > 0, x, 0.0))  # numpy 2: float32, the Python float is weak
    assert_same(m, np.maximum(x, 1))
    assert_same(c, np.clip(x, 0.5, None))


# -- indexing and slicing -----------------------------------------------------------------------------


@jit
def crop(x, ref):
    h, w = ref.shape[2], ref.shape[3]
    return x[:, :, :h, :w]


def test_slicing_with_symbols() -> None:
    check(crop, rand(2, 3, 8, 9), rand(1, 1, 5, 4))
    check(crop, rand(1, 2, 3, 3), rand(1, 1, 3, 3))


@jit
def slices(x, y):
    k = y.shape[0]
    return (x[-1], x[:-1], x[::-1], x[1:5:2], x[..., 0], x[None], x[:, None], x[-2:, ::-2],
            x[:-k], x[-k:], x[k - 1], x[k:], x[..., 1:][0])


@pytest.mark.parametrize("n", [3, 6])
def test_slicing_forms(n: int) -> None:
    check(slices, rand(n, 4), rand(2))


@jit
def tensor_index(x, idx, m):
    return x[idx], x[m], x[[0, 2]], x[:, idx]


def test_tensor_indices() -> None:
    x = rand(4, 5)
    check(tensor_index, x, np.array([3, 0, 1]), x > 0)


# -- branches -------------------------------------------------------------------------------------


@jit
def shape_branch(x):
    if x.shape[0] > 3:
        y = x[:3]
    elif x.shape[0] == 1:
        y = x * 10.0
    else:
        y = x * 2.0
    return y + 1.0


@pytest.mark.parametrize("n", [1, 2, 5])
def test_branch_merging_different_shapes(n: int) -> None:
    check(shape_branch, rand(n, 3))


@jit
def static_branch(x: Tensor["N", 3]):
    if x.ndim == 2 and x.shape[1] == 3 and not x.shape[1] > 4:
        return x * 2.0
    return x


@jit
def rank_branch(x):
    if x.ndim == 1:
        return x * 2.0
    return x.sum(axis=-1)


def test_static_conditions_fold() -> None:
    check(static_branch, rand(4, 3))
    assert "BR" not in str(static_branch.bytecode)
    check(rank_branch, rand(4))
    assert "BR" not in str(rank_branch.bytecode)
    check(rank_branch, rand(4, 2))


@jit
def boolean_conditions(x, y):
    n, m = x.shape[0], y.shape[0]
    if n > 2 and (m < 4 or not n > m):
        r = x.sum()
    else:
        r = y.sum()
    s = x.mean() if 1 < n <= 4 else y.mean()
    return r, s


@pytest.mark.parametrize("n,m", [(1, 1), (3, 3), (3, 5), (5, 5), (4, 2)])
def test_and_or_not_and_conditional_expressions(n: int, m: int) -> None:
    check(boolean_conditions, rand(n), rand(m))


@jit
def early_return(x):
    if x.shape[0] == 0:
        return x.sum(), 0
    total = x.sum()
    return total, x.shape[0]


def test_returns_in_branches() -> None:
    check(early_return, rand(0))
    check(early_return, rand(7))


# -- loops ----------------------------------------------------------------------------------------


@jit
def static_loop(x):
    for i in range(3):
        x = x * 2.0 + i
    return x


def test_loop_with_static_bound() -> None:
    check(static_loop, rand(4))
    assert "TENSOR_PHI" in str(static_loop.bytecode)


@jit
def row_sum(x):
    acc = x[0] * 0.0
    count = 0
    for i in range(x.shape[0]):
        acc = acc + x[i]
        count = count + 1
    return acc, count


@pytest.mark.parametrize("n", [1, 4])
def test_loop_with_symbolic_bound_and_carried_values(n: int) -> None:
    check(row_sum, rand(n, 3))


@jit
def grow(x, n):
    y = x
    for _ in range(n):
        y = ms.ops.concat([y, x], axis=0)
    return y


def test_loop_carried_tensor_that_grows() -> None:
    x = rand(2, 3)
    for n in (0, 1, 3):
        check(grow, x, mutable(n))
    assert len(grow.versions) == 1


@jit
def nested(x, n):
    out = x * 0.0
    for i in range(n):
        for j in range(i, n, 2):
            out = out + x * j
    for k in range(n, 0, -1):
        out = out - k
    return out


def test_nested_loops_negative_step_and_zero_trips() -> None:
    for n in (0, 1, 4):
        check(nested, rand(3), mutable(n))


WEIGHTS = [rand(3, 3), rand(3, 3)]
STACKED = np.stack(WEIGHTS)


@jit
def unrolled(x):
    for w in WEIGHTS:
        x = x @ w
    for i, w in enumerate(WEIGHTS):
        x = x + w.sum() * i
    for w in STACKED:
        x = x - w[0]
    return x


def test_loop_over_static_sequences_is_unrolled() -> None:
    check(unrolled, rand(2, 3))
    assert "BR" not in str(unrolled.bytecode)


# -- calls, captures, scalars ----------------------------------------------------------------------

SCALE = np.array([1.0, 2.0, 3.0], dtype=np.float32)


@jit
def normalise(v, eps=1e-3):
    if v.ndim == 1:
        return v / (v.sum() + eps)
    return v * 0.0


@jit
def calls_others(x):
    y = normalise(x) * SCALE
    z = normalise(x, eps=1.0) + SCALE
    return y, z


def test_inlined_jit_calls_and_captured_constants() -> None:
    check(calls_others, rand(3))
    module = calls_others.bytecode
    assert [fn.name for fn in module.functions] == ["calls_others"]  # the callee left no function behind


def test_same_captured_array_loaded_once() -> None:
    module = calls_others.bytecode
    loads = [ins for _, _, _, _, ins in module.addresses() if ins.name == "LOAD_CONST"
             and module.constants[ins["const"]].shape == (3,)]
    assert len(loads) == 1


def make_closure(bias: np.ndarray):
    @jit
    def add_bias(x):
        return x + bias
    return add_bias


def test_closure_captures() -> None:
    b = rand(4)
    check(make_closure(b), rand(2, 4))


@jit
def symbolic(x, n):
    m = symbolic_mul(n, 2)
    k = max(n, x.shape[0]) - min(n, 1)
    return x.reshape(m, -1), k, n * x.shape[0], x[: n // 2 + 1]


def test_mutable_ints_are_symbolic() -> None:
    x = rand(4, 6)
    check(symbolic, x, mutable(2))
    check(symbolic, x, mutable(4))
    assert len(symbolic.versions) == 1
    assert "SCALAR_ARG" in str(symbolic.bytecode)


@jit
def specialised(x, n, flag=True, mode="sum"):
    if flag and mode == "sum":
        return x.sum(axis=0) * n
    return x.mean(axis=0) * n


def test_plain_ints_bools_and_strings_are_specialised() -> None:
    x = rand(3, 2)
    check(specialised, x, 2)
    check(specialised, x, 3)
    check(specialised, x, 3, False)
    check(specialised, x, 3, True, "mean")
    assert len(specialised.versions) == 4
    assert "SCALAR_ARG" not in str(specialised.bytecode)


@jit
def scalar_math(x):
    n = x.shape[0]
    return n / 2 + x, float(n) * x, x * n


def test_symbolic_scalars_in_tensor_arithmetic() -> None:
    check(scalar_math, rand(3, 2))
    assert "full" in ops(scalar_math.bytecode)


@jit
def dense(x: Tensor["N", "C"], w: Tensor["D", "C"], b: Tensor["D"] = None):
    y = x @ w.T
    if b is not None:
        y = y + b
    return y


def test_optional_tensor_parameter() -> None:
    x, w, b = rand(2, 3), rand(4, 3), rand(4)
    check(dense, x, w, b)
    check(dense, x, w)
    assert "add" not in ops(dense.bytecode)


@jit
def structured(x):
    return (x,), (x.sum(), (x.shape[0], x * 2)), [x.ndim]


def test_nested_and_single_tuple_returns() -> None:
    check(structured, rand(3))
    single, nested, listed = structured(rand(2))
    assert isinstance(single, tuple) and len(single) == 1
    assert isinstance(nested[1], tuple) and nested[1][0] == 2
    assert listed == [1]


# -- versions -------------------------------------------------------------------------------------


@jit
def versioned(x):
    return x * 2


def test_dtype_and_rank_versions() -> None:
    check(versioned, rand(3))
    check(versioned, rand(3, dtype="float64"))
    check(versioned, rand(3, 2))
    check(versioned, rand(5))
    assert len(versioned.versions) == 3


@jit
def annotated_default(x: Tensor["N", "C"], y: Tensor["C"]):
    return x * y


def test_annotated_functions_compile_at_decoration() -> None:
    assert len(annotated_default.versions) == 1
    (key,) = annotated_default.versions
    assert key == (np.dtype("float32"), np.dtype("float32"))
    check(annotated_default, rand(2, 3), rand(3))
    check(annotated_default, rand(2, 3, dtype="float64"), rand(3, dtype="float64"))
    assert len(annotated_default.versions) == 2


@jit
def pinned(x: Tensor["N", 4, "float64"]):
    return x + 1


def test_pinned_dtype() -> None:
    check(pinned, rand(2, 4, dtype="float64"))
    with pytest.raises(TypeError, match=r"'x'.*float64"):
        pinned(rand(2, 4))
    assert_same(pinned([[1, 2, 3, 4]]), np.array([[2.0, 3, 4, 5]]))


def test_zero_size_and_batch_one() -> None:
    check(arith, rand(0, 3), rand(3), rand(3, 2))
    check(arith, rand(1, 3), rand(3), rand(3, 1))
    check(methods, rand(1, 8, 1))
    check(crop, rand(1, 1, 0, 4), rand(1, 1, 0, 4))


def test_lists_are_converted() -> None:
    assert_same(annotated_default([[1.0, 2.0]], [3.0, 4.0]), np.array([[3.0, 8.0]]))
    assert_same(versioned([1, 2, 3]), np.array([2, 4, 6]))


def test_keyword_arguments_and_defaults() -> None:
    x = rand(3)
    assert_same(normalise(v=x), normalise.py_func(x))
    assert_same(normalise(x, eps=2.0), normalise.py_func(x, eps=2.0))


# -- call-time errors -------------------------------------------------------------------------------


def test_wrong_argument_count() -> None:
    with pytest.raises(TypeError, match="arith"):
        arith(rand(2, 3))
    with pytest.raises(TypeError, match="unexpected"):
        versioned(rand(2), z=1)


def test_argument_that_is_not_array_like() -> None:
    with pytest.raises(TypeError, match="'x'"):
        annotated_default(object(), rand(3))
    with pytest.raises(TypeError, match="'x'"):
        versioned({"a": 1})


def test_shape_mismatch_is_the_interpreters_shape_error() -> None:
    with pytest.raises(ShapeError) as info:
        arith(rand(2, 4), rand(3), rand(3, 2))
    assert "x" in str(info.value)
    with pytest.raises(ShapeError):
        annotated_default(rand(2, 3), rand(4))


# -- stepping -------------------------------------------------------------------------------------


def test_debug_stepping_gives_the_call_result() -> None:
    x = rand(5, 3)
    execution = row_sum.debug(x)
    steps = 0
    while not execution.finished:
        execution.step()
        steps += 1
    assert steps > 10
    assert_same(execution.result, row_sum(x))
    program, name, args = row_sum.program_for(x)
    assert name == "row_sum" and len(args) == 1 and args[0] is x
    assert_same(program.function(name)(*args), row_sum(x))


# -- slices whose bounds are computed from sizes ---------------------------------------------------------


@jit
def from_before_the_start(x: Tensor["N", "C", "H", "W"]):
    h = -x.shape[2] - 3  # before the first row: numpy clamps it to 0
    return x[:, :, h:, :]


@jit
def from_far_before(x: Tensor["N", "C", "H", "W"]):
    h = x.shape[3] - x.shape[2] - 10**12  # either sign as far as the shapes tell: negative here
    return x[:, :, h:, :], x[:, :, :h, :]


def test_slice_start_before_the_axis_clamps_like_numpy() -> None:
    x = rand(1, 2, 5, 3)
    out = from_before_the_start(x)
    assert out.shape == x.shape
    np.testing.assert_array_equal(out, x)
    whole, empty = from_far_before(x)  # no spurious E-LIMIT-TENSOR from an unclamped H - h
    np.testing.assert_array_equal(whole, x)
    assert empty.shape == (1, 2, 0, 3)


# -- dtypes come from the call ---------------------------------------------------------------------------

TABLE = rand(10, 4)


@jit
def embed_ids(ids: Tensor["B", "S"]):  # the float32 guessed at decoration cannot index: no error here
    return ms.ops.embedding(ids, TABLE)


@jit
def gather_rows(ids, mask):
    return ms.ops.take(TABLE, ids, axis=0), ms.ops.embedding(ids, TABLE), TABLE[mask].sum()


def test_dtype_comes_from_the_call_not_the_decoration() -> None:
    ids = np.array([[1, 2], [3, 9]])
    np.testing.assert_array_equal(embed_ids(ids), TABLE[ids])
    np.testing.assert_array_equal(embed_ids(ids.astype(np.int32)), TABLE[ids])
    with pytest.raises(CompileError, match="indices must be int32 or int64, got float32"):
        embed_ids(ids.astype(np.float32))  # the version for float32 fails, with its message, when called


def test_unannotated_integer_functions_just_work() -> None:
    ids, mask = np.array([0, 7, 7]), TABLE > 0
    took, embedded, total = gather_rows(ids, mask)
    np.testing.assert_array_equal(took, TABLE[ids])
    np.testing.assert_array_equal(embedded, TABLE[ids])
    np.testing.assert_allclose(total, TABLE[mask].sum(), rtol=1e-6)
