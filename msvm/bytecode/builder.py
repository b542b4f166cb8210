"""A small builder for writing MS-BC programs from Python (the frontend and tests use it).

Registers and blocks are allocated by the builder; every ``emit`` call appends one instruction
to the current block. Methods for instructions that define one register return that register.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import SourceLoc
from ..shapes import ShapeSpec, parse_shape
from .module import AttrValue, Block, Function, Module, make_instruction
from .opcodes import DTYPES


def normalize_constant(value: Any) -> np.ndarray:
    """A read-only, C-contiguous, native-endian copy of ``value`` in a supported dtype."""
    arr = np.asarray(value)
    if arr.dtype.name not in DTYPES:
        raise TypeError(f"constants of dtype {arr.dtype} are not supported (use one of {', '.join(DTYPES)})")
    arr = np.array(arr, dtype=arr.dtype.newbyteorder("="), order="C", copy=True)
    arr.setflags(write=False)
    return arr


class FunctionBuilder:
    def __init__(self, module: ModuleBuilder, function: Function) -> None:
        self.module = module
        self.function = function
        self.current = self.new_block()
        self.loc: SourceLoc | None = None  # attached to every instruction emitted while set

    # -- registers and blocks -------------------------------------------------------------
    def new_reg(self) -> int:
        reg = self.function.num_regs
        self.function.num_regs += 1
        return reg

    def new_block(self) -> int:
        self.function.blocks.append(Block())
        return len(self.function.blocks) - 1

    def set_block(self, block: int) -> None:
        self.current = block

    @property
    def terminated(self) -> bool:
        instructions = self.function.blocks[self.current].instructions
        return bool(instructions) and instructions[-1].opcode.is_terminator

    def emit(self, name: str, *args: Any) -> None:
        self.function.blocks[self.current].instructions.append(make_instruction(name, *args, loc=self.loc))

    def _define(self, name: str, *args: Any) -> int:
        dst = self.new_reg()
        self.emit(name, dst, *args)
        return dst

    # -- one method per opcode --------------------------------------------------------------
    def tensor_input(
        self, arg: int, shape: ShapeSpec | str | Sequence, dtype: str, device: str = "cpu"
    ) -> int:
        return self._define("TENSOR_CREATE", arg, _spec(shape), dtype, device)

    def tensor_zeros(self, shape: ShapeSpec | str | Sequence, dtype: str, device: str = "cpu") -> int:
        return self._define("TENSOR_CREATE", -1, _spec(shape), dtype, device)

    def tensor_alloc(self, dims: Sequence[int], dtype: str, device: str = "cpu") -> int:
        return self._define("TENSOR_ALLOC", tuple(dims), dtype, device)

    def free(self, reg: int) -> None:
        self.emit("TENSOR_FREE", reg)

    def resize(self, src: int, dims: Sequence[int]) -> int:
        return self._define("TENSOR_RESIZE", src, tuple(dims))

    def tensor_phi(self, incoming: Sequence[tuple[int, int]]) -> int:
        return self._define("TENSOR_PHI", tuple(incoming))

    def scalar_phi(self, incoming: Sequence[tuple[int, int]]) -> int:
        return self._define("SCALAR_PHI", tuple(incoming))

    def load_const(self, value: Any) -> int:
        return self._define("LOAD_CONST", self.module.constant(value))

    def shape_of(self, src: int, dim: int) -> int:
        return self._define("SHAPE_PROPAGATE", src, dim)

    def scalar_const(self, value: int) -> int:
        return self._define("SCALAR_CONST", int(value))

    def scalar_arg(self, arg: int, symbol: str) -> int:
        return self._define("SCALAR_ARG", arg, symbol)

    def scalar_op(self, op: str, a: int, b: int) -> int:
        return self._define("SCALAR_OP", op, a, b)

    def cmp(self, pred: str, a: int, b: int) -> int:
        return self._define("CMP", pred, a, b)

    def call(
        self, op: str, srcs: Sequence[int], attrs: Mapping[str, AttrValue] | None = None, n_out: int = 1
    ):
        """OP_CALL; returns the destination register, or a tuple of them when ``n_out != 1``."""
        dsts = tuple(self.new_reg() for _ in range(n_out))
        self.emit("OP_CALL", op, dsts, tuple(srcs), dict(attrs or {}))
        return dsts[0] if n_out == 1 else dsts

    def br(self, cond: int, then: int, else_: int) -> None:
        self.emit("BR", cond, then, else_)

    def jmp(self, target: int) -> None:
        self.emit("JMP", target)

    def ret(self, *srcs: int) -> None:
        self.emit("RET", tuple(srcs))


class ModuleBuilder:
    def __init__(self, name: str = "module") -> None:
        self.module = Module(name)
        self._const_ids: dict[tuple, int] = {}

    def function(self, name: str, params: Sequence[str] = ()) -> FunctionBuilder:
        fn = Function(name, tuple(params), 0)
        self.module.functions.append(fn)
        return FunctionBuilder(self, fn)

    def constant(self, value: Any) -> int:
        """Index of ``value`` in the constant pool; identical constants are stored once."""
        arr = normalize_constant(value)
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        index = self._const_ids.get(key)
        if index is None:
            index = self._const_ids[key] = len(self.module.constants)
            self.module.constants.append(arr)
        return index

    def adopt_constant(self, arr: np.ndarray) -> int:
        """Index of ``arr``, a constant of another module's pool (already normalised), stored as is:
        a region copied out of a function shares its weights instead of copying and hashing them."""
        normalized = (arr.flags.c_contiguous and not arr.flags.writeable and arr.dtype.isnative
                      and arr.dtype.name in DTYPES)
        if not normalized:
            return self.constant(arr)
        self.module.constants.append(arr)
        return len(self.module.constants) - 1

    def build(self) -> Module:
        return self.module


def _spec(shape: ShapeSpec | str | Sequence) -> ShapeSpec:
    if isinstance(shape, ShapeSpec):
        return shape
    if isinstance(shape, str):
        return parse_shape(shape)
    return ShapeSpec.of(shape)
