"""The binary MS-BC format (``.msbc``): a compact, deterministic, safe-to-load encoding of a Module.

Why a hand-written format: loading a file must never be able to run code (no pickle), every
length and index must be checked against the bytes that are actually there before anything is
allocated, and save → load → save must be byte-identical so files can be hashed and cached.
Instruction operands are encoded *generically*: the encoder and decoder walk the opcode table's
operand kinds and call one function per :class:`~msvm.bytecode.opcodes.Kind`, so adding an
opcode never touches this file.

Layout
======

All fixed-width integers are little-endian. ``uvar`` is an unsigned LEB128 varint (at most 10
bytes, value < 2**64, minimal encoding required); ``svar`` is a signed LEB128 varint (value in
the signed 64-bit range, minimal encoding required). ``str`` is a ``uvar`` index into the string
table. Counts of elements that each take at least ``k`` bytes are rejected when
``count * k`` exceeds the bytes left in the section.

File:

| field | encoding | notes |
| --- | --- | --- |
| magic | 4 bytes | ``MSBC`` |
| version | u16 | ``FORMAT_VERSION``; a newer version is rejected with both numbers |
| flags | u16 | must be 0 |
| sections | repeated | each ``u8 id``, ``u32 payload length``, payload |

Sections, in this fixed order (each at most once; all but DEBUG and NAMES required; nothing may
follow the last section; every payload must be consumed exactly):

| id | section | payload |
| --- | --- | --- |
| 1 | STRINGS | ``uvar count``, then per string ``uvar byte length`` + UTF-8 bytes; no duplicates |
| 2 | MODULE | ``str`` module name |
| 3 | CONSTANTS | ``uvar count``, then that many constant records |
| 4 | FUNCTIONS | ``uvar count``, then that many function records |
| 5 | DEBUG | optional: ``uvar count``, then that many debug entries, strictly increasing by (function, pc) |
| 6 | NAMES | optional: ``uvar count``, then that many register names, increasing by (function, register) |

Constant record (data is C order, little-endian; decoded arrays are native-endian and read-only):

| field | encoding |
| --- | --- |
| dtype | ``u8`` index into ``DTYPES`` |
| rank | ``uvar``, at most 32 |
| dims | ``rank × uvar`` |
| data | exactly ``prod(dims) × itemsize`` raw bytes (bool bytes must be 0 or 1) |

Function record:

| field | encoding |
| --- | --- |
| name | ``str`` |
| params | ``uvar count``, then ``count × str`` |
| num_regs | ``uvar``, at most 2**20 |
| blocks | ``uvar count``, then per block ``uvar ninstr`` and that many instructions |
| instruction | ``u8`` opcode number, then its operands in opcode-table order (below) |

Debug entry (one per instruction that has a source location):

| field | encoding |
| --- | --- |
| function | ``uvar`` index of the function in FUNCTIONS |
| pc | ``uvar`` index of the instruction within its function, in layout order |
| file | ``str`` |
| line, col | ``uvar`` each (col is 0-based, like ``SourceLoc``); line ≤ 2**31-1, col < 2**31-1 |

Register name (one per entry of a function's ``names`` table, the Python variable a register holds):

| field | encoding |
| --- | --- |
| function | ``uvar`` index of the function in FUNCTIONS |
| register | ``uvar``, < that function's ``num_regs`` |
| name | ``str`` |

Files without names (all files written before the section existed) load unchanged: the section is
optional, so the format version stays 1.

The string table holds every identifier, op name, symbol, device, attribute key, string
attribute value, shape-spec text, function and parameter name and file name exactly once, in
order of first use by the encoder (so index 0 is the module name).

Operands, one encoding per kind:

| kind | encoding |
| --- | --- |
| dst, src | ``uvar`` register, < ``num_regs`` |
| dsts, srcs | ``uvar count``, then that many registers |
| imm | ``svar`` |
| shape | ``str``: the canonical ``str(ShapeSpec)``, re-parsed with ``parse_shape`` |
| dtype | ``u8`` index into ``DTYPES`` (0 float16, 1 float32, 2 float64, 3 int32, 4 int64, 5 bool) |
| device, symbol, sop, pred, op | ``str`` |
| const | ``uvar`` index into the constant pool |
| block | ``uvar`` block index, < number of blocks of the function |
| phi | ``uvar count``, then per incoming value ``uvar block`` + ``uvar register`` |
| attrs | ``uvar count``, then per entry ``str key`` (unique) + tagged value |

Tagged attribute values (``u8`` tag, then payload): 0 none; 1 false; 2 true; 3 int (``svar``);
4 float (8 bytes, IEEE-754 binary64 bits, so NaN payloads, infinities and -0.0 survive);
5 str (``str``); 6 register (``uvar``, < ``num_regs``); 7 tuple (``uvar count`` + that many
tagged values, nested at most 16 deep).

Every decoding failure raises :class:`~msvm.errors.BytecodeFormatError` naming the absolute
byte offset and the section. The encoder rejects modules it could not round-trip exactly
(e.g. a register out of range, an ``np.int64`` where an ``int`` belongs) with the same error.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from os import PathLike
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from ..errors import BytecodeFormatError, SourceLoc
from .module import (
    MAX_ATTR_DEPTH,
    MAX_LOCATION,
    MAX_RANK,
    MAX_REGS,
    Block,
    Function,
    Instruction,
    Module,
    RegRef,
)
from .opcodes import BY_NUMBER, DTYPES, Kind, OpcodeInfo

MAGIC = b"MSBC"
FORMAT_VERSION = 1

SEC_STRINGS = 1
SEC_MODULE = 2
SEC_CONSTANTS = 3
SEC_FUNCTIONS = 4
SEC_DEBUG = 5
SEC_NAMES = 6
SECTION_NAMES: dict[int, str] = {
    SEC_STRINGS: "STRINGS",
    SEC_MODULE: "MODULE",
    SEC_CONSTANTS: "CONSTANTS",
    SEC_FUNCTIONS: "FUNCTIONS",
    SEC_DEBUG: "DEBUG",
    SEC_NAMES: "NAMES",
}
LAST_SECTION = max(SECTION_NAMES)
REQUIRED_SECTIONS = (SEC_STRINGS, SEC_MODULE, SEC_CONSTANTS, SEC_FUNCTIONS)

TAG_NONE = 0
TAG_FALSE = 1
TAG_TRUE = 2
TAG_INT = 3
TAG_FLOAT = 4
TAG_STR = 5
TAG_REG = 6
TAG_TUPLE = 7

_HEADER_SIZE = 8
_U32_MAX = 0xFFFF_FFFF
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1
_U64_LIMIT = 1 << 64
_NUMPY_MAX_BYTES = (1 << 63) - 1  # numpy's limit on size × itemsize (npy_intp)
_DTYPE_CODES: dict[str, int] = {name: i for i, name in enumerate(DTYPES)}
_LE_DTYPES: tuple[np.dtype, ...] = tuple(np.dtype(name).newbyteorder("<") for name in DTYPES)
_F64 = struct.Struct("<d")


# ------------------------------------------------------------------------------------------------
# encoding
# ------------------------------------------------------------------------------------------------


def _uvar_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _svar_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7  # arithmetic shift: sign-extends
        if (value == 0 and not byte & 0x40) or (value == -1 and byte & 0x40):
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


class _EncodeError(Exception):
    """Internal: a module that cannot be written; turned into BytecodeFormatError with context."""


class _Writer:
    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def u8(self, value: int) -> None:
        self.buf.append(value)

    def uvar(self, value: int) -> None:
        if type(value) is not int or not 0 <= value < _U64_LIMIT:
            raise _EncodeError(f"expected a non-negative int below 2**64, got {value!r}")
        self.buf += _uvar_bytes(value)

    def svar(self, value: int) -> None:
        if type(value) is not int or not _I64_MIN <= value <= _I64_MAX:
            raise _EncodeError(f"expected a signed 64-bit int, got {value!r}")
        self.buf += _svar_bytes(value)

    def raw(self, data: bytes) -> None:
        self.buf += data


class _Strings:
    """The string table under construction: index by first use."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def ref(self, w: _Writer, value: Any) -> None:
        if type(value) is not str:
            raise _EncodeError(f"expected a str, got {type(value).__name__} {value!r}")
        i = self.index.get(value)
        if i is None:
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise _EncodeError(f"string {value!r} is not encodable as UTF-8 ({exc.reason})") from None
            i = self.index[value] = len(self.index)
        w.uvar(i)

    def payload(self) -> bytes:
        w = _Writer()
        w.uvar(len(self.index))
        for text in self.index:
            data = text.encode("utf-8")
            w.uvar(len(data))
            w.raw(data)
        return bytes(w.buf)


