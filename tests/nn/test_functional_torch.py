"""``msvm.nn.functional`` against ``torch.nn.functional``: every name called positionally and by keyword,
in torch's style, inside ``@ms.jit`` functions and eagerly, equals torch's result; and every signature
is torch's (names, order, defaults), so the two cannot drift apart.

Skipped where torch is not installed, except the signature check against the table of torch's builtins.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import msvm as ms
import msvm.nn.functional as F
from msvm.frontend.jitfunction import JitFunction
from msvm.ops.functions import FUNCTIONS
from msvm.ops.registry import InferContext, TensorType
from msvm.shapes import ShapeSpec

RNG = np.random.default_rng(25)


def randn(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


X = randn(2, 4, 6, 6)
W, B = randn(6, 4, 3, 3), randn(6)
WT, BT = randn(4, 3, 3, 3), randn(6)  # conv_transpose2d's [C_in, C_out/groups, KH, KW], 2 groups
VOL, W3 = randn(2, 4, 5, 6, 6), randn(6, 2, 3, 2, 3)
C, C2 = randn(4) + 2, randn(4)
VAR = np.abs(randn(4)) + 0.5
H, G, BE = randn(3, 5, 8), randn(8), randn(8)
LW, LB = randn(7, 8), randn(7)
IDS, TABLE = RNG.integers(0, 10, (3, 4)), randn(10, 5)
Q, K, V = randn(2, 5, 8), randn(2, 6, 8), randn(2, 6, 3)
MASK = RNG.random((5, 6)) > 0.3


# -- the calls: one positional and one keyword version of each, as a torch port writes them -------------
# (x, w, b, ... are unannotated: their dtypes come from the call)


@ms.jit
def conv2d_pos(x, w, b):
    return F.conv2d(x, w, b, 2, 1, 1, 1)


@ms.jit
def conv2d_kw(x, w, b):
    return F.conv2d(input=x, weight=w, bias=b, stride=(1, 2), padding=1, groups=1)


@ms.jit
def conv_transpose2d_pos(x, w, b):
    return F.conv_transpose2d(x, w, b, 2, 1, 1, 2, 1)


@ms.jit
def conv_transpose2d_kw(x, w, b):
    return F.conv_transpose2d(input=x, weight=w, bias=b, stride=(2, 1), padding=(0, 1), groups=2, dilation=2)


@ms.jit
def conv3d_pos(x, w, b):
    return F.conv3d(x, w, b, 2, 1, 1, 2)


@ms.jit
def conv3d_kw(x, w, b):
    return F.conv3d(input=x, weight=w, bias=b, stride=(1, 2, 1), dilation=(2, 1, 1), groups=2)


@ms.jit
def max_pool3d_pos(x):
    return F.max_pool3d(x, 3, 2, 1, 1, True, False)


@ms.jit
def max_pool3d_kw(x):
    return F.max_pool3d(input=x, kernel_size=(3, 2, 2), stride=(2, 1, 2), padding=1, return_indices=False)


@ms.jit
def avg_pool3d_pos(x):
    return F.avg_pool3d(x, 3, 2, 1, True, False, None)


@ms.jit
def avg_pool3d_kw(x):
    return F.avg_pool3d(input=x, kernel_size=2, count_include_pad=True, divisor_override=3)


@ms.jit
def linear_pos(x, w, b):
    return F.linear(x, w, b)


@ms.jit
def linear_kw(x, w, b):
    return F.linear(input=x, weight=w, bias=b)


@ms.jit
def embedding_pos(ids, table):
    return F.embedding(ids, table, None, None, 2.0, False, False)


@ms.jit
def embedding_kw(ids, table):
    return F.embedding(input=ids, weight=table, padding_idx=0, sparse=False)


@ms.jit
def sdpa_pos(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, mask, 0.0, False, scale=0.5)


@ms.jit
def sdpa_kw(q, k, v, mask):
    return F.scaled_dot_product_attention(query=q, key=k, value=v, is_causal=True, dropout_p=0.0)


@ms.jit
def batch_norm_pos(x, mean, var, w, b):
    return F.batch_norm(x, mean, var, w, b, False, 0.1, 1e-3)


@ms.jit
def batch_norm_kw(x, mean, var, w, b):
    return F.batch_norm(input=x, running_mean=mean, running_var=var, weight=w, bias=b, training=False)


@ms.jit
def layer_norm_pos(h, g, b):
    return F.layer_norm(h, (8,), g, b, 1e-5)


@ms.jit
def layer_norm_kw(h, g, b):
    return F.layer_norm(input=h, normalized_shape=h.shape[-1:], weight=g, bias=b, eps=1e-6)


@ms.jit
def group_norm_pos(x, w, b):
    return F.group_norm(x, 2, w, b, 1e-5)


@ms.jit
def group_norm_kw(x, w, b):
    return F.group_norm(input=x, num_groups=4, weight=w, bias=b)


@ms.jit
def max_pool2d_pos(x):
    return F.max_pool2d(x, 3, 2, 1, 1, True, False)


@ms.jit
def max_pool2d_kw(x):
    return F.max_pool2d(input=x, kernel_size=(3, 2), stride=(2, 1), padding=1, return_indices=False)


@ms.jit
def avg_pool2d_pos(x):
    return F.avg_pool2d(x, 3, 2, 1, True, False, None)


@ms.jit
def avg_pool2d_kw(x):
    return F.avg_pool2d(input=x, kernel_size=2, count_include_pad=True, divisor_override=3)


@ms.jit
def adaptive_avg_pool2d_pos(x):
    return F.adaptive_avg_pool2d(x, 2)


@ms.jit
def adaptive_avg_pool2d_kw(x):
    return F.adaptive_avg_pool2d(input=x, output_size=(3, 2))


@ms.jit
def relu_pos(x):
    return F.relu(x, False)


@ms.jit
def relu_kw(x):
    return F.relu(input=x, inplace=True)


@ms.jit
def sigmoid_pos(x):
    return F.sigmoid(x)


@ms.jit
def sigmoid_kw(x):
    return F.sigmoid(input=x)


@ms.jit
def tanh_pos(x):
    return F.tanh(x)


@ms.jit
def tanh_kw(x):
    return F.tanh(input=x)


@ms.jit
def silu_pos(x):
    return F.silu(x, False)


@ms.jit
def silu_kw(x):
    return F.silu(input=x, inplace=False)


@ms.jit
def gelu_pos(x):
    return F.gelu(x, "tanh")


@ms.jit
def gelu_kw(x):
    return F.gelu(input=x, approximate="none")


@ms.jit
def softmax_pos(x):
    return F.softmax(x, 1)


@ms.jit
def softmax_kw(x):
    return F.softmax(input=x, dim=-1)


@ms.jit
def log_softmax_pos(x):
    return F.log_softmax(x, 1)


@ms.jit
def log_softmax_kw(x):
    return F.log_softmax(input=x, dim=-2, dtype=None)


@ms.jit
def pad_pos(x):
    return F.pad(x, (1, 2), "constant", 0.5)


@ms.jit
def pad_kw(x):
    return F.pad(input=x, pad=(1, 1, 2, 0), mode="reflect")


@ms.jit
def flatten_pos(x):
    return F.flatten(x, 1, 2)


@ms.jit
def flatten_kw(x):
    return F.flatten(input=x, start_dim=1)


@ms.jit
def relu6_pos(x):
    return F.relu6(x * 4, False)


@ms.jit
def relu6_kw(x):
    return F.relu6(input=x * 4, inplace=False)


@ms.jit
def hardswish_pos(x):
    return F.hardswish(x * 3, False)


@ms.jit
def hardswish_kw(x):
    return F.hardswish(input=x * 3)


@ms.jit
def hardsigmoid_pos(x):
    return F.hardsigmoid(x * 3, False)


@ms.jit
def hardsigmoid_kw(x):
    return F.hardsigmoid(input=x * 3)


@ms.jit
def mish_pos(x):
    return F.mish(x * 3, False)


@ms.jit
def mish_kw(x):
    return F.mish(input=x * 3)


@ms.jit
def leaky_relu_pos(x):
    return F.leaky_relu(x, 0.2, False)


@ms.jit
def leaky_relu_kw(x):
    return F.leaky_relu(input=x, negative_slope=0.01)


@ms.jit
def elu_pos(x):
    return F.elu(x * 3, 0.5)


@ms.jit
def elu_kw(x):
    return F.elu(input=x * 3, alpha=2.0)


@ms.jit
def softplus_pos(x):
    return F.softplus(x * 8, 2, 1)


@ms.jit
def softplus_kw(x):
    return F.softplus(input=x * 8, beta=0.5, threshold=3)


@ms.jit
def normalize_pos(x):
    return F.normalize(x, 2.0, 1, 1e-12)


@ms.jit
def normalize_kw(x):
    return F.normalize(input=x, p=3, dim=-1, eps=1e-6)


@ms.jit
def dropout_pos(x):
    return F.dropout(x, 0.3, False)


@ms.jit
def dropout_kw(x):
    return F.dropout(input=x, p=0.5, training=False, inplace=False)


@ms.jit
def interpolate_pos(x):
    return F.interpolate(x, None, 2, "nearest")


@ms.jit
def interpolate_kw(x):
    return F.interpolate(input=x, size=(5, 9), mode="bilinear", align_corners=False)


@ms.jit
def transpose_pos(x):
    return F.transpose(x, 1, 2)


@ms.jit
def transpose_kw(x):
    return F.transpose(input=x, dim0=-1, dim1=0)


# name -> (msvm arguments, torch's positional call, torch's keyword call); torch's calls spell the same
# arguments as the jitted functions above
CASES: dict[str, tuple[tuple, Callable[..., Any], Callable[..., Any]]] = {
    "conv2d": ((X, W, B), lambda tf, x, w, b: tf.conv2d(x, w, b, 2, 1, 1, 1),
               lambda tf, x, w, b: tf.conv2d(input=x, weight=w, bias=b, stride=(1, 2), padding=1, groups=1)),
    "conv_transpose2d": (
        (X, WT, BT), lambda tf, x, w, b: tf.conv_transpose2d(x, w, b, 2, 1, 1, 2, 1),
        lambda tf, x, w, b: tf.conv_transpose2d(input=x, weight=w, bias=b, stride=(2, 1), padding=(0, 1),
                                                groups=2, dilation=2)),
    "conv3d": ((VOL, W3, B), lambda tf, x, w, b: tf.conv3d(x, w, b, 2, 1, 1, 2),
               lambda tf, x, w, b: tf.conv3d(input=x, weight=w, bias=b, stride=(1, 2, 1), dilation=(2, 1, 1),
                                             groups=2)),
    "max_pool3d": ((VOL,), lambda tf, x: tf.max_pool3d(x, 3, 2, 1, 1, True, False),
                   lambda tf, x: tf.max_pool3d(input=x, kernel_size=(3, 2, 2), stride=(2, 1, 2), padding=1,
                                               return_indices=False)),
    "avg_pool3d": ((VOL,), lambda tf, x: tf.avg_pool3d(x, 3, 2, 1, True, False, None),
                   lambda tf, x: tf.avg_pool3d(input=x, kernel_size=2, count_include_pad=True,
                                               divisor_override=3)),
    "linear": ((H, LW, LB), lambda tf, x, w, b: tf.linear(x, w, b),
               lambda tf, x, w, b: tf.linear(input=x, weight=w, bias=b)),
    "embedding": ((IDS, TABLE), lambda tf, i, t: tf.embedding(i, t, None, None, 2.0, False, False),
                  lambda tf, i, t: tf.embedding(input=i, weight=t, padding_idx=0, sparse=False)),
    "scaled_dot_product_attention": (
        (Q, K, V, MASK),
        lambda tf, q, k, v, m: tf.scaled_dot_product_attention(q, k, v, m, 0.0, False, scale=0.5),
        lambda tf, q, k, v, m: tf.scaled_dot_product_attention(query=q, key=k, value=v, is_causal=True,
                                                               dropout_p=0.0)),
    "batch_norm": ((X, C2, VAR, C, C2), lambda tf, *a: tf.batch_norm(*a, False, 0.1, 1e-3),
                   lambda tf, x, m, v, w, b: tf.batch_norm(input=x, running_mean=m, running_var=v, weight=w,
                                                           bias=b, training=False)),
    "layer_norm": ((H, G, BE), lambda tf, h, g, b: tf.layer_norm(h, (8,), g, b, 1e-5),
                   lambda tf, h, g, b: tf.layer_norm(input=h, normalized_shape=h.shape[-1:], weight=g, bias=b,
                                                     eps=1e-6)),
    "group_norm": ((X, C, C2), lambda tf, x, w, b: tf.group_norm(x, 2, w, b, 1e-5),
                   lambda tf, x, w, b: tf.group_norm(input=x, num_groups=4, weight=w, bias=b)),
    "max_pool2d": ((X,), lambda tf, x: tf.max_pool2d(x, 3, 2, 1, 1, True, False),
                   lambda tf, x: tf.max_pool2d(input=x, kernel_size=(3, 2), stride=(2, 1), padding=1,
                                               return_indices=False)),
    "avg_pool2d": ((X,), lambda tf, x: tf.avg_pool2d(x, 3, 2, 1, True, False, None),
                   lambda tf, x: tf.avg_pool2d(input=x, kernel_size=2, count_include_pad=True,
                                               divisor_override=3)),
    "adaptive_avg_pool2d": ((X,), lambda tf, x: tf.adaptive_avg_pool2d(x, 2),
                            lambda tf, x: tf.adaptive_avg_pool2d(input=x, output_size=(3, 2))),
    "relu": ((X,), lambda tf, x: tf.relu(x, False), lambda tf, x: tf.relu(input=x, inplace=False)),
    "sigmoid": ((X,), lambda tf, x: tf.sigmoid(x), lambda tf, x: tf.sigmoid(input=x)),
    "tanh": ((X,), lambda tf, x: tf.tanh(x), lambda tf, x: tf.tanh(input=x)),
    "silu": ((X,), lambda tf, x: tf.silu(x, False), lambda tf, x: tf.silu(input=x, inplace=False)),
    "gelu": ((X,), lambda tf, x: tf.gelu(x, approximate="tanh"),
             lambda tf, x: tf.gelu(input=x, approximate="none")),
    "softmax": ((X,), lambda tf, x: tf.softmax(x, 1), lambda tf, x: tf.softmax(input=x, dim=-1)),
    "log_softmax": ((X,), lambda tf, x: tf.log_softmax(x, 1), lambda tf, x: tf.log_softmax(input=x, dim=-2)),
    "pad": ((X,), lambda tf, x: tf.pad(x, (1, 2), "constant", 0.5),
            lambda tf, x: tf.pad(input=x, pad=(1, 1, 2, 0), mode="reflect")),
    "flatten": ((X,), lambda tf, x: tf.flatten(x, 1, 2), lambda tf, x: tf.flatten(input=x, start_dim=1)),
    "relu6": ((X,), lambda tf, x: tf.relu6(x * 4, False), lambda tf, x: tf.relu6(input=x * 4, inplace=False)),
    "hardswish": ((X,), lambda tf, x: tf.hardswish(x * 3, False), lambda tf, x: tf.hardswish(input=x * 3)),
    "hardsigmoid": ((X,), lambda tf, x: tf.hardsigmoid(x * 3, False),
                    lambda tf, x: tf.hardsigmoid(input=x * 3)),
    "mish": ((X,), lambda tf, x: tf.mish(x * 3, False), lambda tf, x: tf.mish(input=x * 3)),
    "leaky_relu": ((X,), lambda tf, x: tf.leaky_relu(x, 0.2, False),
                   lambda tf, x: tf.leaky_relu(input=x, negative_slope=0.01)),
    "elu": ((X,), lambda tf, x: tf.elu(x * 3, 0.5), lambda tf, x: tf.elu(input=x * 3, alpha=2.0)),
    "softplus": ((X,), lambda tf, x: tf.softplus(x * 8, 2, 1),
                 lambda tf, x: tf.softplus(x * 8, beta=0.5, threshold=3)),
    "normalize": ((X,), lambda tf, x: tf.normalize(x, 2.0, 1, 1e-12),
                  lambda tf, x: tf.normalize(x, p=3, dim=-1, eps=1e-6)),
    "dropout": ((X,), lambda tf, x: tf.dropout(x, 0.3, False),
                lambda tf, x: tf.dropout(input=x, p=0.5, training=False, inplace=False)),
    "interpolate": ((X,), lambda tf, x: tf.interpolate(x, None, 2, "nearest"),
                    lambda tf, x: tf.interpolate(input=x, size=(5, 9), mode="bilinear", align_corners=False)),
    "transpose": ((X,), lambda tf, x: tf.transpose(x, 1, 2),
                  lambda tf, x: tf.transpose(x, dim0=-1, dim1=0)),
}


def _jitted(name: str, style: str) -> Any:
    return globals()[f"{'sdpa' if name == 'scaled_dot_product_attention' else name}_{style}"]


def test_every_name_has_its_torch_style_calls() -> None:
    assert set(CASES) == set(F.__all__)
    for name in F.__all__:
        assert all(isinstance(_jitted(name, style), JitFunction) for style in ("pos", "kw"))


def _torch_functional(torch_: Any) -> Any:
    """torch.nn.functional, with torch's own flatten and transpose (which F has beside them)."""
    return SimpleNamespace(**vars(torch_.nn.functional), flatten=torch_.flatten, transpose=torch_.transpose)


