"""Importers of ONNX's elementwise, shape and layout ops onto registry ops.

Why the shape ops look at their inputs' kind first: ``Shape``, ``Gather``, ``Concat``, ``Unsqueeze``
and the integer arithmetic between them are how exporters compute reshape targets. On shape vectors
they become SCALAR_OP chains (folded when static) and the ``Reshape``/``Expand``/``Slice`` that read
them get symbolic attributes; only a shape vector a data op reads is ever made a tensor.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..frontend.values import ScalarVal
from ..ops.functions import get_function
from .graph import NodeCtx, ShapeVec, Value, converter, frozen, ints_value
from .proto import msvm_dtype

# -- elementwise ----------------------------------------------------------------------------------

_UNARY = {
    "Relu": "relu",
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "Exp": "exp",
    "Log": "log",
    "Sqrt": "sqrt",
    "Abs": "abs",
    "Neg": "neg",
    "Erf": "erf",
    "Sin": "sin",
    "Cos": "cos",
}
_BINARY = {
    "Add": "add",
    "Sub": "sub",
    "Mul": "mul",
    "Div": "div",
    "Pow": "pow",
    "Equal": "equal",
    "Less": "less",
    "Greater": "greater",
    "LessOrEqual": "less_equal",
    "GreaterOrEqual": "greater_equal",
    "And": "minimum",
    "Or": "maximum",
}
# Integer arithmetic on shape elements (dims are >= 0, so ONNX's truncating Div is floor division).
_SCALAR = {
    "Add": "add",
    "Sub": "sub",
    "Mul": "mul",
    "Div": "floordiv",
    "Mod": "mod",
    "Max": "max",
    "Min": "min",
}


@converter(*_UNARY)
def _unary(ctx: NodeCtx) -> Value:
    return ctx.call(_UNARY[ctx.node.op_type], [ctx.value(0)])


@converter("Identity", "Dropout", attrs={"seed": None, "ratio": None, "is_test": None})
def _identity(ctx: NodeCtx) -> Value:
    if ctx.node.op_type == "Dropout" and ctx.has(2):
        mode = ctx.const(2, "training_mode")
        if bool(mode):
            raise ctx.error("training_mode=True is not supported", "inference (training_mode False)")
    return ctx.value(0)


@converter("Reciprocal")
def _reciprocal(ctx: NodeCtx) -> Value:
    one = frozen(np.ones((), dtype=ctx.dtype(0)))
    return ctx.call("div", [one, ctx.value(0)])


@converter("Not")
def _not(ctx: NodeCtx) -> Value:
    return ctx.call("equal", [ctx.value(0), frozen(np.zeros((), dtype=bool))])


def _broadcast_elems(a: list[Any], b: list[Any]) -> tuple[list[Any], list[Any]]:
    if len(a) == 1 and len(b) > 1:
        a = a * len(b)
    if len(b) == 1 and len(a) > 1:
        b = b * len(a)
    return a, b


def _int_operand(v: Value) -> bool:
    return isinstance(v, ShapeVec) or (isinstance(v, np.ndarray) and v.dtype.kind in "iu" and v.ndim <= 1)


def _shape_operands(ctx: NodeCtx) -> bool:
    """Whether this op works on shape elements: every input a shape vector or a small int constant."""
    return all(_int_operand(v) for v in ctx.inputs)


def _elem_op(ctx: NodeCtx, op: str, x: Any, y: Any) -> Any:
    """One element of integer arithmetic; Div of two constants truncates toward zero as ONNX says."""
    if op == "Div" and isinstance(x, int) and isinstance(y, int):
        if y == 0:
            raise ctx.error("integer division by zero")
        q = abs(x) // abs(y)
        return q if (x < 0) == (y < 0) else -q
    return ctx.imp.scalar_op(_SCALAR[op], x, y)


@converter(*_BINARY, "Mod", attrs={"broadcast": (1,), "axis": None, "fmod": (0,)})
def _binary(ctx: NodeCtx) -> Value:
    op = ctx.node.op_type
    if _shape_operands(ctx):
        rank0 = all(ctx.rank(i) == 0 for i in range(2))
        a, b = _broadcast_elems(ctx.elems(0), ctx.elems(1))
        if len(a) != len(b):
            raise ctx.error(f"shape vectors of lengths {len(a)} and {len(b)} do not broadcast")
        if op in _SCALAR:
            return ints_value([_elem_op(ctx, op, x, y) for x, y in zip(a, b)], rank0)
        if op == "Equal":
            folded = [fold_equal(x, y) for x, y in zip(a, b)]
            if None not in folded:
                arr = np.array(folded, dtype=bool)
                return frozen(arr.reshape(()) if rank0 else arr)
    if op in ("Mod", "Div") and not ctx.dtype(0).startswith("float"):
        raise ctx.error(f"integer {op} of data tensors is not supported", f"integer {op} of shape values")
    if "axis" in ctx.attrs and ctx.rank(1) not in (0, ctx.rank(0)):  # opset < 7 legacy broadcast along axis
        b = ctx.value(1)
        tail = ctx.rank(0) - ctx.attr("axis") % ctx.rank(0) - ctx.rank(1)
        for _ in range(tail):
            b = ctx.call("unsqueeze", [b], {"axis": -1})
        return ctx.call(_BINARY[op], [ctx.value(0), b])
    return ctx.call(_BINARY[op], [ctx.value(0), ctx.value(1)])


def fold_equal(x: Any, y: Any) -> bool | None:
    """x == y for shape elements when the import can tell: a dim is never negative."""
    if isinstance(x, int) and isinstance(y, int):
        return x == y
    if isinstance(x, ScalarVal) and isinstance(y, ScalarVal):
        return True if x.dim == y.dim and not x.dim.is_unknown else None
    s, k = (x, y) if isinstance(x, ScalarVal) else (y, x)
    if k < 0:
        return False
    if s.dim.is_const:
        return s.dim.value == k
    return None


@converter("Sum", "Mean", "Max", "Min")
def _variadic(ctx: NodeCtx) -> Value:
    op = ctx.node.op_type
    if op in ("Max", "Min") and _shape_operands(ctx):
        elems = [ctx.elems(i) for i in range(len(ctx.inputs))]
        out = elems[0]
        for other in elems[1:]:
            out, other = _broadcast_elems(out, other)
            out = [ctx.imp.scalar_op(_SCALAR[op], x, y) for x, y in zip(out, other)]
        return ints_value(out, all(ctx.rank(i) == 0 for i in range(len(ctx.inputs))))
    binary = {"Sum": "add", "Mean": "add", "Max": "maximum", "Min": "minimum"}[op]
    out = ctx.value(0)
    for i in range(1, len(ctx.inputs)):
        out = ctx.call(binary, [out, ctx.value(i)])
    if op == "Mean" and len(ctx.inputs) > 1:
        out = ctx.call("div", [out, frozen(np.array(len(ctx.inputs), dtype=ctx.dtype(0)))])
    return out


@converter("Where")
def _where(ctx: NodeCtx) -> Value:
    cond = ctx.value(0)
    if isinstance(cond, np.ndarray) and (
        isinstance(ctx.value(1), ShapeVec) or isinstance(ctx.value(2), ShapeVec)
    ):
        a, b = _broadcast_elems(ctx.elems(1), ctx.elems(2))
        c = [bool(v) for v in np.broadcast_to(cond, (len(a),))]
        return ints_value([x if k else y for k, x, y in zip(c, a, b)], cond.ndim == 0 and ctx.rank(1) == 0)
    return ctx.call("where", [cond, ctx.value(1), ctx.value(2)])


@converter("Clip", attrs={"min": None, "max": None})
def _clip(ctx: NodeCtx) -> Value:
    lo, hi = ctx.attr("min"), ctx.attr("max")
    if ctx.has(1):
        lo = float(ctx.const(1, "min"))
    if ctx.has(2):
        hi = float(ctx.const(2, "max"))
    return ctx.call("clamp", [ctx.value(0)], {"min": lo, "max": hi})


@converter("Cast", attrs={"to": None, "saturate": None})
def _cast(ctx: NodeCtx) -> Value:
    dtype = msvm_dtype(ctx.attr("to"), f"Cast node {ctx.label!r}")
    v = ctx.value(0)
    if isinstance(v, ShapeVec) and dtype in ("int32", "int64"):
        return v
    return ctx.call("cast", [v], {"dtype": dtype})


@converter("PRelu")
def _prelu(ctx: NodeCtx) -> Value:
    x, slope = ctx.value(0), ctx.value(1)
    if ctx.rank(1) == 1 and ctx.rank(0) > 2 and ctx.dims(1)[0] != 1:  # per channel: align to axis 1
        for _ in range(ctx.rank(0) - 2):
            slope = ctx.call("unsqueeze", [slope], {"axis": -1})
    neg = ctx.call("minimum", [x, frozen(np.zeros((), dtype=ctx.dtype(0)))])
    return ctx.call("add", [ctx.call("relu", [x]), ctx.call("mul", [slope, neg])])


@converter("Selu", attrs={"alpha": None, "gamma": None})
def _selu(ctx: NodeCtx) -> Value:
    alpha = ctx.attr("alpha", 1.67326319217681884765625)
    gamma = ctx.attr("gamma", 1.05070102214813232421875)
    x, dt = ctx.value(0), ctx.dtype(0)
    # selu = gamma * (relu(x) + alpha * (exp(min(x, 0)) - 1)): exact, and exp never overflows
    neg = ctx.call("minimum", [x, frozen(np.zeros((), dtype=dt))])
    em1 = ctx.call("sub", [ctx.call("exp", [neg]), frozen(np.ones((), dtype=dt))])
    inner = ctx.call(
        "add", [ctx.call("relu", [x]), ctx.call("mul", [em1, frozen(np.array(alpha, dtype=dt))])]
    )
    return ctx.call("mul", [inner, frozen(np.array(gamma, dtype=dt))])


def _scalar(ctx: NodeCtx, value: float) -> np.ndarray:
    return frozen(np.array(value, dtype=ctx.dtype(0)))


class _NodeBuild:
    """A ``msvm.ops.functions`` body emitted for one node: torch's activations are those functions, so
    ONNX's same-named ops expand through them (one definition of each) rather than a copy of them here."""

    def __init__(self, ctx: NodeCtx) -> None:
        self.ctx = ctx

    def __call__(self, op: str, *inputs: Any, **attrs: Any) -> Value:
        values = [_scalar(self.ctx, v) if isinstance(v, (int, float)) else v for v in inputs]
        return self.ctx.call(op, values, attrs)

    def rank(self, value: Value) -> int:
        return self.ctx.imp.rank(value)


