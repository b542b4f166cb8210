"""Hypothesis strategies for random, structurally valid MS-BC modules.

Shared by the binary-format and text-format tests: every module drawn here has operands of the
right Python type and in range (registers < num_regs, blocks < number of blocks, constants <
pool size), identifiers matching ``[A-Za-z_][A-Za-z0-9_]*`` (and not spelled like a register,
``R12``, or a literal such as ``true``/``nan``), so both the binary and the text form are defined.
The modules are *not* meant to verify (no SSA, no types): they exercise the encoders.
"""

from __future__ import annotations

import functools
import re

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from msvm.bytecode.module import Block, Function, Instruction, Module, RegRef
from msvm.bytecode.opcodes import DEVICES, DTYPES, OPCODES, PREDICATES, SCALAR_OPS, Kind
from msvm.errors import SourceLoc
from msvm.shapes import UNKNOWN, ShapeSpec, ceildiv, dmax, dmin
from msvm.shapes import Dim as _Dim

_RESERVED = re.compile(r"(?:[Rr]|bb?)\d+|true|false|none|null|nan|inf|True|False|None|NaN|Inf")

INT64 = st.integers(-(2**63), 2**63 - 1)

_FIRST = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_"
identifiers = (
    st.tuples(st.sampled_from(_FIRST), st.text(alphabet=_FIRST + "0123456789", max_size=10))
    .map("".join)
    .filter(lambda s: not _RESERVED.fullmatch(s))
)

# Printable text for string attributes: quotes, backslashes, non-ASCII, but no control characters.
attr_strings = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Co", "Cn", "Cf", "Zl", "Zp")),
    max_size=12,
)

file_names = st.one_of(
    st.sampled_from(["model.py", "<cell 3>", "/tmp/x/prog.py", "nets/mlp.py"]),
    st.tuples(st.sampled_from(_FIRST), st.text(alphabet=_FIRST + "0123456789./-", max_size=15)).map("".join),
)

source_locs = st.builds(SourceLoc, file_names, st.integers(1, 100_000), st.integers(0, 500))

SYMBOLS = ("N", "H", "W", "B", "seq_len")


@st.composite
def dims(draw: st.DrawFn) -> _Dim:
    """A constant, a symbol, ``?``, or a small expression over symbols."""
    choice = draw(st.integers(0, 6))
    if choice == 0:
        return _Dim.const(draw(st.integers(0, 4096)))
    if choice == 1:
        return UNKNOWN
    sym = _Dim.sym(draw(st.sampled_from(SYMBOLS)))
    if choice == 2:
        return sym
    other = draw(st.one_of(st.integers(1, 8).map(_Dim.const), st.sampled_from(SYMBOLS).map(_Dim.sym)))
    if choice == 3:
        return sym * other
    if choice == 4:
        return (sym + draw(st.integers(-3, 3))) // 2
    if choice == 5:
        return ceildiv(sym, other)
    return draw(st.sampled_from([dmin, dmax]))(sym, other) + 1


shape_specs = st.lists(dims(), max_size=5).map(ShapeSpec.of)


@functools.lru_cache(maxsize=256)
def attr_values(num_regs: int, depth: int = 3) -> st.SearchStrategy:
    """Every attribute value type: None, bool, int, float (incl. NaN/inf/-0.0), str, RegRef, tuple."""
    leaves = st.one_of(
        st.none(),
        st.booleans(),
        INT64,
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1.0]),
        attr_strings,
        st.integers(0, num_regs - 1).map(RegRef),
    )
    if depth == 0:
        return leaves
    return st.one_of(leaves, st.lists(attr_values(num_regs, depth - 1), max_size=3).map(tuple))


def attr_dicts(num_regs: int) -> st.SearchStrategy:
    return st.dictionaries(identifiers, attr_values(num_regs), max_size=4)


