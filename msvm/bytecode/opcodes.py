"""The MS-BC opcode table: the single source of truth for every instruction.

One row per opcode, Lua-style: number, name, operand kinds and a one-line register-transfer
meaning. The encoder, decoder, assembler, disassembler, the verifier's operand checks and
``docs/bytecode.md`` all walk these rows; nothing else lists opcodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


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

TERMINATORS = frozenset({"BR", "JMP", "RET"})
BY_NAME: dict[str, OpcodeInfo] = {info.name: info for info in OPCODES}
BY_NUMBER: dict[int, OpcodeInfo] = {info.number: info for info in OPCODES}

SCALAR_OPS: tuple[str, ...] = ("add", "sub", "mul", "floordiv", "ceildiv", "mod", "min", "max")
PREDICATES: tuple[str, ...] = ("eq", "ne", "lt", "le", "gt", "ge")
DTYPES: tuple[str, ...] = ("float16", "float32", "float64", "int32", "int64", "bool")
DEVICES: tuple[str, ...] = ("cpu",)
