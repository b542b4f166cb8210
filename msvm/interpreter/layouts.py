"""The fast path's conv chains in NCHWc: a conv output that only convolutions read stays blocked.

Why: the direct conv kernel keeps a vector of output channels per pixel, so it stores an NCHWc
output vector by vector where NCHW needs a transpose per tile, and a padded conv reading an input
with a zero border reads it in place where it would otherwise copy every row block into a
zero-bordered scratch first. W1's interpreted convs at batch 16 took 10.4 ms in NCHW and 8.6 in
the NCHWc layout the JIT gives its conv chains (each conv alone, ``conv_nchwc``'s kernel both ways).

Which registers (a fixed point, like the JIT's ``conv_layouts``): the output of a conv unit — a conv,
or the conv + add + ReLU chain ``fusion`` runs as one — stays NCHWc, with a zero border as wide as
its readers' padding, while every reader is a conv unit of the same JIT region (or of none) that reads
it as its input, or as the residual of an output that is NCHWc too (a residual is added in the
output's layout), and the unit's own residual, if any, is NCHWc. Only whole channel blocks of a float
dtype, groups 1, a static padding. Nothing else ever sees such a register: a compiled region's
inputs and outputs, the function's results, the traced twin and the stepping debugger stay NCHW.

At run time each conv of a chain asks its site which kernel these shapes take (the cost model's
pick, as for any call); one that takes NCHWc operands (``with_layouts``: ``nchwc_direct``) runs on
them as they are, any other gets NCHW copies and its output is blocked again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ops.conv import conv_padding
from ..ops.registry import TensorType
from ..verifier import FunctionInfo
from .lowering import Step, entry_evaluable, is_call


@dataclass(frozen=True)
class Borders:
    """A conv unit's NCHWc operands: the border (pixels) of its input, residual and output, or None
    for NCHW."""

    x: int | None = None
    residual: int | None = None
    out: int | None = None


@dataclass(frozen=True)
class _Conv:
    dst: int  # the unit's result
    x: int
    skip: int | None  # the residual it adds
    pad: int | None  # its widest padding (None: not known before run time)
    region: Any


def conv_borders(info: FunctionInfo, units: Sequence[list[Step]], region_of: Mapping[int, Any]
                 ) -> dict[int, Borders]:
    """The NCHWc operands of the conv units among ``units`` (by position) that have any."""
    convs = {k: conv for k, unit in enumerate(units) if (conv := _conv(unit, info, region_of)) is not None}
    uses: dict[int, list[tuple[int, str]]] = {}
    for k, unit in enumerate(units):
        conv = convs.get(k)
        if conv is None:
            reads = [(r, "other") for step in unit for r in step.ins.reads()]
        else:  # the chain's own intermediates are no unit's result: their reads do not matter
            reads = [(r, "x" if i == 0 else "other") for i, r in enumerate(unit[0].ins["srcs"])]
            reads += [(conv.skip, "residual")] if conv.skip is not None else []
        for r, role in reads:
            uses.setdefault(r, []).append((k, role))
    writers = {c.dst: k for k, c in convs.items() if _blockable(info.types[c.dst])}
    blocked = set(writers)
    while True:
        keep = {r for r in blocked if _stays(r, convs[writers[r]], uses.get(r, []), convs, blocked)}
        if keep == blocked:
            break
        blocked = keep
    border = {r: max([convs[k].pad for k, role in uses[r] if role == "x"], default=0) for r in blocked}
    out = {}
    for k, c in convs.items():
        borders = Borders(border.get(c.x), border.get(c.skip), border.get(c.dst))
        if borders != Borders():
            out[k] = borders
    return out


def _conv(unit: list[Step], info: FunctionInfo, region_of: Mapping[int, Any]) -> _Conv | None:
    """A conv unit whose operands could be NCHWc, as ``_Conv`` (None for any other unit)."""
    producer = unit[0]
    if not is_call(producer, "conv2d", info) or producer.dispatcher is None or len(producer.ins["dsts"]) != 1:
        return None
    dst = unit[-1].ins["dsts"][0]
    if not entry_evaluable(info.types[dst], info) or int(producer.dispatcher.static.get("groups", 1)) != 1:
        return None
    add = next((s for s in unit[1:] if s.ins["op"] == "add"), None)
    skip = None if add is None else next(r for r in add.ins["srcs"] if r != producer.ins["dsts"][0])
    return _Conv(dst, producer.ins["srcs"][0], skip, _padding(producer, info),
                 region_of.get(producer.address))


def _padding(step: Step, info: FunctionInfo) -> int | None:
    """The widest padding of a conv site, where the weight's shape is static."""
    weight = info.types[step.ins["srcs"][1]]
    if not isinstance(weight, TensorType) or len(weight.shape) != 4 or not weight.shape.is_static:
        return None
    attrs = step.dispatcher.static  # normalised by the verifier: pairs, or "same" / "valid"
    kh, kw = weight.shape.evaluate({})[2:]
    pads = conv_padding(attrs.get("padding", (0, 0)), (kh, kw), attrs.get("dilation", (1, 1)))
    return max(max(p) for p in pads)


def _blockable(t: Any) -> bool:
    """A batched float tensor whose channels fill whole NCHWc blocks."""
    from ..native.irhelpers import LANES  # not at import: interpreting needs no llvmlite (nor kernels)

    lanes = LANES.get(np.dtype(t.dtype).name) if isinstance(t, TensorType) else None
    return lanes is not None and len(t.shape) == 4 and t.shape[1].is_const and t.shape[1].value % lanes == 0


def _stays(r: int, writer: _Conv, uses: list[tuple[int, str]], convs: Mapping[int, _Conv], blocked: set[int]
           ) -> bool:
    """May ``r`` stay NCHWc, given the registers ``blocked`` so far? (Not if nothing reads it.)"""
    if not uses or (writer.skip is not None and writer.skip not in blocked):
        return False
    for k, role in uses:
        reader = convs.get(k)
        if reader is None or reader.region != writer.region:
            return False
        if role == "x" and reader.pad is None:
            return False
        if role == "residual" and reader.dst not in blocked:
            return False
        if role == "other":
            return False
    return True


def in_layouts(plain: Callable[..., Any], site: Any, relu: bool, borders: Borders) -> Callable[..., Any]:
    """A conv unit (``plain``: its NCHW form, ``fusion.with_epilogue``) on operands in the layouts
    ``borders`` gives them, its result in ``borders.out``'s (every unit of a chain keeps its plan, so
    its operands always arrive as planned)."""
    from ..kernels.conv_nchwc import from_nchwc, nchw_shape, to_nchwc

    xb, rb, ob = borders.x, borders.residual, borders.out

    def run(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
            residual: np.ndarray | None = None) -> np.ndarray:
        shapes = (nchw_shape(x, xb), w.shape) + (() if b is None else (b.shape,))

        def stand_ins() -> list[np.ndarray]:  # to decide on (what counts is shapes and dtypes): no copy
            return [x if xb is None else np.zeros(shapes[0], x.dtype), w] + ([] if b is None else [b])

        choice = site.choose_shapes(shapes, stand_ins)  # once per shape
        native = getattr(choice.run, "with_layouts", None)
        if native is not None:
            out = native(x, w, b, residual=residual, relu=relu, x_border=xb,
                         res_border=None if residual is None else rb, out_border=ob)
            if out is not None:
                return out
        if residual is not None and rb is not None:
            residual = from_nchwc(residual, rb)
        out = plain(x if xb is None else from_nchwc(x, xb), w, *([] if b is None else [b]), residual=residual)
        return out if ob is None else to_nchwc(out, ob)

    return run