class _EncodeCtx:
    """What operand encoders need to check ranges: the string table and the function's sizes."""

    __slots__ = ("n_blocks", "n_consts", "num_regs", "shape_text", "strings")

    def __init__(self, strings: _Strings, n_consts: int) -> None:
        self.strings = strings
        self.n_consts = n_consts
        self.num_regs = 0
        self.n_blocks = 0
        self.shape_text: dict[int, str] = {}


def _enc_index(w: _Writer, value: Any, bound: int, what: str) -> None:
    if type(value) is not int:
        raise _EncodeError(f"{what} must be an int, got {type(value).__name__} {value!r}")
    if not 0 <= value < bound:
        raise _EncodeError(f"{what} {value!r} out of range (must be in [0, {bound}))")
    w.uvar(value)


def _enc_reg(w: _Writer, ctx: _EncodeCtx, value: Any) -> None:
    _enc_index(w, value, ctx.num_regs, "register")


def _enc_block(w: _Writer, ctx: _EncodeCtx, value: Any) -> None:
    _enc_index(w, value, ctx.n_blocks, "block")


def _enc_tuple(value: Any, what: str) -> tuple:
    if type(value) is not tuple:
        raise _EncodeError(f"{what} must be a tuple, got {type(value).__name__}")
    return value


def _enc_regs(w: _Writer, ctx: _EncodeCtx, value: Any) -> None:
    items = _enc_tuple(value, "register list")
    w.uvar(len(items))
    for reg in items:
        _enc_reg(w, ctx, reg)


