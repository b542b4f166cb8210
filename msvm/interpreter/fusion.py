"""The fast path's one fusion: a conv2d or linear and the residual add and ReLU that alone read it.

A ResNet block interpreted op by op writes its conv's output, reads it back to add the skip
connection, and again for the ReLU: W1 at batch 16 spends 1.8 of its 15–17 ms in those passes. The
direct conv kernel and the job pool's GEMM can apply them while they store each tile
(``with_epilogue``), so here the instructions ``c = conv2d(…)``, ``s = add(c, r)`` (either operand
order), ``z = relu(s)`` — or just the add, or just the ReLU — become one line, ``z = F(…, residual=r)``.

Only where nothing can tell: ``c`` (and ``s``) have no other reader, the skip has exactly the
product's shape and dtype (no broadcasting: the add cannot fail), and the instructions are next to
each other, in one JIT region or in none. The fused kernel asks the producer's site which kernel it
would run for these inputs; when that kernel has no epilogue or declines (another variant won,
operands it does not take), it runs it and then the add and ReLU sites' own kernels, so the result
is what the three lines give. The traced twin and the stepping debugger run the original lines:
every instruction keeps its own event and register there.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ..ops.registry import TensorType
from ..verifier import FunctionInfo
from .layouts import Borders, conv_borders, in_layouts
from .lowering import Step, is_call, reg

PRODUCERS = ("conv2d", "linear")  # ops whose kernels may take an epilogue


def fuse_epilogues(info: FunctionInfo, steps: list[Step], regions: Sequence[Any] = ()) -> list[Step]:
    """``steps`` with every fusable producer → [add] → [relu] run as one step, and conv chains whose
    tensors stay NCHWc (``layouts``) on kernels that take that layout (the others unchanged)."""
    readers = Counter(r for _, _, ins in info.function.instructions() for r in ins.reads())
    region_of = {a: i for i, region in enumerate(regions) for a in region.addresses}
    units: list[list[Step]] = []  # a fused chain, or one step
    i = 0
    while i < len(steps):
        chain = _chain(steps, i, info, readers)
        if not (chain and len({region_of.get(s.address) for s in chain}) == 1):
            chain = [steps[i]]
        units.append(chain)
        i += len(chain)
    borders = conv_borders(info, units, region_of)
    return [_fused(unit, borders.get(k)) if len(unit) > 1 or k in borders else unit[0]
            for k, unit in enumerate(units)]


def _chain(steps: list[Step], i: int, info: FunctionInfo, readers: Counter) -> list[Step]:
    """The producer at ``steps[i]`` and the add and/or relu fused into it ([] when there is none)."""
    producer = steps[i]
    if not any(is_call(producer, op, info) for op in PRODUCERS) or len(producer.ins["dsts"]) != 1:
        return []
    value, chain = producer.ins["dsts"][0], [producer]
    if producer.runtime_sized:  # its dispatcher checks its size per call: keep each kernel's check
        return []
    for op in ("add", "relu"):
        if len(steps) <= i + len(chain):
            break
        step = steps[i + len(chain)]
        srcs = step.ins["srcs"] if is_call(step, op, info) and not step.runtime_sized else ()
        if value not in srcs or readers[value] != 1 or step.block != producer.block:
            continue
        if op == "add" and not (len(srcs) == 2 and srcs[0] != srcs[1] and _same_type(info, *srcs)):
            continue
        chain.append(step)
        value = step.ins["dsts"][0]
    return chain if len(chain) > 1 else []


def _same_type(info: FunctionInfo, a: int, b: int) -> bool:
    """Registers whose values have one dtype and one shape, with no dim unknown until run time."""
    ta, tb = info.types[a], info.types[b]
    return (isinstance(ta, TensorType) and isinstance(tb, TensorType) and ta.dtype == tb.dtype
            and ta.shape == tb.shape and not any(d.is_unknown for d in ta.shape))


def _fused(chain: list[Step], borders: Borders | None = None) -> Step:
    producer, rest = chain[0], chain[1:]
    add = next((s for s in rest if s.ins["op"] == "add"), None)
    relu = next((s for s in rest if s.ins["op"] == "relu"), None)
    skip = None
    if add is not None:
        skip = next(r for r in add.ins["srcs"] if r != producer.ins["dsts"][0])
    kernel = with_epilogue(
        producer.names[f"K{producer.address}"], producer.dispatcher,
        add=None if add is None else (add.names[f"K{add.address}"], add.ins["srcs"].index(skip)),
        relu=None if relu is None else relu.names[f"K{relu.address}"],
    )
    if borders is not None:
        kernel = in_layouts(kernel, producer.dispatcher, relu is not None, borders)
    name = f"F{producer.address}"
    args = [reg(r) for r in producer.ins["srcs"]] + ([] if skip is None else [f"residual={reg(skip)}"])
    gone = {s.ins["dsts"][0] for s in chain[:-1]}  # never assigned now
    release = sorted({r for s in chain for r in s.release} - gone)
    return replace(producer, line=f"{reg(chain[-1].ins['dsts'][0])} = {name}({', '.join(args)})",
                   names={name: kernel}, release=tuple(release))


def with_epilogue(producer: Callable[..., Any], dispatcher: Any, *,
                  add: tuple[Callable[..., Any], int] | None,
                  relu: Callable[..., Any] | None) -> Callable[..., Any]:
    """``relu(add(producer(x, w, b), residual))`` (either step optional; ``add[1]``: the residual's
    operand position) in the producer's stores when the kernel for these inputs takes an epilogue."""

    def fused(*arrays: Any, residual: Any = None) -> Any:
        run = dispatcher.choose(*arrays).run if dispatcher is not None else producer
        native = getattr(run, "with_epilogue", None)
        if native is not None:
            out = native(*arrays, residual=residual, relu=relu is not None)
            if out is not None:
                return out
        out = run(*arrays)
        if add is not None:
            out = add[0](residual, out) if add[1] == 0 else add[0](out, residual)
        return out if relu is None else relu(out)

    return fused
