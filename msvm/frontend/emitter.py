"""Emitting MS-BC while knowing every register's type: ops through their shape functions, constants,
shape scalars, and numpy 2's weak-scalar promotion.

Why the frontend infers types itself: negative axes, ``.T``, ``.ndim``, ``len(x)``, folded shape
conditions and the dtype of a Python number next to a tensor all need each tensor's rank, dtype and
symbolic shape while compiling. It asks the same op shape functions the verifier asks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..bytecode.builder import ModuleBuilder
from ..bytecode.module import Instruction, RegRef, make_instruction
from ..bytecode.opcodes import PREDICATE_INFO, SCALAR_OP_INFO
from ..ops.registry import REGISTRY, InferContext, OpDef, OpTypeError, TensorType
from ..shapes import Dim, ShapeSpec
from .values import BoolVal, ScalarVal, TensorVal, is_int


class EmitError(Exception):
    """A problem found while emitting; the compiler re-raises it as a CompileError at the current node."""

    def __init__(self, code: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint


@dataclass
class State:
    """What is known on the current control-flow path: the names, and the shape scalars computed so far.

    ``scalars`` caches SHAPE_PROPAGATE, SCALAR_CONST and SCALAR_OP results by what they compute, so a
    dim or an index expression used twice is computed once; a cached register is reused only on paths
    its definition dominates (the cache is forked and intersected with the control flow).
    """

    env: dict[str, Any]
    scalars: dict[tuple, ScalarVal] = field(default_factory=dict)

    def copy(self) -> State:
        return State(dict(self.env), dict(self.scalars))


@dataclass(frozen=True)
class Snapshot:
    blocks: tuple[tuple[Instruction, ...], ...]
    num_regs: int
    current: int
    entry_end: int
    captured: dict[int, tuple[Any, TensorVal]]
    state: State | None
    scalars: dict[tuple, ScalarVal]
    names: dict[int, str]


def python_sample(value: Any) -> Any:
    """The Python scalar numpy's weak promotion should see for a weak operand."""
    if isinstance(value, TensorVal):
        return np.dtype(value.dtype).type(0).item()
    if isinstance(value, ScalarVal):
        return 0
    return value