def _function(ctx: NodeCtx, name: str, **attrs: Any) -> Value:
    return get_function(name).expand(_NodeBuild(ctx), ctx.value(0), **attrs)


@converter("LeakyRelu", attrs={"alpha": None})
def _leaky_relu(ctx: NodeCtx) -> Value:
    return _function(ctx, "leaky_relu", negative_slope=ctx.attr("alpha", 0.01))


@converter("Elu", attrs={"alpha": None})
def _elu(ctx: NodeCtx) -> Value:
    return _function(ctx, "elu", alpha=ctx.attr("alpha", 1.0))


@converter("HardSigmoid", attrs={"alpha": None, "beta": None})
def _hard_sigmoid(ctx: NodeCtx) -> Value:
    # ONNX's slope and offset are attributes (torch's hardsigmoid is alpha = 1/6, beta = 0.5)
    x, alpha, beta = ctx.value(0), ctx.attr("alpha", 0.2), ctx.attr("beta", 0.5)
    lin = ctx.call("add", [ctx.call("mul", [x, _scalar(ctx, alpha)]), _scalar(ctx, beta)])
    return ctx.call("clamp", [lin], {"min": 0.0, "max": 1.0})


@converter("HardSwish")
def _hard_swish(ctx: NodeCtx) -> Value:
    return _function(ctx, "hardswish")


