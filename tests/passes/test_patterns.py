"""The pattern rewrites: each spelling is replaced by its fused op and gives what it computed before;
look-alikes are left alone; matches are recorded and published; ``rewrite=False`` turns them off."""

# ms.Tensor["N", 3] reads to linters as string forward references: F821 is noise here. No
# `from __future__ import annotations` either: with it, ruff's UP037 "fix" unquotes the symbols.
# ruff: noqa: F821

import math

import numpy as np
import pytest

import msvm as ms
from msvm.interpreter import Program

RNG = np.random.default_rng(28)


def programs(fn, *args) -> tuple[Program, Program]:
    """(rewritten, as written) interpreted programs of the version ``args`` call."""
    module = fn._version_for(args, {})[0].module  # the version's module as written
    return Program(module, {"jit": False}), Program(module, {"jit": False, "rewrite": False})


def check(fn, *args, pattern: str, op: str, count: int = 1) -> Program:
    """``fn`` rewritten by ``pattern`` into ``op`` agrees with it as written; the rewritten program."""
    fn(*args)  # compiles the version for these dtypes
    rewritten, written = programs(fn, *args)
    assert [r.pattern for r in rewritten.rewrites] == [pattern] * count
    assert all(r.op == op for r in rewritten.rewrites)
    calls = [ins["op"] for _, _, _, _, ins in rewritten.module.addresses() if ins.name == "OP_CALL"]
    assert op in calls
    name = rewritten.function_names[0]
    got, want = rewritten.function(name)(*args), written.function(name)(*args)
    tol = 1e-4 if args[0].dtype == np.float32 else 1e-10
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    return rewritten


def untouched(fn, *args) -> None:
    fn(*args)
    rewritten, _ = programs(fn, *args)
    assert rewritten.rewrites == []


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# -- attention -------------------------------------------------------------------------------------------


@ms.jit
def plain_attention(q: ms.Tensor["B", "H", "L", "D"], k: ms.Tensor["B", "H", "S", "D"],
                    v: ms.Tensor["B", "H", "S", "E"]):
    return ms.ops.matmul(ms.ops.softmax(ms.ops.matmul(q, k.transpose(0, 1, 3, 2)) * 0.3, -1), v)


@ms.jit
def divided_permuted(q: ms.Tensor["H", "L", "D"], k: ms.Tensor["H", "S", "D"], v: ms.Tensor["H", "S", "D"]):
    s = ms.ops.matmul(q, ms.ops.permute(k, (0, 2, 1))) / 8.0
    return ms.ops.matmul(ms.ops.softmax(s, axis=2), v)


@ms.jit
def additive_mask(q: ms.Tensor["H", "L", "D"], k: ms.Tensor["H", "S", "D"], v: ms.Tensor["H", "S", "D"],
                  m: ms.Tensor["L", "S"]):
    return ms.ops.matmul(ms.ops.softmax(m + ms.ops.matmul(q, k.transpose(0, 2, 1)) * 0.25, -1), v)


@ms.jit
def bool_mask(q: ms.Tensor["H", "L", "D"], k: ms.Tensor["H", "S", "D"], v: ms.Tensor["H", "S", "D"],
              m: ms.Tensor["L", "S", "bool"]):
    s = ms.ops.where(m, ms.ops.matmul(q, k.transpose(0, 2, 1)) * 0.25, -math.inf)
    return ms.ops.matmul(ms.ops.softmax(s, -1), v)


@ms.jit
def given_kt(q: ms.Tensor["H", "L", "D"], kt: ms.Tensor["H", "D", "S"], v: ms.Tensor["H", "S", "D"]):
    return ms.ops.matmul(ms.ops.softmax(ms.ops.matmul(q * 0.5, kt), -1), v)


