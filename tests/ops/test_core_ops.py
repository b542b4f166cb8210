"""Core ops: every op against numpy, and every shape function against its own kernel.

The table ``CASES`` holds example calls for every registered op (a test fails when an op has none).
Each case is run eagerly and checked against an independent expectation, then the op's shape
function is evaluated on input shapes built four ways — constant, symbolic with size-1 dims kept
constant, fully symbolic, and with dim attributes turned into symbols — and must give exactly the
kernel's output shape and dtype whenever its run-time guards hold.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import msvm.ops as ops
from msvm.ops import REGISTRY, InferContext, OpDef, OpTypeError, TensorType, registry
from msvm.ops.layout import SLICE_BEGIN, SLICE_END
from msvm.ops.registry import Guard
from msvm.shapes import Dim, ShapeSpec, parse_shape

RNG = np.random.default_rng(1234)
FLOATS = ("float32", "float64")
INTS = ("int32", "int64")
ALL_DTYPES = ("float16", "float32", "float64", "int32", "int64", "bool")
TRAIT_NAMES = {
    "elementwise",
    "unary",
    "binary",
    "ternary",
    "comparison",
    "reduction",
    "layout",
    "creation",
    "linalg",
    "data_dependent",
    "multi_output",
    "nn",
}


def data(shape: Sequence[int], dtype: str, kind: str = "any") -> np.ndarray:
    """Test data of a dtype; kind 'pos' keeps values > 0 (log, sqrt), 'small' keeps |x| <= 3."""
    shape = tuple(shape)
    if dtype == "bool":
        return RNG.random(shape) < 0.5 if kind != "pos" else np.ones(shape, dtype=bool)
    if np.dtype(dtype).kind == "i":
        low, high = (1, 6) if kind == "pos" else (-4, 5)
        return RNG.integers(low, high, size=shape).astype(dtype)
    x = RNG.standard_normal(shape) * 2
    if kind == "pos":
        x = np.abs(x) + 0.25
    return x.astype(dtype)


@dataclass
class Case:
    op: str
    inputs: list[np.ndarray]
    attrs: dict[str, Any] = field(default_factory=dict)
    expect: Callable[..., Any] | None = None  # independent reference: (*inputs) -> array(s)
    check_dtype: bool = True  # whether expect's dtype is authoritative
    rtol: float | None = None

    @property
    def id(self) -> str:
        shapes = ",".join(f"{x.dtype}{list(x.shape)}" for x in self.inputs)
        attrs = ",".join(f"{k}={v}" for k, v in self.attrs.items())
        return f"{self.op}({shapes};{attrs})"


CASES: list[Case] = []


def case(
    op: str,
    inputs: Sequence[np.ndarray],
    expect: Callable[..., Any] | None = None,
    check_dtype: bool = True,
    rtol: float | None = None,
    **attrs: Any,
) -> None:
    CASES.append(Case(op, list(inputs), attrs, expect, check_dtype, rtol))


def like_exp(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """Reference computed in float64, returned in the dtype numpy's float math gives the input."""
    return lambda x: np.asarray(fn(x.astype(np.float64))).astype(np.exp(np.zeros(1, x.dtype)).dtype)


def ref_sigmoid(x: np.ndarray) -> np.ndarray:
    return np.array([1 / (1 + math.exp(-v)) if v > -700 else 0.0 for v in x.ravel()]).reshape(x.shape)


def ref_gelu(x: np.ndarray) -> np.ndarray:
    return np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.ravel()]).reshape(x.shape)


def ref_gelu_tanh(x: np.ndarray) -> np.ndarray:
    c = math.sqrt(2 / math.pi)
    return np.array([0.5 * v * (1 + math.tanh(c * (v + 0.044715 * v**3))) for v in x.ravel()]).reshape(
        x.shape
    )


UNARY_SHAPES = [(2, 3), (1, 4), (0, 3), (), (3, 1, 2)]

# op -> (reference, input kind, dtypes)
UNARY_REFS: dict[str, tuple[Callable[[np.ndarray], np.ndarray], str, Sequence[str]]] = {
    "neg": (np.negative, "any", ("float32", "float64", "int32", "int64", "float16")),
    "abs": (np.abs, "any", ("float32", "float64", "int32", "int64")),
    "exp": (np.exp, "small", ALL_DTYPES),
    "log": (np.log, "pos", ALL_DTYPES),
    "sqrt": (np.sqrt, "pos", ALL_DTYPES),
    "tanh": (np.tanh, "any", ALL_DTYPES),
    "sin": (np.sin, "any", ALL_DTYPES),
    "cos": (np.cos, "any", ALL_DTYPES),
    "rsqrt": (like_exp(lambda x: 1 / np.sqrt(x)), "pos", ALL_DTYPES),
    "sigmoid": (like_exp(ref_sigmoid), "any", ALL_DTYPES),
    "silu": (like_exp(lambda x: x * ref_sigmoid(x)), "any", ALL_DTYPES),
    "relu": (lambda x: np.where(x > 0, x, np.zeros_like(x)), "any", ("float32", "float64", "int32", "int64")),
    "gelu": (like_exp(ref_gelu), "any", ALL_DTYPES),
    "erf": (like_exp(np.vectorize(math.erf, otypes=[float])), "any", ALL_DTYPES),
}

for _op, (_ref, _kind, _dtypes) in UNARY_REFS.items():
    for _dtype in _dtypes:
        for _shape in UNARY_SHAPES:
            case(_op, [data(_shape, _dtype, _kind)], _ref)
for _dtype in ("float32", "float64", "int64"):
    case("gelu", [data((3, 4), _dtype)], like_exp(ref_gelu_tanh), approximate="tanh")

for _dtype in ALL_DTYPES:
    for _lo, _hi in ((-0.5, 0.5), (None, 1.0), (0.0, None), (None, None)):
        case(
            "clamp",
            [data((3, 4), _dtype)],
            lambda x, lo=_lo, hi=_hi: x.copy() if lo is None and hi is None else np.clip(x, lo, hi),
            min=_lo,
            max=_hi,
        )
