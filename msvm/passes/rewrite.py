"""The rewrite pass: a verified module in, the same module with its known patterns fused out.

It runs once per prepared program (``Program``), after verification and before the interpreter and
the JIT, so both executors run the rewritten instructions. Patterns (``patterns.PATTERNS``) are tried
at every instruction from the end of each block back, so a larger pattern claims its instructions
before a smaller one inside it could; a match replaces its instructions by one or a few ``OP_CALL``s
at the position of its last one (which keeps its destination register, so nothing downstream
changes) and only ever removes instructions whose results nothing outside the match reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..bytecode.module import Block, Function, Instruction, Module, make_instruction
from ..ops.registry import TensorType
from ..verifier import FunctionInfo, ModuleInfo, verify_module


@dataclass(frozen=True)
class Rewrite:
    """One match: which pattern, in which function, what it replaced and with what."""

    pattern: str
    function: str
    op: str  # the fused op the match runs
    addresses: tuple[int, ...]  # the instructions it replaced, in the module as written
    at: int  # the fused op's address in the rewritten module

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Tmp:
    """A source of a new call that is the result of an earlier call of the same match."""

    index: int


@dataclass(frozen=True)
class Call:
    op: str
    srcs: tuple[int | Tmp, ...]
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Match:
    """What a pattern found: the instructions it replaces (indices in the anchor's block, the anchor
    among them) and the calls that replace them, the last one writing the anchor's register."""

    removed: frozenset[int]
    calls: tuple[Call, ...]


class Graph:
    """Use-def facts of one verified function, and the small queries patterns are written in."""

    def __init__(self, module: Module, info: FunctionInfo) -> None:
        self.module = module
        self.info = info
        self.fn = info.function
        self.defs: dict[int, tuple[int, int]] = {}
        self.readers: dict[int, list[tuple[int, int]]] = {}
        for b, i, ins in self.fn.instructions():
            for r in ins.writes():
                self.defs[r] = (b, i)
            if ins.name != "TENSOR_FREE":  # a free ends a lifetime; it is moved, never counted as a use
                for r in ins.reads():
                    self.readers.setdefault(r, []).append((b, i))
        self.block = 0  # the block being matched: ``inner`` only looks inside it

    def ins(self, index: int) -> Instruction:
        return self.fn.blocks[self.block].instructions[index]

    def type(self, reg: int) -> TensorType | None:
        t = self.info.types[reg]
        return t if isinstance(t, TensorType) else None

    def producer(self, reg: int, *ops: str) -> tuple[int, Instruction] | None:
        """(index, instruction) of the OP_CALL of one of ``ops`` in this block that defines ``reg``."""
        where = self.defs.get(reg)
        if where is None or where[0] != self.block:
            return None
        ins = self.ins(where[1])
        if ins.name != "OP_CALL" or ins["op"] not in ops or len(ins["dsts"]) != 1:
            return None
        return where[1], ins

    def only_read_by(self, reg: int, indices: Iterable[int]) -> bool:
        """Every reader of ``reg`` is one of ``indices`` of this block (so the match may drop it)."""
        inside = {(self.block, i) for i in indices}
        return all(r in inside for r in self.readers.get(reg, []))

    def constant(self, reg: int) -> float | None:
        """The value of a one-element float constant (a literal like ``0.125``), else None."""
        where = self.defs.get(reg)
        if where is None:
            return None
        ins = self.fn.blocks[where[0]].instructions[where[1]]
        if ins.name != "LOAD_CONST":
            return None
        value = self.module.constants[ins["const"]]
        if value.size != 1 or value.dtype.kind != "f":
            return None
        return float(value.reshape(()))

    def array(self, reg: int) -> np.ndarray | None:
        """The constant pool entry ``reg`` is loaded from, else None."""
        where = self.defs.get(reg)
        if where is None:
            return None
        ins = self.fn.blocks[where[0]].instructions[where[1]]
        return self.module.constants[ins["const"]] if ins.name == "LOAD_CONST" else None


Pattern = Callable[[Graph, int], Match | None]