def causal(length: int, additive: bool):
    keep = np.tril(np.ones((length, length), dtype=bool))
    mask = np.where(keep, 0.0, -np.inf).astype(np.float32)

    @ms.jit
    def causal_attention(q: ms.Tensor["H", length, "D"], k: ms.Tensor["H", length, "D"],
                         v: ms.Tensor["H", length, "D"]):
        s = ms.ops.matmul(q, k.transpose(0, 2, 1)) * 0.125
        s = s + mask if additive else ms.ops.where(keep, s, -math.inf)
        return ms.ops.matmul(ms.ops.softmax(s, -1), v)

    return causal_attention


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("heads", "length", "source"), [(1, 1, 1), (3, 7, 5), (16, 40, 300), (4, 300, 9)])
def test_attention_spellings_agree_with_the_fused_op(dtype, heads, length, source):
    q, k = rand(2, heads, length, 8, dtype=dtype), rand(2, heads, source, 8, dtype=dtype)
    v = rand(2, heads, source, 6, dtype=dtype)
    check(plain_attention, q, k, v, pattern="attention", op="scaled_dot_product_attention")
    q, k, v = (rand(heads, n, 8, dtype=dtype) for n in (length, source, source))
    check(divided_permuted, q, k, v, pattern="attention", op="scaled_dot_product_attention")
    mask = rand(length, source, dtype=dtype)
    check(additive_mask, q, k, v, mask, pattern="attention", op="scaled_dot_product_attention")
    keep = RNG.random((length, source)) < 0.7
    keep[:, 0] = True  # no row wholly masked (that row reads NaN as written, zeros fused)
    check(bool_mask, q, k, v, keep, pattern="attention", op="scaled_dot_product_attention")
    check(given_kt, q, np.ascontiguousarray(k.transpose(0, 2, 1)), v, pattern="attention",
          op="scaled_dot_product_attention")


@pytest.mark.parametrize("additive", [False, True])
@pytest.mark.parametrize("length", [1, 5, 64])
def test_a_constant_causal_mask_becomes_is_causal(length, additive):
    fn = causal(length, additive)
    q, k, v = (rand(4, length, 16) for _ in range(3))
    rewritten = check(fn, q, k, v, pattern="attention", op="scaled_dot_product_attention")
    (fused,) = [ins for _, _, _, _, ins in rewritten.module.addresses()
                if ins.name == "OP_CALL" and ins["op"] == "scaled_dot_product_attention"]
    assert fused["attrs"]["is_causal"] is True and len(fused["srcs"]) == 3


@ms.jit
def softmax_wrong_axis(q: ms.Tensor["H", "L", "D"], k: ms.Tensor["H", "L", "D"], v: ms.Tensor["H", "L", "D"]):
    return ms.ops.matmul(ms.ops.softmax(ms.ops.matmul(q, k.transpose(0, 2, 1)) * 0.3, 1), v)


@ms.jit
def scale_after_softmax(q: ms.Tensor["H", "L", "D"], k: ms.Tensor["H", "L", "D"],
                        v: ms.Tensor["H", "L", "D"]):
    return ms.ops.matmul(ms.ops.softmax(ms.ops.matmul(q, k.transpose(0, 2, 1)), -1) * 0.3, v)


@ms.jit
def scores_used_twice(q: ms.Tensor["H", "L", "D"], k: ms.Tensor["H", "L", "D"], v: ms.Tensor["H", "L", "D"]):
    s = ms.ops.matmul(q, k.transpose(0, 2, 1)) * 0.3
    return ms.ops.matmul(ms.ops.softmax(s, -1), v), s


@ms.jit
def finite_fill(q: ms.Tensor["H", "L", "D"], k: ms.Tensor["H", "L", "D"], v: ms.Tensor["H", "L", "D"],
                m: ms.Tensor["L", "L", "bool"]):
    s = ms.ops.where(m, ms.ops.matmul(q, k.transpose(0, 2, 1)), -1e9)
    return ms.ops.matmul(ms.ops.softmax(s, -1), v)


@pytest.mark.parametrize("fn", [softmax_wrong_axis, scale_after_softmax, scores_used_twice])
def test_attention_look_alikes_are_left_alone(fn):
    untouched(fn, *(rand(2, 6, 4) for _ in range(3)))


def test_a_finite_masked_fill_is_not_taken_for_a_bool_mask():
    untouched(finite_fill, *(rand(2, 6, 4) for _ in range(3)), RNG.random((6, 6)) < 0.5)


# -- the W3 encoder as people write it -------------------------------------------------------------------


def plain_encoder():
    from bench.attention import make_plain_encoder
    from bench.models import encoder_params

    return make_plain_encoder(encoder_params())


def test_the_plain_w3_encoder_runs_the_fused_attention_interpreted_and_jitted():
    x = rand(37, 256)
    fn = plain_encoder()
    rewritten = check(fn, x, pattern="attention", op="scaled_dot_product_attention")
    want = Program(rewritten.module, {"jit": False}).function(rewritten.function_names[0])(x)
    assert any(e["kind"] == "rewrite" and e["pattern"] == "attention" and e["function"] == fn.__name__
               for e in ms.vm.jit_monitor().events())
    jitted = fn.program_for(x)[0]
    assert [r.pattern for r in jitted.rewrites] == ["attention"]
    for _ in range(5):
        fn(x)
    assert ms.vm.wait_for_compiles(120)
    assert any(e["function"] == fn.__name__ and e["status"] == "compiled" for e in ms.vm.jit_info())
    np.testing.assert_allclose(fn(x), want, rtol=1e-4, atol=1e-4)