@converter("Softplus")
def _softplus(ctx: NodeCtx) -> Value:
    # ONNX's log(1 + exp(x)) is torch's softplus with beta 1; above its threshold (20) the two differ
    # by less than exp(-20) relative
    return _function(ctx, "softplus")


@converter("Mish")
def _mish(ctx: NodeCtx) -> Value:
    return _function(ctx, "mish")


# -- constants and shapes -------------------------------------------------------------------------


@converter(
    "Constant",
    attrs={
        "value": None,
        "value_float": None,
        "value_floats": None,
        "value_int": None,
        "value_ints": None,
        "sparse_value": (),
    },
)
def _constant(ctx: NodeCtx) -> Value:
    for key, dtype in (
        ("value", None),
        ("value_float", np.float32),
        ("value_floats", np.float32),
        ("value_int", np.int64),
        ("value_ints", np.int64),
    ):
        if key in ctx.attrs:
            return ctx.attrs[key] if dtype is None else frozen(ctx.attrs[key], dtype)
    raise ctx.error("no value attribute", "value, value_float(s), value_int(s)")


@converter("Shape", attrs={"start": None, "end": None})
def _shape(ctx: NodeCtx) -> Value:
    dims = ctx.dims(0)
    start, end = ctx.attr("start", 0), ctx.attr("end", len(dims))
    return ints_value(dims[slice(start, end)])