def rewrite_module(module: Module, info: ModuleInfo,
                   patterns: Iterable[tuple[str, Pattern]]) -> tuple[Module, ModuleInfo, list[Rewrite]]:
    """``module`` with every match of ``patterns`` applied, its verified info, and what matched.

    Without a match the module and info come back as they are; otherwise the rewritten module is
    verified again, so the executors run on facts proved about the instructions they run.
    """
    patterns = list(patterns)
    functions: list[Function] = []
    found: list[tuple[str, str, str, tuple[int, ...], int, int]] = []
    for fn in module.functions:
        finfo = info.functions[fn.name]
        graph = Graph(module, finfo)
        blocks, num_regs = [], fn.num_regs
        for b, block in enumerate(fn.blocks):
            graph.block = b
            matches: dict[int, tuple[str, Match]] = {}
            claimed: set[int] = set()
            for index in range(len(block.instructions) - 1, -1, -1):
                if index in claimed:
                    continue
                for name, pattern in patterns:
                    match = pattern(graph, index)
                    if match is not None and not (match.removed & claimed):
                        matches[index] = (name, match)
                        claimed |= match.removed
                        break
            instructions, num_regs = _apply(graph, matches, num_regs, found)
            blocks.append(Block(instructions))
        functions.append(dataclasses.replace(fn, blocks=blocks, num_regs=num_regs))
    if not found:
        return module, info, []
    rewritten = dataclasses.replace(module, functions=functions)  # constants and source info shared
    new_info = verify_module(rewritten)
    rewrites = [Rewrite(name, fname, op, addresses, new_info.functions[fname].address(b, i))
                for name, fname, op, addresses, b, i in found]
    return rewritten, new_info, rewrites


def _apply(graph: Graph, matches: dict[int, tuple[str, Match]], num_regs: int,
           found: list) -> tuple[list[Instruction], int]:
    """The block's instructions with ``matches`` applied (a free of a match's input moves after the
    fused op that now reads it; a free of a removed register goes with it, and so does a constant
    only removed instructions read: the literals of the spelling)."""
    fn, b, block = graph.fn, graph.block, graph.fn.blocks[graph.block]
    if not matches:
        return list(block.instructions), num_regs
    anchors_reading: dict[int, int] = {}  # register -> index of the last anchor whose calls read it
    for anchor, (_, match) in matches.items():
        for call in match.calls:
            for s in call.srcs:
                if isinstance(s, int):
                    anchors_reading[s] = max(anchors_reading.get(s, -1), anchor)
    removed = set().union(*(m.removed for _, m in matches.values()))
    removed |= {i for i, ins in enumerate(block.instructions) if ins.name == "LOAD_CONST"
                and ins["dst"] not in anchors_reading and graph.readers.get(ins["dst"])
                and graph.only_read_by(ins["dst"], removed)}
    dropped_regs = {r for i in removed for r in block.instructions[i].writes()}
    out: list[Instruction] = []
    late_frees: dict[int, list[Instruction]] = {}  # new-call position -> frees that must follow it
    for index, ins in enumerate(block.instructions):
        if ins.name == "TENSOR_FREE":
            reg = ins["src"]
            if reg in dropped_regs:
                continue
            if anchors_reading.get(reg, -1) > index:
                late_frees.setdefault(anchors_reading[reg], []).append(ins)
                continue
        if index in matches:
            name, match = matches[index]
            regs: list[int] = []
            for k, call in enumerate(match.calls):
                last = k == len(match.calls) - 1
                dst = ins["dsts"][0] if last else num_regs
                if not last:
                    num_regs += 1
                srcs = tuple(regs[s.index] if isinstance(s, Tmp) else s for s in call.srcs)
                out.append(make_instruction("OP_CALL", call.op, (dst,), srcs, call.attrs, loc=ins.loc))
                regs.append(dst)
            addresses = tuple(graph.info.address(b, i) for i in sorted(match.removed))
            found.append((name, fn.name, match.calls[-1].op, addresses, b, len(out) - 1))
            out.extend(late_frees.pop(index, []))
        elif index not in removed:
            out.append(ins)
    return out, num_regs