# -- silu, tanh-GELU, layer_norm --------------------------------------------------------------------------


@ms.jit
def swish(x: ms.Tensor["N", "C"]):
    return ms.ops.sigmoid(x) * x


@ms.jit
def tanh_gelu(x: ms.Tensor["N", "C"]):
    return 0.5 * x * (1 + ms.ops.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))


@ms.jit
def tanh_gelu_pow(x: ms.Tensor["N", "C"]):
    return x * (1.0 + ms.ops.tanh(0.7978845608 * (x + 0.044715 * x**3))) * 0.5


@ms.jit
def layer_norm_affine(x: ms.Tensor["N", 48], w: ms.Tensor[48], b: ms.Tensor[48]):
    d = x - ms.ops.mean(x, -1, keepdims=True)
    return d / ms.ops.sqrt(ms.ops.mean(d * d, -1, keepdims=True) + 1e-5) * w + b


@ms.jit
def layer_norm_rsqrt(x: ms.Tensor["B", "N", 48]):
    d = x - ms.ops.mean(x, axis=(2,), keepdims=True)
    return ms.ops.rsqrt(ms.ops.mean(d**2, -1, keepdims=True) + 1e-6) * d


def constant_affine_norm():
    w, b = rand(48), rand(48)

    @ms.jit
    def layer_norm_constant_affine(x: ms.Tensor["N", 48]):
        d = x - ms.ops.mean(x, -1, keepdims=True)
        return w * (d / ms.ops.sqrt(ms.ops.mean(d * d, -1, keepdims=True) + 1e-5)) + b

    return layer_norm_constant_affine


def test_a_constant_weight_and_bias_fold_into_layer_norm():
    check(constant_affine_norm(), rand(7, 48), pattern="layer_norm", op="layer_norm")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [1, 9, 300])
def test_elementwise_spellings_agree_with_their_ops(dtype, rows):
    x = rand(rows, 48, dtype=dtype) * 3
    check(swish, x, pattern="silu", op="silu")
    check(tanh_gelu, x, pattern="gelu_tanh", op="gelu")
    check(tanh_gelu_pow, x, pattern="gelu_tanh", op="gelu")
    w, b = rand(48, dtype=dtype), rand(48, dtype=dtype)
    rewritten = check(layer_norm_affine, x, w, b, pattern="layer_norm", op="layer_norm")
    (fused,) = [ins for _, _, _, _, ins in rewritten.module.addresses() if ins.name == "OP_CALL"]
    assert len(fused["srcs"]) == 3  # the weight and the bias folded in
    check(layer_norm_rsqrt, rand(2, rows, 48, dtype=dtype), pattern="layer_norm", op="layer_norm")


@ms.jit
def sigmoid_of_another(x: ms.Tensor["N", "C"], y: ms.Tensor["N", "C"]):
    return x * ms.ops.sigmoid(y)


@ms.jit
def norm_over_rows(x: ms.Tensor["N", 48]):
    d = x - ms.ops.mean(x, 0, keepdims=True)
    return d / ms.ops.sqrt(ms.ops.mean(d * d, 0, keepdims=True) + 1e-5)


@ms.jit
def gelu_wrong_constant(x: ms.Tensor["N", "C"]):
    return 0.5 * x * (1 + ms.ops.tanh(0.7 * (x + 0.044715 * x * x * x)))


@pytest.mark.parametrize("fn", [norm_over_rows, gelu_wrong_constant])
def test_elementwise_look_alikes_are_left_alone(fn):
    untouched(fn, rand(5, 48))


def test_silu_needs_the_same_operand_twice():
    untouched(sigmoid_of_another, rand(5, 4), rand(5, 4))


# -- the switch --------------------------------------------------------------------------------------------


def test_rewrite_false_runs_the_bytecode_as_written():
    @ms.jit(rewrite=False)
    def as_written(x: ms.Tensor["N", "C"]):
        return x * ms.ops.sigmoid(x)

    x = rand(3, 4)
    program = as_written.program_for(x)[0]
    assert program.rewrites == [] and program.module is as_written.bytecode
    np.testing.assert_allclose(as_written(x), x / (1 + np.exp(-x)), rtol=1e-6)


def test_rewrite_option_must_be_a_bool():
    with pytest.raises(TypeError, match="rewrite must be True or False"):
        ms.jit(rewrite="no")