@converter("Size")
def _size(ctx: NodeCtx) -> Value:
    n: Any = 1
    for d in ctx.dims(0):
        n = ctx.imp.scalar_op("mul", n, d)
    return ints_value([n], rank0=True)


@converter("ConstantOfShape", attrs={"value": None})
def _constant_of_shape(ctx: NodeCtx) -> Value:
    value = ctx.attr("value", frozen(np.zeros(1, dtype=np.float32)))
    shape = ctx.elems(0, "shape")
    if any(isinstance(d, int) and d < 0 for d in shape):
        raise ctx.error(f"negative size in shape {shape}")
    return ctx.call(
        "full",
        [],
        {"shape": tuple(shape), "fill_value": value.reshape(-1)[0].item(), "dtype": value.dtype.name},
    )


@converter("Range")
def _range(ctx: NodeCtx) -> Value:
    ends = []
    for i, what in enumerate(("start", "limit", "delta")):
        v = ctx.value(i)
        if isinstance(v, np.ndarray) and v.dtype.kind == "f":
            ends.append(float(v))
        else:
            ends.append(ctx.elems(i, what)[0])
    dtype = ctx.dtype(0)
    if any(isinstance(e, float) for e in ends):
        start, limit, delta = ends
        return frozen(np.arange(start, limit, delta, dtype=dtype))
    return ctx.call("arange", [], {"start": ends[0], "stop": ends[1], "step": ends[2], "dtype": dtype})


def _axes(ctx: NodeCtx, input_index: int, attr: str = "axes") -> list[int] | None:
    if ctx.has(input_index):
        return [int(a) for a in ctx.const(input_index, attr).reshape(-1)]
    axes = ctx.attr(attr)
    return None if axes is None else list(axes)


