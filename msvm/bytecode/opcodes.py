"""The MS-BC opcode table: the single source of truth for every instruction.

One row per opcode, Lua-style: number, name, operand kinds and a one-line register-transfer
meaning. The encoder, decoder, assembler, disassembler, the verifier's operand checks and
``docs/bytecode.md`` all walk these rows; nothing else lists opcodes. Properties that passes test by
name (is a phi, ends a block, binds a parameter) are named sets beside the table, as CPython's
``opcode.hasjrel`` is, and the operators of SCALAR_OP and CMP have one row each with every meaning
the layers above need: integer (folding), ``Dim`` (shape inference) and Python source (the
interpreter's lowering).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from ..shapes import Dim, ceildiv, dmax, dmin


class Kind(Enum):
    """Operand kinds: how an operand is spelled, encoded and checked."""

    DST = "dst"  # register written by the instruction
    SRC = "src"  # register read by the instruction
    DSTS = "dsts"  # tuple of registers written
    SRCS = "srcs"  # tuple of registers read
    IMM = "imm"  # signed 64-bit integer immediate
    SHAPE = "shape"  # symbolic shape spec, e.g. [N, 3, H*2, ?]
    DTYPE = "dtype"  # element type name, e.g. float32
    DEVICE = "device"  # device name, e.g. cpu
    CONST = "const"  # index into the module's constant pool
    SYMBOL = "symbol"  # a shape-symbol name
    SCALAR_OP = "sop"  # integer operator name of SCALAR_OP
    PRED = "pred"  # comparison predicate of CMP
    OP = "op"  # tensor-op name in the op registry
    ATTRS = "attrs"  # {key=value, ...}; values may name scalar registers
    BLOCK = "block"  # basic-block index in the same function
    PHI = "phi"  # [(block, register), ...] incoming values


@dataclass(frozen=True)
class Operand:
    name: str
    kind: Kind


@dataclass(frozen=True)
class OpcodeInfo:
    number: int
    name: str
    operands: tuple[Operand, ...]
    doc: str

    @property
    def is_terminator(self) -> bool:
        return self.name in TERMINATORS

    def index(self, operand_name: str) -> int:
        for i, operand in enumerate(self.operands):
            if operand.name == operand_name:
                return i
        raise KeyError(f"{self.name} has no operand {operand_name!r}")


def _row(number: int, name: str, operands: str, doc: str) -> OpcodeInfo:
    parsed = []
    for item in operands.split():
        op_name, kind = item.split(":")
        parsed.append(Operand(op_name, Kind(kind)))
    return OpcodeInfo(number, name, tuple(parsed), doc)


# fmt: off
OPCODES: tuple[OpcodeInfo, ...] = (
    _row(1,  "TENSOR_CREATE",   "dst:dst arg:imm shape:shape dtype:dtype device:device",
         "R[dst] := input #arg checked against shape/dtype (binding its symbols); arg -1: zeros of shape"),
    _row(2,  "TENSOR_ALLOC",    "dst:dst dims:srcs dtype:dtype device:device",
         "R[dst] := zero-filled tensor whose dims are read from scalar registers dims"),
    _row(3,  "TENSOR_FREE",     "src:src",
         "end of R[src]'s lifetime; its buffer may be reused and R[src] must not be read again"),
    _row(4,  "TENSOR_RESIZE",   "dst:dst src:src dims:srcs",
         "R[dst] := R[src] reshaped to the dims held in scalar registers (one may hold -1)"),
    _row(5,  "TENSOR_PHI",      "dst:dst incoming:phi",
         "R[dst] := the tensor from the predecessor block control came from"),
    _row(6,  "LOAD_CONST",      "dst:dst const:const",
         "R[dst] := constant pool entry #const (weights, literals)"),
    _row(7,  "SHAPE_PROPAGATE", "dst:dst src:src dim:imm",
         "R[dst] := R[src].shape[dim], a scalar bound to that dimension's symbolic size"),
    _row(8,  "SCALAR_CONST",    "dst:dst value:imm",
         "R[dst] := value, an int64 shape scalar"),
    _row(9,  "SCALAR_ARG",      "dst:dst arg:imm symbol:symbol",
         "R[dst] := scalar input #arg (an ms.mutable int), bound to symbol"),
    _row(10, "SCALAR_OP",       "dst:dst op:sop a:src b:src",
         "R[dst] := R[a] op R[b] on int64 scalars, keeping the symbolic binding (symbolic_mul)"),
    _row(11, "SCALAR_PHI",      "dst:dst incoming:phi",
         "R[dst] := the scalar from the predecessor block control came from"),
    _row(12, "CMP",             "dst:dst pred:pred a:src b:src",
         "R[dst] := R[a] pred R[b], a boolean"),
    _row(13, "OP_CALL",         "op:op dsts:dsts srcs:srcs attrs:attrs",
         "R[dsts...] := op(R[srcs...], attrs); attrs may name scalar registers"),
    _row(14, "BR",              "cond:src then:block else:block",
         "if R[cond] goto then else goto else"),
    _row(15, "JMP",             "target:block",
         "goto target"),
    _row(16, "RET",             "srcs:srcs",
         "return R[srcs...] to the caller"),
)
# fmt: on

BY_NAME: dict[str, OpcodeInfo] = {info.name: info for info in OPCODES}
BY_NUMBER: dict[int, OpcodeInfo] = {info.number: info for info in OPCODES}

# Opcode properties, by name.
TERMINATORS = frozenset({"BR", "JMP", "RET"})  # end a block; exactly one, last
PHIS = frozenset(info.name for info in OPCODES if any(o.kind is Kind.PHI for o in info.operands))
PARAM_BINDERS = ("TENSOR_CREATE", "SCALAR_ARG")  # bind parameter #arg (-1: not an input)
CONSTANTS = frozenset({"LOAD_CONST", "SCALAR_CONST"})  # no register inputs: pure and cheap to recompute


@dataclass(frozen=True)
class ScalarOpInfo:
    """One operator of SCALAR_OP: its meaning on Python ints, on symbolic ``Dim`` values and as Python
    source over two register names. ``infix`` is the Python operator that spells it in ``@ms.jit``
    source (``a // b``), if one does; ``divides`` marks the operators a zero ``b`` makes an error."""

    name: str
    ints: Callable[[int, int], int]
    dims: Callable[[Dim, Dim], Dim]
    source: str  # a format string over {a} and {b}
    infix: str | None = None
    divides: bool = False

    def python(self, a: str, b: str) -> str:
        """The Python expression computing this operator on the values named ``a`` and ``b``."""
        return self.source.format(a=a, b=b)


def _ceildiv(a: int, b: int) -> int:
    return -(-a // b)


# fmt: off
_SCALAR_OP_ROWS = (
    ScalarOpInfo("add",      operator.add,      operator.add,      "{a} + {b}",  "+"),
    ScalarOpInfo("sub",      operator.sub,      operator.sub,      "{a} - {b}",  "-"),
    ScalarOpInfo("mul",      operator.mul,      operator.mul,      "{a} * {b}",  "*"),
    ScalarOpInfo("floordiv", operator.floordiv, operator.floordiv, "{a} // {b}", "//", divides=True),
    ScalarOpInfo("ceildiv",  _ceildiv,          ceildiv,           "-(-{a} // {b})", divides=True),
    ScalarOpInfo("mod",      operator.mod,      operator.mod,      "{a} % {b}",  "%", divides=True),
    # Spelled as a conditional, not min()/max(): generated code then looks up no builtin.
    ScalarOpInfo("min",      min,               dmin,              "{a} if {a} < {b} else {b}"),
    ScalarOpInfo("max",      max,               dmax,              "{a} if {a} > {b} else {b}"),
)
# fmt: on
SCALAR_OP_INFO: dict[str, ScalarOpInfo] = {row.name: row for row in _SCALAR_OP_ROWS}
SCALAR_OPS: tuple[str, ...] = tuple(SCALAR_OP_INFO)


@dataclass(frozen=True)
class PredicateInfo:
    """One predicate of CMP: its meaning on Python ints and its Python comparison operator."""

    name: str
    ints: Callable[[int, int], bool]
    infix: str


PREDICATE_INFO: dict[str, PredicateInfo] = {
    row.name: row
    for row in (
        PredicateInfo("eq", operator.eq, "=="),
        PredicateInfo("ne", operator.ne, "!="),
        PredicateInfo("lt", operator.lt, "<"),
        PredicateInfo("le", operator.le, "<="),
        PredicateInfo("gt", operator.gt, ">"),
        PredicateInfo("ge", operator.ge, ">="),
    )
}
PREDICATES: tuple[str, ...] = tuple(PREDICATE_INFO)
DTYPES: tuple[str, ...] = ("float16", "float32", "float64", "int32", "int64", "bool")
DEVICES: tuple[str, ...] = ("cpu",)
