"""Merging values where control flow joins: after an ``if``, at a loop header, after an inlined call.

Why values are merged by *spec* first: a static value that is the same on every path stays static
(``Same``); anything else becomes a phi whose type is decided before any instruction is emitted, so
static Python values can be materialised to exactly that type in each predecessor block, and loop
headers can be re-typed until the loop-carried types stop changing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..bytecode.module import Instruction, make_instruction
from ..ops.registry import TensorType
from ..shapes import UNKNOWN, Dim, ShapeSpec, prove_equal
from .emitter import EmitError, Emitter, State, python_sample
from .values import BoolVal, ScalarVal, TensorVal, Unbound, describe, is_int, is_static

RET_KEY = " return"  # env keys that are not Python identifiers, so they never clash with user names
VALUE_KEY = " value"


@dataclass(frozen=True, eq=False)
class Same:
    """The value is the same on every path: no phi."""

    value: Any


@dataclass(frozen=True)
class TensorPhi:
    type: TensorType
    weak: bool


@dataclass(frozen=True)
class ScalarPhi:
    dim: Dim


@dataclass(frozen=True)
class TupleSpec:
    items: tuple[Any, ...]
    kind: type


Spec = Same | TensorPhi | ScalarPhi | TupleSpec


def same_value(a: Any, b: Any) -> bool:
    """Is ``b`` the very same value as ``a`` (same register, or equal static value of the same type)?"""
    if a is b:
        return True
    if isinstance(a, TensorVal) and isinstance(b, TensorVal):
        return a.reg == b.reg and a.weak == b.weak
    if isinstance(a, (ScalarVal, BoolVal)) and type(a) is type(b):
        return a.reg == b.reg
    if type(a) is not type(b) or not is_static(a) or isinstance(a, np.ndarray):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except Exception:  # objects whose == is not a plain bool
        return False


def spec_equal(a: Spec, b: Spec) -> bool:
    if isinstance(a, Same) and isinstance(b, Same):
        return same_value(a.value, b.value)
    if isinstance(a, TupleSpec) and isinstance(b, TupleSpec):
        return len(a.items) == len(b.items) and all(spec_equal(x, y) for x, y in zip(a.items, b.items))
    return type(a) is type(b) and not isinstance(a, (Same, TupleSpec)) and a == b


def _join_dims(dims: Sequence[Dim]) -> Dim:
    first = dims[0]
    return first if all(prove_equal(first, d) for d in dims[1:]) else UNKNOWN


def _is_tensorish(v: Any) -> bool:
    return isinstance(v, (TensorVal, np.ndarray, np.generic)) or type(v) is float


def _shape_of(v: Any) -> ShapeSpec:
    if isinstance(v, TensorVal):
        return v.shape
    return ShapeSpec(np.shape(v))


class Merger(Emitter):
    """Spec computation, materialisation in predecessor blocks, and phi emission."""

    def merge_spec(self, values: Sequence[Any], name: str) -> Spec:
        first = values[0]
        if all(same_value(first, v) for v in values[1:]):
            return Same(first)
        if any(isinstance(v, (tuple, list)) for v in values):
            if not all(type(v) is type(first) and len(v) == len(first) for v in values):
                raise self._merge_error(name, values)
            items = tuple(self.merge_spec([v[i] for v in values], f"{name}[{i}]") for i in range(len(first)))
            return TupleSpec(items, type(first))
        if any(isinstance(v, (BoolVal, bool, np.bool_)) for v in values):
            raise EmitError("E-COMPILE-MERGE", f"{_label(name)} is a bool that differs between paths; "
                            "run-time bools cannot be merged",
                            "recompute the condition after the branch instead")
        if any(_is_tensorish(v) for v in values):
            return self._tensor_spec(values, name)
        if all(isinstance(v, ScalarVal) or is_int(v) for v in values):
            dims = [v.dim if isinstance(v, ScalarVal) else Dim.const(int(v)) for v in values]
            return ScalarPhi(_join_dims(dims))
        raise self._merge_error(name, values)

    def _tensor_spec(self, values: Sequence[Any], name: str) -> TensorPhi:
        strong, samples = set(), []
        for v in values:
            if isinstance(v, TensorVal) and not v.weak:
                strong.add(v.dtype)
            elif isinstance(v, (np.ndarray, np.generic)):
                strong.add(v.dtype.name)
            elif isinstance(v, TensorVal) or type(v) in (int, float) or isinstance(v, ScalarVal):
                samples.append(python_sample(v))
            else:
                raise self._merge_error(name, values)
        if len(strong) > 1:
            raise EmitError("E-COMPILE-MERGE", f"{_label(name)} has dtype "
                            f"{' on one path and '.join(sorted(strong))} on another",
                            "cast one side with .astype(...) so both paths agree")
        if strong:
            (dtype,) = strong
            promoted = np.result_type(np.dtype(dtype), *samples).name
            if promoted != dtype:
                raise EmitError("E-COMPILE-MERGE", f"{_label(name)} is a {dtype} tensor on one path and a "
                                f"Python number that needs {promoted} on another",
                                "cast explicitly with .astype(...)")
        else:
            dtype = np.result_type(*samples).name
        shapes = [_shape_of(v) for v in values]
        ranks = sorted({s.rank for s in shapes})
        if len(ranks) > 1:
            which = " on one path and rank ".join(map(str, ranks))
            raise EmitError("E-COMPILE-MERGE", f"{_label(name)} has rank {which} on another",
                            "a merged tensor keeps its rank: give it its final shape before the branch or "
                            "loop (e.g. acc = x[0] * 0.0), or reshape one side")
        shape = ShapeSpec(_join_dims([s[i] for s in shapes]) for i in range(shapes[0].rank))
        return TensorPhi(TensorType(shape, dtype), not strong)

    @staticmethod
    def _merge_error(name: str, values: Sequence[Any]) -> EmitError:
        kinds = ", ".join(dict.fromkeys(describe(v) for v in values))
        return EmitError("E-COMPILE-MERGE", f"{_label(name)} holds incompatible values on different paths "
                         f"({kinds})",
                         "give it values of the same kind (tensor, int, tuple of the same length) on every "
                         "path")

    # -- emission --------------------------------------------------------------------------------
    def materialise(self, value: Any, spec: Spec) -> list[int]:
        """Registers for the phi leaves of ``spec``, emitted in the current (predecessor) block."""
        if isinstance(spec, Same):
            return []
        if isinstance(spec, TupleSpec):
            return [reg for item, s in zip(value, spec.items) for reg in self.materialise(item, s)]
        if isinstance(spec, ScalarPhi):
            return [self.scalar(value).reg]
        dtype = spec.type.dtype
        if isinstance(value, TensorVal):
            return [self.cast(value, dtype).reg]
        if isinstance(value, ScalarVal):
            return [self.call("full", [], {"shape": (), "fill_value": value, "dtype": dtype}).reg]
        if isinstance(value, np.ndarray):
            return [self.captured_array(value).reg]
        return [self.const_array(np.asarray(value, dtype=dtype)).reg]

    def leaves(self, spec: Spec) -> list[TensorPhi | ScalarPhi]:
        if isinstance(spec, Same):
            return []
        if isinstance(spec, TupleSpec):
            return [leaf for s in spec.items for leaf in self.leaves(s)]
        return [spec]

    def build(self, spec: Spec, regs: Iterator[int]) -> Any:
        """The value a spec describes, reading phi registers in leaf order."""
        if isinstance(spec, Same):
            return spec.value
        if isinstance(spec, TupleSpec):
            return spec.kind(self.build(s, regs) for s in spec.items)
        if isinstance(spec, ScalarPhi):
            return ScalarVal(next(regs), spec.dim)
        return TensorVal(next(regs), spec.type, spec.weak)

    def emit_phis(self, leaves: Sequence[TensorPhi | ScalarPhi],
                  incoming: Sequence[Sequence[tuple[int, int]]]) -> list[int]:
        """One phi per leaf at the start of the current block; ``incoming[k]``: leaf k's (block, reg)s."""
        regs = []
        for leaf, pairs in zip(leaves, incoming):
            if isinstance(leaf, ScalarPhi):
                regs.append(self.fb.scalar_phi(pairs))
            else:
                regs.append(self.fb.tensor_phi(pairs))
        return regs

    @staticmethod
    def add_incoming(phi: Instruction, block: int, reg: int) -> None:
        """Add a (block, register) pair to an emitted phi (loop back edges are known only later)."""
        fixed = make_instruction(phi.name, phi["dst"], (*phi["incoming"], (block, reg)), loc=phi.loc)
        phi.args = fixed.args

    def join(self, paths: Sequence[tuple[int, State]], construct: str, line: int) -> None:
        """Continue after paths meet: a join block with phis for every name whose value differs.

        ``construct`` names what forked the paths (for messages), e.g. "the `if`" at ``line``.
        """
        if not paths:
            self.state = None
            return
        if len(paths) == 1:
            block, state = paths[0]
            self.set_block(block)
            self.state = state
            return
        names = list(dict.fromkeys(name for _, state in paths for name in state.env))
        specs: dict[str, Any] = {}
        for name in names:
            values = [state.env.get(name) for _, state in paths]
            unbound = next((v for v in values if isinstance(v, Unbound)), None)
            if unbound is not None or any(name not in state.env for _, state in paths):
                specs[name] = unbound or Unbound(
                    name, f"is not assigned on every path through {construct} at line {line}",
                    "E-COMPILE-MAYBE-UNBOUND", f"assign {name} before {construct} or on every path")
            else:
                specs[name] = self.merge_spec(values, name)
        join = self.new_block()
        merged = {name: spec for name, spec in specs.items() if not isinstance(spec, Unbound)}
        leaves = [leaf for spec in merged.values() for leaf in self.leaves(spec)]
        incoming: list[list[tuple[int, int]]] = [[] for _ in leaves]
        for block, state in paths:
            self.set_block(block)
            self.state = state  # materialise with this path's cache: its registers dominate this block
            regs = [r for name, spec in specs.items() if not isinstance(spec, Unbound)
                    for r in self.materialise(state.env[name], spec)]
            for k, reg in enumerate(regs):
                incoming[k].append((self.block, reg))
            self.fb.jmp(join)
        self.set_block(join)
        phi_regs = iter(self.emit_phis(leaves, incoming))
        env = {name: self.build(merged[name], phi_regs) if name in merged else spec
               for name, spec in specs.items()}
        first = paths[0][1].scalars
        dims = {k: v for k, v in first.items() if all(state.scalars.get(k) is v for _, state in paths[1:])}
        self.state = State(env, dims)


def _label(name: str) -> str:
    if name.startswith(RET_KEY):
        return "the returned value" + name[len(RET_KEY):]
    if name.startswith(VALUE_KEY):
        return "the value of the conditional expression" + name[len(VALUE_KEY):]
    return f"variable {name!r}"


__all__ = [
    "RET_KEY",
    "VALUE_KEY",
    "Merger",
    "Same",
    "ScalarPhi",
    "Spec",
    "TensorPhi",
    "TupleSpec",
    "same_value",
    "spec_equal",
]