@converter("Unsqueeze", attrs={"axes": None})
def _unsqueeze(ctx: NodeCtx) -> Value:
    axes = _axes(ctx, 1)
    v = ctx.value(0)
    rank = ctx.rank(0) + len(axes)
    axes = sorted(a % rank for a in axes)
    if isinstance(v, ShapeVec) and v.rank0 and axes == [0]:
        return ShapeVec(v.elems)
    for a in axes:
        v = ctx.call("unsqueeze", [v], {"axis": a})
    return v


@converter("Squeeze", attrs={"axes": None})
def _squeeze(ctx: NodeCtx) -> Value:
    axes = _axes(ctx, 1)
    v = ctx.value(0)
    if isinstance(v, ShapeVec) and not v.rank0 and len(v.elems) == 1:
        return ShapeVec(v.elems, rank0=True)
    return ctx.call("squeeze", [v], {"axis": None if axes is None else tuple(axes)})


@converter("Concat", attrs={"axis": None})
def _concat(ctx: NodeCtx) -> Value:
    values = [v for v in ctx.inputs if v is not None]
    if any(isinstance(v, ShapeVec) for v in values) and all(ctx.imp.rank(v) == 1 for v in values):
        elems: list[Any] = []
        for i in range(len(ctx.inputs)):
            elems += ctx.elems(i)
        return ints_value(elems)
    return ctx.call("concat", values, {"axis": ctx.attr("axis", 0)})


@converter("Gather", attrs={"axis": None})
def _gather(ctx: NodeCtx) -> Value:
    v, axis = ctx.value(0), ctx.attr("axis", 0)
    idx = ctx.value(1)
    if isinstance(v, ShapeVec) and isinstance(idx, np.ndarray):
        n = len(v.elems)
        picked = [v.elems[int(i) % n] for i in idx.reshape(-1)]
        return ints_value(picked, rank0=idx.ndim == 0)
    return ctx.call("take", [v, idx], {"axis": axis % max(ctx.rank(0), 1)})


def _reshape_target(ctx: NodeCtx, dims: list[Any], shape: list[Any], allowzero: bool) -> list[Any]:
    out = []
    for i, s in enumerate(shape):
        if isinstance(s, int) and s == 0 and not allowzero:
            out.append(dims[i])
        else:
            out.append(s)
    return out


@converter("Reshape", attrs={"allowzero": None, "shape": None})
def _reshape(ctx: NodeCtx) -> Value:
    shape = list(ctx.attr("shape")) if "shape" in ctx.attrs else ctx.elems(1, "shape")
    target = _reshape_target(ctx, ctx.dims(0), shape, bool(ctx.attr("allowzero", 0)))
    v = ctx.value(0)
    if isinstance(v, ShapeVec) and len(target) <= 1:
        return ShapeVec(v.elems, rank0=not target)
    return ctx.call("reshape", [v], {"shape": tuple(target)})


def _flatten_to(ctx: NodeCtx, v: Value, dims: list[Any], axis: int) -> Value:
    """``v`` reshaped to 2-D: the dims before ``axis`` merged, and the dims from it."""
    left: Any = 1
    for d in dims[:axis]:
        left = ctx.imp.scalar_op("mul", left, d)
    right: Any = 1
    for d in dims[axis:]:
        right = ctx.imp.scalar_op("mul", right, d)
    return ctx.call("reshape", [v], {"shape": (left, right)})


@converter("Flatten", attrs={"axis": None})
def _flatten(ctx: NodeCtx) -> Value:
    dims = ctx.dims(0)
    return _flatten_to(ctx, ctx.value(0), dims, ctx.attr("axis", 1) % (len(dims) + 1))


@converter("Transpose", attrs={"perm": None})
def _transpose(ctx: NodeCtx) -> Value:
    perm = ctx.attr("perm")
    return ctx.call("transpose", [ctx.value(0)], {"axes": None if perm is None else tuple(perm)})