case("clamp", [data((0, 2), "float32")], lambda x: np.clip(x, 0.0, 1.0), min=0.0, max=1.0)
case("clamp", [data((), "float64")], lambda x: np.clip(x, 0.0, 1.0), min=0.0, max=1.0)

for _src in ALL_DTYPES:
    for _dst in ALL_DTYPES:
        case("cast", [data((2, 3), _src)], lambda x, d=_dst: x.astype(d), dtype=_dst)
case("cast", [data((), "float32")], lambda x: x.astype("int64"), dtype="int64")
case("cast", [data((0, 4), "int32")], lambda x: x.astype("float64"), dtype=np.float64)

BINARY_SHAPES = [
    ((2, 3), (2, 3)),
    ((2, 3), (3,)),
    ((2, 1, 3), (4, 1)),
    ((0, 3), (1, 3)),
    ((), (2,)),
    ((1,), (1,)),
    ((5,), ()),
]
BINARY_DTYPES = [
    ("float32", "float32"),
    ("float64", "float32"),
    ("int32", "int64"),
    ("int32", "float32"),
    ("int64", "float64"),
    ("bool", "bool"),
    ("bool", "int32"),
    ("int64", "int64"),
]
BINARY_REFS: dict[str, Callable[..., np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.true_divide,
    "pow": np.power,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "greater": np.greater,
    "less": np.less,
    "equal": np.equal,
    "greater_equal": np.greater_equal,
    "less_equal": np.less_equal,
    "not_equal": np.not_equal,
}

for _op, _ref in BINARY_REFS.items():
    for _da, _db in BINARY_DTYPES:
        if _op == "sub" and _da == _db == "bool":
            continue  # numpy has no bool subtraction; the DTYPE error is tested below
        for _sa, _sb in BINARY_SHAPES:
            a = data(_sa, _da, "pos" if _op in ("div", "pow") else "any")
            b = data(_sb, _db, "pos" if _op in ("div", "pow") else "any")
            if _op == "pow":
                b = np.minimum(b, 3).astype(_db)
            case(_op, [a, b], _ref)
case("equal", [np.array([1.0, np.nan]), np.array([1.0, np.nan])], np.equal)
case("maximum", [np.array([1.0, np.nan]), np.array([np.nan, 2.0])], np.maximum)

for _sc, _sa, _sb in [
    ((2, 3), (2, 3), (2, 3)),
    ((2, 1), (3,), ()),
    ((), (4,), (2, 1)),
    ((0, 3), (3,), (1, 3)),
    ((1,), (1,), (1,)),
]:
    for _da, _db in (("float32", "float32"), ("int32", "float64"), ("bool", "bool"), ("int64", "int32")):
        case("where", [data(_sc, "bool"), data(_sa, _da), data(_sb, _db)], np.where)
case("where", [data((2, 3), "int64"), data((2, 3), "float32"), data((3,), "float32")], np.where)

REDUCTION_REFS = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod}
for _op, _ref in REDUCTION_REFS.items():
    for _dtype in ALL_DTYPES:
        for _shape, _axis in [
            ((2, 3, 4), None),
            ((2, 3, 4), 0),
            ((2, 3, 4), -1),
            ((2, 3, 4), (0, 2)),
            ((2, 3, 4), ()),
            ((1, 3, 1), (0, -1)),
            ((0, 3), 1),
            ((5,), 0),
            ((), None),
        ]:
            for _keep in (False, True):
                case(
                    _op,
                    [data(_shape, _dtype)],
                    lambda x, f=_ref, ax=_axis, k=_keep: f(x, axis=ax, keepdims=k),
                    axis=_axis,
                    keepdims=_keep,
                )
for _dtype in ALL_DTYPES:
    for _shape, _axis in [((2, 3, 4), None), ((2, 3, 4), 1), ((2, 3, 4), -1), ((1, 5), 0), ((7,), None)]:
        for _keep in (False, True):
            case(
                "argmax",
                [data(_shape, _dtype)],
                lambda x, ax=_axis, k=_keep: np.argmax(x, axis=ax, keepdims=k),
                axis=_axis,
                keepdims=_keep,
            )
case("argmax", [np.array([1.0, 3.0, 3.0, 0.0])], lambda x: np.array(1))


def ref_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


for _dtype in ("float32", "float64", "int32", "int64", "bool", "float16"):
    for _shape, _axis in [((2, 5), -1), ((2, 5), 0), ((3, 1, 4), 1), ((1, 6), -1), ((0, 4), -1), ((4,), 0)]:
        ref = like_exp(lambda x, ax=_axis: ref_softmax(x, ax))
        case("softmax", [data(_shape, _dtype)], lambda x, r=ref: r(x), axis=_axis)
        case(
            "log_softmax",
            [data(_shape, _dtype)],
            lambda x, ax=_axis: like_exp(lambda y: np.log(ref_softmax(y, ax)))(x),
            axis=_axis,
        )
case("softmax", [data((3, 4), "float32")], lambda x: ref_softmax(x, -1).astype(np.float32))

MATMUL_SHAPES = [
    ((3,), (3,)),
    ((3,), (3, 4)),
    ((2, 3), (3,)),
    ((2, 3), (3, 4)),
    ((5, 2, 3), (3, 4)),
    ((5, 2, 3), (1, 3, 4)),
    ((1, 2, 3), (5, 3, 4)),
    ((0, 3), (3, 2)),
    ((2, 0), (0, 2)),
    ((2, 1, 2, 3), (3, 3, 2)),
    ((1, 1), (1, 1)),
    ((4,), (2, 4, 3)),
]
for _sa, _sb in MATMUL_SHAPES:
    for _da, _db in (
        ("float32", "float32"),
        ("float64", "float64"),
        ("int64", "int64"),
        ("float32", "float64"),
        ("int32", "float32"),
        ("bool", "bool"),
    ):
        case("matmul", [data(_sa, _da), data(_sb, _db)], np.matmul, rtol=1e-5)

