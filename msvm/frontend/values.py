"""The compile-time value kinds: what a Python name holds while the frontend compiles a function.

Why so few register kinds: everything static (ints, floats, bools, None, strings, dtypes, tuples of
them, captured numpy arrays, modules, ops) stays a plain Python object and folds at compile time;
only tensors, symbolic scalars and run-time bools live in registers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ops.registry import TensorType
from ..shapes import Dim, ShapeSpec


@dataclass(frozen=True, eq=False)
class TensorVal:
    """A tensor register with what the op shape functions know about it.

    ``weak`` marks a Python float (a float parameter, or arithmetic on Python scalars): like numpy 2's
    Python scalars it takes the dtype of the tensor it meets.
    """

    reg: int
    type: TensorType
    weak: bool = False

    @property
    def shape(self) -> ShapeSpec:
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype

    @property
    def rank(self) -> int:
        return self.type.shape.rank


@dataclass(frozen=True, eq=False)
class ScalarVal:
    """An int64 shape scalar register and the symbolic value it holds (``?`` when unknown)."""

    reg: int
    dim: Dim


@dataclass(frozen=True, eq=False)
class BoolVal:
    """A boolean register (CMP result): usable in conditions only."""

    reg: int


@dataclass(frozen=True)
class Unbound:
    """A name that is not assigned on every path reaching here (``why`` says where it was assigned)."""

    name: str
    why: str
    code: str
    hint: str


@dataclass(frozen=True)
class NegIndex:
    """``-s`` for a symbolic ``s`` inside an index: counts from the end of the indexed axis."""

    value: ScalarVal


# The shape of a returned value: bytecode returns a flat list of registers, the caller gets the
# Python structure back. A structure is NOTHING (None), VALUE (one register), or (tuple|list, children).
NOTHING = "nothing"
VALUE = "value"


def structure(value: Any) -> Any:
    if value is None:
        return NOTHING
    if isinstance(value, (tuple, list)):
        return (type(value), tuple(VALUE if v is None else structure(v) for v in value))
    return VALUE


def leaves(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (tuple, list)):
        return [leaf for v in value for leaf in leaves(v)]
    return [value]


def describe_structure(shape: Any) -> str:
    if shape == NOTHING:
        return "no value"
    if shape == VALUE:
        return "one value"
    kind, children = shape
    return f"a {kind.__name__} of {len(children)}" + (
        "" if all(c == VALUE for c in children) else f" ({', '.join(map(describe_structure, children))})")


def rebuild(shape: Any, flat: Any) -> Any:
    """The returned Python value from the interpreter's result (None, one value, or a tuple of values)."""
    if shape == NOTHING:
        return None
    if shape == VALUE:
        return flat
    values = iter(flat if isinstance(flat, tuple) else (flat,))

    def build(s: Any) -> Any:
        if s == VALUE:
            return next(values)
        kind, children = s
        return kind(build(c) for c in children)

    return build(shape)


def is_static(value: Any) -> bool:
    """True when ``value`` holds no register anywhere (it can be folded at compile time)."""
    if isinstance(value, (TensorVal, ScalarVal, BoolVal, Unbound, NegIndex)):
        return False
    if isinstance(value, (tuple, list)):
        return all(is_static(v) for v in value)
    if isinstance(value, slice):
        return is_static((value.start, value.stop, value.step))
    return True


def is_int(value: Any) -> bool:
    """A static Python/numpy integer (bools excluded)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def describe(value: Any) -> str:
    """A short human description for messages."""
    if isinstance(value, TensorVal):
        return f"a {'weak ' if value.weak else ''}tensor {value.type}"
    if isinstance(value, ScalarVal):
        return f"a symbolic int ({value.dim})"
    if isinstance(value, BoolVal):
        return "a run-time bool"
    if isinstance(value, np.ndarray):
        return f"a numpy array {value.dtype}{list(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return f"{type(value).__name__} {value!r}"


__all__ = [
    "NOTHING",
    "VALUE",
    "BoolVal",
    "NegIndex",
    "ScalarVal",
    "TensorVal",
    "Unbound",
    "describe",
    "describe_structure",
    "is_int",
    "is_static",
    "leaves",
    "rebuild",
    "structure",
]
