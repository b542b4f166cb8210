"""What users write for the frontend: ``ms.Tensor[...]``, ``ms.mutable(n)`` and ``ms.symbolic_mul``.

Why these are small plain objects: they must cost nothing when the function runs eagerly on numpy
(``fn.py_func``), and the frontend reads them at decoration time to decide what is a symbol, what is
a constant and what is specialised.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..bytecode.opcodes import DTYPES
from ..shapes import UNKNOWN, Dim, ShapeSpec, ShapeSyntaxError, parse_dim


@dataclass(frozen=True)
class TensorAnnotation:
    """``ms.Tensor["N", 3, "H", "W"]``: a symbolic shape spec and, optionally, a pinned dtype."""

    spec: ShapeSpec
    dtype: str | None = None

    def __repr__(self) -> str:
        items = [str(d) if d.is_const else repr(str(d)) for d in self.spec]
        if self.dtype is not None:
            items.append(repr(self.dtype))
        return f"Tensor[{', '.join(items) or '()'}]"


def _dtype_item(item: Any) -> str | None:
    """The dtype name an annotation item spells, or None when it is not a dtype."""
    if isinstance(item, str):
        return item if item in DTYPES else None
    if isinstance(item, np.dtype) or (isinstance(item, type) and issubclass(item, np.generic)):
        name = np.dtype(item).name
        if name not in DTYPES:
            raise TypeError(f"ms.Tensor: dtype {name} is not supported (use one of {', '.join(DTYPES)})")
        return name
    return None


def _dim_item(item: Any) -> Dim:
    if isinstance(item, bool):
        raise TypeError(f"ms.Tensor: {item!r} is not a dimension (use an int, a symbol name or '?')")
    if isinstance(item, (int, np.integer)):
        if item < 0:
            raise ValueError(f"ms.Tensor: dimension {item} is negative")
        return Dim.const(int(item))
    if isinstance(item, str):
        if item == "?":
            return UNKNOWN
        try:
            return parse_dim(item)
        except ShapeSyntaxError as exc:
            raise ValueError(f"ms.Tensor: {item!r} is not a dimension: {exc.reason}") from None
    raise TypeError(f"ms.Tensor: {item!r} is not a dimension (use an int, a symbol name, '?' or a dtype)")


class Tensor:
    """Annotation factory: ``ms.Tensor["N", 3, "H", "W"]``, ``ms.Tensor["N", 4, "float64"]``, ``Tensor[()]``.

    An int is a static size, a name is a symbol shared by every parameter that uses it, ``"?"`` is
    dynamic, and at most one item may be a dtype name (float16, float32, float64, int32, int64, bool)
    that pins the parameter's dtype.
    """

    def __init__(self) -> None:
        raise TypeError("ms.Tensor is an annotation: write ms.Tensor['N', 3] in a signature")

    def __class_getitem__(cls, items: Any) -> TensorAnnotation:
        if not isinstance(items, tuple):
            items = (items,)
        dims: list[Dim] = []
        dtype: str | None = None
        for item in items:
            name = _dtype_item(item)
            if name is None:
                dims.append(_dim_item(item))
            elif dtype is not None:
                raise TypeError(f"ms.Tensor: two dtypes given ({dtype} and {name})")
            else:
                dtype = name
        return TensorAnnotation(ShapeSpec(dims), dtype)


class Mutable(int):
    """An int argument that stays symbolic (a SCALAR_ARG) instead of being folded into the bytecode.

    It is an ``int`` so that the plain Python function (``fn.py_func``) runs unchanged on it.
    """

    def __repr__(self) -> str:
        return f"mutable({int(self)})"


def mutable(value: int) -> Mutable:
    """Pass ``ms.mutable(224)`` to make an int argument symbolic: another value reuses the same version."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"ms.mutable takes an int, got {value!r}")
    try:
        return Mutable(operator.index(value))
    except TypeError:
        raise TypeError(f"ms.mutable takes an int, got {type(value).__name__} {value!r}") from None


def symbolic_mul(a: Any, b: Any) -> Any:
    """``a * b`` that keeps its symbolic binding inside ``@ms.jit`` (a SCALAR_OP mul); plain ``*`` outside."""
    return a * b


__all__ = ["Mutable", "Tensor", "TensorAnnotation", "mutable", "symbolic_mul"]