def _enc_imm(w: _Writer, ctx: _EncodeCtx, value: Any) -> None:
    w.svar(value)


def _enc_shape(w: _Writer, ctx: _EncodeCtx, value: Any) -> None:
    from ..shapes import ShapeSpec, parse_shape

    if not isinstance(value, ShapeSpec):
        raise _EncodeError(f"expected a ShapeSpec, got {type(value).__name__} {value!r}")
    text = str(value)
    if ctx.shape_text.get(id(value)) != text:
        try:
            same = parse_shape(text) == value
        except ValueError:
            same = False
        if not same:
            raise _EncodeError(f"shape spec {text!r} does not round-trip through its canonical text")
        ctx.shape_text[id(value)] = text
    ctx.strings.ref(w, text)


def _enc_dtype(w: _Writer, ctx: _EncodeCtx, value: Any) -> None:
    code = _DTYPE_CODES.get(value) if type(value) is str else None
    if code is None:
        raise _EncodeError(f"unknown dtype {value!r} (expected one of {', '.join(DTYPES)})")
    w.u8(code)


def _enc_str(w: _Writer, ctx: _EncodeCtx, value: Any) -> None:
    ctx.strings.ref(w, value)


def _enc_const(w: _Writer, ctx: _EncodeCtx, value: Any) -> None:
    _enc_index(w, value, ctx.n_consts, "constant")


def _enc_phi(w: _Writer, ctx: _EncodeCtx, value: Any) -> None:
    items = _enc_tuple(value, "phi incoming list")
    w.uvar(len(items))
    for pair in items:
        if type(pair) is not tuple or len(pair) != 2:
            raise _EncodeError(f"phi incoming value must be a (block, register) tuple, got {pair!r}")
        _enc_block(w, ctx, pair[0])
        _enc_reg(w, ctx, pair[1])


def _enc_attr_value(w: _Writer, ctx: _EncodeCtx, value: Any, depth: int) -> None:
    kind = type(value)
    if value is None:
        w.u8(TAG_NONE)
    elif kind is bool:
        w.u8(TAG_TRUE if value else TAG_FALSE)
    elif kind is int:
        w.u8(TAG_INT)
        w.svar(value)
    elif kind is float:
        w.u8(TAG_FLOAT)
        w.raw(_F64.pack(value))
    elif kind is str:
        w.u8(TAG_STR)
        ctx.strings.ref(w, value)
    elif kind is RegRef:
        w.u8(TAG_REG)
        _enc_reg(w, ctx, value.index)
    elif kind is tuple:
        if depth >= MAX_ATTR_DEPTH:
            raise _EncodeError(f"attribute tuples nested deeper than {MAX_ATTR_DEPTH}")
        w.u8(TAG_TUPLE)
        w.uvar(len(value))
        for item in value:
            _enc_attr_value(w, ctx, item, depth + 1)
    else:
        raise _EncodeError(
            f"unsupported attribute value {value!r} of type {kind.__name__} "
            "(expected None, bool, int, float, str, RegRef or tuple)"
        )


def _enc_attrs(w: _Writer, ctx: _EncodeCtx, value: Any) -> None:
    if type(value) is not dict:
        raise _EncodeError(f"attributes must be a dict, got {type(value).__name__}")
    w.uvar(len(value))
    for key, item in value.items():
        ctx.strings.ref(w, key)
        _enc_attr_value(w, ctx, item, 0)


_ENCODERS: dict[Kind, Callable[[_Writer, _EncodeCtx, Any], None]] = {
    Kind.DST: _enc_reg,
    Kind.SRC: _enc_reg,
    Kind.DSTS: _enc_regs,
    Kind.SRCS: _enc_regs,
    Kind.IMM: _enc_imm,
    Kind.SHAPE: _enc_shape,
    Kind.DTYPE: _enc_dtype,
    Kind.DEVICE: _enc_str,
    Kind.CONST: _enc_const,
    Kind.SYMBOL: _enc_str,
    Kind.SCALAR_OP: _enc_str,
    Kind.PRED: _enc_str,
    Kind.OP: _enc_str,
    Kind.ATTRS: _enc_attrs,
    Kind.BLOCK: _enc_block,
    Kind.PHI: _enc_phi,
}