_FIXED: dict[Kind, st.SearchStrategy] = {
    Kind.IMM: st.one_of(st.integers(-2, 8), INT64),
    Kind.SHAPE: shape_specs,
    Kind.DTYPE: st.sampled_from(DTYPES),
    Kind.DEVICE: st.sampled_from(DEVICES),
    Kind.SYMBOL: st.sampled_from(SYMBOLS),
    Kind.SCALAR_OP: st.sampled_from(SCALAR_OPS),
    Kind.PRED: st.sampled_from(PREDICATES),
    Kind.OP: st.one_of(st.sampled_from(["add", "matmul", "relu", "slice", "softmax"]), identifiers),
}


@functools.lru_cache(maxsize=256)
def operand(kind: Kind, num_regs: int, n_blocks: int, n_consts: int) -> st.SearchStrategy:
    """A random value of operand kind ``kind`` that is in range for the enclosing function."""
    if kind in _FIXED:
        return _FIXED[kind]
    reg = st.integers(0, num_regs - 1)
    block = st.integers(0, n_blocks - 1)
    if kind in (Kind.DST, Kind.SRC):
        return reg
    if kind in (Kind.DSTS, Kind.SRCS):
        return st.lists(reg, max_size=4).map(tuple)
    if kind is Kind.CONST:
        return st.integers(0, max(n_consts - 1, 0))
    if kind is Kind.ATTRS:
        return attr_dicts(num_regs)
    if kind is Kind.BLOCK:
        return block
    if kind is Kind.PHI:
        return st.lists(st.tuples(block, reg), max_size=3).map(tuple)
    raise AssertionError(f"no strategy for operand kind {kind}")


@st.composite
def instructions(
    draw: st.DrawFn, num_regs: int, n_blocks: int, n_consts: int, with_locs: bool
) -> Instruction:
    choices = [op for op in OPCODES if n_consts or all(o.kind is not Kind.CONST for o in op.operands)]
    info = draw(st.sampled_from(choices))
    args = tuple(draw(operand(o.kind, num_regs, n_blocks, n_consts)) for o in info.operands)
    loc = draw(st.one_of(st.none(), source_locs)) if with_locs else None
    return Instruction(info, args, loc)


@st.composite
def functions(draw: st.DrawFn, name: str, n_consts: int, with_locs: bool) -> Function:
    params = tuple(draw(st.lists(identifiers, max_size=3, unique=True)))
    num_regs = draw(st.one_of(st.integers(1, 12), st.integers(1, 1 << 20)))
    n_blocks = draw(st.integers(1, 4))
    blocks = [
        Block(draw(st.lists(instructions(num_regs, n_blocks, n_consts, with_locs), max_size=6)))
        for _ in range(n_blocks)
    ]
    # the frontend's register names: Python identifiers, and names seen in other positions too
    names = draw(st.dictionaries(st.integers(0, num_regs - 1), identifiers | attr_strings, max_size=3))
    return Function(name, params, num_regs, blocks, names)


def _readonly(arr: np.ndarray) -> np.ndarray:
    arr = np.array(arr, dtype=arr.dtype.newbyteorder("="), order="C", copy=True)
    arr.setflags(write=False)
    return arr


@st.composite
def constants(draw: st.DrawFn) -> np.ndarray:
    """A constant of any supported dtype: rank 0..3, zero-size allowed, NaN/inf/-0.0 for floats."""
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
    if dtype.kind == "f":
        elements = st.floats(width=8 * dtype.itemsize, allow_nan=True, allow_infinity=True)
    else:
        elements = None
    return _readonly(draw(hnp.arrays(dtype, shape, elements=elements)))


@st.composite
def modules(draw: st.DrawFn, with_locs: bool | None = None) -> Module:
    """A random module over every opcode; debug locations present, absent or mixed."""
    if with_locs is None:
        with_locs = draw(st.booleans())
    consts = draw(st.lists(constants(), max_size=3))
    names = draw(st.lists(identifiers, min_size=1, max_size=3, unique=True))
    fns = [draw(functions(name, len(consts), with_locs)) for name in names]
    return Module(draw(identifiers), fns, consts)


__all__ = [
    "INT64",
    "SYMBOLS",
    "attr_dicts",
    "attr_strings",
    "attr_values",
    "constants",
    "dims",
    "file_names",
    "functions",
    "identifiers",
    "instructions",
    "modules",
    "operand",
    "shape_specs",
    "source_locs",
]
