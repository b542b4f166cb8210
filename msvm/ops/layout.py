"""Layout ops: reshape, transpose/permute, slice, concat, split, pad, broadcast_to, squeeze,
unsqueeze, flatten and take.

Why so much care with dims: these ops are where symbolic shapes are made or lost. A reshape of
``[N, 16]`` to ``(-1, 8)`` must give ``[N*2, 8]``, not ``?``, or every op downstream loses its
anchor (SCD). Output dims are exact expressions; anything that cannot be proved statically becomes
a run-time guard in the InferContext instead of an assumption.

Size attributes that come from scalar registers (symbolic dims) are taken to be non-negative — a
register-provided slice bound counts from the front; a guard checks that at run time.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..shapes import Dim, ShapeSpec, as_dim, ceildiv, dmax, dmin
from .reduction import reduce_axes
from .registry import Attr, InferContext, OpDef, OpTypeError, TensorType, register

LAYOUT = frozenset({"layout"})
LAYOUT_MULTI = frozenset({"layout", "multi_output"})

# Slice bounds at or beyond these magnitudes mean "from/to the end" (Python and ONNX use 2**63-1).
SLICE_END = 2**63 - 1
SLICE_BEGIN = -(2**63)
_HUGE = 2**62


def _prod(dims: Sequence[Dim | int]) -> Dim:
    out = as_dim(1)
    for d in dims:
        out = out * d
    return out


def _require_nonneg(ctx: InferContext, d: Dim, what: str) -> None:
    """Record that a register-provided value ``d`` must be >= 0 (max(d, 0) == d) at run time."""
    if not d.is_const and not d.is_unknown:
        ctx.require_equal(dmax(d, 0), d, f"{what} must be >= 0")


def _check_size_attrs(op: str, dims: Sequence[Dim], allow_minus_one: bool = False) -> None:
    for d in dims:
        if d.is_const and d.value < 0 and not (allow_minus_one and d.value == -1):
            raise OpTypeError("ATTR-VALUE", f"{op}: negative size {d.value} in {tuple(map(str, dims))}",
                              "sizes must be >= 0" + (" (one may be -1)" if allow_minus_one else ""))


# -- reshape ------------------------------------------------------------------------------------------


def _cancel_factors(numer: Sequence[Dim], denom: Sequence[Dim]) -> tuple[list[Dim], list[Dim]]:
    """Drop dims equal on both sides, so that (N*H*W) // N is H*W rather than an opaque division."""
    numer, rest = list(numer), []
    for d in denom:
        if d in numer and not d.is_const:
            numer.remove(d)
        else:
            rest.append(d)
    return numer, rest


def _reshape_infer(ctx: InferContext, x: TensorType, shape: Sequence[Any]) -> TensorType:
    dims = [as_dim(d) for d in shape]
    _check_size_attrs("reshape", dims, allow_minus_one=True)
    holes = [i for i, d in enumerate(dims) if d == -1]
    total = _prod(x.shape)
    if len(holes) > 1:
        raise OpTypeError("ATTR-VALUE", f"reshape: more than one -1 in {tuple(map(str, dims))}",
                          "at most one size may be inferred")
    if holes:
        known = [d for i, d in enumerate(dims) if i != holes[0]]
        rest = _prod(known)
        if rest == 0:
            raise OpTypeError("ATTR-VALUE", "reshape: cannot infer -1 next to a size-0 dim",
                              "give every size explicitly")
        numer, denom = _cancel_factors(x.shape, known)
        dims[holes[0]] = _prod(numer) // _prod(denom)
        ctx.require_equal(dims[holes[0]] * rest, total,
                          f"reshape of {x.shape} to {_fmt(dims)}: element count")
    else:
        ctx.require_equal(_prod(dims), total, f"reshape of {x.shape} to {_fmt(dims)}: element count")
    return TensorType(ShapeSpec(dims), x.dtype)


