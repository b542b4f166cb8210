"""Python AST -> MS-BC for one version of a jitted function (one signature of its arguments).

Why a version is described by parameter kinds: what a parameter *is* decides the bytecode — a tensor
(TENSOR_CREATE with its symbolic shape and dtype), a symbolic scalar (SCALAR_ARG), or a static value
folded into the code. The pieces live in layers: ``emitter`` (typed emission), ``merging`` (phis),
``expressions``, ``indexing``, ``calls`` and ``statements``; this module declares the inputs and
drives the body.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..bytecode.module import Module
from ..ops.registry import TensorType
from ..shapes import Dim, ShapeSpec
from .emitter import State
from .expressions import Frame
from .parsed import ParsedFunction
from .statements import StatementCompiler
from .values import NOTHING, ScalarVal, TensorVal


@dataclass(frozen=True)
class TensorParam:
    """A tensor input; ``weak`` for a Python float argument (a rank-0 float64 that adopts other dtypes)."""

    dtype: str
    spec: ShapeSpec
    weak: bool = False


@dataclass(frozen=True)
class ScalarParam:
    """An ``ms.mutable`` int: a SCALAR_ARG bound to a symbol named after the parameter."""


@dataclass(frozen=True)
class StaticParam:
    """A value folded into this version (another value compiles another version)."""

    value: Any


ParamKind = TensorParam | ScalarParam | StaticParam


def scalar_symbol(name: str) -> str:
    """The shape symbol an ``ms.mutable`` parameter binds (its name, unless that is reserved)."""
    try:
        Dim.sym(name)
    except ValueError:
        return name + "_"
    return name


class FunctionCompiler(StatementCompiler):
    """Compiles one version: ``FunctionCompiler(jitfn, kinds).compile()`` -> Module."""

    def __init__(self, owner: Any, kinds: Mapping[str, ParamKind]) -> None:
        parsed: ParsedFunction = owner.parsed
        params = [name for name, kind in kinds.items() if not isinstance(kind, StaticParam)]
        super().__init__(owner.__qualname__, parsed.tree.name, params)
        self.parsed = parsed
        self.kinds = dict(kinds)
        self.frame = Frame(parsed, inline=False)
        self.stack = [owner]

    def compile(self) -> Module:
        env: dict[str, Any] = {}
        arg = 0
        for name, kind in self.kinds.items():
            self.fb.loc = self.parsed.src.loc(self.parsed.param_node(name))
            if isinstance(kind, TensorParam):
                reg = self.fb.tensor_input(arg, kind.spec, kind.dtype)
                env[name] = TensorVal(reg, TensorType(kind.spec, kind.dtype), kind.weak)
                arg += 1
            elif isinstance(kind, ScalarParam):
                symbol = scalar_symbol(name)
                env[name] = ScalarVal(self.fb.scalar_arg(arg, symbol), Dim.sym(symbol))
                arg += 1
            else:
                env[name] = kind.value
        self.entry_end = len(self.fb.function.blocks[0].instructions)
        self.state = State(env)
        body = self.parsed.tree.body
        self.run_body(body)
        if self.state is not None:  # falling off the end returns None
            last = body[-1]
            self.fb.loc = self.parsed.src.loc(last)
            if self.frame.returns_structure not in (None, NOTHING):
                raise self.error("E-COMPILE-RETURN", last, f"{self.parsed.tree.name} can reach its end "
                                 "without returning a value, but other paths return one",
                                 "add a return at the end (every path must return the same number of values)")
            self.emit_return(None, last)
        return self.mb.build()


__all__ = ["FunctionCompiler", "ParamKind", "ScalarParam", "StaticParam", "TensorParam", "scalar_symbol"]