def _encode_constant(w: _Writer, index: int, arr: Any) -> None:
    if not isinstance(arr, np.ndarray):
        raise _EncodeError(f"constant #{index} is a {type(arr).__name__}, not a numpy array")
    code = _DTYPE_CODES.get(arr.dtype.name)
    if code is None or arr.dtype.kind not in "fiub":
        raise _EncodeError(
            f"constant #{index} has unsupported dtype {arr.dtype} (use one of {', '.join(DTYPES)})"
        )
    if arr.ndim > MAX_RANK:
        raise _EncodeError(f"constant #{index} has rank {arr.ndim} > {MAX_RANK}")
    w.u8(code)
    w.uvar(arr.ndim)
    for dim in arr.shape:
        w.uvar(int(dim))
    data = np.ascontiguousarray(arr, dtype=_LE_DTYPES[code]).tobytes(order="C")
    if code == _DTYPE_CODES["bool"]:
        data = bytes(b != 0 for b in data) if data.translate(None, b"\x00\x01") else data
    w.raw(data)


def _encode_function(w: _Writer, ctx: _EncodeCtx, fn: Function, base: int) -> None:
    if not isinstance(fn, Function):
        raise _EncodeError(f"expected a Function, got {type(fn).__name__}")
    ctx.strings.ref(w, fn.name)
    params = _enc_tuple(fn.params, "function params")
    w.uvar(len(params))
    for param in params:
        ctx.strings.ref(w, param)
    if type(fn.num_regs) is not int or not 0 <= fn.num_regs <= MAX_REGS:
        raise _EncodeError(f"num_regs {fn.num_regs!r} out of range (must be an int in [0, {MAX_REGS}])")
    w.uvar(fn.num_regs)
    w.uvar(len(fn.blocks))
    ctx.num_regs = fn.num_regs
    ctx.n_blocks = len(fn.blocks)
    address = base
    for block in fn.blocks:
        w.uvar(len(block.instructions))
        for ins in block.instructions:
            try:
                info = ins.opcode
                if BY_NUMBER.get(info.number) is not info:
                    raise _EncodeError(f"instruction has an opcode {info!r} that is not in the opcode table")
                if type(ins.args) is not tuple or len(ins.args) != len(info.operands):
                    raise _EncodeError(f"{info.name} takes {len(info.operands)} operands, got {ins.args!r}")
                w.u8(info.number)
                for operand, value in zip(info.operands, ins.args):
                    try:
                        _ENCODERS[operand.kind](w, ctx, value)
                    except _EncodeError as exc:
                        raise _EncodeError(f"operand {operand.name!r}: {exc}") from None
            except _EncodeError as exc:
                raise BytecodeFormatError(
                    f"cannot encode instruction in function {fn.name!r}: {exc}",
                    section="FUNCTIONS",
                    address=address,
                    opcode=getattr(getattr(ins, "opcode", None), "name", None),
                ) from None
            address += 1


def _encode_debug(module: Module, strings: _Strings) -> bytes | None:
    entries = []
    for fi, fn in enumerate(module.functions):
        pc = 0
        for block in fn.blocks:
            for ins in block.instructions:
                if ins.loc is not None:
                    entries.append((fi, pc, ins.loc))
                pc += 1
    if not entries:
        return None
    w = _Writer()
    w.uvar(len(entries))
    for fi, pc, loc in entries:
        if not isinstance(loc, SourceLoc):
            raise _EncodeError(f"debug location {loc!r} is not a SourceLoc")
        if not (_is_location(loc.line, MAX_LOCATION) and _is_location(loc.col, MAX_LOCATION - 1)):
            raise _EncodeError(f"debug location {loc!r}: line and 1-based column must be <= {MAX_LOCATION}")
        w.uvar(fi)
        w.uvar(pc)
        strings.ref(w, loc.file)
        w.uvar(loc.line)
        w.uvar(loc.col)
    return bytes(w.buf)


def _encode_names(module: Module, strings: _Strings) -> bytes | None:
    entries = []
    for fi, fn in enumerate(module.functions):
        if type(fn.names) is not dict:
            raise _EncodeError(f"function {fn.name!r}: register names must be a dict, "
                               f"got {type(fn.names).__name__}")
        for reg in sorted(fn.names, key=lambda r: r if type(r) is int else -1):
            if type(reg) is not int or not 0 <= reg < fn.num_regs:
                raise _EncodeError(f"function {fn.name!r}: a name for register {reg!r}, which is not one of "
                                   f"its {fn.num_regs} registers")
            entries.append((fi, reg, fn.names[reg]))
    if not entries:
        return None
    w = _Writer()
    w.uvar(len(entries))
    for fi, reg, name in entries:
        w.uvar(fi)
        w.uvar(reg)
        strings.ref(w, name)
    return bytes(w.buf)


def _is_location(value: Any, bound: int) -> bool:
    return type(value) is int and 0 <= value <= bound