@pytest.mark.parametrize("style", ["pos", "kw"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_jitted_torch_style_call_equals_torch(name: str, style: str) -> None:
    torch_ = pytest.importorskip("torch")
    args, positional, keyword = CASES[name]
    fn = _jitted(name, style)
    call = positional if style == "pos" else keyword
    expected = call(_torch_functional(torch_), *[torch_.from_numpy(a) for a in args]).numpy()
    for out in (fn(*args), fn.py_func(*args)):  # compiled, and eagerly on numpy arrays
        assert (out.shape, out.dtype) == (expected.shape, expected.dtype)
        np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5)


# -- signatures ------------------------------------------------------------------------------------------

# torch's C++ builtins have no Python signature: their documented one, checked against torch's docstring
TORCH_BUILTINS = {
    "conv2d": "(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1)",
    "conv_transpose2d": "(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, "
                        "dilation=1)",
    "conv3d": "(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1)",
    "linear": "(input, weight, bias=None)",
    "avg_pool3d": "(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, "
                  "divisor_override=None)",
    "max_pool3d": "(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, "
                  "return_indices=False)",
    "avg_pool2d": "(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, "
                  "divisor_override=None)",
    "max_pool2d": "(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, "
                  "return_indices=False)",
    # its docstring leaves out the `*`, which its text says ("scale can only be specified as a keyword")
    "scaled_dot_product_attention": "(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, "
                                    "scale=None, enable_gqa=False)",
    "gelu": "(input, approximate='none')",
    "softplus": "(input, beta=1, threshold=20)",
    "flatten": "(input, start_dim=0, end_dim=-1)",  # torch.flatten
    "transpose": "(input, dim0, dim1)",  # torch.transpose
}
# where msvm's default differs on purpose, and why
DELIBERATE = {
    ("softmax", "dim"): -1,  # torch's None is a deprecated implicit choice (dim 0 or 1 by rank)
    ("log_softmax", "dim"): -1,
    ("pad", "value"): 0.0,  # torch's None means 0 for mode='constant'
    ("dropout", "training"): False,  # inference only: torch's functional default True drops at random
}


def _parsed(text: str) -> list[tuple[str, Any, bool]]:
    """(name, default, keyword-only) of each parameter of a signature's text (``Parameter.empty``: none)."""
    args = ast.parse(f"def f{text}: pass").body[0].args
    names = [a.arg for a in args.args]
    defaults = [inspect.Parameter.empty] * (len(names) - len(args.defaults)) + args.defaults
    params = [(name, d, False) for name, d in zip(names, defaults)]
    params += [(a.arg, d, True) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    return [(name, d if d is inspect.Parameter.empty else ast.literal_eval(d), kw) for name, d, kw in params]


def _params(signature: inspect.Signature) -> list[tuple[str, Any, bool]]:
    return [(p.name, p.default, p.kind is p.KEYWORD_ONLY) for p in signature.parameters.values()]


def _torch_params(name: str) -> list[tuple[str, Any, bool]]:
    if name in TORCH_BUILTINS:
        return _parsed(TORCH_BUILTINS[name])
    torch_ = pytest.importorskip("torch")
    return _params(inspect.signature(getattr(torch_.nn.functional, name)))


@pytest.mark.parametrize("name", F.__all__)
def test_signature_is_torchs(name: str) -> None:
    ours, theirs = _params(inspect.signature(getattr(F, name))), _torch_params(name)
    assert [(n, kw) for n, _, kw in ours] == [(n, kw) for n, _, kw in theirs]
    for (param, default, _), (_, torch_default, _) in zip(ours, theirs):
        assert default == DELIBERATE.get((name, param), torch_default), (name, param, default, torch_default)


def test_builtin_table_is_torchs_documented_signature() -> None:
    torch_ = pytest.importorskip("torch")
    for name, text in TORCH_BUILTINS.items():
        fn = getattr(torch_.nn.functional, name, None) or getattr(torch_, name)
        doc = fn.__doc__.strip()
        documented = " ".join(doc[doc.index("("):doc.index(")") + 1].split())
        assert [p[:2] for p in _parsed(documented)] == [p[:2] for p in _parsed(text)], name


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_a_functions_shape_function_is_its_expansions(name: str) -> None:
    """A function's ``infer`` runs its body over types: the eager result's shape and dtype, symbolically."""
    fn = FUNCTIONS[name]
    args, _, _ = CASES[name]
    attrs = {"transpose": {"dim0": 1, "dim1": 2}, "interpolate": {"scale_factor": (2.0, 2.0)}}.get(name, {})
    out = fn(*args, **attrs)
    spec = ShapeSpec(["N", *args[0].shape[1:]])
    inferred = fn.infer(InferContext(), TensorType(spec, args[0].dtype.name), **fn.check_attrs(attrs))
    assert inferred.dtype == out.dtype.name
    assert inferred.shape.evaluate({"N": args[0].shape[0]}) == out.shape