class Emitter:
    """The module being built, the current block and path state, and typed emission helpers."""

    def __init__(self, module_name: str, function_name: str, params: Sequence[str]) -> None:
        self.mb = ModuleBuilder(module_name)
        self.fb = self.mb.function(function_name, params)
        self.state: State | None = State({})
        self.entry_end = 0  # insertion point in bb0 for hoisted constants (after the parameters)
        self.captured: dict[int, tuple[Any, TensorVal]] = {}  # id(array) -> (array, its register)

    # -- blocks and rollback ----------------------------------------------------------------------
    @property
    def block(self) -> int:
        return self.fb.current

    def new_block(self) -> int:
        return self.fb.new_block()

    def set_block(self, block: int) -> None:
        self.fb.set_block(block)

    def last_instruction(self) -> Instruction:
        return self.fb.function.blocks[self.fb.current].instructions[-1]

    def snapshot(self) -> Snapshot:
        """Everything a rolled-back loop round must undo: instructions, registers, caches, the path state."""
        fn = self.fb.function
        state = self.state
        return Snapshot(tuple(tuple(b.instructions) for b in fn.blocks), fn.num_regs, self.fb.current,
                        self.entry_end, dict(self.captured), state, dict(state.scalars) if state else {},
                        dict(fn.names))

    def restore(self, snap: Snapshot) -> None:
        fn = self.fb.function
        del fn.blocks[len(snap.blocks):]
        for block, instructions in zip(fn.blocks, snap.blocks):
            block.instructions[:] = instructions
        fn.num_regs = snap.num_regs
        fn.names = dict(snap.names)
        self.fb.current = snap.current
        self.entry_end = snap.entry_end
        self.captured = dict(snap.captured)
        self.state = snap.state
        if snap.state is not None:
            snap.state.scalars = dict(snap.scalars)

    def name_register(self, name: str, value: Any) -> None:
        """Record that the Python variable ``name`` holds ``value``'s register, for views (``R7  q``).

        The first name a register gets stays: after ``k = q`` the register is still ``q``'s.
        """
        if isinstance(value, (TensorVal, ScalarVal, BoolVal)):
            self.fb.function.names.setdefault(value.reg, name)

    # -- constants ----------------------------------------------------------------------------------
    def const_array(self, value: Any) -> TensorVal:
        """LOAD_CONST of a literal here (weak scalars, numpy scalars)."""
        arr = np.asarray(value)
        try:
            reg = self.fb.load_const(arr)
        except TypeError as exc:
            raise EmitError("E-COMPILE-UNSUPPORTED", str(exc), "convert it to a supported dtype") from None
        return TensorVal(reg, TensorType(ShapeSpec(arr.shape), arr.dtype.name))

    def captured_array(self, arr: np.ndarray) -> TensorVal:
        """A captured numpy array: one LOAD_CONST in the entry block per array object."""
        hit = self.captured.get(id(arr))
        if hit is not None and hit[0] is arr:
            return hit[1]
        try:
            index = self.mb.constant(arr)
        except TypeError as exc:
            raise EmitError("E-COMPILE-UNSUPPORTED", f"cannot capture a numpy array: {exc}",
                            "convert it with .astype(np.float32) (or another supported dtype)") from None
        reg = self.fb.new_reg()
        ins = make_instruction("LOAD_CONST", reg, index, loc=self.fb.loc)
        self.fb.function.blocks[0].instructions.insert(self.entry_end, ins)
        self.entry_end += 1
        value = TensorVal(reg, TensorType(ShapeSpec(arr.shape), arr.dtype.name))
        self.captured[id(arr)] = (arr, value)
        return value

    # -- scalars --------------------------------------------------------------------------------------
    def scalar(self, value: int | ScalarVal) -> ScalarVal:
        if isinstance(value, ScalarVal):
            return value
        return self._cached(("const", int(value)), lambda: ScalarVal(self.fb.scalar_const(int(value)),
                                                                   Dim.const(int(value))))

    def _cached(self, key: tuple, make: Callable[[], ScalarVal]) -> ScalarVal:
        cache = self.state.scalars
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = make()
        return hit

    def scalar_op(self, op: str, a: int | ScalarVal, b: int | ScalarVal) -> int | ScalarVal:
        """SCALAR_OP, folded when both sides are static ints."""
        info = SCALAR_OP_INFO[op]
        if info.divides and is_int(b) and b == 0:
            raise EmitError("E-COMPILE-ZERO-DIVISION", f"integer {op} by zero", "divide by a non-zero value")
        if is_int(a) and is_int(b):
            return info.ints(int(a), int(b))
        sa, sb = self.scalar(a), self.scalar(b)
        return self._cached((op, sa.reg, sb.reg), lambda: ScalarVal(self.fb.scalar_op(op, sa.reg, sb.reg),
                                                                    info.dims(sa.dim, sb.dim)))

    def cmp(self, pred: str, a: int | ScalarVal, b: int | ScalarVal) -> bool | BoolVal:
        if is_int(a) and is_int(b):
            return PREDICATE_INFO[pred].ints(a, b)
        if isinstance(a, ScalarVal) and isinstance(b, ScalarVal) and a.reg == b.reg:
            return pred in ("eq", "le", "ge")
        return BoolVal(self.fb.cmp(pred, self.scalar(a).reg, self.scalar(b).reg))

    def bool_const(self, value: bool) -> BoolVal:
        zero = self.scalar(0).reg
        return BoolVal(self.fb.cmp("eq" if value else "ne", zero, zero))

    def bool_not(self, value: BoolVal) -> BoolVal:
        return BoolVal(self.fb.cmp("eq", value.reg, self.bool_const(False).reg))

    def dim(self, t: TensorVal, axis: int) -> int | ScalarVal:
        """``t.shape[axis]``: a Python int for a constant dim, else a SHAPE_PROPAGATE (once per path)."""
        d = t.shape[axis]
        if d.is_const:
            return d.value
        return self._cached(("shape", t.reg, axis), lambda: ScalarVal(self.fb.shape_of(t.reg, axis), d))

    # -- tensors ----------------------------------------------------------------------------------
    def call(self, op: OpDef | str, inputs: Sequence[TensorVal], attrs: dict[str, Any] | None = None) -> Any:
        """OP_CALL with output types from the op's shape function (raises OpTypeError like the verifier).

        One output gives a TensorVal, several a tuple (like the eager ``OpDef`` call).
        """
        if isinstance(op, str):
            op = REGISTRY[op]
        attrs = attrs or {}
        op.check_arity(len(inputs))
        emitted, symbolic = {}, {}
        for key, value in attrs.items():
            emitted[key], symbolic[key] = self._attr(key, value)
        checked = op.check_attrs(emitted)
        symbolic = op.check_attrs(symbolic)
        n_out = op.num_outputs(symbolic)
        try:
            out = op.infer(InferContext(), *[t.type for t in inputs], **symbolic)
        except OpTypeError:
            raise
        except Exception as exc:  # a shape function that fails on these inputs: report, do not crash
            raise OpTypeError("OP-INFER", f"shape function failed: {type(exc).__name__}: {exc}") from None
        types = [out] if isinstance(out, TensorType) else list(out)
        regs = self.fb.call(op.name, [t.reg for t in inputs], {k: checked[k] for k in emitted}, n_out=n_out)
        regs = regs if isinstance(regs, tuple) else (regs,)
        values = tuple(TensorVal(r, t) for r, t in zip(regs, types))
        return values if n_out != 1 else values[0]

    def _attr(self, key: str, value: Any) -> tuple[Any, Any]:
        """(what is emitted, what the shape function sees) for one attribute value."""
        if isinstance(value, ScalarVal):
            return RegRef(value.reg), value.dim
        if isinstance(value, (tuple, list)):
            pairs = [self._attr(key, v) for v in value]
            return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)
        if isinstance(value, (TensorVal, BoolVal, np.ndarray)):
            raise OpTypeError("ATTR-TYPE", f"attribute {key!r} must be known at compile time, got a tensor",
                              "pass a Python value, a shape (x.shape[i]) or an ms.mutable int")
        return value, value

    def cast(self, t: TensorVal, dtype: str) -> TensorVal:
        if t.dtype == dtype:
            return t
        out = self.call("cast", [t], {"dtype": dtype})
        return TensorVal(out.reg, out.type, t.weak)

    def tensors(self, values: Sequence[Any]) -> tuple[list[TensorVal], bool]:
        """Operands as tensor registers, Python scalars promoted the numpy-2 way; also: were all weak?"""
        strong: list[np.dtype] = []
        samples: list[Any] = []
        for v in values:
            if isinstance(v, TensorVal):
                if v.weak:
                    samples.append(python_sample(v))
                else:
                    strong.append(np.dtype(v.dtype))
            elif isinstance(v, (np.ndarray, np.generic)):
                strong.append(v.dtype)
            elif isinstance(v, (tuple, list)):
                strong.append(np.asarray(v).dtype)
            elif type(v) in (int, float, bool) or isinstance(v, ScalarVal):
                samples.append(python_sample(v))
            elif isinstance(v, BoolVal):
                raise EmitError("E-COMPILE-UNSUPPORTED", "a run-time bool (a comparison of shapes) cannot "
                                "be used as a tensor", "use it in an `if`; compare tensors for a bool tensor")
            else:
                raise EmitError("E-COMPILE-UNSUPPORTED", f"{type(v).__name__} {v!r} cannot be used as a "
                                "tensor", "pass a tensor or a number")
        target = np.result_type(*strong, *samples).name if samples else None
        out: list[TensorVal] = []
        for v in values:
            if isinstance(v, TensorVal):
                out.append(self.cast(v, target) if v.weak else v)
            elif isinstance(v, np.ndarray):
                out.append(self.captured_array(v))
            elif isinstance(v, np.generic):
                out.append(self.const_array(v))
            elif isinstance(v, (tuple, list)):
                out.append(self.const_array(np.asarray(v)))
            elif isinstance(v, ScalarVal):
                full = self.call("full", [], {"shape": (), "fill_value": v, "dtype": target})
                out.append(full)
            else:
                try:
                    arr = np.array(v, dtype=target)
                except (OverflowError, ValueError) as exc:
                    raise EmitError("E-COMPILE-OP", f"{v!r} does not fit the tensor's dtype {target}: {exc}",
                                    "cast the tensor to a wider dtype first (.astype(...))") from None
                out.append(self.const_array(arr))
        return out, not strong


__all__ = ["EmitError", "Emitter", "Snapshot", "State", "python_sample"]