@converter("Expand")
def _expand(ctx: NodeCtx) -> Value:
    shape = ctx.elems(1, "shape")
    dims = ctx.dims(0)
    rank = max(len(shape), len(dims))
    shape = [1] * (rank - len(shape)) + shape
    dims = [1] * (rank - len(dims)) + dims
    target = [d if isinstance(s, int) and s == 1 else s for s, d in zip(shape, dims)]
    v = ctx.value(0)
    if ctx.rank(0) < rank:
        v = ctx.call("reshape", [v], {"shape": tuple(dims)})
    return ctx.call("broadcast_to", [v], {"shape": tuple(target)})


@converter("Tile")
def _tile(ctx: NodeCtx) -> Value:
    reps = ctx.elems(1, "repeats")
    dims = ctx.dims(0)
    # tile = broadcast over a new axis before each axis, then merge each pair: exact, and one copy
    spread, wide, merged = [], [], []
    for r, d in zip(reps, dims):
        spread += [1, d]
        wide += [r, d]
        merged.append(ctx.imp.scalar_op("mul", r, d))
    v = ctx.call("reshape", [ctx.value(0)], {"shape": tuple(spread)})
    v = ctx.call("broadcast_to", [v], {"shape": tuple(wide)})
    return ctx.call("reshape", [v], {"shape": tuple(merged)})