for _sx, _sw, _sb in [
    ((4, 3), (5, 3), (5,)),
    ((4, 3), (5, 3), None),
    ((3,), (2, 3), (2,)),
    ((2, 4, 3), (5, 3), (5,)),
    ((4, 3), (5, 3), (1,)),
    ((0, 3), (2, 3), (2,)),
    ((1, 3), (1, 3), ()),
    ((2, 3), (4, 3), None),
]:
    for _dt in ("float32", "float64", "int64"):
        xs = [data(_sx, _dt), data(_sw, _dt)] + ([] if _sb is None else [data(_sb, _dt)])
        case("linear", xs, lambda x, w, b=None: x @ w.T + (0 if b is None else b), rtol=1e-5)
case(
    "linear",
    [data((2, 3), "float32"), data((4, 3), "float32"), data((4,), "float64")],
    lambda x, w, b: x @ w.T + b,
    rtol=1e-5,
)

for _shape, _new in [
    ((2, 3, 4), (6, 4)),
    ((2, 3, 4), (-1,)),
    ((2, 3, 4), (2, -1)),
    ((2, 3, 4), (-1, 4, 1)),
    ((0, 3), (3, 0)),
    ((0, 3), (1, -1)),
    ((), (1,)),
    ((1,), ()),
    ((4,), (2, 2)),
    ((1, 6), (-1, 3)),
    ((2, 8), (4, 2, 2)),
]:
    for _dtype in ("float32", "int64", "bool"):
        case("reshape", [data(_shape, _dtype)], lambda x, s=_new: x.reshape(s), shape=_new)

for _shape, _axes in [
    ((2, 3, 4), None),
    ((2, 3, 4), (1, 0, 2)),
    ((2, 3, 4), (-1, 0, 1)),
    ((5,), None),
    ((), None),
    ((0, 2), (1, 0)),
    ((1, 3), None),
]:
    case("transpose", [data(_shape, "float32")], lambda x, a=_axes: np.transpose(x, a), axes=_axes)
    if _axes is not None:
        case("permute", [data(_shape, "int32")], lambda x, a=_axes: np.transpose(x, a), dims=_axes)
case("permute", [data((2, 3), "bool")], lambda x: x.T, dims=(1, 0))

E, B = SLICE_END, SLICE_BEGIN
SLICES = [
    ((4, 6), (1,), (0,), (E,), (1,)),  # x[:, :]
    ((4, 6), (1,), (0,), (3,), (1,)),  # x[:, :3]
    ((4, 6), (0, 1), (1, 2), (3, -1), (1, 2)),  # x[1:3, 2:-1:2]
    ((4, 6), (-1,), (-3,), (E,), (1,)),  # x[:, -3:]
    ((4, 6), (0,), (E,), (B,), (-1,)),  # x[::-1]
    ((4, 6), (1,), (-2,), (0,), (-2,)),  # x[:, -2:0:-2]
    ((4, 6), (0,), (10,), (20,), (1,)),  # out of range: empty
    ((4, 6), (0,), (3,), (1,), (1,)),  # start > stop: empty
    ((0, 3), (0,), (0,), (E,), (1,)),  # zero-size dim
    ((1, 3), (0,), (0,), (1,), (1,)),
    ((7,), (0,), (1,), (E,), (3,)),
    ((7,), (0,), (5,), (1,), (-1,)),
    ((7,), (0,), (-1,), (-6,), (-2,)),
    ((7,), (0,), (2,), (-2,), (1,)),
    ((7,), (0,), (-5,), (6,), (1,)),
    ((7,), (0,), (B,), (E,), (1,)),
    ((2, 3, 5), (2, 0), (1, 1), (4, 2), ()),  # steps () = all 1
]
for _shape, _axes, _starts, _stops, _steps in SLICES:

    def _ref(
        x: np.ndarray,
        axes: tuple = _axes,
        starts: tuple = _starts,
        stops: tuple = _stops,
        steps: tuple = _steps,
    ) -> np.ndarray:
        index = [slice(None)] * x.ndim
        for i, a in enumerate(axes):
            index[a] = slice(starts[i], stops[i], steps[i] if steps else 1)
        return x[tuple(index)]

    case("slice", [data(_shape, "float64")], _ref, axes=_axes, starts=_starts, stops=_stops, steps=_steps)

for _shapes, _axis in [
    ([(2, 3), (4, 3)], 0),
    ([(2, 3), (2, 1), (2, 5)], -1),
    ([(0, 3), (2, 3)], 0),
    ([(3,)], 0),
    ([(1, 2, 3), (1, 2, 3)], 1),
]:
    for _dtypes in (["float32"] * 3, ["int32", "float64", "int64"], ["bool", "bool", "int32"]):
        xs = [data(s, d) for s, d in zip(_shapes, _dtypes)]
        case("concat", xs, lambda *xs, ax=_axis: np.concatenate(xs, axis=ax), axis=_axis)

for _shape, _attrs in [
    ((6, 2), {"sections": 3}),
    ((6, 2), {"sections": 2, "axis": -1}),
    ((6, 2), {"sizes": (1, 5)}),
    ((2, 7), {"sizes": (2, 0, 5), "axis": 1}),
    ((0, 2), {"sections": 2}),
    ((4,), {"sections": 1}),
    ((4,), {"sizes": (4,)}),
]:

    def _ref(x: np.ndarray, a: dict = _attrs) -> tuple:
        axis = a.get("axis", 0)
        if "sections" in a:
            return tuple(np.split(x, a["sections"], axis=axis))
        return tuple(np.split(x, np.cumsum(a["sizes"])[:-1], axis=axis))

    case("split", [data(_shape, "float32")], _ref, **_attrs)