def _fmt(dims: Sequence[Dim]) -> str:
    return "[" + ", ".join(map(str, dims)) + "]"


register(OpDef(
    name="reshape", inputs=("x",), attrs={"shape": Attr("dims", doc="new shape; one size may be -1")},
    infer=_reshape_infer, kernel=lambda x, shape: x.reshape(shape), traits=LAYOUT,
    doc="x with a new shape and the same elements (a view where numpy gives one)",
))


# -- transpose / permute ------------------------------------------------------------------------------


def _permutation(ctx: InferContext, op: str, perm: Sequence[int], rank: int) -> list[int]:
    if len(perm) != rank:
        raise OpTypeError("ATTR-VALUE", f"{op}: {tuple(perm)} has {len(perm)} axes for a rank-{rank} tensor",
                          "give a permutation of every axis")
    axes = [ctx.axis(a, rank, f"{op} axis") for a in perm]
    if len(set(axes)) != rank:
        raise OpTypeError("ATTR-VALUE", f"{op}: {tuple(perm)} is not a permutation", "list every axis once")
    return axes


def _transpose_infer(ctx: InferContext, x: TensorType, axes: Sequence[int] | None) -> TensorType:
    rank = x.shape.rank
    perm = range(rank - 1, -1, -1) if axes is None else _permutation(ctx, "transpose", axes, rank)
    return TensorType(ShapeSpec(x.shape[a] for a in perm), x.dtype)


def _permute_infer(ctx: InferContext, x: TensorType, dims: Sequence[int]) -> TensorType:
    perm = _permutation(ctx, "permute", dims, x.shape.rank)
    return TensorType(ShapeSpec(x.shape[a] for a in perm), x.dtype)


register(OpDef(
    name="transpose", inputs=("x",),
    attrs={"axes": Attr("ints", None, doc="permutation of the axes; None reverses them")},
    infer=_transpose_infer, kernel=lambda x, axes: x.transpose(axes), traits=LAYOUT,
    doc="x with its axes permuted (np.transpose; a view)",
))
register(OpDef(
    name="permute", inputs=("x",), attrs={"dims": Attr("ints", doc="permutation of the axes")},
    infer=_permute_infer, kernel=lambda x, dims: x.transpose(dims), traits=LAYOUT,
    doc="torch.permute: transpose with a required permutation (a view)",
))


# -- slice --------------------------------------------------------------------------------------------


def _bound_class(v: Dim, forward: bool, size: Dim | None = None) -> str:
    """lo / hi (clamped to an end), P (counts from the front), N (counts from the back), S (either),
    Z (the axis's own size less 1 or 2: ``x[:len(x) - 1]``).

    A symbolic bound is an expression of sizes (each >= 0): one whose terms show its sign is P or N;
    one that may be either (``W - H - 3``) is S, and its length is Python's rule for both signs. The
    axis's size less 1 (or 2, stepping forward) is negative only where Python's clamp gives 0 (-1)
    anyway: ``max(L - 1, 0)`` is exact, and the common idiom keeps a short form.
    """
    if v.is_unknown:
        return "P"
    if not v.is_const:
        offset = None if size is None else v - size
        if offset is not None and offset.is_const and offset.value >= (-2 if forward else -1):
            return "hi" if offset.value >= 0 else "Z"
        return {1: "P", -1: "N"}.get(_sign(v), "S")
    value = v.value
    if value >= _HUGE:
        return "hi"
    if value <= -_HUGE or (forward and value == 0):
        return "lo"
    return "P" if value >= 0 else "N"


def _sign(v: Dim) -> int:
    """1: ``v`` >= 0, -1: ``v`` < 0 for every size >= 0 of its symbols; 0: the terms do not tell."""
    constant, signs = 0, set()
    for k, factors in v.terms:
        if not factors:
            constant = k
        elif all(isinstance(f, str) or _nonnegative_term(*f) for f in factors):
            signs.add(1 if k > 0 else -1)  # a product of sizes (or of terms >= 0 made of them) is >= 0
        else:
            return 0
    if signs <= {1} and constant >= 0:
        return 1
    if signs <= {-1} and constant < 0:
        return -1
    return 0