def encode_module(module: Module) -> bytes:
    """The ``.msbc`` bytes of ``module``; deterministic, so equal modules give identical bytes."""
    strings = _Strings()
    sections: list[tuple[int, bytes]] = []
    current = "MODULE"
    try:
        w = _Writer()
        strings.ref(w, module.name)
        module_payload = bytes(w.buf)

        current = "CONSTANTS"
        w = _Writer()
        w.uvar(len(module.constants))
        for i, arr in enumerate(module.constants):
            _encode_constant(w, i, arr)
        constants_payload = bytes(w.buf)

        current = "FUNCTIONS"
        ctx = _EncodeCtx(strings, len(module.constants))
        w = _Writer()
        w.uvar(len(module.functions))
        base = 0
        for fn in module.functions:
            _encode_function(w, ctx, fn, base)
            base += fn.size
        functions_payload = bytes(w.buf)

        current = "DEBUG"
        debug_payload = _encode_debug(module, strings)
        current = "NAMES"
        names_payload = _encode_names(module, strings)
    except _EncodeError as exc:
        raise BytecodeFormatError(f"cannot encode module: {exc}", section=current) from None

    sections.append((SEC_STRINGS, strings.payload()))
    sections.append((SEC_MODULE, module_payload))
    sections.append((SEC_CONSTANTS, constants_payload))
    sections.append((SEC_FUNCTIONS, functions_payload))
    if debug_payload is not None:
        sections.append((SEC_DEBUG, debug_payload))
    if names_payload is not None:
        sections.append((SEC_NAMES, names_payload))

    out = bytearray(MAGIC)
    out += struct.pack("<HH", FORMAT_VERSION, 0)
    for sid, payload in sections:
        if len(payload) > _U32_MAX:
            raise BytecodeFormatError(
                f"section payload of {len(payload)} bytes does not fit in 32 bits", section=SECTION_NAMES[sid]
            )
        out += struct.pack("<BI", sid, len(payload))
        out += payload
    return bytes(out)


# ------------------------------------------------------------------------------------------------
# decoding
# ------------------------------------------------------------------------------------------------


class _Reader:
    """A cursor over ``data[pos:end]`` that checks every read against ``end`` before doing it."""

    __slots__ = ("address", "data", "end", "opcode", "pos", "section")

    def __init__(self, data: bytes, pos: int, end: int, section: str) -> None:
        self.data = data
        self.pos = pos
        self.end = end
        self.section = section
        self.address: int | None = None
        self.opcode: str | None = None

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def fail(self, message: str, offset: int | None = None) -> NoReturn:
        raise BytecodeFormatError(
            message,
            offset=self.pos if offset is None else offset,
            section=self.section,
            address=self.address,
            opcode=self.opcode,
        )

    def need(self, n: int, what: str) -> None:
        if n > self.end - self.pos:
            self.fail(f"truncated {what}: needs {n} bytes, {self.end - self.pos} left")

    def u8(self, what: str) -> int:
        if self.pos >= self.end:
            self.fail(f"truncated {what}: needs 1 byte, 0 left")
        value = self.data[self.pos]
        self.pos += 1
        return value

    def take(self, n: int, what: str) -> bytes:
        self.need(n, what)
        start = self.pos
        self.pos += n
        return self.data[start : self.pos]

    def uvar(self, what: str) -> int:
        start = self.pos
        value = shift = 0
        while True:
            if self.pos >= self.end:
                self.fail(f"truncated varint ({what})", start)
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
            if shift >= 70:
                self.fail(f"varint longer than 10 bytes ({what})", start)
        if value >= _U64_LIMIT:
            self.fail(f"varint exceeds 64 bits ({what})", start)
        if self.pos - start > 1 and byte == 0:
            self.fail(f"non-minimal varint encoding ({what})", start)
        return value

    def svar(self, what: str) -> int:
        start = self.pos
        value = shift = 0
        while True:
            if self.pos >= self.end:
                self.fail(f"truncated varint ({what})", start)
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
            if shift >= 70:
                self.fail(f"varint longer than 10 bytes ({what})", start)
        if byte & 0x40:
            value -= 1 << shift
        if not _I64_MIN <= value <= _I64_MAX:
            self.fail(f"signed varint outside the 64-bit range ({what})", start)
        if len(_svar_bytes(value)) != self.pos - start:
            self.fail(f"non-minimal varint encoding ({what})", start)
        return value

    def index(self, bound: int, what: str) -> int:
        start = self.pos
        value = self.uvar(what)
        if value >= bound:
            self.fail(f"{what} {value} out of range (must be < {bound})", start)
        return value

    def count(self, what: str, min_size: int = 1) -> int:
        """A count of elements of at least ``min_size`` bytes each, checked against the bytes left."""
        start = self.pos
        n = self.uvar(what)
        if n * min_size > self.end - self.pos:
            self.fail(
                f"{what} {n} needs at least {n * min_size} bytes but only {self.end - self.pos} remain",
                start,
            )
        return n