for _shape, _pads in [
    ((2, 3), (1, 2)),
    ((2, 3), (1, 0, 0, 2)),
    ((2, 3, 4), (0, 0)),
    ((3,), (2, 2)),
    ((0, 3), (1, 1)),
]:

    def _width(ndim: int, pads: tuple) -> list:
        width = [(0, 0)] * ndim
        for i in range(len(pads) // 2):
            width[ndim - 1 - i] = (pads[2 * i], pads[2 * i + 1])
        return width

    for _dtype in ("float32", "int64", "bool"):
        case("pad", [data(_shape, _dtype)], lambda x, p=_pads: np.pad(x, _width(x.ndim, p)), pads=_pads)
        case(
            "pad",
            [data(_shape, _dtype)],
            lambda x, p=_pads: np.pad(x, _width(x.ndim, p), constant_values=np.array(1.5).astype(x.dtype)),
            pads=_pads,
            value=1.5,
        )
    if 0 not in _shape:
        case(
            "pad",
            [data(_shape, "float64")],
            lambda x, p=_pads: np.pad(x, _width(x.ndim, p), mode="edge"),
            pads=_pads,
            mode="replicate",
        )
        if min(_shape[len(_shape) - len(_pads) // 2 :], default=9) > max(_pads, default=0):
            case(
                "pad",
                [data(_shape, "float64")],
                lambda x, p=_pads: np.pad(x, _width(x.ndim, p), mode="reflect"),
                pads=_pads,
                mode="reflect",
            )

for _shape, _target in [
    ((3,), (2, 3)),
    ((1, 3), (4, 3)),
    ((), (2, 2)),
    ((2, 1), (2, 5)),
    ((0, 1), (0, 4)),
    ((2, 3), (2, 3)),
    ((1,), (1, 0)),
]:
    case("broadcast_to", [data(_shape, "float32")], lambda x, t=_target: np.broadcast_to(x, t), shape=_target)

for _shape, _axis in [
    ((1, 3, 1), None),
    ((1, 3, 1), 0),
    ((1, 3, 1), (0, 2)),
    ((1, 3, 1), -1),
    ((3,), None),
    ((1,), None),
    ((), None),
    ((2, 1, 0), 1),
]:
    case("squeeze", [data(_shape, "int32")], lambda x, a=_axis: np.squeeze(x, a), axis=_axis)

for _shape, _axis in [((2, 3), 0), ((2, 3), -1), ((2, 3), 1), ((), 0), ((0,), -1)]:
    case("unsqueeze", [data(_shape, "float64")], lambda x, a=_axis: np.expand_dims(x, a), axis=_axis)


def ref_flatten(x: np.ndarray, start: int = 0, end: int = -1) -> np.ndarray:
    if x.ndim == 0:
        return x.reshape(1)
    s, e = start % x.ndim, end % x.ndim
    return x.reshape((*x.shape[:s], int(np.prod(x.shape[s : e + 1])), *x.shape[e + 1 :]))


for _shape, _s, _e in [
    ((2, 3, 4), 0, -1),
    ((2, 3, 4), 1, -1),
    ((2, 3, 4, 5), 1, 2),
    ((), 0, -1),
    ((2, 0, 3), 0, 1),
    ((3,), 0, 0),
    ((2, 3), -1, -1),
]:
    case(
        "flatten",
        [data(_shape, "float32")],
        lambda x, s=_s, e=_e: ref_flatten(x, s, e),
        start_dim=_s,
        end_dim=_e,
    )

for _shape, _idx, _axis in [
    ((5,), [0, 4, -1], None),
    ((3, 4), [[0, 2], [1, 1]], 0),
    ((3, 4), [3, 0], 1),
    ((3, 4), [], -1),
    ((2, 3), [5], None),
    ((3,), 1, 0),
]:
    for _it in INTS:
        case(
            "take",
            [data(_shape, "float32"), np.array(_idx, dtype=_it)],
            lambda x, i, a=_axis: np.take(x, i, axis=a),
            axis=_axis,
        )

for _op, _ref in (("zeros", np.zeros), ("ones", np.ones)):
    for _shape in ((2, 3), (), (0, 4)):
        for _dtype in ALL_DTYPES:
            case(_op, [], lambda s=_shape, d=_dtype, f=_ref: f(s, dtype=d), shape=_shape, dtype=_dtype)
    case(_op, [], lambda f=_ref: f((2,), dtype="float32"), shape=(2,))
for _fill, _dtype in ((1.5, "float32"), (7, "int64"), (True, "bool"), (2, "float64"), (-3, "int32")):
    case(
        "full",
        [],
        lambda f=_fill, d=_dtype: np.full((2, 3), f, dtype=d),
        shape=(2, 3),
        fill_value=_fill,
        dtype=_dtype,
    )
case("full", [], lambda: np.full((4,), 0.25, dtype="float32"), shape=(4,), fill_value=0.25)
for _start, _stop, _step in ((0, 5, 1), (2, 11, 3), (5, 0, -1), (5, 5, 1), (3, 1, 1), (-4, 4, 2), (0, 0, 1)):
    for _dtype in ("int64", "int32", "float32", "float64"):
        case(
            "arange",
            [],
            lambda a=_start, b=_stop, c=_step, d=_dtype: np.arange(a, b, c, dtype=d),
            start=_start,
            stop=_stop,
            step=_step,
            dtype=_dtype,
        )
case("arange", [], lambda: np.arange(7), stop=7)

for _shape in ((2, 3), (5,), (), (0, 2), (2, 1, 3)):
    for _dtype in ("float32", "int32", "bool"):
        case("nonzero", [data(_shape, _dtype) * (RNG.random(_shape) < 0.5)], lambda x: np.argwhere(x))
for _sx, _sm in (((2, 3), (2, 3)), ((2, 3), (3,)), ((3,), (2, 3)), ((0, 3), (0, 3)), ((), ())):
    for _dtype in ("float32", "int64", "bool"):
        case(
            "masked_select",
            [data(_sx, _dtype), data(_sm, "bool")],
            lambda x, m: np.broadcast_to(x, np.broadcast_shapes(x.shape, m.shape))[
                np.broadcast_to(m, np.broadcast_shapes(x.shape, m.shape))
            ],
        )


# -- helpers for the generic check -------------------------------------------------------------------


def call(op: OpDef, inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> Any:
    return op(list(inputs), **attrs) if op.variadic else op(*inputs, **attrs)


def as_outputs(op: OpDef, result: Any, attrs: dict[str, Any]) -> list[np.ndarray]:
    """A kernel returns one output bare and several as a tuple (the interpreter relies on it)."""
    if op.num_outputs(op.check_attrs(attrs)) == 1:
        assert isinstance(result, np.ndarray), f"one output must come back bare, got {type(result).__name__}"
        return [result]
    assert isinstance(result, tuple), (
        f"several outputs must come back as a tuple, not {type(result).__name__}"
    )
    return list(result)


def input_types(inputs: Sequence[np.ndarray], mode: str) -> tuple[list[TensorType], dict[str, int]]:
    """mode 'const': constant dims; 'sym1': symbols N0, N1... except size-1 dims; 'sym': all symbols."""
    bindings: dict[str, int] = {}
    types = []
    for x in inputs:
        dims: list[Any] = []
        for size in x.shape:
            if mode == "const" or (mode == "sym1" and size == 1):
                dims.append(size)
            else:
                name = f"N{len(bindings)}"
                bindings[name] = size
                dims.append(Dim.sym(name))
        types.append(TensorType(ShapeSpec(dims), x.dtype.name))
    return types, bindings


def symbolic_attrs(op: OpDef, attrs: dict[str, Any], bindings: dict[str, int]) -> dict[str, Any]:
    """Dim-valued attributes with their non-negative ints replaced by symbols A0, A1... (scalar registers)."""
    out = dict(attrs)

    def sym(v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**62:
            name = f"A{len(bindings)}"
            bindings[name] = v
            return Dim.sym(name)
        return v

    for key, value in attrs.items():
        kind = op.attrs[key].kind
        if kind in ("dim", "scalar"):
            out[key] = sym(value)
        elif kind == "dims":
            out[key] = tuple(sym(v) for v in value)
    return out


def guard_holds(g: Guard, bindings: dict[str, int]) -> bool | None:
    """None when the guard cannot be evaluated (it involves '?')."""
    if g.a.is_unknown or g.b.is_unknown or not (g.a.free_symbols | g.b.free_symbols) <= bindings.keys():
        return None
    return g.holds(bindings)


def check_type(t: TensorType, out: np.ndarray, bindings: dict[str, int], where: str) -> None:
    assert t.shape.rank == out.ndim, f"{where}: inferred {t} for output {out.dtype}{list(out.shape)}"
    for i, (d, size) in enumerate(zip(t.shape, out.shape)):
        if not d.is_unknown:
            assert d.evaluate(bindings) == size, f"{where}: dim {i} is {d}, kernel gave {size} ({bindings})"
    assert t.dtype == out.dtype.name, f"{where}: inferred dtype {t.dtype}, kernel gave {out.dtype}"


def compare(out: np.ndarray, ref: Any, c: Case) -> None:
    ref = np.asarray(ref)
    assert out.shape == ref.shape, f"shape {out.shape} vs reference {ref.shape}"
    if c.check_dtype:
        assert out.dtype == ref.dtype, f"dtype {out.dtype} vs reference {ref.dtype}"
    if out.dtype.kind == "f":
        rtol, atol = {"float16": (2e-3, 1e-3), "float32": (1e-5, 1e-6), "float64": (1e-12, 1e-14)}[
            out.dtype.name
        ]
        rtol = c.rtol or rtol
        np.testing.assert_allclose(out, ref.astype(out.dtype), rtol=rtol, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(out, ref)


# -- the generic tests -------------------------------------------------------------------------------


CORE_MODULES = {
    f"msvm.ops.{m}" for m in ("elementwise", "reduction", "linalg", "layout", "creation", "datadep")
}
# the core ops: every op these modules register (other op families, e.g. nn ops, have their own tables)
CORE_OPS = {name for name, op in REGISTRY.items() if op.infer.__module__ in CORE_MODULES}


def test_table_covers_every_registered_op() -> None:
    assert len(CORE_OPS) >= 56
    missing = CORE_OPS - {c.op for c in CASES}
    assert not missing, f"ops without an example call in CASES: {sorted(missing)}"


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_kernel_against_reference(c: Case) -> None:
    op = REGISTRY[c.op]
    before = [x.copy() for x in c.inputs]
    result = call(op, c.inputs, c.attrs)
    outs = as_outputs(op, result, c.attrs)
    for x, saved in zip(c.inputs, before):
        np.testing.assert_array_equal(x, saved, err_msg="the kernel modified its input")
    for out in outs:
        assert isinstance(out, np.ndarray), f"kernel returned {type(out).__name__}, not an ndarray"
        if "layout" not in op.traits:
            assert not any(np.shares_memory(out, x) for x in c.inputs), "a non-layout op returned a view"
    if c.expect is not None:
        refs = c.expect(*c.inputs)
        refs = list(refs) if isinstance(refs, tuple) else [refs]
        assert len(refs) == len(outs)
        for out, ref in zip(outs, refs):
            compare(out, ref, c)


@pytest.mark.parametrize("mode", ["const", "sym1", "sym", "symattrs"])
@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_shape_function_matches_kernel(c: Case, mode: str) -> None:
    op = REGISTRY[c.op]
    outs = as_outputs(op, call(op, c.inputs, c.attrs), c.attrs)
    attrs = op.check_attrs(c.attrs)
    types, bindings = input_types(c.inputs, "sym1" if mode == "symattrs" else mode)
    if mode == "symattrs":
        attrs = symbolic_attrs(op, attrs, bindings)
    ctx = InferContext()
    inferred = op.infer(ctx, *types, **attrs)
    inferred = [inferred] if isinstance(inferred, TensorType) else list(inferred)
    assert len(inferred) == len(outs) == op.num_outputs(attrs)
    holds = [guard_holds(g, bindings) for g in ctx.guards]
    if mode == "const":
        assert not ctx.guards, f"constant shapes left run-time guards: {ctx.guards}"
        for t in inferred:
            assert all(d.is_const or ("data_dependent" in op.traits and d.is_unknown) for d in t.shape), t
    elif mode == "sym":
        if False in holds:  # fully symbolic size-1 dims: a guard may rightly refuse (numpy would broadcast)
            return
    else:
        refused = [g for g, h in zip(ctx.guards, holds) if h is False]
        if mode == "symattrs" and refused and all("must be >= 0" in g.what for g in refused):
            return  # a register-provided bound is taken to count forwards (e.g. arange(3, 1) is refused)
        assert not refused, refused
    for i, (t, out) in enumerate(zip(inferred, outs)):
        check_type(t, out, bindings, f"{c.op} output {i} ({mode})")


def test_every_op_has_known_traits_and_a_doc() -> None:
    for name in CORE_OPS:
        op = REGISTRY[name]
        assert op.traits and op.traits <= TRAIT_NAMES, (name, op.traits)
        assert op.doc, name
        assert ("multi_output" in op.traits) == callable(op.outputs), name
    by_trait = {t: {n for n in CORE_OPS if t in REGISTRY[n].traits} for t in TRAIT_NAMES}
    assert by_trait["comparison"] <= by_trait["binary"] <= by_trait["elementwise"]
    assert by_trait["unary"] | by_trait["ternary"] <= by_trait["elementwise"]
    assert by_trait["ternary"] == {"where"}
    assert by_trait["nn"] == {"linear"}  # the other nn ops live in the nn modules
    assert {"nonzero", "masked_select"} <= by_trait["data_dependent"]
    assert {"zeros", "ones", "full", "arange"} == by_trait["creation"]
    for name in by_trait["unary"]:
        assert REGISTRY[name].inputs == ("x",), name
    for name in by_trait["binary"]:
        assert len(REGISTRY[name].inputs) == 2, name
    for name in by_trait["ternary"]:
        assert len(REGISTRY[name].inputs) == 3, name


def test_the_trait_vocabulary_is_documented_in_the_registry() -> None:
    """Every trait any op declares is explained in msvm/ops/registry.py's docstring."""
    used = {t for op in REGISTRY.values() for t in op.traits}
    assert used <= TRAIT_NAMES
    for trait in used:
        assert f"``{trait}``" in registry.__doc__, trait


# -- ms.ops namespace ------------------------------------------------------------------------------


def test_ops_namespace_exposes_opdefs() -> None:
    assert ops.relu is REGISTRY["relu"]
    assert ops.max is REGISTRY["max"] and ops.slice is REGISTRY["slice"]
    from msvm.ops import add

    assert add is REGISTRY["add"]
    assert "softmax" in dir(ops) and "OpDef" in dir(ops)
    with pytest.raises(AttributeError):
        _ = ops.no_such_op
    np.testing.assert_array_equal(ops.relu(np.array([-1.0, 2.0])), [0.0, 2.0])
    np.testing.assert_array_equal(ops.sum(np.ones((2, 3)), 1), [3.0, 3.0])
    _a, b = ops.split(np.arange(4), 2)
    np.testing.assert_array_equal(b, [2, 3])
    np.testing.assert_array_equal(ops.concat([np.zeros(1), np.ones(1)]), [0.0, 1.0])
    np.testing.assert_array_equal(ops.arange(stop=3), [0, 1, 2])


# -- attribute schemas -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "attrs", "code"),
    [
        ("sum", {"axes": 0}, "ATTR-UNKNOWN"),
        ("relu", {"alpha": 0.1}, "ATTR-UNKNOWN"),
        ("sum", {"axis": 1.5}, "ATTR-TYPE"),
        ("sum", {"keepdims": 1}, "ATTR-TYPE"),
        ("gelu", {"approximate": "fast"}, "ATTR-TYPE"),
        ("cast", {"dtype": "complex128"}, "ATTR-TYPE"),
        ("reshape", {"shape": 4}, "ATTR-TYPE"),
        ("reshape", {"shape": (2, 2.5)}, "ATTR-TYPE"),
        ("clamp", {"min": "0"}, "ATTR-TYPE"),
        ("pad", {"pads": (1, 1), "mode": "circular"}, "ATTR-TYPE"),
        ("full", {"shape": (2,), "fill_value": "x"}, "ATTR-TYPE"),
        ("cast", {}, "ATTR-MISSING"),
        ("reshape", {}, "ATTR-MISSING"),
        ("slice", {"axes": (0,), "starts": (0,)}, "ATTR-MISSING"),
        ("arange", {"start": 1}, "ATTR-MISSING"),
        ("permute", {}, "ATTR-MISSING"),
    ],
)
def test_attribute_schema_errors(name: str, attrs: dict, code: str) -> None:
    with pytest.raises(OpTypeError) as info:
        REGISTRY[name].check_attrs(attrs)
    assert info.value.code == code


def infer(name: str, *shapes: str, dtypes: Sequence[str] = (), **attrs: Any) -> tuple[Any, InferContext]:
    op = REGISTRY[name]
    types = [
        TensorType(parse_shape(s), dtypes[i] if i < len(dtypes) else "float32") for i, s in enumerate(shapes)
    ]
    ctx = InferContext()
    return op.infer(ctx, *types, **op.check_attrs(attrs)), ctx


@pytest.mark.parametrize(
    ("name", "shapes", "dtypes", "attrs", "code"),
    [
        ("add", ("[3]", "[4]"), (), {}, "SHAPE-MISMATCH"),
        ("where", ("[2]", "[3]", "[1]"), ("bool",), {}, "SHAPE-MISMATCH"),
        ("matmul", ("[2, 3]", "[4, 5]"), (), {}, "SHAPE-MISMATCH"),
        ("matmul", ("[2, 3]", "[]"), (), {}, "RANK"),
        ("matmul", ("[2, 2, 3]", "[3, 3, 4]"), (), {}, "SHAPE-MISMATCH"),
        ("linear", ("[2, 3]", "[4, 5]"), (), {}, "SHAPE-MISMATCH"),
        ("linear", ("[2, 3]", "[3]"), (), {}, "RANK"),
        ("linear", ("[2, 3]", "[4, 3]", "[5]"), (), {}, "SHAPE-MISMATCH"),
        ("sum", ("[2, 3]",), (), {"axis": 2}, "BAD-AXIS"),
        ("sum", ("[2, 3]",), (), {"axis": (0, -2)}, "BAD-AXIS"),
        ("argmax", ("[2, 3]",), (), {"axis": -3}, "BAD-AXIS"),
        ("softmax", ("[]",), (), {}, "BAD-AXIS"),
        ("neg", ("[2]",), ("bool",), {}, "DTYPE"),
        ("relu", ("[2]",), ("bool",), {}, "DTYPE"),
        ("sub", ("[2]", "[2]"), ("bool", "bool"), {}, "DTYPE"),
        ("take", ("[3]", "[2]"), ("float32", "float32"), {}, "DTYPE"),
        ("masked_select", ("[3]", "[3]"), ("float32", "int32"), {}, "DTYPE"),
        ("arange", (), (), {"stop": 3, "dtype": "bool"}, "DTYPE"),
        ("reshape", ("[2, 3]",), (), {"shape": (-1, -1)}, "ATTR-VALUE"),
        ("reshape", ("[2, 3]",), (), {"shape": (4, 2)}, "SHAPE-MISMATCH"),
        ("reshape", ("[2, 3]",), (), {"shape": (-1, 4)}, "SHAPE-MISMATCH"),
        ("reshape", ("[0, 3]",), (), {"shape": (-1, 0)}, "ATTR-VALUE"),
        ("reshape", ("[0, 3]",), (), {"shape": (0, -1)}, "ATTR-VALUE"),
        ("reshape", ("[2, 3]",), (), {"shape": (-2, -3)}, "ATTR-VALUE"),
        ("transpose", ("[2, 3]",), (), {"axes": (0,)}, "ATTR-VALUE"),
        ("transpose", ("[2, 3]",), (), {"axes": (0, 0)}, "ATTR-VALUE"),
        ("permute", ("[2, 3]",), (), {"dims": (0, 2)}, "BAD-AXIS"),
        ("slice", ("[4]",), (), {"axes": (0,), "starts": (0,), "stops": (2,), "steps": (0,)}, "ATTR-VALUE"),
        ("slice", ("[4]",), (), {"axes": (0,), "starts": (0, 1), "stops": (2,)}, "ATTR-VALUE"),
        ("slice", ("[4, 4]",), (), {"axes": (0, -2), "starts": (0, 0), "stops": (1, 1)}, "ATTR-VALUE"),
        ("slice", ("[4]",), (), {"axes": (1,), "starts": (0,), "stops": (1,)}, "BAD-AXIS"),
        ("concat", ("[2, 3]", "[2, 4]"), (), {"axis": 0}, "SHAPE-MISMATCH"),
        ("concat", ("[2, 3]", "[3]"), (), {}, "RANK"),
        ("concat", ("[]", "[]"), (), {}, "RANK"),
        ("split", ("[6]",), (), {}, "ATTR-VALUE"),
        ("split", ("[6]",), (), {"sections": 2, "sizes": (3, 3)}, "ATTR-VALUE"),
        ("split", ("[7]",), (), {"sections": 2}, "SHAPE-MISMATCH"),
        ("split", ("[7]",), (), {"sizes": (3, 3)}, "SHAPE-MISMATCH"),
        ("split", ("[]",), (), {"sections": 1}, "RANK"),
        ("pad", ("[2]",), (), {"pads": (1,)}, "ATTR-VALUE"),
        ("pad", ("[2]",), (), {"pads": (1, 1, 1, 1)}, "ATTR-VALUE"),
        ("pad", ("[2]",), (), {"pads": (-1, 1)}, "ATTR-VALUE"),
        ("broadcast_to", ("[3]",), (), {"shape": (2, 4)}, "SHAPE-MISMATCH"),
        ("broadcast_to", ("[2, 3]",), (), {"shape": (3,)}, "RANK"),
        ("broadcast_to", ("[3]",), (), {"shape": (-1, 3)}, "ATTR-VALUE"),
        ("squeeze", ("[2, 3]",), (), {"axis": 0}, "SHAPE-MISMATCH"),
        ("squeeze", ("[1, 1]",), (), {"axis": (0, 0)}, "BAD-AXIS"),
        ("unsqueeze", ("[2]",), (), {"axis": 2}, "BAD-AXIS"),
        ("flatten", ("[2, 3, 4]",), (), {"start_dim": 2, "end_dim": 1}, "ATTR-VALUE"),
        ("flatten", ("[2, 3]",), (), {"start_dim": 2}, "BAD-AXIS"),
        ("take", ("[3]", "[2]"), ("float32", "int64"), {"axis": 1}, "BAD-AXIS"),
        ("zeros", (), (), {"shape": (2, -1)}, "ATTR-VALUE"),
        ("arange", (), (), {"stop": 3, "step": 0}, "ATTR-VALUE"),
        ("masked_select", ("[3]", "[4]"), ("float32", "bool"), {}, "SHAPE-MISMATCH"),
    ],
)
def test_shape_function_errors(name: str, shapes: tuple, dtypes: tuple, attrs: dict, code: str) -> None:
    with pytest.raises(OpTypeError) as info:
        infer(name, *shapes, dtypes=dtypes, **attrs)
    assert info.value.code == code
    assert info.value.message


# -- symbolic shapes stay symbolic -------------------------------------------------------------------


def shape_of(name: str, *shapes: str, **attrs: Any) -> str:
    out, _ = infer(name, *shapes, **attrs)
    return str(out.shape) if isinstance(out, TensorType) else " ".join(str(t.shape) for t in out)


H, N, h = Dim.sym("H"), Dim.sym("N"), Dim.sym("h")


@pytest.mark.parametrize(
    ("name", "shapes", "attrs", "expected"),
    [
        ("reshape", ("[N, 16]",), {"shape": (-1, 8)}, "[N*2, 8]"),
        ("reshape", ("[N, H, 4]",), {"shape": (N, -1)}, "[N, H*4]"),
        ("reshape", ("[N, H]",), {"shape": (H, N)}, "[H, N]"),
        ("slice", ("[N, H]",), {"axes": (1,), "starts": (0,), "stops": (h,)}, "[N, min(H,h)]"),
        ("slice", ("[N, H]",), {"axes": (0, 1), "starts": (0, 0), "stops": (SLICE_END, SLICE_END)}, "[N, H]"),
        (
            "slice",
            ("[N]",),
            {"axes": (0,), "starts": (SLICE_END,), "stops": (SLICE_BEGIN,), "steps": (-1,)},
            "[N]",
        ),
        ("slice", ("[N]",), {"axes": (0,), "starts": (-3,), "stops": (SLICE_END,)}, "[min(3,N)]"),
        (
            "slice",
            ("[N]",),
            {"axes": (0,), "starts": (0,), "stops": (SLICE_END,), "steps": (2,)},
            "[(N+1)//2]",
        ),
        ("slice", ("[8, 5]",), {"axes": (0,), "starts": (1,), "stops": (-2,), "steps": (2,)}, "[3, 5]"),
        ("slice", ("[N, H]",), {"axes": (1,), "starts": (0,), "stops": (H,)}, "[N, H]"),
        ("arange", (), {"start": 0, "stop": N, "step": 1}, "[N]"),
        ("arange", (), {"start": 1, "stop": N, "step": 2}, "[N//2]"),
        ("zeros", (), {"shape": (N, H * 2)}, "[N, H*2]"),
        ("matmul", ("[B, N, K]", "[K, M]"), {}, "[B, N, M]"),
        ("matmul", ("[N, K]", "[K]"), {}, "[N]"),
        ("linear", ("[B, T, C]", "[D, C]", "[D]"), {}, "[B, T, D]"),
        ("concat", ("[N, 3]", "[H, 3]"), {"axis": 0}, "[H+N, 3]"),
        ("split", ("[N*4, 3]",), {"sections": 2}, "[N*2, 3] [N*2, 3]"),
        ("flatten", ("[N, 3, H]",), {"start_dim": 1}, "[N, H*3]"),
        ("pad", ("[N, H]",), {"pads": (1, 2)}, "[N, H+3]"),
        ("squeeze", ("[N, 1, 3]",), {"axis": 1}, "[N, 3]"),
        ("sum", ("[N, H, 3]",), {"axis": (0, -1), "keepdims": True}, "[1, H, 1]"),
        ("take", ("[N, H]", "[K]"), {"axis": 1}, "[N, K]"),
        ("nonzero", ("[N, 3]",), {}, "[?, 2]"),
        ("masked_select", ("[N, 3]", "[3]"), {}, "[?]"),
        ("broadcast_to", ("[1, H]",), {"shape": (N, H)}, "[N, H]"),
        ("add", ("[N, 1]", "[H]"), {}, "[N, H]"),
    ],
)
def test_symbolic_shapes(name: str, shapes: tuple, attrs: dict, expected: str) -> None:
    dtypes = {"masked_select": ("float32", "bool"), "take": ("float32", "int64")}.get(name, ())
    out, _ = infer(name, *shapes, dtypes=dtypes, **attrs)
    got = str(out.shape) if isinstance(out, TensorType) else " ".join(str(t.shape) for t in out)
    assert got == expected


def failing_guards(ctx: InferContext, bindings: dict[str, int]) -> list[str]:
    return [g.what for g in ctx.guards if guard_holds(g, bindings) is False]


def test_unprovable_equalities_become_guards() -> None:
    _, ctx = infer("matmul", "[N, K]", "[J, M]")
    assert not failing_guards(ctx, {"N": 2, "K": 3, "J": 3, "M": 4})
    assert failing_guards(ctx, {"N": 2, "K": 3, "J": 4, "M": 4})
    _, ctx = infer("split", "[N]", sections=3)
    assert not failing_guards(ctx, {"N": 9}) and failing_guards(ctx, {"N": 10})
    _, ctx = infer("reshape", "[N, 4]", shape=(-1, 3))
    assert not failing_guards(ctx, {"N": 3}) and failing_guards(ctx, {"N": 2})
    # squeeze(axis=None) keeps a symbolic dim, so at run time it must not be 1 (numpy would drop it)
    out, ctx = infer("squeeze", "[N, 1, 3]")
    assert str(out.shape) == "[N, 3]"
    assert not failing_guards(ctx, {"N": 4}) and failing_guards(ctx, {"N": 1})
    # a register-provided slice bound counts from the front
    _, ctx = infer("slice", "[N]", axes=(0,), starts=(h,), stops=(SLICE_END,))
    assert not failing_guards(ctx, {"N": 4, "h": 2}) and failing_guards(ctx, {"N": 4, "h": -1})
    _, ctx = infer("arange", start=h, stop=N)
    assert not failing_guards(ctx, {"N": 4, "h": 2}) and failing_guards(ctx, {"N": 1, "h": 2})


def test_unknown_dims_propagate() -> None:
    out, _ = infer("add", "[?, 3]", "[3]")
    assert str(out.shape) == "[?, 3]"
    from msvm.shapes import UNKNOWN

    out, _ = infer("slice", "[N]", axes=(0,), starts=(0,), stops=(UNKNOWN,))
    assert str(out.shape) == "[?]"
    out, _ = infer("arange", stop=UNKNOWN)
    assert str(out.shape) == "[?]"


def test_kernel_errors_are_left_to_numpy() -> None:
    with pytest.raises(ValueError):
        ops.max(np.zeros((0, 3)), 0)
    with pytest.raises(ValueError):
        ops.argmax(np.zeros(0))
    with pytest.raises(IndexError):
        ops.take(np.zeros(3), np.array([3]))
    with pytest.raises(ValueError):
        ops.pow(np.array([2]), np.array([-1]))


def test_eager_python_scalar_takes_the_tensor_dtype() -> None:
    """``ops.add(float32 x, 1.5)`` is float32, as numpy's ``x + 1.5`` and the compiled call are."""
    x = np.linspace(0.5, 2, 4, dtype=np.float32)
    for name, expected in (("add", x + 1.5), ("pow", x ** 1.5), ("mul", x * 2)):
        out = REGISTRY[name](x, 1.5 if name != "mul" else 2)
        assert out.dtype == np.float32 == expected.dtype, name
        np.testing.assert_allclose(out, expected, rtol=1e-6)
    assert ops.where(x > 1, x, 0.5).dtype == np.float32
    assert ops.add(np.arange(3, dtype=np.int32), 2).dtype == np.int32
    assert ops.add(np.arange(3, dtype=np.int32), 1.5).dtype == np.float64  # an int tensor meets a float
