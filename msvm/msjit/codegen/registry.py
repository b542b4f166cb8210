"""Which ops the code generator lowers, how, and which calls it refuses (with the reason).

Lowering is a dict, tinygrad-style: ``@lowers("add", "mul")`` registers a function
``fn(ctx, op, inputs, attrs, out_types) -> Expr | list[Expr]`` that builds expressions (and kernels,
through ``ctx``) for one OP_CALL. ``@refuses("pow")`` registers a predicate that returns a reason
string for calls the lowering cannot handle. The emitter modules register themselves on import.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ...ops.registry import OpDef, TensorType

if TYPE_CHECKING:
    from .nodes import Expr
    from .plan import Planner

Lowering = Callable[["Planner", OpDef, list["Expr"], dict[str, Any], list[TensorType]], "Expr | list[Expr]"]
Refusal = Callable[[dict[str, Any], Sequence[TensorType]], "str | None"]

LOWERINGS: dict[str, Lowering] = {}
REFUSALS: dict[str, Refusal] = {}


def lowers(*names: str) -> Callable[[Lowering], Lowering]:
    def register(fn: Lowering) -> Lowering:
        for name in names:
            LOWERINGS[name] = fn
        return fn

    return register


def refuses(*names: str) -> Callable[[Refusal], Refusal]:
    def register(fn: Refusal) -> Refusal:
        for name in names:
            REFUSALS[name] = fn
        return fn

    return register