class _DecodeCtx:
    __slots__ = ("n_blocks", "n_consts", "num_regs", "shapes", "strings")

    def __init__(self, strings: list[str], n_consts: int) -> None:
        self.strings = strings
        self.n_consts = n_consts
        self.num_regs = 0
        self.n_blocks = 0
        self.shapes: dict[int, Any] = {}


def _dec_str(r: _Reader, ctx: _DecodeCtx, what: str = "string index") -> str:
    return ctx.strings[r.index(len(ctx.strings), what)]


def _dec_reg(r: _Reader, ctx: _DecodeCtx) -> int:
    return r.index(ctx.num_regs, "register")


def _dec_block(r: _Reader, ctx: _DecodeCtx) -> int:
    return r.index(ctx.n_blocks, "block index")


def _dec_regs(r: _Reader, ctx: _DecodeCtx) -> tuple[int, ...]:
    n = r.count("register count")
    return tuple(_dec_reg(r, ctx) for _ in range(n))


def _dec_imm(r: _Reader, ctx: _DecodeCtx) -> int:
    return r.svar("immediate")


def _dec_shape(r: _Reader, ctx: _DecodeCtx) -> Any:
    from ..shapes import parse_shape

    start = r.pos
    i = r.index(len(ctx.strings), "shape string index")
    spec = ctx.shapes.get(i)
    if spec is None:
        text = ctx.strings[i]
        try:
            spec = parse_shape(text)
        except (ValueError, ArithmeticError, RecursionError, TypeError) as exc:
            r.fail(f"invalid shape spec {text[:80]!r}: {exc}", start)
        ctx.shapes[i] = spec
    return spec


def _dec_dtype(r: _Reader, ctx: _DecodeCtx) -> str:
    start = r.pos
    code = r.u8("dtype code")
    if code >= len(DTYPES):
        r.fail(f"unknown dtype code {code}", start)
    return DTYPES[code]


def _dec_const(r: _Reader, ctx: _DecodeCtx) -> int:
    return r.index(ctx.n_consts, "constant index")


def _dec_phi(r: _Reader, ctx: _DecodeCtx) -> tuple[tuple[int, int], ...]:
    n = r.count("phi incoming count", 2)
    return tuple((_dec_block(r, ctx), _dec_reg(r, ctx)) for _ in range(n))


def _dec_attr_value(r: _Reader, ctx: _DecodeCtx, depth: int) -> Any:
    start = r.pos
    tag = r.u8("attribute tag")
    if tag == TAG_NONE:
        return None
    if tag == TAG_FALSE:
        return False
    if tag == TAG_TRUE:
        return True
    if tag == TAG_INT:
        return r.svar("attribute int")
    if tag == TAG_FLOAT:
        return _F64.unpack(r.take(8, "attribute float"))[0]
    if tag == TAG_STR:
        return _dec_str(r, ctx)
    if tag == TAG_REG:
        return RegRef(_dec_reg(r, ctx))
    if tag == TAG_TUPLE:
        if depth >= MAX_ATTR_DEPTH:
            r.fail(f"attribute tuples nested deeper than {MAX_ATTR_DEPTH}", start)
        n = r.count("attribute tuple length")
        return tuple(_dec_attr_value(r, ctx, depth + 1) for _ in range(n))
    r.fail(f"unknown attribute value tag {tag}", start)


def _dec_attrs(r: _Reader, ctx: _DecodeCtx) -> dict[str, Any]:
    n = r.count("attribute count", 2)
    out: dict[str, Any] = {}
    for _ in range(n):
        start = r.pos
        key = _dec_str(r, ctx, "attribute key")
        if key in out:
            r.fail(f"duplicate attribute key {key!r}", start)
        out[key] = _dec_attr_value(r, ctx, 0)
    return out


_DECODERS: dict[Kind, Callable[[_Reader, _DecodeCtx], Any]] = {
    Kind.DST: _dec_reg,
    Kind.SRC: _dec_reg,
    Kind.DSTS: _dec_regs,
    Kind.SRCS: _dec_regs,
    Kind.IMM: _dec_imm,
    Kind.SHAPE: _dec_shape,
    Kind.DTYPE: _dec_dtype,
    Kind.DEVICE: _dec_str,
    Kind.CONST: _dec_const,
    Kind.SYMBOL: _dec_str,
    Kind.SCALAR_OP: _dec_str,
    Kind.PRED: _dec_str,
    Kind.OP: _dec_str,
    Kind.ATTRS: _dec_attrs,
    Kind.BLOCK: _dec_block,
    Kind.PHI: _dec_phi,
}

if set(_ENCODERS) != set(Kind) or set(_DECODERS) != set(Kind):  # pragma: no cover - import-time guard
    raise ImportError("msvm.bytecode.binary has no encoder/decoder for some operand Kind")