def _nonnegative_term(op: str, a: Dim, b: Dim) -> bool:
    """``max`` needs one argument >= 0; ``min``, ``//`` and ``%`` both (sizes divide by sizes)."""
    if op == "max":
        return _sign(a) == 1 or _sign(b) == 1
    return _sign(a) == _sign(b) == 1


def _position(v: Dim, cls: str, size: Dim, forward: bool) -> Dim:
    """Where Python's slice puts bound ``v`` of class ``cls``: in [0, L] (step > 0) or [-1, L-1] (< 0)."""
    top, low = (size, as_dim(0)) if forward else (size - 1, as_dim(-1))
    if cls in ("lo", "hi"):
        return low if cls == "lo" else top
    if cls == "P":
        return dmin(v, top)
    if cls == "N":
        return dmax(size + v, low)
    if cls == "Z":
        return dmax(v, low)
    # either sign: clamp into [low - L, top], then c // (L + 1) is -1 exactly for the negative ones
    c = dmin(dmax(v, low - size), top)
    return c - size * (c // (size + 1))


def slice_length(size: Dim | int, start: Dim | int, stop: Dim | int, step: int) -> Dim:
    """len(range(size)[start:stop:step]) as an exact expression, for symbolic bounds of either sign.

    Python clamps a start/stop into [0, size] (step > 0) or [-1, size-1] (step < 0) after adding
    ``size`` to negative ones; each case below is that clamped difference, written in the simplest
    form that holds for every size >= 0, so full slices give ``size`` back and constant slices of
    constant dims give constants.
    """
    L, s, e = as_dim(size), as_dim(start), as_dim(stop)
    if L.is_const and s.is_const and e.is_const:
        return as_dim(len(range(L.value)[slice(s.value, e.value, step)]))
    forward = step > 0
    cs, ce = _bound_class(s, forward, L), _bound_class(e, forward, L)
    if "S" in (cs, ce) or "Z" in (cs, ce):
        first, last = _position(s, cs, L, forward), _position(e, ce, L, forward)
        ends = (("lo", "Z"), ("Z", "hi")) if forward else (("hi", "Z"), ("Z", "lo"))
        if (cs, ce) in ends:  # an end less a position inside the axis: >= 0 as it is
            diff = last - first if forward else first - last
        else:
            diff = dmax(last - first if forward else first - last, 0)
    elif forward:
        # clamped positions: lo = 0, hi = L, P: min(v, L), N: max(L+v, 0); length = max(0, e' - s')
        if cs == "hi" or ce == "lo":
            diff = as_dim(0)
        elif cs == "lo":
            diff = {"hi": L, "P": dmin(e, L), "N": dmax(L + e, 0)}[ce]
        elif ce == "hi":
            diff = dmax(L - s, 0) if cs == "P" else dmin(-s, L)
        elif cs == "P" and ce == "P":
            diff = _clamped_span(e - s, dmax(L - s, 0))
        elif cs == "P":  # stop counts from the back
            diff = dmax(L + e - s, 0)
        elif ce == "N":
            diff = _clamped_span(e - s, dmax(L + e, 0))
        else:  # start from the back, stop from the front
            diff = dmax(dmin(e, L) - dmax(L + s, 0), 0)
    else:
        # clamped positions: lo = -1, hi = L-1, P: min(v, L-1), N: max(L+v, -1); length = max(0, s' - e')
        if cs == "lo" or ce == "hi":
            diff = as_dim(0)
        elif ce == "lo":
            diff = {"hi": L, "P": dmin(s + 1, L), "N": L if s == -1 else dmax(L + s + 1, 0)}[cs]
        elif cs == "hi":
            diff = dmax(L - 1 - e, 0) if ce == "P" else dmin(-e - 1, L)
        elif cs == "P" and ce == "P":
            diff = _clamped_span(s - e, dmax(L - 1 - e, 0))
        elif cs == "N" and ce == "P":
            diff = dmax(L + s - e, 0)
        elif cs == "N":
            diff = _clamped_span(s - e, dmax(L + s + 1, 0))
        else:  # start from the front, stop from the back
            diff = dmax(dmin(s, L - 1) - dmax(L + e, -1), 0)
    return ceildiv(diff, abs(step))


def _clamped_span(span: Dim, room: Dim) -> Dim:
    """max(0, min(span, room)) for room >= 0, without the max when span is a known constant."""
    if span.is_const:
        return as_dim(0) if span.value <= 0 else dmin(span, room)
    return dmax(dmin(span, room), 0)


def _slice_infer(ctx: InferContext, x: TensorType, axes: Sequence[int], starts: Sequence[Any],
                 stops: Sequence[Any], steps: Sequence[int]) -> TensorType:
    n = len(axes)
    steps = tuple(steps) or (1,) * n
    if not len(starts) == len(stops) == len(steps) == n:
        raise OpTypeError("ATTR-VALUE", f"slice: axes, starts, stops and steps have lengths "
                          f"{n}, {len(starts)}, {len(stops)}, {len(steps)}", "give one entry per sliced axis")
    if 0 in steps:
        raise OpTypeError("ATTR-VALUE", "slice: step 0", "steps must be non-zero")
    rank = x.shape.rank
    norm = [ctx.axis(a, rank, "slice axis") for a in axes]
    if len(set(norm)) != n:
        raise OpTypeError("ATTR-VALUE", f"slice: axis listed twice in {tuple(axes)}", "slice each axis once")
    out = list(x.shape)
    for a, start, stop, step in zip(norm, starts, stops, steps):
        start, stop = as_dim(start), as_dim(stop)
        for what, bound in (("start", start), ("stop", stop)):
            if _bound_class(bound, step > 0, out[a]) == "P":  # counts from the front, as its terms say
                _require_nonneg(ctx, bound, f"slice {what} {bound} on axis {a}")
        out[a] = slice_length(out[a], start, stop, step)
    return TensorType(ShapeSpec(out), x.dtype)


def _slice(x: np.ndarray, axes: Sequence[int], starts: Sequence[int], stops: Sequence[int],
           steps: Sequence[int] = ()) -> np.ndarray:
    index = [slice(None)] * x.ndim
    if steps:
        for a, start, stop, step in zip(axes, starts, stops, steps):
            index[a] = slice(start, stop, step)
    else:
        for a, start, stop in zip(axes, starts, stops):
            index[a] = slice(start, stop)
    return x[tuple(index)]


register(OpDef(
    name="slice", inputs=("x",),
    attrs={
        "axes": Attr("ints", doc="the sliced axes"),
        "starts": Attr("dims", doc="start per axis; negative counts from the end"),
        "stops": Attr("dims", doc=f"stop per axis; {SLICE_END} = to the end ({SLICE_BEGIN} for step < 0)"),
        "steps": Attr("ints", (), doc="step per axis (non-zero); () = all 1"),
    },
    infer=_slice_infer, kernel=_slice, traits=LAYOUT,
    doc="x[start:stop:step] on the listed axes, Python slicing semantics (a view)",
))


# -- concat / split -----------------------------------------------------------------------------------


def _concat_infer(ctx: InferContext, *xs: TensorType, axis: int) -> TensorType:
    rank = xs[0].shape.rank
    if rank == 0 or any(x.shape.rank != rank for x in xs):
        shapes = ", ".join(str(x.shape) for x in xs)
        raise OpTypeError("RANK", f"concat: inputs must share a rank >= 1, got {shapes}")
    ax = ctx.axis(axis, rank, "concat axis")
    out = list(xs[0].shape)
    for k, x in enumerate(xs[1:], 1):
        for i in range(rank):
            if i != ax:
                out[i] = ctx.require_equal(out[i], x.shape[i], f"concat input {k} dim {i}")
    out[ax] = sum((x.shape[ax] for x in xs[1:]), xs[0].shape[ax])
    dtype = np.result_type(*(np.dtype(x.dtype) for x in xs)).name
    return TensorType(ShapeSpec(out), dtype)


register(OpDef(
    name="concat", inputs=("*tensors",), attrs={"axis": Attr("int", 0, doc="the joined axis")},
    infer=_concat_infer, kernel=lambda *xs, axis: np.concatenate(xs, axis=axis), traits=LAYOUT,
    aliases={"dim": "axis"},  # torch.cat(tensors, dim)
    doc="tensors joined along axis (np.concatenate; dtypes promote like numpy)",
))


def _split_count(attrs: Any) -> int:
    return attrs["sections"] or len(attrs["sizes"])


def _split_infer(ctx: InferContext, x: TensorType, sections: int, sizes: Sequence[int],
                 axis: int) -> list[TensorType]:
    if (sections != 0) == bool(sizes):
        raise OpTypeError("ATTR-VALUE", "split: give exactly one of sections and sizes",
                          "sections=k for k equal parts, sizes=(a, b, ...) for parts of given sizes")
    if sections < 0 or any(s < 0 for s in sizes):
        raise OpTypeError("ATTR-VALUE", "split: sections and sizes must be >= 0")
    rank = x.shape.rank
    if rank == 0:
        raise OpTypeError("RANK", "split: cannot split a scalar")
    ax = ctx.axis(axis, rank, "split axis")
    size = x.shape[ax]
    if sections:
        part = size // sections
        ctx.require_equal(part * sections, size, f"split: {sections} sections must divide dim {ax} ({size})")
        parts: list[Dim | int] = [part] * sections
    else:
        ctx.require_equal(sum(sizes), size, f"split: sizes {tuple(sizes)} must add up to dim {ax} ({size})")
        parts = list(sizes)
    shape = list(x.shape)
    return [TensorType(ShapeSpec([*shape[:ax], p, *shape[ax + 1:]]), x.dtype) for p in parts]


def _split(x: np.ndarray, sections: int = 0, sizes: Sequence[int] = (),
           axis: int = 0) -> np.ndarray | tuple[np.ndarray, ...]:
    if sections:
        parts = np.split(x, sections, axis=axis)
    else:
        parts = np.split(x, list(itertools.accumulate(sizes[:-1])), axis=axis)
    # like every op, one output is returned bare and several as a tuple (num_outputs decides)
    return parts[0] if len(parts) == 1 else tuple(parts)


register(OpDef(
    name="split", inputs=("x",),
    attrs={"sections": Attr("int", 0, doc="number of equal parts (must divide the dim)"),
           "sizes": Attr("ints", (), doc="sizes of the parts (must add up to the dim)"),
           "axis": Attr("int", 0, doc="the split axis")},
    infer=_split_infer, kernel=_split, outputs=_split_count, traits=LAYOUT_MULTI,
    doc="x cut into parts along axis (views): a tuple of outputs, or the array when there is one part",
))


# -- pad ----------------------------------------------------------------------------------------------

_NUMPY_PAD_MODE = {"reflect": "reflect", "replicate": "edge"}


def _pad_infer(ctx: InferContext, x: TensorType, pads: Sequence[int], mode: str, value: float) -> TensorType:
    rank = x.shape.rank
    if len(pads) % 2 or len(pads) > 2 * rank:
        raise OpTypeError("ATTR-VALUE", f"pad: {len(pads)} pad sizes for a rank-{rank} tensor",
                          "give (left, right) pairs, last dim first, at most two per dim")
    if any(p < 0 for p in pads):
        raise OpTypeError("ATTR-VALUE", f"pad: negative padding {tuple(pads)}", "use slice to crop")
    out = list(x.shape)
    for i in range(len(pads) // 2):
        out[rank - 1 - i] = out[rank - 1 - i] + pads[2 * i] + pads[2 * i + 1]
    return TensorType(ShapeSpec(out), x.dtype)


def _pad(x: np.ndarray, pads: Sequence[int], mode: str = "constant", value: float = 0.0) -> np.ndarray:
    width = [(0, 0)] * x.ndim
    for i in range(len(pads) // 2):
        width[x.ndim - 1 - i] = (pads[2 * i], pads[2 * i + 1])
    if mode != "constant":
        return np.pad(x, width, mode=_NUMPY_PAD_MODE[mode])
    shape = tuple(n + lo + hi for n, (lo, hi) in zip(x.shape, width))
    out = np.full(shape, value, dtype=x.dtype)
    out[tuple(slice(lo, lo + n) for n, (lo, _) in zip(x.shape, width))] = x
    return out


register(OpDef(
    name="pad", inputs=("x",),
    attrs={"pads": Attr("ints", doc="(left, right) pairs, last dim first (torch F.pad order)"),
           "mode": Attr("str", "constant", ("constant", "reflect", "replicate"),
                        doc="fill with value, mirror the edge (excluding it), or repeat the edge element"),
           "value": Attr("float", 0.0, doc="fill value for mode='constant'")},
    infer=_pad_infer, kernel=_pad, traits=LAYOUT,
    params=("input", "pad", "mode", "value"), aliases={"input": "x", "pad": "pads"},  # F.pad's names
    doc="x padded (torch F.pad; reflect follows numpy when a pad exceeds the dim)",
))


# -- broadcast_to / squeeze / unsqueeze / flatten -----------------------------------------------------


def _broadcast_to_infer(ctx: InferContext, x: TensorType, shape: Sequence[Any]) -> TensorType:
    target = [as_dim(d) for d in shape]
    _check_size_attrs("broadcast_to", target)
    offset = len(target) - x.shape.rank
    if offset < 0:
        raise OpTypeError("RANK", f"broadcast_to: cannot broadcast {x.shape} to fewer dims {_fmt(target)}")
    for i, d in enumerate(x.shape):
        if d != 1:
            ctx.require_equal(d, target[offset + i], f"broadcast_to {_fmt(target)}: dim {offset + i}")
    return TensorType(ShapeSpec(target), x.dtype)


register(OpDef(
    name="broadcast_to", inputs=("x",), attrs={"shape": Attr("dims", doc="the target shape")},
    infer=_broadcast_to_infer, kernel=lambda x, shape: np.broadcast_to(x, shape), traits=LAYOUT,
    doc="x broadcast to shape (a read-only view, np.broadcast_to)",
))


def _squeeze_infer(ctx: InferContext, x: TensorType, axis: Any) -> TensorType:
    if axis is None:
        out = []
        for d in x.shape:
            if d == 1:
                continue
            if not d.is_const and not d.is_unknown:
                # numpy would drop it if it were 1 at run time, changing the rank: forbid that instead.
                ctx.require_equal(dmin((d - 1) * (d - 1), 1), 1,
                                  f"squeeze(axis=None) keeps {d}, so {d} must not be 1 at run time "
                                  "(pass axis to squeeze it)")
            out.append(d)
        return TensorType(ShapeSpec(out), x.dtype)
    axes = reduce_axes(ctx, axis, x.shape.rank, "squeeze")
    for a in axes:
        ctx.require_equal(x.shape[a], 1, f"squeeze axis {a}")
    return TensorType(ShapeSpec(d for i, d in enumerate(x.shape) if i not in axes), x.dtype)


register(OpDef(
    name="squeeze", inputs=("x",),
    attrs={"axis": Attr("axes", None, doc="axes of size 1 to drop; None = every dim that is the constant 1")},
    infer=_squeeze_infer, kernel=lambda x, axis: x.squeeze(axis), traits=LAYOUT,
    doc="x without size-1 axes (a view)",
))


def _unsqueeze_infer(ctx: InferContext, x: TensorType, axis: int) -> TensorType:
    a = ctx.axis(axis, x.shape.rank + 1, "unsqueeze axis")
    out = list(x.shape)
    out.insert(a, as_dim(1))
    return TensorType(ShapeSpec(out), x.dtype)


def _unsqueeze(x: np.ndarray, axis: int) -> np.ndarray:
    shape = x.shape
    if axis < 0:
        axis += len(shape) + 1
    return x.reshape((*shape[:axis], 1, *shape[axis:]))  # np.expand_dims, without its overhead


register(OpDef(
    name="unsqueeze", inputs=("x",), attrs={"axis": Attr("int", doc="index of the new axis in the output")},
    infer=_unsqueeze_infer, kernel=_unsqueeze, traits=LAYOUT,
    doc="x with a new size-1 axis (a view)",
))


def _flatten_infer(ctx: InferContext, x: TensorType, start_dim: int, end_dim: int) -> TensorType:
    rank = x.shape.rank
    s = ctx.axis(start_dim, max(rank, 1), "flatten start_dim")
    e = ctx.axis(end_dim, max(rank, 1), "flatten end_dim")
    if rank == 0:
        return TensorType(ShapeSpec([1]), x.dtype)
    if s > e:
        raise OpTypeError("ATTR-VALUE", f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    shape = list(x.shape)
    return TensorType(ShapeSpec([*shape[:s], _prod(shape[s:e + 1]), *shape[e + 1:]]), x.dtype)


def _flatten(x: np.ndarray, start_dim: int = 0, end_dim: int = -1) -> np.ndarray:
    shape = x.shape
    if not shape:
        return x.reshape(1)
    s, e = start_dim % len(shape), end_dim % len(shape)
    return x.reshape((*shape[:s], math.prod(shape[s:e + 1]), *shape[e + 1:]))


register(OpDef(
    name="flatten", inputs=("x",),
    attrs={"start_dim": Attr("int", 0, doc="first dim merged (negative counts from the end)"),
           "end_dim": Attr("int", -1, doc="last dim merged, inclusive (negative counts from the end)")},
    infer=_flatten_infer, kernel=_flatten, traits=LAYOUT,
    params=("input", "start_dim", "end_dim"), aliases={"input": "x"},  # torch.flatten's names
    doc="dims start_dim..end_dim merged into one (torch.flatten; a scalar becomes [1])",
))


# -- take ---------------------------------------------------------------------------------------------


def _take_infer(ctx: InferContext, x: TensorType, indices: TensorType, axis: int | None) -> TensorType:
    if indices.dtype not in ("int32", "int64"):
        raise OpTypeError("DTYPE", f"take: indices must be int32 or int64, got {indices.dtype}",
                          "cast the indices (ms.ops.cast) or use masked_select for a bool mask")
    if axis is None:
        return TensorType(indices.shape, x.dtype)
    a = ctx.axis(axis, x.shape.rank, "take axis")
    shape = list(x.shape)
    return TensorType(ShapeSpec(shape[:a] + list(indices.shape) + shape[a + 1:]), x.dtype)


register(OpDef(
    name="take", inputs=("x", "indices"),
    attrs={"axis": Attr("int", None, doc="the indexed axis; None indexes the flattened x")},
    infer=_take_infer, kernel=lambda x, indices, axis: np.asarray(np.take(x, indices, axis=axis)),
    traits=LAYOUT, doc="np.take: elements of x at indices along axis (out-of-range indices raise)",
))

__all__ = ["SLICE_BEGIN", "SLICE_END", "slice_length"]
