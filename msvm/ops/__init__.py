"""Tensor ops: ``ms.ops.relu(x)`` runs an op eagerly on numpy arrays; ``ms.ops.relu`` is its OpDef.

Importing this package registers every core op (the definition modules register on import); the
names of ops are resolved through the registry, so ops registered later (nn ops, plug-ins) appear
here too.
"""

from __future__ import annotations

from . import (  # noqa: F401  (importing them registers the core ops)
    creation,
    datadep,
    elementwise,
    layout,
    linalg,
    localnorm,
    reduction,
    scan,
    select,
    special,
)
from .nn import NN_MODULES  # noqa: F401  (importing it registers the nn ops: conv2d, pooling, ...)
from .registry import REGISTRY, Attr, InferContext, OpDef, OpTypeError, TensorType, get_op, register

__all__ = ["REGISTRY", "Attr", "InferContext", "OpDef", "OpTypeError", "TensorType", "get_op", "register"]


def __getattr__(name: str) -> OpDef:
    try:
        return REGISTRY[name]
    except KeyError:
        raise AttributeError(f"module 'msvm.ops' has no op or attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(REGISTRY))