def _read_strings(r: _Reader) -> list[str]:
    n = r.count("string count")
    strings: list[str] = []
    seen: set[str] = set()
    for _ in range(n):
        start = r.pos
        length = r.uvar("string length")
        r.need(length, "string bytes")
        data_start = r.pos
        raw = r.take(length, "string bytes")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            r.fail(f"string is not valid UTF-8 ({exc.reason})", data_start + exc.start)
        if text in seen:
            r.fail(f"duplicate string {text[:80]!r} in the string table", start)
        seen.add(text)
        strings.append(text)
    return strings


def _read_constants(r: _Reader) -> list[np.ndarray]:
    n = r.count("constant count", 2)
    out: list[np.ndarray] = []
    bool_code = _DTYPE_CODES["bool"]
    for i in range(n):
        start = r.pos
        code = r.u8("constant dtype code")
        if code >= len(DTYPES):
            r.fail(f"constant #{i}: unknown dtype code {code}", start)
        rank_at = r.pos
        rank = r.uvar("constant rank")
        if rank > MAX_RANK:
            r.fail(f"constant #{i}: rank {rank} exceeds the maximum {MAX_RANK}", rank_at)
        r.need(rank, "constant dims")
        dims = tuple(r.uvar("constant dim") for _ in range(rank))
        dtype = _LE_DTYPES[code]
        if math.prod(max(d, 1) for d in dims) * dtype.itemsize > _NUMPY_MAX_BYTES:
            r.fail(f"constant #{i}: dims {dims} are too large", rank_at)
        nbytes = math.prod(dims) * dtype.itemsize
        if nbytes > r.remaining:
            r.fail(f"constant #{i}: needs {nbytes} bytes of data but only {r.remaining} remain")
        data_at = r.pos
        raw = r.take(nbytes, "constant data")
        if code == bool_code and raw.translate(None, b"\x00\x01"):
            r.fail(f"constant #{i}: bool data holds bytes other than 0 and 1", data_at)
        try:
            arr = np.frombuffer(raw, dtype=dtype).reshape(dims)
            if not dtype.isnative:
                arr = arr.astype(dtype.newbyteorder("="))
        except (ValueError, OverflowError, MemoryError) as exc:  # pragma: no cover - guarded above
            r.fail(f"constant #{i}: {exc}", start)
        arr.setflags(write=False)
        out.append(arr)
    return out


def _read_functions(r: _Reader, strings: list[str], n_consts: int) -> list[Function]:
    ctx = _DecodeCtx(strings, n_consts)
    n_functions = r.count("function count", 4)
    functions: list[Function] = []
    address = 0
    for _ in range(n_functions):
        r.address = r.opcode = None
        name = _dec_str(r, ctx, "function name")
        params = tuple(_dec_str(r, ctx, "parameter name") for _ in range(r.count("parameter count")))
        regs_at = r.pos
        num_regs = r.uvar("num_regs")
        if num_regs > MAX_REGS:
            r.fail(f"function {name!r}: num_regs {num_regs} exceeds the maximum {MAX_REGS}", regs_at)
        n_blocks = r.count("block count")
        ctx.num_regs = num_regs
        ctx.n_blocks = n_blocks
        blocks: list[Block] = []
        for _ in range(n_blocks):
            r.address = r.opcode = None
            instructions: list[Instruction] = []
            for _ in range(r.count("instruction count")):
                r.address, r.opcode = address, None
                start = r.pos
                number = r.u8("opcode")
                info: OpcodeInfo | None = BY_NUMBER.get(number)
                if info is None:
                    r.fail(f"unknown opcode number {number}", start)
                r.opcode = info.name
                args = tuple(_DECODERS[operand.kind](r, ctx) for operand in info.operands)
                instructions.append(Instruction(info, args))
                address += 1
            blocks.append(Block(instructions))
        functions.append(Function(name, params, num_regs, blocks))
    r.address = r.opcode = None
    return functions


def _read_debug(r: _Reader, strings: list[str], functions: list[Function]) -> None:
    ctx = _DecodeCtx(strings, 0)
    n = r.count("debug entry count", 5)
    flat: dict[int, list[Instruction]] = {}
    last: tuple[int, int] | None = None
    for _ in range(n):
        start = r.pos
        fi = r.index(len(functions), "function index")
        code = flat.get(fi)
        if code is None:
            code = flat[fi] = [ins for block in functions[fi].blocks for ins in block.instructions]
        pc = r.index(len(code), "pc")
        if last is not None and (fi, pc) <= last:
            r.fail(f"debug entry ({fi}, {pc}) is not after the previous entry {last}", start)
        last = (fi, pc)
        file = _dec_str(r, ctx, "file name")
        line = r.index(MAX_LOCATION + 1, "line")
        col = r.index(MAX_LOCATION, "column")
        code[pc].loc = SourceLoc(file, line, col)