@converter("Slice", attrs={"starts": None, "ends": None, "axes": None})
def _slice(ctx: NodeCtx) -> Value:
    if "starts" in ctx.attrs:  # opset < 10
        starts, ends = list(ctx.attr("starts")), list(ctx.attr("ends"))
        axes, steps = ctx.attr("axes"), None
    else:
        starts, ends = ctx.elems(1, "starts"), ctx.elems(2, "ends")
        axes = ctx.elems(3, "axes") if ctx.has(3) else None
        steps = ctx.elems(4, "steps") if ctx.has(4) else None
    rank = ctx.rank(0)
    axes = list(range(len(starts))) if axes is None else [int(a) % rank for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    if not all(isinstance(s, int) for s in steps):
        raise ctx.error("steps computed at run time are not supported", "constant steps")
    v = ctx.value(0)
    if isinstance(v, ShapeVec) and axes == [0]:
        s, e = starts[0], ends[0]
        if isinstance(s, int) and isinstance(e, int):
            return ints_value(list(v.elems[slice(s, e, steps[0])]))
    return ctx.call(
        "slice",
        [v],
        {"axes": tuple(axes), "starts": tuple(starts), "stops": tuple(ends), "steps": tuple(steps)},
    )


@converter("Split", attrs={"axis": None, "split": None, "num_outputs": None})
def _split(ctx: NodeCtx) -> Value:
    axis = ctx.attr("axis", 0) % ctx.rank(0)
    sizes = ctx.attr("split")
    if ctx.has(1):
        sizes = [int(s) for s in ctx.const(1, "split")]
    n = len(ctx.node.output)
    if sizes is None:
        dim = ctx.dims(0)[axis]
        if isinstance(dim, int) and dim % n:  # opset 18: the last chunk is smaller
            chunk = -(-dim // n)
            sizes = [chunk] * (n - 1) + [dim - chunk * (n - 1)]
        else:
            out = ctx.call("split", [ctx.value(0)], {"sections": n, "axis": axis})
            return out if isinstance(out, tuple) else (out,)
    out = ctx.call("split", [ctx.value(0)], {"sizes": tuple(sizes), "axis": axis})
    return out if isinstance(out, tuple) else (out,)


_PAD_MODES = ("constant", "reflect", "edge")


@converter("Pad", attrs={"mode": _PAD_MODES, "pads": None, "value": None})
def _pad(ctx: NodeCtx) -> Value:
    rank = ctx.rank(0)
    if "pads" in ctx.attrs:
        pads, value = list(ctx.attr("pads")), ctx.attr("value", 0.0)
    else:
        pads = [int(p) for p in ctx.const(1, "pads")]
        value = float(ctx.const(2, "constant_value")) if ctx.has(2) else 0.0
    axes = list(range(rank))
    if ctx.has(3):
        axes = [int(a) % rank for a in ctx.const(3, "axes")]
    begin, end = dict(zip(axes, pads[: len(axes)])), dict(zip(axes, pads[len(axes) :]))
    if any(p < 0 for p in pads):
        raise ctx.error(f"negative pads {pads} are not supported", "pads >= 0")
    flat: list[int] = []
    for a in reversed(range(rank)):
        flat += [begin.get(a, 0), end.get(a, 0)]
    while len(flat) > 2 and flat[-2:] == [0, 0]:
        flat = flat[:-2]
    mode = {"edge": "replicate"}.get(ctx.attr("mode", "constant"), ctx.attr("mode", "constant"))
    return ctx.call("pad", [ctx.value(0)], {"pads": tuple(flat), "mode": mode, "value": value})


# -- reductions -----------------------------------------------------------------------------------

_REDUCE = {
    "ReduceMean": "mean",
    "ReduceSum": "sum",
    "ReduceMax": "max",
    "ReduceMin": "min",
    "ReduceProd": "prod",
}


@converter(
    *_REDUCE,
    "ReduceL2",
    "ReduceSumSquare",
    attrs={"axes": None, "keepdims": None, "noop_with_empty_axes": (0,)},
)
def _reduce(ctx: NodeCtx) -> Value:
    op = ctx.node.op_type
    axes = _axes(ctx, 1)
    keep = bool(ctx.attr("keepdims", 1))
    axis = None if not axes else tuple(a % ctx.rank(0) for a in axes)
    x = ctx.value(0)
    if op in ("ReduceL2", "ReduceSumSquare"):
        s = ctx.call("sum", [ctx.call("mul", [x, x])], {"axis": axis, "keepdims": keep})
        return ctx.call("sqrt", [s]) if op == "ReduceL2" else s
    y = ctx.call(_REDUCE[op], [x], {"axis": axis, "keepdims": keep})
    return _same_dtype(ctx, y) if op in ("ReduceSum", "ReduceProd") else y


def _same_dtype(ctx: NodeCtx, y: Value) -> Value:
    """``y`` cast back to the input's dtype: ONNX keeps an int32 sum or product int32, numpy widens it."""
    return y if ctx.imp.dtype(y) == ctx.dtype(0) else ctx.call("cast", [y], {"dtype": ctx.dtype(0)})


@converter("CumSum", attrs={"exclusive": (0, 1), "reverse": (0, 1)})
def _cumsum(ctx: NodeCtx) -> Value:
    axis = int(ctx.const(1, "axis"))
    attrs = {
        "axis": axis,
        "exclusive": bool(ctx.attr("exclusive", 0)),
        "reverse": bool(ctx.attr("reverse", 0)),
    }
    return _same_dtype(ctx, ctx.call("cumsum", [ctx.value(0)], attrs))


@converter("Trilu", attrs={"upper": (0, 1)})
def _trilu(ctx: NodeCtx) -> Value:
    k = int(ctx.const(1, "k")) if ctx.has(1) else 0
    return ctx.call("triu" if ctx.attr("upper", 1) else "tril", [ctx.value(0)], {"diagonal": k})


@converter("GatherElements", attrs={"axis": None})
def _gather_elements(ctx: NodeCtx) -> Value:
    return ctx.call("gather", [ctx.value(0), ctx.value(1)], {"axis": ctx.attr("axis", 0)})


@converter("ArgMax", attrs={"axis": None, "keepdims": None, "select_last_index": (0,)})
def _argmax(ctx: NodeCtx) -> Value:
    axis = ctx.attr("axis", 0) % ctx.rank(0)
    return ctx.call("argmax", [ctx.value(0)], {"axis": axis, "keepdims": bool(ctx.attr("keepdims", 1))})


__all__: list[str] = []
