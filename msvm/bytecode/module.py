"""The in-memory MS-BC module: module → functions → basic blocks → instructions, plus constants.

This is plain data. Operands are stored positionally in the order of the opcode table, so that
every pass can walk them generically by kind; nothing here checks meaning (that is the verifier).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import SourceLoc, format_address
from .opcodes import BY_NAME, PARAM_BINDERS, Kind, OpcodeInfo

# Debug locations: the line and the 1-based column are at most this (Python's own limit on line
# numbers), in the text and the binary format alike, so every location reads back from either.
MAX_LOCATION = (1 << 31) - 1
# Limits both formats and the verifier enforce, so that what one accepts the others accept and a
# hostile file cannot make a loader allocate per register, per dimension or per nesting level.
MAX_REGS = 1 << 20  # registers per function
MAX_RANK = 32  # dimensions of a constant
MAX_ATTR_DEPTH = 16  # tuples inside tuples in attribute values


@dataclass(frozen=True)
class RegRef:
    """A scalar register named inside OP_CALL attributes (dynamic slice bounds, resize sizes)."""

    index: int

    def __str__(self) -> str:
        return f"R{self.index}"


AttrValue = Any  # None | bool | int | float | str | RegRef | tuple[AttrValue, ...]


def attr_registers(value: AttrValue) -> Iterator[int]:
    """Registers named anywhere inside an attribute value."""
    if isinstance(value, RegRef):
        yield value.index
    elif isinstance(value, tuple):
        for item in value:
            yield from attr_registers(item)


@dataclass(eq=False)
class Instruction:
    opcode: OpcodeInfo
    args: tuple
    loc: SourceLoc | None = None

    def __getitem__(self, operand_name: str) -> Any:
        return self.args[self.opcode.index(operand_name)]

    @property
    def name(self) -> str:
        return self.opcode.name

    @property
    def label(self) -> str:
        """How errors and reports name the instruction: ``OP_CALL relu`` for an op call, else its opcode."""
        return f"{self.name} {self['op']}" if self.name == "OP_CALL" else self.name

    def writes(self) -> list[int]:
        out: list[int] = []
        for operand, value in zip(self.opcode.operands, self.args):
            if operand.kind is Kind.DST:
                out.append(value)
            elif operand.kind is Kind.DSTS:
                out.extend(value)
        return out

    def reads(self) -> list[int]:
        """Registers read, in operand order (phi inputs and attribute registers included)."""
        out: list[int] = []
        for operand, value in zip(self.opcode.operands, self.args):
            if operand.kind is Kind.SRC:
                out.append(value)
            elif operand.kind is Kind.SRCS:
                out.extend(value)
            elif operand.kind is Kind.PHI:
                out.extend(reg for _, reg in value)
            elif operand.kind is Kind.ATTRS:
                for v in value.values():
                    out.extend(attr_registers(v))
        return out

    def successors(self) -> list[int]:
        return [v for o, v in zip(self.opcode.operands, self.args) if o.kind is Kind.BLOCK]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Instruction):
            return NotImplemented
        return self.opcode is other.opcode and self.loc == other.loc and _same(self.args, other.args)


def _same(a: Any, b: Any) -> bool:
    """Equality that also distinguishes 1 from 1.0 and True (round trips must keep the type)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) and a != a:
        return b != b
    return a == b


@dataclass(eq=True)
class Block:
    instructions: list[Instruction] = field(default_factory=list)


@dataclass(eq=True)
class Function:
    """A function: its parameters are bound by TENSOR_CREATE/SCALAR_ARG ``arg`` operands.

    ``names`` maps a register to the Python variable the frontend assigned it to (``q = x @ w``), so
    views can say ``R7  q``; it is debug information like source locations, and never changes meaning.
    """

    name: str
    params: tuple[str, ...]
    num_regs: int
    blocks: list[Block] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=dict)

    def instructions(self) -> Iterator[tuple[int, int, Instruction]]:
        """(block index, index in block, instruction) in layout order."""
        for bi, block in enumerate(self.blocks):
            for ii, ins in enumerate(block.instructions):
                yield bi, ii, ins

    @property
    def size(self) -> int:
        return sum(len(b.instructions) for b in self.blocks)

    def parameter_registers(self) -> dict[int, str]:
        """Register -> the parameter it binds, for each TENSOR_CREATE/SCALAR_ARG whose input is in range."""
        out: dict[int, str] = {}
        for _, _, ins in self.instructions():
            if ins.name in PARAM_BINDERS:
                arg = ins["arg"]
                if type(arg) is int and 0 <= arg < len(self.params):
                    out[ins["dst"]] = self.params[arg]
        return out

    def variable_names(self) -> dict[int, str]:
        """Register -> the Python variable it holds: its parameter, else the name the frontend recorded."""
        return {**self.names, **self.parameter_registers()}


@dataclass(eq=False)
class Module:
    """A unit of MS-BC: functions plus the constant pool they share.

    Addresses are module-global instruction indices: functions, then blocks, then instructions,
    in layout order. ``msvm://bc/0x002a`` is the 43rd instruction of the module.
    """

    name: str = "module"
    functions: list[Function] = field(default_factory=list)
    constants: list[np.ndarray] = field(default_factory=list)

    def function(self, name: str) -> Function:
        for fn in self.functions:
            if fn.name == name:
                return fn
        raise KeyError(f"module {self.name!r} has no function {name!r}")

    def function_base(self, fn: Function) -> int:
        """The address of the first instruction of ``fn``."""
        base = 0
        for other in self.functions:
            if other is fn:
                return base
            base += other.size
        raise KeyError(fn.name)

    def addresses(self) -> Iterator[tuple[int, Function, int, int, Instruction]]:
        """(address, function, block index, index in block, instruction) for every instruction."""
        address = 0
        for fn in self.functions:
            for bi, ii, ins in fn.instructions():
                yield address, fn, bi, ii, ins
                address += 1

    def locate(self, address: int) -> tuple[Function, int, int, Instruction]:
        for addr, fn, bi, ii, ins in self.addresses():
            if addr == address:
                return fn, bi, ii, ins
        raise KeyError(format_address(address))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Module):
            return NotImplemented
        return (
            self.name == other.name
            and self.functions == other.functions
            and len(self.constants) == len(other.constants)
            and all(
                a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
                for a, b in zip(self.constants, other.constants)
            )
        )

    def __str__(self) -> str:
        from .text import disassemble

        return disassemble(self)


def make_instruction(name: str, *args: Any, loc: SourceLoc | None = None) -> Instruction:
    """Build an instruction by opcode name, normalising sequences to tuples."""
    info = BY_NAME[name]
    if len(args) != len(info.operands):
        raise TypeError(f"{name} takes {len(info.operands)} operands, got {len(args)}")
    fixed = []
    for operand, value in zip(info.operands, args):
        if operand.kind in (Kind.DSTS, Kind.SRCS):
            value = tuple(value)
        elif operand.kind is Kind.PHI:
            value = tuple((b, r) for b, r in value)
        elif operand.kind is Kind.ATTRS:
            value = dict(value)
        fixed.append(value)
    return Instruction(info, tuple(fixed), loc)