def _read_names(r: _Reader, strings: list[str], functions: list[Function]) -> None:
    ctx = _DecodeCtx(strings, 0)
    n = r.count("register name count", 3)
    last: tuple[int, int] | None = None
    for _ in range(n):
        start = r.pos
        fi = r.index(len(functions), "function index")
        fn = functions[fi]
        reg = r.index(fn.num_regs, f"register of a name in function {fn.name[:80]!r}")
        if last is not None and (fi, reg) <= last:
            r.fail(f"register name ({fi}, R{reg}) is not after the previous entry "
                   f"({last[0]}, R{last[1]})", start)
        last = (fi, reg)
        fn.names[reg] = _dec_str(r, ctx, "variable name")


def decode_module(data: bytes) -> Module:
    """Parse ``.msbc`` bytes; any malformed input raises BytecodeFormatError (never runs code)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"decode_module() needs bytes, got {type(data).__name__}")
    data = bytes(data)
    r = _Reader(data, 0, len(data), "header")
    if not MAGIC.startswith(data[:4]):
        r.fail(f"not an MS-BC file: bad magic {data[:4]!r} (expected {MAGIC!r})")
    r.need(_HEADER_SIZE, "file header")
    r.pos = 4
    version, flags = struct.unpack_from("<HH", data, 4)
    if version > FORMAT_VERSION:
        r.fail(
            f"file has format version {version}, but this msvm reads format version {FORMAT_VERSION}; "
            "upgrade msvm to load it"
        )
    if version < 1:
        r.fail(f"invalid format version {version} (this msvm reads format version {FORMAT_VERSION})")
    r.pos = 6
    if flags != 0:
        r.fail(f"unsupported header flags 0x{flags:04x} (must be 0)")
    r.pos = _HEADER_SIZE

    strings: list[str] = []
    name = ""
    constants: list[np.ndarray] = []
    functions: list[Function] = []
    last_id = 0
    while r.pos < len(data):
        r.section = SECTION_NAMES.get(last_id, "header")
        header_at = r.pos
        if last_id == LAST_SECTION:
            r.fail(f"{len(data) - r.pos} trailing bytes after the last section")
        sid = r.u8("section id")
        sname = SECTION_NAMES.get(sid)
        if sname is None:
            r.fail(f"unknown section id {sid}", header_at)
        r.section = sname
        if sid == last_id:
            r.fail(f"duplicate {sname} section", header_at)
        if sid < last_id:
            r.fail(f"{sname} section out of order (it must come before {SECTION_NAMES[last_id]})", header_at)
        for missing in REQUIRED_SECTIONS:
            if last_id < missing < sid:
                r.section = SECTION_NAMES[missing]
                r.fail(f"missing {SECTION_NAMES[missing]} section before {sname}", header_at)
        r.need(4, "section length")
        (length,) = struct.unpack_from("<I", data, r.pos)
        if length > len(data) - r.pos - 4:
            r.fail(
                f"section payload of {length} bytes runs past the end of the file "
                f"({len(data) - r.pos - 4} bytes left)"
            )
        r.pos += 4
        end = r.pos + length
        s = _Reader(data, r.pos, end, sname)
        if sid == SEC_STRINGS:
            strings = _read_strings(s)
        elif sid == SEC_MODULE:
            name = _dec_str(s, _DecodeCtx(strings, 0), "module name")
        elif sid == SEC_CONSTANTS:
            constants = _read_constants(s)
        elif sid == SEC_FUNCTIONS:
            functions = _read_functions(s, strings, len(constants))
        elif sid == SEC_DEBUG:
            _read_debug(s, strings, functions)
        else:
            _read_names(s, strings, functions)
        if s.pos != end:
            s.fail(f"{end - s.pos} unused bytes at the end of the section payload")
        r.pos = end
        last_id = sid
    for missing in REQUIRED_SECTIONS:
        if missing > last_id:
            r.section = SECTION_NAMES[missing]
            r.fail(f"missing {SECTION_NAMES[missing]} section (file ends)", len(data))
    return Module(name, functions, constants)


# ------------------------------------------------------------------------------------------------
# files
# ------------------------------------------------------------------------------------------------


def save_module(module: Module, path: str | PathLike[str]) -> None:
    """Write ``module`` to ``path`` as ``.msbc``; encodes fully before touching the file."""
    data = encode_module(module)
    try:
        Path(path).write_bytes(data)
    except OSError as exc:
        raise BytecodeFormatError(
            f"cannot write {str(path)!r}: {exc.strerror or exc}", code="E-FORMAT-IO"
        ) from None


def load_module(path: str | PathLike[str]) -> Module:
    """Read a ``.msbc`` file; unreadable files raise BytecodeFormatError with code E-FORMAT-IO."""
    try:
        data = Path(path).read_bytes()
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise BytecodeFormatError(
            f"cannot read {str(path)!r}: {getattr(exc, 'strerror', None) or exc}", code="E-FORMAT-IO"
        ) from None
    return decode_module(data)


__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "decode_module",
    "encode_module",
    "load_module",
    "save_module",
]
